//! `mqstore bench`: a SET/GET mix through the broker against the running state store, and the
//! same load against a plain echo responder through the same broker in the same run — the
//! most any server behind that broker could do. Reports throughput and latency percentiles,
//! and the ratios.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event};
use tokio::task::JoinHandle;

use mqstore_core::client::ClientError;
use mqstore_core::envelope::{self, Checked, Publish};
use mqstore_core::hlc::Hlc;
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, ClientOptions, SetOptions};
use mqstore_net::host::{from_mqtt, try_publish};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The broker both targets are reached through.
    pub broker: BrokerConfig,
    /// Requests in flight at once, one run each (e.g. 1, 16, 256).
    pub in_flight: Vec<usize>,
    /// How long each target is measured at each level (split into `rounds`).
    pub duration: Duration,
    /// Turns each target takes at each level, alternating with the other.
    pub rounds: u32,
    /// Unmeasured load before the rounds, per target and level.
    pub warm_up: Duration,
    /// Client connections the requests share (at most one per request in flight).
    pub connections: usize,
    /// Keys the load spreads over.
    pub keys: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// Percent of requests that are SETs (the rest are GETs).
    pub set_percent: u8,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            broker: BrokerConfig::default(),
            in_flight: vec![1, 16, 256],
            duration: Duration::from_secs(5),
            rounds: 10,
            warm_up: Duration::from_millis(500),
            connections: 16,
            keys: 1000,
            value_size: 64,
            set_percent: 50,
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// Requests answered.
    pub ops: u64,
    /// Requests that failed or got no answer.
    pub errors: u64,
    /// Requests answered per second.
    pub ops_per_sec: f64,
    /// Median latency.
    pub p50: Duration,
    /// 99th-percentile latency.
    pub p99: Duration,
    /// 99.9th-percentile latency.
    pub p999: Duration,
}

/// The state store and the echo responder at one level of requests in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Requests in flight at once.
    pub in_flight: usize,
    /// The state store's figures.
    pub mqstore: Figures,
    /// The echo responder's figures (the baseline).
    pub echo: Figures,
}

impl Row {
    /// mqstore's throughput as a share of echo's (target ≥ 0.9).
    pub fn throughput_ratio(&self) -> f64 {
        self.mqstore.ops_per_sec / self.echo.ops_per_sec.max(f64::MIN_POSITIVE)
    }

    /// mqstore's p99 latency over echo's (target ≤ 1.2).
    pub fn p99_ratio(&self) -> f64 {
        self.mqstore.p99.as_secs_f64() / self.echo.p99.as_secs_f64().max(1e-9)
    }
}

/// The topic the echo responder serves.
const ECHO_TOPIC: &str = "mqstore/bench/echo/command/invoke";

/// Where the benchmark is, for whoever shows it (the command draws a bar on a terminal).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// A level starts: `rounds` rounds with `in_flight` requests in flight.
    Level {
        /// Requests in flight at this level.
        in_flight: usize,
        /// Rounds at this level.
        rounds: u32,
    },
    /// A round of the level ended; the operations each target completed so far.
    Round {
        /// Requests in flight at this level.
        in_flight: usize,
        /// The round that ended (from 1).
        round: u32,
        /// Rounds at this level.
        rounds: u32,
        /// Requests the state store answered so far.
        mqstore_ops: usize,
        /// Requests the echo responder answered so far.
        echo_ops: usize,
    },
    /// The level's rounds are over.
    LevelDone {
        /// Requests in flight at the level that ended.
        in_flight: usize,
    },
}

