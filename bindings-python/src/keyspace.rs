//! Keyspace events for Python: `Client.watch_keyspace()`, the keys made and deleted from now
//! on (`mqstore_net::client::Client::watch_keyspace`).

use mqstore_net::client::{KeyspaceEvent, KeyspaceWatch as AsyncWatch};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::client::{Client, Stream, either, same_process};
use crate::runtime::ToPy;

#[pymethods]
impl Client {
    fn watch_keyspace(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let pid = self.pid();
        either!(py, self.live(aio)?, |c| c.watch_keyspace(), |watch| {
            Ok(KeyspaceWatch {
                events: Stream::from(watch),
                pid,
            })
        })
    }
}

/// The keys made and deleted: `(key, created)` pairs.
#[pyclass(frozen, module = "mqstore._native")]
pub struct KeyspaceWatch {
    events: Stream<AsyncWatch, KeyspaceEvent>,
    pid: u32,
}

impl ToPy for KeyspaceWatch {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

/// One event as Python sees it: `(key, created)`.
struct Event(KeyspaceEvent);

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
        self.events.next(
            py,
            timeout_ms,
            aio,
            None,
            |mut events| async move {
                let next = events.next().await;
                let end = next.is_none();
                Ok((next.map(Event), end))
            },
            |event| Ok(Event(event)),
        )
    }
}
