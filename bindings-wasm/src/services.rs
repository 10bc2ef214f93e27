//! Jobs and commands for JavaScript: the calls' arguments (plain objects) as the core's
//! requests, and the answers (the core's JSON) as plain objects. The protocol is the core's
//! `JobsClient` and `CommandsClient`, driven by `ClientCore` beside the state store's.

use std::collections::BTreeMap;

use js_sys::{Array, Object};
use mqstore_core::client::commands::CommandReply;
use mqstore_core::client::jobs::{DeviceRequest, Update};
use mqstore_core::commands::{CommandRequest, Mode, Record};
use mqstore_core::jobs::{ExecutionRef, Status, operator_call};
use serde_json::Value;
use wasm_bindgen::prelude::*;

use super::{bytes_of, bytes_to_js, get, invalid, optional_u64, set};

/// A JS value as JSON (`undefined` as `null`).
pub(crate) fn json_of(value: &JsValue, what: &str) -> Result<Value, JsValue> {
    if value.is_undefined() {
        return Ok(Value::Null);
    }
    let text = js_sys::JSON::stringify(value)
        .ok()
        .and_then(|t| t.as_string())
        .ok_or_else(|| invalid(format!("{what} cannot be written as JSON")))?;
    // As bytes: the one JSON reader the core's answers use already (`from_str` would add a
    // second copy of the parser to the .wasm, 1.4 KB gzipped).
    serde_json::from_slice(text.as_bytes()).map_err(|e| invalid(format!("{what}: {e}")))
}

/// JSON as a JS value.
pub(crate) fn js_of(value: &Value) -> JsValue {
    js_sys::JSON::parse(&value.to_string()).unwrap_or(JsValue::NULL)
}

fn text(args: &JsValue, name: &str) -> Result<String, JsValue> {
    get(args, name)
        .as_string()
        .ok_or_else(|| invalid(format!("{name} (a string) is required")))
}

fn optional_text(args: &JsValue, name: &str) -> Result<Option<String>, JsValue> {
    let value = get(args, name);
    match value.is_undefined() || value.is_null() {
        true => Ok(None),
        false => value
            .as_string()
            .map(Some)
            .ok_or_else(|| invalid(format!("{name} must be a string"))),
    }
}

fn flag(args: &JsValue, name: &str) -> bool {
    get(args, name).as_bool().unwrap_or(false)
}

fn status(args: &JsValue) -> Result<Option<Status>, JsValue> {
    optional_text(args, "status")?
        .map(|s| {
            Status::parse(&s).ok_or_else(|| {
                invalid(format!(
                    "status {s:?}: QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, REJECTED, TIMED_OUT, CANCELED or REMOVED"
                ))
            })
        })
        .transpose()
}

/// `statusDetails`: an object of strings.
fn details(args: &JsValue) -> Result<BTreeMap<String, String>, JsValue> {
    match json_of(&get(args, "statusDetails"), "statusDetails")? {
        Value::Null => Ok(BTreeMap::new()),
        value => serde_json::from_value(value)
            .map_err(|_| invalid("statusDetails must be an object of strings")),
    }
}

/// An operator call as the wire's JSON: `op` is the call's name (`createJob`), `args` AWS's
/// request fields and the shorthands all bindings share (`thing`, `inProgressTimeoutMinutes`,
/// `maxRetries`, ...: `mqstore_core::jobs::operator_call`). The service checks the rest,
/// which keeps the typed requests' parsers out of the `.wasm`.
pub(crate) fn operator_request(op: &str, args: &JsValue) -> Result<Value, JsValue> {
    operator_call(op, json_of(args, "args")?).map_err(invalid)
}

