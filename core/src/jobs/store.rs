//! Where the jobs service's state lives: jobs, the things each job runs on, each thing's
//! executions, the counts of executions per job and status, the timers, and the rollouts.
//!
//! As with the state store ([`crate::store`]), the engine ([`super::Jobs`]) decides
//! everything and the store only keeps data: each method is one atomic step with no rules of
//! the jobs protocol in it. A thing's executions are one record with a revision, and so is a
//! job; the engine reads the record, computes the transition, and writes it back only if the
//! revision is still the one it read ([`JobsStore::put_thing`], [`JobsStore::put_job`],
//! compare-and-set), reading and computing again if not. That is what keeps transitions atomic
//! when several nodes share a store (an execution is never started twice, a version never
//! skipped, a job never aborted twice): a Redis store runs each method as one script (a thing's
//! record as one value under its bucket's hash tag, with the timers and the counts of that
//! bucket; the jobs, their things and the rollout cursors under one tag), and the memory store
//! ([`MemoryJobs`]) runs them in-process.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::model::{Execution, Job, Stored};
use super::wire::Status;

/// How a write changes the counts of latest executions by job and status: (job id, status,
/// change), from [`tally_change`].
pub type Tally = Vec<(String, Status, i64)>;

/// Counts of a job's latest executions (one per thing) by status.
pub type Counts = BTreeMap<Status, u64>;

/// One thing's executions: job id → its executions, oldest first (a retry appends one).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThingRecord {
    /// Increases with every write; [`JobsStore::put_thing`] compares it.
    #[serde(skip)]
    pub revision: u64,
    /// The thing's executions by job id, the latest last.
    pub executions: BTreeMap<String, Vec<Execution>>,
    /// Executions ever queued on this thing: orders executions queued in the same second.
    pub queued: u64,
}

impl ThingRecord {
    /// The latest execution of `job_id`.
    pub fn latest(&self, job_id: &str) -> Option<&Execution> {
        self.executions.get(job_id)?.last()
    }

    pub(crate) fn latest_mut(&mut self, job_id: &str) -> Option<&mut Execution> {
        self.executions.get_mut(job_id)?.last_mut()
    }

    /// The running timers: (deadline, job id) of each latest execution that has one.
    pub fn timers(&self) -> impl Iterator<Item = (u64, &String)> {
        self.executions
            .iter()
            .filter_map(|(job_id, list)| Some((list.last()?.deadline()?, job_id)))
    }

    /// The status of each job's latest execution.
    fn latest_statuses(&self) -> impl Iterator<Item = (&String, Status)> {
        self.executions
            .iter()
            .filter_map(|(job_id, list)| Some((job_id, list.last()?.status)))
    }
}

/// How the counts change when a thing's record goes from `before` to `after`.
pub fn tally_change(before: &ThingRecord, after: &ThingRecord) -> Tally {
    let latest = |record: &ThingRecord, job_id: &str| record.latest(job_id).map(|e| e.status);
    let mut tally = Tally::new();
    for (job_id, status) in before.latest_statuses() {
        if latest(after, job_id) != Some(status) {
            tally.push((job_id.clone(), status, -1));
        }
    }
    for (job_id, status) in after.latest_statuses() {
        if latest(before, job_id) != Some(status) {
            tally.push((job_id.clone(), status, 1));
        }
    }
    tally
}

/// A rollout under way: the job, the index of its next thing, and how many things it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// The job being rolled out.
    pub job_id: String,
    /// The index of the next target to notify.
    pub next: u64,
    /// How many targets there are.
    pub total: u64,
}

/// The state of a jobs service, one atomic step per method (see the module's documentation).
/// A method that fails ([`StoreError`](super::StoreError)) changed nothing.
pub trait JobsStore {
    /// A job, by id, with its revision.
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>>;

    /// Adds a job that runs on `things` (in rollout order) and starts its rollout; `false`
    /// (and nothing changed) when one with its id exists.
    fn insert_job(&mut self, job: Job, things: &[String]) -> Stored<bool>;

