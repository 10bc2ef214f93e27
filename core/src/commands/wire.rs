//! The command service's own API, over MQTT 5 request/response like the state store's:
//! callers publish to [`INVOKE_TOPIC`] (send a command) or [`STATUS_TOPIC`] (read a status
//! record) with a response topic and correlation data; every status change is published on
//! [`events_topic`].
//!
//! An invoke request's payload is the command's payload, its content type the command's; the
//! rest are user properties: `topic` (the device's command topic, required), `profile`
//! (default `mqtt5`), `timeoutMs` (default 10000), `mode` (`await`, `oneway`, `detached`).
//! The answer's payload is the device's answer (when there is one), with user properties
//! `commandId`, `status` and, from the device, `deviceStatus`, `message`, `appErrCode`,
//! `appErrPayload`, and `late`/`orphaned` when so. `header:NAME` properties go to the device
//! as `NAME`. A request the service cannot take gets
//! `__stat` 400 (bad request), 404 (no such command) or 503 (the registry is unavailable)
//! and `__stMsg`; nothing was sent to a device.

use bytes::Bytes;

use super::{
    Answer, CommandRequest, DEFAULT_TIMEOUT_MS, Mode, Record, Status, expiry_seconds,
    profile::MQTT5,
};
use crate::client::{CallId, ClientError, Pending};
use crate::envelope::{PROTOCOL_VERSION, Properties, Publish, property};

/// Where callers send commands.
pub const INVOKE_TOPIC: &str = "mqstore/commands/v1/invoke";
/// Where callers read status records (payload: the command id).
pub const STATUS_TOPIC: &str = "mqstore/commands/v1/status";
/// Every command's status changes (payload: the record as JSON).
pub const EVENTS_FILTER: &str = "mqstore/commands/v1/events/+";
/// The topics of [`EVENTS_FILTER`] start with this.
pub const EVENTS_PREFIX: &str = "mqstore/commands/v1/events/";

/// Where the status changes of command `id` are published.
pub fn events_topic(id: &str) -> String {
    format!("{EVENTS_PREFIX}{id}")
}

/// User property names of the API.
pub mod name {
    pub const TOPIC: &str = "topic";
    pub const PROFILE: &str = "profile";
    pub const TIMEOUT_MS: &str = "timeoutMs";
    pub const MODE: &str = "mode";
    /// `header:NAME`: a user property `NAME` for the device.
    pub const HEADER_PREFIX: &str = "header:";
    pub const COMMAND_ID: &str = "commandId";
    pub const STATUS: &str = "status";
    pub const DEVICE_STATUS: &str = "deviceStatus";
    pub const MESSAGE: &str = "message";
    pub const APP_ERROR_CODE: &str = "appErrCode";
    pub const APP_ERROR_PAYLOAD: &str = "appErrPayload";
    pub const LATE: &str = "late";
    pub const ORPHANED: &str = "orphaned";
}

/// Why a request to the service cannot be taken: its `__stat` and `__stMsg`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub message: String,
}

impl Refusal {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
        }
    }
}

/// Reads an invoke request. `None`: it names no response topic or correlation data, so it
/// cannot be answered (the caller counts and drops it).
pub fn read_invoke(publish: &Publish) -> Option<Result<CommandRequest, Refusal>> {
    publish.properties.response_topic.as_ref()?;
    publish.properties.correlation_data.as_ref()?;
    let props = &publish.properties;
    let read = || {
        let topic = props.user_property(name::TOPIC).ok_or_else(|| {
            Refusal::bad_request("no `topic` user property: the device's command topic")
        })?;
        let timeout_ms = match props.user_property(name::TIMEOUT_MS) {
            None => DEFAULT_TIMEOUT_MS,
            Some(text) => text.parse().map_err(|_| {
                Refusal::bad_request(format!(
                    "timeoutMs {text:?} is not a number of milliseconds"
                ))
            })?,
        };
        let mode = match props.user_property(name::MODE) {
            None => Mode::Await,
            Some(text) => Mode::parse(text).ok_or_else(|| {
                Refusal::bad_request(format!("mode {text:?}: await, oneway or detached"))
            })?,
        };
        let request = CommandRequest {
            topic: topic.to_owned(),
            payload: publish.payload.clone(),
            content_type: props.content_type.clone(),
            profile: props
                .user_property(name::PROFILE)
                .unwrap_or(MQTT5)
                .to_owned(),
            timeout_ms,
            mode,
            headers: props
                .user_properties
                .iter()
                .filter_map(|(n, v)| {
                    Some((n.strip_prefix(name::HEADER_PREFIX)?.to_owned(), v.clone()))
                })
                .collect(),
        };
        Ok(request)
    };
    Some(read())
}

