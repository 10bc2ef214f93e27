//! The client side of the state store as a state machine, with no I/O: calls become publishes,
//! incoming publishes become results and change events, and time drives timeouts.
//!
//! A driver (the tokio client, the wasm binding, a C gateway's own MQTT loop) does four things:
//! subscribe to [`ClientCore::subscriptions`] (and wait for the SUBACK) before the first call;
//! publish what the calls return at QoS 1; feed every message on those subscriptions to
//! [`ClientCore::handle`]; and call [`ClientCore::expire`] at [`ClientCore::next_deadline`].
//! After a reconnect it calls [`ClientCore::connection_lost`] (in-flight calls fail: the broker
//! dropped them) and, once subscribed again, [`ClientCore::resume`], which re-registers every
//! observed key and reads it back so that a change missed while away is reported.

pub mod commands;
pub mod jobs;
mod pending;

use std::collections::HashMap;
use std::fmt;

use bytes::Bytes;

use crate::codec::{
    DecodeError, Notification, Request, Response, decode_notification, decode_response,
};
use crate::envelope::{CONTENT_TYPE, PROTOCOL_VERSION, Properties, Publish, property};
use crate::hlc::{Hlc, HlcClock, HlcError};
use crate::presence::ServerPresence;
use crate::topics;
use crate::{ErrorKind, ServiceError};

pub(crate) use pending::Pending;

/// How long a re-registration waits for its answer before it is sent again.
const REREGISTER_TIMEOUT_MS: u64 = 3_000;

/// Identifies one call until its result arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub u64);

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call {}", self.0)
    }
}

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The state store answered `-ERR`.
    #[error("the state store refused the request: {0}")]
    Service(#[from] ServiceError),
    /// The service (state store, jobs or commands) answered with an RPC status other than
    /// 200.
    #[error("the service answered status {status}: {message}")]
    Status {
        /// The RPC status (`__stat`), e.g. 503.
        status: u16,
        /// The service's message (`__stMsg`).
        message: String,
    },
    /// No answer within the call's timeout. The request may still have been applied.
    #[error(
        "no answer from the state store within {0} ms (a write may still be applied later); is `mqstore serve` running and connected to this broker?"
    )]
    Timeout(u64),
    /// The connection was lost while the call was in flight. It may have been applied.
    #[error(
        "the connection to the broker was lost while the request was in flight; it may or may not have been applied"
    )]
    Disconnected,
    /// The answer could not be read.
    #[error("the state store's answer is malformed: {0}")]
    Malformed(String),
    /// The answer does not fit the request (e.g. a value in answer to a SET).
    #[error("unexpected answer to {command}: {response:?}")]
    Unexpected {
        /// The request's command.
        command: &'static str,
        /// What came back.
        response: Response,
    },
    /// The client's own clock could not produce a timestamp.
    #[error("the client clock failed: {0}")]
    Clock(#[from] HlcError),
    /// The broker could not be reached: nothing listens there, the name does not resolve,
    /// TLS failed, or it did not answer the CONNECT in time.
    #[error("cannot reach the MQTT broker: {0}")]
    Unreachable(String),
    /// The broker answered the CONNECT with a refusal (a CONNACK reason code, e.g. 0x86 bad
    /// user name or password, 0x87 not authorized).
    #[error(
        "the MQTT broker refused the connection: {} (reason code 0x{code:02X}){}",
        crate::reason::name(*code),
        reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
    )]
    Refused {
        /// The CONNACK reason code.
        code: u8,
        /// The broker's reason string, when it sent one.
        reason: Option<String>,
    },
    /// The broker closed the connection with a DISCONNECT and a reason code (e.g. 0x8E
    /// session taken over, 0x95 packet too large, 0x8B server shutting down). Calls in flight
    /// got no answer; a request the broker refused (too large, not authorized) was not applied.
    #[error(
        "the MQTT broker closed the connection: {} (reason code 0x{code:02X}){}; calls in flight got no answer (a request the broker refused was not applied)",
        crate::reason::name(*code),
        reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()
    )]
    BrokerDisconnected {
        /// The DISCONNECT reason code.
        code: u8,
        /// The broker's reason string, when it sent one.
        reason: Option<String>,
    },
    /// The request would be larger than the broker's maximum packet size (from its CONNACK):
    /// not sent, nothing changed.
    #[error(
        "the request is {size} bytes, more than the broker's maximum packet size of {max} bytes: not sent"
    )]
    TooLarge {
        /// The request's size in bytes.
        size: usize,
        /// The broker's (or the server's) maximum packet size.
        max: u32,
    },
    /// The broker refused the request's publish: its PUBACK carried a reason code of 0x80 or
    /// more (0x95 packet too large, 0x87 not authorized, 0x97 quota exceeded, ...). The
    /// request never reached the service: nothing changed.
    #[error(
        "the MQTT broker refused the request: {} (reason code 0x{code:02X}); it was not applied",
        crate::reason::name(*code)
    )]
    PublishRefused {
        /// The PUBACK reason code.
        code: u8,
    },
    /// The broker sent what MQTT 5 does not allow, and the connection was dropped; a request
    /// in flight may or may not have been applied.
    #[error(
        "the MQTT broker broke the MQTT 5 protocol: {0}; the request may or may not have been applied"
    )]
    Protocol(String),
    /// The jobs service refused the call: a device API `/rejected` reply or an operator
    /// error, with its code (`InvalidRequest`, `ResourceNotFound`, `VersionMismatch`,
    /// `InvalidStateTransition`, `Conflict`, ...) and, for state errors, the execution's
    /// state. Nothing changed.
    #[error("the jobs service refused the request: {code}: {message}")]
    Jobs {
        /// AWS's error code (`VersionMismatch`, `ResourceNotFound`, ...).
        code: String,
        /// The service's message.
        message: String,
        /// The execution's state, for `VersionMismatch` and `InvalidStateTransition`.
        execution_state: Option<crate::jobs::ExecutionState>,
    },
    /// The device answered the command with an error of its own (an application error, a
    /// failure code): the command ran, or tried to.
    #[error("the device answered command {id} with an error: {}", describe(answer))]
    CommandFailed {
        /// The command's id.
        id: String,
        /// The device's answer.
        answer: Box<crate::commands::Answer>,
    },
    /// The device (or its SDK) refused the command as malformed or unsupported: it did not
    /// run.
    #[error("the device refused command {id}: {}", describe(answer))]
    CommandRejected {
        /// The command's id.
        id: String,
        /// The device's answer.
        answer: Box<crate::commands::Answer>,
    },
    /// No answer within the command's timeout. The command may still have run: a late answer
    /// is recorded in its status (`mqstore command status ID`).
    #[error(
        "no answer to command {id} within its timeout; it may still have run (a late answer shows in its status)"
    )]
    CommandTimedOut {
        /// The command's id.
        id: String,
    },
}

