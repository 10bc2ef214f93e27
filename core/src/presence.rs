//! What a server node says about itself, so that clients notice when it restarts.
//!
//! Each node publishes, retained, to [`topics::server_presence_topic`] at every connection:
//! `online {epoch} max_packet_size={n} lease_ms={n}`, and sets `offline {epoch}` (retained) as
//! its MQTT Will. The epoch is new for every start of the process. A client that sees a node's
//! epoch change knows the node lost what it held in memory (the KEYNOTIFY registrations among
//! it) and registers its observed keys again; the maximum packet size tells it which requests
//! the node could never receive (the broker drops what is larger than a subscriber's limit);
//! the lease tells it how often to renew its registrations; `share_group=` how the node receives
//! the requests and `serves=` what it serves, so that nodes on one broker notice one another
//! answering the same request ([`Peers`]). Fields a reader does not know are skipped, so later
//! versions can add some. A node that serves no state store (jobs and commands beside a broker
//! plugin that serves it) keeps a presence there too, saying so: clients pass it by.
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
    /// What the node serves; `None` when its presence does not say (a node of a version before
    /// this field, or a Will): the state store, which is all such a presence promised.
    pub services: Option<Services>,
}

/// What a node serves. Nodes that receive the same requests answer twice only those of a
/// service both serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Services {
    /// The state store's requests (and the clients' presence).
    pub state_store: bool,
    /// The AWS IoT Jobs device API, device shadows and the jobs operator API.
    pub jobs: bool,
    /// Commands to devices (`mqstore/commands/v1/…`) and the devices' answers.
    pub commands: bool,
}

impl Services {
    /// Every service (a node's default).
    pub const ALL: Services = Services {
        state_store: true,
        jobs: true,
        commands: true,
    };
    /// The state store alone: what a presence without `serves=` stands for.
    pub const STATE_STORE: Services = Services {
        state_store: true,
        jobs: false,
        commands: false,
    };

    /// The services both serve.
    pub fn both(self, other: Services) -> Services {
        Services {
            state_store: self.state_store && other.state_store,
            jobs: self.jobs && other.jobs,
            commands: self.commands && other.commands,
        }
    }

    /// Whether it names no service.
    pub fn is_empty(self) -> bool {
        !(self.state_store || self.jobs || self.commands)
    }

    /// The names of the services it names, as a presence says them (`state`, `jobs`,
    /// `commands`).
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        self.named().map(|(wire, _)| wire)
    }

    /// Each service it names, with its name in a presence (`state`, `jobs`, `commands`) and
    /// in a sentence.
    fn named(self) -> impl Iterator<Item = (&'static str, &'static str)> {
        [
            (self.state_store, "state", "the state store"),
            (self.jobs, "jobs", "jobs"),
            (self.commands, "commands", "commands"),
        ]
        .into_iter()
        .filter(|(on, ..)| *on)
        .map(|(_, wire, text)| (wire, text))
    }
}

