//! The jobs service's state in Redis ([`JobsStore`]), next to the state store's keys, so that
//! every node serves the AWS IoT Jobs API and the operator API from one state.
//!
//! Each method is one atomic step in Redis (a script where it writes more than one thing):
//!
//! * `{P}{jobs}:jr:<id>` a job (a hash: `r` revision, `d` JSON), `{P}{jobs}:index` the job
//!   ids (a sorted set, by id), `{P}{jobs}:targets:<id>` the things it runs on,
//!   `{P}{jobs}:rollouts` the jobs being rolled out (oldest first) and `{P}{jobs}:cursors` how
//!   far each got: one hash slot, so a claim of the next things is one script and hands each
//!   thing to one node, and writing a job is a compare-and-set on `r` (a job is aborted, or
//!   its pace moved, once).
//! * `{P}{jobs}:tab:<table>` and `{P}{jobs}:tabx:<table>` the operator API's tables (thing
//!   groups, each group's members and continuous jobs, job templates, schedules): a hash of
//!   the entries and a sorted set of their names, for pages in name order.
//! * Per bucket of the state store (`{P}{bN}:`, by the thing's name): `jt:<thing>` the
//!   thing's record (a hash: `r` revision, `d` the executions as JSON, `t` the jobs with a
//!   timer), `jthings` the things, `jtimers` the timers (`"<thing> <job id>"` scored by
//!   deadline), `jcount:<job id>` the counts of that bucket's latest executions of a job by
//!   status. Writing a record is a compare-and-set on `r` that moves its timers and its
//!   counts in the same script, so two nodes never both start an execution or both time it
//!   out, and the counts (summed over the buckets) are exact.
//!
//! The engine ([`mqstore_core::jobs::Jobs`]) makes its store calls as data
//! ([`mqstore_core::server::JobsWork`]); [`RedisJobs::run`] runs each on the node's one
//! connection, from the node's loop, with no thread waiting for Redis. Each node keeps the jobs
//! it has read, and reads one again only when its revision changed (one round trip either
//! way).
//!
//! [`JobsStore`]: mqstore_core::jobs::JobsStore

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use redis::Value;

use super::{Call, Lua, RedisStore, RedisStoreError};
use mqstore_core::jobs::{
    Answers, Calls, Counts, Entries, Job, Rollout, Status, StoreAnswer, StoreCall, StoreError,
    Stored, Tally, ThingRecord, ThingWrite,
};

/// The scripts of the jobs store.
struct JobScripts {
    insert: Lua,
    update: Lua,
    read: Lua,
    delete: Lua,
    put: Lua,
    take: Lua,
    rollouts: Lua,
    stop: Lua,
    more: Lua,
    entry: Lua,
    entries: Lua,
    claim: Lua,
    release: Lua,
}

/// Most timers one [`JobsStore::due`](mqstore_core::jobs::JobsStore::due) call returns per
/// bucket (the rest come next time).
const DUE_BATCH: usize = 1024;

