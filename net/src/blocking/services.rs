//! The blocking client's leases, jobs (operator and device API), commands and watches: the
//! same calls as the async client's, each a session call the calling thread waits for.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Condvar};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::{Awaited, Client, Slot, lock, unexpected};
use crate::Listener;
use crate::client::KeyspaceEvent;
use crate::commands::{
    DEFINITIONS_TIMEOUT_MS, FanOutSummary, command_reply, definitions_answer, status_record,
};
use crate::jobs::{ExecutionFilter, StartNext, describe, described};
use crate::now_ms;
use mqstore_core::client::commands::CommandReply;
use mqstore_core::client::jobs::{DeviceRequest, JobNotification, Update, parse, read_execution};
use mqstore_core::client::{CallId, ClientError};
use mqstore_core::commands::{CommandRequest, DEFAULT_TIMEOUT_MS, Record};
use mqstore_core::jobs::{
    ExecutionListing, ExecutionRef, JobDescription, JobExecution, JobListing, JobSpec,
    OperatorRequest, PendingJobs, UpdateAccepted,
};
use mqstore_core::session::Completion;

impl Client {
    /// Any jobs operator call (AWS's field names: docs/protocol/jobs.md §5), answered with the
    /// answer's JSON.
    pub fn operate(&self, request: &OperatorRequest) -> Result<Value, ClientError> {
        jobs_answer(
            self.handle
                .shared
                .run(|session, now| Ok(session.jobs_operate(request, None, now)))?,
        )
    }

    /// Any jobs operator call given as its JSON (`{"op": ..., ...}`), sent as it is: the
    /// service checks it.
    pub fn operate_json(&self, request: &Value) -> Result<Value, ClientError> {
        jobs_answer(
            self.handle
                .shared
                .run(|session, now| Ok(session.jobs_operate_json(request, None, now)))?,
        )
    }

    /// Creates a job and queues an execution of it on every target (operator API).
    pub fn create_job(&self, spec: JobSpec) -> Result<(), ClientError> {
        self.operate(&OperatorRequest::CreateJob(Box::new(spec)))
            .map(drop)
    }

    /// Cancels a job: QUEUED executions become CANCELED, IN_PROGRESS ones too with `force`.
    pub fn cancel_job(&self, job_id: &str, force: bool) -> Result<(), ClientError> {
        let request = OperatorRequest::CancelJob {
            job_id: job_id.to_owned(),
            force,
            reason_code: None,
            comment: None,
        };
        self.operate(&request).map(drop)
    }

    /// A job: its document, targets, settings and how many executions are in each status.
    pub fn describe_job(&self, job_id: &str) -> Result<JobDescription, ClientError> {
        let job_id = job_id.to_owned();
        parse(self.operate(&OperatorRequest::DescribeJob { job_id })?)
    }

    /// Deletes `thing`'s execution of `job_id` (an IN_PROGRESS one only with `force`).
    pub fn delete_job_execution(
        &self,
        job_id: &str,
        thing: &str,
        force: bool,
    ) -> Result<(), ClientError> {
        let request = OperatorRequest::DeleteExecution {
            job_id: job_id.to_owned(),
            thing: thing.to_owned(),
            force,
        };
        self.operate(&request).map(drop)
    }

    /// The latest execution of `job_id` on `thing`.
    pub fn describe_job_execution(
        &self,
        job_id: &str,
        thing: &str,
    ) -> Result<JobExecution, ClientError> {
        let request = OperatorRequest::DescribeExecution {
            job_id: job_id.to_owned(),
            thing: thing.to_owned(),
        };
        parse(self.operate(&request)?)
    }

    /// Every job.
    pub fn list_jobs(&self) -> Result<Vec<JobListing>, ClientError> {
        parse(self.operate(&OperatorRequest::list_jobs())?)
    }

    /// The latest executions, narrowed by `filter`.
    pub fn list_job_executions(
        &self,
        filter: ExecutionFilter,
    ) -> Result<Vec<ExecutionListing>, ClientError> {
        parse(self.operate(&filter.request())?)
    }