/// A device's error answer in a few words.
fn describe(answer: &crate::commands::Answer) -> String {
    let mut parts = Vec::new();
    if answer.status == crate::commands::Status::TimedOut {
        parts.push("the device reported TIMED_OUT".to_owned());
    }
    if let Some(code) = &answer.reason_code {
        parts.push(code.clone());
    }
    if let Some(code) = answer.code {
        parts.push(format!("status {code}"));
    }
    if let Some(message) = &answer.message {
        parts.push(message.clone());
    }
    if let Some(code) = &answer.app_error_code {
        parts.push(format!("application error {code}"));
    }
    if let Some(payload) = &answer.app_error_payload {
        parts.push(payload.clone());
    }
    if parts.is_empty() {
        parts.push(String::from_utf8_lossy(&answer.payload).into_owned());
    }
    parts.join(": ")
}

impl ClientError {
    /// A stable number for this error, the same in every binding: 101..=199 are the
    /// state store's own errors ([`ServiceError::code`]), 2xx the client's.
    pub fn code(&self) -> u16 {
        self.kind().code()
    }

    /// What kind of error this is: its stable code and the name of its class in every
    /// binding.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Service(e) => e.kind(),
            ClientError::Status { .. } => ErrorKind::Status,
            ClientError::Timeout(_) => ErrorKind::RequestTimeout,
            ClientError::Disconnected => ErrorKind::ConnectionLost,
            ClientError::Malformed(_) => ErrorKind::MalformedAnswer,
            ClientError::Unexpected { .. } => ErrorKind::UnexpectedAnswer,
            ClientError::Clock(_) => ErrorKind::Clock,
            ClientError::Unreachable(_) => ErrorKind::BrokerUnreachable,
            ClientError::Refused { .. } => ErrorKind::BrokerRefused,
            ClientError::Protocol(_) => ErrorKind::BrokerProtocol,
            ClientError::TooLarge { .. } => ErrorKind::RequestTooLarge,
            ClientError::BrokerDisconnected { .. } => ErrorKind::BrokerDisconnected,
            ClientError::Jobs { .. } => ErrorKind::Jobs,
            ClientError::CommandFailed { .. } => ErrorKind::CommandFailed,
            ClientError::CommandRejected { .. } => ErrorKind::CommandRejected,
            ClientError::CommandTimedOut { .. } => ErrorKind::CommandTimeout,
            ClientError::PublishRefused { .. } => ErrorKind::PublishRefused,
        }
    }
}

/// An answer's RPC status (`__stat`): an error unless it is 200 (or absent).
pub(crate) fn status_error(props: &Properties) -> Result<(), ClientError> {
    match props.user_property(property::STATUS).unwrap_or("200") {
        "200" => Ok(()),
        status => Err(ClientError::Status {
            status: status.parse().unwrap_or(0),
            message: props
                .user_property(property::STATUS_MESSAGE)
                .unwrap_or("(no __stMsg)")
                .to_owned(),
        }),
    }
}

impl From<DecodeError> for ClientError {
    fn from(e: DecodeError) -> Self {
        ClientError::Malformed(e.to_string())
    }
}

