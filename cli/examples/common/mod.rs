//! What the examples share.

#![allow(dead_code)] // each example uses some of it

use std::sync::Arc;
use std::time::{Duration, Instant};

use mqstore_net::client::{Client, ClientOptions};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use tokio::sync::oneshot;

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

/// Options with Nagle's algorithm off (as mqstore's own connections: with it on, one request
/// in flight waits tens of milliseconds).
pub fn options(id: &str, port: u16) -> MqttOptions {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    let mut network = rumqttc::NetworkOptions::new();
    network.set_tcp_nodelay(true);
    options.set_network_options(network);
    options
}

/// An echo device: answers every command at once, MQTT 5 style (response topic + correlation
/// data) or DJI style (`…/services_reply`, the same payload, which carries `tid`).
pub async fn echo_device(port: u16, id: &str, filter: &str) {
    let (client, mut eventloop) = AsyncClient::new(options(id, port), 4096);
    client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
    let (ready, subscribed) = oneshot::channel();
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
                    let props = p.properties.unwrap_or_default();
                    let topic = String::from_utf8_lossy(&p.topic).into_owned();
                    let (topic, props) = match props.response_topic {
                        Some(response) => (
                            response,
                            PublishProperties {
                                correlation_data: props.correlation_data,
                                user_properties: vec![("__stat".into(), "200".into())],
                                ..Default::default()
                            },
                        ),
                        None => (format!("{topic}_reply"), PublishProperties::default()),
                    };
                    let _ = client.try_publish_with_properties(
                        topic,
                        QoS::AtLeastOnce,
                        false,
                        p.payload,
                        props,
                    );
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    subscribed.await.unwrap();
}

/// How many file descriptors process `pid` has open; 0 where /proc has no answer.
pub fn open_fds(pid: &str) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}
