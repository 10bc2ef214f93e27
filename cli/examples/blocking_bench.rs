//! The blocking client (`mqstore_net::blocking`: the calling thread does the I/O) against the
//! async Rust client, in one run over one broker and one server: GETs at 1 in flight (time per
//! call) and from 16 threads on one blocking client against 16 tasks on one async client.
//!
//!   mosquitto -p 18850 &      # any MQTT 5 broker
//!   cargo build --release -p mqstore --bin mqstore --example blocking_bench
//!   target/release/examples/blocking_bench 18850
//!
//! Arguments: the broker's port on 127.0.0.1, seconds per measurement (3), rounds (3; the
//! two clients alternate, and each figure is the median round). The server is
//! `target/release/mqstore serve`, run as a child process.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqstore_net::blocking;
use mqstore_net::client::{Client, ClientOptions, SetOptions};

/// GETs per second from `threads` threads on one blocking client for `duration`.
fn blocking_rate(client: &blocking::Client, threads: usize, duration: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + duration;
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let done = done.clone();
            scope.spawn(move || {
                while Instant::now() < until {
                    client.get("bench").expect("GET");
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

/// GETs per second from `tasks` tasks on one async client for `duration`.
async fn async_rate(client: &Client, tasks: usize, duration: Duration) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + duration;
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, done) = (client.clone(), done.clone());
        handles.push(tokio::spawn(async move {
            while Instant::now() < until {
                client.get("bench").await.expect("GET");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(18850);
    let seconds: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(3);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(3);
    let duration = Duration::from_secs(seconds);
    let mut server = std::process::Command::new(common::mqstore_binary())
        .args(["serve", "--port", &port.to_string(), "--node-id", "bench"])
        .spawn()
        .expect("mqstore serve starts");
    common::wait_for_server(port).await;
    let async_client = common::connect(port, "bench-async", Duration::from_secs(10)).await;
    async_client
        .set("bench", "value", SetOptions::default())
        .await
        .unwrap();
    let mut options = ClientOptions::new("bench-blocking", "127.0.0.1", port);
    options.timeout = Duration::from_secs(10);
    let blocking_client = tokio::task::spawn_blocking(move || blocking::Client::connect(options))
        .await
        .unwrap()
        .expect("the blocking client connects");
    let blocking_client = Arc::new(blocking_client);
    for in_flight in [1, 16] {
        let (mut rust, mut blocked) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            rust.push(async_rate(&async_client, in_flight, duration).await);
            let client = blocking_client.clone();
            blocked.push(
                tokio::task::spawn_blocking(move || blocking_rate(&client, in_flight, duration))
                    .await
                    .unwrap(),
            );
        }
        let (rust, blocked) = (median(rust), median(blocked));
        println!(
            "{in_flight:>2} in flight: async client {rust:>8.0} GET/s ({:>6.1} µs/call), blocking client {blocked:>8.0} GET/s ({:>6.1} µs/call): blocking/async time per call {:.2}×",
            1e6 * in_flight as f64 / rust,
            1e6 * in_flight as f64 / blocked,
            rust / blocked
        );
    }
    blocking_client.close();
    async_client.close().await;
    let _ = server.kill();
    let _ = server.wait();
}
