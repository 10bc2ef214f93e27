//! The server's Prometheus metrics and the small HTTP endpoint that serves them.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use mqstore_core::codec::Command;
use mqstore_core::commands::{Matched, Status as CommandStatus};
use mqstore_core::engine::Outcome;
use mqstore_core::envelope::{DropReason, EnvelopeError};
use mqstore_core::server::commands::Seen;
use mqstore_core::store::StoreStats;

use crate::redis_store::Replication;

/// Upper bounds of the latency histogram, in seconds.
const BUCKETS: [f64; 12] = [
    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0,
];

/// The `command` label: the state store's verbs, then what is not a command.
const COMMANDS: [&str; Command::ALL.len() + 2] = [
    "SET",
    "GET",
    "DEL",
    "VDEL",
    "KEYNOTIFY",
    "SCAN",
    "MALFORMED",
    "ENVELOPE",
];
const MALFORMED: usize = Command::ALL.len();
const ENVELOPE: usize = MALFORMED + 1;

/// The `outcome` label.
const OUTCOMES: [&str; 5] = ["ok", "error", "rejected", "dropped", "overloaded"];

/// Counters and gauges of one server. Recording is a few relaxed atomic increments: no lock
/// and no allocation on the request path.
#[derive(Debug, Default)]
pub struct Metrics {
    /// `[command][outcome]` → count.
    requests: [[AtomicU64; OUTCOMES.len()]; COMMANDS.len()],
    /// Requests per latency bucket (not cumulative: [`Metrics::render`] adds them up).
    latency_buckets: [AtomicU64; BUCKETS.len()],
    latency_count: AtomicU64,
    latency_sum_ns: AtomicU64,
    keys: AtomicU64,
    bytes: AtomicU64,
    watches: AtomicU64,
    clients_dropped: AtomicU64,
    clients_gone: AtomicU64,
    notifications: AtomicU64,
    publishes_dropped: AtomicU64,
    connections: AtomicU64,
    /// Jobs requests (device and operator API), [rejected, accepted].
    jobs_requests: [AtomicU64; 2],
    /// Device shadow requests, by operation (get, update, delete), [rejected, accepted].
    shadow_requests: [[AtomicU64; 2]; 3],
    /// Device shadow requests run again after another node's write won the compare-and-set.
    shadow_races: AtomicU64,
    /// `notify` and `notify-next` published.
    jobs_notifications: AtomicU64,
    /// Messages on the jobs device API topics that were not requests.
    jobs_ignored: AtomicU64,
    /// Whether this node is the one elected to listen to the jobs device API (0 or 1).
    jobs_listener: AtomicU64,
    /// Other nodes on the broker that receive requests this node receives, of a service both
    /// serve (`presence::Peers`).
    clashing_nodes: AtomicU64,
    /// Redis calls that failed or timed out.
    store_errors: AtomicU64,
    /// Requests waiting for Redis.
    store_in_flight: AtomicU64,
    /// Whether the last Redis call succeeded (1) or not (0); the memory store is always up.
    store_up: AtomicU64,
    /// Connected to the broker with the node's subscriptions in (`/readyz`).
    subscribed: AtomicBool,
    /// Whether the broker's PUBACKs say "no matching subscribers" (0x10): 0 not known yet,
    /// 1 no, 2 yes.
    broker_reports_no_subscribers: AtomicU64,
    /// Commands to devices, by [`CommandCount`].
    commands: [AtomicU64; COMMAND_COUNTS.len()],
    /// Replication and failovers, on Redis.
    replication: std::sync::OnceLock<Arc<Replication>>,
}

/// What happened to a command to a device, or to an answer (the `event` label of
/// `mqstore_commands_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandCount {
    /// Published to a device.
    Sent,
    /// Settled by an answer in time, by status.
    Succeeded,
    /// The device answered with an error.
    Failed,
    /// The device refused the command.
    Rejected,
    /// No answer within the timeout.
    TimedOut,
    /// An answer after the timeout (recorded in the status).
    Late,
    /// An answer forwarded to a node that was gone (recorded in the status).
    Orphaned,
    /// A second answer to one command (dropped).
    Duplicate,
    /// An answer with an id nobody knows, or on a topic nobody waits on (dropped).
    Unknown,
    /// An answer the profile cannot read, or a request the service cannot answer (dropped).
    Malformed,
    /// An answer handed to the node waiting for it, over Redis.
    Forwarded,
    /// A progress report (IN_PROGRESS) of a command still open.
    Progress,
}

