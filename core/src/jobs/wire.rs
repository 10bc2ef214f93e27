//! The jobs JSON, as types: what the AWS IoT Jobs device API and mqstore's operator API carry,
//! with AWS's field names (spec: docs/protocol/jobs.md). The service writes the replies and
//! notifications and reads the requests with these types; the clients write the requests and
//! read the replies with the same ones, so the two sides cannot drift apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// How a job document is described in the wire types' schema: a JSON object.
#[cfg(test)]
type JsonObject = serde_json::Map<String, Value>;

// ---- the device API ----

/// A `JobExecutionSummary`: an entry of a pending list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobSummary {
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    /// Epoch seconds.
    pub queued_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When the execution started, in seconds since the epoch (AWS's `startedAt`).
    pub started_at: Option<u64>,
    /// When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`).
    pub last_updated_at: u64,
    /// Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`).
    pub execution_number: u64,
    /// The execution's version, raised by every update (AWS's `versionNumber`).
    pub version_number: u64,
}

/// A `JobExecution` (start-next, describe, notify-next).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobExecution {
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    /// Absent from notify-next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thing_name: Option<String>,
    /// The execution's status.
    pub status: Status,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    /// The device's own key/value details of its status (AWS's `statusDetails`).
    pub status_details: BTreeMap<String, String>,
    /// When the execution was queued, in seconds since the epoch (AWS's `queuedAt`).
    pub queued_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When the execution started, in seconds since the epoch (AWS's `startedAt`).
    pub started_at: Option<u64>,
    /// When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`).
    pub last_updated_at: u64,
    /// The execution's version, raised by every update (AWS's `versionNumber`).
    pub version_number: u64,
    /// Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`).
    pub execution_number: u64,
    /// The job document, unless the request asked to leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, schemars(with = "Option<JsonObject>"))]
    pub job_document: Option<Value>,
    /// While IN_PROGRESS with a timer running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approximate_seconds_before_timed_out: Option<u64>,
}

/// A thing's pending list (`get`): IN_PROGRESS and QUEUED executions, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PendingJobs {
    /// Executions in progress (AWS's `inProgressJobs`).
    pub in_progress_jobs: Vec<JobSummary>,
    /// Executions queued (AWS's `queuedJobs`).
    pub queued_jobs: Vec<JobSummary>,
}

/// An execution's `executionState` (update replies, and rejections).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExecutionState {
    /// The execution's status.
    pub status: Status,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    /// The device's own key/value details of its status (AWS's `statusDetails`).
    pub status_details: BTreeMap<String, String>,
    /// The execution's version, raised by every update (AWS's `versionNumber`).
    pub version_number: u64,
}

/// What an accepted start-next or describe answered: the execution, absent when the thing
/// has none pending.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExecutionAccepted {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The execution, or None when there is none.
    pub execution: Option<JobExecution>,
}

/// What an accepted update answered.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct UpdateAccepted {
    /// With `includeJobExecutionState`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_state: Option<ExecutionState>,
    /// With `includeJobDocument`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(test, schemars(with = "Option<JsonObject>"))]
    pub job_document: Option<Value>,
}

/// The body of an `/accepted` reply, by API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(untagged)]
pub enum Accepted {
    /// The reply to `get`: the pending list.
    Pending(PendingJobs),
    /// The reply to `start-next`, `{jobId}/get`: an execution.
    Execution(ExecutionAccepted),
    /// The reply to `{jobId}/update`.
    Update(UpdateAccepted),
}

/// A `/rejected` reply's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// AWS's error code (`InvalidRequest`, `VersionMismatch`, ...).
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
    /// The execution's state, for state errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_state: Option<ExecutionState>,
}

/// A reply (`/accepted` or `/rejected`): its body, when it was made, and the request's
/// `clientToken`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Reply<T> {
    #[serde(flatten)]
    /// The reply's own fields.
    pub body: T,
    /// Epoch seconds.
    #[serde(default)]
    pub timestamp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The token the request carried, echoed back (AWS's `clientToken`).
    pub client_token: Option<String>,
}

/// A device request's payload: one shape for every API (each reads the fields it knows, as
/// AWS does; unknown fields are ignored). Absent fields are absent on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DeviceBody {
    /// Comes back in the reply: how a caller matches replies to requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
    /// update: IN_PROGRESS, SUCCEEDED, FAILED or REJECTED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// start-next, update: keys `[a-zA-Z0-9:_-]{1,128}`, values 1–1024 characters without
    /// control characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_details: Option<BTreeMap<String, String>>,
    /// update: rejected with VersionMismatch unless the execution is at this version (a
    /// number, or a numeric string as AWS accepts).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "number_or_numeric_text"
    )]
    pub expected_version: Option<u64>,
    /// describe, update: which execution of the job (the latest when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_number: Option<u64>,
    /// start-next, update: the step timer (1–10080).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_timeout_in_minutes: Option<u64>,
    /// update: put the execution's state in the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_job_execution_state: Option<bool>,
    /// describe (default true), update (default false): put the job document in the reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_job_document: Option<bool>,
}

