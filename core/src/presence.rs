//! What a server node says about itself, so that clients notice when it restarts.
//!
//! Each node publishes, retained, to [`topics::server_presence_topic`] at every connection:
//! `online {epoch} max_packet_size={n} lease_ms={n}`, and sets `offline {epoch}` (retained) as
//! its MQTT Will. The epoch is new for every start of the process. A client that sees a node's
//! epoch change knows the node lost what it held in memory (the KEYNOTIFY registrations among
//! it) and registers its observed keys again; the maximum packet size tells it which requests
//! the node could never receive (the broker drops what is larger than a subscriber's limit);
//! the lease tells it how often to renew its registrations; `share_group=` how the node receives
//! the requests, so that nodes on one broker notice one another answering the same request
//! ([`Peers`]). Fields a reader does not know are skipped, so later versions can add some.
//!
//! [`topics::server_presence_topic`]: crate::topics::server_presence_topic

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::topics;

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
    /// How the node receives the state store's requests; `None` when its presence does not say
    /// (a node of a version before this field, or a Will).
    pub subscription: Option<Subscription>,
}

/// How a node receives the state store's requests: nodes on one broker that do not share one
/// share group each receive, and answer, the same request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subscription {
    /// Every request: a plain subscription, or a node inside the broker (the plugin).
    Every,
    /// Its share of share group `0`'s (`$share/{group}/…`).
    Shared(String),
}

impl Subscription {
    /// Whether a node receiving requests this way and one receiving them `theirs` way (`None`:
    /// its presence does not say) both receive some request: unless both are in one share
    /// group. A node that receives every request shares some with any other.
    pub fn overlaps(&self, theirs: Option<&Subscription>) -> bool {
        match (self, theirs) {
            (Subscription::Every, _) | (_, Some(Subscription::Every)) => true,
            (Subscription::Shared(mine), Some(Subscription::Shared(theirs))) => mine != theirs,
            (Subscription::Shared(_), None) => false,
        }
    }
}

/// "without a share group" or "in share group G": how a log line says it.
impl std::fmt::Display for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subscription::Every => f.write_str("without a share group"),
            Subscription::Shared(group) => write!(f, "in share group {group:?}"),
        }
    }
}

/// Whether `group` can name a share group here: MQTT 5 forbids `/`, `+` and `#` in it (4.8.2),
/// and the presence message, which carries it, separates its fields with spaces.
pub fn is_valid_share_group(group: &str) -> bool {
    !group.is_empty()
        && !group
            .chars()
            .any(|c| matches!(c, '/' | '+' | '#' | '=') || c.is_whitespace() || c.is_control())
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
            match &self.subscription {
                Some(Subscription::Every) => text.push_str(" share_group="),
                Some(Subscription::Shared(group)) => {
                    text.push_str(" share_group=");
                    text.push_str(group);
                }
                None => {}
            }
        }
        Bytes::from(text)
    }

    /// Whether this node and `other`, both online, would both take some request: the rule of
    /// [`Subscription::overlaps`] from whichever side says how it subscribes (neither saying:
    /// nodes of earlier versions, not known to clash).
    pub fn clashes_with(&self, other: &ServerPresence) -> bool {
        self.online
            && other.online
            && match (&self.subscription, &other.subscription) {
                (Some(mine), theirs) => mine.overlaps(theirs.as_ref()),
                (None, Some(theirs)) => theirs.overlaps(None),
                (None, None) => false,
            }
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
            subscription: None,
        };
        for field in parts {
            match field.split_once('=') {
                Some(("max_packet_size", n)) => presence.max_packet_size = Some(n.parse().ok()?),
                Some(("lease_ms", n)) => presence.registration_lease_ms = Some(n.parse().ok()?),
                Some(("share_group", "")) => presence.subscription = Some(Subscription::Every),
                Some(("share_group", group)) => {
                    presence.subscription = Some(Subscription::Shared(group.to_owned()));
                }
                Some(_) => {} // a later version's field
                None => return None,
            }
        }
        Some(presence)
    }
}

