//! Hybrid-logical-clock values in C: parse, format, compare (the core's `Hlc`).

use std::ffi::{c_char, c_int};

use mqstore_core::hlc::Hlc;

use crate::error::{Error, ffi};
use crate::types::{copy_str_out, mqstore_hlc, out_arg, str_arg};

/// Parses `{wall_ms}:{counter}:{node}` (any number of digits) into `*out`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (not `wall:counter:node`, or a node id longer than
/// `mqstore_hlc.node` holds).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_hlc_parse(text: *const c_char, out: *mut mqstore_hlc) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers (checked for NULL).
        let text = unsafe { str_arg(text, "text") }?;
        let out = unsafe { out_arg(out, "out") }?;
        let hlc = Hlc::parse(text).map_err(|e| Error::invalid(format!("{text:?}: {e}")))?;
        *out = mqstore_hlc::from_hlc(&hlc).map_err(|e| Error::invalid(e.message))?;
        Ok(())
    })
}

/// Writes the wire form of `hlc` (`001696374425000:00001:StateStore`) and a NUL to `buf` of
/// `capacity` bytes; `*len` gets its length without the NUL (the length needed when the status
/// is MQSTORE_ERR_BUFFER_TOO_SMALL: 21 + the node's length always fits).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_hlc_format(
    hlc: *const mqstore_hlc,
    buf: *mut c_char,
    capacity: usize,
    len: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers (checked for NULL).
        let hlc = unsafe { hlc.as_ref() }.ok_or_else(|| Error::invalid("hlc is NULL"))?;
        let text = hlc.read("hlc")?.to_string();
        unsafe { copy_str_out(&text, buf, capacity, len, "the version") }
    })
}

/// Compares two versions: `*order` is -1, 0 or 1 as `a` is older than, the same as, or newer
/// than `b`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a NULL argument).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_hlc_compare(
    a: *const mqstore_hlc,
    b: *const mqstore_hlc,
    order: *mut c_int,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers (checked for NULL).
        let a = unsafe { a.as_ref() }.ok_or_else(|| Error::invalid("a is NULL"))?;
        let b = unsafe { b.as_ref() }.ok_or_else(|| Error::invalid("b is NULL"))?;
        let order = unsafe { out_arg(order, "order") }?;
        *order = a.read("a")?.cmp(&b.read("b")?) as c_int;
        Ok(())
    })
}
