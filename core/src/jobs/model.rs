//! Jobs, executions and what the device API accepts (spec: docs/protocol/jobs.md §1, §3).

use std::collections::BTreeMap;

use serde_json::Value;

use super::wire::{
    ExecutionState, FailureType, JobConfig, JobExecution, JobSpec, JobStatus, JobSummary,
    RetryConfig, RolloutConfig, SchedulingConfig, Status, THING_NAME_RULE, TIMEOUT_MINUTES,
    TargetSelection, TimeoutConfig, valid_thing_name,
};

/// Why a device request was rejected (the `code` of a `/rejected` reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectCode {
    /// The request's topic is not one of the API's.
    InvalidTopic,
    /// The request is not JSON.
    InvalidJson,
    /// A field is missing or wrong.
    InvalidRequest,
    /// The execution cannot go to that status from where it is.
    InvalidStateTransition,
    /// No such job or execution.
    ResourceNotFound,
    /// `expectedVersion` is not the execution's version.
    VersionMismatch,
    /// The store failed; nothing changed.
    InternalError,
    /// Too many requests (AWS's code; mqstore does not throttle).
    RequestThrottled,
}

impl RejectCode {
    /// The code as AWS spells it.
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
#[non_exhaustive]
pub enum JobsError {
    #[error("invalid job: {0}")]
    /// A request field is wrong (`InvalidRequest`).
    Invalid(String),
    #[error("a job {0} exists already")]
    /// A job with this id exists (`Conflict`).
    JobExists(String),
    #[error("{0} exists already")]
    /// A thing group or job template with this name exists (`ResourceAlreadyExists`).
    Exists(String),
    #[error("no such {0}")]
    /// No such job, execution, group or template (`ResourceNotFound`); says which, e.g.
    /// `job J`, `execution of job J on thing T`, `thing group G`.
    NotFound(String),
    #[error("{0} is IN_PROGRESS: use force")]
    /// Refused while executions are in progress (`InvalidStateTransition`).
    InProgress(String),
    #[error("{0}")]
    /// Refused in the current state (`InvalidStateTransition`).
    InvalidState(String),
    #[error("version conflict: {0}")]
    /// An operator's `expectedVersion` is not the execution's version (`VersionConflict`).
    VersionConflict(String),
    #[error(transparent)]
    /// The store failed (`InternalError`); nothing changed.
    Store(#[from] StoreError),
}

/// The largest job document, as JSON text (AWS IoT Jobs' limit).
pub(super) const MAX_DOCUMENT_BYTES: usize = 32 * 1024;

impl JobSpec {
    /// A job running `document` on `targets`, with no timeout, retries, rate or abort.
    pub fn new(job_id: impl Into<String>, targets: Vec<String>, document: Value) -> Self {
        Self {
            job_id: job_id.into(),
            targets,
            document,
            ..Self::default()
        }
    }

    /// With `timeoutConfig.inProgressTimeoutInMinutes`.
    pub fn in_progress_timeout(mut self, minutes: Option<u32>) -> Self {
        self.config.timeout_config = minutes.map(|minutes| TimeoutConfig {
            in_progress_timeout_in_minutes: Some(minutes),
        });
        self
    }

    /// With up to `retries` retries of every failure (none when 0).
    pub fn retries(mut self, retries: u32) -> Self {
        self.config.job_executions_retry_config = (retries > 0).then(|| RetryConfig::all(retries));
        self
    }

