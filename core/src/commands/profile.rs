//! Device profiles: how a kind of device is sent a command and how its answer is read.

use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use super::template::{Template, var};
use super::{Answer, CommandError, CommandRequest, Matched, Record, Status, command_id};
use crate::envelope::{PROTOCOL_VERSION, Properties, Publish, property};

/// The name of the MQTT 5 request/response profile (the default).
pub const MQTT5: &str = "mqtt5";

/// The AWS IoT commands device topics (`{kind}`: `things` or `clients`; `{id}`: the
/// execution id, which is the command id).
pub const AWS_COMMAND: &str = "$aws/commands/{kind}/{device}/executions/{id}/request/{format}";
/// `{format}`: `json` or `cbor` (the update's encoding, and its acknowledgement's).
pub const AWS_ANSWER: &str = "$aws/commands/{kind}/{device}/executions/{id}/response/{format}";

/// Why a profile (or a profile file) cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("device profile {profile:?}: {reason}")]
pub struct ProfileError {
    /// The profile's name.
    pub profile: String,
    /// What is wrong with it.
    pub reason: String,
}

/// Where the command id travels in a topic profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Correlation {
    /// In a JSON field of the command and of the answer (a dotted path: `tid`, `data.rid`).
    Json(String),
    /// In the answer topic's `{id}` (and the command topic's, where it has one).
    Topic,
    /// Nowhere (legacy): every command waiting on the answer topic takes the next answer.
    None,
}

/// A device's status code: a number, or a word (`"DONE"`, `"IN_PROGRESS"`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Code {
    /// A numeric status.
    Number(i64),
    /// A status word.
    Text(String),
}

/// How a topic profile tells success from failure, and progress from either.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRule {
    /// A JSON field of the answer holding the code; `None`: the answer topic's `{status}`.
    pub json: Option<String>,
    /// The codes meaning success (empty: 200-299).
    pub ok: Vec<Code>,
    /// The codes of a progress report: not final, the command stays open.
    pub progress: Vec<Code>,
}

impl StatusRule {
    fn status_of(&self, code: &Code) -> Status {
        if self.progress.contains(code) {
            return Status::InProgress;
        }
        let ok = match (self.ok.is_empty(), code) {
            (true, Code::Number(n)) => (200..300).contains(n),
            (true, Code::Text(_)) => false,
            (false, code) => self.ok.contains(code),
        };
        match ok {
            true => Status::Succeeded,
            false => Status::Failed,
        }
    }
}

/// A device that publishes its answers on a topic of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicProfile {
    /// The command topic's template.
    pub command: Template,
    /// The answer topic's template.
    pub answer: Template,
    /// How an answer is matched to its command.
    pub correlation: Correlation,
    /// How the answer's status is read; None: every answer succeeds.
    pub status: Option<StatusRule>,
}

/// How a kind of device is commanded.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // a handful per server
pub enum Profile {
    /// MQTT 5 request/response as Azure IoT Operations RPC executors expect it: QoS 1,
    /// Response Topic (this node's own), 16-byte Correlation Data, Message Expiry = timeout;
    /// answers carry `__stat` (and `__stMsg`, `__propName`, `__propVal`, `__apErr`,
    /// `AppErrCode`, `AppErrPayload`).
    Mqtt5,
    /// A profile of topics (your own devices, DJI-style, IoT Hub-style).
    Topic(TopicProfile),
    /// AWS IoT commands ([`AWS_COMMAND`], [`AWS_ANSWER`]): JSON updates with a `status`
    /// (IN_PROGRESS, SUCCEEDED, FAILED, REJECTED, TIMED_OUT), `statusReason` and `result`,
    /// each acknowledged on `…/response/accepted/json` or `…/response/rejected/json`.
    Aws(TopicProfile),
}

/// Why a publish on an answer topic is not an answer: AWS's error code for it (what a
/// rejection says) and the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// `InvalidJson`, `InvalidRequest` (AWS's `RejectedErrorCode`s).
    pub code: &'static str,
    /// Why the answer cannot be read.
    pub reason: String,
}

impl std::fmt::Display for Unreadable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl From<&str> for Unreadable {
    fn from(reason: &str) -> Self {
        Self {
            code: "InvalidRequest",
            reason: reason.to_owned(),
        }
    }
}