/// The jobs service's state in Redis. Cheap to clone: clones share the connection and the
/// jobs read so far.
#[derive(Clone)]
pub struct RedisJobs {
    store: RedisStore,
    scripts: Arc<JobScripts>,
    /// Jobs read by this node, with their revision.
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
    /// The jobs state next to `store`'s keys.
    pub fn new(store: RedisStore) -> Self {
        Self {
            store,
            scripts: Arc::new(JobScripts {
                insert: Lua::new(include_str!("jobs_insert.lua")),
                update: Lua::new(include_str!("jobs_update.lua")),
                read: Lua::new(include_str!("jobs_read.lua")),
                delete: Lua::new(include_str!("jobs_delete.lua")),
                put: Lua::new(include_str!("jobs_put.lua")),
                take: Lua::new(include_str!("jobs_take.lua")),
                rollouts: Lua::new(include_str!("jobs_rollouts.lua")),
                stop: Lua::new(include_str!("jobs_stop.lua")),
                more: Lua::new(include_str!("jobs_more.lua")),
                entry: Lua::new(include_str!("jobs_entry.lua")),
                entries: Lua::new(include_str!("jobs_entries.lua")),
                claim: Lua::new(CLAIM),
                release: Lua::new(RELEASE),
            }),
            known: Arc::default(),
        }
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

    fn forget(&self, job_id: &str) {
        if let Ok(mut known) = self.known.lock() {
            known.remove(job_id);
        }
    }

    /// A thing's record (one `HMGET`; the caller waits for it).
    async fn read_thing(&self, thing: &str) -> Result<Stored<ThingRecord>, RedisStoreError> {
        let bucket = self.store.bucket_of(thing.as_bytes());
        let name = self.store.name(bucket, b"jt:", thing.as_bytes());
        let (revision, json): (Option<u64>, Option<Vec<u8>>) = self
            .store
            .query(redis::cmd("HMGET").arg(name).arg("r").arg("d"))
            .await?;
        Ok(match json {
            Some(json) => decode::<ThingRecord>("thing record", &json),
            None => Ok(ThingRecord::default()),
        }
        .map(|mut record| {
            record.revision = revision.unwrap_or(0);
            record
        }))
    }

    /// The compare-and-set of a thing's record (see `jobs_put.lua`).
    fn thing_write(&self, thing: &str, record: &ThingRecord, tally: &Tally) -> Stored<Call<'_>> {
        let json = serde_json::to_vec(record).map_err(|e| StoreError(e.to_string()))?;
        let bucket = self.store.bucket_of(thing.as_bytes());
        let mut call = self.scripts.put.call();
        call.key(self.store.name(bucket, b"jt:", thing.as_bytes()))
            .key(self.store.name(bucket, b"jthings", b""))
            .key(self.store.name(bucket, b"jtimers", b""));
        for (job_id, _, _) in tally {
            call.key(self.store.name(bucket, b"jcount:", job_id.as_bytes()));
        }
        call.arg(record.revision)
            .arg(json)
            .arg(thing)
            .arg(record.timers().count());
        for (deadline, job_id) in record.timers() {
            call.arg(deadline).arg(job_id);
        }
        for (_, status, change) in tally {
            call.arg(status.as_str()).arg(*change);
        }
        Ok(call)
    }

    /// Every bucket's timers in `range` (`ZRANGE jtimers <range…> WITHSCORES`, all buckets at
    /// once): (`"<thing> <job id>"`, deadline).
    async fn timers(&self, range: &[&str]) -> Stored<Vec<(String, f64)>> {
        let store = &self.store;
        let buckets: Vec<Vec<(String, f64)>> = self
            .each_bucket(|bucket| {
                let mut zrange = redis::cmd("ZRANGE");
                zrange
                    .arg(store.name(bucket, b"jtimers", b""))
                    .arg(range)
                    .arg("WITHSCORES");
                async move { store.query(&zrange).await }
            })
            .await?;
        Ok(buckets.into_iter().flatten().collect())
    }