    pub(crate) fn validate(&self, now_ms: u64) -> Result<(), JobsError> {
        let invalid = |m: String| Err(JobsError::Invalid(m));
        if !valid_job_id(&self.job_id) {
            return invalid(format!(
                "job id {:?}: 1-64 characters of a-z, A-Z, 0-9, '_' and '-'",
                self.job_id
            ));
        }
        if let Some(field) = self.unsupported.first() {
            return invalid(format!(
                "{field} is not supported by mqstore yet (see docs/protocol/jobs.md)"
            ));
        }
        check_document(&self.document)?;
        if self.targets.is_empty() {
            return invalid("a job needs at least one target".into());
        }
        for target in &self.targets {
            Target::parse(target).map_err(JobsError::Invalid)?;
        }
        if let Some(scheduling) = &self.scheduling_config {
            scheduling.validate(now_ms).map_err(JobsError::Invalid)?;
        }
        self.config.validate().map_err(JobsError::Invalid)
    }
}

impl JobConfig {
    /// AWS's ranges for each setting.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(description) = &self.description
            && description.chars().count() > 2028
        {
            return Err("description: at most 2028 characters".into());
        }
        if let Some(minutes) = self
            .timeout_config
            .as_ref()
            .and_then(|t| t.in_progress_timeout_in_minutes)
            && !TIMEOUT_MINUTES.contains(&u64::from(minutes))
        {
            return Err("inProgressTimeoutInMinutes is 1-10080".into());
        }
        if let Some(retry) = &self.job_executions_retry_config {
            let mut seen = Vec::new();
            for criteria in &retry.criteria_list {
                if criteria.failure_type == FailureType::Rejected {
                    return Err(
                        "jobExecutionsRetryConfig: failureType is FAILED, TIMED_OUT or ALL \
                         (REJECTED executions are never retried)"
                            .into(),
                    );
                }
                if seen.contains(&criteria.failure_type) {
                    return Err(format!(
                        "jobExecutionsRetryConfig: {:?} is given twice",
                        criteria.failure_type
                    ));
                }
                seen.push(criteria.failure_type);
            }
            let total: u32 = retry
                .criteria_list
                .iter()
                .map(|c| c.number_of_retries)
                .sum();
            if total > 10 {
                return Err(format!(
                    "jobExecutionsRetryConfig: {total} retries in all; at most 10"
                ));
            }
        }
        if let Some(rollout) = &self.job_executions_rollout_config {
            rollout.validate()?;
        }
        if let Some(abort) = &self.abort_config {
            for criteria in &abort.criteria_list {
                let t = criteria.threshold_percentage;
                if !(0.0..=100.0).contains(&t) || ((t * 100.0).round() - t * 100.0).abs() > 1e-9 {
                    return Err(format!(
                        "abortConfig: thresholdPercentage {t} is 0-100 with at most two decimals"
                    ));
                }
                if criteria.min_number_of_executed_things == 0 {
                    return Err("abortConfig: minNumberOfExecutedThings is at least 1".into());
                }
            }
        }
        Ok(())
    }
}

impl RolloutConfig {
    fn validate(&self) -> Result<(), String> {
        let rate = 1..=1000;
        if let Some(max) = self.maximum_per_minute
            && !rate.contains(&max)
        {
            return Err(format!("maximumPerMinute {max}: 1-1000"));
        }
        if let Some(exponential) = &self.exponential_rate {
            let base = exponential.base_rate_per_minute;
            if !rate.contains(&base) {
                return Err(format!("exponentialRate.baseRatePerMinute {base}: 1-1000"));
            }
            let factor = exponential.increment_factor;
            if !(1.1..=5.0).contains(&factor)
                || ((factor * 10.0).round() - factor * 10.0).abs() > 1e-9
            {
                return Err(format!(
                    "exponentialRate.incrementFactor {factor}: 1.1-5 with at most one decimal"
                ));
            }
            let criteria = &exponential.rate_increase_criteria;
            match (
                criteria.number_of_notified_things,
                criteria.number_of_succeeded_things,
            ) {
                (Some(n), None) | (None, Some(n)) if n >= 1 => {}
                _ => {
                    return Err("exponentialRate.rateIncreaseCriteria: one of \
                                numberOfNotifiedThings and numberOfSucceededThings, at least 1"
                        .into());
                }
            }
        }
        Ok(())
    }
}

/// A job, as stored: what was created, what `updateJob` changed, and its state.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Job {
    /// The job's id.
    pub id: String,
    /// The job document the devices get.
    pub document: Value,
    /// As given: things and groups (see [`JobSpec::targets`]).
    pub targets: Vec<String>,
    /// Its settings: timeouts, retries, rollout, aborts.
    pub config: JobConfig,
    /// Snapshot, or continuous (things added to its groups later).
    pub target_selection: TargetSelection,
    /// When it starts, ends, and may roll out.
    pub scheduling_config: Option<SchedulingConfig>,
    /// The template it was made from, if any.
    pub job_template_arn: Option<String>,
    /// The values filled into the template's placeholders.
    pub document_parameters: BTreeMap<String, String>,
    /// The job's status.
    pub status: JobStatus,
    /// Canceled with `force`.
    pub force_canceled: bool,
    /// Why it was canceled, for tooling.
    pub reason_code: Option<String>,
    /// Why it was canceled, for people.
    pub comment: Option<String>,
    /// Epoch ms.
    pub created_at: u64,
    /// When it last changed, in seconds since the epoch.
    pub last_updated_at: u64,
    /// When it completed, in seconds since the epoch.
    pub completed_at: Option<u64>,
    /// The rollout's pace (docs/protocol/jobs.md §5, "Rollout rate").
    pub pace: Pace,
    /// Increases with every write; [`super::JobsStore::put_job`] compares it.
    #[serde(skip)]
    pub revision: u64,
    // Written by mqstore before 0.x's rollouts: read, then folded into `config`.
    #[serde(skip_serializing)]
    pub(crate) in_progress_timeout_minutes: Option<u32>,
    #[serde(skip_serializing)]
    pub(crate) max_retries: u32,
}