    /// Acts as `thing` in the AWS IoT Jobs device API: subscribes to its replies and
    /// notifications (and again after every reconnect) and returns once subscribed.
    pub fn jobs(&self, thing: &str) -> Result<Jobs, ClientError> {
        let (notifications, receiver) = mpsc::channel();
        let mut jobs = self.jobs_with(
            thing,
            Box::new(move |notification| notifications.send(notification).is_ok()),
        )?;
        jobs.notifications = Some(std::sync::Mutex::new(receiver));
        Ok(jobs)
    }

    /// [`Client::jobs`], handing the thing's notifications to `on_notification` instead (as
    /// [`Client::observe_with`] hands changes); the handle's `next_notification` then has
    /// none.
    pub fn jobs_with(
        &self,
        thing: &str,
        on_notification: Listener<JobNotification>,
    ) -> Result<Jobs, ClientError> {
        self.handle.shared.subscribe(|state| {
            let filters = state.session.act_as(thing)?;
            state
                .listeners
                .things
                .entry(thing.to_owned())
                .or_default()
                .push(on_notification);
            Ok(filters)
        })?;
        Ok(Jobs {
            client: self.clone(),
            thing: thing.to_owned(),
            notifications: None,
        })
    }

    /// Asks `mqstore serve` to send `request` to a device (see the async client's
    /// `command`): the device's answer, DELIVERED (one-way) or SENT (detached).
    pub fn command(&self, request: &CommandRequest) -> Result<CommandReply, ClientError> {
        command_reply(
            self.handle
                .shared
                .run(|session, now| Ok(session.command(request, now)))?,
        )
    }

    /// Command `id`'s status record (kept three timeouts after it was sent).
    pub fn command_status(&self, id: &str) -> Result<Record, ClientError> {
        status_record(
            self.handle
                .shared
                .run(|session, now| Ok(session.command_status(id, DEFAULT_TIMEOUT_MS, now)))?,
        )
    }

    /// A stored-commands call, as its JSON (`{"op": "create", "command": {…}}`, `{"op":
    /// "get" | "delete", "commandId": …}`, `{"op": "list"}`): the service's JSON answer.
    pub fn command_definitions(&self, request: &Value) -> Result<Value, ClientError> {
        definitions_answer(self.handle.shared.run(|session, now| {
            Ok(session.command_definitions(request, DEFINITIONS_TIMEOUT_MS, now))
        })?)
    }

    /// Sends one command to each of `requests`' devices, all in flight at once: their results
    /// as they come from [`FanOut::next`].
    pub fn command_many(&self, requests: Vec<CommandRequest>) -> FanOut {
        let wake = Arc::new(Condvar::new());
        let mut fan_out = FanOut {
            client: self.clone(),
            wake: wake.clone(),
            pending: HashMap::new(),
            ready: VecDeque::new(),
            summary: FanOutSummary::default(),
        };
        let shared = &self.handle.shared;
        let mut state = lock(&shared.state);
        for request in requests {
            if state.closed {
                fan_out
                    .ready
                    .push_back((request.topic, Err(ClientError::Disconnected)));
                continue;
            }
            let call = Awaited::Call(state.session.command(&request, now_ms()));
            state.slots.insert(call, Slot::new(wake.clone()));
            fan_out.pending.insert(call, request.topic);
        }
        state.pump();
        shared.nudge_reader(&state);
        fan_out
    }

    /// Every command's status changes from now on (the command service's events).
    pub fn watch_commands(&self) -> Result<mpsc::Receiver<Record>, ClientError> {
        let (records, receiver) = mpsc::channel();
        self.handle.shared.subscribe(|state| {
            let listener: Listener<Record> = Box::new(move |record| records.send(record).is_ok());
            state.listeners.command_watchers.push(listener);
            Ok(state
                .session
                .watch_commands()
                .into_iter()
                .map(str::to_owned)
                .collect())
        })?;
        Ok(receiver)
    }

