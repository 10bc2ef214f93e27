//! The jobs JSON, as types: what the AWS IoT Jobs device API and mqstore's operator API carry,
//! with AWS's field names (spec: docs/protocol/jobs.md). The service writes the replies and
//! notifications and reads the requests with these types; the clients write the requests and
//! read the replies with the same ones, so the two sides cannot drift apart.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::model::{JobSpec, Status, THING_NAME_RULE, TIMEOUT_MINUTES, valid_thing_name};

// ---- the device API ----

/// A `JobExecutionSummary`: an entry of a pending list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSummary {
    pub job_id: String,
    /// Epoch seconds.
    pub queued_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    pub last_updated_at: u64,
    pub execution_number: u64,
    pub version_number: u64,
}

/// A `JobExecution` (start-next, describe, notify-next).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobExecution {
    pub job_id: String,
    /// Absent from notify-next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thing_name: Option<String>,
    pub status: Status,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub status_details: BTreeMap<String, String>,
    pub queued_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    pub last_updated_at: u64,
    pub version_number: u64,
    pub execution_number: u64,
    /// The job document, unless the request asked to leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_document: Option<Value>,
    /// While IN_PROGRESS with a timer running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approximate_seconds_before_timed_out: Option<u64>,
}

/// A thing's pending list (`get`): IN_PROGRESS and QUEUED executions, in order.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingJobs {
    pub in_progress_jobs: Vec<JobSummary>,
    pub queued_jobs: Vec<JobSummary>,
}

/// An execution's `executionState` (update replies, and rejections).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionState {
    pub status: Status,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub status_details: BTreeMap<String, String>,
    pub version_number: u64,
}

/// What an accepted start-next or describe answered: the execution, absent when the thing
/// has none pending.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionAccepted {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<JobExecution>,
}

/// What an accepted update answered.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UpdateAccepted {
    /// With `includeJobExecutionState`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_state: Option<ExecutionState>,
    /// With `includeJobDocument`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_document: Option<Value>,
}

/// The body of an `/accepted` reply, by API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Accepted {
    Pending(PendingJobs),
    Execution(ExecutionAccepted),
    Update(UpdateAccepted),
}

/// A `/rejected` reply's body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rejected {
    /// AWS's error code (`InvalidRequest`, `VersionMismatch`, ...).
    pub code: String,
    pub message: String,
    /// The execution's state, for state errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_state: Option<ExecutionState>,
}

/// A reply (`/accepted` or `/rejected`): its body, when it was made, and the request's
/// `clientToken`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reply<T> {
    #[serde(flatten)]
    pub body: T,
    /// Epoch seconds.
    #[serde(default)]
    pub timestamp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_token: Option<String>,
}

/// A device request's payload: one shape for every API (each reads the fields it knows, as
/// AWS does; unknown fields are ignored). Absent fields are absent on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
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
pub struct Notify {
    #[serde(default)]
    pub timestamp: u64,
    #[serde(default)]
    pub jobs: NotifyJobs,
}

/// The executions of a `notify`, by status (a status without executions is absent).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NotifyJobs {
    #[serde(rename = "IN_PROGRESS", default, skip_serializing_if = "Vec::is_empty")]
    pub in_progress: Vec<JobSummary>,
    #[serde(rename = "QUEUED", default, skip_serializing_if = "Vec::is_empty")]
    pub queued: Vec<JobSummary>,
}

/// `notify-next`: the first entry of the pending list changed; absent when it became empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct NotifyNext {
    #[serde(default)]
    pub timestamp: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution: Option<JobExecution>,
}

// ---- the operator API ----

/// One call of the operator API: `{"op": "createJob", ...}` with AWS's field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum OperatorRequest {
    CreateJob(JobSpec),
    /// QUEUED executions become CANCELED; IN_PROGRESS ones too with `force`.
    CancelJob {
        job_id: String,
        #[serde(default)]
        force: bool,
    },
    /// Removes one execution (`force` for an IN_PROGRESS one).
    #[serde(rename = "deleteJobExecution")]
    DeleteExecution {
        job_id: String,
        #[serde(rename = "thingName")]
        thing: String,
        #[serde(default)]
        force: bool,
    },
    DescribeJob {
        job_id: String,
    },
    #[serde(rename = "describeJobExecution")]
    DescribeExecution {
        job_id: String,
        #[serde(rename = "thingName")]
        thing: String,
    },
    ListJobs,
    /// Every latest execution, narrowed by thing, job and status.
    #[serde(rename = "listJobExecutions")]
    ListExecutions {
        #[serde(default, rename = "thingName", skip_serializing_if = "Option::is_none")]
        thing: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        job_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<Status>,
    },
}

