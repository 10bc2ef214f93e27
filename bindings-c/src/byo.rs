//! Layer 2, "bring your own MQTT": the core's client session (`Session`: the state store,
//! jobs and commands clients) behind a C handle. No runtime, no threads, no sockets, no clock:
//! the caller's MQTT client publishes what `mqstore_core_next_publish` gives, feeds every
//! message of the subscriptions to `mqstore_core_handle`, passes the time in, and calls
//! `mqstore_core_expire` at `mqstore_core_next_deadline`. This file only converts.

use std::ffi::{CString, c_char, c_int};

use ::mqstore_core::client::jobs::{DeviceRequest, JobsClient};
use ::mqstore_core::client::{CallId, CallOptions, ClientConfig};
use ::mqstore_core::codec::{Bulk, Request, SetRequest};
use ::mqstore_core::envelope::{Properties, Publish};
use ::mqstore_core::jobs::{DeviceBody, check_operator_call};
use ::mqstore_core::session::Session;
use ::mqstore_core::shadow;
use bytes::Bytes;

use crate::error::{Error, Result, ffi, ffi_void, mqstore_status};
use crate::handles::{handle, handle_mut, new_handle, take_handle};
use crate::types::{
    Event, MQSTORE_NO_CALL, MQSTORE_NO_DEADLINE, MQSTORE_WAIT_FOREVER, SetOptions, bytes_arg,
    command_request, command_start_request, hlc_arg, json_arg, key_arg, mqstore_command_options,
    mqstore_event, mqstore_hlc, mqstore_set_options, mqstore_user_property, opt_str_arg, out_arg,
    str_arg, write_opt,
};

/// A client state machine (layer 2). Made by `mqstore_core_new`, freed by `mqstore_core_free`.
/// Not thread-safe: one call at a time (guard it with your MQTT loop's lock).
pub struct mqstore_core {
    session: Session,
    /// Every filter handed out: only ever appended to, so that each pointer the library gave
    /// stays valid until the handle is freed.
    filters: Vec<CString>,
    /// The subscription list: indexes into `filters`, in the order they were added.
    subscriptions: Vec<usize>,
    presence: CString,
}

impl mqstore_core {
    /// Adds filters to the end of the subscription list.
    fn subscribe(&mut self, filters: impl IntoIterator<Item = String>) -> Result<()> {
        for filter in filters {
            let filter =
                CString::new(filter).map_err(|_| Error::invalid("a topic filter holds a NUL"))?;
            self.subscriptions.push(self.filters.len());
            self.filters.push(filter);
        }
        Ok(())
    }

    /// Takes filters off the subscription list: their pointers, still owned by the handle.
    fn unsubscribe(&mut self, filters: &[String]) -> Vec<*const c_char> {
        let mut gone = Vec::new();
        self.subscriptions.retain(|&i| {
            let filter = &self.filters[i];
            let keep = !filters.iter().any(|f| f.as_bytes() == filter.as_bytes());
            if !keep {
                gone.push(filter.as_ptr());
            }
            keep
        });
        gone
    }

    /// The filter of events the session stopped watching (`None`: it was not), taken off the
    /// subscription list: its pointer, or NULL.
    fn unwatched(&mut self, filter: Option<&str>) -> *const c_char {
        match filter {
            Some(filter) => self
                .unsubscribe(&[filter.to_owned()])
                .pop()
                .unwrap_or(std::ptr::null()),
            None => std::ptr::null(),
        }
    }
}

/// The id of a call just started, to C.
fn started(call: CallId, out: *mut u64) {
    // SAFETY: NULL or the caller's `uint64_t`.
    unsafe { write_opt(out, call.0) };
}

/// Makes a client state machine for the MQTT client id `client_id` (it must not contain
/// `:`). `correlation_seed` is mixed into every correlation id: pass random bits, so that two
/// runs never share one. `timeout_ms` is every call's timeout (0: 10 000). On success `*out`
/// is the caller's: free it with `mqstore_core_free`.
///
/// Before the first call, subscribe (QoS 1) to every `mqstore_core_subscription` and wait for
/// the SUBACK; connect with a Will on `mqstore_core_presence_topic` (payload `gone`) so the
/// server forgets this client's registrations when it vanishes.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a client id that is not UTF-8 or contains `:`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_new(
    client_id: *const c_char,
    correlation_seed: u64,
    timeout_ms: u32,
    out: *mut *mut mqstore_core,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let client_id = unsafe { str_arg(client_id, "client_id") }?;
        if client_id.is_empty() {
            return Err(Error::invalid("client_id is empty"));
        }
        let mut config = ClientConfig::new(client_id, correlation_seed);
        if timeout_ms > 0 {
            config.default_timeout_ms = u64::from(timeout_ms);
        }
        let session = Session::new(config)
            .map_err(|e| Error::invalid(format!("client_id {client_id:?}: {e}")))?;
        let presence = CString::new(session.presence_topic())
            .map_err(|_| Error::invalid("client_id holds a NUL"))?;
        let mut core = mqstore_core {
            filters: Vec::new(),
            subscriptions: Vec::new(),
            presence,
            session,
        };
        core.subscribe(core.session.subscriptions())?;
        *out = new_handle(core);
        Ok(())
    })
}

