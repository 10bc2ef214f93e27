//! A job on a large thing group: the group made (a thing at a time, as an operator's tooling
//! would), then one job on it rolled out as fast as the server goes (no rate), while a client
//! GETs from the state store — the time to queue every execution, the server's (or Redis')
//! memory, and the state store's latency meanwhile against the same GETs on an idle server.
//!
//!   mosquitto -p 18851 &      # any MQTT 5 broker
//!   cargo build --release -p mqstore --bin mqstore --example jobs_group_bench
//!   target/release/examples/jobs_group_bench 18851 100000
//!   target/release/examples/jobs_group_bench 18851 1000000 redis://127.0.0.1:6379
//!
//! Arguments: the broker's port on 127.0.0.1, things (100000), a store URL (memory when
//! absent), calls in flight while the group is made (64). The server is
//! `target/release/mqstore serve`, run as a child process so that its memory is its own. The
//! things are not simulated: their notifications go to topics nobody subscribes to.

mod common;

/// How long a call may wait for the server.
const TIMEOUT: Duration = Duration::from_secs(120);

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

/// Redis' `used_memory` in MiB (`redis-cli`), or 0.
fn redis_memory_mib(url: &str) -> f64 {
    std::process::Command::new("redis-cli")
        .args(["-u", url, "info", "memory"])
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("used_memory:")?.trim().parse::<f64>().ok())
        })
        .map_or(0.0, |bytes| bytes / 1024.0 / 1024.0)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).map_or(1883, |a| a.parse().expect("a port"));
    let things: usize = args
        .get(2)
        .map_or(100_000, |a| a.parse().expect("a number"));
    let store = args.get(3).filter(|s| s.as_str() != "memory").cloned();
    let in_flight: usize = args.get(4).map_or(64, |a| a.parse().expect("a number"));

    let exe = std::env::current_exe().unwrap();
    let mqstore = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("mqstore");
    let mut command = std::process::Command::new(&mqstore);
    command.args(["serve", "--port", &port.to_string(), "--node-id", "bench"]);
    if let Some(url) = &store {
        command.args(["--store", url]);
    }
    let mut server = command
        .env(
            "MQSTORE_LOG",
            std::env::var("MQSTORE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (cargo build --release -p mqstore --bin mqstore)",
                mqstore.display()
            )
        });
    let pid = server.id().to_string();
    common::wait_for_server(port).await;
    let operator = common::connect(port, "bench-operator", TIMEOUT).await;
    let prober_client = common::connect(port, "bench-prober", TIMEOUT).await;
    let store_name = store.as_deref().unwrap_or("memory");
    println!("{things} things in one group, store {store_name}");
    let rss_start = common::rss_kib(&pid);

    // The group, a thing at a time, `in_flight` calls at once.
    let started = Instant::now();
    operator
        .create_thing_group("bench-fleet", None)
        .await
        .expect("createThingGroup");
    let permits = Arc::new(Semaphore::new(in_flight));
    let mut tasks = Vec::with_capacity(things);
    for i in 0..things {
        let permit = permits.clone().acquire_owned().await.unwrap();
        let operator = operator.clone();
        tasks.push(tokio::spawn(async move {
            let thing = format!("thing-{i:07}");
            operator
                .add_thing_to_thing_group("bench-fleet", &thing)
                .await
                .expect("addThingToThingGroup");
            drop(permit);
        }));
        if (i + 1) % 100_000 == 0 {
            eprintln!(
                "  {} things added, {:.0} s",
                i + 1,
                started.elapsed().as_secs_f64()
            );
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    let grouped_in = started.elapsed();
    let rss_grouped = common::rss_kib(&pid);
    let redis_grouped = store.as_deref().map_or(0.0, redis_memory_mib);

    // GETs on the idle server, then during the rollout.
    let stop = Arc::new(tokio::sync::Notify::new());
    let prober = tokio::spawn(common::probe(prober_client.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.notify_one();
    let quiet = prober.await.unwrap();

    let stop = Arc::new(tokio::sync::Notify::new());
    let prober = tokio::spawn(common::probe(prober_client.clone(), stop.clone()));
    let started = Instant::now();
    let spec = mqstore_core::jobs::JobSpec::new(
        "bench-job",
        vec!["thinggroup/bench-fleet".into()],
        serde_json::json!({ "firmware": "v2" }),
    );
    let create = Instant::now();
    operator.create_job(spec).await.expect("createJob");
    let answered = create.elapsed();
    let mut last_report = Instant::now();
    loop {
        let job = operator
            .describe_job("bench-job")
            .await
            .expect("describeJob");
        let queued: u64 = job.executions.values().sum();
        if queued == things as u64 {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {queued} executions queued, {:.0} s",
                started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let queued_in = started.elapsed();
    stop.notify_one();
    let busy = prober.await.unwrap();
    let rss_queued = common::rss_kib(&pid);
    let redis_queued = store.as_deref().map_or(0.0, redis_memory_mib);

    println!();
    println!("| measure ({things} things, store {store_name}) | value |");
    println!("|---|---|");
    println!(
        "| group made, a thing at a time ({in_flight} calls in flight) | {:.1} s ({:.0} things/s) |",
        grouped_in.as_secs_f64(),
        things as f64 / grouped_in.as_secs_f64()
    );
    println!(
        "| `createJob` on the group, answered | {:.0} ms |",
        answered.as_secs_f64() * 1000.0
    );
    println!(
        "| every execution queued (no rate: as fast as the server goes) | {:.1} s ({:.0} executions/s) |",
        queued_in.as_secs_f64(),
        things as f64 / queued_in.as_secs_f64()
    );
    println!(
        "| state store GET p50 / p99, server idle (baseline) | {:.2} / {:.2} ms ({} GETs) |",
        common::percentile_ms(&quiet, 0.5),
        common::percentile_ms(&quiet, 0.99),
        quiet.len()
    );
    println!(
        "| state store GET p50 / p99 while the job rolls out | {:.2} / {:.2} ms ({} GETs; p99 {:.1}x the baseline) |",
        common::percentile_ms(&busy, 0.5),
        common::percentile_ms(&busy, 0.99),
        busy.len(),
        common::percentile_ms(&busy, 0.99) / common::percentile_ms(&quiet, 0.99).max(0.001)
    );
    println!(
        "| server RSS: start / group made / every execution queued | {} / {} / {} MiB |",
        rss_start / 1024,
        rss_grouped / 1024,
        rss_queued / 1024
    );
    if store.is_some() {
        println!(
            "| Redis used_memory: group made / every execution queued | {redis_grouped:.0} / {redis_queued:.0} MiB |"
        );
    }
    operator.close().await;
    prober_client.close().await;
    let _ = server.kill();
    let _ = server.wait();
}
