//! The language-neutral session traces (`testdata/session/*.json`, format in its README) run
//! against the core's [`Session`]. The npm package runs the same files through its
//! `ClientCore` (bindings-wasm/tests/conformance.test.js): both must give the same publishes
//! and events for the same inputs.
//!
//! `MQSTORE_TRACE_PRINT=1` prints what each step gave instead of checking it (to write a new
//! trace's expectations: read them, and keep them only when they are what the protocol says).

mod matching;

use matching::matches;

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::path::Path;

use bytes::Bytes;
use mqstore_core::client::jobs::DeviceRequest;
use mqstore_core::client::{CallId, CallOptions, ClientConfig, ClientError, Deleted};
use mqstore_core::codec::{Bulk, Condition, Request, Response, SetRequest};
use mqstore_core::commands::{CommandRequest, Mode};
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::hlc::Hlc;
use mqstore_core::jobs::OperatorRequest;
use mqstore_core::session::{Completion, Session, SessionEvent};
use mqstore_core::shadow::Op;
use serde_json::{Map, Value, json};

/// Every trace's clock starts here (`"clock": ms` steps are offsets from it).
const T0: u64 = 1_700_000_000_000;

/// A trace run: the session and the names the trace gave to calls and correlation data.
struct Run {
    session: Session,
    now: u64,
    calls: HashMap<String, CallId>,
    correlations: HashMap<String, Bytes>,
    /// The jobs device API's `clientToken`s, by name.
    tokens: HashMap<String, String>,
    print: bool,
}

fn text(value: &Value, name: &str) -> String {
    match value.get(name) {
        Some(Value::String(s)) => s.clone(),
        other => panic!("{name} must be a string, not {other:?}"),
    }
}

fn optional_text(value: &Value, name: &str) -> Option<String> {
    value.get(name).and_then(Value::as_str).map(str::to_owned)
}

fn optional_u64(value: &Value, name: &str) -> Option<u64> {
    value.get(name).and_then(Value::as_u64)
}

fn flag(value: &Value, name: &str) -> bool {
    value.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn bytes(value: &Value, name: &str) -> Bytes {
    Bytes::from(text(value, name))
}

/// Bytes as a trace writes them: text when they are UTF-8, else `{"hex": …}`.
fn bytes_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => json!({ "hex": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() }),
    }
}

/// `{op: "SET", key, value, condition?, pxMs?}` and the other requests, as the npm package's
/// `encodeRequest` takes them.
fn request(value: &Value) -> Request {
    match text(value, "op").as_str() {
        "SET" => Request::Set(SetRequest {
            key: bytes(value, "key"),
            value: Bulk::new(bytes(value, "value")),
            condition: match optional_text(value, "condition").as_deref() {
                None => Condition::Always,
                Some("NX") => Condition::NotExists,
                Some("NEX") => Condition::NotExistsOrEqual,
                Some(other) => panic!("condition {other:?}"),
            },
            expires_in_ms: optional_u64(value, "pxMs").and_then(NonZeroU64::new),
        }),
        "GET" => Request::Get {
            key: bytes(value, "key"),
        },
        "DEL" => Request::Del {
            key: bytes(value, "key"),
        },
        "VDEL" => Request::VDel {
            key: bytes(value, "key"),
            value: bytes(value, "value"),
        },
        "KEYNOTIFY" => Request::KeyNotify {
            key: bytes(value, "key"),
            stop: flag(value, "stop"),
        },
        "SCAN" => Request::Scan {
            pattern: bytes(value, "pattern"),
            token: value.get("token").map(|_| bytes(value, "token")),
        },
        other => panic!("unknown op {other:?}"),
    }
}

/// `{op: "createJob", jobId, …}`: the operator API's JSON, as the service reads it.
fn operator_request(value: &Value) -> OperatorRequest {
    serde_json::from_value(value.clone()).expect("an operator request")
}

/// `{thing, api: "start-next", payload}`: the device API's topic end and payload.
fn device_request(value: &Value) -> DeviceRequest {
    let payload = value.get("payload").cloned().unwrap_or_else(|| json!({}));
    let body = serde_json::from_value(payload).expect("a device request's payload");
    DeviceRequest::from_wire(&text(value, "api"), body).expect("a device request")
}

