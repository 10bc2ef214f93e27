//! Property test: random sequences of operator and device operations against a small
//! reference model of each thing's pending list. The notifications the jobs service sends must
//! be the model's: `notify` exactly when the list's membership changed, `notify-next` exactly
//! when its first entry changed, with the model's list and first entry in them.

use mqstore_core::envelope::Publish;
use mqstore_core::jobs::{JobSpec, Jobs};
use proptest::prelude::*;
use serde_json::{Value, json};

const T0: u64 = 1_700_000_000_000;
const THINGS: [&str; 3] = ["A", "B", "C"];

#[derive(Debug, Clone)]
enum Op {
    Create {
        job: usize,
        targets: Vec<usize>,
    },
    StartNext {
        thing: usize,
    },
    Update {
        thing: usize,
        job: usize,
        status: &'static str,
    },
    Delete {
        thing: usize,
        job: usize,
        force: bool,
    },
    Cancel {
        job: usize,
        force: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let thing = 0..THINGS.len();
    let job = 0..6usize;
    prop_oneof![
        (
            job.clone(),
            proptest::collection::vec(0..THINGS.len(), 1..3)
        )
            .prop_map(|(job, targets)| Op::Create { job, targets }),
        thing.clone().prop_map(|thing| Op::StartNext { thing }),
        (
            thing.clone(),
            job.clone(),
            prop_oneof![
                Just("IN_PROGRESS"),
                Just("SUCCEEDED"),
                Just("FAILED"),
                Just("REJECTED"),
                Just("QUEUED"),
                Just("CANCELED"),
            ]
        )
            .prop_map(|(thing, job, status)| Op::Update { thing, job, status }),
        (thing, job.clone(), any::<bool>()).prop_map(|(thing, job, force)| Op::Delete {
            thing,
            job,
            force
        }),
        (job, any::<bool>()).prop_map(|(job, force)| Op::Cancel { job, force }),
    ]
}

/// The model: per thing, its pending executions (job, started) in queueing order; started
/// ones come first when listed.
#[derive(Debug, Default, Clone)]
struct Model {
    pending: [Vec<(usize, bool)>; 3],
    jobs: Vec<(usize, Vec<usize>)>,
}

impl Model {
    fn list(&self, thing: usize) -> Vec<(usize, bool)> {
        let queue = &self.pending[thing];
        let started = queue.iter().filter(|(_, s)| *s).copied();
        let queued = queue.iter().filter(|(_, s)| !*s).copied();
        started.chain(queued).collect()
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Create { job, targets } => {
                if self.jobs.iter().any(|(j, _)| j == job) {
                    return;
                }
                let mut targets = targets.clone();
                targets.dedup();
                for t in &targets {
                    self.pending[*t].push((*job, false));
                }
                self.jobs.push((*job, targets));
            }
            Op::StartNext { thing } => {
                if let Some(first) = self.list(*thing).first().copied()
                    && let Some(e) = self.pending[*thing].iter_mut().find(|(j, _)| *j == first.0)
                {
                    e.1 = true;
                }
            }
            Op::Update { thing, job, status } => {
                let Some(i) = self.pending[*thing].iter().position(|(j, _)| j == job) else {
                    return;
                };
                match *status {
                    "IN_PROGRESS" => self.pending[*thing][i].1 = true,
                    "SUCCEEDED" | "FAILED" | "REJECTED" => {
                        self.pending[*thing].remove(i);
                    }
                    _ => {} // refused: QUEUED, CANCELED from a device
                }
            }
            Op::Delete { thing, job, force } => {
                if let Some(i) = self.pending[*thing].iter().position(|(j, _)| j == job)
                    && (*force || !self.pending[*thing][i].1)
                {
                    self.pending[*thing].remove(i);
                }
            }
            Op::Cancel { job, force } => {
                for thing in 0..THINGS.len() {
                    self.pending[thing].retain(|(j, started)| j != job || (*started && !*force));
                }
            }
        }
    }
}

fn job_id(job: usize) -> String {
    format!("job{job}")
}

/// Runs `op` on the service; the notifications it published, by thing.
fn run(jobs: &mut Jobs, op: &Op) -> Vec<Publish> {
    let mut out = Vec::new();
    let device =
        |jobs: &mut Jobs, thing: usize, api: String, body: Value, out: &mut Vec<Publish>| {
            let topic = format!("$aws/things/{}/jobs/{api}", THINGS[thing]);
            jobs.handle(&topic, body.to_string().as_bytes(), T0, out)
                .unwrap();
            let reply = out.pop().unwrap();
            assert!(reply.topic.ends_with("/accepted") || reply.topic.ends_with("/rejected"));
        };
    match op {
        Op::Create { job, targets } => {
            let spec = JobSpec::new(
                job_id(*job),
                targets.iter().map(|t| THINGS[*t].to_owned()).collect(),
                json!({}),
            );
            let _ = jobs.create_job(spec, T0, &mut out);
        }
        Op::StartNext { thing } => device(jobs, *thing, "start-next".into(), json!({}), &mut out),
        Op::Update { thing, job, status } => {
            let api = format!("{}/update", job_id(*job));
            device(jobs, *thing, api, json!({ "status": status }), &mut out);
        }
        Op::Delete { thing, job, force } => {
            let _ = jobs.delete_execution(&job_id(*job), THINGS[*thing], *force, T0, &mut out);
        }
        Op::Cancel { job, force } => {
            let _ = jobs.cancel_job(&job_id(*job), *force, None, None, T0, &mut out);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn notifications_follow_the_pending_lists(ops in proptest::collection::vec(op(), 1..40)) {
        let mut jobs = Jobs::new();
        let mut model = Model::default();
        for op in &ops {
            let before: Vec<Vec<(usize, bool)>> = (0..THINGS.len()).map(|t| model.list(t)).collect();
            model.apply(op);
            let published = run(&mut jobs, op);
            for (t, thing) in THINGS.iter().enumerate() {
                let after = model.list(t);
                let mut members_before: Vec<usize> = before[t].iter().map(|(j, _)| *j).collect();
                let mut members_after: Vec<usize> = after.iter().map(|(j, _)| *j).collect();
                members_before.sort();
                members_after.sort();
                let notify = published.iter().find(|p| p.topic == format!("$aws/things/{thing}/jobs/notify"));
                let next = published.iter().find(|p| p.topic == format!("$aws/things/{thing}/jobs/notify-next"));
                prop_assert_eq!(notify.is_some(), members_before != members_after, "notify for {} after {:?}", thing, op);
                let head_before = before[t].first().map(|(j, _)| *j);
                let head_after = after.first().map(|(j, _)| *j);
                prop_assert_eq!(next.is_some(), head_before != head_after, "notify-next for {} after {:?}", thing, op);
                if let Some(notify) = notify {
                    let body: Value = serde_json::from_slice(&notify.payload).unwrap();
                    let listed: Vec<String> = ["IN_PROGRESS", "QUEUED"]
                        .iter()
                        .flat_map(|s| body["jobs"][s].as_array().cloned().unwrap_or_default())
                        .map(|e| e["jobId"].as_str().unwrap().to_owned())
                        .collect();
                    let expected: Vec<String> = after.iter().map(|(j, _)| job_id(*j)).collect();
                    prop_assert_eq!(listed, expected);
                }
                if let Some(next) = next {
                    let body: Value = serde_json::from_slice(&next.payload).unwrap();
                    prop_assert_eq!(
                        body["execution"]["jobId"].as_str().map(str::to_owned),
                        head_after.map(job_id)
                    );
                }
            }
        }
    }
}