/// Frees a state machine (NULL is ignored). Calls in flight are forgotten.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_free(core: *mut mqstore_core) {
    ffi_void(|| {
        // SAFETY: a handle from `mqstore_core_new`, checked.
        unsafe { take_handle(core, "core") }.map(drop)
    });
}

/// The `index`th topic filter to subscribe to (QoS 1) before the first call, from 0; NULL past
/// the last or for a bad handle. There are `mqstore_core_subscription_count` of them: five
/// from `mqstore_core_new` (the state store's answers, notifications and servers' presence,
/// the jobs operator's and the commands' answers), then those `mqstore_core_act_as` and
/// `mqstore_core_watch_commands` add. Subscribe to all of them again after a reconnect.
/// Owned by `core`: valid until it is freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_subscription(
    core: *const mqstore_core,
    index: usize,
) -> *const c_char {
    let mut topic = std::ptr::null();
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle(core, "core") }?;
        if let Some(&i) = core.subscriptions.get(index) {
            topic = core.filters[i].as_ptr();
        }
        Ok(())
    });
    topic
}

/// How many topic filters `mqstore_core_subscription` gives (0 for a bad handle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_subscription_count(core: *const mqstore_core) -> usize {
    let mut count = 0;
    ffi(|| {
        // SAFETY: a handle, checked.
        count = unsafe { handle(core, "core") }?.subscriptions.len();
        Ok(())
    });
    count
}

/// Acts as `thing` in the jobs device API (AWS IoT Jobs: `$aws/things/{thing}/jobs/...`)
/// from now on: adds its filters to the end of the subscription list. Subscribe (QoS 1) to
/// those from the count before the call, and wait for the SUBACKs, before its first
/// `mqstore_core_jobs_device` call; its notifications then arrive as MQSTORE_EVENT_JOBS
/// events. Acting as a thing again adds nothing. A thing name is 1-128 of a-z, A-Z, 0-9, `:`,
/// `_`, `-` (else MQSTORE_ERR_JOBS).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_act_as(
    core: *mut mqstore_core,
    thing: *const c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let filters = core.session.act_as(thing)?;
        core.subscribe(filters)
    })
}

/// Uses `thing`'s device shadow `name` (NULL: its classic shadow; AWS IoT's Device Shadow
/// API) from now on: adds its filters to the end of the subscription list (subscribe to them
/// as for `mqstore_core_act_as`) before its first `mqstore_core_shadow` call; its deltas and
/// documents then arrive as MQSTORE_EVENT_SHADOW events. Using it again adds nothing.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT, MQSTORE_ERR_STATUS (a thing or shadow name AWS
/// refuses: 400). Nothing changes on an error.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_use_shadow(
    core: *mut mqstore_core,
    thing: *const c_char,
    name: *const c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let name = unsafe { opt_str_arg(name, "name") }?;
        let filters = core.session.use_shadow(thing, name)?;
        core.subscribe(filters)
    })
}

/// Starts a request on a shadow in use (`mqstore_core_use_shadow`): `op` is "get", "update"
/// (with `state_json`: `{"desired": {...}}`, `{"reported": {...}}`, and `version` ≥ 0 to apply
/// only at that version, -1 for any) or "delete" (`state_json` NULL). The event's `json` is
/// the `/accepted` document; a rejection is MQSTORE_ERR_STATUS with AWS's code and message in
/// its `error` (`404: No shadow exists with name: '…'`, `409: Version conflict`, ...).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (not JSON, an unknown op), MQSTORE_ERR_STATUS (a
/// shadow not in use): nothing is sent.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_shadow(
    core: *mut mqstore_core,
    thing: *const c_char,
    name: *const c_char,
    op: *const c_char,
    state_json: *const c_char,
    version: i64,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let name = unsafe { opt_str_arg(name, "name") }?;
        let op_text = unsafe { str_arg(op, "op") }?;
        let op = shadow::Op::parse(op_text).ok_or_else(|| {
            Error::invalid(format!(
                "op is \"get\", \"update\" or \"delete\", not {op_text:?}"
            ))
        })?;
        let body = match (op, unsafe { opt_str_arg(state_json, "state_json") }?) {
            (shadow::Op::Update, Some(state)) => {
                let state = serde_json::from_str(state)
                    .map_err(|e| Error::invalid(format!("state_json is not JSON: {e}")))?;
                shadow::update_body(state, u64::try_from(version).ok())
            }
            (shadow::Op::Update, None) => return Err(Error::invalid("an update needs state_json")),
            (_, _) => serde_json::Value::Null,
        };
        started(
            core.session.shadow(thing, name, op, &body, None, now_ms)?,
            call,
        );
        Ok(())
    })
}

