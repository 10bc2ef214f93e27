//! Status codes, the calling thread's last error, and [`ffi`], the guard every entry point runs
//! in.

use std::cell::RefCell;
use std::ffi::{CString, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};

use mqstore_core::client::ClientError;
use mqstore_core::{ErrorKind, ServiceError};

/// What a call returns: 0 on success, else why it failed. 1–99 are this library's own (bad
/// arguments and the like: nothing was sent, nothing changed); 101–199 are the state store's
/// refusals and 201–299 the client's errors, with the same numbers in every mqstore binding
/// (Python's `MqstoreError.code`, JavaScript's `error.code`). `mqstore_last_error()` says more.
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
    /// The state store's `-ERR` answers (spec §3).
    MQSTORE_ERR_TIMESTAMP_SKEW = 101,
    MQSTORE_ERR_FENCING_TOKEN_REQUIRED = 102,
    MQSTORE_ERR_FENCING_TOKEN_SKEW = 103,
    MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION = 104,
    MQSTORE_ERR_QUOTA_EXCEEDED = 105,
    MQSTORE_ERR_SYNTAX = 106,
    MQSTORE_ERR_NOT_AUTHORIZED = 107,
    MQSTORE_ERR_UNKNOWN_COMMAND = 108,
    MQSTORE_ERR_WRONG_NUMBER_OF_ARGUMENTS = 109,
    MQSTORE_ERR_MISSING_TIMESTAMP = 110,
    MQSTORE_ERR_MALFORMED_TIMESTAMP = 111,
    MQSTORE_ERR_KEY_LENGTH_ZERO = 112,
    MQSTORE_ERR_NOTIFICATION_TOPIC_TOO_LONG = 113,
    MQSTORE_ERR_RESPONSE_TOO_LARGE = 114,
    /// An `-ERR` text this version does not know (a newer server).
    MQSTORE_ERR_SERVICE_OTHER = 199,
    /// The answer carried an RPC status other than 200.
    MQSTORE_ERR_STATUS = 201,
    /// No answer within the timeout; a write may still be applied.
    MQSTORE_ERR_TIMEOUT = 202,
    /// The connection dropped with the call in flight; it may or may not have been applied.
    MQSTORE_ERR_DISCONNECTED = 203,
    /// The answer could not be read.
    MQSTORE_ERR_MALFORMED = 204,
    /// The answer does not fit the request.
    MQSTORE_ERR_UNEXPECTED = 205,
    /// The client's clock could not produce a timestamp.
    MQSTORE_ERR_CLOCK = 206,
    /// The broker cannot be reached (nothing listens, no such host, TLS failed).
    MQSTORE_ERR_UNREACHABLE = 207,
    /// The broker refused the connection (bad user name or password, not authorized).
    MQSTORE_ERR_REFUSED = 208,
    /// The broker broke the MQTT 5 protocol.
    MQSTORE_ERR_PROTOCOL = 209,
    /// The request is larger than the broker's maximum packet size: not sent.
    MQSTORE_ERR_TOO_LARGE = 210,
    /// The broker closed the connection (with a DISCONNECT reason code).
    MQSTORE_ERR_BROKER_DISCONNECTED = 211,
    /// The jobs service refused the call.
    MQSTORE_ERR_JOBS = 212,
    /// The device answered the command with an error.
    MQSTORE_ERR_COMMAND_FAILED = 213,
    /// The device refused the command as malformed or unsupported.
    MQSTORE_ERR_COMMAND_REJECTED = 214,
    /// No answer to the command within its timeout.
    MQSTORE_ERR_COMMAND_TIMED_OUT = 215,
    /// The broker refused the request's publish (a PUBACK reason code of 0x80 or more: packet
    /// too large, not authorized, quota exceeded): it was not applied.
    MQSTORE_ERR_PUBLISH_REFUSED = 216,
}

