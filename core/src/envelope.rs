//! The RPC envelope (spec §1, §1.1): what the MQTT 5 properties of a request say, whether it
//! can be answered, and the properties of the answer.
//!
//! [`Properties`] mirrors the MQTT 5 PUBLISH properties every MQTT library exposes; a driver
//! moves its library's properties in and out of it. Nothing here knows about sockets.

use bytes::Bytes;

use crate::hlc::Hlc;
use crate::topics;

/// Content type of every request, response and notification.
pub const CONTENT_TYPE: &str = "application/octet-stream";
/// The RPC protocol version the engine speaks.
pub const PROTOCOL_VERSION: &str = "1.0";
/// The major RPC protocol version the engine supports.
pub const SUPPORTED_MAJOR_VERSION: &str = "1";

/// User property names.
pub mod property {
    /// Response status (`200`, `400`, `503`, `505`).
    pub const STATUS: &str = "__stat";
    /// Why a status other than 200 was sent.
    pub const STATUS_MESSAGE: &str = "__stMsg";
    /// The request property the engine could not use (status 400).
    pub const PROPERTY_NAME: &str = "__propName";
    /// Its value, when a value was bad.
    pub const PROPERTY_VALUE: &str = "__propVal";
    /// Request: the client's HLC (required on SET). Response: a key's version.
    pub const TIMESTAMP: &str = "__ts";
    /// A fencing token (HLC) on SET, DEL, VDEL.
    pub const FENCING_TOKEN: &str = "__ft";
    /// Request: the client's MQTT client id. Response: the engine node's id.
    pub const SOURCE_ID: &str = "__srcId";
    /// The RPC protocol version.
    pub const PROTOCOL_VERSION: &str = "__protVer";
    /// Status 505: the major versions the engine supports.
    pub const SUPPORTED_MAJOR_VERSIONS: &str = "__supProtMajVer";
    /// Status 505: the version the request asked for.
    pub const REQUESTED_VERSION: &str = "__requestProtVer";
    /// `true` on a SET asks that the key be kept durably.
    pub const PERSISTENCE: &str = "aio-persistence";
    /// mqstore's, on a change notification: the version of the value the change replaced
    /// (empty when a SET made the key). An observer whose last-seen version differs missed a
    /// change. Clients that do not know it ignore it (Azure's SDKs do).
    pub const REPLACED: &str = "mqstore-replaced";
}

/// The MQTT 5 properties of a PUBLISH that the state store uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    /// MQTT 5 payload format indicator (1: UTF-8).
    pub payload_format_indicator: Option<u8>,
    /// Seconds.
    pub message_expiry_interval: Option<u32>,
    /// MQTT 5 content type.
    pub content_type: Option<String>,
    /// MQTT 5 response topic.
    pub response_topic: Option<String>,
    /// MQTT 5 correlation data.
    pub correlation_data: Option<Bytes>,
    /// MQTT 5 user properties, in order.
    pub user_properties: Vec<(String, String)>,
}

impl Properties {
    /// The first user property called `name`.
    pub fn user_property(&self, name: &str) -> Option<&str> {
        self.user_properties
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn take_user_property(&mut self, name: &str) -> Option<String> {
        let i = self.user_properties.iter().position(|(n, _)| n == name)?;
        Some(self.user_properties.swap_remove(i).1)
    }
}

/// An MQTT PUBLISH, incoming or outgoing. The engine publishes everything at QoS 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// The topic.
    pub topic: String,
    /// The payload.
    pub payload: Bytes,
    /// The QoS (0, 1 or 2).
    pub qos: u8,
    /// Its MQTT 5 properties.
    pub properties: Properties,
}

impl Publish {
    /// The size in bytes of this message as an MQTT 5 PUBLISH packet at QoS 1 with the
    /// properties set here: what a broker compares with its Maximum Packet Size (MQTT 5
    /// §3.1.2.11.4). Checking it before sending keeps an oversized message from costing the
    /// connection (brokers and clients disconnect on a packet over the limit).
    pub fn packet_size(&self) -> usize {
        let p = &self.properties;
        let string = |s: &Option<String>| s.as_ref().map_or(0, |s| 1 + 2 + s.len());
        let properties = p.payload_format_indicator.map_or(0, |_| 2)
            + p.message_expiry_interval.map_or(0, |_| 5)
            + string(&p.content_type)
            + string(&p.response_topic)
            + p.correlation_data.as_ref().map_or(0, |c| 1 + 2 + c.len())
            + p.user_properties
                .iter()
                .map(|(n, v)| 1 + 2 + n.len() + 2 + v.len())
                .sum::<usize>();
        // Topic, packet identifier (QoS > 0), properties with their length, payload.
        let remaining = 2
            + self.topic.len()
            + 2
            + variable_int_size(properties)
            + properties
            + self.payload.len();
        1 + variable_int_size(remaining) + remaining
    }
}

