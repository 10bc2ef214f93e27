//! Jobs: per-device job queues speaking the AWS IoT Jobs device MQTT API and its
//! notifications (spec: docs/protocol/jobs.md), with no I/O.
//!
//! A driver feeds every message of `$aws/things/+/jobs/#` to [`Jobs::handle`] and publishes what
//! comes out (the `/accepted` or `/rejected` reply, and the `notify` / `notify-next`
//! notifications the change causes); operator calls ([`Jobs::create_job`],
//! [`Jobs::cancel_job`], [`Jobs::delete_execution`]) push their notifications the same way;
//! [`Jobs::expire`] at [`Jobs::next_deadline`] times out executions, and [`Jobs::roll_out`]
//! queues the executions of new jobs while [`Jobs::rolling_out`].
//!
//! The state lives in a [`JobsStore`] (memory now; shared stores later): every change of a
//! thing reads its record, computes the new one, and writes it back only if nobody wrote in
//! between. Notifications follow from comparing the thing's pending list before and after:
//! `notify` when its membership changed, `notify-next` when its first entry changed.
//!
//! The clients of both APIs (device and operator) are [`crate::client::jobs`]: the client
//! layer sits above this one and this module never refers to it.

mod calls;
mod events;
mod groups;
mod lifecycle;
mod model;
mod operator;
pub(crate) use operator::{error as operator_error, page_size};
mod rollout;
mod schedule;
mod shorthand;
mod store;
pub mod topics;
pub mod wire;

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use calls::{Answers, Calls, Replay, StoreAnswer, StoreCall};
pub use groups::{GroupRecord, arn, tables};
pub(crate) use model::valid_job_id;
pub use model::{Execution, ExecutionRef, Job, JobsError, Pace, RejectCode, StoreError, Stored};
pub use rollout::ABORTED;
pub use schedule::{Cron, parse_time};
pub use shorthand::operator_call;
pub use store::{
    Counts, DurableJobs, Entries, JobsStore, MemoryJobs, Rollout, Tally, ThingRecord, ThingWrite,
    tally_change,
};
pub use topics::OPERATOR as OPERATOR_TOPIC;
pub use wire::{
    AbortAction, AbortConfig, AbortCriteria, DeviceBody, EndBehavior, ExecutionCancel,
    ExecutionListing, ExecutionState, ExecutionsPage, ExponentialRate, FailureType, GroupListing,
    JobConfig, JobCreated, JobDescription, JobExecution, JobListing, JobProcessDetails, JobSpec,
    JobStatus, JobSummary, JobTemplate, JobUpdate, JobsPage, MaintenanceWindow, Membership,
    NamedShadowsPage, OPERATOR_CALLS, OperatorRequest, PageRequest, PendingJobs,
    RateIncreaseCriteria, RetryConfig, RetryCriteria, RolloutConfig, RolloutProgress,
    SchedulingConfig, Status, TargetSelection, TemplateListing, TemplatesPage,
    ThingGroupDescription, ThingGroupMetadata, ThingGroupProperties, ThingGroupsPage, ThingsPage,
    TimeoutConfig, UpdateAccepted, check_operator_call,
};
use wire::{Accepted, ExecutionAccepted, Notify, NotifyJobs, NotifyNext, Rejected, Reply};
pub(crate) use wire::{THING_NAME_RULE, valid_name, valid_thing_name};

use crate::envelope::{Properties, Publish};

/// The jobs service: the protocol's decisions over a [`JobsStore`].
#[derive(Debug)]
pub struct Jobs<S = MemoryJobs> {
    store: S,
    /// How long a minute of the timers is (timeouts are given in minutes): 60 s, shorter
    /// only where tests must see timeouts happen.
    minute_ms: u64,
    /// Targets queued per [`Jobs::roll_out`] step (see [`Jobs::with_rollout_batch`]).
    rollout_batch: usize,
}

