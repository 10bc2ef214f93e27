//! Jobs (AWS IoT Jobs' MQTT API): the operator calls on the client, and the device side as a
//! `Jobs` handle per thing. Answers are the core's records as Python dicts, in the AWS shape
//! (camelCase keys).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mqstore_core::client::ClientError;
use mqstore_core::client::jobs::Update;
use mqstore_core::jobs::{Status, check_operator_call};
use mqstore_net::jobs::{ExecutionFilter, Jobs as CoreJobs, StartNext};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::client::{Client, same_process};
use crate::errors::Failure;
use crate::runtime::{ToPy, client, run};
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

#[pymethods]
impl Client {
    /// Any operator call: `request` is its JSON text (`{"op": ..., ...}` with AWS's
    /// fields); the answer as Python values.
    fn jobs_operate(&self, py: Python<'_>, request: &str, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let request: serde_json::Value = serde_json::from_str(request)
            .map_err(|e| PyValueError::new_err(format!("the request is not JSON: {e}")))?;
        check_operator_call(&request).map_err(PyValueError::new_err)?;
        run(py, aio, async move {
            Json::of(&client(client_.operate_json(request).await)?)
        })
    }

    fn delete_job_execution(
        &self,
        py: Python<'_>,
        job_id: String,
        thing: String,
        force: bool,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        run(py, aio, async move {
            client(client_.delete_job_execution(&job_id, &thing, force).await)
        })
    }

    fn describe_job(&self, py: Python<'_>, job_id: String, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        run(py, aio, async move {
            Json::of(&client(client_.describe_job(&job_id).await)?)
        })
    }

    fn describe_job_execution(
        &self,
        py: Python<'_>,
        job_id: String,
        thing: String,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        run(py, aio, async move {
            Json::of(&client(
                client_.describe_job_execution(&job_id, &thing).await,
            )?)
        })
    }

    fn list_jobs(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        run(py, aio, async move {
            Json::of(&client(client_.list_jobs().await)?)
        })
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
        let client_ = self.live()?;
        let filter = ExecutionFilter {
            thing,
            job_id,
            status: status(status_)?,
        };
        run(py, aio, async move {
            Json::of(&client(client_.list_job_executions(filter).await)?)
        })
    }

    /// Acts as `thing` on the device API: subscribes to its replies and notifications.
    fn jobs(&self, py: Python<'_>, thing: String, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let pid = self.pid();
        run(py, aio, async move {
            let jobs = client(client_.jobs(&thing).await)?;
            Ok(Jobs {
                inner: Arc::new(jobs),
                pid,
            })
        })
    }
}

/// The device side of one thing.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Jobs {
    inner: Arc<CoreJobs>,
    pid: u32,
}

impl ToPy for Jobs {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

impl Jobs {
    fn live(&self) -> PyResult<Arc<CoreJobs>> {
        same_process(self.pid)?;
        Ok(self.inner.clone())
    }
}

#[pymethods]
impl Jobs {
    #[getter]
    fn thing(&self) -> &str {
        self.inner.thing()
    }

    fn pending(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let jobs = self.live()?;
        run(
            py,
            aio,
            async move { Json::of(&client(jobs.pending().await)?) },
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
        let jobs = self.live()?;
        let options = StartNext {
            status_details,
            step_timeout: step_timeout_ms.map(Duration::from_millis),
        };
        run(py, aio, async move {
            client(jobs.start_next(options).await)?
                .map(|e| Json::of(&e))
                .transpose()
        })
    }

    fn describe(&self, py: Python<'_>, job_id: String, aio: bool) -> PyResult<Py<PyAny>> {
        let jobs = self.live()?;
        run(py, aio, async move {
            Json::of(&client(jobs.describe(&job_id).await)?)
        })
    }

    fn describe_next(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let jobs = self.live()?;
        run(py, aio, async move {
            client(jobs.describe_next().await)?
                .map(|e| Json::of(&e))
                .transpose()
        })
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
        let jobs = self.live()?;
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
        run(py, aio, async move {
            Json::of(&client(jobs.update(update).await)?)
        })
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
        let jobs = self.live()?;
        run(py, aio, async move {
            let next = match timeout_ms {
                None => jobs.next_notification().await,
                Some(ms) => {
                    tokio::time::timeout(Duration::from_millis(ms), jobs.next_notification())
                        .await
                        .ok()
                        .flatten()
                }
            };
            next.map(|n| Json::of(&n)).transpose()
        })
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
