//! Layer 1, "batteries included": a connected client with blocking calls — the blocking
//! driver of `mqstore-net` (`mqstore_net::blocking`): the calling thread writes its request and
//! reads its answer itself, and one helper thread per client reads while no call is in
//! progress (observations, lease renewals, reconnects). No async runtime; the host program
//! keeps whatever threads and loop it has.

use std::collections::{HashSet, VecDeque};
use std::ffi::{CString, c_char, c_int, c_void};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mqstore_net::blocking::{Client, Lease};
use mqstore_net::client::{ClientOptions, KeyChange, SetOptions as NetSetOptions};
use mqstore_net::{TlsConfig, random_u64};

use crate::error::{Error, Result, ffi, ffi_void};
use crate::handles::{handle, new_handle, take_handle};
use crate::mqstore_status;
use crate::types::{
    Event, SetOptions, bytes_arg, hlc_arg, key_arg, mqstore_bytes, mqstore_delete_result,
    mqstore_event, mqstore_hlc, mqstore_set_options, mqstore_set_result, opt_str_arg, out_arg,
    version_out, write_opt,
};

/// How to connect (`mqstore_connect`). Start from `mqstore_options_default()` and change what
/// differs. Strings are NUL-terminated and borrowed for the call; NULL: not set.
#[repr(C)]
pub struct mqstore_options {
    /// The broker's host name or address ("127.0.0.1").
    pub host: *const c_char,
    /// The broker's port (1883).
    pub port: u16,
    /// The MQTT client id; NULL: a random `mqstore-c-xxxxxxxx`. It must not contain `:`.
    pub client_id: *const c_char,
    /// The user name to log in with, NUL-terminated, or NULL for none.
    pub username: *const c_char,
    /// The password to log in with, NUL-terminated, or NULL for none.
    pub password: *const c_char,
    /// TLS to the broker, trusting the system's CAs (`SSL_CERT_FILE`, or the system's bundle)
    /// unless `ca_file` names others; false with `ca_file` NULL: plain TCP.
    pub tls: bool,
    /// TLS with the authorities in this PEM file (turns TLS on by itself); NULL: the system's,
    /// when `tls` is set.
    pub ca_file: *const c_char,
    /// TLS client authentication: PEM certificate chain and private key files (both or none).
    pub cert_file: *const c_char,
    /// The client certificate's private key (a PEM file), with `cert_file`, or NULL.
    pub key_file: *const c_char,
    /// The password of `key_file` when it is encrypted (PKCS#8, as `openssl pkcs8 -topk8`
    /// writes it), NUL-terminated, or NULL for a key that is not. Read during `mqstore_connect`
    /// only; the library keeps the decrypted key, not the password.
    pub key_password: *const c_char,
    /// Every call's timeout, and the connection's, in milliseconds (10 000); 0: the default.
    pub timeout_ms: u32,
}

/// The defaults: the broker on 127.0.0.1:1883, plain TCP, a random client id, 10 s timeouts.
#[unsafe(no_mangle)]
pub extern "C" fn mqstore_options_default() -> mqstore_options {
    mqstore_options {
        host: c"127.0.0.1".as_ptr(),
        port: 1883,
        client_id: std::ptr::null(),
        username: std::ptr::null(),
        password: std::ptr::null(),
        tls: false,
        ca_file: std::ptr::null(),
        cert_file: std::ptr::null(),
        key_file: std::ptr::null(),
        key_password: std::ptr::null(),
        timeout_ms: 10_000,
    }
}

/// A connected client (layer 1). Made by `mqstore_connect`, freed by `mqstore_client_free`.
/// Calls may come from any number of threads at once.
pub struct mqstore_client {
    client: Client,
    id: CString,
    events: Arc<Events<KeyChange>>,
    /// The keys observed (their changes go to `events`).
    observations: Mutex<HashSet<Bytes>>,
    callback: Mutex<Option<CallbackThread>>,
}