/// The status of each kind of client error. Exhaustive, so a new kind in core does not
/// compile until it has a status here; the numbers are checked against core's below.
pub(crate) const fn status_of(kind: ErrorKind) -> mqstore_status {
    use ErrorKind as K;
    use mqstore_status as S;
    match kind {
        K::TimestampSkew => S::MQSTORE_ERR_TIMESTAMP_SKEW,
        K::FencingTokenRequired => S::MQSTORE_ERR_FENCING_TOKEN_REQUIRED,
        K::FencingTokenSkew => S::MQSTORE_ERR_FENCING_TOKEN_SKEW,
        K::FencingTokenLowerVersion => S::MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION,
        K::QuotaExceeded => S::MQSTORE_ERR_QUOTA_EXCEEDED,
        K::RequestSyntax => S::MQSTORE_ERR_SYNTAX,
        K::NotAuthorized => S::MQSTORE_ERR_NOT_AUTHORIZED,
        K::UnknownCommand => S::MQSTORE_ERR_UNKNOWN_COMMAND,
        K::WrongNumberOfArguments => S::MQSTORE_ERR_WRONG_NUMBER_OF_ARGUMENTS,
        K::MissingTimestamp => S::MQSTORE_ERR_MISSING_TIMESTAMP,
        K::MalformedTimestamp => S::MQSTORE_ERR_MALFORMED_TIMESTAMP,
        K::KeyLengthZero => S::MQSTORE_ERR_KEY_LENGTH_ZERO,
        K::NotificationTopicTooLong => S::MQSTORE_ERR_NOTIFICATION_TOPIC_TOO_LONG,
        K::ResponseTooLarge => S::MQSTORE_ERR_RESPONSE_TOO_LARGE,
        K::UnknownService => S::MQSTORE_ERR_SERVICE_OTHER,
        K::Status => S::MQSTORE_ERR_STATUS,
        K::RequestTimeout => S::MQSTORE_ERR_TIMEOUT,
        K::ConnectionLost => S::MQSTORE_ERR_DISCONNECTED,
        K::MalformedAnswer => S::MQSTORE_ERR_MALFORMED,
        K::UnexpectedAnswer => S::MQSTORE_ERR_UNEXPECTED,
        K::Clock => S::MQSTORE_ERR_CLOCK,
        K::BrokerUnreachable => S::MQSTORE_ERR_UNREACHABLE,
        K::BrokerRefused => S::MQSTORE_ERR_REFUSED,
        K::BrokerProtocol => S::MQSTORE_ERR_PROTOCOL,
        K::RequestTooLarge => S::MQSTORE_ERR_TOO_LARGE,
        K::BrokerDisconnected => S::MQSTORE_ERR_BROKER_DISCONNECTED,
        K::Jobs => S::MQSTORE_ERR_JOBS,
        K::CommandFailed => S::MQSTORE_ERR_COMMAND_FAILED,
        K::CommandRejected => S::MQSTORE_ERR_COMMAND_REJECTED,
        K::CommandTimeout => S::MQSTORE_ERR_COMMAND_TIMED_OUT,
        K::PublishRefused => S::MQSTORE_ERR_PUBLISH_REFUSED,
    }
}

// Every kind's C status has core's number for it (the build fails otherwise).
const _: () = {
    let mut i = 0;
    while i < ErrorKind::ALL.len() {
        let kind = ErrorKind::ALL[i];
        assert!(status_of(kind) as u16 == kind.code());
        i += 1;
    }
};

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
        Self::new(status_of(e.kind()), e.to_string())
    }
}

