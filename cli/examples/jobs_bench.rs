//! Jobs at fleet scale: 10,000 things × 10 jobs each, queued, started and completed through
//! the device API over a real broker, beside a same-run baseline of the state store's SET/GET
//! through the same broker at the same concurrency; and the p99 of state store GETs while a
//! job for every thing is created (creating a job for 10,000 targets must not stall the
//! server's other requests).
//!
//!   mosquitto -p 18850 &      # any MQTT 5 broker
//!   cargo build --release -p mqstore --bin mqstore --example jobs_bench
//!   target/release/examples/jobs_bench 18850
//!
//! Arguments: the broker's port on 127.0.0.1, things (10000), jobs (10), connections (16),
//! calls in flight (64). The server is `target/release/mqstore serve`, run as a child process
//! so that its memory is its own; with `--inside` last, none is started: the broker serves
//! jobs itself (the plugin), and the server's memory is not reported.

mod common;

/// How long a call may wait for the server.
const TIMEOUT: Duration = Duration::from_secs(60);

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqstore_core::jobs::{JobSpec, Status};

use mqstore_core::client::jobs::Update;
use mqstore_net::client::{Client, SetOptions};
use mqstore_net::jobs::{Jobs, StartNext};
use tokio::sync::Semaphore;

/// SET/GET at `in_flight` across `clients` for `duration`: operations per second.
async fn state_store_baseline(clients: &[Client], in_flight: usize, duration: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + duration;
    let mut tasks = Vec::new();
    for i in 0..in_flight {
        let client = clients[i % clients.len()].clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let key = format!("baseline-{i}");
            while Instant::now() < until {
                client
                    .set(key.clone(), "v", SetOptions::default())
                    .await
                    .expect("SET");
                client.get(key.clone()).await.expect("GET");
                done.fetch_add(2, Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let inside = args.last().is_some_and(|a| a == "--inside");
    let args: Vec<String> = args.into_iter().filter(|a| a != "--inside").collect();
    let arg = |i: usize, default: usize| {
        args.get(i)
            .map_or(default, |a| a.parse().expect("a number"))
    };
    let port: u16 = args.get(1).map_or(1883, |a| a.parse().expect("a port"));
    let (things, jobs, connections, in_flight) =
        (arg(2, 10_000), arg(3, 10), arg(4, 16), arg(5, 64));

    let exe = std::env::current_exe().unwrap();
    let mqstore = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("mqstore");
    let mut server = (!inside).then(|| {
        std::process::Command::new(&mqstore)
            .args(["serve", "--port", &port.to_string(), "--node-id", "bench"])
            .env(
                "MQSTORE_LOG",
                std::env::var("MQSTORE_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (build it: cargo build --release -p mqstore --bin mqstore)",
                    mqstore.display()
                )
            })
    });
    let pid = server.as_ref().map_or(0, std::process::Child::id);
    common::wait_for_server(port).await;
    let operator = common::connect(port, "bench-operator", TIMEOUT).await;
    let clients: Vec<Client> = futures_join((0..connections).map(|i| async move {
        common::connect(port, &format!("bench-device-{i}"), TIMEOUT).await
    }))
    .await;
    let rss_start = common::rss_kib(&pid.to_string());
    println!(
        "{things} things x {jobs} jobs, {connections} connections, {in_flight} calls in flight"
    );

    // Every thing subscribes to its jobs topics.
    let started = Instant::now();
    let names: Vec<String> = (0..things).map(|i| format!("thing-{i:05}")).collect();
    let mut handles: Vec<Jobs> = Vec::with_capacity(things);
    for chunk in names.chunks(256) {
        let batch = futures_join(chunk.iter().enumerate().map(|(i, name)| {
            let client = clients[i % clients.len()].clone();
            let name = name.clone();
            async move { client.jobs(&name).await.expect("subscribe") }
        }))
        .await;
        handles.extend(batch);
    }
    println!(
        "subscribed {things} things in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Baselines: state store SET/GET at the same concurrency, and GET latency alone.
    let baseline = state_store_baseline(&clients, in_flight, Duration::from_secs(5)).await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let prober = tokio::spawn(common::probe(operator.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.notify_one();
    let quiet = prober.await.unwrap();

    // Create the jobs (each targets every thing) while a client GETs.
    let stop = Arc::new(tokio::sync::Notify::new());
    let prober = tokio::spawn(common::probe(operator.clone(), stop.clone()));
    let started = Instant::now();
    let mut creations = Vec::new();
    for j in 0..jobs {
        let one = Instant::now();
        operator
            .create_job(JobSpec::new(
                format!("job-{j:02}"),
                names.clone(),
                serde_json::json!({ "firmware": format!("v{j}") }),
            ))
            .await
            .expect("createJob");
        creations.push(one.elapsed());
    }
    // The rollout goes on after the answers: wait until the last job reached every thing.
    loop {
        let last = operator
            .describe_job(&format!("job-{:02}", jobs - 1))
            .await
            .expect("describeJob");
        if last.executions.values().sum::<u64>() == things as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let created_in = started.elapsed();
    stop.notify_one();
    let busy = prober.await.unwrap();
    let rss_created = common::rss_kib(&pid.to_string());

    // Every thing runs its jobs: start-next, then update to SUCCEEDED, ten times.
    let permits = Arc::new(Semaphore::new(in_flight));
    let notifications = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for handle in handles {
        let permits = permits.clone();
        let notifications = notifications.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            loop {
                let drained = std::iter::from_fn(|| handle.try_next_notification()).count();
                notifications.fetch_add(drained as u64, Ordering::Relaxed);
                let permit = permits.acquire().await.unwrap();
                let next = handle
                    .start_next(StartNext::default())
                    .await
                    .expect("start-next");
                drop(permit);
                let Some(execution) = next else { break };
                let update = Update {
                    job_id: execution.job_id,
                    status: Some(Status::Succeeded),
                    expected_version: Some(execution.version_number),
                    ..Update::default()
                };
                let permit = permits.acquire().await.unwrap();
                handle.update(update).await.expect("update");
                drop(permit);
                done += 1;
            }
            // The last notifications may still be on their way.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let drained = std::iter::from_fn(|| handle.try_next_notification()).count();
            notifications.fetch_add(drained as u64, Ordering::Relaxed);
            done
        }));
    }
    let mut completed = 0;
    for t in tasks {
        completed += t.await.unwrap();
    }
    let ran_in = started.elapsed().saturating_sub(Duration::from_millis(500));
    let device_ops = completed * 2 + things; // each execution: start-next + update; one empty start-next per thing
    let rss_done = common::rss_kib(&pid.to_string());

    let p = common::percentile_ms;
    creations.sort();
    println!();
    println!("| measure | value |");
    println!("|---|---|");
    println!("| state store SET/GET, {in_flight} in flight (baseline) | {baseline:.0} ops/s |");
    println!(
        "| device API start-next/update, {in_flight} in flight | {:.0} ops/s ({:.2}x the baseline) |",
        device_ops as f64 / ran_in.as_secs_f64(),
        device_ops as f64 / ran_in.as_secs_f64() / baseline
    );
    println!(
        "| executions completed | {completed} of {} in {:.1} s |",
        things * jobs,
        ran_in.as_secs_f64()
    );
    println!(
        "| notifications received by the things | {} |",
        notifications.load(Ordering::Relaxed)
    );
    println!(
        "| createJob for {things} targets: answered | median {:.0} ms, max {:.0} ms |",
        p(&creations, 0.5),
        p(&creations, 1.0)
    );
    println!(
        "| {jobs} jobs rolled out to every thing (executions queued, notifications sent) | {:.1} s |",
        created_in.as_secs_f64()
    );
    println!(
        "| GET p50 / p99, server otherwise idle | {:.2} / {:.2} ms ({} GETs) |",
        p(&quiet, 0.5),
        p(&quiet, 0.99),
        quiet.len()
    );
    println!(
        "| GET p50 / p99 while the jobs are created | {:.2} / {:.2} ms ({} GETs) |",
        p(&busy, 0.5),
        p(&busy, 0.99),
        busy.len()
    );
    if let Some(server) = &mut server {
        println!(
            "| server RSS: start / jobs created / all done | {} / {} / {} MiB |",
            rss_start / 1024,
            rss_created / 1024,
            rss_done / 1024
        );
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// Runs the futures concurrently, results in order.
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}