/// `{topic, payload, profile?, timeoutMs?, mode?, contentType?, headers?}`.
fn command_request(value: &Value) -> CommandRequest {
    let mut request = CommandRequest::new(text(value, "topic"), bytes(value, "payload"));
    if let Some(profile) = optional_text(value, "profile") {
        request.profile = profile;
    }
    if let Some(timeout_ms) = optional_u64(value, "timeoutMs") {
        request.timeout_ms = timeout_ms;
    }
    if let Some(mode) = optional_text(value, "mode") {
        request.mode = Mode::parse(&mode).expect("await, oneway or detached");
    }
    request.content_type = optional_text(value, "contentType");
    if let Some(Value::Object(headers)) = value.get("headers") {
        for (name, value) in headers {
            request
                .headers
                .push((name.clone(), value.as_str().unwrap().to_owned()));
        }
    }
    request
}

fn response_json(response: &Response) -> Value {
    match response {
        Response::Ok => json!({"kind": "ok"}),
        Response::NotApplied => json!({"kind": "not_applied"}),
        Response::Deleted(n) => json!({"kind": "deleted", "count": n}),
        Response::Value(value) => json!({"kind": "value", "value": bytes_json(&value.value())}),
        Response::Absent => json!({"kind": "absent"}),
        Response::Keys { keys, token } => {
            let mut out = json!({
                "kind": "keys",
                "keys": keys.iter().map(|k| bytes_json(k)).collect::<Vec<_>>(),
            });
            if let Some(token) = token {
                out["token"] = bytes_json(token);
            }
            out
        }
        Response::Error(e) => json!({"kind": "error", "text": e.text(), "code": e.code()}),
    }
}

/// An error as the trace states it: its kind's name and code, and the detail the npm package
/// attaches.
fn error_json(error: &ClientError) -> Value {
    let mut out = json!({ "kind": error.kind().name(), "code": error.code() });
    match error {
        ClientError::Service(service) => out["text"] = json!(service.text()),
        ClientError::Jobs { code, .. } => out["jobsCode"] = json!(code),
        ClientError::CommandFailed { id, .. }
        | ClientError::CommandRejected { id, .. }
        | ClientError::CommandTimedOut { id } => out["commandId"] = json!(id),
        ClientError::PublishRefused { code } => out["reasonCode"] = json!(code),
        _ => {}
    }
    out
}

fn version_json(version: Option<&Hlc>) -> Value {
    version.map_or(Value::Null, |v| json!(v.to_string()))
}

fn record_json(record: &mqstore_core::commands::Record) -> Value {
    serde_json::from_slice(&record.to_json()).unwrap()
}

impl Run {
    fn new(trace: &Value) -> Self {
        let mut config = ClientConfig::new(text(trace, "clientId"), 7);
        if let Some(timeout_ms) = optional_u64(trace, "timeoutMs") {
            config.default_timeout_ms = timeout_ms;
        }
        Self {
            session: Session::new(config).unwrap(),
            now: T0,
            calls: HashMap::new(),
            correlations: HashMap::new(),
            tokens: HashMap::new(),
            print: std::env::var_os("MQSTORE_TRACE_PRINT").is_some(),
        }
    }

    fn call_named(&self, name: &str) -> CallId {
        *self
            .calls
            .get(name)
            .unwrap_or_else(|| panic!("no call named {name:?} yet"))
    }

    fn call_name(&self, call: CallId) -> Value {
        self.calls
            .iter()
            .find(|(_, id)| **id == call)
            .map_or(json!(call.0), |(name, _)| json!(name))
    }

