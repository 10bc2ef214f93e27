//! Where the state store's state lives: keys with their versions, fencing tokens and expiry,
//! and the KEYNOTIFY registrations.
//!
//! The engine decides everything that does not depend on stored state (syntax, timestamps,
//! versions, access) and hands the rest to the store as a [`StoreOp`]: plain data. The store
//! applies each op **atomically**, checking the conditions that depend on stored state
//! (fencing, NX/NEX, VDEL's value, quotas) with the rules in this module. The memory store
//! ([`Store`]) calls these rules directly and answers at once; a Redis store runs the same
//! rules as one script per op over a key and its metadata, so that conditional writes stay
//! atomic across nodes, and answers when Redis does. Both run the same test suite.

mod durable;
pub mod log;
mod memory;
mod pattern;

use std::sync::Arc;

use bytes::Bytes;

pub use durable::{DurableStore, Recovered};
pub use memory::MemoryStore;
pub use pattern::Pattern;

use crate::ServiceError;
use crate::codec::{Bulk, Condition};
use crate::hlc::Hlc;

/// A client's id, as the engine resolved it from `__srcId` or its response topic.
pub type ClientId = Arc<str>;

/// One atomic step against a store, as data. A store runs it in-process (the memory store)
/// or ships it as one script call to Redis and hands the [`StoreReply`] back later: the engine
/// prepares ops and interprets replies ([`Engine::begin`](crate::engine::Engine::begin),
/// [`Engine::finish`](crate::engine::Engine::finish)) without caring which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOp {
    /// The key's value and version.
    Get {
        /// The key.
        key: Bytes,
    },
    /// A SET with everything the engine already decided; applied if fencing, the condition
    /// and the quotas allow.
    Set {
        /// The key.
        key: Bytes,
        /// The value to write.
        value: Bulk,
        /// When to apply: always, NX or NEX.
        condition: Condition,
        /// Milliseconds since the epoch at and after which the key is gone.
        expires_at: Option<u64>,
        /// The fencing token presented, if any.
        fencing_token: Option<Hlc>,
        /// The version the key gets if the SET applies.
        version: Hlc,
        /// `aio-persistence: true`: keep the key durably (stores without a durable backend
        /// ignore it, as documented).
        persist: bool,
    },
    /// A DEL, or with `if_value` a VDEL; applied if fencing (and the value) allow.
    Delete {
        /// The key.
        key: Bytes,
        /// Delete only if the key holds this value (VDEL).
        if_value: Option<Bytes>,
        /// The fencing token presented, if any.
        fencing_token: Option<Hlc>,
        /// The deletion's version: this candidate, or the logical time right after the key's
        /// version (on Redis also after the newest version its bucket issued) when that is not
        /// older, so that a deletion and a concurrent SET never share a version.
        version: Hlc,
    },
    /// Register `client` for changes of `key` (idempotent). With `lease_until`, every
    /// registration of the client lasts until then (or a later renewal): a client that stops
    /// renewing loses them, however it left.
    Watch {
        /// The client.
        client: ClientId,
        /// The key.
        key: Bytes,
        /// When the registration's lease ends (ms since the epoch); None: no lease.
        lease_until: Option<u64>,
    },
    /// Remove that registration.
    Unwatch {
        /// The client.
        client: ClientId,
        /// The key it stops watching.
        key: Bytes,
    },
    /// Up to `limit` keys after `after`, in the store's stable order, that match `pattern`,
    /// examining at most `budget` keys.
    Scan {
        /// The pattern keys must match.
        pattern: Pattern,
        /// Start after this key; None from the first.
        after: Option<Bytes>,
        /// At most this many keys.
        limit: usize,
        /// At most this many keys looked at (matching or not).
        budget: usize,
    },
}

/// What a [`StoreOp`] did; each op has its own variant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreReply {
    /// The value and its version, or None.
    Get(Option<(Bulk, Hlc)>),
    /// What the SET did, or why it was refused.
    Set(Result<SetOutcome, ServiceError>),
    /// What the delete did, or why it was refused.
    Delete(Result<DelOutcome, ServiceError>),
    /// Registered, or refused by the registration limits.
    Watch(Result<(), ServiceError>),
    /// Whether there was a registration to remove.
    Unwatch(bool),
    /// The keys found, and the last key examined when the scan stopped before the end.
    Scan {
        /// The matching keys of this page.
        keys: Vec<Bytes>,
        /// The last key looked at, where the next page starts; None at the end.
        last: Option<Bytes>,
    },
}

