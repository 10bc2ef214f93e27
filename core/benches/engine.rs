//! Engine benchmarks against a bare `HashMap<Bytes, Bytes>` doing the same inserts and
//! lookups, and the memory a key costs. `cargo bench -p mqstore --bench engine`

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicIsize, Ordering};

use bytes::Bytes;
use mqstore_core::codec::{Request, SetRequest};
use mqstore_core::engine::{Engine, RequestContext};
use support::{Comparison, criterion, report};

/// Counts live heap bytes, to measure memory per key.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const KEYS: usize = 1_000_000;
const NOW: u64 = 1_700_000_000_000;

/// 16-byte keys, spread like real ids.
fn key(i: usize) -> Bytes {
    Bytes::from(format!(
        "device/{:010}",
        i.wrapping_mul(2_654_435_761) % 10_000_000_000
    ))
}

fn value() -> Bytes {
    Bytes::from(vec![b'v'; 64])
}

fn context() -> RequestContext<'static> {
    RequestContext {
        client_id: Some("bench"),
        timestamp: Some("1700000000000:0:bench"),
        ..RequestContext::default()
    }
}

/// Sets every key as a decoded request would carry it (the value framed, as decoding gives).
fn filled_engine(keys: &[Bytes]) -> Engine {
    let mut engine = Engine::in_memory("bench").unwrap();
    let mut sink = Vec::new();
    for k in keys {
        let wire = Request::Set(SetRequest::new(k.clone(), value())).to_bytes();
        let request = mqstore_core::codec::decode_request(&wire).unwrap();
        engine.execute(request, context(), NOW, &mut sink);
    }
    engine
}

fn memory_per_key(keys: &[Bytes]) -> (f64, f64) {
    let before = LIVE.load(Ordering::Relaxed);
    let engine = filled_engine(keys);
    let engine_bytes = LIVE.load(Ordering::Relaxed) - before;
    drop(engine);
    let before = LIVE.load(Ordering::Relaxed);
    let map: HashMap<Bytes, Bytes> = keys
        .iter()
        .map(|k| (Bytes::copy_from_slice(k), value()))
        .collect();
    let map_bytes = LIVE.load(Ordering::Relaxed) - before;
    drop(map);
    (
        engine_bytes as f64 / keys.len() as f64,
        map_bytes as f64 / keys.len() as f64,
    )
}

fn main() {
    let keys: Vec<Bytes> = (0..KEYS).map(key).collect();
    let (engine_per_key, map_per_key) = memory_per_key(&keys);

    let mut c = criterion();
    {
        let mut engine = filled_engine(&keys);
        let mut map: HashMap<Bytes, Bytes> = keys.iter().map(|k| (k.clone(), value())).collect();
        // Each SET carries a value of its own, for the engine and the baseline alike, so
        // both drop a cold old value when they overwrite.
        let values: Vec<Bytes> = keys.iter().map(|_| value()).collect();
        let set_requests: Vec<Request> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| Request::Set(SetRequest::new(k.clone(), v.clone())))
            .collect();
        let mut sink = Vec::new();
        let mut g = c.benchmark_group("engine");
        let mut i = 0usize;
        g.bench_function("set_1M/mqstore", |b| {
            b.iter(|| {
                i = (i + 7919) % KEYS;
                sink.clear();
                black_box(engine.execute(set_requests[i].clone(), context(), NOW, &mut sink))
            })
        });
        g.bench_function("set_1M/hashmap", |b| {
            b.iter(|| {
                i = (i + 7919) % KEYS;
                black_box(map.insert(keys[i].clone(), values[i].clone()))
            })
        });
        g.bench_function("get_1M/mqstore", |b| {
            b.iter(|| {
                i = (i + 7919) % KEYS;
                let get = Request::Get {
                    key: keys[i].clone(),
                };
                black_box(engine.execute(get, context(), NOW, &mut sink))
            })
        });
        g.bench_function("get_1M/hashmap", |b| {
            b.iter(|| {
                i = (i + 7919) % KEYS;
                let key = keys[i].clone();
                black_box(map.get(&key).cloned())
            })
        });
        g.finish();
    }
    c.final_summary();

    report(
        "engine (1M keys of 16 B, values of 64 B)",
        &[
            Comparison {
                what: "SET (execute a decoded request, version and reply included)",
                group: "engine",
                ours: "set_1M/mqstore",
                baseline: "set_1M/hashmap",
                baseline_name: "HashMap::insert",
                bytes: None,
                target: ">= 2M SET/s, <= 3x the HashMap's time",
            },
            Comparison {
                what: "GET (execute, reply included)",
                group: "engine",
                ours: "get_1M/mqstore",
                baseline: "get_1M/hashmap",
                baseline_name: "HashMap::get",
                bytes: None,
                target: ">= 5M GET/s, <= 3x the HashMap's time",
            },
        ],
    );
    println!(
        "memory per key: mqstore {engine_per_key:.0} B, HashMap<Bytes, Bytes> {map_per_key:.0} B -> {:.2}x",
        engine_per_key / map_per_key
    );
}
