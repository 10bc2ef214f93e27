//! Jobs from the async Rust client: operator calls on [`Client`], and the device side as a
//! [`Jobs`] handle for one thing. The protocol is [`mqstore_core::client::jobs::JobsClient`]'s; this file
//! only sends calls to the client's task and converts answers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::client::{Client, Command, JobsCall};
use mqstore_core::client::ClientError;
/// One page of a list call.
pub use mqstore_core::client::jobs::Page;
/// An update of one execution, for [`Jobs::update`].
pub use mqstore_core::client::jobs::Update;
use mqstore_core::client::jobs::{DeviceRequest, JobNotification, JobsAnswer};
use mqstore_core::jobs::{
    ExecutionCancel, ExecutionListing, ExecutionRef, GroupListing, JobDescription, JobExecution,
    JobListing, JobSpec, JobStatus, JobTemplate, JobUpdate, Membership, OperatorRequest,
    PageRequest, PendingJobs, Status, TemplateListing, ThingGroupDescription, ThingGroupProperties,
    UpdateAccepted,
};

/// What `list_job_executions` narrows to (all `None`: every latest execution).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecutionFilter {
    /// Only this thing's executions.
    pub thing: Option<String>,
    /// Only this job's executions.
    pub job_id: Option<String>,
    /// Only executions in this status.
    pub status: Option<Status>,
}

impl ExecutionFilter {
    /// The operator request listing the first page of what the filter lets through.
    pub(crate) fn request(self) -> OperatorRequest {
        OperatorRequest::ListExecutions {
            thing: self.thing,
            job_id: self.job_id,
            status: self.status,
            page: PageRequest::default(),
        }
    }
}

fn membership(group: &str, thing: &str) -> Membership {
    Membership {
        thing_group_name: Some(group.to_owned()),
        thing_name: Some(thing.to_owned()),
        ..Membership::default()
    }
}

impl Client {
    pub(crate) async fn jobs_call(&self, call: JobsCall) -> Result<JobsAnswer, ClientError> {
        let (reply, result) = oneshot::channel();
        self.send(Command::Jobs { call, reply }).await?;
        result.await.map_err(|_| ClientError::Disconnected)?
    }

    /// Any operator call (AWS's field names: docs/protocol/jobs.md §5): its answer, read as
    /// the call's type ([`JobsAnswer::read`], [`JobsAnswer::page`]) or as JSON.
    pub async fn operate(&self, request: OperatorRequest) -> Result<JobsAnswer, ClientError> {
        // Our own type: it always serializes.
        let request = serde_json::to_value(request).unwrap_or_default();
        self.operate_json(request).await
    }

    /// Any operator call given as its JSON (`{"op": ..., ...}`), sent as it is: the service
    /// checks it (`ClientError::Jobs` with `InvalidRequest` naming what does not fit).
    pub async fn operate_json(&self, request: Value) -> Result<JobsAnswer, ClientError> {
        self.jobs_call(JobsCall::Operator(request)).await
    }

    /// Creates a job and queues an execution of it on every target (operator API).
    pub async fn create_job(&self, spec: JobSpec) -> Result<(), ClientError> {
        self.operate(OperatorRequest::CreateJob(Box::new(spec)))
            .await?;
        Ok(())
    }

    /// Cancels a job: QUEUED executions become CANCELED, IN_PROGRESS ones too with `force`.
    pub async fn cancel_job(&self, job_id: &str, force: bool) -> Result<(), ClientError> {
        self.cancel_job_with(job_id, force, None, None).await
    }

    /// [`Client::cancel_job`] with AWS's `reasonCode` (`[A-Z0-9_]+`) and `comment`, which
    /// `describe_job` shows afterwards.
    pub async fn cancel_job_with(
        &self,
        job_id: &str,
        force: bool,
        reason_code: Option<String>,
        comment: Option<String>,
    ) -> Result<(), ClientError> {
        let job_id = job_id.to_owned();
        let request = OperatorRequest::CancelJob {
            job_id,
            force,
            reason_code,
            comment,
        };
        self.operate(request).await?;
        Ok(())
    }