/// Bytes of an MQTT Variable Byte Integer holding `n`.
fn variable_int_size(n: usize) -> usize {
    match n {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// A request the engine will answer, with what its envelope said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// Where to answer.
    pub response_topic: String,
    /// What to answer with, to match the request.
    pub correlation_data: Bytes,
    /// From `__srcId`, else from a `clients/{clientId}/…` response topic.
    pub client_id: Option<String>,
    /// `__ts`, unparsed (the engine decides what a bad one means for each command).
    pub timestamp: Option<String>,
    /// `__ft`, unparsed.
    pub fencing_token: Option<String>,
    /// `aio-persistence: true`.
    pub persist: bool,
    /// The request's expiry in seconds, carried into the answer.
    pub message_expiry_interval: Option<u32>,
    /// The client id was taken from the request's topic, which the broker's ACL guards (see
    /// [`topics::identified_invoke`]), not from what the request claims.
    pub identified: bool,
}

/// Why a request is not answered at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DropReason {
    #[error("the request has no response topic, so it cannot be answered")]
    /// The request names no response topic.
    NoResponseTopic,
    #[error(
        "the request's response topic is not a topic name one can publish to (empty, a wildcard, NUL, or too long): not applied"
    )]
    /// Its response topic is empty, too long or has wildcards.
    InvalidResponseTopic,
    #[error(
        "the request's response topic is forbidden (the invoke topic or under {})",
        topics::CLIENTS_PREFIX
    )]
    /// Its response topic is in another client's tree.
    ForbiddenResponseTopic,
    #[error(
        "the request's response topic is not one this server answers on (an identified client's own clients/{{clientId}}/ tree, or the configured response topic prefixes): not applied"
    )]
    /// Its response topic is outside `--response-topic-prefix`.
    ResponseTopicNotAllowed,
    /// Reported by servers, not by [`check_request`]: more answers than the server's limit
    /// wait for the broker to take them.
    #[error(
        "the server is overloaded (too many answers wait for the broker): the request was not applied"
    )]
    Overloaded,
}

/// Why a request is answered with a status other than 200.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EnvelopeError {
    #[error("the request has no Correlation Data")]
    /// No correlation data.
    MissingCorrelationData,
    #[error("requests must be sent with QoS 1, not QoS 0")]
    /// Sent at QoS 0 (the protocol needs 1).
    QosZero,
    #[error(
        "KEYNOTIFY needs the client id: send __srcId, or use a response topic clients/{{clientId}}/..."
    )]
    /// No `__srcId` where one is required.
    MissingClientId,
    #[error("__protVer '{0}' is not a version number")]
    /// `__protVer` is not a version.
    MalformedVersion(String),
    #[error(
        "RPC protocol version {0} is not supported; this engine speaks major version {SUPPORTED_MAJOR_VERSION}"
    )]
    /// `__protVer` is a major version this node does not speak.
    UnsupportedVersion(String),
    #[error("the engine is overloaded or shutting down; retry later")]
    /// The node is overloaded or stopping.
    Unavailable,
    /// The store (Redis) failed or did not answer in time; the request may or may not have
    /// been applied (a write that timed out may have landed).
    #[error("the store failed ({0}); retry later")]
    StoreFailed(String),
}

impl EnvelopeError {
    /// The `__stat` it is answered with.
    pub fn status(&self) -> u16 {
        match self {
            Self::UnsupportedVersion(_) => 505,
            Self::Unavailable | Self::StoreFailed(_) => 503,
            _ => 400,
        }
    }

    /// The user properties that explain it, after `__stat` and `__stMsg`.
    fn detail(&self) -> Vec<(String, String)> {
        let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        match self {
            Self::MissingCorrelationData => vec![pair(property::PROPERTY_NAME, "Correlation Data")],
            Self::QosZero => vec![
                pair(property::PROPERTY_NAME, "QoS"),
                pair(property::PROPERTY_VALUE, "0"),
            ],
            Self::MissingClientId => vec![pair(property::PROPERTY_NAME, property::SOURCE_ID)],
            Self::MalformedVersion(v) => vec![
                pair(property::PROPERTY_NAME, property::PROTOCOL_VERSION),
                pair(property::PROPERTY_VALUE, v),
            ],
            Self::UnsupportedVersion(v) => vec![
                pair(property::SUPPORTED_MAJOR_VERSIONS, SUPPORTED_MAJOR_VERSION),
                pair(property::REQUESTED_VERSION, v),
            ],
            Self::Unavailable | Self::StoreFailed(_) => vec![],
        }
    }
}

