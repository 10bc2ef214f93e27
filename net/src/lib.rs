//! # mqstore-net
//!
//! mqstore's native drivers: tokio + rumqttc around the sans-IO core ([`mqstore_core`]). Only
//! this crate touches the network. It converts MQTT packets to and from
//! [`mqstore_core::envelope::Publish`] and moves them; every decision is the core's.
//!
//! * The async [`client`] (the state store, [`lease`]s, [`jobs`] and [`commands`]).
//! * [`host`]: the connection loop and packet conversions a host of the server node shares
//!   with the client (used by `mqstore-server`, the node `mqstore serve` runs; this crate
//!   carries no Redis client and no server).
//!
//! A service that uses the state store, a lease, a job and a command, against the broker that
//! `bash scripts/run` starts with `mqstore serve` beside it:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use mqstore_core::commands::CommandRequest;
//! use mqstore_core::jobs::{JobSpec, Status};
//! use mqstore_net::client::{Client, ClientOptions, SetOptions};
//! use mqstore_net::jobs::{StartNext, Update};
//! use mqstore_net::lease::Lease;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::connect(ClientOptions::new("backend-1", "127.0.0.1", 1883)).await?;
//!
//! // Keys: versions, conditions, and every change as it happens.
//! client.set("greeting", "hello", SetOptions::default()).await?;
//! let found = client.get("greeting").await?.expect("just set");
//! println!("{:?} at {:?}", found.value, found.version);
//! let mut changes = client.observe("greeting").await?;
//! client.set("greeting", "hi", SetOptions::default()).await?;
//! println!("{:?}", changes.next().await.map(|change| change.value));
//!
//! // A lease: renewed in the background; its fencing token guards the writes it protects.
//! if let Some(lock) = Lease::acquire(&client, "orders-lock", Duration::from_secs(10), None).await? {
//!     let guarded = SetOptions { fencing_token: Some(lock.fencing_token().clone()), ..Default::default() };
//!     client.set("orders", "42", guarded).await?;
//!     lock.release().await?;
//! }
//!
//! // A job, and the device's side of it.
//! let spec = JobSpec::new("blink", vec!["pump-1".into()], serde_json::json!({ "led": "green" }));
//! client.create_job(spec).await?;
//! let mut pump = client.jobs("pump-1").await?;
//! if let Some(execution) = pump.start_next(StartNext::default()).await? {
//!     let done = Update { job_id: execution.job_id, status: Some(Status::Succeeded), ..Update::default() };
//!     pump.update(done).await?;
//! }
//!
//! // A command to a device, and its answer (or a typed error: failed, rejected, timed out).
//! let reply = client.command(CommandRequest::new("devices/pump-1/reboot", "{}")).await?;
//! println!("{} {:?}", reply.status, reply.payload);
//! client.close().await;
//! # Ok(()) }
//! ```
//!
//! Feature `exact-numbers` (default): numbers in job documents and shadows are read to the last
//! bit (serde_json's `float_roundtrip`; its default parsing may miss the nearest double by one
//! unit in the last place).

#![deny(missing_docs)]
// What is public is reachable from outside: internal entry points are `pub(crate)`.
#![deny(unreachable_pub)]

#[cfg(unix)]
pub mod blocking;
pub mod client;
pub mod commands;
mod connection;
pub mod jobs;
pub mod lease;
mod listeners;
pub mod shadow;
mod tls_files;
pub use listeners::Listener;

/// What a host of the server node (`mqstore-server`) shares with the client: the broker
/// connection loop that polls without dropping a poll half-way, its outbox, and the packet
/// conversions between rumqttc and [`mqstore_core::envelope`]. Not for applications: use
/// [`client`].
pub mod host {
    pub use crate::connection::{Connection, Driver, Outbox, Unacked, Wakes};
    pub use crate::{
        Polled, Queued, backoff, connection_error, from_mqtt, now_ms, puback_code,
        to_mqtt_properties, try_publish, unreadable_ack_code,
    };
}

use std::time::Duration;

use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Publish as MqttPublish, PublishProperties};
use rumqttc::v5::{AsyncClient, MqttOptions};

use mqstore_core::envelope::{Properties, Publish};

