//! The C structs both layers share (versions, options, results, events, publishes), and the
//! reading of arguments: every pointer and length C passes is checked here, once.

use std::ffi::{CStr, CString, c_char, c_int};
use std::time::Duration;

use bytes::Bytes;
use mqstore_core::client::Deleted;
use mqstore_core::client::jobs::JobNotification;
use mqstore_core::codec::{Command, Condition, Response};
use mqstore_core::commands::{CommandRequest, Mode};
use mqstore_core::hlc::Hlc;
use mqstore_core::session::{Completion, SessionEvent};

use crate::error::{Error, Result};
use crate::handles::{new_handle, take_handle};

/// Bytes in `mqstore_hlc.node`, with its terminating NUL: node ids are at most 255 bytes.
pub const MQSTORE_HLC_NODE_SIZE: usize = 256;

/// `mqstore_core_next_deadline` when no call is in flight and nothing needs renewing.
pub const MQSTORE_NO_DEADLINE: u64 = 0xFFFF_FFFF_FFFF_FFFF;

/// `mqstore_publish.call` of a publish no call waits for (the client's own).
pub const MQSTORE_NO_CALL: u64 = 0xFFFF_FFFF_FFFF_FFFF;

/// `mqstore_core_lease`'s `wait_ms` to wait until the lease is held (leader election).
pub const MQSTORE_WAIT_FOREVER: u64 = 0xFFFF_FFFF_FFFF_FFFF;

/// A hybrid-logical-clock value: a key's version, or a fencing token. Ordered by wall clock,
/// then counter, then node (`mqstore_hlc_compare`); its text form is
/// `{wall_ms}:{counter}:{node}` (`mqstore_hlc_format`, `mqstore_hlc_parse`). A plain value:
/// copy it freely, nothing to free.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct mqstore_hlc {
    /// Milliseconds since the Unix epoch.
    pub wall_ms: u64,
    /// The logical counter: orders versions issued in the same millisecond.
    pub counter: u32,
    /// The id of the node (server or client) that made it, NUL-terminated UTF-8.
    pub node: [c_char; MQSTORE_HLC_NODE_SIZE],
}

impl mqstore_hlc {
    pub(crate) fn from_hlc(hlc: &Hlc) -> Result<Self> {
        let node = hlc.node.as_bytes();
        if node.len() >= MQSTORE_HLC_NODE_SIZE || node.contains(&0) {
            return Err(Error::of_kind(
                mqstore_core::ErrorKind::MalformedAnswer,
                format!(
                    "the version {hlc} has a node id longer than {} bytes",
                    MQSTORE_HLC_NODE_SIZE - 1
                ),
            ));
        }
        let mut out = Self {
            wall_ms: hlc.wall_ms,
            counter: hlc.counter,
            node: [0; MQSTORE_HLC_NODE_SIZE],
        };
        for (to, from) in out.node.iter_mut().zip(node) {
            *to = *from as c_char;
        }
        Ok(out)
    }

    pub(crate) fn read(&self, what: &str) -> Result<Hlc> {
        let bytes: Vec<u8> = self
            .node
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        if bytes.len() == MQSTORE_HLC_NODE_SIZE {
            return Err(Error::invalid(format!("{what}.node is not NUL-terminated")));
        }
        let node = String::from_utf8(bytes)
            .map_err(|_| Error::invalid(format!("{what}.node is not UTF-8")))?;
        Hlc::new(self.wall_ms, self.counter, node)
            .map_err(|e| Error::invalid(format!("{what} is not a valid version: {e}")))
    }
}

/// A byte string the library owns, inside an object that says how long it lives.
#[repr(C)]
pub struct mqstore_bytes {
    /// The bytes (`len` of them; not NUL-terminated).
    pub data: *const u8,
    /// Their length.
    pub len: usize,
}

impl mqstore_bytes {
    pub(crate) fn of(bytes: &[u8]) -> Self {
        Self {
            data: bytes.as_ptr(),
            len: bytes.len(),
        }
    }
}

/// A SET's condition (`mqstore_set_options.condition`).
#[repr(C)]
pub enum mqstore_condition {
    /// Set whatever the key holds.
    MQSTORE_SET_ALWAYS = 0,
    /// NX: only if the key does not exist.
    MQSTORE_SET_NX = 1,
    /// NEX: only if the key does not exist or already holds this value (take or renew a lock).
    MQSTORE_SET_NEX = 2,
}