/// What to do with a message from the invoke topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// Answer it (status 200).
    Accept(Invocation),
    /// Answer it with an envelope error: the reply is ready to publish.
    Reject(Box<Publish>, EnvelopeError),
    /// Do not answer: log it and count it.
    Drop(DropReason),
}

/// Decides from a request's QoS and properties whether and how it can be answered. Takes the
/// properties by value so that its strings move into the [`Invocation`] without copying.
pub fn check_request(qos: u8, mut properties: Properties, node_id: &str) -> Checked {
    let Some(response_topic) = properties.response_topic.take() else {
        return Checked::Drop(DropReason::NoResponseTopic);
    };
    if !topics::is_valid_topic_name(&response_topic) {
        // Publishing there would get the server disconnected: not applied, not answered.
        return Checked::Drop(DropReason::InvalidResponseTopic);
    }
    if topics::is_forbidden_response_topic(&response_topic) {
        return Checked::Drop(DropReason::ForbiddenResponseTopic);
    }
    let mut invocation = Invocation {
        client_id: properties
            .take_user_property(property::SOURCE_ID)
            .or_else(|| topics::client_id_of_response_topic(&response_topic).map(str::to_owned))
            // No MQTT client id holds NUL; the engine marks identified clients' ids with it,
            // and a claim must never reach their registrations.
            .filter(|id| !id.contains('\0')),
        response_topic,
        correlation_data: properties.correlation_data.take().unwrap_or_default(),
        timestamp: properties.take_user_property(property::TIMESTAMP),
        fencing_token: properties.take_user_property(property::FENCING_TOKEN),
        persist: properties
            .user_property(property::PERSISTENCE)
            .is_some_and(|v| v.eq_ignore_ascii_case("true")),
        message_expiry_interval: properties.message_expiry_interval,
        identified: false,
    };
    // Correlation data that is present but empty cannot tell answers apart either.
    let error = if invocation.correlation_data.is_empty() {
        Some(EnvelopeError::MissingCorrelationData)
    } else if qos == 0 {
        Some(EnvelopeError::QosZero)
    } else {
        properties
            .user_property(property::PROTOCOL_VERSION)
            .and_then(|v| check_version(v).err())
    };
    match error {
        None => Checked::Accept(invocation),
        Some(error) => {
            // Answer even without correlation data: the client may still match on topic.
            let reply = error_reply(&mut invocation, &error, node_id);
            Checked::Reject(Box::new(reply), error)
        }
    }
}

/// The 503 answer to a request the server will not take (it is overloaded or shutting down),
/// when the request can be answered at all: nothing of it is applied.
pub fn unavailable_reply(qos: u8, properties: Properties, node_id: &str) -> Option<Publish> {
    match check_request(qos, properties, node_id) {
        Checked::Accept(mut invocation) => Some(error_reply(
            &mut invocation,
            &EnvelopeError::Unavailable,
            node_id,
        )),
        Checked::Reject(reply, _) => Some(*reply),
        Checked::Drop(_) => None,
    }
}

/// `__protVer` is `major.minor` (or just `major`); the engine speaks major version 1.
fn check_version(version: &str) -> Result<(), EnvelopeError> {
    let major = version.split_once('.').map_or(version, |(major, _)| major);
    match major.parse::<u32>() {
        Ok(1) => Ok(()),
        Ok(_) => Err(EnvelopeError::UnsupportedVersion(version.to_owned())),
        Err(_) => Err(EnvelopeError::MalformedVersion(version.to_owned())),
    }
}

/// The properties of a response to `invocation`: `__stat`, `__ts` when given, `__srcId` (the
/// node), `__protVer`, content type, payload format, correlation data, remaining expiry.
pub fn response_properties(
    invocation: &Invocation,
    status: u16,
    version: Option<&Hlc>,
    node_id: &str,
) -> Properties {
    let mut user_properties = Vec::with_capacity(4);
    user_properties.push((property::STATUS.to_owned(), status.to_string()));
    if let Some(version) = version {
        user_properties.push((property::TIMESTAMP.to_owned(), version.to_string()));
    }
    user_properties.push((property::SOURCE_ID.to_owned(), node_id.to_owned()));
    user_properties.push((
        property::PROTOCOL_VERSION.to_owned(),
        PROTOCOL_VERSION.to_owned(),
    ));
    Properties {
        payload_format_indicator: Some(0),
        message_expiry_interval: invocation.message_expiry_interval,
        content_type: Some(CONTENT_TYPE.to_owned()),
        response_topic: None,
        correlation_data: Some(invocation.correlation_data.clone()),
        user_properties,
    }
}

