//! The server half as one state machine: a [`Node`] owns the state store engine on its own
//! store (memory, or the durable log of a data directory), the jobs service, the command
//! service ([`commands`], its registry in memory) and the durability cycle; a host only moves
//! messages and time. The mosquitto plugin drives all of it, and so does `mqstore serve` on its
//! memory and `--data-dir` stores (on Redis, `serve` runs the engine's operations, the jobs
//! engine and the `Commander` against Redis itself).
//!
//! Inputs: a message and who sent it ([`Node::handle`]), a client that is gone
//! ([`Node::drop_clients`]), the time ([`Node::on_deadline`] at [`Node::next_deadline`]), the
//! broker's acknowledgement of a publish that asked for one ([`Node::acknowledged`]), and the
//! end of a sync ([`Node::synced`]). Outputs, polled after every input: the publishes
//! ([`Node::poll_output`]), each with whom it is for ([`To`]) so that no host re-reads a topic
//! to learn what the node meant, and the syncs of the data file to run off the host's thread
//! ([`Node::poll_sync`]). With `fsync always` a publish comes out only once the writes before
//! it are on disk.
//!
//! Which messages are the node's is [`Node::route`]: a host that sees every message (a broker
//! plugin) asks it before copying one. A whole host, its broker and clock left abstract:
//!
//! ```
//! use mqstore_core::envelope::Publish;
//! use mqstore_core::server::Node;
//! use mqstore_core::server::commands::Seen;
//!
//! /// What a host has: a broker connection (or a broker, for a plugin) and a clock.
//! trait Host {
//!     /// The next message and its sender (if known), or `None` once `deadline` passed.
//!     fn next_message(&mut self, deadline: Option<u64>) -> Option<(Publish, Option<String>)>;
//!     /// Publishes to one client, or to the topic's subscribers; the broker's reason code.
//!     fn publish(&mut self, publish: &Publish, client: Option<&str>) -> u8;
//!     fn now(&self) -> u64;
//!     /// Counts and logs what the command service did.
//!     fn count(&mut self, seen: Seen);
//! }
//!
//! fn run(node: &mut Node, host: &mut impl Host) {
//!     loop {
//!         // While the broker keeps up, a job's rollout may queue its next batch.
//!         let deadline = node.next_deadline(host.now(), true);
//!         match host.next_message(deadline) {
//!             Some((message, sender)) => {
//!                 node.handle(message, sender.as_deref(), false, host.now());
//!             }
//!             None => {
//!                 node.on_deadline(host.now(), true);
//!             }
//!         }
//!         while let Some(out) = node.poll_output() {
//!             let code = host.publish(&out.publish, out.to.client_id());
//!             if let Some(receipt) = &out.receipt {
//!                 node.acknowledged(receipt, Some(code), host.now());
//!             }
//!         }
//!         while let Some(sync) = node.poll_sync() {
//!             let result = sync.run(); // off the host's thread in a real host
//!             node.synced(result, host.now());
//!         }
//!         while let Some(seen) = node.poll_commands_seen() {
//!             host.count(seen); // what the command service did: counters, logs
//!         }
//!         if node.failure().is_some() {
//!             return; // the data directory failed: stop, and send nothing more
//!         }
//!     }
//! }
//! ```

pub mod commands;
pub mod jobs;

use std::collections::VecDeque;

use crate::commands::definitions::Definition;
use crate::disk::{self, Compacted, Disk, DiskError, Durability, Sync};
use crate::engine::{Engine, EngineConfig, Outcome};
use crate::envelope::Publish;
use crate::hlc::HlcError;
use crate::jobs::{
    DurableJobs, Jobs, JobsStore, OPERATOR_TOPIC, StoreError, topics as jobs_topics,
};
use crate::store::{ClientId, DurableStore, Quotas, Recovered, StoreStats};
use crate::topics;
use commands::{Seen, Service, ServiceConfig};

pub use jobs::{JobsHandled, JobsStep, JobsWork, NotAnswered};

