use serde_json::{Value, json};

use std::sync::Arc;

use super::*;

const T0: u64 = 1_700_000_000_000;
const S0: u64 = T0 / 1000;

fn spec(job_id: &str, targets: &[&str]) -> JobSpec {
    JobSpec::new(
        job_id,
        targets.iter().map(|t| t.to_string()).collect(),
        json!({ "operation": job_id }),
    )
}

/// What was published to the things: topic suffix after `$aws/things/T/jobs/`, and the JSON
/// (the `$aws/events/...` events left out: see `events_follow_each_execution_and_the_job`).
fn seen(out: &mut Vec<Publish>) -> Vec<(String, Value)> {
    out.drain(..)
        .filter(|p| !p.topic.starts_with("$aws/events/"))
        .map(|p| {
            let suffix = p
                .topic
                .split_once("/jobs/")
                .map(|(_, s)| s.to_owned())
                .unwrap();
            (suffix, serde_json::from_slice(&p.payload).unwrap())
        })
        .collect()
}

fn device<S: JobsStore>(
    jobs: &mut Jobs<S>,
    thing: &str,
    api: &str,
    payload: Value,
    out: &mut Vec<Publish>,
) -> Value {
    let topic = format!("$aws/things/{thing}/jobs/{api}");
    jobs.handle(&topic, payload.to_string().as_bytes(), T0, out)
        .expect("a request");
    let reply = out.pop().expect("a reply");
    assert!(reply.topic.starts_with(&topic));
    let accepted = reply.topic.ends_with("/accepted");
    let mut value: Value = serde_json::from_slice(&reply.payload).unwrap();
    value["_accepted"] = json!(accepted);
    value
}

fn summary(job: &str, started: bool, version: u64) -> Value {
    let mut s = json!({ "jobId": job, "queuedAt": S0, "lastUpdatedAt": S0, "executionNumber": 1, "versionNumber": version });
    if started {
        s["startedAt"] = json!(S0);
    }
    s
}

#[test]
fn the_seeds_worked_example_notifies_exactly_where_it_says() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    // job1 queued: notify and notify-next.
    jobs.create_job(spec("job1", &["T"]), T0, &mut out).unwrap();
    assert_eq!(
        seen(&mut out),
        vec![
            (
                "notify".into(),
                json!({ "timestamp": S0, "jobs": { "QUEUED": [summary("job1", false, 1)] } })
            ),
            (
                "notify-next".into(),
                json!({ "timestamp": S0, "execution": {
                    "jobId": "job1", "status": "QUEUED", "queuedAt": S0, "lastUpdatedAt": S0,
                    "versionNumber": 1, "executionNumber": 1, "jobDocument": { "operation": "job1" } } })
            ),
        ]
    );
    // job2 queued behind it: notify only.
    jobs.create_job(spec("job2", &["T"]), T0, &mut out).unwrap();
    let published = seen(&mut out);
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].0, "notify");
    // job1 started: nothing but the reply.
    let started = device(
        &mut jobs,
        "T",
        "start-next",
        json!({ "clientToken": "c1" }),
        &mut out,
    );
    assert_eq!(started["_accepted"], json!(true));
    assert_eq!(started["clientToken"], json!("c1"));
    assert_eq!(started["execution"]["jobId"], json!("job1"));
    assert_eq!(started["execution"]["status"], json!("IN_PROGRESS"));
    assert_eq!(started["execution"]["versionNumber"], json!(2));
    assert!(out.is_empty(), "start-next notifies nothing: {out:?}");
    // job3 queued: notify only, IN_PROGRESS first.
    jobs.create_job(spec("job3", &["T"]), T0, &mut out).unwrap();
    assert_eq!(
        seen(&mut out),
        vec![(
            "notify".into(),
            json!({ "timestamp": S0, "jobs": {
                "IN_PROGRESS": [summary("job1", true, 2)],
                "QUEUED": [summary("job2", false, 1), summary("job3", false, 1)] } })
        )]
    );
    // job1 SUCCEEDED: notify, and notify-next with job2.
    let done = device(
        &mut jobs,
        "T",
        "job1/update",
        json!({ "status": "SUCCEEDED" }),
        &mut out,
    );
    assert_eq!(done["_accepted"], json!(true));
    let published = seen(&mut out);
    assert_eq!(
        published
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>(),
        ["notify", "notify-next"]
    );
    assert_eq!(published[1].1["execution"]["jobId"], json!("job2"));
    // job3 IN_PROGRESS while job2 is QUEUED: job3 is now first: notify-next only.
    device(
        &mut jobs,
        "T",
        "job3/update",
        json!({ "status": "IN_PROGRESS" }),
        &mut out,
    );
    let published = seen(&mut out);
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(published[0].0, "notify-next");
    assert_eq!(published[0].1["execution"]["jobId"], json!("job3"));
    assert_eq!(published[0].1["execution"]["status"], json!("IN_PROGRESS"));
    // job2 REJECTED: notify only (job3 stays first).
    device(
        &mut jobs,
        "T",
        "job2/update",
        json!({ "status": "REJECTED" }),
        &mut out,
    );
    let published = seen(&mut out);
    assert_eq!(published.len(), 1, "{published:?}");
    assert_eq!(
        published[0],
        (
            "notify".into(),
            json!({ "timestamp": S0, "jobs": { "IN_PROGRESS": [summary("job3", true, 2)] } })
        )
    );
    // job3 force-deleted: an empty list and an empty next.
    jobs.delete_execution("job3", "T", true, T0, &mut out)
        .unwrap();
    assert_eq!(
        seen(&mut out),
        vec![
            ("notify".into(), json!({ "timestamp": S0, "jobs": {} })),
            ("notify-next".into(), json!({ "timestamp": S0 })),
        ]
    );
}

