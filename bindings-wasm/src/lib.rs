//! The WebAssembly module of mqstore's npm package: the core's codec, HLC and client state
//! machine (`ClientCore`) for JavaScript, with no I/O. The TypeScript layer of the package
//! (`js/`) owns the transport and the clock and drives the state machine, as the tokio client
//! and the C library's layer 2 do.
//!
//! Values cross as `Uint8Array` (or strings, UTF-8); requests, responses and events as plain
//! objects shaped like the shared wire vectors. Errors are JS `Error`s with a numeric `code`
//! (the stable `ClientError::code` numbers; 1 for a bad argument), which the TypeScript layer
//! turns into `MqstoreError` subclasses.

mod services;

use std::num::NonZeroU64;

use bytes::Bytes;
use js_sys::{Array, Object, Reflect, Uint8Array};
use mqstore_core::client::{CallId, CallOptions, ClientConfig, ClientError, Deleted};
use mqstore_core::codec::{
    Bulk, Condition, Notification, Request, Response, SetRequest, decode_notification,
    decode_request, decode_response,
};
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::hlc::Hlc as CoreHlc;
use mqstore_core::lease::LeaseTerms as CoreLeaseTerms;
use mqstore_core::session::{Completion, Session, SessionEvent};
use mqstore_core::{ServiceError, topics};
use wasm_bindgen::prelude::*;

/// The code of a bad argument (as the C library's `MQSTORE_ERR_INVALID_ARGUMENT`).
const INVALID_ARGUMENT: u16 = 1;

/// A JS `Error` with a `code`.
fn error(code: u16, message: impl AsRef<str>) -> JsValue {
    let e = js_sys::Error::new(message.as_ref());
    let _ = Reflect::set(&e, &"code".into(), &JsValue::from(code));
    e.into()
}

fn invalid(message: impl AsRef<str>) -> JsValue {
    error(INVALID_ARGUMENT, message)
}

fn client_error(e: ClientError) -> JsValue {
    let value = error(e.code(), e.to_string());
    let (name, detail) = match &e {
        ClientError::Service(service) => ("text", service.text().to_owned()),
        ClientError::Jobs { code, .. } => ("jobsCode", code.clone()),
        ClientError::CommandFailed { id, .. }
        | ClientError::CommandRejected { id, .. }
        | ClientError::CommandTimedOut { id } => ("commandId", id.clone()),
        ClientError::PublishRefused { code } => {
            let _ = Reflect::set(&value, &"reasonCode".into(), &JsValue::from(*code));
            return value;
        }
        _ => return value,
    };
    let _ = Reflect::set(&value, &name.into(), &detail.into());
    value
}

fn service_error(e: ServiceError) -> JsValue {
    let value = error(e.code(), e.text());
    let _ = Reflect::set(&value, &"text".into(), &e.text().into());
    value
}

/// Sets a property. Names are interned: a JS string made from Rust text goes through a
/// TextDecoder, which costs more than the rest of a small decode.
fn set(object: &Object, name: &str, value: impl Into<JsValue>) {
    let _ = Reflect::set(object, &wasm_bindgen::intern(name).into(), &value.into());
}

/// A short fixed string (a kind, an op) as an interned JS string.
fn word(text: &'static str) -> JsValue {
    wasm_bindgen::intern(text).into()
}

fn get(object: &JsValue, name: &str) -> JsValue {
    Reflect::get(object, &name.into()).unwrap_or(JsValue::UNDEFINED)
}

fn bytes_to_js(bytes: &[u8]) -> Uint8Array {
    Uint8Array::from(bytes)
}

/// A key or value: a `Uint8Array`, or a string (its UTF-8 bytes).
fn bytes_of(value: &JsValue, what: &str) -> Result<Bytes, JsValue> {
    if let Some(text) = value.as_string() {
        return Ok(Bytes::from(text.into_bytes()));
    }
    if let Some(array) = value.dyn_ref::<Uint8Array>() {
        return Ok(Bytes::from(array.to_vec()));
    }
    Err(invalid(format!("{what} must be a Uint8Array or a string")))
}

