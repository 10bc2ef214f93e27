//! A job's life after `createJob`: its rollout (at its rate), its abort, cancellation of the
//! job or of one execution, `updateJob` and `deleteJob` — the operator's side of the engine,
//! over the same [`JobsStore`] steps as the device API.

use std::sync::Arc;

use super::model::Stored;
use super::model::{Execution, Job, JobsError};
use super::rollout::{self, Allowance};
use super::store::JobsStore;
use super::wire::{ExecutionCancel, JobStatus, JobUpdate, TargetSelection};
use super::wire::{Status, valid_thing_name};
use super::{Jobs, events, finish, queue, schedule};
use crate::envelope::Publish;

/// Things read at a time when a job's things are gone through (cancel, delete).
const THINGS_PAGE: u64 = 1024;

/// How long after a job's cancellation or deletion began a tick finishes it if it is still
/// marked (see [`Jobs::mark_unfinished`]): the request or abort that began it is given that
/// long, so that ticks do not go through the job's things beside it.
pub(super) const GRACE_MS: u64 = 30_000;

/// When a tick finishes a job's cancellation or deletion that is still marked.
fn resumed_at(job: &Job) -> u64 {
    match job.status {
        // A job completed long ago and deleted now: from the deletion's start.
        JobStatus::DeletionInProgress => job.last_updated_at + GRACE_MS,
        _ => job.completed_at.unwrap_or(job.last_updated_at) + GRACE_MS,
    }
}

impl<S: JobsStore> Jobs<S> {
    /// Whether some job's rollout is under way, or a job's start or end time is still to
    /// come (see [`Jobs::next_wake`] for when it goes on): [`Jobs::roll_out`] has work.
    pub fn rolling_out(&self) -> Stored<bool> {
        Ok(!self.store.rollouts()?.is_empty()
            || !self
                .store
                .entries(super::tables::SCHEDULES, None, 1)?
                .is_empty())
    }

    /// Starts and ends the scheduled jobs whose time came, then queues the next things of the
    /// jobs being rolled out, oldest job first, as far as each job's rate and maintenance
    /// windows allow by `now_ms` and up to the engine's batch in all, pushing the
    /// notifications onto `out`. Returns how many were queued.
    ///
    /// A store that fails midway leaves the batch's remaining things without an execution
    /// (they were handed out; see [`JobsStore::take_rollout`]); the error says so.
    pub fn roll_out(&mut self, now_ms: u64, out: &mut Vec<Publish>) -> Stored<usize> {
        self.schedule(now_ms, out)?;
        let mut budget = self.rollout_batch as u64;
        let mut queued = 0;
        for rollout in self.store.rollouts()? {
            if budget == 0 {
                break;
            }
            let Some(job) = self.store.job(&rollout.job_id)? else {
                self.store.stop_rollout(&rollout.job_id)?;
                continue;
            };
            match job.status {
                JobStatus::InProgress if rollout.next >= rollout.total => {
                    // A cancellation's mark (below) left by one that never happened: the
                    // rollout had handed out every thing already.
                    self.store.stop_rollout(&job.id)?;
                    continue;
                }
                JobStatus::InProgress => {}
                JobStatus::Scheduled => continue,
                // A cancellation under way: its own request (or abort) finishes it.
                JobStatus::Canceled | JobStatus::DeletionInProgress
                    if now_ms < resumed_at(&job) =>
                {
                    continue;
                }
                // One cut short (the store failed, or its node died, midway): its mark is
                // still here, so it is finished now, by whichever node ticks.
                JobStatus::Canceled => {
                    self.finish_cancel(&job, job.force_canceled, now_ms, out)?;
                    continue;
                }
                JobStatus::DeletionInProgress => {
                    self.finish_delete(&job, now_ms, out)?;
                    continue;
                }
                _ => {
                    self.store.stop_rollout(&job.id)?;
                    continue;
                }
            }
            // A job whose abort a failed store missed is looked at again here.
            if job.config.abort_config.is_some() && self.settle(&job.id, now_ms, out)? {
                continue;
            }
            if schedule::window(job.maintenance_windows(), now_ms).is_err() {
                continue; // Outside its maintenance windows: at the next one.
            }
            let span = (rollout.next, rollout.total);
            let allowance = self.allowance(&job, span, budget, now_ms)?;
            let paced = allowance.new_pace.map(|pace| Job {
                pace,
                ..(*job).clone()
            });
            if allowance.count == 0 {
                // Nothing to claim yet; a new anchor or rate is kept for the next time.
                if let Some(paced) = paced {
                    self.store.put_job(paced)?;
                }
                continue;
            }
            let Some(claimed) =
                self.store
                    .take_rollout(&job.id, rollout.next, allowance.count, paced)?
            else {
                continue; // Another node claimed first: next time.
            };
            // A thing removed from the job's group and added again gets a new execution.
            let mut again = std::collections::HashMap::new();
            if job.target_selection == TargetSelection::Continuous {
                for thing in &claimed {
                    if let Some(removed) = self.readded(&job, thing)? {
                        again.insert(thing.as_str(), removed);
                    }
                }
            }
            let queued_each = self.change_each(&claimed, &job, now_ms, out, |thing, record| {
                // A thing listed twice gets one execution.
                match (
                    record.latest(&job.id).map(|e| e.execution_number),
                    again.get(thing),
                ) {
                    (None, _) => queue(record, &job, thing, 1, now_ms),
                    (Some(number), Some(&removed)) if number == removed => {
                        queue(record, &job, thing, number + 1, now_ms);
                    }
                    _ => {}
                }
            });
            if let Err((done, super::StoreError(reason))) = queued_each {
                return Err(super::StoreError(format!(
                    "{reason} (rolling out {}: {done} of a batch of {} things queued)",
                    job.id,
                    claimed.len()
                )));
            }
            budget -= claimed.len() as u64;
            queued += claimed.len();
        }
        Ok(queued)
    }