/// Reports every command's status change (any node's, any caller's) as an
/// MQSTORE_EVENT_COMMAND_RECORD event from now on: adds the command events' filter to the end
/// of the subscription list (subscribe to it as for `mqstore_core_act_as`). Again: nothing.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or message: nothing changes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_watch_commands(core: *mut mqstore_core) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle_mut(core, "core") }?;
        let filter = core.session.watch_commands().map(str::to_owned);
        core.subscribe(filter)
    })
}

/// Reports every key made or deleted (the server's keyspace events) as an
/// MQSTORE_EVENT_KEYSPACE event from now on: adds their filter to the end of the subscription
/// list (subscribe to it as for `mqstore_core_act_as`). Again: nothing.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or message: nothing changes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_watch_keyspace(core: *mut mqstore_core) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle_mut(core, "core") }?;
        let filter = core.session.watch_keyspace().map(str::to_owned);
        core.subscribe(filter)
    })
}

/// Stops acting as `thing` (and reporting its notifications): takes its filters off the
/// subscription list and puts them in `filters` (room for `capacity`; 6 is enough), `*count`
/// getting how many: unsubscribe from them. Nothing when it did not act as `thing`. The
/// strings are owned by `core` (valid until it is freed). MQSTORE_ERR_BUFFER_TOO_SMALL (and
/// nothing changes) when they do not fit; `*count` then says how many there are.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_leave(
    core: *mut mqstore_core,
    thing: *const c_char,
    filters: *mut *const c_char,
    capacity: usize,
    count: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let count = unsafe { out_arg(count, "count") }?;
        let leaving = JobsClient::device_subscriptions(thing);
        // SAFETY: the caller's array of `capacity` pointers.
        unsafe { leave(core, &leaving, filters, capacity, count, |s| s.leave(thing)) }
    })
}

/// Stops using `thing`'s shadow `name` (NULL: the classic one): takes its filters off the
/// subscription list and puts them in `filters` (room for `capacity`; 3 is enough), `*count`
/// getting how many: unsubscribe from them. Nothing when it did not use it. As
/// `mqstore_core_leave` otherwise (ownership, MQSTORE_ERR_BUFFER_TOO_SMALL).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_leave_shadow(
    core: *mut mqstore_core,
    thing: *const c_char,
    name: *const c_char,
    filters: *mut *const c_char,
    capacity: usize,
    count: *mut usize,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let name = unsafe { opt_str_arg(name, "name") }?;
        let count = unsafe { out_arg(count, "count") }?;
        let leaving = shadow::client_subscriptions(shadow::Target { thing, name });
        // SAFETY: the caller's array of `capacity` pointers.
        let left = |s: &mut Session| s.leave_shadow(thing, name);
        unsafe { leave(core, &leaving, filters, capacity, count, left) }
    })
}

/// Takes what `left` stops (`leaving`: its filters) off the subscription list into `filters`,
/// unless they do not fit in `capacity` (then nothing changes, and `*count` says how many).
///
/// # Safety
/// `filters` is NULL or holds `capacity` pointers.
unsafe fn leave(
    core: &mut mqstore_core,
    leaving: &[String],
    filters: *mut *const c_char,
    capacity: usize,
    count: &mut usize,
    left: impl FnOnce(&mut Session) -> Vec<String>,
) -> Result<()> {
    let subscribed = core.session.subscriptions();
    let needed = leaving.iter().filter(|f| subscribed.contains(f)).count();
    *count = needed;
    if needed > capacity {
        return Err(Error::new(
            mqstore_status::MQSTORE_ERR_BUFFER_TOO_SMALL,
            format!(
                "leaving gives {needed} filters and `filters` has room for {capacity}; the number was written to `count`"
            ),
        ));
    }
    if needed > 0 && filters.is_null() {
        return Err(Error::invalid("filters is NULL"));
    }
    let left = left(&mut core.session);
    for (i, filter) in core.unsubscribe(&left).into_iter().enumerate() {
        // SAFETY: `filters` holds `capacity` ≥ `needed` pointers (checked above).
        unsafe { *filters.add(i) = filter };
    }
    Ok(())
}