fn optional_bytes(value: &JsValue, what: &str) -> Result<Option<Bytes>, JsValue> {
    match value.is_undefined() || value.is_null() {
        true => Ok(None),
        false => bytes_of(value, what).map(Some),
    }
}

fn key_of(value: &JsValue, what: &str) -> Result<Bytes, JsValue> {
    let key = bytes_of(value, what)?;
    if key.is_empty() {
        return Err(invalid(format!(
            "{what} is empty: keys are at least one byte"
        )));
    }
    Ok(key)
}

fn optional_u64(value: &JsValue, what: &str) -> Result<Option<u64>, JsValue> {
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    match value.as_f64() {
        Some(n) if n >= 0.0 && n.fract() == 0.0 && n <= 9_007_199_254_740_991.0 => {
            Ok(Some(n as u64))
        }
        _ => Err(invalid(format!("{what} must be a whole number ≥ 0"))),
    }
}

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
fn request_of(command: &JsValue) -> Result<Request, JsValue> {
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

fn request_to_js(request: &Request) -> Object {
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

fn response_to_js(response: &Response) -> Object {
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

    #[wasm_bindgen(getter, js_name = wallMs)]
    pub fn wall_ms(&self) -> f64 {
        self.inner.wall_ms as f64
    }

    #[wasm_bindgen(getter)]
    pub fn counter(&self) -> u32 {
        self.inner.counter
    }

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

fn version_to_js(version: Option<&CoreHlc>) -> JsValue {
    match version {
        Some(v) => Hlc { inner: v.clone() }.into(),
        None => JsValue::NULL,
    }
}

/// A publish as a plain object: `{topic, payload, qos, responseTopic?, correlationData?,
/// contentType?, messageExpiryInterval?, payloadFormatIndicator?, userProperties: [[name,
/// value], ...]}` — what an MQTT 5 client needs to send it, or what it received.
fn publish_to_js(publish: &Publish) -> Object {
    let out = Object::new();
    let p = &publish.properties;
    set(&out, "topic", publish.topic.as_str());
    set(&out, "payload", bytes_to_js(&publish.payload));
    set(&out, "qos", publish.qos);
    if let Some(t) = &p.response_topic {
        set(&out, "responseTopic", t.as_str());
    }
    if let Some(c) = &p.correlation_data {
        set(&out, "correlationData", bytes_to_js(c));
    }
    if let Some(t) = &p.content_type {
        set(&out, "contentType", t.as_str());
    }
    if let Some(e) = p.message_expiry_interval {
        set(&out, "messageExpiryInterval", e);
    }
    if let Some(f) = p.payload_format_indicator {
        set(&out, "payloadFormatIndicator", f);
    }
    let pairs = Array::new();
    for (name, value) in &p.user_properties {
        pairs.push(&Array::of2(&name.as_str().into(), &value.as_str().into()));
    }
    set(&out, "userProperties", pairs);
    out
}

fn publish_of(message: &JsValue) -> Result<Publish, JsValue> {
    let topic = get(message, "topic")
        .as_string()
        .ok_or_else(|| invalid("message.topic must be a string"))?;
    let text = |name: &str| get(message, name).as_string();
    let mut user_properties = Vec::new();
    let pairs = get(message, "userProperties");
    if !pairs.is_undefined() && !pairs.is_null() {
        for pair in Array::from(&pairs).iter() {
            let pair = Array::from(&pair);
            let (Some(name), Some(value)) = (pair.get(0).as_string(), pair.get(1).as_string())
            else {
                return Err(invalid(
                    "message.userProperties is a list of [name, value] strings",
                ));
            };
            user_properties.push((name, value));
        }
    }
    Ok(Publish {
        topic,
        payload: optional_bytes(&get(message, "payload"), "message.payload")?.unwrap_or_default(),
        qos: get(message, "qos").as_f64().unwrap_or(0.0) as u8,
        properties: Properties {
            payload_format_indicator: get(message, "payloadFormatIndicator")
                .as_f64()
                .map(|f| f as u8),
            message_expiry_interval: get(message, "messageExpiryInterval")
                .as_f64()
                .map(|e| e as u32),
            content_type: text("contentType"),
            response_topic: text("responseTopic"),
            correlation_data: optional_bytes(
                &get(message, "correlationData"),
                "message.correlationData",
            )?,
            user_properties,
        },
    })
}

/// The client as a state machine with no I/O: the core's client session (`Session`: the state
/// store, jobs and commands clients behind one call-id space) for JavaScript. Calls give call
/// ids and queue publishes (`takePublishes`); received messages (`handle`) and time (`expire`
/// at `nextDeadline`) give events (`takeEvents`).
#[wasm_bindgen]
pub struct ClientCore {
    session: Session,
}

#[wasm_bindgen]
impl ClientCore {
    /// A state machine for the MQTT client id `clientId` (no `:` in it); `seed` is mixed into
    /// correlation ids (pass random bits); `timeoutMs` is every call's timeout (0: 10 s).
    #[wasm_bindgen(constructor)]
    pub fn new(client_id: &str, seed: f64, timeout_ms: u32) -> Result<ClientCore, JsValue> {
        if client_id.is_empty() {
            return Err(invalid("clientId is empty"));
        }
        let mut config = ClientConfig::new(client_id, seed.to_bits());
        if timeout_ms > 0 {
            config.default_timeout_ms = u64::from(timeout_ms);
        }
        let session =
            Session::new(config).map_err(|e| invalid(format!("clientId {client_id:?}: {e}")))?;
        Ok(ClientCore { session })
    }

    /// Every topic filter to subscribe to (QoS 1), and wait for, before the first call and
    /// after every reconnect (the things of `actAs` and the command events of `watchCommands`
    /// included).
    pub fn subscriptions(&self) -> Array {
        services::strings(self.session.subscriptions())
    }

    /// Acts as `thing` in the jobs device API from now on: the filters to subscribe to (QoS
    /// 1) now, empty when it already does.
    #[wasm_bindgen(js_name = actAs)]
    pub fn act_as(&mut self, thing: &str) -> Result<Array, JsValue> {
        let filters = self.session.act_as(thing).map_err(client_error)?;
        Ok(services::strings(filters))
    }

    /// Stops acting as `thing`: the filters to unsubscribe from (empty when it did not).
    pub fn leave(&mut self, thing: &str) -> Array {
        services::strings(self.session.leave(thing))
    }

    /// Turns every command's status changes into `command-record` events from now on: the
    /// filter to subscribe to (QoS 1) now, or `null` when it already does.
    #[wasm_bindgen(js_name = watchCommands)]
    pub fn watch_commands(&mut self) -> Option<String> {
        self.session.watch_commands().map(str::to_owned)
    }

    /// Stops turning command status changes into events: the filter to unsubscribe from, or
    /// `null` when it did not.
    #[wasm_bindgen(js_name = unwatchCommands)]
    pub fn unwatch_commands(&mut self) -> Option<String> {
        self.session.unwatch_commands().map(str::to_owned)
    }

    /// Starts a jobs operator call: `op` (`createJob`, `cancelJob`, `deleteJobExecution`,
    /// `describeJob`, `describeJobExecution`, `listJobs`, `listJobExecutions`) with its
    /// arguments as an object. Completes with what the call asks for as `result`: the job,
    /// execution or list of a describe or list call, the answer's JSON otherwise.
    #[wasm_bindgen(js_name = jobsOperate)]
    pub fn jobs_operate(&mut self, op: &str, args: JsValue, now_ms: f64) -> Result<f64, JsValue> {
        let request = services::operator_request(op, &args)?;
        Ok(id(self.session.jobs_operate(&request, None, now_ms as u64)))
    }

    /// Starts a jobs device API call as `thing` (see `actAs`): `api` is `getPending`,
    /// `startNext`, `describe` or `update`. Completes with the execution of `startNext` and
    /// `describe` (null when none) as `result`, the `/accepted` reply's JSON otherwise.
    #[wasm_bindgen(js_name = jobsDevice)]
    pub fn jobs_device(
        &mut self,
        thing: &str,
        api: &str,
        args: JsValue,
        now_ms: f64,
    ) -> Result<f64, JsValue> {
        let request = services::device_request(api, &args)?;
        let call = self
            .session
            .jobs_device(thing, &request, None, now_ms as u64)
            .map_err(client_error)?;
        Ok(id(call))
    }

    /// Asks the command service to send a command (`services::command_request` has the
    /// options). Completes with the reply as `result` (`{id, status, payload, ...}`).
    pub fn command(
        &mut self,
        topic: &str,
        payload: JsValue,
        options: JsValue,
        now_ms: f64,
    ) -> Result<f64, JsValue> {
        let request = services::command_request(topic, &payload, &options)?;
        Ok(id(self.session.command(&request, now_ms as u64)))
    }

    /// Asks for command `id`'s status record. Completes with the record as `result`.
    #[wasm_bindgen(js_name = commandStatus)]
    pub fn command_status(&mut self, id: &str, now_ms: f64) -> Result<f64, JsValue> {
        if id.is_empty() {
            return Err(invalid("the command id is empty"));
        }
        let timeout = mqstore_core::commands::DEFAULT_TIMEOUT_MS;
        let call = self.session.command_status(id, timeout, now_ms as u64);
        Ok(self::id(call))
    }

    /// Where this client's presence goes: its Will (payload "gone").
    #[wasm_bindgen(js_name = presenceTopic)]
    pub fn presence_topic(&self) -> String {
        self.session.presence_topic()
    }

    /// The broker's Maximum Packet Size from its CONNACK (0: none).
    #[wasm_bindgen(js_name = setMaxPacketSize)]
    pub fn set_max_packet_size(&mut self, max: u32) {
        self.session.set_max_packet_size((max > 0).then_some(max));
    }

    /// Starts a call: `request` as `encodeRequest` takes it, `options` `{fencingToken?: Hlc,
    /// persist?: boolean, timeoutMs?: number}`. Returns the call id.
    pub fn call(
        &mut self,
        request: JsValue,
        options: JsValue,
        now_ms: f64,
    ) -> Result<f64, JsValue> {
        let request = request_of(&request)?;
        let mut call_options = CallOptions::default();
        if options.is_object() {
            let token = get(&options, "fencingToken");
            if !token.is_undefined() && !token.is_null() {
                let text = Reflect::get(&token, &"toString".into())
                    .ok()
                    .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
                    .and_then(|f| f.call0(&token).ok())
                    .and_then(|t| t.as_string())
                    .ok_or_else(|| invalid("options.fencingToken must be an Hlc"))?;
                call_options.fencing_token = Some(
                    CoreHlc::parse(&text)
                        .map_err(|e| invalid(format!("options.fencingToken: {e}")))?,
                );
            }
            call_options.persist = get(&options, "persist").as_bool().unwrap_or(false);
            call_options.timeout_ms =
                optional_u64(&get(&options, "timeoutMs"), "options.timeoutMs")?;
        }
        let call = self
            .session
            .call(&request, &call_options, now_ms as u64)
            .map_err(client_error)?;
        Ok(id(call))
    }

    /// Starts observing `key` (two publishes); changes come as `changed` events.
    pub fn observe(&mut self, key: JsValue, now_ms: f64) -> Result<f64, JsValue> {
        let call = self
            .session
            .observe(key_of(&key, "key")?, now_ms as u64)
            .map_err(client_error)?;
        Ok(id(call))
    }

    /// Takes the lease on `key` for `ttlMs` (this client's id is the holder), waiting up to
    /// `waitMs` for its holder (0: one try; `null`: until held). Completes with `result` the
    /// fencing token (an `Hlc`), or `null` when someone else holds it; the call's id is the
    /// lease's. While held it is renewed by the state machine; `lease-lost` says when it is
    /// lost.
    pub fn lease(
        &mut self,
        key: JsValue,
        ttl_ms: f64,
        wait_ms: Option<f64>,
        now_ms: f64,
    ) -> Result<f64, JsValue> {
        if ttl_ms.is_nan() || ttl_ms < 1.0 {
            return Err(invalid("ttlMs must be at least 1"));
        }
        let wait = match wait_ms {
            Some(w) if w.is_nan() || w < 0.0 => return Err(invalid("waitMs must be 0 or more")),
            Some(w) if w.is_finite() => Some(w as u64),
            _ => None, // null or Infinity: until held
        };
        let call = self
            .session
            .lease(key_of(&key, "key")?, ttl_ms as u64, wait, now_ms as u64)
            .map_err(client_error)?;
        Ok(id(call))
    }

    /// Releases held lease `lease` and stops renewing it. Completes with `result` whether it
    /// was still held.
    #[wasm_bindgen(js_name = releaseLease)]
    pub fn release_lease(&mut self, lease: f64, now_ms: f64) -> Result<f64, JsValue> {
        let call = self
            .session
            .release_lease(CallId(lease as u64), now_ms as u64)
            .map_err(client_error)?;
        Ok(id(call))
    }

    /// Stops observing `key`.
    pub fn unobserve(&mut self, key: JsValue, now_ms: f64) -> Result<f64, JsValue> {
        let call = self
            .session
            .unobserve(key_of(&key, "key")?, now_ms as u64)
            .map_err(client_error)?;
        Ok(id(call))
    }

    /// Feeds a message that arrived on one of the subscriptions (an object as `takePublishes`
    /// gives them).
    pub fn handle(&mut self, message: JsValue, now_ms: f64) -> Result<(), JsValue> {
        self.session.handle(&publish_of(&message)?, now_ms as u64);
        Ok(())
    }

    /// Fails the calls whose timeout has passed, renews what needs renewing.
    pub fn expire(&mut self, now_ms: f64) {
        self.session.expire(now_ms as u64);
    }

    /// When to call `expire` next, or `null` when nothing waits.
    #[wasm_bindgen(js_name = nextDeadline)]
    pub fn next_deadline(&self) -> Option<f64> {
        self.session.next_deadline().map(|d| d as f64)
    }

    /// The connection dropped: every call in flight fails.
    #[wasm_bindgen(js_name = connectionLost)]
    pub fn connection_lost(&mut self) {
        self.session.connection_lost();
    }

    /// After a reconnect, once subscribed: registers every observed key again and reads it back.
    pub fn resume(&mut self, now_ms: f64) -> Result<(), JsValue> {
        self.session.resume(now_ms as u64).map_err(client_error)
    }

    /// The messages to publish, in order (QoS 1), as plain objects; each carries the `call`
    /// it belongs to (absent for the client's own messages), for `publishRefused`.
    #[wasm_bindgen(js_name = takePublishes)]
    pub fn take_publishes(&mut self) -> Array {
        std::iter::from_fn(|| self.session.poll_publish())
            .map(|outgoing| {
                let object = publish_to_js(&outgoing.publish);
                if let Some(call) = outgoing.call {
                    set(&object, "call", id(call));
                }
                JsValue::from(object)
            })
            .collect()
    }

    /// The broker refused a publish of call `call` (its PUBACK reason code `code` is 0x80 or
    /// more): the call completes with that error (a `PublishRefusedError`, code 216).
    #[wasm_bindgen(js_name = publishRefused)]
    pub fn publish_refused(&mut self, call: f64, code: u8) {
        self.session.publish_refused(CallId(call as u64), code);
    }

    /// What happened, in order: `{kind: "completed", call, op, error?, response?, version?,
    /// result?}`, `{kind: "changed", key, value (null: deleted), version, synthetic}`,
    /// `{kind: "jobs-notification", notification}`, `{kind: "command-record", record}`,
    /// `{kind: "lease-renewed", lease, version}` and `{kind: "lease-lost", lease, key}`.
    #[wasm_bindgen(js_name = takeEvents)]
    pub fn take_events(&mut self) -> Array {
        std::iter::from_fn(|| self.session.poll_event())
            .map(|event| JsValue::from(event_to_js(event)))
            .collect()
    }
}

/// A call id as JavaScript holds it (ids count from 1, far below 2^53).
fn id(call: CallId) -> f64 {
    call.0 as f64
}

/// A session event as a plain object.
fn event_to_js(event: SessionEvent) -> Object {
    let out = Object::new();
    match event {
        SessionEvent::Completed { call, op, result } => {
            set(&out, "kind", "completed");
            set(&out, "call", id(call));
            set(&out, "op", op);
            match result {
                Ok(Completion::Store(answer)) => {
                    set(&out, "response", response_to_js(&answer.response));
                    set(&out, "version", version_to_js(answer.version.as_ref()));
                    // The core's reading of the answer: SET applied, DEL/VDEL's outcome.
                    set(&out, "applied", answer.applied());
                    let deleted = match answer.deleted() {
                        Deleted::Deleted => "deleted",
                        Deleted::Absent => "absent",
                        Deleted::ValueMismatch => "value_mismatch",
                    };
                    set(&out, "deleted", deleted);
                }
                Ok(Completion::Jobs(value)) => set(&out, "result", services::js_of(&value)),
                Ok(Completion::Command(reply)) => {
                    set(&out, "result", services::reply_to_js(&reply))
                }
                Ok(Completion::CommandStatus(record)) => {
                    set(&out, "result", services::record_to_js(&record));
                }
                Ok(Completion::Lease(token)) => set(&out, "result", version_to_js(token.as_ref())),
                Ok(Completion::Released(held)) => set(&out, "result", held),
                Err(e) => set(&out, "error", client_error(e)),
            }
        }
        SessionEvent::Changed {
            key,
            change,
            version,
            synthetic,
        } => {
            set(&out, "kind", "changed");
            set(&out, "key", bytes_to_js(&key));
            match change.into_value() {
                Some(value) => set(&out, "value", bytes_to_js(&value)),
                None => set(&out, "value", JsValue::NULL),
            }
            set(&out, "version", version_to_js(version.as_ref()));
            set(&out, "synthetic", synthetic);
        }
        SessionEvent::Jobs(notification) => {
            set(&out, "kind", "jobs-notification");
            let json = serde_json::to_value(&notification).unwrap_or_default();
            set(&out, "notification", services::js_of(&json));
        }
        SessionEvent::CommandRecord(record) => {
            set(&out, "kind", "command-record");
            set(&out, "record", services::record_to_js(&record));
        }
        SessionEvent::LeaseRenewed { lease, version } => {
            set(&out, "kind", "lease-renewed");
            set(&out, "lease", id(lease));
            set(&out, "version", version_to_js(Some(&version)));
        }
        SessionEvent::LeaseLost { lease, key } => {
            set(&out, "kind", "lease-lost");
            set(&out, "lease", id(lease));
            set(&out, "key", bytes_to_js(&key));
        }
    }
    out
}

/// The lease protocol (the core's `lease::LeaseTerms`): which request takes, renews and releases
/// one holder's lease on one key, and how often to renew. The `Client` drives it.
#[wasm_bindgen]
pub struct LeaseTerms {
    inner: CoreLeaseTerms,
}

#[wasm_bindgen]
impl LeaseTerms {
    /// `holder` is the client's id; `ttlMs` ≥ 1.
    #[wasm_bindgen(constructor)]
    pub fn new(key: JsValue, holder: &str, ttl_ms: f64) -> Result<LeaseTerms, JsValue> {
        let key = key_of(&key, "key")?;
        let ttl = optional_u64(&JsValue::from(ttl_ms), "ttlMs")?.unwrap_or(0);
        CoreLeaseTerms::new(key, holder.to_owned(), ttl)
            .map(|inner| LeaseTerms { inner })
            .ok_or_else(|| invalid("ttlMs must be at least 1"))
    }

    /// The SET that takes the lease, and renews it (`SET key holder NEX PX ttl`), as a request
    /// object for `ClientCore.call`.
    pub fn claim(&self) -> Object {
        request_to_js(&self.inner.claim())
    }

    /// The VDEL that releases it, if this holder still has it.
    pub fn release(&self) -> Object {
        request_to_js(&self.inner.release())
    }

    /// How often a holder renews.
    #[wasm_bindgen(getter, js_name = renewEveryMs)]
    pub fn renew_every_ms(&self) -> f64 {
        self.inner.renew_every_ms() as f64
    }

    /// How long a refused claimant waits for the key's deletion before trying again.
    #[wasm_bindgen(getter, js_name = retryAfterMs)]
    pub fn retry_after_ms(&self) -> f64 {
        self.inner.retry_after_ms() as f64
    }
}