/// How the service answered a request: on `…/accepted` or on `…/rejected` (device API), with
/// an answer or a refusal (operator API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answered {
    /// The request did what it asked.
    Accepted,
    /// It was refused; the reply says why.
    Rejected,
}

/// What a device request asked for, from its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Api {
    GetPending,
    StartNext,
    Describe(ExecutionRef),
    Update(String),
}

impl Default for Jobs {
    fn default() -> Self {
        Self::new()
    }
}

impl Jobs {
    /// An empty service in memory.
    pub fn new() -> Self {
        Self::with_minute(60_000)
    }

    /// An empty service in memory whose timer minutes last `minute_ms` (for tests of
    /// timeouts).
    pub fn with_minute(minute_ms: u64) -> Self {
        Self::with_store(MemoryJobs::default(), minute_ms)
    }
}

impl<S: JobsStore> Jobs<S> {
    /// The service over `store`, with timer minutes of `minute_ms`.
    pub fn with_store(store: S, minute_ms: u64) -> Self {
        Self {
            store,
            minute_ms: minute_ms.max(1),
            rollout_batch: usize::MAX,
        }
    }

    /// Queues the executions of a new job `batch` targets at a time: `create_job` queues the
    /// first batch, [`Jobs::roll_out`] the next ones, so that a server answers other requests
    /// between them (a job for 10,000 things makes 20,000 notifications). Without it, every
    /// target is queued by `create_job`.
    pub fn with_rollout_batch(mut self, batch: usize) -> Self {
        self.rollout_batch = batch.max(1);
        self
    }

    /// Targets queued per [`Jobs::roll_out`] step at most.
    pub fn rollout_batch(&self) -> usize {
        self.rollout_batch
    }