/// Whom a publish of the node is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum To {
    /// The client whose request this answers (on the response topic it named): its MQTT
    /// client id, when the host named the sender.
    Requester(Option<String>),
    /// The client with this registration (its id as the engine keeps it): a notification of
    /// a key it watches. [`To::client_id`] is its MQTT client id.
    Watcher(String),
    /// Whoever subscribes to the topic: jobs replies and notifications, events.
    Subscribers,
}

impl To {
    /// The MQTT client id a publish goes to directly, when it is for one client (a watcher, or
    /// a requester the host named); `None` for subscribers of the topic.
    pub fn client_id(&self) -> Option<&str> {
        match self {
            To::Watcher(registration) => Some(topics::mqtt_client_of(registration)),
            To::Requester(client) => client.as_deref(),
            To::Subscribers => None,
        }
    }
}

/// A publish of the node, and whom it is for.
#[derive(Debug, Clone, PartialEq)]
pub struct Out {
    /// What to publish (topic, payload, QoS, properties).
    pub publish: Publish,
    /// Whom it is for.
    pub to: To,
    /// Tell the node when the broker took it ([`Node::acknowledged`]): a one-way command,
    /// whose caller waits for that.
    pub receipt: Option<Receipt>,
}

/// What the host gives back when the broker took (or refused) a publish: its PUBACK, or, for
/// a host inside the broker, the broker's answer to the publish call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt(pub(crate) String);

/// What a message on `topic` is to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Route {
    /// A state store request.
    StateStore,
    /// A jobs request (device or operator API), when the node serves jobs.
    Jobs,
    /// A caller's command request or a device's answer, when the node serves commands.
    Commands,
    /// A client's presence message: the registrations of these clients end (see
    /// [`presence_of`]).
    Presence(Vec<String>),
    /// A server node's presence (this node's own among them): for [`Peers::seen`], retained
    /// or not.
    ///
    /// [`Peers::seen`]: crate::presence::Peers::seen
    ServerPresence,
    /// Not the node's.
    Other,
}

/// What a message on `topic` is to a node that serves jobs or not, and commands with
/// `commands` (its requests and the answers it reads). A retained presence is not news: it
/// replays at every subscription and says nothing about the client now.
pub fn route(topic: &str, retained: bool, serves_jobs: bool, commands: Option<&Service>) -> Route {
    if topics::node_of_server_presence_topic(topic).is_some() {
        return Route::ServerPresence;
    }
    if let Some(clients) = presence_of(topic) {
        return match retained {
            true => Route::Other,
            false => Route::Presence(clients),
        };
    }
    if topic == topics::INVOKE || topics::client_of_identified_invoke(topic).is_some() {
        return Route::StateStore;
    }
    if serves_jobs && jobs_topics::is_jobs(topic) {
        return Route::Jobs;
    }
    if commands.is_some_and(|c| c.is_for(topic)) {
        return Route::Commands;
    }
    Route::Other
}

/// Whose registrations a presence message on `topic` ends: an identified client's (in its own
/// tree, which only it may publish to) end both its identified registrations and those made
/// in its name on the standard topic; a standard presence (which anyone could publish) only
/// the latter.
pub fn presence_of(topic: &str) -> Option<Vec<String>> {
    if let Some(client) = topics::client_of_identified_presence(topic) {
        return Some(vec![topics::identified(&client), client]);
    }
    topics::client_of_presence_topic(topic).map(|client| vec![client])
}

/// The registrations of an MQTT client whose connection the host saw end (a broker plugin
/// knows it for sure): those made on its own topics and on the standard one.
pub fn registrations_of(client_id: &str) -> [String; 2] {
    [topics::identified(client_id), client_id.to_owned()]
}

/// What [`Node::handle`] did with a message.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Handled {
    /// A state store request, and how it ended.
    State(Outcome),
    /// A jobs request: how it was answered, or why not.
    Jobs(Result<JobsHandled, NotAnswered>),
    /// A command request or a device's answer (what the command service did with it is in
    /// [`Node::poll_commands_seen`]).
    Commands,
    /// A presence message ended these clients' registrations (how many there were).
    ClientsGone {
        /// Whose registrations ended.
        clients: Vec<String>,
        /// How many registrations they held.
        registrations: usize,
    },
    /// Not the node's message (or the data directory failed: nothing more is served).
    Ignored,
}