/// `createJob`'s fields as AWS names them: what [`JobSpec`] reads and writes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CreateJob {
    job_id: String,
    targets: Vec<String>,
    document: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    timeout_config: Option<TimeoutConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    job_executions_retry_config: Option<RetryConfig>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RetryConfig {
    criteria_list: Vec<RetryCriteria>,
}

/// mqstore retries FAILED and TIMED_OUT alike: the largest `numberOfRetries` applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RetryCriteria {
    #[serde(default = "all_failures")]
    failure_type: String,
    number_of_retries: u32,
}

fn all_failures() -> String {
    "ALL".into()
}

impl From<CreateJob> for JobSpec {
    fn from(wire: CreateJob) -> Self {
        Self {
            job_id: wire.job_id,
            document: wire.document,
            targets: wire.targets,
            in_progress_timeout_minutes: wire
                .timeout_config
                .and_then(|t| t.in_progress_timeout_in_minutes),
            max_retries: wire
                .job_executions_retry_config
                .and_then(|c| c.criteria_list.iter().map(|c| c.number_of_retries).max())
                .unwrap_or(0),
        }
    }
}

impl From<JobSpec> for CreateJob {
    fn from(spec: JobSpec) -> Self {
        Self {
            job_id: spec.job_id,
            targets: spec.targets,
            document: spec.document,
            timeout_config: spec
                .in_progress_timeout_minutes
                .map(|minutes| TimeoutConfig {
                    in_progress_timeout_in_minutes: Some(minutes),
                }),
            job_executions_retry_config: (spec.max_retries > 0).then(|| RetryConfig {
                criteria_list: vec![RetryCriteria {
                    failure_type: all_failures(),
                    number_of_retries: spec.max_retries,
                }],
            }),
        }
    }
}

/// An operator answer: `{"ok": ...}` or `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperatorAnswer<T = Value> {
    Ok(T),
    Error(OperatorError),
}

/// Why an operator call failed: AWS's error code and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorError {
    pub code: String,
    pub message: String,
}

/// What a successful operator call answers, by call.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OperatorOk {
    Created(JobCreated),
    /// cancelJob, deleteJobExecution: `{}`.
    Done {},
    Job {
        job: JobDescription,
    },
    Execution {
        execution: JobExecution,
    },
    Jobs {
        jobs: Vec<JobListing>,
    },
    Executions {
        executions: Vec<ExecutionListing>,
    },
}

/// What `createJob` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobCreated {
    pub job_id: String,
    /// How many things it targets.
    pub targets: usize,
}

/// A job as `describeJob` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobDescription {
    pub job_id: String,
    pub document: Value,
    pub targets: Vec<String>,
    #[serde(default)]
    pub timeout_config: TimeoutConfig,
    #[serde(default)]
    pub max_retries: u32,
    /// How many of its latest executions are in each status.
    #[serde(default)]
    pub executions: BTreeMap<Status, u64>,
}

/// `timeoutConfig` of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimeoutConfig {
    pub in_progress_timeout_in_minutes: Option<u32>,
}

/// One entry of `listJobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobListing {
    pub job_id: String,
    /// How many things it targets.
    pub targets: usize,
}

/// One entry of `listJobExecutions`: a thing's latest execution of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionListing {
    pub thing_name: String,
    pub job_id: String,
    pub status: Status,
    pub queued_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<u64>,
    pub last_updated_at: u64,
    pub execution_number: u64,
    pub version_number: u64,
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
        assert_eq!(spec.in_progress_timeout_minutes, Some(5));
        assert_eq!(spec.max_retries, 3, "the largest numberOfRetries applies");
        let written = serde_json::to_value(&parsed).unwrap();
        assert_eq!(
            written["jobExecutionsRetryConfig"]["criteriaList"][0]["numberOfRetries"],
            3
        );
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
                },
                json!({ "op": "listJobExecutions", "jobId": "j", "status": "IN_PROGRESS" }),
            ),
            (OperatorRequest::ListJobs, json!({ "op": "listJobs" })),
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
                force: false
            },
            "force defaults to false"
        );
        assert!(serde_json::from_value::<OperatorRequest>(json!({ "op": "dropTables" })).is_err());
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