impl DeviceBody {
    /// AWS's limits on the fields whose type alone does not say enough.
    pub fn validate(&self) -> Result<(), String> {
        for (key, value) in self.status_details.iter().flatten() {
            if !valid_thing_name(key) {
                return Err(format!("statusDetails key {key:?}: {THING_NAME_RULE}"));
            }
            let length = value.chars().count();
            if !(1..=1024).contains(&length) || value.chars().any(char::is_control) {
                return Err(format!(
                    "statusDetails.{key}: 1-1024 characters, no control characters"
                ));
            }
        }
        if self
            .step_timeout_in_minutes
            .is_some_and(|m| !TIMEOUT_MINUTES.contains(&m))
        {
            return Err("stepTimeoutInMinutes is 1-10080".into());
        }
        Ok(())
    }
}

/// A whole number given as a number or as a string of digits.
fn number_or_numeric_text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Given {
        Number(u64),
        Text(String),
    }
    match Option::<Given>::deserialize(d)? {
        None => Ok(None),
        Some(Given::Number(n)) => Ok(Some(n)),
        Some(Given::Text(text)) => text
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom(format!("{text:?} is not a whole number"))),
    }
}

/// `notify`: the thing's pending list changed membership; the first ten of it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct Notify {
    #[serde(default)]
    /// When it was published, in seconds since the epoch.
    pub timestamp: u64,
    #[serde(default)]
    /// The thing's pending executions, by status.
    pub jobs: NotifyJobs,
}

/// The executions of a `notify`, by status (a status without executions is absent).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct NotifyJobs {
    #[serde(rename = "IN_PROGRESS", default, skip_serializing_if = "Vec::is_empty")]
    /// Executions in progress (AWS's `IN_PROGRESS`).
    pub in_progress: Vec<JobSummary>,
    #[serde(rename = "QUEUED", default, skip_serializing_if = "Vec::is_empty")]
    /// Executions queued (AWS's `QUEUED`).
    pub queued: Vec<JobSummary>,
}

/// `notify-next`: the first entry of the pending list changed; absent when it became empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct NotifyNext {
    #[serde(default)]
    /// When it was published, in seconds since the epoch.
    pub timestamp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The next execution to run, or None when nothing is pending.
    pub execution: Option<JobExecution>,
}

// ---- the operator API ----

/// One call of the operator API: `{"op": "createJob", ...}` with AWS's field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(tag = "op", rename_all = "camelCase", rename_all_fields = "camelCase")]
#[non_exhaustive]
pub enum OperatorRequest {
    /// Create a job (`createJob`).
    CreateJob(Box<JobSpec>),
    /// Changes what AWS's `UpdateJob` changes: the description and the timeout, retry,
    /// rollout and abort configurations (absent fields stay as they are).
    UpdateJob(JobUpdate),
    /// The job becomes CANCELED: QUEUED executions become CANCELED; IN_PROGRESS ones too with
    /// `force`.
    CancelJob {
        /// The job's id.
        job_id: String,
        #[serde(default)]
        /// Also what is in progress (AWS's `force`).
        force: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// A code saying why, for tooling (AWS's `reasonCode`).
        reason_code: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Why, for people (AWS's `comment`).
        comment: Option<String>,
    },
    /// Deletes a job and its executions (`force` when some are IN_PROGRESS).
    DeleteJob {
        /// The job's id.
        job_id: String,
        #[serde(default)]
        /// Also what is in progress (AWS's `force`).
        force: bool,
    },
    /// One thing's execution becomes CANCELED (`force` for an IN_PROGRESS one;
    /// `expectedVersion` as in the device API).
    CancelJobExecution(ExecutionCancel),
    /// Removes one execution (`force` for an IN_PROGRESS one).
    #[serde(rename = "deleteJobExecution")]
    DeleteExecution {
        /// The job's id.
        job_id: String,
        #[serde(rename = "thingName")]
        /// The thing's name.
        thing: String,
        #[serde(default)]
        /// Also what is in progress (AWS's `force`).
        force: bool,
    },
    /// A job (`describeJob`).
    DescribeJob {
        /// The job's id.
        job_id: String,
    },
    #[serde(rename = "describeJobExecution")]
    /// A thing's execution of a job (`describeJobExecution`).
    DescribeExecution {
        /// The job's id.
        job_id: String,
        #[serde(rename = "thingName")]
        /// The thing's name.
        thing: String,
    },
    /// Jobs in id order, narrowed by status, a page at a time.
    ListJobs {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Only those in this status.
        status: Option<JobStatus>,
        #[serde(flatten)]
        /// Which page, and how many per page.
        page: PageRequest,
    },
    /// Every latest execution, narrowed by thing, job and status, in (thing, job) order, a page
    /// at a time.
    #[serde(rename = "listJobExecutions")]
    ListExecutions {
        #[serde(default, rename = "thingName", skip_serializing_if = "Option::is_none")]
        /// The thing's name.
        thing: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// The job's id.
        job_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Only those in this status.
        status: Option<Status>,
        #[serde(flatten)]
        /// Which page, and how many per page.
        page: PageRequest,
    },
    /// A static thing group (AWS's `CreateThingGroup`).
    CreateThingGroup {
        /// The group's name (AWS's `thingGroupName`).
        thing_group_name: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// The group's properties (AWS's `thingGroupProperties`).
        thing_group_properties: Option<ThingGroupProperties>,
    },
    /// Removes a group and its membership (jobs that targeted it keep their things).
    DeleteThingGroup {
        /// The group's name (AWS's `thingGroupName`).
        thing_group_name: String,
    },
    /// A thing group (`describeThingGroup`).
    DescribeThingGroup {
        /// The group's name (AWS's `thingGroupName`).
        thing_group_name: String,
    },
    /// Groups in name order, a page at a time.
    ListThingGroups {
        #[serde(flatten)]
        /// Which page, and how many per page.
        page: PageRequest,
    },
    /// Adds a thing to a group (the group and the thing by name or ARN); continuous jobs
    /// on the group get an execution on it.
    AddThingToThingGroup(Membership),
    /// Removes a thing from a group; its QUEUED executions of continuous jobs on the group
    /// become REMOVED.
    RemoveThingFromThingGroup(Membership),
    /// A group's things in name order, a page at a time.
    ListThingsInThingGroup {
        /// The group's name (AWS's `thingGroupName`).
        thing_group_name: String,
        #[serde(flatten)]
        /// Which page, and how many per page.
        page: PageRequest,
    },
    /// The names of a thing's named shadows in name order, a page at a time (AWS's
    /// `ListNamedShadowsForThing`, a REST call there: an operator call here).
    ListNamedShadowsForThing {
        /// The thing (AWS's `thingName`).
        thing_name: String,
        #[serde(flatten)]
        /// Which page, and how many per page (AWS's `pageSize` is `maxResults` here).
        page: PageRequest,
    },
    /// A job template (AWS's `CreateJobTemplate`): a document and configurations that
    /// `createJob` with `jobTemplateArn` starts from.
    CreateJobTemplate(Box<JobTemplate>),
    /// A job template (`describeJobTemplate`).
    DescribeJobTemplate {
        /// The template's id (AWS's `jobTemplateId`).
        job_template_id: String,
    },
    /// Templates in id order, a page at a time.
    ListJobTemplates {
        #[serde(flatten)]
        /// Which page, and how many per page.
        page: PageRequest,
    },
    /// Delete a job template (`deleteJobTemplate`).
    DeleteJobTemplate {
        /// The template's id (AWS's `jobTemplateId`).
        job_template_id: String,
    },
}

/// Which group and which thing an `addThingToThingGroup` or `removeThingFromThingGroup`
/// names: each by name or by ARN, as AWS takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Membership {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The group's name (AWS's `thingGroupName`).
    pub thing_group_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The group's ARN (AWS's `thingGroupArn`).
    pub thing_group_arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The thing's name (AWS's `thingName`).
    pub thing_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The thing's ARN (AWS's `thingArn`).
    pub thing_arn: Option<String>,
}