/// What arrives for the program — changes of every observed key, a thing's jobs
/// notifications — in arrival order, for `mqstore_next_event` (or the callback) and
/// `mqstore_jobs_next_notification`. (A mutex and a condition variable rather than std's
/// channels: those record the waiting thread's handle in a thread-local that the main thread
/// never frees, which valgrind reports.)
pub(crate) struct Events<T> {
    state: Mutex<Queue<T>>,
    ready: Condvar,
}

impl<T> Default for Events<T> {
    fn default() -> Self {
        Self {
            state: Mutex::new(Queue {
                items: VecDeque::new(),
                stop: false,
            }),
            ready: Condvar::new(),
        }
    }
}

struct Queue<T> {
    items: VecDeque<T>,
    /// Tells the callback thread to end.
    stop: bool,
}

impl<T: Send + 'static> Events<T> {
    /// A function the client hands each arrival to (on its reading thread): it queues it.
    pub(crate) fn listener(self: &Arc<Self>) -> mqstore_net::Listener<T> {
        let events = Arc::downgrade(self);
        Box::new(move |item| match events.upgrade() {
            Some(events) => {
                lock(&events.state).items.push_back(item);
                events.ready.notify_all();
                true
            }
            None => false,
        })
    }

    /// The next arrival, waiting up to `timeout` (`None`: as long as it takes). `None` when
    /// none came in time, or when the callback thread is told to stop (`for_callback`).
    pub(crate) fn pop(&self, timeout: Option<Duration>, for_callback: bool) -> Option<T> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut queue = lock(&self.state);
        loop {
            if for_callback && queue.stop {
                queue.stop = false;
                return None;
            }
            if let Some(item) = queue.items.pop_front() {
                return Some(item);
            }
            queue = match deadline {
                None => self
                    .ready
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.checked_duration_since(Instant::now())?;
                    self.ready
                        .wait_timeout(queue, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    fn stop_callback(&self) {
        lock(&self.state).stop = true;
        self.ready.notify_all();
    }
}

struct CallbackThread {
    thread: JoinHandle<()>,
}

/// Receives events on the client's callback thread (`mqstore_set_event_callback`). `event` is
/// borrowed: valid until the callback returns (copy what you keep; do not free it).
pub type mqstore_event_callback =
    Option<unsafe extern "C" fn(event: *const mqstore_event, user_data: *mut c_void)>;

/// The caller's callback and its data, moved to the callback thread.
struct Callback {
    function: unsafe extern "C" fn(*const mqstore_event, *mut c_void),
    user_data: *mut c_void,
}

// SAFETY: the header asks that `user_data` be usable from the callback thread; the library
// only passes it back.
unsafe impl Send for Callback {}

thread_local! {
    /// On a callback thread: the address of the client whose events it delivers (for as long
    /// as the thread lives, so a callback still running after its thread was told to stop is
    /// still known).
    static CALLBACK_OF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl mqstore_client {
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    fn on_callback_thread(&self) -> bool {
        CALLBACK_OF.get() == self as *const Self as usize
    }

    /// Stops the callback thread, if any, and waits for it.
    fn stop_callback(&self) -> Result<()> {
        if self.on_callback_thread() {
            return Err(Error::invalid(
                "called from inside the event callback: return from the callback first",
            ));
        }
        let thread = lock(&self.callback).take();
        if let Some(thread) = thread {
            self.events.stop_callback();
            let _ = thread.thread.join();
        }
        Ok(())
    }
}

/// Reads the connect options.
unsafe fn client_options(options: *const mqstore_options) -> Result<ClientOptions> {
    let defaults = mqstore_options_default();
    // SAFETY: NULL or the caller's struct.
    let o = unsafe { options.as_ref() }.unwrap_or(&defaults);
    let host = match unsafe { opt_str_arg(o.host, "options.host") }? {
        Some(host) if !host.is_empty() => host,
        _ => "127.0.0.1",
    };
    let client_id = match unsafe { opt_str_arg(o.client_id, "options.client_id") }? {
        Some(id) if !id.is_empty() => id.to_owned(),
        _ => format!("mqstore-c-{:08x}", random_u64() as u32),
    };
    if client_id.contains(':') {
        return Err(Error::invalid(format!(
            "options.client_id {client_id:?} contains ':' (it is part of every version the client makes)"
        )));
    }
    let mut options = ClientOptions::new(client_id, host, if o.port == 0 { 1883 } else { o.port });
    if o.timeout_ms > 0 {
        options.timeout = Duration::from_millis(u64::from(o.timeout_ms));
    }
    options.broker.username =
        unsafe { opt_str_arg(o.username, "options.username") }?.map(Into::into);
    options.broker.password =
        unsafe { opt_str_arg(o.password, "options.password") }?.map(Into::into);
    let ca = unsafe { opt_str_arg(o.ca_file, "options.ca_file") }?;
    let cert = unsafe { opt_str_arg(o.cert_file, "options.cert_file") }?;
    let key = unsafe { opt_str_arg(o.key_file, "options.key_file") }?;
    let key_password = unsafe { opt_str_arg(o.key_password, "options.key_password") }?;
    if cert.is_some() != key.is_some() {
        return Err(Error::invalid(
            "options.cert_file and options.key_file go together: set both or neither",
        ));
    }
    if o.tls || ca.is_some() {
        let client_auth = cert
            .map(std::path::Path::new)
            .zip(key.map(std::path::Path::new));
        let tls = TlsConfig::from_files(ca.map(std::path::Path::new), client_auth, key_password)
            .map_err(|e| Error::invalid(format!("TLS files: {e}")))?;
        options.broker.tls = Some(tls);
    } else if cert.is_some() || key_password.is_some() {
        return Err(Error::invalid(
            "options.cert_file and options.key_password are for TLS: set options.tls (or options.ca_file)",
        ));
    }
    Ok(options)
}

/// Connects to the broker (`options`: NULL for the defaults) and returns once the client can
/// make calls. On success `*out` is the caller's: free it with `mqstore_client_free`.
/// Fails with MQSTORE_ERR_BROKER_UNREACHABLE, MQSTORE_ERR_BROKER_REFUSED, MQSTORE_ERR_REQUEST_TIMEOUT, ...
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_connect(
    options: *const mqstore_options,
    out: *mut *mut mqstore_client,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let options = unsafe { client_options(options) }?;
        let client = Client::connect(options)?;
        let id = CString::new(client.client_id())
            .map_err(|_| Error::invalid("options.client_id holds a NUL"))?;
        *out = new_handle(mqstore_client {
            client,
            id,
            events: Arc::default(),
            observations: Mutex::new(HashSet::new()),
            callback: Mutex::new(None),
        });
        Ok(())
    })
}

/// Closes the connection politely and frees the client (NULL is ignored). Stops the callback
/// thread first (waiting for a callback that is running). Free the client's leases first. Not
/// from inside the callback (that fails, and the client stays).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_client_free(client: *mut mqstore_client) {
    ffi_void(|| {
        if client.is_null() {
            return Ok(());
        }
        // SAFETY: a handle from `mqstore_connect`, checked.
        unsafe { handle(client.cast_const(), "client") }?.stop_callback()?;
        let Some(client) = (unsafe { take_handle(client, "client") })? else {
            return Ok(());
        };
        client.client.close();
        Ok(())
    });
}