/// Options of a SET. Zero-initialise it (`mqstore_set_options o = {0};`) for a plain SET.
#[repr(C)]
pub struct mqstore_set_options {
    /// A `mqstore_condition`.
    pub condition: c_int,
    /// The key expires this many milliseconds after the SET (PX); 0: never.
    pub expires_ms: u64,
    /// Ask the server to keep the key durably.
    pub persist: bool,
    /// The fencing token of the lock guarding the key, or NULL. Borrowed for the call.
    pub fencing_token: *const mqstore_hlc,
    /// This call's timeout in milliseconds; 0: the client's.
    pub timeout_ms: u32,
}

/// The SET options as the core takes them; `None` stands for all defaults.
pub(crate) struct SetOptions {
    pub condition: Condition,
    pub expires_ms: Option<std::num::NonZeroU64>,
    pub persist: bool,
    pub fencing_token: Option<Hlc>,
    pub timeout: Option<Duration>,
}

impl SetOptions {
    /// Reads `options` (NULL: a plain SET).
    pub unsafe fn read(options: *const mqstore_set_options) -> Result<Self> {
        // SAFETY: the caller passes NULL or a valid struct.
        let Some(o) = (unsafe { options.as_ref() }) else {
            return Ok(Self {
                condition: Condition::Always,
                expires_ms: None,
                persist: false,
                fencing_token: None,
                timeout: None,
            });
        };
        Ok(Self {
            condition: match o.condition {
                0 => Condition::Always,
                1 => Condition::NotExists,
                2 => Condition::NotExistsOrEqual,
                other => {
                    return Err(Error::invalid(format!(
                        "options.condition is MQSTORE_SET_ALWAYS, MQSTORE_SET_NX or MQSTORE_SET_NEX, not {other}"
                    )));
                }
            },
            expires_ms: std::num::NonZeroU64::new(o.expires_ms),
            persist: o.persist,
            // SAFETY: as above.
            fencing_token: unsafe { hlc_arg(o.fencing_token, "options.fencing_token") }?,
            timeout: timeout_arg(o.timeout_ms),
        })
    }
}

/// A call's own timeout (0: the client's).
pub(crate) fn timeout_arg(ms: u32) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(u64::from(ms)))
}

/// A fencing token argument: NULL is none.
pub(crate) unsafe fn hlc_arg(hlc: *const mqstore_hlc, what: &str) -> Result<Option<Hlc>> {
    // SAFETY: the caller passes NULL or a valid struct.
    match unsafe { hlc.as_ref() } {
        None => Ok(None),
        Some(h) => h.read(what).map(Some),
    }
}

/// What a SET did.
#[repr(C)]
pub struct mqstore_set_result {
    /// False when the NX/NEX condition did not hold (nothing changed).
    pub applied: bool,
    /// Whether `version` holds the key's version.
    pub has_version: bool,
    /// The key's version: the new one, or the current one when not applied.
    pub version: mqstore_hlc,
}

/// What a DEL or VDEL did.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum mqstore_deleted {
    /// The key was deleted.
    MQSTORE_DELETED = 0,
    /// There was no such key.
    MQSTORE_DELETE_ABSENT = 1,
    /// VDEL: the key holds another value (nothing changed).
    MQSTORE_DELETE_VALUE_MISMATCH = 2,
}

impl From<Deleted> for mqstore_deleted {
    fn from(d: Deleted) -> Self {
        match d {
            Deleted::Deleted => Self::MQSTORE_DELETED,
            Deleted::Absent => Self::MQSTORE_DELETE_ABSENT,
            Deleted::ValueMismatch => Self::MQSTORE_DELETE_VALUE_MISMATCH,
        }
    }
}

/// What a DEL or VDEL did, and the version (of the deletion, else the server's clock).
#[repr(C)]
pub struct mqstore_delete_result {
    /// What happened: deleted, absent, or (VDEL) the value did not match.
    pub outcome: mqstore_deleted,
    /// Whether `version` holds a version.
    pub has_version: bool,
    /// The delete's version, when the key was deleted.
    pub version: mqstore_hlc,
}

/// A version for a result struct: `(has_version, version)`.
pub(crate) fn version_out(version: Option<&Hlc>) -> Result<(bool, mqstore_hlc)> {
    match version {
        Some(v) => Ok((true, mqstore_hlc::from_hlc(v)?)),
        None => Ok((false, EMPTY_HLC)),
    }
}

pub(crate) const EMPTY_HLC: mqstore_hlc = mqstore_hlc {
    wall_ms: 0,
    counter: 0,
    node: [0; MQSTORE_HLC_NODE_SIZE],
};

