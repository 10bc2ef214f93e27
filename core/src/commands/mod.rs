//! Commands to devices, without I/O: send a command to a device and match its answer to the
//! caller waiting for it, on one node or many.
//!
//! * [`Profile`] says how a device is spoken to: MQTT 5 request/response (the Azure IoT
//!   Operations RPC wire: response topic, 16-byte correlation data, Message Expiry, `__stat`),
//!   or fixed topics with the correlation id in a JSON field or a topic segment (DJI's `tid`,
//!   IoT Hub's `$rid`). [`Profile::prepare`] turns a [`CommandRequest`] into the publish for the
//!   device and the [`Record`] that waits for its answer; [`Profile::read_answer`] turns a
//!   device's publish into the [`AnswerKey`] to look up and the classified [`Answer`].
//! * [`Record`] is a command's status with its transitions (answered, late, duplicate, timed
//!   out, orphaned), written once here and used by every registry backend.
//! * [`Registry`] keeps records in memory (the default backend; the Redis backend keeps the
//!   same records in Redis and applies the same transitions).
//! * [`wire`] is the service's own API (`mqstore/commands/v1/...`): how callers ask
//!   `mqstore serve` to send a command. The caller's state machine is
//!   [`crate::client::commands::CommandsClient`] (the client layer sits above this one).
//!
//! The id of a command is also its correlation id: 16 random bytes (from the driver), written
//! as a version 4 UUID. It is the MQTT 5 correlation data, DJI's `tid`, IoT Hub's `$rid`.

mod cbor;
pub mod definitions;
mod profile;
mod profiles;
mod registry;
mod template;
pub mod wire;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

pub(crate) use profile::expiry_seconds;
pub use profile::{
    AWS_ANSWER, AWS_COMMAND, Acknowledgement, AnswerKey, Code, Correlation, Profile, ProfileError,
    StatusRule, TopicProfile, Unreadable,
};
pub use profile::{MQTT5, Prepared, Sender, aws_event};
pub use profiles::{BUILT_IN_PROFILES, Profiles};
pub use registry::{Registry, RegistryAnswer, RegistryCall};
pub use template::Template;

/// What an answer did to the record it matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// It settled a command whose caller waits: hand it over.
    Live,
    /// A progress report (IN_PROGRESS) of a command whose caller waits: hand it over; the
    /// command stays open.
    Progress,
    /// It came after the timeout: recorded in the status, counted, logged.
    Late,
    /// The command was answered already: counted and dropped.
    Duplicate,
}

/// Where an awaited command stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandStatus"))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum Status {
    /// Published to the device; no answer yet.
    Sent,
    /// The broker acknowledged the publish (PUBACK): the end of a one-way command.
    Delivered,
    /// The device reported that it is working on it (not final: the command stays open until
    /// a final status or its timeout; each report is a progress event).
    InProgress,
    /// The device answered with success.
    Succeeded,
    /// The device answered with an error of its own (an application error, a failure code).
    Failed,
    /// The device (or its SDK) refused the request as malformed or unsupported: it did not run.
    Rejected,
    /// No answer within the timeout. Not final: the command may have run, and an answer that
    /// comes later replaces this status (marked `late`).
    TimedOut,
}

impl Status {
    /// Whether an answer has settled the command.
    pub fn is_answered(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Rejected)
    }

    /// Whether the command still waits for its answer (it may have reported progress).
    pub fn is_waiting(self) -> bool {
        matches!(self, Status::Sent | Status::Delivered | Status::InProgress)
    }

    /// The status as the wire spells it (`SUCCEEDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Sent => "SENT",
            Status::Delivered => "DELIVERED",
            Status::InProgress => "IN_PROGRESS",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::Rejected => "REJECTED",
            Status::TimedOut => "TIMED_OUT",
        }
    }

    /// The status the wire spelling names; None for another word.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Status::Sent,
            Status::Delivered,
            Status::InProgress,
            Status::Succeeded,
            Status::Failed,
            Status::Rejected,
            Status::TimedOut,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a device answered, read by its profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandAnswer"))]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// SUCCEEDED, FAILED or REJECTED; IN_PROGRESS for a progress report; TIMED_OUT when the
    /// device itself says so (final, unlike the service's own timeout).
    pub status: Status,
    #[serde(with = "base64_bytes")]
    #[cfg_attr(test, schemars(with = "String"))]
    /// The device's answer, as it sent it.
    pub payload: Bytes,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The answer's content type, when the device gave one.
    pub content_type: Option<String>,
    /// The device's own status code: `__stat`, a `{status}` topic segment, a JSON field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<i64>,
    /// Why it failed or was rejected, in the device's words (`__stMsg`, `__propName=...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// An application error (Azure IoT Operations `AppErrCode`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The application error's payload (`AppErrPayload`), when the device sent one.
    pub app_error_payload: Option<String>,
    /// The device's reason code (AWS IoT commands' `statusReason.reasonCode`; its
    /// `reasonDescription` is [`Answer::message`]), or the status word a topic profile read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    /// Typed results (AWS IoT commands' `result`: name → `{"s": …}`, `{"b": …}` or
    /// `{"bin": base64}`), as the device sent them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
}

