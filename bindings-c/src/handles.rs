//! The registry of live objects handed to C. Every handle and every returned object (event,
//! publish, key list) is recorded here when made and removed when freed, so a call can tell a
//! handle of the right kind from NULL, from one already freed, or from another kind of object,
//! and answer with an error instead of touching freed memory. (An address reused by a newer
//! object of the same kind cannot be told apart: that is the limit of "where detectable".)

use std::any::TypeId;
use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::error::{Error, Result};

// A B-tree rather than a hash map: its nodes are referenced from their start, so valgrind sees
// the registry as reachable at exit, where a hash table's interior pointer reads as "possibly
// lost".
static LIVE: Mutex<BTreeMap<usize, TypeId>> = Mutex::new(BTreeMap::new());

fn live() -> std::sync::MutexGuard<'static, BTreeMap<usize, TypeId>> {
    // The map stays consistent under a panic (single inserts and removes).
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Moves `value` to the heap and records it: the pointer C gets.
pub(crate) fn new_handle<T: 'static>(value: T) -> *mut T {
    let pointer = Box::into_raw(Box::new(value));
    live().insert(pointer as usize, TypeId::of::<T>());
    pointer
}

fn check<T: 'static>(pointer: *const T, what: &str) -> Result<()> {
    if pointer.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    match live().get(&(pointer as usize)) {
        Some(kind) if *kind == TypeId::of::<T>() => Ok(()),
        Some(_) => Err(Error::invalid(format!(
            "{what} is another kind of mqstore object"
        ))),
        None => Err(Error::invalid(format!(
            "{what} is not a live mqstore object (already freed, or not from this library)"
        ))),
    }
}

/// The object behind a live handle.
///
/// # Safety
/// No other call may free it while the reference lives (the header's thread-safety rules).
pub(crate) unsafe fn handle<'a, T: 'static>(pointer: *const T, what: &str) -> Result<&'a T> {
    check(pointer, what)?;
    // SAFETY: recorded as a live `T` made by `new_handle`.
    Ok(unsafe { &*pointer })
}

/// The object behind a live handle, to change it.
///
/// # Safety
/// As [`handle`], and no other reference to it may be in use (one call at a time per handle).
pub(crate) unsafe fn handle_mut<'a, T: 'static>(pointer: *mut T, what: &str) -> Result<&'a mut T> {
    check(pointer, what)?;
    // SAFETY: recorded as a live `T` made by `new_handle`.
    Ok(unsafe { &mut *pointer })
}

/// Takes a live handle back to drop it. NULL is `Ok(None)` (frees are NULL-safe); a pointer
/// that is not live is an error and is left alone.
///
/// # Safety
/// No other call may be using the object.
pub(crate) unsafe fn take_handle<T: 'static>(
    pointer: *mut T,
    what: &str,
) -> Result<Option<Box<T>>> {
    if pointer.is_null() {
        return Ok(None);
    }
    check(pointer, what)?;
    live().remove(&(pointer as usize));
    // SAFETY: made by `Box::into_raw` in `new_handle`, and no longer recorded.
    Ok(Some(unsafe { Box::from_raw(pointer) }))
}
