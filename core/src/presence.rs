//! What a server node says about itself, so that clients notice when it restarts.
//!
//! Each node publishes, retained, to [`topics::server_presence_topic`] at every connection:
//! `online {epoch} max_packet_size={n} lease_ms={n}`, and sets `offline {epoch}` (retained) as
//! its MQTT Will. The epoch is new for every start of the process. A client that sees a node's
//! epoch change knows the node lost what it held in memory (the KEYNOTIFY registrations among
//! it) and registers its observed keys again; the maximum packet size tells it which requests
//! the node could never receive (the broker drops what is larger than a subscriber's limit);
//! the lease tells it how often to renew its registrations. Fields a reader does not know are
//! skipped, so later versions can add some.
//!
//! [`topics::server_presence_topic`]: crate::topics::server_presence_topic

use bytes::Bytes;

/// A server node's presence message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPresence {
    /// Differs at every start of the node.
    pub epoch: String,
    /// False in the Will: the node went away.
    pub online: bool,
    /// The largest packet the node accepts (requests larger than this never reach it).
    pub max_packet_size: Option<u32>,
    /// How long an identified client's registrations last after its last KEYNOTIFY.
    pub registration_lease_ms: Option<u64>,
}

impl ServerPresence {
    /// The payload.
    pub fn to_bytes(&self) -> Bytes {
        let mut text = format!(
            "{} {}",
            if self.online { "online" } else { "offline" },
            self.epoch
        );
        if self.online {
            if let Some(max) = self.max_packet_size {
                text.push_str(&format!(" max_packet_size={max}"));
            }
            if let Some(lease) = self.registration_lease_ms {
                text.push_str(&format!(" lease_ms={lease}"));
            }
        }
        Bytes::from(text)
    }

    /// Reads a payload; `None` when it is not a presence message (an empty retained message
    /// clearing the topic, or something else).
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(payload).ok()?;
        let mut parts = text.split(' ');
        let online = match parts.next()? {
            "online" => true,
            "offline" => false,
            _ => return None,
        };
        let epoch = parts.next().filter(|e| !e.is_empty())?.to_owned();
        let mut presence = Self {
            epoch,
            online,
            max_packet_size: None,
            registration_lease_ms: None,
        };
        for field in parts {
            match field.split_once('=') {
                Some(("max_packet_size", n)) => presence.max_packet_size = Some(n.parse().ok()?),
                Some(("lease_ms", n)) => presence.registration_lease_ms = Some(n.parse().ok()?),
                Some(_) => {} // a later version's field
                None => return None,
            }
        }
        Some(presence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_what_it_is_not() {
        for presence in [
            ServerPresence {
                epoch: "1f2e".into(),
                online: true,
                max_packet_size: Some(16_777_216),
                registration_lease_ms: Some(60_000),
            },
            ServerPresence {
                epoch: "1f2e".into(),
                online: true,
                max_packet_size: None,
                registration_lease_ms: None,
            },
            ServerPresence {
                epoch: "9".into(),
                online: false,
                max_packet_size: None,
                registration_lease_ms: None,
            },
        ] {
            assert_eq!(ServerPresence::parse(&presence.to_bytes()), Some(presence));
        }
        let later = ServerPresence::parse(b"online 7 lease_ms=5 colour=blue").unwrap();
        assert_eq!(later.registration_lease_ms, Some(5));
        for bad in [
            &b""[..],
            b"online",
            b"online ",
            b"maybe 1",
            b"online 1 x",
            b"online 1 max_packet_size=big",
            b"\xff",
        ] {
            assert_eq!(ServerPresence::parse(bad), None, "{bad:?}");
        }
    }
}