/// This client's MQTT client id, NUL-terminated (owned by the client; NULL for a bad handle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_client_id(client: *const mqstore_client) -> *const c_char {
    let mut id = std::ptr::null();
    ffi(|| {
        // SAFETY: a handle, checked.
        id = unsafe { handle(client, "client") }?.id.as_ptr();
        Ok(())
    });
    id
}

/// SET `key` to `value`. `options`: NULL for a plain SET. `result` (NULL: not wanted) gets
/// whether it applied and the key's version. An NX/NEX SET that does not apply is a success
/// with `applied` false.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_set(
    client: *const mqstore_client,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    options: *const mqstore_set_options,
    result: *mut mqstore_set_result,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let value = Bytes::copy_from_slice(unsafe { bytes_arg(value, value_len, "value") }?);
        let o = unsafe { SetOptions::read(options) }?;
        let set = NetSetOptions {
            condition: o.condition,
            expires: o.expires_ms.map(|ms| Duration::from_millis(ms.get())),
            persist: o.persist,
            fencing_token: o.fencing_token,
        };
        let (request, mut call) = set.request(key, value);
        call.timeout_ms = o.timeout.map(|t| t.as_millis() as u64);
        let done = client.client.call(&request, &call)?.into_set_result();
        let (has_version, version) = version_out(done.version.as_ref())?;
        unsafe {
            write_opt(
                result,
                mqstore_set_result {
                    applied: done.applied,
                    has_version,
                    version,
                },
            )
        };
        Ok(())
    })
}

