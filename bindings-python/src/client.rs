//! The native client: `mqstore_net::blocking::Client` (for `mqstore.Client`: each call made
//! on the calling thread) or `mqstore_net::client::Client` (for `mqstore.AsyncClient`: calls
//! as asyncio futures), chosen at connect by `aio`, with `net::lease` behind Python classes.
//! Every call takes `aio` too, and it must name the client's kind. Arguments arrive checked
//! and converted by the Python layer (`mqstore/_client.py`).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use mqstore_core::codec::Condition;
use mqstore_net::blocking;
use mqstore_net::client::{
    Client as AsyncClient, ClientOptions, KeyChange, Observation as AsyncObservation, ScanPages,
    SetOptions,
};
use mqstore_net::lease::{self, Lease as AsyncLease};
use mqstore_net::{TlsConfig, random_u64};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyBytes;

use crate::errors::Failure;
use crate::runtime::{ToPy, awaitable, client, receive};
use crate::types::{Hlc, Keys, py_bytes};

/// Bytes that Python owns, shared with Rust without a copy.
pub(crate) fn shared(bytes: PyBackedBytes) -> Bytes {
    Bytes::from_owner(bytes)
}

fn token(fencing_token: Option<PyRef<'_, Hlc>>) -> Option<mqstore_core::hlc::Hlc> {
    fencing_token.map(|t| t.0.clone())
}

/// The connection a native client drives (or a handle made from it, as a thing's jobs).
#[derive(Clone)]
pub(crate) enum Core<B = blocking::Client, A = AsyncClient> {
    /// `mqstore.Client`'s: calls run on the calling thread.
    Blocking(B),
    /// `mqstore.AsyncClient`'s: calls run on the module's tokio runtime.
    Async(A),
}

/// A call of the other kind of client than the one connected: a bug of the Python layer.
pub(crate) fn other_kind() -> PyErr {
    PyRuntimeError::new_err(
        "internal error in mqstore: a call of the other kind of client (a bug: please report it)",
    )
}

/// A call of either kind of client, given as the same method call on both (awaited on the
/// async one): the blocking one's made now on this thread, the async one's returned as an
/// asyncio future. `then` turns the call's value into what Python gets.
macro_rules! either {
    ($py:expr, $core:expr, |$c:ident| $call:expr) => {
        either!($py, $core, |$c| $call, |value| Ok(value))
    };
    ($py:expr, $core:expr, |$c:ident| $call:expr, |$value:ident| $then:expr) => {
        match $core {
            $crate::client::Core::Blocking($c) => $crate::runtime::blocking($py, move || {
                let $value = $crate::runtime::client($call)?;
                $then
            }),
            $crate::client::Core::Async($c) => $crate::runtime::awaitable($py, async move {
                let $value = $crate::runtime::client($call.await)?;
                $then
            }),
        }
    };
}
pub(crate) use either;

/// A connection to the broker, for the state store. Usable from any thread of the process
/// that made it.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Client {
    core: Core,
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
    /// The connection, unless this is a child process that inherited it through `fork()` or
    /// `aio` does not name its kind (a bug of the Python layer).
    pub(crate) fn live(&self, aio: bool) -> PyResult<Core> {
        same_process(self.pid)?;
        if aio != matches!(self.core, Core::Async(_)) {
            return Err(other_kind());
        }
        Ok(self.core.clone())
    }

    /// The process that connected.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The connection, whichever kind it is.
    pub(crate) fn core(&self) -> Core {
        self.core.clone()
    }
}

