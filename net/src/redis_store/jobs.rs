//! The jobs service's state in Redis ([`JobsStore`]), next to the state store's keys, so that
//! every node serves the AWS IoT Jobs API and the operator API from one state.
//!
//! Each method is one atomic step in Redis (a script where it writes more than one thing):
//!
//! * `{P}{jobs}:job:<id>` a job (JSON), `{P}{jobs}:ids` the job ids in creation order,
//!   `{P}{jobs}:targets:<id>` its targets, `{P}{jobs}:rollouts` the jobs being rolled out
//!   (oldest first) and `{P}{jobs}:cursors` how far each got: one hash slot, so a claim of the
//!   next targets is one script and hands each target to one node.
//! * Per bucket of the state store (`{P}{bN}:`, by the thing's name): `jt:<thing>` the
//!   thing's record (a hash: `r` revision, `d` the executions as JSON, `t` the jobs with a
//!   timer), `jthings` the things, `jtimers` the timers (`"<thing> <job id>"` scored by
//!   deadline). Writing a record is a compare-and-set on `r` that moves its timers in the same
//!   script, so two nodes never both start an execution or both time it out.
//!
//! The engine ([`mqstore_core::jobs::Jobs`]) is synchronous: a [`RedisJobs`] waits for Redis on the
//! calling thread, so it is used from blocking threads (`tokio::task::spawn_blocking`), never
//! from a task of the runtime whose handle it holds. Jobs never change once created, so each
//! node keeps the ones it has read.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use redis::{Script, Value};

use super::{RedisStore, RedisStoreError};
use mqstore_core::jobs::{Job, JobsStore, StoreError, Stored, ThingRecord};

/// The scripts of the jobs store.
struct JobScripts {
    insert: Script,
    put: Script,
    take: Script,
    stop: Script,
    claim: Script,
    release: Script,
}

/// Most timers one [`JobsStore::due`] call returns per bucket (the rest come next time).
const DUE_BATCH: usize = 1024;

/// The jobs service's state in Redis. Cheap to clone: clones share the connection and the
/// jobs read so far.
#[derive(Clone)]
pub struct RedisJobs {
    store: RedisStore,
    runtime: tokio::runtime::Handle,
    scripts: Arc<JobScripts>,
    /// Jobs read or written by this node (they never change).
    known: Arc<Mutex<HashMap<String, Arc<Job>>>>,
}

impl std::fmt::Debug for RedisJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisJobs")
            .field("store", &self.store)
            .finish()
    }
}

impl RedisJobs {
    /// The jobs state next to `store`'s keys; calls wait for Redis on `runtime`.
    pub fn new(store: RedisStore, runtime: tokio::runtime::Handle) -> Self {
        Self {
            store,
            runtime,
            scripts: Arc::new(JobScripts {
                insert: Script::new(include_str!("jobs_insert.lua")),
                put: Script::new(include_str!("jobs_put.lua")),
                take: Script::new(include_str!("jobs_take.lua")),
                stop: Script::new(include_str!("jobs_stop.lua")),
                claim: Script::new(CLAIM),
                release: Script::new(RELEASE),
            }),
            known: Arc::default(),
        }
    }

    /// Runs `call` to completion on the runtime (from a blocking thread).
    fn wait<T>(&self, call: impl Future<Output = Result<T, RedisStoreError>>) -> Stored<T> {
        self.runtime
            .block_on(call)
            .map_err(|e| StoreError(e.to_string()))
    }

    /// `{P}{jobs}:<kind><suffix>`: the names every node shares for the jobs themselves.
    fn global(&self, kind: &str, suffix: &str) -> Vec<u8> {
        let mut name = self.store.prefix.to_vec();
        name.extend_from_slice(b"{jobs}:");
        name.extend_from_slice(kind.as_bytes());
        name.extend_from_slice(suffix.as_bytes());
        name
    }

    fn remember(&self, job: Job) -> Arc<Job> {
        let job = Arc::new(job);
        if let Ok(mut known) = self.known.lock() {
            known.insert(job.id.clone(), job.clone());
        }
        job
    }
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, json: &[u8]) -> Stored<T> {
    serde_json::from_slice(json)
        .map_err(|e| StoreError(format!("a malformed {what} in Redis: {e}")))
}