    /// Writes a job if its revision is still `job.revision` (it then gets the next one);
    /// `false` when another write came first.
    fn put_job(&mut self, job: Job) -> Stored<bool>;

    /// Removes a job, its things, its rollout and its counts (not its executions); `true`
    /// when this call removed the job (`false`: it was gone already, another call first).
    fn delete_job(&mut self, job_id: &str) -> Stored<bool>;

    /// Every job's id, in id order.
    fn job_ids(&self) -> Stored<Vec<String>>;

    /// Up to `count` of the things a job runs on, from the `from`th.
    fn job_things(&self, job_id: &str, from: u64, count: u64) -> Stored<Vec<String>>;

    /// The counts of a job's latest executions by status.
    fn counts(&self, job_id: &str) -> Stored<Counts>;

    /// A thing's record (empty, revision 0, for a thing never seen), shared: a store that
    /// keeps records in memory hands out its own, and a change is made to a copy (`put_thing`
    /// writes it back), so a read copies nothing.
    fn thing(&self, thing: &str) -> Stored<Arc<ThingRecord>>;

    /// Writes a thing's record if its revision is still `record.revision` (the record then
    /// gets the next revision), keeps the timers of its executions and applies `tally` (see
    /// [`tally_change`]) to the counts; `false` when another write came first (read again and
    /// retry).
    fn put_thing(&mut self, thing: &str, record: ThingRecord, tally: &Tally) -> Stored<bool>;

    /// Several things' records, in order: [`JobsStore::thing`] of each, in one round trip
    /// where the store has round trips (a rollout reads its batch's things so).
    fn thing_records(&self, things: &[String]) -> Stored<Vec<Arc<ThingRecord>>> {
        things.iter().map(|thing| self.thing(thing)).collect()
    }

    /// Several [`JobsStore::put_thing`] writes, each a compare-and-set of its own, in one
    /// round trip where the store has round trips: for each, whether it was written, or the
    /// store's error (a store that fails midway may have made some and not others).
    fn put_things(&mut self, writes: Vec<ThingWrite>) -> Vec<Stored<bool>> {
        writes
            .into_iter()
            .map(|w| self.put_thing(&w.thing, w.record, &w.tally))
            .collect()
    }

    /// Every thing that has a record.
    fn things(&self) -> Stored<Vec<String>>;

    /// The (thing, job id) of every execution whose timer ran out by `now_ms`, earliest first.
    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>>;

    /// The earliest timer.
    fn next_deadline(&self) -> Stored<Option<u64>>;

    /// The rollouts under way, oldest job first.
    fn rollouts(&self) -> Stored<Vec<Rollout>>;

    /// Claims a job's things `from..from + count` if its rollout's next thing is still
    /// `from`, and, with `job`, writes the job in the same step if its revision is still
    /// `job.revision` (a rollout's pace records each claim): all or nothing, `None` when
    /// another node came first. Each thing is handed out once; a rollout that hands out its
    /// last thing ends.
    fn take_rollout(
        &mut self,
        job_id: &str,
        from: u64,
        count: u64,
        job: Option<Job>,
    ) -> Stored<Option<Vec<String>>>;

    /// Stops a job's rollout: its remaining things are never handed out. Whether this call
    /// took it off the list (another call, on any node, may have first).
    fn stop_rollout(&mut self, job_id: &str) -> Stored<bool>;

    /// Appends things to a job's things (a continuous job's group grew); its rollout goes
    /// on to them, started again if it had handed out every thing.
    fn add_job_things(&mut self, job_id: &str, things: &[String]) -> Stored<()>;

    /// An entry of one of the named tables the operator API keeps beside the jobs (thing
    /// groups, their members, job templates, schedules; see [`super::tables`]).
    fn entry(&self, table: &str, name: &str) -> Stored<Option<Vec<u8>>>;

    /// Writes an entry (`Some`) or removes it (`None`); with `create`, only when there is
    /// none. Whether anything changed.
    fn put_entry(
        &mut self,
        table: &str,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
    ) -> Stored<bool>;