    /// Runs one action; `Ok(Some(value))` for what an action returns besides a call (filters).
    fn act(&mut self, action: &Map<String, Value>) -> Result<Option<CallId>, Value> {
        let (verb, arg) = action.iter().next().expect("an action");
        let now = self.now;
        let s = &mut self.session;
        let err = |e: ClientError| error_json(&e);
        let call = match verb.as_str() {
            "call" => {
                let options = CallOptions {
                    fencing_token: optional_text(arg, "fencingToken")
                        .map(|t| Hlc::parse(&t).expect("an HLC")),
                    persist: flag(arg, "persist"),
                    timeout_ms: optional_u64(arg, "timeoutMs"),
                };
                Some(s.call(&request(arg), &options, now).map_err(err)?)
            }
            "observe" => Some(
                s.observe(Bytes::from(arg.as_str().unwrap().to_owned()), now)
                    .map_err(err)?,
            ),
            "unobserve" => Some(
                s.unobserve(Bytes::from(arg.as_str().unwrap().to_owned()), now)
                    .map_err(err)?,
            ),
            "lease" => {
                let key = bytes(arg, "key");
                let ttl = optional_u64(arg, "ttlMs").expect("ttlMs");
                let wait = optional_u64(arg, "waitMs");
                Some(s.lease(key, ttl, wait, now).map_err(err)?)
            }
            "releaseLease" => {
                let lease = self.call_named(arg.as_str().unwrap());
                Some(self.session.release_lease(lease, now).map_err(err)?)
            }
            "jobsOperate" => Some(s.jobs_operate(&operator_request(arg), None, now)),
            "jobsDevice" => Some(
                s.jobs_device(&text(arg, "thing"), &device_request(arg), None, now)
                    .map_err(err)?,
            ),
            "shadow" => {
                let op = Op::parse(&text(arg, "op")).expect("op: get, update or delete");
                let body = arg.get("body").cloned().unwrap_or(Value::Null);
                let name = optional_text(arg, "name");
                Some(
                    s.shadow(&text(arg, "thing"), name.as_deref(), op, &body, None, now)
                        .map_err(err)?,
                )
            }
            "command" => Some(s.command(&command_request(arg), now)),
            "commandStatus" => {
                let timeout = mqstore_core::commands::DEFAULT_TIMEOUT_MS;
                Some(s.command_status(arg.as_str().unwrap(), timeout, now))
            }
            "receive" => {
                let publish = self.incoming(arg);
                self.session.handle(&publish, now);
                None
            }
            "clock" => {
                self.now = T0 + arg.as_u64().expect("clock: ms after the start");
                self.session.expire(self.now);
                None
            }
            "connectionLost" => {
                s.connection_lost();
                None
            }
            "resume" => {
                s.resume(now).map_err(err)?;
                None
            }
            "publishRefused" => {
                let call = self.call_named(&text(arg, "call"));
                let code = optional_u64(arg, "code").expect("code") as u8;
                self.session.publish_refused(call, code);
                None
            }
            "setMaxPacketSize" => {
                let max = arg.as_u64().expect("a size") as u32;
                s.set_max_packet_size((max > 0).then_some(max));
                None
            }
            other => panic!("unknown action {other:?}"),
        };
        Ok(call)
    }

    /// What the trace's filter-returning actions give (`actAs`, `leave`, `watchCommands`,
    /// `unwatchCommands`, `subscriptions`), or `None` for the other actions.
    fn filters(&mut self, action: &Map<String, Value>) -> Option<Result<Value, Value>> {
        let (verb, arg) = action.iter().next().unwrap();
        let s = &mut self.session;
        Some(match verb.as_str() {
            "actAs" => s
                .act_as(arg.as_str().unwrap())
                .map(|f| json!(f))
                .map_err(|e| error_json(&e)),
            "leave" => Ok(json!(s.leave(arg.as_str().unwrap()))),
            "useShadow" => s
                .use_shadow(&text(arg, "thing"), optional_text(arg, "name").as_deref())
                .map(|f| json!(f))
                .map_err(|e| error_json(&e)),
            "leaveShadow" => Ok(json!(
                s.leave_shadow(&text(arg, "thing"), optional_text(arg, "name").as_deref())
            )),
            "watchCommands" => Ok(json!(s.watch_commands())),
            "unwatchCommands" => Ok(json!(s.unwatch_commands())),
            "subscriptions" => Ok(json!(s.subscriptions())),
            _ => return None,
        })
    }

    /// A publish the trace delivers: `{topic, payload, correlation?: name, …}`; a JSON payload
    /// may be given as `json` instead, with `clientToken` naming a token the session sent.
    fn incoming(&self, value: &Value) -> Publish {
        let correlation_data = optional_text(value, "correlation").map(|name| {
            self.correlations
                .get(&name)
                .unwrap_or_else(|| panic!("no correlation named {name:?} yet"))
                .clone()
        });
        let user_properties = match value.get("userProperties") {
            Some(pairs) => serde_json::from_value(pairs.clone()).expect("[[name, value], …]"),
            None => Vec::new(),
        };
        Publish {
            topic: text(value, "topic"),
            payload: match (value.get("json"), value.get("payload")) {
                (Some(json), _) => {
                    let mut json = json.clone();
                    if let Some(name) = optional_text(value, "clientToken") {
                        json["clientToken"] = json!(self.tokens[&name]);
                    }
                    Bytes::from(json.to_string())
                }
                (None, Some(_)) => bytes(value, "payload"),
                (None, None) => Bytes::new(),
            },
            qos: 1,
            properties: Properties {
                correlation_data,
                response_topic: optional_text(value, "responseTopic"),
                content_type: optional_text(value, "contentType"),
                message_expiry_interval: optional_u64(value, "messageExpiryInterval")
                    .map(|e| e as u32),
                payload_format_indicator: None,
                user_properties,
            },
        }
    }

