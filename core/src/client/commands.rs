//! The caller's side of the command service ([`crate::commands::wire`]), without I/O: a call
//! becomes a request publish; the service's answer (or the caller's own deadline) becomes a
//! [`CommandsEvent`].

use bytes::Bytes;

use super::{CallId, ClientError, Pending};
use crate::commands::definitions::{DEFINITIONS_TOPIC, DefinitionsAnswer, DefinitionsRequest};
use crate::commands::wire::{INVOKE_TOPIC, STATUS_TOPIC, name};
use crate::commands::{Answer, CommandRequest, Record, Status, expiry_seconds};
use crate::envelope::{PROTOCOL_VERSION, Properties, Publish, property};

/// What a command call returned to its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandReply {
    /// The command's id.
    pub id: String,
    /// SUCCEEDED for an awaited command (failures are errors); DELIVERED for a one-way one;
    /// SENT for a detached one.
    pub status: Status,
    /// The device's answer (empty without one).
    pub payload: Bytes,
    /// The answer's content type, when the device gave one.
    pub content_type: Option<String>,
    /// The device's status code, when its profile reads one.
    pub device_status: Option<i64>,
}

/// A finished call of the commands client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CommandsEvent {
    /// A command call finished.
    Invoked {
        /// The call it answers.
        call: CallId,
        /// Its result.
        result: Result<CommandReply, ClientError>,
    },
    /// A status call finished.
    Status {
        /// The call it answers.
        call: CallId,
        /// Its result.
        result: Result<Record, ClientError>,
    },
    /// A stored-commands call ([`CommandsClient::definitions`]): its JSON answer.
    Definitions {
        /// The call it answers.
        call: CallId,
        /// Its result.
        result: Result<DefinitionsReply, ClientError>,
    },
}

/// A stored-commands call's answer: the service's JSON, read as a [`DefinitionsAnswer`] by
/// [`DefinitionsReply::read`]. It stays JSON until read, as a [`JobsAnswer`] does: bindings
/// that hand JSON to their callers take it as it is, and carry no reader they never call.
///
/// [`JobsAnswer`]: crate::client::jobs::JobsAnswer
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionsReply {
    json: serde_json::Value,
}

impl DefinitionsReply {
    /// The answer as its type: the stored command, the list, or whether one was deleted.
    pub fn read(self) -> Result<DefinitionsAnswer, ClientError> {
        serde_json::from_value(self.json)
            .map_err(|e| ClientError::Malformed(format!("not a stored-commands answer: {e}")))
    }

    /// The answer as the service sent it.
    pub fn into_json(self) -> serde_json::Value {
        self.json
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invoke,
    Status,
    Definitions,
}

/// How much longer than the command's timeout a caller waits for the service's answer: the
/// service answers TIMED_OUT at the command's deadline, and that answer must not lose a race
/// against the caller's own timer.
pub const CALLER_MARGIN_MS: u64 = 5_000;

/// The caller's side of the command service, without I/O (like
/// [`crate::client::jobs::JobsClient`]): subscribe to [`CommandsClient::response_subscription`],
/// publish what the calls return at QoS 1, feed what arrives there to
/// [`CommandsClient::handle`], call [`CommandsClient::expire`] at the next deadline.
#[derive(Debug)]
pub struct CommandsClient {
    client_id: String,
    response_topic: String,
    waiting: Pending<Kind>,
}

impl CommandsClient {
    /// A client `client_id`; `seed` (random bytes) makes its tokens unique across runs.
    pub fn new(client_id: impl Into<String>, seed: u64) -> Self {
        let client_id = client_id.into();
        Self {
            response_topic: format!("clients/{client_id}/mqstore/commands/v1/response"),
            client_id,
            waiting: Pending::new(seed),
        }
    }

    /// The filter to subscribe to for the service's answers.
    pub fn response_subscription(&self) -> &str {
        &self.response_topic
    }

    /// Calls waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.waiting.len()
    }