/// Per-call options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallOptions {
    /// `__ft`: the fencing token of the lock guarding the key (SET, DEL, VDEL).
    pub fencing_token: Option<Hlc>,
    /// `aio-persistence`: ask that a SET be kept durably.
    pub persist: bool,
    /// Overrides the client's default timeout.
    pub timeout_ms: Option<u64>,
}

/// A successful answer: the response and the `__ts` it carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The state store's answer.
    pub response: Response,
    /// The key's version (SET applied or not, GET found, DEL that deleted), else the engine's
    /// clock; `None` for GET of an absent key.
    pub version: Option<Hlc>,
}

impl Answer {
    /// SET: whether it was applied (`false`: NX/NEX did not hold).
    pub fn applied(&self) -> bool {
        self.response == Response::Ok
    }

    /// GET: the value, when the key exists.
    pub fn value(&self) -> Option<Bytes> {
        match &self.response {
            Response::Value(value) => Some(value.value()),
            _ => None,
        }
    }

    /// DEL / VDEL: what happened.
    pub fn deleted(&self) -> Deleted {
        match self.response {
            Response::Deleted(0) => Deleted::Absent,
            Response::Deleted(_) => Deleted::Deleted,
            _ => Deleted::ValueMismatch,
        }
    }

    /// SET: whether it applied, and the key's version.
    pub fn into_set_result(self) -> SetResult {
        SetResult {
            applied: self.applied(),
            version: self.version,
        }
    }

    /// GET: the value and its version, when the key exists.
    pub fn into_versioned(self) -> Option<Versioned> {
        self.value().map(|value| Versioned {
            value,
            version: self.version,
        })
    }

    /// DEL / VDEL: what happened, and the version.
    pub fn into_deletion(self) -> Deletion {
        Deletion {
            outcome: self.deleted(),
            version: self.version,
        }
    }

    /// SCAN: the page's keys and the token of the next page (`None`: this was the last).
    pub fn into_page(self) -> Result<(Vec<Bytes>, Option<Bytes>), ClientError> {
        match self.response {
            Response::Keys { keys, token } => Ok((keys, token)),
            response => Err(ClientError::Unexpected {
                command: "SCAN",
                response,
            }),
        }
    }
}

/// What a SET did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetResult {
    /// False when NX/NEX did not hold.
    pub applied: bool,
    /// The key's version: the new one, or the current one when not applied.
    pub version: Option<Hlc>,
}

/// A value and the version of the SET that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The value.
    pub value: Bytes,
    /// The version of the SET that wrote it.
    pub version: Option<Hlc>,
}

/// What a DEL or VDEL did, and the version: of the deletion when it deleted, else the
/// engine's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deletion {
    /// What happened.
    pub outcome: Deleted,
    /// The delete's version, when the key was deleted.
    pub version: Option<Hlc>,
}

/// What a DEL or VDEL did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The key was deleted.
    Deleted,
    /// There was no such key.
    Absent,
    /// VDEL: the value did not match.
    ValueMismatch,
}

/// What an incoming publish meant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A call finished.
    Completed {
        /// The call it answers.
        call: CallId,
        /// Its result.
        result: Result<Answer, ClientError>,
    },
    /// An observed key changed. `synthetic` when the change was found by reading the key back
    /// after a reconnect rather than notified: the client missed the notification.
    Changed {
        /// The key that changed.
        key: Bytes,
        /// How: a new value, or deleted.
        change: Notification,
        /// The change's version, when the notification carried one.
        version: Option<Hlc>,
        /// Found by reading the key back after a reconnect (the notification was missed).
        synthetic: bool,
        /// Changes were made between the last one reported and this one that were not
        /// (overtaken by this one's notification, or lost with a server's connection), so the
        /// changes reported are not the key's whole history; this one is its state now. Known
        /// from the `mqstore-replaced` property of mqstore's notifications (never set on
        /// another server's), and set on every `synthetic` change.
        gap: bool,
    },
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// The MQTT client id: `__srcId`, and the name of this client's notification topic.
    pub client_id: String,
    /// Where answers come; defaults to [`topics::response_topic`].
    pub response_topic: String,
    /// Where requests go: [`topics::identified_invoke`] by default (see `identified`); another
    /// topic only for tests and benchmarks against other responders.
    pub request_topic: String,
    /// Use the identified topics, in this client's own `clients/{clientId}/` tree (requests,
    /// notifications, presence), so that a broker ACL can vouch for who sends what: the
    /// default. [`ClientConfig::standard_topics`] uses the protocol's shared request topic
    /// and its notification topics, for a state store other than mqstore.
    pub identified: bool,
    /// Timeout of calls that set none.
    pub default_timeout_ms: u64,
    /// Mixed into every correlation id, so two clients (or two runs of one) never share one.
    /// Drivers pass random bytes.
    pub correlation_seed: u64,
}