/// Stops reporting command status changes: takes the command events' filter off the
/// subscription list and puts it in `*filter` (NULL when it was not watching): unsubscribe
/// from it. Owned by `core` (valid until it is freed).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or message: nothing changes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_unwatch_commands(
    core: *mut mqstore_core,
    filter: *mut *const c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let filter = unsafe { out_arg(filter, "filter") }?;
        let gone = core.session.unwatch_commands();
        *filter = core.unwatched(gone);
        Ok(())
    })
}

/// Stops reporting keyspace events: takes their filter off the subscription list and puts it
/// in `*filter` (NULL when it was not watching): unsubscribe from it. Owned by `core` (valid
/// until it is freed).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or message: nothing changes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_unwatch_keyspace(
    core: *mut mqstore_core,
    filter: *mut *const c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let filter = unsafe { out_arg(filter, "filter") }?;
        let gone = core.session.unwatch_keyspace();
        *filter = core.unwatched(gone);
        Ok(())
    })
}

/// The topic of this client's presence: its Will (payload `gone`). Owned by `core`; NULL for
/// a bad handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_presence_topic(core: *const mqstore_core) -> *const c_char {
    let mut topic = std::ptr::null();
    ffi(|| {
        // SAFETY: a handle, checked.
        topic = unsafe { handle(core, "core") }?.presence.as_ptr();
        Ok(())
    });
    topic
}

/// The broker's Maximum Packet Size from its CONNACK (0: none). A call whose publish would be
/// larger fails with MQSTORE_ERR_REQUEST_TOO_LARGE before anything is queued.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_set_max_packet_size(
    core: *mut mqstore_core,
    max: u32,
) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle_mut(core, "core") }?;
        core.session.set_max_packet_size((max > 0).then_some(max));
        Ok(())
    })
}

/// Starts `request`: queues its publish and writes the call's id to `call` (NULL: not wanted).
unsafe fn start(
    core: *mut mqstore_core,
    request: Request,
    options: CallOptions,
    now_ms: u64,
    call: *mut u64,
) -> Result<()> {
    // SAFETY: a handle, checked.
    let core = unsafe { handle_mut(core, "core") }?;
    started(core.session.call(&request, &options, now_ms)?, call);
    Ok(())
}

/// SET `key` to `value` (`options`: NULL for a plain SET). Queues the publish; the result is
/// an MQSTORE_EVENT_COMPLETED event for `*call`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_set(
    core: *mut mqstore_core,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    options: *const mqstore_set_options,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let o = unsafe { SetOptions::read(options) }?;
        let request = Request::Set(SetRequest {
            key: unsafe { key_arg(key, key_len, "key") }?,
            value: Bulk::new(Bytes::copy_from_slice(unsafe {
                bytes_arg(value, value_len, "value")
            }?)),
            condition: o.condition,
            expires_in_ms: o.expires_ms,
        });
        let options = CallOptions {
            fencing_token: o.fencing_token,
            persist: o.persist,
            timeout_ms: o.timeout.map(|t| t.as_millis() as u64),
        };
        unsafe { start(core, request, options, now_ms, call) }
    })
}

/// GET `key`: the event has `found`, `value` and `version`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_get(
    core: *mut mqstore_core,
    key: *const u8,
    key_len: usize,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let key = unsafe { key_arg(key, key_len, "key") }?;
        unsafe {
            start(
                core,
                Request::Get { key },
                CallOptions::default(),
                now_ms,
                call,
            )
        }
    })
}

/// DEL `key` (`fencing_token`: NULL or the lock's token): the event has `deleted`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_del(
    core: *mut mqstore_core,
    key: *const u8,
    key_len: usize,
    fencing_token: *const mqstore_hlc,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let options = CallOptions {
            fencing_token: unsafe { hlc_arg(fencing_token, "fencing_token") }?,
            ..CallOptions::default()
        };
        unsafe { start(core, Request::Del { key }, options, now_ms, call) }
    })
}

/// VDEL: deletes `key` only if it holds `value`: the event has `deleted`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_vdel(
    core: *mut mqstore_core,
    key: *const u8,
    key_len: usize,
    value: *const u8,
    value_len: usize,
    fencing_token: *const mqstore_hlc,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let request = Request::VDel {
            key: unsafe { key_arg(key, key_len, "key") }?,
            value: Bytes::copy_from_slice(unsafe { bytes_arg(value, value_len, "value") }?),
        };
        let options = CallOptions {
            fencing_token: unsafe { hlc_arg(fencing_token, "fencing_token") }?,
            ..CallOptions::default()
        };
        unsafe { start(core, request, options, now_ms, call) }
    })
}

