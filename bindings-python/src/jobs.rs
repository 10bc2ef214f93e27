//! Jobs (AWS IoT Jobs' MQTT API): the operator calls on the client, and the device side as a
//! `Jobs` handle per thing. Answers are the core's records as Python dicts, in the AWS shape
//! (camelCase keys).

use std::collections::BTreeMap;
use std::time::Duration;

use mqstore_core::client::ClientError;
use mqstore_core::client::jobs::{JobNotification, Update};
use mqstore_core::jobs::{OperatorRequest, PageRequest, Status, check_operator_call};
use mqstore_net::blocking::calls;
use mqstore_net::jobs::StartNext;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::client::{Client, Conn, Stream, call, json_listener, kind, same_process, subscribed};
use crate::errors::Failure;
use crate::runtime::ToPy;
use crate::types::Json;

fn status(text: Option<&str>) -> PyResult<Option<Status>> {
    text.map(|t| {
        serde_json::from_value(serde_json::Value::String(t.to_owned())).map_err(|_| {
            PyValueError::new_err(format!(
                "unknown job execution status {t:?}: QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, \
                 TIMED_OUT, REJECTED, REMOVED or CANCELED"
            ))
        })
    })
    .transpose()
}

/// The operator call `op` with `args` (JSON text: AWS's request fields and the shorthands
/// every client shares, `mqstore_core::jobs::operator_call`) as the request's JSON text.
#[pyfunction]
pub(crate) fn operator_call(op: &str, args: &str) -> PyResult<String> {
    let args = serde_json::from_str(args)
        .map_err(|e| PyValueError::new_err(format!("the arguments are not JSON: {e}")))?;
    mqstore_core::jobs::operator_call(op, args)
        .map(|request| request.to_string())
        .map_err(PyValueError::new_err)
}

/// An operator call's answer (the record or list it asks for) as the service sent it, into
/// Python values: not read as a Rust type and written again. The operator API is mqstore's
/// own, so its answers are the records Python's types describe; and the wheel carries no
/// reader of them (`JobDescription`'s alone, with its flattened settings, was 31 KB of code).
fn operate(py: Python<'_>, conn: Conn, request: OperatorRequest) -> PyResult<Py<PyAny>> {
    call!(py, conn, calls::operate(request), |answer| Ok(Json(
        answer.into_json()
    )))
}

#[pymethods]
impl Client {
    /// Any operator call: `request` is its JSON text (`{"op": ..., ...}` with AWS's
    /// fields); the answer as Python values.
    fn jobs_operate(&self, py: Python<'_>, request: &str, aio: bool) -> PyResult<Py<PyAny>> {
        let request: serde_json::Value = serde_json::from_str(request)
            .map_err(|e| PyValueError::new_err(format!("the request is not JSON: {e}")))?;
        check_operator_call(&request).map_err(PyValueError::new_err)?;
        call!(
            py,
            self.live(aio)?,
            calls::operate_json(&request),
            |answer| Ok(Json(answer.into_json()))
        )
    }

    fn delete_job_execution(
        &self,
        py: Python<'_>,
        job_id: String,
        thing: String,
        force: bool,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let call = calls::delete_job_execution(&job_id, &thing, force);
        call!(py, self.live(aio)?, call)
    }

    fn describe_job(&self, py: Python<'_>, job_id: String, aio: bool) -> PyResult<Py<PyAny>> {
        operate(py, self.live(aio)?, OperatorRequest::DescribeJob { job_id })
    }

    fn describe_job_execution(
        &self,
        py: Python<'_>,
        job_id: String,
        thing: String,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let request = OperatorRequest::DescribeExecution { job_id, thing };
        operate(py, self.live(aio)?, request)
    }

    fn list_jobs(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        operate(py, self.live(aio)?, OperatorRequest::list_jobs())
    }

    #[pyo3(signature = (thing, job_id, status_, aio))]
    fn list_job_executions(
        &self,
        py: Python<'_>,
        thing: Option<String>,
        job_id: Option<String>,
        status_: Option<&str>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let request = OperatorRequest::ListExecutions {
            thing,
            job_id,
            status: status(status_)?,
            page: PageRequest::default(),
        };
        operate(py, self.live(aio)?, request)
    }