    /// The engine over its store as a trait object, with the same settings. A driver that
    /// serves several kinds of store (memory and Redis) calls the engine through this, so the
    /// engine's code is compiled once rather than once per store.
    pub fn as_dyn(&mut self) -> Jobs<&mut dyn JobsStore>
    where
        S: Sized,
    {
        Jobs {
            store: &mut self.store,
            minute_ms: self.minute_ms,
            rollout_batch: self.rollout_batch,
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, mutably (the durable store's records are taken through it).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// A job, by id.
    pub fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        self.store.job(job_id)
    }

    /// Creates a job (from its template, if it names one) and queues an execution of it on
    /// every thing it targets: the first batch now (as far as its rate and schedule allow),
    /// the rest by [`Jobs::roll_out`]. Returns how many things it runs on.
    pub fn create_job(
        &mut self,
        mut spec: JobSpec,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<usize, JobsError> {
        self.apply_template(&mut spec)?;
        spec.validate(now_ms)?;
        if self.store.job(&spec.job_id)?.is_some() {
            return Err(JobsError::JobExists(spec.job_id));
        }
        let things = self.job_things_of(&spec)?;
        let job = Job::new(spec, now_ms);
        let (job_id, scheduled) = (job.id.clone(), job.scheduling_config.is_some());
        if !self.store.insert_job(job, &things)? {
            return Err(JobsError::JobExists(job_id));
        }
        if scheduled {
            self.store
                .put_entry(tables::SCHEDULES, &job_id, Some(b""), false)?;
        }
        self.roll_out(now_ms, out)?;
        Ok(things.len())
    }

    /// Removes one execution (`force` for one IN_PROGRESS).
    pub fn delete_execution(
        &mut self,
        job_id: &str,
        thing: &str,
        force: bool,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        self.change(thing, now_ms, out, |record| {
            let execution = record.latest(job_id).ok_or_else(|| {
                JobsError::NotFound(format!("execution of job {job_id} on thing {thing}"))
            })?;
            if execution.status == Status::InProgress && !force {
                return Err(JobsError::InProgress(format!("{job_id} on {thing}")));
            }
            record.executions.remove(job_id);
            Ok(())
        })
    }

    /// Handles a message from `$aws/things/+/jobs/#`. `None` when it is no request (the
    /// service's own replies and notifications coming back); else the reply is pushed onto
    /// `out` after the notifications the request caused, and its kind returned.
    pub fn handle(
        &mut self,
        topic: &str,
        payload: &[u8],
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Option<Answered> {
        let (thing, api) = topics::parse_device(topic)?;
        if ["/accepted", "/rejected"].iter().any(|s| api.ends_with(s))
            || api == "notify"
            || api == "notify-next"
        {
            return None;
        }
        let now_s = now_ms / 1000;
        let rejected = |rejection: Rejection, token: Option<String>| {
            let (code, message, execution_state) = rejection;
            let body = Rejected {
                code: code.as_str().into(),
                message,
                execution_state,
            };
            let reply = Reply {
                body,
                timestamp: now_s,
                client_token: token,
            };
            publish(format!("{topic}/rejected"), &reply)
        };
        let request = match parse_payload(payload) {
            Ok(request) => request,
            Err(code) => {
                let message = "the payload must be a JSON object".into();
                out.push(rejected((code, message, None), None));
                return Some(Answered::Rejected);
            }
        };
        // Read first and alone: even a request that fits no API gets its token back.
        let token = request
            .get("clientToken")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let Some(api) = parse_api(api) else {
            let message = format!("{api} is not a jobs API");
            out.push(rejected((RejectCode::InvalidTopic, message, None), token));
            return Some(Answered::Rejected);
        };
        if !valid_thing_name(thing) {
            let message = format!("thing names are {THING_NAME_RULE}");
            out.push(rejected(invalid(message), token));
            return Some(Answered::Rejected);
        }
        let body = match DeviceBody::deserialize(&request)
            .map_err(|e| e.to_string())
            .and_then(|body| body.validate().map(|()| body))
        {
            Ok(body) => body,
            Err(message) => {
                out.push(rejected(invalid(message), token));
                return Some(Answered::Rejected);
            }
        };
        let result = match api {
            Api::GetPending => self
                .store
                .thing(thing)
                .map(|record| Accepted::Pending(pending_lists(&record)))
                .map_err(Rejection::from),
            Api::StartNext => self.start_next(thing, &body, now_ms, out),
            Api::Describe(execution) => self.describe(thing, &execution, &body, now_ms),
            Api::Update(job_id) => self.update(thing, &job_id, &body, now_ms, out),
        };
        let answered = match result {
            Ok(body) => {
                let reply = Reply {
                    body,
                    timestamp: now_s,
                    client_token: token,
                };
                out.push(publish(format!("{topic}/accepted"), &reply));
                Answered::Accepted
            }
            Err(rejection) => {
                out.push(rejected(rejection, token));
                Answered::Rejected
            }
        };
        Some(answered)
    }

    /// When the next execution times out.
    pub fn next_deadline(&self) -> Stored<Option<u64>> {
        self.store.next_deadline()
    }

    /// Times out every IN_PROGRESS execution whose step or in-progress timer ran out. Nodes
    /// sharing a store may all call it: each timeout happens (and is notified) once.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Publish>) -> Stored<()> {
        for (thing, job_id) in self.store.due(now_ms)? {
            let Some(job) = self.store.job(&job_id)? else {
                continue;
            };
            self.change(&thing, now_ms, out, |record| {
                // Read again: another request may have ended it meanwhile.
                if record
                    .latest(&job_id)
                    .and_then(Execution::deadline)
                    .is_some_and(|deadline| deadline <= now_ms)
                {
                    finish(record, &job, &thing, Status::TimedOut, now_ms);
                }
                Ok::<_, StoreError>(())
            })?;
        }
        Ok(())
    }

    // ---- the device API ----

    fn start_next(
        &mut self,
        thing: &str,
        request: &DeviceBody,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<Accepted, Rejection> {
        let (details, step) = (&request.status_details, request.step_timeout_in_minutes);
        let minute = self.minute_ms;
        let first = self.change(thing, now_ms, out, |record| {
            let Some(first) = record.pending().first().map(|e| e.job_id.clone()) else {
                return Ok::<_, Rejection>(None);
            };
            if let Some(execution) = record.latest_mut(&first)
                && execution.status == Status::Queued
            {
                execution.start(details.clone(), step, now_ms, minute);
            }
            Ok(record.latest(&first).cloned())
        })?;
        let execution = match first {
            Some(execution) => {
                let job = self.store.job(&execution.job_id)?;
                Some(execution.describe(job.map(|j| j.document.clone()), now_ms))
            }
            None => None,
        };
        Ok(Accepted::Execution(ExecutionAccepted { execution }))
    }

    fn describe(
        &self,
        thing: &str,
        execution: &ExecutionRef,
        request: &DeviceBody,
        now_ms: u64,
    ) -> Result<Accepted, Rejection> {
        let include_document = request.include_job_document.unwrap_or(true);
        let record = self.store.thing(thing)?;
        let execution = match execution {
            ExecutionRef::Next => record.pending().first().copied(),
            ExecutionRef::Job(job_id) => Some(
                numbered(&record, job_id, request.execution_number)
                    .ok_or_else(|| not_found(thing, job_id))?,
            ),
        };
        let execution = match execution {
            Some(execution) => {
                let document = match include_document {
                    true => self
                        .store
                        .job(&execution.job_id)?
                        .map(|j| j.document.clone()),
                    false => None,
                };
                Some(execution.describe(document, now_ms))
            }
            None => None,
        };
        Ok(Accepted::Execution(ExecutionAccepted { execution }))
    }

    fn update(
        &mut self,
        thing: &str,
        job_id: &str,
        request: &DeviceBody,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<Accepted, Rejection> {
        let Some(status) = request.status else {
            return Err(invalid("status is required".into()));
        };
        match status {
            Status::InProgress | Status::Succeeded | Status::Failed | Status::Rejected => {}
            Status::Queued => {}
            other => {
                return Err(invalid(format!("a device cannot set {}", other.as_str())));
            }
        }
        let (details, step) = (&request.status_details, request.step_timeout_in_minutes);
        let (expected, number) = (request.expected_version, request.execution_number);
        let job = self.store.job(job_id)?;
        let minute = self.minute_ms;
        let state = self.change(thing, now_ms, out, |record| {
            let execution = record
                .latest(job_id)
                .filter(|e| number.is_none_or(|n| n == e.execution_number))
                .ok_or_else(|| not_found(thing, job_id))?;
            let state = execution.state();
            if let Some(expected) = expected
                && expected != execution.version_number
            {
                let message = format!(
                    "Expected version {expected} but found version {}",
                    execution.version_number
                );
                return Err((RejectCode::VersionMismatch, message, Some(state)));
            }
            if !execution.status.is_pending() || status == Status::Queued {
                let message = format!(
                    "cannot go from {} to {}",
                    execution.status.as_str(),
                    status.as_str()
                );
                return Err((RejectCode::InvalidStateTransition, message, Some(state)));
            }
            let Some(execution) = record.latest_mut(job_id) else {
                return Err(not_found(thing, job_id));
            };
            let number = execution.execution_number;
            if status.is_pending() {
                execution.progress(details.clone(), step, now_ms, minute);
            } else {
                if let Some(details) = &details {
                    execution.status_details = details.clone();
                }
                match &job {
                    Some(job) => finish(record, job, thing, status, now_ms),
                    None => execution.end(status, now_ms),
                }
            }
            Ok(numbered(record, job_id, Some(number)).map(Execution::state))
        })?;
        Ok(Accepted::Update(UpdateAccepted {
            execution_state: state.filter(|_| request.include_job_execution_state == Some(true)),
            job_document: job
                .filter(|_| request.include_job_document == Some(true))
                .map(|job| job.document.clone()),
        }))
    }

    // ---- state ----

    /// Changes `thing`'s record with `change` atomically (read, change, compare-and-set; again
    /// from a fresh read if another writer came first) and publishes what it did to the
    /// pending list. Nothing is written, or published, when `change` fails or changes nothing,
    /// or the store fails.
    fn change<T, E: From<StoreError>>(
        &mut self,
        thing: &str,
        now_ms: u64,
        out: &mut Vec<Publish>,
        mut change: impl FnMut(&mut ThingRecord) -> Result<T, E>,
    ) -> Result<T, E> {
        loop {
            // The store's own record (in memory) or the one it read: changed in a copy.
            let read = self.store.thing(thing)?;
            let mut record = ThingRecord::clone(&read);
            let result = change(&mut record)?;
            if record == *read {
                return Ok(result);
            }
            let before: Vec<(&str, u64)> = read.pending().iter().map(|e| e.key()).collect();
            let published = out.len();
            let tally = store::tally_change(&read, &record);
            ended_events(thing, &read, &record, now_ms, out);
            let written = self
                .notify(thing, &before, &record, now_ms, None, out)
                .and_then(|()| self.store.put_thing(thing, record, &tally));
            if written != Ok(true) {
                out.truncate(published); // Not written: not told either.
            }
            if written? {
                // An execution ended: its job may have to be aborted, or be complete. A
                // store that fails here fails no request (the change was made): an abort is
                // looked at again by the rollout's next step, a completion when the job is
                // next described or listed.
                for job_id in ended_jobs(&tally) {
                    let _ = self.settle(&job_id, now_ms, out);
                }
                return Ok(result);
            }
        }
    }

    /// Changes each of `things`' records with `change`, as [`Jobs::change`] does one, but
    /// reading them all in one step of the store and writing them all in the next (one round
    /// trip each where the store has round trips, instead of two per thing); `job` is the job
    /// the change is about (its document, which never changes, is not read again). A thing
    /// another writer changed in between goes through [`Jobs::change`] on its own. Returns
    /// how many were changed; on a store's error, how many were before it, with the error.
    fn change_each(
        &mut self,
        things: &[String],
        job: &Job,
        now_ms: u64,
        out: &mut Vec<Publish>,
        change: impl Fn(&str, &mut ThingRecord),
    ) -> Result<usize, (usize, StoreError)> {
        let reads = self.store.thing_records(things).map_err(|e| (0, e))?;
        let mut writes = Vec::new();
        let mut told = Vec::new();
        for (thing, read) in things.iter().zip(reads) {
            let mut record = ThingRecord::clone(&read);
            change(thing, &mut record);
            if record == *read {
                continue;
            }
            let before: Vec<(&str, u64)> = read.pending().iter().map(|e| e.key()).collect();
            let mut publishes = Vec::new();
            ended_events(thing, &read, &record, now_ms, &mut publishes);
            self.notify(thing, &before, &record, now_ms, Some(job), &mut publishes)
                .map_err(|e| (0, e))?;
            let tally = store::tally_change(&read, &record);
            writes.push(store::ThingWrite {
                thing: thing.clone(),
                record,
                tally,
            });
            told.push(publishes);
        }
        let settle: Vec<Vec<String>> = writes.iter().map(|w| ended_jobs(&w.tally)).collect();
        let names: Vec<String> = writes.iter().map(|w| w.thing.clone()).collect();
        let written = self.store.put_things(writes);
        let (mut changed, mut failed) = (0, None);
        for (((thing, written), publishes), ended) in
            names.iter().zip(written).zip(told).zip(settle)
        {
            let written = match written {
                Ok(true) => {
                    out.extend(publishes);
                    for job_id in ended {
                        let _ = self.settle(&job_id, now_ms, out); // as in `change`
                    }
                    Ok(())
                }
                // Another writer came first: this one on its own, from a fresh read.
                Ok(false) => self.change(thing, now_ms, out, |record| {
                    change(thing, record);
                    Ok::<_, StoreError>(())
                }),
                Err(error) => Err(error),
            };
            match written {
                Ok(()) => changed += 1,
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        match failed {
            None => Ok(changed),
            Some(error) => Err((changed, error)),
        }
    }

    /// The notifications of a change of `thing`'s pending list from `before` to `after`'s;
    /// `known`, a job whose document need not be read from the store.
    fn notify(
        &self,
        thing: &str,
        before: &[(&str, u64)],
        after: &ThingRecord,
        now_ms: u64,
        known: Option<&Job>,
        out: &mut Vec<Publish>,
    ) -> Stored<()> {
        let after = after.pending();
        let keys: Vec<(&str, u64)> = after.iter().map(|e| e.key()).collect();
        let now_s = now_ms / 1000;
        let mut sorted_before = before.to_vec();
        let mut sorted_after = keys.clone();
        sorted_before.sort();
        sorted_after.sort();
        if sorted_before != sorted_after {
            let mut jobs = NotifyJobs::default();
            for execution in after.iter().take(10) {
                match execution.status {
                    Status::InProgress => jobs.in_progress.push(execution.summary()),
                    _ => jobs.queued.push(execution.summary()),
                }
            }
            let notify = Notify {
                timestamp: now_s,
                jobs,
            };
            out.push(publish(topics::device(thing, "notify"), &notify));
        }
        if before.first() != keys.first() {
            let execution = match after.first() {
                Some(first) => {
                    let document = match known.filter(|job| job.id == first.job_id) {
                        Some(job) => Some(job.document.clone()),
                        None => self.store.job(&first.job_id)?.map(|j| j.document.clone()),
                    };
                    Some(first.next_notification(document))
                }
                None => None,
            };
            let next = NotifyNext {
                timestamp: now_s,
                execution,
            };
            out.push(publish(topics::device(thing, "notify-next"), &next));
        }
        Ok(())
    }
}

impl ThingRecord {
    /// The pending list: IN_PROGRESS first, then QUEUED, each in queueing order.
    fn pending(&self) -> Vec<&Execution> {
        let mut pending: Vec<&Execution> = self
            .executions
            .values()
            .filter_map(|list| list.last())
            .filter(|e| e.status.is_pending())
            .collect();
        pending.sort_by_key(|e| (e.status != Status::InProgress, e.queued_at, e.seq));
        pending
    }
}

/// The events of the executions a change of a thing's record ended (or deleted).
fn ended_events(
    thing: &str,
    before: &ThingRecord,
    after: &ThingRecord,
    now_ms: u64,
    out: &mut Vec<Publish>,
) {
    for (job_id, list) in &after.executions {
        let earlier = before.executions.get(job_id);
        for execution in list.iter().filter(|e| !e.status.is_pending()) {
            let was = earlier
                .and_then(|l| {
                    l.iter()
                        .find(|e| e.execution_number == execution.execution_number)
                })
                .map(|e| e.status);
            if was != Some(execution.status) {
                out.push(events::execution(
                    job_id,
                    thing,
                    execution.execution_number,
                    Some(execution.status),
                    &execution.status_details,
                    now_ms,
                ));
            }
        }
    }
    for (job_id, list) in &before.executions {
        if let (false, Some(latest)) = (after.executions.contains_key(job_id), list.last()) {
            let details = BTreeMap::new();
            out.push(events::execution(
                job_id,
                thing,
                latest.execution_number,
                None,
                &details,
                now_ms,
            ));
        }
    }
}

/// `get`: both lists, always present.
fn pending_lists(record: &ThingRecord) -> PendingJobs {
    let pending = record.pending();
    let summaries = |status| -> Vec<JobSummary> {
        pending
            .iter()
            .filter(|e| e.status == status)
            .map(|e| e.summary())
            .collect()
    };
    PendingJobs {
        in_progress_jobs: summaries(Status::InProgress),
        queued_jobs: summaries(Status::Queued),
    }
}

/// Execution `number` of `job_id` (the latest when `None`).
fn numbered<'a>(
    record: &'a ThingRecord,
    job_id: &str,
    number: Option<u64>,
) -> Option<&'a Execution> {
    let list = record.executions.get(job_id)?;
    match number {
        None => list.last(),
        Some(n) => list.iter().find(|e| e.execution_number == n),
    }
}

/// The jobs a change of counts ended an execution of (their abort or completion is looked at).
fn ended_jobs(tally: &Tally) -> Vec<String> {
    tally
        .iter()
        .filter(|(_, status, change)| *change > 0 && !status.is_pending())
        .map(|(job_id, _, _)| job_id.clone())
        .collect()
}

/// Queues execution `number` of `job` on the thing of `record`.
fn queue(record: &mut ThingRecord, job: &Job, thing: &str, number: u64, now_ms: u64) {
    let seq = record.queued;
    record.queued += 1;
    record
        .executions
        .entry(job.id.clone())
        .or_default()
        .push(Execution::queued(
            &job.id,
            thing,
            number,
            job.in_progress_timeout_minutes(),
            seq,
            now_ms,
        ));
}

/// Ends the latest execution of `job` with `status`, and queues a retry when the job's retry
/// configuration allows one.
fn finish(record: &mut ThingRecord, job: &Job, thing: &str, status: Status, now_ms: u64) {
    let Some(list) = record.executions.get_mut(&job.id) else {
        return;
    };
    let Some((execution, earlier)) = list.split_last_mut() else {
        return;
    };
    execution.end(status, now_ms);
    let number = execution.execution_number;
    if job.retries(status, earlier.iter().map(|e| e.status)) {
        queue(record, job, thing, number + 1, now_ms);
    }
}

/// A rejection: its code, message and (for state errors) the execution's state.
type Rejection = (RejectCode, String, Option<ExecutionState>);

/// A store that failed: the device is told so (AWS's code for it), nothing was changed.
impl From<StoreError> for Rejection {
    fn from(error: StoreError) -> Self {
        (RejectCode::InternalError, error.to_string(), None)
    }
}

fn invalid(message: String) -> Rejection {
    (RejectCode::InvalidRequest, message, None)
}

fn not_found(thing: &str, job_id: &str) -> Rejection {
    (
        RejectCode::ResourceNotFound,
        format!("no execution of job {job_id} on thing {thing}"),
        None,
    )
}

/// The API a request topic's part after `$aws/things/{thing}/jobs/` names (`get`,
/// `start-next`, `{jobId}/get`, `$next/get`, `{jobId}/update`).
pub(crate) fn parse_api(api: &str) -> Option<Api> {
    match api {
        "get" => Some(Api::GetPending),
        "start-next" => Some(Api::StartNext),
        _ => {
            let (execution, verb) = api.rsplit_once('/')?;
            let execution = ExecutionRef::parse(execution);
            if matches!(&execution, ExecutionRef::Job(job_id) if !valid_job_id(job_id)) {
                return None;
            }
            match (verb, execution) {
                ("get", execution) => Some(Api::Describe(execution)),
                ("update", ExecutionRef::Job(job_id)) => Some(Api::Update(job_id)),
                _ => None,
            }
        }
    }
}

/// A request payload: a JSON object (an empty payload is `{}`).
fn parse_payload(payload: &[u8]) -> Result<Value, RejectCode> {
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Default::default()));
    }
    match serde_json::from_slice::<Value>(payload) {
        Ok(request @ Value::Object(_)) => Ok(request),
        _ => Err(RejectCode::InvalidJson),
    }
}

fn publish(topic: String, payload: &impl Serialize) -> Publish {
    Publish {
        topic,
        // Our own types: they always serialize.
        payload: Bytes::from(serde_json::to_vec(payload).unwrap_or_default()),
        qos: 1,
        properties: Properties::default(),
    }
}

#[cfg(test)]
mod tests;