/// Where the broker is and how to log in.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The broker's host name or IP address.
    pub host: String,
    /// The broker's port (1883 for MQTT, 8883 for MQTT over TLS by convention).
    pub port: u16,
    /// The user name to log in with, if any.
    pub username: Option<String>,
    /// The password to log in with, if any.
    pub password: Option<String>,
    /// The largest packet accepted and sent. rumqttc caps incoming packets at 10 KiB unless
    /// told otherwise, which would silently refuse larger values.
    pub max_packet_size: u32,
    /// How often the connection is checked with PINGREQ when idle.
    pub keep_alive: Duration,
    /// Connect with TLS (`None`: plain TCP).
    pub tls: Option<TlsConfig>,
}

/// TLS settings of the broker connection.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificates of the authorities that may sign the broker's certificate.
    pub ca_pem: Vec<u8>,
    /// PEM certificate chain and private key, for brokers that authenticate clients by
    /// certificate.
    pub client_auth: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for TlsConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the private key's bytes (a log of the configuration must not hold it).
        f.debug_struct("TlsConfig")
            .field("ca_pem", &format_args!("{} bytes", self.ca_pem.len()))
            .field(
                "client_auth",
                &self.client_auth.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl TlsConfig {
    /// Reads the CA file (`None`: the system's trusted CAs, from `SSL_CERT_FILE` or where the
    /// system keeps its bundle, as OpenSSL finds them), and the client certificate and key
    /// files when both are given. A key encrypted with a password (PKCS#8, as
    /// `openssl pkcs8 -topk8` writes it) is decrypted with `key_password` (a key that is not
    /// encrypted does not use it). Files TLS could not use are an error (`InvalidInput`) that
    /// names the file and says why: an encrypted key without its password or with a wrong
    /// one, no certificate in the CA file, a key that is not the certificate's, an X.509 v1
    /// certificate.
    pub fn from_files(
        ca: Option<&std::path::Path>,
        client: Option<(&std::path::Path, &std::path::Path)>,
        key_password: Option<&str>,
    ) -> std::io::Result<Self> {
        let ca_pem = match ca {
            Some(ca) => tls_files::ca(ca)?,
            None => tls_files::system_cas()?,
        };
        let client_auth = match client {
            Some((cert, key)) => Some(Self::client_auth_from_files(cert, key, key_password)?),
            None if key_password.is_some() => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "a key password is for a client key: give the certificate and key files too",
                ));
            }
            None => None,
        };
        Ok(Self {
            ca_pem,
            client_auth,
        })
    }

    /// Reads a client certificate (chain) and its key as [`TlsConfig::from_files`] does: the
    /// key decrypted with `key_password` when it is encrypted, both checked. For other TLS
    /// connections that present a certificate (the server's to Redis).
    pub fn client_auth_from_files(
        cert: &std::path::Path,
        key: &std::path::Path,
        key_password: Option<&str>,
    ) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
        tls_files::client(cert, key, key_password)
    }

    /// Reads a file of CA certificates as [`TlsConfig::from_files`] does, checked.
    pub fn ca_from_file(ca: &std::path::Path) -> std::io::Result<Vec<u8>> {
        tls_files::ca(ca)
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        Self {
            host: "127.0.0.1".into(),
            port: 1883,
            username: None,
            password: None,
            max_packet_size: 16 * 1024 * 1024,
            keep_alive: Duration::from_secs(30),
            tls: None,
        }
    }
}

impl BrokerConfig {
    /// MQTT 5 options for a connection with this client id: clean start, Nagle off (one
    /// request in flight takes 44-88 ms with it on, 0.2 ms with it off), no topic aliases.
    pub fn options(&self, client_id: &str) -> MqttOptions {
        let mut options = MqttOptions::new(client_id, &self.host, self.port);
        options.set_keep_alive(self.keep_alive);
        options.set_clean_start(true);
        options.set_max_packet_size(Some(self.max_packet_size));
        options.set_topic_alias_max(None);
        if let (Some(user), Some(password)) = (&self.username, &self.password) {
            options.set_credentials(user, password);
        }
        let mut network = rumqttc::NetworkOptions::new();
        network.set_tcp_nodelay(true);
        options.set_network_options(network);
        if let Some(tls) = &self.tls {
            // rustls needs a process-wide crypto provider; installing it twice is harmless.
            let _ = rustls::crypto::ring::default_provider().install_default();
            options.set_transport(rumqttc::Transport::tls_with_config(
                rumqttc::TlsConfiguration::Simple {
                    ca: tls.ca_pem.clone(),
                    alpn: None,
                    client_auth: tls.client_auth.clone(),
                },
            ));
        }
        options
    }
}