    /// Writes an entry only while it still holds `expected` (`None`: while there is none):
    /// the compare-and-set of a read-modify-write that several nodes may race on (a device
    /// shadow's update). Whether it was written. The default reads and then writes, atomic on
    /// a store that runs one call at a time; a shared store does both in one step.
    fn swap_entry(
        &mut self,
        table: &str,
        name: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Stored<bool> {
        if self.entry(table, name)?.as_deref() != expected {
            return Ok(false);
        }
        self.put_entry(table, name, Some(value), false)
    }

    /// Up to `count` entries of a table in name order, after `after`.
    fn entries(&self, table: &str, after: Option<&str>, count: u64) -> Stored<Entries>;

    /// Removes a table and every entry in it.
    fn drop_table(&mut self, table: &str) -> Stored<()>;
}

/// One write of [`JobsStore::put_things`]: as [`JobsStore::put_thing`]'s arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct ThingWrite {
    /// The thing.
    pub thing: String,
    /// Its new record, with the revision it was read at.
    pub record: ThingRecord,
    /// The change of the counts (see [`tally_change`]).
    pub tally: Tally,
}

/// Entries of a table: (name, value), in name order.
pub type Entries = Vec<(String, Vec<u8>)>;

/// The jobs state in this process's memory.
#[derive(Debug, Default)]
pub struct MemoryJobs {
    jobs: BTreeMap<String, Arc<Job>>,
    job_things: HashMap<String, Vec<String>>,
    counts: HashMap<String, Counts>,
    things: HashMap<String, Arc<ThingRecord>>,
    /// (deadline, thing, job id), earliest first.
    timers: BTreeSet<(u64, String, String)>,
    /// Jobs being rolled out, oldest first, with the index of their next thing.
    rollouts: VecDeque<(String, u64)>,
    tables: HashMap<String, BTreeMap<String, Vec<u8>>>,
}

/// Applies `tally` to `counts`.
fn apply(counts: &mut HashMap<String, Counts>, tally: &Tally) {
    for (job_id, status, change) in tally {
        let count = counts
            .entry(job_id.clone())
            .or_default()
            .entry(*status)
            .or_default();
        *count = count.saturating_add_signed(*change);
    }
}

