//! Job rollouts on every jobs store (memory, the durable store's, Redis, Redis Cluster), on a
//! simulated clock: the engine is driven with the times the test gives it, so an hour of
//! rollout runs in seconds. The same scenarios run over each store; on Redis, several engines
//! (nodes) also run at once over one store.

mod redis;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use mqstore_core::envelope::Publish;
use mqstore_core::jobs::{ABORTED, Calls, DurableJobs, Jobs, JobsStore, MemoryJobs, tables};
use mqstore_core::store::Quotas;
use mqstore_server::redis_store::{BlockingRedisJobs, RedisConfig, RedisJobs, RedisStore};
use serde_json::{Value, json};

const T0: u64 = 1_800_000_000_000;
const MINUTE: u64 = 60_000;
/// How often the simulated nodes tick (as `mqstore serve` on Redis does).
const TICK: u64 = 100;

fn engine<S: JobsStore>(store: &mut S) -> Jobs<&mut S> {
    Jobs::with_store(store, MINUTE).with_rollout_batch(64)
}

/// An operator call: its `ok` answer, or its error's (code, message).
fn op<S: JobsStore>(store: &mut S, request: Value, now: u64) -> Result<Value, (String, String)> {
    op_publishing(store, request, now, &mut Vec::new())
}

/// [`op`], with what the call published pushed onto `out`.
fn op_publishing<S: JobsStore>(
    store: &mut S,
    request: Value,
    now: u64,
    out: &mut Vec<Publish>,
) -> Result<Value, (String, String)> {
    let answer = engine(store).operate(request.to_string().as_bytes(), now, out);
    let answer = serde_json::to_value(answer).unwrap();
    match answer.get("ok") {
        Some(ok) => Ok(ok.clone()),
        None => Err((
            answer["error"]["code"].as_str().unwrap().to_owned(),
            answer["error"]["message"].as_str().unwrap().to_owned(),
        )),
    }
}

/// A device request's reply: (accepted, payload).
fn device<S: JobsStore>(
    store: &mut S,
    thing: &str,
    api: &str,
    body: Value,
    now: u64,
) -> (bool, Value) {
    let mut out = Vec::new();
    let topic = format!("$aws/things/{thing}/jobs/{api}");
    engine(store)
        .handle(&topic, body.to_string().as_bytes(), now, &mut out)
        .expect("a request");
    let reply = out.pop().unwrap();
    (
        reply.topic.ends_with("/accepted"),
        serde_json::from_slice(&reply.payload).unwrap(),
    )
}

/// Things whose pending list got an execution of `job_id` first queued (notify-next naming it
/// with executionNumber 1 on a thing with nothing else pending).
fn notified(out: &[Publish], job_id: &str) -> Vec<String> {
    out.iter()
        .filter(|p| p.topic.ends_with("/notify-next"))
        .filter_map(|p| {
            let v: Value = serde_json::from_slice(&p.payload).ok()?;
            (v["execution"]["jobId"] == job_id && v["execution"]["status"] == "QUEUED")
                .then(|| p.topic.split('/').nth(2).unwrap().to_owned())
        })
        .collect()
}

fn tick<S: JobsStore>(store: &mut S, now: u64, out: &mut Vec<Publish>) {
    let mut jobs = engine(store);
    jobs.expire(now, out).unwrap();
    jobs.roll_out(now, out).unwrap();
}

/// Rolls out at T0 batch after batch while there is something to roll out (the jobs without
/// a rate: all their things).
fn roll_out_all<S: JobsStore>(store: &mut S) {
    while engine(store).roll_out(T0, &mut Vec::new()).unwrap() > 0 {}
}

fn describe<S: JobsStore>(store: &mut S, job_id: &str, now: u64) -> Value {
    op(store, json!({ "op": "describeJob", "jobId": job_id }), now).unwrap()["job"].clone()
}

fn things(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i:05}")).collect()
}

/// The largest number of notifications in any 60 s window of `times`.
fn busiest_minute(times: &[u64]) -> usize {
    let mut most = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= MINUTE {
            start += 1;
        }
        most = most.max(end - start + 1);
    }
    most
}

/// A thing group of `things`.
fn group<S: JobsStore>(store: &mut S, name: &str, things: &[String]) {
    op(
        store,
        json!({ "op": "createThingGroup", "thingGroupName": name }),
        T0,
    )
    .unwrap();
    for thing in things {
        let add =
            json!({ "op": "addThingToThingGroup", "thingGroupName": name, "thingName": thing });
        op(store, add, T0).unwrap();
    }
}

/// A job on a group of `fleet` things at `maximumPerMinute` a tenth of that notifies at most
/// that many things in any minute of simulated time, and all of them in about ten minutes.
fn a_fixed_rate_holds_in_every_minute<S: JobsStore>(store: &mut S, tag: &str, fleet: usize) {
    let job_id = format!("{tag}-rate");
    let rate = fleet / 10;
    group(store, &format!("{tag}-fleet"), &things(tag, fleet));
    let mut out = Vec::new();
    let create = json!({ "op": "createJob", "jobId": job_id,
        "targets": [format!("arn:aws:iot:eu-west-1:123456789012:thinggroup/{tag}-fleet")],
        "document": {}, "jobExecutionsRolloutConfig": { "maximumPerMinute": rate } });
    op_publishing(store, create, T0, &mut out).unwrap();
    let mut times = Vec::new();
    let mut now = T0;
    let mut seen = BTreeMap::new();
    while now <= T0 + 11 * MINUTE {
        tick(store, now, &mut out);
        for thing in notified(&out, &job_id) {
            *seen.entry(thing).or_insert(0) += 1;
            times.push(now);
        }
        out.clear();
        // Every tick for two minutes (as a node on Redis polls), then at the engine's wakes
        // (as a node on memory sleeps): the rate holds either way.
        now = if now < T0 + 2 * MINUTE {
            now + TICK
        } else {
            next_tick(store, now, T0 + 11 * MINUTE + 1)
        };
    }
    assert_eq!(seen.len(), fleet, "{tag}: every thing got the job");
    assert!(
        seen.values().all(|n| *n == 1),
        "{tag}: each thing notified once"
    );
    assert!(
        busiest_minute(&times) <= rate,
        "{tag}: {} in one minute",
        busiest_minute(&times)
    );
    let last = *times.last().unwrap() - T0;
    assert!(
        (9 * MINUTE..=11 * MINUTE).contains(&last),
        "{tag}: done after {last} ms"
    );
    let job = describe(store, &job_id, now);
    assert_eq!(job["rollout"]["notifiedThings"], fleet);
    assert_eq!(job["jobProcessDetails"]["numberOfQueuedThings"], fleet);
}

