//! What `--redis-wait-replicas` costs: SET and GET throughput and latency through one
//! `mqstore serve` on a Redis primary with replicas, with the option at 0 and at 1, one after
//! the other in the same run (the ratio is the figure to read).
//!
//!   mosquitto -p 18851 &                                          # any MQTT 5 broker
//!   redis-server --port 16379 --save "" --daemonize yes           # the primary
//!   redis-server --port 16380 --save "" --replicaof 127.0.0.1 16379 --daemonize yes
//!   cargo build --release -p mqstore --bin mqstore --example replication_bench
//!   target/release/examples/replication_bench 18851 redis://127.0.0.1:16379
//!
//! Arguments: the broker's port on 127.0.0.1, the primary's URL (a Sentinel URL works too),
//! requests in flight (64), seconds per measurement (10). The server is
//! `target/release/mqstore serve`, a child process started afresh for each setting.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mqstore_net::client::{Client, SetOptions};

/// How long a call may wait for the server.
const TIMEOUT: Duration = Duration::from_secs(30);

/// `in_flight` callers each doing `op` one after another for `duration`: operations per
/// second and the latencies, sorted.
async fn measure(
    client: &Client,
    in_flight: usize,
    duration: Duration,
    set: bool,
) -> (f64, Vec<Duration>) {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let callers: Vec<_> = (0..in_flight)
        .map(|caller| {
            let (client, stop) = (client.clone(), stop.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("bench/{caller}/{}", i % 100);
                    i += 1;
                    let call = Instant::now();
                    if set {
                        client
                            .set(key, "0123456789abcdef", SetOptions::default())
                            .await
                            .expect("SET");
                    } else {
                        client.get(key).await.expect("GET");
                    }
                    latencies.push(call.elapsed());
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for caller in callers {
        latencies.extend(caller.await.unwrap());
    }
    let rate = latencies.len() as f64 / started.elapsed().as_secs_f64();
    latencies.sort();
    (rate, latencies)
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).map_or(1883, |a| a.parse().expect("a port"));
    let store = args
        .get(2)
        .cloned()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let in_flight: usize = args.get(3).map_or(64, |a| a.parse().expect("a number"));
    let seconds: u64 = args.get(4).map_or(10, |a| a.parse().expect("a number"));
    let mqstore = common::mqstore_binary();

    println!("| --redis-wait-replicas | SET/s | SET p50 | SET p99 | GET/s | GET p50 | GET p99 |");
    println!("|---|---|---|---|---|---|---|");
    let mut rates = Vec::new();
    for wait in [0, 1] {
        let mut server = std::process::Command::new(&mqstore)
            .args(["serve", "--port", &port.to_string(), "--node-id", "bench"])
            .args([
                "--store",
                &store,
                "--redis-wait-replicas",
                &wait.to_string(),
            ])
            .env("MQSTORE_LOG", "warn")
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (cargo build --release -p mqstore --bin mqstore)",
                    mqstore.display()
                )
            });
        common::wait_for_server(port).await;
        let client = common::connect(port, "bench-replication", TIMEOUT).await;
        let duration = Duration::from_secs(seconds);
        let (sets, set_latencies) = measure(&client, in_flight, duration, true).await;
        let (gets, get_latencies) = measure(&client, in_flight, duration, false).await;
        let p = common::percentile_ms;
        println!(
            "| {wait} | {sets:.0} | {:.2} ms | {:.2} ms | {gets:.0} | {:.2} ms | {:.2} ms |",
            p(&set_latencies, 0.5),
            p(&set_latencies, 0.99),
            p(&get_latencies, 0.5),
            p(&get_latencies, 0.99),
        );
        rates.push((sets, gets));
        client.close().await;
        let _ = server.kill();
        let _ = server.wait();
    }
    println!(
        "\nwith 1 against 0, in this run: SET {:.2}×, GET {:.2}× the throughput \
         ({in_flight} requests in flight, {seconds} s each)",
        rates[1].0 / rates[0].0,
        rates[1].1 / rates[0].1
    );
}