impl JobsStore for MemoryJobs {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        Ok(self.jobs.get(job_id).cloned())
    }

    fn insert_job(&mut self, job: Job, things: &[String]) -> Stored<bool> {
        if self.jobs.contains_key(&job.id) {
            return Ok(false);
        }
        self.job_things.insert(job.id.clone(), things.to_vec());
        self.rollouts.push_back((job.id.clone(), 0));
        self.jobs.insert(job.id.clone(), Arc::new(job));
        Ok(true)
    }

    fn put_job(&mut self, mut job: Job) -> Stored<bool> {
        let Some(stored) = self.jobs.get_mut(&job.id) else {
            return Ok(false);
        };
        if stored.revision != job.revision {
            return Ok(false);
        }
        job.revision += 1;
        *stored = Arc::new(job);
        Ok(true)
    }

    fn delete_job(&mut self, job_id: &str) -> Stored<bool> {
        let removed = self.jobs.remove(job_id).is_some();
        self.job_things.remove(job_id);
        self.counts.remove(job_id);
        self.rollouts.retain(|(id, _)| id != job_id);
        Ok(removed)
    }

    fn job_ids(&self) -> Stored<Vec<String>> {
        Ok(self.jobs.keys().cloned().collect())
    }

    fn job_things(&self, job_id: &str, from: u64, count: u64) -> Stored<Vec<String>> {
        let things = self.job_things.get(job_id).map_or(&[][..], |t| &t[..]);
        let from = (from as usize).min(things.len());
        let to = from.saturating_add(count as usize).min(things.len());
        Ok(things[from..to].to_vec())
    }

    fn counts(&self, job_id: &str) -> Stored<Counts> {
        let mut counts = self.counts.get(job_id).cloned().unwrap_or_default();
        counts.retain(|_, n| *n > 0);
        Ok(counts)
    }

    fn thing(&self, thing: &str) -> Stored<Arc<ThingRecord>> {
        Ok(self.things.get(thing).cloned().unwrap_or_default())
    }

    fn put_thing(&mut self, thing: &str, mut record: ThingRecord, tally: &Tally) -> Stored<bool> {
        let stored = self.things.entry(thing.to_owned()).or_default();
        if stored.revision != record.revision {
            return Ok(false);
        }
        for (deadline, job_id) in stored.timers() {
            self.timers
                .remove(&(deadline, thing.to_owned(), job_id.clone()));
        }
        for (deadline, job_id) in record.timers() {
            self.timers
                .insert((deadline, thing.to_owned(), job_id.clone()));
        }
        record.revision += 1;
        *stored = Arc::new(record);
        apply(&mut self.counts, tally);
        Ok(true)
    }

    fn things(&self) -> Stored<Vec<String>> {
        Ok(self.things.keys().cloned().collect())
    }

    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>> {
        Ok(self
            .timers
            .iter()
            .take_while(|(deadline, _, _)| *deadline <= now_ms)
            .map(|(_, thing, job_id)| (thing.clone(), job_id.clone()))
            .collect())
    }

    fn next_deadline(&self) -> Stored<Option<u64>> {
        Ok(self.timers.first().map(|(deadline, _, _)| *deadline))
    }

    fn rollouts(&self) -> Stored<Vec<Rollout>> {
        Ok(self
            .rollouts
            .iter()
            .map(|(job_id, next)| Rollout {
                job_id: job_id.clone(),
                next: *next,
                total: self.job_things.get(job_id).map_or(0, |t| t.len() as u64),
            })
            .collect())
    }

    fn take_rollout(
        &mut self,
        job_id: &str,
        from: u64,
        count: u64,
        job: Option<Job>,
    ) -> Stored<Option<Vec<String>>> {
        let Some(at) = self.rollouts.iter().position(|(id, _)| id == job_id) else {
            return Ok(None);
        };
        let stale_job = job.as_ref().is_some_and(|job| {
            self.jobs
                .get(&job.id)
                .is_none_or(|stored| stored.revision != job.revision)
        });
        if self.rollouts[at].1 != from || stale_job {
            return Ok(None);
        }
        if let Some(job) = job {
            self.put_job(job)?;
        }
        let things = self.job_things.get(job_id).map_or(&[][..], |t| &t[..]);
        let total = things.len() as u64;
        let end = from.saturating_add(count).min(total).max(from);
        let claimed = things[from as usize..end as usize].to_vec();
        if end >= total {
            self.rollouts.remove(at);
        } else {
            self.rollouts[at].1 = end;
        }
        Ok(Some(claimed))
    }

    fn stop_rollout(&mut self, job_id: &str) -> Stored<bool> {
        let listed = self.rollouts.len();
        self.rollouts.retain(|(id, _)| id != job_id);
        Ok(self.rollouts.len() < listed)
    }

    fn add_job_things(&mut self, job_id: &str, things: &[String]) -> Stored<()> {
        let Some(list) = self.job_things.get_mut(job_id) else {
            return Ok(());
        };
        let end = list.len() as u64;
        list.extend_from_slice(things);
        if !self.rollouts.iter().any(|(id, _)| id == job_id) {
            self.rollouts.push_back((job_id.to_owned(), end));
        }
        Ok(())
    }

    fn entry(&self, table: &str, name: &str) -> Stored<Option<Vec<u8>>> {
        Ok(self.tables.get(table).and_then(|t| t.get(name)).cloned())
    }

    fn put_entry(
        &mut self,
        table: &str,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
    ) -> Stored<bool> {
        let Some(value) = value else {
            let Some(entries) = self.tables.get_mut(table) else {
                return Ok(false);
            };
            let removed = entries.remove(name).is_some();
            if entries.is_empty() {
                self.tables.remove(table);
            }
            return Ok(removed);
        };
        let entries = self.tables.entry(table.to_owned()).or_default();
        if create && entries.contains_key(name) {
            return Ok(false);
        }
        entries.insert(name.to_owned(), value.to_vec());
        Ok(true)
    }

    fn entries(&self, table: &str, after: Option<&str>, count: u64) -> Stored<Entries> {
        let Some(entries) = self.tables.get(table) else {
            return Ok(Vec::new());
        };
        let range = match after {
            Some(after) => entries
                .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded)),
            None => entries.range::<str, _>(..),
        };
        Ok(range
            .take(count.min(usize::MAX as u64) as usize)
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect())
    }

    fn drop_table(&mut self, table: &str) -> Stored<()> {
        self.tables.remove(table);
        Ok(())
    }
}