    /// Runs `call` on every bucket at once, in bucket order.
    async fn each_bucket<T, F>(&self, call: impl Fn(u32) -> F) -> Stored<Vec<T>>
    where
        F: Future<Output = Result<T, RedisStoreError>>,
    {
        let calls = (0..self.store.buckets).map(call);
        futures_util::future::try_join_all(calls)
            .await
            .map_err(|e| StoreError(e.to_string()))
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

/// A bulk string of a script's answer, as text.
fn text(what: &str, item: Value) -> Stored<String> {
    match item {
        Value::BulkString(text) => {
            String::from_utf8(text).map_err(|_| StoreError(format!("{what} that is not UTF-8")))
        }
        other => Err(unexpected(what, &other)),
    }
}

/// A compare-and-set's answer: written, or another write came first.
fn written(answer: &Value) -> Stored<bool> {
    match answer {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(unexpected("writing a thing", other)),
    }
}

fn number(what: &str, item: &Value) -> Stored<u64> {
    match item {
        Value::Int(n) => Ok(*n as u64),
        Value::BulkString(text) => std::str::from_utf8(text)
            .ok()
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| unexpected(what, item)),
        other => Err(unexpected(what, other)),
    }
}

impl RedisJobs {
    /// Runs one call of the jobs engine ([`JobsWork`](mqstore_core::server::JobsWork)) on
    /// Redis: a handful of commands or one script, pipelined on the node's connection beside
    /// every other call in flight.
    pub async fn run(&self, call: StoreCall) -> StoreAnswer {
        use StoreAnswer as A;
        use StoreCall as C;
        let failed = |e: RedisStoreError| StoreError(e.to_string());
        match call {
            C::Job(id) => A::Job(self.job(&id).await),
            C::InsertJob(job, things) => A::Written(self.insert_job(&job, &things).await),
            C::PutJob(job) => A::Written(self.put_job(&job).await),
            C::DeleteJob(id) => A::Written(self.delete_job(&id).await),
            C::JobIds => A::Names(
                self.store
                    .query(
                        redis::cmd("ZRANGE")
                            .arg(self.global("index", ""))
                            .arg(0)
                            .arg(-1),
                    )
                    .await
                    .map_err(failed),
            ),
            C::JobThings(id, from, count) => A::Names(self.job_things(&id, from, count).await),
            C::Counts(id) => A::Counts(self.counts(&id).await),
            C::Thing(thing) => A::Thing(
                self.read_thing(&thing)
                    .await
                    .map_err(failed)
                    .and_then(|r| r.map(Arc::new)),
            ),
            C::ThingRecords(things) => A::ThingRecords(
                futures_util::future::try_join_all(things.iter().map(|t| self.read_thing(t)))
                    .await
                    .map_err(failed)
                    .and_then(|records| records.into_iter().map(|r| r.map(Arc::new)).collect()),
            ),
            C::PutThing(thing, record, tally) => {
                A::Written(match self.thing_write(&thing, &record, &tally) {
                    Ok(call) => self
                        .store
                        .eval(&call)
                        .await
                        .map_err(failed)
                        .and_then(|a| written(&a)),
                    Err(e) => Err(e),
                })
            }
            C::PutThings(writes) => A::WrittenEach(self.put_things(&writes).await),
            C::Things => A::Names(self.things().await),
            C::Due(now_ms) => A::Due(self.due(now_ms).await),
            C::NextDeadline => A::NextDeadline(
                // Each bucket's first timer; the earliest of them.
                self.timers(&["0", "0"])
                    .await
                    .map(|firsts| firsts.iter().map(|(_, deadline)| *deadline as u64).min()),
            ),
            C::Rollouts => A::Rollouts(self.rollouts().await),
            C::TakeRollout(id, from, count, job) => {
                A::Taken(self.take_rollout(&id, from, count, job.as_deref()).await)
            }
            C::StopRollout(id) => A::Written(self.stop_rollout(&id).await),
            C::AddJobThings(id, things) => A::Done(self.add_job_things(&id, &things).await),
            C::Entry(table, name) => A::Entry(
                self.store
                    .query(
                        redis::cmd("HGET")
                            .arg(self.global("tab:", &table))
                            .arg(name),
                    )
                    .await
                    .map_err(failed),
            ),
            C::PutEntry(table, name, value, create) => A::Written(
                self.put_entry(&table, &name, value.as_deref(), create)
                    .await,
            ),
            C::SwapEntry(table, name, expected, value) => A::Written(
                self.swap_entry(&table, &name, expected.as_deref(), &value)
                    .await,
            ),
            C::Entries(table, after, count) => {
                A::Entries(self.entries(&table, after.as_deref(), count).await)
            }
            C::DropTable(table) => A::Done(
                self.store
                    .write::<i64>(
                        redis::cmd("DEL")
                            .arg(self.global("tab:", &table))
                            .arg(self.global("tabx:", &table)),
                    )
                    .await
                    .map(drop)
                    .map_err(failed),
            ),
            other => A::failed(
                &other,
                StoreError(format!("a call Redis cannot run: {other:?}")),
            ),
        }
    }

