//! The native client: `mqstore_net::client::Client` and `net::lease` behind Python classes.
//! Every call takes `aio`: false waits with the GIL released, true returns an asyncio future.
//! Arguments arrive checked and converted by the Python layer (`mqstore/_client.py`).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use mqstore_core::codec::Condition;
use mqstore_net::client::{
    Client as CoreClient, ClientOptions, Observation as CoreObservation, ScanPages, SetOptions,
};
use mqstore_net::lease::{self, Lease as CoreLease};
use mqstore_net::{TlsConfig, random_u64};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::errors::Failure;
use crate::runtime::{ToPy, client, run};
use crate::types::{Hlc, Keys, py_bytes};

/// Bytes that Python owns, shared with Rust without a copy.
pub(crate) fn shared(bytes: PyBackedBytes) -> Bytes {
    Bytes::from_owner(bytes)
}

fn token(fencing_token: Option<PyRef<'_, Hlc>>) -> Option<mqstore_core::hlc::Hlc> {
    fencing_token.map(|t| t.0.clone())
}

/// A connection to the broker, for the state store. Usable from any thread of the process
/// that made it.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Client {
    inner: CoreClient,
    /// The process that connected: after `fork()` the child has none of its threads.
    pid: u32,
}

/// Fails in a child process that inherited, through `fork()`, what `owner` made: the
/// connection's threads do not exist there, and waiting for them would hang.
pub(crate) fn same_process(owner: u32) -> PyResult<()> {
    let pid = std::process::id();
    if pid != owner {
        return Err(crate::errors::forked(owner, pid));
    }
    Ok(())
}

impl Client {
    /// The client, unless this is a child process that inherited it through `fork()`.
    pub(crate) fn live(&self) -> PyResult<CoreClient> {
        same_process(self.pid)?;
        Ok(self.inner.clone())
    }

    /// The process that connected.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }
}

impl ToPy for Client {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

#[pymethods]
impl Client {
    /// Connects; returns once the client can make calls.
    #[staticmethod]
    #[pyo3(signature = (host, port, client_id, username, password, ca_file, cert_file, key_file, timeout_ms, aio))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        host: String,
        port: u16,
        client_id: Option<String>,
        username: Option<String>,
        password: Option<String>,
        ca_file: Option<std::path::PathBuf>,
        cert_file: Option<std::path::PathBuf>,
        key_file: Option<std::path::PathBuf>,
        timeout_ms: u64,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_id =
            client_id.unwrap_or_else(|| format!("mqstore-py-{:08x}", random_u64() as u32));
        let mut options = ClientOptions::new(client_id, host, port);
        options.timeout = Duration::from_millis(timeout_ms);
        options.broker.username = username;
        options.broker.password = password;
        if let Some(ca) = &ca_file {
            let client_auth = cert_file.as_deref().zip(key_file.as_deref());
            let tls = TlsConfig::from_files(ca, client_auth)
                .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
            options.broker.tls = Some(tls);
        }
        run(py, aio, async move {
            let inner = client(CoreClient::connect(options).await)?;
            Ok(Client {
                inner,
                pid: std::process::id(),
            })
        })
    }

    #[getter]
    fn client_id(&self) -> &str {
        self.inner.client_id()
    }

    #[pyo3(signature = (key, value, condition, expires_ms, persist, fencing_token, aio))]
    #[allow(clippy::too_many_arguments)]
    fn set(
        &self,
        py: Python<'_>,
        key: PyBackedBytes,
        value: PyBackedBytes,
        condition: &str,
        expires_ms: Option<u64>,
        persist: bool,
        fencing_token: Option<PyRef<'_, Hlc>>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let options = SetOptions {
            condition: match condition {
                "" => Condition::Always,
                "nx" => Condition::NotExists,
                "nex" => Condition::NotExistsOrEqual,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "unknown SET condition {other:?}"
                    )));
                }
            },
            expires: expires_ms.map(Duration::from_millis),
            persist,
            fencing_token: token(fencing_token),
        };
        let (key, value) = (shared(key), shared(value));
        run(py, aio, async move {
            client(client_.set(key, value, options).await)
        })
    }

    fn get(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let key = shared(key);
        run(py, aio, async move { client(client_.get(key).await) })
    }

    #[pyo3(signature = (key, fencing_token, aio))]
    fn delete(
        &self,
        py: Python<'_>,
        key: PyBackedBytes,
        fencing_token: Option<PyRef<'_, Hlc>>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let (key, fencing_token) = (shared(key), token(fencing_token));
        run(py, aio, async move {
            client(client_.del(key, fencing_token).await)
        })
    }

    #[pyo3(signature = (key, value, fencing_token, aio))]
    fn vdel(
        &self,
        py: Python<'_>,
        key: PyBackedBytes,
        value: PyBackedBytes,
        fencing_token: Option<PyRef<'_, Hlc>>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let (key, value, fencing_token) = (shared(key), shared(value), token(fencing_token));
        run(py, aio, async move {
            client(client_.vdel(key, value, fencing_token).await)
        })
    }

    /// The keys matching `pattern`, page by page (nothing is sent until the first page).
    fn scan(&self, pattern: PyBackedBytes) -> PyResult<Scan> {
        let pages = self.live()?.scan_pages(shared(pattern));
        Ok(Scan {
            pages: Arc::new(tokio::sync::Mutex::new(pages)),
            pid: self.pid,
        })
    }

    fn observe(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let (key, pid) = (shared(key), self.pid);
        run(py, aio, async move {
            let observation = client(client_.observe(key.clone()).await)?;
            Ok(Observation {
                key,
                pid,
                changes: Arc::new(tokio::sync::Mutex::new(observation)),
                ended: Arc::new(AtomicBool::new(false)),
            })
        })
    }

    fn unobserve(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let key = shared(key);
        run(py, aio, async move { client(client_.unobserve(key).await) })
    }

    /// Takes the lease on `key` for `ttl_ms`: tries once (`wait_ms` None) or waits up to
    /// `wait_ms` for it to be free. `None` when not acquired.
    #[pyo3(signature = (key, ttl_ms, wait_ms, aio))]
    fn lease(
        &self,
        py: Python<'_>,
        key: PyBackedBytes,
        ttl_ms: u64,
        wait_ms: Option<u64>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let (key, ttl) = (shared(key), Duration::from_millis(ttl_ms));
        run(py, aio, async move {
            let lease = match wait_ms {
                None => CoreLease::try_acquire(&client_, key, ttl).await,
                Some(wait) => {
                    CoreLease::acquire(&client_, key, ttl, Some(Duration::from_millis(wait))).await
                }
            };
            Ok(client(lease)?.map(Lease::new))
        })
    }

    /// Campaigns until this client holds the lease on `key`.
    fn lead(
        &self,
        py: Python<'_>,
        key: PyBackedBytes,
        ttl_ms: u64,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_ = self.live()?;
        let (key, ttl) = (shared(key), Duration::from_millis(ttl_ms));
        run(py, aio, async move {
            Ok(Lease::new(client(lease::lead(&client_, key, ttl).await)?))
        })
    }

    /// Disconnects; calls in flight fail with a connection-lost error.
    fn close(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        // A forked child has no connection to close: closing there is a no-op.
        let Ok(client_) = self.live() else {
            return run(py, aio, async { Ok(()) });
        };
        run(py, aio, async move {
            client_.close().await;
            Ok(())
        })
    }
}