/// A state store operation: which call an event finished (`mqstore_event.op`), and a
/// request's verb (`mqstore_request.op`).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum mqstore_op {
    /// Not a call's event (a change).
    MQSTORE_OP_NONE = 0,
    /// SET.
    MQSTORE_OP_SET = 1,
    /// GET.
    MQSTORE_OP_GET = 2,
    /// DEL.
    MQSTORE_OP_DEL = 3,
    /// VDEL.
    MQSTORE_OP_VDEL = 4,
    /// `observe` and `unobserve` (KEYNOTIFY).
    MQSTORE_OP_KEYNOTIFY = 5,
    /// SCAN (one page).
    MQSTORE_OP_SCAN = 6,
    /// A jobs call, operator or device (`json` holds its result).
    MQSTORE_OP_JOBS = 7,
    /// A command (`value` holds the device's answer, `json` its id and status).
    MQSTORE_OP_COMMAND = 8,
    /// A command's status record (`json`).
    MQSTORE_OP_COMMAND_STATUS = 9,
    /// A lease acquisition (`applied`: held, with the fencing token in `version`; the call's
    /// id is the lease's).
    MQSTORE_OP_LEASE = 10,
    /// A lease release (`applied`: it was still held).
    MQSTORE_OP_LEASE_RELEASE = 11,
    /// A stored-commands call (`json` holds the service's answer).
    MQSTORE_OP_COMMAND_DEFINITIONS = 12,
    /// A device shadow request (`json` holds the `/accepted` document; a rejection is
    /// MQSTORE_ERR_STATUS with AWS's code and message in `error`).
    MQSTORE_OP_SHADOW = 13,
}

impl mqstore_op {
    /// The op of a session's completion, by the name the session gives it.
    fn of_session(op: &str) -> Self {
        match op {
            "jobs" => Self::MQSTORE_OP_JOBS,
            "command" => Self::MQSTORE_OP_COMMAND,
            "commandStatus" => Self::MQSTORE_OP_COMMAND_STATUS,
            "commandDefinitions" => Self::MQSTORE_OP_COMMAND_DEFINITIONS,
            "lease" => Self::MQSTORE_OP_LEASE,
            "releaseLease" => Self::MQSTORE_OP_LEASE_RELEASE,
            "shadow" => Self::MQSTORE_OP_SHADOW,
            command => Command::ALL
                .into_iter()
                .find(|c| c.as_str() == command)
                .map_or(Self::MQSTORE_OP_NONE, Self::from),
        }
    }
}

impl From<Command> for mqstore_op {
    fn from(c: Command) -> Self {
        match c {
            Command::Set => Self::MQSTORE_OP_SET,
            Command::Get => Self::MQSTORE_OP_GET,
            Command::Del => Self::MQSTORE_OP_DEL,
            Command::VDel => Self::MQSTORE_OP_VDEL,
            Command::KeyNotify => Self::MQSTORE_OP_KEYNOTIFY,
            Command::Scan => Self::MQSTORE_OP_SCAN,
        }
    }
}

/// What an event is.
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum mqstore_event_kind {
    /// Layer 2: a call finished (`call`, `command`, `status` and the result fields).
    MQSTORE_EVENT_COMPLETED = 1,
    /// An observed key changed (`key`, `value`, `version`, `synthetic`, `gap`).
    MQSTORE_EVENT_CHANGED = 2,
    /// Layer 2: a jobs notification for a thing of `mqstore_core_act_as` (`thing`, and `json`:
    /// `{"kind": "notify", "thing", "in_progress": [...], "queued": [...]}` or `{"kind":
    /// "notify-next", "thing", "execution": {...} or null}`).
    MQSTORE_EVENT_JOBS = 3,
    /// Layer 2: a command's status record changed, after `mqstore_core_watch_commands`
    /// (`json`: the record).
    MQSTORE_EVENT_COMMAND_RECORD = 4,
    /// Layer 2: held lease `call` was renewed (`version`: the renewing SET's; its fencing
    /// token stays the one it was acquired with).
    MQSTORE_EVENT_LEASE_RENEWED = 5,
    /// Layer 2: held lease `call` is lost (`key`): a renewal found someone else holding it, or
    /// none was confirmed before it would lapse. Stop what it guarded.
    MQSTORE_EVENT_LEASE_LOST = 6,
    /// Layer 2: a key was made (`applied` true) or is gone (deleted or expired; `applied`
    /// false), after `mqstore_core_watch_keyspace` (`key`). QoS 0: scan again after a
    /// reconnect.
    MQSTORE_EVENT_KEYSPACE = 7,
    /// Layer 2: a device shadow's notification, after `mqstore_core_use_shadow` (`thing`,
    /// `shadow_name`: NULL for the classic shadow, and `json`: `{"stream": "delta" |
    /// "documents", "body": ...}`).
    MQSTORE_EVENT_SHADOW = 8,
}