    /// The number of `thing`'s latest execution of a continuous job when it was REMOVED (the
    /// thing left the job's group) and the thing is in one of the job's groups again.
    fn readded(&self, job: &Job, thing: &str) -> Stored<Option<u64>> {
        let record = self.store.thing(thing)?;
        match record.latest(&job.id) {
            Some(e) if e.status == Status::Removed && self.targets_thing(job, thing)? => {
                Ok(Some(e.execution_number))
            }
            _ => Ok(None),
        }
    }

    fn allowance(
        &self,
        job: &Job,
        span: (u64, u64),
        budget: u64,
        now_ms: u64,
    ) -> Stored<Allowance> {
        let by_success = job
            .config
            .job_executions_rollout_config
            .as_ref()
            .and_then(|r| r.exponential_rate.as_ref())
            .is_some_and(|e| {
                e.rate_increase_criteria
                    .number_of_succeeded_things
                    .is_some()
            });
        let succeeded = match by_success {
            true => self.succeeded(&job.id)?,
            false => 0,
        };
        Ok(rollout::allowance(
            job,
            span,
            succeeded,
            budget,
            now_ms,
            self.minute_ms,
        ))
    }

    fn succeeded(&self, job_id: &str) -> Stored<u64> {
        let counts = self.store.counts(job_id)?;
        Ok(counts.get(&Status::Succeeded).copied().unwrap_or(0))
    }

