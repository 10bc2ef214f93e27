//! A rollout's pace and a job's abort: arithmetic over a job's settings, its [`Pace`] and the
//! counts of its executions, with no I/O (the engine, [`super::Jobs`], reads and writes them).
//!
//! A rate-limited rollout may have notified `pace.count + ⌊rate × (now − pace.at_ms) / minute⌋`
//! things by `now`, the pace anchored one thing's time before the rollout starts so that the
//! first thing goes at once: the things go evenly, not in a burst at the top of each minute.
//! A rollout that fell behind (a node down, a broker slow to take the notifications) is
//! anchored again where it is instead of catching up in a burst; so is one whose exponential
//! rate goes up. And whatever the pace says, a claim never makes the things claimed in the
//! last minute more than the rate: the pace keeps the claims of the last minute, and every
//! claim is recorded there (by compare-and-set of the job) before it is made, so nodes that
//! claim at once cannot together exceed it either.

use super::model::{Job, Pace};
use super::store::Counts;
use super::wire::Status;
use super::wire::{AbortCriteria, JobStatus};

/// What a rollout may do now.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Allowance {
    /// How many things to claim now.
    pub count: u64,
    /// The pace to store first (the rate went up, or the rollout is anchored again).
    pub new_pace: Option<Pace>,
    /// When the next thing may go, if not now.
    pub next_at: Option<u64>,
    /// The rate now, per minute.
    pub rate: Option<f64>,
}

/// The rate of `job`'s rollout now (per minute), given its pace and how many things were
/// notified and succeeded; with the pace moved on when the rate went up.
pub(crate) fn rate(job: &Job, notified: u64, succeeded: u64) -> (Option<f64>, Pace) {
    let Some(config) = &job.config.job_executions_rollout_config else {
        return (None, job.pace.clone());
    };
    let maximum = config.maximum_per_minute.map(f64::from);
    let Some(exponential) = &config.exponential_rate else {
        return (maximum, job.pace.clone());
    };
    let ceiling = maximum.unwrap_or(1000.0);
    let criteria = &exponential.rate_increase_criteria;
    let (count, step) = match (
        criteria.number_of_notified_things,
        criteria.number_of_succeeded_things,
    ) {
        (Some(step), _) => (notified, u64::from(step)),
        (None, Some(step)) => (succeeded, u64::from(step)),
        (None, None) => (notified, u64::MAX),
    };
    let mut pace = job.pace.clone();
    let mut rate = pace
        .rate
        .unwrap_or(f64::from(exponential.base_rate_per_minute))
        .min(ceiling);
    let mut raised = false;
    while step > 0 && count.saturating_sub(pace.raised_at) >= step {
        pace.raised_at += step;
        rate = (rate * exponential.increment_factor).min(ceiling);
        raised = true;
    }
    if raised {
        pace.rate = Some(rate);
    }
    (Some(rate), pace)
}

fn one_thing_ms(rate: f64, minute_ms: u64) -> u64 {
    (minute_ms as f64 / rate).ceil() as u64
}