    /// This store as a [`JobsStore`](mqstore_core::jobs::JobsStore) whose every call waits
    /// for Redis on `runtime` (for a blocking thread, never a task of that runtime: tests and
    /// tools).
    pub fn blocking(self, runtime: tokio::runtime::Handle) -> Calls<BlockingRedisJobs> {
        Calls(BlockingRedisJobs {
            jobs: self,
            runtime,
        })
    }

    async fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        let cached = self.known.lock().ok().and_then(|k| k.get(job_id).cloned());
        let mut call = self.scripts.read.call();
        call.key(self.global("jr:", job_id))
            .arg(cached.as_ref().map_or(-1, |job| job.revision as i64));
        let Value::Array(answer) = self.eval(&call).await? else {
            return Err(StoreError(
                "Redis answered a job's read with no list".into(),
            ));
        };
        let mut answer = answer.into_iter();
        let (Some(revision), json) = (answer.next(), answer.next()) else {
            self.forget(job_id);
            return Ok(None);
        };
        let revision = number("a job's revision", &revision)?;
        match (json, cached) {
            (None, Some(cached)) if cached.revision == revision => Ok(Some(cached)),
            (Some(json), _) => {
                let json = match json {
                    Value::BulkString(json) => json,
                    other => return Err(unexpected("a job", &other)),
                };
                let mut job = decode::<Job>("job", &json)?.upgraded();
                job.revision = revision;
                Ok(Some(self.remember(job)))
            }
            (None, _) => Err(StoreError(
                "Redis answered a job's read without the job".into(),
            )),
        }
    }

    /// Runs a script, its failure as the jobs store's.
    async fn eval(&self, call: &Call<'_>) -> Stored<Value> {
        self.store
            .eval(call)
            .await
            .map_err(|e| StoreError(e.to_string()))
    }