/// What a timer turn did, for the host's logs and metrics.
#[derive(Debug, Default)]
pub struct Ticked {
    /// Clients whose registration lease ended, with the registrations dropped.
    pub leases_ended: Vec<(ClientId, usize)>,
    /// Things notified by jobs timers and rollouts.
    pub jobs_notified: usize,
    /// The jobs timers failed (they are tried again at the next deadline).
    pub jobs_error: Option<StoreError>,
    /// Commands that timed out.
    pub commands_timed_out: usize,
}

/// The jobs service of a node.
#[derive(Debug, Clone, Copy)]
pub struct JobsConfig {
    /// How long a minute of the jobs timers is (60 s; shorter in tests).
    pub minute_ms: u64,
    /// Targets of a job queued per rollout step, so that other requests are answered between
    /// steps (see [`Jobs::with_rollout_batch`]).
    pub rollout_batch: usize,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self {
            minute_ms: 60_000,
            rollout_batch: 64,
        }
    }
}

/// Settings of a [`Node`].
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The state store engine's.
    pub engine: EngineConfig,
    /// The store's limits.
    pub quotas: Quotas,
    /// The jobs service, unless off.
    pub jobs: Option<JobsConfig>,
    /// The data directory, or memory only.
    pub durability: Option<Durability>,
    /// The command service (its registry in memory), unless off.
    pub commands: Option<ServiceConfig>,
}

/// Why a node cannot start.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The node id cannot be part of a version.
    #[error("node id {0:?}: {1}")]
    NodeId(String, HlcError),
    /// The data directory cannot be used.
    #[error(transparent)]
    Disk(#[from] DiskError),
}

/// What opening the data directory found, for the host's log.
#[derive(Debug)]
pub struct Opened {
    /// The data file.
    pub path: std::path::PathBuf,
    /// What recovery read.
    pub recovered: Recovered,
}

/// The durable side of a node.
struct Durable {
    disk: Disk<Out>,
    /// Syncs to run, in order (one at a time: the next starts when it ended).
    syncs: VecDeque<Sync>,
    /// The jobs on disk while the jobs service is off: written back at compactions.
    kept_jobs: DurableJobs,
}

/// One server node on its own store: see the module's documentation.
pub struct Node {
    engine: Engine<DurableStore>,
    jobs: Option<Jobs<DurableJobs>>,
    commands: Option<Service>,
    durable: Option<Durable>,
    /// The data directory failed: nothing more is served or sent.
    failed: Option<DiskError>,
    /// What the engines returned for the current input.
    scratch: Vec<Publish>,
    output: VecDeque<Out>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_id", &self.engine.node_id())
            .field("jobs", &self.jobs.is_some())
            .field("durable", &self.durable.is_some())
            .finish()
    }
}

impl Node {
    /// A node as `config` says, at `now_ms`: with a data directory, its log read and
    /// replayed (what that found is returned for the host's log).
    pub fn open(config: NodeConfig, now_ms: u64) -> Result<(Node, Option<Opened>), NodeError> {
        let node_id = config.engine.node_id.clone();
        let mut engine = Engine::new(config.engine, DurableStore::with_quotas(config.quotas))
            .map_err(|e| NodeError::NodeId(node_id, e))?;
        let mut jobs = config.jobs.map(|c| {
            Jobs::with_store(DurableJobs::default(), c.minute_ms)
                .with_rollout_batch(c.rollout_batch)
        });
        let mut opened = None;
        let durable = match &config.durability {
            None => None,
            Some(durability) => {
                let (store, durable_jobs, recovered, disk) =
                    disk::open(durability, config.quotas, now_ms, |recovered| {
                        if let Some(newest) = &recovered.newest {
                            engine.witness(newest);
                        }
                        engine.clock_now(now_ms)
                    })?;
                *engine.store_mut() = store;
                let kept_jobs = match &mut jobs {
                    Some(jobs) => {
                        *jobs.store_mut() = durable_jobs;
                        DurableJobs::default()
                    }
                    None => durable_jobs,
                };
                opened = Some(Opened {
                    path: disk.path().to_owned(),
                    recovered,
                });
                Some(Durable {
                    disk,
                    syncs: VecDeque::new(),
                    kept_jobs,
                })
            }
        };
        let mut commands = config.commands.map(Service::new);
        if let (Some(commands), Some(durable)) = (&mut commands, &durable) {
            let table = match &jobs {
                Some(jobs) => jobs.store(),
                None => &durable.kept_jobs,
            };
            commands.restore_definitions(kept_definitions(table, durable.disk.path())?);
        }
        let node = Node {
            engine,
            jobs,
            commands,
            durable,
            failed: None,
            scratch: Vec::new(),
            output: VecDeque::new(),
        };
        Ok((node, opened))
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        self.engine.node_id()
    }