/// A SCAN in progress.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Scan {
    pages: Arc<tokio::sync::Mutex<ScanPages>>,
    pid: u32,
}

#[pymethods]
impl Scan {
    /// The next page of keys (possibly empty), or `None` after the last.
    fn next_page(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        let pages = self.pages.clone();
        run(py, aio, async move {
            let page = pages.lock().await.next_page().await;
            Ok(client(page.transpose())?.map(Keys))
        })
    }
}

/// The changes of one observed key.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Observation {
    key: Bytes,
    pid: u32,
    changes: Arc<tokio::sync::Mutex<CoreObservation>>,
    ended: Arc<AtomicBool>,
}

impl ToPy for Observation {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

#[pymethods]
impl Observation {
    #[getter]
    fn key(&self, py: Python<'_>) -> Py<PyBytes> {
        py_bytes(py, &self.key)
    }

    /// True once a `next` found the observation ended (unobserved, or the client closed).
    #[getter]
    fn ended(&self) -> bool {
        self.ended.load(Ordering::Relaxed)
    }

    /// The next change; `None` when `timeout_ms` passed first or the observation ended.
    #[pyo3(signature = (timeout_ms, aio))]
    fn next(&self, py: Python<'_>, timeout_ms: Option<u64>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        let (changes, ended) = (self.changes.clone(), self.ended.clone());
        run(py, aio, async move {
            let mut changes = changes.lock().await;
            let next = match timeout_ms {
                None => changes.next().await,
                Some(ms) => {
                    match tokio::time::timeout(Duration::from_millis(ms), changes.next()).await {
                        Ok(next) => next,
                        Err(_) => return Ok(None),
                    }
                }
            };
            if next.is_none() {
                ended.store(true, Ordering::Relaxed);
            }
            Ok::<_, Failure>(next)
        })
    }
}

/// A held lease, renewed in the background until released or lost.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Lease {
    inner: Mutex<Option<CoreLease>>,
    pid: u32,
    key: Bytes,
    fencing_token: mqstore_core::hlc::Hlc,
}

impl Lease {
    fn new(lease: CoreLease) -> Self {
        Lease {
            key: lease.key().clone(),
            fencing_token: lease.fencing_token().clone(),
            inner: Mutex::new(Some(lease)),
            pid: std::process::id(),
        }
    }

    fn take(&self) -> Option<CoreLease> {
        self.inner.lock().ok().and_then(|mut l| l.take())
    }
}

impl ToPy for Lease {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

#[pymethods]
impl Lease {
    #[getter]
    fn key(&self, py: Python<'_>) -> Py<PyBytes> {
        py_bytes(py, &self.key)
    }

    /// The version of the SET that took the lease: pass it with writes the lease guards.
    #[getter]
    fn fencing_token(&self) -> Hlc {
        Hlc(self.fencing_token.clone())
    }

    /// False once released, or once a renewal found someone else holding the key.
    #[getter]
    fn held(&self) -> bool {
        self.inner
            .lock()
            .ok()
            .and_then(|l| l.as_ref().map(CoreLease::is_held))
            .unwrap_or(false)
    }

    /// Releases the lease; true when it was still held. Releasing twice returns false.
    fn release(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        let lease = self.take();
        run(py, aio, async move {
            match lease {
                Some(lease) => client(lease.release().await),
                None => Ok(false),
            }
        })
    }
}
