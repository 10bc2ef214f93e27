//! Any order across topics, live. MQTT brokers keep order per topic only: a clustered broker
//! (or Apache ActiveMQ Artemis, tried as a new user would) delivers a KEYNOTIFY notification
//! after the answer to the SET that caused it, and after the answer to the next request. The
//! client reaches mosquitto here through a proxy that does exactly that: it holds every
//! notification back while answers pass, keeping each topic's own order. Observers must see
//! each change once, in version order, whatever the order across topics.

#[macro_use]
mod broker;
mod calls;

use std::time::Duration;

use broker::Broker;
use bytes::BytesMut;
use calls::{WAIT, next_change, ready_client};
use mqstore_core::hlc::Hlc;
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, KeyChange, Observation, SetOptions};
use mqstore_server::{ServerConfig, ServerHandle, spawn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How the proxy holds packets back.
#[derive(Clone, Copy)]
enum Hold {
    /// Each by the same time: their order among themselves holds (a topic's order, as on a
    /// broker that keeps order per topic only); only their order against the others changes.
    Fixed(Duration),
    /// Each by its own time up to this: their order among themselves changes too, as when
    /// several server nodes publish on one topic (each publisher's order holds, not theirs).
    Jitter(Duration),
}

/// A TCP proxy in front of the broker that holds back the broker's PUBLISH packets whose
/// topic `held` picks, and passes everything else at once.
struct ReorderingProxy {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ReorderingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The topic of an MQTT PUBLISH packet (`None` for other packets).
fn publish_topic(packet: &[u8]) -> Option<&str> {
    if packet[0] >> 4 != 3 {
        return None;
    }
    let mut at = 1;
    while packet[at] & 0x80 != 0 {
        at += 1;
    }
    at += 1;
    let len = u16::from_be_bytes([packet[at], packet[at + 1]]) as usize;
    std::str::from_utf8(packet.get(at + 2..at + 2 + len)?).ok()
}

/// The length of the whole packet at the start of `buf`, once its fixed header is in.
fn packet_len(buf: &[u8]) -> Option<usize> {
    let mut remaining = 0usize;
    for (i, byte) in buf.iter().skip(1).take(4).enumerate() {
        remaining |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(1 + i + 1 + remaining);
        }
    }
    None
}

impl ReorderingProxy {
    async fn start(upstream: u16, delay: Hold, held: fn(&str) -> bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    continue;
                };
                tokio::spawn(Self::relay(client, broker, delay, held));
            }
        });
        Self { port, task }
    }

    async fn relay(client: TcpStream, broker: TcpStream, delay: Hold, held: fn(&str) -> bool) {
        let (mut from_client, mut to_client) = client.into_split();
        let (mut from_broker, mut to_broker) = broker.into_split();
        tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from_client, &mut to_broker).await;
            let _ = to_broker.shutdown().await;
        });
        let (out, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
        let (later, mut delayed) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
        tokio::spawn(async move {
            while let Some(packet) = outgoing.recv().await {
                if to_client.write_all(&packet).await.is_err() {
                    break;
                }
            }
        });
        let out_later = out.clone();
        tokio::spawn(async move {
            while let Some((due, packet)) = delayed.recv().await {
                tokio::time::sleep_until(due).await;
                if out_later.send(packet).is_err() {
                    break;
                }
            }
        });
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        loop {
            while let Some(len) = packet_len(&buf).filter(|len| buf.len() >= *len) {
                let packet = buf.split_to(len).to_vec();
                let sent = match publish_topic(&packet) {
                    Some(topic) if held(topic) => match delay {
                        Hold::Fixed(delay) => later.send((Instant::now() + delay, packet)).is_ok(),
                        Hold::Jitter(most) => {
                            // xorshift: a spread of delays, the same in every run.
                            seed ^= seed << 13;
                            seed ^= seed >> 7;
                            seed ^= seed << 17;
                            let delay = most.mul_f64((seed % 1000) as f64 / 1000.0);
                            let out = out.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(delay).await;
                                let _ = out.send(packet);
                            });
                            true
                        }
                    },
                    _ => out.send(packet).is_ok(),
                };
                if !sent {
                    return;
                }
            }
            match from_broker.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            buf.reserve(16 * 1024);
        }
    }
}

fn notification(topic: &str) -> bool {
    topic.contains("/command/notify/")
}

async fn server(port: u16) -> ServerHandle {
    let broker = BrokerConfig {
        port,
        ..BrokerConfig::default()
    };
    spawn(ServerConfig::new(broker, "node-r"))
        .await
        .expect("the server starts")
}

/// Changes of `observation` until (and with) the one whose value is `last`.
async fn changes_until(observation: &mut Observation, last: &str) -> Vec<KeyChange> {
    let mut seen = Vec::new();
    loop {
        let change = next_change(observation).await;
        let done = change.value.as_deref() == Some(last.as_bytes());
        seen.push(change);
        if done {
            return seen;
        }
    }
}

/// Each version once, never going back.
fn assert_versions_go_forward(changes: &[KeyChange]) {
    let versions: Vec<&Hlc> = changes.iter().filter_map(|c| c.version.as_ref()).collect();
    assert_eq!(
        versions.len(),
        changes.len(),
        "every change has a version: {changes:?}"
    );
    for pair in versions.windows(2) {
        assert!(
            pair[0] < pair[1],
            "versions went back or repeated: {changes:?}"
        );
    }
}