    /// Changes a job's description and its timeout, retry, rollout and abort configurations
    /// (fields left `None` stay as they are).
    pub async fn update_job(&self, update: JobUpdate) -> Result<(), ClientError> {
        self.operate(OperatorRequest::UpdateJob(update)).await?;
        Ok(())
    }

    /// Deletes a job and its executions: a COMPLETED or CANCELED one, or any with `force`.
    pub async fn delete_job(&self, job_id: &str, force: bool) -> Result<(), ClientError> {
        let job_id = job_id.to_owned();
        self.operate(OperatorRequest::DeleteJob { job_id, force })
            .await?;
        Ok(())
    }

    /// Cancels the execution of `job_id` on `thing`: a QUEUED one, or an IN_PROGRESS one with
    /// `force`; refused unless it is at `expected_version` when one is given.
    pub async fn cancel_job_execution(
        &self,
        job_id: &str,
        thing: &str,
        force: bool,
        expected_version: Option<u64>,
    ) -> Result<(), ClientError> {
        let request = OperatorRequest::CancelJobExecution(ExecutionCancel {
            job_id: job_id.to_owned(),
            thing: thing.to_owned(),
            force,
            expected_version,
            status_details: None,
        });
        self.operate(request).await?;
        Ok(())
    }

    /// Deletes the execution of `job_id` on `thing` (`force` for an IN_PROGRESS one).
    pub async fn delete_job_execution(
        &self,
        job_id: &str,
        thing: &str,
        force: bool,
    ) -> Result<(), ClientError> {
        let (job_id, thing) = (job_id.to_owned(), thing.to_owned());
        let request = OperatorRequest::DeleteExecution {
            job_id,
            thing,
            force,
        };
        self.operate(request).await?;
        Ok(())
    }

    /// A job: its document, targets, settings and how many executions are in each status.
    pub async fn describe_job(&self, job_id: &str) -> Result<JobDescription, ClientError> {
        let job_id = job_id.to_owned();
        self.operate(OperatorRequest::DescribeJob { job_id })
            .await?
            .read()
    }

    /// The latest execution of `job_id` on `thing`.
    pub async fn describe_job_execution(
        &self,
        job_id: &str,
        thing: &str,
    ) -> Result<JobExecution, ClientError> {
        let (job_id, thing) = (job_id.to_owned(), thing.to_owned());
        let request = OperatorRequest::DescribeExecution { job_id, thing };
        self.operate(request).await?.read()
    }

    /// Every job.
    pub async fn list_jobs(&self) -> Result<Vec<JobListing>, ClientError> {
        self.operate(OperatorRequest::list_jobs()).await?.read()
    }

    /// A page of jobs (in id order), narrowed by status: pass the page's `next_token` for the
    /// next page.
    pub async fn list_jobs_page(
        &self,
        status: Option<JobStatus>,
        page: PageRequest,
    ) -> Result<Page<JobListing>, ClientError> {
        let answer = self
            .operate(OperatorRequest::ListJobs { status, page })
            .await?;
        answer.page()
    }

    /// The latest executions, narrowed by `filter`.
    pub async fn list_job_executions(
        &self,
        filter: ExecutionFilter,
    ) -> Result<Vec<ExecutionListing>, ClientError> {
        self.operate(filter.request()).await?.read()
    }

    /// A page of the latest executions, narrowed by `filter`.
    pub async fn list_job_executions_page(
        &self,
        filter: ExecutionFilter,
        page: PageRequest,
    ) -> Result<Page<ExecutionListing>, ClientError> {
        let request = OperatorRequest::ListExecutions {
            thing: filter.thing,
            job_id: filter.job_id,
            status: filter.status,
            page,
        };
        self.operate(request).await?.page()
    }

    /// Makes a static thing group (`description` optional); jobs target it as
    /// `thinggroup/NAME`.
    pub async fn create_thing_group(
        &self,
        name: &str,
        description: Option<String>,
    ) -> Result<ThingGroupDescription, ClientError> {
        let request = OperatorRequest::CreateThingGroup {
            thing_group_name: name.to_owned(),
            thing_group_properties: description.map(|d| ThingGroupProperties {
                thing_group_description: Some(d),
            }),
        };
        self.operate(request).await?.read()
    }

