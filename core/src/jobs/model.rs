//! Jobs, executions and what the device API accepts (spec: docs/protocol/jobs.md §1, §3).

use std::collections::BTreeMap;

use serde_json::Value;

use super::wire::{CreateJob, ExecutionState, JobExecution, JobSummary};

/// A job execution's status.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Queued,
    InProgress,
    Succeeded,
    Failed,
    Rejected,
    TimedOut,
    Canceled,
    Removed,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "QUEUED",
            Self::InProgress => "IN_PROGRESS",
            Self::Succeeded => "SUCCEEDED",
            Self::Failed => "FAILED",
            Self::Rejected => "REJECTED",
            Self::TimedOut => "TIMED_OUT",
            Self::Canceled => "CANCELED",
            Self::Removed => "REMOVED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Queued,
            Self::InProgress,
            Self::Succeeded,
            Self::Failed,
            Self::Rejected,
            Self::TimedOut,
            Self::Canceled,
            Self::Removed,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    /// QUEUED and IN_PROGRESS: on the thing's pending list.
    pub fn is_pending(self) -> bool {
        matches!(self, Self::Queued | Self::InProgress)
    }
}

/// Why a device request was rejected (the `code` of a `/rejected` reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectCode {
    InvalidTopic,
    InvalidJson,
    InvalidRequest,
    InvalidStateTransition,
    ResourceNotFound,
    VersionMismatch,
    InternalError,
    RequestThrottled,
}

impl RejectCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidTopic => "InvalidTopic",
            Self::InvalidJson => "InvalidJson",
            Self::InvalidRequest => "InvalidRequest",
            Self::InvalidStateTransition => "InvalidStateTransition",
            Self::ResourceNotFound => "ResourceNotFound",
            Self::VersionMismatch => "VersionMismatch",
            Self::InternalError => "InternalError",
            Self::RequestThrottled => "RequestThrottled",
        }
    }
}

/// Why an operator call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobsError {
    #[error("invalid job: {0}")]
    Invalid(String),
    #[error("a job {0} exists already")]
    JobExists(String),
    #[error("no such job or execution: {0}")]
    NotFound(String),
    #[error("{0} is IN_PROGRESS: use force")]
    InProgress(String),
    #[error(transparent)]
    Store(#[from] super::store::StoreError),
}

/// The largest job document, as JSON text (AWS IoT Jobs' limit).
pub const MAX_DOCUMENT_BYTES: usize = 32 * 1024;

/// What an operator asks for when creating a job (on the wire with AWS's `createJob` field
/// names: `timeoutConfig`, `jobExecutionsRetryConfig`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(from = "CreateJob", into = "CreateJob")]
pub struct JobSpec {
    pub job_id: String,
    /// A JSON object.
    pub document: Value,
    pub targets: Vec<String>,
    /// `timeoutConfig.inProgressTimeoutInMinutes` (1–10080).
    pub in_progress_timeout_minutes: Option<u32>,
    /// Executions that end FAILED or TIMED_OUT are queued again this many times (0–10).
    pub max_retries: u32,
}

impl JobSpec {
    pub(crate) fn validate(&self) -> Result<(), JobsError> {
        let invalid = |m: String| Err(JobsError::Invalid(m));
        if !valid_job_id(&self.job_id) {
            return invalid(format!(
                "job id {:?}: 1-64 characters of a-z, A-Z, 0-9, '_' and '-'",
                self.job_id
            ));
        }
        if !self.document.is_object() {
            return invalid("the document must be a JSON object".into());
        }
        let size = self.document.to_string().len();
        if size > MAX_DOCUMENT_BYTES {
            return invalid(format!(
                "the document is {size} bytes; at most {MAX_DOCUMENT_BYTES} (as AWS IoT Jobs)"
            ));
        }
        if self.targets.is_empty() {
            return invalid("a job needs at least one target".into());
        }
        if let Some(thing) = self.targets.iter().find(|t| !valid_thing_name(t)) {
            return invalid(format!("target {thing:?}: {THING_NAME_RULE}"));
        }
        if self
            .in_progress_timeout_minutes
            .is_some_and(|m| !TIMEOUT_MINUTES.contains(&u64::from(m)))
        {
            return invalid("inProgressTimeoutInMinutes is 1-10080".into());
        }
        if self.max_retries > 10 {
            return invalid("at most 10 retries".into());
        }
        Ok(())
    }
}

/// A job.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Job {
    pub id: String,
    pub document: Value,
    pub targets: Vec<String>,
    pub in_progress_timeout_minutes: Option<u32>,
    pub max_retries: u32,
}

impl From<JobSpec> for Job {
    fn from(spec: JobSpec) -> Self {
        let mut targets = spec.targets;
        targets.dedup();
        Self {
            id: spec.job_id,
            document: spec.document,
            targets,
            in_progress_timeout_minutes: spec.in_progress_timeout_minutes,
            max_retries: spec.max_retries,
        }
    }
}

/// One execution of a job on one thing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Execution {
    pub job_id: String,
    pub thing: String,
    pub status: Status,
    pub status_details: BTreeMap<String, String>,
    /// Epoch seconds.
    pub queued_at: u64,
    pub started_at: Option<u64>,
    pub last_updated_at: u64,
    pub version_number: u64,
    pub execution_number: u64,
    /// When the step timer (from `stepTimeoutInMinutes`) runs out, in ms.
    pub step_deadline_ms: Option<u64>,
    /// When the job's in-progress timer runs out (set on start), in ms.
    pub in_progress_deadline_ms: Option<u64>,
    in_progress_minutes: Option<u32>,
    /// Creation order among all executions.
    pub(crate) seq: u64,
}