/// An exponential rate starts at its base and goes up by its factor each time its criteria's
/// count is reached: by notified things, and by succeeded things (no successes, no increase).
fn an_exponential_rate_follows_its_criteria<S: JobsStore>(store: &mut S, tag: &str) {
    let job_id = format!("{tag}-exp");
    let targets = things(&format!("{tag}e"), 300);
    let mut out = Vec::new();
    op_publishing(
        store,
        json!({ "op": "createJob", "jobId": job_id, "targets": targets, "document": {},
        "jobExecutionsRolloutConfig": { "maximumPerMinute": 80, "exponentialRate": {
            "baseRatePerMinute": 10, "incrementFactor": 2.0,
            "rateIncreaseCriteria": { "numberOfNotifiedThings": 20 } } } }),
        T0,
        &mut out,
    )
    .unwrap();
    let mut now = T0;
    let mut per_minute = vec![0usize; 8];
    while now < T0 + 8 * MINUTE {
        tick(store, now, &mut out);
        let n = notified(&out, &job_id).len();
        per_minute[((now - T0) / MINUTE) as usize] += n;
        out.clear();
        if n == 0 {
            now = next_tick(store, now, T0 + 8 * MINUTE);
            continue;
        }
        let job = describe(store, &job_id, now);
        let notified = job["rollout"]["notifiedThings"].as_u64().unwrap();
        if notified < 300 {
            let expected = (10.0 * 2f64.powi((notified / 20) as i32)).min(80.0);
            assert_eq!(
                job["rollout"]["ratePerMinute"],
                json!(expected),
                "{tag} after {notified}"
            );
        }
        now = next_tick(store, now, T0 + 8 * MINUTE);
    }
    // 10 a minute until 20 are notified, then 20, 40, 80 (the maximum).
    assert_eq!(per_minute[0], 10, "{tag}: {per_minute:?}");
    assert!(
        per_minute[1] <= 20 && per_minute[1] >= 10,
        "{tag}: {per_minute:?}"
    );
    assert!(per_minute.iter().all(|n| *n <= 80), "{tag}: {per_minute:?}");
    assert_eq!(
        per_minute.iter().sum::<usize>(),
        300,
        "{tag}: {per_minute:?}"
    );

    // By succeeded things: without successes the rate stays at its base.
    let job_id = format!("{tag}-exps");
    let targets = things(&format!("{tag}s"), 100);
    op_publishing(
        store,
        json!({ "op": "createJob", "jobId": job_id, "targets": targets, "document": {},
        "jobExecutionsRolloutConfig": { "exponentialRate": {
            "baseRatePerMinute": 5, "incrementFactor": 3.0,
            "rateIncreaseCriteria": { "numberOfSucceededThings": 5 } } } }),
        T0,
        &mut out,
    )
    .unwrap();
    let mut now = T0;
    let mut reached = Vec::new();
    while now < T0 + 3 * MINUTE {
        tick(store, now, &mut out);
        reached.extend(notified(&out, &job_id));
        out.clear();
        now = next_tick(store, now, T0 + 3 * MINUTE);
    }
    assert_eq!(
        reached.len(),
        15,
        "{tag}: 5 a minute for 3 minutes without successes"
    );
    for thing in &reached[..5] {
        let (ok, _) = device(
            store,
            thing,
            &format!("{job_id}/update"),
            json!({ "status": "SUCCEEDED" }),
            now,
        );
        assert!(ok);
    }
    let job = describe(store, &job_id, now);
    tick(store, now, &mut out);
    let job_after = describe(store, &job_id, now);
    assert_eq!(job["jobProcessDetails"]["numberOfSucceededThings"], 5);
    assert_eq!(
        job_after["rollout"]["ratePerMinute"],
        json!(15.0),
        "{tag}: 5 successes, rate × 3"
    );
}

/// An abort at 10 % FAILED after 100 executed things: the job goes on at 9 failures in 99,
/// and is canceled by the failure that makes 10 in 100 — its QUEUED executions CANCELED, its
/// IN_PROGRESS ones left to finish (AWS's CANCEL without force), its rollout stopped.
fn an_abort_stops_the_job_exactly_at_its_threshold<S: JobsStore>(store: &mut S, tag: &str) {
    let job_id = format!("{tag}-abort");
    let targets = things(&format!("{tag}a"), 150);
    op(
        store,
        json!({ "op": "createJob", "jobId": job_id, "targets": targets, "document": {},
        "abortConfig": { "criteriaList": [{ "failureType": "FAILED", "action": "CANCEL",
            "thresholdPercentage": 10, "minNumberOfExecutedThings": 100 }] } }),
        T0,
    )
    .unwrap();
    roll_out_all(store);
    let update = |store: &mut S, thing: &str, status: &str| {
        let (ok, reply) = device(
            store,
            thing,
            &format!("{job_id}/update"),
            json!({ "status": status }),
            T0,
        );
        assert!(ok, "{tag} {thing}: {reply}");
    };
    // Two things start and stay IN_PROGRESS.
    for thing in &targets[140..142] {
        let (ok, _) = device(store, thing, "start-next", json!({}), T0);
        assert!(ok);
    }
    for thing in &targets[..90] {
        update(store, thing, "SUCCEEDED");
    }
    for thing in &targets[90..99] {
        update(store, thing, "FAILED");
    }
    assert_eq!(
        describe(store, &job_id, T0)["status"],
        "IN_PROGRESS",
        "{tag}: 9 of 99"
    );
    update(store, &targets[99], "FAILED");
    let job = describe(store, &job_id, T0);
    assert_eq!(job["status"], "CANCELED", "{tag}: 10 of 100");
    assert_eq!(job["reasonCode"], ABORTED);
    assert!(
        job["comment"].as_str().unwrap().contains("10 %"),
        "{tag}: {}",
        job["comment"]
    );
    let details = &job["jobProcessDetails"];
    assert_eq!(details["numberOfCanceledThings"], 48, "{tag}: {details}");
    assert_eq!(details["numberOfInProgressThings"], 2, "{tag}: {details}");
    // The device that was still working may finish; nothing new is queued.
    let (ok, _) = device(
        store,
        &targets[140],
        &format!("{job_id}/update"),
        json!({ "status": "SUCCEEDED" }),
        T0,
    );
    assert!(ok);
    let (ok, reply) = device(store, &targets[120], "start-next", json!({}), T0);
    assert!(ok && reply.get("execution").is_none(), "{tag}: {reply}");
}

