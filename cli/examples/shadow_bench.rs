//! Device shadow updates per second against the state store's SETs through the same broker,
//! at the same concurrency, in one run: the ratio is what a shadow update costs beyond a
//! store write (a read, the merge, a compare-and-set write, and three publishes: accepted,
//! delta or not, documents).
//!
//!   mosquitto -p 18860 &      # any MQTT 5 broker
//!   cargo build --release -p mqstore --bin mqstore --example shadow_bench
//!   target/release/examples/shadow_bench 18860 [STORE | --inside]
//!
//! STORE is `serve --store`'s (default `memory`; e.g. `redis://127.0.0.1:6379`). The server
//! is `target/release/mqstore serve`, a child process; with `--inside` none is started: the
//! broker serves shadows itself (the plugin, on its own store; `scripts/bench-plugin`). Each
//! level runs the two targets in turns (SETs, then shadow updates, three rounds of 3 s each)
//! so that the machine's noise falls on both. Each in-flight task writes its own key and its
//! own thing's shadow; the shadow updates alternate `desired` and `reported`, so that every
//! other one has a delta.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqstore_net::client::{Client, SetOptions};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);
const ROUND: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;
const CONNECTIONS: usize = 16;

/// Operations per second of `in_flight` tasks for `ROUND`, each running `op(task, n)`.
async fn rate<F, Fut>(in_flight: usize, op: F) -> f64
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let done = Arc::new(AtomicU64::new(0));
    let op = Arc::new(op);
    let until = Instant::now() + ROUND;
    let tasks: Vec<_> = (0..in_flight)
        .map(|task| {
            let (done, op) = (done.clone(), op.clone());
            tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < until {
                    op(task, n).await;
                    n += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / ROUND.as_secs_f64()
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).map_or(18860, |a| a.parse().expect("a port"));
    let inside = args.get(2).is_some_and(|a| a == "--inside");
    let store = match args.get(2) {
        Some(_) if inside => "the plugin's".to_owned(),
        Some(store) => store.clone(),
        None => "memory".to_owned(),
    };
    let mut server = (!inside).then(|| {
        let mqstore = common::mqstore_binary();
        std::process::Command::new(&mqstore)
            .args(["serve", "--port", &port.to_string(), "--node-id", "bench"])
            .args(["--store", &store, "--no-commands"])
            .env("MQSTORE_LOG", "warn")
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (build it: cargo build --release -p mqstore --bin mqstore)",
                    mqstore.display()
                )
            })
    });
    common::wait_for_server(port).await;
    let mut clients: Vec<Client> = Vec::new();
    for i in 0..CONNECTIONS {
        clients.push(common::connect(port, &format!("bench-{i}"), TIMEOUT).await);
    }
    println!("store {store}, {CONNECTIONS} connections, {ROUNDS} rounds of {ROUND:?} per target");
    println!("| in flight | state store SET ops/s | shadow updates/s | shadow / SET |");
    println!("|---|---|---|---|");
    for in_flight in [1, 64] {
        let mut shadows = Vec::new();
        for task in 0..in_flight {
            let client = &clients[task % CONNECTIONS];
            let shadow = client.shadow(&format!("bench-thing-{task}"), None).await;
            shadows.push(Arc::new(shadow.expect("use a shadow")));
        }
        let (mut sets, mut updates) = (0.0, 0.0);
        for _ in 0..ROUNDS {
            let set_clients = clients.clone();
            sets += rate(in_flight, move |task, n| {
                let client = set_clients[task % CONNECTIONS].clone();
                async move {
                    let key = format!("bench-key-{task}");
                    let value = format!("{n:064}");
                    client
                        .set(key, value, SetOptions::default())
                        .await
                        .expect("SET");
                }
            })
            .await;
            let handles = shadows.clone();
            updates += rate(in_flight, move |task, n| {
                let shadow = handles[task].clone();
                async move {
                    let side = if n % 2 == 0 { "desired" } else { "reported" };
                    let state = json!({ side: { "n": n / 2, "label": "bench" } });
                    shadow.update(state, None).await.expect("shadow update");
                }
            })
            .await;
        }
        let (sets, updates) = (sets / ROUNDS as f64, updates / ROUNDS as f64);
        println!(
            "| {in_flight} | {sets:.0} | {updates:.0} | **{:.2}×** |",
            updates / sets
        );
    }
    for client in clients {
        client.close().await;
    }
    if let Some(server) = server.as_mut() {
        let _ = server.kill();
        let _ = server.wait();
    }
}
