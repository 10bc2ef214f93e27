//! The blocking client's leases, jobs (operator and device API), commands and watches: the
//! same calls as the async client's, each a session call the calling thread waits for.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::{Arc, Condvar};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;

use super::{Awaited, Call, Client, Slot, Start, State, calls, lock, unexpected};
use crate::Listener;
use crate::client::KeyspaceEvent;
use crate::commands::{FanOutSummary, command_reply};
use crate::jobs::{ExecutionFilter, StartNext};
use crate::now_ms;
use mqstore_core::client::commands::CommandReply;
use mqstore_core::client::jobs::{JobNotification, JobsAnswer, Update};
use mqstore_core::client::{CallId, ClientError};
use mqstore_core::commands::definitions::{DefinitionsAnswer, DefinitionsRequest};
use mqstore_core::commands::{CommandRequest, Record};
use mqstore_core::jobs::{
    ExecutionListing, JobDescription, JobExecution, JobListing, JobSpec, OperatorRequest,
    PendingJobs, UpdateAccepted,
};
use mqstore_core::session::Completion;
use mqstore_core::session::Session;

impl Client {
    /// Any jobs operator call (AWS's field names: docs/protocol/jobs.md §5), answered with the
    /// answer's JSON.
    pub fn operate(&self, request: &OperatorRequest) -> Result<JobsAnswer, ClientError> {
        self.wait(calls::operate(request))
    }

    /// Any jobs operator call given as its JSON (`{"op": ..., ...}`), sent as it is: the
    /// service checks it.
    pub fn operate_json(&self, request: &Value) -> Result<JobsAnswer, ClientError> {
        self.wait(calls::operate_json(request))
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
        self.wait(calls::describe_job(job_id))
    }

    /// Deletes `thing`'s execution of `job_id` (an IN_PROGRESS one only with `force`).
    pub fn delete_job_execution(
        &self,
        job_id: &str,
        thing: &str,
        force: bool,
    ) -> Result<(), ClientError> {
        self.wait(calls::delete_job_execution(job_id, thing, force))
    }

    /// The latest execution of `job_id` on `thing`.
    pub fn describe_job_execution(
        &self,
        job_id: &str,
        thing: &str,
    ) -> Result<JobExecution, ClientError> {
        self.wait(calls::describe_job_execution(job_id, thing))
    }

    /// Every job.
    pub fn list_jobs(&self) -> Result<Vec<JobListing>, ClientError> {
        self.wait(calls::list_jobs())
    }

    /// The latest executions, narrowed by `filter`.
    pub fn list_job_executions(
        &self,
        filter: ExecutionFilter,
    ) -> Result<Vec<ExecutionListing>, ClientError> {
        self.wait(calls::list_job_executions(filter))
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
        (self.handle.shared).subscribe(|state| act_as(state, thing, on_notification))?;
        Ok(Jobs {
            client: self.clone(),
            thing: thing.to_owned(),
            notifications: None,
        })
    }

    /// [`Client::jobs_with`], started: `deliver` hears once the thing's topics are subscribed
    /// (see [`Client::start`]); its calls are [`calls::device`]'s.
    pub fn start_jobs_with(
        &self,
        thing: &str,
        on_notification: Listener<JobNotification>,
        deliver: impl FnOnce(Result<(), ClientError>) + Send + 'static,
    ) {
        (self.handle.shared)
            .start_subscribe(|state| act_as(state, thing, on_notification), deliver);
    }

    /// Asks `mqstore serve` to send `request` to a device (see the async client's
    /// `command`): the device's answer, DELIVERED (one-way) or SENT (detached).
    pub fn command(&self, request: &CommandRequest) -> Result<CommandReply, ClientError> {
        self.wait(calls::command(request))
    }

    /// Command `id`'s status record (kept three timeouts after it was sent).
    pub fn command_status(&self, id: &str) -> Result<Record, ClientError> {
        self.wait(calls::command_status(id))
    }

    /// A stored-commands call (create, get, list, delete): the service's answer.
    pub fn command_definitions(
        &self,
        request: &DefinitionsRequest,
    ) -> Result<DefinitionsAnswer, ClientError> {
        self.wait(calls::command_definitions(request))
    }

