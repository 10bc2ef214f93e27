//! `mqstore.ClientCore`: the core's client session with no I/O, for Python programs that
//! bring their own MQTT client (paho-mqtt, aiomqtt, a gateway's own loop). It is the same
//! session the npm package's `ClientCore` and the C library's `mqstore_core` drive: calls
//! give call ids and queue publishes; received messages and the time give events. This file
//! only converts: Python values in, the session's publishes and events out as dicts.

use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use mqstore_core::client::jobs::DeviceRequest;
use mqstore_core::client::{CallId, CallOptions, ClientConfig, ClientError, Deleted};
use mqstore_core::commands::{CommandRequest, DEFAULT_TIMEOUT_MS, Mode};
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::jobs::{DeviceBody, check_operator_call};
use mqstore_core::session::{Completion, Session, SessionEvent};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::client::shared;
use crate::codec::{request_of, response_dict};
use crate::errors::client_error;
use crate::types::{Hlc, Json};

fn now(now_ms: Option<u64>) -> u64 {
    now_ms.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    })
}

/// A Python object as JSON (through the `json` module: the cold path of a jobs call).
fn json_of(py: Python<'_>, value: &Bound<'_, PyAny>, what: &str) -> PyResult<serde_json::Value> {
    let text: String = py
        .import("json")?
        .call_method1("dumps", (value,))
        .map_err(|e| PyValueError::new_err(format!("{what} is not JSON-serialisable: {e}")))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| PyValueError::new_err(format!("{what}: {e}")))
}

fn text_property(message: &Bound<'_, PyDict>, name: &str) -> PyResult<Option<String>> {
    match message.get_item(name)? {
        Some(v) if !v.is_none() => Ok(Some(v.extract()?)),
        _ => Ok(None),
    }
}

/// A received message: `{"topic", "payload", "correlation_data"?, "response_topic"?,
/// "content_type"?, "message_expiry_interval"?, "user_properties"?: [(name, value), ...]}`.
fn publish_of(message: &Bound<'_, PyDict>) -> PyResult<Publish> {
    let topic: String = message
        .get_item("topic")?
        .ok_or_else(|| PyValueError::new_err("the message needs \"topic\""))?
        .extract()?;
    let bytes = |name: &str| -> PyResult<Option<Bytes>> {
        match message.get_item(name)? {
            // Python's bytes, shared without a copy.
            Some(v) if !v.is_none() => Ok(Some(shared(v.extract::<PyBackedBytes>()?))),
            _ => Ok(None),
        }
    };
    let user_properties = match message.get_item("user_properties")? {
        Some(v) if !v.is_none() => v.extract::<Vec<(String, String)>>()?,
        _ => Vec::new(),
    };
    Ok(Publish {
        topic,
        payload: bytes("payload")?.unwrap_or_default(),
        qos: 1,
        properties: Properties {
            payload_format_indicator: None,
            message_expiry_interval: match message.get_item("message_expiry_interval")? {
                Some(v) if !v.is_none() => Some(v.extract()?),
                _ => None,
            },
            content_type: text_property(message, "content_type")?,
            response_topic: text_property(message, "response_topic")?,
            correlation_data: bytes("correlation_data")?,
            user_properties,
        },
    })
}

fn publish_dict<'py>(
    py: Python<'py>,
    publish: &Publish,
    call: Option<CallId>,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let p = &publish.properties;
    dict.set_item("topic", &publish.topic)?;
    dict.set_item("payload", PyBytes::new(py, &publish.payload))?;
    dict.set_item("qos", publish.qos)?;
    dict.set_item("response_topic", p.response_topic.as_deref())?;
    dict.set_item(
        "correlation_data",
        p.correlation_data.as_ref().map(|c| PyBytes::new(py, c)),
    )?;
    dict.set_item("content_type", p.content_type.as_deref())?;
    dict.set_item("message_expiry_interval", p.message_expiry_interval)?;
    dict.set_item("payload_format_indicator", p.payload_format_indicator)?;
    dict.set_item("user_properties", p.user_properties.clone())?;
    dict.set_item("call", call.map(|c| c.0))?;
    Ok(dict)
}

fn version(py: Python<'_>, version: Option<mqstore_core::hlc::Hlc>) -> PyResult<Option<Py<Hlc>>> {
    version.map(|v| Py::new(py, Hlc(v))).transpose()
}

