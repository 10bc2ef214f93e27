//! Linearizability histories: concurrent clients run random SET, SET NX, GET, DEL and VDEL on
//! a few keys and record each operation's invocation and completion; porcupine (Go,
//! `tests/linearizability`) checks the history key by key.

#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

use mqstore_core::client::{ClientError, Deleted};
use mqstore_core::codec::Condition;
use mqstore_net::client::{Client, SetOptions};

/// One operation of a history, as the checker reads it.
fn line(
    client: usize,
    key: &str,
    op: &str,
    value: &str,
    call: u128,
    ret: u128,
    out: &str,
) -> String {
    serde_json::json!({
        "client": client, "key": key, "op": op, "value": value,
        "call": call as u64, "ret": ret as u64, "out": out,
    })
    .to_string()
}

fn deleted(outcome: Deleted) -> String {
    match outcome {
        Deleted::Deleted => "1",
        Deleted::Absent => "0",
        Deleted::ValueMismatch => "notapplied",
    }
    .to_owned()
}

/// Whether an error leaves the operation's outcome unknown (it may have happened or not): no
/// answer, or the store's 503 (Redis failed mid-call, or a write not confirmed on its
/// replicas). Any other error fails the test.
fn unknown(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Timeout(_) | ClientError::Status { status: 503, .. }
    )
}

/// Client `c` runs random operations on `keys` keys (`k0`, `k1`, …) from `start` until `until`
/// has passed; returns its history lines. After an operation without an answer it waits a
/// fifth of a second, as a real client backs off (each such operation may take effect at any
/// later time, which the checker must try).
pub async fn run(
    client: Client,
    c: usize,
    keys: u64,
    start: Instant,
    until: Duration,
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (c as u64 + 1);
    let mut i = 0;
    while start.elapsed() < until {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let key = format!("k{}", seed % keys);
        let value = format!("{c}-{i}");
        i += 1;
        let call = start.elapsed().as_nanos();
        let (op, value, out) = match (seed >> 8) % 5 {
            0 | 1 => {
                let nx = (seed >> 16).is_multiple_of(2);
                let options = SetOptions {
                    condition: if nx {
                        Condition::NotExists
                    } else {
                        Condition::Always
                    },
                    ..SetOptions::default()
                };
                let out = client
                    .set(key.clone(), value.clone(), options)
                    .await
                    .map(|s| if s.applied { "ok" } else { "notapplied" }.to_owned());
                (if nx { "setnx" } else { "set" }, value, out)
            }
            2 => {
                let out = client.get(key.clone()).await.map(|got| match got {
                    Some(v) => format!("value:{}", String::from_utf8_lossy(&v.value)),
                    None => "absent".to_owned(),
                });
                ("get", String::new(), out)
            }
            3 => {
                let out = client
                    .del(key.clone(), None)
                    .await
                    .map(|d| deleted(d.outcome));
                ("del", String::new(), out)
            }
            _ => {
                // A value some client wrote earlier, so that some VDELs match.
                let target = format!("{}-{}", (seed >> 20) % 6, (seed >> 24) % (i as u64 + 1));
                let out = client
                    .vdel(key.clone(), target.clone(), None)
                    .await
                    .map(|d| deleted(d.outcome));
                ("vdel", target, out)
            }
        };
        let ret = start.elapsed().as_nanos();
        let out = match out {
            Ok(out) => out,
            Err(e) if unknown(&e) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                "unknown".to_owned()
            }
            Err(e) => panic!("{op} {key}: {e}"),
        };
        lines.push(line(c, &key, op, &value, call, ret, &out));
    }
    lines
}

/// How many operations of a history completed with an answer after `after` (ns from start).
pub fn answered_after(history: &[String], after: u128) -> usize {
    history
        .iter()
        .filter(|l| !l.contains("\"out\":\"unknown\""))
        .filter(|l| {
            serde_json::from_str::<serde_json::Value>(l)
                .ok()
                .and_then(|v| v["call"].as_u64())
                .is_some_and(|call| u128::from(call) > after)
        })
        .count()
}

/// Runs porcupine over `history` (written to `name` in the test's temporary directory): its
/// report, and whether it found the history linearizable.
pub fn check(history: &[String], name: &str) -> (bool, String) {
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&file, history.join("\n") + "\n").unwrap();
    let checker = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/linearizability");
    let out = Command::new(crate::broker::go_binary())
        .args(["run", ".", file.to_str().unwrap()])
        .current_dir(&checker)
        .output()
        .expect("go runs (bash scripts/test installs it)");
    let report = format!(
        "{}{} (history in {})",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        file.display()
    );
    (out.status.success() && report.contains(": Ok"), report)
}