    /// A stored-commands call given as its JSON, sent as it is: the service's answer as JSON.
    pub fn command_definitions_json(&self, request: &Value) -> Result<Value, ClientError> {
        self.wait(calls::command_definitions_json(request))
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
        self.watch_commands_with(Box::new(move |record| records.send(record).is_ok()))?;
        Ok(receiver)
    }

    /// [`Client::watch_commands`], each record handed to `on_record` (see
    /// [`Client::observe_with`]).
    pub fn watch_commands_with(&self, on_record: Listener<Record>) -> Result<(), ClientError> {
        (self.handle.shared).subscribe(|state| watch_commands(state, on_record))
    }

    /// [`Client::watch_commands`], each record handed to `on_record` (see
    /// [`Client::observe_with`]), started: `deliver` hears once subscribed.
    pub fn start_watch_commands(
        &self,
        on_record: Listener<Record>,
        deliver: impl FnOnce(Result<(), ClientError>) + Send + 'static,
    ) {
        (self.handle.shared).start_subscribe(|state| watch_commands(state, on_record), deliver);
    }

    /// Every key made or deleted from now on (the server's keyspace events: QoS 0, possibly
    /// out of order across nodes).
    pub fn watch_keyspace(&self) -> Result<mpsc::Receiver<KeyspaceEvent>, ClientError> {
        let (events, receiver) = mpsc::channel();
        self.watch_keyspace_with(Box::new(move |event| events.send(event).is_ok()))?;
        Ok(receiver)
    }

    /// [`Client::watch_keyspace`], each event handed to `on_event` (see
    /// [`Client::observe_with`]).
    pub fn watch_keyspace_with(
        &self,
        on_event: Listener<KeyspaceEvent>,
    ) -> Result<(), ClientError> {
        (self.handle.shared).subscribe(|state| watch_keyspace(state, on_event))
    }

    /// [`Client::watch_keyspace`], each event handed to `on_event` (see
    /// [`Client::observe_with`]), started: `deliver` hears once subscribed.
    pub fn start_watch_keyspace(
        &self,
        on_event: Listener<KeyspaceEvent>,
        deliver: impl FnOnce(Result<(), ClientError>) + Send + 'static,
    ) {
        (self.handle.shared).start_subscribe(|state| watch_keyspace(state, on_event), deliver);
    }
}

/// Registers `on_notification` for `thing`: the filters to subscribe to.
fn act_as(
    state: &mut State,
    thing: &str,
    on_notification: Listener<JobNotification>,
) -> Result<Vec<String>, ClientError> {
    let filters = state.session.act_as(thing)?;
    (state.listeners.things.entry(thing.to_owned()))
        .or_default()
        .push(on_notification);
    Ok(filters)
}

/// Registers a watcher of every command's status: the filters to subscribe to.
fn watch_commands(
    state: &mut State,
    on_record: Listener<Record>,
) -> Result<Vec<String>, ClientError> {
    state.listeners.command_watchers.push(on_record);
    Ok(state
        .session
        .watch_commands()
        .into_iter()
        .map(str::to_owned)
        .collect())
}