#[test]
fn rejections_carry_their_code_the_token_and_the_state() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    jobs.create_job(spec("job1", &["T"]), T0, &mut out).unwrap();
    out.clear();
    let reject = |jobs: &mut Jobs, api: &str, payload: &[u8], out: &mut Vec<Publish>| {
        let topic = format!("$aws/things/T/jobs/{api}");
        jobs.handle(&topic, payload, T0, out).unwrap();
        let reply = out.pop().unwrap();
        assert_eq!(reply.topic, format!("{topic}/rejected"));
        serde_json::from_slice::<Value>(&reply.payload).unwrap()
    };
    assert_eq!(
        reject(&mut jobs, "get", b"not json", &mut out)["code"],
        json!("InvalidJson")
    );
    assert_eq!(
        reject(&mut jobs, "get", b"[1]", &mut out)["code"],
        json!("InvalidJson")
    );
    let r = reject(
        &mut jobs,
        "nonsense/here/too",
        b"{\"clientToken\":\"t\"}",
        &mut out,
    );
    assert_eq!(
        (r["code"].clone(), r["clientToken"].clone()),
        (json!("InvalidTopic"), json!("t"))
    );
    assert_eq!(
        reject(&mut jobs, "job1/update", b"{}", &mut out)["code"],
        json!("InvalidRequest")
    );
    for status in ["CANCELED", "TIMED_OUT", "REMOVED", "DONE"] {
        let payload = json!({ "status": status }).to_string();
        assert_eq!(
            reject(&mut jobs, "job1/update", payload.as_bytes(), &mut out)["code"],
            json!("InvalidRequest"),
            "{status}"
        );
    }
    let r = reject(
        &mut jobs,
        "job1/update",
        br#"{"status":"QUEUED"}"#,
        &mut out,
    );
    assert_eq!(r["code"], json!("InvalidStateTransition"));
    assert_eq!(
        r["executionState"],
        json!({ "status": "QUEUED", "versionNumber": 1 })
    );
    let r = reject(
        &mut jobs,
        "job1/update",
        br#"{"status":"IN_PROGRESS","expectedVersion":"99","clientToken":"x"}"#,
        &mut out,
    );
    assert_eq!(r["code"], json!("VersionMismatch"));
    assert_eq!(
        r["message"],
        json!("Expected version 99 but found version 1")
    );
    assert_eq!(r["clientToken"], json!("x"));
    assert_eq!(r["executionState"]["versionNumber"], json!(1));
    assert_eq!(
        reject(
            &mut jobs,
            "nope/update",
            br#"{"status":"SUCCEEDED"}"#,
            &mut out
        )["code"],
        json!("ResourceNotFound")
    );
    assert_eq!(
        reject(&mut jobs, "nope/get", b"", &mut out)["code"],
        json!("ResourceNotFound")
    );
    let bad_details = br#"{"status":"IN_PROGRESS","statusDetails":{"k":""}}"#;
    assert_eq!(
        reject(&mut jobs, "job1/update", bad_details, &mut out)["code"],
        json!("InvalidRequest")
    );
    let bad_step = br#"{"status":"IN_PROGRESS","stepTimeoutInMinutes":0}"#;
    assert_eq!(
        reject(&mut jobs, "job1/update", bad_step, &mut out)["code"],
        json!("InvalidRequest")
    );
    // Nothing changed.
    assert_eq!(
        jobs.execution("T", "job1").unwrap().unwrap().version_number,
        1
    );
    // A terminal execution cannot move.
    let ok = br#"{"status":"SUCCEEDED","expectedVersion":1}"#;
    jobs.handle("$aws/things/T/jobs/job1/update", ok, T0, &mut out)
        .unwrap();
    out.clear();
    let r = reject(
        &mut jobs,
        "job1/update",
        br#"{"status":"IN_PROGRESS"}"#,
        &mut out,
    );
    assert_eq!(r["code"], json!("InvalidStateTransition"));
    assert_eq!(r["executionState"]["status"], json!("SUCCEEDED"));
}

#[test]
fn own_replies_and_notifications_are_not_requests_and_empty_payloads_are_objects() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    for topic in [
        "$aws/things/T/jobs/get/accepted",
        "$aws/things/T/jobs/job1/update/rejected",
        "$aws/things/T/jobs/notify",
        "$aws/things/T/jobs/notify-next",
        "devices/T/jobs/get",
    ] {
        assert_eq!(jobs.handle(topic, b"{}", T0, &mut out), None, "{topic}");
    }
    assert!(out.is_empty());
    let reply = device(&mut jobs, "T", "get", Value::Null, &mut out);
    // `null` is not an object: the empty payload is.
    assert_eq!(reply["_accepted"], json!(false));
    jobs.handle("$aws/things/T/jobs/get", b"", T0, &mut out)
        .unwrap();
    let reply: Value = serde_json::from_slice(&out.pop().unwrap().payload).unwrap();
    assert_eq!(
        reply,
        json!({ "inProgressJobs": [], "queuedJobs": [], "timestamp": S0 })
    );
}

#[test]
fn timeouts_end_executions_and_retries_queue_the_next_number() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    let job = spec("job1", &["T"])
        .in_progress_timeout(Some(10))
        .retries(1);
    jobs.create_job(job, T0, &mut out).unwrap();
    device(
        &mut jobs,
        "T",
        "start-next",
        json!({ "stepTimeoutInMinutes": 1 }),
        &mut out,
    );
    out.clear();
    assert_eq!(jobs.next_deadline().unwrap(), Some(T0 + 60_000));
    jobs.expire(T0 + 59_999, &mut out).unwrap();
    assert!(out.is_empty());
    jobs.expire(T0 + 60_000, &mut out).unwrap();
    // TIMED_OUT, then a retry queued: the list's membership changed, and its first entry.
    let published = seen(&mut out);
    assert_eq!(
        published
            .iter()
            .map(|(t, _)| t.as_str())
            .collect::<Vec<_>>(),
        ["notify", "notify-next"]
    );
    assert_eq!(published[1].1["execution"]["executionNumber"], json!(2));
    // The second failure is the last: the retry limit is reached.
    device(&mut jobs, "T", "start-next", json!({}), &mut out);
    device(
        &mut jobs,
        "T",
        "job1/update",
        json!({ "status": "FAILED" }),
        &mut out,
    );
    assert_eq!(
        jobs.execution("T", "job1").unwrap().unwrap().status,
        Status::Failed
    );
    assert_eq!(
        jobs.execution("T", "job1")
            .unwrap()
            .unwrap()
            .execution_number,
        2
    );
    // REJECTED is never retried.
    let job = spec("job2", &["T"]).retries(3);
    jobs.create_job(job, T0, &mut out).unwrap();
    device(
        &mut jobs,
        "T",
        "job2/update",
        json!({ "status": "REJECTED" }),
        &mut out,
    );
    assert_eq!(
        jobs.execution("T", "job2")
            .unwrap()
            .unwrap()
            .execution_number,
        1
    );
}

