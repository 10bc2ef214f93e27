//! The native client: a `mqstore_net::blocking::Client` — for `mqstore.Client`, each call
//! made on the calling thread; for `mqstore.AsyncClient`, driven by the asyncio event loop
//! (`driven.rs`), each call an asyncio future resolved on the loop's thread. Every call takes
//! `aio`, and it must name the client's kind. Arguments arrive checked and converted by the
//! Python layer (`mqstore/_client.py`).

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use mqstore_core::codec::Condition;
use mqstore_net::blocking::{self, calls};
use mqstore_net::client::{ClientOptions, KeyChange, SetOptions};
use mqstore_net::{Listener, TlsConfig, random_u64};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyCFunction};

use crate::driven::{Driven, Queue, lock, running_loop};
use crate::errors::Failure;
use crate::runtime::{ToPy, client, enter_python, receive};
use crate::types::{Hlc, Keys, py_bytes};

/// Bytes that Python owns, shared with Rust without a copy.
pub(crate) fn shared(bytes: PyBackedBytes) -> Bytes {
    Bytes::from_owner(bytes)
}

fn token(fencing_token: Option<PyRef<'_, Hlc>>) -> Option<mqstore_core::hlc::Hlc> {
    fencing_token.map(|t| t.0.clone())
}

/// The connection a native client makes its calls on.
#[derive(Clone)]
pub(crate) struct Conn {
    pub client: blocking::Client,
    /// An `AsyncClient`'s event loop driving it; `None`: a blocking `Client`'s.
    pub driven: Option<Arc<Driven>>,
}

/// A call of the other kind of client than the one connected: a bug of the Python layer.
pub(crate) fn other_kind() -> PyErr {
    PyRuntimeError::new_err(
        "internal error in mqstore: a call of the other kind of client (a bug: please report it)",
    )
}

/// A call (`blocking::calls`) on either kind of client: a blocking one's made now on this
/// thread, a driven one's started and returned as an asyncio future. `then` turns the call's
/// value into what Python gets.
macro_rules! call {
    ($py:expr, $conn:expr, $call:expr) => {
        call!($py, $conn, $call, |value| Ok(value))
    };
    ($py:expr, $conn:expr, $call:expr, |$value:ident| $then:expr) => {{
        let conn: $crate::client::Conn = $conn;
        match conn.driven {
            None => {
                let c = conn.client;
                $crate::runtime::blocking($py, move || {
                    let $value = $crate::runtime::client(c.wait($call))?;
                    $then
                })
            }
            Some(driven) => driven.call($py, &conn.client, $call, move |$value| $then),
        }
    }};
}
pub(crate) use call;

/// A connection to the broker, for the state store. Usable from any thread of the process
/// that made it (an `AsyncClient`'s, from its loop's).
#[pyclass(frozen, module = "mqstore._native")]
pub struct Client {
    conn: Conn,
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

/// Fails unless `aio` names the kind of `conn` (a bug of the Python layer otherwise).
pub(crate) fn kind(conn: &Conn, aio: bool) -> PyResult<()> {
    if aio != conn.driven.is_some() {
        return Err(other_kind());
    }
    Ok(())
}

impl Client {
    /// The connection, unless this is a child process that inherited it through `fork()` or
    /// `aio` does not name its kind (a bug of the Python layer).
    pub(crate) fn live(&self, aio: bool) -> PyResult<Conn> {
        same_process(self.pid)?;
        kind(&self.conn, aio)?;
        Ok(self.conn.clone())
    }