    /// Acts as `thing` on the device API: subscribes to its replies and notifications.
    fn jobs(&self, py: Python<'_>, thing: String, aio: bool) -> PyResult<Py<PyAny>> {
        let (conn, pid) = (self.live(aio)?, self.pid());
        let (acting, on) = (thing.clone(), conn.clone());
        subscribed(
            py,
            conn,
            |py, notification| Json(notification).to_py(py),
            move |c, listener, deliver| {
                let listener = json_listener(listener, |heard: JobNotification| {
                    serde_json::to_value(heard).unwrap_or_default()
                });
                match deliver {
                    None => c.jobs_with(&acting, listener).map(drop),
                    Some(deliver) => {
                        c.start_jobs_with(&acting, listener, deliver);
                        Ok(())
                    }
                }
            },
            move |notifications| Jobs {
                conn: on,
                thing,
                notifications,
                pid,
            },
        )
    }
}

/// The device side of one thing.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Jobs {
    conn: Conn,
    thing: String,
    notifications: Stream<serde_json::Value>,
    pid: u32,
}

impl ToPy for Jobs {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

impl Jobs {
    /// The connection, unless this is a forked child or `aio` is not its client's kind.
    fn live(&self, aio: bool) -> PyResult<Conn> {
        same_process(self.pid)?;
        kind(&self.conn, aio)?;
        Ok(self.conn.clone())
    }
}

#[pymethods]
impl Jobs {
    #[getter]
    fn thing(&self) -> &str {
        &self.thing
    }

    fn pending(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        call!(
            py,
            self.live(aio)?,
            calls::pending(&self.thing),
            |pending| Json::of(&pending)
        )
    }

    #[pyo3(signature = (status_details, step_timeout_ms, aio))]
    fn start_next(
        &self,
        py: Python<'_>,
        status_details: BTreeMap<String, String>,
        step_timeout_ms: Option<u64>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let options = StartNext {
            status_details,
            step_timeout: step_timeout_ms.map(Duration::from_millis),
        };
        let call = calls::start_next(&self.thing, options);
        call!(py, self.live(aio)?, call, |started| started
            .map(|e| Json::of(&e))
            .transpose())
    }

    fn describe(&self, py: Python<'_>, job_id: String, aio: bool) -> PyResult<Py<PyAny>> {
        let call = calls::describe_execution(&self.thing, &job_id);
        call!(py, self.live(aio)?, call, |execution| Json::of(&execution))
    }

    fn describe_next(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        call!(
            py,
            self.live(aio)?,
            calls::describe_next(&self.thing),
            |next| next.map(|e| Json::of(&e)).transpose()
        )
    }

    #[pyo3(signature = (job_id, status_, status_details, expected_version, execution_number, step_timeout_ms, include_state, include_document, aio))]
    #[allow(clippy::too_many_arguments)]
    fn update(
        &self,
        py: Python<'_>,
        job_id: String,
        status_: Option<&str>,
        status_details: BTreeMap<String, String>,
        expected_version: Option<u64>,
        execution_number: Option<u64>,
        step_timeout_ms: Option<u64>,
        include_state: bool,
        include_document: bool,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let update = Update {
            job_id,
            status: status(status_)?,
            status_details,
            expected_version,
            execution_number,
            // AWS takes whole minutes: rounded up.
            step_timeout_minutes: step_timeout_ms.map(|ms| ms.div_ceil(60_000).max(1)),
            include_state,
            include_document,
        };
        let call = calls::update(&self.thing, update);
        call!(py, self.live(aio)?, call, |accepted| Json::of(&accepted))
    }

    /// The next notification (`{"kind": "notify" | "notify-next", ...}`); `None` when
    /// `timeout_ms` passed first or the client closed.
    #[pyo3(signature = (timeout_ms, aio))]
    fn next_notification(
        &self,
        py: Python<'_>,
        timeout_ms: Option<u64>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        self.notifications.next(py, timeout_ms, aio)
    }
}

impl Json {
    /// A core record as JSON (its serde form: the AWS shape).
    pub fn of<T: serde::Serialize>(value: &T) -> Result<Json, Failure> {
        serde_json::to_value(value)
            .map(Json)
            .map_err(|e| Failure::Client(ClientError::Malformed(e.to_string())))
    }
}