impl ClientConfig {
    /// Defaults: the recommended response topic, 10 s timeouts.
    pub fn new(client_id: impl Into<String>, correlation_seed: u64) -> Self {
        let client_id = client_id.into();
        Self {
            response_topic: topics::response_topic(&client_id),
            request_topic: topics::identified_invoke(&client_id),
            identified: true,
            client_id,
            default_timeout_ms: 10_000,
            correlation_seed,
        }
    }

    /// The protocol's standard topics: the shared request topic and the notification topics
    /// of the specification (what the Azure SDK clients use). Requests then name their client
    /// only in `__srcId`, which a server cannot check.
    pub fn standard_topics(mut self) -> Self {
        self.identified = false;
        self.request_topic = topics::INVOKE.to_owned();
        self
    }

    /// Where this client's presence goes: its Will, and its goodbye on closing. The engine
    /// drops the client's registrations when a message arrives there.
    pub fn presence_topic(&self) -> String {
        match self.identified {
            true => topics::identified_presence_topic(&self.client_id),
            false => topics::presence_topic(&self.client_id),
        }
    }
}

#[derive(Debug)]
struct InFlight {
    call: CallId,
    command: &'static str,
    deadline: u64,
    timeout_ms: u64,
    purpose: Purpose,
}

/// Who waits for a call's answer.
#[derive(Debug, PartialEq, Eq)]
enum Purpose {
    /// The caller: its answer is an [`Event::Completed`].
    Caller,
    /// `resume` re-registering an observed key: nobody waits, and it is sent again until
    /// answered (the engine may not have been listening yet).
    Reregister(Bytes),
    /// `observe` reading the key once registered: where the observation starts.
    Baseline(Bytes),
    /// `resume` reading an observed key back, to compare with what the client last saw; with
    /// the key's [`Observed::heard`] when the read was sent.
    Recheck(Bytes, u64),
}

/// What the client last knew of an observed key.
#[derive(Debug, Clone, Default)]
struct Observed {
    /// The version of the last change seen (None: the key was absent when last read).
    version: Option<Hlc>,
    /// Whether the key held a value after that change (false after a deletion).
    present: bool,
    /// Whether `version` is known yet (the observation's first read sets it without an
    /// event).
    known: bool,
    /// Absent when the observation went down (a reconnect, a node that forgot it) and not
    /// seen since: changes made and deleted again meanwhile cannot be ruled out (the store
    /// keeps no tombstone), so the next change reported says `gap` — whether the read-back
    /// answers first (absent, as it was) or a notification overtakes it.
    unsure: bool,
    /// Notifications received for the key so far: one that arrives while a read-back is on
    /// its way may be of a change made after the read (the server answers a read of an absent
    /// key with no version to compare).
    heard: u64,
}

impl Observed {
    /// The version of the value the key holds as far as the observer knows (None: absent).
    fn holds(&self) -> Option<&Hlc> {
        self.version.as_ref().filter(|_| self.present)
    }

    /// Notes a change (or read) of version `version` after which the key is `present` or not.
    fn saw(&mut self, version: Option<Hlc>, present: bool) {
        self.version = version;
        self.present = present;
        self.known = true;
        self.unsure = false;
    }
}

/// The state store client, without I/O.
#[derive(Debug)]
pub struct ClientCore {
    config: ClientConfig,
    clock: HlcClock,
    next_call: u64,
    in_flight: HashMap<Bytes, InFlight>,
    observed: HashMap<Bytes, Observed>,
    /// What the state machine decided to send on its own (see [`ClientCore::take_publishes`]).
    outgoing: Vec<Publish>,
    /// Each server node's epoch and the largest packet it accepts, from its presence.
    servers: HashMap<String, ServerPresence>,
    /// The broker's maximum packet size, from its CONNACK.
    max_packet_size: Option<u32>,
    /// When to renew this client's registrations (a KEYNOTIFY of one observed key renews the
    /// lease of all of them), while it observes keys and a server announced a lease.
    renew_at: Option<u64>,
}

impl ClientCore {
    /// A client. Fails when the client id contains `:` (it is the node part of its HLC).
    pub fn new(config: ClientConfig) -> Result<Self, HlcError> {
        Ok(Self {
            clock: HlcClock::new(config.client_id.as_str())?,
            config,
            next_call: 0,
            in_flight: HashMap::new(),
            observed: HashMap::new(),
            outgoing: Vec::new(),
            servers: HashMap::new(),
            renew_at: None,
            max_packet_size: None,
        })
    }

    /// This client's id.
    pub fn client_id(&self) -> &str {
        &self.config.client_id
    }

    /// The topic filters to subscribe to (QoS 1), and wait for, before the first call.
    pub fn subscriptions(&self) -> [String; 3] {
        let notify = match self.config.identified {
            true => topics::identified_notify_filter(&self.config.client_id),
            false => topics::notify_filter(&self.config.client_id),
        };
        [
            self.config.response_topic.clone(),
            notify,
            topics::SERVER_PRESENCE_FILTER.to_owned(),
        ]
    }

    /// Where this client's presence goes ([`ClientConfig::presence_topic`]).
    pub fn presence_topic(&self) -> String {
        self.config.presence_topic()
    }

