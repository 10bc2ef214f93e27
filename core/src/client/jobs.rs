//! The client side of jobs as a state machine, with no I/O: both the operator API (mqstore's
//! MQTT request/response, `mqstore/jobs/v1/command/invoke`) and the AWS IoT Jobs device API
//! (`$aws/things/{thing}/jobs/...`, answers matched by `clientToken`).
//!
//! A driver subscribes to [`JobsClient::operator_subscription`] (for operator calls) and to
//! [`JobsClient::device_subscriptions`] of each thing it acts for, waits for the SUBACKs,
//! publishes what the calls return at QoS 1, feeds every message on those subscriptions to
//! [`JobsClient::handle`], and calls [`JobsClient::expire`] at [`JobsClient::next_deadline`].
//! When the connection drops, [`JobsClient::connection_failed`] fails the calls in flight.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use super::{CallId, ClientError, Pending};
use crate::commands::expiry_seconds;
use crate::envelope::{PROTOCOL_VERSION, Properties, Publish, property};
#[cfg(doc)]
use crate::jobs::wire::OperatorAnswer;
use crate::jobs::wire::{
    DeviceBody, JobExecution, JobSummary, Notify, NotifyNext, OperatorRequest, Rejected,
};
use crate::jobs::{ExecutionRef, OPERATOR_TOPIC, Status};
use crate::shadow;

/// A notification about one thing's pending list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum JobNotification {
    /// `notify`: executions joined or left the pending list; the first ten of it.
    Notify {
        /// The thing it is for.
        thing: String,
        /// Its executions in progress.
        in_progress: Vec<JobSummary>,
        /// Its queued executions.
        queued: Vec<JobSummary>,
    },
    /// `notify-next`: the first entry changed; `None` when the list became empty.
    NotifyNext {
        /// The thing it is for.
        thing: String,
        /// The next execution to run, or None when nothing is pending.
        execution: Option<JobExecution>,
    },
}

/// One call of the device API, for one thing.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum DeviceRequest {
    /// `get`: the pending list.
    GetPending,
    /// `start-next`: start the first QUEUED execution (or describe the IN_PROGRESS one).
    StartNext {
        /// Details to record with the status (AWS's `statusDetails`).
        status_details: BTreeMap<String, String>,
        /// A timeout for this step, in minutes (AWS's `stepTimeoutInMinutes`).
        step_timeout_minutes: Option<u64>,
    },
    /// `{jobId}/get`, or `$next/get` for the first pending execution.
    Describe {
        /// Which execution: the next, or a job's.
        execution: ExecutionRef,
        /// Only this execution of the job (AWS's `executionNumber`).
        execution_number: Option<u64>,
        /// Whether the answer carries the job document (AWS's `includeJobDocument`).
        include_document: bool,
    },
    /// `{jobId}/update`.
    Update(Update),
}

/// An update of one execution (`{jobId}/update`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Update {
    /// The job whose execution to update.
    pub job_id: String,
    /// IN_PROGRESS, SUCCEEDED, FAILED or REJECTED.
    pub status: Option<Status>,
    /// Details to record with the status (AWS's `statusDetails`).
    pub status_details: BTreeMap<String, String>,
    /// Rejected with VersionMismatch unless the execution is at this version.
    pub expected_version: Option<u64>,
    /// Only this execution of the job (AWS's `executionNumber`).
    pub execution_number: Option<u64>,
    /// A timeout for this step, in minutes (AWS's `stepTimeoutInMinutes`).
    pub step_timeout_minutes: Option<u64>,
    /// Ask for the execution's state in the reply.
    pub include_state: bool,
    /// Ask for the job document in the reply.
    pub include_document: bool,
}

impl DeviceRequest {
    /// A request as AWS's device API writes it: `api`, the topic's part after
    /// `$aws/things/{thing}/jobs/` (`get`, `start-next`, `{jobId}/get`, `$next/get`,
    /// `{jobId}/update`), and its payload (`clientToken` is the client's own and ignored).
    /// For drivers whose callers speak the wire form (the C library); the message says what
    /// does not fit.
    pub fn from_wire(api: &str, body: DeviceBody) -> Result<Self, String> {
        let api = crate::jobs::parse_api(api).ok_or_else(|| {
            format!(
                "{api:?} is not a jobs device API: get, start-next, {{jobId}}/get, $next/get or {{jobId}}/update"
            )
        })?;
        body.validate()?;
        let details = body.status_details.unwrap_or_default();
        Ok(match api {
            crate::jobs::Api::GetPending => Self::GetPending,
            crate::jobs::Api::StartNext => Self::StartNext {
                status_details: details,
                step_timeout_minutes: body.step_timeout_in_minutes,
            },
            crate::jobs::Api::Describe(execution) => Self::Describe {
                execution,
                execution_number: body.execution_number,
                include_document: body.include_job_document.unwrap_or(true),
            },
            crate::jobs::Api::Update(job_id) => Self::Update(Update {
                job_id,
                status: body.status,
                status_details: details,
                expected_version: body.expected_version,
                execution_number: body.execution_number,
                step_timeout_minutes: body.step_timeout_in_minutes,
                include_state: body.include_job_execution_state == Some(true),
                include_document: body.include_job_document == Some(true),
            }),
        })
    }

