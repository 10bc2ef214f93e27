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
//!
//! Then contention: 2 and 8 writers on one connection (AWS's limit is 10 requests in flight
//! per thing), first each on a shadow of its own, then all on one shadow, where each update
//! is a compare-and-set that another's may beat (it then runs again; a node runs a thing's
//! requests one at a time, so only those through different nodes should race). The races
//! per update are read from the server's `mqstore_shadow_races_total` (none with `--inside`:
//! the plugin serves no metrics).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use mqstore_net::client::{Client, SetOptions};
use mqstore_net::shadow::Shadow;
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(30);
const ROUND: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;
const CONNECTIONS: usize = 16;
/// Writers on one shadow in the contention table: below AWS's 10 in flight per thing.
const WRITERS: [usize; 2] = [2, 8];

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
    let metrics = (!inside).then(|| {
        let free = TcpListener::bind("127.0.0.1:0").expect("a free port for the metrics");
        free.local_addr().unwrap()
    });
    let mut server = (!inside).then(|| {
        let mqstore = common::mqstore_binary();
        std::process::Command::new(&mqstore)
            .args(["serve", "--port", &port.to_string(), "--node-id", "bench"])
            .args(["--store", &store, "--no-commands"])
            .args(["--metrics", &metrics.unwrap().to_string()])
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
                update(handles[task].clone(), "n".into(), n)
            })
            .await;
        }
        let (sets, updates) = (sets / ROUNDS as f64, updates / ROUNDS as f64);
        println!(
            "| {in_flight} | {sets:.0} | {updates:.0} | **{:.2}×** |",
            updates / sets
        );
    }
    contention(&clients[0], metrics).await;
    for client in clients {
        client.close().await;
    }
    if let Some(server) = server.as_mut() {
        let _ = server.kill();
        let _ = server.wait();
    }
}

/// One shadow update by a writer that owns `field`: every other one on the `desired` side (a
/// delta), the others on the `reported` side.
async fn update(shadow: Arc<Shadow>, field: String, n: u64) {
    let side = if n.is_multiple_of(2) {
        "desired"
    } else {
        "reported"
    };
    let state = json!({ side: { field: n / 2, "label": "bench" } });
    shadow.update(state, None).await.expect("shadow update");
}

/// Writers on one connection, each on its own shadow and then all on one, three rounds; the
/// server's compare-and-set races per update where it serves metrics.
async fn contention(client: &Client, metrics: Option<SocketAddr>) {
    println!();
    println!(
        "| writers | own shadows: updates/s | one shadow: updates/s | one / own | races per update |"
    );
    println!("|---|---|---|---|---|");
    let one = Arc::new(
        client
            .shadow("bench-contended", None)
            .await
            .expect("use a shadow"),
    );
    for writers in WRITERS {
        let mut own = Vec::new();
        for task in 0..writers {
            let shadow = client.shadow(&format!("bench-own-{task}"), None).await;
            own.push(Arc::new(shadow.expect("use a shadow")));
        }
        let (mut spread, mut shared, mut races) = (0.0, 0.0, 0.0);
        for _ in 0..ROUNDS {
            let handles = own.clone();
            spread += rate(writers, move |task, n| {
                update(handles[task].clone(), "n".into(), n)
            })
            .await;
            let before = metrics.map(races_so_far);
            let handle = one.clone();
            shared += rate(writers, move |task, n| {
                update(handle.clone(), format!("w{task}"), n)
            })
            .await;
            races += metrics.map_or(0.0, races_so_far) - before.unwrap_or(0.0);
        }
        let (spread, shared) = (spread / ROUNDS as f64, shared / ROUNDS as f64);
        let per_update = match metrics {
            Some(_) => format!(
                "{:.2}",
                races / (shared * ROUND.as_secs_f64() * ROUNDS as f64)
            ),
            None => "not counted".to_owned(),
        };
        println!(
            "| {writers} | {spread:.0} | {shared:.0} | **{:.2}×** | {per_update} |",
            shared / spread
        );
    }
}

/// `mqstore_shadow_races_total` from the server's metrics at `address`.
fn races_so_far(address: SocketAddr) -> f64 {
    let mut connection = TcpStream::connect(address).expect("the server's metrics");
    connection
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n")
        .expect("asking for the server's metrics");
    let mut response = String::new();
    connection
        .read_to_string(&mut response)
        .expect("the server's metrics");
    response
        .lines()
        .find_map(|line| {
            line.strip_prefix("mqstore_shadow_races_total ")?
                .parse()
                .ok()
        })
        .expect("mqstore_shadow_races_total in the server's metrics")
}