#[test]
fn cancel_leaves_in_progress_executions_unless_forced() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    jobs.create_job(spec("job1", &["A", "B"]), T0, &mut out)
        .unwrap();
    device(&mut jobs, "A", "start-next", json!({}), &mut out);
    jobs.cancel_job("job1", false, None, None, T0, &mut out)
        .unwrap();
    assert_eq!(
        jobs.execution("A", "job1").unwrap().unwrap().status,
        Status::InProgress
    );
    assert_eq!(
        jobs.execution("B", "job1").unwrap().unwrap().status,
        Status::Canceled
    );
    jobs.cancel_job("job1", true, None, None, T0, &mut out)
        .unwrap();
    assert_eq!(
        jobs.execution("A", "job1").unwrap().unwrap().status,
        Status::Canceled
    );
    assert_eq!(
        jobs.cancel_job("nope", false, None, None, T0, &mut out),
        Err(JobsError::NotFound("job nope".into()))
    );
    assert!(matches!(
        jobs.create_job(spec("job1", &["C"]), T0, &mut out),
        Err(JobsError::JobExists(_))
    ));
    assert!(matches!(
        jobs.create_job(spec("bad id!", &["C"]), T0, &mut out),
        Err(JobsError::Invalid(_))
    ));
    assert!(matches!(
        jobs.create_job(spec("j", &["bad thing!"]), T0, &mut out),
        Err(JobsError::Invalid(_))
    ));
    let mut huge = spec("huge", &["C"]);
    huge.document = json!({ "blob": "x".repeat(40_000) });
    assert!(matches!(
        jobs.create_job(huge, T0, &mut out),
        Err(JobsError::Invalid(_))
    ));
    assert!(jobs.job("huge").unwrap().is_none(), "nothing created");
}

#[test]
fn a_large_job_is_rolled_out_in_batches_and_a_cancel_stops_the_rest() {
    let mut jobs = Jobs::new().with_rollout_batch(2);
    let mut out = Vec::new();
    let targets = ["a", "b", "c", "d", "e"];
    jobs.create_job(spec("big", &targets), T0, &mut out)
        .unwrap();
    // The first batch: two things, each told (notify + notify-next).
    let first: Vec<String> = out.drain(..).map(|p| p.topic).collect();
    assert_eq!(first.len(), 4, "{first:?}");
    assert!(first[0].starts_with("$aws/things/a/") && first[2].starts_with("$aws/things/b/"));
    assert!(jobs.rolling_out().unwrap());
    assert!(jobs.execution("c", "big").unwrap().is_none());
    assert_eq!(jobs.roll_out(T0, &mut out).unwrap(), 2);
    assert!(jobs.execution("d", "big").unwrap().is_some());
    // A second job waits behind the first: creating it rolls out the next batch, oldest
    // job first (e, then the new job's only target).
    jobs.create_job(spec("next", &["a"]), T0, &mut out).unwrap();
    assert!(jobs.execution("e", "big").unwrap().is_some());
    assert!(jobs.execution("a", "next").unwrap().is_some());
    assert!(!jobs.rolling_out().unwrap());
    assert_eq!(jobs.roll_out(T0, &mut out).unwrap(), 0);

    // Canceled while rolling out: the targets not reached get no execution.
    jobs.create_job(spec("stopped", &targets), T0, &mut out)
        .unwrap();
    jobs.cancel_job("stopped", false, None, None, T0, &mut out)
        .unwrap();
    assert!(!jobs.rolling_out().unwrap());
    assert_eq!(
        jobs.execution("a", "stopped").unwrap().unwrap().status,
        Status::Canceled
    );
    assert!(jobs.execution("c", "stopped").unwrap().is_none());
}

/// A store another node writes to just before this engine's next write: the write fails
/// (its revision is stale) and the engine must read again and decide again.
struct Raced<'a> {
    inner: &'a mut MemoryJobs,
    other_node: Option<OtherNode>,
    /// Calls of `thing`, `thing_records`, `put_thing`, `put_things`: how many steps it took.
    calls: std::cell::Cell<[usize; 4]>,
}

impl<'a> Raced<'a> {
    fn new(inner: &'a mut MemoryJobs, other_node: OtherNode) -> Self {
        Self {
            inner,
            other_node: Some(other_node),
            calls: Default::default(),
        }
    }

    fn count(&self, call: usize) {
        let mut calls = self.calls.get();
        calls[call] += 1;
        self.calls.set(calls);
    }

    fn other_node_writes(&mut self) {
        if let Some(other_node) = self.other_node.take() {
            other_node(self.inner);
        }
    }
}

/// What another node does to the shared store.
type OtherNode = Box<dyn FnOnce(&mut MemoryJobs)>;

impl JobsStore for Raced<'_> {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        self.inner.job(job_id)
    }
    fn insert_job(&mut self, job: Job, things: &[String]) -> Stored<bool> {
        self.inner.insert_job(job, things)
    }
    fn put_job(&mut self, job: Job) -> Stored<bool> {
        self.inner.put_job(job)
    }
    fn delete_job(&mut self, job_id: &str) -> Stored<bool> {
        self.inner.delete_job(job_id)
    }
    fn job_ids(&self) -> Stored<Vec<String>> {
        self.inner.job_ids()
    }
    fn job_things(&self, job_id: &str, from: u64, count: u64) -> Stored<Vec<String>> {
        self.inner.job_things(job_id, from, count)
    }
    fn counts(&self, job_id: &str) -> Stored<Counts> {
        self.inner.counts(job_id)
    }
    fn thing(&self, thing: &str) -> Stored<Arc<ThingRecord>> {
        self.count(0);
        self.inner.thing(thing)
    }
    fn thing_records(&self, things: &[String]) -> Stored<Vec<Arc<ThingRecord>>> {
        self.count(1);
        self.inner.thing_records(things)
    }
    fn put_thing(&mut self, thing: &str, record: ThingRecord, tally: &Tally) -> Stored<bool> {
        self.count(2);
        self.other_node_writes();
        self.inner.put_thing(thing, record, tally)
    }
    fn put_things(&mut self, writes: Vec<ThingWrite>) -> Vec<Stored<bool>> {
        self.count(3);
        self.other_node_writes();
        self.inner.put_things(writes)
    }
    fn things(&self) -> Stored<Vec<String>> {
        self.inner.things()
    }
    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>> {
        self.inner.due(now_ms)
    }
    fn next_deadline(&self) -> Stored<Option<u64>> {
        self.inner.next_deadline()
    }
    fn rollouts(&self) -> Stored<Vec<Rollout>> {
        self.inner.rollouts()
    }
    fn take_rollout(
        &mut self,
        job_id: &str,
        from: u64,
        count: u64,
        job: Option<Job>,
    ) -> Stored<Option<Vec<String>>> {
        self.inner.take_rollout(job_id, from, count, job)
    }
    fn stop_rollout(&mut self, job_id: &str) -> Stored<bool> {
        self.inner.stop_rollout(job_id)
    }
    fn add_job_things(&mut self, job_id: &str, things: &[String]) -> Stored<()> {
        self.inner.add_job_things(job_id, things)
    }
    fn entry(&self, table: &str, name: &str) -> Stored<Option<Vec<u8>>> {
        self.inner.entry(table, name)
    }
    fn put_entry(
        &mut self,
        table: &str,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
    ) -> Stored<bool> {
        self.inner.put_entry(table, name, value, create)
    }
    fn entries(&self, table: &str, after: Option<&str>, count: u64) -> Stored<Entries> {
        self.inner.entries(table, after, count)
    }
    fn drop_table(&mut self, table: &str) -> Stored<()> {
        self.inner.drop_table(table)
    }
}

