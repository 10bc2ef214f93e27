//! Status codes, the calling thread's last error, and [`ffi`], the guard every entry point runs
//! in.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use mqstore_core::client::ClientError;
use mqstore_core::{ErrorKind, ServiceError};

/// What a call returns: 0 on success, else why it failed. 1–99 are this library's own, here
/// (bad arguments and the like: nothing was sent, nothing changed); 101–299 are the kinds of
/// error every mqstore binding shares, `mqstore_err` (generated from the core's `ErrorKind`:
/// Python's `MqstoreError.code`, JavaScript's `error.code`). `mqstore_last_error()` says more.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum mqstore_status {
    /// Success.
    MQSTORE_OK = 0,
    /// A NULL, freed or wrong handle, a NULL buffer with a length, an empty key, a string
    /// that is not UTF-8, an option out of range. Nothing was sent.
    MQSTORE_ERR_INVALID_ARGUMENT = 1,
    /// The output buffer is too small; the length it needs was written to the length
    /// out-parameter. Call again with a larger buffer.
    MQSTORE_ERR_BUFFER_TOO_SMALL = 2,
    /// A bug in mqstore (a Rust panic, caught at the boundary). Please report it with the
    /// message from `mqstore_last_error()`.
    MQSTORE_ERR_INTERNAL = 3,
    /// The events of this client go to a callback (`mqstore_set_event_callback`), so
    /// `mqstore_next_event` has none to give.
    MQSTORE_ERR_CALLBACK_SET = 4,
    /// This library was built without layer 1 (`mqstore_has_client()` is 0).
    MQSTORE_ERR_UNSUPPORTED = 5,
}

/// The library's own statuses stay below the shared kinds' numbers.
const _: () = assert!((mqstore_status::MQSTORE_ERR_UNSUPPORTED as u16) < ErrorKind::ALL[0].code());

/// A failure on its way to C: the status and its message.
#[derive(Debug)]
pub(crate) struct Error {
    pub code: c_int,
    pub message: String,
}

impl Error {
    pub fn new(status: mqstore_status, message: impl Into<String>) -> Self {
        Self {
            code: status as c_int,
            message: message.into(),
        }
    }

    /// A failure of one of the kinds every binding shares (`mqstore_err`).
    pub fn of_kind(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            code: c_int::from(kind.code()),
            message: message.into(),
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(mqstore_status::MQSTORE_ERR_INVALID_ARGUMENT, message)
    }

    /// The output buffer holds `have` bytes and `need` are needed.
    pub fn too_small(what: &str, need: usize, have: usize) -> Self {
        Self::new(
            mqstore_status::MQSTORE_ERR_BUFFER_TOO_SMALL,
            format!(
                "the buffer for {what} holds {have} bytes and {need} are needed; the needed length was written to the length argument"
            ),
        )
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        Self::of_kind(e.kind(), e.to_string())
    }
}

impl From<ServiceError> for Error {
    fn from(e: ServiceError) -> Self {
        Self::of_kind(e.kind(), e.to_string())
    }
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

thread_local! {
    /// The last failure on this thread: its status and its message, NUL-terminated.
    static LAST_ERROR: RefCell<(c_int, CString)> = RefCell::new((0, CString::default()));
}

fn set_last_error(code: c_int, message: &str) {
    // A message never holds a NUL of its own, but a key quoted in it might.
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    LAST_ERROR.with(|last| *last.borrow_mut() = (code, text));
}

/// Runs one entry point: the status of `body`, its failure (or a panic) left in the last
/// error. Success leaves the last error as it was, as `errno` does.
pub(crate) fn ffi(body: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            set_last_error(e.code, &e.message);
            e.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            let code = mqstore_status::MQSTORE_ERR_INTERNAL as c_int;
            set_last_error(code, &format!("internal error in mqstore (a bug): {what}"));
            code
        }
    }
}

/// Like [`ffi`], for entry points that return nothing (the frees): a failure (a handle freed
/// twice) or a panic is recorded in the last error, never unwound into C.
pub(crate) fn ffi_void(body: impl FnOnce() -> Result<()>) {
    ffi(body);
}

/// The message of the last call on this thread that failed, NUL-terminated; "" when none has.
/// Owned by the library and valid until the next failing call on this thread: copy it to keep
/// it. Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_last_error() -> *const c_char {
    LAST_ERROR.with(|last| last.borrow().1.as_ptr())
}

/// The status of the last call on this thread that failed (an MQSTORE_ERR_ code; 0 when none
/// has). It never fails itself.
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_last_error_code() -> c_int {
    LAST_ERROR.with(|last| last.borrow().0)
}

/// A short static name for a status ("MQSTORE_ERR_REQUEST_TIMEOUT": its name in this header),
/// or "unknown status". Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_status_name(status: c_int) -> *const c_char {
    use mqstore_status::*;
    static NAMES: OnceLock<Vec<(c_int, CString)>> = OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let own = [
            (MQSTORE_OK, "MQSTORE_OK"),
            (MQSTORE_ERR_INVALID_ARGUMENT, "MQSTORE_ERR_INVALID_ARGUMENT"),
            (MQSTORE_ERR_BUFFER_TOO_SMALL, "MQSTORE_ERR_BUFFER_TOO_SMALL"),
            (MQSTORE_ERR_INTERNAL, "MQSTORE_ERR_INTERNAL"),
            (MQSTORE_ERR_CALLBACK_SET, "MQSTORE_ERR_CALLBACK_SET"),
            (MQSTORE_ERR_UNSUPPORTED, "MQSTORE_ERR_UNSUPPORTED"),
        ]
        .map(|(status, name)| (status as c_int, name.to_owned()));
        // The shared kinds as cbindgen names them: MQSTORE_ERR_ and the name in capitals,
        // words split at each capital (`RequestTimeout` → MQSTORE_ERR_REQUEST_TIMEOUT).
        let kinds = ErrorKind::ALL.map(|kind| {
            let mut name = String::from("MQSTORE_ERR");
            for c in kind.name().chars() {
                if c.is_ascii_uppercase() {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            (c_int::from(kind.code()), name)
        });
        own.into_iter()
            .chain(kinds)
            .map(|(status, name)| (status, CString::new(name).unwrap_or_default()))
            .collect()
    });
    names
        .iter()
        .find(|(s, _)| *s == status)
        .map_or(c"unknown status".as_ptr(), |(_, name)| name.as_ptr())
}