    /// The process that connected.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// The connection, whichever kind it is, unless this is a forked child.
    pub(crate) fn conn(&self) -> PyResult<Conn> {
        same_process(self.pid)?;
        Ok(self.conn.clone())
    }
}

impl ToPy for Client {
    fn to_py(self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(Py::new(py, self)?.into_any())
    }
}

/// Changes, or notifications, or records, as either kind of client delivers them: a channel
/// that a blocking client's listener fills, or a driven client's [`Queue`].
pub(crate) enum Stream<T> {
    Blocking {
        items: Arc<Mutex<mpsc::Receiver<T>>>,
        ended: Arc<AtomicBool>,
        to_py: fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
    },
    Driven(Arc<Queue<T>>),
}

impl<T: Send + 'static> Stream<T> {
    /// A stream of `conn`'s kind, and the listener that feeds it; `ended` is set once a `next`
    /// finds it ended, `to_py` makes an item Python's.
    pub(crate) fn open(
        conn: &Conn,
        ended: Arc<AtomicBool>,
        to_py: fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
    ) -> (Listener<T>, Stream<T>) {
        match &conn.driven {
            None => {
                let (tx, items) = mpsc::channel();
                let listener: Listener<T> = Box::new(move |item| tx.send(item).is_ok());
                let items = Arc::new(Mutex::new(items));
                (
                    listener,
                    Stream::Blocking {
                        items,
                        ended,
                        to_py,
                    },
                )
            }
            Some(driven) => {
                let queue = Queue::new(driven.clone(), ended, to_py);
                (queue.listener(), Stream::Driven(queue))
            }
        }
    }

    /// The next item, waiting up to `timeout_ms` (`None`: until one comes): blocking (`aio`
    /// false) or as an asyncio future; `None` when the time passed or the stream ended.
    pub(crate) fn next(
        &self,
        py: Python<'_>,
        timeout_ms: Option<u64>,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let timeout = timeout_ms.map(Duration::from_millis);
        match (self, aio) {
            (
                Stream::Blocking {
                    items,
                    ended,
                    to_py,
                },
                false,
            ) => match receive(py, items, timeout, Some(ended))? {
                Some(item) => to_py(py, item),
                None => Ok(py.None()),
            },
            (Stream::Driven(queue), true) => queue.next(py, timeout),
            _ => Err(other_kind()),
        }
    }

    /// Whether a `next` found the stream ended.
    pub(crate) fn ended(&self) -> bool {
        match self {
            Stream::Blocking { ended, .. } => ended.load(Ordering::Relaxed),
            Stream::Driven(queue) => queue.ended(),
        }
    }
}

/// A listener of `T` that hands each one on to `listener` as JSON: jobs' and shadows'
/// notifications share one `Stream<Value>` (a stream's machinery made once, not per kind).
pub(crate) fn json_listener<T: 'static>(
    listener: Listener<serde_json::Value>,
    to_json: fn(T) -> serde_json::Value,
) -> Listener<T> {
    Box::new(move |item| listener(to_json(item)))
}

/// Subscribes a new stream of `conn`'s kind with `subscribe` (given the stream's listener and,
/// on a driven client, where the subscription's outcome goes): the object `wrap` makes of the
/// stream once subscribed — now (blocking) or as an asyncio future.
pub(crate) fn subscribed<T: Send + 'static, W: ToPy>(
    py: Python<'_>,
    conn: Conn,
    to_py: fn(Python<'_>, T) -> PyResult<Py<PyAny>>,
    subscribe: impl FnOnce(
        &blocking::Client,
        Listener<T>,
        Option<Subscribed>,
    ) -> Result<(), mqstore_core::client::ClientError>
    + Send,
    wrap: impl FnOnce(Stream<T>) -> W + Send + 'static,
) -> PyResult<Py<PyAny>> {
    let (listener, stream) = Stream::open(&conn, Arc::new(AtomicBool::new(false)), to_py);
    match conn.driven {
        None => crate::runtime::blocking(py, move || {
            client(subscribe(&conn.client, listener, None))?;
            Ok(wrap(stream))
        }),
        Some(driven) => driven.begin(
            py,
            |deliver| {
                let _ = subscribe(&conn.client, listener, Some(deliver));
            },
            move |()| Ok(wrap(stream)),
        ),
    }
}

/// Where a driven client's subscription's outcome goes.
pub(crate) type Subscribed = crate::driven::Delivered<()>;