/// Another node whose requests overlap this node's: each request both receive is answered
/// twice (a SET applied twice, a command sent to its device twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// Its node id.
    pub node: String,
    /// How it receives the requests (`None`: its presence does not say).
    pub theirs: Option<Subscription>,
}

/// The other nodes on this node's broker, as their presence messages say, and which of them
/// clash with it. A host subscribes (plainly: every node must read every presence) to
/// [`topics::SERVER_PRESENCE_FILTER`] and hands each message to [`Peers::seen`], retained ones
/// too (a node already running says so only in its retained presence).
#[derive(Debug, Clone)]
pub struct Peers {
    node_id: String,
    mine: Subscription,
    /// The clashing nodes online, by node id, with the epoch each was seen in.
    clashing: BTreeMap<String, String>,
}

/// How many clashing nodes [`Peers`] keeps: anyone allowed to publish a presence could name
/// many.
const MAX_CLASHING: usize = 64;

impl Peers {
    /// Node `node_id`, receiving requests the `mine` way.
    pub fn new(node_id: impl Into<String>, mine: Subscription) -> Self {
        Self {
            node_id: node_id.into(),
            mine,
            clashing: BTreeMap::new(),
        }
    }

    /// A message on `topic`: when it is another node's presence saying that node clashes with
    /// this one, and it did not in the epoch seen before, the clash (say it once). A node that
    /// goes offline, or no longer clashes, is forgotten.
    pub fn seen(&mut self, topic: &str, payload: &[u8]) -> Option<Clash> {
        let node = topics::node_of_server_presence_topic(topic)?;
        if node == self.node_id {
            return None;
        }
        let presence = ServerPresence::parse(payload).filter(|p| p.online);
        let Some(presence) = presence.filter(|p| self.mine.overlaps(p.subscription.as_ref()))
        else {
            self.clashing.remove(&node);
            return None;
        };
        if self.clashing.get(&node) == Some(&presence.epoch)
            || (self.clashing.len() >= MAX_CLASHING && !self.clashing.contains_key(&node))
        {
            return None;
        }
        self.clashing.insert(node.clone(), presence.epoch);
        Some(Clash {
            node,
            theirs: presence.subscription,
        })
    }

    /// How this node receives the requests.
    pub fn subscription(&self) -> &Subscription {
        &self.mine
    }