    /// When the engine next has something to do (an execution's timer, a rollout's next
    /// thing): `now_ms` when it has now, `None` when nothing waits.
    pub fn next_wake(&self, now_ms: u64) -> Stored<Option<u64>> {
        let mut wake = self.store.next_deadline()?;
        if let Some(at) = self.next_schedule()? {
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        for rollout in self.store.rollouts()? {
            let Some(job) = self.store.job(&rollout.job_id)? else {
                return Ok(Some(now_ms));
            };
            let at = match job.status {
                JobStatus::InProgress => {
                    match schedule::window(job.maintenance_windows(), now_ms) {
                        Err(None) => continue,
                        Err(Some(opens)) => opens,
                        Ok(()) => {
                            // With roll_out's budget, so that both decide alike whether
                            // the pace needs anchoring (with less, a pace held back by the
                            // minute's window looked like a new anchor: "now", at every tick).
                            let span = (rollout.next, rollout.total);
                            let budget = self.rollout_batch as u64;
                            let allowance = self.allowance(&job, span, budget, now_ms)?;
                            match allowance.next_at {
                                Some(at) if allowance.new_pace.is_none() => at,
                                _ => now_ms,
                            }
                        }
                    }
                }
                JobStatus::Scheduled => continue,
                JobStatus::Canceled | JobStatus::DeletionInProgress => resumed_at(&job),
                _ => now_ms,
            };
            wake = Some(wake.map_or(at, |w| w.min(at)));
        }
        Ok(wake)
    }

    /// Looks at a job after one of its executions ended: cancels it when its abort
    /// configuration says so (once, whichever node gets there first), or notes it COMPLETED
    /// when that was its last. Whether it aborted it.
    pub(crate) fn settle(
        &mut self,
        job_id: &str,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Stored<bool> {
        loop {
            let Some(job) = self.store.job(job_id)? else {
                return Ok(false);
            };
            if job.status != JobStatus::InProgress {
                return Ok(false);
            }
            if job.config.abort_config.is_none() {
                self.current(job, now_ms, out)?;
                return Ok(false);
            }
            let counts = self.store.counts(job_id)?;
            let Some((reason_code, comment)) = rollout::abort(&job, &counts) else {
                self.current(job, now_ms, out)?;
                return Ok(false);
            };
            self.mark_unfinished(job_id)?;
            let mut canceled = (*job).clone();
            canceled.status = JobStatus::Canceled;
            canceled.reason_code = Some(reason_code.into());
            canceled.comment = Some(comment);
            canceled.last_updated_at = now_ms;
            canceled.completed_at = Some(now_ms);
            if self.store.put_job(canceled.clone())? {
                self.finish_cancel(&canceled, false, now_ms, out)?;
                return Ok(true);
            }
        }
    }

    /// Publishes a job's event, with its counts now.
    fn job_event(
        &self,
        job: &Job,
        operation: &str,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Stored<()> {
        let counts = self.store.counts(&job.id)?;
        out.push(events::job(job, operation, &counts, now_ms));
        Ok(())
    }

    /// A job with its status brought up to date: an IN_PROGRESS job whose rollout is done
    /// and whose executions all ended is COMPLETED (noted when first seen so).
    pub(crate) fn current(
        &mut self,
        job: Arc<Job>,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Stored<Arc<Job>> {
        // A continuous job goes on while its groups may grow: it ends only when canceled.
        if job.status != JobStatus::InProgress
            || job.target_selection == TargetSelection::Continuous
        {
            return Ok(job);
        }
        // The rollout first: while it goes on, the counts (a read of every bucket of a
        // shared store) need not be read.
        if self.store.rollouts()?.iter().any(|r| r.job_id == job.id) {
            return Ok(job);
        }
        let counts = self.store.counts(&job.id)?;
        let pending = counts.get(&Status::Queued).copied().unwrap_or(0)
            + counts.get(&Status::InProgress).copied().unwrap_or(0);
        if pending > 0 {
            return Ok(job);
        }
        let mut completed = (*job).clone();
        completed.status = JobStatus::Completed;
        completed.completed_at = Some(now_ms);
        completed.last_updated_at = now_ms;
        let id = job.id.clone();
        let event = completed.clone();
        if self.store.put_job(completed)? {
            out.push(events::job(&event, "completed", &counts, now_ms));
        }
        Ok(self.store.job(&id)?.unwrap_or(job))
    }

    /// Cancels a job (AWS's `CancelJob`): it becomes CANCELED, its rollout stops (things it
    /// had not reached get no execution), its QUEUED executions become CANCELED, and with
    /// `force` its IN_PROGRESS ones too.
    pub fn cancel_job(
        &mut self,
        job_id: &str,
        force: bool,
        reason_code: Option<String>,
        comment: Option<String>,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        if let Some(code) = &reason_code
            && (code.is_empty()
                || code.len() > 128
                || !code
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'))
        {
            return Err(JobsError::Invalid(format!(
                "reasonCode {code:?}: 1-128 characters of A-Z, 0-9 and '_'"
            )));
        }
        if comment.as_ref().is_some_and(|c| c.chars().count() > 2028) {
            return Err(JobsError::Invalid(
                "comment: at most 2028 characters".into(),
            ));
        }
        let mut marked = false;
        let job = loop {
            let job = self.existing(job_id)?;
            match job.status {
                JobStatus::Completed | JobStatus::DeletionInProgress => {
                    return Err(JobsError::InvalidState(format!(
                        "job {job_id} is {:?}: only a scheduled or in-progress job can be canceled",
                        job.status
                    )));
                }
                JobStatus::Canceled if !force || job.force_canceled => {
                    return Err(JobsError::InvalidState(format!(
                        "job {job_id} is canceled already{}",
                        if job.force_canceled {
                            " (with force)"
                        } else {
                            ": use force to cancel its in-progress executions"
                        }
                    )));
                }
                _ => {}
            }
            if !marked {
                self.mark_unfinished(job_id)?;
                marked = true;
            }
            let mut canceled = (*job).clone();
            canceled.status = JobStatus::Canceled;
            canceled.force_canceled = force;
            canceled.reason_code = reason_code.clone().or(canceled.reason_code);
            canceled.comment = comment.clone().or(canceled.comment);
            canceled.last_updated_at = now_ms;
            canceled.completed_at = Some(now_ms);
            if self.store.put_job(canceled.clone())? {
                break canceled;
            }
        };
        self.job_event(&job, "cancellation_in_progress", now_ms, out)?;
        Ok(self.finish_cancel(&job, force, now_ms, out)?)
    }

    /// Marks a job whose cancellation or deletion begins, before it is recorded CANCELED or
    /// DELETION_IN_PROGRESS: its rollout stays listed (listed again, when it had handed out
    /// every thing) until that is done. Why: it takes a write per thing after the job's own,
    /// and a store that fails midway, or a node that dies, would leave executions QUEUED under
    /// a CANCELED job for good (a second CancelJob is refused, an abort happens once), or a job
    /// half deleted, its executions still on some devices' lists, until someone asks again.
    /// Listed, the next tick of any node finishes it ([`Jobs::roll_out`]).
    fn mark_unfinished(&mut self, job_id: &str) -> Stored<()> {
        self.store.add_job_things(job_id, &[])
    }

    /// Ends a CANCELED job's QUEUED executions (and with `force` its IN_PROGRESS ones), then
    /// its rollout and the cancellation's mark, and says that it is canceled. Each step may
    /// be made again: an execution ends once.
    fn finish_cancel(
        &mut self,
        job: &Job,
        force: bool,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Stored<()> {
        // Thing by thing, a page of the job's things at a time.
        let mut from = 0;
        loop {
            let things = self.store.job_things(&job.id, from, THINGS_PAGE)?;
            for thing in &things {
                self.change(thing, now_ms, out, |record| {
                    let cancel = match record.latest(&job.id).map(|e| e.status) {
                        Some(Status::Queued) => true,
                        Some(Status::InProgress) => force,
                        _ => false,
                    };
                    if cancel {
                        finish(record, job, thing, Status::Canceled, now_ms);
                    }
                    Ok::<_, super::StoreError>(())
                })?;
            }
            if (things.len() as u64) < THINGS_PAGE {
                break;
            }
            from += THINGS_PAGE;
        }
        // The mark comes off once: a cancellation cut short is finished by the tick of every
        // node that saw its mark, each step made again, and only the one that took the mark
        // says the job is canceled.
        if self.store.stop_rollout(&job.id)? {
            self.job_event(job, "canceled", now_ms, out)?;
        }
        Ok(())
    }

    /// Cancels one thing's execution (AWS's `CancelJobExecution`): a QUEUED one, or with
    /// `force` an IN_PROGRESS one, becomes CANCELED (no retry follows), with `statusDetails`
    /// when given; `expectedVersion` must match as in the device API.
    pub fn cancel_execution(
        &mut self,
        cancel: &ExecutionCancel,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        let ExecutionCancel {
            job_id,
            thing,
            force,
            expected_version,
            status_details,
        } = cancel;
        let (job_id, thing, force) = (job_id.as_str(), thing.as_str(), *force);
        if !valid_thing_name(thing) {
            return Err(JobsError::Invalid(format!(
                "thing name {thing:?}: {}",
                super::THING_NAME_RULE
            )));
        }
        let body = super::DeviceBody {
            status_details: status_details.clone(),
            ..Default::default()
        };
        body.validate().map_err(JobsError::Invalid)?;
        let job = self.existing(job_id)?;
        self.change(thing, now_ms, out, |record| {
            let execution = record.latest(job_id).ok_or_else(|| {
                JobsError::NotFound(format!("execution of job {job_id} on thing {thing}"))
            })?;
            if let Some(expected) = *expected_version
                && expected != execution.version_number
            {
                return Err(JobsError::VersionConflict(format!(
                    "expected version {expected} but found version {}",
                    execution.version_number
                )));
            }
            match execution.status {
                Status::Queued => {}
                Status::InProgress if force => {}
                Status::InProgress => {
                    return Err(JobsError::InProgress(format!("{job_id} on {thing}")));
                }
                other => {
                    return Err(JobsError::InvalidState(format!(
                        "the execution of {job_id} on {thing} is {} already",
                        other.as_str()
                    )));
                }
            }
            if let (Some(details), Some(execution)) = (status_details, record.latest_mut(job_id)) {
                execution.status_details = details.clone();
            }
            finish(record, &job, thing, Status::Canceled, now_ms);
            Ok(())
        })
    }

    /// Changes a job's description and its timeout, retry, rollout and abort configurations
    /// (AWS's `UpdateJob`; absent fields stay). A new timeout applies to executions started
    /// afterwards; a new rate from now on.
    pub fn update_job(&mut self, update: JobUpdate, now_ms: u64) -> Result<(), JobsError> {
        loop {
            let job = self.existing(&update.job_id)?;
            if !matches!(job.status, JobStatus::InProgress | JobStatus::Scheduled) {
                return Err(JobsError::InvalidState(format!(
                    "job {} is {:?}: only a scheduled or in-progress job can be updated",
                    job.id, job.status
                )));
            }
            let mut updated = (*job).clone();
            let changes = update.changes.clone();
            // A new rate starts from the new settings, from here (not in a burst).
            if changes.job_executions_rollout_config.is_some() {
                updated.pace.rate = None;
            }
            let config = &mut updated.config;
            config.description = changes.description.or(config.description.take());
            config.timeout_config = changes.timeout_config.or(config.timeout_config.take());
            config.job_executions_retry_config = changes
                .job_executions_retry_config
                .or(config.job_executions_retry_config.take());
            config.job_executions_rollout_config = changes
                .job_executions_rollout_config
                .or(config.job_executions_rollout_config.take());
            config.abort_config = changes.abort_config.or(config.abort_config.take());
            config.validate().map_err(JobsError::Invalid)?;
            updated.last_updated_at = now_ms;
            if self.store.put_job(updated)? {
                return Ok(());
            }
        }
    }

    /// Deletes a job and its executions (AWS's `DeleteJob`): a COMPLETED or CANCELED job, or
    /// any with `force`. It is DELETION_IN_PROGRESS while its things' executions are removed
    /// (each thing is notified as when an execution is deleted).
    pub fn delete_job(
        &mut self,
        job_id: &str,
        force: bool,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        let mut marked = false;
        let job = loop {
            let job = self.existing(job_id)?;
            let job = self.current(job, now_ms, out)?;
            match job.status {
                JobStatus::InProgress | JobStatus::Scheduled if !force => {
                    return Err(JobsError::InvalidState(format!(
                        "job {job_id} is {:?}: cancel it first, or delete it with force",
                        job.status
                    )));
                }
                JobStatus::DeletionInProgress => break job,
                _ => {}
            }
            if !marked {
                self.mark_unfinished(job_id)?;
                marked = true;
            }
            let mut deleting = (*job).clone();
            deleting.status = JobStatus::DeletionInProgress;
            deleting.last_updated_at = now_ms;
            if self.store.put_job(deleting.clone())? {
                self.job_event(&deleting, "deletion_in_progress", now_ms, out)?;
                break Arc::new(deleting);
            }
        };
        Ok(self.finish_delete(&job, now_ms, out)?)
    }

    /// Removes a job being deleted from each of its things, then the job with its rollout and
    /// the deletion's mark, and says that it is deleted. Each step may be made again; as with
    /// a cancellation, only the call that removed the job says so.
    fn finish_delete(&mut self, job: &Job, now_ms: u64, out: &mut Vec<Publish>) -> Stored<()> {
        let mut from = 0;
        loop {
            let things = self.store.job_things(&job.id, from, THINGS_PAGE)?;
            for thing in &things {
                self.change(thing, now_ms, out, |record| {
                    record.executions.remove(&job.id);
                    Ok::<_, super::StoreError>(())
                })?;
            }
            if (things.len() as u64) < THINGS_PAGE {
                break;
            }
            from += THINGS_PAGE;
        }
        let counts = self.store.counts(&job.id)?;
        if self.store.delete_job(&job.id)? {
            out.push(events::job(job, "deleted", &counts, now_ms));
        }
        Ok(())
    }

    /// A job that exists.
    fn existing(&self, job_id: &str) -> Result<Arc<Job>, JobsError> {
        self.store
            .job(job_id)?
            .ok_or_else(|| JobsError::NotFound(format!("job {job_id}")))
    }

    /// The latest execution of `job_id` on `thing`.
    pub fn execution(&self, thing: &str, job_id: &str) -> Stored<Option<Execution>> {
        Ok(self.store.thing(thing)?.latest(job_id).cloned())
    }
}
