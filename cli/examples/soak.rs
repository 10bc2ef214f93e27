//! Soak: one `mqstore serve` under mixed load for minutes (an hour for the long run), its
//! memory and open file descriptors sampled every 10 s; the run fails unless both stay within
//! 5 % of what they were once warmed up, and unless every honest call succeeds.
//!
//! The load, all at once:
//!
//! * an honest state store client sets, reads and observes one key; every call must succeed
//!   and every change it makes must be notified;
//! * a hostile client loops through what the hardening work found (issue 9): unanswerable
//!   and wildcard response topics, notification topics too long for MQTT, forged and
//!   retained presence, claimed identities, forged SCAN tokens, registrations under made-up
//!   ids, floods;
//! * jobs: an operator creates a job for eight things, their devices start and complete it
//!   through the AWS device API, the operator deletes it once every execution succeeded, and
//!   the next job follows (a fleet's steady state: jobs come and go, nothing accumulates);
//! * commands: a caller sends commands to an MQTT 5 echo device, each answer must be its own;
//! * device shadows: eight things' shadows updated (desired and reported by turns, so half
//!   the updates have a delta), read, and now and then deleted.
//!
//!   bash scripts/soak [SECONDS] [memory|data-dir|redis]    # starts mosquitto, Redis, the server
//!
//! Arguments: the broker's port on 127.0.0.1, how many seconds to run (default 600), and the
//! server's process id (its /proc is read; it serves the broker, started by the script).
//! Warm-up: the first third of the run, and at least until the hostile client's made-up
//! registrations all exist (they level off there); growth is the median of the last three
//! samples against the median of the first three after it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstore_core::client::jobs::Update;
use mqstore_core::commands::CommandRequest;
use mqstore_core::hlc::{Clock, SystemClock};
use mqstore_core::jobs::{JobSpec, Status};
use mqstore_core::topics;
use mqstore_net::client::SetOptions;
use mqstore_net::jobs::{Jobs, StartNext};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;
use rumqttc::v5::{AsyncClient, MqttOptions};
use serde_json::json;

fn props(response_topic: &str, user: &[(&str, String)]) -> PublishProperties {
    PublishProperties {
        response_topic: Some(response_topic.to_owned()),
        correlation_data: Some(Bytes::from_static(b"0123456789abcdef")),
        user_properties: user
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect(),
        ..PublishProperties::default()
    }
}