/// Retries are counted per failure type: FAILED once, TIMED_OUT twice.
fn retries_are_counted_per_failure_type<S: JobsStore>(store: &mut S, tag: &str) {
    let job_id = format!("{tag}-retry");
    let thing = format!("{tag}-r1");
    op(
        store,
        json!({ "op": "createJob", "jobId": job_id, "targets": [thing], "document": {},
        "timeoutConfig": { "inProgressTimeoutInMinutes": 1 },
        "jobExecutionsRetryConfig": { "criteriaList": [
            { "failureType": "FAILED", "numberOfRetries": 1 },
            { "failureType": "TIMED_OUT", "numberOfRetries": 2 } ] } }),
        T0,
    )
    .unwrap();
    let mut now = T0;
    let mut out = Vec::new();
    let number = |store: &mut S, now| {
        let (_, reply) = device(store, &thing, &format!("{job_id}/get"), json!({}), now);
        (
            reply["execution"]["executionNumber"].as_u64().unwrap(),
            reply["execution"]["status"].as_str().unwrap().to_owned(),
        )
    };
    // Two timeouts: each retried.
    for expected in [2, 3] {
        device(store, &thing, "start-next", json!({}), now);
        now += MINUTE + 1;
        tick(store, now, &mut out);
        assert_eq!(number(store, now), (expected, "QUEUED".into()), "{tag}");
    }
    // A failure: retried once.
    device(
        store,
        &thing,
        &format!("{job_id}/update"),
        json!({ "status": "FAILED" }),
        now,
    );
    assert_eq!(number(store, now), (4, "QUEUED".into()), "{tag}");
    // A second failure: no more.
    device(
        store,
        &thing,
        &format!("{job_id}/update"),
        json!({ "status": "FAILED" }),
        now,
    );
    assert_eq!(number(store, now), (4, "FAILED".into()), "{tag}");
}

/// cancelJobExecution, updateJob, deleteJob, COMPLETED, and paging.
fn the_lifecycle_of_a_job<S: JobsStore>(store: &mut S, tag: &str) {
    let job_id = format!("{tag}-life");
    let targets = things(&format!("{tag}l"), 5);
    op(
        store,
        json!({ "op": "createJob", "jobId": job_id, "targets": targets, "document": {},
        "description": "first" }),
        T0,
    )
    .unwrap();
    let cancel = |thing: &str, extra: Value| {
        let mut request =
            json!({ "op": "cancelJobExecution", "jobId": job_id, "thingName": thing });
        request
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        request
    };
    // expectedVersion must match.
    let e = op(
        store,
        cancel(&targets[0], json!({ "expectedVersion": 7 })),
        T0,
    )
    .unwrap_err();
    assert_eq!(e.0, "VersionConflict", "{tag}: {e:?}");
    op(
        store,
        cancel(
            &targets[0],
            json!({ "expectedVersion": 1, "statusDetails": { "why": "bench" } }),
        ),
        T0,
    )
    .unwrap();
    let (_, reply) = device(store, &targets[0], &format!("{job_id}/get"), json!({}), T0);
    assert_eq!(reply["execution"]["status"], "CANCELED");
    assert_eq!(reply["execution"]["statusDetails"]["why"], "bench");
    // IN_PROGRESS: only with force.
    device(store, &targets[1], "start-next", json!({}), T0);
    let e = op(store, cancel(&targets[1], json!({})), T0).unwrap_err();
    assert_eq!(e.0, "InvalidStateTransition", "{tag}: {e:?}");
    op(store, cancel(&targets[1], json!({ "force": true })), T0).unwrap();
    // A canceled execution cannot be canceled again.
    let e = op(store, cancel(&targets[1], json!({ "force": true })), T0).unwrap_err();
    assert_eq!(e.0, "InvalidStateTransition", "{tag}: {e:?}");

    // updateJob: the description and a rate.
    op(
        store,
        json!({ "op": "updateJob", "jobId": job_id, "description": "second",
        "jobExecutionsRolloutConfig": { "maximumPerMinute": 5 } }),
        T0,
    )
    .unwrap();
    let job = describe(store, &job_id, T0);
    assert_eq!(job["description"], "second");
    assert_eq!(job["jobExecutionsRolloutConfig"]["maximumPerMinute"], 5);
    let e = op(
        store,
        json!({ "op": "updateJob", "jobId": job_id,
        "jobExecutionsRolloutConfig": { "maximumPerMinute": 5000 } }),
        T0,
    )
    .unwrap_err();
    assert_eq!(e.0, "InvalidRequest", "{tag}: {e:?}");
    assert!(e.1.contains("maximumPerMinute"), "{tag}: {e:?}");

    // The rest succeed: COMPLETED.
    for thing in &targets[2..] {
        device(
            store,
            thing,
            &format!("{job_id}/update"),
            json!({ "status": "SUCCEEDED" }),
            T0,
        );
    }
    let job = describe(store, &job_id, T0 + 1000);
    assert_eq!(job["status"], "COMPLETED", "{tag}: {job}");
    assert_eq!(
        job["completedAt"],
        T0 / 1000,
        "{tag}: when the last execution ended"
    );
    let e = op(store, json!({ "op": "cancelJob", "jobId": job_id }), T0).unwrap_err();
    assert_eq!(e.0, "InvalidStateTransition", "{tag}: {e:?}");

    // deleteJob: an IN_PROGRESS job only with force; its executions go with it.
    let other = format!("{tag}-life2");
    op(
        store,
        json!({ "op": "createJob", "jobId": other, "targets": [targets[0]], "document": {} }),
        T0,
    )
    .unwrap();
    let e = op(store, json!({ "op": "deleteJob", "jobId": other }), T0).unwrap_err();
    assert_eq!(e.0, "InvalidStateTransition", "{tag}: {e:?}");
    let mut out = Vec::new();
    op_publishing(
        store,
        json!({ "op": "deleteJob", "jobId": other, "force": true }),
        T0,
        &mut out,
    )
    .unwrap();
    let deleted = format!("$aws/events/job/{other}/deleted");
    let said = out.iter().filter(|p| p.topic == deleted).count();
    assert_eq!(said, 1, "{tag}: the deleted event, once");
    // The store says which call removed the job: a node finishing the same deletion later
    // (its tick) learns it was gone already, and does not say `deleted` again.
    assert!(!store.delete_job(&other).unwrap(), "{tag}: removed already");
    let e = op(store, json!({ "op": "describeJob", "jobId": other }), T0).unwrap_err();
    assert_eq!(e.0, "ResourceNotFound");
    let (_, pending) = device(store, &targets[0], "get", json!({}), T0);
    assert_eq!(pending["queuedJobs"], json!([]), "{tag}: {pending}");
    op(store, json!({ "op": "deleteJob", "jobId": job_id }), T0).unwrap();
}