/// GET `key` into the caller's buffer `value` of `capacity` bytes. `*found` says whether the
/// key exists; when it does, `*value_len` gets the value's length and `version` (NULL: not
/// wanted) its version. A buffer too small gets MQSTORE_ERR_BUFFER_TOO_SMALL with the length
/// needed in `*value_len` (call again with a larger one).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_get(
    client: *const mqstore_client,
    key: *const u8,
    key_len: usize,
    value: *mut u8,
    capacity: usize,
    value_len: *mut usize,
    found: *mut bool,
    version: *mut mqstore_hlc,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let found = unsafe { out_arg(found, "found") }?;
        let len = unsafe { out_arg(value_len, "value_len") }?;
        *found = false;
        *len = 0;
        let Some(got) = client.client.get(key)? else {
            return Ok(());
        };
        *found = true;
        let (_, v) = version_out(got.version.as_ref())?;
        unsafe { write_opt(version, v) };
        unsafe { crate::types::copy_out(&got.value, value, capacity, len, "the value") }
    })
}

/// Writes a DEL's or VDEL's outcome.
fn deletion(
    done: mqstore_core::client::Deletion,
    result: *mut mqstore_delete_result,
) -> Result<()> {
    let (has_version, version) = version_out(done.version.as_ref())?;
    // SAFETY: NULL or the caller's struct.
    unsafe {
        write_opt(
            result,
            mqstore_delete_result {
                outcome: done.outcome.into(),
                has_version,
                version,
            },
        )
    };
    Ok(())
}

/// DEL `key` (`fencing_token`: NULL, or the token of the lock guarding it). `result` (NULL:
/// not wanted) says whether it was deleted or absent.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_del(
    client: *const mqstore_client,
    key: *const u8,
    key_len: usize,
    fencing_token: *const mqstore_hlc,
    result: *mut mqstore_delete_result,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let token = unsafe { hlc_arg(fencing_token, "fencing_token") }?;
        deletion(client.client.del(key, token)?, result)
    })
}

/// VDEL: deletes `key` only if it holds `value`. `result` says deleted, absent, or
/// MQSTORE_DELETE_VALUE_MISMATCH (nothing changed).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_vdel(
    client: *const mqstore_client,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    fencing_token: *const mqstore_hlc,
    result: *mut mqstore_delete_result,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let value = Bytes::copy_from_slice(unsafe { bytes_arg(value, value_len, "value") }?);
        let token = unsafe { hlc_arg(fencing_token, "fencing_token") }?;
        deletion(client.client.vdel(key, value, token)?, result)
    })
}

/// Keys from `mqstore_scan`, owned by the library: free with `mqstore_keys_free`.
#[repr(C)]
pub struct mqstore_keys {
    /// The keys, `count` of them (owned by this object).
    pub keys: *const mqstore_bytes,
    /// How many keys `keys` holds.
    pub count: usize,
}

#[repr(C)]
struct Keys {
    c: mqstore_keys,
    _keys: Vec<mqstore_bytes>,
    _data: Vec<Bytes>,
}

/// SCAN: every key matching `pattern` (`*` and `?` wildcards; "*" for all), page after page.
/// On success `*out` is the caller's: free it with `mqstore_keys_free`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_scan(
    client: *const mqstore_client,
    pattern: *const u8,
    pattern_len: usize,
    out: *mut *mut mqstore_keys,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let client = unsafe { handle(client, "client") }?;
        let pattern =
            Bytes::copy_from_slice(unsafe { bytes_arg(pattern, pattern_len, "pattern") }?);
        let data = client.client.scan(pattern)?;
        let keys: Vec<mqstore_bytes> = data.iter().map(|k| mqstore_bytes::of(k)).collect();
        *out = new_handle(Keys {
            c: mqstore_keys {
                keys: keys.as_ptr(),
                count: keys.len(),
            },
            _keys: keys,
            _data: data,
        })
        .cast();
        Ok(())
    })
}

