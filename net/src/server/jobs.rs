//! The node's jobs service: in memory (answered on the node's loop) or shared in Redis (each
//! request on a blocking thread), the election of the node that listens to the device API,
//! and one request or timer tick run on either.

use tracing::debug;

use super::node::{Done, ROLLOUT_BATCH};
use crate::redis_store::RedisJobs;
use mqstore_core::envelope::{self, Publish};
use mqstore_core::jobs::topics as jobs_topics;
use mqstore_core::jobs::wire::OperatorAnswer;
use mqstore_core::jobs::{DurableJobs, Jobs, JobsStore, OPERATOR_TOPIC, Stored};

/// What a jobs request was, for the metrics.
pub(super) struct JobsHandled {
    pub(super) accepted: bool,
    pub(super) notifications: usize,
}

/// The jobs service of a node.
pub(super) enum JobsService {
    /// In this process's memory: answered at once.
    Local(Jobs<DurableJobs>),
    /// In Redis, shared by every node: the engine waits for Redis, so each request (and each
    /// timer tick) runs on a blocking thread of its own, many at once, and comes back as a
    /// [`JobsDone`]. Compare-and-set keeps them atomic (see [`mqstore_core::jobs`]).
    Shared(SharedJobs),
}

pub(super) struct SharedJobs {
    pub(super) store: RedisJobs,
    pub(super) done: tokio::sync::mpsc::UnboundedSender<Done>,
    pub(super) minute_ms: u64,
    /// Requests running.
    pub(super) in_flight: usize,
    /// A tick (timeouts, the next rollout batch) is running.
    pub(super) ticking: bool,
    /// When the next tick is due.
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
    pub(super) next_claim: u64,
    /// Until when this node may listen after its last successful claim, by its own clock: a
    /// renewal short of the lease's end, so that it has unsubscribed before another node can
    /// claim the lease.
    pub(super) held_until: u64,
    /// Giving the lease up (the node stops once it is done).
    pub(super) releasing: bool,
}

/// How long the device API listener's lease lasts without renewal.
pub(super) const LISTENER_LEASE_MS: u64 = 3_000;

/// How often the listener renews its lease, and the others try to take it.
pub(super) const LISTENER_RENEW_MS: u64 = 1_000;

impl SharedJobs {
    /// The engine over the shared state (cheap: it holds a handle on the connection).
    pub(super) fn engine(&self) -> Jobs<RedisJobs> {
        Jobs::with_store(self.store.clone(), self.minute_ms).with_rollout_batch(ROLLOUT_BATCH)
    }
}

/// A jobs timer tick: times out what ran out, and (while the broker keeps up) queues the next
/// things of the rollouts their rates allow; when the engine next has something to do.
pub(super) fn jobs_tick(
    jobs: &mut Jobs<&mut dyn JobsStore>,
    now_ms: u64,
    rollout_room: bool,
    out: &mut Vec<Publish>,
) -> Stored<Option<u64>> {
    jobs.expire(now_ms, out)?;
    if rollout_room && jobs.rolling_out()? {
        jobs.roll_out(now_ms, out)?;
    }
    jobs.next_wake(now_ms)
}

/// The things' notifications among a jobs call's publishes (its events are not counted).
pub(super) fn notifications_in(published: &[Publish]) -> usize {
    published
        .iter()
        .filter(|p| !jobs_topics::is_event(&p.topic))
        .count()
}

/// How often each node on Redis looks for jobs timers that ran out and for rollouts to go on
/// with (any node's tick may take any of them; each is done once).
pub(super) const JOBS_TICK_MS: u64 = 100;

/// Runs one jobs request on `jobs`: a device request (`$aws/things/T/jobs/...`) or an operator
/// request, pushing the notifications it causes and then its reply onto `out`. `None` for the
/// service's own replies and notifications coming back (not requests).
pub(super) fn run_jobs(
    jobs: &mut Jobs<&mut dyn JobsStore>,
    message: Publish,
    node: &str,
    now: u64,
    out: &mut Vec<Publish>,
) -> Option<JobsHandled> {
    let before = out.len();
    if message.topic != OPERATOR_TOPIC {
        jobs.handle(&message.topic, &message.payload, now, out)?;
        let (reply, notifications) = out[before..].split_last()?;
        return Some(JobsHandled {
            accepted: reply.topic.ends_with("/accepted"),
            notifications: notifications_in(notifications),
        });
    }
    match envelope::check_request(message.qos, message.properties, node) {
        envelope::Checked::Accept(invocation) => {
            let answer = jobs.operate(&message.payload, now, out);
            let handled = JobsHandled {
                accepted: matches!(answer, OperatorAnswer::Ok(_)),
                notifications: notifications_in(&out[before..]),
            };
            let mut properties = envelope::response_properties(&invocation, 200, None, node);
            properties.content_type = Some("application/json".into());
            out.push(Publish {
                topic: invocation.response_topic,
                // Our own type: it always serializes.
                payload: bytes::Bytes::from(serde_json::to_vec(&answer).unwrap_or_default()),
                qos: 1,
                properties,
            });
            Some(handled)
        }
        envelope::Checked::Reject(reply, _) => {
            out.push(*reply);
            None
        }
        envelope::Checked::Drop(reason) => {
            debug!(%reason, "operator request dropped");
            None
        }
    }
}