/// Where a rate-limited rollout counts from: `count` things had been notified at `at_ms`, and
/// the rate since is `rate` per minute. Moved on when the rate changes or the rollout lagged.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Pace {
    /// When the last batch was notified, in ms since the epoch.
    pub at_ms: u64,
    /// Things notified in the current minute.
    pub count: u64,
    /// The exponential rate now (per minute); `None` until the rollout starts.
    pub rate: Option<f64>,
    /// The criteria count (notified or succeeded things) when the rate last went up.
    pub raised_at: u64,
    /// Things claimed in each of the last 61 sixtieths of a minute (the index of the
    /// sixtieth since the epoch, how many): no 60 s window ever holds more than the rate.
    pub recent: Vec<(u64, u64)>,
}

impl Job {
    pub(crate) fn new(spec: JobSpec, now_ms: u64) -> Self {
        let mut targets = spec.targets;
        targets.dedup();
        let scheduled = spec
            .scheduling_config
            .as_ref()
            .and_then(SchedulingConfig::start_ms)
            .is_some_and(|start| start > now_ms);
        Self {
            id: spec.job_id,
            document: spec.document,
            targets,
            config: spec.config,
            target_selection: spec.target_selection.unwrap_or_default(),
            scheduling_config: spec.scheduling_config,
            job_template_arn: spec.job_template_arn,
            document_parameters: spec.document_parameters,
            status: match scheduled {
                true => JobStatus::Scheduled,
                false => JobStatus::InProgress,
            },
            created_at: now_ms,
            last_updated_at: now_ms,
            pace: Pace {
                at_ms: now_ms,
                ..Pace::default()
            },
            ..Self::default()
        }
    }

    /// A job as an older mqstore wrote it, in today's form.
    pub fn upgraded(mut self) -> Self {
        if let Some(minutes) = self.in_progress_timeout_minutes.take() {
            self.config.timeout_config = Some(TimeoutConfig {
                in_progress_timeout_in_minutes: Some(minutes),
            });
        }
        if self.max_retries > 0 {
            self.config.job_executions_retry_config = Some(RetryConfig::all(self.max_retries));
            self.max_retries = 0;
        }
        self
    }

    /// `schedulingConfig.maintenanceWindows`: when its rollout may go on (any time if none).
    pub fn maintenance_windows(&self) -> &[super::wire::MaintenanceWindow] {
        self.scheduling_config
            .as_ref()
            .map_or(&[], |s| &s.maintenance_windows[..])
    }

    /// `timeoutConfig.inProgressTimeoutInMinutes`.
    pub fn in_progress_timeout_minutes(&self) -> Option<u32> {
        self.config
            .timeout_config
            .as_ref()
            .and_then(|t| t.in_progress_timeout_in_minutes)
    }