/// A device API call as one thing: `api` is `getPending`, `startNext`, `describe` or `update`.
pub(crate) fn device_request(api: &str, args: &JsValue) -> Result<DeviceRequest, JsValue> {
    let minutes = || optional_u64(&get(args, "stepTimeoutMinutes"), "stepTimeoutMinutes");
    let number = || optional_u64(&get(args, "executionNumber"), "executionNumber");
    Ok(match api {
        "getPending" => DeviceRequest::GetPending,
        "startNext" => DeviceRequest::StartNext {
            status_details: details(args)?,
            step_timeout_minutes: minutes()?,
        },
        // No jobId: the first pending execution.
        "describe" => DeviceRequest::Describe {
            execution: match get(args, "jobId").is_undefined() {
                true => ExecutionRef::Next,
                false => ExecutionRef::Job(text(args, "jobId")?),
            },
            execution_number: number()?,
            include_document: get(args, "includeDocument").as_bool().unwrap_or(true),
        },
        "update" => DeviceRequest::Update(Update {
            job_id: text(args, "jobId")?,
            status: status(args)?,
            status_details: details(args)?,
            expected_version: optional_u64(&get(args, "expectedVersion"), "expectedVersion")?,
            execution_number: number()?,
            step_timeout_minutes: minutes()?,
            include_state: flag(args, "includeState"),
            include_document: flag(args, "includeDocument"),
        }),
        _ => return Err(invalid(format!("unknown jobs device call {api:?}"))),
    })
}

/// A command to send: `topic`, `payload`, and options `{profile, timeoutMs, mode ("await",
/// "oneway", "detached"), contentType, headers: {name: value}}`; or, with options `{command,
/// parameters}`, the start of that stored command on the target `topic` names.
pub(crate) fn command_request(
    topic: &str,
    payload: &JsValue,
    options: &JsValue,
) -> Result<CommandRequest, JsValue> {
    if topic.is_empty() {
        return Err(invalid("the command topic is empty"));
    }
    let mut request = CommandRequest::new(topic, bytes_of(payload, "payload")?);
    if !options.is_object() {
        return Ok(request);
    }
    if let Some(profile) = optional_text(options, "profile")? {
        request.profile = profile;
    }
    if let Some(timeout_ms) = optional_u64(&get(options, "timeoutMs"), "timeoutMs")? {
        request.timeout_ms = timeout_ms;
    }
    if let Some(mode) = optional_text(options, "mode")? {
        request.mode = Mode::parse(&mode)
            .ok_or_else(|| invalid(format!("mode {mode:?}: await, oneway or detached")))?;
    }
    request.content_type = optional_text(options, "contentType")?;
    if let Some(command) = optional_text(options, "command")? {
        request.command = Some(command);
        request.profile = "aws".into();
        request.parameters = match json_of(&get(options, "parameters"), "parameters")? {
            Value::Object(parameters) => parameters,
            Value::Null => serde_json::Map::new(),
            _ => return Err(invalid("parameters must be an object")),
        };
    }
    if let Value::Object(headers) = json_of(&get(options, "headers"), "headers")? {
        for (name, value) in headers {
            let Value::String(value) = value else {
                return Err(invalid(format!("headers.{name} must be a string")));
            };
            request.headers.push((name, value));
        }
    }
    Ok(request)
}

/// A command's reply: `{id, status, payload, contentType?, deviceStatus?}`.
pub(crate) fn reply_to_js(reply: &CommandReply) -> Object {
    let out = Object::new();
    set(&out, "id", reply.id.as_str());
    set(&out, "status", reply.status.as_str());
    set(&out, "payload", bytes_to_js(&reply.payload));
    if let Some(t) = &reply.content_type {
        set(&out, "contentType", t.as_str());
    }
    if let Some(s) = reply.device_status {
        set(&out, "deviceStatus", s as f64);
    }
    out
}

/// A command's status record, as its JSON (the answer's payload in base64).
pub(crate) fn record_to_js(record: &Record) -> JsValue {
    serde_json::from_slice::<Value>(&record.to_json())
        .map(|v| js_of(&v))
        .unwrap_or(JsValue::NULL)
}

/// A list of strings as a JS array.
pub(crate) fn strings(items: impl IntoIterator<Item = String>) -> Array {
    items.into_iter().map(JsValue::from).collect()
}