/// Frees keys from `mqstore_scan` (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_keys_free(keys: *mut mqstore_keys) {
    ffi_void(|| {
        // SAFETY: key lists are handed out as `Keys`.
        unsafe { take_handle(keys.cast::<Keys>(), "keys") }.map(drop)
    });
}

/// Starts observing `key`: its changes arrive as MQSTORE_EVENT_CHANGED events
/// (`mqstore_next_event` or the callback), also across reconnects (a change missed while away
/// comes as a `synthetic` one). Observing a key already observed changes nothing.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_observe(
    client: *const mqstore_client,
    key: *const u8,
    key_len: usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        if lock(&client.observations).contains(&key) {
            return Ok(());
        }
        client
            .client
            .observe_with(key.clone(), client.events.listener())?;
        lock(&client.observations).insert(key);
        Ok(())
    })
}

/// Stops observing `key` (changes already queued are still delivered).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_unobserve(
    client: *const mqstore_client,
    key: *const u8,
    key_len: usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let client = unsafe { handle(client, "client") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        lock(&client.observations).remove(&key);
        Ok(client.client.unobserve(key)?)
    })
}

/// Waits up to `timeout_ms` (0: do not wait; negative: as long as it takes) for the next
/// change of an observed key. `*out` gets the event, or NULL when none came in time; an
/// event is the caller's: free it with `mqstore_event_free`. MQSTORE_ERR_CALLBACK_SET when
/// the events go to a callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_next_event(
    client: *const mqstore_client,
    timeout_ms: i32,
    out: *mut *mut mqstore_event,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let client = unsafe { handle(client, "client") }?;
        if lock(&client.callback).is_some() {
            return Err(Error::new(
                mqstore_status::MQSTORE_ERR_CALLBACK_SET,
                "this client's events go to its callback (mqstore_set_event_callback with NULL stops that)",
            ));
        }
        let timeout = match timeout_ms {
            t if t < 0 => None,
            t => Some(Duration::from_millis(t as u64)),
        };
        if let Some(change) = client.events.pop(timeout, false) {
            *out = change_event(change).into_c();
        }
        Ok(())
    })
}

fn change_event(change: KeyChange) -> Event {
    Event::changed(
        change.key,
        change.value,
        change.version.as_ref(),
        change.synthetic,
        change.gap,
    )
}

/// Delivers every change to `callback` instead of `mqstore_next_event` (NULL: back to
/// `mqstore_next_event`; changes not yet delivered stay queued for it).
///
/// The callback runs on a thread of the client's own ("mqstore-events"), one event at a time,
/// never two at once; `user_data` is passed back untouched and must be usable from that
/// thread. It may make calls on the client (set, get, ...), but not free it or change the
/// callback: those wait for the callback thread to finish and fail from inside it.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle, or called from inside the callback:
/// nothing changes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_set_event_callback(
    client: *const mqstore_client,
    callback: mqstore_event_callback,
    user_data: *mut c_void,
) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let client = unsafe { handle(client, "client") }?;
        client.stop_callback()?;
        let Some(function) = callback else {
            return Ok(());
        };
        let callback = Callback {
            function,
            user_data,
        };
        let events = client.events.clone();
        let owner = client as *const mqstore_client as usize;
        let thread = std::thread::Builder::new()
            .name("mqstore-events".into())
            .spawn(move || {
                CALLBACK_OF.set(owner);
                let callback = callback;
                while let Some(change) = events.pop(None, true) {
                    let event = change_event(change);
                    let pointer = event.into_c();
                    // SAFETY: the caller's function, given a live event it only borrows.
                    unsafe { (callback.function)(pointer, callback.user_data) };
                    unsafe { crate::types::mqstore_event_free(pointer) };
                }
            })
            .map_err(|e| {
                Error::new(
                    mqstore_status::MQSTORE_ERR_INTERNAL,
                    format!("cannot start the callback thread: {e}"),
                )
            })?;
        *lock(&client.callback) = Some(CallbackThread { thread });
        Ok(())
    })
}

