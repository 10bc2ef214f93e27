//! The state store's wire format in C (the core's codec): requests to bytes and back,
//! responses and notifications from bytes, and the topic names.

use std::ffi::{CString, c_char, c_int};
use std::num::NonZeroU64;
use std::sync::LazyLock;

use bytes::Bytes;
use mqstore_core::codec::{
    Bulk, Condition, Notification, Request, Response, SetRequest, decode_notification,
    decode_request, decode_response,
};
use mqstore_core::topics;

use crate::error::{Error, Result, ffi, ffi_void};
use crate::handles::{new_handle, take_handle};
use crate::types::{
    bytes_arg, copy_out, copy_str_out, key_arg, mqstore_bytes, mqstore_op, out_arg, str_arg,
};

/// A state store request, for `mqstore_encode_request` (borrowed: the library copies nothing
/// it keeps) and from `mqstore_decode_request` (owned by the library).
#[repr(C)]
pub struct mqstore_request {
    /// A `mqstore_op` (SET, GET, DEL, VDEL, KEYNOTIFY, SCAN).
    pub op: c_int,
    /// The key; SCAN: the pattern (`*` and `?` wildcards).
    pub key: *const u8,
    /// The key's length in bytes.
    pub key_len: usize,
    /// SET: the value; VDEL: the value the key must hold.
    pub value: *const u8,
    /// The value's length in bytes.
    pub value_len: usize,
    /// SET: a `mqstore_condition`.
    pub condition: c_int,
    /// SET: expire after this many milliseconds (PX); 0: never.
    pub px_ms: u64,
    /// KEYNOTIFY: stop notifying instead of starting.
    pub stop: bool,
    /// SCAN: the token of the page to read (from the previous page), NULL for the first.
    pub scan_token: *const u8,
    /// The token's length in bytes.
    pub scan_token_len: usize,
}

/// Reads a request struct into the core's request.
pub(crate) unsafe fn request_arg(request: *const mqstore_request) -> Result<Request> {
    // SAFETY: the caller passes NULL or a valid struct.
    let r = unsafe { request.as_ref() }.ok_or_else(|| Error::invalid("request is NULL"))?;
    // SAFETY: the struct's pointers and lengths, as the caller filled them.
    let key = || unsafe { key_arg(r.key, r.key_len, "request.key") };
    let value =
        || unsafe { bytes_arg(r.value, r.value_len, "request.value") }.map(Bytes::copy_from_slice);
    Ok(match r.op {
        1 => Request::Set(SetRequest {
            key: key()?,
            value: Bulk::new(value()?),
            condition: match r.condition {
                0 => Condition::Always,
                1 => Condition::NotExists,
                2 => Condition::NotExistsOrEqual,
                other => {
                    return Err(Error::invalid(format!(
                        "request.condition is MQSTORE_SET_ALWAYS, MQSTORE_SET_NX or MQSTORE_SET_NEX, not {other}"
                    )));
                }
            },
            expires_in_ms: NonZeroU64::new(r.px_ms),
        }),
        2 => Request::Get { key: key()? },
        3 => Request::Del { key: key()? },
        4 => Request::VDel {
            key: key()?,
            value: value()?,
        },
        5 => Request::KeyNotify {
            key: key()?,
            stop: r.stop,
        },
        6 => Request::Scan {
            // SAFETY: as above.
            pattern: Bytes::copy_from_slice(unsafe {
                bytes_arg(r.key, r.key_len, "request.key (the pattern)")
            }?),
            token: match r.scan_token.is_null() {
                true => None,
                false => Some(Bytes::copy_from_slice(unsafe {
                    bytes_arg(r.scan_token, r.scan_token_len, "request.scan_token")
                }?)),
            },
        },
        other => {
            return Err(Error::invalid(format!(
                "request.op is a mqstore_op from MQSTORE_OP_SET (1) to MQSTORE_OP_SCAN (6), not {other}"
            )));
        }
    })
}

/// Encodes `request` (RESP3, as the state store reads it) into `buf` of `capacity` bytes;
/// `*len` gets the encoded length (the length needed when the status is
/// MQSTORE_ERR_BUFFER_TOO_SMALL; nothing is written then).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_encode_request(
    request: *const mqstore_request,
    buf: *mut u8,
    capacity: usize,
    len: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let request = unsafe { request_arg(request) }?;
        unsafe { copy_out(&request.to_bytes(), buf, capacity, len, "the request") }
    })
}

#[repr(C)]
struct DecodedRequest {
    c: mqstore_request,
    _data: Vec<Bytes>,
}

