//! Where the jobs service's state lives: jobs, each thing's executions, the timers, and the
//! rollouts of new jobs.
//!
//! As with the state store ([`crate::store`]), the engine ([`super::Jobs`]) decides
//! everything and the store only keeps data: each method is one atomic step with no rules of
//! the jobs protocol in it. A thing's executions are one record with a revision; the engine
//! reads the record, computes the transition, and writes it back only if the revision is still
//! the one it read ([`JobsStore::put_thing`], compare-and-set), reading and computing again if
//! not. That is what keeps transitions atomic when several nodes share a store (an execution
//! is never started twice, a version never skipped): a Redis store runs each method as one
//! script (the record as one value under a `{thing}` hash tag, the timers as a sorted set, the
//! rollout cursor as a counter), and the memory store ([`MemoryJobs`]) runs them in-process.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use super::model::{Execution, Job};

/// A jobs store that could not do what was asked (a shared store that is unreachable): the
/// request that needed it is answered with an error, and nothing was changed by it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the jobs store failed: {0}")]
pub struct StoreError(pub String);

/// What a [`JobsStore`] method returns.
pub type Stored<T> = Result<T, StoreError>;

/// One thing's executions: job id → its executions, oldest first (a retry appends one).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThingRecord {
    /// Increases with every write; [`JobsStore::put_thing`] compares it.
    #[serde(skip)]
    pub revision: u64,
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
}

/// The state of a jobs service, one atomic step per method (see the module's documentation).
/// A method that fails ([`StoreError`]) changed nothing.
pub trait JobsStore {
    /// A job, by id.
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>>;

    /// Adds a job; `false` (and nothing changed) when one with its id exists.
    fn insert_job(&mut self, job: Job) -> Stored<bool>;

    /// Every job, by id.
    fn jobs(&self) -> Stored<Vec<Arc<Job>>>;

    /// A thing's record (empty, revision 0, for a thing never seen).
    fn thing(&self, thing: &str) -> Stored<ThingRecord>;

    /// Writes a thing's record if its revision is still `record.revision` (the record then
    /// gets the next revision), and keeps the timers of its executions; `false` when another
    /// write came first (read again and retry).
    fn put_thing(&mut self, thing: &str, record: ThingRecord) -> Stored<bool>;

    /// Every thing that has a record.
    fn things(&self) -> Stored<Vec<String>>;

    /// The (thing, job id) of every execution whose timer ran out by `now_ms`, earliest first.
    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>>;

    /// The earliest timer.
    fn next_deadline(&self) -> Stored<Option<u64>>;

    /// Starts rolling out a new job: its targets are handed out by [`JobsStore::take_rollout`].
    fn start_rollout(&mut self, job_id: &str) -> Stored<()>;

    /// Claims up to `budget` targets not yet handed out, of the oldest job being rolled out
    /// first: (job id, thing). Each target is handed out once.
    fn take_rollout(&mut self, budget: usize) -> Stored<Vec<(String, String)>>;

    /// Stops a job's rollout: its remaining targets are never handed out.
    fn stop_rollout(&mut self, job_id: &str) -> Stored<()>;

    /// Whether some job has targets not yet handed out.
    fn rolling_out(&self) -> Stored<bool>;
}

/// The jobs state in this process's memory.
#[derive(Debug, Default)]
pub struct MemoryJobs {
    jobs: BTreeMap<String, Arc<Job>>,
    things: HashMap<String, ThingRecord>,
    /// (deadline, thing, job id), earliest first.
    timers: BTreeSet<(u64, String, String)>,
    /// Jobs being rolled out, oldest first, with the index of their next target.
    rollouts: VecDeque<(String, usize)>,
}

impl JobsStore for MemoryJobs {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        Ok(self.jobs.get(job_id).cloned())
    }

    fn insert_job(&mut self, job: Job) -> Stored<bool> {
        if self.jobs.contains_key(&job.id) {
            return Ok(false);
        }
        self.jobs.insert(job.id.clone(), Arc::new(job));
        Ok(true)
    }

    fn jobs(&self) -> Stored<Vec<Arc<Job>>> {
        Ok(self.jobs.values().cloned().collect())
    }

    fn thing(&self, thing: &str) -> Stored<ThingRecord> {
        Ok(self.things.get(thing).cloned().unwrap_or_default())
    }

    fn put_thing(&mut self, thing: &str, mut record: ThingRecord) -> Stored<bool> {
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
        *stored = record;
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

    fn start_rollout(&mut self, job_id: &str) -> Stored<()> {
        self.rollouts.push_back((job_id.to_owned(), 0));
        Ok(())
    }

    fn take_rollout(&mut self, budget: usize) -> Stored<Vec<(String, String)>> {
        let mut batch = Vec::new();
        while batch.len() < budget
            && let Some((job_id, next)) = self.rollouts.front_mut()
        {
            let targets = self
                .jobs
                .get(job_id.as_str())
                .map_or(&[][..], |j| &j.targets);
            let end = next.saturating_add(budget - batch.len()).min(targets.len());
            for thing in targets.get(*next..end).unwrap_or_default() {
                batch.push((job_id.clone(), thing.clone()));
            }
            *next = end;
            if end >= targets.len() {
                self.rollouts.pop_front();
            }
        }
        Ok(batch)
    }

    fn stop_rollout(&mut self, job_id: &str) -> Stored<()> {
        self.rollouts.retain(|(id, _)| id != job_id);
        Ok(())
    }

    fn rolling_out(&self) -> Stored<bool> {
        Ok(!self.rollouts.is_empty())
    }
}