    /// Every key made or deleted from now on (the server's keyspace events: QoS 0, possibly
    /// out of order across nodes).
    pub fn watch_keyspace(&self) -> Result<mpsc::Receiver<KeyspaceEvent>, ClientError> {
        let (events, receiver) = mpsc::channel();
        self.handle.shared.subscribe(|state| {
            let listener: Listener<KeyspaceEvent> =
                Box::new(move |event| events.send(event).is_ok());
            state.listeners.keyspace_watchers.push(listener);
            Ok(state
                .session
                .watch_keyspace()
                .into_iter()
                .map(str::to_owned)
                .collect())
        })?;
        Ok(receiver)
    }
}

/// A jobs call's JSON answer, from its completion.
fn jobs_answer(completion: Completion) -> Result<Value, ClientError> {
    match completion {
        Completion::Jobs(value) => Ok(value),
        other => Err(unexpected(other)),
    }
}

/// One thing's side of jobs: its pending list, start-next, describe, update, and its
/// `notify` / `notify-next` notifications in the order they came.
pub struct Jobs {
    client: Client,
    thing: String,
    /// Behind a lock so that one handle, shared, can make calls while another thread waits
    /// for notifications (`None`: they go to a function, [`Client::jobs_with`]).
    notifications: Option<std::sync::Mutex<mpsc::Receiver<JobNotification>>>,
}

impl Jobs {
    /// The thing this handle acts for.
    pub fn thing(&self) -> &str {
        &self.thing
    }

    fn call(&self, request: DeviceRequest) -> Result<Value, ClientError> {
        jobs_answer(
            self.client
                .handle
                .shared
                .run(|session, now| session.jobs_device(&self.thing, &request, None, now))?,
        )
    }

    /// The pending list: IN_PROGRESS and QUEUED executions.
    pub fn pending(&self) -> Result<PendingJobs, ClientError> {
        parse(self.call(DeviceRequest::GetPending)?)
    }

    /// Starts the first QUEUED execution (or returns the IN_PROGRESS one); `None` when
    /// nothing is pending.
    pub fn start_next(&self, options: StartNext) -> Result<Option<JobExecution>, ClientError> {
        read_execution(self.call(options.request())?)
    }

    /// The latest execution of `job_id` on this thing, with its document.
    pub fn describe(&self, job_id: &str) -> Result<JobExecution, ClientError> {
        described(read_execution(
            self.call(describe(ExecutionRef::Job(job_id.to_owned())))?,
        )?)
    }

    /// The first pending execution, with its document; `None` when nothing is pending.
    pub fn describe_next(&self) -> Result<Option<JobExecution>, ClientError> {
        read_execution(self.call(describe(ExecutionRef::Next))?)
    }

    /// Updates an execution (its status, details, step timer); rejected with
    /// `VersionMismatch` when `expected_version` is set and differs.
    pub fn update(&self, update: Update) -> Result<UpdateAccepted, ClientError> {
        parse(self.call(DeviceRequest::Update(update))?)
    }

    /// The next `notify` or `notify-next` for this thing, waiting up to `timeout`; `None`
    /// when none came (or the client is closed, or they go to a function).
    pub fn next_notification(&self, timeout: Duration) -> Option<JobNotification> {
        lock(self.notifications.as_ref()?)
            .recv_timeout(timeout)
            .ok()
    }
}

/// A lease the blocking client holds: renewed on whichever thread reads its connection.
pub type Lease = crate::lease::Lease<Client>;

impl crate::lease::Holder for Client {
    fn forget_lease(&self, id: CallId) {
        let mut state = lock(&self.handle.shared.state);
        state.listeners.leases.remove(&id);
        state.session.forget_lease(id);
    }
}

impl Client {
    /// Tries once to take `key` for `ttl`, with this client's id as the holder. `None` when
    /// someone else holds it.
    pub fn try_lease(
        &self,
        key: impl Into<Bytes>,
        ttl: Duration,
    ) -> Result<Option<Lease>, ClientError> {
        self.lease(key, ttl, Some(Duration::ZERO))
    }

