//! One jobs request or timer tick, on any [`JobsStore`]: the steps every host runs the jobs
//! engine by (the node on its own store; `mqstore serve` on Redis, off its loop).

use crate::envelope::{self, DropReason, Publish};
use crate::jobs::wire::OperatorAnswer;
use crate::jobs::{Answered, Jobs, JobsStore, OPERATOR_TOPIC, Stored, topics};

/// What a jobs request did: how it was answered, and how many things it notified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobsHandled {
    /// Accepted (`…/accepted`, or an operator answer), or refused.
    pub answered: Answered,
    /// The things' notifications it published (events not counted).
    pub notifications: usize,
}

/// Why a jobs message was not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NotAnswered {
    /// Not a request: the service's own replies and notifications coming back.
    NoRequest,
    /// An operator request refused by its envelope (its error answer is queued).
    Rejected,
    /// An operator request without a place to answer to.
    Dropped(DropReason),
}

/// Runs one jobs request on `jobs`: a device request (`$aws/things/T/jobs/...`) or an operator
/// request, pushing the notifications it causes and then its reply onto `out`.
pub fn run_request(
    jobs: &mut Jobs<&mut dyn JobsStore>,
    message: Publish,
    node_id: &str,
    now_ms: u64,
    out: &mut Vec<Publish>,
) -> Result<JobsHandled, NotAnswered> {
    let before = out.len();
    if message.topic != OPERATOR_TOPIC {
        let answered = jobs
            .handle(&message.topic, &message.payload, now_ms, out)
            .ok_or(NotAnswered::NoRequest)?;
        let notifications = notifications_in(&out[before..out.len().saturating_sub(1)]);
        return Ok(JobsHandled {
            answered,
            notifications,
        });
    }
    match envelope::check_request(message.qos, message.properties, node_id) {
        envelope::Checked::Accept(invocation) => {
            let answer = jobs.operate(&message.payload, now_ms, out);
            let handled = JobsHandled {
                answered: match answer {
                    OperatorAnswer::Ok(_) => Answered::Accepted,
                    _ => Answered::Rejected,
                },
                notifications: notifications_in(&out[before..]),
            };
            let mut properties = envelope::response_properties(&invocation, 200, None, node_id);
            properties.content_type = Some("application/json".into());
            out.push(Publish {
                topic: invocation.response_topic,
                // Our own type: it always serializes.
                payload: bytes::Bytes::from(serde_json::to_vec(&answer).unwrap_or_default()),
                qos: 1,
                properties,
            });
            Ok(handled)
        }
        envelope::Checked::Reject(reply, _) => {
            out.push(*reply);
            Err(NotAnswered::Rejected)
        }
        envelope::Checked::Drop(reason) => Err(NotAnswered::Dropped(reason)),
    }
}

/// A jobs timer tick: times out what ran out, and (while the host's queue has `room`) queues
/// the next things of the rollouts their rates allow; when the engine next has work.
///
/// After a full batch the answer is "now" without asking the store (more may go at once): on
/// Redis a tick is a handful of round trips, and a large rollout is many ticks.
pub fn tick(
    jobs: &mut Jobs<&mut dyn JobsStore>,
    now_ms: u64,
    room: bool,
    out: &mut Vec<Publish>,
) -> Stored<Option<u64>> {
    jobs.expire(now_ms, out)?;
    if room && jobs.roll_out(now_ms, out)? >= jobs.rollout_batch() {
        return Ok(Some(now_ms));
    }
    jobs.next_wake(now_ms)
}

/// The things' notifications among a jobs call's publishes (its events are not counted).
pub fn notifications_in(published: &[Publish]) -> usize {
    published
        .iter()
        .filter(|p| !topics::is_event(&p.topic))
        .count()
}