/// SCAN: one page of the keys matching `pattern` (`*` and `?` wildcards), after the page whose
/// event gave `scan_token` (NULL: the first page). The event has `keys` and `scan_token`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_scan(
    core: *mut mqstore_core,
    pattern: *const u8,
    pattern_len: usize,
    scan_token: *const u8,
    scan_token_len: usize,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let pattern =
            Bytes::copy_from_slice(unsafe { bytes_arg(pattern, pattern_len, "pattern") }?);
        let token = match scan_token.is_null() {
            true => None,
            false => Some(Bytes::copy_from_slice(unsafe {
                bytes_arg(scan_token, scan_token_len, "scan_token")
            }?)),
        };
        let request = Request::Scan { pattern, token };
        unsafe { start(core, request, CallOptions::default(), now_ms, call) }
    })
}

/// Starts observing `key` (two publishes: the registration, then a read of where it starts).
/// `*call` completes when registered; changes arrive as MQSTORE_EVENT_CHANGED events, and keep
/// arriving across reconnects (`mqstore_core_resume`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_observe(
    core: *mut mqstore_core,
    key: *const u8,
    key_len: usize,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let core = unsafe { handle_mut(core, "core") }?;
        started(core.session.observe(key, now_ms)?, call);
        Ok(())
    })
}

/// Stops observing `key`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_unobserve(
    core: *mut mqstore_core,
    key: *const u8,
    key_len: usize,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let core = unsafe { handle_mut(core, "core") }?;
        started(core.session.unobserve(key, now_ms)?, call);
        Ok(())
    })
}

/// Takes the lease on `key` for `ttl_ms` (a lock with a fencing token; the holder is this
/// client's id), waiting up to `wait_ms` for its holder to release it or let it lapse (0: one
/// try; MQSTORE_WAIT_FOREVER: until held, which is leader election). `*call` is the lease's id.
/// Its MQSTORE_OP_LEASE event has `applied` (held) and the fencing token in `version`; while
/// held the session renews it a third of its ttl after each claim's answer, and an
/// MQSTORE_EVENT_LEASE_LOST event says when it is lost. Pass the token to the writes it guards.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_lease(
    core: *mut mqstore_core,
    key: *const u8,
    key_len: usize,
    ttl_ms: u64,
    wait_ms: u64,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let key = unsafe { key_arg(key, key_len, "key") }?;
        let core = unsafe { handle_mut(core, "core") }?;
        if ttl_ms == 0 {
            return Err(Error::invalid("ttl_ms must be at least 1"));
        }
        let wait = (wait_ms != MQSTORE_WAIT_FOREVER).then_some(wait_ms);
        started(core.session.lease(key, ttl_ms, wait, now_ms)?, call);
        Ok(())
    })
}

/// Releases held lease `lease` (only if this client still holds its key) and stops renewing
/// it. The MQSTORE_OP_LEASE_RELEASE event's `applied` says whether it was still held.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_lease_release(
    core: *mut mqstore_core,
    lease: u64,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        started(core.session.release_lease(CallId(lease), now_ms)?, call);
        Ok(())
    })
}

/// A jobs operator call: `request_json` is the request as mqstore's operator API takes it, with
/// AWS's field names: `{"op": "createJob", "jobId": "fw-2", "targets": ["pump-1"], "document":
/// {...}, "timeoutConfig": {"inProgressTimeoutInMinutes": 30}}`; `cancelJob` (`jobId`,
/// `force`), `deleteJobExecution` (`jobId`, `thingName`, `force`), `describeJob`,
/// `describeJobExecution`, `listJobs`, `listJobExecutions` (`thingName`, `jobId`, `status`).
/// The event's `json` is what the call asks for: the job, execution or list of a describe or
/// list call, the answer otherwise. A refusal is MQSTORE_ERR_JOBS with AWS's code in the
/// message; a request that fits no call is MQSTORE_ERR_INVALID_ARGUMENT (nothing is sent).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_jobs_operate(
    core: *mut mqstore_core,
    request_json: *const c_char,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let request: serde_json::Value = unsafe { json_arg(request_json, "request_json") }?;
        check_operator_call(&request).map_err(Error::invalid)?;
        started(core.session.jobs_operate_json(&request, None, now_ms), call);
        Ok(())
    })
}