    /// A publish the session made, as the trace states it (correlation data by name: bound the
    /// first time `expected` names it).
    fn outgoing(&mut self, publish: &Publish, call: Option<CallId>, expected: &Value) -> Value {
        let p = &publish.properties;
        let mut out = json!({
            "topic": publish.topic,
            "payload": bytes_json(&publish.payload),
            "userProperties": p.user_properties,
        });
        if let Some(call) = call {
            out["call"] = self.call_name(call);
        }
        // A JSON payload also as JSON, its clientToken by name (bound the first time).
        if let Ok(Value::Object(mut payload)) = serde_json::from_slice::<Value>(&publish.payload) {
            if let Some(Value::String(token)) = payload.remove("clientToken") {
                out["clientToken"] = match expected.get("clientToken").and_then(Value::as_str) {
                    Some(name) => {
                        let bound = self
                            .tokens
                            .entry(name.to_owned())
                            .or_insert_with(|| token.clone());
                        if *bound == token {
                            json!(name)
                        } else {
                            json!("(another)")
                        }
                    }
                    None => json!("(unnamed)"),
                };
            }
            out["json"] = Value::Object(payload);
        }
        if let Some(topic) = &p.response_topic {
            out["responseTopic"] = json!(topic);
        }
        if let Some(t) = &p.content_type {
            out["contentType"] = json!(t);
        }
        if let Some(e) = p.message_expiry_interval {
            out["messageExpiryInterval"] = json!(e);
        }
        if let Some(data) = &p.correlation_data {
            match expected.get("correlation").and_then(Value::as_str) {
                Some(name) => {
                    let bound = self
                        .correlations
                        .entry(name.to_owned())
                        .or_insert_with(|| data.clone());
                    out["correlation"] = if bound == data {
                        json!(name)
                    } else {
                        json!("(another)")
                    };
                }
                None => out["correlation"] = json!("(unnamed)"),
            }
        }
        out
    }

    fn event(&self, event: SessionEvent) -> Value {
        match event {
            SessionEvent::Completed { call, op, result } => {
                let mut out = json!({"kind": "completed", "call": self.call_name(call), "op": op});
                match result {
                    Ok(Completion::Store(answer)) => {
                        out["response"] = response_json(&answer.response);
                        out["version"] = version_json(answer.version.as_ref());
                        out["applied"] = json!(answer.applied());
                        out["deleted"] = json!(match answer.deleted() {
                            Deleted::Deleted => "deleted",
                            Deleted::Absent => "absent",
                            Deleted::ValueMismatch => "value_mismatch",
                        });
                    }
                    Ok(Completion::Jobs(answer)) => out["result"] = answer.into_json(),
                    Ok(Completion::CommandDefinitions(answer)) => {
                        out["result"] = answer.into_json()
                    }
                    Ok(Completion::Command(reply)) => {
                        let mut result = json!({
                            "id": reply.id,
                            "status": reply.status.as_str(),
                            "payload": bytes_json(&reply.payload),
                        });
                        if let Some(t) = &reply.content_type {
                            result["contentType"] = json!(t);
                        }
                        if let Some(s) = reply.device_status {
                            result["deviceStatus"] = json!(s);
                        }
                        out["result"] = result;
                    }
                    Ok(Completion::CommandStatus(record)) => out["result"] = record_json(&record),
                    Ok(Completion::Lease(token)) => out["result"] = version_json(token.as_ref()),
                    Ok(Completion::Released(held)) => out["result"] = json!(held),
                    Ok(other) => panic!("a completion the traces do not know: {other:?}"),
                    Err(e) => out["error"] = error_json(&e),
                }
                out
            }
            SessionEvent::Changed {
                key,
                change,
                version,
                synthetic,
                gap,
            } => json!({
                "kind": "changed",
                "key": bytes_json(&key),
                "value": change.into_value().map_or(Value::Null, |v| bytes_json(&v)),
                "version": version_json(version.as_ref()),
                "synthetic": synthetic,
                "gap": gap,
            }),
            SessionEvent::Jobs(notification) => json!({
                "kind": "jobs-notification",
                "notification": serde_json::to_value(&notification).unwrap(),
            }),
            SessionEvent::Shadow(notification) => json!({
                "kind": "shadow-notification",
                "thing": notification.thing,
                "name": notification.name,
                "notification": notification.to_json(),
            }),
            SessionEvent::CommandRecord(record) => {
                json!({"kind": "command-record", "record": record_json(&record)})
            }
            SessionEvent::Keyspace { key, created } => {
                json!({"kind": "keyspace", "key": bytes_json(&key), "created": created})
            }
            SessionEvent::LeaseRenewed { lease, version } => json!({
                "kind": "lease-renewed",
                "lease": self.call_name(lease),
                "version": version.to_string(),
            }),
            SessionEvent::LeaseLost { lease, key } => json!({
                "kind": "lease-lost",
                "lease": self.call_name(lease),
                "key": bytes_json(&key),
            }),
            other => panic!("an event the traces do not know: {other:?}"),
        }
    }
}