fn unexpected(what: &str, value: &Value) -> StoreError {
    StoreError(format!(
        "Redis answered something unexpected to {what}: {value:?}"
    ))
}

impl JobsStore for RedisJobs {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        if let Some(job) = self.known.lock().ok().and_then(|k| k.get(job_id).cloned()) {
            return Ok(Some(job));
        }
        let json: Option<Vec<u8>> = self.wait(
            self.store
                .query(redis::cmd("GET").arg(self.global("job:", job_id))),
        )?;
        match json {
            Some(json) => Ok(Some(self.remember(decode("job", &json)?))),
            None => Ok(None),
        }
    }

    fn insert_job(&mut self, job: Job) -> Stored<bool> {
        let json = serde_json::to_vec(&job).map_err(|e| StoreError(e.to_string()))?;
        let mut call = self.scripts.insert.prepare_invoke();
        call.key(self.global("job:", &job.id))
            .key(self.global("ids", ""))
            .key(self.global("targets:", &job.id))
            .arg(&job.id)
            .arg(json);
        for thing in &job.targets {
            call.arg(thing);
        }
        match self.wait(self.store.eval(&call))? {
            Value::Int(1) => {
                self.remember(job);
                Ok(true)
            }
            Value::Int(0) => Ok(false),
            other => Err(unexpected("adding a job", &other)),
        }
    }

    fn jobs(&self) -> Stored<Vec<Arc<Job>>> {
        let ids: Vec<String> = self.wait(
            self.store.query(
                redis::cmd("LRANGE")
                    .arg(self.global("ids", ""))
                    .arg(0)
                    .arg(-1),
            ),
        )?;
        let mut jobs = Vec::with_capacity(ids.len());
        for id in ids {
            jobs.extend(self.job(&id)?);
        }
        Ok(jobs)
    }

    fn thing(&self, thing: &str) -> Stored<ThingRecord> {
        let bucket = self.store.bucket_of(thing.as_bytes());
        let name = self.store.name(bucket, b"jt:", thing.as_bytes());
        let (revision, json): (Option<u64>, Option<Vec<u8>>) = self.wait(
            self.store
                .query(redis::cmd("HMGET").arg(name).arg("r").arg("d")),
        )?;
        let mut record = match json {
            Some(json) => decode::<ThingRecord>("thing record", &json)?,
            None => ThingRecord::default(),
        };
        record.revision = revision.unwrap_or(0);
        Ok(record)
    }

    fn put_thing(&mut self, thing: &str, record: ThingRecord) -> Stored<bool> {
        let json = serde_json::to_vec(&record).map_err(|e| StoreError(e.to_string()))?;
        let bucket = self.store.bucket_of(thing.as_bytes());
        let mut call = self.scripts.put.prepare_invoke();
        call.key(self.store.name(bucket, b"jt:", thing.as_bytes()))
            .key(self.store.name(bucket, b"jthings", b""))
            .key(self.store.name(bucket, b"jtimers", b""))
            .arg(record.revision)
            .arg(json)
            .arg(thing);
        for (deadline, job_id) in record.timers() {
            call.arg(deadline).arg(job_id);
        }
        match self.wait(self.store.eval(&call))? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected("writing a thing", &other)),
        }
    }

    fn things(&self) -> Stored<Vec<String>> {
        let mut things = Vec::new();
        for bucket in 0..self.store.buckets {
            let members: Vec<String> = self.wait(
                self.store
                    .query(redis::cmd("SMEMBERS").arg(self.store.name(bucket, b"jthings", b""))),
            )?;
            things.extend(members);
        }
        things.sort();
        Ok(things)
    }

    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>> {
        let mut due: Vec<(u64, String, String)> = Vec::new();
        for bucket in 0..self.store.buckets {
            let timers: Vec<(String, f64)> = self.wait(
                self.store.query(
                    redis::cmd("ZRANGE")
                        .arg(self.store.name(bucket, b"jtimers", b""))
                        .arg("-inf")
                        .arg(now_ms)
                        .arg("BYSCORE")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(DUE_BATCH)
                        .arg("WITHSCORES"),
                ),
            )?;
            for (member, deadline) in timers {
                let Some((thing, job_id)) = member.split_once(' ') else {
                    return Err(StoreError(format!("a malformed timer {member:?} in Redis")));
                };
                due.push((deadline as u64, thing.to_owned(), job_id.to_owned()));
            }
        }
        due.sort();
        Ok(due
            .into_iter()
            .map(|(_, thing, job)| (thing, job))
            .collect())
    }

    fn next_deadline(&self) -> Stored<Option<u64>> {
        let mut earliest: Option<u64> = None;
        for bucket in 0..self.store.buckets {
            let first: Vec<(String, f64)> = self.wait(
                self.store.query(
                    redis::cmd("ZRANGE")
                        .arg(self.store.name(bucket, b"jtimers", b""))
                        .arg(0)
                        .arg(0)
                        .arg("WITHSCORES"),
                ),
            )?;
            if let Some((_, deadline)) = first.first() {
                let at = *deadline as u64;
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        }
        Ok(earliest)
    }

    fn start_rollout(&mut self, job_id: &str) -> Stored<()> {
        let _: i64 = self.wait(
            self.store.query(
                redis::cmd("RPUSH")
                    .arg(self.global("rollouts", ""))
                    .arg(job_id),
            ),
        )?;
        Ok(())
    }

    fn take_rollout(&mut self, budget: usize) -> Stored<Vec<(String, String)>> {
        let mut call = self.scripts.take.prepare_invoke();
        call.key(self.global("rollouts", ""))
            .key(self.global("cursors", ""))
            .arg(budget)
            .arg(self.global("targets:", ""));
        let Value::Array(items) = self.wait(self.store.eval(&call))? else {
            return Err(StoreError(
                "Redis answered a rollout claim with no list".into(),
            ));
        };
        // (job id, thing) pairs, moved out of the reply.
        let text = |item: Value| match item {
            Value::BulkString(text) => String::from_utf8(text)
                .map_err(|_| StoreError("a rollout claim that is not UTF-8".into())),
            other => Err(unexpected("a rollout claim", &other)),
        };
        let mut items = items.into_iter();
        let mut claimed = Vec::with_capacity(items.len() / 2);
        while let (Some(job_id), Some(thing)) = (items.next(), items.next()) {
            claimed.push((text(job_id)?, text(thing)?));
        }
        Ok(claimed)
    }

    fn stop_rollout(&mut self, job_id: &str) -> Stored<()> {
        let mut call = self.scripts.stop.prepare_invoke();
        call.key(self.global("rollouts", ""))
            .key(self.global("cursors", ""))
            .arg(job_id);
        self.wait(self.store.eval(&call))?;
        Ok(())
    }

    fn rolling_out(&self) -> Stored<bool> {
        let length: u64 = self.wait(
            self.store
                .query(redis::cmd("LLEN").arg(self.global("rollouts", ""))),
        )?;
        Ok(length > 0)
    }
}

