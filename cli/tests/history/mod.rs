//! Linearizability histories: concurrent clients run random SET, SET NX, GET, DEL and VDEL on
//! a few keys and record each operation's invocation and completion; porcupine (Go,
//! `tests/linearizability`) checks the history key by key.

#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use mqstore_core::client::jobs::JobNotification;
use mqstore_core::client::{ClientError, Deleted};
use mqstore_core::codec::Condition;
use mqstore_core::hlc::Hlc;
use mqstore_net::client::{Client, SetOptions};

/// One operation of a history, as the checker reads it; `version`, an applied SET's, is for
/// the nemesis test's checks (porcupine ignores it).
pub fn line(
    client: usize,
    key: &str,
    op: &str,
    value: &str,
    (call, ret): (u128, u128),
    out: &str,
    version: Option<&Hlc>,
) -> String {
    let mut line = serde_json::json!({
        "client": client, "key": key, "op": op, "value": value,
        "call": call as u64, "ret": ret as u64, "out": out,
    });
    if let Some(version) = version {
        line["version"] = version.to_string().into();
    }
    line.to_string()
}

fn deleted(outcome: Deleted) -> String {
    match outcome {
        Deleted::Deleted => "1",
        Deleted::Absent => "0",
        Deleted::ValueMismatch => "notapplied",
    }
    .to_owned()
}

/// Whether an error says the operation did not happen: a node's 503 for a write Redis refused
/// before applying it (its `min-replicas-to-write` not met). Such operations are left out of
/// the history checked.
fn refused(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Status { status: 503, message } if message.contains("nothing was written")
    )
}

/// Whether an error leaves the operation's outcome unknown (it may have happened or not): no
/// answer, the client's connection lost with the call in flight, or the store's 503 (Redis
/// failed mid-call, or a write not confirmed on its replicas). Any other error fails the test.
fn unknown(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Timeout(_)
            | ClientError::Disconnected
            | ClientError::Status { status: 503, .. }
    )
}

/// A load's clock and its end: the clients run until [`Load::stop`], and count the operations
/// answered that began after [`Load::mark`], so that a test can run its load until the
/// system has served again after a failure instead of for a fixed time that a slow machine
/// may not give it.
pub struct Load {
    start: Instant,
    /// Keys move on to a new generation every this long, up to the last generation, which
    /// lasts from then on (see [`Load::rotating`]); none: the same keys throughout.
    rotation: Option<(Duration, u64)>,
    stopped: AtomicBool,
    /// Nanoseconds from `start`; `u64::MAX` until marked.
    mark: AtomicU64,
    answered_after_mark: AtomicUsize,
}

impl Load {
    pub fn start() -> std::sync::Arc<Load> {
        Self::with_rotation(None)
    }

    /// A load whose clients move on to new keys every `period` (`k0.0`, `k1.0`, … then `k0.1`,
    /// …), for `generations` generations, the last kept until the load stops: as Jepsen's
    /// independent keys, so that no key's history outgrows porcupine, whose memory grows with
    /// the square of one key's operations (a key of 400,000 operations took 22 GB).
    pub fn rotating(period: Duration, generations: u64) -> std::sync::Arc<Load> {
        Self::with_rotation(Some((period, generations - 1)))
    }

    fn with_rotation(rotation: Option<(Duration, u64)>) -> std::sync::Arc<Load> {
        std::sync::Arc::new(Load {
            start: Instant::now(),
            rotation,
            stopped: AtomicBool::new(false),
            mark: AtomicU64::new(u64::MAX),
            answered_after_mark: AtomicUsize::new(0),
        })
    }

    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// The name the clients use now for key `k`.
    fn key(&self, k: u64) -> String {
        match self.rotation {
            None => format!("k{k}"),
            Some((period, last)) => {
                let generation = self.elapsed().as_nanos() / period.as_nanos();
                format!("k{k}.{}", generation.min(u128::from(last)))
            }
        }
    }

    /// Every key the clients may use, `n` at a time: what an observer must observe.
    pub fn keys(&self, n: u64) -> Vec<String> {
        match self.rotation {
            None => (0..n).map(|k| format!("k{k}")).collect(),
            Some((_, last)) => (0..=last)
                .flat_map(|generation| (0..n).map(move |k| format!("k{k}.{generation}")))
                .collect(),
        }
    }