/// An event: a change of an observed key (both layers), or a finished call (layer 2). Owned
/// by the library: read it, then free it with `mqstore_event_free`; every pointer in it lives
/// until then. Fields that do not apply to the event are 0 / NULL.
#[repr(C)]
pub struct mqstore_event {
    /// What happened: it says which of the other fields apply.
    pub kind: mqstore_event_kind,
    /// COMPLETED: the id the call returned.
    pub call: u64,
    /// COMPLETED: which call it was.
    pub op: mqstore_op,
    /// COMPLETED: 0, or why the call failed (a `mqstore_status`).
    pub status: c_int,
    /// COMPLETED with a status: its message, NUL-terminated; else NULL.
    pub error: *const c_char,
    /// SET: applied (false: NX/NEX did not hold).
    pub applied: bool,
    /// GET: the key exists (`value` holds it).
    pub found: bool,
    /// DEL / VDEL: what happened.
    pub deleted: mqstore_deleted,
    /// CHANGED: the key.
    pub key: *const u8,
    /// The key's length in bytes.
    pub key_len: usize,
    /// CHANGED: the new value, NULL when the key was deleted or expired. GET: the value.
    pub value: *const u8,
    /// The value's length in bytes.
    pub value_len: usize,
    /// CHANGED: found by reading the key back after a reconnect or a server restart; the
    /// notification itself was missed.
    pub synthetic: bool,
    /// CHANGED: changes between the last one reported and this one were not reported
    /// (overtaken, or lost with a server's connection): the changes seen are not the key's
    /// whole history, and this one is its state now. True on every synthetic change too.
    pub gap: bool,
    /// Whether `version` holds a version.
    pub has_version: bool,
    /// The key's version (CHANGED, SET, GET found, DEL), else the server's clock.
    pub version: mqstore_hlc,
    /// SCAN: this page's keys.
    pub keys: *const mqstore_bytes,
    /// How many keys `keys` holds.
    pub key_count: usize,
    /// SCAN: the token of the next page (pass it to `mqstore_core_scan`), NULL on the last.
    pub scan_token: *const u8,
    /// The token's length in bytes.
    pub scan_token_len: usize,
    /// JOBS, COMMAND_RECORD, and COMPLETED jobs and command calls: NUL-terminated JSON. A jobs
    /// call's result: the execution of start-next and describe (`null` when none), the job,
    /// execution or list of a describe or list call, the `/accepted` reply or the operator's
    /// answer otherwise (AWS's field names). A command: `{"id", "status", "contentType"?,
    /// "deviceStatus"?}` (the device's answer is in `value`). A command status: the record.
    pub json: *const c_char,
    /// JOBS, SHADOW: the thing, NUL-terminated.
    pub thing: *const c_char,
    /// SHADOW: the shadow's name, NUL-terminated; NULL for the classic shadow.
    pub shadow_name: *const c_char,
}

/// An event and the storage its pointers point into.
#[repr(C)]
pub(crate) struct Event {
    /// First, so that a pointer to the event is a pointer to this.
    c: mqstore_event,
    _error: Option<CString>,
    _data: Vec<Bytes>,
    _keys: Vec<mqstore_bytes>,
    _strings: Vec<CString>,
}

impl Event {
    fn empty(kind: mqstore_event_kind) -> mqstore_event {
        mqstore_event {
            kind,
            call: 0,
            op: mqstore_op::MQSTORE_OP_NONE,
            status: 0,
            error: std::ptr::null(),
            applied: false,
            found: false,
            deleted: mqstore_deleted::MQSTORE_DELETED,
            key: std::ptr::null(),
            key_len: 0,
            value: std::ptr::null(),
            value_len: 0,
            synthetic: false,
            gap: false,
            has_version: false,
            version: EMPTY_HLC,
            keys: std::ptr::null(),
            key_count: 0,
            scan_token: std::ptr::null(),
            scan_token_len: 0,
            json: std::ptr::null(),
            thing: std::ptr::null(),
            shadow_name: std::ptr::null(),
        }
    }