    /// Whether an execution that ended with `status` gets another one, given the statuses its
    /// thing's earlier executions of this job ended with (AWS counts retries per failure
    /// type: a FAILED one against FAILED's criteria, or ALL's when FAILED has none).
    pub(crate) fn retries(&self, status: Status, earlier: impl Iterator<Item = Status>) -> bool {
        let Some(retry) = &self.config.job_executions_retry_config else {
            return false;
        };
        let kind = match status {
            Status::Failed => FailureType::Failed,
            Status::TimedOut => FailureType::TimedOut,
            _ => return false,
        };
        let criteria = retry
            .criteria_list
            .iter()
            .find(|c| c.failure_type == kind)
            .or_else(|| {
                retry
                    .criteria_list
                    .iter()
                    .find(|c| c.failure_type == FailureType::All)
            });
        let Some(criteria) = criteria else {
            return false;
        };
        // This failure included: how many failures of the criteria's kind so far.
        let failures = earlier
            .chain([status])
            .filter(|s| criteria.failure_type.counts(*s) && *s != Status::Rejected)
            .count();
        failures <= criteria.number_of_retries as usize
    }
}

/// One execution of a job on one thing.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Execution {
    /// The job.
    pub job_id: String,
    /// The thing it runs on.
    pub thing: String,
    /// Where it is.
    pub status: Status,
    /// The device's own key/value details of its status.
    pub status_details: BTreeMap<String, String>,
    /// Epoch seconds.
    pub queued_at: u64,
    /// When the device started it, in seconds since the epoch.
    pub started_at: Option<u64>,
    /// When it last changed, in seconds since the epoch.
    pub last_updated_at: u64,
    /// Its version, raised by every update.
    pub version_number: u64,
    /// Which execution of the job on this thing, from 1 (retries count up).
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
    pub(crate) fn key(&self) -> (&str, u64) {
        (&self.job_id, self.execution_number)
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

/// A jobs store that could not do what was asked (a shared store that is unreachable): the
/// request that needed it is answered with an error, and nothing was changed by it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the jobs store failed: {0}")]
pub struct StoreError(pub String);

/// What a [`JobsStore`](super::JobsStore) method returns.
pub type Stored<T> = Result<T, StoreError>;

/// `NAME` of `kind/NAME` or of an ARN `arn:aws:iot:REGION:ACCOUNT:kind/NAME`; `None` when
/// `text` is neither.
pub(crate) fn resource<'a>(text: &'a str, kind: &str) -> Option<&'a str> {
    let path = match text.strip_prefix("arn:") {
        Some(arn) => arn.splitn(5, ':').nth(4)?,
        None => text,
    };
    path.strip_prefix(kind)?.strip_prefix('/')
}

/// A job's target: a thing or a thing group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    Thing(String),
    Group(String),
}

impl Target {
    /// A name (a thing), `thing/NAME`, `thinggroup/NAME`, or an ARN of either.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let target = if let Some(group) = resource(text, "thinggroup") {
            Self::Group(group.to_owned())
        } else if let Some(thing) = resource(text, "thing") {
            Self::Thing(thing.to_owned())
        } else if text.contains('/') {
            return Err(format!(
                "target {text:?}: a thing name, thing/NAME, thinggroup/NAME, or an ARN \
                 arn:aws:iot:REGION:ACCOUNT:thing/NAME or …:thinggroup/NAME"
            ));
        } else {
            Self::Thing(text.to_owned())
        };
        let (Self::Thing(name) | Self::Group(name)) = &target;
        match valid_thing_name(name) {
            true => Ok(target),
            false => Err(format!("target {text:?}: names are {THING_NAME_RULE}")),
        }
    }
}

/// A job document's checks: a JSON object of at most [`MAX_DOCUMENT_BYTES`].
pub(crate) fn check_document(document: &Value) -> Result<(), JobsError> {
    if !document.is_object() {
        return Err(JobsError::Invalid(
            "the document must be a JSON object".into(),
        ));
    }
    let size = document.to_string().len();
    if size > MAX_DOCUMENT_BYTES {
        return Err(JobsError::Invalid(format!(
            "the document is {size} bytes; at most {MAX_DOCUMENT_BYTES} (as AWS IoT Jobs)"
        )));
    }
    Ok(())
}