#[test]
fn two_nodes_starting_the_same_execution_start_it_once() {
    let mut shared = MemoryJobs::default();
    let mut out = Vec::new();
    Jobs::with_store(&mut shared, 60_000)
        .create_job(spec("job1", &["T"]), T0, &mut out)
        .unwrap();
    out.clear();
    // Node B starts the job between node A's read and node A's write.
    let store = Raced::new(
        &mut shared,
        Box::new(|inner: &mut MemoryJobs| {
            let mut b_out = Vec::new();
            Jobs::with_store(inner, 60_000).handle(
                "$aws/things/T/jobs/start-next",
                b"{}",
                T0,
                &mut b_out,
            );
        }),
    );
    let mut node_a = Jobs::with_store(store, 60_000);
    let reply = device(&mut node_a, "T", "start-next", json!({}), &mut out);
    assert_eq!(reply["_accepted"], json!(true));
    // A found it started (by B) on its second read: the same execution, started once.
    assert_eq!(reply["execution"]["status"], json!("IN_PROGRESS"));
    assert_eq!(reply["execution"]["versionNumber"], json!(2));
    assert!(
        out.is_empty(),
        "A changed nothing, so it notified nothing: {out:?}"
    );
    drop(node_a);
    let record = shared.thing("T").unwrap();
    assert_eq!(record.latest("job1").unwrap().version_number, 2);
    assert_eq!(record.revision, 2, "the create's write and B's start");
}

/// A rollout reads its batch's things in one step of the store and writes them in the next
/// (one round trip each on Redis); a thing another node wrote in between is queued again on
/// its own, from a fresh read, and told of both its jobs.
#[test]
fn a_rollout_batch_is_one_read_and_one_write_and_a_raced_thing_goes_again() {
    let mut shared = MemoryJobs::default();
    let mut store = Raced::new(
        &mut shared,
        Box::new(|inner: &mut MemoryJobs| {
            Jobs::with_store(inner, 60_000)
                .create_job(spec("other", &["b"]), T0, &mut Vec::new())
                .unwrap();
        }),
    );
    let mut out = Vec::new();
    Jobs::with_store(&mut store, 60_000)
        .with_rollout_batch(4)
        .create_job(spec("big", &["a", "b", "c", "d"]), T0, &mut out)
        .unwrap();
    let [reads, batch_reads, writes, batch_writes] = store.calls.get();
    assert_eq!(
        (batch_reads, batch_writes),
        (1, 1),
        "the batch: one read, one write"
    );
    assert_eq!((reads, writes), (1, 1), "b again, on its own");
    drop(store);
    for thing in ["a", "b", "c", "d"] {
        let record = shared.thing(thing).unwrap();
        assert_eq!(
            record.latest("big").unwrap().status,
            Status::Queued,
            "{thing}"
        );
        assert_eq!(record.executions["big"].len(), 1, "{thing}: one execution");
    }
    assert!(shared.thing("b").unwrap().latest("other").is_some());
    // Each thing told once (notify and notify-next), b with both jobs in its list.
    let told: Vec<&str> = out
        .iter()
        .filter(|p| p.topic.ends_with("/notify"))
        .map(|p| p.topic.as_str())
        .collect();
    assert_eq!(told.len(), 4, "{told:?}");
    let b = out
        .iter()
        .find(|p| p.topic == "$aws/things/b/jobs/notify")
        .unwrap();
    let b: Value = serde_json::from_slice(&b.payload).unwrap();
    let queued: Vec<&Value> = b["jobs"]["QUEUED"].as_array().unwrap().iter().collect();
    assert_eq!(queued.len(), 2, "{b}");
    assert_eq!(queued[0]["jobId"], json!("other"));
    assert_eq!(queued[1]["jobId"], json!("big"));
}

#[test]
fn a_stale_write_is_refused_and_changes_nothing() {
    let mut store = MemoryJobs::default();
    let first = ThingRecord::clone(&store.thing("T").unwrap());
    assert_eq!(store.put_thing("T", first.clone(), &Tally::new()), Ok(true));
    // The same revision again: someone wrote since.
    assert_eq!(store.put_thing("T", first, &Tally::new()), Ok(false));
    assert_eq!(store.thing("T").unwrap().revision, 1);
}