/// A jobs device call as `thing`, which the core must act as (`mqstore_core_act_as`; else
/// MQSTORE_ERR_JOBS and nothing is sent: the reply would never arrive), as the AWS IoT Jobs MQTT API
/// writes it: `api` is the topic's end after `$aws/things/{thing}/jobs/` (`get`,
/// `start-next`, `{jobId}/get`, `$next/get`, `{jobId}/update`) and `request_json` its payload
/// (NULL: `{}`), e.g. `{"status": "IN_PROGRESS", "statusDetails": {"step": "2/3"}}`; the
/// client adds the `clientToken`. The event's `json` is the execution of start-next and
/// describe (`null` when none), the `/accepted` reply otherwise; a `/rejected` reply is
/// MQSTORE_ERR_JOBS (AWS's code and message in the event's `error`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_jobs_device(
    core: *mut mqstore_core,
    thing: *const c_char,
    api: *const c_char,
    request_json: *const c_char,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let api = unsafe { str_arg(api, "api") }?;
        let body = match unsafe { opt_str_arg(request_json, "request_json") }? {
            None => DeviceBody::default(),
            Some(json) => serde_json::from_str(json).map_err(|e| {
                Error::invalid(format!(
                    "request_json does not fit the jobs device API: {e}"
                ))
            })?,
        };
        let request = DeviceRequest::from_wire(api, body).map_err(Error::invalid)?;
        started(
            core.session.jobs_device(thing, &request, None, now_ms)?,
            call,
        );
        Ok(())
    })
}

/// Asks `mqstore serve` to send `payload` to the device's command topic `topic` (`{id}` in it
/// becomes the command's id), as `options` say (NULL: awaited, MQTT 5 request/response, the
/// default timeout). The event's `value` is the device's answer and its `json`
/// `{"id", "status", "contentType"?, "deviceStatus"?}`; a device's error answer is
/// MQSTORE_ERR_COMMAND_FAILED or _REJECTED, no answer in time MQSTORE_ERR_COMMAND_TIMEOUT.
/// The call's own timeout is the command's plus 5 s, for the service's verdict.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_command(
    core: *mut mqstore_core,
    topic: *const c_char,
    payload: *const u8,
    payload_len: usize,
    options: *const mqstore_command_options,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let request = unsafe { command_request(topic, payload, payload_len, options) }?;
        started(core.session.command(&request, now_ms), call);
        Ok(())
    })
}

/// Asks `mqstore serve` to start stored command `command_id` on `target` with
/// `parameters_json` (NULL: none), as `mqstore_command_start` does; the event as
/// `mqstore_core_command`'s.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_command_start(
    core: *mut mqstore_core,
    command_id: *const c_char,
    target: *const c_char,
    parameters_json: *const c_char,
    options: *const mqstore_command_options,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let request =
            unsafe { command_start_request(command_id, target, parameters_json, options) }?;
        started(core.session.command(&request, now_ms), call);
        Ok(())
    })
}

/// A stored-commands call given as its JSON (see `mqstore_command_definitions`): the event's
/// `json` is the service's answer.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_command_definitions(
    core: *mut mqstore_core,
    request_json: *const c_char,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let request = unsafe { json_arg(request_json, "request_json") }?;
        let timeout = ::mqstore_core::commands::DEFAULT_TIMEOUT_MS;
        started(
            core.session
                .command_definitions_json(&request, timeout, now_ms),
            call,
        );
        Ok(())
    })
}

/// Asks for command `id`'s status record: the event's `json`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or argument: nothing queued); how the
/// call ends comes later, as its COMPLETED event.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_command_status(
    core: *mut mqstore_core,
    id: *const c_char,
    now_ms: u64,
    call: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let id = unsafe { str_arg(id, "id") }?;
        if id.is_empty() {
            return Err(Error::invalid("the command id is empty"));
        }
        let timeout = ::mqstore_core::commands::DEFAULT_TIMEOUT_MS;
        started(core.session.command_status(id, timeout, now_ms), call);
        Ok(())
    })
}

/// An MQTT 5 PUBLISH: what `mqstore_core_next_publish` gives to send (owned by the library,
/// freed with `mqstore_publish_free`), and what the caller passes to `mqstore_core_handle`
/// (the caller's, borrowed for the call). Strings are NUL-terminated UTF-8; NULL: absent.
#[repr(C)]
pub struct mqstore_publish {
    /// The topic to publish to, NUL-terminated.
    pub topic: *const c_char,
    /// The payload (`payload_len` bytes).
    pub payload: *const u8,
    /// The payload's length in bytes.
    pub payload_len: usize,
    /// Publish at this QoS (1).
    pub qos: u8,
    /// Payload Format Indicator (0: bytes).
    pub payload_format_indicator: u8,
    /// Message Expiry Interval in seconds; 0: absent (no expiry).
    pub message_expiry_interval: u32,
    /// The MQTT 5 content type, NUL-terminated, or NULL for none.
    pub content_type: *const c_char,
    /// The MQTT 5 response topic, NUL-terminated, or NULL for none.
    pub response_topic: *const c_char,
    /// The MQTT 5 correlation data (`correlation_data_len` bytes), or NULL for none.
    pub correlation_data: *const u8,
    /// The correlation data's length in bytes.
    pub correlation_data_len: usize,
    /// The MQTT 5 user properties to send, in order (`user_property_count` of them).
    pub user_properties: *const mqstore_user_property,
    /// How many user properties `user_properties` holds.
    pub user_property_count: usize,
    /// The call this publish belongs to, for `mqstore_core_publish_refused`; MQSTORE_NO_CALL
    /// for the client's own publishes. Ignored in what is passed to `mqstore_core_handle`.
    pub call: u64,
}