/// Decodes a request as the state store would (verbs in any case). A malformed request fails
/// with the state store's own status and text (MQSTORE_ERR_REQUEST_SYNTAX "syntax error", ...). On
/// success `*out` is owned by the caller: free it with `mqstore_request_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_decode_request(
    bytes: *const u8,
    len: usize,
    out: *mut *mut mqstore_request,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let input = Bytes::copy_from_slice(unsafe { bytes_arg(bytes, len, "bytes") }?);
        let request = decode_request(&input)?;
        let mut c = mqstore_request {
            op: mqstore_op::from(request.command()) as c_int,
            key: std::ptr::null(),
            key_len: 0,
            value: std::ptr::null(),
            value_len: 0,
            condition: 0,
            px_ms: 0,
            stop: false,
            scan_token: std::ptr::null(),
            scan_token_len: 0,
        };
        let mut data = Vec::new();
        let mut keep = |b: Bytes, ptr: &mut *const u8, len: &mut usize| {
            *ptr = b.as_ptr();
            *len = b.len();
            data.push(b);
        };
        match request {
            Request::Set(set) => {
                keep(set.key, &mut c.key, &mut c.key_len);
                keep(set.value.value(), &mut c.value, &mut c.value_len);
                c.condition = match set.condition {
                    Condition::Always => 0,
                    Condition::NotExists => 1,
                    Condition::NotExistsOrEqual => 2,
                };
                c.px_ms = set.expires_in_ms.map_or(0, NonZeroU64::get);
            }
            Request::Get { key } | Request::Del { key } => keep(key, &mut c.key, &mut c.key_len),
            Request::VDel { key, value } => {
                keep(key, &mut c.key, &mut c.key_len);
                keep(value, &mut c.value, &mut c.value_len);
            }
            Request::KeyNotify { key, stop } => {
                keep(key, &mut c.key, &mut c.key_len);
                c.stop = stop;
            }
            Request::Scan { pattern, token } => {
                keep(pattern, &mut c.key, &mut c.key_len);
                if let Some(token) = token {
                    keep(token, &mut c.scan_token, &mut c.scan_token_len);
                }
            }
        }
        *out = new_handle(DecodedRequest { c, _data: data }).cast();
        Ok(())
    })
}

/// Frees a request from `mqstore_decode_request` (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_request_free(request: *mut mqstore_request) {
    ffi_void(|| {
        // SAFETY: decoded requests are handed out as `DecodedRequest`s.
        unsafe { take_handle(request.cast::<DecodedRequest>(), "request") }.map(drop)
    });
}

/// What kind of answer a response is.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum mqstore_response_kind {
    /// `+OK`: SET applied, KEYNOTIFY registered or stopped.
    MQSTORE_RESPONSE_OK = 0,
    /// `:-1`: SET not applied (NX/NEX), VDEL value did not match.
    MQSTORE_RESPONSE_NOT_APPLIED = 1,
    /// `:N`: keys deleted (`count`).
    MQSTORE_RESPONSE_DELETED = 2,
    /// GET found (`value`).
    MQSTORE_RESPONSE_VALUE = 3,
    /// `$-1`: GET of an absent key.
    MQSTORE_RESPONSE_ABSENT = 4,
    /// A SCAN page (`keys`, `scan_token`).
    MQSTORE_RESPONSE_KEYS = 5,
    /// `-ERR {text}` (`error_status`, `error_text`).
    MQSTORE_RESPONSE_ERROR = 6,
}

/// A decoded response, owned by the library: free it with `mqstore_response_free`. Fields
/// that do not apply to its kind are 0 / NULL.
#[repr(C)]
pub struct mqstore_response {
    /// What the answer is: it says which of the other fields apply.
    pub kind: mqstore_response_kind,
    /// DELETED: how many keys.
    pub count: u64,
    /// A value answer (GET): the bytes, `value_len` of them.
    pub value: *const u8,
    /// The value's length in bytes.
    pub value_len: usize,
    /// ERROR: the `mqstore_status` of the text (MQSTORE_ERR_UNKNOWN_SERVICE for unknown texts).
    pub error_status: c_int,
    /// ERROR: the text after `-ERR `, NUL-terminated.
    pub error_text: *const c_char,
    /// A SCAN answer: this page's keys.
    pub keys: *const mqstore_bytes,
    /// How many keys `keys` holds.
    pub key_count: usize,
    /// KEYS: the next page's token, NULL on the last page.
    pub scan_token: *const u8,
    /// The token's length in bytes.
    pub scan_token_len: usize,
}

#[repr(C)]
struct DecodedResponse {
    c: mqstore_response,
    _data: Vec<Bytes>,
    _keys: Vec<mqstore_bytes>,
    _text: Option<CString>,
}