/// maxResults and nextToken: pages in order, and stable while jobs are created meanwhile.
fn lists_come_in_pages<S: JobsStore>(store: &mut S, tag: &str) {
    let thing = format!("{tag}-p");
    for i in [1, 3, 5, 7, 9] {
        op(store, json!({ "op": "createJob", "jobId": format!("{tag}-page{i}"), "targets": [thing], "document": {} }), T0).unwrap();
    }
    let page = |store: &mut S, token: Option<&str>| {
        let mut request = json!({ "op": "listJobExecutions", "thingName": thing, "maxResults": 2 });
        if let Some(token) = token {
            request["nextToken"] = json!(token);
        }
        let answer = op(store, request, T0).unwrap();
        let ids: Vec<String> = answer["executions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["jobId"].as_str().unwrap().to_owned())
            .collect();
        (ids, answer["nextToken"].as_str().map(str::to_owned))
    };
    let (first, token) = page(store, None);
    assert_eq!(first, [format!("{tag}-page1"), format!("{tag}-page3")]);
    // Jobs created between pages: one before the token (not seen), one after (seen).
    for i in [2, 6] {
        op(store, json!({ "op": "createJob", "jobId": format!("{tag}-page{i}"), "targets": [thing], "document": {} }), T0).unwrap();
    }
    let (second, token) = page(store, token.as_deref());
    assert_eq!(second, [format!("{tag}-page5"), format!("{tag}-page6")]);
    let (third, token) = page(store, token.as_deref());
    assert_eq!(third, [format!("{tag}-page7"), format!("{tag}-page9")]);
    assert_eq!(token, None, "{tag}: the last page has no next");
    let e = op(store, json!({ "op": "listJobs", "maxResults": 0 }), T0).unwrap_err();
    assert_eq!(e.0, "InvalidRequest");
}

/// Bad operator requests get AWS's codes with a message and change nothing.
fn bad_requests_change_nothing<S: JobsStore>(store: &mut S, tag: &str) {
    let job_id = format!("{tag}-bad");
    let base = json!({ "op": "createJob", "jobId": job_id, "targets": ["t"], "document": {} });
    let with = |field: &str, value: Value| {
        let mut request = base.clone();
        request[field] = value;
        request
    };
    for (request, says) in [
        (
            with(
                "abortConfig",
                json!({ "criteriaList": [{ "failureType": "FAILED", "action": "CANCEL", "thresholdPercentage": 120, "minNumberOfExecutedThings": 1 }] }),
            ),
            "thresholdPercentage",
        ),
        (
            with(
                "abortConfig",
                json!({ "criteriaList": [{ "failureType": "SOMETIMES", "action": "CANCEL", "thresholdPercentage": 10, "minNumberOfExecutedThings": 1 }] }),
            ),
            "createJob: abortConfig.criteriaList[0].failureType: unknown variant `SOMETIMES`",
        ),
        (
            with(
                "abortConfig",
                json!({ "criteriaList": [{ "failureType": "FAILED", "action": "EXPLODE", "thresholdPercentage": 10, "minNumberOfExecutedThings": 1 }] }),
            ),
            "createJob: abortConfig.criteriaList[0].action: unknown variant `EXPLODE`",
        ),
        (
            with(
                "jobExecutionsRolloutConfig",
                json!({ "exponentialRate": { "baseRatePerMinute": 10, "incrementFactor": 9, "rateIncreaseCriteria": { "numberOfNotifiedThings": 1 } } }),
            ),
            "incrementFactor",
        ),
        (
            with(
                "jobExecutionsRetryConfig",
                json!({ "criteriaList": [{ "failureType": "FAILED", "numberOfRetries": 11 }] }),
            ),
            "10",
        ),
        (
            with("targetSelection", json!("SOMETIMES")),
            "createJob: targetSelection: unknown variant `SOMETIMES`",
        ),
        (
            with(
                "schedulingConfig",
                json!({ "startTime": "2099-01-15T09:00", "endTime": "2099-01-15T10:00", "endBehavior": "VANISH" }),
            ),
            "createJob: schedulingConfig.endBehavior: unknown variant `VANISH`",
        ),
        (
            with("schedulingConfig", json!({ "startTime": "next tuesday" })),
            "startTime",
        ),
        (
            with(
                "schedulingConfig",
                json!({ "startTime": "2020-01-15T09:00" }),
            ),
            "schedulingConfig.startTime: 2020-01-15T09:00 is not in the future",
        ),
        (
            with(
                "schedulingConfig",
                json!({ "startTime": "2027-01-15T09:00", "endTime": "2027-01-15T08:59" }),
            ),
            "endTime",
        ),
        (
            with(
                "schedulingConfig",
                json!({ "maintenanceWindows": [{ "startTime": "cron(0 0 30 2 ? *)", "durationInMinutes": 30 }] }),
            ),
            "never fires",
        ),
        (
            with(
                "schedulingConfig",
                json!({ "maintenanceWindows": [{ "startTime": "cron(0 0 * * * *)", "durationInMinutes": 30 }] }),
            ),
            "'?'",
        ),
        (with("targets", json!(["thinggroup/a/b"])), "target"),
        (
            with("documentParameters", json!({ "version": "2" })),
            "documentParameters",
        ),
    ] {
        let e = op(store, request.clone(), T0).unwrap_err();
        assert_eq!(e.0, "InvalidRequest", "{tag} {request}: {e:?}");
        assert!(e.1.contains(says), "{tag}: {e:?} should name {says}");
    }
    let e = op(store, with("targets", json!(["thinggroup/nowhere"])), T0).unwrap_err();
    assert_eq!(e.0, "ResourceNotFound", "{tag}: {e:?}");
    assert_eq!(e.1, "no such thing group nowhere", "{tag}");
    let e = op(store, json!({ "op": "describeJob", "jobId": job_id }), T0).unwrap_err();
    assert_eq!(e.0, "ResourceNotFound", "{tag}: no job was created");
}

/// The execution of `job_id` on `thing`: (status, executionNumber).
fn execution<S: JobsStore>(store: &mut S, job_id: &str, thing: &str) -> Option<(String, u64)> {
    let describe = json!({ "op": "describeJobExecution", "jobId": job_id, "thingName": thing });
    let execution = op(store, describe, T0).ok()?["execution"].clone();
    Some((
        execution["status"].as_str()?.to_owned(),
        execution["executionNumber"].as_u64()?,
    ))
}

/// Groups: members listed in pages; a CONTINUOUS job reaches a thing added later and a
/// SNAPSHOT job does not; a thing removed has its QUEUED execution REMOVED (and a rollout not
/// there yet passes it by); added again, it gets a new execution.
fn groups_and_continuous_jobs<S: JobsStore>(store: &mut S, tag: &str) {
    let g = format!("{tag}-g");
    let members = things(&format!("{tag}g"), 3);
    group(store, &g, &members);
    let e = op(
        store,
        json!({ "op": "createThingGroup", "thingGroupName": g }),
        T0,
    )
    .unwrap_err();
    assert_eq!(e.0, "ResourceAlreadyExists", "{e:?}");
    let described = op(
        store,
        json!({ "op": "describeThingGroup", "thingGroupName": g }),
        T0,
    );
    assert_eq!(
        described.unwrap()["thingGroupArn"],
        format!("arn:aws:iot:mqstore:000000000000:thinggroup/{g}")
    );
    let page = json!({ "op": "listThingsInThingGroup", "thingGroupName": g, "maxResults": 2 });
    let first = op(store, page, T0).unwrap();
    assert_eq!(first["things"], json!(members[..2]));
    let token = first["nextToken"].clone();
    let rest = json!({ "op": "listThingsInThingGroup", "thingGroupName": g, "nextToken": token });
    assert_eq!(op(store, rest, T0).unwrap()["things"], json!(members[2..]));
    let groups = op(store, json!({ "op": "listThingGroups" }), T0).unwrap();
    assert!(
        groups["thingGroups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g2| g2["groupName"] == g.as_str()),
        "{groups}"
    );

    let (continuous, snapshot) = (format!("{tag}-cont"), format!("{tag}-snap"));
    let create = |id: &str, selection: &str, rate: Value| {
        json!({ "op": "createJob", "jobId": id, "targets": [format!("thinggroup/{g}")],
            "targetSelection": selection, "document": {}, "jobExecutionsRolloutConfig": rate })
    };
    let mut out = Vec::new();
    op_publishing(
        store,
        create(&continuous, "CONTINUOUS", json!({})),
        T0,
        &mut out,
    )
    .unwrap();
    op_publishing(
        store,
        create(&snapshot, "SNAPSHOT", json!({})),
        T0,
        &mut out,
    )
    .unwrap();
    roll_out_all(store);
    for thing in &members {
        assert_eq!(
            execution(store, &continuous, thing),
            Some(("QUEUED".into(), 1))
        );
    }
    // Added later: the continuous job reaches it, the snapshot job does not.
    let late = format!("{tag}g-late");
    let add = json!({ "op": "addThingToThingGroup", "thingGroupName": g, "thingName": late });
    let mut out = Vec::new();
    op_publishing(store, add, T0 + 1000, &mut out).unwrap();
    assert_eq!(notified(&out, &continuous), [late.as_str()]);
    assert_eq!(execution(store, &snapshot, &late), None);
    // Removed: its QUEUED execution of the continuous job is REMOVED; the snapshot job's stays.
    let gone = &members[1];
    let remove = json!({ "op": "removeThingFromThingGroup",
        "thingGroupArn": format!("arn:aws:iot:mqstore:000000000000:thinggroup/{g}"),
        "thingName": gone });
    let mut out = Vec::new();
    op_publishing(store, remove.clone(), T0 + 2000, &mut out).unwrap();
    assert_eq!(
        execution(store, &continuous, gone),
        Some(("REMOVED".into(), 1))
    );
    assert_eq!(
        execution(store, &snapshot, gone),
        Some(("QUEUED".into(), 1))
    );
    let event = format!("$aws/events/jobExecution/{continuous}/removed");
    assert!(out.iter().any(|p| p.topic == event), "the REMOVED event");
    let e = op(store, remove, T0 + 2000).unwrap_err();
    assert_eq!(e.0, "ResourceNotFound", "not a member any more: {e:?}");
    // Added again: a new execution.
    let add = json!({ "op": "addThingToThingGroup", "thingGroupName": g, "thingName": gone });
    op(store, add, T0 + 3000).unwrap();
    assert_eq!(
        execution(store, &continuous, gone),
        Some(("QUEUED".into(), 2))
    );
    // Every execution ends: the continuous job stays IN_PROGRESS (its group may grow); the
    // snapshot job completes.
    for thing in members.iter().chain([&late]) {
        for job_id in [&continuous, &snapshot] {
            let update = format!("{job_id}/update");
            device(
                store,
                thing,
                &update,
                json!({ "status": "SUCCEEDED" }),
                T0 + 4000,
            );
        }
    }
    assert_eq!(
        describe(store, &continuous, T0 + 5000)["status"],
        "IN_PROGRESS"
    );
    assert_eq!(describe(store, &snapshot, T0 + 5000)["status"], "COMPLETED");

    // A rollout that has not reached a thing removed meanwhile passes it by.
    let slow = format!("{tag}-slow");
    let rate = json!({ "maximumPerMinute": 1 });
    let mut out = Vec::new();
    op_publishing(
        store,
        create(&slow, "CONTINUOUS", rate),
        T0 + 6000,
        &mut out,
    )
    .unwrap();
    let first = notified(&out, &slow);
    assert_eq!(first.len(), 1, "one a minute: {first:?}");
    let unreached = members.iter().find(|t| !first.contains(t)).unwrap().clone();
    let remove = json!({ "op": "removeThingFromThingGroup", "thingGroupName": g,
        "thingName": unreached });
    op(store, remove, T0 + 7000).unwrap();
    let later = things_notified_between(store, &slow, T0 + 7000, T0 + 10 * MINUTE);
    assert!(!later.contains(&unreached), "{later:?}");
    assert_eq!(
        execution(store, &slow, &unreached),
        Some(("REMOVED".into(), 1))
    );
    op(
        store,
        json!({ "op": "cancelJob", "jobId": slow }),
        T0 + 10 * MINUTE,
    )
    .unwrap();
    op(
        store,
        json!({ "op": "cancelJob", "jobId": continuous }),
        T0 + 10 * MINUTE,
    )
    .unwrap();

    // A deleted group is gone with its membership.
    op(
        store,
        json!({ "op": "deleteThingGroup", "thingGroupName": g }),
        T0,
    )
    .unwrap();
    let e = op(
        store,
        json!({ "op": "describeThingGroup", "thingGroupName": g }),
        T0,
    );
    assert_eq!(e.unwrap_err().0, "ResourceNotFound");
}

/// When a server would tick next after `now`: at the engine's next wake (`end` when it has
/// nothing waiting), at least a tick later.
fn next_tick<S: JobsStore>(store: &mut S, now: u64, end: u64) -> u64 {
    match engine(store).next_wake(now).unwrap() {
        Some(wake) => wake.max(now + TICK),
        None => end,
    }
}

/// Ticks from `from` to `to` (at the engine's wakes) and returns the things first notified of
/// `job_id` meanwhile.
fn things_notified_between<S: JobsStore>(
    store: &mut S,
    job_id: &str,
    from: u64,
    to: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = Vec::new();
    let mut now = from;
    while now <= to {
        tick(store, now, &mut out);
        seen.extend(notified(&out, job_id));
        out.clear();
        now = next_tick(store, now, to + 1);
    }
    seen
}

/// Templates: a job made from one takes its document (parameters filled in) and settings;
/// a parameter left unfilled is refused.
fn jobs_from_templates<S: JobsStore>(store: &mut S, tag: &str) {
    let id = format!("{tag}-tpl");
    let template = json!({ "op": "createJobTemplate", "jobTemplateId": id,
        "description": "firmware update",
        "document": { "url": "https://fw.example/${aws:iot:parameter:version}.bin",
                      "steps": ["flash ${aws:iot:parameter:version}"] },
        "jobExecutionsRolloutConfig": { "maximumPerMinute": 100 },
        "timeoutConfig": { "inProgressTimeoutInMinutes": 30 } });
    let created = op(store, template.clone(), T0).unwrap();
    assert_eq!(
        created["jobTemplateArn"],
        format!("arn:aws:iot:mqstore:000000000000:jobtemplate/{id}")
    );
    let e = op(store, template, T0).unwrap_err();
    assert_eq!(e.0, "ResourceAlreadyExists", "{e:?}");
    let job_id = format!("{tag}-from-tpl");
    let create = |params: Value| {
        json!({ "op": "createJob", "jobId": job_id, "targets": ["t1"],
            "jobTemplateArn": format!("arn:aws:iot:us-east-1:123456789012:jobtemplate/{id}"),
            "documentParameters": params,
            "timeoutConfig": { "inProgressTimeoutInMinutes": 5 } })
    };
    let e = op(store, create(json!({ "other": "1" })), T0).unwrap_err();
    assert_eq!(e.0, "InvalidRequest");
    assert!(e.1.contains("\"version\""), "names the parameter: {e:?}");
    op(store, create(json!({ "version": "2.1.0" })), T0).unwrap();
    let job = describe(store, &job_id, T0);
    assert_eq!(job["document"]["url"], "https://fw.example/2.1.0.bin");
    assert_eq!(job["document"]["steps"][0], "flash 2.1.0");
    assert_eq!(job["description"], "firmware update");
    assert_eq!(job["jobExecutionsRolloutConfig"]["maximumPerMinute"], 100);
    assert_eq!(
        job["timeoutConfig"]["inProgressTimeoutInMinutes"], 5,
        "the request's own setting wins"
    );
    let listed = op(store, json!({ "op": "listJobTemplates" }), T0).unwrap();
    assert!(
        listed["jobTemplates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["jobTemplateId"] == id.as_str()),
        "{listed}"
    );
    let described = op(
        store,
        json!({ "op": "describeJobTemplate", "jobTemplateId": id }),
        T0,
    );
    assert_eq!(described.unwrap()["description"], "firmware update");
    op(
        store,
        json!({ "op": "deleteJobTemplate", "jobTemplateId": id }),
        T0,
    )
    .unwrap();
    let e = op(
        store,
        json!({ "op": "describeJobTemplate", "jobTemplateId": id }),
        T0,
    );
    assert_eq!(e.unwrap_err().0, "ResourceNotFound");
}

/// T0 is 2027-01-15T08:00Z. A job whose only maintenance window is 09:00-09:30 each day
/// notifies things only inside it (300 at 10 a minute on the first day, the rest on the
/// next), and the engine sleeps until the window opens.
fn a_maintenance_window_holds_the_rollout<S: JobsStore>(store: &mut S, tag: &str) {
    let job_id = format!("{tag}-window");
    let create = json!({ "op": "createJob", "jobId": job_id, "targets": things(&format!("{tag}w"), 400),
        "document": {}, "jobExecutionsRolloutConfig": { "maximumPerMinute": 10 },
        "schedulingConfig": { "maintenanceWindows": [
            { "startTime": "cron(0 9 ? * * *)", "durationInMinutes": 30 }] } });
    let mut out = Vec::new();
    op_publishing(store, create, T0, &mut out).unwrap();
    assert!(notified(&out, &job_id).is_empty(), "not before the window");
    let hour = 60 * MINUTE;
    assert_eq!(
        engine(store).next_wake(T0).unwrap(),
        Some(T0 + hour),
        "the engine sleeps until the window opens"
    );
    let mut by_day = [0usize; 2];
    let mut wakes = 0;
    let mut now = T0;
    while now < T0 + 26 * hour {
        tick(store, now, &mut out);
        let n = notified(&out, &job_id).len();
        out.clear();
        if n > 0 {
            let since_midnight = (now - T0 + 8 * hour) % (24 * hour);
            assert!(
                (9 * hour..9 * hour + 30 * MINUTE).contains(&since_midnight),
                "{tag}: {n} notified at {} min past midnight, outside the window",
                since_midnight / MINUTE
            );
            by_day[((now - T0 + 8 * hour) / (24 * hour)) as usize] += n;
        }
        // As a server does: sleep until the engine's next wake.
        let Some(wake) = engine(store).next_wake(now).unwrap() else {
            break;
        };
        now = wake.max(now + TICK);
        wakes += 1;
    }
    // It wakes for each thing it may notify (and the windows' openings), not at every tick
    // while the minute's limit holds the rollout back.
    assert!(
        wakes <= 400 + 10,
        "{tag}: woke {wakes} times for 400 things"
    );
    assert!(
        (290..=300).contains(&by_day[0]) && by_day[0] + by_day[1] == 400,
        "{tag}: at most 30 minutes at 10 a minute, then the rest: {by_day:?}"
    );
}

/// A job scheduled for 08:30 is SCHEDULED and notifies nobody until then; at its end time
/// (09:00) it does what its endBehavior says.
fn a_scheduled_job_starts_and_ends_on_time<S: JobsStore>(store: &mut S, tag: &str) {
    let minute = MINUTE;
    for (behavior, job_status, queued_after) in [
        ("STOP_ROLLOUT", "IN_PROGRESS", "QUEUED"),
        ("CANCEL", "CANCELED", "CANCELED"),
        ("FORCE_CANCEL", "CANCELED", "CANCELED"),
    ] {
        let job_id = format!("{tag}-sched-{}", behavior.to_lowercase());
        let targets = things(&format!("{tag}s{}", behavior.len()), 400);
        let create = json!({ "op": "createJob", "jobId": job_id, "targets": targets,
            "document": {}, "jobExecutionsRolloutConfig": { "maximumPerMinute": 10 },
            "schedulingConfig": { "startTime": "2027-01-15T08:30", "endTime": "2027-01-15T09:00",
                                  "endBehavior": behavior } });
        op(store, create, T0).unwrap();
        assert_eq!(describe(store, &job_id, T0)["status"], "SCHEDULED");
        assert_eq!(engine(store).next_wake(T0).unwrap(), Some(T0 + 30 * minute));
        let before = things_notified_between(store, &job_id, T0, T0 + 30 * minute - 1000);
        assert!(before.is_empty(), "{tag} {behavior}: {before:?}");
        // The first thing is started by its device, so FORCE_CANCEL has one IN_PROGRESS.
        let first = things_notified_between(store, &job_id, T0 + 30 * minute, T0 + 30 * minute);
        assert_eq!(first.len(), 1);
        assert_eq!(
            describe(store, &job_id, T0 + 30 * minute)["status"],
            "IN_PROGRESS"
        );
        let (accepted, _) = device(store, &first[0], "start-next", json!({}), T0 + 30 * minute);
        assert!(accepted);
        let during =
            things_notified_between(store, &job_id, T0 + 30 * minute + 1000, T0 + 60 * minute);
        assert!(
            (290..=300).contains(&(during.len() + 1)),
            "{tag} {behavior}: about 300 in 30 minutes at 10 a minute: {}",
            during.len() + 1
        );
        let after = things_notified_between(store, &job_id, T0 + 60 * minute, T0 + 70 * minute);
        assert!(
            after.is_empty(),
            "{tag} {behavior}: nothing after the end: {after:?}"
        );
        let job = describe(store, &job_id, T0 + 70 * minute);
        assert_eq!(job["status"], job_status, "{tag} {behavior}: {job}");
        let queued = &during[during.len() - 1];
        assert_eq!(execution(store, &job_id, queued).unwrap().0, queued_after);
        let started = execution(store, &job_id, &first[0]).unwrap().0;
        let expected = match behavior {
            "FORCE_CANCEL" => "CANCELED",
            _ => "IN_PROGRESS",
        };
        assert_eq!(started, expected, "{tag} {behavior}");
        if job_status == "IN_PROGRESS" {
            op(
                store,
                json!({ "op": "cancelJob", "jobId": job_id, "force": true }),
                T0,
            )
            .unwrap();
        }
    }
}

/// The fleet of the fixed-rate scenario: 10,000 things in memory and on disk; on Redis, where
/// each of them is several round trips from the debug build, `MQSTORE_ROLLOUT_FLEET` things
/// (1,000 unless set: the test command's; `MQSTORE_ROLLOUT_FLEET=10000` is the full run).
fn every_scenario<S: JobsStore>(store: &mut S, tag: &str, fleet: usize) {
    a_fixed_rate_holds_in_every_minute(store, tag, fleet);
    an_exponential_rate_follows_its_criteria(store, tag);
    an_abort_stops_the_job_exactly_at_its_threshold(store, tag);
    retries_are_counted_per_failure_type(store, tag);
    the_lifecycle_of_a_job(store, tag);
    lists_come_in_pages(store, tag);
    bad_requests_change_nothing(store, tag);
    groups_and_continuous_jobs(store, tag);
    jobs_from_templates(store, tag);
    a_maintenance_window_holds_the_rollout(store, tag);
    a_scheduled_job_starts_and_ends_on_time(store, tag);
}

#[test]
fn rollouts_in_memory() {
    every_scenario(&mut MemoryJobs::default(), "m", FLEET);
}

#[test]
fn rollouts_in_the_durable_store_come_back_after_a_restart() {
    let mut store = DurableJobs::recording();
    every_scenario(&mut store, "d", FLEET);
    // The log replayed: the same jobs and counts.
    let mut log = mqstore_core::store::log::MAGIC.to_vec();
    log.extend(store.take_pending());
    let mut back = DurableJobs::recording();
    mqstore_core::store::log::replay(&log, |record| back.replay(record).unwrap()).unwrap();
    let groups = |s: &DurableJobs| s.entries(tables::GROUPS, None, 1000).unwrap();
    assert!(!groups(&store).is_empty());
    assert_eq!(groups(&back), groups(&store), "thing groups come back");
    let members = |s: &DurableJobs| {
        s.entries(&tables::members("d-fleet"), None, 20_000)
            .unwrap()
    };
    assert_eq!(members(&back).len(), FLEET, "and their things");
    for job_id in store.job_ids().unwrap() {
        assert_eq!(
            back.job_things(&job_id, 0, u64::MAX).unwrap(),
            store.job_things(&job_id, 0, u64::MAX).unwrap(),
            "{job_id}'s things (a continuous job's grew)"
        );
        assert_eq!(
            back.counts(&job_id).unwrap(),
            store.counts(&job_id).unwrap(),
            "{job_id}"
        );
        assert_eq!(
            back.job(&job_id).unwrap().unwrap().status,
            store.job(&job_id).unwrap().unwrap().status
        );
    }
}

/// The fixed-rate scenario's fleet in memory and on disk.
const FLEET: usize = 10_000;

/// The fixed-rate scenario's fleet on Redis (see `every_scenario`).
fn redis_fleet() -> usize {
    match std::env::var("MQSTORE_ROLLOUT_FLEET") {
        Ok(n) => n
            .parse()
            .expect("MQSTORE_ROLLOUT_FLEET is a number of things"),
        Err(_) => 1_000,
    }
}

fn redis_jobs(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    prefix: &str,
) -> Calls<BlockingRedisJobs> {
    let mut config = RedisConfig::parse(url).unwrap();
    config.prefix = prefix.into();
    let store = runtime
        .block_on(RedisStore::connect(&config, Quotas::default()))
        .unwrap();
    RedisJobs::new(store).blocking(runtime.handle().clone())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn rollouts_on_redis() {
    let redis = redis::Redis::start();
    let runtime = runtime();
    every_scenario(
        &mut redis_jobs(&runtime, &redis.url(), "r:"),
        "r",
        redis_fleet(),
    );
    three_nodes_roll_out_one_job_together(&runtime, &redis.url());
}

#[test]
fn rollouts_on_a_redis_cluster() {
    let cluster = redis::Cluster::start();
    let runtime = runtime();
    every_scenario(
        &mut redis_jobs(&runtime, &cluster.url(), "c:"),
        "c",
        redis_fleet(),
    );
    three_nodes_roll_out_one_job_together(&runtime, &cluster.url());
}

/// Three nodes (threads, each its engine) tick one rate-limited job at once: every thing is
/// notified once, and no minute sees more than the rate; an abort happens once.
fn three_nodes_roll_out_one_job_together(runtime: &tokio::runtime::Runtime, url: &str) {
    let prefix = "three:";
    let mut store = redis_jobs(runtime, url, prefix);
    let targets = things("n", 600);
    let mut created = Vec::new();
    op_publishing(
        &mut store,
        json!({ "op": "createJob", "jobId": "shared", "targets": targets, "document": {},
        "jobExecutionsRolloutConfig": { "maximumPerMinute": 200 } }),
        T0,
        &mut created,
    )
    .unwrap();
    let clock = Arc::new(AtomicU64::new(T0));
    let times = Arc::new(Mutex::new(Vec::new()));
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for thing in notified(&created, "shared") {
        seen.insert(thing, 1);
        times.lock().unwrap().push(T0);
    }
    // Each step of the simulated clock, the three nodes tick at once, then wait for the next.
    // Steps of half a second (a node ticks every 100 ms): what the test is about is three
    // ticks contending for the same due executions, which every step has; finer steps only
    // repeat it (2,400 steps of round trips from a debug build took a minute on a cluster).
    let step = Arc::new(Barrier::new(4));
    let end = T0 + 4 * MINUTE;
    let nodes: Vec<_> = (0..3)
        .map(|_| {
            let (clock, times, step) = (clock.clone(), times.clone(), step.clone());
            let mut store = redis_jobs(runtime, url, prefix);
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                loop {
                    step.wait();
                    let now = clock.load(Ordering::SeqCst);
                    if now > end {
                        return mine;
                    }
                    let mut out = Vec::new();
                    tick(&mut store, now, &mut out);
                    let n = notified(&out, "shared");
                    times.lock().unwrap().extend(n.iter().map(|_| now));
                    mine.extend(n);
                    step.wait();
                }
            })
        })
        .collect();
    loop {
        step.wait(); // The nodes tick at `clock`.
        if clock.load(Ordering::SeqCst) > end {
            break;
        }
        step.wait(); // They are done.
        clock.fetch_add(5 * TICK, Ordering::SeqCst);
    }
    for node in nodes {
        for thing in node.join().unwrap() {
            *seen.entry(thing).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 600, "every thing reached");
    assert!(seen.values().all(|n| *n == 1), "no thing notified twice");
    let mut times = times.lock().unwrap().clone();
    times.sort();
    assert!(
        busiest_minute(&times) <= 200,
        "{} in a minute",
        busiest_minute(&times)
    );
}