    /// The broker's Maximum Packet Size from its CONNACK (`None`: no limit). Calls whose
    /// publish would be larger than it, or than a server node accepts (from the node's
    /// presence), fail with [`ClientError::TooLarge`] before anything is sent.
    pub fn set_max_packet_size(&mut self, max: Option<u32>) {
        self.max_packet_size = max;
    }

    /// Calls waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// The keys being observed.
    pub fn observed_keys(&self) -> impl Iterator<Item = &Bytes> {
        self.observed.keys()
    }

    /// Starts a call: the publish to send (QoS 1) and the id its result will carry.
    pub fn call(
        &mut self,
        request: &Request,
        options: &CallOptions,
        now_ms: u64,
    ) -> Result<(CallId, Publish), ClientError> {
        self.start(request, options, now_ms, Purpose::Caller)
    }

    /// Starts observing `key`: registers it with the engine (KEYNOTIFY) and reads it (GET), so
    /// that the client knows the version it starts from; it is registered again after every
    /// reconnect. Publish both messages, in order. Changes arrive as [`Event::Changed`]; the
    /// returned call is the registration's.
    pub fn observe(
        &mut self,
        key: Bytes,
        now_ms: u64,
    ) -> Result<(CallId, Vec<Publish>), ClientError> {
        let register = Request::KeyNotify {
            key: key.clone(),
            stop: false,
        };
        let (call, registration) = self.call(&register, &CallOptions::default(), now_ms)?;
        let read = Request::Get { key: key.clone() };
        let (_, baseline) = self.start(
            &read,
            &CallOptions::default(),
            now_ms,
            Purpose::Baseline(key.clone()),
        )?;
        self.observed.entry(key).or_default();
        Ok((call, vec![registration, baseline]))
    }

    /// Stops observing `key` (KEYNOTIFY STOP).
    pub fn unobserve(&mut self, key: Bytes, now_ms: u64) -> Result<(CallId, Publish), ClientError> {
        self.observed.remove(&key);
        let request = Request::KeyNotify { key, stop: true };
        self.call(&request, &CallOptions::default(), now_ms)
    }

    fn start(
        &mut self,
        request: &Request,
        options: &CallOptions,
        now_ms: u64,
        purpose: Purpose,
    ) -> Result<(CallId, Publish), ClientError> {
        let call = CallId(self.next_call);
        self.next_call += 1;
        let correlation = self.correlation(call);
        let timeout_ms = options.timeout_ms.unwrap_or(self.config.default_timeout_ms);
        let pair = |n: &str, v: String| (n.to_owned(), v);
        let mut user_properties = vec![
            pair(property::SOURCE_ID, self.config.client_id.clone()),
            pair(property::PROTOCOL_VERSION, PROTOCOL_VERSION.to_owned()),
            // Every request carries the client's HLC; the engine requires it on SET.
            pair(property::TIMESTAMP, self.clock.tick(now_ms)?.to_string()),
        ];
        if let Some(token) = &options.fencing_token {
            user_properties.push(pair(property::FENCING_TOKEN, token.to_string()));
        }
        if options.persist {
            user_properties.push(pair(property::PERSISTENCE, "true".to_owned()));
        }
        let publish = Publish {
            topic: self.config.request_topic.clone(),
            payload: request.to_bytes(),
            qos: 1,
            properties: Properties {
                payload_format_indicator: Some(0),
                // Whole seconds, rounded up, so the broker drops what nobody waits for.
                message_expiry_interval: Some(timeout_ms.div_ceil(1000).max(1) as u32),
                content_type: Some(CONTENT_TYPE.to_owned()),
                response_topic: Some(self.config.response_topic.clone()),
                correlation_data: Some(correlation.clone()),
                user_properties,
            },
        };
        if let Some(max) = self.request_limit() {
            let size = publish.packet_size();
            if size > max as usize {
                return Err(ClientError::TooLarge { size, max });
            }
        }
        self.in_flight.insert(
            correlation,
            InFlight {
                call,
                command: request.command().as_str(),
                deadline: now_ms.saturating_add(timeout_ms),
                timeout_ms,
                purpose,
            },
        );
        Ok((call, publish))
    }

