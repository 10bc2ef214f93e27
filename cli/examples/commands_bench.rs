//! Commands per second and latency through one node (a `Commander`), in direct mode (MQTT 5
//! devices answering to the node's response topic) and registry mode (DJI-style devices
//! answering on a fixed topic), with the memory and the Redis registry; against a baseline
//! measured in the same run: plain MQTT 5 request/response from a bare client to the same
//! echo device through the same broker (the most any command service could do there).
//!
//!   mosquitto -p 18860 & redis-server --port 18861 --save '' &
//!   cargo run --release -p mqstore --example commands_bench -- 18860 redis://127.0.0.1:18861
//!
//! Or `bash scripts/bench-commands`, which starts both on free ports.
//!
//! With `--service` instead of a Redis URL it measures the command service that serves the
//! broker (`mqstore serve` beside it, or the plugin inside mosquitto) as callers use it: a
//! client's `command` calls to an MQTT 5 echo device, against the same baseline
//! (`bash scripts/bench-plugin` runs it against both).

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstore_core::commands::{CommandRequest, MQTT5};
use mqstore_net::BrokerConfig;
use mqstore_server::commander::{Commander, CommanderConfig, RegistryConfig};
use mqstore_server::redis_store::RedisConfig;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event};
use tokio::sync::oneshot;

/// One round's measurement of one target, after its warm-up.
const MEASURE: Duration = Duration::from_secs(1);
const WARM_UP: Duration = Duration::from_millis(300);
/// Rounds, each measuring every target in turn.
const ROUNDS: u32 = 3;

/// A bare MQTT 5 requester: publishes to `dev/{n}/cmd` with a response topic and correlation
/// data, and completes each request when its answer comes.
#[derive(Clone)]
struct Raw {
    client: AsyncClient,
    waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>>,
    next: Arc<std::sync::atomic::AtomicU64>,
}

impl Raw {
    async fn start(port: u16) -> Self {
        let (client, mut eventloop) =
            AsyncClient::new(common::options("raw-requester", port), 4096);
        client
            .subscribe("bench/raw/response", QoS::AtLeastOnce)
            .await
            .unwrap();
        let waiting: Arc<Mutex<HashMap<u64, oneshot::Sender<()>>>> = Arc::default();
        let (ready, subscribed) = oneshot::channel();
        let table = waiting.clone();
        tokio::spawn(async move {
            let mut ready = Some(ready);
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::SubAck(_))) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(());
                        }
                    }
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let corr = p
                            .properties
                            .and_then(|p| p.correlation_data)
                            .unwrap_or_default();
                        let id = u64::from_le_bytes(corr[..8].try_into().unwrap_or_default());
                        if let Some(done) = table.lock().unwrap().remove(&id) {
                            let _ = done.send(());
                        }
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        subscribed.await.unwrap();
        Self {
            client,
            waiting,
            next: Arc::default(),
        }
    }

    async fn request(&self, n: usize) {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (done, answered) = oneshot::channel();
        self.waiting.lock().unwrap().insert(id, done);
        let mut corr = id.to_le_bytes().to_vec();
        corr.resize(16, 0);
        let props = PublishProperties {
            response_topic: Some("bench/raw/response".into()),
            correlation_data: Some(Bytes::from(corr)),
            message_expiry_interval: Some(10),
            ..Default::default()
        };
        self.client
            .publish_with_properties(
                format!("dev/{}/cmd", n % 16),
                QoS::AtLeastOnce,
                false,
                "{}",
                props,
            )
            .await
            .unwrap();
        let _ = tokio::time::timeout(Duration::from_secs(10), answered).await;
    }
}