impl Execution {
    pub(crate) fn queued(
        job_id: &str,
        thing: &str,
        number: u64,
        in_progress_minutes: Option<u32>,
        seq: u64,
        now_ms: u64,
    ) -> Self {
        Self {
            job_id: job_id.to_owned(),
            thing: thing.to_owned(),
            status: Status::Queued,
            status_details: BTreeMap::new(),
            queued_at: now_ms / 1000,
            started_at: None,
            last_updated_at: now_ms / 1000,
            version_number: 1,
            execution_number: number,
            step_deadline_ms: None,
            in_progress_deadline_ms: None,
            in_progress_minutes,
            seq,
        }
    }

    /// What identifies it on a pending list.
    pub(crate) fn key(&self) -> (String, u64) {
        (self.job_id.clone(), self.execution_number)
    }

    /// When it times out, while IN_PROGRESS: the earlier timer.
    pub fn deadline(&self) -> Option<u64> {
        if self.status != Status::InProgress {
            return None;
        }
        self.step_deadline_ms
            .into_iter()
            .chain(self.in_progress_deadline_ms)
            .min()
    }

    /// QUEUED → IN_PROGRESS (start-next).
    pub(crate) fn start(
        &mut self,
        details: Option<BTreeMap<String, String>>,
        step_minutes: Option<u64>,
        now_ms: u64,
        minute_ms: u64,
    ) {
        self.status = Status::InProgress;
        self.started_at = Some(now_ms / 1000);
        self.in_progress_deadline_ms = self
            .in_progress_minutes
            .map(|m| now_ms + u64::from(m) * minute_ms);
        self.progress(details, step_minutes, now_ms, minute_ms);
    }

    /// An accepted IN_PROGRESS update (or the start): new details, a new step timer.
    pub(crate) fn progress(
        &mut self,
        details: Option<BTreeMap<String, String>>,
        step_minutes: Option<u64>,
        now_ms: u64,
        minute_ms: u64,
    ) {
        if self.status == Status::Queued {
            return self.start(details, step_minutes, now_ms, minute_ms);
        }
        if let Some(details) = details {
            self.status_details = details;
        }
        if let Some(minutes) = step_minutes {
            self.step_deadline_ms = Some(now_ms + minutes * minute_ms);
        }
        self.last_updated_at = now_ms / 1000;
        self.version_number += 1;
    }

    /// A terminal status.
    pub(crate) fn end(&mut self, status: Status, now_ms: u64) {
        self.status = status;
        self.last_updated_at = now_ms / 1000;
        self.version_number += 1;
        self.step_deadline_ms = None;
        self.in_progress_deadline_ms = None;
    }

    /// A `JobExecutionSummary` (notify, get): no status.
    pub fn summary(&self) -> JobSummary {
        JobSummary {
            job_id: self.job_id.clone(),
            queued_at: self.queued_at,
            started_at: self.started_at,
            last_updated_at: self.last_updated_at,
            execution_number: self.execution_number,
            version_number: self.version_number,
        }
    }

    /// The execution of a notify-next: no thing name, details or timer.
    pub(crate) fn next_notification(&self, document: Option<Value>) -> JobExecution {
        JobExecution {
            job_id: self.job_id.clone(),
            thing_name: None,
            status: self.status,
            status_details: BTreeMap::new(),
            queued_at: self.queued_at,
            started_at: self.started_at,
            last_updated_at: self.last_updated_at,
            version_number: self.version_number,
            execution_number: self.execution_number,
            job_document: document,
            approximate_seconds_before_timed_out: None,
        }
    }

    /// A `JobExecution` (start-next, describe).
    pub(crate) fn describe(&self, document: Option<Value>, now_ms: u64) -> JobExecution {
        JobExecution {
            thing_name: Some(self.thing.clone()),
            status_details: self.status_details.clone(),
            approximate_seconds_before_timed_out: self
                .deadline()
                .map(|deadline| deadline.saturating_sub(now_ms) / 1000),
            ..self.next_notification(document)
        }
    }

    /// The `executionState` of rejections and of update replies.
    pub(crate) fn state(&self) -> ExecutionState {
        ExecutionState {
            status: self.status,
            status_details: self.status_details.clone(),
            version_number: self.version_number,
        }
    }
}

/// The execution a device's describe call names: the thing's first pending one, or a job's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutionRef {
    /// The first pending execution (`$next` in the topic).
    Next,
    /// The execution of this job.
    Job(String),
}

impl ExecutionRef {
    /// AWS's name for the first pending execution, where a job id stands in a topic.
    const NEXT: &'static str = "$next";

    /// What stands in the topic: `$next` or the job id.
    pub fn parse(text: &str) -> Self {
        match text {
            Self::NEXT => Self::Next,
            job_id => Self::Job(job_id.to_owned()),
        }
    }

    /// The topic's part: `$next` or the job id.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Next => Self::NEXT,
            Self::Job(job_id) => job_id,
        }
    }
}

/// `[a-zA-Z0-9_-]{1,64}`.
pub(crate) fn valid_job_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// What [`valid_thing_name`] accepts, for messages.
pub(crate) const THING_NAME_RULE: &str = "1-128 characters of a-z, A-Z, 0-9, ':', '_' and '-'";

/// AWS's range of the timers given in minutes (`stepTimeoutInMinutes`,
/// `inProgressTimeoutInMinutes`).
pub(crate) const TIMEOUT_MINUTES: std::ops::RangeInclusive<u64> = 1..=10_080;

/// `[a-zA-Z0-9:_-]{1,128}`.
pub(crate) fn valid_thing_name(name: &str) -> bool {
    (1..=128).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'-'))
}