impl From<String> for Unreadable {
    fn from(reason: String) -> Self {
        Self {
            code: "InvalidRequest",
            reason,
        }
    }
}

/// What became of a device's update, for a profile that acknowledges updates (AWS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acknowledgement {
    /// The update was taken.
    Accepted,
    /// AWS's error code (`TerminalStateReached`, `ResourceNotFound`, `InvalidRequest`, …) and
    /// a message.
    Rejected {
        /// AWS's error code (`InvalidRequest`, `TerminalStateReached`, ...).
        code: &'static str,
        /// What is wrong, for the device's log.
        message: String,
    },
}

impl Acknowledgement {
    /// An update that cannot be read: refused with why.
    pub fn unreadable(unreadable: Unreadable) -> Self {
        Acknowledgement::Rejected {
            code: unreadable.code,
            message: unreadable.reason,
        }
    }

    /// An update whose lookup failed (the registry is away): refused, the device may retry.
    pub fn failed(error: impl std::fmt::Display) -> Self {
        Acknowledgement::Rejected {
            code: "InternalError",
            message: error.to_string(),
        }
    }

    /// An update for command execution `id` that matched `matched`: taken, unless no command
    /// waits for it, or it came for a command settled already.
    pub fn of(matched: &[(Matched, Record)], id: &str) -> Self {
        if matched.is_empty() {
            return Acknowledgement::Rejected {
                code: "ResourceNotFound",
                message: format!("no command execution {id} (unknown, or forgotten)"),
            };
        }
        match matched.iter().find(|(how, _)| *how == Matched::Duplicate) {
            Some((_, record)) => Acknowledgement::Rejected {
                code: "TerminalStateReached",
                message: format!(
                    "command execution {} is {} already",
                    record.id, record.status
                ),
            },
            None => Acknowledgement::Accepted,
        }
    }
}

/// What an answer is looked up by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AnswerKey {
    /// The answer's topic with a status level as `+` (compared with [`Record::answer_filter`]).
    pub filter: String,
    /// The command id it carries (`None`: a profile without correlation).
    pub id: Option<String>,
}

/// A command ready to go: the publish for the device, and the record to register before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// What to publish to the device.
    pub publish: Publish,
    /// The command's record, to keep before publishing.
    pub record: Record,
}

/// Who sends: the node (which waits) and its MQTT client id (its direct answers come to
/// `clients/{client_id}/...`).
#[derive(Debug, Clone, Copy)]
pub struct Sender<'a> {
    /// The sending node's id.
    pub node: &'a str,
    /// The sending connection's client id (answers come to its tree).
    pub client_id: &'a str,
}

