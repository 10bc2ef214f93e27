//! The codec, topic names, error kinds and the HLC for JavaScript: requests, responses and
//! notifications as plain objects shaped like the shared wire vectors.

use std::num::NonZeroU64;

use bytes::Bytes;
use js_sys::{Array, Object, Uint8Array};
use mqstore_core::client::ClientError;
use mqstore_core::codec::{
    Bulk, Condition, Notification, Request, Response, SetRequest, decode_notification,
    decode_request, decode_response,
};
use mqstore_core::hlc::Hlc as CoreHlc;
use mqstore_core::topics;
use wasm_bindgen::prelude::*;

use crate::{
    bytes_of, bytes_to_js, client_error, get, invalid, key_of, optional_bytes, optional_u64,
    service_error, set, word,
};

fn condition_of(value: &JsValue) -> Result<Condition, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(Condition::Always);
    }
    match value.as_string().map(|s| s.to_ascii_uppercase()).as_deref() {
        Some("NX") => Ok(Condition::NotExists),
        Some("NEX") => Ok(Condition::NotExistsOrEqual),
        _ => Err(invalid("condition is \"NX\", \"NEX\" or undefined")),
    }
}

/// The request an object describes: `{op: "SET", key, value, condition?: "NX" | "NEX", pxMs?}`,
/// `{op: "GET" | "DEL", key}`, `{op: "VDEL", key, value}`, `{op: "KEYNOTIFY", key, stop?}`,
/// `{op: "SCAN", pattern, token?}`.
pub(crate) fn request_of(command: &JsValue) -> Result<Request, JsValue> {
    if !command.is_object() {
        return Err(invalid("the request must be an object with an op"));
    }
    let op = get(command, "op")
        .as_string()
        .ok_or_else(|| invalid("the request needs op (\"SET\", \"GET\", ...)"))?;
    Ok(match op.to_ascii_uppercase().as_str() {
        "SET" => Request::Set(SetRequest {
            key: key_of(&get(command, "key"), "key")?,
            value: Bulk::new(bytes_of(&get(command, "value"), "value")?),
            condition: condition_of(&get(command, "condition"))?,
            expires_in_ms: optional_u64(&get(command, "pxMs"), "pxMs")?.and_then(NonZeroU64::new),
        }),
        "GET" => Request::Get {
            key: key_of(&get(command, "key"), "key")?,
        },
        "DEL" => Request::Del {
            key: key_of(&get(command, "key"), "key")?,
        },
        "VDEL" => Request::VDel {
            key: key_of(&get(command, "key"), "key")?,
            value: bytes_of(&get(command, "value"), "value")?,
        },
        "KEYNOTIFY" => Request::KeyNotify {
            key: key_of(&get(command, "key"), "key")?,
            stop: get(command, "stop").as_bool().unwrap_or(false),
        },
        "SCAN" => Request::Scan {
            pattern: bytes_of(&get(command, "pattern"), "pattern")?,
            token: optional_bytes(&get(command, "token"), "token")?,
        },
        other => {
            return Err(invalid(format!(
                "unknown op {other:?}: SET, GET, DEL, VDEL, KEYNOTIFY or SCAN"
            )));
        }
    })
}

pub(crate) fn request_to_js(request: &Request) -> Object {
    let out = Object::new();
    set(&out, "op", request.command().as_str());
    match request {
        Request::Set(s) => {
            set(&out, "key", bytes_to_js(&s.key));
            set(&out, "value", bytes_to_js(&s.value.value()));
            match s.condition {
                Condition::Always => {}
                Condition::NotExists => set(&out, "condition", "NX"),
                Condition::NotExistsOrEqual => set(&out, "condition", "NEX"),
            }
            if let Some(px) = s.expires_in_ms {
                set(&out, "pxMs", px.get() as f64);
            }
        }
        Request::Get { key } | Request::Del { key } => set(&out, "key", bytes_to_js(key)),
        Request::VDel { key, value } => {
            set(&out, "key", bytes_to_js(key));
            set(&out, "value", bytes_to_js(value));
        }
        Request::KeyNotify { key, stop } => {
            set(&out, "key", bytes_to_js(key));
            if *stop {
                set(&out, "stop", true);
            }
        }
        Request::Scan { pattern, token } => {
            set(&out, "pattern", bytes_to_js(pattern));
            if let Some(token) = token {
                set(&out, "token", bytes_to_js(token));
            }
        }
    }
    out
}