/// A group's properties (AWS's; mqstore keeps the description).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThingGroupProperties {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What the group is for (AWS's `thingGroupDescription`).
    pub thing_group_description: Option<String>,
}

/// A thing group as `describeThingGroup` answers (AWS's fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThingGroupDescription {
    /// The group's name (AWS's `thingGroupName`).
    pub thing_group_name: String,
    /// The group's id (AWS's `thingGroupId`).
    pub thing_group_id: String,
    /// The group's ARN (AWS's `thingGroupArn`).
    pub thing_group_arn: String,
    #[serde(default)]
    /// The group's properties (AWS's `thingGroupProperties`).
    pub thing_group_properties: ThingGroupProperties,
    #[serde(default)]
    /// When the group was made (AWS's `thingGroupMetadata`).
    pub thing_group_metadata: ThingGroupMetadata,
}

/// When a group was made (epoch seconds).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThingGroupMetadata {
    /// When it was made, in seconds since the epoch (AWS's `creationDate`).
    pub creation_date: u64,
}

/// One entry of `listThingGroups` (AWS's `GroupNameAndArn`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct GroupListing {
    /// The group's name (AWS's `groupName`).
    pub group_name: String,
    /// The group's ARN (AWS's `groupArn`).
    pub group_arn: String,
}

/// A job template: what `createJobTemplate` takes and `describeJobTemplate` answers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobTemplate {
    /// The template's id (AWS's `jobTemplateId`).
    pub job_template_id: String,
    /// A JSON object; may hold `${aws:iot:parameter:NAME}` placeholders that a job's
    /// `documentParameters` fill.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    #[cfg_attr(test, schemars(with = "JsonObject"))]
    pub document: Value,
    /// The description, timeout, retry, rollout and abort configurations.
    #[serde(flatten)]
    pub config: JobConfig,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// When the rollout may notify things (AWS's `maintenanceWindows`).
    pub maintenance_windows: Vec<MaintenanceWindow>,
    /// Answered by `describeJobTemplate`: `arn:aws:iot:…:jobtemplate/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_template_arn: Option<String>,
    /// Answered by `describeJobTemplate` (epoch seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
}

/// One entry of `listJobTemplates` (AWS's `JobTemplateSummary`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TemplateListing {
    /// The template's id (AWS's `jobTemplateId`).
    pub job_template_id: String,
    /// The template's ARN (AWS's `jobTemplateArn`).
    pub job_template_arn: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What it is for, for people (AWS's `description`).
    pub description: Option<String>,
    /// When it was made, in seconds since the epoch (AWS's `createdAt`).
    pub created_at: u64,
}