/// Runs the benchmark, telling `progress` where it is. At each level both targets get their
/// own connections and a warm-up, then take turns: `rounds` short runs each, alternating, so
/// that whatever else the machine does in the meantime falls on both alike.
pub async fn run(
    config: &BenchConfig,
    mut progress: impl FnMut(Progress),
) -> Result<Vec<Row>, ClientError> {
    let echo = EchoResponder::start(&config.broker, config.value_size).await?;
    let rounds = config.rounds.max(1);
    let slice = config.duration / rounds;
    let mut rows = Vec::new();
    for &level in &config.in_flight {
        let mut mqstore = Load::connect(config, level, None).await?;
        let mut echo_load = Load::connect(config, level, Some(ECHO_TOPIC)).await?;
        for load in [&mut mqstore, &mut echo_load] {
            load.drive(config, config.warm_up).await;
            load.reset();
        }
        progress(Progress::Level {
            in_flight: level,
            rounds,
        });
        for round in 1..=rounds {
            mqstore.drive(config, slice).await;
            echo_load.drive(config, slice).await;
            progress(Progress::Round {
                in_flight: level,
                round,
                rounds,
                mqstore_ops: mqstore.latencies_us.len(),
                echo_ops: echo_load.latencies_us.len(),
            });
        }
        progress(Progress::LevelDone { in_flight: level });
        rows.push(Row {
            in_flight: level,
            mqstore: mqstore.finish().await,
            echo: echo_load.finish().await,
        });
    }
    drop(echo);
    Ok(rows)
}

/// The report as a table.
pub fn render(rows: &[Row]) -> String {
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
    let mut out = String::from(
        "in flight | mqstore ops/s | p50 ms | p99 ms | p999 ms | echo ops/s | p50 ms | p99 ms | p999 ms | throughput vs echo | p99 vs echo\n",
    );
    for r in rows {
        out.push_str(&format!(
            "{:>9} | {:>13.0} | {:>6} | {:>6} | {:>7} | {:>10.0} | {:>6} | {:>6} | {:>7} | {:>17.1}% | {:>10.2}x\n",
            r.in_flight,
            r.mqstore.ops_per_sec,
            ms(r.mqstore.p50),
            ms(r.mqstore.p99),
            ms(r.mqstore.p999),
            r.echo.ops_per_sec,
            ms(r.echo.p50),
            ms(r.echo.p99),
            ms(r.echo.p999),
            r.throughput_ratio() * 100.0,
            r.p99_ratio(),
        ));
    }
    out.push_str("targets: throughput >= 90% of echo's, p99 <= 1.2x echo's\n");
    out
}

/// One target's connections at one level, and what its runs measured so far.
struct Load {
    in_flight: usize,
    clients: Vec<Client>,
    latencies_us: Vec<u32>,
    errors: u64,
    elapsed: Duration,
}

impl Load {
    async fn connect(
        config: &BenchConfig,
        in_flight: usize,
        request_topic: Option<&str>,
    ) -> Result<Self, ClientError> {
        let target = request_topic.map_or("mqstore", |_| "echo");
        let connections = config.connections.clamp(1, in_flight.max(1));
        let mut clients = Vec::with_capacity(connections);
        for i in 0..connections {
            let mut options = ClientOptions::new(
                format!(
                    "mqstore-bench-{target}-{in_flight}-{i}-{}",
                    std::process::id()
                ),
                config.broker.host.clone(),
                config.broker.port,
            );
            options.broker = config.broker.clone();
            if let Some(topic) = request_topic {
                options.request_topic = Some(topic.to_owned());
            }
            clients.push(Client::connect(options).await?);
        }
        Ok(Self {
            in_flight,
            clients,
            latencies_us: Vec::new(),
            errors: 0,
            elapsed: Duration::ZERO,
        })
    }