/// A store borrowed: several engines can take turns over one store (as nodes share one).
impl<S: JobsStore + ?Sized> JobsStore for &mut S {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        (**self).job(job_id)
    }
    fn insert_job(&mut self, job: Job, things: &[String]) -> Stored<bool> {
        (**self).insert_job(job, things)
    }
    fn put_job(&mut self, job: Job) -> Stored<bool> {
        (**self).put_job(job)
    }
    fn delete_job(&mut self, job_id: &str) -> Stored<bool> {
        (**self).delete_job(job_id)
    }
    fn job_ids(&self) -> Stored<Vec<String>> {
        (**self).job_ids()
    }
    fn job_things(&self, job_id: &str, from: u64, count: u64) -> Stored<Vec<String>> {
        (**self).job_things(job_id, from, count)
    }
    fn counts(&self, job_id: &str) -> Stored<Counts> {
        (**self).counts(job_id)
    }
    fn thing(&self, thing: &str) -> Stored<Arc<ThingRecord>> {
        (**self).thing(thing)
    }
    fn put_thing(&mut self, thing: &str, record: ThingRecord, tally: &Tally) -> Stored<bool> {
        (**self).put_thing(thing, record, tally)
    }
    fn thing_records(&self, things: &[String]) -> Stored<Vec<Arc<ThingRecord>>> {
        (**self).thing_records(things)
    }
    fn put_things(&mut self, writes: Vec<ThingWrite>) -> Vec<Stored<bool>> {
        (**self).put_things(writes)
    }
    fn things(&self) -> Stored<Vec<String>> {
        (**self).things()
    }
    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>> {
        (**self).due(now_ms)
    }
    fn next_deadline(&self) -> Stored<Option<u64>> {
        (**self).next_deadline()
    }
    fn rollouts(&self) -> Stored<Vec<Rollout>> {
        (**self).rollouts()
    }
    fn take_rollout(
        &mut self,
        job_id: &str,
        from: u64,
        count: u64,
        job: Option<Job>,
    ) -> Stored<Option<Vec<String>>> {
        (**self).take_rollout(job_id, from, count, job)
    }
    fn stop_rollout(&mut self, job_id: &str) -> Stored<bool> {
        (**self).stop_rollout(job_id)
    }
    fn add_job_things(&mut self, job_id: &str, things: &[String]) -> Stored<()> {
        (**self).add_job_things(job_id, things)
    }
    fn entry(&self, table: &str, name: &str) -> Stored<Option<Vec<u8>>> {
        (**self).entry(table, name)
    }
    fn put_entry(
        &mut self,
        table: &str,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
    ) -> Stored<bool> {
        (**self).put_entry(table, name, value, create)
    }
    fn swap_entry(
        &mut self,
        table: &str,
        name: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Stored<bool> {
        (**self).swap_entry(table, name, expected, value)
    }
    fn entries(&self, table: &str, after: Option<&str>, count: u64) -> Stored<Entries> {
        (**self).entries(table, after, count)
    }
    fn drop_table(&mut self, table: &str) -> Stored<()> {
        (**self).drop_table(table)
    }
}

/// The memory jobs store with every change recorded for the durable store's log
/// (`mqstore serve --data-dir`; see [`crate::store::DurableStore`]): jobs, things' records
/// and rollout progress as [`crate::store::log`] records, taken by the driver with
/// [`DurableJobs::take_pending`]. Made by [`DurableJobs::default`] it records nothing.
#[derive(Debug, Default)]
pub struct DurableJobs {
    inner: MemoryJobs,
    recording: bool,
    pending: Vec<u8>,
}