    /// Asks the service to send `command`.
    pub fn invoke(&mut self, command: &CommandRequest, now_ms: u64) -> (CallId, Publish) {
        let pair = |n: &str, v: String| (n.to_owned(), v);
        let wait_ms = command.timeout_ms.saturating_add(CALLER_MARGIN_MS);
        let (call, mut publish) = self.request(
            INVOKE_TOPIC,
            command.payload.clone(),
            Kind::Invoke,
            wait_ms,
            now_ms,
        );
        let props = &mut publish.properties;
        props.content_type = command.content_type.clone();
        props.user_properties.extend([
            pair(name::TOPIC, command.topic.clone()),
            pair(name::PROFILE, command.profile.clone()),
            pair(name::TIMEOUT_MS, command.timeout_ms.to_string()),
            pair(name::MODE, command.mode.as_str().to_owned()),
        ]);
        if let Some(stored) = &command.command {
            props
                .user_properties
                .push(pair(name::COMMAND, stored.clone()));
            if !command.parameters.is_empty() {
                let parameters = serde_json::Value::Object(command.parameters.clone());
                props
                    .user_properties
                    .push(pair(name::PARAMETERS, parameters.to_string()));
            }
        }
        props.user_properties.extend(
            command
                .headers
                .iter()
                .map(|(n, v)| (format!("{}{n}", name::HEADER_PREFIX), v.clone())),
        );
        (call, publish)
    }

    /// Asks the service for command `id`'s status record.
    pub fn status(&mut self, id: &str, timeout_ms: u64, now_ms: u64) -> (CallId, Publish) {
        let payload = Bytes::from(id.to_owned());
        self.request(STATUS_TOPIC, payload, Kind::Status, timeout_ms, now_ms)
    }

    /// A stored-commands call ([`crate::commands::definitions`]).
    pub fn definitions(
        &mut self,
        request: &DefinitionsRequest,
        timeout_ms: u64,
        now_ms: u64,
    ) -> (CallId, Publish) {
        // A request always serializes (string keys, no floats but a parameter's default).
        let payload = Bytes::from(serde_json::to_vec(request).unwrap_or_default());
        self.definitions_payload(payload, timeout_ms, now_ms)
    }

    /// A stored-commands call given as its JSON, sent as it is: the service checks it (a
    /// request that fits no call is refused with 400). For bindings that take the wire's
    /// JSON and need no typed request.
    pub fn definitions_json(
        &mut self,
        request: &serde_json::Value,
        timeout_ms: u64,
        now_ms: u64,
    ) -> (CallId, Publish) {
        let payload = Bytes::from(request.to_string());
        self.definitions_payload(payload, timeout_ms, now_ms)
    }

    fn definitions_payload(
        &mut self,
        payload: Bytes,
        timeout_ms: u64,
        now_ms: u64,
    ) -> (CallId, Publish) {
        let (call, mut publish) = self.request(
            DEFINITIONS_TOPIC,
            payload,
            Kind::Definitions,
            timeout_ms,
            now_ms,
        );
        publish.properties.content_type = Some("application/json".into());
        (call, publish)
    }

    /// A request to the service, and the call that waits for its answer.
    fn request(
        &mut self,
        topic: &str,
        payload: Bytes,
        kind: Kind,
        wait_ms: u64,
        now_ms: u64,
    ) -> (CallId, Publish) {
        let (call, token) = self.waiting.begin();
        let publish = Publish {
            topic: topic.to_owned(),
            payload,
            qos: 1,
            properties: Properties {
                message_expiry_interval: Some(expiry_seconds(wait_ms)),
                response_topic: Some(self.response_topic.clone()),
                correlation_data: Some(Bytes::from(token.clone().into_bytes())),
                user_properties: vec![
                    (property::SOURCE_ID.into(), self.client_id.clone()),
                    (property::PROTOCOL_VERSION.into(), PROTOCOL_VERSION.into()),
                ],
                ..Properties::default()
            },
        };
        self.waiting.wait(token, call, kind, wait_ms, now_ms);
        (call, publish)
    }

