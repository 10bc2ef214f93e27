//! Jobs: per-device job queues speaking the AWS IoT Jobs device MQTT API and its
//! notifications (spec: docs/protocol/jobs.md), with no I/O.
//!
//! A driver feeds every message of `$aws/things/+/jobs/#` to [`Jobs::handle`] and publishes what
//! comes out (the `/accepted` or `/rejected` reply, and the `notify` / `notify-next`
//! notifications the change causes); operator calls ([`Jobs::create_job`],
//! [`Jobs::cancel_job`], [`Jobs::delete_execution`]) push their notifications the same way;
//! [`Jobs::expire`] at [`Jobs::next_deadline`] times out executions.
//!
//! Notifications follow from comparing a thing's pending list before and after each change:
//! `notify` when its membership changed, `notify-next` when its first entry changed.

mod client;
mod model;
mod operator;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use bytes::Bytes;
use serde_json::{Map, Value, json};

pub use client::{
    DeviceRequest, ExecutionState, JobExecution, JobNotification, JobSummary, JobsClient,
    JobsEvent, OperatorRequest, PendingJobs, Update, UpdateAccepted, parse,
};
pub use model::{Execution, Job, JobSpec, JobsError, RejectCode, Status};
use model::{valid_job_id, valid_thing_name};
pub use operator::OPERATOR_TOPIC;

use crate::envelope::{Properties, Publish};

/// The jobs of one service, in memory.
#[derive(Debug)]
pub struct Jobs {
    /// How long a minute of the timers is (timeouts are given in minutes): 60 s, shorter
    /// only where tests must see timeouts happen.
    minute_ms: u64,
    /// Targets queued per [`Jobs::roll_out`] step (see [`Jobs::with_rollout_batch`]).
    rollout_batch: usize,
    /// Created jobs whose targets are not all queued yet: job id, next target, oldest first.
    rollouts: VecDeque<(String, usize)>,
    jobs: BTreeMap<String, Job>,
    /// Every running timer: (deadline, thing, job id), earliest first, so that finding the
    /// next deadline and the due executions does not walk every execution.
    timers: BTreeSet<(u64, String, String)>,
    /// thing → job id → its executions, oldest first (a retry appends one).
    executions: HashMap<String, BTreeMap<String, Vec<Execution>>>,
    /// Creation order, to break ties of `queuedAt`.
    next_seq: u64,
}

/// What a device request asked for, from its topic.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Api {
    GetPending,
    StartNext,
    Describe(String),
    Update(String),
}

const PREFIX: &str = "$aws/things/";

impl Default for Jobs {
    fn default() -> Self {
        Self::new()
    }
}

impl Jobs {
    /// An empty service.
    pub fn new() -> Self {
        Self::with_minute(60_000)
    }