    /// Waits until `key` is free and takes it (see the async client's `Lease::acquire`);
    /// gives up after `timeout` (`None`: never).
    pub fn lease(
        &self,
        key: impl Into<Bytes>,
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<Lease>, ClientError> {
        let key = key.into();
        let held = Arc::new(AtomicBool::new(true));
        let ttl_ms = (ttl.as_millis() as u64).max(1);
        let wait_ms = timeout.map(|w| w.as_millis() as u64);
        let client = self;
        let shared = &client.handle.shared;
        let mut state = lock(&shared.state);
        if state.closed {
            return Err(ClientError::Disconnected);
        }
        let id = state
            .session
            .lease(key.clone(), ttl_ms, wait_ms, now_ms())?;
        // The flag goes with the call: the answer that says held makes it the lease's, so a
        // loss reported right after it is not missed.
        state.taking.insert(id, held.clone());
        let completion = shared.wait(state, Awaited::Call(id))?.ok_or_else(|| {
            ClientError::Malformed("a lease call finished without an answer".into())
        })?;
        let token = match completion {
            Completion::Lease(token) => token,
            other => return Err(unexpected(other)),
        };
        let Some(token) = token else {
            return Ok(None);
        };
        Ok(Some(Lease::held(client.clone(), key, id, token, held)))
    }

    /// Campaigns until this client leads (holds the lease on `key`), then returns the lease.
    pub fn lead(&self, key: impl Into<Bytes>, ttl: Duration) -> Result<Lease, ClientError> {
        let key = key.into();
        loop {
            if let Some(lease) = self.lease(key.clone(), ttl, None)? {
                return Ok(lease);
            }
        }
    }
}

impl Lease {
    /// Releases the lease (VDEL: only if this client still holds it). Returns whether it was
    /// still held.
    pub fn release(mut self) -> Result<bool, ClientError> {
        self.released = true;
        let shared = &self.client.handle.shared;
        lock(&shared.state).listeners.leases.remove(&self.id);
        match shared.run(|session, now| session.release_lease(self.id, now))? {
            Completion::Released(held) => Ok(held),
            other => Err(unexpected(other)),
        }
    }
}

/// One command sent to many devices ([`Client::command_many`]): the results as they come,
/// then the [`FanOut::summary`].
pub struct FanOut {
    client: Client,
    /// The calls' slots wake the thread in `next` through this.
    wake: Arc<Condvar>,
    /// The calls without a result yet: each device's command topic.
    pending: HashMap<Awaited, String>,
    /// Results known at once (the client was closed).
    ready: VecDeque<(String, Result<CommandReply, ClientError>)>,
    summary: FanOutSummary,
}

impl FanOut {
    /// The results so far, counted.
    pub fn summary(&self) -> &FanOutSummary {
        &self.summary
    }
}

impl Iterator for FanOut {
    type Item = (String, Result<CommandReply, ClientError>);

    /// The next device's result (its command topic and result); `None` when all are in.
    fn next(&mut self) -> Option<Self::Item> {
        let next = match self.ready.pop_front() {
            Some(next) => next,
            None => {
                let set: Vec<Awaited> = self.pending.keys().copied().collect();
                if set.is_empty() {
                    return None;
                }
                let shared = &self.client.handle.shared;
                let state = lock(&shared.state);
                let (call, result) = shared.wait_any(state, &set, &self.wake).ok()?;
                let topic = self.pending.remove(&call).unwrap_or_default();
                let result = result.and_then(|completion| {
                    command_reply(completion.ok_or_else(|| {
                        ClientError::Malformed("a command finished without an answer".into())
                    })?)
                });
                (topic, result)
            }
        };
        self.summary.count(&next.1);
        Some(next)
    }
}

impl Drop for FanOut {
    /// Results not taken are dropped when they come.
    fn drop(&mut self) {
        let mut state = lock(&self.client.handle.shared.state);
        for call in self.pending.keys() {
            state.slots.remove(call);
        }
    }
}