    fn of(c: mqstore_event) -> Self {
        Self {
            c,
            _error: None,
            _data: Vec::new(),
            _keys: Vec::new(),
            _strings: Vec::new(),
        }
    }

    /// Keeps `text` with the event (a NUL in it, which JSON never has unescaped, becomes
    /// `\0`), for a pointer to it.
    fn keep(&mut self, text: &str) -> *const c_char {
        let text = CString::new(text.replace('\0', "\\0")).unwrap_or_default();
        let pointer = text.as_ptr();
        self._strings.push(text);
        pointer
    }

    /// A version, when it has one that fits (`has_version` says).
    fn set_version(&mut self, version: Option<&Hlc>) {
        if let Ok((has, v)) = version_out(version) {
            self.c.has_version = has;
            self.c.version = v;
        }
    }

    fn set_json(&mut self, value: &impl serde::Serialize) {
        let text = serde_json::to_string(value).unwrap_or_else(|_| "null".into());
        self.c.json = self.keep(&text);
    }

    /// A change of an observed key. A version whose node id does not fit is left out
    /// (`has_version` 0) rather than losing the change.
    pub fn changed(
        key: Bytes,
        value: Option<Bytes>,
        version: Option<&Hlc>,
        synthetic: bool,
        gap: bool,
    ) -> Self {
        let mut c = Self::empty(mqstore_event_kind::MQSTORE_EVENT_CHANGED);
        c.key = key.as_ptr();
        c.key_len = key.len();
        if let Some(value) = &value {
            c.value = value.as_ptr();
            c.value_len = value.len();
        }
        c.synthetic = synthetic;
        c.gap = gap;
        if let Ok((has, v)) = version_out(version) {
            c.has_version = has;
            c.version = v;
        }
        let mut event = Self::of(c);
        event._data.push(key);
        event._data.extend(value);
        event
    }

    /// A layer 2 session event (`None`: one of a newer core, which C callers do not know).
    pub fn of_session(event: SessionEvent) -> Option<Self> {
        Some(match event {
            SessionEvent::Changed {
                key,
                change,
                version,
                synthetic,
                gap,
            } => Self::changed(key, change.into_value(), version.as_ref(), synthetic, gap),
            SessionEvent::Completed { call, op, result } => {
                let mut c = Self::empty(mqstore_event_kind::MQSTORE_EVENT_COMPLETED);
                c.call = call.0;
                c.op = mqstore_op::of_session(op);
                let mut event = Self::of(c);
                match result.map_err(Error::from) {
                    Err(e) => event.fail(e),
                    Ok(Completion::Store(answer)) => match version_out(answer.version.as_ref()) {
                        Err(e) => event.fail(e),
                        Ok((has_version, version)) => {
                            event.c.has_version = has_version;
                            event.c.version = version;
                            event.fill(answer.response);
                        }
                    },
                    Ok(Completion::Jobs(answer)) => event.set_json(&answer.into_json()),
                    Ok(Completion::CommandDefinitions(answer)) => {
                        event.set_json(&answer.into_json())
                    }
                    Ok(Completion::Command(reply)) => {
                        event.set_json(&serde_json::json!({
                            "id": reply.id,
                            "status": reply.status,
                            "contentType": reply.content_type,
                            "deviceStatus": reply.device_status,
                        }));
                        event.c.value = reply.payload.as_ptr();
                        event.c.value_len = reply.payload.len();
                        event._data.push(reply.payload);
                    }
                    Ok(Completion::CommandStatus(record)) => event.set_json(&record),
                    Ok(Completion::Lease(token)) => {
                        event.c.applied = token.is_some();
                        event.set_version(token.as_ref());
                    }
                    Ok(Completion::Released(held)) => event.c.applied = held,
                    // A completion of a newer core (the enum is open): said, not dropped.
                    Ok(_) => event.fail(Error::new(
                        crate::mqstore_status::MQSTORE_ERR_INTERNAL,
                        "an answer this library does not know",
                    )),
                }
                event
            }
            SessionEvent::LeaseRenewed { lease, version } => {
                let kind = mqstore_event_kind::MQSTORE_EVENT_LEASE_RENEWED;
                let mut event = Self::of(Self::empty(kind));
                event.c.call = lease.0;
                event.set_version(Some(&version));
                event
            }
            SessionEvent::LeaseLost { lease, key } => {
                let mut c = Self::empty(mqstore_event_kind::MQSTORE_EVENT_LEASE_LOST);
                c.call = lease.0;
                c.key = key.as_ptr();
                c.key_len = key.len();
                let mut event = Self::of(c);
                event._data.push(key);
                event
            }
            SessionEvent::Jobs(notification) => {
                let mut event = Self::of(Self::empty(mqstore_event_kind::MQSTORE_EVENT_JOBS));
                let thing = match &notification {
                    JobNotification::Notify { thing, .. } => thing,
                    JobNotification::NotifyNext { thing, .. } => thing,
                };
                event.c.thing = event.keep(thing);
                event.set_json(&notification);
                event
            }
            SessionEvent::Shadow(notification) => {
                let mut event = Self::of(Self::empty(mqstore_event_kind::MQSTORE_EVENT_SHADOW));
                event.c.thing = event.keep(&notification.thing);
                if let Some(name) = &notification.name {
                    event.c.shadow_name = event.keep(name);
                }
                event.set_json(&notification.to_json());
                event
            }
            SessionEvent::CommandRecord(record) => {
                let kind = mqstore_event_kind::MQSTORE_EVENT_COMMAND_RECORD;
                let mut event = Self::of(Self::empty(kind));
                event.set_json(&record);
                event
            }
            SessionEvent::Keyspace { key, created } => {
                let mut c = Self::empty(mqstore_event_kind::MQSTORE_EVENT_KEYSPACE);
                c.key = key.as_ptr();
                c.key_len = key.len();
                c.applied = created;
                let mut event = Self::of(c);
                event._data.push(key);
                event
            }
            _ => return None,
        })
    }