/// A lease (a lock with a fencing token) on a key, renewed in the background while held.
/// Made by `mqstore_lease_acquire`, freed by `mqstore_lease_free` (which releases it).
pub struct mqstore_lease {
    /// The lease (with its client's connection, which renews it); `None` once released.
    lease: Mutex<Option<Lease>>,
}

/// Takes the lease on `key` for `ttl_ms` (renewed every ttl/3 while held), waiting up to
/// `wait_ms` for its holder to release it (0: try once). `*out` gets the lease, or NULL when
/// another client holds it (then the status is still MQSTORE_OK). A lease is the caller's:
/// free it (releasing it) with `mqstore_lease_free` before the client.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_lease_acquire(
    client: *const mqstore_client,
    key: *const u8,
    key_len: usize,
    ttl_ms: u32,
    wait_ms: u32,
    out: *mut *mut mqstore_lease,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let c = unsafe { handle(client, "client") }?;
        let key = unsafe { key_arg(key, key_len, "key") }?;
        if ttl_ms == 0 {
            return Err(Error::invalid(
                "ttl_ms is 0: a lease lasts at least a millisecond",
            ));
        }
        let ttl = Duration::from_millis(u64::from(ttl_ms));
        let wait = Duration::from_millis(u64::from(wait_ms));
        if let Some(lease) = c.client.lease(key, ttl, Some(wait))? {
            *out = new_handle(mqstore_lease {
                lease: Mutex::new(Some(lease)),
            });
        }
        Ok(())
    })
}

/// The lease's fencing token, for SET / DEL / VDEL of what the lease guards.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a NULL or freed lease).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_lease_fencing_token(
    lease: *const mqstore_lease,
    token: *mut mqstore_hlc,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let lease = unsafe { handle(lease, "lease") }?;
        let token = unsafe { out_arg(token, "token") }?;
        let held = lock(&lease.lease);
        let held = held
            .as_ref()
            .ok_or_else(|| Error::invalid("the lease was released"))?;
        *token = mqstore_hlc::from_hlc(held.fencing_token())?;
        Ok(())
    })
}

/// Whether the lease is still held: false once released, or once a renewal found it taken or
/// expired (then stop writing with its token).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_lease_is_held(lease: *const mqstore_lease) -> bool {
    let mut held = false;
    ffi(|| {
        // SAFETY: a handle, checked.
        let lease = unsafe { handle(lease, "lease") }?;
        held = lock(&lease.lease).as_ref().is_some_and(Lease::is_held);
        Ok(())
    });
    held
}

/// Releases the lease now (deletes the key if it still holds this client's claim);
/// `*released` (NULL: not wanted) says whether it was still held. The handle stays valid
/// until `mqstore_lease_free`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), the state store's refusals (101–199,
/// e.g. MQSTORE_ERR_FENCING_TOKEN_LOWER_VERSION), MQSTORE_ERR_STATUS (503: overloaded),
/// MQSTORE_ERR_REQUEST_TIMEOUT (it may still be applied), MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED, MQSTORE_ERR_REQUEST_TOO_LARGE.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_lease_release(
    lease: *const mqstore_lease,
    released: *mut bool,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let lease = unsafe { handle(lease, "lease") }?;
        let held = lock(&lease.lease).take();
        let was_held = match held {
            Some(held) => held.release()?,
            None => false,
        };
        unsafe { write_opt(released, was_held) };
        Ok(())
    })
}

/// Releases the lease if still held, and frees it (NULL is ignored). Free leases before their
/// client.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_lease_free(lease: *mut mqstore_lease) {
    ffi_void(|| {
        // SAFETY: a handle from `mqstore_lease_acquire`, checked.
        let Some(lease) = (unsafe { take_handle(lease, "lease") })? else {
            return Ok(());
        };
        let held = lock(&lease.lease).take();
        if let Some(held) = held {
            // A client already closed fails this: the lease expires on its own after its ttl.
            let _ = held.release();
        }
        Ok(())
    });
}