    /// Whether the node serves jobs.
    pub fn serves_jobs(&self) -> bool {
        self.jobs.is_some()
    }

    /// What a message on `topic` is to this node (see [`route`]).
    pub fn route(&self, topic: &str, retained: bool) -> Route {
        route(topic, retained, self.jobs.is_some(), self.commands.as_ref())
    }

    /// The state store's engine (its clock, its settings).
    pub fn engine(&self) -> &Engine<DurableStore> {
        &self.engine
    }

    /// What the state store holds.
    pub fn stats(&self) -> StoreStats {
        self.engine.stats()
    }

    /// Why the data directory failed, once it did: the node serves nothing more, and what
    /// waited for the disk is never sent (it may not be on disk).
    pub fn failure(&self) -> Option<&DiskError> {
        self.failed.as_ref()
    }

    /// Handles a message from the broker: `sender` is the MQTT client that published it,
    /// where the host knows (a broker plugin does; a client of the broker does not).
    pub fn handle(
        &mut self,
        message: Publish,
        sender: Option<&str>,
        retained: bool,
        now_ms: u64,
    ) -> Handled {
        if self.failed.is_some() {
            return Handled::Ignored;
        }
        let queued = self.output.len();
        let handled = match self.route(&message.topic, retained) {
            Route::StateStore => {
                let outcome = self
                    .engine
                    .handle_from(message, sender, now_ms, &mut self.scratch);
                self.queue_state_output(sender);
                Handled::State(outcome)
            }
            Route::Jobs => {
                let Some(jobs) = &mut self.jobs else {
                    return Handled::Ignored;
                };
                let operator = message.topic == OPERATOR_TOPIC;
                let node_id = self.engine.node_id();
                let ran = jobs::run_request(
                    &mut jobs.as_dyn(),
                    &message,
                    node_id,
                    now_ms,
                    &mut self.scratch,
                );
                // An operator's answer (or envelope error) goes to its response topic; the
                // device API's replies, notifications and events to their subscribers.
                let answered = matches!(ran, Ok(_) | Err(NotAnswered::Rejected));
                self.queue_jobs_output((operator && answered).then_some(sender));
                Handled::Jobs(ran)
            }
            Route::Commands => {
                let Some(commands) = &mut self.commands else {
                    return Handled::Ignored;
                };
                commands.handle(message, sender, now_ms);
                self.output
                    .extend(std::iter::from_fn(|| commands.poll_output()));
                let changes = commands.take_definition_changes();
                if let Some(durable) = &mut self.durable {
                    let table = match &mut self.jobs {
                        Some(jobs) => jobs.store_mut(),
                        None => &mut durable.kept_jobs,
                    };
                    keep_definitions(table, changes);
                }
                Handled::Commands
            }
            Route::Presence(clients) => {
                let registrations = self.drop_clients(&clients);
                Handled::ClientsGone {
                    clients,
                    registrations,
                }
            }
            // The host's to read (`presence::Peers`): nothing of the node's.
            Route::ServerPresence | Route::Other => Handled::Ignored,
        };
        self.persist(now_ms, queued);
        handled
    }

    /// Drops the registrations of clients that are gone (a presence Will, a notification
    /// nobody receives, a connection the broker saw end): how many there were.
    pub fn drop_clients(&mut self, clients: &[String]) -> usize {
        // Registrations are not written to the disk: nothing to persist.
        clients.iter().map(|c| self.engine.drop_client(c)).sum()
    }