    fn fail(&mut self, e: Error) {
        let text = CString::new(e.message.replace('\0', "\\0")).unwrap_or_default();
        self.c.status = e.code;
        self.c.error = text.as_ptr();
        self._error = Some(text);
    }

    fn fill(&mut self, response: Response) {
        match response {
            Response::Ok => self.c.applied = true,
            Response::NotApplied => {
                self.c.deleted = mqstore_deleted::MQSTORE_DELETE_VALUE_MISMATCH;
            }
            Response::Deleted(n) => {
                self.c.deleted = match n {
                    0 => mqstore_deleted::MQSTORE_DELETE_ABSENT,
                    _ => mqstore_deleted::MQSTORE_DELETED,
                };
            }
            Response::Value(value) => {
                let value = value.value();
                self.c.found = true;
                self.c.value = value.as_ptr();
                self.c.value_len = value.len();
                self._data.push(value);
            }
            Response::Absent => {}
            Response::Keys { keys, token } => {
                self._keys = keys.iter().map(|k| mqstore_bytes::of(k)).collect();
                self.c.keys = self._keys.as_ptr();
                self.c.key_count = self._keys.len();
                self._data.extend(keys);
                if let Some(token) = token {
                    self.c.scan_token = token.as_ptr();
                    self.c.scan_token_len = token.len();
                    self._data.push(token);
                }
            }
            // The core turns `-ERR` into a failed result; never seen here.
            Response::Error(e) => self.fail(e.into()),
        }
    }

    /// Hands the event to C.
    pub fn into_c(self) -> *mut mqstore_event {
        new_handle(self).cast()
    }
}

/// Frees an event. NULL is ignored; an event freed twice is an error
/// (`mqstore_last_error()`), not a crash.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_event_free(event: *mut mqstore_event) {
    crate::error::ffi_void(|| {
        // SAFETY: events are handed out as `Event`s (`Event::into_c`).
        unsafe { take_handle(event.cast::<Event>(), "event") }.map(drop)
    });
}

/// A byte-string argument: NULL is allowed only with length 0.
pub(crate) unsafe fn bytes_arg<'a>(data: *const u8, len: usize, what: &str) -> Result<&'a [u8]> {
    if data.is_null() {
        return match len {
            0 => Ok(&[]),
            _ => Err(Error::invalid(format!(
                "{what} is NULL with a length of {len}"
            ))),
        };
    }
    // SAFETY: the caller passes `len` readable bytes at `data`.
    Ok(unsafe { std::slice::from_raw_parts(data, len) })
}

/// A key argument: at least one byte (the state store has no empty keys).
pub(crate) unsafe fn key_arg(data: *const u8, len: usize, what: &str) -> Result<Bytes> {
    // SAFETY: as `bytes_arg`.
    let key = unsafe { bytes_arg(data, len, what) }?;
    if key.is_empty() {
        return Err(Error::invalid(format!(
            "{what} is empty (key_len 0): keys are at least one byte"
        )));
    }
    Ok(Bytes::copy_from_slice(key))
}