    /// The field of the `/accepted` reply a caller wants (see [`JobsEvent::Completed`]).
    fn result_field(&self) -> Option<&'static str> {
        match self {
            Self::StartNext { .. } | Self::Describe { .. } => Some("execution"),
            Self::GetPending | Self::Update(_) => None,
        }
    }

    /// The API part of the request topic, after `$aws/things/{thing}/jobs/`.
    fn api(&self) -> String {
        match self {
            Self::GetPending => "get".into(),
            Self::StartNext { .. } => "start-next".into(),
            Self::Describe { execution, .. } => format!("{}/get", execution.as_str()),
            Self::Update(update) => format!("{}/update", update.job_id),
        }
    }

    /// The request's payload, without its token.
    fn body(&self) -> DeviceBody {
        let details = |d: &BTreeMap<String, String>| (!d.is_empty()).then(|| d.clone());
        match self {
            Self::GetPending => DeviceBody::default(),
            Self::StartNext {
                status_details,
                step_timeout_minutes,
            } => DeviceBody {
                status_details: details(status_details),
                step_timeout_in_minutes: *step_timeout_minutes,
                ..DeviceBody::default()
            },
            Self::Describe {
                execution_number,
                include_document,
                ..
            } => DeviceBody {
                execution_number: *execution_number,
                include_job_document: Some(*include_document),
                ..DeviceBody::default()
            },
            Self::Update(u) => DeviceBody {
                status: u.status,
                status_details: details(&u.status_details),
                expected_version: u.expected_version,
                execution_number: u.execution_number,
                step_timeout_in_minutes: u.step_timeout_minutes,
                include_job_execution_state: u.include_state.then_some(true),
                include_job_document: u.include_document.then_some(true),
                ..DeviceBody::default()
            },
        }
    }
}

/// The field of an operator call's answer a caller wants (see [`JobsEvent::Completed`]): the
/// record a describe call or a list without a page asks for; `None` (the whole answer) for a
/// page (its entries and `nextToken`) and for the calls that only acknowledge.
fn result_field(request: &Value) -> Option<&'static str> {
    let paged = request.get("maxResults").is_some() || request.get("nextToken").is_some();
    match request.get("op").and_then(Value::as_str)? {
        "describeJob" => Some("job"),
        "describeJobExecution" => Some("execution"),
        "listJobs" if !paged => Some("jobs"),
        "listJobExecutions" if !paged => Some("executions"),
        _ => None,
    }
}

/// A jobs call's answer: the service's JSON (AWS's field names; for a describe call or a list
/// without a page, the record or the list alone), read as the call's type by the methods
/// below. It stays JSON until read: bindings that hand JSON to their callers take it as it is
/// ([`JobsAnswer::into_json`]), and a build that never reads a type carries no reader of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsAnswer {
    json: Value,
}

/// One page of a list call: its entries, and the token of the next page (`None`: the last).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// This page's entries.
    pub items: Vec<T>,
    /// The token of the next page; None on the last.
    pub next_token: Option<String>,
}

impl JobsAnswer {
    /// The answer as the service sent it (the record or list alone, as above).
    pub fn into_json(self) -> Value {
        self.json
    }

    /// The answer as `T`: the record of a describe call
    /// ([`JobDescription`](crate::jobs::JobDescription), ...), the pending list
    /// ([`PendingJobs`](crate::jobs::PendingJobs)), an update's
    /// [`UpdateAccepted`](crate::jobs::UpdateAccepted), a thing group, a template.
    pub fn read<T: serde::de::DeserializeOwned>(self) -> Result<T, ClientError> {
        parse(self.json)
    }

    /// The execution a start-next or describe call answered (`None`: nothing pending).
    pub fn execution(self) -> Result<Option<JobExecution>, ClientError> {
        read_execution(self.json)
    }

    /// A list call's entries and the token of its next page (none when no page was asked
    /// for: every entry).
    pub fn page<T: serde::de::DeserializeOwned>(self) -> Result<Page<T>, ClientError> {
        let Value::Object(mut answer) = self.json else {
            // A list without a page: the entries alone.
            return Ok(Page {
                items: parse(self.json)?,
                next_token: None,
            });
        };
        let next_token = match answer.remove("nextToken") {
            None | Some(Value::Null) => None,
            Some(token) => Some(parse(token)?),
        };
        // A page holds one list (`jobs`, `executions`, `thingGroups`, ...) beside its token.
        let field = answer
            .iter()
            .find(|(_, v)| v.is_array())
            .map(|(k, _)| k.clone());
        let field = field.ok_or_else(|| {
            ClientError::Malformed("a page was read from an answer with no list".into())
        })?;
        Ok(Page {
            items: parse(answer.remove(&field).unwrap_or_default())?,
            next_token,
        })
    }
}