/// What a SET did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    /// Applied with `version` ([`version_after`] the key's stored version); the clients
    /// watching the key; the version of the value it replaced.
    Applied {
        /// The clients to notify.
        watchers: Vec<ClientId>,
        /// The new version.
        version: Hlc,
        /// The version of the value replaced; `None` when the SET made the key (so that an
        /// observer can tell whether it heard of every change: see
        /// [`crate::envelope::notification_properties`]).
        replaced: Option<Hlc>,
    },
    /// NX/NEX did not hold; the key's current version.
    NotApplied {
        /// The key's current version.
        version: Hlc,
    },
}

/// What a DEL or VDEL did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelOutcome {
    /// Deleted; the clients watching the key, the deletion's own version (newer than the
    /// key's: see [`StoreOp::Delete`]) and the deleted value's.
    Deleted {
        /// The clients to notify.
        watchers: Vec<ClientId>,
        /// The deletion's version.
        version: Hlc,
        /// The version of the value deleted.
        replaced: Hlc,
    },
    /// There was no such key (or the value did not match).
    Absent,
    /// VDEL: the value did not match.
    ValueMismatch,
}

/// Limits on what a store holds. `None` is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quotas {
    /// At most this many keys.
    pub max_keys: Option<u64>,
    /// Total bytes of keys and values.
    pub max_bytes: Option<u64>,
    /// KEYNOTIFY registrations in all.
    pub max_watches: Option<u64>,
    /// KEYNOTIFY registrations of one client.
    pub max_watches_per_client: Option<u64>,
}

impl Quotas {
    /// The registration limits a server has unless told otherwise: memory stays bounded
    /// whatever clients register (a registration costs about 200 bytes).
    pub const SERVER_DEFAULT: Quotas = Quotas {
        max_keys: None,
        max_bytes: None,
        max_watches: Some(1_000_000),
        max_watches_per_client: Some(10_000),
    };

    /// Whether one more registration fits, with `total` registrations in all and `of_client`
    /// of the registering client.
    pub fn watch_fits(&self, total: u64, of_client: u64) -> bool {
        self.max_watches.is_none_or(|max| total < max)
            && self
                .max_watches_per_client
                .is_none_or(|max| of_client < max)
    }
}

/// How much a store holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Keys held.
    pub keys: u64,
    /// Total bytes of keys and values.
    pub bytes: u64,
    /// KEYNOTIFY registrations.
    pub watches: u64,
}

/// A key that expired and was removed: its watchers get a DELETE notification with a version
/// newer than `version`, the key's last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    /// The key that expired.
    pub key: Bytes,
    /// The clients to notify.
    pub watchers: Vec<ClientId>,
    /// The expiry's own version: after the key's, and after every version the store (on
    /// Redis, the key's bucket) issued before it, so that a SET that follows gets a later one.
    pub version: Hlc,
    /// The version of the value that expired.
    pub replaced: Hlc,
}

/// A store the engine drives in-process: every call is one atomic step, answered at once.
/// Implementations never see an expired key: the engine calls [`Store::pop_expired`] until it
/// returns `None` before each command.
pub trait Store {
    /// Runs one op at `now_ms` (keys whose deadline is at or before it are gone).
    fn apply(&mut self, op: &StoreOp, now_ms: u64) -> StoreReply;

    /// Removes one key whose deadline is at or before `now_ms`; returns it with its watchers.
    fn pop_expired(&mut self, now_ms: u64) -> Option<Expired>;

    /// The earliest deadline of any key or registration lease.
    fn next_deadline(&self) -> Option<u64>;

    /// Removes every registration of `client`; how many there were.
    fn drop_client(&mut self, client: &str) -> usize;

    /// Removes one client whose registration lease ended at or before `now_ms` with its
    /// registrations; returns it and how many it had.
    fn pop_expired_lease(&mut self, now_ms: u64) -> Option<(ClientId, usize)>;

    /// How much the store holds.
    fn stats(&self) -> StoreStats;
}

/// Fencing (spec §6): a fenced key demands a token at least as new as its own.
pub fn check_fencing(stored: Option<&Hlc>, presented: Option<&Hlc>) -> Result<(), ServiceError> {
    match (stored, presented) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(ServiceError::FencingTokenRequired),
        (Some(stored), Some(presented)) if presented < stored => {
            Err(ServiceError::FencingTokenLowerVersion)
        }
        _ => Ok(()),
    }
}

/// The token a key keeps after an applied SET: the newer of its own and the request's.
pub fn fencing_token_after_set(stored: Option<&Hlc>, presented: Option<&Hlc>) -> Option<Hlc> {
    stored.max(presented).cloned()
}

/// The version an applied SET gives a key: the engine's `candidate` (the HLC receive rule
/// over the request's `__ts` and the node's clock) when it is newer than the key's `stored`
/// version, else the logical time right after the stored one. Versions of one key then
/// increase even when the nodes that write it have clocks that disagree; on one node the
/// candidate is always newer (the node's clock has seen every version it stored).
pub fn version_after(stored: Option<&Hlc>, candidate: &Hlc) -> Hlc {
    match stored {
        Some(stored)
            if (stored.wall_ms, stored.counter) >= (candidate.wall_ms, candidate.counter) =>
        {
            let (wall_ms, counter) = crate::hlc::after(stored.wall_ms, stored.counter);
            Hlc {
                wall_ms,
                counter,
                node: candidate.node.clone(),
            }
        }
        _ => candidate.clone(),
    }
}