#[test]
fn a_write_that_lost_the_race_publishes_nothing_of_its_first_attempt() {
    let mut shared = MemoryJobs::default();
    let mut out = Vec::new();
    let mut setup = Jobs::with_store(&mut shared, 60_000);
    setup
        .create_job(spec("job1", &["T"]), T0, &mut out)
        .unwrap();
    device(&mut setup, "T", "start-next", json!({}), &mut out);
    out.clear();
    // Node B completes the execution between node A's read and node A's write of the same.
    let store = Raced::new(
        &mut shared,
        Box::new(|inner: &mut MemoryJobs| {
            let mut b_out = Vec::new();
            Jobs::with_store(inner, 60_000).handle(
                "$aws/things/T/jobs/job1/update",
                br#"{"status":"SUCCEEDED"}"#,
                T0,
                &mut b_out,
            );
        }),
    );
    let mut node_a = Jobs::with_store(store, 60_000);
    let reply = device(
        &mut node_a,
        "T",
        "job1/update",
        json!({ "status": "FAILED" }),
        &mut out,
    );
    // A's first attempt would have emptied the list (notify, notify-next); on its second
    // read the execution had ended, so A refuses, and tells nobody anything.
    assert_eq!(reply["_accepted"], json!(false));
    assert_eq!(reply["code"], json!("InvalidStateTransition"));
    assert_eq!(reply["executionState"]["status"], json!("SUCCEEDED"));
    assert!(out.is_empty(), "{out:?}");
}

/// A shared store that has become unreachable: every call fails.
struct Unreachable;

fn down<T>() -> Stored<T> {
    Err(StoreError("Redis is down".into()))
}

impl JobsStore for Unreachable {
    fn job(&self, _: &str) -> Stored<Option<Arc<Job>>> {
        down()
    }
    fn insert_job(&mut self, _: Job, _: &[String]) -> Stored<bool> {
        down()
    }
    fn put_job(&mut self, _: Job) -> Stored<bool> {
        down()
    }
    fn delete_job(&mut self, _: &str) -> Stored<bool> {
        down()
    }
    fn job_ids(&self) -> Stored<Vec<String>> {
        down()
    }
    fn job_things(&self, _: &str, _: u64, _: u64) -> Stored<Vec<String>> {
        down()
    }
    fn counts(&self, _: &str) -> Stored<Counts> {
        down()
    }
    fn thing(&self, _: &str) -> Stored<Arc<ThingRecord>> {
        down()
    }
    fn put_thing(&mut self, _: &str, _: ThingRecord, _: &Tally) -> Stored<bool> {
        down()
    }
    fn things(&self) -> Stored<Vec<String>> {
        down()
    }
    fn due(&self, _: u64) -> Stored<Vec<(String, String)>> {
        down()
    }
    fn next_deadline(&self) -> Stored<Option<u64>> {
        down()
    }
    fn rollouts(&self) -> Stored<Vec<Rollout>> {
        down()
    }
    fn take_rollout(
        &mut self,
        _: &str,
        _: u64,
        _: u64,
        _: Option<Job>,
    ) -> Stored<Option<Vec<String>>> {
        down()
    }
    fn stop_rollout(&mut self, _: &str) -> Stored<bool> {
        down()
    }
    fn add_job_things(&mut self, _: &str, _: &[String]) -> Stored<()> {
        down()
    }
    fn entry(&self, _: &str, _: &str) -> Stored<Option<Vec<u8>>> {
        down()
    }
    fn put_entry(&mut self, _: &str, _: &str, _: Option<&[u8]>, _: bool) -> Stored<bool> {
        down()
    }
    fn entries(&self, _: &str, _: Option<&str>, _: u64) -> Stored<Entries> {
        down()
    }
    fn drop_table(&mut self, _: &str) -> Stored<()> {
        down()
    }
}

#[test]
fn a_store_that_fails_gets_every_request_a_clear_error_and_publishes_nothing() {
    let mut jobs = Jobs::with_store(Unreachable, 60_000);
    let mut out = Vec::new();
    for api in ["get", "start-next", "job1/get", "job1/update", "$next/get"] {
        let body = json!({ "status": "SUCCEEDED", "clientToken": "c1" });
        let reply = device(&mut jobs, "T", api, body, &mut out);
        assert_eq!(reply["_accepted"], json!(false), "{api}");
        assert_eq!(reply["code"], json!("InternalError"), "{api}");
        assert_eq!(reply["clientToken"], json!("c1"), "{api}");
        let message = reply["message"].as_str().unwrap();
        assert!(message.contains("Redis is down"), "{api}: {message}");
        assert!(out.is_empty(), "{api}: nothing but the reply: {out:?}");
    }
    for op in [
        json!({ "op": "createJob", "jobId": "j", "targets": ["T"], "document": {} }),
        json!({ "op": "describeJob", "jobId": "j" }),
        json!({ "op": "listJobExecutions" }),
        json!({ "op": "cancelJob", "jobId": "j" }),
    ] {
        let answer = serde_json::to_value(jobs.operate(op.to_string().as_bytes(), T0, &mut out));
        assert_eq!(
            answer.unwrap()["error"]["code"],
            json!("InternalError"),
            "{op}"
        );
        assert!(out.is_empty(), "{op}: {out:?}");
    }
    assert!(jobs.expire(T0, &mut out).is_err());
    assert!(jobs.roll_out(T0, &mut out).is_err());
    assert!(out.is_empty());
}

/// The events published (topic after `$aws/events/`, and the JSON), the rest dropped.
fn events(out: &mut Vec<Publish>) -> Vec<(String, Value)> {
    out.drain(..)
        .filter_map(|p| {
            let topic = p.topic.strip_prefix("$aws/events/")?.to_owned();
            assert_eq!(p.qos, 0, "events go at most once, as AWS's");
            Some((topic, serde_json::from_slice(&p.payload).unwrap()))
        })
        .collect()
}

