//! What the examples share.

#![allow(dead_code)] // each example uses some of it

use std::sync::Arc;
use std::time::{Duration, Instant};

use mqstore_net::client::{Client, ClientOptions};

/// A client of the broker on 127.0.0.1:`port` whose calls wait up to `timeout`.
pub async fn connect(port: u16, id: &str, timeout: Duration) -> Client {
    let mut options = ClientOptions::new(id, "127.0.0.1", port);
    options.timeout = timeout;
    Client::connect(options).await.expect("connect")
}

/// Returns once the server answers on the broker at 127.0.0.1:`port` (until it has
/// subscribed, requests go unanswered: asks with short timeouts).
pub async fn wait_for_server(port: u16) {
    let ready = connect(port, "bench-ready", Duration::from_millis(300)).await;
    while ready.get("ready").await.is_err() {}
    ready.close().await;
}

/// The `p` quantile (0–1) of sorted latencies, in milliseconds.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize].as_secs_f64() * 1000.0
}

/// GETs one after another until `stop`: their latencies, sorted.
pub async fn probe(client: Client, stop: Arc<tokio::sync::Notify>) -> Vec<Duration> {
    let mut latencies = Vec::new();
    let stopped = stop.notified();
    tokio::pin!(stopped);
    loop {
        let started = Instant::now();
        tokio::select! {
            _ = &mut stopped => break,
            r = client.get("probe") => { r.expect("GET"); }
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

/// The `mqstore` binary next to this example's directory (`target/release/mqstore`).
pub fn mqstore_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("mqstore")
}

/// The resident memory of process `pid` (`self` for this one), in KiB; 0 where /proc has no
/// answer.
pub fn rss_kib(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}