    pub fn running(&self) -> bool {
        !self.stopped.load(Ordering::Relaxed)
    }

    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }

    /// Counts from now on the operations answered that begin `after` from the load's start.
    pub fn mark(&self, after: Duration) {
        self.mark.store(after.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn answered_after_mark(&self) -> usize {
        self.answered_after_mark.load(Ordering::Relaxed)
    }

    /// Stops the load at `until` from its start, when the test has no failure to wait out.
    pub async fn stop_at(&self, until: Duration) {
        tokio::time::sleep(until.saturating_sub(self.elapsed())).await;
        self.stop();
    }

    fn answered(&self, call: u128) {
        if call > u128::from(self.mark.load(Ordering::Relaxed)) {
            self.answered_after_mark.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Client `c` runs random operations on `keys` keys (`k0`, `k1`, …, or the generation's of a
/// [`Load::rotating`]) until `load` stops;
/// returns its history lines. After an operation without an answer it waits a
/// fifth of a second, as a real client backs off (each such operation may take effect at any
/// later time, which the checker must try).
pub async fn run(client: Client, c: usize, keys: u64, load: std::sync::Arc<Load>) -> Vec<String> {
    let start = load.start;
    let mut lines = Vec::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ (c as u64 + 1);
    let mut i = 0;
    while load.running() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let key = load.key(seed % keys);
        let value = format!("{c}-{i}");
        i += 1;
        let call = start.elapsed().as_nanos();
        let mut version = None;
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
                    .map(|s| {
                        if s.applied {
                            version = s.version;
                            "ok"
                        } else {
                            "notapplied"
                        }
                        .to_owned()
                    });
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
            Ok(out) => {
                load.answered(call);
                out
            }
            Err(e) if refused(&e) || unknown(&e) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if refused(&e) { "refused" } else { "unknown" }.to_owned()
            }
            Err(e) => panic!("{op} {key}: {e}"),
        };
        lines.push(line(
            c,
            &key,
            op,
            &value,
            (call, ret),
            &out,
            version.as_ref(),
        ));
    }
    lines
}

/// Runs porcupine over `history` (written to `name` in the test's temporary directory): its
/// report, and whether it found the history linearizable.
pub fn check(history: &[String], name: &str) -> (bool, String) {
    check_with(history, name, &[])
}

/// [`check`], with these variables set for the checker (`MQSTORE_PORCUPINE_GB`, say).
pub fn check_with(history: &[String], name: &str, vars: &[(&str, &str)]) -> (bool, String) {
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::write(&file, history.join("\n") + "\n").unwrap();
    let checker = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/linearizability");
    let out = Command::new(crate::broker::go_binary())
        .args(["run", ".", file.to_str().unwrap()])
        .envs(vars.iter().copied())
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

/// A job execution's key in a history: porcupine's model of AWS IoT Jobs' device API checks
/// the operations on it (`tests/linearizability`).
pub fn execution_key(thing: &str, job_id: &str) -> String {
    format!("job:{thing}:{job_id}")
}

/// Whether a jobs error leaves the update's outcome unknown: as [`unknown`], and the jobs
/// store failing mid-call (`InternalError`: a write may have landed before it failed).
fn jobs_unknown(error: &ClientError) -> bool {
    unknown(error) || matches!(error, ClientError::Jobs { code, .. } if code == "InternalError")
}

/// Client `c` acts as the device of every thing in `things` at once (as several clients of one
/// device may): on each thing it works on its jobs in `orders` (the thing's, in the order they
/// were queued, which is the order AWS IoT Jobs gives them to a device), describing the current
/// one or updating it to IN_PROGRESS, SUCCEEDED or FAILED, most often with the version it last
/// saw as `expectedVersion`, and moves on once that one is done — until `load` stops. Two such
/// clients race on the same executions. Its history lines, for the checker's job model.
pub async fn run_jobs(
    client: Client,
    c: usize,
    things: &[String],
    orders: &[Vec<String>],
    load: std::sync::Arc<Load>,
) -> JobsRun {
    use mqstore_core::jobs::Status;
    use mqstore_net::jobs::Update;
    let start = load.start;
    let mut handles = Vec::new();
    for thing in things {
        handles.push(client.jobs(thing).await.expect("the jobs device API"));
    }
    let mut current = vec![0usize; things.len()];
    let mut seen: Vec<Option<u64>> = vec![None; things.len()];
    let mut lines = Vec::new();
    let mut seed = 0x2545_f491_4f6c_dd1du64 ^ (c as u64 + 1);
    // What notify-next announced to this client, thing by thing, in the order it arrived
    // (heard between operations, so that a failure's report says when).
    let mut announced: Vec<Vec<(String, String)>> = vec![Vec::new(); things.len()];
    let hear = |announced: &mut Vec<Vec<(String, String)>>| {
        for (t, handle) in handles.iter().enumerate() {
            while let Some(notification) = handle.try_next_notification() {
                if let JobNotification::NotifyNext {
                    execution: Some(e), ..
                } = notification
                {
                    let detail = format!(
                        "{} {} v{} (last updated {}) heard at {:.3} s",
                        e.job_id,
                        e.status.as_str(),
                        e.version_number,
                        e.last_updated_at,
                        start.elapsed().as_secs_f64()
                    );
                    announced[t].push((e.job_id, detail));
                }
            }
        }
    };
    while load.running() {
        hear(&mut announced);
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let t = (seed % things.len() as u64) as usize;
        let Some(job_id) = orders[t].get(current[t]) else {
            // This thing's jobs are all done: wait for the others (or the end).
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let key = execution_key(&things[t], job_id);
        let call = start.elapsed().as_nanos();
        let (op, value, out) = if (seed >> 8).is_multiple_of(3) {
            let out = handles[t]
                .describe(job_id)
                .await
                .map(|e| (e.status, e.version_number));
            ("describe", String::new(), out)
        } else {
            let status = match (seed >> 12) % 4 {
                0 | 1 => Status::InProgress,
                2 => Status::Succeeded,
                _ => Status::Failed,
            };
            // A stale or no expected version now and then: the service must refuse the one
            // and take the other.
            let expected = match (seed >> 16) % 5 {
                0 => None,
                1 => seen[t].map(|v| v.saturating_sub(1)),
                _ => seen[t],
            };
            let value = match expected {
                Some(v) => format!("{}@{v}", status.as_str()),
                None => status.as_str().to_owned(),
            };
            let update = Update {
                job_id: job_id.clone(),
                status: Some(status),
                expected_version: expected,
                include_state: true,
                ..Update::default()
            };
            let out = handles[t].update(update).await.map(|accepted| {
                let state = accepted.execution_state.expect("the state asked for");
                (state.status, state.version_number)
            });
            ("update", value, out)
        };
        let ret = start.elapsed().as_nanos();
        let out = match out {
            Ok((status, version)) => {
                load.answered(call);
                seen[t] = Some(version);
                if !status.is_pending() {
                    (current[t], seen[t]) = (current[t] + 1, None);
                }
                match op {
                    "update" => format!("ok:{}:{version}", status.as_str()),
                    _ => format!("{}:{version}", status.as_str()),
                }
            }
            Err(ClientError::Jobs {
                code,
                execution_state,
                ..
            }) if code == "VersionMismatch" || code == "InvalidStateTransition" => {
                load.answered(call);
                if let Some(state) = execution_state {
                    seen[t] = Some(state.version_number);
                }
                if code == "InvalidStateTransition" {
                    (current[t], seen[t]) = (current[t] + 1, None);
                }
                code
            }
            Err(e) if jobs_unknown(&e) => {
                tokio::time::sleep(Duration::from_millis(200)).await;
                "unknown".to_owned()
            }
            Err(e) => panic!("{op} {key}: {e}"),
        };
        lines.push(line(c, &key, op, &value, (call, ret), &out, None));
    }
    hear(&mut announced);
    let announced = things.iter().cloned().zip(announced).collect();
    JobsRun { lines, announced }
}

/// What one device client did and heard: its operations' history lines, and for each thing
/// the jobs notify-next announced to it, in order: each job id, and what else the
/// notification said and when it came (for a failure's report).
pub struct JobsRun {
    pub lines: Vec<String>,
    pub announced: Vec<(String, Vec<(String, String)>)>,
}

/// No job execution announced twice to one client (notify-next says the thing's next job
/// changed: with the jobs worked in the order they were queued, each becomes next once). Lost ones are allowed (a
/// client cut off misses what was published meanwhile: QoS 1 on a clean session); a second
/// one means two nodes published the same change, or one change was applied twice. Returns
/// how many were announced in all.
pub fn each_execution_announced_at_most_once(runs: &[(usize, JobsRun)]) -> Result<usize, String> {
    let mut announced = 0;
    for (client, run) in runs {
        for (thing, jobs) in &run.announced {
            announced += jobs.len();
            let mut seen = std::collections::HashSet::new();
            if let Some((twice, _)) = jobs.iter().find(|(job, _)| !seen.insert(job)) {
                let heard: Vec<&String> = jobs.iter().map(|(_, detail)| detail).collect();
                return Err(format!(
                    "{thing}'s {twice} announced twice by notify-next to client {client}: {heard:#?}"
                ));
            }
        }
    }
    Ok(announced)
}