/// `targetSelection`: the things of a job's groups when it is created, or also those added
/// later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum TargetSelection {
    #[default]
    /// The things targeted when the job was made.
    Snapshot,
    /// Also things added to its groups later.
    Continuous,
}

/// `schedulingConfig`: when a job starts and ends, and the windows it rolls out in. Times
/// are UTC, `YYYY-MM-DDTHH:MM` (seconds and a `Z` allowed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SchedulingConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When the rollout starts (ISO 8601, UTC), or now.
    pub start_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it ends (AWS's `endTime`, ISO 8601).
    pub end_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What happens at `end_time` (AWS's `endBehavior`).
    pub end_behavior: Option<EndBehavior>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// When the rollout may notify things (AWS's `maintenanceWindows`).
    pub maintenance_windows: Vec<MaintenanceWindow>,
}

/// What happens at a job's `endTime`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum EndBehavior {
    /// No new executions; those queued go on.
    #[default]
    StopRollout,
    /// The job is canceled (QUEUED executions CANCELED).
    Cancel,
    /// The job is canceled with force (IN_PROGRESS executions CANCELED too).
    ForceCancel,
}

/// A recurring window the rollout runs in: from each time its cron fires
/// (`cron(min hour day-of-month month day-of-week year)`, AWS's form) for its duration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceWindow {
    /// When the window opens: AWS's cron expression, UTC.
    pub start_time: String,
    /// How long the window stays open (AWS's `durationInMinutes`).
    pub duration_in_minutes: u32,
}

/// What `cancelJobExecution` takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExecutionCancel {
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    #[serde(rename = "thingName")]
    /// The thing whose execution to cancel.
    pub thing: String,
    #[serde(default)]
    /// Also what is in progress (AWS's `force`).
    pub force: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Refuse unless the execution still has this version (AWS's `expectedVersion`).
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The device's own key/value details of its status (AWS's `statusDetails`).
    pub status_details: Option<BTreeMap<String, String>>,
}

/// `maxResults` and `nextToken` of a list call: a page starts after the token's entry (the
/// last of the page before), so pages stay in order while jobs change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PageRequest {
    /// 1–250 (AWS's range); every entry when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The token of the next page; None on the last (AWS's `nextToken`).
    pub next_token: Option<String>,
}

/// The names of the operator calls (`op`), as [`OperatorRequest`] reads them.
pub const OPERATOR_CALLS: [&str; 22] = [
    "createJob",
    "updateJob",
    "cancelJob",
    "deleteJob",
    "cancelJobExecution",
    "deleteJobExecution",
    "describeJob",
    "describeJobExecution",
    "listJobs",
    "listJobExecutions",
    "createThingGroup",
    "deleteThingGroup",
    "describeThingGroup",
    "listThingGroups",
    "addThingToThingGroup",
    "removeThingFromThingGroup",
    "listThingsInThingGroup",
    "listNamedShadowsForThing",
    "createJobTemplate",
    "describeJobTemplate",
    "listJobTemplates",
    "deleteJobTemplate",
];

/// Whether `request` can be an operator call: a JSON object whose `op` names one. Bindings
/// that pass the wire's JSON through check this much and leave the fields to the service
/// (which answers `InvalidRequest` naming what does not fit), so that the typed request's
/// parser stays out of small builds.
pub fn check_operator_call(request: &Value) -> Result<(), String> {
    let op = request
        .get("op")
        .ok_or("a jobs operator request is a JSON object with \"op\"")?;
    match op.as_str() {
        Some(op) if OPERATOR_CALLS.contains(&op) => Ok(()),
        _ => Err(format!(
            "{op} fits no operator call: one of {}",
            OPERATOR_CALLS.join(", ")
        )),
    }
}

impl OperatorRequest {
    /// `listJobs` of every job.
    pub fn list_jobs() -> Self {
        Self::ListJobs {
            status: None,
            page: PageRequest::default(),
        }
    }
}

impl PageRequest {
    /// The largest `maxResults` (AWS's).
    pub const MAX_RESULTS: u32 = 250;
}

/// A job's status.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum JobStatus {
    /// Waiting for `schedulingConfig.startTime`.
    Scheduled,
    #[default]
    /// Rolling out, or executions still open.
    InProgress,
    /// Canceled.
    Canceled,
    /// Every execution ended and its rollout is done.
    Completed,
    /// Being deleted.
    DeletionInProgress,
}

/// The execution failures a retry or an abort criterion counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum FailureType {
    /// The device reported FAILED.
    Failed,
    /// The device reported REJECTED.
    Rejected,
    /// The execution timed out.
    TimedOut,
    /// Any of them.
    All,
}

impl FailureType {
    /// Whether an execution that ended with `status` is such a failure.
    pub fn counts(self, status: Status) -> bool {
        match self {
            Self::Failed => status == Status::Failed,
            Self::Rejected => status == Status::Rejected,
            Self::TimedOut => status == Status::TimedOut,
            Self::All => matches!(status, Status::Failed | Status::Rejected | Status::TimedOut),
        }
    }
}

/// `timeoutConfig` of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TimeoutConfig {
    /// An execution in progress longer than this times out (AWS's `inProgressTimeoutInMinutes`).
    pub in_progress_timeout_in_minutes: Option<u32>,
}