    /// Interprets a publish on the response subscription; `None` when no call waits for it.
    pub fn handle(&mut self, publish: &Publish) -> Option<CommandsEvent> {
        if publish.topic != self.response_topic {
            return None;
        }
        let token = std::str::from_utf8(publish.properties.correlation_data.as_deref()?).ok()?;
        let (call, kind) = self.waiting.take(token)?;
        Some(match kind {
            Kind::Invoke => CommandsEvent::Invoked {
                call,
                result: read_reply(publish),
            },
            Kind::Status => CommandsEvent::Status {
                call,
                result: crate::client::status_error(&publish.properties).and_then(|()| {
                    Record::from_json(&publish.payload).map_err(|e| {
                        ClientError::Malformed(format!("the status record is not JSON: {e}"))
                    })
                }),
            },
            Kind::Definitions => CommandsEvent::Definitions {
                call,
                result: crate::client::status_error(&publish.properties).and_then(|()| {
                    match serde_json::from_slice(&publish.payload) {
                        Ok(json) => Ok(DefinitionsReply { json }),
                        Err(e) => Err(ClientError::Malformed(format!(
                            "the stored-commands answer is not JSON: {e}"
                        ))),
                    }
                }),
            },
        })
    }

    /// When the next call times out (ms since the epoch); None when none waits.
    pub fn next_deadline(&self) -> Option<u64> {
        self.waiting.next_deadline()
    }

    /// Fails every call whose time is up.
    pub fn expire(&mut self, now_ms: u64) -> Vec<CommandsEvent> {
        failed(self.waiting.expire(now_ms))
    }

    /// The connection dropped: every call in flight fails with `error`.
    pub fn connection_failed(&mut self, error: ClientError) -> Vec<CommandsEvent> {
        failed(self.waiting.fail_all(error))
    }

    /// The broker refused call `call`'s publish (a PUBACK reason code `code` of 0x80 or
    /// more): it fails with [`ClientError::PublishRefused`].
    pub fn publish_refused(&mut self, call: CallId, code: u8) -> Option<CommandsEvent> {
        let refused = ClientError::PublishRefused { code };
        failed(self.waiting.fail_call(call, refused).into_iter().collect()).pop()
    }
}

fn failed(calls: Vec<(CallId, Kind, ClientError)>) -> Vec<CommandsEvent> {
    calls
        .into_iter()
        .map(|(call, kind, error)| match kind {
            Kind::Invoke => CommandsEvent::Invoked {
                call,
                result: Err(error),
            },
            Kind::Status => CommandsEvent::Status {
                call,
                result: Err(error),
            },
            Kind::Definitions => CommandsEvent::Definitions {
                call,
                result: Err(error),
            },
        })
        .collect()
}

/// The service's answer to an invoke: the reply, or the typed error its status means.
fn read_reply(publish: &Publish) -> Result<CommandReply, ClientError> {
    let props = &publish.properties;
    crate::client::status_error(props)?;
    let text = |name| props.user_property(name).map(str::to_owned);
    let id = text(name::COMMAND_ID).ok_or_else(|| {
        ClientError::Malformed("the command service's answer has no commandId".into())
    })?;
    let status = props
        .user_property(name::STATUS)
        .and_then(Status::parse)
        .ok_or_else(|| {
            ClientError::Malformed("the command service's answer has no status".into())
        })?;
    let device_status = props
        .user_property(name::DEVICE_STATUS)
        .and_then(|s| s.parse().ok());
    let answer = || Answer {
        status,
        payload: publish.payload.clone(),
        content_type: props.content_type.clone(),
        code: device_status,
        message: text(name::MESSAGE),
        app_error_code: text(name::APP_ERROR_CODE),
        app_error_payload: text(name::APP_ERROR_PAYLOAD),
        reason_code: text(name::REASON_CODE),
        result: None,
    };
    match status {
        Status::Failed => Err(ClientError::CommandFailed {
            id,
            answer: Box::new(answer()),
        }),
        Status::Rejected => Err(ClientError::CommandRejected {
            id,
            answer: Box::new(answer()),
        }),
        // The device's own TIMED_OUT (AWS IoT commands) is its answer: it failed in time.
        Status::TimedOut if props.user_property(name::BY_DEVICE).is_some() => {
            Err(ClientError::CommandFailed {
                id,
                answer: Box::new(answer()),
            })
        }
        Status::TimedOut => Err(ClientError::CommandTimedOut { id }),
        _ => Ok(CommandReply {
            id,
            status,
            payload: publish.payload.clone(),
            content_type: props.content_type.clone(),
            device_status,
        }),
    }
}