    /// 16 bytes, unique per call: the seed, then the call number.
    fn correlation(&self, call: CallId) -> Bytes {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.config.correlation_seed.to_be_bytes());
        id[8..].copy_from_slice(&call.0.to_be_bytes());
        Bytes::copy_from_slice(&id)
    }

    /// Interprets a publish that arrived on one of [`ClientCore::subscriptions`]. Returns
    /// `None` for messages that are not for this client or answer no call in flight (a late
    /// answer after a timeout, say).
    pub fn handle(&mut self, publish: &Publish, now_ms: u64) -> Option<Event> {
        if publish.topic == self.config.response_topic {
            self.handle_response(publish, now_ms)
        } else if let Some(node) = topics::node_of_server_presence_topic(&publish.topic) {
            self.handle_server_presence(node, &publish.payload, now_ms);
            None
        } else {
            self.handle_notification(publish, now_ms)
        }
    }

    /// A server node's presence: remember its epoch and limit; a new epoch means the node
    /// restarted and forgot this client's registrations, so every observed key is registered
    /// again and read back (changes missed meanwhile arrive as synthetic events).
    fn handle_server_presence(&mut self, node: String, payload: &[u8], now_ms: u64) {
        let Some(presence) = ServerPresence::parse(payload) else {
            return;
        };
        if !presence.serves().state_store {
            // A node of jobs and commands only: none of this client's state store business.
            self.servers.remove(&node);
            return;
        }
        let online = presence.online;
        let epoch = presence.epoch.clone();
        let restarted = match self.servers.insert(node, presence) {
            Some(before) => before.epoch != epoch && online,
            None => false,
        };
        if self.renew_at.is_none() {
            self.renew_at = self.renewal_period().map(|period| now_ms + period);
        }
        if restarted {
            // Only the clock can fail here; the next restart or reconnect tries again.
            if let Ok(publishes) = self.resume(now_ms) {
                self.outgoing.extend(publishes);
            }
        }
    }

    /// The largest request the broker and every server node take.
    fn request_limit(&self) -> Option<u32> {
        self.servers
            .values()
            .filter(|s| s.online)
            .filter_map(|s| s.max_packet_size)
            .chain(self.max_packet_size)
            .min()
    }

    /// How often to renew registrations: a third of the shortest lease a server announced.
    fn renewal_period(&self) -> Option<u64> {
        let lease = self
            .servers
            .values()
            .filter(|s| s.online)
            .filter_map(|s| s.registration_lease_ms)
            .min()?;
        Some((lease / 3).max(1))
    }

    fn handle_response(&mut self, publish: &Publish, now_ms: u64) -> Option<Event> {
        let correlation = publish.properties.correlation_data.as_ref()?;
        let in_flight = self.in_flight.remove(correlation)?;
        let result = self.read_answer(publish, now_ms);
        if result.is_err()
            && matches!(
                in_flight.purpose,
                Purpose::Reregister(_) | Purpose::Recheck(..)
            )
        {
            // Refused (the store failed: 503) or unreadable: the observation is not restored
            // yet. Tried again when its timer runs out, as one without an answer is, so a
            // store that is down is not asked in a tight loop.
            self.in_flight.insert(correlation.clone(), in_flight);
            return None;
        }
        match in_flight.purpose {
            Purpose::Caller => Some(Event::Completed {
                call: in_flight.call,
                result: result.and_then(|answer| check_kind(in_flight.command, answer)),
            }),
            Purpose::Reregister(_) => None,
            // What changed while the client was away.
            Purpose::Baseline(key) => self.baseline(key, result.ok()?),
            Purpose::Recheck(key, heard) => self.recheck(key, heard, result.ok()?, now_ms),
        }
    }

    fn read_answer(&mut self, publish: &Publish, now_ms: u64) -> Result<Answer, ClientError> {
        let props = &publish.properties;
        status_error(props)?;
        let version = match props.user_property(property::TIMESTAMP) {
            Some(ts) => {
                let version = Hlc::parse(ts).map_err(|e| ClientError::Malformed(e.to_string()))?;
                // Keep this client's clock ahead of every version it has seen.
                let _ = self.clock.receive(&version, now_ms);
                Some(version)
            }
            None => None,
        };
        match decode_response(&publish.payload)? {
            Response::Error(e) => Err(ClientError::Service(e)),
            response => Ok(Answer { response, version }),
        }
    }

    fn handle_notification(&mut self, publish: &Publish, now_ms: u64) -> Option<Event> {
        let key = Bytes::from(topics::key_of_notify_topic(&publish.topic)?);
        let change = decode_notification(&publish.payload).ok()?;
        let properties = &publish.properties;
        let version = properties
            .user_property(property::TIMESTAMP)
            .and_then(|ts| Hlc::parse(ts).ok());
        if let Some(version) = &version {
            let _ = self.clock.receive(version, now_ms);
        }
        // The version of the value this change replaced, when the server says (mqstore's do;
        // empty: the key was absent).
        let replaced = properties
            .user_property(property::REPLACED)
            .and_then(|text| match text {
                "" => Some(None),
                text => Hlc::parse(text).ok().map(Some),
            });
        let mut gap = false;
        if let Some(observed) = self.observed.get_mut(&key) {
            observed.heard += 1;
            // Brokers keep order per topic only (and several server nodes each publish their
            // own): a notification may come after a newer one, or after the observation's
            // first read already saw its version. What is not newer than what the observer
            // saw is a repeat or overtaken: not reported, so that versions never go back.
            if observed.known
                && let (Some(seen), Some(now)) = (&observed.version, &version)
                && now <= seen
            {
                return None;
            }
            // A change that did not replace what the observer saw last follows one it never
            // heard of (overtaken by this one, or lost with a server's connection): said, so
            // that nobody reads the changes reported as the key's whole history.
            gap = observed.known
                && (observed.unsure
                    || replaced
                        .as_ref()
                        .is_some_and(|replaced| replaced.as_ref() != observed.holds()));
            let present = matches!(change, Notification::Set(_));
            observed.saw(version.clone(), present);
        }
        Some(Event::Changed {
            key,
            change,
            version,
            synthetic: false,
            gap,
        })
    }

    /// The observation's first read: where it starts, not a change (unless a notification or
    /// a read after a reconnect got there first).
    fn baseline(&mut self, key: Bytes, answer: Answer) -> Option<Event> {
        let observed = self.observed.get_mut(&key)?;
        if !observed.known {
            match answer.response {
                Response::Value(_) => observed.saw(answer.version, true),
                _ => observed.saw(None, false),
            }
        }
        None
    }

    fn recheck(&mut self, key: Bytes, heard: u64, answer: Answer, now_ms: u64) -> Option<Event> {
        let observed = self.observed.get_mut(&key)?;
        let (change, version) = match answer.response {
            Response::Value(value) => (Notification::Set(value), answer.version),
            // A notification came while the read was on its way: the absence it found may be
            // older than that change (the answer has no version to tell), so the key is read
            // again, after the notification. (Taken as news, an old absence reported a
            // deletion that never followed the change just reported.)
            Response::Absent if observed.heard != heard => {
                if let Ok(read) = self.read_back(key, now_ms) {
                    self.outgoing.push(read);
                }
                return None;
            }
            Response::Absent => (Notification::Delete, None),
            _ => return None,
        };
        let present = matches!(change, Notification::Set(_));
        // A change found by reading follows changes not heard of: `gap` is set on it.
        let found = |version| Event::Changed {
            key,
            change,
            version,
            synthetic: true,
            gap: true,
        };
        if !observed.known {
            // The first read was lost with the connection: what the key held when the
            // observation began is unknown, so a value it holds now is reported (it may not
            // have changed; a change must not go unreported). An absent key is not: the
            // client never saw it present.
            observed.saw(version.clone(), present);
            observed.unsure = !present;
            return present.then(|| found(version));
        }
        // Report only what is newer than what the client saw (a notification may overtake
        // the read's answer), and an absence only where the client saw a value.
        let changed = match (&observed.version, &version) {
            (Some(seen), Some(now)) => now > seen,
            (None, Some(_)) => true,
            (_, None) => observed.present,
        };
        if !changed {
            // Still absent: whatever happened meanwhile left no trace to compare.
            observed.unsure |= version.is_none();
            return None;
        }
        observed.saw(version.clone(), present);
        Some(found(version))
    }

    /// When the next call times out.
    pub fn next_deadline(&self) -> Option<u64> {
        let renew = self.renew_at.filter(|_| !self.observed.is_empty());
        self.in_flight
            .values()
            .map(|f| f.deadline)
            .chain(renew)
            .min()
    }

    /// Fails every call whose timeout has passed. A re-registration of an observed key, or
    /// its read-back, that got no answer or an error (the store down: 503) is sent again,
    /// both of them: take the publishes with [`ClientCore::take_publishes`] after each
    /// `expire`.
    pub fn expire(&mut self, now_ms: u64) -> Vec<Event> {
        let due: Vec<Bytes> = self
            .in_flight
            .iter()
            .filter(|(_, f)| f.deadline <= now_ms)
            .map(|(c, _)| c.clone())
            .collect();
        let mut retry = Vec::new();
        for id in &due {
            if let Some(InFlight {
                purpose: Purpose::Reregister(key) | Purpose::Recheck(key, _),
                ..
            }) = self.in_flight.get(id)
                && self.observed.contains_key(key)
                && !retry.contains(key)
            {
                retry.push(key.clone());
            }
        }
        let events = self.fail(due, &|f| ClientError::Timeout(f.timeout_ms));
        if self.renew_at.is_some_and(|at| at <= now_ms) {
            self.renew_at = self.renewal_period().map(|period| now_ms + period);
            // One KEYNOTIFY renews the lease of every registration of this client.
            if let Some(key) = self.observed.keys().next().cloned()
                && !retry.contains(&key)
            {
                let register = Request::KeyNotify {
                    key: key.clone(),
                    stop: false,
                };
                let options = self.reregister_options();
                if let Ok((_, renewal)) =
                    self.start(&register, &options, now_ms, Purpose::Reregister(key))
                {
                    self.outgoing.push(renewal);
                }
            }
        }
        for key in retry {
            match self.reregister(key, now_ms) {
                Ok(publishes) => self.outgoing.extend(publishes),
                // Only the clock can fail here; the next resume tries again.
                Err(_) => break,
            }
        }
        events
    }

    /// What the state machine decided to send on its own, in order: re-registrations that
    /// got no answer ([`ClientCore::expire`]), and every observed key registered again when a
    /// server node restarted ([`ClientCore::handle`] of its presence). Publish it after each
    /// `handle` and `expire`.
    pub fn take_publishes(&mut self) -> Vec<Publish> {
        std::mem::take(&mut self.outgoing)
    }

    /// The broker refused the publish of call `call` (a PUBACK reason code `code` of 0x80 or
    /// more): the call fails with [`ClientError::PublishRefused`]. `None` when `call` is not
    /// a caller's call in flight (the client's own re-registrations are sent again as usual).
    pub fn publish_refused(&mut self, call: CallId, code: u8) -> Option<Event> {
        let id = self
            .in_flight
            .iter()
            .find(|(_, f)| f.call == call && f.purpose == Purpose::Caller)
            .map(|(id, _)| id.clone())?;
        self.fail(vec![id], &|_| ClientError::PublishRefused { code })
            .pop()
    }

    /// The connection dropped: every call in flight fails (the broker forgot them).
    pub fn connection_lost(&mut self) -> Vec<Event> {
        self.connection_failed(ClientError::Disconnected)
    }

    /// The connection dropped for a known reason (e.g. [`ClientError::Protocol`]): every call
    /// in flight fails with it.
    pub fn connection_failed(&mut self, error: ClientError) -> Vec<Event> {
        let all: Vec<Bytes> = self.in_flight.keys().cloned().collect();
        self.fail(all, &|_| error.clone())
    }

    // `dyn`: one copy of this (and of its sort) for every caller, not one per closure.
    fn fail(&mut self, ids: Vec<Bytes>, error: &dyn Fn(&InFlight) -> ClientError) -> Vec<Event> {
        let mut failed: Vec<(CallId, ClientError)> = ids
            .into_iter()
            .filter_map(|id| self.in_flight.remove(&id))
            .filter(|f| f.purpose == Purpose::Caller)
            .map(|f| (f.call, error(&f)))
            .collect();
        failed.sort_by_key(|(call, _)| *call);
        failed
            .into_iter()
            .map(|(call, e)| Event::Completed {
                call,
                result: Err(e),
            })
            .collect()
    }

    /// After a reconnect, once subscribed again: KEYNOTIFY and then GET for every observed key
    /// (in that order, so no change can slip between them). The GETs' answers come back as
    /// synthetic [`Event::Changed`] when the key changed while the client was away.
    pub fn resume(&mut self, now_ms: u64) -> Result<Vec<Publish>, ClientError> {
        let mut keys: Vec<Bytes> = self.observed.keys().cloned().collect();
        keys.sort();
        let mut publishes = Vec::with_capacity(keys.len() * 2);
        for key in keys {
            publishes.extend(self.reregister(key, now_ms)?);
        }
        Ok(publishes)
    }

    /// KEYNOTIFY `key`, then GET it: the two publishes that restore one observation.
    fn reregister(&mut self, key: Bytes, now_ms: u64) -> Result<[Publish; 2], ClientError> {
        if let Some(observed) = self.observed.get_mut(&key)
            && observed.known
            && !observed.present
        {
            // A change heard before the read-back answers, having replaced nothing, cannot
            // say the key stayed absent meanwhile.
            observed.unsure = true;
        }
        let register = Request::KeyNotify {
            key: key.clone(),
            stop: false,
        };
        let (_, register) = self.start(
            &register,
            &self.reregister_options(),
            now_ms,
            Purpose::Reregister(key.clone()),
        )?;
        Ok([register, self.read_back(key, now_ms)?])
    }

    /// GET `key`, to compare with what the observer last saw.
    fn read_back(&mut self, key: Bytes, now_ms: u64) -> Result<Publish, ClientError> {
        let heard = self.observed.get(&key).map_or(0, |o| o.heard);
        let get = Request::Get { key: key.clone() };
        let options = self.reregister_options();
        let (_, read) = self.start(&get, &options, now_ms, Purpose::Recheck(key, heard))?;
        Ok(read)
    }

    /// A re-registration's and a read-back's options. Unanswered, they are sent again: soon,
    /// so a notification missed meanwhile shows up as a synthetic change quickly (KEYNOTIFY
    /// is idempotent, GET harmless).
    fn reregister_options(&self) -> CallOptions {
        CallOptions {
            timeout_ms: Some(self.config.default_timeout_ms.min(REREGISTER_TIMEOUT_MS)),
            ..CallOptions::default()
        }
    }
}

/// Checks that an answer is of a kind the command can have.
fn check_kind(command: &'static str, answer: Answer) -> Result<Answer, ClientError> {
    let fits = matches!(
        (&answer.response, command),
        (Response::Ok | Response::NotApplied, "SET")
            | (Response::Value(_) | Response::Absent, "GET")
            | (Response::Deleted(_), "DEL")
            | (Response::Deleted(_) | Response::NotApplied, "VDEL")
            | (Response::Ok | Response::Deleted(_), "KEYNOTIFY")
            | (Response::Keys { .. }, "SCAN")
    );
    if fits {
        Ok(answer)
    } else {
        Err(ClientError::Unexpected {
            command,
            response: answer.response,
        })
    }
}