    /// An empty service whose timer minutes last `minute_ms` (for tests of timeouts).
    pub fn with_minute(minute_ms: u64) -> Self {
        Self {
            minute_ms: minute_ms.max(1),
            rollout_batch: usize::MAX,
            rollouts: VecDeque::new(),
            timers: BTreeSet::new(),
            jobs: BTreeMap::new(),
            executions: HashMap::new(),
            next_seq: 0,
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

    /// Whether created jobs still have targets to queue: call [`Jobs::roll_out`].
    pub fn rolling_out(&self) -> bool {
        !self.rollouts.is_empty()
    }

    /// Queues the next batch of targets of the jobs being rolled out, oldest job first,
    /// pushing the notifications onto `out`. Returns how many were queued.
    pub fn roll_out(&mut self, now_ms: u64, out: &mut Vec<Publish>) -> usize {
        let mut budget = self.rollout_batch;
        let mut queued = 0;
        while budget > 0
            && let Some((job_id, next)) = self.rollouts.front().cloned()
        {
            let targets = self.jobs.get(&job_id).map_or(&[][..], |j| &j.targets[..]);
            let end = next.saturating_add(budget).min(targets.len());
            let batch = targets.get(next..end).unwrap_or_default().to_vec();
            if end >= targets.len() {
                self.rollouts.pop_front();
            } else if let Some(front) = self.rollouts.front_mut() {
                front.1 = end;
            }
            budget -= batch.len();
            queued += batch.len();
            for thing in batch {
                self.change(&thing, now_ms, out, |jobs| {
                    jobs.queue(&thing, &job_id, 1, now_ms);
                });
            }
        }
        queued
    }

    /// A job, by id.
    pub fn job(&self, job_id: &str) -> Option<&Job> {
        self.jobs.get(job_id)
    }

    /// The latest execution of `job_id` on `thing`.
    pub fn execution(&self, thing: &str, job_id: &str) -> Option<&Execution> {
        self.executions.get(thing)?.get(job_id)?.last()
    }

    /// Creates a job and queues an execution of it on every target.
    pub fn create_job(
        &mut self,
        spec: JobSpec,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        spec.validate()?;
        if self.jobs.contains_key(&spec.job_id) {
            return Err(JobsError::JobExists(spec.job_id));
        }
        let job = Job::from(spec);
        let job_id = job.id.clone();
        self.jobs.insert(job_id.clone(), job);
        self.rollouts.push_back((job_id, 0));
        self.roll_out(now_ms, out);
        Ok(())
    }

    /// Removes one execution (status REMOVED; `force` for one IN_PROGRESS).
    pub fn delete_execution(
        &mut self,
        job_id: &str,
        thing: &str,
        force: bool,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        let execution = self
            .execution(thing, job_id)
            .ok_or_else(|| JobsError::NotFound(format!("{job_id} on {thing}")))?;
        if execution.status == Status::InProgress && !force {
            return Err(JobsError::InProgress(format!("{job_id} on {thing}")));
        }
        let (thing, job_id) = (thing.to_owned(), job_id.to_owned());
        self.change(&thing, now_ms, out, |jobs| {
            if let Some(list) = jobs
                .executions
                .get_mut(&thing)
                .and_then(|by_job| by_job.get_mut(&job_id))
            {
                list.clear();
            }
        });
        if let Some(by_job) = self.executions.get_mut(&thing) {
            by_job.remove(&job_id);
        }
        Ok(())
    }

    /// Cancels a job: its QUEUED executions become CANCELED, and with `force` its IN_PROGRESS
    /// ones too.
    pub fn cancel_job(
        &mut self,
        job_id: &str,
        force: bool,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        let job = self
            .jobs
            .get(job_id)
            .ok_or_else(|| JobsError::NotFound(job_id.to_owned()))?;
        let targets = job.targets.clone();
        // Targets not queued yet never will be.
        self.rollouts.retain(|(id, _)| id != job_id);
        for thing in targets {
            let status = self.execution(&thing, job_id).map(|e| e.status);
            let cancel = match status {
                Some(Status::Queued) => true,
                Some(Status::InProgress) => force,
                _ => false,
            };
            if cancel {
                self.change(&thing, now_ms, out, |jobs| {
                    jobs.finish(&thing, job_id, Status::Canceled, now_ms);
                });
            }
        }
        Ok(())
    }

    /// Handles a message from `$aws/things/+/jobs/#`. `None` when it is no request (the
    /// service's own replies and notifications coming back); else the reply is pushed onto
    /// `out` after the notifications the request caused.
    pub fn handle(
        &mut self,
        topic: &str,
        payload: &[u8],
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Option<()> {
        let rest = topic.strip_prefix(PREFIX)?;
        let (thing, api) = rest.split_once("/jobs/")?;
        if ["/accepted", "/rejected"].iter().any(|s| api.ends_with(s))
            || api == "notify"
            || api == "notify-next"
        {
            return None;
        }
        let now_s = now_ms / 1000;
        let request = match parse_payload(payload) {
            Ok(request) => request,
            Err(code) => {
                out.push(reject(
                    topic,
                    code,
                    "the payload must be a JSON object",
                    None,
                    None,
                    now_s,
                ));
                return Some(());
            }
        };
        let token = request
            .get("clientToken")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let api = match parse_api(api) {
            Some(api) => api,
            None => {
                let message = format!("{api} is not a jobs API");
                out.push(reject(
                    topic,
                    RejectCode::InvalidTopic,
                    &message,
                    token.as_deref(),
                    None,
                    now_s,
                ));
                return Some(());
            }
        };
        if !valid_thing_name(thing) {
            let message = "thing names are 1-128 characters of a-z, A-Z, 0-9, ':', '_' and '-'";
            out.push(reject(
                topic,
                RejectCode::InvalidRequest,
                message,
                token.as_deref(),
                None,
                now_s,
            ));
            return Some(());
        }
        let thing = thing.to_owned();
        let result = match api {
            Api::GetPending => Ok(self.pending_lists(&thing)),
            Api::StartNext => self.start_next(&thing, &request, now_ms, out),
            Api::Describe(job_id) => self.describe(&thing, &job_id, &request, now_ms),
            Api::Update(job_id) => self.update(&thing, &job_id, &request, now_ms, out),
        };
        out.push(match result {
            Ok(mut accepted) => {
                accepted.insert("timestamp".into(), json!(now_s));
                if let Some(token) = &token {
                    accepted.insert("clientToken".into(), json!(token));
                }
                publish(format!("{topic}/accepted"), Value::Object(accepted))
            }
            Err((code, message, state)) => {
                reject(topic, code, &message, token.as_deref(), state, now_s)
            }
        });
        Some(())
    }

    /// When the next execution times out.
    pub fn next_deadline(&self) -> Option<u64> {
        self.timers.first().map(|(deadline, _, _)| *deadline)
    }

    /// Times out every IN_PROGRESS execution whose step or in-progress timer ran out.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Publish>) {
        let due: Vec<(String, String)> = self
            .timers
            .iter()
            .take_while(|(deadline, _, _)| *deadline <= now_ms)
            .map(|(_, thing, job_id)| (thing.clone(), job_id.clone()))
            .collect();
        for (thing, job_id) in due {
            self.change(&thing, now_ms, out, |jobs| {
                jobs.finish(&thing, &job_id, Status::TimedOut, now_ms);
            });
        }
    }

    // ---- the device API ----

    /// `get`: both lists, always present.
    fn pending_lists(&self, thing: &str) -> Map<String, Value> {
        let pending = self.pending(thing);
        let summaries = |status| -> Vec<Value> {
            pending
                .iter()
                .filter(|e| e.status == status)
                .map(|e| e.summary())
                .collect()
        };
        let mut reply = Map::new();
        reply.insert(
            "inProgressJobs".into(),
            json!(summaries(Status::InProgress)),
        );
        reply.insert("queuedJobs".into(), json!(summaries(Status::Queued)));
        reply
    }

    fn start_next(
        &mut self,
        thing: &str,
        request: &Map<String, Value>,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<Map<String, Value>, Rejection> {
        let details = model::status_details(request).map_err(invalid)?;
        let step = model::step_timeout(request).map_err(invalid)?;
        let Some(first) = self
            .pending(thing)
            .first()
            .map(|e| (e.job_id.clone(), e.status))
        else {
            return Ok(Map::new());
        };
        let (job_id, status) = first;
        if status == Status::Queued {
            let minute = self.minute_ms;
            self.change(thing, now_ms, out, |jobs| {
                if let Some(execution) = jobs.latest_mut(thing, &job_id) {
                    execution.start(details, step, now_ms, minute);
                }
            });
        }
        let execution = self.describe_execution(thing, &job_id, None, true, now_ms);
        let mut reply = Map::new();
        if let Some(execution) = execution {
            reply.insert("execution".into(), execution);
        }
        Ok(reply)
    }

    fn describe(
        &self,
        thing: &str,
        job_id: &str,
        request: &Map<String, Value>,
        now_ms: u64,
    ) -> Result<Map<String, Value>, Rejection> {
        let include_document = request
            .get("includeJobDocument")
            .and_then(Value::as_bool)
            .unwrap_or(true);
        let mut reply = Map::new();
        if job_id == "$next" {
            let first = self.pending(thing).first().map(|e| e.job_id.clone());
            if let Some(first) = first
                && let Some(execution) =
                    self.describe_execution(thing, &first, None, include_document, now_ms)
            {
                reply.insert("execution".into(), execution);
            }
            return Ok(reply);
        }
        let number = model::execution_number(request).map_err(invalid)?;
        let execution = self
            .describe_execution(thing, job_id, number, include_document, now_ms)
            .ok_or_else(|| not_found(thing, job_id))?;
        reply.insert("execution".into(), execution);
        Ok(reply)
    }

    fn update(
        &mut self,
        thing: &str,
        job_id: &str,
        request: &Map<String, Value>,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<Map<String, Value>, Rejection> {
        let status = match request.get("status").and_then(Value::as_str) {
            None => return Err(invalid("status is required".into())),
            Some(text) => Status::parse(text)
                .ok_or_else(|| invalid(format!("{text} is not a job execution status")))?,
        };
        match status {
            Status::InProgress | Status::Succeeded | Status::Failed | Status::Rejected => {}
            Status::Queued => {}
            other => {
                return Err(invalid(format!("a device cannot set {}", other.as_str())));
            }
        }
        let details = model::status_details(request).map_err(invalid)?;
        let step = model::step_timeout(request).map_err(invalid)?;
        let expected = model::expected_version(request).map_err(invalid)?;
        let number = model::execution_number(request).map_err(invalid)?;
        let execution = self
            .latest(thing, job_id)
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
        let minute = self.minute_ms;
        self.change(thing, now_ms, out, |jobs| {
            if status.is_pending() {
                if let Some(execution) = jobs.latest_mut(thing, job_id) {
                    execution.progress(details, step, now_ms, minute);
                }
            } else {
                if let (Some(execution), Some(details)) = (jobs.latest_mut(thing, job_id), details)
                {
                    execution.status_details = details;
                }
                jobs.finish(thing, job_id, status, now_ms);
            }
        });
        let mut reply = Map::new();
        let include_state = request
            .get("includeJobExecutionState")
            .and_then(Value::as_bool)
            == Some(true);
        let include_document =
            request.get("includeJobDocument").and_then(Value::as_bool) == Some(true);
        if include_state && let Some(execution) = self.execution_numbered(thing, job_id, number) {
            reply.insert("executionState".into(), execution.state());
        }
        if include_document && let Some(job) = self.jobs.get(job_id) {
            reply.insert("jobDocument".into(), job.document.clone());
        }
        Ok(reply)
    }

    // ---- state ----

    /// Runs `change` on `thing`'s executions and publishes what it did to the pending list.
    fn change(
        &mut self,
        thing: &str,
        now_ms: u64,
        out: &mut Vec<Publish>,
        change: impl FnOnce(&mut Self),
    ) {
        let before: Vec<(String, u64)> = self.pending(thing).iter().map(|e| e.key()).collect();
        let timers_before = self.timers_of(thing);
        change(self);
        for timer in timers_before {
            self.timers.remove(&timer);
        }
        let timers_after = self.timers_of(thing);
        self.timers.extend(timers_after);
        let after = self.pending(thing);
        let keys: Vec<(String, u64)> = after.iter().map(|e| e.key()).collect();
        let now_s = now_ms / 1000;
        let mut sorted_before = before.clone();
        let mut sorted_after = keys.clone();
        sorted_before.sort();
        sorted_after.sort();
        if sorted_before != sorted_after {
            let mut jobs = Map::new();
            for (status, name) in [
                (Status::InProgress, "IN_PROGRESS"),
                (Status::Queued, "QUEUED"),
            ] {
                let list: Vec<Value> = after
                    .iter()
                    .take(10)
                    .filter(|e| e.status == status)
                    .map(|e| e.summary())
                    .collect();
                if !list.is_empty() {
                    jobs.insert(name.into(), Value::Array(list));
                }
            }
            out.push(publish(
                format!("{PREFIX}{thing}/jobs/notify"),
                json!({ "timestamp": now_s, "jobs": jobs }),
            ));
        }
        if before.first() != keys.first() {
            let next = match after.first() {
                Some(first) => {
                    let document = self.jobs.get(&first.job_id).map(|j| j.document.clone());
                    json!({ "timestamp": now_s, "execution": first.next_notification(document) })
                }
                None => json!({ "timestamp": now_s }),
            };
            out.push(publish(format!("{PREFIX}{thing}/jobs/notify-next"), next));
        }
    }

    /// The running timers of `thing`'s executions.
    fn timers_of(&self, thing: &str) -> Vec<(u64, String, String)> {
        let Some(by_job) = self.executions.get(thing) else {
            return Vec::new();
        };
        by_job
            .iter()
            .filter_map(|(job_id, list)| {
                let deadline = list.last()?.deadline()?;
                Some((deadline, thing.to_owned(), job_id.clone()))
            })
            .collect()
    }

    /// `thing`'s pending list: IN_PROGRESS first, then QUEUED, each in queueing order.
    fn pending(&self, thing: &str) -> Vec<&Execution> {
        let mut pending: Vec<&Execution> = self
            .executions
            .get(thing)
            .into_iter()
            .flat_map(|by_job| by_job.values().filter_map(|list| list.last()))
            .filter(|e| e.status.is_pending())
            .collect();
        pending.sort_by_key(|e| (e.status != Status::InProgress, e.queued_at, e.seq));
        pending
    }

    fn latest(&self, thing: &str, job_id: &str) -> Option<&Execution> {
        self.executions.get(thing)?.get(job_id)?.last()
    }

    fn latest_mut(&mut self, thing: &str, job_id: &str) -> Option<&mut Execution> {
        self.executions.get_mut(thing)?.get_mut(job_id)?.last_mut()
    }

    fn execution_numbered(
        &self,
        thing: &str,
        job_id: &str,
        number: Option<u64>,
    ) -> Option<&Execution> {
        let list = self.executions.get(thing)?.get(job_id)?;
        match number {
            None => list.last(),
            Some(n) => list.iter().find(|e| e.execution_number == n),
        }
    }

    fn describe_execution(
        &self,
        thing: &str,
        job_id: &str,
        number: Option<u64>,
        include_document: bool,
        now_ms: u64,
    ) -> Option<Value> {
        let execution = self.execution_numbered(thing, job_id, number)?;
        let document = include_document
            .then(|| self.jobs.get(job_id).map(|j| j.document.clone()))
            .flatten();
        Some(execution.describe(document, now_ms))
    }

    /// Queues execution `number` of `job_id` on `thing`.
    fn queue(&mut self, thing: &str, job_id: &str, number: u64, now_ms: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let in_progress_minutes = self
            .jobs
            .get(job_id)
            .and_then(|j| j.in_progress_timeout_minutes);
        self.executions
            .entry(thing.to_owned())
            .or_default()
            .entry(job_id.to_owned())
            .or_default()
            .push(Execution::queued(
                job_id,
                thing,
                number,
                in_progress_minutes,
                seq,
                now_ms,
            ));
    }

    /// Ends the latest execution of `job_id` on `thing` with `status`, and queues a retry when
    /// the job's policy allows one.
    fn finish(&mut self, thing: &str, job_id: &str, status: Status, now_ms: u64) {
        let Some(execution) = self.latest_mut(thing, job_id) else {
            return;
        };
        execution.end(status, now_ms);
        let number = execution.execution_number;
        let retries = self.jobs.get(job_id).map_or(0, |j| j.max_retries);
        if matches!(status, Status::Failed | Status::TimedOut) && number <= u64::from(retries) {
            self.queue(thing, job_id, number + 1, now_ms);
        }
    }
}

/// A rejection: its code, message and (for state errors) the execution's state.
type Rejection = (RejectCode, String, Option<Value>);

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

fn parse_api(api: &str) -> Option<Api> {
    match api {
        "get" => Some(Api::GetPending),
        "start-next" => Some(Api::StartNext),
        _ => {
            let (job_id, verb) = api.rsplit_once('/')?;
            if job_id != "$next" && !valid_job_id(job_id) {
                return None;
            }
            match verb {
                "get" => Some(Api::Describe(job_id.to_owned())),
                "update" if job_id != "$next" => Some(Api::Update(job_id.to_owned())),
                _ => None,
            }
        }
    }
}

/// A request payload: a JSON object (an empty payload is `{}`).
fn parse_payload(payload: &[u8]) -> Result<Map<String, Value>, RejectCode> {
    if payload.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice::<Value>(payload) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(RejectCode::InvalidJson),
    }
}

fn reject(
    topic: &str,
    code: RejectCode,
    message: &str,
    token: Option<&str>,
    state: Option<Value>,
    now_s: u64,
) -> Publish {
    let mut reply = Map::new();
    reply.insert("code".into(), json!(code.as_str()));
    reply.insert("message".into(), json!(message));
    reply.insert("timestamp".into(), json!(now_s));
    if let Some(token) = token {
        reply.insert("clientToken".into(), json!(token));
    }
    if let Some(state) = state {
        reply.insert("executionState".into(), state);
    }
    publish(format!("{topic}/rejected"), Value::Object(reply))
}

fn publish(topic: String, payload: Value) -> Publish {
    Publish {
        topic,
        payload: Bytes::from(payload.to_string()),
        qos: 1,
        properties: Properties::default(),
    }
}

#[cfg(test)]
mod tests;
