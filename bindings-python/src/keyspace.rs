//! Keyspace events for Python: `Client.watch_keyspace()`, the keys made and deleted from now
//! on (`mqstore_net::client::Client::watch_keyspace`).

use std::sync::Arc;
use std::time::Duration;

use mqstore_net::client::KeyspaceWatch as CoreWatch;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::client::{Client, same_process};
use crate::runtime::{ToPy, client, run};

#[pymethods]
impl Client {
    fn watch_keyspace(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let pid = self.pid();
        run(py, aio, async move {
            let watch = client(client_.watch_keyspace().await)?;
            Ok(KeyspaceWatch {
                events: Arc::new(tokio::sync::Mutex::new(watch)),
                pid,
            })
        })
    }
}

/// The keys made and deleted: `(key, created)` pairs.
#[pyclass(frozen, module = "mqstore._native")]
pub struct KeyspaceWatch {
    events: Arc<tokio::sync::Mutex<CoreWatch>>,
    pid: u32,
}

impl ToPy for KeyspaceWatch {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

/// One event as Python sees it: `(key, created)`.
struct Event(mqstore_net::client::KeyspaceEvent);

impl ToPy for Event {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let pair = (PyBytes::new(py, &self.0.key), self.0.created);
        Ok(pair.into_pyobject(py)?.into_any().unbind())
    }
}

#[pymethods]
impl KeyspaceWatch {
    /// The next event; `None` when `timeout_ms` passed first or the client closed.
    #[pyo3(signature = (timeout_ms, aio))]
    fn next(&self, py: Python<'_>, timeout_ms: Option<u64>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        let events = self.events.clone();
        run(py, aio, async move {
            let mut events = events.lock().await;
            let next = match timeout_ms {
                None => events.next().await,
                Some(ms) => tokio::time::timeout(Duration::from_millis(ms), events.next())
                    .await
                    .ok()
                    .flatten(),
            };
            Ok(next.map(Event))
        })
    }
}