#[pymethods]
impl Client {
    /// Connects; returns once the client can make calls. `aio`: an `AsyncClient`'s (returns an
    /// asyncio future; the connection is made on a thread of its own, then driven by the
    /// running loop), or a blocking `Client`'s.
    #[staticmethod]
    #[pyo3(signature = (host, port, client_id, username, password, tls, ca_file, cert_file, key_file, key_password, timeout_ms, aio))]
    #[allow(clippy::too_many_arguments)]
    fn connect(
        py: Python<'_>,
        host: String,
        port: u16,
        client_id: Option<String>,
        username: Option<String>,
        password: Option<String>,
        tls: bool,
        ca_file: Option<std::path::PathBuf>,
        cert_file: Option<std::path::PathBuf>,
        key_file: Option<std::path::PathBuf>,
        key_password: Option<String>,
        timeout_ms: u64,
        aio: bool,
    ) -> PyResult<Py<PyAny>> {
        let client_id =
            client_id.unwrap_or_else(|| format!("mqstore-py-{:08x}", random_u64() as u32));
        let mut options = ClientOptions::new(client_id, host, port);
        options.timeout = Duration::from_millis(timeout_ms);
        options.broker.username = username;
        options.broker.password = password;
        if tls {
            // Without a CA file, the system's trusted CAs.
            let client_auth = cert_file.as_deref().zip(key_file.as_deref());
            let ca = ca_file.as_deref();
            let tls = TlsConfig::from_files(ca, client_auth, key_password.as_deref()).map_err(
                |e| match e.kind() {
                    // A file TLS could not use: an encrypted key without its password or
                    // with a wrong one, no certificate in it, a key not the certificate's.
                    std::io::ErrorKind::InvalidInput => {
                        pyo3::exceptions::PyValueError::new_err(e.to_string())
                    }
                    _ => pyo3::exceptions::PyOSError::new_err(e.to_string()),
                },
            )?;
            options.broker.tls = Some(tls);
        }
        let pid = std::process::id();
        if !aio {
            return crate::runtime::blocking(py, move || {
                let client = client(blocking::Client::connect(options))?;
                let conn = Conn {
                    client,
                    driven: None,
                };
                Ok(Client { conn, pid })
            });
        }
        connect_driven(py, options)
    }

    #[getter]
    fn client_id(&self) -> &str {
        self.conn.client.client_id()
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
        let conn = self.live(aio)?;
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
        call!(py, conn, calls::set(key, value, options))
    }

    fn get(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let key = shared(key);
        call!(py, self.live(aio)?, calls::get(key))
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
        call!(py, self.live(aio)?, calls::delete(key, None, fencing_token))
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
        call!(
            py,
            self.live(aio)?,
            calls::delete(key, Some(value), fencing_token)
        )
    }

    /// The keys matching `pattern`, page by page (nothing is sent until the first page).
    fn scan(&self, pattern: PyBackedBytes) -> PyResult<Scan> {
        same_process(self.pid)?;
        Ok(Scan {
            conn: self.conn.clone(),
            pages: Arc::new(Mutex::new(Pages {
                pattern: shared(pattern),
                token: None,
                done: false,
                fetching: false,
            })),
            pid: self.pid,
        })
    }

    fn observe(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let (key, pid) = (shared(key), self.pid);
        let observed = key.clone();
        subscribed(
            py,
            self.live(aio)?,
            |py, change: KeyChange| change.to_py(py),
            move |c, listener, deliver| match deliver {
                None => c.observe_with(observed, listener),
                Some(deliver) => {
                    c.start_observe(observed, listener, deliver);
                    Ok(())
                }
            },
            move |changes| Observation { key, pid, changes },
        )
    }

