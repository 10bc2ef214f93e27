//! Nanoseconds per `Engine::handle` of a SET and a GET with a full envelope: what the server
//! does per request besides the network. Build it in two checkouts to compare versions:
//!
//!   cargo run --release -p mqstore --example handle_bench [request topic]
use bytes::Bytes;
use mqstore_core::codec::{Request, SetRequest};
use mqstore_core::engine::Engine;
use mqstore_core::envelope::{Properties, Publish};
use std::time::Instant;

fn message(topic: &str, payload: Bytes, ts: &str) -> Publish {
    Publish {
        topic: topic.to_owned(),
        payload,
        qos: 1,
        properties: Properties {
            payload_format_indicator: Some(0),
            message_expiry_interval: Some(10),
            content_type: Some("application/octet-stream".into()),
            response_topic: Some(
                "clients/dev-1/services/statestore/_any_/command/invoke/response".into(),
            ),
            correlation_data: Some(Bytes::from_static(&[7; 16])),
            user_properties: vec![
                ("__srcId".into(), "dev-1".into()),
                ("__protVer".into(), "1.0".into()),
                ("__ts".into(), ts.into()),
            ],
        },
    }
}

fn main() {
    let topic = std::env::args()
        .nth(1)
        .unwrap_or_else(|| mqstore_core::topics::INVOKE.to_owned());
    let mut engine = Engine::in_memory("bench").unwrap();
    let now = 1_700_000_000_000u64;
    let ts = format!("{now}:0:dev-1");
    let set = Request::Set(SetRequest::new("bench:1", vec![b'v'; 64])).to_bytes();
    let get = Request::Get {
        key: Bytes::from_static(b"bench:1"),
    }
    .to_bytes();
    let mut out = Vec::new();
    let n = 1_000_000;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        for i in 0..n {
            let payload = if i % 2 == 0 { set.clone() } else { get.clone() };
            out.clear();
            engine.handle(message(&topic, payload, &ts), now, &mut out);
        }
        best = best.min(started.elapsed().as_nanos() as f64 / n as f64);
    }
    println!("{best:.0} ns per request (best of 5 x {n}), topic {topic}");
}