/// An incoming rumqttc publish as the core's message (no copy of topic or payload bytes
/// beyond the topic's UTF-8 check).
pub fn from_mqtt(publish: MqttPublish) -> Publish {
    let properties = publish.properties.unwrap_or_default();
    Publish {
        topic: String::from_utf8_lossy(&publish.topic).into_owned(),
        payload: publish.payload,
        qos: publish.qos as u8,
        properties: Properties {
            payload_format_indicator: properties.payload_format_indicator,
            message_expiry_interval: properties.message_expiry_interval,
            content_type: properties.content_type,
            response_topic: properties.response_topic,
            correlation_data: properties.correlation_data,
            user_properties: properties.user_properties,
        },
    }
}

/// The core's publish properties as rumqttc's.
pub fn to_mqtt_properties(properties: Properties) -> PublishProperties {
    PublishProperties {
        payload_format_indicator: properties.payload_format_indicator,
        message_expiry_interval: properties.message_expiry_interval,
        topic_alias: None,
        response_topic: properties.response_topic,
        correlation_data: properties.correlation_data,
        user_properties: properties.user_properties,
        subscription_identifiers: Vec::new(),
        content_type: properties.content_type,
    }
}

/// What became of a publish handed to the connection without waiting.
pub enum Queued {
    /// rumqttc took it.
    Yes,
    /// The connection's request queue is full: here it is back, try again later.
    Full(Publish),
    /// rumqttc refuses the topic (it holds a wildcard): it can never be sent.
    Refused,
}

/// Queues one of the core's messages at QoS 1 without waiting (retained when `retain`).
pub fn try_publish(client: &AsyncClient, publish: Publish, retain: bool) -> Queued {
    use rumqttc::v5::{ClientError, Request};
    // QoS 1 but for what asks for 0 (events nobody need acknowledge).
    let qos = match publish.qos {
        0 => QoS::AtMostOnce,
        _ => QoS::AtLeastOnce,
    };
    match client.try_publish_with_properties(
        publish.topic,
        qos,
        retain,
        publish.payload,
        to_mqtt_properties(publish.properties),
    ) {
        Ok(()) => Queued::Yes,
        Err(
            ClientError::TryRequest(Request::Publish(p))
            | ClientError::Request(Request::Publish(p)),
        ) if rumqttc::v5::mqttbytes::valid_topic(&String::from_utf8_lossy(&p.topic)) => {
            Queued::Full(from_mqtt(p))
        }
        Err(_) => Queued::Refused,
    }
}

/// 64 random bits, without a dependency: the std hasher is randomly keyed per process, and
/// the time makes two calls differ. For correlation seeds and generated ids, not for secrets.
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Why a connection failed or dropped, as the client's error: a broker's refusal keeps its
/// reason code, a broker that breaks the protocol is named as such, anything else means the
/// broker could not be reached (or went away).
pub fn connection_error(error: &rumqttc::v5::ConnectionError) -> mqstore_core::client::ClientError {
    use mqstore_core::client::ClientError;
    use rumqttc::v5::mqttbytes::Error as PacketError;
    use rumqttc::v5::{ConnectionError, StateError};
    match error {
        ConnectionError::ConnectionRefused(code) => ClientError::Refused {
            code: connack_code(*code),
            reason: None,
        },
        // rumqttc reports any acknowledgement's reason code that MQTT 5 does not define this
        // way (the name says CONNACK, whatever the packet).
        // 0x80 or more is a refusal, of a publish once connected (see `unreadable_ack_code`);
        // below that the broker broke the protocol.
        error if let Some(code) = unreadable_ack_code(error) => match code {
            0x80.. => ClientError::PublishRefused { code },
            _ => ClientError::Protocol(unreadable_ack(code)),
        },
        ConnectionError::MqttState(StateError::ServerDisconnect {
            reason_code,
            reason_string,
        }) => ClientError::BrokerDisconnected {
            code: *reason_code as u8,
            reason: reason_string.clone(),
        },
        ConnectionError::MqttState(StateError::Deserialization(PacketError::Io(e))) => {
            ClientError::Unreachable(format!("the connection failed: {e}"))
        }
        ConnectionError::MqttState(StateError::Deserialization(e)) => {
            ClientError::Protocol(format!("it sent a malformed packet ({e})"))
        }
        ConnectionError::Io(e) => ClientError::Unreachable(e.to_string()),
        other => ClientError::Unreachable(other.to_string()),
    }
}

