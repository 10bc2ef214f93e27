//! The server's Prometheus metrics and the small HTTP endpoint that serves them.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::engine::Outcome;
use crate::store::StoreStats;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

/// Counters and gauges of one server.
#[derive(Debug, Default)]
pub struct Metrics {
    /// (command, outcome) → count.
    requests: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_ns: AtomicU64,
    keys: AtomicU64,
    bytes: AtomicU64,
    watches: AtomicU64,
    clients_dropped: AtomicU64,
    notifications: AtomicU64,
}

impl Metrics {
    /// Counts one handled request and how long it took (from arrival to its answer queued).
    pub fn record(&self, outcome: &Outcome, latency: Duration) {
        let (command, result) = match outcome {
            Outcome::Answered { command, error } => (
                command.map_or("MALFORMED", |c| c.as_str()),
                if error.is_some() { "error" } else { "ok" },
            ),
            Outcome::Rejected(_) => ("ENVELOPE", "rejected"),
            Outcome::Dropped(_) => ("ENVELOPE", "dropped"),
        };
        if let Ok(mut requests) = self.requests.lock() {
            *requests.entry((command, result)).or_default() += 1;
        }
        let seconds = latency.as_secs_f64();
        for (bucket, bound) in self.latency_buckets.iter().zip(BUCKETS) {
            if seconds <= bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.latency_count.fetch_add(1, Ordering::Relaxed);
        self.latency_sum_ns
            .fetch_add(latency.as_nanos() as u64, Ordering::Relaxed);
    }

    /// Updates the store gauges.
    pub fn set_store(&self, stats: StoreStats) {
        self.keys.store(stats.keys, Ordering::Relaxed);
        self.bytes.store(stats.bytes, Ordering::Relaxed);
        self.watches.store(stats.watches, Ordering::Relaxed);
    }

    /// Counts notifications published.
    pub fn notified(&self, n: u64) {
        self.notifications.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts clients whose registrations were dropped because they are gone.
    pub fn client_dropped(&self) {
        self.clients_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// How many requests ended with `(command, outcome)`.
    pub fn requests(&self, command: &str, outcome: &str) -> u64 {
        self.requests.lock().map_or(0, |r| {
            r.iter()
                .filter(|((c, o), _)| *c == command && *o == outcome)
                .map(|(_, n)| *n)
                .sum()
        })
    }

    /// The Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP mqstore_requests_total State store requests handled, by command and outcome."
        );
        let _ = writeln!(out, "# TYPE mqstore_requests_total counter");
        if let Ok(requests) = self.requests.lock() {
            for ((command, outcome), n) in requests.iter() {
                let _ = writeln!(
                    out,
                    "mqstore_requests_total{{command=\"{command}\",outcome=\"{outcome}\"}} {n}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP mqstore_request_duration_seconds Time from a request's arrival to its answer being queued."
        );
        let _ = writeln!(out, "# TYPE mqstore_request_duration_seconds histogram");
        for (bucket, bound) in self.latency_buckets.iter().zip(BUCKETS) {
            let _ = writeln!(
                out,
                "mqstore_request_duration_seconds_bucket{{le=\"{bound}\"}} {}",
                bucket.load(Ordering::Relaxed)
            );
        }
        let count = self.latency_count.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "mqstore_request_duration_seconds_bucket{{le=\"+Inf\"}} {count}"
        );
        let _ = writeln!(
            out,
            "mqstore_request_duration_seconds_sum {}",
            self.latency_sum_ns.load(Ordering::Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "mqstore_request_duration_seconds_count {count}");
        for (name, help, kind, value) in [
            ("mqstore_keys", "Keys in the store.", "gauge", &self.keys),
            (
                "mqstore_bytes",
                "Bytes of keys and values in the store.",
                "gauge",
                &self.bytes,
            ),
            (
                "mqstore_watches",
                "KEYNOTIFY registrations.",
                "gauge",
                &self.watches,
            ),
            (
                "mqstore_notifications_total",
                "Change notifications published.",
                "counter",
                &self.notifications,
            ),
            (
                "mqstore_clients_dropped_total",
                "Clients whose registrations were dropped because they are gone.",
                "counter",
                &self.clients_dropped,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        out
    }
}

/// Serves `GET /metrics` (any path, in fact) on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            // Read the request head (it is small); the answer is the same for every path.
            let mut head = [0u8; 2048];
            let _ = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut head)).await;
            let body = metrics.render();
            let response = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// Binds the metrics endpoint.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}