/// The reply to an invoke or status request `to`: the command's record (its answer as the
/// payload for an invoke; the whole record as JSON for a status query).
pub fn reply_record(to: &Publish, record: &Record, as_json: bool) -> Publish {
    let mut props = reply_properties(to, 200);
    let pair = |n: &str, v: String| (n.to_owned(), v);
    let user = &mut props.user_properties;
    user.push(pair(name::COMMAND_ID, record.id.clone()));
    user.push(pair(name::STATUS, record.status.as_str().to_owned()));
    if record.late {
        user.push(pair(name::LATE, "true".into()));
    }
    if record.orphaned {
        user.push(pair(name::ORPHANED, "true".into()));
    }
    let payload = match (as_json, &record.answer) {
        (true, _) => {
            props.content_type = Some("application/json".into());
            props.payload_format_indicator = Some(1);
            Bytes::from(record.to_json())
        }
        (false, Some(answer)) => {
            if let Some(code) = answer.code {
                user.push(pair(name::DEVICE_STATUS, code.to_string()));
            }
            for (n, v) in [
                (name::MESSAGE, &answer.message),
                (name::APP_ERROR_CODE, &answer.app_error_code),
                (name::APP_ERROR_PAYLOAD, &answer.app_error_payload),
            ] {
                if let Some(v) = v {
                    user.push(pair(n, v.clone()));
                }
            }
            props.content_type = answer.content_type.clone();
            answer.payload.clone()
        }
        (false, None) => Bytes::new(),
    };
    Publish {
        topic: props.response_topic.take().unwrap_or_default(),
        payload,
        qos: 1,
        properties: props,
    }
}

/// The reply to a request the service refused.
pub fn reply_refusal(to: &Publish, refusal: &Refusal) -> Publish {
    let mut props = reply_properties(to, refusal.status);
    props
        .user_properties
        .push((property::STATUS_MESSAGE.into(), refusal.message.clone()));
    Publish {
        topic: props.response_topic.take().unwrap_or_default(),
        payload: Bytes::new(),
        qos: 1,
        properties: props,
    }
}

/// `__stat`, the request's correlation data, and (in `response_topic`) where to publish.
fn reply_properties(to: &Publish, status: u16) -> Properties {
    Properties {
        response_topic: to.properties.response_topic.clone(),
        correlation_data: to.properties.correlation_data.clone(),
        user_properties: vec![(property::STATUS.into(), status.to_string())],
        ..Properties::default()
    }
}

/// A status change as an event.
pub fn event(record: &Record) -> Publish {
    Publish {
        topic: events_topic(&record.id),
        payload: Bytes::from(record.to_json()),
        qos: 0,
        properties: Properties {
            content_type: Some("application/json".into()),
            payload_format_indicator: Some(1),
            ..Properties::default()
        },
    }
}

/// What a command call returned to its caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandReply {
    pub id: String,
    /// SUCCEEDED for an awaited command (failures are errors); DELIVERED for a one-way one;
    /// SENT for a detached one.
    pub status: Status,
    /// The device's answer (empty without one).
    pub payload: Bytes,
    pub content_type: Option<String>,
    /// The device's status code, when its profile reads one.
    pub device_status: Option<i64>,
}

/// A finished call of the commands client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandsEvent {
    Invoked {
        call: CallId,
        result: Result<CommandReply, ClientError>,
    },
    Status {
        call: CallId,
        result: Result<Record, ClientError>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Invoke,
    Status,
}

/// How much longer than the command's timeout a caller waits for the service's answer: the
/// service answers TIMED_OUT at the command's deadline, and that answer must not lose a race
/// against the caller's own timer.
pub const CALLER_MARGIN_MS: u64 = 5_000;

/// The caller's side of the command service, without I/O (like
/// [`crate::jobs::JobsClient`]): subscribe to [`CommandsClient::response_subscription`],
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

    pub fn response_subscription(&self) -> &str {
        &self.response_topic
    }

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
        })
    }

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
