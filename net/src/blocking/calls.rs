//! The blocking client's calls as values: each is how to start it in the session and what to
//! make of its completion, so that the same call is made waiting ([`Client::wait`]) or started
//! with its result delivered ([`Client::start_call`], for a driven client).

use std::borrow::Borrow;

use bytes::Bytes;
use serde_json::Value;

use super::{Client, unexpected};
use crate::client::{SetOptions, deletion};
use crate::commands::{DEFINITIONS_TIMEOUT_MS, command_reply, definitions_reply, status_record};
use crate::jobs::{ExecutionFilter, StartNext, describe, described};
use mqstore_core::client::commands::CommandReply;
use mqstore_core::client::jobs::{DeviceRequest, JobsAnswer, Update};
use mqstore_core::client::{
    Answer, CallId, CallOptions, ClientError, Deletion, SetResult, Versioned,
};
use mqstore_core::codec::Request;
use mqstore_core::commands::definitions::{DefinitionsAnswer, DefinitionsRequest};
use mqstore_core::commands::{CommandRequest, DEFAULT_TIMEOUT_MS, Record};
use mqstore_core::hlc::Hlc;
use mqstore_core::jobs::{
    ExecutionListing, ExecutionRef, JobDescription, JobExecution, JobListing, OperatorRequest,
    PendingJobs, UpdateAccepted,
};
use mqstore_core::session::{Completion, Session};

/// Starts a call in the session: its id.
pub trait Start: FnOnce(&mut Session, u64) -> Result<CallId, ClientError> {}

impl<S: FnOnce(&mut Session, u64) -> Result<CallId, ClientError>> Start for S {}

/// A call not made yet: how to start it (`S`) and what its completion gives (`T`).
pub struct Call<S, T> {
    pub(super) start: S,
    pub(super) finish: fn(Completion) -> Result<T, ClientError>,
}

impl<S: Start, T> Call<S, T> {
    /// The same call, its value turned into another by `then` (a plain function: a call's
    /// value is made on the thread that finishes it).
    pub fn map<U>(self, then: fn(Completion) -> Result<U, ClientError>) -> Call<S, U> {
        Call {
            start: self.start,
            finish: then,
        }
    }
}

impl Client {
    /// Makes `call` and waits for its value.
    pub fn wait<S: Start, T>(&self, call: Call<S, T>) -> Result<T, ClientError> {
        (call.finish)(self.handle.shared.run(call.start)?)
    }

    /// Starts `call` and returns at once; `deliver` gets its value (see [`Client::start`]).
    pub fn start_call<S: Start, T: 'static>(
        &self,
        call: Call<S, T>,
        deliver: impl FnOnce(Result<T, ClientError>) + Send + 'static,
    ) {
        let finish = call.finish;
        self.start(
            call.start,
            Box::new(move |finished| deliver(finished.and_then(|c| finish(answered(c)?)))),
        );
    }
}

/// A finished call's completion (a call, unlike a subscription, has one).
pub(super) fn answered(completion: Option<Completion>) -> Result<Completion, ClientError> {
    completion.ok_or_else(|| ClientError::Malformed("a call finished without an answer".into()))
}

pub(super) fn store(completion: Completion) -> Result<Answer, ClientError> {
    match completion {
        Completion::Store(answer) => Ok(answer),
        other => Err(unexpected(other)),
    }
}

/// A state store call with `options`.
pub fn request(request: Request, options: CallOptions) -> Call<impl Start, Answer> {
    Call {
        start: move |session: &mut Session, now| session.call(&request, &options, now),
        finish: store,
    }
}

/// SET `key` to `value`.
pub fn set(key: Bytes, value: Bytes, options: SetOptions) -> Call<impl Start, SetResult> {
    let (set, options) = options.request(key, value);
    request(set, options).map(|c| Ok(store(c)?.into_set_result()))
}

/// GET `key`: its value and version, or `None` when absent.
pub fn get(key: Bytes) -> Call<impl Start, Option<Versioned>> {
    request(Request::Get { key }, CallOptions::default()).map(|c| Ok(store(c)?.into_versioned()))
}

/// DEL `key` (VDEL when `value` is given: only if the key holds it).
pub fn delete(
    key: Bytes,
    value: Option<Bytes>,
    fencing_token: Option<Hlc>,
) -> Call<impl Start, Deletion> {
    let (del, options) = deletion(key, value, fencing_token);
    request(del, options).map(|c| Ok(store(c)?.into_deletion()))
}

/// One page of the keys matching `pattern`: the page's keys and the next page's token.
pub fn scan_page(
    pattern: Bytes,
    token: Option<Bytes>,
) -> Call<impl Start, (Vec<Bytes>, Option<Bytes>)> {
    request(Request::Scan { pattern, token }, CallOptions::default()).map(|c| store(c)?.into_page())
}

fn jobs_answer(completion: Completion) -> Result<JobsAnswer, ClientError> {
    match completion {
        Completion::Jobs(value) => Ok(value),
        other => Err(unexpected(other)),
    }
}

/// Any jobs operator call (AWS's field names: docs/protocol/jobs.md §5): its answer, read as
/// the call's type or as JSON.
pub fn operate(request: impl Borrow<OperatorRequest>) -> Call<impl Start, JobsAnswer> {
    Call {
        start: move |session: &mut Session, now| {
            Ok(session.jobs_operate(request.borrow(), None, now))
        },
        finish: jobs_answer,
    }
}

/// Any jobs operator call given as its JSON (`{"op": ..., ...}`), sent as it is: the
/// service checks it.
pub fn operate_json(request: impl Borrow<Value>) -> Call<impl Start, JobsAnswer> {
    Call {
        start: move |session: &mut Session, now| {
            Ok(session.jobs_operate_json(request.borrow(), None, now))
        },
        finish: jobs_answer,
    }
}