/// A command's status record: the registry's entry while it waits, and what a status query
/// or a watch sees afterwards (until it is forgotten, three timeouts after it was sent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[cfg_attr(test, schemars(rename = "CommandRecord"))]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// The command's id (a version 4 UUID).
    pub id: String,
    /// The node whose caller waits for the answer.
    pub node: String,
    /// The device's command topic.
    pub topic: String,
    /// The profile's name.
    pub profile: String,
    /// The stored command it was started from ([`definitions`]), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// What the answer's topic must look like (an MQTT filter: `+` where a status goes).
    pub answer_filter: String,
    /// Answers are matched by id (false: by topic only, the legacy mode).
    pub correlated: bool,
    /// When it was sent, in ms since the epoch.
    pub sent_ms: u64,
    /// When it times out, in ms since the epoch.
    pub deadline_ms: u64,
    /// Where it is: SENT, DELIVERED, IN_PROGRESS, SUCCEEDED, FAILED, ...
    pub status: Status,
    /// The device's last report (boxed: a record waiting for it stays small).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<Box<Answer>>,
    /// The answer came after the timeout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub late: bool,
    /// The answer reached a node after the node waiting for it was gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub orphaned: bool,
    /// Answers after the first (dropped, counted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub duplicates: u32,
    /// When the record last changed, in ms since the epoch.
    pub updated_ms: u64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// A record is kept this many timeouts after it was sent (the spec's TTL of 2-3 x the
/// timeout), and at least [`MIN_KEEP_MS`]: long enough for late answers and status queries,
/// short enough that a crashed node leaves nothing behind for long.
pub const KEEP_TIMEOUTS: u64 = 3;
/// The shortest time a record is kept (commands with sub-second timeouts).
pub const MIN_KEEP_MS: u64 = 5_000;

impl Record {
    /// When the record is forgotten.
    pub fn forget_at(&self) -> u64 {
        let timeout = self.deadline_ms.saturating_sub(self.sent_ms);
        self.sent_ms
            .saturating_add(timeout.saturating_mul(KEEP_TIMEOUTS).max(MIN_KEEP_MS))
    }

    /// Milliseconds until it is forgotten (a Redis TTL), at least 1.
    pub fn keep_ms(&self, now_ms: u64) -> u64 {
        self.forget_at().saturating_sub(now_ms).max(1)
    }

    /// Whether the command is settled for good: answered, or timed out by the device's own
    /// word (a timeout of the service's may still be replaced by the device's final status).
    pub fn is_final(&self) -> bool {
        self.status.is_answered()
            || (self.status == Status::TimedOut
                && self
                    .answer
                    .as_ref()
                    .is_some_and(|a| a.status == Status::TimedOut))
    }

    /// Applies a device's answer: a final one settles the command; a progress report
    /// (IN_PROGRESS) updates the record while the command stays open.
    pub fn answer(&mut self, answer: Answer, now_ms: u64) -> Matched {
        self.updated_ms = now_ms;
        if self.is_final() {
            self.duplicates = self.duplicates.saturating_add(1);
            return Matched::Duplicate;
        }
        let late = self.status == Status::TimedOut || now_ms >= self.deadline_ms;
        if answer.status == Status::InProgress {
            // After the timeout a report of progress is kept (its reason), not the status.
            if !late {
                self.status = Status::InProgress;
            }
            self.answer = Some(Box::new(answer));
            return match late {
                true => Matched::Late,
                false => Matched::Progress,
            };
        }
        self.status = answer.status;
        self.answer = Some(Box::new(answer));
        self.late = late;
        match late {
            true => Matched::Late,
            false => Matched::Live,
        }
    }

    /// The broker acknowledged the command's publish.
    pub fn delivered(&mut self, now_ms: u64) -> bool {
        if self.status != Status::Sent {
            return false;
        }
        self.status = Status::Delivered;
        self.updated_ms = now_ms;
        true
    }