fn event_dict(py: Python<'_>, event: SessionEvent) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    match event {
        SessionEvent::Completed { call, op, result } => {
            dict.set_item("kind", "completed")?;
            dict.set_item("call", call.0)?;
            dict.set_item("op", op)?;
            match result {
                Ok(Completion::Store(answer)) => {
                    let (applied, deleted) = (answer.applied(), answer.deleted());
                    dict.set_item("version", version(py, answer.version)?)?;
                    dict.set_item("response", response_dict(py, answer.response)?)?;
                    dict.set_item("applied", applied)?;
                    dict.set_item(
                        "deleted",
                        match deleted {
                            Deleted::Deleted => "deleted",
                            Deleted::Absent => "absent",
                            Deleted::ValueMismatch => "value_mismatch",
                        },
                    )?;
                }
                Ok(Completion::Jobs(answer)) => {
                    let answer = Json(answer.into_json());
                    dict.set_item("result", crate::runtime::ToPy::to_py(answer, py)?)?
                }
                Ok(Completion::CommandDefinitions(answer)) => {
                    let answer = Json(answer.into_json());
                    dict.set_item("result", crate::runtime::ToPy::to_py(answer, py)?)?
                }
                Ok(Completion::Command(reply)) => {
                    let result = PyDict::new(py);
                    result.set_item("id", reply.id)?;
                    result.set_item("status", reply.status.as_str())?;
                    result.set_item("payload", PyBytes::new(py, &reply.payload))?;
                    result.set_item("content_type", reply.content_type)?;
                    result.set_item("device_status", reply.device_status)?;
                    dict.set_item("result", result)?;
                }
                Ok(Completion::CommandStatus(record)) => {
                    let json = serde_json::from_slice(&record.to_json()).unwrap_or_default();
                    dict.set_item("result", crate::runtime::ToPy::to_py(Json(json), py)?)?;
                }
                Ok(Completion::Lease(token)) => dict.set_item("result", version(py, token)?)?,
                Ok(Completion::Released(held)) => dict.set_item("result", held)?,
                // A completion of a newer core (the enum is open): said, not dropped.
                Ok(_) => {
                    let e = ClientError::Malformed("an answer this binding does not know".into());
                    dict.set_item("error", client_error(py, &e).into_value(py))?
                }
                Err(e) => dict.set_item("error", client_error(py, &e).into_value(py))?,
            }
        }
        SessionEvent::Changed {
            key,
            change,
            version: changed,
            synthetic,
            gap,
        } => {
            dict.set_item("kind", "changed")?;
            dict.set_item("key", PyBytes::new(py, &key))?;
            dict.set_item("value", change.into_value().map(|v| PyBytes::new(py, &v)))?;
            dict.set_item("version", version(py, changed)?)?;
            dict.set_item("synthetic", synthetic)?;
            dict.set_item("gap", gap)?;
        }
        SessionEvent::Jobs(notification) => {
            dict.set_item("kind", "jobs-notification")?;
            let json = serde_json::to_value(&notification).unwrap_or_default();
            dict.set_item("notification", crate::runtime::ToPy::to_py(Json(json), py)?)?;
        }
        SessionEvent::Shadow(notification) => {
            dict.set_item("kind", "shadow-notification")?;
            dict.set_item("thing", &notification.thing)?;
            dict.set_item("name", &notification.name)?;
            let json = Json(notification.to_json());
            dict.set_item("notification", crate::runtime::ToPy::to_py(json, py)?)?;
        }
        SessionEvent::Keyspace { key, created } => {
            dict.set_item("kind", "keyspace")?;
            dict.set_item("key", PyBytes::new(py, &key))?;
            dict.set_item("created", created)?;
        }
        SessionEvent::CommandRecord(record) => {
            dict.set_item("kind", "command-record")?;
            let json = serde_json::from_slice(&record.to_json()).unwrap_or_default();
            dict.set_item("record", crate::runtime::ToPy::to_py(Json(json), py)?)?;
        }
        SessionEvent::LeaseRenewed { lease, version: v } => {
            dict.set_item("kind", "lease-renewed")?;
            dict.set_item("lease", lease.0)?;
            dict.set_item("version", Py::new(py, Hlc(v))?)?;
        }
        SessionEvent::LeaseLost { lease, key } => {
            dict.set_item("kind", "lease-lost")?;
            dict.set_item("lease", lease.0)?;
            dict.set_item("key", PyBytes::new(py, &key))?;
        }
        // An event of a newer core (the enum is open): a kind callers skip.
        _ => dict.set_item("kind", "unknown")?,
    }
    Ok(dict)
}

