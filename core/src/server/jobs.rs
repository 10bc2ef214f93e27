//! One jobs request or timer tick, on any [`JobsStore`]: the steps every host runs the jobs
//! engine by (the node on its own store; `mqstore serve` on Redis, off its loop).

use crate::envelope::{self, DropReason, Publish};
#[cfg(test)]
use crate::jobs::StoreError;
use crate::jobs::wire::{OperatorAnswer, OperatorOk};
use crate::jobs::{
    Answered, Calls, Jobs, JobsStore, OPERATOR_TOPIC, Replay, StoreAnswer, StoreCall, Stored,
    topics,
};
use crate::shadow;

/// What a jobs request did: how it was answered, and how many things it notified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobsHandled {
    /// Accepted (`…/accepted`, or an operator answer), or refused.
    pub answered: Answered,
    /// The things' notifications it published (events not counted), or a shadow's delta and
    /// documents.
    pub notifications: usize,
    /// A device shadow's request (which operation), not a jobs one: counted apart.
    pub shadow: Option<shadow::Op>,
    /// A device shadow's request: how many times it ran again because another node wrote the
    /// shadow between its read and its write (its compare-and-set lost). Always 0 for jobs.
    pub races: usize,
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
    message: &Publish,
    node_id: &str,
    now_ms: u64,
    out: &mut Vec<Publish>,
) -> Result<JobsHandled, NotAnswered> {
    let before = out.len();
    // Device shadows are kept in the jobs store and reached as the device API is.
    if let Some((target, op)) = shadow::parse_topic(&message.topic) {
        let store = jobs.store_mut();
        let served = shadow::serve(store, target, op, &message.payload, now_ms, out);
        return Ok(JobsHandled {
            answered: served.answered,
            notifications: out.len() - before - 1,
            shadow: Some(op),
            races: served.races,
        });
    }
    if message.topic != OPERATOR_TOPIC {
        let answered = jobs
            .handle(&message.topic, &message.payload, now_ms, out)
            .ok_or(NotAnswered::NoRequest)?;
        let notifications = notifications_in(&out[before..out.len().saturating_sub(1)]);
        return Ok(JobsHandled {
            answered,
            notifications,
            shadow: None,
            races: 0,
        });
    }
    match envelope::check_request(message.qos, message.properties.clone(), node_id) {
        envelope::Checked::Accept(invocation) => {
            // One operator topic for both services: the shadow service's call, or the jobs'.
            let listed = shadow::operate(jobs.store_mut(), &message.payload, now_ms);
            let answer = match listed {
                Some(OperatorAnswer::Ok(page)) => OperatorAnswer::Ok(OperatorOk::Shadows(page)),
                Some(OperatorAnswer::Error(error)) => OperatorAnswer::Error(error),
                None => jobs.operate(&message.payload, now_ms, out),
            };
            let handled = JobsHandled {
                answered: match answer {
                    OperatorAnswer::Ok(_) => Answered::Accepted,
                    _ => Answered::Rejected,
                },
                notifications: notifications_in(&out[before..]),
                shadow: None,
                races: 0,
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

/// One jobs request or tick run on a store the host reaches by calls ([`StoreCall`]): the
/// host asks [`JobsWork::step`] what to do, runs each call it is given (on Redis, from its
/// event loop, many works at once) and hands the answer back with [`JobsWork::answered`],
/// until the step is the outcome. No thread waits for the store; see [`Replay`] for how.
#[derive(Debug)]
pub struct JobsWork {
    task: Task,
    now_ms: u64,
    minute_ms: u64,
    rollout_batch: usize,
    replay: Calls<Replay>,
    out: Vec<Publish>,
}

// A work is boxed by its host and made once per request: the tick's smaller size buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Task {
    Request { message: Publish, node_id: String },
    Tick { room: bool },
}

/// What a [`JobsWork`] needs next, or what it did.
#[derive(Debug)]
#[non_exhaustive]
pub enum JobsStep {
    /// Run this call on the store and give its answer to [`JobsWork::answered`].
    Call(StoreCall),
    /// The request ran ([`run_request`]): what it published, notifications first.
    Request(Vec<Publish>, Result<JobsHandled, NotAnswered>),
    /// The tick ran ([`tick`]): what it published, and when the engine next has work.
    Tick(Vec<Publish>, Stored<Option<u64>>),
}

impl JobsWork {
    /// A request (device or operator) received at `now_ms`, for an engine with timer minutes
    /// of `minute_ms` that queues `rollout_batch` targets per step.
    pub fn request(
        message: Publish,
        node_id: &str,
        now_ms: u64,
        minute_ms: u64,
        rollout_batch: usize,
    ) -> Self {
        let node_id = node_id.to_owned();
        Self::new(
            Task::Request { message, node_id },
            now_ms,
            minute_ms,
            rollout_batch,
        )
    }

    /// A timer tick at `now_ms` (rollouts go on while the host has `room`).
    pub fn tick(now_ms: u64, room: bool, minute_ms: u64, rollout_batch: usize) -> Self {
        Self::new(Task::Tick { room }, now_ms, minute_ms, rollout_batch)
    }

    fn new(task: Task, now_ms: u64, minute_ms: u64, rollout_batch: usize) -> Self {
        Self {
            task,
            now_ms,
            minute_ms,
            rollout_batch,
            replay: Calls(Replay::default()),
            out: Vec::new(),
        }
    }

    /// Runs the work as far as the answers it has allow.
    pub fn step(&mut self) -> JobsStep {
        self.replay.0.rewind();
        self.out.clear();
        let mut jobs = Jobs::with_store(&mut self.replay as &mut dyn JobsStore, self.minute_ms)
            .with_rollout_batch(self.rollout_batch);
        let outcome = match &self.task {
            Task::Request { message, node_id } => Ok(run_request(
                &mut jobs,
                message,
                node_id,
                self.now_ms,
                &mut self.out,
            )),
            Task::Tick { room } => Err(tick(&mut jobs, self.now_ms, *room, &mut self.out)),
        };
        if let Some(call) = self.replay.0.take_call() {
            return JobsStep::Call(call);
        }
        let out = std::mem::take(&mut self.out);
        match outcome {
            Ok(handled) => JobsStep::Request(out, handled),
            Err(ticked) => JobsStep::Tick(out, ticked),
        }
    }

    /// The answer to the call the last step asked for.
    pub fn answered(&mut self, answer: StoreAnswer) {
        self.replay.0.answered(answer);
    }

    /// The request it runs (`None` for a tick).
    pub fn message(&self) -> Option<&Publish> {
        match &self.task {
            Task::Request { message, .. } => Some(message),
            Task::Tick { .. } => None,
        }
    }

    /// How many store calls the work made so far.
    pub fn calls(&self) -> usize {
        self.replay.0.calls()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use serde_json::{Value, json};

    use super::*;
    use crate::envelope::Properties;
    use crate::jobs::{Answers, MemoryJobs};

    const T0: u64 = 1_700_000_000_000;
    const MINUTE_MS: u64 = 50;
    const BATCH: usize = 16;

    /// A memory store reached by calls, recording each call it ran.
    #[derive(Default)]
    struct Recorder {
        store: RefCell<MemoryJobs>,
        calls: RefCell<Vec<StoreCall>>,
    }

    impl Recorder {
        fn run(&self, call: StoreCall) -> StoreAnswer {
            self.calls.borrow_mut().push(call.clone());
            call.run(&mut *self.store.borrow_mut())
        }
    }

    impl Answers for Recorder {
        fn answer(&self, call: impl FnOnce() -> StoreCall) -> StoreAnswer {
            self.run(call())
        }
    }

    fn operator(call: Value) -> Publish {
        Publish {
            topic: OPERATOR_TOPIC.into(),
            payload: call.to_string().into(),
            qos: 1,
            properties: Properties {
                response_topic: Some("op/response".into()),
                correlation_data: Some("c".into()),
                user_properties: vec![
                    ("__srcId".into(), "op".into()),
                    ("__protVer".into(), "1.0".into()),
                    ("__ts".into(), "001700000000000:00000:op".into()),
                ],
                ..Properties::default()
            },
        }
    }

    fn device(thing: &str, api: &str, body: Value) -> Publish {
        Publish {
            topic: format!("$aws/things/{thing}/jobs/{api}"),
            payload: body.to_string().into(),
            qos: 1,
            properties: Properties::default(),
        }
    }

    enum Input {
        Message(Publish),
        Tick(bool),
    }

    /// A fleet's day: a job for 40 things rolled out 16 at a time with a timeout, devices
    /// starting, finishing and leaving executions to time out, a second job, a cancel, reads.
    fn inputs() -> Vec<(u64, Input)> {
        let things: Vec<String> = (0..40).map(|i| format!("t{i:02}")).collect();
        let mut inputs = vec![(
            0,
            Input::Message(operator(json!({
                "op": "createJob", "jobId": "j1", "targets": things, "document": { "v": 1 },
                "timeoutConfig": { "inProgressTimeoutInMinutes": 1 },
            }))),
        )];
        inputs.extend((1..4).map(|i| (i, Input::Tick(true))));
        for (i, thing) in things.iter().enumerate().take(30) {
            let at = 10 + i as u64;
            inputs.push((at, Input::Message(device(thing, "start-next", json!({})))));
            if i % 3 != 0 {
                let update = json!({ "status": "SUCCEEDED", "expectedVersion": 2 });
                inputs.push((at, Input::Message(device(thing, "j1/update", update))));
            }
        }
        inputs.push((
            45,
            Input::Message(operator(json!({
                "op": "createJob", "jobId": "j2", "targets": ["t00", "t01", "t39"],
                "document": { "v": 2 },
            }))),
        ));
        inputs.push((46, Input::Tick(false)));
        inputs.push((200, Input::Tick(true)));
        inputs.push((201, Input::Message(device("t00", "get", json!({})))));
        inputs.push((202, Input::Message(device("t03", "j1/get", json!({})))));
        inputs.push((203, Input::Message(device("nobody", "j9/get", json!({})))));
        inputs.push((204, Input::Message(device("t39", "j1/update", json!("no")))));
        inputs.push((
            205,
            Input::Message(operator(
                json!({ "op": "cancelJob", "jobId": "j2", "force": true }),
            )),
        ));
        inputs.push((206, Input::Tick(true)));
        // Shadows live in the same store: a read before any write, updates that race on a
        // version, a delete and the next shadow.
        let shadow = |path: &str, body: Value| {
            let mut message = device("t05", "x", body);
            message.topic = format!("$aws/things/t05/shadow/{path}");
            Input::Message(message)
        };
        inputs.push((206, shadow("get", json!({}))));
        inputs.push((
            206,
            shadow("update", json!({ "state": { "desired": { "fw": "2.0" } } })),
        ));
        inputs.push((
            206,
            shadow(
                "update",
                json!({ "state": { "reported": { "fw": "1.0" } }, "version": 7 }),
            ),
        ));
        inputs.push((
            206,
            shadow(
                "name/cfg/update",
                json!({ "state": { "reported": { "a": 1 } } }),
            ),
        ));
        inputs.push((206, shadow("delete", json!({ "clientToken": "d" }))));
        inputs.push((206, shadow("update", json!({ "state": {} }))));
        inputs.push((
            207,
            Input::Message(operator(json!({ "op": "describeJob", "jobId": "j1" }))),
        ));
        inputs.push((
            208,
            Input::Message(operator(
                json!({ "op": "listJobExecutionsForJob", "jobId": "j1" }),
            )),
        ));
        inputs
    }

    /// What one input did: the publishes and the outcome, as text to compare.
    type Outcome = (Vec<Publish>, String);

    fn direct(store: &mut Calls<Recorder>, at: u64, input: &Input) -> Outcome {
        let mut jobs =
            Jobs::with_store(store as &mut dyn JobsStore, MINUTE_MS).with_rollout_batch(BATCH);
        let mut out = Vec::new();
        let outcome = match input {
            Input::Message(m) => format!("{:?}", run_request(&mut jobs, m, "n", T0 + at, &mut out)),
            Input::Tick(room) => format!("{:?}", tick(&mut jobs, T0 + at, *room, &mut out)),
        };
        (out, outcome)
    }

    fn stepped(store: &Recorder, at: u64, input: &Input) -> (Outcome, usize) {
        let mut work = match input {
            Input::Message(m) => JobsWork::request(m.clone(), "n", T0 + at, MINUTE_MS, BATCH),
            Input::Tick(room) => JobsWork::tick(T0 + at, *room, MINUTE_MS, BATCH),
        };
        let mut steps = 0;
        loop {
            steps += 1;
            match work.step() {
                JobsStep::Call(call) => work.answered(store.run(call)),
                JobsStep::Request(out, handled) => return ((out, format!("{handled:?}")), steps),
                JobsStep::Tick(out, ticked) => return ((out, format!("{ticked:?}")), steps),
            }
        }
    }

    #[test]
    fn a_work_stepped_by_calls_makes_the_same_calls_and_publishes_as_the_engine_on_its_store() {
        let mut engine_store = Calls(Recorder::default());
        let stepped_store = Recorder::default();
        let (mut calls, mut most_steps) = (0, 0);
        for (at, input) in inputs() {
            let expected = direct(&mut engine_store, at, &input);
            let (got, steps) = stepped(&stepped_store, at, &input);
            assert_eq!(got.1, expected.1, "the outcome at +{at}");
            assert_eq!(got.0, expected.0, "the publishes at +{at}");
            let (engine_calls, stepped_calls) =
                (engine_store.0.calls.borrow(), stepped_store.calls.borrow());
            assert_eq!(
                *stepped_calls, *engine_calls,
                "each call once, in order, at +{at}"
            );
            // One step per call, and one that finishes.
            assert_eq!(steps, stepped_calls.len() - calls + 1);
            calls = stepped_calls.len();
            most_steps = most_steps.max(steps);
        }
        assert!(calls > 100, "the day made {calls} calls");
        assert!(most_steps >= 4, "a request took up to {most_steps} steps");
        let (a, b) = (engine_store.0.store.borrow(), stepped_store.store.borrow());
        assert_eq!(a.job_ids(), b.job_ids());
        for job in ["j1", "j2"] {
            assert_eq!(a.counts(job), b.counts(job), "{job}'s counts");
        }
        let sorted = |store: &MemoryJobs| {
            let mut things = store.things().unwrap();
            things.sort();
            things
        };
        assert_eq!(sorted(&a), sorted(&b));
        assert_eq!(
            sorted(&a).len(),
            40,
            "the targets (a thing that only asked has no record)"
        );
        for thing in sorted(&a) {
            assert_eq!(a.thing(&thing), b.thing(&thing), "{thing}'s record");
        }
        assert_eq!(a.next_deadline(), b.next_deadline());
    }

    #[test]
    fn a_call_the_store_fails_ends_the_work_with_the_engine_s_error_answer() {
        let store = Recorder::default();
        stepped(
            &store,
            0,
            &Input::Message(operator(json!({
                "op": "createJob", "jobId": "j1", "targets": ["a"], "document": {},
            }))),
        );
        let mut work = JobsWork::request(
            device("a", "start-next", json!({})),
            "n",
            T0,
            MINUTE_MS,
            BATCH,
        );
        let JobsStep::Call(call) = work.step() else {
            panic!("a device request reads the thing first");
        };
        work.answered(StoreAnswer::failed(
            &call,
            StoreError("Redis is away".into()),
        ));
        let JobsStep::Request(out, handled) = work.step() else {
            panic!("a failed read ends the request");
        };
        assert_eq!(handled.unwrap().answered, Answered::Rejected);
        let [reply] = &out[..] else {
            panic!("one reply: {out:?}")
        };
        assert_eq!(reply.topic, "$aws/things/a/jobs/start-next/rejected");
        let body: Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(body["code"], "InternalError", "{body}");
        assert_eq!(work.calls(), 1, "nothing ran after the failure");
        let record = store.store.borrow().thing("a").unwrap();
        assert_eq!(
            record.latest("j1").unwrap().status,
            crate::jobs::Status::Queued
        );
    }

    /// A shadow update on `lamp` stepped by calls, with `others` other nodes' updates landing
    /// each between one of its reads and its compare-and-set write: what it published and did.
    fn update_raced_by(store: &Recorder, others: usize) -> (Vec<Publish>, JobsHandled) {
        let update = |state: Value| {
            let mut message = device("lamp", "x", json!({ "state": state }));
            message.topic = "$aws/things/lamp/shadow/update".into();
            message
        };
        let mut work = JobsWork::request(
            update(json!({ "desired": { "on": true } })),
            "n",
            T0,
            MINUTE_MS,
            BATCH,
        );
        let mut raced = 0;
        loop {
            match work.step() {
                JobsStep::Call(call) => {
                    if matches!(call, StoreCall::SwapEntry(..)) && raced < others {
                        raced += 1;
                        let other = update(json!({ "reported": { "seen": raced } }));
                        let ((_, outcome), _) = stepped(store, 0, &Input::Message(other));
                        assert!(outcome.contains("Accepted"), "{outcome}");
                    }
                    work.answered(store.run(call));
                }
                JobsStep::Request(out, handled) => return (out, handled.unwrap()),
                JobsStep::Tick(..) => panic!("a request's work ended as a tick"),
            }
        }
    }

    #[test]
    fn a_shadow_update_whose_write_another_node_beat_runs_again_on_what_won() {
        let store = Recorder::default();
        let (out, handled) = update_raced_by(&store, 2);
        assert_eq!(handled.answered, Answered::Accepted);
        assert_eq!(handled.races, 2, "it lost twice, then wrote");
        let body = |suffix: &str| -> Value {
            let reply = out.iter().find(|p| p.topic.ends_with(suffix)).unwrap();
            serde_json::from_slice(&reply.payload).unwrap()
        };
        // The two other writes made versions 1 and 2: this one is 3, on top of them.
        assert_eq!(body("/update/accepted")["version"], 3);
        let current = &body("/update/documents")["current"];
        assert_eq!(current["state"]["desired"], json!({ "on": true }));
        assert_eq!(current["state"]["reported"], json!({ "seen": 2 }));
        let untouched = Recorder::default();
        let (_, alone) = update_raced_by(&untouched, 0);
        assert_eq!((alone.answered, alone.races), (Answered::Accepted, 0));
    }

    #[test]
    fn a_shadow_update_that_loses_every_race_is_refused_with_500_and_writes_nothing() {
        let store = Recorder::default();
        let (out, handled) = update_raced_by(&store, 1000);
        assert_eq!(handled.answered, Answered::Rejected);
        assert_eq!(handled.races, 100, "it gives up after 100 lost races");
        let [reply] = &out[..] else {
            panic!("one reply: {out:?}")
        };
        assert_eq!(reply.topic, "$aws/things/lamp/shadow/update/rejected");
        let body: Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(body["code"], 500, "{body}");
        let key = shadow::Target {
            thing: "lamp",
            name: None,
        }
        .key();
        let stored = store.run(StoreCall::Entry(shadow::TABLE.into(), key));
        let StoreAnswer::Entry(Ok(Some(document))) = stored else {
            panic!("the others' document: {stored:?}")
        };
        let document: Value = serde_json::from_slice(&document).unwrap();
        assert_eq!(document["state"]["desired"], Value::Null, "{document}");
    }
}