    /// Removes a thing group and its membership (jobs keep the things they have).
    pub async fn delete_thing_group(&self, name: &str) -> Result<(), ClientError> {
        let thing_group_name = name.to_owned();
        self.operate(OperatorRequest::DeleteThingGroup { thing_group_name })
            .await?;
        Ok(())
    }

    /// A thing group.
    pub async fn describe_thing_group(
        &self,
        name: &str,
    ) -> Result<ThingGroupDescription, ClientError> {
        let thing_group_name = name.to_owned();
        self.operate(OperatorRequest::DescribeThingGroup { thing_group_name })
            .await?
            .read()
    }

    /// A page of thing groups, in name order.
    pub async fn list_thing_groups(
        &self,
        page: PageRequest,
    ) -> Result<Page<GroupListing>, ClientError> {
        let answer = self
            .operate(OperatorRequest::ListThingGroups { page })
            .await?;
        answer.page()
    }

    /// Adds `thing` to a group: each CONTINUOUS job on the group gets an execution on it.
    pub async fn add_thing_to_thing_group(
        &self,
        group: &str,
        thing: &str,
    ) -> Result<(), ClientError> {
        let request = OperatorRequest::AddThingToThingGroup(membership(group, thing));
        self.operate(request).await?;
        Ok(())
    }

    /// Removes `thing` from a group: its QUEUED executions of CONTINUOUS jobs on the group
    /// become REMOVED.
    pub async fn remove_thing_from_thing_group(
        &self,
        group: &str,
        thing: &str,
    ) -> Result<(), ClientError> {
        let request = OperatorRequest::RemoveThingFromThingGroup(membership(group, thing));
        self.operate(request).await?;
        Ok(())
    }

    /// A page of a group's things, in name order.
    pub async fn list_things_in_thing_group(
        &self,
        group: &str,
        page: PageRequest,
    ) -> Result<Page<String>, ClientError> {
        let request = OperatorRequest::ListThingsInThingGroup {
            thing_group_name: group.to_owned(),
            page,
        };
        self.operate(request).await?.page()
    }

    /// Stores a job template; `createJob` with `job_template_arn` set to its id starts from
    /// it (its `${aws:iot:parameter:NAME}` placeholders filled from `documentParameters`).
    /// Returns its ARN.
    pub async fn create_job_template(&self, template: JobTemplate) -> Result<String, ClientError> {
        let answer = self
            .operate(OperatorRequest::CreateJobTemplate(Box::new(template)))
            .await?;
        answer
            .read::<JobTemplate>()?
            .job_template_arn
            .ok_or_else(|| {
                ClientError::Malformed("the stored template's answer has no jobTemplateArn".into())
            })
    }

    /// A job template.
    pub async fn describe_job_template(&self, id: &str) -> Result<JobTemplate, ClientError> {
        let job_template_id = id.to_owned();
        self.operate(OperatorRequest::DescribeJobTemplate { job_template_id })
            .await?
            .read()
    }

    /// A page of job templates, in id order.
    pub async fn list_job_templates(
        &self,
        page: PageRequest,
    ) -> Result<Page<TemplateListing>, ClientError> {
        let answer = self
            .operate(OperatorRequest::ListJobTemplates { page })
            .await?;
        answer.page()
    }

    /// Removes a job template (jobs made from it stay).
    pub async fn delete_job_template(&self, id: &str) -> Result<(), ClientError> {
        let job_template_id = id.to_owned();
        self.operate(OperatorRequest::DeleteJobTemplate { job_template_id })
            .await?;
        Ok(())
    }

    /// Acts as `thing` in the AWS IoT Jobs device API: subscribes to its replies and
    /// notifications (and again after every reconnect) and returns once subscribed.
    pub async fn jobs(&self, thing: &str) -> Result<Jobs, ClientError> {
        let (notifications, notifications_rx) = mpsc::unbounded_channel();
        let (reply, result) = oneshot::channel();
        self.send(Command::Thing {
            thing: thing.to_owned(),
            notifications,
            reply,
        })
        .await?;
        result.await.map_err(|_| ClientError::Disconnected)??;
        Ok(Jobs {
            client: self.clone(),
            thing: thing.to_owned(),
            notifications: tokio::sync::Mutex::new(notifications_rx),
        })
    }
}