    /// When the node next has work: an expiry, a lease's end, a jobs timer or rollout step
    /// (a rollout's next step only while the host has `room` for what it publishes), or an
    /// `everysec` sync.
    pub fn next_deadline(&self, now_ms: u64, room: bool) -> Option<u64> {
        let jobs = self.jobs.as_ref().and_then(|jobs| {
            match jobs.next_wake(now_ms).ok().flatten() {
                // Queued notifications first: the tick after the host took them.
                Some(at) if at <= now_ms && !room => jobs.next_deadline().ok().flatten(),
                wake => wake,
            }
        });
        let disk = self.durable.as_ref().and_then(|d| d.disk.deadline());
        let commands = self.commands.as_ref().and_then(Service::next_deadline);
        self.engine
            .next_deadline()
            .into_iter()
            .chain(jobs)
            .chain(disk)
            .chain(commands)
            .min()
    }

    /// The timers: expired keys notified, ended registration leases dropped, jobs timed out
    /// and rollouts continued (while the host has `room`), a due `everysec` sync started.
    pub fn on_deadline(&mut self, now_ms: u64, room: bool) -> Ticked {
        let mut ticked = Ticked::default();
        if self.failed.is_some() {
            return ticked;
        }
        let queued = self.output.len();
        self.engine.expire(now_ms, &mut self.scratch);
        self.queue_state_output(None);
        ticked.leases_ended = self.engine.expire_leases(now_ms);
        if let Some(jobs) = &mut self.jobs {
            if let Err(error) = jobs::tick(&mut jobs.as_dyn(), now_ms, room, &mut self.scratch) {
                ticked.jobs_error = Some(error);
            }
            ticked.jobs_notified = jobs::notifications_in(&self.scratch);
            self.queue_jobs_output(None);
        }
        if let Some(commands) = &mut self.commands {
            ticked.commands_timed_out = commands.on_deadline(now_ms);
            self.output
                .extend(std::iter::from_fn(|| commands.poll_output()));
        }
        self.persist(now_ms, queued);
        ticked
    }

    /// The broker took (a reason code below 0x80) or refused the publish that carried
    /// `receipt` (`None`: the connection dropped before it said).
    pub fn acknowledged(&mut self, receipt: &Receipt, code: Option<u8>, now_ms: u64) {
        if let Some(commands) = &mut self.commands {
            commands.acknowledged(receipt, code, now_ms);
            self.output
                .extend(std::iter::from_fn(|| commands.poll_output()));
        }
    }

    /// What the command service did next (for the host's counters and logs), in order.
    pub fn poll_commands_seen(&mut self) -> Option<Seen> {
        self.commands.as_mut()?.poll_seen()
    }

    /// The next publish to send, in order.
    pub fn poll_output(&mut self) -> Option<Out> {
        self.output.pop_front()
    }

    /// Publishes waiting to be polled.
    pub fn output_len(&self) -> usize {
        self.output.len()
    }

    /// The next sync of the data file to run off the host's thread; its result goes to
    /// [`Node::synced`]. One runs at a time.
    pub fn poll_sync(&mut self) -> Option<Sync> {
        self.durable.as_mut()?.syncs.pop_front()
    }

    /// A sync ended: what waited for it comes out, the next sync starts, and the log is
    /// compacted when it has grown enough (what that did is returned for the host's log).
    /// A failed sync fails the node ([`Node::failure`]).
    pub fn synced(&mut self, result: std::io::Result<()>, now_ms: u64) -> Option<Compacted> {
        let durable = self.durable.as_mut()?;
        if self.failed.is_some() {
            return None;
        }
        match durable.disk.sync_ended(result, now_ms) {
            Ok(released) => self.output.extend(released),
            Err(error) => {
                self.failed = Some(error);
                return None;
            }
        }
        self.persist(now_ms, self.output.len());
        let durable = self.durable.as_mut()?;
        let jobs = match &self.jobs {
            Some(jobs) => jobs.store(),
            None => &durable.kept_jobs,
        };
        let clock = self.engine.clock_now(now_ms);
        match durable
            .disk
            .compact_if_due(self.engine.store(), jobs, &clock)
        {
            Ok(compacted) => compacted,
            Err(error) => {
                self.failed = Some(error);
                None
            }
        }
    }