fn request(items: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for item in items {
        out.extend_from_slice(format!("${}\r\n", item.len()).as_bytes());
        out.extend_from_slice(item);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// The made-up client ids the hostile client registers under, 20 keys each ...
const FAKE_IDS: u64 = 1_000;
/// ... this many of them a round.
const FAKE_IDS_A_ROUND: u64 = 5;
/// The things whose jobs and shadows the load works on.
const THINGS: usize = 8;
/// How long an honest call, a job's run or a notification may take before it counts as failed.
const PATIENCE: Duration = Duration::from_secs(30);

/// What the load did, and how often it failed.
#[derive(Default)]
struct Counters {
    stop: AtomicBool,
    calls: AtomicU64,
    notified: AtomicU64,
    hostile_rounds: AtomicU64,
    executions: AtomicU64,
    commands: AtomicU64,
    shadow_updates: AtomicU64,
    failures: AtomicU64,
}

impl Counters {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
    fn count(&self, counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
    fn failed(&self, what: std::fmt::Arguments) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        eprintln!("FAILED: {what}");
    }
    fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// One round of everything the hostile client tries.
async fn hostile_round(c: &AsyncClient, round: u64) {
    let own = topics::response_topic("hostile");
    let now = format!("{}:0:hostile", SystemClock.now_ms());
    let set = request(&[b"SET", b"h/k", b"v"]);
    let invoke = topics::INVOKE;
    let mut sends: Vec<(String, Vec<u8>, PublishProperties)> = vec![
        // §1 unanswerable response topics.
        (
            invoke.into(),
            set.clone(),
            props("", &[("__ts", now.clone())]),
        ),
        (
            invoke.into(),
            set.clone(),
            props("r/+/x", &[("__ts", now.clone())]),
        ),
        (
            invoke.into(),
            set.clone(),
            props("r/#", &[("__ts", now.clone())]),
        ),
        // §1 notification topics MQTT cannot carry.
        (
            invoke.into(),
            request(&[b"KEYNOTIFY", &vec![b'k'; 33_000]]),
            props(&own, &[("__srcId", "hostile".into())]),
        ),
        (
            invoke.into(),
            request(&[b"KEYNOTIFY", b"honest/k"]),
            props(&own, &[("__srcId", "h".repeat(33_000))]),
        ),
        // §3 claiming another id, answering elsewhere, forged SCAN tokens.
        (
            topics::identified_invoke("hostile"),
            set.clone(),
            props(&own, &[("__srcId", "honest".into()), ("__ts", now.clone())]),
        ),
        (
            topics::identified_invoke("hostile"),
            set.clone(),
            props(&topics::response_topic("honest"), &[("__ts", now.clone())]),
        ),
        (
            invoke.into(),
            request(&[b"SCAN", b"*", b"k:honest/k"]),
            props(&own, &[("__srcId", "hostile".into())]),
        ),
        // §5 a timestamp at the counter limit.
        (
            invoke.into(),
            set.clone(),
            props(&own, &[("__ts", now.replace(":0:", ":2147483647:"))]),
        ),
    ];
    // §4 registrations under made-up ids: 1,000 ids × 20 keys at most, well below the
    // default limits, so memory must level off once they are all made (after
    // FAKE_IDS / FAKE_IDS_A_ROUND rounds).
    for id in 0..FAKE_IDS_A_ROUND {
        let fake = format!("fake-{}", (round * FAKE_IDS_A_ROUND + id) % FAKE_IDS);
        for key in 0..20 {
            sends.push((
                invoke.into(),
                request(&[b"KEYNOTIFY", format!("h/{key}").as_bytes()]),
                props(&own, &[("__srcId", fake.clone())]),
            ));
        }
    }
    // §4 a burst of writes.
    for i in 0..100 {
        sends.push((
            invoke.into(),
            request(&[b"SET", format!("h/burst/{i}").as_bytes(), b"v"]),
            props(&own, &[("__ts", now.clone())]),
        ));
    }
    for (topic, payload, properties) in sends {
        let _ = c
            .publish_with_properties(topic, QoS::AtLeastOnce, false, payload, properties)
            .await;
    }
    // §2 forged presence for the honest client, live and retained (its identified
    // registrations are out of their reach).
    let _ = c
        .publish(
            topics::presence_topic("honest"),
            QoS::AtLeastOnce,
            false,
            "gone",
        )
        .await;
    let _ = c
        .publish(
            topics::presence_topic("honest"),
            QoS::AtLeastOnce,
            true,
            "gone",
        )
        .await;
}

/// The honest client's rounds (20 SET + GET + notification each), each after a hostile round.
async fn state_store(port: u16, counters: Arc<Counters>) {
    let honest = common::connect(port, "honest", PATIENCE).await;
    let mut changes = honest.observe("honest/k").await.expect("observe");
    let (hostile, mut eventloop) =
        AsyncClient::new(MqttOptions::new("hostile", "127.0.0.1", port), 1024);
    // It never reads its answers; the loop only keeps the connection going (reconnecting
    // after the broker drops it).
    tokio::spawn(async move {
        loop {
            if eventloop.poll().await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let mut round = 0;
    while counters.running() {
        hostile_round(&hostile, round).await;
        round += 1;
        counters.count(&counters.hostile_rounds);
        for i in 0..20 {
            let value = format!("{round}-{i}");
            counters.calls.fetch_add(2, Ordering::Relaxed);
            match honest
                .set("honest/k", value.clone(), SetOptions::default())
                .await
            {
                Ok(set) if set.applied => {}
                other => counters.failed(format_args!("honest SET: {other:?}")),
            }
            match honest.get("honest/k").await {
                Ok(Some(v)) if v.value == value => {}
                other => counters.failed(format_args!("honest GET: {other:?}")),
            }
            let heard = tokio::time::timeout(PATIENCE, async {
                while let Some(change) = changes.next().await {
                    if change.value.as_deref() == Some(value.as_bytes()) {
                        return true;
                    }
                }
                false
            });
            match heard.await {
                Ok(true) => counters.count(&counters.notified),
                _ => counters.failed(format_args!("no notification of {value}")),
            }
        }
    }
    honest.close().await;
}

/// A thing's device: starts each job queued for it and completes it (SUCCEEDED), through the
/// AWS device API; with nothing queued it waits for the next notification. It runs until the
/// operator's last job is done (`done`), not until the load stops: a job created just before
/// the stop still needs its devices.
async fn device(handle: Jobs, counters: Arc<Counters>, done: Arc<AtomicBool>) {
    while !done.load(Ordering::Relaxed) {
        // Drained: the loop asks for work itself; they must not pile up in this process.
        while handle.try_next_notification().is_some() {}
        match handle.start_next(StartNext::default()).await {
            Ok(Some(execution)) => {
                let update = Update {
                    job_id: execution.job_id.clone(),
                    status: Some(Status::Succeeded),
                    expected_version: Some(execution.version_number),
                    ..Update::default()
                };
                if let Err(e) = handle.update(update).await {
                    counters.failed(format_args!(
                        "{}: update {}: {e}",
                        handle.thing(),
                        execution.job_id
                    ));
                }
            }
            Ok(None) => {
                let _ =
                    tokio::time::timeout(Duration::from_millis(200), handle.next_notification())
                        .await;
            }
            Err(e) => counters.failed(format_args!("{}: start-next: {e}", handle.thing())),
        }
    }
}

/// Jobs one after another: each for every thing, deleted once every execution succeeded.
async fn jobs(port: u16, counters: Arc<Counters>) {
    let operator = common::connect(port, "soak-operator", PATIENCE).await;
    let devices = common::connect(port, "soak-devices", PATIENCE).await;
    let things: Vec<String> = (0..THINGS).map(|i| format!("soak-thing-{i}")).collect();
    let done = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for thing in &things {
        let handle = devices.jobs(thing).await.expect("the jobs device API");
        tasks.push(tokio::spawn(device(handle, counters.clone(), done.clone())));
    }
    let mut n = 0u64;
    while counters.running() {
        n += 1;
        let job_id = format!("soak-job-{n}");
        let spec = JobSpec::new(job_id.clone(), things.clone(), json!({ "step": n }));
        if let Err(e) = operator.create_job(spec).await {
            counters.failed(format_args!("createJob {job_id}: {e}"));
            continue;
        }
        let started = Instant::now();
        loop {
            match operator.describe_job(&job_id).await {
                Ok(job) if job.executions.get(&Status::Succeeded) == Some(&(THINGS as u64)) => {
                    break;
                }
                Ok(_) if started.elapsed() < PATIENCE => {}
                other => {
                    counters.failed(format_args!("{job_id} not done in {PATIENCE:?}: {other:?}"));
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        counters
            .executions
            .fetch_add(THINGS as u64, Ordering::Relaxed);
        if let Err(e) = operator.delete_job(&job_id, false).await {
            counters.failed(format_args!("deleteJob {job_id}: {e}"));
        }
    }
    done.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }
    operator.close().await;
    devices.close().await;
}

/// Commands to an MQTT 5 echo device, one after another; each answer must be its own.
async fn commands(port: u16, counters: Arc<Counters>) {
    common::echo_device(port, "soak-echo", "soak/dev/+/cmd").await;
    let caller = common::connect(port, "soak-caller", PATIENCE).await;
    let mut n = 0u64;
    while counters.running() {
        n += 1;
        let payload = format!("{{\"n\":{n}}}");
        let request = CommandRequest::new(
            format!("soak/dev/{}/cmd", n % THINGS as u64),
            payload.clone(),
        );
        match caller.command(request).await {
            Ok(reply) if reply.payload == payload.as_bytes() => counters.count(&counters.commands),
            other => counters.failed(format_args!("command {n}: {other:?}")),
        }
    }
    caller.close().await;
}

/// Shadow updates (desired and reported by turns), a read after each, a delete every 100th.
async fn shadows(port: u16, counters: Arc<Counters>) {
    let client = common::connect(port, "soak-shadows", PATIENCE).await;
    let mut shadows = Vec::new();
    for i in 0..THINGS {
        let shadow = client
            .shadow(&format!("soak-thing-{i}"), None)
            .await
            .expect("shadow");
        shadows.push(shadow);
    }
    let mut n = 0u64;
    while counters.running() {
        n += 1;
        let shadow = &shadows[n as usize % THINGS];
        let side = if n.is_multiple_of(2) {
            "desired"
        } else {
            "reported"
        };
        match shadow.update(json!({ side: { "n": n } }), None).await {
            Ok(_) => counters.count(&counters.shadow_updates),
            Err(e) => counters.failed(format_args!("shadow update {n}: {e}")),
        }
        match shadow.get().await {
            Ok(document) if document["state"][side]["n"] == n => {}
            other => counters.failed(format_args!("shadow get after update {n}: {other:?}")),
        }
        // Drained: nobody reads them here, and they must not pile up in this process.
        while shadow.try_next_notification().is_some() {}
        if n.is_multiple_of(100)
            && let Err(e) = shadow.delete().await
        {
            counters.failed(format_args!("shadow delete {n}: {e}"));
        }
    }
    client.close().await;
}

/// The server's resident memory (KiB) and open file descriptors at one moment.
#[derive(Clone, Copy)]
struct Sample {
    seconds: u64,
    rss_kib: u64,
    fds: u64,
}

fn median(samples: &[Sample], of: impl Fn(&Sample) -> u64) -> u64 {
    let mut values: Vec<u64> = samples.iter().map(of).collect();
    values.sort_unstable();
    values[values.len() / 2]
}

/// How much `of` grew from the first three samples to the last three, in per cent.
fn growth(samples: &[Sample], of: impl Fn(&Sample) -> u64 + Copy) -> f64 {
    let first = median(&samples[..3], of) as f64;
    let last = median(&samples[samples.len() - 3..], of) as f64;
    (last - first) / first * 100.0
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: soak PORT SECONDS SERVER_PID (or: bash scripts/soak [SECONDS] [STORE])";
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).expect(usage);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).expect(usage);
    let pid = args
        .get(3)
        .filter(|p| p.parse::<u32>().is_ok())
        .expect(usage)
        .clone();
    common::wait_for_server(port).await;

    let counters = Arc::new(Counters::default());
    let load = [
        tokio::spawn(state_store(port, counters.clone())),
        tokio::spawn(jobs(port, counters.clone())),
        tokio::spawn(commands(port, counters.clone())),
        tokio::spawn(shadows(port, counters.clone())),
    ];

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut warm_from = None;
    let c = &counters;
    println!(
        "seconds,server_rss_kib,server_fds,honest_calls,notifications,hostile_rounds,job_executions,commands,shadow_updates,failures"
    );
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let sample = Sample {
            seconds: started.elapsed().as_secs(),
            rss_kib: common::rss_kib(&pid),
            fds: common::open_fds(&pid),
        };
        if sample.rss_kib == 0 {
            eprintln!("FAILED: the server (process {pid}) is gone");
            std::process::exit(1);
        }
        println!(
            "{},{},{},{},{},{},{},{},{},{}",
            sample.seconds,
            sample.rss_kib,
            sample.fds,
            Counters::get(&c.calls),
            Counters::get(&c.notified),
            Counters::get(&c.hostile_rounds),
            Counters::get(&c.executions),
            Counters::get(&c.commands),
            Counters::get(&c.shadow_updates),
            Counters::get(&c.failures),
        );
        let warm = sample.seconds >= seconds / 3
            && Counters::get(&c.hostile_rounds) >= FAKE_IDS / FAKE_IDS_A_ROUND;
        if warm && warm_from.is_none() {
            warm_from = Some(samples.len());
        }
        samples.push(sample);
    }
    counters.stop.store(true, Ordering::Relaxed);
    for task in load {
        let _ = tokio::time::timeout(PATIENCE, task).await;
    }

    let failures = Counters::get(&c.failures);
    let warm = warm_from.map_or(&[][..], |from| &samples[from..]);
    if warm.len() < 6 {
        eprintln!(
            "FAILED: too short to measure growth: {} samples after the warm-up (did the hostile client's {} rounds make all {FAKE_IDS} made-up ids? run longer)",
            warm.len(),
            Counters::get(&c.hostile_rounds)
        );
        std::process::exit(1);
    }
    let (rss, fds) = (growth(warm, |s| s.rss_kib), growth(warm, |s| s.fds));
    println!(
        "after the warm-up ({} s to {} s): server memory {:+.1} % ({} to {} KiB), file descriptors {:+.1} % ({} to {})",
        warm[0].seconds,
        warm[warm.len() - 1].seconds,
        rss,
        median(&warm[..3], |s| s.rss_kib),
        median(&warm[warm.len() - 3..], |s| s.rss_kib),
        fds,
        median(&warm[..3], |s| s.fds),
        median(&warm[warm.len() - 3..], |s| s.fds),
    );
    let mut failed = false;
    if failures > 0 {
        eprintln!("FAILED: {failures} calls, notifications, jobs or commands failed (above)");
        failed = true;
    }
    if rss >= 5.0 || fds >= 5.0 {
        eprintln!(
            "FAILED: the server's memory or file descriptors grew 5 % or more after the warm-up"
        );
        failed = true;
    }
    if failed {
        std::process::exit(1);
    }
    println!("ok: nothing failed, the server's memory and file descriptors flat");
}