/// One thing's side of jobs: its pending list, start-next, describe, update, and its
/// `notify` / `notify-next` notifications in the order they came.
pub struct Jobs {
    client: Client,
    thing: String,
    /// Behind a lock so that one handle, shared, can make calls while another task waits for
    /// notifications (the Python and C bindings share it between threads).
    notifications: tokio::sync::Mutex<mpsc::UnboundedReceiver<JobNotification>>,
}

/// Options of [`Jobs::start_next`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartNext {
    /// Details to record with the new status (AWS's `statusDetails`).
    pub status_details: BTreeMap<String, String>,
    /// The execution times out unless updated within this (a step timer).
    pub step_timeout: Option<Duration>,
}

impl Jobs {
    /// The thing this handle acts for.
    pub fn thing(&self) -> &str {
        &self.thing
    }

    async fn call(&self, request: DeviceRequest) -> Result<JobsAnswer, ClientError> {
        let call = JobsCall::Device(self.thing.clone(), request);
        self.client.jobs_call(call).await
    }

    /// The pending list: IN_PROGRESS and QUEUED executions.
    pub async fn pending(&self) -> Result<PendingJobs, ClientError> {
        self.call(DeviceRequest::GetPending).await?.read()
    }

    /// Starts the first QUEUED execution (or returns the IN_PROGRESS one); `None` when
    /// nothing is pending.
    pub async fn start_next(
        &self,
        options: StartNext,
    ) -> Result<Option<JobExecution>, ClientError> {
        self.call(options.request()).await?.execution()
    }

    /// The latest execution of `job_id` on this thing, with its document.
    pub async fn describe(&self, job_id: &str) -> Result<JobExecution, ClientError> {
        let request = describe(ExecutionRef::Job(job_id.to_owned()));
        described(self.call(request).await?.execution()?)
    }

    /// The first pending execution, with its document; `None` when nothing is pending.
    pub async fn describe_next(&self) -> Result<Option<JobExecution>, ClientError> {
        self.call(describe(ExecutionRef::Next)).await?.execution()
    }

    /// Updates an execution (its status, details, step timer); rejected with
    /// `VersionMismatch` when `expected_version` is set and differs.
    pub async fn update(&self, update: Update) -> Result<UpdateAccepted, ClientError> {
        self.call(DeviceRequest::Update(update)).await?.read()
    }

    /// The next `notify` or `notify-next` for this thing; `None` once the client is closed.
    pub async fn next_notification(&self) -> Option<JobNotification> {
        self.notifications.lock().await.recv().await
    }

    /// A notification that has arrived already, without waiting.
    /// (`None` too while another task is waiting for the next one.)
    pub fn try_next_notification(&self) -> Option<JobNotification> {
        self.notifications.try_lock().ok()?.try_recv().ok()
    }
}

impl StartNext {
    /// The device API's start-next request with these options.
    pub(crate) fn request(self) -> DeviceRequest {
        DeviceRequest::StartNext {
            status_details: self.status_details,
            step_timeout_minutes: self.step_timeout.map(minutes),
        }
    }
}

/// The device API's describe request of `execution`, with its document.
pub(crate) fn describe(execution: ExecutionRef) -> DeviceRequest {
    DeviceRequest::Describe {
        execution,
        execution_number: None,
        include_document: true,
    }
}

/// A described execution of a named job (accepted means there is one).
pub(crate) fn described(execution: Option<JobExecution>) -> Result<JobExecution, ClientError> {
    execution
        .ok_or_else(|| ClientError::Malformed("describe was accepted without an execution".into()))
}

/// Whole minutes, rounded up (AWS takes minutes).
fn minutes(d: Duration) -> u64 {
    d.as_secs().div_ceil(60).max(1)
}