    /// Nothing waits for the disk (a host shuts down once it is so).
    pub fn idle(&self) -> bool {
        self.durable.as_ref().is_none_or(|d| d.disk.idle())
    }

    /// Syncs the data file a last time (at shutdown).
    pub fn close(&mut self) -> Result<(), DiskError> {
        match &mut self.durable {
            Some(durable) => durable.disk.close(),
            None => Ok(()),
        }
    }

    /// Queues what the state store engine returned: notifications to their watchers, keyspace
    /// events to subscribers, the answer (last) to the requester.
    fn queue_state_output(&mut self, sender: Option<&str>) {
        for publish in self.scratch.drain(..) {
            let to = if topics::is_keyspace_event(&publish.topic) {
                To::Subscribers
            } else {
                match topics::client_of_notify_topic(&publish.topic) {
                    Some(client) => To::Watcher(client),
                    None => To::Requester(sender.map(str::to_owned)),
                }
            };
            self.output.push_back(Out {
                publish,
                to,
                receipt: None,
            });
        }
    }

    /// Queues what the jobs engine returned, to subscribers; with `requester`, the last
    /// publish is the operator API's answer, for the client that asked.
    fn queue_jobs_output(&mut self, requester: Option<Option<&str>>) {
        let answer = requester.and(self.scratch.len().checked_sub(1));
        for (i, publish) in self.scratch.drain(..).enumerate() {
            let to = match (Some(i) == answer, requester) {
                (true, Some(sender)) => To::Requester(sender.map(str::to_owned)),
                _ => To::Subscribers,
            };
            self.output.push_back(Out {
                publish,
                to,
                receipt: None,
            });
        }
    }

    /// Hands the stores' new records to the disk; with `fsync always`, what was queued from
    /// `queued` on (by this input) waits for their sync.
    fn persist(&mut self, now_ms: u64, queued: usize) {
        let Some(durable) = &mut self.durable else {
            return;
        };
        let mut records = self.engine.store_mut().take_pending();
        if let Some(jobs) = &mut self.jobs {
            records.extend(jobs.store_mut().take_pending());
        }
        records.extend(durable.kept_jobs.take_pending());
        match durable.disk.persist(records, now_ms) {
            Ok((hold_until, sync)) => {
                durable.syncs.extend(sync);
                if let Some(batch) = hold_until {
                    for out in self.output.drain(queued..) {
                        durable.disk.hold(batch, out);
                    }
                }
            }
            Err(error) => {
                // What this input queued may not be on disk: never sent.
                self.output.truncate(queued);
                self.failed = Some(error);
            }
        }
    }
}

/// The data directory's table of stored command definitions (by id, as JSON): one of the named
/// tables the durable jobs store keeps (every durable node has one, with jobs on or off), so it
/// is logged, replayed and compacted with them.
const DEFINITIONS_TABLE: &str = "commands:definitions";

/// Writes the command service's changes of its stored commands to the data directory's table.
fn keep_definitions(table: &mut DurableJobs, changes: Vec<(String, Option<Definition>)>) {
    for (id, definition) in changes {
        // Our own type: it always serializes. The memory table cannot fail.
        let json = definition.map(|d| serde_json::to_vec(&d).unwrap_or_default());
        let _ = table.put_entry(DEFINITIONS_TABLE, &id, json.as_deref(), false);
    }
}

/// The stored command definitions a data directory kept.
fn kept_definitions(
    table: &DurableJobs,
    path: &std::path::Path,
) -> Result<Vec<Definition>, DiskError> {
    let unreadable = |reason: String| DiskError::JobsRecord {
        path: path.to_owned(),
        reason: format!("a stored command definition: {reason}"),
    };
    let entries = table
        .entries(DEFINITIONS_TABLE, None, u64::MAX)
        .map_err(|e| unreadable(e.to_string()))?;
    entries
        .into_iter()
        .map(|(id, json)| {
            serde_json::from_slice(&json).map_err(|e| unreadable(format!("{id}: {e}")))
        })
        .collect()
}