/// A NUL-terminated UTF-8 string argument.
pub(crate) unsafe fn str_arg<'a>(text: *const c_char, what: &str) -> Result<&'a str> {
    if text.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(text) }
        .to_str()
        .map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// An optional string argument: NULL is none.
pub(crate) unsafe fn opt_str_arg<'a>(text: *const c_char, what: &str) -> Result<Option<&'a str>> {
    match text.is_null() {
        true => Ok(None),
        // SAFETY: as `str_arg`.
        false => unsafe { str_arg(text, what) }.map(Some),
    }
}

/// An out-parameter: it must not be NULL.
pub(crate) unsafe fn out_arg<'a, T>(out: *mut T, what: &str) -> Result<&'a mut T> {
    // SAFETY: the caller passes NULL or a writable `T`.
    unsafe { out.as_mut() }.ok_or_else(|| Error::invalid(format!("{what} is NULL")))
}

/// Writes `value` to an optional out-parameter (NULL: the caller does not want it).
pub(crate) unsafe fn write_opt<T>(out: *mut T, value: T) {
    // SAFETY: the caller passes NULL or a writable `T`.
    if let Some(out) = unsafe { out.as_mut() } {
        *out = value;
    }
}

/// Copies `bytes` into the caller's buffer `buf` of `capacity` bytes and writes the length to
/// `len` (required). A buffer too small gets nothing, and `len` says how much is needed.
pub(crate) unsafe fn copy_out(
    bytes: &[u8],
    buf: *mut u8,
    capacity: usize,
    len: *mut usize,
    what: &str,
) -> Result<()> {
    // SAFETY: the caller passes NULL or a writable length.
    let len = unsafe { out_arg(len, "the length out-parameter") }?;
    *len = bytes.len();
    if bytes.len() > capacity {
        return Err(Error::too_small(what, bytes.len(), capacity));
    }
    if buf.is_null() {
        if bytes.is_empty() {
            return Ok(());
        }
        return Err(Error::invalid(format!("the buffer for {what} is NULL")));
    }
    // SAFETY: `capacity` writable bytes at `buf`, and `bytes.len() <= capacity`.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf, bytes.len()) };
    Ok(())
}

/// Copies `text` and a NUL into the caller's buffer (see [`copy_out`]; the length written
/// excludes the NUL, the capacity must include it).
pub(crate) unsafe fn copy_str_out(
    text: &str,
    buf: *mut c_char,
    capacity: usize,
    len: *mut usize,
    what: &str,
) -> Result<()> {
    let mut with_nul = Vec::with_capacity(text.len() + 1);
    with_nul.extend_from_slice(text.as_bytes());
    with_nul.push(0);
    // SAFETY: as `copy_out`.
    let result = unsafe { copy_out(&with_nul, buf.cast(), capacity, len, what) };
    // SAFETY: `copy_out` checked `len`.
    unsafe { *len = text.len() };
    if let Err(mut e) = result {
        if e.code == crate::mqstore_status::MQSTORE_ERR_BUFFER_TOO_SMALL as c_int {
            e.message = format!(
                "the buffer for {what} holds {capacity} bytes and {} are needed (the text and its NUL); the text's length was written to the length argument",
                text.len() + 1
            );
        }
        return Err(e);
    }
    Ok(())
}

/// How a command waits (`mqstore_command_options.mode`).
#[repr(C)]
pub enum mqstore_command_mode {
    /// Until the device answers (or the timeout).
    MQSTORE_COMMAND_AWAIT = 0,
    /// Until the broker has the command; no answer is expected (status DELIVERED).
    MQSTORE_COMMAND_ONE_WAY = 1,
    /// Returns the command's id at once (status SENT); the answer goes to its status record
    /// (`mqstore_command_status`).
    MQSTORE_COMMAND_DETACHED = 2,
}

/// An MQTT 5 user property, two NUL-terminated UTF-8 strings.
#[repr(C)]
pub struct mqstore_user_property {
    /// The property's name.
    pub name: *const c_char,
    /// Its value.
    pub value: *const c_char,
}