/// What `job`'s rollout may claim now, at index `next` of its `total` things, `budget` at a
/// time. The pace to store with the claim records it (nodes claim in turn: the store writes
/// the pace and claims in one step, or neither).
pub(crate) fn allowance(
    job: &Job,
    (next, total): (u64, u64),
    succeeded: u64,
    budget: u64,
    now_ms: u64,
    minute_ms: u64,
) -> Allowance {
    let left = total.saturating_sub(next).min(budget);
    let (rate, pace) = rate(job, next, succeeded);
    let Some(rate) = rate else {
        return Allowance {
            count: left,
            new_pace: None,
            next_at: None,
            rate: None,
        };
    };
    let limit = |pace: &Pace| {
        let elapsed = now_ms.saturating_sub(pace.at_ms) as f64;
        pace.count + (rate * elapsed / minute_ms as f64).floor() as u64
    };
    // Anchored again when the rollout starts (one thing may go now), its rate changed, or it
    // is behind by more than a batch (it goes on from here at the rate, not in a burst). A
    // changed rate takes over where the old one was: the next thing goes one interval of the
    // new rate after the last one was due (or now, if that is past), not at once.
    let anchor = job.pace.rate != Some(rate) || limit(&pace) > next.saturating_add(budget.max(1));
    let at_once = now_ms.saturating_sub(one_thing_ms(rate, minute_ms));
    let mut pace = match (anchor, job.pace.rate) {
        (true, Some(old)) if old != rate => {
            let since = next.saturating_sub(job.pace.count) as f64;
            let last_due = job.pace.at_ms + (since * minute_ms as f64 / old).ceil() as u64;
            Pace {
                at_ms: last_due.max(at_once).min(now_ms),
                count: next,
                rate: Some(rate),
                ..pace
            }
        }
        (true, _) => Pace {
            at_ms: at_once,
            count: next,
            rate: Some(rate),
            ..pace
        },
        (false, _) => pace,
    };
    // The window: what the last 61 sixtieths of a minute claimed (61, so that any 60 s
    // window, however it falls across them, is counted whole).
    let slot_ms = (minute_ms / 60).max(1);
    let slot = now_ms / slot_ms;
    pace.recent.retain(|(at, _)| at + 61 > slot);
    let in_window: u64 = pace.recent.iter().map(|(_, n)| n).sum();
    let window_left = (rate.floor() as u64).saturating_sub(in_window);
    let claimable = limit(&pace).saturating_sub(next).min(window_left).min(left);
    let next_at = (claimable == 0 && left > 0).then(|| {
        let things = (next + 1).saturating_sub(pace.count) as f64;
        let smooth = pace.at_ms + (things * minute_ms as f64 / rate).ceil() as u64;
        let window = match window_left {
            0 => pace
                .recent
                .first()
                .map_or(now_ms, |(at, _)| (at + 61) * slot_ms),
            _ => now_ms,
        };
        smooth.max(window)
    });
    if claimable > 0 {
        match pace.recent.last_mut() {
            Some((at, n)) if *at == slot => *n += claimable,
            _ => pace.recent.push((slot, claimable)),
        }
    }
    let changed = pace != job.pace;
    Allowance {
        count: claimable,
        new_pace: changed.then_some(pace),
        next_at,
        rate: Some(rate),
    }
}

/// Things whose latest execution ended: SUCCEEDED, FAILED, REJECTED or TIMED_OUT.
pub(crate) fn executed(counts: &Counts) -> u64 {
    [
        Status::Succeeded,
        Status::Failed,
        Status::Rejected,
        Status::TimedOut,
    ]
    .iter()
    .filter_map(|s| counts.get(s))
    .sum()
}

/// The first of `job`'s abort criteria that `counts` meet, with the comment the canceled job
/// gets.
pub(crate) fn abort(job: &Job, counts: &Counts) -> Option<(&'static str, String)> {
    if job.status != JobStatus::InProgress {
        return None;
    }
    let executed = executed(counts);
    let criteria = job.config.abort_config.as_ref()?.criteria_list.iter();
    let met = |c: &&AbortCriteria| {
        let failures: u64 = counts
            .iter()
            .filter(|(status, _)| c.failure_type.counts(**status))
            .map(|(_, n)| n)
            .sum();
        executed >= u64::from(c.min_number_of_executed_things)
            && failures as f64 * 100.0 >= c.threshold_percentage * executed as f64
    };
    let c = criteria.into_iter().find(met)?;
    Some((
        ABORTED,
        format!(
            "canceled by abortConfig: {:?} executions reached {} % of {executed} executed things \
             (threshold {} %, at least {})",
            c.failure_type,
            (failures_of(c, counts) as f64 * 10_000.0 / executed as f64).round() / 100.0,
            c.threshold_percentage,
            c.min_number_of_executed_things
        ),
    ))
}

fn failures_of(c: &AbortCriteria, counts: &Counts) -> u64 {
    counts
        .iter()
        .filter(|(status, _)| c.failure_type.counts(**status))
        .map(|(_, n)| n)
        .sum()
}