/// `jobExecutionsRetryConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RetryConfig {
    /// The criteria, each checked on its own (AWS's `criteriaList`).
    pub criteria_list: Vec<RetryCriteria>,
}

/// How often executions that end with one type of failure are queued again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RetryCriteria {
    /// FAILED, TIMED_OUT or ALL (either).
    pub failure_type: FailureType,
    /// 0–10; the criteria's sum at most 10.
    pub number_of_retries: u32,
}

impl RetryConfig {
    /// Up to `retries` retries of every failure (`ALL`).
    pub fn all(retries: u32) -> Self {
        Self {
            criteria_list: vec![RetryCriteria {
                failure_type: FailureType::All,
                number_of_retries: retries,
            }],
        }
    }
}

/// `jobExecutionsRolloutConfig`: how fast executions are queued.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RolloutConfig {
    /// Things notified per minute at most (1–1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum_per_minute: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A rate that grows as things succeed (AWS's `exponentialRate`).
    pub exponential_rate: Option<ExponentialRate>,
}

/// A rate that starts at `baseRatePerMinute` and is multiplied by `incrementFactor` each time
/// the criteria's count of things is reached (never above `maximumPerMinute`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExponentialRate {
    /// 1–1000.
    pub base_rate_per_minute: u32,
    /// 1.1–5, at most one decimal.
    pub increment_factor: f64,
    /// When the rate grows (AWS's `rateIncreaseCriteria`).
    pub rate_increase_criteria: RateIncreaseCriteria,
}

/// When an exponential rate goes up: each time this many more things were notified, or
/// succeeded (one of the two).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RateIncreaseCriteria {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// After this many more things were notified (AWS's `numberOfNotifiedThings`).
    pub number_of_notified_things: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// After this many more things succeeded (AWS's `numberOfSucceededThings`).
    pub number_of_succeeded_things: Option<u32>,
}

/// `abortConfig`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AbortConfig {
    /// The criteria, each checked on its own (AWS's `criteriaList`).
    pub criteria_list: Vec<AbortCriteria>,
}

/// When a job is aborted (canceled): once at least `minNumberOfExecutedThings` things ended
/// their execution and `thresholdPercentage` % of them or more ended with `failureType`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct AbortCriteria {
    /// Which ending counts (AWS's `failureType`).
    pub failure_type: FailureType,
    /// CANCEL (AWS's only action).
    pub action: AbortAction,
    /// 0–100, at most two decimals.
    pub threshold_percentage: f64,
    /// At least 1.
    pub min_number_of_executed_things: u32,
}

/// What an abort does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum AbortAction {
    /// Cancel the job.
    Cancel,
}

/// What `updateJob` changes: the settings given (absent: unchanged).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobUpdate {
    /// The job to change.
    pub job_id: String,
    #[serde(flatten)]
    /// The settings to change; those left None stay.
    pub changes: JobConfig,
}

/// A job's settings that `updateJob` may change, with AWS's field names (part of `createJob`
/// and of `describeJob`'s answer).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What it is for, for people (AWS's `description`).
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When executions in progress time out (AWS's `timeoutConfig`).
    pub timeout_config: Option<TimeoutConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// How often failed executions are retried (AWS's `jobExecutionsRetryConfig`).
    pub job_executions_retry_config: Option<RetryConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// How fast things are notified (AWS's `jobExecutionsRolloutConfig`).
    pub job_executions_rollout_config: Option<RolloutConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When the job is canceled for too many failures (AWS's `abortConfig`).
    pub abort_config: Option<AbortConfig>,
}

/// An operator answer: `{"ok": ...}` or `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum OperatorAnswer<T = Value> {
    /// The call's result.
    Ok(T),
    /// Why it was refused.
    Error(OperatorError),
}

/// Why an operator call failed: AWS's error code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
pub struct OperatorError {
    /// The error's code (AWS's: `ResourceNotFound`, `InvalidRequest`, ...).
    pub code: String,
    /// What went wrong, for people.
    pub message: String,
}

/// What a successful operator call answers, by call.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(untagged)]
#[non_exhaustive]
pub enum OperatorOk {
    /// A job was created.
    Created(JobCreated),
    /// updateJob, cancelJob, deleteJob, cancelJobExecution, deleteJobExecution: `{}`.
    Done {},
    /// A job (`describeJob`).
    Job {
        /// The job.
        job: Box<JobDescription>,
    },
    /// An execution (`describeJobExecution`).
    Execution {
        /// The execution, or None when there is none (AWS's `execution`).
        execution: JobExecution,
    },
    /// A page of jobs (`listJobs`).
    Jobs(JobsPage),
    /// A page of executions (`listJobExecutions`).
    Executions(ExecutionsPage),
    /// A thing group (`describeThingGroup`).
    Group(Box<ThingGroupDescription>),
    /// A page of groups (`listThingGroups`).
    Groups(ThingGroupsPage),
    /// A page of a group's things (`listThingsInThingGroup`).
    Things(ThingsPage),
    /// A job template (`describeJobTemplate`).
    Template(Box<JobTemplate>),
    /// A page of templates (`listJobTemplates`).
    Templates(TemplatesPage),
    /// A page of a thing's named shadows (`listNamedShadowsForThing`).
    Shadows(NamedShadowsPage),
}