/// The reply (empty payload) to a request answered with an envelope error.
pub fn error_reply(invocation: &mut Invocation, error: &EnvelopeError, node_id: &str) -> Publish {
    let mut properties = response_properties(invocation, error.status(), None, node_id);
    properties
        .user_properties
        .push((property::STATUS_MESSAGE.to_owned(), error.to_string()));
    properties.user_properties.extend(error.detail());
    Publish {
        topic: std::mem::take(&mut invocation.response_topic),
        payload: Bytes::new(),
        qos: 1,
        properties,
    }
}

/// The properties of a change notification: its version, the version of the value it
/// replaced (empty when a SET made the key) and the content type.
pub fn notification_properties(version: &Hlc, replaced: Option<&Hlc>) -> Properties {
    let replaced = replaced.map(Hlc::to_string).unwrap_or_default();
    let user_properties = vec![
        (property::TIMESTAMP.to_owned(), version.to_string()),
        (property::REPLACED.to_owned(), replaced),
    ];
    Properties {
        payload_format_indicator: Some(0),
        content_type: Some(CONTENT_TYPE.to_owned()),
        user_properties,
        ..Properties::default()
    }
}

/// The key and the version of a change notification (as the engine publishes them: on
/// [`topics::notify_topic`], with [`notification_properties`]); `None` for anything else. A
/// node that learns nobody received one drops only the registrations made before that change.
pub fn notified_change(notification: &Publish) -> Option<(Vec<u8>, Hlc)> {
    let key = topics::key_of_notify_topic(&notification.topic)?;
    let version = notification.properties.user_property(property::TIMESTAMP)?;
    Some((key, Hlc::parse(version).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(props: &[(&str, &str)]) -> Properties {
        Properties {
            response_topic: Some(topics::response_topic("c1")),
            correlation_data: Some(Bytes::from_static(&[7; 16])),
            message_expiry_interval: Some(10),
            user_properties: props
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            ..Properties::default()
        }
    }

    fn status(p: &Publish) -> Option<&str> {
        p.properties.user_property(property::STATUS)
    }

    #[test]
    fn accepts_and_reads_the_envelope() {
        let checked = check_request(
            1,
            request(&[
                ("__srcId", "dev-1"),
                ("__ts", "1:0:dev-1"),
                ("__ft", "2:0:x"),
                ("aio-persistence", "true"),
                ("__protVer", "1.0"),
                ("$partition", "ignored"),
            ]),
            "node",
        );
        let Checked::Accept(inv) = checked else {
            panic!("{checked:?}")
        };
        assert_eq!(inv.client_id.as_deref(), Some("dev-1"));
        assert_eq!(inv.timestamp.as_deref(), Some("1:0:dev-1"));
        assert_eq!(inv.fencing_token.as_deref(), Some("2:0:x"));
        assert!(inv.persist);
        assert_eq!(inv.correlation_data, Bytes::from_static(&[7; 16]));
    }

    #[test]
    fn a_claimed_id_with_nul_is_no_id() {
        let Checked::Accept(inv) = check_request(1, request(&[("__srcId", "\0a1")]), "node") else {
            panic!()
        };
        assert_eq!(inv.client_id, None);
    }

    #[test]
    fn client_id_falls_back_to_the_response_topic() {
        let Checked::Accept(inv) = check_request(1, request(&[]), "node") else {
            panic!()
        };
        assert_eq!(inv.client_id.as_deref(), Some("c1"));
        let mut props = request(&[]);
        props.response_topic = Some("replies/here".into());
        let Checked::Accept(inv) = check_request(1, props, "node") else {
            panic!()
        };
        assert_eq!(inv.client_id, None);
    }

    #[test]
    fn drops_unanswerable_requests() {
        let mut props = request(&[]);
        props.response_topic = None;
        assert_eq!(
            check_request(1, props, "n"),
            Checked::Drop(DropReason::NoResponseTopic)
        );
        for invalid in ["", "r/+", "r/#", "r\0"] {
            let mut props = request(&[]);
            props.response_topic = Some(invalid.into());
            assert_eq!(
                check_request(1, props, "n"),
                Checked::Drop(DropReason::InvalidResponseTopic)
            );
        }
        for forbidden in [
            topics::INVOKE.to_owned(),
            format!("{}/abc", topics::CLIENTS_PREFIX),
        ] {
            let mut props = request(&[]);
            props.response_topic = Some(forbidden);
            assert_eq!(
                check_request(1, props, "n"),
                Checked::Drop(DropReason::ForbiddenResponseTopic)
            );
        }
    }

    #[test]
    fn rejects_missing_correlation_data_and_qos0_with_400() {
        let mut props = request(&[]);
        props.correlation_data = None;
        let Checked::Reject(reply, EnvelopeError::MissingCorrelationData) =
            check_request(1, props, "n")
        else {
            panic!()
        };
        assert_eq!(status(&reply), Some("400"));
        assert_eq!(
            reply.properties.user_property(property::PROPERTY_NAME),
            Some("Correlation Data")
        );
        assert!(
            reply
                .properties
                .user_property(property::STATUS_MESSAGE)
                .is_some()
        );
        assert_eq!(reply.topic, topics::response_topic("c1"));

        let Checked::Reject(reply, EnvelopeError::QosZero) = check_request(0, request(&[]), "n")
        else {
            panic!()
        };
        assert_eq!(status(&reply), Some("400"));
        assert_eq!(
            reply.properties.user_property(property::PROPERTY_NAME),
            Some("QoS")
        );
        assert_eq!(
            reply.properties.correlation_data,
            Some(Bytes::from_static(&[7; 16]))
        );
    }

    #[test]
    fn an_unavailable_server_answers_503_when_it_can_answer_at_all() {
        let reply = unavailable_reply(1, request(&[]), "n").expect("a reply");
        assert_eq!(status(&reply), Some("503"));
        assert_eq!(reply.topic, topics::response_topic("c1"));
        assert_eq!(
            reply.properties.correlation_data,
            Some(Bytes::from_static(&[7; 16]))
        );
        let mut props = request(&[]);
        props.response_topic = None;
        assert_eq!(unavailable_reply(1, props, "n"), None);
    }

    #[test]
    fn rejects_other_major_versions_with_505() {
        let Checked::Reject(reply, _) = check_request(1, request(&[("__protVer", "2.0")]), "n")
        else {
            panic!()
        };
        assert_eq!(status(&reply), Some("505"));
        assert_eq!(reply.properties.user_property("__supProtMajVer"), Some("1"));
        assert_eq!(
            reply.properties.user_property("__requestProtVer"),
            Some("2.0")
        );

        let Checked::Reject(reply, _) = check_request(1, request(&[("__protVer", "x")]), "n")
        else {
            panic!()
        };
        assert_eq!(status(&reply), Some("400"));
        assert_eq!(reply.properties.user_property("__propVal"), Some("x"));
        assert!(matches!(
            check_request(1, request(&[("__protVer", "1")]), "n"),
            Checked::Accept(_)
        ));
    }

    #[test]
    fn packet_size_is_the_size_of_the_encoded_publish() {
        // topic "a/b" (2+3), packet id (2), properties: length (1) + content type (1+2+3),
        // payload "hi" (2): remaining 16, plus the fixed header (1+1).
        let publish = Publish {
            topic: "a/b".into(),
            payload: Bytes::from_static(b"hi"),
            qos: 1,
            properties: Properties {
                content_type: Some("x/y".into()),
                ..Properties::default()
            },
        };
        assert_eq!(publish.packet_size(), 18);
        // A remaining length of 200 takes two bytes to encode.
        let big = Publish {
            payload: Bytes::from(vec![0; 186]),
            ..publish
        };
        assert_eq!(big.packet_size(), 1 + 2 + 200);
    }

    #[test]
    fn response_properties_are_complete() {
        let Checked::Accept(inv) = check_request(1, request(&[]), "node-9") else {
            panic!()
        };
        let v = Hlc::parse("5:1:node-9").unwrap();
        let p = response_properties(&inv, 200, Some(&v), "node-9");
        assert_eq!(p.user_property("__stat"), Some("200"));
        assert_eq!(
            p.user_property("__ts"),
            Some("000000000000005:00001:node-9")
        );
        assert_eq!(p.user_property("__srcId"), Some("node-9"));
        assert_eq!(p.user_property("__protVer"), Some("1.0"));
        assert_eq!(p.content_type.as_deref(), Some(CONTENT_TYPE));
        assert_eq!(p.payload_format_indicator, Some(0));
        assert_eq!(p.message_expiry_interval, Some(10));
        assert_eq!(p.correlation_data, Some(Bytes::from_static(&[7; 16])));
        assert!(
            response_properties(&inv, 200, None, "n")
                .user_property("__ts")
                .is_none()
        );
    }
}