/// Whether NX/NEX lets a SET of `value` apply over `current`.
pub fn condition_holds(condition: Condition, current: Option<&Bulk>, value: &Bulk) -> bool {
    match (condition, current) {
        (Condition::Always, _) | (_, None) => true,
        (Condition::NotExists, Some(_)) => false,
        (Condition::NotExistsOrEqual, Some(current)) => current == value,
    }
}

/// Bytes a key and value count against the byte quota.
pub fn footprint(key: &[u8], value: &Bulk) -> u64 {
    (key.len() + value.len()) as u64
}

/// Whether a SET that changes the store from `(keys, bytes)` to `(new_keys, new_bytes)` stays
/// within `quotas`. A write that does not grow a measure never fails on it, so lowering a
/// quota below current usage still lets clients shrink their data.
pub fn within_quotas(
    quotas: &Quotas,
    keys: u64,
    bytes: u64,
    new_keys: u64,
    new_bytes: u64,
) -> bool {
    let fits =
        |limit: Option<u64>, old: u64, new: u64| new <= old || limit.is_none_or(|l| new <= l);
    fits(quotas.max_keys, keys, new_keys) && fits(quotas.max_bytes, bytes, new_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hlc(s: &str) -> Hlc {
        Hlc::parse(s).unwrap()
    }

    #[test]
    fn fencing_rules() {
        let (old, new) = (hlc("1:0:a"), hlc("2:0:a"));
        assert_eq!(check_fencing(None, None), Ok(()));
        assert_eq!(check_fencing(None, Some(&old)), Ok(()));
        assert_eq!(
            check_fencing(Some(&old), None),
            Err(ServiceError::FencingTokenRequired)
        );
        assert_eq!(
            check_fencing(Some(&new), Some(&old)),
            Err(ServiceError::FencingTokenLowerVersion)
        );
        assert_eq!(check_fencing(Some(&new), Some(&new)), Ok(()));
        assert_eq!(check_fencing(Some(&old), Some(&new)), Ok(()));
        assert_eq!(
            fencing_token_after_set(Some(&old), Some(&new)),
            Some(new.clone())
        );
        assert_eq!(fencing_token_after_set(Some(&new), None), Some(new.clone()));
        assert_eq!(fencing_token_after_set(None, Some(&old)), Some(old));
    }

    #[test]
    fn a_set_version_is_newer_than_the_stored_one_whatever_the_candidate() {
        let candidate = hlc("100:0:b");
        assert_eq!(version_after(None, &candidate), candidate);
        assert_eq!(version_after(Some(&hlc("99:5:a")), &candidate), candidate);
        // Another node's clock ran ahead: the stored version wins, and the next is after it.
        assert_eq!(
            version_after(Some(&hlc("150:3:a")), &candidate),
            hlc("150:4:b")
        );
        // Same logical time on two nodes: still strictly after.
        assert_eq!(
            version_after(Some(&hlc("100:0:a")), &candidate),
            hlc("100:1:b")
        );
        let limit = Hlc::new(7, crate::hlc::MAX_COUNTER, "a").unwrap();
        assert_eq!(version_after(Some(&limit), &hlc("1:0:b")), hlc("8:0:b"));
    }

    #[test]
    fn conditions() {
        let (a, b) = (Bulk::from("a"), Bulk::from("b"));
        assert!(condition_holds(Condition::Always, Some(&a), &b));
        assert!(condition_holds(Condition::NotExists, None, &b));
        assert!(!condition_holds(Condition::NotExists, Some(&b), &b));
        assert!(condition_holds(Condition::NotExistsOrEqual, None, &b));
        assert!(condition_holds(Condition::NotExistsOrEqual, Some(&b), &b));
        assert!(!condition_holds(Condition::NotExistsOrEqual, Some(&a), &b));
    }

    #[test]
    fn quotas() {
        let q = Quotas {
            max_keys: Some(2),
            max_bytes: Some(10),
            ..Quotas::default()
        };
        assert!(within_quotas(&q, 1, 5, 2, 10));
        assert!(!within_quotas(&q, 2, 5, 3, 6));
        assert!(!within_quotas(&q, 1, 5, 2, 11));
        // Over quota already (it was lowered): shrinking is still allowed.
        assert!(within_quotas(&q, 5, 50, 5, 40));
        assert!(within_quotas(&Quotas::default(), 0, 0, u64::MAX, u64::MAX));
    }
}