/// A page of a thing's named shadows: what `listNamedShadowsForThing` answers (AWS's
/// `ListNamedShadowsForThing` response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct NamedShadowsPage {
    /// The shadows' names (deleted ones left out).
    pub results: Vec<String>,
    /// The token of the next page; absent on the last (AWS's `nextToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
    /// When the list was read, in epoch seconds.
    pub timestamp: u64,
}

/// A page of jobs: what `listJobs` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobsPage {
    /// This page's entries.
    pub jobs: Vec<JobListing>,
    /// The token of the next page; absent on the last (AWS's `nextToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// A page of executions (each thing's latest of each job): what `listJobExecutions` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExecutionsPage {
    /// This page's entries.
    pub executions: Vec<ExecutionListing>,
    /// The token of the next page; absent on the last (AWS's `nextToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// A page of thing groups: what `listThingGroups` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThingGroupsPage {
    /// This page's entries.
    pub thing_groups: Vec<GroupListing>,
    /// The token of the next page; absent on the last (AWS's `nextToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// A page of a group's things (their names): what `listThingsInThingGroup` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ThingsPage {
    /// This page's entries.
    pub things: Vec<String>,
    /// The token of the next page; absent on the last (AWS's `nextToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// A page of job templates: what `listJobTemplates` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TemplatesPage {
    /// This page's entries.
    pub job_templates: Vec<TemplateListing>,
    /// The token of the next page; absent on the last (AWS's `nextToken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// What `createJob` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobCreated {
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    /// How many things it targets.
    pub targets: usize,
}

/// A job as `describeJob` answers: AWS's `Job` (its document inside), with the counts of its
/// latest executions by status (`executions`) and its rollout's progress (`rollout`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobDescription {
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    /// The job's ARN (AWS's `jobArn`): `arn:aws:iot:mqstore:000000000000:job/{jobId}`.
    #[serde(default)]
    pub job_arn: String,
    /// The job's status.
    pub status: JobStatus,
    /// The job document the devices get (AWS's `document`).
    #[cfg_attr(test, schemars(with = "JsonObject"))]
    pub document: Value,
    /// The things and groups it targets (names or ARNs).
    pub targets: Vec<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    /// Canceled with `force` (AWS's `forceCanceled`).
    pub force_canceled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// A code saying why, for tooling (AWS's `reasonCode`).
    pub reason_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Why, for people (AWS's `comment`).
    pub comment: Option<String>,
    #[serde(flatten)]
    /// Its settings: timeouts, retries, rollout, aborts.
    pub config: JobConfig,
    #[serde(default)]
    /// `SNAPSHOT`, or `CONTINUOUS` for things added to its groups later (AWS's `targetSelection`).
    pub target_selection: TargetSelection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it starts, ends, and may roll out (AWS's `schedulingConfig`).
    pub scheduling_config: Option<SchedulingConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The template's ARN (AWS's `jobTemplateArn`).
    pub job_template_arn: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    /// The values filled into its template's placeholders (AWS's `documentParameters`).
    pub document_parameters: BTreeMap<String, String>,
    /// Epoch seconds.
    pub created_at: u64,
    /// When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`).
    pub last_updated_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it completed, in seconds since the epoch (AWS's `completedAt`).
    pub completed_at: Option<u64>,
    /// How many executions are in each status (AWS's `jobProcessDetails`).
    pub job_process_details: JobProcessDetails,
    /// How many of its latest executions are in each status.
    #[serde(default)]
    pub executions: BTreeMap<Status, u64>,
    #[serde(default)]
    /// How far its rollout got.
    pub rollout: RolloutProgress,
}

/// AWS's `jobProcessDetails`: things per status of their latest execution.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobProcessDetails {
    /// Executions queued.
    pub number_of_queued_things: u64,
    /// Executions in progress.
    pub number_of_in_progress_things: u64,
    /// After this many more things succeeded (AWS's `numberOfSucceededThings`).
    pub number_of_succeeded_things: u64,
    /// Executions that failed.
    pub number_of_failed_things: u64,
    /// Executions the device rejected.
    pub number_of_rejected_things: u64,
    /// Executions that timed out.
    pub number_of_timed_out_things: u64,
    /// Executions canceled.
    pub number_of_canceled_things: u64,
    /// Executions removed (their thing left the group, or was deleted).
    pub number_of_removed_things: u64,
}

impl JobProcessDetails {
    /// From counts by status.
    pub fn from_counts(counts: &BTreeMap<Status, u64>) -> Self {
        let n = |status| counts.get(&status).copied().unwrap_or(0);
        Self {
            number_of_queued_things: n(Status::Queued),
            number_of_in_progress_things: n(Status::InProgress),
            number_of_succeeded_things: n(Status::Succeeded),
            number_of_failed_things: n(Status::Failed),
            number_of_rejected_things: n(Status::Rejected),
            number_of_timed_out_things: n(Status::TimedOut),
            number_of_canceled_things: n(Status::Canceled),
            number_of_removed_things: n(Status::Removed),
        }
    }
}