impl Profile {
    /// The publish for `request` and its record, with an id made of the 16 random bytes `id`
    /// (a version 4 UUID: its version and variant bits are set here).
    pub fn prepare(
        &self,
        request: &CommandRequest,
        sender: Sender<'_>,
        id: [u8; 16],
        now_ms: u64,
    ) -> Result<Prepared, CommandError> {
        if request.timeout_ms == 0 || request.timeout_ms > super::MAX_TIMEOUT_MS {
            return Err(CommandError::BadTimeout(request.timeout_ms));
        }
        let id = super::uuid_v4(id);
        let id_text = command_id(id);
        let topic = request.topic.replace("{id}", &id_text);
        if !crate::topics::is_valid_topic_name(&topic) {
            return Err(CommandError::BadTopic(request.topic.clone()));
        }
        let mut properties = Properties {
            user_properties: request.headers.clone(),
            message_expiry_interval: Some(expiry_seconds(request.timeout_ms)),
            payload_format_indicator: request
                .content_type
                .as_deref()
                .is_some_and(is_text)
                .then_some(1),
            content_type: request.content_type.clone(),
            ..Properties::default()
        };
        let mut payload = request.payload.clone();
        let (answer_filter, correlated) =
            match self {
                Profile::Mqtt5 => {
                    let response_topic = format!("clients/{}/{topic}", sender.client_id);
                    properties.response_topic = Some(response_topic.clone());
                    properties.correlation_data = Some(Bytes::copy_from_slice(&id));
                    for (name, value) in [
                        (property::PROTOCOL_VERSION, PROTOCOL_VERSION),
                        (property::SOURCE_ID, sender.client_id),
                    ] {
                        if properties.user_property(name).is_none() {
                            properties.user_properties.push((name.into(), value.into()));
                        }
                    }
                    (response_topic, true)
                }
                Profile::Topic(profile) | Profile::Aws(profile) => {
                    let mut vars = profile.command.bind(&topic).ok_or_else(|| {
                        CommandError::TopicMismatch {
                            topic: request.topic.clone(),
                            profile: request.profile.clone(),
                            template: profile.command.text.clone(),
                        }
                    })?;
                    // AWS devices answer in JSON whatever the request's format.
                    let aws = matches!(self, Profile::Aws(_));
                    vars.retain(|(name, _)| name != "id" && !(aws && name == "format"));
                    if let Correlation::Json(field) = &profile.correlation {
                        payload = with_field(&payload, field, &id_text).map_err(|reason| {
                            CommandError::Payload {
                                profile: request.profile.clone(),
                                field: field.clone(),
                                reason,
                            }
                        })?;
                    }
                    let correlated = profile.correlation != Correlation::None;
                    if correlated {
                        vars.push(("id".into(), id_text.clone()));
                    }
                    (profile.answer.fill(&vars), correlated)
                }
            };
        Ok(Prepared {
            publish: Publish {
                topic: topic.clone(),
                payload,
                qos: 1,
                properties,
            },
            record: Record {
                id: id_text,
                node: sender.node.to_owned(),
                topic,
                profile: request.profile.clone(),
                command: request.command.clone(),
                answer_filter,
                correlated,
                sent_ms: now_ms,
                deadline_ms: now_ms.saturating_add(request.timeout_ms),
                status: Status::Sent,
                answer: None,
                late: false,
                orphaned: false,
                duplicates: 0,
                updated_ms: now_ms,
            },
        })
    }

    /// Reads a device's answer (a publish on one of [`Profiles::answer_filters`](super::Profiles::answer_filters) or on this
    /// node's own response topics): what to look it up by, and what it says. `Err`: it is
    /// not an answer this profile can read (counted and dropped by the caller).
    pub fn read_answer(&self, publish: &Publish) -> Result<(AnswerKey, Answer), Unreadable> {
        match self {
            Profile::Aws(profile) => {
                let mut vars = profile
                    .answer
                    .bind(&publish.topic)
                    .ok_or("the topic does not fit an AWS IoT commands response topic")?;
                let cbor = match var(&vars, "format") {
                    Some("json") => false,
                    Some("cbor") => true,
                    other => {
                        return Err(Unreadable {
                            code: "InvalidTopic",
                            reason: format!("payload format {other:?}: json or cbor"),
                        });
                    }
                };
                vars.retain(|(name, _)| name != "format");
                let key = AnswerKey {
                    filter: profile.answer.fill(&vars),
                    id: var(&vars, "id").map(str::to_owned),
                };
                Ok((key, aws_answer(publish, cbor)?))
            }
            Profile::Mqtt5 => {
                let id = publish
                    .properties
                    .correlation_data
                    .as_deref()
                    .and_then(|data| <[u8; 16]>::try_from(data).ok())
                    .ok_or("an MQTT 5 answer without 16 bytes of correlation data")?;
                let key = AnswerKey {
                    filter: publish.topic.clone(),
                    id: Some(command_id(id)),
                };
                Ok((key, rpc_answer(publish)))
            }
            Profile::Topic(profile) => {
                let mut vars = profile
                    .answer
                    .bind(&publish.topic)
                    .ok_or("the topic does not fit the profile's answer topic")?;
                let json = match (&profile.correlation, &profile.status) {
                    (Correlation::Json(_), _) | (_, Some(StatusRule { json: Some(_), .. })) => Some(
                        serde_json::from_slice::<Value>(&publish.payload).map_err(|e| {
                            Unreadable {
                                code: "InvalidJson",
                                reason: format!(
                                    "the answer is not JSON ({e}), and the profile reads fields of it"
                                ),
                            }
                        })?,
                    ),
                    _ => None,
                };
                let id = match &profile.correlation {
                    Correlation::Json(field) => {
                        let id = json
                            .as_ref()
                            .and_then(|json| lookup(json, field))
                            .and_then(Value::as_str)
                            .ok_or_else(|| format!("the answer has no string field {field:?}"))?;
                        Some(id.to_owned())
                    }
                    Correlation::Topic => var(&vars, "id").map(str::to_owned),
                    Correlation::None => None,
                };
                let code = match &profile.status {
                    None => None,
                    Some(StatusRule {
                        json: Some(field), ..
                    }) => Some(match json.as_ref().and_then(|json| lookup(json, field)) {
                        Some(Value::Number(n)) if n.is_i64() => {
                            Code::Number(n.as_i64().unwrap_or_default())
                        }
                        Some(Value::String(text)) => Code::Text(text.clone()),
                        _ => {
                            return Err(format!(
                                "the answer has no number or string field {field:?}"
                            )
                            .into());
                        }
                    }),
                    Some(StatusRule { json: None, .. }) => Some(
                        var(&vars, "status")
                            .and_then(|s| s.parse().ok())
                            .map(Code::Number)
                            .ok_or("the answer topic's status is not a number")?,
                    ),
                };
                vars.retain(|(name, _)| name != "status");
                let status = match (&profile.status, &code) {
                    (Some(rule), Some(code)) => rule.status_of(code),
                    _ => Status::Succeeded,
                };
                let (code, status_text) = match code {
                    Some(Code::Number(n)) => (Some(n), None),
                    Some(Code::Text(text)) => (None, Some(text)),
                    None => (None, None),
                };
                let answer = Answer {
                    status,
                    payload: publish.payload.clone(),
                    content_type: publish.properties.content_type.clone(),
                    code,
                    message: None,
                    app_error_code: None,
                    app_error_payload: None,
                    reason_code: status_text,
                    result: None,
                };
                let key = AnswerKey {
                    filter: profile.answer.fill(&vars),
                    id,
                };
                Ok((key, answer))
            }
        }
    }
}