impl ToPy for Client {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

/// Changes, or notifications, or records, as either kind of client delivers them: an async
/// stream (`A`), or a channel a blocking client's listener fills.
pub(crate) enum Stream<A, T> {
    Async(Arc<tokio::sync::Mutex<A>>),
    Blocking(Arc<Mutex<mpsc::Receiver<T>>>),
}

impl<A, T> Clone for Stream<A, T> {
    fn clone(&self) -> Self {
        match self {
            Stream::Async(a) => Stream::Async(a.clone()),
            Stream::Blocking(b) => Stream::Blocking(b.clone()),
        }
    }
}

/// A blocking client's stream: its listener's channel.
impl<A, T> From<mpsc::Receiver<T>> for Stream<A, T> {
    fn from(items: mpsc::Receiver<T>) -> Self {
        Stream::Blocking(Arc::new(Mutex::new(items)))
    }
}

/// The async client's streams.
macro_rules! async_streams {
    ($($stream:ty),*) => {$(
        impl<T> From<$stream> for Stream<$stream, T> {
            fn from(stream: $stream) -> Self {
                Stream::Async(Arc::new(tokio::sync::Mutex::new(stream)))
            }
        }
    )*};
}

async_streams!(
    AsyncObservation,
    mqstore_net::commands::CommandWatch,
    mqstore_net::client::KeyspaceWatch,
    Arc<mqstore_net::jobs::Jobs>
);

impl<A: Send + 'static, T: Send + 'static> Stream<A, T> {
    /// The next item, waiting up to `timeout_ms` (`None`: until one comes): blocking (`aio`
    /// false) or as an asyncio future. `next` takes the async stream's next item; `ended`, if
    /// given, is set once the stream is found ended.
    pub(crate) fn next<R, F>(
        &self,
        py: Python<'_>,
        timeout_ms: Option<u64>,
        aio: bool,
        ended: Option<Arc<AtomicBool>>,
        next: impl FnOnce(tokio::sync::OwnedMutexGuard<A>) -> F + Send + 'static,
        then: impl FnOnce(T) -> Result<R, Failure> + Send + 'static,
    ) -> PyResult<Py<PyAny>>
    where
        F: std::future::Future<Output = Result<(Option<R>, bool), Failure>> + Send + 'static,
        R: ToPy,
    {
        let timeout = timeout_ms.map(Duration::from_millis);
        match (self, aio) {
            (Stream::Blocking(items), false) => {
                match receive(py, items, timeout, ended.as_deref())? {
                    Some(item) => then(item).map_err(|e| e.into_py_err(py))?.to_py(py),
                    None => Ok(py.None()),
                }
            }
            (Stream::Async(stream), true) => {
                let stream = stream.clone();
                awaitable(py, async move {
                    let guard = stream.lock_owned().await;
                    let (item, end) = match timeout {
                        None => next(guard).await?,
                        Some(t) => match tokio::time::timeout(t, next(guard)).await {
                            Ok(next) => next?,
                            Err(_) => return Ok(None),
                        },
                    };
                    if let (true, Some(ended)) = (end, ended) {
                        ended.store(true, Ordering::Relaxed);
                    }
                    Ok::<_, Failure>(item)
                })
            }
            _ => Err(other_kind()),
        }
    }
}

#[pymethods]
impl Client {
    /// Connects; returns once the client can make calls. `aio`: an `AsyncClient`'s (its calls
    /// return asyncio futures), or a blocking `Client`'s.
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
        let pid = std::process::id();
        if aio {
            awaitable(py, async move {
                let core = Core::Async(client(AsyncClient::connect(options).await)?);
                Ok(Client { core, pid })
            })
        } else {
            crate::runtime::blocking(py, move || {
                let core = Core::Blocking(client(blocking::Client::connect(options))?);
                Ok(Client { core, pid })
            })
        }
    }

    #[getter]
    fn client_id(&self) -> &str {
        match &self.core {
            Core::Blocking(c) => c.client_id(),
            Core::Async(c) => c.client_id(),
        }
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
        let core = self.live(aio)?;
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
        either!(py, core, |c| c.set(key, value, options))
    }

    fn get(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let key = shared(key);
        either!(py, self.live(aio)?, |c| c.get(key))
    }

    #[pyo3(signature = (key, fencing_token, aio))]
    fn delete(
        &self,
        py: Python<'_>,
        key: PyBackedBytes,
        fencing_token: Option<PyRef<'_, Hlc>>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let (key, fencing_token) = (shared(key), token(fencing_token));
        either!(py, self.live(aio)?, |c| c.del(key, fencing_token))
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
        let (key, value, fencing_token) = (shared(key), shared(value), token(fencing_token));
        either!(py, self.live(aio)?, |c| c.vdel(key, value, fencing_token))
    }

    /// The keys matching `pattern`, page by page (nothing is sent until the first page).
    fn scan(&self, pattern: PyBackedBytes) -> PyResult<Scan> {
        same_process(self.pid)?;
        let pattern = shared(pattern);
        let pages = match &self.core {
            Core::Async(c) => {
                Pages::Async(Arc::new(tokio::sync::Mutex::new(c.scan_pages(pattern))))
            }
            Core::Blocking(c) => Pages::Blocking(
                c.clone(),
                Arc::new(Mutex::new(BlockingPages {
                    pattern,
                    token: None,
                    done: false,
                })),
            ),
        };
        Ok(Scan {
            pages,
            pid: self.pid,
        })
    }

    fn observe(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let (key, pid) = (shared(key), self.pid);
        let ended = Arc::new(AtomicBool::new(false));
        match self.live(aio)? {
            Core::Blocking(c) => crate::runtime::blocking(py, move || {
                let (tx, changes) = mpsc::channel();
                let listener = Box::new(move |change| tx.send(change).is_ok());
                client(c.observe_with(key.clone(), listener))?;
                Ok(Observation {
                    key,
                    pid,
                    changes: Stream::from(changes),
                    ended,
                })
            }),
            Core::Async(c) => awaitable(py, async move {
                let observation = client(c.observe(key.clone()).await)?;
                Ok(Observation {
                    key,
                    pid,
                    changes: Stream::from(observation),
                    ended,
                })
            }),
        }
    }

