//! Device shadows (AWS IoT's Device Shadow API): a `Shadow` handle per thing's classic or
//! named shadow — get, update, delete, and its deltas and documents. Documents are the
//! service's JSON as Python dicts; a rejection is a `StatusError` with AWS's code.

use mqstore_core::shadow::{Notification, Op, update_body};
use mqstore_net::blocking::calls;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::client::{Client, Conn, Stream, call, json_listener, kind, same_process, subscribed};
use crate::runtime::ToPy;
use crate::types::Json;

#[pymethods]
impl Client {
    /// Uses `thing`'s shadow `name` (`None`: the classic one): subscribes to its answers and
    /// notifications.
    #[pyo3(signature = (thing, name, aio))]
    fn shadow(
        &self,
        py: Python<'_>,
        thing: String,
        name: Option<String>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let (conn, pid) = (self.live(aio)?, self.pid());
        let (used, on) = ((thing.clone(), name.clone()), conn.clone());
        subscribed(
            py,
            conn,
            |py, notification| Json(notification).to_py(py),
            move |c, listener, deliver| {
                let (thing, name) = (&used.0, used.1.as_deref());
                let listener = json_listener(listener, |heard: Notification| heard.to_json());
                match deliver {
                    None => c.shadow_with(thing, name, listener).map(drop),
                    Some(deliver) => {
                        c.start_shadow_with(thing, name, listener, deliver);
                        Ok(())
                    }
                }
            },
            move |notifications| Shadow {
                conn: on,
                thing,
                name,
                notifications,
                pid,
            },
        )
    }
}

/// One thing's classic or named shadow.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Shadow {
    conn: Conn,
    thing: String,
    name: Option<String>,
    notifications: Stream<serde_json::Value>,
    pid: u32,
}

impl ToPy for Shadow {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

#[pymethods]
impl Shadow {
    /// A request on this shadow: `op` `get`, `update` (with `state`, JSON text of an object,
    /// and, if given, the `version` it applies at) or `delete`; its `/accepted` document.
    /// One method for the three keeps the wheel small.
    #[pyo3(signature = (op, state, version, aio))]
    fn request(
        &self,
        py: Python<'_>,
        op: &str,
        state: Option<&str>,
        version: Option<u64>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        kind(&self.conn, aio)?;
        let op = Op::parse(op).ok_or_else(|| PyValueError::new_err(format!("shadow op {op:?}")))?;
        let body = match state {
            None => serde_json::Value::Null,
            Some(state) => {
                let state = serde_json::from_str(state)
                    .map_err(|e| PyValueError::new_err(format!("the state is not JSON: {e}")))?;
                update_body(state, version)
            }
        };
        let call = calls::shadow(&self.thing, self.name.as_deref(), op, body);
        call!(py, self.conn.clone(), call, |document| Ok(Json(document)))
    }

    /// The next delta or documents (`{"stream": "delta" | "documents", "body": ...}`); `None`
    /// when `timeout_ms` passed first or the client closed.
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