/// Reads an MQTT 5 RPC answer's status properties.
fn rpc_answer(publish: &Publish) -> Answer {
    let props = &publish.properties;
    let text = |name| props.user_property(name).map(str::to_owned);
    let code: i64 = props
        .user_property(property::STATUS)
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let app_error_code = text("AppErrCode");
    let application = props.user_property("__apErr") == Some("true");
    let status = match code {
        200 | 204 if app_error_code.is_none() => Status::Succeeded,
        200 | 204 | 408 => Status::Failed,
        500 if application => Status::Failed,
        _ => Status::Rejected,
    };
    let message = match (
        text(property::STATUS_MESSAGE),
        props.user_property(property::PROPERTY_NAME),
        props.user_property(property::PROPERTY_VALUE),
    ) {
        (message, None, _) => message,
        (message, Some(name), value) => Some(format!(
            "{}{}{name}{}",
            message.as_deref().unwrap_or_default(),
            if message.is_some() {
                "; property "
            } else {
                "property "
            },
            value.map(|v| format!(" = {v:?}")).unwrap_or_default()
        )),
    };
    Answer {
        status,
        payload: publish.payload.clone(),
        content_type: props.content_type.clone(),
        code: Some(code),
        message,
        app_error_code,
        app_error_payload: text("AppErrPayload"),
        reason_code: None,
        result: None,
    }
}

