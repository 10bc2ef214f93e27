//! `ClientCore`, the core's client session for JavaScript, and `LeaseTerms`: calls in,
//! publishes and events out as plain objects.

use js_sys::{Array, Object, Reflect};
use mqstore_core::client::{CallId, CallOptions, ClientConfig, ClientError, Deleted};
use mqstore_core::commands::definitions::definitions_call;
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::hlc::Hlc as CoreHlc;
use mqstore_core::lease::LeaseTerms as CoreLeaseTerms;
use mqstore_core::session::{Completion, Session, SessionEvent};
use mqstore_core::shadow;
use wasm_bindgen::prelude::*;

use crate::codec::{request_of, request_to_js, response_to_js, version_to_js};
use crate::{
    bytes_to_js, client_error, get, invalid, key_of, optional_bytes, optional_u64, services, set,
};

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

    /// Uses `thing`'s device shadow `name` (`null`: its classic shadow) from now on: the
    /// filters to subscribe to (QoS 1) now, empty when it already does. Its deltas and
    /// documents come as `shadow-notification` events.
    #[wasm_bindgen(js_name = useShadow)]
    pub fn use_shadow(&mut self, thing: &str, name: Option<String>) -> Result<Array, JsValue> {
        let filters = (self.session)
            .use_shadow(thing, name.as_deref())
            .map_err(client_error)?;
        Ok(services::strings(filters))
    }

    /// Stops using a shadow: the filters to unsubscribe from (empty when it did not).
    #[wasm_bindgen(js_name = leaveShadow)]
    pub fn leave_shadow(&mut self, thing: &str, name: Option<String>) -> Array {
        services::strings(self.session.leave_shadow(thing, name.as_deref()))
    }

    /// Starts a request on a shadow in use (see `useShadow`): `op` is `get`, `update` (`body`:
    /// `{state, version?}`) or `delete`. Completes with the `/accepted` document as `result`;
    /// a rejection is an error with AWS's code as its `status`.
    pub fn shadow(
        &mut self,
        thing: &str,
        name: Option<String>,
        op: &str,
        body: JsValue,
        now_ms: f64,
    ) -> Result<f64, JsValue> {
        let op = shadow::Op::parse(op)
            .ok_or_else(|| invalid(format!("shadow op {op:?}: get, update or delete")))?;
        let body = services::json_of(&body, "the shadow request")?;
        let call = (self.session)
            .shadow(thing, name.as_deref(), op, &body, None, now_ms as u64)
            .map_err(client_error)?;
        Ok(id(call))
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

    /// Turns every key made or deleted (the server's keyspace events) into `keyspace` events
    /// from now on: the filter to subscribe to now, or `null` when it already does.
    #[wasm_bindgen(js_name = watchKeyspace)]
    pub fn watch_keyspace(&mut self) -> Option<String> {
        self.session.watch_keyspace().map(str::to_owned)
    }

    /// Stops turning keyspace events into events: the filter to unsubscribe from, or `null`
    /// when it did not.
    #[wasm_bindgen(js_name = unwatchKeyspace)]
    pub fn unwatch_keyspace(&mut self) -> Option<String> {
        self.session.unwatch_keyspace().map(str::to_owned)
    }

    /// Starts a jobs operator call: `op` (one of `OPERATOR_CALLS`: jobs, executions, thing
    /// groups, job templates; docs/protocol/jobs.md §5) with its arguments as an
    /// object. Completes with what the call asks for as `result`: the job,
    /// execution or list of a describe or list call, the answer's JSON otherwise.
    #[wasm_bindgen(js_name = jobsOperate)]
    pub fn jobs_operate(&mut self, op: &str, args: JsValue, now_ms: f64) -> Result<f64, JsValue> {
        let request = services::operator_request(op, &args)?;
        Ok(id(self.session.jobs_operate_json(
            &request,
            None,
            now_ms as u64,
        )))
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

    /// A stored-commands call: `op` (`create`, `get`, `list`, `delete`) with its fields
    /// (`{command}` or `{commandId}`). Completes with the service's answer as `result`.
    #[wasm_bindgen(js_name = commandDefinitions)]
    pub fn command_definitions(
        &mut self,
        op: &str,
        args: JsValue,
        now_ms: f64,
    ) -> Result<f64, JsValue> {
        let request = definitions_call(op, services::json_of(&args, "args")?).map_err(invalid)?;
        let timeout = mqstore_core::commands::DEFAULT_TIMEOUT_MS;
        let call = self
            .session
            .command_definitions_json(&request, timeout, now_ms as u64);
        Ok(id(call))
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
    /// `{kind: "jobs-notification", notification}`, `{kind: "shadow-notification", thing, name,
    /// notification: {stream, body}}`, `{kind: "command-record", record}`,
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
                Ok(Completion::Jobs(answer)) => {
                    set(&out, "result", services::js_of(&answer.into_json()))
                }
                Ok(Completion::CommandDefinitions(answer)) => {
                    set(&out, "result", services::js_of(&answer.into_json()))
                }
                Ok(Completion::Command(reply)) => {
                    set(&out, "result", services::reply_to_js(&reply))
                }
                Ok(Completion::CommandStatus(record)) => {
                    set(&out, "result", services::record_to_js(&record));
                }
                Ok(Completion::Lease(token)) => set(&out, "result", version_to_js(token.as_ref())),
                Ok(Completion::Released(held)) => set(&out, "result", held),
                // A completion of a newer core (the enum is open): said, not dropped.
                Ok(_) => set(
                    &out,
                    "error",
                    client_error(ClientError::Malformed(
                        "an answer this binding does not know".into(),
                    )),
                ),
                Err(e) => set(&out, "error", client_error(e)),
            }
        }
        SessionEvent::Changed {
            key,
            change,
            version,
            synthetic,
            gap,
        } => {
            set(&out, "kind", "changed");
            set(&out, "key", bytes_to_js(&key));
            match change.into_value() {
                Some(value) => set(&out, "value", bytes_to_js(&value)),
                None => set(&out, "value", JsValue::NULL),
            }
            set(&out, "version", version_to_js(version.as_ref()));
            set(&out, "synthetic", synthetic);
            set(&out, "gap", gap);
        }
        SessionEvent::Jobs(notification) => {
            set(&out, "kind", "jobs-notification");
            let json = serde_json::to_value(&notification).unwrap_or_default();
            set(&out, "notification", services::js_of(&json));
        }
        SessionEvent::Shadow(notification) => {
            set(&out, "kind", "shadow-notification");
            set(&out, "thing", notification.thing.as_str());
            set(
                &out,
                "name",
                notification
                    .name
                    .as_deref()
                    .map_or(JsValue::NULL, JsValue::from),
            );
            set(
                &out,
                "notification",
                services::js_of(&notification.to_json()),
            );
        }
        SessionEvent::CommandRecord(record) => {
            set(&out, "kind", "command-record");
            set(&out, "record", services::record_to_js(&record));
        }
        SessionEvent::Keyspace { key, created } => {
            set(&out, "kind", "keyspace");
            set(&out, "key", bytes_to_js(&key));
            set(&out, "created", created);
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
        // An event of a newer core (the enum is open): a kind callers skip.
        _ => set(&out, "kind", "unknown"),
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