/// "the state store, jobs and commands", "commands", "nothing": how a log line says it.
impl std::fmt::Display for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.named().map(|(_, text)| text).collect();
        match names.as_slice() {
            [] => f.write_str("nothing"),
            [one] => f.write_str(one),
            [first @ .., last] => write!(f, "{} and {last}", first.join(", ")),
        }
    }
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
            if let Some(services) = self.services {
                let names: Vec<&str> = services.names().collect();
                text.push_str(" serves=");
                text.push_str(&names.join(","));
            }
        }
        Bytes::from(text)
    }

    /// What the node serves ([`ServerPresence::services`], the state store when it does not
    /// say).
    pub fn serves(&self) -> Services {
        self.services.unwrap_or(Services::STATE_STORE)
    }

    /// Whether this node and `other`, both online, would both take some request: they serve
    /// a service in common, and by the rule of [`Subscription::overlaps`] from whichever side
    /// says how it subscribes (neither saying: nodes of earlier versions, not known to clash)
    /// both receive some of its requests.
    pub fn clashes_with(&self, other: &ServerPresence) -> bool {
        self.online
            && other.online
            && !self.serves().both(other.serves()).is_empty()
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
            services: None,
        };
        for field in parts {
            match field.split_once('=') {
                Some(("max_packet_size", n)) => presence.max_packet_size = Some(n.parse().ok()?),
                Some(("lease_ms", n)) => presence.registration_lease_ms = Some(n.parse().ok()?),
                Some(("share_group", "")) => presence.subscription = Some(Subscription::Every),
                Some(("share_group", group)) => {
                    presence.subscription = Some(Subscription::Shared(group.to_owned()));
                }
                Some(("serves", names)) => {
                    // A later version's services are skipped, as its fields are.
                    let names: Vec<&str> = names.split(',').collect();
                    presence.services = Some(Services {
                        state_store: names.contains(&"state"),
                        jobs: names.contains(&"jobs"),
                        commands: names.contains(&"commands"),
                    });
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
    /// The services both serve: theirs are the requests answered twice.
    pub services: Services,
}

/// The other nodes on this node's broker, as their presence messages say, and which of them
/// clash with it. A host subscribes (plainly: every node must read every presence) to
/// [`topics::SERVER_PRESENCE_FILTER`] and hands each message to [`Peers::seen`], retained ones
/// too (a node already running says so only in its retained presence).
#[derive(Debug, Clone)]
pub struct Peers {
    node_id: String,
    mine: Subscription,
    serves: Services,
    /// The clashing nodes online, by node id, with the epoch each was seen in.
    clashing: BTreeMap<String, String>,
}

/// How many clashing nodes [`Peers`] keeps: anyone allowed to publish a presence could name
/// many.
const MAX_CLASHING: usize = 64;

impl Peers {
    /// Node `node_id`, receiving the requests of the services it `serves` the `mine` way.
    pub fn new(node_id: impl Into<String>, mine: Subscription, serves: Services) -> Self {
        Self {
            node_id: node_id.into(),
            mine,
            serves,
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
        let clashing = ServerPresence::parse(payload)
            .filter(|p| p.online && self.mine.overlaps(p.subscription.as_ref()))
            .map(|p| (self.serves.both(p.serves()), p))
            .filter(|(services, _)| !services.is_empty());
        let Some((services, presence)) = clashing else {
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
            services,
        })
    }

    /// How this node receives the requests.
    pub fn subscription(&self) -> &Subscription {
        &self.mine
    }

    /// What this node serves.
    pub fn serves(&self) -> Services {
        self.serves
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
            services: None,
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
        // What it serves: each service by name, none, and a later version's skipped.
        let serving = |services| ServerPresence {
            services: Some(services),
            ..presence(true, None, None, Some(Subscription::Every))
        };
        let commands_only = Services {
            commands: true,
            ..Services::default()
        };
        for services in [
            Services::ALL,
            Services::STATE_STORE,
            commands_only,
            Services::default(),
        ] {
            assert_eq!(
                ServerPresence::parse(&serving(services).to_bytes()),
                Some(serving(services))
            );
        }
        assert_eq!(
            &serving(Services::ALL).to_bytes()[..],
            b"online 1f2e share_group= serves=state,jobs,commands"
        );
        assert_eq!(
            &serving(Services::default()).to_bytes()[..],
            b"online 1f2e share_group= serves="
        );
        let later = ServerPresence::parse(b"online 7 serves=commands,shadows").unwrap();
        assert_eq!(later.serves(), commands_only);
        assert_eq!(
            ServerPresence::parse(b"online 7").unwrap().serves(),
            Services::STATE_STORE
        );
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
    fn services_are_said_as_a_sentence_and_met_in_common() {
        let jobs_and_commands = Services {
            state_store: false,
            ..Services::ALL
        };
        assert_eq!(
            Services::ALL.to_string(),
            "the state store, jobs and commands"
        );
        assert_eq!(jobs_and_commands.to_string(), "jobs and commands");
        assert_eq!(Services::STATE_STORE.to_string(), "the state store");
        assert_eq!(Services::default().to_string(), "nothing");
        assert!(Services::STATE_STORE.both(jobs_and_commands).is_empty());
        assert_eq!(Services::ALL.both(jobs_and_commands), jobs_and_commands);
    }

    #[test]
    fn two_presences_clash_when_both_are_online_and_their_subscriptions_overlap() {
        let presence = |online, subscription| ServerPresence {
            epoch: "e".into(),
            online,
            max_packet_size: None,
            registration_lease_ms: None,
            subscription,
            services: None,
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
        // Both take every request, but of services neither serves both of: no clash.
        let serving = |services| ServerPresence {
            services: Some(services),
            ..presence(true, Some(Subscription::Every))
        };
        let (jobs, commands) = (
            Services {
                jobs: true,
                ..Services::default()
            },
            Services {
                commands: true,
                ..Services::default()
            },
        );
        assert!(!serving(jobs).clashes_with(&serving(commands)));
        assert!(!serving(Services::STATE_STORE).clashes_with(&serving(commands)));
        assert!(serving(Services::ALL).clashes_with(&serving(commands)));
        // A presence that does not say serves the state store.
        assert!(!serving(commands).clashes_with(&presence(true, Some(Subscription::Every))));
        assert!(serving(Services::ALL).clashes_with(&presence(true, Some(Subscription::Every))));
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
                services: None,
            }
            .to_bytes()
        };
        let mut peers = Peers::new("me", Subscription::Shared("g".into()), Services::ALL);
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
                theirs: Some(Subscription::Every),
                services: Services::STATE_STORE,
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

    #[test]
    fn peers_clash_only_over_a_service_both_serve() {
        let topic = |node: &str| topics::server_presence_topic(node);
        let serving = |epoch: &str, services| {
            ServerPresence {
                epoch: epoch.into(),
                online: true,
                max_packet_size: None,
                registration_lease_ms: None,
                subscription: Some(Subscription::Every),
                services: Some(services),
            }
            .to_bytes()
        };
        let jobs_and_commands = Services {
            state_store: false,
            ..Services::ALL
        };
        // A plugin with its jobs and commands switched off, beside a node that serves them.
        let mut plugin = Peers::new("plugin", Subscription::Every, Services::STATE_STORE);
        assert_eq!(
            plugin.seen(&topic("n"), &serving("1", jobs_and_commands)),
            None
        );
        assert_eq!(plugin.clashing(), 0);
        // With its commands on: a clash over commands alone.
        let mut plugin = Peers::new(
            "plugin",
            Subscription::Every,
            Services {
                jobs: false,
                ..Services::ALL
            },
        );
        let clash = plugin.seen(&topic("n"), &serving("1", jobs_and_commands));
        assert_eq!(
            clash.map(|c| c.services),
            Some(Services {
                commands: true,
                ..Services::default()
            })
        );
        // The node restarted without commands: forgotten.
        let jobs = Services {
            jobs: true,
            ..Services::default()
        };
        assert_eq!(plugin.seen(&topic("n"), &serving("2", jobs)), None);
        assert_eq!(plugin.clashing(), 0);
    }
}