#[test]
fn events_follow_each_execution_and_the_job() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    jobs.create_job(spec("job1", &["A", "B"]), T0, &mut out)
        .unwrap();
    assert_eq!(events(&mut out), vec![], "queueing is no event");
    device(
        &mut jobs,
        "A",
        "job1/update",
        json!({ "status": "SUCCEEDED", "statusDetails": { "v": "2" } }),
        &mut out,
    );
    let seen = events(&mut out);
    assert_eq!(seen.len(), 1, "{seen:?}");
    let (topic, event) = &seen[0];
    assert_eq!(topic, "jobExecution/job1/succeeded");
    assert_eq!(event["eventType"], "JOB_EXECUTION");
    assert_eq!(event["operation"], "succeeded");
    assert_eq!(event["status"], "SUCCEEDED");
    assert_eq!(event["thingArn"], "thing/A");
    assert_eq!(event["statusDetails"], json!({ "v": "2" }));
    assert_eq!(event["timestamp"], S0);

    // The last execution ends: its event, then the job's `completed` with its counts.
    device(
        &mut jobs,
        "B",
        "job1/update",
        json!({ "status": "REJECTED" }),
        &mut out,
    );
    let seen = events(&mut out);
    let topics: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(topics, ["jobExecution/job1/rejected", "job/job1/completed"]);
    let job = &seen[1].1;
    assert_eq!(
        (job["eventType"].as_str(), job["status"].as_str()),
        (Some("JOB"), Some("COMPLETED"))
    );
    assert_eq!(job["jobProcessDetails"]["numberOfSucceededThings"], 1);
    assert_eq!(job["jobProcessDetails"]["numberOfRejectedThings"], 1);
    assert_eq!(job["targets"], json!(["A", "B"]));

    // A cancel: its start, each execution canceled, its end; a delete likewise.
    jobs.create_job(spec("job2", &["A"]), T0, &mut out).unwrap();
    out.clear();
    jobs.cancel_job("job2", false, Some("RECALLED".into()), None, T0, &mut out)
        .unwrap();
    let seen = events(&mut out);
    let topics: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        topics,
        [
            "job/job2/cancellation_in_progress",
            "jobExecution/job2/canceled",
            "job/job2/canceled"
        ]
    );
    assert_eq!(seen[2].1["reasonCode"], "RECALLED");
    assert_eq!(seen[2].1["jobProcessDetails"]["numberOfCanceledThings"], 1);
    jobs.delete_job("job2", false, T0, &mut out).unwrap();
    let seen = events(&mut out);
    let topics: Vec<&str> = seen.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        topics,
        [
            "job/job2/deletion_in_progress",
            "jobExecution/job2/deleted",
            "job/job2/deleted"
        ]
    );
}

#[test]
fn a_job_s_end_time_keeps_the_engine_awake_after_its_rollout() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    let mut spec = spec("ends", &["A"]);
    let start = T0 - T0 % 60_000;
    let end = start + 60 * 60_000;
    spec.scheduling_config = Some(SchedulingConfig {
        end_time: Some(format_time(end)),
        end_behavior: Some(EndBehavior::Cancel),
        ..SchedulingConfig::default()
    });
    jobs.create_job(spec, T0, &mut out).unwrap();
    // Rolled out at once, but its end is still to come: the server keeps ticking for it.
    assert!(jobs.store().rollouts().unwrap().is_empty());
    assert!(jobs.rolling_out().unwrap());
    assert_eq!(jobs.next_wake(T0).unwrap(), Some(end));
    jobs.roll_out(end, &mut out).unwrap();
    let job = jobs.job("ends").unwrap().unwrap();
    assert_eq!(job.status, JobStatus::Canceled);
    assert_eq!(
        jobs.execution("A", "ends").unwrap().unwrap().status,
        Status::Canceled
    );
    assert!(!jobs.rolling_out().unwrap(), "nothing left to do");
    assert_eq!(jobs.next_wake(end).unwrap(), None);
}

/// `YYYY-MM-DDTHH:MM` of a whole minute, by search (the tests' own, not the engine's).
fn format_time(ms: u64) -> String {
    let days = ms / 86_400_000;
    let mut date = (1970u64, 1u64, 1u64);
    let month_days = |y: u64, m: u64| match m {
        2 if (y.is_multiple_of(4) && !y.is_multiple_of(100)) || y.is_multiple_of(400) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    for _ in 0..days {
        date.2 += 1;
        if date.2 > month_days(date.0, date.1) {
            date = (date.0 + (date.1 == 12) as u64, date.1 % 12 + 1, 1);
        }
    }
    let minutes = (ms % 86_400_000) / 60_000;
    let text = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}",
        date.0,
        date.1,
        date.2,
        minutes / 60,
        minutes % 60
    );
    assert_eq!(parse_time(&text).unwrap(), ms);
    text
}

/// Issue 46: a value that fits no field names the field (serde alone cannot: the request is
/// tagged and flattened), and does not say the request fits no operator call.
#[test]
fn a_misfit_value_in_an_operator_call_names_its_field() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    for (request, says) in [
        (
            r#"{"op":"createJob","jobId":"j","targets":["a"],"document":{},"abortConfig":{"criteriaList":[{"failureType":"EXPLODED","action":"CANCEL","thresholdPercentage":10,"minNumberOfExecutedThings":1}]}}"#,
            "createJob: abortConfig.criteriaList[0].failureType: unknown variant `EXPLODED`",
        ),
        (
            r#"{"op":"createJob","jobId":"j","targets":["a"],"document":{},"targetSelection":"SOMETIMES"}"#,
            "createJob: targetSelection: unknown variant `SOMETIMES`",
        ),
        (
            r#"{"op":"listJobs","status":"NAPPING"}"#,
            "listJobs: status: unknown variant `NAPPING`",
        ),
        (
            r#"{"op":"cancelJob","jobId":"j","force":"yes"}"#,
            "cancelJob: force: invalid type: string \"yes\"",
        ),
        (
            r#"{"op":"cancelJob","reasonCode":"jobId"}"#,
            "cancelJob: missing field `jobId`",
        ),
        (r#"{"op":"explode"}"#, "the request fits no operator call"),
    ] {
        match jobs.operate(request.as_bytes(), T0, &mut out) {
            crate::jobs::wire::OperatorAnswer::Error(e) => {
                assert_eq!(e.code, "InvalidRequest", "{request}");
                assert!(e.message.starts_with(says), "{request}: {}", e.message);
            }
            other => panic!("{request}: {other:?}"),
        }
    }
    assert!(jobs.job("j").unwrap().is_none(), "nothing was created");
    assert!(out.is_empty());
}

/// A memory store reached by calls that fails the first write of one thing's record (a
/// store that fails midway through a cancellation), or the next write of a job.
struct FailsOnce {
    store: std::cell::RefCell<MemoryJobs>,
    thing: std::cell::Cell<Option<&'static str>>,
    job: std::cell::Cell<bool>,
}

impl Answers for FailsOnce {
    fn answer(&self, call: impl FnOnce() -> StoreCall) -> StoreAnswer {
        let call = call();
        let fails = match &call {
            StoreCall::PutThing(thing, ..) => self.thing.get() == Some(thing.as_str()),
            StoreCall::PutJob(_) => self.job.get(),
            _ => false,
        };
        if fails {
            self.thing.set(None);
            self.job.set(false);
            return StoreAnswer::Written(Err(StoreError("the store failed".into())));
        }
        call.run(&mut *self.store.borrow_mut())
    }
}