impl From<ServiceError> for Error {
    fn from(e: ServiceError) -> Self {
        Self::new(status_of(e.kind()), e.to_string())
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

/// The status of the last call on this thread that failed (0 when none has).
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_last_error_code() -> c_int {
    LAST_ERROR.with(|last| last.borrow().0)
}

/// A short static name for a status ("MQSTORE_ERR_TIMEOUT"), or "unknown status". Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_status_name(status: c_int) -> *const c_char {
    use mqstore_status::*;
    let all = [
        (MQSTORE_OK, "MQSTORE_OK\0"),
        (
            MQSTORE_ERR_INVALID_ARGUMENT,
            "MQSTORE_ERR_INVALID_ARGUMENT\0",
        ),
        (
            MQSTORE_ERR_BUFFER_TOO_SMALL,
            "MQSTORE_ERR_BUFFER_TOO_SMALL\0",
        ),
        (MQSTORE_ERR_INTERNAL, "MQSTORE_ERR_INTERNAL\0"),
        (MQSTORE_ERR_CALLBACK_SET, "MQSTORE_ERR_CALLBACK_SET\0"),
        (MQSTORE_ERR_UNSUPPORTED, "MQSTORE_ERR_UNSUPPORTED\0"),
        (MQSTORE_ERR_TIMESTAMP_SKEW, "MQSTORE_ERR_TIMESTAMP_SKEW\0"),
        (
            MQSTORE_ERR_FENCING_TOKEN_REQUIRED,
            "MQSTORE_ERR_FENCING_TOKEN_REQUIRED\0",
        ),
        (
            MQSTORE_ERR_FENCING_TOKEN_SKEW,
            "MQSTORE_ERR_FENCING_TOKEN_SKEW\0",
        ),
        (
            MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION,
            "MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION\0",
        ),
        (MQSTORE_ERR_QUOTA_EXCEEDED, "MQSTORE_ERR_QUOTA_EXCEEDED\0"),
        (MQSTORE_ERR_SYNTAX, "MQSTORE_ERR_SYNTAX\0"),
        (MQSTORE_ERR_NOT_AUTHORIZED, "MQSTORE_ERR_NOT_AUTHORIZED\0"),
        (MQSTORE_ERR_UNKNOWN_COMMAND, "MQSTORE_ERR_UNKNOWN_COMMAND\0"),
        (
            MQSTORE_ERR_WRONG_NUMBER_OF_ARGUMENTS,
            "MQSTORE_ERR_WRONG_NUMBER_OF_ARGUMENTS\0",
        ),
        (
            MQSTORE_ERR_MISSING_TIMESTAMP,
            "MQSTORE_ERR_MISSING_TIMESTAMP\0",
        ),
        (
            MQSTORE_ERR_MALFORMED_TIMESTAMP,
            "MQSTORE_ERR_MALFORMED_TIMESTAMP\0",
        ),
        (MQSTORE_ERR_KEY_LENGTH_ZERO, "MQSTORE_ERR_KEY_LENGTH_ZERO\0"),
        (
            MQSTORE_ERR_NOTIFICATION_TOPIC_TOO_LONG,
            "MQSTORE_ERR_NOTIFICATION_TOPIC_TOO_LONG\0",
        ),
        (
            MQSTORE_ERR_RESPONSE_TOO_LARGE,
            "MQSTORE_ERR_RESPONSE_TOO_LARGE\0",
        ),
        (MQSTORE_ERR_SERVICE_OTHER, "MQSTORE_ERR_SERVICE_OTHER\0"),
        (MQSTORE_ERR_STATUS, "MQSTORE_ERR_STATUS\0"),
        (MQSTORE_ERR_TIMEOUT, "MQSTORE_ERR_TIMEOUT\0"),
        (MQSTORE_ERR_DISCONNECTED, "MQSTORE_ERR_DISCONNECTED\0"),
        (MQSTORE_ERR_MALFORMED, "MQSTORE_ERR_MALFORMED\0"),
        (MQSTORE_ERR_UNEXPECTED, "MQSTORE_ERR_UNEXPECTED\0"),
        (MQSTORE_ERR_CLOCK, "MQSTORE_ERR_CLOCK\0"),
        (MQSTORE_ERR_UNREACHABLE, "MQSTORE_ERR_UNREACHABLE\0"),
        (MQSTORE_ERR_REFUSED, "MQSTORE_ERR_REFUSED\0"),
        (MQSTORE_ERR_PROTOCOL, "MQSTORE_ERR_PROTOCOL\0"),
        (MQSTORE_ERR_TOO_LARGE, "MQSTORE_ERR_TOO_LARGE\0"),
        (
            MQSTORE_ERR_BROKER_DISCONNECTED,
            "MQSTORE_ERR_BROKER_DISCONNECTED\0",
        ),
        (MQSTORE_ERR_JOBS, "MQSTORE_ERR_JOBS\0"),
        (MQSTORE_ERR_COMMAND_FAILED, "MQSTORE_ERR_COMMAND_FAILED\0"),
        (
            MQSTORE_ERR_COMMAND_REJECTED,
            "MQSTORE_ERR_COMMAND_REJECTED\0",
        ),
        (
            MQSTORE_ERR_COMMAND_TIMED_OUT,
            "MQSTORE_ERR_COMMAND_TIMED_OUT\0",
        ),
    ];
    all.iter()
        .find(|(s, _)| *s as c_int == status)
        .map_or("unknown status\0", |(_, name)| name)
        .as_ptr()
        .cast()
}