    fn unobserve(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let key = shared(key);
        either!(py, self.live(aio)?, |c| c.unobserve(key))
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
        let (key, ttl) = (shared(key), Duration::from_millis(ttl_ms));
        let wait = wait_ms.map(Duration::from_millis);
        match self.live(aio)? {
            Core::Blocking(c) => crate::runtime::blocking(py, move || {
                let lease = c.lease(key, ttl, Some(wait.unwrap_or(Duration::ZERO)));
                Ok(client(lease)?.map(|l| Lease::new(Held::Blocking(l))))
            }),
            Core::Async(c) => awaitable(py, async move {
                let lease = match wait {
                    None => AsyncLease::try_acquire(&c, key, ttl).await,
                    Some(wait) => AsyncLease::acquire(&c, key, ttl, Some(wait)).await,
                };
                Ok(client(lease)?.map(|l| Lease::new(Held::Async(l))))
            }),
        }
    }

    /// Campaigns until this client holds the lease on `key`.
    fn lead(
        &self,
        py: Python<'_>,
        key: PyBackedBytes,
        ttl_ms: u64,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let (key, ttl) = (shared(key), Duration::from_millis(ttl_ms));
        match self.live(aio)? {
            Core::Blocking(c) => crate::runtime::blocking(py, move || {
                Ok(Lease::new(Held::Blocking(client(c.lead(key, ttl))?)))
            }),
            Core::Async(c) => awaitable(py, async move {
                Ok(Lease::new(Held::Async(client(
                    lease::lead(&c, key, ttl).await,
                )?)))
            }),
        }
    }

    /// Disconnects; calls in flight fail with a connection-lost error.
    fn close(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        // A forked child has no connection to close: closing there is a no-op.
        let Ok(core) = self.live(aio) else {
            return if aio {
                awaitable(py, async { Ok(()) })
            } else {
                Ok(py.None())
            };
        };
        match core {
            Core::Blocking(c) => crate::runtime::blocking(py, move || {
                c.close();
                Ok(())
            }),
            Core::Async(c) => awaitable(py, async move {
                c.close().await;
                Ok(())
            }),
        }
    }
}

/// A SCAN in progress.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Scan {
    pages: Pages,
    pid: u32,
}

enum Pages {
    Async(Arc<tokio::sync::Mutex<ScanPages>>),
    Blocking(blocking::Client, Arc<Mutex<BlockingPages>>),
}

/// Where a blocking client's SCAN is.
struct BlockingPages {
    pattern: Bytes,
    token: Option<Bytes>,
    done: bool,
}

#[pymethods]
impl Scan {
    /// The next page of keys (possibly empty), or `None` after the last.
    fn next_page(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        match (&self.pages, aio) {
            (Pages::Async(pages), true) => {
                let pages = pages.clone();
                awaitable(py, async move {
                    let page = pages.lock().await.next_page().await;
                    Ok(client(page.transpose())?.map(Keys))
                })
            }
            (Pages::Blocking(c, pages), false) => {
                let (c, pages) = (c.clone(), pages.clone());
                crate::runtime::blocking(py, move || {
                    let mut pages = pages.lock().unwrap_or_else(|e| e.into_inner());
                    if pages.done {
                        return Ok(None);
                    }
                    let page = c.scan_page(pages.pattern.clone(), pages.token.take());
                    pages.done = !matches!(page, Ok((_, Some(_))));
                    let (keys, token) = client(page)?;
                    pages.token = token;
                    Ok(Some(Keys(keys)))
                })
            }
            _ => Err(other_kind()),
        }
    }
}

/// The changes of one observed key.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Observation {
    key: Bytes,
    pid: u32,
    changes: Stream<AsyncObservation, KeyChange>,
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
        self.changes.next(
            py,
            timeout_ms,
            aio,
            Some(self.ended.clone()),
            |mut changes| async move {
                let next = changes.next().await;
                let end = next.is_none();
                Ok((next, end))
            },
            Ok,
        )
    }
}

/// A held lease of either kind of client.
enum Held {
    Blocking(blocking::Lease),
    Async(AsyncLease),
}

/// A held lease, renewed in the background until released or lost.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Lease {
    inner: Mutex<Option<Held>>,
    pid: u32,
    key: Bytes,
    fencing_token: mqstore_core::hlc::Hlc,
}

impl Lease {
    fn new(lease: Held) -> Self {
        let (key, fencing_token) = match &lease {
            Held::Blocking(l) => (l.key().clone(), l.fencing_token().clone()),
            Held::Async(l) => (l.key().clone(), l.fencing_token().clone()),
        };
        Lease {
            key,
            fencing_token,
            inner: Mutex::new(Some(lease)),
            pid: std::process::id(),
        }
    }

    fn take(&self) -> Option<Held> {
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
            .and_then(|l| {
                l.as_ref().map(|held| match held {
                    Held::Blocking(l) => l.is_held(),
                    Held::Async(l) => l.is_held(),
                })
            })
            .unwrap_or(false)
    }

    /// Releases the lease; true when it was still held. Releasing twice returns false.
    fn release(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        match self.take() {
            Some(Held::Blocking(lease)) => {
                crate::runtime::blocking(py, move || client(lease.release()))
            }
            Some(Held::Async(lease)) => awaitable(py, async move { client(lease.release().await) }),
            None if aio => awaitable(py, async { Ok(false) }),
            None => false.to_py(py),
        }
    }
}