/// The client as a state machine with no I/O, for a program with its own MQTT client.
///
/// Subscribe (QoS 1) to `subscriptions()` (again after every reconnect), connect with a Will
/// on `presence_topic` (payload `b"gone"`), then: every call returns its call id and queues
/// publishes (`take_publishes()`: publish each at QoS 1); give every received message to
/// `handle`, call `expire` at `next_deadline()`, `connection_lost()` when the connection
/// drops and `resume()` once subscribed again; `take_events()` gives what happened. `now_ms`
/// defaults to the system clock.
#[pyclass(module = "mqstore._native")]
pub struct ClientCore {
    session: Session,
}

#[pymethods]
impl ClientCore {
    /// A state machine for the MQTT client id `client_id` (no `:` in it). `seed` is mixed
    /// into correlation ids (default: random); `timeout_ms` is every call's timeout (0: 10 s).
    #[new]
    #[pyo3(signature = (client_id, *, seed=None, timeout_ms=0))]
    fn new(py: Python<'_>, client_id: &str, seed: Option<u64>, timeout_ms: u64) -> PyResult<Self> {
        if client_id.is_empty() {
            return Err(PyValueError::new_err("client_id is empty"));
        }
        let mut config = ClientConfig::new(client_id, seed.unwrap_or_else(mqstore_net::random_u64));
        if timeout_ms > 0 {
            config.default_timeout_ms = timeout_ms;
        }
        let session = Session::new(config)
            .map_err(|e| client_error(py, &mqstore_core::client::ClientError::Clock(e)))?;
        Ok(Self { session })
    }

    /// Every topic filter to subscribe to (QoS 1), before the first call and after every
    /// reconnect.
    fn subscriptions(&self) -> Vec<String> {
        self.session.subscriptions()
    }

    /// Where this client's presence goes: its Will (payload `b"gone"`).
    #[getter]
    fn presence_topic(&self) -> String {
        self.session.presence_topic()
    }

    /// Acts as `thing` in the jobs device API: the filters to subscribe to now.
    fn act_as(&mut self, py: Python<'_>, thing: &str) -> PyResult<Vec<String>> {
        self.session.act_as(thing).map_err(|e| client_error(py, &e))
    }

    /// Stops acting as `thing`: the filters to unsubscribe from.
    fn leave(&mut self, thing: &str) -> Vec<String> {
        self.session.leave(thing)
    }

    /// Uses `thing`'s device shadow `name` (None: the classic one): the filters to subscribe
    /// to now; its deltas and documents come as `shadow-notification` events.
    #[pyo3(signature = (thing, name=None))]
    fn use_shadow(
        &mut self,
        py: Python<'_>,
        thing: &str,
        name: Option<&str>,
    ) -> PyResult<Vec<String>> {
        let filters = self.session.use_shadow(thing, name);
        filters.map_err(|e| client_error(py, &e))
    }

    /// Stops using a shadow: the filters to unsubscribe from.
    #[pyo3(signature = (thing, name=None))]
    fn leave_shadow(&mut self, thing: &str, name: Option<&str>) -> Vec<String> {
        self.session.leave_shadow(thing, name)
    }