/// How far a job's rollout got (mqstore's, beside AWS's fields): things notified of the
/// total, and the rate it is rolled out at now (absent: as fast as the broker takes it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct RolloutProgress {
    /// Things notified so far.
    pub notified_things: u64,
    /// Things the job targets in all.
    pub total_things: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Things notified per minute now; None when not limited.
    pub rate_per_minute: Option<f64>,
    /// With maintenance windows: when the open one closes (epoch seconds)…
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_closes_at: Option<u64>,
    /// …or, outside them, when the next one opens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_window_at: Option<u64>,
}

/// One entry of `listJobs` (AWS's `JobSummary`, with the number of things).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobListing {
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    /// How many things it targets.
    pub targets: usize,
    #[serde(default)]
    /// The job's status.
    pub status: JobStatus,
    #[serde(default)]
    /// When it was made, in seconds since the epoch (AWS's `createdAt`).
    pub created_at: u64,
    #[serde(default)]
    /// When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`).
    pub last_updated_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it completed, in seconds since the epoch (AWS's `completedAt`).
    pub completed_at: Option<u64>,
}

/// One entry of `listJobExecutions`: a thing's latest execution of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ExecutionListing {
    /// The thing's name (AWS's `thingName`).
    pub thing_name: String,
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    /// The execution's status.
    pub status: Status,
    /// When the execution was queued, in seconds since the epoch (AWS's `queuedAt`).
    pub queued_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When the execution started, in seconds since the epoch (AWS's `startedAt`).
    pub started_at: Option<u64>,
    /// When it last changed, in seconds since the epoch (AWS's `lastUpdatedAt`).
    pub last_updated_at: u64,
    /// Which execution of the job on this thing this is, from 1 (AWS's `executionNumber`).
    pub execution_number: u64,
    /// The execution's version, raised by every update (AWS's `versionNumber`).
    pub version_number: u64,
}

/// A job execution's status.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[cfg_attr(test, schemars(rename = "JobExecutionStatus"))]
#[non_exhaustive]
pub enum Status {
    /// Waiting for the device to start it.
    Queued,
    /// The device started it.
    InProgress,
    /// The device reported success.
    Succeeded,
    /// The device reported failure.
    Failed,
    /// The device refused it.
    Rejected,
    /// In progress longer than its timeout.
    TimedOut,
    /// Canceled by an operator (or an abort).
    Canceled,
    /// Its thing left the targeted group.
    Removed,
}

impl Status {
    /// The status as AWS spells it (`IN_PROGRESS`, ...).
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

    /// The status AWS's spelling names; None for another word.
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

/// What an operator asks for when creating a job: AWS's `CreateJob` fields.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(test, derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// The job's id (AWS's `jobId`).
    pub job_id: String,
    /// The things and thing groups it runs on: names (a thing), `thing/NAME`,
    /// `thinggroup/NAME`, or AWS's ARNs of either.
    pub targets: Vec<String>,
    /// A JSON object (absent when it comes from the template).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    #[cfg_attr(test, schemars(with = "JsonObject"))]
    pub document: Value,
    /// The description, timeout, retry, rollout and abort configurations.
    #[serde(flatten)]
    pub config: JobConfig,
    /// SNAPSHOT (the default) or CONTINUOUS: whether things added to its groups later get it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_selection: Option<TargetSelection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// When it starts, ends, and may roll out (AWS's `schedulingConfig`).
    pub scheduling_config: Option<SchedulingConfig>,
    /// The template it starts from (its id, `jobtemplate/ID` or AWS's ARN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_template_arn: Option<String>,
    /// Values for the document's `${aws:iot:parameter:NAME}` placeholders.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub document_parameters: BTreeMap<String, String>,
    /// AWS's fields mqstore does not take yet: a request that sets one is refused (rather
    /// than run without it).
    #[serde(flatten, skip_serializing)]
    #[cfg_attr(test, schemars(skip))]
    pub unsupported: Unsupported,
}

/// `createJob` fields that mqstore refuses for now (docs/protocol/jobs.md §8).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unsupported {
    document_source: Option<Value>,
}

impl Unsupported {
    pub(crate) fn first(&self) -> Option<&'static str> {
        [("documentSource", &self.document_source)]
            .into_iter()
            .find(|(_, value)| value.as_ref().is_some_and(|v| !v.is_null()))
            .map(|(name, _)| name)
    }
}

/// What [`valid_thing_name`] accepts, for messages.
pub(crate) const THING_NAME_RULE: &str = "1-128 characters of a-z, A-Z, 0-9, ':', '_' and '-'";

/// AWS's range of the timers given in minutes (`stepTimeoutInMinutes`,
/// `inProgressTimeoutInMinutes`).
pub(crate) const TIMEOUT_MINUTES: std::ops::RangeInclusive<u64> = 1..=10_080;

/// `[a-zA-Z0-9:_-]{1,128}`.
pub(crate) fn valid_thing_name(name: &str) -> bool {
    valid_name(name, 128)
}