/// Jobs on a store that fails the first write of `thing`, with `job` on A, B and C queued.
fn failing_once_at(thing: &'static str, job: JobSpec) -> Jobs<Calls<FailsOnce>> {
    let store = Calls(FailsOnce {
        store: Default::default(),
        thing: std::cell::Cell::new(None),
        job: std::cell::Cell::new(false),
    });
    let mut jobs = Jobs::with_store(store, 60_000);
    let mut out = Vec::new();
    jobs.create_job(job, T0, &mut out).unwrap();
    jobs.roll_out(T0, &mut out).unwrap();
    for thing in ["A", "B", "C"] {
        assert_eq!(status(&jobs, thing), Status::Queued);
    }
    jobs.store().0.thing.set(Some(thing));
    jobs
}

fn job1_status<S: JobsStore>(jobs: &Jobs<S>) -> JobStatus {
    jobs.job("job1").unwrap().unwrap().status
}

fn cancel_job1<S: JobsStore>(jobs: &mut Jobs<S>, out: &mut Vec<Publish>) -> Result<(), JobsError> {
    jobs.cancel_job("job1", false, None, None, T0, out)
}

/// Ticks within the grace of a request cut short (which must leave its job as `untouched`
/// checks, and wake the node again by the grace's end), then at its end; returns that time.
fn past_the_grace<S: JobsStore>(
    jobs: &mut Jobs<S>,
    out: &mut Vec<Publish>,
    untouched: impl Fn(&Jobs<S>),
) -> u64 {
    out.clear();
    jobs.roll_out(T0 + 1_000, out).unwrap();
    untouched(jobs);
    let later = T0 + lifecycle::GRACE_MS;
    assert!(
        jobs.next_wake(T0 + 1_000)
            .unwrap()
            .is_some_and(|at| at <= later)
    );
    jobs.roll_out(later, out).unwrap();
    later
}

fn status<S: JobsStore>(jobs: &Jobs<S>, thing: &str) -> Status {
    jobs.execution(thing, "job1").unwrap().unwrap().status
}

/// What a tick published about job1: its job events, and which things' executions it ended.
fn job1_events(out: &[Publish]) -> (Vec<&str>, usize) {
    let jobs = out
        .iter()
        .filter_map(|p| p.topic.strip_prefix("$aws/events/job/job1/"))
        .collect();
    let executions = out
        .iter()
        .filter(|p| p.topic == "$aws/events/jobExecution/job1/canceled")
        .count();
    (jobs, executions)
}

/// A CancelJob cut short by the store (its job recorded CANCELED, one execution of three
/// ended) is finished by a tick once the request's grace is over: before, the other two stayed
/// QUEUED under a canceled job for good, and asking again was refused.
#[test]
fn a_cancellation_cut_short_by_the_store_is_finished_by_a_later_tick() {
    let mut jobs = failing_once_at("B", spec("job1", &["A", "B", "C"]));
    let mut out = Vec::new();
    assert!(cancel_job1(&mut jobs, &mut out).is_err());
    assert_eq!(job1_status(&jobs), JobStatus::Canceled);
    let statuses = ["A", "B", "C"].map(|t| status(&jobs, t));
    assert_eq!(statuses, [Status::Canceled, Status::Queued, Status::Queued]);
    assert!(matches!(
        cancel_job1(&mut jobs, &mut out),
        Err(JobsError::InvalidState(_))
    ));

    let later = past_the_grace(&mut jobs, &mut out, |jobs| {
        assert_eq!(status(jobs, "B"), Status::Queued)
    });
    let statuses = ["A", "B", "C"].map(|t| status(&jobs, t));
    assert_eq!(statuses, [Status::Canceled; 3]);
    assert_eq!(job1_events(&out), (vec!["canceled"], 2));
    assert!(jobs.store().rollouts().unwrap().is_empty());
    assert_eq!(jobs.next_wake(later).unwrap(), None);
}

/// A job on `A` and `B` whose cancellation or deletion (`status`) was cut short before any
/// execution was touched, its mark left, finished by node A's tick while node B's tick runs
/// too (in the middle of A's): the store after both, and what each node published.
fn finished_by_two_nodes_ticks(status: JobStatus) -> (MemoryJobs, Vec<Publish>, Vec<Publish>) {
    let mut shared = MemoryJobs::default();
    let mut out = Vec::new();
    {
        let mut setup = Jobs::with_store(&mut shared, 60_000);
        setup
            .create_job(spec("job1", &["A", "B"]), T0, &mut out)
            .unwrap();
        setup.roll_out(T0, &mut out).unwrap();
    }
    let mut cut_short = (*shared.job("job1").unwrap().unwrap()).clone();
    cut_short.status = status;
    cut_short.last_updated_at = T0;
    if status == JobStatus::Canceled {
        cut_short.completed_at = Some(T0);
    }
    assert!(shared.put_job(cut_short).unwrap());
    shared.add_job_things("job1", &[]).unwrap();
    let later = T0 + lifecycle::GRACE_MS;
    let node_b_out = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let b_out = node_b_out.clone();
    let store = Raced::new(
        &mut shared,
        Box::new(move |inner: &mut MemoryJobs| {
            Jobs::with_store(inner, 60_000)
                .roll_out(later, &mut b_out.borrow_mut())
                .unwrap();
        }),
    );
    out.clear();
    Jobs::with_store(store, 60_000)
        .roll_out(later, &mut out)
        .unwrap();
    assert!(shared.rollouts().unwrap().is_empty());
    let node_b_out = node_b_out.take();
    (shared, out, node_b_out)
}

/// A cancellation cut short is finished by the tick of every node that sees its mark, each
/// step made again, and announced once: by the node whose tick took the mark off (here node
/// B, whose tick ran while node A's was finishing it too). Before, each said it was canceled.
#[test]
fn a_cancellation_finished_by_two_nodes_ticks_is_announced_once() {
    let (shared, node_a_out, node_b_out) = finished_by_two_nodes_ticks(JobStatus::Canceled);
    for thing in ["A", "B"] {
        let record = shared.thing(thing).unwrap();
        assert_eq!(record.latest("job1").unwrap().status, Status::Canceled);
    }
    assert_eq!(
        job1_events(&node_b_out),
        (vec!["canceled"], 2),
        "B finished it"
    );
    assert_eq!(
        job1_events(&node_a_out),
        (vec![], 0),
        "A, finishing it too, said nothing"
    );
}