    /// How many nodes online clash with this one (at most 64 are counted).
    pub fn clashing(&self) -> usize {
        self.clashing.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_what_it_is_not() {
        let presence = |online, max, lease, subscription| ServerPresence {
            epoch: "1f2e".into(),
            online,
            max_packet_size: max,
            registration_lease_ms: lease,
            subscription,
        };
        for presence in [
            presence(true, Some(16_777_216), Some(60_000), None),
            presence(true, None, None, None),
            presence(true, None, None, Some(Subscription::Every)),
            presence(
                true,
                Some(5),
                None,
                Some(Subscription::Shared("mqstore".into())),
            ),
            presence(false, None, None, None),
        ] {
            assert_eq!(ServerPresence::parse(&presence.to_bytes()), Some(presence));
        }
        assert_eq!(
            &presence(
                true,
                Some(9),
                None,
                Some(Subscription::Shared("g-1".into()))
            )
            .to_bytes()[..],
            b"online 1f2e max_packet_size=9 share_group=g-1"
        );
        assert_eq!(
            &presence(true, None, None, Some(Subscription::Every)).to_bytes()[..],
            b"online 1f2e share_group="
        );
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

    #[test]
    fn share_groups_are_names_mqtt_and_the_presence_can_carry() {
        for good in ["mqstore", "g-1", "prod.eu_1", "über"] {
            assert!(is_valid_share_group(good), "{good:?}");
        }
        for bad in ["", "a/b", "a+", "#", "a b", "a=b", "a\tb", "a\0b"] {
            assert!(!is_valid_share_group(bad), "{bad:?}");
        }
    }

    #[test]
    fn nodes_overlap_unless_they_share_one_share_group() {
        let shared = |g: &str| Subscription::Shared(g.into());
        let every = Subscription::Every;
        assert!(!shared("a").overlaps(Some(&shared("a"))));
        assert!(shared("a").overlaps(Some(&shared("b"))));
        assert!(shared("a").overlaps(Some(&every)));
        assert!(every.overlaps(Some(&shared("a"))));
        assert!(every.overlaps(Some(&every)));
        // A node of an earlier version says nothing: it clashes with one that takes every
        // request whatever it does, and may be in this node's share group.
        assert!(every.overlaps(None));
        assert!(!shared("a").overlaps(None));
    }

    #[test]
    fn two_presences_clash_when_both_are_online_and_their_subscriptions_overlap() {
        let presence = |online, subscription| ServerPresence {
            epoch: "e".into(),
            online,
            max_packet_size: None,
            registration_lease_ms: None,
            subscription,
        };
        let (every, g) = (
            Some(Subscription::Every),
            Some(Subscription::Shared("g".into())),
        );
        let h = Some(Subscription::Shared("h".into()));
        assert!(!presence(true, g.clone()).clashes_with(&presence(true, g.clone())));
        assert!(presence(true, g.clone()).clashes_with(&presence(true, h)));
        assert!(!presence(true, g.clone()).clashes_with(&presence(false, every.clone())));
        // One side saying nothing: the other decides, either way round.
        assert!(presence(true, None).clashes_with(&presence(true, every.clone())));
        assert!(presence(true, every).clashes_with(&presence(true, None)));
        assert!(!presence(true, None).clashes_with(&presence(true, g)));
        assert!(!presence(true, None).clashes_with(&presence(true, None)));
    }

    #[test]
    fn peers_say_each_clash_once_per_start_and_forget_what_ends() {
        let topic = |node: &str| topics::server_presence_topic(node);
        let online = |epoch: &str, group: Option<&str>| {
            ServerPresence {
                epoch: epoch.into(),
                online: true,
                max_packet_size: None,
                registration_lease_ms: None,
                subscription: Some(
                    group.map_or(Subscription::Every, |g| Subscription::Shared(g.into())),
                ),
            }
            .to_bytes()
        };
        let mut peers = Peers::new("me", Subscription::Shared("g".into()));
        // Its own presence, a node of the same group, another message: no clash.
        assert_eq!(peers.seen(&topic("me"), &online("1", None)), None);
        assert_eq!(peers.seen(&topic("b"), &online("1", Some("g"))), None);
        assert_eq!(peers.seen("statestore/other", &online("1", None)), None);
        assert_eq!(peers.clashing(), 0);
        // A node without a share group: said once, however often its presence comes.
        let clash = peers.seen(&topic("c"), &online("1", None));
        assert_eq!(
            clash,
            Some(Clash {
                node: "c".into(),
                theirs: Some(Subscription::Every)
            })
        );
        assert_eq!(peers.seen(&topic("c"), &online("1", None)), None);
        // Another group: a clash too.
        assert!(peers.seen(&topic("d"), &online("1", Some("h"))).is_some());
        assert_eq!(peers.clashing(), 2);
        // Restarted (a new epoch), still clashing: said again.
        assert!(peers.seen(&topic("c"), &online("2", None)).is_some());
        // Gone (its Will), then moved into the group: forgotten.
        let will = ServerPresence::parse(b"offline 2").unwrap().to_bytes();
        assert_eq!(peers.seen(&topic("c"), &will), None);
        assert_eq!(peers.seen(&topic("d"), &online("3", Some("g"))), None);
        assert_eq!(peers.clashing(), 0);
        // A presence cleared (an empty retained message) forgets too; garbage says nothing.
        assert!(peers.seen(&topic("e"), &online("1", None)).is_some());
        assert_eq!(peers.seen(&topic("e"), b""), None);
        assert_eq!(peers.seen(&topic("f"), b"\xffnonsense"), None);
        assert_eq!(peers.clashing(), 0);
        // At most 64 are kept: anyone may publish presences.
        for n in 0..100 {
            peers.seen(&topic(&format!("n{n}")), &online("1", None));
        }
        assert_eq!(peers.clashing(), MAX_CLASHING);
    }
}