/// A store borrowed: several engines can take turns over one store (as nodes share one).
impl<S: JobsStore + ?Sized> JobsStore for &mut S {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        (**self).job(job_id)
    }
    fn insert_job(&mut self, job: Job) -> Stored<bool> {
        (**self).insert_job(job)
    }
    fn jobs(&self) -> Stored<Vec<Arc<Job>>> {
        (**self).jobs()
    }
    fn thing(&self, thing: &str) -> Stored<ThingRecord> {
        (**self).thing(thing)
    }
    fn put_thing(&mut self, thing: &str, record: ThingRecord) -> Stored<bool> {
        (**self).put_thing(thing, record)
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
    fn start_rollout(&mut self, job_id: &str) -> Stored<()> {
        (**self).start_rollout(job_id)
    }
    fn take_rollout(&mut self, budget: usize) -> Stored<Vec<(String, String)>> {
        (**self).take_rollout(budget)
    }
    fn stop_rollout(&mut self, job_id: &str) -> Stored<()> {
        (**self).stop_rollout(job_id)
    }
    fn rolling_out(&self) -> Stored<bool> {
        (**self).rolling_out()
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
                let job: Job = serde_json::from_slice(&json).map_err(|e| format!("a job: {e}"))?;
                store.jobs.insert(job.id.clone(), Arc::new(job));
            }
            Record::Thing { thing, json } => {
                let mut record: ThingRecord =
                    serde_json::from_slice(&json).map_err(|e| format!("thing {thing}: {e}"))?;
                // The revision is the store's own counter: continue from the stored one.
                record.revision = store.thing(&thing).map_or(0, |r| r.revision);
                let _ = store.put_thing(&thing, record);
            }
            Record::Rollout { job_id, next } => {
                store.rollouts.retain(|(id, _)| *id != job_id);
                if let Some(next) = next {
                    store.rollouts.push_back((job_id, next as usize));
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
            log::job(out, &serde_json::to_vec(&**job).unwrap_or_default());
        }
        for (thing, record) in &self.inner.things {
            log::thing(out, thing, &serde_json::to_vec(record).unwrap_or_default());
        }
        for (job_id, next) in &self.inner.rollouts {
            log::rollout(out, job_id, Some(*next as u64));
        }
    }

    fn record_rollouts(&mut self, before: &[(String, usize)]) {
        for (job_id, _) in before {
            let next = self.inner.rollouts.iter().find(|(id, _)| id == job_id);
            let next = next.map(|(_, next)| *next as u64);
            crate::store::log::rollout(&mut self.pending, job_id, next);
        }
    }
}

impl JobsStore for DurableJobs {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        self.inner.job(job_id)
    }

    fn insert_job(&mut self, job: Job) -> Stored<bool> {
        let json = self.recording.then(|| serde_json::to_vec(&job));
        let inserted = self.inner.insert_job(job)?;
        if let (true, Some(Ok(json))) = (inserted, json) {
            crate::store::log::job(&mut self.pending, &json);
        }
        Ok(inserted)
    }

    fn jobs(&self) -> Stored<Vec<Arc<Job>>> {
        self.inner.jobs()
    }

    fn thing(&self, thing: &str) -> Stored<ThingRecord> {
        self.inner.thing(thing)
    }

    fn put_thing(&mut self, thing: &str, record: ThingRecord) -> Stored<bool> {
        let json = self.recording.then(|| serde_json::to_vec(&record));
        let written = self.inner.put_thing(thing, record)?;
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

    fn start_rollout(&mut self, job_id: &str) -> Stored<()> {
        self.inner.start_rollout(job_id)?;
        if self.recording {
            crate::store::log::rollout(&mut self.pending, job_id, Some(0));
        }
        Ok(())
    }

    fn take_rollout(&mut self, budget: usize) -> Stored<Vec<(String, String)>> {
        let before: Vec<_> = match self.recording {
            true => self.inner.rollouts.iter().cloned().collect(),
            false => Vec::new(),
        };
        let batch = self.inner.take_rollout(budget)?;
        if !batch.is_empty() {
            self.record_rollouts(&before);
        }
        Ok(batch)
    }

    fn stop_rollout(&mut self, job_id: &str) -> Stored<()> {
        self.inner.stop_rollout(job_id)?;
        if self.recording {
            crate::store::log::rollout(&mut self.pending, job_id, None);
        }
        Ok(())
    }

    fn rolling_out(&self) -> Stored<bool> {
        self.inner.rolling_out()
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
        let spec = JobSpec {
            job_id: "j".into(),
            document: serde_json::json!({}),
            targets: vec!["a".into(), "b".into(), "c".into()],
            in_progress_timeout_minutes: None,
            max_retries: 0,
        };
        let mut out = Vec::new();
        jobs.create_job(spec, 1_000, &mut out).unwrap();
        // One target queued by create_job, one by a rollout step; one left.
        jobs.roll_out(2_000, &mut out).unwrap();
        let records = jobs.store_mut().take_pending();
        let mut back = replayed(&records);
        assert_eq!(back.jobs().unwrap().len(), 1);
        let queued =
            |store: &DurableJobs, thing: &str| store.thing(thing).unwrap().latest("j").is_some();
        assert!(queued(&back, "a") && queued(&back, "b") && !queued(&back, "c"));
        assert!(back.rolling_out().unwrap());
        assert_eq!(
            back.take_rollout(10).unwrap(),
            vec![("j".into(), "c".into())]
        );

        // A snapshot gives the same.
        let mut snapshot = Vec::new();
        jobs.store().snapshot(&mut snapshot);
        let mut again = replayed(&snapshot);
        assert_eq!(
            again.take_rollout(10).unwrap(),
            vec![("j".into(), "c".into())]
        );
        assert_eq!(
            again.thing("a").unwrap().latest("j"),
            jobs.store().thing("a").unwrap().latest("j")
        );
    }
}