/// Registers a watcher of the keyspace: the filters to subscribe to.
fn watch_keyspace(
    state: &mut State,
    on_event: Listener<KeyspaceEvent>,
) -> Result<Vec<String>, ClientError> {
    state.listeners.keyspace_watchers.push(on_event);
    Ok(state
        .session
        .watch_keyspace()
        .into_iter()
        .map(str::to_owned)
        .collect())
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

    /// The pending list: IN_PROGRESS and QUEUED executions.
    pub fn pending(&self) -> Result<PendingJobs, ClientError> {
        self.client.wait(calls::pending(&self.thing))
    }

    /// Starts the first QUEUED execution (or returns the IN_PROGRESS one); `None` when
    /// nothing is pending.
    pub fn start_next(&self, options: StartNext) -> Result<Option<JobExecution>, ClientError> {
        self.client.wait(calls::start_next(&self.thing, options))
    }

    /// The latest execution of `job_id` on this thing, with its document.
    pub fn describe(&self, job_id: &str) -> Result<JobExecution, ClientError> {
        self.client
            .wait(calls::describe_execution(&self.thing, job_id))
    }

    /// The first pending execution, with its document; `None` when nothing is pending.
    pub fn describe_next(&self) -> Result<Option<JobExecution>, ClientError> {
        self.client.wait(calls::describe_next(&self.thing))
    }

    /// Updates an execution (its status, details, step timer); rejected with
    /// `VersionMismatch` when `expected_version` is set and differs.
    pub fn update(&self, update: Update) -> Result<UpdateAccepted, ClientError> {
        self.client.wait(calls::update(&self.thing, update))
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
        let shared = &self.handle.shared;
        let mut state = lock(&shared.state);
        if state.closed {
            return Err(ClientError::Disconnected);
        }
        let id = begin_lease(&mut state, key.clone(), ttl, timeout, &held, now_ms())?;
        let completion = shared.wait(state, Awaited::Call(id))?.ok_or_else(|| {
            ClientError::Malformed("a lease call finished without an answer".into())
        })?;
        leased(self.clone(), key, Some(id), held, completion)
    }

    /// [`Client::lease`], started: `deliver` gets the lease, or `None` when someone else
    /// holds the key (see [`Client::start`]).
    pub fn start_lease(
        &self,
        key: Bytes,
        ttl: Duration,
        timeout: Option<Duration>,
        deliver: impl FnOnce(Result<Option<Lease>, ClientError>) + Send + 'static,
    ) {
        let held = Arc::new(AtomicBool::new(true));
        let (client, taken, leased_key) = (self.clone(), held.clone(), key.clone());
        self.handle.shared.start(
            |state, now| begin_lease(state, leased_key, ttl, timeout, &taken, now),
            move |id| {
                Box::new(move |finished| {
                    let lease = finished
                        .and_then(calls::answered)
                        .and_then(|completion| leased(client, key, id, held, completion));
                    deliver(lease)
                })
            },
        );
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

/// A lease call begun, for [`Client::lease`] and [`Client::start_lease`]. The `held` flag goes
/// with the call: the answer that says held makes it the lease's, so a loss reported right
/// after it is not missed.
fn begin_lease(
    state: &mut State,
    key: Bytes,
    ttl: Duration,
    timeout: Option<Duration>,
    held: &Arc<AtomicBool>,
    now_ms: u64,
) -> Result<CallId, ClientError> {
    let ttl_ms = (ttl.as_millis() as u64).max(1);
    let wait_ms = timeout.map(|w| w.as_millis() as u64);
    let id = state.session.lease(key, ttl_ms, wait_ms, now_ms)?;
    state.taking.insert(id, held.clone());
    Ok(id)
}

/// A lease call's answer as the lease: `None` when someone else holds the key.
fn leased(
    client: Client,
    key: Bytes,
    id: Option<CallId>,
    held: Arc<AtomicBool>,
    completion: Completion,
) -> Result<Option<Lease>, ClientError> {
    match completion {
        Completion::Lease(token) => Ok(token
            .zip(id)
            .map(|(token, id)| Lease::held(client, key, id, token, held))),
        other => Err(unexpected(other)),
    }
}

impl Lease {
    /// Releases the lease (VDEL: only if this client still holds it). Returns whether it was
    /// still held.
    pub fn release(self) -> Result<bool, ClientError> {
        let client = self.client.clone();
        client.wait(self.releasing())
    }

    /// Stops renewing the lease and returns the call that releases it (VDEL: only if this
    /// client still holds it), whose value says whether it was still held.
    pub fn releasing(mut self) -> Call<impl Start, bool> {
        self.released = true;
        lock(&self.client.handle.shared.state)
            .listeners
            .leases
            .remove(&self.id);
        let id = self.id;
        Call {
            start: move |session: &mut Session, now| session.release_lease(id, now),
            finish: |c| match c {
                Completion::Released(held) => Ok(held),
                other => Err(unexpected(other)),
            },
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