    /// The timeout passed: still waiting becomes TIMED_OUT.
    pub fn time_out(&mut self, now_ms: u64) -> bool {
        if !self.status.is_waiting() || now_ms < self.deadline_ms {
            return false;
        }
        self.status = Status::TimedOut;
        self.updated_ms = now_ms;
        true
    }

    /// The answer was forwarded to a node that is gone.
    pub fn orphan(&mut self, now_ms: u64) {
        self.orphaned = true;
        self.updated_ms = now_ms;
    }

    /// The record as JSON (what the status API answers and the registry stores).
    pub fn to_json(&self) -> Vec<u8> {
        // A record always serializes (no maps with non-string keys, no floats).
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// A record read back from its JSON.
    pub fn from_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(json)
    }
}

/// How the caller waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// Until the answer (or the timeout).
    #[default]
    Await,
    /// Until the broker acknowledges the publish; no answer is expected.
    OneWay,
    /// Returns the command id at once; the answer goes to the status record.
    Detached,
}

impl Mode {
    /// The mode as the wire spells it (`await`, `oneway`, `detached`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Await => "await",
            Mode::OneWay => "oneway",
            Mode::Detached => "detached",
        }
    }

    /// The mode the wire spelling names; None for another word.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "await" => Some(Mode::Await),
            "oneway" => Some(Mode::OneWay),
            "detached" => Some(Mode::Detached),
            _ => None,
        }
    }
}

/// A command to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRequest {
    /// The device's command topic; `{id}` in it becomes the command id (IoT Hub's `$rid`,
    /// ThingsBoard's request id).
    pub topic: String,
    /// What the device gets.
    pub payload: Bytes,
    /// The payload's content type, passed on to the device.
    pub content_type: Option<String>,
    /// The profile's name (`mqtt5` unless told).
    pub profile: String,
    /// How long to wait for the answer, in ms (also the message's expiry).
    pub timeout_ms: u64,
    /// Await the answer, end at delivery (one-way), or return the id at once (detached).
    pub mode: Mode,
    /// User properties for the device (Azure IoT Operations "custom user data"; `__protVer`
    /// here replaces the one the `mqtt5` profile sends).
    pub headers: Vec<(String, String)>,
    /// Start the stored command with this id ([`definitions`]): `topic` is then its target
    /// (a thing name, `thing/NAME`, `clients/ID` or an ARN), the payload the command's (with
    /// [`CommandRequest::parameters`] filled into its template), the profile `aws`.
    pub command: Option<String>,
    /// The stored command's parameters (name → value), with [`CommandRequest::command`].
    pub parameters: serde_json::Map<String, serde_json::Value>,
}

impl CommandRequest {
    /// An awaited command over MQTT 5 request/response with the default timeout.
    pub fn new(topic: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        Self {
            topic: topic.into(),
            payload: payload.into(),
            content_type: None,
            profile: profile::MQTT5.to_owned(),
            timeout_ms: DEFAULT_TIMEOUT_MS,
            mode: Mode::Await,
            headers: Vec::new(),
            command: None,
            parameters: serde_json::Map::new(),
        }
    }

    /// Starts stored command `command_id` on `target` (a thing name, `thing/NAME`,
    /// `clients/ID` or an ARN), as AWS's `StartCommandExecution` does.
    pub fn start(command_id: impl Into<String>, target: impl Into<String>) -> Self {
        Self {
            command: Some(command_id.into()),
            profile: "aws".into(),
            ..Self::new(target, Bytes::new())
        }
    }
}

/// The timeout of a command unless told (AWS IoT commands' default).
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// The longest timeout (AWS IoT commands' maximum: 12 hours).
pub const MAX_TIMEOUT_MS: u64 = 12 * 60 * 60 * 1000;