pub(crate) fn response_to_js(response: &Response) -> Object {
    let out = Object::new();
    match response {
        Response::Ok => set(&out, "kind", word("ok")),
        Response::NotApplied => set(&out, "kind", word("not_applied")),
        Response::Deleted(n) => {
            set(&out, "kind", word("deleted"));
            set(&out, "count", *n as f64);
        }
        Response::Value(value) => {
            set(&out, "kind", word("value"));
            set(&out, "value", bytes_to_js(&value.value()));
        }
        Response::Absent => set(&out, "kind", word("absent")),
        Response::Keys { keys, token } => {
            set(&out, "kind", word("keys"));
            let list = Array::new();
            for key in keys {
                list.push(&bytes_to_js(key));
            }
            set(&out, "keys", list);
            if let Some(token) = token {
                set(&out, "token", bytes_to_js(token));
            }
        }
        Response::Error(e) => {
            set(&out, "kind", "error");
            set(&out, "text", e.text());
            set(&out, "code", e.code());
        }
    }
    out
}

/// Encodes a request (an object like `{op: "SET", key, value}`) to its RESP3 bytes.
#[wasm_bindgen(js_name = encodeRequest)]
pub fn encode_request(request: JsValue) -> Result<Uint8Array, JsValue> {
    Ok(bytes_to_js(&request_of(&request)?.to_bytes()))
}

/// Decodes a request as the state store would; a malformed one throws the state store's error
/// (`code` 101–199, `text` "syntax error", ...).
#[wasm_bindgen(js_name = decodeRequest)]
pub fn decode_request_js(bytes: &[u8]) -> Result<Object, JsValue> {
    let request = decode_request(&Bytes::copy_from_slice(bytes)).map_err(service_error)?;
    Ok(request_to_js(&request))
}

/// Decodes a response: `{kind: "ok" | "not_applied" | "deleted" | "value" | "absent" | "keys" |
/// "error", ...}`. Malformed bytes throw (`code` 204).
#[wasm_bindgen(js_name = decodeResponse)]
pub fn decode_response_js(bytes: &[u8]) -> Result<Object, JsValue> {
    let response = decode_response(&Bytes::copy_from_slice(bytes))
        .map_err(|e| client_error(ClientError::from(e)))?;
    Ok(response_to_js(&response))
}

/// What `decodeResponseLayout` found, its first word.
mod layout {
    pub const OK: u32 = 0;
    pub const NOT_APPLIED: u32 = 1;
    pub const DELETED: u32 = 2;
    pub const VALUE: u32 = 3;
    pub const ABSENT: u32 = 4;
    pub const KEYS: u32 = 5;
    /// An error answer: `decodeResponse` gives its text and code.
    pub const ERROR: u32 = 6;
}

/// Decodes a response to where its parts lie in `bytes`, for the TypeScript layer to view
/// without copying: `[OK]`, `[NOT_APPLIED]`, `[ABSENT]`, `[ERROR]`, `[DELETED, count]`,
/// `[VALUE, start, end]`, `[KEYS, n, start₁, end₁, …, startₙ, endₙ (, token start, token
/// end)]`. One call and one small array instead of an object built property by property
/// across the boundary. Malformed bytes throw (`code` 204).
#[wasm_bindgen(js_name = decodeResponseLayout)]
pub fn decode_response_layout(bytes: Vec<u8>) -> Result<Vec<u32>, JsValue> {
    let payload = Bytes::from(bytes);
    let response = decode_response(&payload).map_err(|e| client_error(ClientError::from(e)))?;
    // The decoder slices the payload: every part lies inside it.
    let base = payload.as_ptr() as usize;
    let span = |part: &[u8]| {
        let start = (part.as_ptr() as usize).wrapping_sub(base);
        debug_assert!(start + part.len() <= payload.len());
        [start as u32, (start + part.len()) as u32]
    };
    Ok(match &response {
        Response::Ok => vec![layout::OK],
        Response::NotApplied => vec![layout::NOT_APPLIED],
        Response::Absent => vec![layout::ABSENT],
        Response::Error(_) => vec![layout::ERROR],
        Response::Deleted(n) => vec![layout::DELETED, (*n).min(u64::from(u32::MAX)) as u32],
        Response::Value(value) => {
            let [start, end] = span(&value.value());
            vec![layout::VALUE, start, end]
        }
        Response::Keys { keys, token } => {
            let mut out = Vec::with_capacity(4 + 2 * keys.len());
            out.extend([layout::KEYS, keys.len() as u32]);
            keys.iter().for_each(|key| out.extend(span(key)));
            if let Some(token) = token {
                out.extend(span(token));
            }
            out
        }
    })
}