    fn unobserve(&self, py: Python<'_>, key: PyBackedBytes, aio: bool) -> PyResult<Py<PyAny>> {
        let (conn, key) = (self.live(aio)?, shared(key));
        let c = conn.client.clone();
        call!(py, conn, c.unobserving(key))
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
        let conn = self.live(aio)?;
        let (key, ttl) = (shared(key), Duration::from_millis(ttl_ms));
        let wait = Some(wait_ms.map_or(Duration::ZERO, Duration::from_millis));
        let held = {
            let conn = conn.clone();
            move |lease: Option<blocking::Lease>| Ok(lease.map(|l| Lease::new(l, conn)))
        };
        match conn.driven.clone() {
            None => crate::runtime::blocking(py, move || {
                held(client(conn.client.lease(key, ttl, wait))?)
            }),
            Some(driven) => driven.begin(
                py,
                |deliver| conn.client.start_lease(key, ttl, wait, deliver),
                held,
            ),
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
        let conn = self.live(aio)?;
        let (key, ttl) = (shared(key), Duration::from_millis(ttl_ms));
        match conn.driven.clone() {
            None => crate::runtime::blocking(py, move || {
                let lease = client(conn.client.lead(key, ttl))?;
                Ok(Lease::new(lease, conn))
            }),
            Some(driven) => {
                let future = driven.future(py)?;
                campaign(&driven, conn, key, ttl, future.clone_ref(py));
                driven.started(py)?;
                Ok(future)
            }
        }
    }

    /// Disconnects; calls in flight fail with a connection-lost error.
    fn close(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        // A forked child has no connection to close: closing there is a no-op.
        let Ok(conn) = self.live(aio) else {
            return if aio {
                crate::runtime::done(py, Ok(()))
            } else {
                Ok(py.None())
            };
        };
        let c = conn.client.clone();
        py.detach(|| c.close());
        match conn.driven {
            None => Ok(py.None()),
            Some(driven) => {
                driven.detach(py)?;
                driven.ready_future(py, Ok(()))
            }
        }
    }
}

/// Connects an `AsyncClient`'s client on a thread of its own (connecting blocks) and, on the
/// running loop's thread, starts driving it: an asyncio future of the [`Client`].
fn connect_driven(py: Python<'_>, options: ClientOptions) -> PyResult<Py<PyAny>> {
    let event_loop = running_loop(py)?;
    let future = event_loop.call_method0("create_future")?.unbind();
    let event_loop = event_loop.unbind();
    let (target, on_loop) = (future.clone_ref(py), event_loop.clone_ref(py));
    let pid = std::process::id();
    let spawned = std::thread::Builder::new()
        .name("mqstore-connect".into())
        .spawn(move || {
            let connected = Mutex::new(Some(blocking::Client::connect_driven(options)));
            enter_python(move |py| {
                let attach = PyCFunction::new_closure(py, None, None, move |args, _| {
                    let py = args.py();
                    let Some(connected) = lock(&connected).take() else {
                        return Ok(());
                    };
                    let value = match connected {
                        Ok((client, driver)) => {
                            let event_loop = on_loop.clone_ref(py);
                            let driven = Driven::attach(py, driver, event_loop)?;
                            let conn = Conn {
                                client,
                                driven: Some(driven),
                            };
                            Ok(Client { conn, pid })
                        }
                        Err(e) => Err(Failure::Client(e)),
                    };
                    crate::driven::resolve(py, &target, crate::driven::outcome(py, value))
                });
                // A closed loop has nobody left to tell.
                if let Ok(attach) = attach {
                    let _ = event_loop.call_method1(py, "call_soon_threadsafe", (attach,));
                }
            });
        });
    if let Err(e) = spawned {
        let error = pyo3::exceptions::PyOSError::new_err(format!("cannot start a thread: {e}"));
        return Err(error);
    }
    Ok(future)
}

/// Asks for the lease on `key` until this client holds it, then resolves `future` with it.
fn campaign(driven: &Arc<Driven>, conn: Conn, key: Bytes, ttl: Duration, future: Py<PyAny>) {
    let (again, c) = (driven.clone(), conn.client.clone());
    let retry = key.clone();
    c.start_lease(key, ttl, None, move |lease| {
        let driven = again.clone();
        again.queue(Box::new(move |py| match lease {
            Ok(Some(lease)) => {
                let lease = Lease::new(lease, conn).to_py(py);
                crate::driven::resolve(py, &future, lease)
            }
            Ok(None) if !future.bind(py).call_method0("done")?.is_truthy()? => {
                campaign(&driven, conn, retry, ttl, future);
                driven.started(py)
            }
            Ok(None) => Ok(()),
            Err(e) => {
                let error = crate::errors::client_error(py, &e);
                crate::driven::resolve(py, &future, Err(error))
            }
        }))
    });
}

/// A SCAN in progress.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Scan {
    conn: Conn,
    pages: Arc<Mutex<Pages>>,
    pid: u32,
}