/// A publish to send and the storage its pointers point into.
#[repr(C)]
struct OutgoingPublish {
    c: mqstore_publish,
    _strings: Vec<CString>,
    _user_properties: Vec<mqstore_user_property>,
    _publish: Publish,
}

fn outgoing(publish: Publish, call: u64) -> Result<OutgoingPublish> {
    let mut strings = Vec::new();
    let mut keep = |text: &str| -> Result<*const c_char> {
        let text =
            CString::new(text).map_err(|_| Error::invalid("a topic or property holds a NUL"))?;
        let pointer = text.as_ptr();
        strings.push(text);
        Ok(pointer)
    };
    let p = &publish.properties;
    let topic = keep(&publish.topic)?;
    let content_type = p.content_type.as_deref().map(&mut keep).transpose()?;
    let response_topic = p.response_topic.as_deref().map(&mut keep).transpose()?;
    let user_properties = p
        .user_properties
        .iter()
        .map(|(name, value)| {
            Ok(mqstore_user_property {
                name: keep(name)?,
                value: keep(value)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let c = mqstore_publish {
        topic,
        payload: publish.payload.as_ptr(),
        payload_len: publish.payload.len(),
        qos: publish.qos,
        payload_format_indicator: p.payload_format_indicator.unwrap_or(0),
        message_expiry_interval: p.message_expiry_interval.unwrap_or(0),
        content_type: content_type.unwrap_or(std::ptr::null()),
        response_topic: response_topic.unwrap_or(std::ptr::null()),
        correlation_data: p
            .correlation_data
            .as_ref()
            .map_or(std::ptr::null(), |c| c.as_ptr()),
        correlation_data_len: p.correlation_data.as_ref().map_or(0, Bytes::len),
        user_properties: user_properties.as_ptr(),
        user_property_count: user_properties.len(),
        call,
    };
    Ok(OutgoingPublish {
        c,
        _strings: strings,
        _user_properties: user_properties,
        _publish: publish,
    })
}

/// The next message to publish, in order, into `*out` (NULL when there is none). Call it after
/// every call, `mqstore_core_handle`, `mqstore_core_expire` and `mqstore_core_resume` until it
/// gives NULL. `*out` is the caller's: free it with `mqstore_publish_free` once published.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle); none to publish is MQSTORE_OK with
/// `*out` NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_next_publish(
    core: *mut mqstore_core,
    out: *mut *mut mqstore_publish,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let core = unsafe { handle_mut(core, "core") }?;
        if let Some(next) = core.session.poll_publish() {
            let call = next.call.map_or(MQSTORE_NO_CALL, |c| c.0);
            *out = new_handle(outgoing(next.publish, call)?).cast();
        }
        Ok(())
    })
}

/// Frees a publish from `mqstore_core_next_publish` (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_publish_free(publish: *mut mqstore_publish) {
    ffi_void(|| {
        // SAFETY: publishes are handed out as `OutgoingPublish`es.
        unsafe { take_handle(publish.cast::<OutgoingPublish>(), "publish") }.map(drop)
    });
}