/// The shadow operations, in the order `shadow_requests` counts them.
const SHADOW_OPS: [mqstore_core::shadow::Op; 3] = [
    mqstore_core::shadow::Op::Get,
    mqstore_core::shadow::Op::Update,
    mqstore_core::shadow::Op::Delete,
];

const COMMAND_COUNTS: [&str; 12] = [
    "sent",
    "succeeded",
    "failed",
    "rejected",
    "timed_out",
    "late",
    "orphaned",
    "duplicate",
    "unknown",
    "malformed",
    "forwarded",
    "progress",
];

impl Metrics {
    /// Counts one handled request and how long it took (from arrival to its answer queued).
    pub fn record(&self, outcome: &Outcome, latency: Duration) {
        let (command, result) = match outcome {
            Outcome::Answered { command, error } => (
                command.map_or(MALFORMED, |c| c as usize),
                usize::from(error.is_some()),
            ),
            Outcome::Rejected(EnvelopeError::Unavailable | EnvelopeError::StoreFailed(_)) => {
                (ENVELOPE, 4)
            }
            Outcome::Rejected(_) => (ENVELOPE, 2),
            Outcome::Dropped(DropReason::Overloaded) => (ENVELOPE, 4),
            Outcome::Dropped(_) => (ENVELOPE, 3),
        };
        self.requests[command][result].fetch_add(1, Ordering::Relaxed);
        let seconds = latency.as_secs_f64();
        if let Some(bucket) = BUCKETS.iter().position(|&bound| seconds <= bound) {
            self.latency_buckets[bucket].fetch_add(1, Ordering::Relaxed);
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

    /// Records a Redis call's result (`ok`), and how many requests wait for Redis.
    pub fn store_call(&self, ok: bool, in_flight: usize) {
        if !ok {
            self.store_errors.fetch_add(1, Ordering::Relaxed);
        }
        self.store_up.store(u64::from(ok), Ordering::Relaxed);
        self.store_in_flight
            .store(in_flight as u64, Ordering::Relaxed);
    }

    /// Whether the node is connected to the broker with its subscriptions in.
    pub fn set_subscribed(&self, subscribed: bool) {
        self.subscribed.store(subscribed, Ordering::Relaxed);
    }

    /// Why the node is not ready to serve (`/readyz` answers 503 with it), or `None` when it
    /// is: connected to the broker with its subscriptions in, and its store answering.
    pub fn not_ready(&self) -> Option<&'static str> {
        if !self.subscribed.load(Ordering::Relaxed) {
            Some("not connected to the broker (or not subscribed yet)")
        } else if self.store_up.load(Ordering::Relaxed) == 0 {
            Some("the store (Redis) does not answer")
        } else {
            None
        }
    }

    /// Reports what the Redis store saw of replication and failovers from now on.
    pub fn watch_replication(&self, replication: Arc<Replication>) {
        let _ = self.replication.set(replication);
    }

    /// Counts notifications published.
    pub fn notified(&self, n: u64) {
        self.notifications.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one jobs request (device or operator API) and the notifications it caused.
    pub fn jobs_handled(&self, accepted: bool, notifications: usize) {
        self.jobs_requests[usize::from(accepted)].fetch_add(1, Ordering::Relaxed);
        self.jobs_notified(notifications as u64);
    }

    /// Counts one device shadow request.
    pub fn shadow_handled(&self, op: mqstore_core::shadow::Op, accepted: bool) {
        let by_op = &self.shadow_requests[SHADOW_OPS.iter().position(|o| *o == op).unwrap_or(0)];
        by_op[usize::from(accepted)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts device shadow requests run again because another node wrote the shadow between
    /// their read and their write.
    pub fn shadow_raced(&self, races: usize) {
        if races > 0 {
            self.shadow_races.fetch_add(races as u64, Ordering::Relaxed);
        }
    }

    /// Counts a message on the device API topics that was not a request.
    pub fn jobs_ignored(&self) {
        self.jobs_ignored.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts `notify` / `notify-next` published.
    pub fn jobs_notified(&self, n: u64) {
        self.jobs_notifications.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts clients whose registrations were dropped because they are gone.
    pub fn client_dropped(&self) {
        self.clients_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts clients reported gone by their presence Will or goodbye (whether or not that
    /// dropped anything: on Redis, behind a broker that reports PUBACK 0x10, it does not).
    pub fn clients_gone(&self, n: u64) {
        self.clients_gone.fetch_add(n, Ordering::Relaxed);
    }

    /// Records whether this node listens to the jobs device API for all nodes.
    pub fn set_jobs_listener(&self, listens: bool) {
        self.jobs_listener
            .store(u64::from(listens), Ordering::Relaxed);
    }

    /// Records how many other nodes on the broker receive requests this node receives.
    pub fn set_clashing_nodes(&self, n: usize) {
        self.clashing_nodes.store(n as u64, Ordering::Relaxed);
    }

    /// Counts a connection to the broker made (every CONNACK).
    pub fn connected(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an answer or notification not published because the broker would refuse it.
    pub fn publish_dropped(&self) {
        self.publishes_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// Records whether the broker's PUBACKs report "no matching subscribers".
    pub fn set_broker_reports_no_subscribers(&self, reports: bool) {
        self.broker_reports_no_subscribers
            .store(1 + u64::from(reports), Ordering::Relaxed);
    }

    /// Counts (`mqstore_commands_total`) and logs one thing the command service did.
    pub fn command_seen(&self, seen: Seen) {
        let counted = match seen {
            Seen::Sent => CommandCount::Sent,
            Seen::Unanswerable => {
                debug!("dropped a command request without response topic or correlation data");
                CommandCount::Malformed
            }
            Seen::Malformed => {
                info!("dropped a device's answer that cannot be read");
                CommandCount::Malformed
            }
            Seen::Unknown => {
                info!("dropped an answer nobody waits for (unknown id, or forgotten)");
                CommandCount::Unknown
            }
            Seen::Matched(how, status) => match how {
                Matched::Live => match status {
                    CommandStatus::Succeeded => CommandCount::Succeeded,
                    CommandStatus::Failed => CommandCount::Failed,
                    _ => CommandCount::Rejected,
                },
                Matched::Progress => CommandCount::Progress,
                Matched::Late => {
                    info!(%status, "late answer recorded");
                    CommandCount::Late
                }
                Matched::Duplicate => {
                    info!("dropped an answer to a command already settled");
                    CommandCount::Duplicate
                }
            },
            Seen::TimedOut(id) => {
                info!(%id, "command timed out");
                CommandCount::TimedOut
            }
            Seen::Forwarded => CommandCount::Forwarded,
            Seen::Orphaned { id, node } => {
                warn!(%id, %node, "answer for a node that is gone; recorded as orphaned");
                CommandCount::Orphaned
            }
            Seen::Failed(why) => {
                warn!("{why}");
                return;
            }
            // Refusals are answered to their callers; nothing to count.
            _ => return,
        };
        self.command(counted);
    }

    /// Counts a command or answer event.
    pub fn command(&self, what: CommandCount) {
        self.commands[what as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many command events of kind `what` were counted.
    pub fn commands(&self, what: CommandCount) -> u64 {
        self.commands[what as usize].load(Ordering::Relaxed)
    }

    /// How many requests ended with `(command, outcome)`.
    pub fn requests(&self, command: &str, outcome: &str) -> u64 {
        let command = COMMANDS.iter().position(|&c| c == command);
        let outcome = OUTCOMES.iter().position(|&o| o == outcome);
        command
            .zip(outcome)
            .map_or(0, |(c, o)| self.requests[c][o].load(Ordering::Relaxed))
    }

    /// The Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP mqstore_requests_total State store requests handled, by command and outcome."
        );
        let _ = writeln!(out, "# TYPE mqstore_requests_total counter");
        for (command, counts) in COMMANDS.iter().zip(&self.requests) {
            for (outcome, n) in OUTCOMES.iter().zip(counts) {
                // Only what happened, as before any request every series would be 0.
                match n.load(Ordering::Relaxed) {
                    0 => {}
                    n => {
                        let _ = writeln!(
                            out,
                            "mqstore_requests_total{{command=\"{command}\",outcome=\"{outcome}\"}} {n}"
                        );
                    }
                }
            }
        }
        let _ = writeln!(
            out,
            "# HELP mqstore_request_duration_seconds Time from a request's arrival to its answer being queued."
        );
        let _ = writeln!(out, "# TYPE mqstore_request_duration_seconds histogram");
        let mut cumulative = 0;
        for (bucket, bound) in self.latency_buckets.iter().zip(BUCKETS) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "mqstore_request_duration_seconds_bucket{{le=\"{bound}\"}} {cumulative}"
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
                "mqstore_store_up",
                "Whether the store answers: 1, or 0 after a Redis call failed (until one succeeds).",
                "gauge",
                &self.store_up,
            ),
            (
                "mqstore_store_errors_total",
                "Redis calls that failed or timed out (their requests were answered with status 503).",
                "counter",
                &self.store_errors,
            ),
            (
                "mqstore_store_in_flight",
                "Requests waiting for Redis.",
                "gauge",
                &self.store_in_flight,
            ),
            (
                "mqstore_notifications_total",
                "Change notifications published (one published again after a broker connection dropped counts again).",
                "counter",
                &self.notifications,
            ),
            (
                "mqstore_broker_connections_total",
                "Connections made to the broker (more than one: it went away, or disconnected this server).",
                "counter",
                &self.connections,
            ),
            (
                "mqstore_publishes_dropped_total",
                "Answers and notifications not published because the broker would refuse them (larger than its maximum packet size).",
                "counter",
                &self.publishes_dropped,
            ),
            (
                "mqstore_clients_dropped_total",
                "Clients whose registrations were dropped because they are gone.",
                "counter",
                &self.clients_dropped,
            ),
            (
                "mqstore_clients_gone_total",
                "Clients reported gone by their presence Will or goodbye.",
                "counter",
                &self.clients_gone,
            ),
            (
                "mqstore_jobs_notifications_total",
                "Jobs notify and notify-next messages published.",
                "counter",
                &self.jobs_notifications,
            ),
            (
                "mqstore_jobs_ignored_total",
                "Messages on the jobs device API topics that were not requests, ignored: replies and notifications of other nodes, or a client publishing on those topics (the node's own are not sent back to it).",
                "counter",
                &self.jobs_ignored,
            ),
            (
                "mqstore_jobs_device_api_listener",
                "Whether this node is the one that listens to the jobs device API and the $-topic command answers (AWS IoT commands, IoT Hub) for all nodes (1), elected through a lease in Redis.",
                "gauge",
                &self.jobs_listener,
            ),
            (
                "mqstore_clashing_nodes",
                "Other nodes on this node's broker that receive requests this node receives too (no share group, or another one) of a service both serve, by their presence: each such request is answered twice. 0 unless nodes are misconfigured.",
                "gauge",
                &self.clashing_nodes,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
        }
        if let Some(replication) = self.replication.get() {
            for (name, help, kind, value) in [
                (
                    "mqstore_redis_replication_confirmed_total",
                    "Writes whose replication to the replicas asked for (--redis-wait-replicas) was confirmed.",
                    "counter",
                    &replication.confirmed,
                ),
                (
                    "mqstore_redis_replication_unconfirmed_total",
                    "Writes whose replication was not confirmed in time (answered with status 503; they may still be applied).",
                    "counter",
                    &replication.unconfirmed,
                ),
                (
                    "mqstore_redis_failovers_total",
                    "Times this node moved to a new primary the sentinels named.",
                    "counter",
                    &replication.failovers,
                ),
            ] {
                let _ = writeln!(out, "# HELP {name} {help}");
                let _ = writeln!(out, "# TYPE {name} {kind}");
                let _ = writeln!(out, "{name} {}", value.load(Ordering::Relaxed));
            }
            let _ = writeln!(
                out,
                "# HELP mqstore_redis_last_outage_seconds How long Redis last failed this node's calls (a failover as this node saw it: the first failed call to the next that succeeded).\n# TYPE mqstore_redis_last_outage_seconds gauge\nmqstore_redis_last_outage_seconds {:.3}",
                replication.last_outage_ms.load(Ordering::Relaxed) as f64 / 1000.0
            );
        }
        let _ = writeln!(
            out,
            "# HELP mqstore_jobs_requests_total Jobs requests (device and operator API) by outcome.\n# TYPE mqstore_jobs_requests_total counter"
        );
        for (outcome, count) in ["rejected", "accepted"].iter().zip(&self.jobs_requests) {
            let _ = writeln!(
                out,
                "mqstore_jobs_requests_total{{outcome=\"{outcome}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP mqstore_shadow_requests_total Device shadow requests by operation and outcome (rejected: AWS's 4xx and 5xx).\n# TYPE mqstore_shadow_requests_total counter"
        );
        for (op, counts) in SHADOW_OPS.iter().zip(&self.shadow_requests) {
            for (outcome, count) in ["rejected", "accepted"].iter().zip(counts) {
                let _ = writeln!(
                    out,
                    "mqstore_shadow_requests_total{{op=\"{}\",outcome=\"{outcome}\"}} {}",
                    op.suffix(),
                    count.load(Ordering::Relaxed)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP mqstore_shadow_races_total Device shadow requests run again because another node wrote the shadow between their read and their write.\n# TYPE mqstore_shadow_races_total counter\nmqstore_shadow_races_total {}",
            self.shadow_races.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP mqstore_commands_total Commands to devices and their answers, by event.\n# TYPE mqstore_commands_total counter"
        );
        for (event, count) in COMMAND_COUNTS.iter().zip(&self.commands) {
            let _ = writeln!(
                out,
                "mqstore_commands_total{{event=\"{event}\"}} {}",
                count.load(Ordering::Relaxed)
            );
        }
        if let Some(reports) = match self.broker_reports_no_subscribers.load(Ordering::Relaxed) {
            0 => None,
            n => Some(n - 1),
        } {
            let _ = writeln!(
                out,
                "# HELP mqstore_broker_reports_no_subscribers Whether the broker's PUBACKs say \"no matching subscribers\" (0x10), which lets the server drop registrations of clients that stopped listening.\n# TYPE mqstore_broker_reports_no_subscribers gauge\nmqstore_broker_reports_no_subscribers {reports}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP mqstore_build_info The running mqstore: its version and the commit it was built from (always 1).\n# TYPE mqstore_build_info gauge\nmqstore_build_info{{version=\"{}\",commit=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION"),
            env!("MQSTORE_COMMIT")
        );
        process_metrics(&mut out);
        out
    }
}

/// The process metrics Prometheus client libraries serve (`process_*`, from `/proc/self`):
/// CPU time, memory, open files and their limit, start time. Left out where `/proc` is not
/// there (not Linux) or cannot be read.
fn process_metrics(out: &mut String) {
    let Some(process) = Process::read() else {
        return;
    };
    let families: [(&str, &str, &str, f64); 6] = [
        (
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            "counter",
            process.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            "gauge",
            process.resident_bytes,
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            "gauge",
            process.virtual_bytes,
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            "gauge",
            process.open_fds,
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            "gauge",
            process.max_fds,
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            "gauge",
            process.start_time_seconds,
        ),
    ];
    for (name, help, kind, value) in families {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
}

/// What `/proc/self` says of this process.
struct Process {
    cpu_seconds: f64,
    resident_bytes: f64,
    virtual_bytes: f64,
    open_fds: f64,
    max_fds: f64,
    start_time_seconds: f64,
}

/// Clock ticks per second of `/proc`'s times (`USER_HZ`: 100 on every Linux architecture).
const USER_HZ: f64 = 100.0;

impl Process {
    fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // After the command name (in parentheses, which may hold spaces): field 3 onwards.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        let (utime, stime, start_ticks) = (field(14)?, field(15)?, field(22)?);
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|n| n.parse::<f64>().ok())
                .map(|n| n * 1024.0)
        };
        let boot_seconds = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|line| line.strip_prefix("btime "))
            .and_then(|n| n.trim().parse::<f64>().ok())?;
        let max_fds = std::fs::read_to_string("/proc/self/limits")
            .ok()?
            .lines()
            .find(|line| line.starts_with("Max open files"))
            .and_then(|line| line.split_whitespace().nth(3))
            .and_then(|n| n.parse::<f64>().ok())?;
        Some(Self {
            cpu_seconds: (utime + stime) / USER_HZ,
            resident_bytes: kib("VmRSS:")?,
            virtual_bytes: kib("VmSize:")?,
            open_fds: std::fs::read_dir("/proc/self/fd").ok()?.count() as f64,
            max_fds,
            start_time_seconds: boot_seconds + start_ticks / USER_HZ,
        })
    }
}

/// Serves `GET /metrics` (and `HEAD`) on `listener` until the task is dropped: `404` for other
/// paths, `405` for other methods, `400` for what is not an HTTP request.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            // The request's head, whole: a client may write it in pieces, and closing with
            // part of it unread would reset the connection before the client reads the answer.
            let mut head = [0u8; 2048];
            let mut length = 0;
            let read_head = async {
                while length < head.len() && !head[..length].windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut head[length..]).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => length += n,
                    }
                }
            };
            if tokio::time::timeout(Duration::from_secs(5), read_head)
                .await
                .is_err()
                || length == 0
            {
                return;
            }
            let response = http_response(&head[..length], &metrics);
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

/// The HTTP response to a request whose head starts with `head`.
fn http_response(head: &[u8], metrics: &Metrics) -> String {
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(&[]);
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (parts.next().unwrap_or(&[]), parts.next());
    let reply = |status: &str, extra: &str, body: &str, send_body: bool| {
        format!(
            "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{}",
            body.len(),
            if send_body { body } else { "" }
        )
    };
    let Some(target) = target else {
        return reply("400 Bad Request", "", "not an HTTP request\n", true);
    };
    let path = target.split(|&b| b == b'?').next().unwrap_or(&[]);
    if !matches!(path, b"/metrics" | b"/healthz" | b"/readyz") {
        return reply(
            "404 Not Found",
            "",
            "metrics are served at /metrics; the probes at /healthz and /readyz\n",
            true,
        );
    }
    if !matches!(method, b"GET" | b"HEAD") {
        return reply(
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n",
            "use GET\n",
            true,
        );
    }
    let get = method == b"GET";
    match path {
        // Liveness: the process runs its loop (it answers while it waits for the broker).
        b"/healthz" => reply("200 OK", "", "ok\n", get),
        b"/readyz" => match metrics.not_ready() {
            None => reply("200 OK", "", "ready\n", get),
            Some(why) => reply("503 Service Unavailable", "", &format!("{why}\n"), get),
        },
        _ => reply(
            "200 OK",
            "Content-Type: text/plain; version=0.0.4\r\n",
            &metrics.render(),
            get,
        ),
    }
}

/// Binds the metrics endpoint.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request whose head arrives in pieces (a client writing it in parts, a slow link) is
    /// answered once whole, not from its first piece.
    #[test]
    fn a_request_written_in_pieces_is_answered_whole() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let answer = runtime.block_on(async {
            let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
            let addr = listener.local_addr().unwrap();
            tokio::spawn(serve(listener, Arc::new(Metrics::default())));
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream.write_all(b"GET /hea").await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.write_all(b"lthz HTTP/1.1\r\nHo").await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
            stream.write_all(b"st: x\r\n\r\n").await.unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).await.unwrap();
            answer
        });
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    }

    #[test]
    fn only_get_and_head_of_metrics_are_served() {
        let metrics = Metrics::default();
        let status = |head: &str| {
            let response = http_response(head.as_bytes(), &metrics);
            response.lines().next().unwrap_or_default().to_owned()
        };
        assert_eq!(
            status("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            "HTTP/1.1 200 OK"
        );
        assert_eq!(
            status("GET /metrics?x=1 HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 200 OK"
        );
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), "HTTP/1.1 404 Not Found");
        assert_eq!(
            status("GET /metricsx HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 404 Not Found"
        );
        assert_eq!(
            status("POST /metrics HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 405 Method Not Allowed"
        );
        assert_eq!(status("garbage"), "HTTP/1.1 400 Bad Request");
        let head = http_response(b"HEAD /metrics HTTP/1.1\r\n\r\n", &metrics);
        assert!(head.ends_with("\r\n\r\n"), "HEAD has no body: {head}");
        assert!(
            http_response(b"POST /metrics HTTP/1.1\r\n\r\n", &metrics).contains("Allow: GET, HEAD")
        );
    }

    /// /healthz answers while the process runs; /readyz only while the node is connected and
    /// subscribed and its store answers, saying why not otherwise.
    #[test]
    fn the_probes_say_alive_always_and_ready_when_connected_with_a_store() {
        let metrics = Metrics::default();
        let get =
            |path: &str| http_response(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes(), &metrics);
        metrics.store_call(true, 0);
        assert!(get("/healthz").starts_with("HTTP/1.1 200 OK"));
        let waiting = get("/readyz");
        assert!(waiting.starts_with("HTTP/1.1 503"), "{waiting}");
        assert!(waiting.ends_with("not connected to the broker (or not subscribed yet)\n"));
        metrics.set_subscribed(true);
        assert!(get("/readyz").starts_with("HTTP/1.1 200 OK"));
        metrics.store_call(false, 0);
        let redis_down = get("/readyz");
        assert!(
            redis_down.ends_with("the store (Redis) does not answer\n"),
            "{redis_down}"
        );
        assert!(get("/healthz").starts_with("HTTP/1.1 200 OK"));
        metrics.store_call(true, 0);
        metrics.set_subscribed(false);
        assert!(get("/readyz").starts_with("HTTP/1.1 503"));
    }

    #[test]
    fn every_command_has_its_own_label() {
        for command in Command::ALL {
            assert_eq!(COMMANDS[command as usize], command.as_str());
        }
    }

    #[test]
    fn requests_are_counted_by_command_and_outcome_and_the_histogram_is_cumulative() {
        let metrics = Metrics::default();
        let get = Outcome::Answered {
            command: Some(Command::Get),
            error: None,
        };
        metrics.record(&get, Duration::from_micros(30));
        metrics.record(&get, Duration::from_millis(3));
        metrics.record(
            &Outcome::Dropped(DropReason::NoResponseTopic),
            Duration::from_secs(5),
        );
        assert_eq!(metrics.requests("GET", "ok"), 2);
        assert_eq!(metrics.requests("ENVELOPE", "dropped"), 1);
        assert_eq!(metrics.requests("SET", "ok"), 0);
        assert_eq!(metrics.requests("NOPE", "ok"), 0);
        let text = metrics.render();
        for line in [
            "mqstore_requests_total{command=\"GET\",outcome=\"ok\"} 2",
            "mqstore_requests_total{command=\"ENVELOPE\",outcome=\"dropped\"} 1",
            "mqstore_request_duration_seconds_bucket{le=\"0.00005\"} 1",
            "mqstore_request_duration_seconds_bucket{le=\"0.0025\"} 1",
            "mqstore_request_duration_seconds_bucket{le=\"0.005\"} 2",
            "mqstore_request_duration_seconds_bucket{le=\"1\"} 2",
            "mqstore_request_duration_seconds_bucket{le=\"+Inf\"} 3",
            "mqstore_request_duration_seconds_count 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        assert!(!text.contains("command=\"SET\""), "{text}");
    }

    /// As Prometheus client libraries serve them: the process's own figures, read now.
    #[test]
    fn the_process_metrics_and_the_build_info_are_served() {
        let text = Metrics::default().render();
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name} in {text}"))
                .parse()
                .unwrap()
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let started = value("process_start_time_seconds");
        assert!(
            started <= now + 1.0 && started > now - 86_400.0,
            "{started} vs {now}"
        );
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_virtual_memory_bytes") >= value("process_resident_memory_bytes"));
        let (open, max) = (value("process_open_fds"), value("process_max_fds"));
        assert!(open >= 3.0 && open < max, "{open} of {max}");
        assert!(value("process_cpu_seconds_total") >= 0.0);
        assert!(text.contains("# TYPE process_cpu_seconds_total counter"));
        let version = format!(
            "mqstore_build_info{{version=\"{}\",commit=\"",
            env!("CARGO_PKG_VERSION")
        );
        assert!(text.contains(&version), "{text}");
    }
}
