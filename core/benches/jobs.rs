//! The jobs engine's device API against the state store engine doing a request of the same
//! kind, measured in the same run: a device's update of its execution (read the thing's
//! record, change it, write it back by compare-and-set, reply) against a SET, and its
//! get-pending (read the record, reply with its lists) against a GET.
//! `cargo bench -p mqstore-core --bench jobs`

mod support;

use std::hint::black_box;

use bytes::Bytes;
use mqstore_core::codec::{Request, SetRequest};
use mqstore_core::engine::{Engine, RequestContext};
use mqstore_core::jobs::{JobSpec, Jobs};
use support::{Comparison, criterion, report};

/// Things, each with [`JOBS`] executions, its first one in progress.
const THINGS: usize = 1_000;
const JOBS: usize = 10;
const NOW: u64 = 1_700_000_000_000;
/// Visits the things in a scattered order (coprime with [`THINGS`]).
const STRIDE: usize = 7_919;

fn fleet(things: &[String]) -> Jobs {
    let mut jobs = Jobs::new();
    let mut out = Vec::new();
    for j in 0..JOBS {
        let document = serde_json::json!({ "firmware": format!("v{j}") });
        let spec = JobSpec::new(format!("job-{j:02}"), things.to_vec(), document);
        jobs.create_job(spec, NOW, &mut out).expect("createJob");
        while jobs.roll_out(NOW, &mut out).expect("the rollout") > 0 {}
    }
    for thing in things {
        let topic = format!("$aws/things/{thing}/jobs/start-next");
        jobs.handle(&topic, b"{}", NOW, &mut out)
            .expect("start-next");
    }
    jobs
}

fn context() -> RequestContext<'static> {
    RequestContext {
        client_id: Some("bench"),
        timestamp: Some("1700000000000:0:bench"),
        ..RequestContext::default()
    }
}

fn main() {
    let things: Vec<String> = (0..THINGS).map(|i| format!("thing-{i:05}")).collect();
    let mut jobs = fleet(&things);
    let updates: Vec<String> = things
        .iter()
        .map(|t| format!("$aws/things/{t}/jobs/job-00/update"))
        .collect();
    let gets: Vec<String> = things
        .iter()
        .map(|t| format!("$aws/things/{t}/jobs/get"))
        .collect();
    // Two details that alternate for each thing (the stride visits a thing every THINGS
    // calls, and THINGS % 16 is 8): every update changes its record.
    let details: Vec<Vec<u8>> = (0..16)
        .map(|n| {
            format!(r#"{{"status":"IN_PROGRESS","statusDetails":{{"step":"{n}"}}}}"#).into_bytes()
        })
        .collect();

    // What is measured is accepted: an update that changes the record, a read of it.
    let mut out = Vec::new();
    for (topic, payload) in [(&updates[0], &details[1][..]), (&gets[0], &b"{}"[..])] {
        jobs.handle(topic, payload, NOW, &mut out)
            .expect("a device request");
        let reply = out.pop().expect("a reply");
        assert!(reply.topic.ends_with("/accepted"), "{reply:?}");
    }

    // The baseline: a state store with a key per thing, values as large as an update's reply.
    let keys: Vec<Bytes> = things.iter().map(|t| Bytes::from(t.clone())).collect();
    let value = Bytes::from(vec![b'v'; 200]);
    let mut engine = Engine::in_memory("bench").expect("an engine");
    let mut sink = Vec::new();
    for key in &keys {
        let set = Request::Set(SetRequest::new(key.clone(), value.clone()));
        engine.execute(set, context(), NOW, &mut sink);
    }

    let mut c = criterion();
    let mut g = c.benchmark_group("jobs");
    let (mut i, mut n) = (0usize, 0usize);
    g.bench_function("update/jobs", |b| {
        b.iter(|| {
            i = (i + STRIDE) % THINGS;
            n += 1;
            out.clear();
            black_box(jobs.handle(&updates[i], &details[n % 16], NOW, &mut out))
        })
    });
    g.bench_function("update/store_set", |b| {
        b.iter(|| {
            i = (i + STRIDE) % THINGS;
            sink.clear();
            let set = Request::Set(SetRequest::new(keys[i].clone(), value.clone()));
            black_box(engine.execute(set, context(), NOW, &mut sink))
        })
    });
    g.bench_function("pending/jobs", |b| {
        b.iter(|| {
            i = (i + STRIDE) % THINGS;
            out.clear();
            black_box(jobs.handle(&gets[i], b"{}", NOW, &mut out))
        })
    });
    g.bench_function("pending/store_get", |b| {
        b.iter(|| {
            i = (i + STRIDE) % THINGS;
            sink.clear();
            let get = Request::Get {
                key: keys[i].clone(),
            };
            black_box(engine.execute(get, context(), NOW, &mut sink))
        })
    });
    g.finish();
    c.final_summary();

    report(
        "jobs engine (1,000 things x 10 jobs, the first in progress)",
        &[
            Comparison {
                what: "a device's update of its execution (IN_PROGRESS, new statusDetails)",
                group: "jobs",
                ours: "update/jobs",
                baseline: "update/store_set",
                baseline_name: "the state store engine's SET",
                bytes: None,
                target: "reported",
            },
            Comparison {
                what: "a device's get-pending (its 10 executions in two lists)",
                group: "jobs",
                ours: "pending/jobs",
                baseline: "pending/store_get",
                baseline_name: "the state store engine's GET",
                bytes: None,
                target: "reported",
            },
        ],
    );
}