/// A job: its document, targets, settings and how many executions are in each status.
pub fn describe_job(job_id: &str) -> Call<impl Start, JobDescription> {
    let job_id = job_id.to_owned();
    operate(OperatorRequest::DescribeJob { job_id }).map(|c| jobs_answer(c)?.read())
}

/// Deletes `thing`'s execution of `job_id` (an IN_PROGRESS one only with `force`).
pub fn delete_job_execution(job_id: &str, thing: &str, force: bool) -> Call<impl Start, ()> {
    let request = OperatorRequest::DeleteExecution {
        job_id: job_id.to_owned(),
        thing: thing.to_owned(),
        force,
    };
    operate(request).map(|c| jobs_answer(c).map(drop))
}

/// The latest execution of `job_id` on `thing`.
pub fn describe_job_execution(job_id: &str, thing: &str) -> Call<impl Start, JobExecution> {
    let request = OperatorRequest::DescribeExecution {
        job_id: job_id.to_owned(),
        thing: thing.to_owned(),
    };
    operate(request).map(|c| jobs_answer(c)?.read())
}

/// Every job.
pub fn list_jobs() -> Call<impl Start, Vec<JobListing>> {
    operate(OperatorRequest::list_jobs()).map(|c| jobs_answer(c)?.read())
}

/// The latest executions, narrowed by `filter`.
pub fn list_job_executions(filter: ExecutionFilter) -> Call<impl Start, Vec<ExecutionListing>> {
    operate(filter.request()).map(|c| jobs_answer(c)?.read())
}

/// A call of `thing`'s jobs device API: its answer.
pub fn device(thing: &str, request: DeviceRequest) -> Call<impl Start, JobsAnswer> {
    Call {
        start: move |session: &mut Session, now| session.jobs_device(thing, &request, None, now),
        finish: jobs_answer,
    }
}

/// `thing`'s pending list: IN_PROGRESS and QUEUED executions.
pub fn pending(thing: &str) -> Call<impl Start, PendingJobs> {
    device(thing, DeviceRequest::GetPending).map(|c| jobs_answer(c)?.read())
}

/// Starts `thing`'s first QUEUED execution (or returns the IN_PROGRESS one); `None` when
/// nothing is pending.
pub fn start_next(thing: &str, options: StartNext) -> Call<impl Start, Option<JobExecution>> {
    device(thing, options.request()).map(|c| jobs_answer(c)?.execution())
}

/// The latest execution of `job_id` on `thing`, with its document.
pub fn describe_execution(thing: &str, job_id: &str) -> Call<impl Start, JobExecution> {
    device(thing, describe(ExecutionRef::Job(job_id.to_owned())))
        .map(|c| described(jobs_answer(c)?.execution()?))
}

/// `thing`'s first pending execution, with its document; `None` when nothing is pending.
pub fn describe_next(thing: &str) -> Call<impl Start, Option<JobExecution>> {
    device(thing, describe(ExecutionRef::Next)).map(|c| jobs_answer(c)?.execution())
}

/// Updates an execution of `thing` (its status, details, step timer); rejected with
/// `VersionMismatch` when `expected_version` is set and differs.
pub fn update(thing: &str, update: Update) -> Call<impl Start, UpdateAccepted> {
    device(thing, DeviceRequest::Update(update)).map(|c| jobs_answer(c)?.read())
}

/// Asks the command service to send `request` to a device: the device's answer, DELIVERED
/// (one-way) or SENT (detached).
pub fn command(request: impl Borrow<CommandRequest>) -> Call<impl Start, CommandReply> {
    Call {
        start: move |session: &mut Session, now| Ok(session.command(request.borrow(), now)),
        finish: command_reply,
    }
}

/// Command `id`'s status record (kept three timeouts after it was sent).
pub fn command_status(id: &str) -> Call<impl Start, Record> {
    Call {
        start: move |session: &mut Session, now| {
            Ok(session.command_status(id, DEFAULT_TIMEOUT_MS, now))
        },
        finish: status_record,
    }
}

/// A stored-commands call (create, get, list, delete): the service's answer.
pub fn command_definitions(
    request: impl Borrow<DefinitionsRequest>,
) -> Call<impl Start, DefinitionsAnswer> {
    Call {
        start: move |session: &mut Session, now| {
            Ok(session.command_definitions(request.borrow(), DEFINITIONS_TIMEOUT_MS, now))
        },
        finish: |completion| definitions_reply(completion)?.read(),
    }
}

/// A stored-commands call given as its JSON (`{"op": "create" | "get" | "list" | "delete",
/// ...}`), sent as it is (the service checks it): the service's answer as JSON. For bindings
/// that hand JSON to their callers.
pub fn command_definitions_json(request: impl Borrow<Value>) -> Call<impl Start, Value> {
    Call {
        start: move |session: &mut Session, now| {
            Ok(session.command_definitions_json(request.borrow(), DEFINITIONS_TIMEOUT_MS, now))
        },
        finish: |completion| Ok(definitions_reply(completion)?.into_json()),
    }
}

/// A request on `thing`'s shadow `name` (`None`: the classic one) that the client uses: `op`
/// with `body` (see [`Session::shadow`]); the `/accepted` document.
pub fn shadow(
    thing: &str,
    name: Option<&str>,
    op: mqstore_core::shadow::Op,
    body: Value,
) -> Call<impl Start, Value> {
    Call {
        start: move |session: &mut Session, now| session.shadow(thing, name, op, &body, None, now),
        finish: |completion| Ok(jobs_answer(completion)?.into_json()),
    }
}