/// Reads an AWS IoT commands execution update (JSON, or `cbor` the same in CBOR): `{"status":
/// …, "statusReason": {"reasonCode": "[A-Z0-9_-]{1,64}", "reasonDescription": "≤ 1024
/// characters"}, "result": {"name": {"s": …} | {"b": …} | {"bin": base64 or CBOR bytes}}}`,
/// checked as AWS checks it. Other fields are ignored, as AWS ignores them: the AWS IoT Device
/// SDK for Java sends `deviceType`, `deviceId` and `executionId` in every update.
fn aws_answer(publish: &Publish, cbor: bool) -> Result<Answer, Unreadable> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Update {
        status: String,
        #[serde(default)]
        status_reason: Option<Reason>,
        #[serde(default)]
        result: Option<serde_json::Map<String, Value>>,
    }
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Reason {
        reason_code: String,
        #[serde(default)]
        reason_description: Option<String>,
    }
    let update: Update = match cbor {
        false => serde_json::from_slice(&publish.payload).map_err(|e| Unreadable {
            code: if serde_json::from_slice::<Value>(&publish.payload).is_ok() {
                "InvalidRequest"
            } else {
                "InvalidJson"
            },
            reason: format!("not an execution update: {e}"),
        })?,
        true => {
            let value = super::cbor::to_json(&publish.payload).map_err(|e| Unreadable {
                code: "InvalidRequest",
                reason: format!("not CBOR: {e}"),
            })?;
            serde_json::from_value(value).map_err(|e| Unreadable {
                code: "InvalidRequest",
                reason: format!("not an execution update: {e}"),
            })?
        }
    };
    let status = match update.status.as_str() {
        "IN_PROGRESS" => Status::InProgress,
        "SUCCEEDED" => Status::Succeeded,
        "FAILED" => Status::Failed,
        "REJECTED" => Status::Rejected,
        "TIMED_OUT" => Status::TimedOut,
        other => {
            return Err(format!(
                "status {other:?}: IN_PROGRESS, SUCCEEDED, FAILED, REJECTED or TIMED_OUT"
            )
            .into());
        }
    };
    let is_word = |text: &str, max: usize, also: fn(char) -> bool| {
        (1..=max).contains(&text.len())
            && text
                .chars()
                .all(|c| c.is_ascii_digit() || c == '_' || c == '-' || also(c))
    };
    let (reason_code, message) = match update.status_reason {
        None => (None, None),
        Some(reason) => {
            if !is_word(&reason.reason_code, 64, |c| c.is_ascii_uppercase()) {
                return Err(format!(
                    "reasonCode {:?}: 1 to 64 of A-Z, 0-9, '_' and '-'",
                    reason.reason_code
                )
                .into());
            }
            if reason
                .reason_description
                .as_ref()
                .is_some_and(|d| d.chars().count() > 1024)
            {
                return Err("reasonDescription: at most 1024 characters".into());
            }
            (Some(reason.reason_code), reason.reason_description)
        }
    };
    if let Some(result) = &update.result {
        if result.is_empty() {
            return Err("At least 1 command execution result is required".into());
        }
        for (name, value) in result {
            if !is_word(name, 32, |c| c.is_ascii_alphabetic()) {
                return Err(
                    format!("result name {name:?}: 1 to 32 of a-z, A-Z, 0-9, '_' and '-'").into(),
                );
            }
            let typed = value.as_object().filter(|o| o.len() == 1).and_then(|o| {
                o.iter().next().filter(|(kind, v)| match kind.as_str() {
                    "s" => v.is_string(),
                    "b" => v.is_boolean(),
                    "bin" => v.as_str().is_some_and(|b| {
                        use base64::Engine;
                        base64::engine::general_purpose::STANDARD.decode(b).is_ok()
                    }),
                    _ => false,
                })
            });
            if typed.is_none() {
                return Err(format!(
                    "result {name:?}: one of {{\"s\": string}}, {{\"b\": bool}}, {{\"bin\": base64}}"
                )
                .into());
            }
        }
    }
    Ok(Answer {
        status,
        payload: publish.payload.clone(),
        content_type: Some(
            if cbor {
                "application/cbor"
            } else {
                "application/json"
            }
            .into(),
        ),
        code: None,
        message,
        app_error_code: None,
        app_error_payload: None,
        reason_code,
        result: update.result.map(Value::Object),
    })
}