/// The reason code of an acknowledgement rumqttc could not read (one MQTT 5 does not allow in
/// that packet), when that is why the connection failed. rumqttc names the error after CONNACK
/// whatever the packet; once connected it is an acknowledgement of a publish (a PUBACK for
/// ours, all QoS 1). mosquitto 2.0 sends 0x95 (packet too large) in a PUBACK this way.
pub fn unreadable_ack_code(error: &rumqttc::v5::ConnectionError) -> Option<u8> {
    use rumqttc::v5::mqttbytes::Error as PacketError;
    use rumqttc::v5::{ConnectionError, StateError};
    match error {
        ConnectionError::MqttState(StateError::Deserialization(
            PacketError::InvalidConnectReturnCode(code) | PacketError::InvalidReason(code),
        )) => Some(*code),
        _ => None,
    }
}

/// What to tell an operator whose broker broke the protocol with `error`, when the cause is
/// known: Mochi MQTT v2 acknowledges a publish that has user properties with reason code 0x01
/// and copies them into the PUBACK unless told not to.
pub fn protocol_hint(error: &mqstore_core::client::ClientError) -> Option<&'static str> {
    match error {
        mqstore_core::client::ClientError::Protocol(text) if text == &unreadable_ack(0x01) => Some(
            "Mochi MQTT v2 sends PUBACK reason code 0x01 with the publish's user properties \
             unless its Compatibilities.NoInheritedPropertiesOnAck is true (see \
             docs/guide/brokers.md)",
        ),
        _ => None,
    }
}

/// How [`ClientError::Protocol`](mqstore_core::client::ClientError::Protocol) names an
/// acknowledgement whose reason code MQTT 5 does not allow (below 0x80: not a refusal).
fn unreadable_ack(code: u8) -> String {
    format!(
        "it sent an acknowledgement with reason code 0x{code:02X}, which MQTT 5 does not allow there"
    )
}

/// The MQTT 5 reason code of a PUBACK (rumqttc keeps it as an enum).
pub fn puback_code(reason: rumqttc::v5::mqttbytes::v5::PubAckReason) -> u8 {
    use rumqttc::v5::mqttbytes::v5::PubAckReason as R;
    match reason {
        R::Success => 0x00,
        R::NoMatchingSubscribers => 0x10,
        R::UnspecifiedError => 0x80,
        R::ImplementationSpecificError => 0x83,
        R::NotAuthorized => 0x87,
        R::TopicNameInvalid => 0x90,
        R::PacketIdentifierInUse => 0x91,
        R::QuotaExceeded => 0x97,
        R::PayloadFormatInvalid => 0x99,
    }
}