/// Claims (or keeps) the listener lease: 1 when `ARGV[1]` holds it now.
/// KEYS: the lease   ARGV: this node's token, the lease's length in ms
const CLAIM: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
";

/// Gives the listener lease up if `ARGV[1]` holds it.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
";

impl RedisJobs {
    /// Claims, or renews, the lease of the node that listens to the device API for all (MQTT
    /// brokers such as mosquitto do not deliver `$aws/...` topics to shared subscriptions, so
    /// one node subscribes to them plainly): whether the node with `token` holds it for the
    /// next `ttl_ms`. Runs on the runtime (not a blocking call).
    pub async fn claim_listener(&self, token: &str, ttl_ms: u64) -> Result<bool, RedisStoreError> {
        let mut call = self.scripts.claim.prepare_invoke();
        call.key(self.global("listener", "")).arg(token).arg(ttl_ms);
        Ok(matches!(self.store.eval(&call).await?, Value::Int(1)))
    }

    /// Gives the listener lease up (a node that stops), so another node takes over at once.
    pub async fn release_listener(&self, token: &str) -> Result<(), RedisStoreError> {
        let mut call = self.scripts.release.prepare_invoke();
        call.key(self.global("listener", "")).arg(token);
        self.store.eval(&call).await?;
        Ok(())
    }
}