enum Target {
    Raw(Raw),
    Node(Commander, &'static str),
    /// A caller of the command service that serves the broker.
    Service(mqstore_net::client::Client),
}

impl Target {
    async fn one(&self, n: usize) -> bool {
        match self {
            Target::Raw(raw) => {
                raw.request(n).await;
                true
            }
            Target::Node(node, profile) => {
                let request = match *profile {
                    MQTT5 => CommandRequest::new(format!("dev/{}/cmd", n % 16), "{}"),
                    _ => CommandRequest {
                        profile: (*profile).into(),
                        // The device echoes it: `tid` (written in by the profile) and result 0.
                        ..CommandRequest::new(
                            format!("thing/product/SN{}/services", n % 16),
                            r#"{"data":{"result":0}}"#,
                        )
                    },
                };
                node.invoke(request)
                    .await
                    .is_ok_and(|r| r.status == mqstore_core::commands::Status::Succeeded)
            }
            Target::Service(caller) => {
                let request = CommandRequest::new(format!("dev/{}/cmd", n % 16), "{}");
                caller
                    .command(request)
                    .await
                    .is_ok_and(|r| r.status == mqstore_core::commands::Status::Succeeded)
            }
        }
    }
}

/// The latencies of the commands that began and ended within one round of [`MEASURE`] with
/// `in_flight` at once (after [`WARM_UP`]), and how many of them failed.
async fn measure(target: Arc<Target>, in_flight: usize) -> (Vec<Duration>, u64) {
    let start = Instant::now();
    let mut workers = Vec::new();
    for w in 0..in_flight {
        let target = target.clone();
        workers.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut n = w;
            while start.elapsed() < WARM_UP + MEASURE {
                let began = Instant::now();
                let ok = target.one(n).await;
                if began > start + WARM_UP && start.elapsed() < WARM_UP + MEASURE {
                    latencies.push(began.elapsed());
                    errors += u64::from(!ok);
                }
                n += in_flight;
            }
            (latencies, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for worker in workers {
        let (latencies, e) = worker.await.unwrap();
        all.extend(latencies);
        errors += e;
    }
    (all, errors)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let port: u16 = args
        .next()
        .and_then(|p| p.parse().ok())
        .expect("usage: commands_bench PORT REDIS_URL [WAIT_REPLICAS]");
    let second = args
        .next()
        .expect("usage: commands_bench PORT (REDIS_URL | --service)");
    common::echo_device(port, "echo-mqtt5", "dev/+/cmd").await;
    if second == "--service" {
        let mut options =
            mqstore_net::client::ClientOptions::new("bench-caller", "127.0.0.1", port);
        options.timeout = Duration::from_secs(10);
        let caller = mqstore_net::client::Client::connect(options).await.unwrap();
        let targets = vec![
            (
                "echo baseline (bare MQTT 5 request/response)",
                Arc::new(Target::Raw(Raw::start(port).await)),
            ),
            (
                "a caller through the command service (mqtt5)",
                Arc::new(Target::Service(caller)),
            ),
        ];
        return report(&targets).await;
    }
    let mut redis = RedisConfig::parse(&second).unwrap();
    // Optional: replicas every registry write waits for (`--redis-wait-replicas`).
    if let Some(replicas) = args.next() {
        redis.wait_replicas = replicas.parse().expect("WAIT_REPLICAS: a number");
    }
    common::echo_device(port, "echo-dji", "thing/product/+/services").await;
    let broker = BrokerConfig {
        port,
        ..BrokerConfig::default()
    };
    // Each node knows only the profile it is measured with: a node that knew them all would
    // also read (and, on Redis, look up) every answer of the other nodes' DJI devices.
    let node = |id: &str, registry, profile: &'static str| {
        let mut config = CommanderConfig {
            registry,
            ..CommanderConfig::new(broker.clone(), id)
        };
        config.profiles.retain(|name| name == profile);
        async move { Commander::start(config, None).await.unwrap() }
    };
    let targets = [
        (
            "echo baseline (bare MQTT 5 request/response)",
            Target::Raw(Raw::start(port).await),
        ),
        (
            "direct (mqtt5), memory registry",
            Target::Node(
                node("direct-memory", RegistryConfig::Memory, MQTT5).await,
                MQTT5,
            ),
        ),
        (
            "direct (mqtt5), Redis registry",
            Target::Node(
                node("direct-redis", RegistryConfig::Redis(redis.clone()), MQTT5).await,
                MQTT5,
            ),
        ),
        (
            "registry (dji), memory registry",
            Target::Node(
                node("registry-memory", RegistryConfig::Memory, "dji").await,
                "dji",
            ),
        ),
        (
            "registry (dji), Redis registry",
            Target::Node(
                node("registry-redis", RegistryConfig::Redis(redis), "dji").await,
                "dji",
            ),
        ),
    ];
    let targets: Vec<(&str, Arc<Target>)> =
        targets.into_iter().map(|(n, t)| (n, Arc::new(t))).collect();
    report(&targets).await;
}

/// Measures each target at 1 and 64 in flight, the first being the baseline: [`ROUNDS`]
/// rounds, each measuring every target in turn, so that what the machine does meanwhile (its
/// speed moves from second to second) falls on every target alike.
async fn report(targets: &[(&str, Arc<Target>)]) {
    println!("| mode | in flight | commands/s | p50 | p99 | vs echo | errors |");
    println!("|---|---|---|---|---|---|---|");
    for in_flight in [1, 64] {
        let mut samples: Vec<(Vec<Duration>, u64)> = vec![(Vec::new(), 0); targets.len()];
        for _ in 0..ROUNDS {
            for ((_, target), (latencies, errors)) in targets.iter().zip(&mut samples) {
                let (more, failed) = measure(target.clone(), in_flight).await;
                latencies.extend(more);
                *errors += failed;
            }
        }
        let mut baseline = 0.0;
        for ((name, _), (mut latencies, errors)) in targets.iter().zip(samples) {
            latencies.sort();
            let pick = |p: f64| {
                latencies
                    .get(((latencies.len().max(1) - 1) as f64 * p) as usize)
                    .copied()
                    .unwrap_or_default()
            };
            let rate = latencies.len() as f64 / (MEASURE.as_secs_f64() * ROUNDS as f64);
            if baseline == 0.0 {
                baseline = rate;
            }
            println!(
                "| {name} | {in_flight} | {rate:.0} | {:.2} ms | {:.2} ms | {:.2}× | {errors} |",
                pick(0.5).as_secs_f64() * 1e3,
                pick(0.99).as_secs_f64() * 1e3,
                rate / baseline
            );
        }
    }
}