fn check_list(trace: &str, step: usize, what: &str, expected: Option<&Value>, actual: &[Value]) {
    let expected = expected
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let same =
        expected.len() == actual.len() && expected.iter().zip(actual).all(|(e, a)| matches(e, a));
    assert!(
        same,
        "{trace}, step {step}: {what}\n  expected {}\n  actual   {}",
        serde_json::to_string_pretty(&expected).unwrap(),
        serde_json::to_string_pretty(&actual).unwrap(),
    );
}

fn run_trace(path: &Path) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let trace: Value = serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut run = Run::new(&trace);
    for (number, step) in trace["steps"].as_array().unwrap().iter().enumerate() {
        let number = number + 1;
        let action = step["do"].as_object().expect("each step has a \"do\"");
        let outcome = match run.filters(action) {
            Some(filters) => filters.map(|f| (None, Some(f))),
            None => run.act(action).map(|call| (call, None)),
        };
        match (outcome, step.get("error")) {
            (Ok((call, filters)), None) => {
                if let (Some(call), Some(name)) = (call, step.get("name").and_then(Value::as_str)) {
                    run.calls.insert(name.to_owned(), call);
                }
                if let Some(expected) = step.get("filters") {
                    assert_eq!(
                        filters.as_ref(),
                        Some(expected),
                        "{name}, step {number}: filters"
                    );
                }
            }
            (Err(actual), Some(expected)) => {
                assert!(
                    matches(expected, &actual),
                    "{name}, step {number}: error {actual}"
                );
            }
            (Ok(_), Some(expected)) => {
                panic!("{name}, step {number}: no error, expected {expected}")
            }
            (Err(actual), None) => panic!("{name}, step {number}: error {actual}"),
        }
        let expected_publishes = step.get("publishes").and_then(Value::as_array).cloned();
        let mut publishes = Vec::new();
        while let Some(out) = run.session.poll_publish() {
            let expected = expected_publishes
                .as_ref()
                .and_then(|e| e.get(publishes.len()))
                .cloned()
                .unwrap_or(Value::Null);
            publishes.push(run.outgoing(&out.publish, out.call, &expected));
        }
        let events: Vec<SessionEvent> = std::iter::from_fn(|| run.session.poll_event()).collect();
        let events: Vec<Value> = events.into_iter().map(|e| run.event(e)).collect();
        let deadline = run.session.next_deadline().map(|d| d - T0);
        if run.print {
            let shown = json!({"do": action, "publishes": publishes, "events": events, "deadline": deadline});
            eprintln!(
                "{name} step {number}: {}",
                serde_json::to_string(&shown).unwrap()
            );
            continue; // printing, not checking
        }
        check_list(
            &name,
            number,
            "publishes",
            step.get("publishes"),
            &publishes,
        );
        check_list(&name, number, "events", step.get("events"), &events);
        if let Some(expected) = step.get("deadline") {
            assert_eq!(
                &json!(deadline),
                expected,
                "{name}, step {number}: next deadline"
            );
        }
    }
}

#[test]
fn every_session_trace_gives_its_publishes_and_events() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/session");
    let mut traces: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    traces.sort();
    for trace in &traces {
        run_trace(trace);
    }
    assert!(traces.len() >= 8, "the traces are in {}", dir.display());
}

#[test]
fn a_trace_that_expects_other_events_fails() {
    let dir = std::env::temp_dir().join(format!("mqstore-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wrong.json");
    let trace = json!({
        "clientId": "wrong",
        "steps": [{
            "do": {"call": {"op": "GET", "key": "k"}},
            "name": "get",
            "publishes": [{"topic": "not/the/topic"}],
        }],
    });
    std::fs::write(&path, trace.to_string()).unwrap();
    let outcome = std::panic::catch_unwind(|| run_trace(&path));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(outcome.is_err(), "a wrong expectation must fail the trace");
}

/// `testdata/error-kinds.json` is every error kind's code and name, for runners in languages
/// that have no other way to name a kind (the C library's statuses are the codes).
#[test]
fn the_error_kinds_table_is_the_cores() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/error-kinds.json");
    let table: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let expected: Vec<Value> = mqstore_core::ErrorKind::ALL
        .iter()
        .map(|k| json!({"code": k.code(), "name": k.name()}))
        .collect();
    assert_eq!(table, json!(expected), "regenerate it from ErrorKind::ALL");
}