/// AWS IoT commands' event for a status change of an execution started from a stored
/// command: `$aws/events/commandExecution/{commandId}/{status}` with AWS's payload (`None`
/// for other records, and for DELIVERED, which AWS does not have).
pub fn aws_event(record: &Record) -> Option<Publish> {
    let command = record.command.as_deref()?;
    let status = match record.status {
        Status::Sent => "CREATED",
        Status::Delivered => return None,
        other => other.as_str(),
    };
    // `$aws/commands/{things|clients}/{device}/executions/…`
    let mut levels = record.topic.split('/').skip(2);
    let target = match (levels.next(), levels.next()) {
        (Some("clients"), Some(client)) => crate::jobs::arn("client", client),
        (_, Some(thing)) => crate::jobs::arn("thing", thing),
        _ => return None,
    };
    let mut body = serde_json::json!({
        "executionId": record.id,
        "status": status,
        "eventType": "COMMAND_EXECUTION",
        "commandArn": crate::jobs::arn("command", command),
        "targetArn": target,
        "timestamp": record.updated_ms,
    });
    if let Some(answer) = &record.answer
        && let Some(code) = &answer.reason_code
    {
        body["statusReason"] = serde_json::json!({
            "reasonCode": code,
            "reasonDescription": answer.message.clone().unwrap_or_default(),
        });
    }
    if record.status == Status::TimedOut && !record.is_final() {
        body["statusReason"] = serde_json::json!({
            "reasonCode": "$NO_RESPONSE_FROM_DEVICE",
            "reasonDescription": "",
        });
    }
    Some(Publish {
        topic: format!("$aws/events/commandExecution/{command}/{status}"),
        payload: Bytes::from(body.to_string()),
        qos: 0,
        properties: Properties {
            content_type: Some("application/json".into()),
            payload_format_indicator: Some(1),
            ..Properties::default()
        },
    })
}

impl Profile {
    /// A profile's acknowledgement of a device's update (AWS IoT commands answer each on
    /// `…/response/accepted/json` or `…/response/rejected/json`); `None` for the others.
    pub fn acknowledge(&self, update: &Publish, ack: &Acknowledgement) -> Option<Publish> {
        let Profile::Aws(_) = self else {
            return None;
        };
        // `…/executions/{id}/response/{format}`
        let (base, format) = update.topic.rsplit_once('/')?;
        let id = base
            .strip_suffix("/response")?
            .rsplit('/')
            .next()
            .unwrap_or_default();
        let (topic, fields) = match ack {
            Acknowledgement::Accepted => (
                format!("{base}/accepted/{format}"),
                vec![("executionId", id)],
            ),
            Acknowledgement::Rejected { code, message } => (
                format!("{base}/rejected/{format}"),
                vec![
                    ("error", *code),
                    ("errorMessage", message),
                    ("executionId", id),
                ],
            ),
        };
        let (payload, content_type) = match format {
            "cbor" => (
                Bytes::from(super::cbor::text_map(&fields)),
                "application/cbor",
            ),
            _ => {
                let body: serde_json::Map<String, Value> = fields
                    .into_iter()
                    .map(|(name, value)| (name.to_owned(), Value::from(value)))
                    .collect();
                (
                    Bytes::from(Value::Object(body).to_string()),
                    "application/json",
                )
            }
        };
        Some(Publish {
            topic,
            payload,
            qos: 1,
            properties: Properties {
                payload_format_indicator: Some(u8::from(format != "cbor")),
                content_type: Some(content_type.into()),
                ..Properties::default()
            },
        })
    }
}

/// Whole seconds, rounded up (at least 1: Azure IoT Operations executors refuse a request
/// without Message Expiry).
pub(crate) fn expiry_seconds(timeout_ms: u64) -> u32 {
    u32::try_from(timeout_ms.div_ceil(1000).max(1)).unwrap_or(u32::MAX)
}

fn is_text(content_type: &str) -> bool {
    content_type.starts_with("text/") || content_type.starts_with("application/json")
}

/// The value at a dotted path of a JSON object.
fn lookup<'a>(json: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(json, |value, name| value.get(name))
}

/// `payload` (a JSON object) with the string field at `path` set to `value`.
fn with_field(payload: &[u8], path: &str, value: &str) -> Result<Bytes, String> {
    let mut json: Value = match payload.is_empty() {
        true => Value::Object(Default::default()),
        false => serde_json::from_slice(payload)
            .map_err(|e| format!("the payload must be a JSON object: {e}"))?,
    };
    let mut names = path.split('.').peekable();
    let mut object = &mut json;
    while let Some(name) = names.next() {
        let map = object
            .as_object_mut()
            .ok_or("the payload (and each object on the path) must be a JSON object")?;
        if names.peek().is_none() {
            map.insert(name.to_owned(), Value::String(value.to_owned()));
            break;
        }
        object = map
            .entry(name.to_owned())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    Ok(Bytes::from(json.to_string()))
}
