//! Soak: an honest client and a hostile one against one server, for minutes.
//!
//! The hostile client loops through what the hardening work found (issue 9): unanswerable and
//! wildcard response topics, notification topics too long for MQTT, forged and retained
//! presence, claimed identities, forged SCAN tokens, registrations under made-up ids, floods.
//! Meanwhile an honest client sets, reads and observes; every one of its calls must succeed and
//! every change it makes must be notified. Every 10 s a line reports the process's memory.
//!
//!   mosquitto -p 18840 &      # any MQTT 5 broker (set_tcp_nodelay true for speed)
//!   cargo run --release -p mqstore --example soak -- 18840 600
//!
//! Arguments: the broker's port on 127.0.0.1, and how many seconds to run (default 600).

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstore_core::hlc::{Clock, SystemClock};
use mqstore_core::topics;
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, ClientOptions, SetOptions};
use mqstore_server::{ServerConfig, spawn};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::PublishProperties;
use rumqttc::v5::{AsyncClient, MqttOptions};

fn props(response_topic: &str, user: &[(&str, String)]) -> PublishProperties {
    PublishProperties {
        response_topic: Some(response_topic.to_owned()),
        correlation_data: Some(Bytes::from_static(b"0123456789abcdef")),
        user_properties: user
            .iter()
            .map(|(n, v)| (n.to_string(), v.clone()))
            .collect(),
        ..PublishProperties::default()
    }
}

fn request(items: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", items.len()).into_bytes();
    for item in items {
        out.extend_from_slice(format!("${}\r\n", item.len()).as_bytes());
        out.extend_from_slice(item);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One round of everything the hostile client tries.
async fn hostile_round(c: &AsyncClient, round: u64) {
    let own = topics::response_topic("hostile");
    let now = format!("{}:0:hostile", SystemClock.now_ms());
    let set = request(&[b"SET", b"h/k", b"v"]);
    let invoke = topics::INVOKE;
    let mut sends: Vec<(String, Vec<u8>, PublishProperties)> = vec![
        // §1 unanswerable response topics.
        (
            invoke.into(),
            set.clone(),
            props("", &[("__ts", now.clone())]),
        ),
        (
            invoke.into(),
            set.clone(),
            props("r/+/x", &[("__ts", now.clone())]),
        ),
        (
            invoke.into(),
            set.clone(),
            props("r/#", &[("__ts", now.clone())]),
        ),
        // §1 notification topics MQTT cannot carry.
        (
            invoke.into(),
            request(&[b"KEYNOTIFY", &vec![b'k'; 33_000]]),
            props(&own, &[("__srcId", "hostile".into())]),
        ),
        (
            invoke.into(),
            request(&[b"KEYNOTIFY", b"honest/k"]),
            props(&own, &[("__srcId", "h".repeat(33_000))]),
        ),
        // §3 claiming another id, answering elsewhere, forged SCAN tokens.
        (
            topics::identified_invoke("hostile"),
            set.clone(),
            props(&own, &[("__srcId", "honest".into()), ("__ts", now.clone())]),
        ),
        (
            topics::identified_invoke("hostile"),
            set.clone(),
            props(&topics::response_topic("honest"), &[("__ts", now.clone())]),
        ),
        (
            invoke.into(),
            request(&[b"SCAN", b"*", b"k:honest/k"]),
            props(&own, &[("__srcId", "hostile".into())]),
        ),
        // §5 a timestamp at the counter limit.
        (
            invoke.into(),
            set.clone(),
            props(&own, &[("__ts", now.replace(":0:", ":2147483647:"))]),
        ),
    ];
    // §4 registrations under made-up ids: 1,000 ids × 20 keys at most, well below the
    // default limits, so memory must level off once they are all made.
    for i in 0..20 {
        let n = round * 20 + i;
        sends.push((
            invoke.into(),
            request(&[b"KEYNOTIFY", format!("h/{}", n % 20).as_bytes()]),
            props(&own, &[("__srcId", format!("fake-{}", (n / 20) % 1_000))]),
        ));
    }
    // §4 a burst of writes.
    for i in 0..100 {
        sends.push((
            invoke.into(),
            request(&[b"SET", format!("h/burst/{i}").as_bytes(), b"v"]),
            props(&own, &[("__ts", now.clone())]),
        ));
    }
    for (topic, payload, properties) in sends {
        let _ = c
            .publish_with_properties(topic, QoS::AtLeastOnce, false, payload, properties)
            .await;
    }
    // §2 forged presence for the honest client, live and retained (its identified
    // registrations are out of their reach).
    let _ = c
        .publish(
            topics::presence_topic("honest"),
            QoS::AtLeastOnce,
            false,
            "gone",
        )
        .await;
    let _ = c
        .publish(
            topics::presence_topic("honest"),
            QoS::AtLeastOnce,
            true,
            "gone",
        )
        .await;
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let port: u16 = args.get(1).and_then(|p| p.parse().ok()).unwrap_or(1883);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(600);
    let broker = BrokerConfig {
        port,
        ..BrokerConfig::default()
    };
    let server = spawn(ServerConfig::new(broker.clone(), "soak"))
        .await
        .expect("server");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let honest = Client::connect(ClientOptions::new("honest", "127.0.0.1", port))
        .await
        .expect("honest client");
    let mut changes = honest.observe("honest/k").await.expect("observe");

    let (hostile, mut eventloop) =
        AsyncClient::new(MqttOptions::new("hostile", "127.0.0.1", port), 1024);
    // It never reads its answers; the loop only keeps the connection going (reconnecting
    // after the broker drops it).
    tokio::spawn(async move {
        loop {
            if eventloop.poll().await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    let started = Instant::now();
    let (mut calls, mut failures, mut notified, mut round) = (0u64, 0u64, 0u64, 0u64);
    let mut report = Instant::now();
    println!("seconds,rss_kib,honest_calls,honest_failures,notifications,hostile_rounds");
    while started.elapsed() < Duration::from_secs(seconds) {
        hostile_round(&hostile, round).await;
        round += 1;
        for i in 0..20 {
            let value = format!("{round}-{i}");
            calls += 2;
            match honest
                .set("honest/k", value.clone(), SetOptions::default())
                .await
            {
                Ok(set) if set.applied => {}
                other => {
                    failures += 1;
                    eprintln!("honest SET failed: {other:?}");
                }
            }
            match honest.get("honest/k").await {
                Ok(Some(v)) if v.value == value => {}
                other => {
                    failures += 1;
                    eprintln!("honest GET failed: {other:?}");
                }
            }
            match tokio::time::timeout(Duration::from_secs(5), async {
                loop {
                    match changes.next().await {
                        Some(change) if change.value.as_deref() == Some(value.as_bytes()) => {
                            return true;
                        }
                        Some(_) => continue,
                        None => return false,
                    }
                }
            })
            .await
            {
                Ok(true) => notified += 1,
                _ => {
                    failures += 1;
                    eprintln!("honest notification for {value} missing");
                }
            }
        }
        if report.elapsed() >= Duration::from_secs(10) {
            report = Instant::now();
            println!(
                "{},{},{calls},{failures},{notified},{round}",
                started.elapsed().as_secs(),
                common::rss_kib("self")
            );
        }
    }
    println!("metrics:\n{}", server.metrics.render());
    honest.close().await;
    let _ = server.stop().await;
    if failures > 0 {
        eprintln!("FAILED: {failures} of the honest client's {calls} calls and notifications");
        std::process::exit(1);
    }
    println!("ok: {calls} honest calls and {notified} notifications, all answered");
}