#[tokio::test]
async fn the_proxy_delivers_notifications_after_the_answers_that_follow_them() {
    // The premise of the tests below: through the proxy, a SET's answer and the next
    // request's answer both come before the SET's notification (held back 2 s here, far
    // longer than the two round trips take).
    let broker = Broker::start();
    let _server = server(broker.port).await;
    let proxy = ReorderingProxy::start(
        broker.port,
        Hold::Fixed(Duration::from_secs(2)),
        notification,
    )
    .await;
    let client = ready_client(proxy.port, "premise").await;
    let mut changes = client.observe("k").await.unwrap();
    client.set("k", "v1", SetOptions::default()).await.unwrap();
    assert!(client.get("k").await.unwrap().is_some());
    let early = tokio::time::timeout(Duration::ZERO, changes.next()).await;
    assert!(
        early.is_err(),
        "the notification came before the answers: {early:?}"
    );
    let change = next_change(&mut changes).await;
    assert_eq!(change.value.as_deref(), Some(&b"v1"[..]));
}

#[tokio::test]
async fn a_writer_that_observes_its_own_key_sees_each_write_once_in_order() {
    let broker = Broker::start();
    let _server = server(broker.port).await;
    let proxy = ReorderingProxy::start(
        broker.port,
        Hold::Fixed(Duration::from_millis(40)),
        notification,
    )
    .await;
    let client = ready_client(proxy.port, "own-writer").await;
    let mut changes = client.observe("counter").await.unwrap();
    let mut written = Vec::new();
    for i in 1..=30 {
        let value = format!("v{i}");
        let result = client
            .set("counter", value.clone(), SetOptions::default())
            .await
            .unwrap();
        written.push((value, result.version));
        // The next request's answer overtakes the notification too.
        assert!(client.get("counter").await.unwrap().is_some());
    }
    let seen = changes_until(&mut changes, "v30").await;
    assert_versions_go_forward(&seen);
    let values: Vec<&[u8]> = seen.iter().map(|c| c.value.as_deref().unwrap()).collect();
    let expected: Vec<&[u8]> = written.iter().map(|(v, _)| v.as_bytes()).collect();
    assert_eq!(values, expected, "each write reported once, in order");
    for (change, (_, version)) in seen.iter().zip(&written) {
        assert_eq!(
            change.version.as_ref(),
            version.as_ref(),
            "the write's own version"
        );
        assert!(!change.synthetic);
        assert!(!change.gap, "every write was seen: {change:?}");
    }
}

#[tokio::test]
async fn an_observation_that_starts_amid_writes_never_goes_back() {
    // The observer's first read crosses notifications of writes made meanwhile (held back
    // by the proxy): the read and the notifications are resolved by version.
    let broker = Broker::start();
    let _server = server(broker.port).await;
    let proxy = ReorderingProxy::start(
        broker.port,
        Hold::Fixed(Duration::from_millis(60)),
        notification,
    )
    .await;
    let writer: Client = ready_client(broker.port, "writer").await;
    let observer = ready_client(proxy.port, "observer").await;
    let writes = tokio::spawn(async move {
        for i in 1..=60 {
            writer
                .set("busy", format!("w{i}"), SetOptions::default())
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        writer
            .set("busy", "end", SetOptions::default())
            .await
            .unwrap();
        writer
    });
    tokio::time::sleep(Duration::from_millis(40)).await;
    let mut changes = observer.observe("busy").await.unwrap();
    let seen = tokio::time::timeout(WAIT, changes_until(&mut changes, "end"))
        .await
        .unwrap();
    writes.await.unwrap();
    assert_versions_go_forward(&seen);
    assert!(seen.iter().all(|c| !c.synthetic), "{seen:?}");
    // Each change it saw replaced the one before (or the value its first read found).
    assert!(seen.iter().all(|c| !c.gap), "{seen:?}");
}

#[tokio::test]
async fn notifications_out_of_order_among_themselves_never_take_an_observer_back() {
    // As with several server nodes publishing on one topic: notifications overtake each
    // other. The observer drops what is not newer than what it saw, so the versions it sees
    // only go forward, and it ends on the last write; and each change it sees says whether
    // writes were made since the one it saw before (`gap`), exactly when they were.
    let broker = Broker::start();
    let _server = server(broker.port).await;
    let proxy = ReorderingProxy::start(
        broker.port,
        Hold::Jitter(Duration::from_millis(80)),
        notification,
    )
    .await;
    let writer = ready_client(broker.port, "writer").await;
    let observer = ready_client(proxy.port, "observer").await;
    let mut changes = observer.observe("shuffled").await.unwrap();
    let mut written = Vec::new();
    for i in 1..=40 {
        let set = writer
            .set("shuffled", format!("s{i}"), SetOptions::default())
            .await
            .unwrap();
        written.push(set.version.expect("a version"));
    }
    let last = written.last().cloned();
    let mut seen: Vec<KeyChange> = Vec::new();
    while seen.last().and_then(|c| c.version.as_ref()) != last.as_ref() {
        seen.push(next_change(&mut changes).await);
    }
    assert_versions_go_forward(&seen);
    assert_eq!(seen.last().unwrap().value.as_deref(), Some(&b"s40"[..]));
    // The key was absent when the observation began.
    let mut before: Option<&Hlc> = None;
    let mut gaps = 0;
    for change in &seen {
        let version = change.version.as_ref().unwrap();
        let missed = written
            .iter()
            .any(|w| w < version && before.is_none_or(|before| w > before));
        assert_eq!(change.gap, missed, "{change:?} after {before:?}");
        gaps += usize::from(missed);
        before = Some(version);
    }
    assert!(
        gaps > 0 && seen.len() < written.len(),
        "the premise: some notifications overtook others ({} of {} seen)",
        seen.len(),
        written.len()
    );
}