    async fn insert_job(&self, job: &Job, things: &[String]) -> Stored<bool> {
        let json = serde_json::to_vec(job).map_err(|e| StoreError(e.to_string()))?;
        let mut call = self.scripts.insert.call();
        call.key(self.global("jr:", &job.id))
            .key(self.global("index", ""))
            .key(self.global("targets:", &job.id))
            .key(self.global("rollouts", ""))
            .arg(&job.id)
            .arg(json);
        for thing in things {
            call.arg(thing);
        }
        match self.eval(&call).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected("adding a job", &other)),
        }
    }

    async fn put_job(&self, job: &Job) -> Stored<bool> {
        let json = serde_json::to_vec(job).map_err(|e| StoreError(e.to_string()))?;
        let mut call = self.scripts.update.call();
        call.key(self.global("jr:", &job.id))
            .arg(job.revision)
            .arg(json);
        match self.eval(&call).await? {
            Value::Int(1) => Ok(true),
            Value::Int(0) => Ok(false),
            other => Err(unexpected("writing a job", &other)),
        }
    }

    async fn delete_job(&self, job_id: &str) -> Stored<bool> {
        let mut call = self.scripts.delete.call();
        call.key(self.global("jr:", job_id))
            .key(self.global("index", ""))
            .key(self.global("targets:", job_id))
            .key(self.global("rollouts", ""))
            .key(self.global("cursors", ""))
            .arg(job_id);
        let removed = match self.eval(&call).await? {
            Value::Int(1) => true,
            Value::Int(0) => false,
            other => return Err(unexpected("deleting a job", &other)),
        };
        self.forget(job_id);
        let store = &self.store;
        self.each_bucket(|bucket| {
            let name = store.name(bucket, b"jcount:", job_id.as_bytes());
            async move { store.write::<i64>(redis::cmd("DEL").arg(name)).await }
        })
        .await?;
        Ok(removed)
    }

    async fn job_things(&self, job_id: &str, from: u64, count: u64) -> Stored<Vec<String>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        self.store
            .query(
                redis::cmd("LRANGE")
                    .arg(self.global("targets:", job_id))
                    .arg(from)
                    .arg(from.saturating_add(count - 1).min(i64::MAX as u64)),
            )
            .await
            .map_err(|e| StoreError(e.to_string()))
    }

    async fn counts(&self, job_id: &str) -> Stored<Counts> {
        let buckets: Vec<HashMap<String, i64>> = self
            .each_bucket(|bucket| {
                let name = self.store.name(bucket, b"jcount:", job_id.as_bytes());
                async move { self.store.query(redis::cmd("HGETALL").arg(name)).await }
            })
            .await?;
        let mut counts = Counts::new();
        for (status, n) in buckets.into_iter().flatten() {
            let status = Status::parse(&status)
                .ok_or_else(|| StoreError(format!("a count of an unknown status {status:?}")))?;
            *counts.entry(status).or_default() += n.max(0) as u64;
        }
        counts.retain(|_, n| *n > 0);
        Ok(counts)
    }

    /// The writes go out together on the one connection (pipelined), each its own
    /// compare-and-set script: one round trip.
    async fn put_things(&self, writes: &[ThingWrite]) -> Vec<Stored<bool>> {
        let calls: Vec<Stored<Call<'_>>> = writes
            .iter()
            .map(|w| self.thing_write(&w.thing, &w.record, &w.tally))
            .collect();
        let answers = calls.iter().map(|call| async move {
            match call {
                Ok(call) => self.eval(call).await.and_then(|answer| written(&answer)),
                Err(e) => Err(e.clone()),
            }
        });
        futures_util::future::join_all(answers).await
    }

    async fn things(&self) -> Stored<Vec<String>> {
        let store = &self.store;
        let buckets: Vec<Vec<String>> = self
            .each_bucket(|bucket| {
                let name = store.name(bucket, b"jthings", b"");
                async move { store.query(redis::cmd("SMEMBERS").arg(name)).await }
            })
            .await?;
        let mut things: Vec<String> = buckets.into_iter().flatten().collect();
        things.sort();
        Ok(things)
    }

    async fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>> {
        let range = [
            "-inf",
            &now_ms.to_string(),
            "BYSCORE",
            "LIMIT",
            "0",
            &DUE_BATCH.to_string(),
        ];
        let mut due: Vec<(u64, String, String)> = Vec::new();
        for (member, deadline) in self.timers(&range).await? {
            let Some((thing, job_id)) = member.split_once(' ') else {
                return Err(StoreError(format!("a malformed timer {member:?} in Redis")));
            };
            due.push((deadline as u64, thing.to_owned(), job_id.to_owned()));
        }
        due.sort();
        Ok(due
            .into_iter()
            .map(|(_, thing, job)| (thing, job))
            .collect())
    }

    async fn rollouts(&self) -> Stored<Vec<Rollout>> {
        let mut call = self.scripts.rollouts.call();
        call.key(self.global("rollouts", ""))
            .key(self.global("cursors", ""))
            .arg(self.global("targets:", ""));
        let Value::Array(items) = self.eval(&call).await? else {
            return Err(StoreError(
                "Redis answered the rollouts with no list".into(),
            ));
        };
        let mut items = items.into_iter();
        let mut rollouts = Vec::with_capacity(items.len() / 3);
        while let (Some(job_id), Some(next), Some(total)) =
            (items.next(), items.next(), items.next())
        {
            rollouts.push(Rollout {
                job_id: text("a rollout", job_id)?,
                next: number("a rollout's cursor", &next)?,
                total: number("a rollout's length", &total)?,
            });
        }
        Ok(rollouts)
    }

    async fn take_rollout(
        &self,
        job_id: &str,
        from: u64,
        count: u64,
        job: Option<&Job>,
    ) -> Stored<Option<Vec<String>>> {
        let mut call = self.scripts.take.call();
        call.key(self.global("rollouts", ""))
            .key(self.global("cursors", ""))
            .key(self.global("targets:", job_id))
            .key(self.global("jr:", job_id))
            .arg(job_id)
            .arg(from)
            .arg(count.min(1 << 53));
        if let Some(job) = job {
            let json = serde_json::to_vec(job).map_err(|e| StoreError(e.to_string()))?;
            call.arg(job.revision).arg(json);
        }
        let Value::Array(items) = self.eval(&call).await? else {
            return Err(StoreError(
                "Redis answered a rollout claim with no list".into(),
            ));
        };
        let mut items = items.into_iter();
        if items.next().is_none() {
            return Ok(None);
        }
        items
            .map(|item| text("a rollout claim", item))
            .collect::<Stored<Vec<_>>>()
            .map(Some)
    }

    async fn stop_rollout(&self, job_id: &str) -> Stored<bool> {
        let mut call = self.scripts.stop.call();
        call.key(self.global("rollouts", ""))
            .key(self.global("cursors", ""))
            .arg(job_id);
        Ok(matches!(self.eval(&call).await?, Value::Int(n) if n > 0))
    }

    async fn add_job_things(&self, job_id: &str, things: &[String]) -> Stored<()> {
        let mut call = self.scripts.more.call();
        call.key(self.global("jr:", job_id))
            .key(self.global("targets:", job_id))
            .key(self.global("rollouts", ""))
            .key(self.global("cursors", ""))
            .arg(job_id);
        for thing in things {
            call.arg(thing);
        }
        self.eval(&call).await?;
        Ok(())
    }

    async fn put_entry(
        &self,
        table: &str,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
    ) -> Stored<bool> {
        let mut call = self.scripts.entry.call();
        call.key(self.global("tab:", table))
            .key(self.global("tabx:", table))
            .arg(name)
            .arg(u8::from(value.is_some()))
            .arg(value.unwrap_or_default())
            .arg(u8::from(create));
        match self.eval(&call).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected("writing an entry", &other)),
        }
    }

    /// [`JobsStore::swap_entry`](mqstore_core::jobs::JobsStore::swap_entry) in one script: the
    /// entry is compared and written with no other node's write between.
    async fn swap_entry(
        &self,
        table: &str,
        name: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Stored<bool> {
        let mut call = self.scripts.entry.call();
        call.key(self.global("tab:", table))
            .key(self.global("tabx:", table))
            .arg(name)
            .arg(1)
            .arg(value)
            // Only while there is none, or only while it holds `expected`.
            .arg(if expected.is_some() { 2 } else { 1 })
            .arg(expected.unwrap_or_default());
        match self.eval(&call).await? {
            Value::Int(n) => Ok(n > 0),
            other => Err(unexpected("swapping an entry", &other)),
        }
    }

    async fn entries(&self, table: &str, after: Option<&str>, count: u64) -> Stored<Entries> {
        let mut call = self.scripts.entries.call();
        call.key(self.global("tab:", table))
            .key(self.global("tabx:", table))
            .arg(after.unwrap_or_default())
            .arg(count.min(i64::MAX as u64));
        let Value::Array(items) = self.eval(&call).await? else {
            return Err(StoreError("Redis answered entries with no list".into()));
        };
        let mut items = items.into_iter();
        let mut entries = Vec::with_capacity(items.len() / 2);
        while let (Some(name), Some(value)) = (items.next(), items.next()) {
            let value = match value {
                Value::BulkString(value) => value,
                other => return Err(unexpected("an entry", &other)),
            };
            entries.push((text("an entry's name", name)?, value));
        }
        Ok(entries)
    }
}

/// [`RedisJobs`] whose calls wait for Redis on the calling thread (see
/// [`RedisJobs::blocking`]).
pub struct BlockingRedisJobs {
    jobs: RedisJobs,
    runtime: tokio::runtime::Handle,
}

impl Answers for BlockingRedisJobs {
    fn answer(&self, call: impl FnOnce() -> StoreCall) -> StoreAnswer {
        self.runtime.block_on(self.jobs.run(call()))
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
        let mut call = self.scripts.claim.call();
        call.key(self.global("listener", "")).arg(token).arg(ttl_ms);
        Ok(matches!(self.store.eval(&call).await?, Value::Int(1)))
    }

    /// Gives the listener lease up (a node that stops), so another node takes over at once.
    pub async fn release_listener(&self, token: &str) -> Result<(), RedisStoreError> {
        let mut call = self.scripts.release.call();
        call.key(self.global("listener", "")).arg(token);
        self.store.eval(&call).await?;
        Ok(())
    }
}