    /// Keeps `in_flight` requests going for `duration`, adding to the figures.
    async fn drive(&mut self, config: &BenchConfig, duration: Duration) {
        let value = Bytes::from(vec![b'v'; config.value_size]);
        let stop = Arc::new(AtomicBool::new(false));
        let started = Instant::now();
        let seed = self.latencies_us.len() as u64;
        let workers: Vec<JoinHandle<(Vec<u32>, u64)>> = (0..self.in_flight)
            .map(|w| {
                let client = self.clients[w % self.clients.len()].clone();
                let (stop, value) = (stop.clone(), value.clone());
                let (keys, set_percent) = (config.keys.max(1), u64::from(config.set_percent));
                tokio::spawn(async move {
                    let mut latencies = Vec::with_capacity(1 << 12);
                    let mut errors = 0;
                    // A cheap deterministic spread over keys and operations.
                    let mut x = (w as u64 + 1 + seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    while !stop.load(Ordering::Relaxed) {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let key = Bytes::from(format!("bench:{}", x % keys as u64));
                        let begin = Instant::now();
                        let ok = if x % 100 < set_percent {
                            client
                                .set(key, value.clone(), SetOptions::default())
                                .await
                                .is_ok()
                        } else {
                            client.get(key).await.is_ok()
                        };
                        latencies.push(begin.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        errors += u64::from(!ok);
                    }
                    (latencies, errors)
                })
            })
            .collect();
        tokio::time::sleep(duration).await;
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            if let Ok((latencies, errors)) = worker.await {
                self.latencies_us.extend(latencies);
                self.errors += errors;
            }
        }
        self.elapsed += started.elapsed();
    }

    /// Forgets what was measured (after the warm-up).
    fn reset(&mut self) {
        self.latencies_us.clear();
        self.errors = 0;
        self.elapsed = Duration::ZERO;
    }

    async fn finish(mut self) -> Figures {
        for client in self.clients {
            client.close().await;
        }
        self.latencies_us.sort_unstable();
        let latencies = &self.latencies_us;
        let pct = |p: f64| {
            let i = ((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
            Duration::from_micros(u64::from(latencies.get(i).copied().unwrap_or(0)))
        };
        let ops = latencies.len() as u64;
        Figures {
            ops,
            errors: self.errors,
            ops_per_sec: ops as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE),
            p50: pct(0.50),
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

/// Answers every request on [`ECHO_TOPIC`] at once, without state, with what the state store
/// would send back, size for size: the same envelope (made by the same code) and, for a GET, a
/// value as long as the ones the load writes (`+OK` to a SET). So the broker and the clients
/// carry the same bytes for both targets, and the difference is the server's own work.
///
/// It runs on a thread of its own with a single-threaded runtime — the shape `mqstore serve`
/// has — so that, like the server, it competes with the load generator for the cores instead
/// of riding on the generator's own worker threads.
struct EchoResponder {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl EchoResponder {
    async fn start(broker: &BrokerConfig, value_size: usize) -> Result<Self, ClientError> {
        let options = broker.options(&format!("mqstore-bench-echo-{}", std::process::id()));
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|_| ClientError::Disconnected)?;
        let thread = std::thread::Builder::new()
            .name("mqstore-bench-echo".into())
            .spawn(move || {
                runtime.block_on(async move {
                    tokio::select! {
                        _ = stopped => {}
                        _ = echo(options, value_size, ready_tx) => {}
                    }
                })
            })
            .map_err(|_| ClientError::Disconnected)?;
        let responder = Self {
            stop: Some(stop),
            thread: Some(thread),
        };
        tokio::time::timeout(Duration::from_secs(10), ready)
            .await
            .map_err(|_| ClientError::Disconnected)?
            .map_err(|_| ClientError::Disconnected)?;
        Ok(responder)
    }
}

impl Drop for EchoResponder {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The echo responder's connection loop: answers inline, as the connection is polled.
async fn echo(
    options: rumqttc::v5::MqttOptions,
    value_size: usize,
    ready: tokio::sync::oneshot::Sender<()>,
) {
    const NODE: &str = "mqstore-bench-echo";
    let set_answer = Bytes::from_static(b"+OK\r\n");
    let mut get_answer = format!("${value_size}\r\n").into_bytes();
    get_answer.extend(std::iter::repeat_n(b'v', value_size));
    get_answer.extend_from_slice(b"\r\n");
    let get_answer = Bytes::from(get_answer);
    let version = Hlc::new(1_700_000_000_000, 1, NODE).ok();
    let (client, mut eventloop) = AsyncClient::new(options, 4096);
    let mut ready = Some(ready);
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                let _ = client.try_subscribe(ECHO_TOPIC, QoS::AtLeastOnce);
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => {
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
            }
            Ok(Event::Incoming(Packet::Publish(request))) => {
                let request = from_mqtt(request);
                let is_set = request.payload.windows(5).any(|w| w == b"\r\nSET");
                let Checked::Accept(invocation) =
                    envelope::check_request(request.qos, request.properties, NODE)
                else {
                    continue;
                };
                let properties =
                    envelope::response_properties(&invocation, 200, version.as_ref(), NODE);
                // Never await inside the loop that drives the connection.
                let _ = try_publish(
                    &client,
                    Publish {
                        topic: invocation.response_topic,
                        payload: if is_set { &set_answer } else { &get_answer }.clone(),
                        qos: 1,
                        properties,
                    },
                    false,
                );
            }
            Ok(_) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}