/// Decodes a change notification: `{op: "SET", value}` or `{op: "DELETE"}`.
#[wasm_bindgen(js_name = decodeNotification)]
pub fn decode_notification_js(bytes: &[u8]) -> Result<Object, JsValue> {
    let notification = decode_notification(&Bytes::copy_from_slice(bytes))
        .map_err(|e| client_error(ClientError::from(e)))?;
    let out = Object::new();
    match notification {
        Notification::Set(value) => {
            set(&out, "op", "SET");
            set(&out, "value", bytes_to_js(&value.value()));
        }
        Notification::Delete => set(&out, "op", "DELETE"),
    }
    Ok(out)
}

/// The protocol's notification topic of `clientId` and `key`.
#[wasm_bindgen(js_name = notifyTopic)]
pub fn notify_topic(client_id: &str, key: JsValue) -> Result<String, JsValue> {
    Ok(topics::notify_topic(client_id, &key_of(&key, "key")?))
}

/// The protocol's shared request topic.
/// Every kind of error core defines, in code order: `{code, name}`, where `name` is its error
/// class's name without `Error`.
#[wasm_bindgen(js_name = errorKinds)]
pub fn error_kinds() -> Array {
    mqstore_core::ErrorKind::ALL
        .into_iter()
        .map(|kind| {
            let out = Object::new();
            set(&out, "code", kind.code());
            set(&out, "name", kind.name());
            JsValue::from(out)
        })
        .collect()
}

/// The payload of a client's presence message when it leaves (its Will, and its goodbye).
#[wasm_bindgen(js_name = presenceGone)]
pub fn presence_gone() -> Uint8Array {
    bytes_to_js(topics::PRESENCE_GONE)
}

#[wasm_bindgen(js_name = invokeTopic)]
pub fn invoke_topic() -> String {
    topics::INVOKE.to_owned()
}

/// A hybrid-logical-clock value: a key's version or a fencing token.
#[wasm_bindgen]
#[derive(Clone)]
pub struct Hlc {
    inner: CoreHlc,
}

#[wasm_bindgen]
impl Hlc {
    /// Parses `{wall ms}:{counter}:{node}`; throws (`code` 1) when it is not one.
    pub fn parse(text: &str) -> Result<Hlc, JsValue> {
        CoreHlc::parse(text)
            .map(|inner| Hlc { inner })
            .map_err(|e| invalid(format!("{text:?}: {e}")))
    }

    /// Builds one; the node must not contain `:`.
    #[wasm_bindgen(constructor)]
    pub fn new(wall_ms: f64, counter: u32, node: &str) -> Result<Hlc, JsValue> {
        if !(wall_ms >= 0.0 && wall_ms.fract() == 0.0) {
            return Err(invalid("wallMs must be a whole number ≥ 0"));
        }
        CoreHlc::new(wall_ms as u64, counter, node)
            .map(|inner| Hlc { inner })
            .map_err(|e| invalid(e.to_string()))
    }

    /// Milliseconds since the epoch of the clock that issued it.
    #[wasm_bindgen(getter, js_name = wallMs)]
    pub fn wall_ms(&self) -> f64 {
        self.inner.wall_ms as f64
    }

    /// The logical counter: orders versions of the same millisecond.
    #[wasm_bindgen(getter)]
    pub fn counter(&self) -> u32 {
        self.inner.counter
    }

    /// The node (or client) that issued it.
    #[wasm_bindgen(getter)]
    pub fn node(&self) -> String {
        self.inner.node.to_string()
    }

    /// The padded wire form: `001696374425000:00001:StateStore`.
    #[wasm_bindgen(js_name = toString)]
    pub fn to_string_js(&self) -> String {
        self.inner.to_string()
    }

    /// -1, 0 or 1 as this is older than, the same as, or newer than `other`.
    pub fn compare(&self, other: &Hlc) -> i32 {
        self.inner.cmp(&other.inner) as i32
    }
}

pub(crate) fn version_to_js(version: Option<&CoreHlc>) -> JsValue {
    match version {
        Some(v) => Hlc { inner: v.clone() }.into(),
        None => JsValue::NULL,
    }
}
