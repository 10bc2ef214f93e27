//! The node's jobs service: in memory (the core node's, answered on the node's loop) or shared
//! in Redis (each request a [`JobsWork`] whose store calls run on the node's connection), and
//! the election of the node that listens to the device API.

use super::done::Done;
use crate::redis_store::RedisJobs;
use mqstore_core::envelope::Publish;
use mqstore_core::server::JobsWork;
use std::sync::Arc;

/// The jobs service of a node.
#[allow(clippy::large_enum_variant)] // one per node, made once and never moved after
pub(super) enum JobsService {
    /// In this process's memory: the node's own ([`mqstore_core::server::Node`]), answered at
    /// once.
    Local,
    /// In Redis, shared by every node: each request (and each timer tick) is a [`JobsWork`]
    /// whose store calls the node runs on Redis as they come, many works at once, none
    /// waiting on a thread. Compare-and-set keeps them atomic (see [`mqstore_core::jobs`]).
    Shared(SharedJobs),
}

pub(super) struct SharedJobs {
    pub(super) store: Arc<RedisJobs>,
    pub(super) done: tokio::sync::mpsc::UnboundedSender<Done>,
    pub(super) minute_ms: u64,
    /// Requests running.
    pub(super) in_flight: usize,
    /// The device shadows' requests among them, by thing (AWS's limit per device).
    pub(super) shadows_in_flight: mqstore_core::shadow::InFlight,
    /// Ticks (timeouts, the next rollout batch) running.
    pub(super) ticking: usize,
    /// The last tick to end left work due at once (a rollout goes on): the next tick starts
    /// while another still runs (see [`TICKS_WHILE_BUSY`]).
    pub(super) busy: bool,
    /// When the next tick is due, on the node's monotonic clock (`Node::monotonic`).
    pub(super) next_tick: u64,
    /// With a share group: the election of the node that listens to the device API.
    pub(super) listener: Option<Listener>,
}

/// This node's part in electing the one node that subscribes to the device API (a lease in
/// Redis, renewed every [`LISTENER_RENEW_MS`]; another node takes over within
/// [`LISTENER_LEASE_MS`] of the listener's death, and at once when it stops cleanly).
pub(super) struct Listener {
    /// Who this node is in the lease (node id and a random part: a restarted node is new).
    pub(super) token: String,
    /// Whether this node holds the lease and is subscribed.
    pub(super) leader: bool,
    /// A claim is running.
    pub(super) claiming: bool,
    /// When the next claim is due, on the node's monotonic clock (`Node::monotonic`), as
    /// `held_until` is.
    pub(super) next_claim: u64,
    /// Until when this node may listen after its last successful claim, by its own
    /// monotonic clock: a renewal short of the lease's end, so that it has unsubscribed
    /// before another node can claim the lease.
    pub(super) held_until: u64,
    /// Giving the lease up (the node stops once it is done).
    pub(super) releasing: bool,
}

/// Targets of a new job queued per turn of the server's loop: each makes up to two
/// notifications, and an answer to another request waits behind at most one batch's.
pub(super) const ROLLOUT_BATCH: usize = 64;

/// How long the device API listener's lease lasts without renewal.
pub(super) const LISTENER_LEASE_MS: u64 = 3_000;

/// How often the listener renews its lease, and the others try to take it.
pub(super) const LISTENER_RENEW_MS: u64 = 1_000;

impl SharedJobs {
    /// A request's work on the shared state.
    pub(super) fn request(&self, message: Publish, node_id: &str, now_ms: u64) -> Box<JobsWork> {
        Box::new(JobsWork::request(
            message,
            node_id,
            now_ms,
            self.minute_ms,
            ROLLOUT_BATCH,
        ))
    }

    /// Whether another tick may start now: one at a time while idle, up to
    /// [`TICKS_WHILE_BUSY`] while a rollout goes on.
    pub(super) fn may_tick(&self) -> bool {
        self.ticking < if self.busy { TICKS_WHILE_BUSY } else { 1 }
    }

    /// A timer tick's work on the shared state.
    pub(super) fn tick(&self, now_ms: u64, room: bool) -> Box<JobsWork> {
        Box::new(JobsWork::tick(now_ms, room, self.minute_ms, ROLLOUT_BATCH))
    }
}

/// Ticks one node runs at once while a rollout goes on. A tick's store calls are round trips
/// one after another (due timers, schedules, rollouts, then the batch's claim, records and
/// writes): with two, one batch is claimed while the other's are written, and Redis and the
/// node both stay busy. Concurrent ticks are safe as ticks of several nodes are (each timer
/// and each batch is claimed once).
pub(super) const TICKS_WHILE_BUSY: usize = 2;

/// How often each node on Redis looks for jobs timers that ran out and for rollouts to go on
/// with (any node's tick may take any of them; each is done once).
pub(super) const JOBS_TICK_MS: u64 = 100;
