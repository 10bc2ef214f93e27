//! Codec benchmarks against the `redis-protocol` crate's RESP3 codec on the same bytes.
//! `cargo bench -p mqstore --bench codec`

mod support;

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::Throughput;
use mqstore_core::codec::{Request, SetRequest, decode_request};
use redis_protocol::resp3::decode::complete::decode_bytes;
use redis_protocol::resp3::encode::complete::extend_encode;
use redis_protocol::resp3::types::BytesFrame;
use support::{Comparison, criterion, report};

fn set_request(value_len: usize) -> Request {
    Request::Set(SetRequest::new(
        Bytes::from(vec![b'k'; 16]),
        Bytes::from(vec![b'v'; value_len]),
    ))
}

/// The same request as a generic RESP3 frame.
fn as_frame(request: &Request) -> BytesFrame {
    let Request::Set(set) = request else {
        unreachable!()
    };
    let blob = |data: Bytes| BytesFrame::BlobString {
        data,
        attributes: None,
    };
    BytesFrame::Array {
        data: vec![
            blob(Bytes::from_static(b"SET")),
            blob(set.key.clone()),
            blob(set.value.value()),
        ],
        attributes: None,
    }
}

fn main() {
    let mut c = criterion();
    let small = set_request(64);
    let small_wire = small.to_bytes();
    let large = set_request(1 << 20);
    let large_wire = large.to_bytes();

    {
        let mut g = c.benchmark_group("codec");
        g.bench_function("decode_set_64B/mqstore", |b| {
            b.iter(|| decode_request(black_box(&small_wire)).unwrap())
        });
        g.bench_function("decode_set_64B/redis-protocol", |b| {
            b.iter(|| decode_bytes(black_box(&small_wire)).unwrap().unwrap())
        });
        let mut out = Vec::with_capacity(256);
        g.bench_function("encode_set_64B/mqstore", |b| {
            b.iter(|| {
                out.clear();
                black_box(&small).encode(&mut out);
                black_box(out.len())
            })
        });
        let frame = as_frame(&small);
        let mut out = BytesMut::with_capacity(256);
        g.bench_function("encode_set_64B/redis-protocol", |b| {
            b.iter(|| {
                out.clear();
                extend_encode(&mut out, black_box(&frame), false).unwrap()
            })
        });
        g.throughput(Throughput::Bytes(large_wire.len() as u64));
        g.bench_function("decode_set_1MiB/mqstore", |b| {
            b.iter(|| decode_request(black_box(&large_wire)).unwrap())
        });
        g.bench_function("decode_set_1MiB/redis-protocol", |b| {
            b.iter(|| decode_bytes(black_box(&large_wire)).unwrap().unwrap())
        });
        g.finish();
    }
    c.final_summary();

    let large_len = large_wire.len() as u64;
    report(
        "codec",
        &[
            Comparison {
                what: "decode SET (16 B key, 64 B value)",
                group: "codec",
                ours: "decode_set_64B/mqstore",
                baseline: "decode_set_64B/redis-protocol",
                baseline_name: "redis-protocol",
                bytes: None,
                target: "<= 50 ns and >= 2x as fast",
            },
            Comparison {
                what: "encode SET (16 B key, 64 B value)",
                group: "codec",
                ours: "encode_set_64B/mqstore",
                baseline: "encode_set_64B/redis-protocol",
                baseline_name: "redis-protocol",
                bytes: None,
                target: "<= 50 ns and >= 2x as fast",
            },
            Comparison {
                what: "decode SET (1 MiB value)",
                group: "codec",
                ours: "decode_set_1MiB/mqstore",
                baseline: "decode_set_1MiB/redis-protocol",
                baseline_name: "redis-protocol",
                bytes: Some(large_len),
                target: ">= 3 GB/s, zero-copy",
            },
        ],
    );
}
