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