    /// A request on a shadow in use: `op` `"get"`, `"update"` (`request`: `{"state": ...,
    /// "version"?: n}`) or `"delete"`; completes with the `/accepted` document as `result`.
    #[pyo3(signature = (thing, name, op, request=None, *, now_ms=None))]
    fn shadow(
        &mut self,
        py: Python<'_>,
        thing: &str,
        name: Option<&str>,
        op: &str,
        request: Option<&Bound<'_, PyAny>>,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        let op = mqstore_core::shadow::Op::parse(op).ok_or_else(|| {
            PyValueError::new_err(format!("op {op:?}: \"get\", \"update\" or \"delete\""))
        })?;
        let body = match request {
            Some(r) if !r.is_none() => json_of(py, r, "request")?,
            _ => serde_json::Value::Null,
        };
        let call = (self.session).shadow(thing, name, op, &body, None, now(now_ms));
        Ok(call.map_err(|e| client_error(py, &e))?.0)
    }

    /// Reports every command's status changes as `command-record` events: the filter to
    /// subscribe to now (None when it already does).
    fn watch_commands(&mut self) -> Option<String> {
        self.session.watch_commands().map(str::to_owned)
    }

    /// Stops reporting command status changes: the filter to unsubscribe from (or None).
    fn unwatch_commands(&mut self) -> Option<String> {
        self.session.unwatch_commands().map(str::to_owned)
    }

    /// Reports every key made or deleted as `keyspace` events: the filter to subscribe to
    /// now (None when it already does).
    fn watch_keyspace(&mut self) -> Option<String> {
        self.session.watch_keyspace().map(str::to_owned)
    }

    /// Stops reporting keyspace events: the filter to unsubscribe from (or None).
    fn unwatch_keyspace(&mut self) -> Option<String> {
        self.session.unwatch_keyspace().map(str::to_owned)
    }

    /// The broker's Maximum Packet Size from its CONNACK (0: none).
    fn set_max_packet_size(&mut self, max: u32) {
        self.session.set_max_packet_size((max > 0).then_some(max));
    }

    /// A state store call: `request` as `mqstore.codec.encode_request` takes it.
    #[pyo3(signature = (request, *, timeout_ms=None, persist=false, fencing_token=None, now_ms=None))]
    fn call(
        &mut self,
        py: Python<'_>,
        request: &Bound<'_, PyDict>,
        timeout_ms: Option<u64>,
        persist: bool,
        fencing_token: Option<PyRef<'_, Hlc>>,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        let options = CallOptions {
            fencing_token: fencing_token.map(|t| t.0.clone()),
            persist,
            timeout_ms,
        };
        let call = self
            .session
            .call(&request_of(request)?, &options, now(now_ms));
        Ok(call.map_err(|e| client_error(py, &e))?.0)
    }

    /// Starts observing `key`; changes come as `changed` events, across reconnects.
    #[pyo3(signature = (key, *, now_ms=None))]
    fn observe(
        &mut self,
        py: Python<'_>,
        key: PyBackedBytes,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        let call = self.session.observe(shared(key), now(now_ms));
        Ok(call.map_err(|e| client_error(py, &e))?.0)
    }

    /// Stops observing `key`.
    #[pyo3(signature = (key, *, now_ms=None))]
    fn unobserve(
        &mut self,
        py: Python<'_>,
        key: PyBackedBytes,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        let call = self.session.unobserve(shared(key), now(now_ms));
        Ok(call.map_err(|e| client_error(py, &e))?.0)
    }

    /// Takes the lease on `key` for `ttl_ms`, waiting up to `wait_ms` for its holder (0: one
    /// try; None: until held). Completes with `result` the fencing token (an `Hlc`) or None;
    /// renewed while held; `lease-lost` says when it is lost.
    #[pyo3(signature = (key, ttl_ms, wait_ms, *, now_ms=None))]
    fn lease(
        &mut self,
        py: Python<'_>,
        key: PyBackedBytes,
        ttl_ms: u64,
        wait_ms: Option<u64>,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        if ttl_ms == 0 {
            return Err(PyValueError::new_err("ttl_ms must be at least 1"));
        }
        let call = self
            .session
            .lease(shared(key), ttl_ms, wait_ms, now(now_ms));
        Ok(call.map_err(|e| client_error(py, &e))?.0)
    }

    /// Releases lease `lease`: completes with whether it was still held.
    #[pyo3(signature = (lease, *, now_ms=None))]
    fn release_lease(&mut self, py: Python<'_>, lease: u64, now_ms: Option<u64>) -> PyResult<u64> {
        let call = self.session.release_lease(CallId(lease), now(now_ms));
        Ok(call.map_err(|e| client_error(py, &e))?.0)
    }

    /// A jobs operator call, as mqstore's operator API takes it (AWS's field names): e.g.
    /// `{"op": "createJob", "jobId": "fw-2", "targets": ["pump-1"], "document": {...}}`.
    #[pyo3(signature = (request, *, now_ms=None))]
    fn jobs_operate(
        &mut self,
        py: Python<'_>,
        request: &Bound<'_, PyAny>,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        let request = json_of(py, request, "request")?;
        check_operator_call(&request).map_err(PyValueError::new_err)?;
        Ok(self
            .session
            .jobs_operate_json(&request, None, now(now_ms))
            .0)
    }

    /// A jobs device call as `thing` (see `act_as`), as the AWS IoT Jobs MQTT API writes it:
    /// `api` is the topic's end after `$aws/things/{thing}/jobs/` (`get`, `start-next`,
    /// `{jobId}/get`, `$next/get`, `{jobId}/update`) and `request` its payload.
    #[pyo3(signature = (thing, api, request=None, *, now_ms=None))]
    fn jobs_device(
        &mut self,
        py: Python<'_>,
        thing: &str,
        api: &str,
        request: Option<&Bound<'_, PyAny>>,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        let body: DeviceBody = match request {
            Some(r) if !r.is_none() => serde_json::from_value(json_of(py, r, "request")?)
                .map_err(|e| PyValueError::new_err(format!("not a jobs device request: {e}")))?,
            _ => DeviceBody::default(),
        };
        let request = DeviceRequest::from_wire(api, body).map_err(PyValueError::new_err)?;
        let call = self.session.jobs_device(thing, &request, None, now(now_ms));
        Ok(call.map_err(|e| client_error(py, &e))?.0)
    }

    /// Asks the command service to send `payload` to the device's command `topic`.
    #[pyo3(signature = (topic, payload, *, profile=None, timeout_ms=None, mode="await", content_type=None, headers=None, now_ms=None))]
    #[allow(clippy::too_many_arguments)]
    fn command(
        &mut self,
        topic: &str,
        payload: PyBackedBytes,
        profile: Option<String>,
        timeout_ms: Option<u64>,
        mode: &str,
        content_type: Option<String>,
        headers: Option<Vec<(String, String)>>,
        now_ms: Option<u64>,
    ) -> PyResult<u64> {
        if topic.is_empty() {
            return Err(PyValueError::new_err("the command topic is empty"));
        }
        let mut request = CommandRequest::new(topic, shared(payload));
        if let Some(profile) = profile {
            request.profile = profile;
        }
        if let Some(timeout_ms) = timeout_ms {
            request.timeout_ms = timeout_ms;
        }
        request.mode = Mode::parse(mode).ok_or_else(|| {
            PyValueError::new_err(format!(
                "mode {mode:?}: \"await\", \"oneway\" or \"detached\""
            ))
        })?;
        request.content_type = content_type;
        request.headers = headers.unwrap_or_default();
        Ok(self.session.command(&request, now(now_ms)).0)
    }

    /// Asks for command `id`'s status record.
    #[pyo3(signature = (id, *, now_ms=None))]
    fn command_status(&mut self, id: &str, now_ms: Option<u64>) -> PyResult<u64> {
        if id.is_empty() {
            return Err(PyValueError::new_err("the command id is empty"));
        }
        Ok(self
            .session
            .command_status(id, DEFAULT_TIMEOUT_MS, now(now_ms))
            .0)
    }

    /// A message arrived on one of the subscriptions (a dict as `take_publishes` gives).
    #[pyo3(signature = (message, *, now_ms=None))]
    fn handle(&mut self, message: &Bound<'_, PyDict>, now_ms: Option<u64>) -> PyResult<()> {
        self.session.handle(&publish_of(message)?, now(now_ms));
        Ok(())
    }

    /// Fails the calls whose timeout has passed and renews what needs renewing.
    #[pyo3(signature = (*, now_ms=None))]
    fn expire(&mut self, now_ms: Option<u64>) {
        self.session.expire(now(now_ms));
    }

    /// When to call `expire` next (ms since the epoch), or None.
    fn next_deadline(&self) -> Option<u64> {
        self.session.next_deadline()
    }

    /// The connection dropped: every call in flight fails.
    fn connection_lost(&mut self) {
        self.session.connection_lost();
    }

    /// Reconnected and subscribed again: observations are registered and read back.
    #[pyo3(signature = (*, now_ms=None))]
    fn resume(&mut self, py: Python<'_>, now_ms: Option<u64>) -> PyResult<()> {
        self.session
            .resume(now(now_ms))
            .map_err(|e| client_error(py, &e))
    }

    /// The broker refused the publish of call `call` (PUBACK reason `code`, 0x80 or more).
    fn publish_refused(&mut self, call: u64, code: u8) {
        self.session.publish_refused(CallId(call), code);
    }

    /// The messages to publish (QoS 1), in order, as dicts; `call` is the call each belongs
    /// to (None for the client's own), for `publish_refused`.
    fn take_publishes<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        while let Some(out) = self.session.poll_publish() {
            list.append(publish_dict(py, &out.publish, out.call)?)?;
        }
        Ok(list)
    }

    /// What happened, in order, as dicts: `completed` (`call`, `op`, then `error` (an
    /// `MqstoreError`) or the result: `response`, `version`, `applied`, `deleted` for the
    /// state store, `result` for the others), `changed`, `jobs-notification`,
    /// `shadow-notification` (`thing`, `name`, `notification`: `{"stream", "body"}`),
    /// `command-record`, `lease-renewed`, `lease-lost`.
    fn take_events<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        while let Some(event) = self.session.poll_event() {
            list.append(event_dict(py, event)?)?;
        }
        Ok(list)
    }
}
