//! The command service's cost per command, against the least any request/response service
//! does, measured in the same run: an awaited MQTT 5 command through the service with its
//! registry in memory (the caller's request in, the command out, the device's answer in, the
//! caller's record out) against a bare correlation table doing the same round (an id into a
//! map, the same publish built, the answer's correlation data looked up, its waiter taken
//! out). The rest of a command's cost — the broker, the sockets — is `commands_bench`'s
//! (docs/performance.md).
//! `cargo bench -p mqstore-core --bench commands`

mod support;

use std::collections::HashMap;
use std::hint::black_box;

use bytes::Bytes;
use mqstore_core::commands::{CommandRequest, Profiles, Status};
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::server::commands::{Service, ServiceConfig};
use support::{Comparison, criterion, report};

const NOW: u64 = 1_700_000_000_000;
/// The devices commands go to, in turn.
const DEVICES: usize = 16;

/// Ids as a host's source of randomness gives them (a counter spread over 16 bytes here:
/// the bench measures the service, not the system's random source).
fn next_id() -> [u8; 16] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut id = [0; 16];
    id[..8].copy_from_slice(&n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    id[8..].copy_from_slice(&n.to_le_bytes());
    id
}

/// What an MQTT 5 device answers to a command: the same payload, to its response topic, with
/// its correlation data and a status.
fn answer_to(command: &Publish) -> Publish {
    let properties = &command.properties;
    Publish {
        topic: properties.response_topic.clone().expect("a response topic"),
        payload: command.payload.clone(),
        qos: 1,
        properties: Properties {
            correlation_data: properties.correlation_data.clone(),
            user_properties: vec![("__stat".into(), "200".into())],
            ..Properties::default()
        },
    }
}

/// The baseline: a requester's table of commands waiting for their answers, by correlation
/// data (what a bare MQTT 5 client keeps), and the publish it sends for each.
#[derive(Default)]
struct Correlations {
    waiting: HashMap<u64, u64>,
    next: u64,
}

impl Correlations {
    fn send(&mut self, topic: &str, payload: &Bytes, token: u64) -> Publish {
        self.next += 1;
        self.waiting.insert(self.next, token);
        Publish {
            topic: topic.to_owned(),
            payload: payload.clone(),
            qos: 1,
            properties: Properties {
                message_expiry_interval: Some(10),
                response_topic: Some("clients/bench/commands/answers".into()),
                correlation_data: Some(Bytes::copy_from_slice(&self.next.to_le_bytes())),
                ..Properties::default()
            },
        }
    }

    fn answered(&mut self, answer: &Publish) -> Option<u64> {
        let data = answer.properties.correlation_data.as_deref()?;
        let id = u64::from_le_bytes(data.try_into().ok()?);
        self.waiting.remove(&id)
    }
}

fn main() {
    let topics: Vec<String> = (0..DEVICES).map(|n| format!("dev/{n}/cmd")).collect();
    let payload = Bytes::from_static(br#"{"light":"on"}"#);
    let mut service = Service::new(ServiceConfig {
        node_id: "bench".into(),
        client_id: "bench".into(),
        profiles: Profiles::default(),
        events: false,
        random_id: next_id,
    });
    // One command: out at once, settled by its answer (what is measured is what works). The
    // clock moves 1 ms a command, so that settled records are forgotten as a node forgets
    // them (three timeouts after), and the registry stays at its steady size.
    let mut now = NOW;
    let mut command = |service: &mut Service, n: usize| {
        now += 1;
        let request = CommandRequest::new(topics[n % DEVICES].as_str(), payload.clone());
        service.invoke(request, n as u64, now);
        let out = service.poll_output().expect("the command goes out");
        service.handle(answer_to(&out.publish), None, now);
        let (token, record) = service.poll_answer().expect("its caller is answered");
        while service.poll_seen().is_some() {}
        (token, record)
    };
    let (token, record) = command(&mut service, 7);
    assert_eq!(token, 7);
    let record = record.expect("a record");
    assert_eq!(record.status, Status::Succeeded, "{record:?}");

    let mut table = Correlations::default();
    let publish = table.send(&topics[0], &payload, 7);
    assert_eq!(table.answered(&answer_to(&publish)), Some(7));

    let mut c = criterion();
    let mut g = c.benchmark_group("commands");
    let mut n = 0usize;
    g.bench_function("await/service", |b| {
        b.iter(|| {
            n += 1;
            black_box(command(&mut service, n))
        })
    });
    g.bench_function("await/correlations", |b| {
        b.iter(|| {
            n += 1;
            let publish = table.send(&topics[n % DEVICES], &payload, n as u64);
            let answer = answer_to(black_box(&publish));
            black_box(table.answered(&answer))
        })
    });
    g.finish();
    c.final_summary();

    report(
        "the command service (memory registry)",
        &[Comparison {
            what: "an awaited MQTT 5 command: request in, command out, answer in, record out",
            group: "commands",
            ours: "await/service",
            baseline: "await/correlations",
            baseline_name: "a bare correlation table doing the same round",
            bytes: None,
            target: "reported",
        }],
    );
}
