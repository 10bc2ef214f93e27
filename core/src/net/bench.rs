//! `mqstore bench`: a SET/GET mix through the broker against the running state store, and the
//! same load against a plain echo responder through the same broker in the same run — the
//! most any server behind that broker could do. Reports throughput and latency percentiles,
//! and the ratios.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event};
use tokio::task::JoinHandle;

use super::BrokerConfig;
use super::client::{Client, ClientOptions, SetOptions};
use crate::client::ClientError;
use crate::envelope::{CONTENT_TYPE, property};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    pub broker: BrokerConfig,
    /// Requests in flight at once, one run each (e.g. 1, 16, 256).
    pub in_flight: Vec<usize>,
    /// How long each run lasts.
    pub duration: Duration,
    /// Client connections the requests share (at most one per request in flight).
    pub connections: usize,
    /// Keys the load spreads over.
    pub keys: usize,
    /// Bytes per value.
    pub value_size: usize,
    /// Percent of requests that are SETs (the rest are GETs).
    pub set_percent: u8,
    /// Print progress to stderr.
    pub progress: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        Self {
            broker: BrokerConfig::default(),
            in_flight: vec![1, 16, 256],
            duration: Duration::from_secs(5),
            connections: 16,
            keys: 1000,
            value_size: 64,
            set_percent: 50,
            progress: true,
        }
    }
}

/// One run's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub ops: u64,
    pub errors: u64,
    pub ops_per_sec: f64,
    pub p50: Duration,
    pub p99: Duration,
    pub p999: Duration,
}

/// The state store and the echo responder at one level of requests in flight.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub in_flight: usize,
    pub mqstore: Figures,
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

/// Runs the benchmark: at each level, first against the state store, then against the echo
/// responder.
pub async fn run(config: &BenchConfig) -> Result<Vec<Row>, ClientError> {
    let echo = EchoResponder::start(&config.broker).await?;
    let mut rows = Vec::new();
    for &level in &config.in_flight {
        let mqstore = load(config, level, None).await?;
        let echo_figures = load(config, level, Some(ECHO_TOPIC)).await?;
        rows.push(Row {
            in_flight: level,
            mqstore,
            echo: echo_figures,
        });
    }
    echo.stop();
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

async fn load(
    config: &BenchConfig,
    in_flight: usize,
    request_topic: Option<&str>,
) -> Result<Figures, ClientError> {
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
            options.request_topic = topic.to_owned();
        }
        clients.push(Client::connect(options).await?);
    }
    let value = Bytes::from(vec![b'v'; config.value_size]);
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let workers: Vec<JoinHandle<(Vec<u32>, u64)>> = (0..in_flight)
        .map(|w| {
            let client = clients[w % connections].clone();
            let (stop, done, value) = (stop.clone(), done.clone(), value.clone());
            let (keys, set_percent) = (config.keys.max(1), u64::from(config.set_percent));
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(1 << 14);
                let mut errors = 0;
                // A cheap deterministic spread over keys and operations.
                let mut x = (w as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
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
                    done.fetch_add(1, Ordering::Relaxed);
                }
                (latencies, errors)
            })
        })
        .collect();
    while started.elapsed() < config.duration {
        tokio::time::sleep(Duration::from_millis(250)).await;
        if config.progress {
            let fraction =
                (started.elapsed().as_secs_f64() / config.duration.as_secs_f64()).min(1.0);
            let filled = (fraction * 30.0) as usize;
            eprint!(
                "\r{target:>7} x{in_flight:<4} [{}{}] {:>5.1}s {:>9} ops",
                "#".repeat(filled),
                " ".repeat(30 - filled),
                started.elapsed().as_secs_f64(),
                done.load(Ordering::Relaxed)
            );
            let _ = std::io::stderr().flush();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    let mut errors = 0;
    for worker in workers {
        if let Ok((l, e)) = worker.await {
            latencies.extend(l);
            errors += e;
        }
    }
    let elapsed = started.elapsed();
    if config.progress {
        eprintln!();
    }
    for client in clients {
        client.close().await;
    }
    latencies.sort_unstable();
    let pct = |p: f64| {
        let i = ((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1);
        Duration::from_micros(u64::from(latencies.get(i).copied().unwrap_or(0)))
    };
    let ops = latencies.len() as u64;
    Ok(Figures {
        ops,
        errors,
        ops_per_sec: ops as f64 / elapsed.as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        p999: pct(0.999),
    })
}

/// Answers every request on [`ECHO_TOPIC`] at once with a fixed, valid answer (`+OK` to SET,
/// `$-1` to anything else), the envelope the clients need, and no state.
struct EchoResponder {
    task: JoinHandle<()>,
}

impl EchoResponder {
    async fn start(broker: &BrokerConfig) -> Result<Self, ClientError> {
        let options = broker.options(&format!("mqstore-bench-echo-{}", std::process::id()));
        let (client, mut eventloop) = AsyncClient::new(options, 4096);
        let (ready_tx, ready) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        let _ = client.try_subscribe(ECHO_TOPIC, QoS::AtLeastOnce);
                    }
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(request))) => {
                        let props = request.properties.unwrap_or_default();
                        let Some(response_topic) = props.response_topic else {
                            continue;
                        };
                        let is_set = request.payload.windows(5).any(|w| w == b"\r\nSET");
                        let payload: &'static [u8] = if is_set { b"+OK\r\n" } else { b"$-1\r\n" };
                        let mut user_properties =
                            vec![(property::STATUS.to_owned(), "200".to_owned())];
                        if is_set {
                            user_properties.push((
                                property::TIMESTAMP.to_owned(),
                                "1700000000000:1:echo".to_owned(),
                            ));
                        }
                        let properties = PublishProperties {
                            correlation_data: props.correlation_data,
                            content_type: Some(CONTENT_TYPE.to_owned()),
                            user_properties,
                            ..PublishProperties::default()
                        };
                        // Never await inside the loop that drives the connection.
                        let _ = client.try_publish_with_properties(
                            response_topic,
                            QoS::AtLeastOnce,
                            false,
                            Bytes::from_static(payload),
                            properties,
                        );
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(10), ready)
            .await
            .map_err(|_| ClientError::Disconnected)?
            .map_err(|_| ClientError::Disconnected)?;
        Ok(Self { task })
    }

    fn stop(self) {
        self.task.abort();
    }
}