/// A deletion cut short is finished the same way and announced once: by the node whose tick
/// removed the job. Before, each said it was deleted.
#[test]
fn a_deletion_finished_by_two_nodes_ticks_is_announced_once() {
    let (shared, node_a_out, node_b_out) =
        finished_by_two_nodes_ticks(JobStatus::DeletionInProgress);
    for thing in ["A", "B"] {
        assert_eq!(shared.thing(thing).unwrap().latest("job1"), None);
    }
    assert!(shared.job("job1").unwrap().is_none());
    assert_eq!(job1_events(&node_b_out).0, vec!["deleted"], "B finished it");
    assert_eq!(
        job1_events(&node_a_out).0,
        Vec::<&str>::new(),
        "A, finishing it too, said nothing"
    );
}

/// An abort (the abort configuration's threshold reached) cut short the same way is
/// finished the same way: it happens once, when the execution that reached it ends.
#[test]
fn an_abort_cut_short_by_the_store_is_finished_by_a_later_tick() {
    let mut job = spec("job1", &["A", "B", "C"]);
    job.config.abort_config = Some(
        serde_json::from_value(json!({"criteriaList": [{"failureType": "FAILED",
            "action": "CANCEL", "thresholdPercentage": 10, "minNumberOfExecutedThings": 1}]}))
        .unwrap(),
    );
    let mut jobs = failing_once_at("B", job);
    let mut out = Vec::new();
    let reply = device(
        &mut jobs,
        "A",
        "job1/update",
        json!({"status": "FAILED"}),
        &mut out,
    );
    assert_eq!(reply["_accepted"], json!(true), "{reply}");
    assert_eq!(job1_status(&jobs), JobStatus::Canceled);
    assert_eq!(status(&jobs, "B"), Status::Queued);

    out.clear();
    jobs.roll_out(T0 + lifecycle::GRACE_MS, &mut out).unwrap();
    assert_eq!(status(&jobs, "B"), Status::Canceled);
    assert_eq!(status(&jobs, "C"), Status::Canceled);
    assert_eq!(job1_events(&out), (vec!["canceled"], 2));
}

/// A DeleteJob cut short by the store (the job DELETION_IN_PROGRESS, one of its three things
/// cleared) is finished by a tick once the request's grace is over: before, the job stayed
/// half deleted, its executions on the other two things' lists, until someone asked again.
#[test]
fn a_deletion_cut_short_by_the_store_is_finished_by_a_later_tick() {
    let mut jobs = failing_once_at("B", spec("job1", &["A", "B", "C"]));
    let mut out = Vec::new();
    assert!(jobs.delete_job("job1", true, T0, &mut out).is_err());
    assert_eq!(job1_status(&jobs), JobStatus::DeletionInProgress);
    let left = ["A", "B", "C"].map(|t| jobs.execution(t, "job1").unwrap().is_some());
    assert_eq!(left, [false, true, true]);

    let later = past_the_grace(&mut jobs, &mut out, |jobs| {
        assert!(jobs.execution("B", "job1").unwrap().is_some())
    });
    for thing in ["A", "B", "C"] {
        assert_eq!(jobs.execution(thing, "job1").unwrap(), None);
    }
    assert!(jobs.job("job1").unwrap().is_none());
    assert_eq!(job1_events(&out).0, vec!["deleted"]);
    assert!(jobs.store().rollouts().unwrap().is_empty());
    assert_eq!(jobs.next_wake(later).unwrap(), None);
}

/// A CancelJob whose job write fails after its mark was made (the rollout listed again) leaves
/// the job IN_PROGRESS with every thing handed out: the next tick takes the mark away, and
/// the executions are untouched.
#[test]
fn a_mark_left_by_a_cancellation_that_never_happened_goes_at_the_next_tick() {
    let mut jobs = failing_once_at("none", spec("job1", &["A", "B", "C"]));
    assert!(jobs.store().rollouts().unwrap().is_empty());
    jobs.store().0.job.set(true);
    let mut out = Vec::new();
    assert!(cancel_job1(&mut jobs, &mut out).is_err());
    assert_eq!(job1_status(&jobs), JobStatus::InProgress);
    assert_eq!(jobs.store().rollouts().unwrap().len(), 1, "the mark");
    out.clear();
    jobs.roll_out(T0 + 1_000, &mut out).unwrap();
    assert!(jobs.store().rollouts().unwrap().is_empty());
    assert!(out.is_empty(), "{out:?}");
    for thing in ["A", "B", "C"] {
        assert_eq!(status(&jobs, thing), Status::Queued);
    }
}

/// A request that changes nothing writes nothing: the engine changes a copy of the thing's
/// record the store shares and compares it with that record, which the store still holds
/// unchanged (its revision is the same, and so is the record).
#[test]
fn a_request_that_changes_nothing_writes_nothing() {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    jobs.create_job(spec("job1", &["T"]), T0, &mut out).unwrap();
    device(&mut jobs, "T", "start-next", json!({}), &mut out);
    out.clear();
    let before = jobs.store().thing("T").unwrap();
    assert_eq!(before.revision, 2, "queued, then started");

    // Started already: start-next answers with it and changes nothing; so does a read.
    let next = device(&mut jobs, "T", "start-next", json!({}), &mut out);
    assert_eq!(next["execution"]["jobId"], json!("job1"));
    device(&mut jobs, "T", "get", json!({}), &mut out);
    let after = jobs.store().thing("T").unwrap();
    assert_eq!(after.revision, 2, "nothing written");
    assert!(
        Arc::ptr_eq(&before, &after),
        "the very record the store kept"
    );
    assert!(out.is_empty(), "nothing told: {out:?}");

    // A change is written, to a new record; the one read before is as it was.
    device(
        &mut jobs,
        "T",
        "job1/update",
        json!({"status": "SUCCEEDED"}),
        &mut out,
    );
    let changed = jobs.store().thing("T").unwrap();
    assert_eq!(changed.revision, 3);
    assert_eq!(before.latest("job1").unwrap().status, Status::InProgress);
    assert_eq!(changed.latest("job1").unwrap().status, Status::Succeeded);
}