/// Reads a publish the caller received.
unsafe fn incoming(message: *const mqstore_publish) -> Result<Publish> {
    // SAFETY: the caller passes NULL or a valid struct whose pointers are valid.
    let m = unsafe { message.as_ref() }.ok_or_else(|| Error::invalid("message is NULL"))?;
    let text = |s: *const c_char, what: &str| {
        unsafe { opt_str_arg(s, what) }.map(|s| s.map(str::to_owned))
    };
    let correlation = match m.correlation_data.is_null() {
        true => None,
        false => Some(Bytes::copy_from_slice(unsafe {
            bytes_arg(
                m.correlation_data,
                m.correlation_data_len,
                "message.correlation_data",
            )
        }?)),
    };
    if m.user_properties.is_null() && m.user_property_count > 0 {
        return Err(Error::invalid(format!(
            "message.user_properties is NULL with a count of {}",
            m.user_property_count
        )));
    }
    let user_properties = (0..m.user_property_count)
        .map(|i| {
            // SAFETY: `user_property_count` entries at `user_properties` (checked non-NULL).
            let p = unsafe { &*m.user_properties.add(i) };
            let name = unsafe { str_arg(p.name, "a user property's name") }?;
            let value = unsafe { str_arg(p.value, "a user property's value") }?;
            Ok((name.to_owned(), value.to_owned()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Publish {
        topic: unsafe { str_arg(m.topic, "message.topic") }?.to_owned(),
        // One copy: the caller's buffer lives only for the call.
        payload: Bytes::copy_from_slice(unsafe {
            bytes_arg(m.payload, m.payload_len, "message.payload")
        }?),
        qos: m.qos,
        properties: Properties {
            payload_format_indicator: Some(m.payload_format_indicator),
            message_expiry_interval: (m.message_expiry_interval > 0)
                .then_some(m.message_expiry_interval),
            content_type: text(m.content_type, "message.content_type")?,
            response_topic: text(m.response_topic, "message.response_topic")?,
            correlation_data: correlation,
            user_properties,
        },
    })
}

/// Feeds a message that arrived on one of the subscriptions. What it meant becomes an event
/// (`mqstore_core_next_event`); messages for nobody (a late answer) are dropped. The message
/// is borrowed for the call.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or message: nothing changes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_handle(
    core: *mut mqstore_core,
    message: *const mqstore_publish,
    now_ms: u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let core = unsafe { handle_mut(core, "core") }?;
        let publish = unsafe { incoming(message) }?;
        core.session.handle(&publish, now_ms);
        Ok(())
    })
}

/// The broker refused the publish of call `call` (`mqstore_publish.call`): its PUBACK carried
/// reason code `reason_code`, 0x80 or more (0x87 not authorized, 0x95 packet too large, 0x97
/// quota exceeded, ...). The call ends with an MQSTORE_ERR_PUBLISH_REFUSED event: the request
/// was not applied. A call that is no longer in flight, or a code below 0x80, changes nothing.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_publish_refused(
    core: *mut mqstore_core,
    call: u64,
    reason_code: u8,
) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle_mut(core, "core") }?;
        if reason_code >= 0x80 {
            core.session.publish_refused(CallId(call), reason_code);
        }
        Ok(())
    })
}

/// Fails the calls whose timeout has passed (MQSTORE_ERR_REQUEST_TIMEOUT events) and renews what needs
/// renewing. Call it at `mqstore_core_next_deadline`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_expire(core: *mut mqstore_core, now_ms: u64) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle_mut(core, "core") }?;
        core.session.expire(now_ms);
        Ok(())
    })
}

/// When to call `mqstore_core_expire` next, in the clock of `now_ms`: `*deadline_ms` gets it,
/// or MQSTORE_NO_DEADLINE when nothing waits.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_next_deadline(
    core: *const mqstore_core,
    deadline_ms: *mut u64,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(deadline_ms, "deadline_ms") }?;
        let core = unsafe { handle(core, "core") }?;
        *out = core.session.next_deadline().unwrap_or(MQSTORE_NO_DEADLINE);
        Ok(())
    })
}

/// The connection dropped: every call in flight fails (MQSTORE_ERR_CONNECTION_LOST events). Once
/// connected and subscribed again, call `mqstore_core_resume`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_connection_lost(core: *mut mqstore_core) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle_mut(core, "core") }?;
        core.session.connection_lost();
        Ok(())
    })
}

/// After a reconnect, once subscribed: registers every observed key again and reads it back,
/// so a change missed while away arrives as a `synthetic` MQSTORE_EVENT_CHANGED.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle or message: nothing changes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_resume(core: *mut mqstore_core, now_ms: u64) -> c_int {
    ffi(|| {
        // SAFETY: a handle, checked.
        let core = unsafe { handle_mut(core, "core") }?;
        core.session.resume(now_ms)?;
        Ok(())
    })
}

/// The next event, in order, into `*out` (NULL when there is none). `*out` is the caller's:
/// free it with `mqstore_event_free`.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle); no event is MQSTORE_OK with `*out`
/// NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_core_next_event(
    core: *mut mqstore_core,
    out: *mut *mut mqstore_event,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let core = unsafe { handle_mut(core, "core") }?;
        // An event a newer core reports and this library does not know is skipped.
        while let Some(event) = core.session.poll_event() {
            if let Some(event) = Event::of_session(event) {
                *out = event.into_c();
                break;
            }
        }
        Ok(())
    })
}
