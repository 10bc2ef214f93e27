//! Layer 1's device shadows (AWS IoT's Device Shadow API): a handle per thing's classic or
//! named shadow, its documents and notifications as JSON text for the firmware's own parser.

use std::ffi::{c_char, c_int};
use std::sync::Arc;
use std::time::Duration;

use mqstore_core::shadow::Notification;
use mqstore_net::blocking::Shadow;
use serde_json::Value;

use crate::client::{Events, mqstore_client};
use crate::error::{Result, ffi, ffi_void};
use crate::handles::{handle, new_handle, take_handle};
use crate::jobs::json_out;
use crate::types::{json_arg, opt_str_arg, out_arg, str_arg, write_opt};

/// One device shadow: made by `mqstore_shadow_open`, freed by `mqstore_shadow_free` (before
/// its client). Calls may come from any thread.
pub struct mqstore_shadow {
    shadow: Shadow,
    notifications: Arc<Events<Notification>>,
}

/// Uses `thing`'s shadow `name` (NULL: its classic shadow): subscribes to its answers, deltas
/// and documents. `*out` is the caller's: free it with `mqstore_shadow_free` before the
/// client.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_STATUS (a thing or shadow
/// name AWS refuses: 400; nothing sent), MQSTORE_ERR_CONNECTION_LOST (the client closed or the
/// connection dropped before the subscription was made).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_shadow_open(
    client: *const mqstore_client,
    thing: *const c_char,
    name: *const c_char,
    out: *mut *mut mqstore_shadow,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(out, "out") }?;
        *out = std::ptr::null_mut();
        let c = unsafe { handle(client, "client") }?;
        let thing = unsafe { str_arg(thing, "thing") }?;
        let name = unsafe { opt_str_arg(name, "name") }?;
        let notifications = Arc::new(Events::default());
        let shadow = c
            .client()
            .shadow_with(thing, name, notifications.listener())?;
        *out = new_handle(mqstore_shadow {
            shadow,
            notifications,
        });
        Ok(())
    })
}

/// Frees a shadow handle (NULL is ignored).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_shadow_free(shadow: *mut mqstore_shadow) {
    ffi_void(|| {
        // SAFETY: a handle from `mqstore_shadow_open`, checked.
        unsafe { take_handle(shadow, "shadow") }.map(drop)
    });
}

/// Writes `document` to `json` when the caller wants it (NULL: not wanted).
unsafe fn answer_out(json: *mut *mut c_char, document: Value) -> Result<()> {
    // SAFETY: NULL or the caller's pointer.
    match unsafe { json.as_mut() } {
        Some(out) => json_out(out, &document),
        None => Ok(()),
    }
}

/// The whole document (`{"state": {"desired", "reported", "delta"}, "metadata", "version",
/// "timestamp"}`) as JSON in `*json` (free it with `mqstore_string_free`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_STATUS (refused: AWS's
/// code and message in `mqstore_last_error`, `404: No shadow exists with name: '…'` when
/// there is none), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_shadow_get(
    shadow: *const mqstore_shadow,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(json, "json") }?;
        *out = std::ptr::null_mut();
        let shadow = unsafe { handle(shadow, "shadow") }?;
        json_out(out, &shadow.shadow.get()?)
    })
}

/// Merges `state_json` (a JSON object: `{"desired": {...}}`, `{"reported": {...}}`; `null`
/// removes a field or a section) into the shadow, made if it does not exist; with `version`
/// ≥ 0, only if the shadow is at that version (-1: whatever it is). `*json` (NULL: not wanted)
/// gets the answer: the update with its metadata and the new `version` (free it with
/// `mqstore_string_free`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (not JSON: nothing sent), MQSTORE_ERR_STATUS (refused:
/// AWS's code and message in `mqstore_last_error`: `409: Version conflict`, `400: …`,
/// `413: …`; nothing changed), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_shadow_update(
    shadow: *const mqstore_shadow,
    state_json: *const c_char,
    version: i64,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        unsafe { write_opt(json, std::ptr::null_mut()) };
        let shadow = unsafe { handle(shadow, "shadow") }?;
        let state = unsafe { json_arg(state_json, "state_json") }?;
        let accepted = shadow.shadow.update(state, u64::try_from(version).ok())?;
        unsafe { answer_out(json, accepted) }
    })
}

/// Deletes the shadow (its version is kept: the next one follows it). `*json` (NULL: not
/// wanted) gets the answer, with the deleted shadow's `version` (free it with
/// `mqstore_string_free`).
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (nothing sent), MQSTORE_ERR_STATUS (refused: AWS's
/// code and message in `mqstore_last_error`, `404: No shadow exists with name: '…'` when
/// there is none), MQSTORE_ERR_REQUEST_TIMEOUT, MQSTORE_ERR_CONNECTION_LOST,
/// MQSTORE_ERR_PUBLISH_REFUSED.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_shadow_delete(
    shadow: *const mqstore_shadow,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        unsafe { write_opt(json, std::ptr::null_mut()) };
        let shadow = unsafe { handle(shadow, "shadow") }?;
        let deleted = shadow.shadow.delete()?;
        unsafe { answer_out(json, deleted) }
    })
}

/// Waits up to `timeout_ms` (0: do not wait; negative: as long as it takes) for the shadow's
/// next notification: `{"stream": "delta", "body": {"state", "metadata", "version"}}` or
/// `{"stream": "documents", "body": {"previous", "current"}}`. `*json` gets it (free it with
/// `mqstore_string_free`), or NULL when none came in time.
/// Errors: MQSTORE_ERR_INVALID_ARGUMENT (a bad handle); none in time is MQSTORE_OK with `*json`
/// NULL.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mqstore_shadow_next_notification(
    shadow: *const mqstore_shadow,
    timeout_ms: i32,
    json: *mut *mut c_char,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's pointers, checked by the helpers.
        let out = unsafe { out_arg(json, "json") }?;
        *out = std::ptr::null_mut();
        let shadow = unsafe { handle(shadow, "shadow") }?;
        let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
        match shadow.notifications.pop(timeout, false) {
            Some(heard) => json_out(out, &heard.to_json()),
            None => Ok(()),
        }
    })
}