/// A job as the log keeps it: the job and the things it runs on.
#[derive(serde::Serialize, serde::Deserialize)]
struct LoggedJob {
    #[serde(flatten)]
    job: Job,
    /// Absent when the job's `targets` are its things (as every job before groups).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    things: Option<Vec<String>>,
}

impl DurableJobs {
    /// An empty store that records its changes.
    pub fn recording() -> Self {
        Self {
            recording: true,
            ..Self::default()
        }
    }

    /// Replays one record of the log (in order); other records are ignored.
    pub fn replay(&mut self, record: crate::store::log::Record) -> Result<(), String> {
        use crate::store::log::Record;
        let store = &mut self.inner;
        match record {
            Record::Job(json) => {
                let logged: LoggedJob =
                    serde_json::from_slice(&json).map_err(|e| format!("a job: {e}"))?;
                let mut job = logged.job.upgraded();
                let things = logged.things.unwrap_or_else(|| job.targets.clone());
                match store.jobs.get(&job.id) {
                    // A later state of a job: it keeps its things and rollout.
                    Some(stored) => {
                        job.revision = stored.revision + 1;
                        store.jobs.insert(job.id.clone(), Arc::new(job));
                    }
                    None => {
                        store.job_things.insert(job.id.clone(), things);
                        store.jobs.insert(job.id.clone(), Arc::new(job));
                    }
                }
            }
            Record::JobDeleted(job_id) => {
                store.delete_job(&job_id).map_err(|e| e.to_string())?;
            }
            Record::JobThings { job_id, things } => {
                if let Some(list) = store.job_things.get_mut(&job_id) {
                    list.extend(things);
                }
            }
            Record::Entry { table, name, value } => {
                store
                    .put_entry(&table, &name, value.as_deref(), false)
                    .map_err(|e| e.to_string())?;
            }
            Record::TableDropped(table) => {
                store.tables.remove(&table);
            }
            Record::Thing { thing, json } => {
                let mut record: ThingRecord =
                    serde_json::from_slice(&json).map_err(|e| format!("thing {thing}: {e}"))?;
                // The revision is the store's own counter: continue from the stored one.
                let before = store.thing(&thing).unwrap_or_default();
                record.revision = before.revision;
                let tally = tally_change(&before, &record);
                let _ = store.put_thing(&thing, record, &tally);
            }
            Record::Rollout { job_id, next } => {
                store.rollouts.retain(|(id, _)| *id != job_id);
                if let Some(next) = next {
                    store.rollouts.push_back((job_id, next));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The records of this store's changes since the last call.
    pub fn take_pending(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    /// The whole store as records, appended to `out` (compaction).
    pub fn snapshot(&self, out: &mut Vec<u8>) {
        use crate::store::log;
        for job in self.inner.jobs.values() {
            log::job(out, &self.logged(job, true));
        }
        for (thing, record) in &self.inner.things {
            log::thing(
                out,
                thing,
                &serde_json::to_vec(&**record).unwrap_or_default(),
            );
        }
        for (job_id, next) in &self.inner.rollouts {
            log::rollout(out, job_id, Some(*next));
        }
        for (table, entries) in &self.inner.tables {
            for (name, value) in entries {
                log::entry(out, table, name, Some(value));
            }
        }
    }

    /// A job's record: with its things when they are not its targets (and `with_things`).
    fn logged(&self, job: &Job, with_things: bool) -> Vec<u8> {
        let things = self
            .inner
            .job_things
            .get(&job.id)
            .filter(|things| with_things && things[..] != job.targets[..])
            .map(|things| things.to_vec());
        let logged = LoggedJob {
            job: job.clone(),
            things,
        };
        serde_json::to_vec(&logged).unwrap_or_default()
    }

    fn record_rollout(&mut self, job_id: &str) {
        let next = self.inner.rollouts.iter().find(|(id, _)| id == job_id);
        let next = next.map(|(_, next)| *next);
        crate::store::log::rollout(&mut self.pending, job_id, next);
    }
}

impl JobsStore for DurableJobs {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        self.inner.job(job_id)
    }

    fn insert_job(&mut self, job: Job, things: &[String]) -> Stored<bool> {
        let id = job.id.clone();
        let inserted = self.inner.insert_job(job, things)?;
        if inserted && self.recording {
            if let Some(job) = self.inner.jobs.get(&id).cloned() {
                let json = self.logged(&job, true);
                crate::store::log::job(&mut self.pending, &json);
            }
            crate::store::log::rollout(&mut self.pending, &id, Some(0));
        }
        Ok(inserted)
    }

    fn put_job(&mut self, job: Job) -> Stored<bool> {
        let json = self.recording.then(|| self.logged(&job, false));
        let written = self.inner.put_job(job)?;
        if let (true, Some(json)) = (written, json) {
            crate::store::log::job(&mut self.pending, &json);
        }
        Ok(written)
    }

    fn delete_job(&mut self, job_id: &str) -> Stored<bool> {
        let removed = self.inner.delete_job(job_id)?;
        if self.recording {
            crate::store::log::job_deleted(&mut self.pending, job_id);
        }
        Ok(removed)
    }

    fn job_ids(&self) -> Stored<Vec<String>> {
        self.inner.job_ids()
    }

    fn job_things(&self, job_id: &str, from: u64, count: u64) -> Stored<Vec<String>> {
        self.inner.job_things(job_id, from, count)
    }

    fn counts(&self, job_id: &str) -> Stored<Counts> {
        self.inner.counts(job_id)
    }

    fn thing(&self, thing: &str) -> Stored<Arc<ThingRecord>> {
        self.inner.thing(thing)
    }

    fn put_thing(&mut self, thing: &str, record: ThingRecord, tally: &Tally) -> Stored<bool> {
        let json = self.recording.then(|| serde_json::to_vec(&record));
        let written = self.inner.put_thing(thing, record, tally)?;
        if let (true, Some(Ok(json))) = (written, json) {
            crate::store::log::thing(&mut self.pending, thing, &json);
        }
        Ok(written)
    }

    fn things(&self) -> Stored<Vec<String>> {
        self.inner.things()
    }

    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>> {
        self.inner.due(now_ms)
    }

    fn next_deadline(&self) -> Stored<Option<u64>> {
        self.inner.next_deadline()
    }

    fn rollouts(&self) -> Stored<Vec<Rollout>> {
        self.inner.rollouts()
    }

    fn take_rollout(
        &mut self,
        job_id: &str,
        from: u64,
        count: u64,
        job: Option<Job>,
    ) -> Stored<Option<Vec<String>>> {
        let json = match (&job, self.recording) {
            (Some(job), true) => Some(self.logged(job, false)),
            _ => None,
        };
        let claimed = self.inner.take_rollout(job_id, from, count, job)?;
        if claimed.is_some() && self.recording {
            if let Some(json) = json {
                crate::store::log::job(&mut self.pending, &json);
            }
            self.record_rollout(job_id);
        }
        Ok(claimed)
    }

    fn stop_rollout(&mut self, job_id: &str) -> Stored<bool> {
        let stopped = self.inner.stop_rollout(job_id)?;
        if self.recording {
            crate::store::log::rollout(&mut self.pending, job_id, None);
        }
        Ok(stopped)
    }

    fn add_job_things(&mut self, job_id: &str, things: &[String]) -> Stored<()> {
        self.inner.add_job_things(job_id, things)?;
        if self.recording && self.inner.job_things.contains_key(job_id) {
            crate::store::log::job_things(&mut self.pending, job_id, things);
            self.record_rollout(job_id);
        }
        Ok(())
    }

    fn entry(&self, table: &str, name: &str) -> Stored<Option<Vec<u8>>> {
        self.inner.entry(table, name)
    }

    fn put_entry(
        &mut self,
        table: &str,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
    ) -> Stored<bool> {
        let changed = self.inner.put_entry(table, name, value, create)?;
        if changed && self.recording {
            crate::store::log::entry(&mut self.pending, table, name, value);
        }
        Ok(changed)
    }

    fn entries(&self, table: &str, after: Option<&str>, count: u64) -> Stored<Entries> {
        self.inner.entries(table, after, count)
    }

    fn drop_table(&mut self, table: &str) -> Stored<()> {
        self.inner.drop_table(table)?;
        if self.recording {
            crate::store::log::table_dropped(&mut self.pending, table);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jobs::{JobSpec, Jobs};
    use crate::store::log;

    /// Replays `records` (a log's records, no header) into a new store.
    fn replayed(records: &[u8]) -> DurableJobs {
        let mut file = log::MAGIC.to_vec();
        file.extend_from_slice(records);
        let mut back = DurableJobs::recording();
        log::replay(&file, |record| back.replay(record).unwrap()).unwrap();
        back
    }

    #[test]
    fn jobs_things_and_a_rollout_midway_come_back_from_the_records() {
        let mut jobs = Jobs::with_store(DurableJobs::recording(), 60_000).with_rollout_batch(1);
        let targets = vec!["a".into(), "b".into(), "c".into()];
        let spec = JobSpec::new("j", targets, serde_json::json!({}));
        let mut out = Vec::new();
        // A deleted job comes back deleted.
        let gone = JobSpec::new("gone", vec!["a".into()], serde_json::json!({}));
        jobs.create_job(gone, 500, &mut out).unwrap();
        jobs.delete_job("gone", true, 600, &mut out).unwrap();
        jobs.create_job(spec, 1_000, &mut out).unwrap();
        // One target queued by create_job, one by a rollout step; one left.
        jobs.roll_out(2_000, &mut out).unwrap();
        // A later state of the job (updateJob) comes back as well.
        let update = crate::jobs::JobUpdate {
            job_id: "j".into(),
            changes: crate::jobs::JobConfig {
                description: Some("second".into()),
                ..Default::default()
            },
        };
        jobs.update_job(update, 2_500).unwrap();
        let records = jobs.store_mut().take_pending();
        let mut back = replayed(&records);
        assert_eq!(back.job_ids().unwrap(), ["j"]);
        let job = back.job("j").unwrap().unwrap();
        assert_eq!(job.config.description.as_deref(), Some("second"));
        let queued =
            |store: &DurableJobs, thing: &str| store.thing(thing).unwrap().latest("j").is_some();
        assert!(queued(&back, "a") && queued(&back, "b") && !queued(&back, "c"));
        assert!(back.thing("a").unwrap().latest("gone").is_none());
        assert_eq!(
            back.counts("j").unwrap(),
            Counts::from([(Status::Queued, 2)])
        );
        assert_eq!(back.take_rollout("j", 2, 10, None).unwrap().unwrap(), ["c"]);

        // A snapshot gives the same.
        let mut snapshot = Vec::new();
        jobs.store().snapshot(&mut snapshot);
        let mut again = replayed(&snapshot);
        assert_eq!(
            again.take_rollout("j", 1, 10, None).unwrap(),
            None,
            "not at 1"
        );
        assert_eq!(
            again.take_rollout("j", 2, 10, None).unwrap().unwrap(),
            ["c"]
        );
        assert_eq!(
            again.thing("a").unwrap().latest("j"),
            jobs.store().thing("a").unwrap().latest("j")
        );
        assert_eq!(again.counts("j").unwrap(), back.counts("j").unwrap());
    }

    #[test]
    fn a_job_written_by_an_older_mqstore_reads_as_today_s() {
        let old = br#"{"id":"j","document":{},"targets":["a"],"in_progress_timeout_minutes":5,"max_retries":2}"#;
        let mut log = Vec::new();
        log::job(&mut log, old);
        let back = replayed(&log);
        let job = back.job("j").unwrap().unwrap();
        assert_eq!(job.in_progress_timeout_minutes(), Some(5));
        assert_eq!(
            job.config.job_executions_retry_config,
            Some(crate::jobs::RetryConfig::all(2))
        );
        assert_eq!(back.job_things("j", 0, 10).unwrap(), ["a"]);
    }
}