/// The execution a start-next or describe call completed with (`None`: nothing pending).
pub(crate) fn read_execution(execution: Value) -> Result<Option<JobExecution>, ClientError> {
    match execution {
        Value::Null => Ok(None),
        execution => parse(execution).map(Some),
    }
}

/// `field` of `answer` (`null` when it has none), or the whole answer without a field.
fn select(mut answer: Value, field: Option<&str>) -> JobsAnswer {
    let json = match field {
        Some(field) => answer.get_mut(field).map(Value::take).unwrap_or_default(),
        None => answer,
    };
    JobsAnswer { json }
}

/// What an incoming publish meant.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum JobsEvent {
    /// A call finished with what it asks for: the record(s) of a describe or list call (the
    /// answer's `job`, `execution`, `jobs` or `executions`; `null` when start-next or describe
    /// found no execution), the whole answer otherwise (the operator's `ok` object, the device
    /// API's `/accepted` payload).
    Completed {
        /// The call it answers.
        call: CallId,
        /// Its result: the answer, read by the call's type.
        result: Result<JobsAnswer, ClientError>,
    },
    /// A thing's `notify` or `notify-next`.
    Notification(JobNotification),
    /// A device shadow's delta or documents.
    Shadow(shadow::Notification),
}

/// The jobs client, without I/O.
#[derive(Debug)]
pub struct JobsClient {
    client_id: String,
    response_topic: String,
    default_timeout_ms: u64,
    /// Calls in flight, with the field of the answer each wants, by correlation data
    /// (operator) or `clientToken` (device): the same token.
    waiting: Pending<Option<&'static str>>,
}

impl JobsClient {
    /// A client `client_id`; `seed` (random bytes) makes its tokens unique across runs.
    pub fn new(client_id: impl Into<String>, seed: u64, default_timeout_ms: u64) -> Self {
        let client_id = client_id.into();
        Self {
            response_topic: crate::jobs::topics::operator_response(&client_id),
            client_id,
            default_timeout_ms,
            waiting: Pending::new(seed),
        }
    }

    /// Where operator answers come: subscribe before the first operator call.
    pub fn operator_subscription(&self) -> &str {
        &self.response_topic
    }

    /// What to subscribe to before acting as `thing`: its replies and notifications. (AWS
    /// delivers replies without a subscription; a standard broker needs one.)
    pub fn device_subscriptions(thing: &str) -> Vec<String> {
        crate::jobs::topics::device_subscriptions(thing)
    }

    /// Whether `thing` is a thing name (1-128 of `a-zA-Z0-9:_-`): anything else would make
    /// wrong topics and filters.
    pub fn check_thing(thing: &str) -> Result<(), ClientError> {
        match crate::jobs::valid_thing_name(thing) {
            true => Ok(()),
            false => Err(ClientError::Jobs {
                code: "InvalidRequest".into(),
                message: format!("thing name {thing:?}: {}", crate::jobs::THING_NAME_RULE),
                execution_state: None,
            }),
        }
    }

    /// Calls waiting for an answer.
    pub fn in_flight(&self) -> usize {
        self.waiting.len()
    }