/// Where a SCAN is.
struct Pages {
    pattern: Bytes,
    token: Option<Bytes>,
    done: bool,
    /// A page is being fetched (an asyncio `next_page` not answered yet).
    fetching: bool,
}

impl Pages {
    /// The page's keys; the SCAN is done after the last page, or a failure.
    fn turn(
        &mut self,
        page: Result<(Vec<Bytes>, Option<Bytes>), mqstore_core::client::ClientError>,
    ) -> Result<Option<Keys>, Failure> {
        self.fetching = false;
        self.done = !matches!(page, Ok((_, Some(_))));
        let (keys, token) = client(page)?;
        self.token = token;
        Ok(Some(Keys(keys)))
    }
}

#[pymethods]
impl Scan {
    /// The next page of keys (possibly empty), or `None` after the last.
    fn next_page(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        kind(&self.conn, aio)?;
        let (c, pages) = (self.conn.client.clone(), self.pages.clone());
        let Some(driven) = self.conn.driven.clone() else {
            return crate::runtime::blocking(py, move || {
                let mut pages = lock(&pages);
                if pages.done {
                    return Ok(None);
                }
                let page = c.wait(calls::scan_page(pages.pattern.clone(), pages.token.take()));
                pages.turn(page)
            });
        };
        let mut state = lock(&pages);
        if state.done {
            return driven.ready_future(py, Ok(None::<Keys>));
        }
        if std::mem::replace(&mut state.fetching, true) {
            let busy =
                PyRuntimeError::new_err("a page of this scan is being fetched: await it first");
            return Err(busy);
        }
        let call = calls::scan_page(state.pattern.clone(), state.token.take());
        drop(state);
        // Both outcomes go to `turn`: a failure ends the SCAN too.
        driven.begin(
            py,
            |deliver| c.start_call(call, move |page| deliver(Ok(page))),
            move |page| lock(&pages).turn(page),
        )
    }
}

/// The changes of one observed key.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Observation {
    key: Bytes,
    pid: u32,
    changes: Stream<KeyChange>,
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
        self.changes.ended()
    }

    /// The next change; `None` when `timeout_ms` passed first or the observation ended.
    #[pyo3(signature = (timeout_ms, aio))]
    fn next(&self, py: Python<'_>, timeout_ms: Option<u64>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        self.changes.next(py, timeout_ms, aio)
    }
}

/// A held lease, renewed in the background until released or lost.
#[pyclass(frozen, module = "mqstore._native")]
pub struct Lease {
    inner: Mutex<Option<blocking::Lease>>,
    conn: Conn,
    pid: u32,
    key: Bytes,
    fencing_token: mqstore_core::hlc::Hlc,
}

impl Lease {
    fn new(lease: blocking::Lease, conn: Conn) -> Self {
        Lease {
            key: lease.key().clone(),
            fencing_token: lease.fencing_token().clone(),
            inner: Mutex::new(Some(lease)),
            conn,
            pid: std::process::id(),
        }
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
        lock(&self.inner).as_ref().is_some_and(|l| l.is_held())
    }

    /// Releases the lease; true when it was still held. Releasing twice returns false.
    fn release(&self, py: Python<'_>, aio: bool) -> PyResult<Py<PyAny>> {
        same_process(self.pid)?;
        kind(&self.conn, aio)?;
        let taken = lock(&self.inner).take();
        match (taken, &self.conn.driven) {
            (Some(lease), _) => call!(py, self.conn.clone(), lease.releasing()),
            (None, Some(driven)) => driven.ready_future(py, Ok(false)),
            (None, None) => false.to_py(py),
        }
    }
}