/// Why a command could not be sent. Nothing was published.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    #[error("no device profile called {0:?} (known: {1})")]
    /// No profile of that name (the name, and the names there are).
    UnknownProfile(String, String),
    #[error("timeout of {0} ms: give 1 ms to 12 h")]
    /// A timeout out of range (ms).
    BadTimeout(u64),
    #[error("{0:?} is not a topic to publish a command to (no wildcards, not empty)")]
    /// A topic that cannot be published to (empty, or with wildcards).
    BadTopic(String),
    #[error(
        "topic {0:?} is not a device's: no command goes to mqstore's own topics (the state \
         store's statestore/ and clients/…/statestore/, jobs' and shadows' $aws/things/ and \
         $aws/events/, mqstore/, the command service's answer topics) or the broker's $SYS/"
    )]
    /// A topic of mqstore's own services or the broker's, where a command would speak as the
    /// node (see [`is_reserved_topic`]).
    ReservedTopic(String),
    #[error("topic {topic:?} does not fit profile {profile:?}'s command topic {template:?}")]
    /// The topic does not fit the profile's command template.
    TopicMismatch {
        /// The topic given.
        topic: String,
        /// The profile's name.
        profile: String,
        /// The profile's command topic template.
        template: String,
    },
    #[error("profile {profile:?} puts the command id in the JSON field {field:?}: {reason}")]
    /// The payload cannot carry what the profile writes into it.
    Payload {
        /// The profile's name.
        profile: String,
        /// The JSON field the profile writes.
        field: String,
        /// Why it cannot.
        reason: String,
    },
    #[error("a command with id {0} is already registered")]
    /// A stored command with this id exists.
    Duplicate(String),
    #[error("no stored command {0:?}")]
    /// No stored command with this id.
    NoDefinition(String),
    #[error("cannot start stored command {command:?}: {reason}")]
    /// A stored command cannot be started as asked.
    Start {
        /// The stored command's id.
        command: String,
        /// What is wrong with the start (a missing or mistyped parameter, an unknown target).
        reason: String,
    },
}

/// Whether `topic` belongs to mqstore's own services or the broker, so that no command may be
/// published there: `$SYS/`; the state store's `statestore/`, `clients/statestore/` and the
/// identified `clients/{clientId}/statestore/` trees (requests, answers, notifications,
/// presence); the jobs and shadow topics `$aws/things/` and `$aws/events/`; `mqstore/` (the
/// jobs operator API, the command service's API and events). A node publishes a command with
/// its own rights — inside mosquitto, past the broker's ACL — so a command on one of these
/// would speak as the node: a job's `notify-next` or a shadow's `delta` a device acts on, a
/// request in another client's name, a presence that ends another client's registrations.
/// (The command service also refuses the topics it reads devices' answers on.)
pub fn is_reserved_topic(topic: &str) -> bool {
    const PREFIXES: [&str; 5] = [
        "$SYS/",
        "$aws/things/",
        "$aws/events/",
        "statestore/",
        "mqstore/",
    ];
    let mut levels = topic.split('/');
    let clients_tree = matches!(
        (levels.next(), levels.next(), levels.next()),
        (Some("clients"), Some("statestore"), _) | (Some("clients"), _, Some("statestore"))
    );
    clients_tree || PREFIXES.iter().any(|prefix| topic.starts_with(prefix))
}

/// 16 random bytes made an RFC 9562 version 4 UUID: the version nibble 4, the variant bits
/// `10` (122 random bits remain).
pub fn uuid_v4(mut bytes: [u8; 16]) -> [u8; 16] {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    bytes
}

/// Where a UUID's text has its dashes (8-4-4-4-12).
const UUID_DASHES: [usize; 4] = [8, 13, 18, 23];

/// A command id's text: its 16 bytes as a UUID (8-4-4-4-12 lowercase hex). Written in one
/// allocation: every command makes one, and every MQTT 5 answer reads one.
pub fn command_id(bytes: [u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = [b'-'; 36];
    let mut at = 0;
    for byte in bytes {
        if UUID_DASHES.contains(&at) {
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 15)];
        at += 2;
    }
    text.iter().map(|&c| char::from(c)).collect()
}

/// The 16 bytes of a command id (the MQTT 5 correlation data): `None` unless `id` is a UUID's
/// text (either case).
pub fn command_id_bytes(id: &str) -> Option<[u8; 16]> {
    use crate::topics::nibble;
    let text = id.as_bytes();
    if text.len() != 36 || UUID_DASHES.iter().any(|&at| text[at] != b'-') {
        return None;
    }
    let mut digits = text
        .iter()
        .enumerate()
        .filter(|(at, _)| !UUID_DASHES.contains(at));
    let mut bytes = [0; 16];
    for byte in &mut bytes {
        let (_, &high) = digits.next()?;
        let (_, &low) = digits.next()?;
        *byte = nibble(high)? << 4 | nibble(low)?;
    }
    Some(bytes)
}

/// Payload bytes as base64 in JSON (status records carry any bytes).
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use bytes::Bytes;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        bytes: &Bytes,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Bytes, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD
            .decode(text)
            .map(Bytes::from)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