    /// Starts an operator call: the publish to send and the id its result will carry.
    pub fn operate(
        &mut self,
        request: &OperatorRequest,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> (CallId, Publish) {
        // Our own type: it always serializes.
        let request = serde_json::to_value(request).unwrap_or_default();
        self.operate_json(&request, timeout_ms, now_ms)
    }

    /// Starts an operator call given as its JSON (`{"op": ..., ...}` with AWS's fields), sent
    /// as it is: the service checks it (a request that fits no call is answered
    /// `InvalidRequest`). For bindings that take the wire's JSON and need no typed request.
    pub fn operate_json(
        &mut self,
        request: &Value,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> (CallId, Publish) {
        let (call, token, timeout_ms) = self.begin(timeout_ms, now_ms);
        let pair = |n: &str, v: &str| (n.to_owned(), v.to_owned());
        let publish = Publish {
            topic: OPERATOR_TOPIC.to_owned(),
            payload: Bytes::from(request.to_string().into_bytes()),
            qos: 1,
            properties: Properties {
                payload_format_indicator: Some(1),
                message_expiry_interval: Some(expiry_seconds(timeout_ms)),
                content_type: Some("application/json".into()),
                response_topic: Some(self.response_topic.clone()),
                correlation_data: Some(Bytes::from(token.clone().into_bytes())),
                user_properties: vec![
                    pair(property::SOURCE_ID, &self.client_id),
                    pair(property::PROTOCOL_VERSION, PROTOCOL_VERSION),
                ],
            },
        };
        self.wait(token, call, result_field(request), timeout_ms, now_ms);
        (call, publish)
    }

    /// Starts a device call as `thing` (subscribed to its [`JobsClient::device_subscriptions`]).
    pub fn device(
        &mut self,
        thing: &str,
        request: &DeviceRequest,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(CallId, Publish), ClientError> {
        Self::check_thing(thing)?;
        let job_id = match request {
            DeviceRequest::Describe {
                execution: ExecutionRef::Job(job_id),
                ..
            } => Some(job_id),
            DeviceRequest::Update(update) => Some(&update.job_id),
            _ => None,
        };
        if let Some(job_id) = job_id.filter(|id| !crate::jobs::valid_job_id(id)) {
            return Err(ClientError::Jobs {
                code: "InvalidRequest".into(),
                message: format!(
                    "job id {job_id:?}: 1-64 characters of a-z, A-Z, 0-9, '_' and '-'"
                ),
                execution_state: None,
            });
        }
        let (call, token, timeout_ms) = self.begin(timeout_ms, now_ms);
        let body = DeviceBody {
            client_token: Some(token.clone()),
            ..request.body()
        };
        let publish = Publish {
            topic: crate::jobs::topics::device(thing, &request.api()),
            payload: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
            qos: 1,
            properties: Properties {
                message_expiry_interval: Some(expiry_seconds(timeout_ms)),
                ..Properties::default()
            },
        };
        self.wait(token, call, request.result_field(), timeout_ms, now_ms);
        Ok((call, publish))
    }

    fn begin(&mut self, timeout_ms: Option<u64>, _now_ms: u64) -> (CallId, String, u64) {
        // AWS allows 64 characters for a `clientToken`; tokens have at most 37.
        let (call, token) = self.waiting.begin();
        (call, token, timeout_ms.unwrap_or(self.default_timeout_ms))
    }

    fn wait(
        &mut self,
        token: String,
        call: CallId,
        field: Option<&'static str>,
        timeout_ms: u64,
        now_ms: u64,
    ) {
        self.waiting.wait(token, call, field, timeout_ms, now_ms);
    }

    /// Starts a request on a device shadow (the client subscribed to its
    /// [`shadow::client_subscriptions`]): `body` is the request's JSON object (an update's
    /// `state` and optional `version`; `null` or `{}` for get and delete), its `clientToken`
    /// the client's own. The answer is the `/accepted` document; a `/rejected` one fails the
    /// call with [`ClientError::Status`] (AWS's code and message).
    pub fn shadow(
        &mut self,
        target: shadow::Target<'_>,
        op: shadow::Op,
        body: &Value,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<(CallId, Publish), ClientError> {
        let refused = |status: u16, message: String| ClientError::Status { status, message };
        shadow::check_target(target).map_err(|r| refused(r.code, r.message))?;
        let mut body = match body {
            Value::Object(fields) => fields.clone(),
            Value::Null => serde_json::Map::new(),
            other => {
                let message = format!("a shadow request is a JSON object, not {other}");
                return Err(refused(400, message));
            }
        };
        let (call, token, timeout_ms) = self.begin(timeout_ms, now_ms);
        body.insert("clientToken".into(), Value::String(token.clone()));
        let publish = Publish {
            topic: format!("{}/{}", target.prefix(), op.suffix()),
            payload: Bytes::from(Value::Object(body).to_string().into_bytes()),
            qos: 1,
            properties: Properties {
                message_expiry_interval: Some(expiry_seconds(timeout_ms)),
                ..Properties::default()
            },
        };
        self.wait(token, call, None, timeout_ms, now_ms);
        Ok((call, publish))
    }

    /// A shadow's answer or notification.
    fn shadow_heard(
        &mut self,
        target: shadow::Target<'_>,
        heard: shadow::Heard,
        publish: &Publish,
    ) -> Option<JobsEvent> {
        let body: Value = serde_json::from_slice(&publish.payload).ok()?;
        let stream = match heard {
            shadow::Heard::Delta => shadow::Stream::Delta,
            shadow::Heard::Documents => shadow::Stream::Documents,
            shadow::Heard::Accepted | shadow::Heard::Rejected => {
                let (call, _) = self.waiting.take(body.get("clientToken")?.as_str()?)?;
                let result = match heard {
                    shadow::Heard::Accepted => Ok(JobsAnswer { json: body }),
                    _ => Err(ClientError::Status {
                        status: body["code"]
                            .as_u64()
                            .and_then(|c| u16::try_from(c).ok())
                            .unwrap_or(500),
                        message: body["message"].as_str().unwrap_or_default().to_owned(),
                    }),
                };
                return Some(JobsEvent::Completed { call, result });
            }
        };
        Some(JobsEvent::Shadow(shadow::Notification {
            thing: target.thing.to_owned(),
            name: target.name.map(str::to_owned),
            stream,
            body,
        }))
    }

    /// Interprets a publish from one of the subscriptions; `None` when it concerns no call in
    /// flight and is no notification (a late answer, another client's reply).
    pub fn handle(&mut self, publish: &Publish) -> Option<JobsEvent> {
        if let Some((target, heard)) = shadow::parse_answer(&publish.topic) {
            return self.shadow_heard(target, heard, publish);
        }
        if publish.topic == self.response_topic {
            let token = std::str::from_utf8(publish.properties.correlation_data.as_ref()?).ok()?;
            let (call, field) = self.waiting.take(token)?;
            return Some(JobsEvent::Completed {
                call,
                result: operator_answer(publish).map(|answer| select(answer, field)),
            });
        }
        let (thing, api) = crate::jobs::topics::parse_device(&publish.topic)?;
        match api {
            "notify" => {
                let payload: Notify = serde_json::from_slice(&publish.payload).ok()?;
                Some(JobsEvent::Notification(JobNotification::Notify {
                    thing: thing.to_owned(),
                    in_progress: payload.jobs.in_progress,
                    queued: payload.jobs.queued,
                }))
            }
            "notify-next" => {
                let payload: NotifyNext = serde_json::from_slice(&publish.payload).ok()?;
                Some(JobsEvent::Notification(JobNotification::NotifyNext {
                    thing: thing.to_owned(),
                    execution: payload.execution,
                }))
            }
            _ => {
                let accepted = api.ends_with("/accepted");
                if !accepted && !api.ends_with("/rejected") {
                    return None; // A request (ours or another client's) coming back.
                }
                // Read as a `Value`, not as a `Reply` (its flattened body would cost the
                // wasm binding kilobytes of serde's buffering code).
                let reply: Value = serde_json::from_slice(&publish.payload).ok()?;
                let (call, field) = self.waiting.take(reply.get("clientToken")?.as_str()?)?;
                let result = match accepted {
                    true => Ok(select(reply, field)),
                    false => Err(rejection(serde_json::from_value(reply).ok()?)),
                };
                Some(JobsEvent::Completed { call, result })
            }
        }
    }

    /// When the next call times out.
    pub fn next_deadline(&self) -> Option<u64> {
        self.waiting.next_deadline()
    }

    /// Fails every call whose timeout has passed.
    pub fn expire(&mut self, now_ms: u64) -> Vec<JobsEvent> {
        failed(self.waiting.expire(now_ms))
    }

    /// The connection dropped: every call in flight fails with `error`.
    pub fn connection_failed(&mut self, error: ClientError) -> Vec<JobsEvent> {
        failed(self.waiting.fail_all(error))
    }

    /// The broker refused call `call`'s publish (a PUBACK reason code `code` of 0x80 or
    /// more): it fails with [`ClientError::PublishRefused`].
    pub fn publish_refused(&mut self, call: CallId, code: u8) -> Option<JobsEvent> {
        let refused = ClientError::PublishRefused { code };
        failed(self.waiting.fail_call(call, refused).into_iter().collect()).pop()
    }
}

fn failed(calls: Vec<(CallId, Option<&'static str>, ClientError)>) -> Vec<JobsEvent> {
    calls
        .into_iter()
        .map(|(call, _, e)| JobsEvent::Completed {
            call,
            result: Err(e),
        })
        .collect()
}

/// An operator answer ([`OperatorAnswer`]): `{"ok": ...}`, `{"error": {"code", "message"}}`,
/// or an envelope error (`__stat` other than 200). Read as a `Value` and its error as a
/// [`Rejected`] (the same fields): typed enum reading would cost the wasm binding kilobytes.
fn operator_answer(publish: &Publish) -> Result<Value, ClientError> {
    crate::client::status_error(&publish.properties)?;
    let mut answer: Value = serde_json::from_slice(&publish.payload)
        .map_err(|e| ClientError::Malformed(format!("the jobs answer is not JSON: {e}")))?;
    if let Some(ok) = answer.get_mut("ok") {
        return Ok(ok.take());
    }
    match answer.get_mut("error").map(Value::take) {
        Some(error) => Err(rejection(serde_json::from_value(error).map_err(|e| {
            ClientError::Malformed(format!("the jobs error answer is not an error: {e}"))
        })?)),
        None => Err(ClientError::Malformed(format!(
            "the jobs answer has neither ok nor error: {answer}"
        ))),
    }
}

/// A `/rejected` reply, or an operator error, as an error.
fn rejection(rejected: Rejected) -> ClientError {
    ClientError::Jobs {
        code: rejected.code,
        message: rejected.message,
        execution_state: rejected.execution_state,
    }
}

/// Reads a call's JSON answer as `T`.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, ClientError> {
    serde_json::from_value(value)
        .map_err(|e| ClientError::Malformed(format!("unexpected jobs answer: {e}")))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::jobs::wire::{JobDescription, JobListing, PendingJobs, UpdateAccepted};
    use crate::jobs::{JobSpec, Jobs, RetryConfig};

    const NOW: u64 = 1_700_000_000_000;

    /// Runs `publish` through the service and returns what it sent back.
    fn serve(jobs: &mut Jobs, publish: &Publish) -> Vec<Publish> {
        let mut out = Vec::new();
        if publish.topic == OPERATOR_TOPIC {
            let answer = jobs.operate(&publish.payload, NOW, &mut out);
            out.push(Publish {
                topic: publish.properties.response_topic.clone().unwrap(),
                payload: Bytes::from(serde_json::to_vec(&answer).unwrap()),
                qos: 1,
                properties: Properties {
                    correlation_data: publish.properties.correlation_data.clone(),
                    ..Properties::default()
                },
            });
        } else {
            jobs.handle(&publish.topic, &publish.payload, NOW, &mut out);
        }
        out
    }

    #[test]
    fn requests_read_from_the_wire_form_write_it_back() {
        let requests = [
            ("get", DeviceRequest::GetPending),
            (
                "start-next",
                DeviceRequest::StartNext {
                    status_details: [("step".to_owned(), "1".to_owned())].into(),
                    step_timeout_minutes: Some(5),
                },
            ),
            (
                "$next/get",
                DeviceRequest::Describe {
                    execution: ExecutionRef::Next,
                    execution_number: None,
                    include_document: false,
                },
            ),
            (
                "j1/update",
                DeviceRequest::Update(Update {
                    job_id: "j1".into(),
                    status: Some(Status::Succeeded),
                    expected_version: Some(3),
                    include_state: true,
                    ..Update::default()
                }),
            ),
        ];
        for (api, request) in requests {
            assert_eq!(request.api(), api);
            assert_eq!(DeviceRequest::from_wire(api, request.body()), Ok(request));
        }
        let bad_step = DeviceBody {
            step_timeout_in_minutes: Some(0),
            ..DeviceBody::default()
        };
        assert!(DeviceRequest::from_wire("start-next", bad_step).is_err());
        assert!(DeviceRequest::from_wire("j1/cancel", DeviceBody::default()).is_err());
        assert!(DeviceRequest::from_wire("$next/update", DeviceBody::default()).is_err());
    }

    fn completed(client: &mut JobsClient, replies: &[Publish], call: CallId) -> Value {
        let mut result = None;
        for reply in replies {
            if let Some(JobsEvent::Completed { call: c, result: r }) = client.handle(reply) {
                assert_eq!(c, call);
                result = Some(r);
            }
        }
        result.expect("an answer").expect("accepted").into_json()
    }

    fn spec(job_id: &str, targets: &[&str]) -> JobSpec {
        JobSpec::new(
            job_id,
            targets.iter().map(|t| t.to_string()).collect(),
            json!({ "op": "reboot" }),
        )
        .in_progress_timeout(Some(5))
        .retries(2)
    }

    #[test]
    fn operator_and_device_round_trip_through_the_service() {
        let mut jobs = Jobs::new();
        let mut client = JobsClient::new("ops", 7, 1000);
        let (call, request) = client.operate(
            &OperatorRequest::CreateJob(spec("j1", &["t1"]).into()),
            None,
            NOW,
        );
        assert_eq!(request.topic, OPERATOR_TOPIC);
        let replies = serve(&mut jobs, &request);
        let created = completed(&mut client, &replies, call);
        assert_eq!(created, json!({ "jobId": "j1", "targets": 1 }));
        let job = jobs.job("j1").unwrap().unwrap();
        assert_eq!(job.in_progress_timeout_minutes(), Some(5));
        assert_eq!(
            job.config.job_executions_retry_config,
            Some(RetryConfig::all(2))
        );

        let (call, request) = client
            .device("t1", &DeviceRequest::GetPending, None, NOW)
            .unwrap();
        assert_eq!(request.topic, "$aws/things/t1/jobs/get");
        let pending: PendingJobs =
            parse(completed(&mut client, &serve(&mut jobs, &request), call)).unwrap();
        assert_eq!(pending.queued_jobs.len(), 1);
        assert_eq!(pending.queued_jobs[0].job_id, "j1");

        let start = DeviceRequest::StartNext {
            status_details: BTreeMap::from([("step".into(), "1".into())]),
            step_timeout_minutes: None,
        };
        let (call, request) = client.device("t1", &start, None, NOW).unwrap();
        let replies = serve(&mut jobs, &request);
        // The head of the list is the same execution, started: no notification.
        assert_eq!(replies.len(), 1, "{replies:?}");
        // Completed with the answer's execution.
        let execution: JobExecution = parse(completed(&mut client, &replies, call)).unwrap();
        assert_eq!(execution.status, Status::InProgress);
        assert_eq!(execution.status_details["step"], "1");
        assert_eq!(execution.job_document, Some(json!({ "op": "reboot" })));

        let update = Update {
            job_id: "j1".into(),
            status: Some(Status::Succeeded),
            expected_version: Some(execution.version_number),
            include_state: true,
            ..Update::default()
        };
        let (call, request) = client
            .device("t1", &DeviceRequest::Update(update), None, NOW)
            .unwrap();
        let accepted: UpdateAccepted =
            parse(completed(&mut client, &serve(&mut jobs, &request), call)).unwrap();
        assert_eq!(accepted.execution_state.unwrap().status, Status::Succeeded);

        // Nothing pending: describe `$next` completes with null.
        let next = DeviceRequest::Describe {
            execution: ExecutionRef::Next,
            execution_number: None,
            include_document: false,
        };
        let (call, request) = client.device("t1", &next, None, NOW).unwrap();
        let nothing = completed(&mut client, &serve(&mut jobs, &request), call);
        assert_eq!(read_execution(nothing), Ok(None));
        // Describe and list calls complete with their records.
        let describe = OperatorRequest::DescribeJob {
            job_id: "j1".into(),
        };
        let (call, request) = client.operate(&describe, None, NOW);
        let job: JobDescription =
            parse(completed(&mut client, &serve(&mut jobs, &request), call)).unwrap();
        assert_eq!(
            (job.job_id.as_str(), job.executions[&Status::Succeeded]),
            ("j1", 1)
        );
        let (call, request) = client.operate(&OperatorRequest::list_jobs(), None, NOW);
        let listed: Vec<JobListing> =
            parse(completed(&mut client, &serve(&mut jobs, &request), call)).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].job_id.as_str(), listed[0].targets), ("j1", 1));
        assert_eq!(listed[0].status, crate::jobs::JobStatus::Completed);
        assert_eq!(client.in_flight(), 0);
    }

    #[test]
    fn an_answer_is_read_as_a_page_a_list_or_a_record() {
        let answer = |json| JobsAnswer { json };
        let page = answer(
            json!({ "thingGroups": [{ "groupName": "g", "groupArn": "a" }], "nextToken": "t" }),
        );
        let page: Page<crate::jobs::GroupListing> = page.page().unwrap();
        assert_eq!(page.items[0].group_name, "g");
        assert_eq!(page.next_token.as_deref(), Some("t"));
        let last: Page<String> = answer(json!({ "things": ["a", "b"] })).page().unwrap();
        assert_eq!(
            (last.items, last.next_token),
            (vec!["a".into(), "b".into()], None)
        );
        let all: Page<String> = answer(json!(["a"])).page().unwrap();
        assert_eq!(all.items, ["a"]);
        // What does not fit is an error, not a wrong value.
        assert!(
            answer(json!({ "nextToken": "t" }))
                .page::<String>()
                .is_err()
        );
        assert!(answer(json!({ "things": [1] })).page::<String>().is_err());
        assert_eq!(answer(Value::Null).execution(), Ok(None));
        assert!(
            answer(json!({ "jobId": 1 }))
                .read::<JobExecution>()
                .is_err()
        );
    }

    #[test]
    fn rejections_and_operator_errors_become_jobs_errors() {
        let mut jobs = Jobs::new();
        let mut client = JobsClient::new("ops", 7, 1000);
        let (_, request) = client.operate(
            &OperatorRequest::CreateJob(spec("j1", &["t1"]).into()),
            None,
            NOW,
        );
        for reply in serve(&mut jobs, &request) {
            client.handle(&reply);
        }
        let (call, request) = client
            .device("t1", &DeviceRequest::GetPending, None, NOW)
            .unwrap();
        serve(&mut jobs, &request);
        let update = Update {
            job_id: "j1".into(),
            status: Some(Status::Succeeded),
            expected_version: Some(9),
            ..Update::default()
        };
        let (call2, request) = client
            .device("t1", &DeviceRequest::Update(update), None, NOW)
            .unwrap();
        let replies = serve(&mut jobs, &request);
        let Some(JobsEvent::Completed { call: c, result }) = client.handle(&replies[0]) else {
            panic!("no answer in {replies:?}");
        };
        assert_eq!(c, call2);
        let error = result.unwrap_err();
        assert_eq!(error.code(), 212);
        let ClientError::Jobs {
            code,
            execution_state,
            ..
        } = error
        else {
            panic!("{error:?}")
        };
        assert_eq!(code, "VersionMismatch");
        assert_eq!(execution_state.unwrap().status, Status::Queued);

        let (call3, request) = client.operate(
            &OperatorRequest::DescribeJob {
                job_id: "nope".into(),
            },
            None,
            NOW,
        );
        let replies = serve(&mut jobs, &request);
        match client.handle(&replies[0]) {
            Some(JobsEvent::Completed {
                call,
                result: Err(ClientError::Jobs { code, .. }),
            }) => {
                assert_eq!(call, call3);
                assert_eq!(code, "ResourceNotFound");
            }
            other => panic!("{other:?}"),
        }
        // The first device call was never answered here (its reply was dropped): it times out.
        assert_eq!(client.next_deadline(), Some(NOW + 1000));
        let events = client.expire(NOW + 1000);
        assert_eq!(
            events,
            vec![JobsEvent::Completed {
                call,
                result: Err(ClientError::Timeout(1000))
            }]
        );
    }

    #[test]
    fn an_envelope_refusal_of_an_operator_call_is_a_status_error() {
        let mut client = JobsClient::new("ops", 7, 1000);
        let (call, request) = client.operate(&OperatorRequest::list_jobs(), None, NOW);
        let refusal = Publish {
            topic: request.properties.response_topic.clone().unwrap(),
            payload: Bytes::new(),
            qos: 1,
            properties: Properties {
                correlation_data: request.properties.correlation_data.clone(),
                user_properties: vec![
                    ("__stat".into(), "503".into()),
                    ("__stMsg".into(), "overloaded".into()),
                ],
                ..Properties::default()
            },
        };
        let expected = ClientError::Status {
            status: 503,
            message: "overloaded".into(),
        };
        assert_eq!(
            client.handle(&refusal),
            Some(JobsEvent::Completed {
                call,
                result: Err(expected)
            })
        );
        // An answer that is not JSON is malformed, not a panic.
        let (call, request) = client.operate(&OperatorRequest::list_jobs(), None, NOW);
        let garbage = Publish {
            payload: Bytes::from_static(b"\x00not json"),
            properties: Properties {
                correlation_data: request.properties.correlation_data.clone(),
                ..Properties::default()
            },
            ..refusal
        };
        match client.handle(&garbage) {
            Some(JobsEvent::Completed {
                call: c,
                result: Err(ClientError::Malformed(_)),
            }) => assert_eq!(c, call),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn requests_coming_back_and_foreign_replies_are_ignored() {
        let mut client = JobsClient::new("dev", 1, 1000);
        let (_, request) = client
            .device("t1", &DeviceRequest::GetPending, None, NOW)
            .unwrap();
        assert_eq!(client.handle(&request), None);
        let foreign = Publish {
            topic: "$aws/things/t1/jobs/get/accepted".into(),
            payload: Bytes::from_static(br#"{"clientToken":"someone-else"}"#),
            qos: 1,
            properties: Properties::default(),
        };
        assert_eq!(client.handle(&foreign), None);
        let garbage = Publish {
            payload: Bytes::from_static(b"\xff not json"),
            ..foreign
        };
        assert_eq!(client.handle(&garbage), None);
        assert_eq!(client.in_flight(), 1);
        let events = client.connection_failed(ClientError::Disconnected);
        assert!(matches!(
            events[..],
            [JobsEvent::Completed {
                result: Err(ClientError::Disconnected),
                ..
            }]
        ));
    }

    /// MQTT topic filter matching, `+` and a trailing `#`.
    fn filter_matches(filter: &str, topic: &str) -> bool {
        let mut levels = topic.split('/');
        for part in filter.split('/') {
            match (part, levels.next()) {
                ("#", _) => return true,
                ("+", Some(_)) => {}
                (part, Some(level)) if part == level => {}
                _ => return false,
            }
        }
        levels.next().is_none()
    }

    #[test]
    fn bad_thing_names_and_job_ids_are_refused_before_anything_is_sent() {
        let mut client = JobsClient::new("dev", 1, 1000);
        for thing in ["", "a/b", "t+", "t#", &"x".repeat(129)] {
            let e = client.device(thing, &DeviceRequest::GetPending, None, NOW);
            assert_eq!(e.unwrap_err().code(), 212, "{thing}");
        }
        let describe = DeviceRequest::Describe {
            execution: ExecutionRef::Job("j/+".into()),
            execution_number: None,
            include_document: true,
        };
        assert!(client.device("t1", &describe, None, NOW).is_err());
        let next = DeviceRequest::Describe {
            execution: ExecutionRef::Next,
            execution_number: None,
            include_document: true,
        };
        let (_, publish) = client.device("t1", &next, None, NOW).unwrap();
        assert_eq!(publish.topic, "$aws/things/t1/jobs/$next/get");
        assert_eq!(client.in_flight(), 1);
    }

    #[test]
    fn device_subscriptions_cover_every_reply_topic() {
        let filters = JobsClient::device_subscriptions("t1");
        for topic in [
            "$aws/things/t1/jobs/notify",
            "$aws/things/t1/jobs/notify-next",
            "$aws/things/t1/jobs/get/accepted",
            "$aws/things/t1/jobs/start-next/rejected",
            "$aws/things/t1/jobs/j1/get/accepted",
            "$aws/things/t1/jobs/j1/update/rejected",
        ] {
            assert!(!filter_matches(&filters[0], "$aws/things/t2/jobs/notify"));
            assert!(
                filters.iter().any(|f| filter_matches(f, topic)),
                "{topic} not covered by {filters:?}"
            );
        }
    }
}
