//! The command service's own API, over MQTT 5 request/response like the state store's:
//! callers publish to [`INVOKE_TOPIC`] (send a command) or [`STATUS_TOPIC`] (read a status
//! record) with a response topic and correlation data; every status change is published on
//! [`events_topic`].
//!
//! An invoke request's payload is the command's payload, its content type the command's; the
//! rest are user properties: `topic` (the device's command topic, required), `profile`
//! (default `mqtt5`), `timeoutMs` (default 10000), `mode` (`await`, `oneway`, `detached`).
//! A stored command ([`super::definitions`]) is started with the user property `command` (its
//! id), `topic` its target and `parameters` a JSON object of its parameters.
//! The answer's payload is the device's answer (when there is one), with user properties
//! `commandId`, `status` and, from the device, `deviceStatus`, `message`, `appErrCode`,
//! `appErrPayload`, `reasonCode`, and `late`/`orphaned`/`byDevice` when so. `header:NAME` properties go to the device
//! as `NAME`. A request the service cannot take gets
//! `__stat` 400 (bad request), 404 (no such command) or 503 (the registry is unavailable)
//! and `__stMsg`; nothing was sent to a device.

use bytes::Bytes;

use super::{
    CommandError, CommandRequest, DEFAULT_TIMEOUT_MS, Mode, Record, Status, profile::MQTT5,
};
use crate::envelope::{Properties, Publish, property};

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
    /// The command's topic.
    pub const TOPIC: &str = "topic";
    /// The profile's name.
    pub const PROFILE: &str = "profile";
    /// The timeout in ms.
    pub const TIMEOUT_MS: &str = "timeoutMs";
    /// `await`, `oneway` or `detached`.
    pub const MODE: &str = "mode";
    /// Start this stored command (`topic` is then its target).
    pub const COMMAND: &str = "command";
    /// The stored command's parameters: a JSON object.
    pub const PARAMETERS: &str = "parameters";
    /// `header:NAME`: a user property `NAME` for the device.
    pub const HEADER_PREFIX: &str = "header:";
    /// The command's id.
    pub const COMMAND_ID: &str = "commandId";
    /// The command's status.
    pub const STATUS: &str = "status";
    /// The status code the device answered with.
    pub const DEVICE_STATUS: &str = "deviceStatus";
    /// The device's (or the service's) message.
    pub const MESSAGE: &str = "message";
    /// The device's application error code.
    pub const APP_ERROR_CODE: &str = "appErrCode";
    /// The device's application error payload.
    pub const APP_ERROR_PAYLOAD: &str = "appErrPayload";
    /// The device's reason code (AWS IoT commands' `statusReason.reasonCode`).
    pub const REASON_CODE: &str = "reasonCode";
    /// Present when the answer came after the timeout.
    pub const LATE: &str = "late";
    /// Present when a TIMED_OUT status is the device's own word (final), not the service's
    /// timeout.
    pub const BY_DEVICE: &str = "byDevice";
    /// Present when the answer came for a node that is gone.
    pub const ORPHANED: &str = "orphaned";
}

/// Why a request to the service cannot be taken: its `__stat` and `__stMsg`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The RPC status (400, 404, 409, 503, ...).
    pub status: u16,
    /// Why, for people.
    pub message: String,
}

impl Refusal {
    /// A 400 refusal with this message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
        }
    }

    /// A command that cannot be sent as asked: 404 for a stored command that does not exist,
    /// 400 for the rest.
    pub fn of_command(error: &CommandError) -> Self {
        Self {
            status: match error {
                CommandError::NoDefinition(_) => 404,
                _ => 400,
            },
            message: error.to_string(),
        }
    }

    /// 404: no command `id` to report on.
    pub fn not_found(id: &str) -> Self {
        Self {
            status: 404,
            message: not_found(id),
        }
    }

    /// 409: a stored command with this id exists.
    pub fn taken(command_id: &str) -> Self {
        Self {
            status: 409,
            message: format!("a command {command_id:?} exists: delete it first"),
        }
    }

    /// 404: no stored command with this id.
    pub fn no_definition(command_id: &str) -> Self {
        Self {
            status: 404,
            message: format!("no stored command {command_id:?}"),
        }
    }
}

/// Why there is no status for command `id`.
pub fn not_found(id: &str) -> String {
    format!(
        "no command {id} (unknown, or forgotten: a record is kept three timeouts, at least 5 s, \
         after it was sent)"
    )
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
        let parameters = match props.user_property(name::PARAMETERS) {
            None => serde_json::Map::new(),
            Some(text) => serde_json::from_slice(text.as_bytes()).map_err(|e| {
                Refusal::bad_request(format!("parameters: not a JSON object ({e})"))
            })?,
        };
        let request = CommandRequest {
            command: props.user_property(name::COMMAND).map(str::to_owned),
            parameters,
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
    if record.status == Status::TimedOut && record.is_final() {
        user.push(pair(name::BY_DEVICE, "true".into()));
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
                (name::REASON_CODE, &answer.reason_code),
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

/// A JSON reply (`__stat` 200).
pub fn reply_json(to: &Publish, body: &impl serde::Serialize) -> Publish {
    let mut props = reply_properties(to, 200);
    props.content_type = Some("application/json".into());
    props.payload_format_indicator = Some(1);
    Publish {
        topic: props.response_topic.take().unwrap_or_default(),
        // The answers are maps with string keys and no floats: they always serialize.
        payload: Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
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