/// `[a-zA-Z0-9:_-]{1,max}`: AWS's rule for thing names (128) and shadow names (64).
pub(crate) fn valid_name(name: &str, max: usize) -> bool {
    (1..=max).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn create_job_reads_and_writes_aws_field_names() {
        let request = json!({
            "op": "createJob",
            "jobId": "j1",
            "targets": ["t1", "t2"],
            "document": { "op": "reboot" },
            "timeoutConfig": { "inProgressTimeoutInMinutes": 5 },
            "jobExecutionsRetryConfig": { "criteriaList": [
                { "failureType": "FAILED", "numberOfRetries": 2 },
                { "failureType": "TIMED_OUT", "numberOfRetries": 3 },
            ] },
        });
        let parsed: OperatorRequest = serde_json::from_value(request).unwrap();
        let OperatorRequest::CreateJob(spec) = &parsed else {
            panic!("not a createJob: {parsed:?}");
        };
        let retry = spec.config.job_executions_retry_config.as_ref().unwrap();
        assert_eq!(retry.criteria_list[1].failure_type, FailureType::TimedOut);
        assert_eq!(retry.criteria_list[1].number_of_retries, 3);
        let written = serde_json::to_value(&parsed).unwrap();
        assert_eq!(written["timeoutConfig"]["inProgressTimeoutInMinutes"], 5);
        assert_eq!(
            serde_json::from_value::<OperatorRequest>(written).unwrap(),
            parsed
        );
    }

    #[test]
    fn every_operator_call_round_trips_under_its_op_name() {
        let calls = [
            (
                OperatorRequest::DeleteExecution {
                    job_id: "j".into(),
                    thing: "t".into(),
                    force: true,
                },
                json!({ "op": "deleteJobExecution", "jobId": "j", "thingName": "t", "force": true }),
            ),
            (
                OperatorRequest::ListExecutions {
                    thing: None,
                    job_id: Some("j".into()),
                    status: Some(Status::InProgress),
                    page: PageRequest::default(),
                },
                json!({ "op": "listJobExecutions", "jobId": "j", "status": "IN_PROGRESS" }),
            ),
            (OperatorRequest::list_jobs(), json!({ "op": "listJobs" })),
            (
                OperatorRequest::ListJobs {
                    status: Some(JobStatus::Canceled),
                    page: PageRequest {
                        max_results: Some(2),
                        next_token: Some("j1".into()),
                    },
                },
                json!({ "op": "listJobs", "status": "CANCELED", "maxResults": 2, "nextToken": "j1" }),
            ),
        ];
        for (call, wire) in calls {
            assert_eq!(serde_json::to_value(&call).unwrap(), wire);
            assert_eq!(
                serde_json::from_value::<OperatorRequest>(wire).unwrap(),
                call
            );
        }
        let forced: OperatorRequest =
            serde_json::from_value(json!({ "op": "cancelJob", "jobId": "j" })).unwrap();
        assert_eq!(
            forced,
            OperatorRequest::CancelJob {
                job_id: "j".into(),
                force: false,
                reason_code: None,
                comment: None,
            },
            "force defaults to false"
        );
        assert!(serde_json::from_value::<OperatorRequest>(json!({ "op": "dropTables" })).is_err());
    }

    #[test]
    fn the_operator_calls_named_are_those_the_request_reads() {
        for op in OPERATOR_CALLS {
            let error = serde_json::from_value::<OperatorRequest>(json!({ "op": op }))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(!error.contains("unknown variant"), "{op}: {error}");
            assert!(check_operator_call(&json!({ "op": op, "jobId": "j" })).is_ok());
        }
        let unknown = serde_json::from_value::<OperatorRequest>(json!({ "op": "dropTables" }));
        assert!(unknown.unwrap_err().to_string().contains("unknown variant"));
        let refused = check_operator_call(&json!({ "op": "dropTables" })).unwrap_err();
        assert!(refused.contains("fits no operator call"), "{refused}");
        assert!(check_operator_call(&json!([1])).is_err());
        assert!(check_operator_call(&json!({ "op": 7 })).is_err());
    }

    #[test]
    fn expected_version_is_a_number_or_numeric_text() {
        let body = |v| serde_json::from_value::<DeviceBody>(json!({ "expectedVersion": v }));
        assert_eq!(body(json!(3)).unwrap().expected_version, Some(3));
        assert_eq!(body(json!("4")).unwrap().expected_version, Some(4));
        assert!(body(json!("four")).is_err());
        assert!(body(json!(-1)).is_err());
    }

    #[test]
    fn device_body_limits() {
        let body = |v: Value| serde_json::from_value::<DeviceBody>(v).unwrap().validate();
        assert!(body(json!({ "stepTimeoutInMinutes": 10080 })).is_ok());
        assert!(body(json!({ "stepTimeoutInMinutes": 0 })).is_err());
        assert!(body(json!({ "statusDetails": { "bad key": "v" } })).is_err());
        assert!(body(json!({ "statusDetails": { "k": "" } })).is_err());
        assert!(body(json!({ "statusDetails": { "k": "a\nb" } })).is_err());
        assert!(body(json!({ "statusDetails": { "k": "fine" } })).is_ok());
    }

    #[test]
    fn replies_carry_their_token_and_time_beside_the_body() {
        let reply = Reply {
            body: Rejected {
                code: "InvalidRequest".into(),
                message: "no".into(),
                execution_state: None,
            },
            timestamp: 7,
            client_token: Some("c1".into()),
        };
        let wire = serde_json::to_value(&reply).unwrap();
        assert_eq!(
            wire,
            json!({ "code": "InvalidRequest", "message": "no", "timestamp": 7, "clientToken": "c1" })
        );
        assert_eq!(
            serde_json::from_value::<Reply<Rejected>>(wire).unwrap(),
            reply
        );
    }
}