/// Decodes a response payload. On success `*out` is the caller's: free it with
/// `mqstore_response_free`. Malformed bytes fail with MQSTORE_ERR_MALFORMED_ANSWER.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_decode_response(
    bytes: *const u8,
    len: usize,
    out: *mut *mut mqstore_response,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let input = Bytes::copy_from_slice(unsafe { bytes_arg(bytes, len, "bytes") }?);
        let response = decode_response(&input).map_err(|e| {
            Error::of_kind(
                mqstore_core::ErrorKind::MalformedAnswer,
                format!("not a state store response: {e}"),
            )
        })?;
        let mut decoded = DecodedResponse {
            c: mqstore_response {
                kind: mqstore_response_kind::MQSTORE_RESPONSE_OK,
                count: 0,
                value: std::ptr::null(),
                value_len: 0,
                error_status: 0,
                error_text: std::ptr::null(),
                keys: std::ptr::null(),
                key_count: 0,
                scan_token: std::ptr::null(),
                scan_token_len: 0,
            },
            _data: Vec::new(),
            _keys: Vec::new(),
            _text: None,
        };
        let c = &mut decoded.c;
        match response {
            Response::Ok => {}
            Response::NotApplied => c.kind = mqstore_response_kind::MQSTORE_RESPONSE_NOT_APPLIED,
            Response::Deleted(n) => {
                c.kind = mqstore_response_kind::MQSTORE_RESPONSE_DELETED;
                c.count = n;
            }
            Response::Value(value) => {
                let value = value.value();
                c.kind = mqstore_response_kind::MQSTORE_RESPONSE_VALUE;
                c.value = value.as_ptr();
                c.value_len = value.len();
                decoded._data.push(value);
            }
            Response::Absent => c.kind = mqstore_response_kind::MQSTORE_RESPONSE_ABSENT,
            Response::Keys { keys, token } => {
                c.kind = mqstore_response_kind::MQSTORE_RESPONSE_KEYS;
                decoded._keys = keys.iter().map(|k| mqstore_bytes::of(k)).collect();
                c.keys = decoded._keys.as_ptr();
                c.key_count = decoded._keys.len();
                if let Some(token) = &token {
                    c.scan_token = token.as_ptr();
                    c.scan_token_len = token.len();
                }
                decoded._data.extend(keys);
                decoded._data.extend(token);
            }
            Response::Error(e) => {
                c.kind = mqstore_response_kind::MQSTORE_RESPONSE_ERROR;
                c.error_status = c_int::from(e.code());
                let text = CString::new(e.text().replace('\0', "\\0")).unwrap_or_default();
                c.error_text = text.as_ptr();
                decoded._text = Some(text);
            }
        }
        *out = new_handle(decoded).cast();
        Ok(())
    })
}

/// Frees a response from `mqstore_decode_response` (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_response_free(response: *mut mqstore_response) {
    ffi_void(|| {
        // SAFETY: decoded responses are handed out as `DecodedResponse`s.
        unsafe { take_handle(response.cast::<DecodedResponse>(), "response") }.map(drop)
    });
}

/// A decoded change notification. It points into the bytes it was decoded from: it lives as
/// long as they do, and there is nothing to free.
#[repr(C)]
pub struct mqstore_notification {
    /// The key was deleted (or expired); `value` is NULL.
    pub deleted: bool,
    /// The key's new value (inside the decoded bytes).
    pub value: *const u8,
    /// The value's length in bytes.
    pub value_len: usize,
}

/// Decodes a change notification's payload into `*out`. Malformed bytes fail with
/// MQSTORE_ERR_MALFORMED_ANSWER.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_decode_notification(
    bytes: *const u8,
    len: usize,
    out: *mut mqstore_notification,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        let input = unsafe { bytes_arg(bytes, len, "bytes") }?;
        let copy = Bytes::copy_from_slice(input);
        let notification = decode_notification(&copy).map_err(|e| {
            Error::of_kind(
                mqstore_core::ErrorKind::MalformedAnswer,
                format!("not a state store notification: {e}"),
            )
        })?;
        *out = match notification {
            Notification::Delete => mqstore_notification {
                deleted: true,
                value: std::ptr::null(),
                value_len: 0,
            },
            Notification::Set(value) => {
                // The value is a slice of the copy: the same offset in the caller's bytes.
                let value = value.value();
                let offset = value.as_ptr() as usize - copy.as_ptr() as usize;
                mqstore_notification {
                    deleted: false,
                    value: input[offset..].as_ptr(),
                    value_len: value.len(),
                }
            }
        };
        Ok(())
    })
}

/// The topic the state store takes requests on (the protocol's shared one; mqstore clients use
/// their own identified topic, see `mqstore_core_new`). A static string.
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_invoke_topic() -> *const c_char {
    static INVOKE: LazyLock<CString> =
        LazyLock::new(|| CString::new(topics::INVOKE).unwrap_or_default());
    INVOKE.as_ptr()
}

/// Writes the protocol's notification topic of `client_id` and `key` and a NUL to `buf` of
/// `capacity` bytes; `*len` gets its length without the NUL (see `mqstore_hlc_format`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT, MQSTORE_ERR_BUFFER_TOO_SMALL (the length needed in the
/// length out-parameter).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_notify_topic(
    client_id: *const c_char,
    key: *const u8,
    key_len: usize,
    buf: *mut c_char,
    capacity: usize,
    len: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client_id = unsafe { str_arg(client_id, "client_id") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let topic = topics::notify_topic(client_id, &key);
        unsafe { copy_str_out(&topic, buf, capacity, len, "the topic") }
    })
}