/// The MQTT 5 reason code of a CONNACK (rumqttc keeps it as an enum).
pub(crate) fn connack_code(code: rumqttc::v5::mqttbytes::v5::ConnectReturnCode) -> u8 {
    use rumqttc::v5::mqttbytes::v5::ConnectReturnCode as C;
    match code {
        C::Success => 0x00,
        C::RefusedProtocolVersion | C::UnsupportedProtocolVersion => 0x84,
        C::BadClientId | C::ClientIdentifierNotValid => 0x85,
        C::ServiceUnavailable | C::ServerUnavailable => 0x88,
        C::UnspecifiedError => 0x80,
        C::MalformedPacket => 0x81,
        C::ProtocolError => 0x82,
        C::ImplementationSpecificError => 0x83,
        C::BadUserNamePassword => 0x86,
        C::NotAuthorized => 0x87,
        C::ServerBusy => 0x89,
        C::Banned => 0x8A,
        C::BadAuthenticationMethod => 0x8C,
        C::TopicNameInvalid => 0x90,
        C::PacketTooLarge => 0x95,
        C::QuotaExceeded => 0x97,
        C::PayloadFormatInvalid => 0x99,
        C::RetainNotSupported => 0x9A,
        C::QoSNotSupported => 0x9B,
        C::UseAnotherServer => 0x9C,
        C::ServerMoved => 0x9D,
        C::ConnectionRateExceeded => 0x9F,
    }
}

/// `N` random bytes from the operating system, for secrets (the SCAN token key). Should the
/// OS refuse, [`random_u64`] fills them: unpredictable enough outside a determined attack.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if getrandom::fill(&mut bytes).is_err() {
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&random_u64().to_le_bytes()[..chunk.len()]);
        }
    }
    bytes
}

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_ms() -> u64 {
    use mqstore_core::hlc::Clock;
    mqstore_core::hlc::SystemClock.now_ms()
}

/// What a poll of the connection gives: a packet event, or a failed connection (rumqttc
/// reconnects on the next poll).
pub type Polled = Result<rumqttc::v5::Event, rumqttc::v5::ConnectionError>;

/// How long to wait before reconnecting after `failures` failed attempts in a row: 100 ms,
/// doubling, at most 5 s.
pub fn backoff(failures: u32) -> Duration {
    Duration::from_millis(100u64.saturating_mul(1 << failures.min(6)).min(5_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn try_publish_hands_back_what_does_not_fit_and_refuses_wildcards() {
        // No connection is made until the event loop is polled: only the queue is exercised.
        let (client, _eventloop) =
            AsyncClient::new(BrokerConfig::default().options("try-publish"), 1);
        let message = |topic: &str| Publish {
            topic: topic.to_owned(),
            payload: bytes::Bytes::from_static(b"+OK\r\n"),
            qos: 1,
            properties: Properties {
                correlation_data: Some(bytes::Bytes::from_static(b"c1")),
                ..Properties::default()
            },
        };
        assert!(matches!(
            try_publish(&client, message("a/+/b"), false),
            Queued::Refused
        ));
        assert!(matches!(
            try_publish(&client, message("a/b"), false),
            Queued::Yes
        ));
        match try_publish(&client, message("a/c"), false) {
            Queued::Full(back) => assert_eq!(back, message("a/c")),
            _ => panic!("a full queue hands the message back"),
        }
    }

    #[test]
    fn packet_size_matches_what_rumqttc_writes() {
        let publish = Publish {
            topic: mqstore_core::topics::INVOKE.to_owned(),
            payload: bytes::Bytes::from(vec![7; 300]),
            qos: 1,
            properties: Properties {
                payload_format_indicator: Some(0),
                message_expiry_interval: Some(10),
                content_type: Some("application/octet-stream".into()),
                response_topic: Some("clients/c1/response".into()),
                correlation_data: Some(bytes::Bytes::from_static(&[1; 16])),
                user_properties: vec![
                    ("__srcId".into(), "c1".into()),
                    ("__ts".into(), "1:0:c1".into()),
                ],
            },
        };
        let mut mqtt = MqttPublish::new(
            publish.topic.clone(),
            QoS::AtLeastOnce,
            publish.payload.clone(),
            Some(to_mqtt_properties(publish.properties.clone())),
        );
        mqtt.pkid = 1;
        let mut buffer = bytes::BytesMut::new();
        let written = mqtt.write(&mut buffer).unwrap();
        assert_eq!(publish.packet_size(), written);
    }

    #[test]
    fn backoff_grows_and_caps() {
        assert_eq!(backoff(0), Duration::from_millis(100));
        assert_eq!(backoff(1), Duration::from_millis(200));
        assert_eq!(backoff(5), Duration::from_millis(3_200));
        assert_eq!(backoff(6), Duration::from_secs(5));
        assert_eq!(backoff(60), Duration::from_secs(5));
    }
}
