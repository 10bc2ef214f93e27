//! Keyspace events for Python: `Client.watch_keyspace()`, the keys made and deleted from now
//! on (`mqstore_net::client::Client::watch_keyspace`).

use mqstore_net::client::KeyspaceEvent;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::client::{Client, Stream, same_process, subscribed};
use crate::runtime::ToPy;

#[pymethods]
impl Client {
    fn watch_keyspace(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        let pid = self.pid();
        subscribed(
            py,
            self.live(aio)?,
            |py, event: KeyspaceEvent| Event(event).to_py(py),
            |c, listener, deliver| match deliver {
                None => c.watch_keyspace_with(listener),
                Some(deliver) => {
                    c.start_watch_keyspace(listener, deliver);
                    Ok(())
                }
            },
            move |events| KeyspaceWatch { events, pid },
        )
    }
}

/// The keys made and deleted: `(key, created)` pairs.
#[pyclass(frozen, module = "mqstore._native")]
pub struct KeyspaceWatch {
    events: Stream<KeyspaceEvent>,
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
        self.events.next(py, timeout_ms, aio)
    }
}