/// The `reasonCode` of a job canceled by its abort configuration.
pub const ABORTED: &str = "ABORT_CRITERIA_MET";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::wire::{ExponentialRate, JobConfig, RateIncreaseCriteria, RolloutConfig};

    fn job(rollout: RolloutConfig) -> Job {
        Job {
            config: JobConfig {
                job_executions_rollout_config: Some(rollout),
                ..JobConfig::default()
            },
            ..Job::default()
        }
    }

    #[test]
    fn a_fixed_rate_lets_one_thing_go_at_once_and_then_one_per_interval() {
        let j = job(RolloutConfig {
            maximum_per_minute: Some(60),
            exponential_rate: None,
        });
        // The first claim anchors the pace one interval back: one thing now.
        let first = allowance(&j, (0, 100), 0, 64, 1_000_000, 60_000);
        let pace = first.new_pace.clone().expect("anchored at the start");
        assert_eq!(first.count, 1);
        let j = Job { pace, ..j };
        let later = allowance(&j, (1, 100), 0, 64, 1_000_000 + 30_500, 60_000);
        assert_eq!(later.count, 30, "one a second for 30.5 s");
        let j = Job {
            pace: later.new_pace.expect("the claim recorded"),
            ..j
        };
        let none = allowance(&j, (31, 100), 0, 64, 1_000_000 + 30_500, 60_000);
        assert_eq!(none.count, 0);
        assert_eq!(none.next_at, Some(1_000_000 + 31_000));
    }

    #[test]
    fn no_minute_holds_more_than_the_rate_whatever_the_pace_says() {
        let j = job(RolloutConfig {
            maximum_per_minute: Some(10),
            exponential_rate: None,
        });
        let start = allowance(&j, (0, 100), 0, 64, 0, 60_000);
        // A pace that says 10 more may go (anchored long ago, as a stale read could be).
        let mut pace = start.new_pace.unwrap();
        pace.at_ms = 0;
        pace.count = 0;
        pace.recent = vec![(25, 9)];
        let j = Job { pace, ..j };
        let now = allowance(&j, (1, 100), 0, 64, 30_000, 60_000);
        assert_eq!(now.count, 1, "9 claimed in the last minute: one more");
        let j = Job {
            pace: now.new_pace.unwrap(),
            ..j
        };
        let full = allowance(&j, (2, 100), 0, 64, 30_500, 60_000);
        assert_eq!(full.count, 0);
        assert_eq!(full.next_at, Some(86 * 1000), "when the 9 leave the window");
    }

    #[test]
    fn an_exponential_rate_goes_up_by_its_factor_at_each_step_up_to_the_maximum() {
        let j = job(RolloutConfig {
            maximum_per_minute: Some(50),
            exponential_rate: Some(ExponentialRate {
                base_rate_per_minute: 10,
                increment_factor: 2.0,
                rate_increase_criteria: RateIncreaseCriteria {
                    number_of_notified_things: Some(10),
                    number_of_succeeded_things: None,
                },
            }),
        });
        assert_eq!(rate(&j, 0, 0).0, Some(10.0));
        assert_eq!(rate(&j, 9, 0).0, Some(10.0));
        assert_eq!(rate(&j, 10, 0).0, Some(20.0));
        assert_eq!(rate(&j, 25, 0).0, Some(40.0));
        assert_eq!(
            rate(&j, 30, 0).0,
            Some(50.0),
            "never above maximumPerMinute"
        );
    }

    /// Issue 46: a rollout whose rate goes up notified one extra thing right after each
    /// increase (10 ms after the previous one); the things go evenly at each rate.
    #[test]
    fn an_exponential_rollout_goes_evenly_across_each_rate_increase() {
        let mut j = job(RolloutConfig {
            maximum_per_minute: None,
            exponential_rate: Some(ExponentialRate {
                base_rate_per_minute: 12,
                increment_factor: 2.0,
                rate_increase_criteria: RateIncreaseCriteria {
                    number_of_notified_things: Some(3),
                    number_of_succeeded_things: None,
                },
            }),
        });
        // A driver that claims what it may, then wakes when told (10 ms late, as a server).
        let (mut now, mut claimed, mut times) = (90, 0, Vec::new());
        while claimed < 8 {
            let step = allowance(&j, (claimed, 30), 0, 64, now, 60_000);
            for _ in 0..step.count {
                times.push(now);
            }
            claimed += step.count;
            if let Some(pace) = step.new_pace {
                j.pace = pace;
            }
            now = match step.next_at {
                Some(at) => at.max(now + 1),
                None => now + 10,
            };
        }
        let gaps: Vec<u64> = times.windows(2).map(|w| w[1] - w[0]).collect();
        // 12/min (5 s) for the first three, 24/min (2.5 s) for the next three, then 48/min.
        assert_eq!(
            gaps,
            [5_000, 5_000, 2_500, 2_500, 2_500, 1_250, 1_250],
            "{times:?}"
        );
    }
}