/// Options of a command; zero-initialise for an awaited MQTT 5 request/response command with
/// the default timeout.
#[repr(C)]
pub struct mqstore_command_options {
    /// The payload's content type, or NULL.
    pub content_type: *const c_char,
    /// The device profile ("mqtt5" when NULL; "dji", "iothub", "aws", or one of the server's).
    pub profile: *const c_char,
    /// Milliseconds to wait for the answer; 0: the service's default.
    pub timeout_ms: u32,
    /// A `mqstore_command_mode`.
    pub mode: c_int,
    /// User properties for the device (`header_count` of them; NULL when none), e.g. a
    /// reason or a trace id. Borrowed for the call.
    pub headers: *const mqstore_user_property,
    /// How many entries `headers` holds.
    pub header_count: usize,
}

/// A command to send to the device topic `topic` with `payload`, as `options` (NULL: the
/// defaults) say.
pub(crate) unsafe fn command_request(
    topic: *const c_char,
    payload: *const u8,
    payload_len: usize,
    options: *const mqstore_command_options,
) -> Result<CommandRequest> {
    // SAFETY: the caller's pointers, checked by the helpers.
    let topic = unsafe { str_arg(topic, "topic") }?;
    if topic.is_empty() {
        return Err(Error::invalid("the command topic is empty"));
    }
    let payload = Bytes::copy_from_slice(unsafe { bytes_arg(payload, payload_len, "payload") }?);
    let mut request = CommandRequest::new(topic, payload);
    // SAFETY: NULL or the caller's struct.
    if let Some(o) = unsafe { options.as_ref() } {
        request.content_type =
            unsafe { opt_str_arg(o.content_type, "options.content_type") }?.map(Into::into);
        if let Some(profile) = unsafe { opt_str_arg(o.profile, "options.profile") }? {
            request.profile = profile.into();
        }
        if o.timeout_ms > 0 {
            request.timeout_ms = u64::from(o.timeout_ms);
        }
        request.mode = command_mode(o.mode)?;
        if o.header_count > 0 {
            if o.headers.is_null() {
                return Err(Error::invalid(
                    "options.headers is NULL with a header_count",
                ));
            }
            // SAFETY: the caller's array of `header_count` properties.
            let headers = unsafe { std::slice::from_raw_parts(o.headers, o.header_count) };
            for header in headers {
                let name = unsafe { str_arg(header.name, "options.headers[].name") }?;
                let value = unsafe { str_arg(header.value, "options.headers[].value") }?;
                request.headers.push((name.to_owned(), value.to_owned()));
            }
        }
    }
    Ok(request)
}

/// The start of stored command `command_id` on `target` (a thing name, `thing/NAME`,
/// `clients/ID` or an ARN) with `parameters` (a JSON object, or NULL), as `options` (NULL:
/// the defaults; its profile and headers are not used) say.
pub(crate) unsafe fn command_start_request(
    command_id: *const c_char,
    target: *const c_char,
    parameters: *const c_char,
    options: *const mqstore_command_options,
) -> Result<CommandRequest> {
    // SAFETY: the caller's pointers, checked by the helpers.
    let command_id = unsafe { str_arg(command_id, "command_id") }?;
    let target = unsafe { str_arg(target, "target") }?;
    if command_id.is_empty() || target.is_empty() {
        return Err(Error::invalid(
            "the command id and the target must not be empty",
        ));
    }
    let mut request = CommandRequest::start(command_id, target);
    if let Some(parameters) = unsafe { opt_str_arg(parameters, "parameters") }? {
        request.parameters = serde_json::from_str(parameters)
            .map_err(|e| Error::invalid(format!("parameters: not a JSON object ({e})")))?;
    }
    // SAFETY: NULL or the caller's struct.
    if let Some(o) = unsafe { options.as_ref() } {
        if o.timeout_ms > 0 {
            request.timeout_ms = u64::from(o.timeout_ms);
        }
        request.mode = command_mode(o.mode)?;
    }
    Ok(request)
}

fn command_mode(mode: c_int) -> Result<Mode> {
    match mode {
        0 => Ok(Mode::Await),
        1 => Ok(Mode::OneWay),
        2 => Ok(Mode::Detached),
        other => Err(Error::invalid(format!(
            "options.mode is MQSTORE_COMMAND_AWAIT, _ONE_WAY or _DETACHED, not {other}"
        ))),
    }
}

/// A NUL-terminated JSON text argument, parsed.
pub(crate) unsafe fn json_arg(ptr: *const c_char, what: &str) -> Result<serde_json::Value> {
    // SAFETY: the caller's pointer, checked by `str_arg`.
    let text = unsafe { str_arg(ptr, what) }?;
    serde_json::from_str(text).map_err(|e| Error::invalid(format!("{what} is not JSON: {e}")))
}
