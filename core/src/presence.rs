//! What a server node says about itself, so that clients notice when it restarts.
//!
//! Each node publishes, retained, to [`topics::server_presence_topic`] at every connection:
//! `online {epoch} {max_packet_size}`, and sets `offline {epoch}` (retained) as its MQTT Will.
//! The epoch is new for every start of the process. A client that sees a node's epoch change
//! knows the node lost what it held in memory (the KEYNOTIFY registrations among it) and
//! registers its observed keys again; the maximum packet size tells it which requests the
//! node could never receive (the broker drops what is larger than a subscriber's limit).
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
}

impl ServerPresence {
    /// The payload: `online {epoch} {max_packet_size}` or `offline {epoch}`.
    pub fn to_bytes(&self) -> Bytes {
        let text = match (self.online, self.max_packet_size) {
            (true, Some(max)) => format!("online {} {max}", self.epoch),
            (true, None) => format!("online {}", self.epoch),
            (false, _) => format!("offline {}", self.epoch),
        };
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
        let max_packet_size = match parts.next() {
            Some(max) => Some(max.parse().ok()?),
            None => None,
        };
        parts.next().is_none().then_some(Self {
            epoch,
            online,
            max_packet_size,
        })
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
            },
            ServerPresence {
                epoch: "1f2e".into(),
                online: true,
                max_packet_size: None,
            },
            ServerPresence {
                epoch: "9".into(),
                online: false,
                max_packet_size: None,
            },
        ] {
            assert_eq!(ServerPresence::parse(&presence.to_bytes()), Some(presence));
        }
        for bad in [
            &b""[..],
            b"online",
            b"online ",
            b"maybe 1",
            b"online 1 x",
            b"online 1 2 3",
            b"\xff",
        ] {
            assert_eq!(ServerPresence::parse(bad), None, "{bad:?}");
        }
    }
}
