//! The default store: everything in the process.

use std::collections::hash_map::Entry as Slot;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::num::NonZeroU64;
use std::ops::Bound;

use bytes::Bytes;

use super::Pattern;
use super::{
    ClientId, DelOutcome, Expired, Quotas, SetOutcome, Store, StoreOp, StoreReply, StoreStats,
    check_fencing, condition_holds, fencing_token_after_set, footprint, version_after,
    within_quotas,
};
use crate::ServiceError;
use crate::codec::{Bulk, Condition};
use crate::hlc::Hlc;

/// A stored key, kept small: the table holds a million of them side by side.
#[derive(Debug)]
struct Entry {
    /// A slice of the SET's payload, framed, so GET answers with it without copying.
    value: Bulk,
    /// The version the SET that wrote it returned.
    version: Hlc,
    /// Rare, so boxed: a pointer in the table instead of a whole HLC.
    fencing_token: Option<Box<Hlc>>,
    /// Milliseconds since the epoch at and after which the key is gone.
    expires_at: Option<NonZeroU64>,
}

impl Entry {
    fn deadline(&self) -> Option<u64> {
        self.expires_at.map(NonZeroU64::get)
    }
}

/// Keys in a hash map (GET and SET in O(1)), with a sorted index beside it so SCAN pages can
/// continue after the last key they returned however the keyspace changes in between.
#[derive(Debug, Default)]
pub struct MemoryStore {
    entries: HashMap<Bytes, Entry>,
    /// The same keys, sorted: SCAN's order.
    order: BTreeSet<Bytes>,
    /// `(deadline, key)` for keys that expire.
    deadlines: BTreeSet<(u64, Bytes)>,
    /// key → clients watching it.
    watchers: HashMap<Bytes, Vec<ClientId>>,
    /// client → keys it watches, to drop a client in one step.
    watched: HashMap<ClientId, HashSet<Bytes>>,
    watch_count: u64,
    /// client → the end of its registrations' lease (clients without a lease are absent).
    leases: HashMap<ClientId, u64>,
    /// `(lease end, client)`, for the ones that end first.
    lease_order: BTreeSet<(u64, ClientId)>,
    bytes: u64,
    quotas: Quotas,
    /// The newest version a SET or a deletion issued: the next one is newer (see
    /// [`StoreOp::Delete`]), as on Redis.
    newest: Option<Hlc>,
}

impl MemoryStore {
    /// An empty store with no quotas.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with these quotas.
    pub fn with_quotas(quotas: Quotas) -> Self {
        Self {
            quotas,
            ..Self::default()
        }
    }

    fn watchers_of(&self, key: &[u8]) -> Vec<ClientId> {
        // Most stores watch few keys: skip hashing the key when none is watched.
        if self.watchers.is_empty() {
            return Vec::new();
        }
        self.watchers.get(key).cloned().unwrap_or_default()
    }

    fn remove(&mut self, key: &[u8]) -> Option<(Bytes, Entry)> {
        let (key, entry) = self.entries.remove_entry(key)?;
        self.order.remove(&key);
        if let Some(deadline) = entry.deadline() {
            self.deadlines.remove(&(deadline, key.clone()));
        }
        self.bytes -= footprint(&key, &entry.value);
        Some((key, entry))
    }
}

/// A key's durable state, as the durable store logs it.
pub(crate) struct KeyState<'a> {
    pub value: &'a Bulk,
    pub version: &'a Hlc,
    pub fencing_token: Option<&'a Hlc>,
    pub expires_at: Option<u64>,
}

impl MemoryStore {
    /// What `key` holds, for the durable store's log.
    pub(crate) fn key_state(&self, key: &[u8]) -> Option<KeyState<'_>> {
        self.entries.get(key).map(|e| KeyState {
            value: &e.value,
            version: &e.version,
            fencing_token: e.fencing_token.as_deref(),
            expires_at: e.deadline(),
        })
    }

    /// Every key with its state, in no order.
    pub(crate) fn key_states(&self) -> impl Iterator<Item = (&Bytes, KeyState<'_>)> {
        self.entries.iter().map(|(key, e)| {
            let state = KeyState {
                value: &e.value,
                version: &e.version,
                fencing_token: e.fencing_token.as_deref(),
                expires_at: e.deadline(),
            };
            (key, state)
        })
    }

    /// Removes a key (the durable store's recovery replaying a DEL).
    pub(crate) fn forget(&mut self, key: &[u8]) {
        self.remove(key);
    }

    /// Puts a key back as it was (the durable store's recovery): no checks, no quotas. The
    /// key is hashed once (a million of them at a start).
    pub(crate) fn restore(
        &mut self,
        key: Bytes,
        value: Bulk,
        version: Hlc,
        fencing_token: Option<Hlc>,
        expires_at: Option<u64>,
    ) {
        let entry = Entry {
            value,
            version,
            fencing_token: fencing_token.map(Box::new),
            expires_at: expires_at.and_then(NonZeroU64::new),
        };
        let deadline = entry.deadline();
        match self.entries.entry(key) {
            Slot::Occupied(mut slot) => {
                let old = std::mem::replace(slot.get_mut(), entry);
                let key = slot.key();
                self.bytes =
                    self.bytes - footprint(key, &old.value) + footprint(key, &slot.get().value);
                if let Some(old) = old.deadline() {
                    self.deadlines.remove(&(old, key.clone()));
                }
                if let Some(deadline) = deadline {
                    self.deadlines.insert((deadline, key.clone()));
                }
            }
            Slot::Vacant(slot) => {
                let key = slot.key().clone();
                self.bytes += footprint(&key, &entry.value);
                if let Some(deadline) = deadline {
                    self.deadlines.insert((deadline, key.clone()));
                }
                self.order.insert(key);
                slot.insert(entry);
            }
        }
    }

    fn get(&self, key: &[u8]) -> Option<(Bulk, Hlc)> {
        self.entries
            .get(key)
            .map(|e| (e.value.clone(), e.version.clone()))
    }

    #[allow(clippy::too_many_arguments)] // the fields of StoreOp::Set
    fn set(
        &mut self,
        key: &Bytes,
        value: &Bulk,
        condition: Condition,
        expires_at: Option<u64>,
        fencing_token: Option<&Hlc>,
        version: &Hlc,
    ) -> Result<SetOutcome, ServiceError> {
        let (keys, bytes) = (self.entries.len() as u64, self.bytes);
        // The key is hashed once: every check and the write go through this slot.
        let slot = self.entries.entry(key.clone());
        let current = match &slot {
            Slot::Occupied(o) => Some(o.get()),
            Slot::Vacant(_) => None,
        };
        let stored_token = current.and_then(|e| e.fencing_token.as_deref());
        check_fencing(stored_token, fencing_token)?;
        if let Some(current) =
            current.filter(|c| !condition_holds(condition, Some(&c.value), value))
        {
            return Ok(SetOutcome::NotApplied {
                version: current.version.clone(),
            });
        }
        let old_footprint = current.map_or(0, |e| footprint(key, &e.value));
        let new_bytes = bytes - old_footprint + footprint(key, value);
        let new_keys = keys + u64::from(current.is_none());
        if !within_quotas(&self.quotas, keys, bytes, new_keys, new_bytes) {
            return Err(ServiceError::QuotaExceeded);
        }
        let fencing_token = fencing_token_after_set(stored_token, fencing_token).map(Box::new);
        let old_deadline = current.and_then(Entry::deadline);
        let version = version_after(current.map(|c| &c.version), version);
        let version = version_after(self.newest.as_ref(), &version);
        self.newest = Some(version.clone());
        let entry = Entry {
            value: value.clone(),
            version: version.clone(),
            fencing_token,
            expires_at: expires_at.and_then(NonZeroU64::new),
        };
        let deadline_moved = old_deadline != expires_at;
        let (replaced, moved_key) = match slot {
            Slot::Occupied(mut o) => {
                let replaced = std::mem::replace(o.get_mut(), entry).version;
                (Some(replaced), deadline_moved.then(|| o.key().clone()))
            }
            Slot::Vacant(v) => {
                // A new key gets bytes of its own: a slice of the request would keep the
                // whole first payload alive for as long as the key lives. (So a new key is
                // hashed twice; overwrites, the common case, once.)
                drop(v);
                let owned = Bytes::copy_from_slice(key);
                self.order.insert(owned.clone());
                self.entries.insert(owned.clone(), entry);
                (None, deadline_moved.then_some(owned))
            }
        };
        if let Some(moved_key) = moved_key {
            if let Some(old) = old_deadline {
                self.deadlines.remove(&(old, moved_key.clone()));
            }
            if let Some(new) = expires_at {
                self.deadlines.insert((new, moved_key));
            }
        }
        self.bytes = new_bytes;
        Ok(SetOutcome::Applied {
            watchers: self.watchers_of(key),
            version,
            replaced,
        })
    }

    fn delete(
        &mut self,
        key: &[u8],
        if_value: Option<&[u8]>,
        fencing_token: Option<&Hlc>,
        version: &Hlc,
    ) -> Result<DelOutcome, ServiceError> {
        let Some(current) = self.entries.get(key) else {
            return Ok(DelOutcome::Absent);
        };
        check_fencing(current.fencing_token.as_deref(), fencing_token)?;
        if if_value.is_some_and(|value| value != current.value.as_slice()) {
            return Ok(DelOutcome::ValueMismatch);
        }
        let Some((_, removed)) = self.remove(key) else {
            return Ok(DelOutcome::Absent);
        };
        let version = version_after(Some(&removed.version), version);
        let version = version_after(self.newest.as_ref(), &version);
        self.newest = Some(version.clone());
        Ok(DelOutcome::Deleted {
            watchers: self.watchers_of(key),
            version,
            replaced: removed.version,
        })
    }

    fn watch(&mut self, client: &ClientId, key: &Bytes) -> Result<(), ServiceError> {
        let keys = self.watched.entry(client.clone()).or_default();
        if keys.contains(key) {
            return Ok(()); // Registered already: idempotent, and within the limits.
        }
        if !self.quotas.watch_fits(self.watch_count, keys.len() as u64) {
            if keys.is_empty() {
                self.watched.remove(client);
            }
            return Err(ServiceError::QuotaExceeded);
        }
        keys.insert(key.clone());
        self.watchers
            .entry(key.clone())
            .or_default()
            .push(client.clone());
        self.watch_count += 1;
        Ok(())
    }

    /// Extends `client`'s lease to `until` (never shortens it).
    fn renew_lease(&mut self, client: &ClientId, until: u64) {
        match self.leases.get_mut(client) {
            Some(current) if *current >= until => {}
            Some(current) => {
                self.lease_order.remove(&(*current, client.clone()));
                *current = until;
                self.lease_order.insert((until, client.clone()));
            }
            None => {
                self.leases.insert(client.clone(), until);
                self.lease_order.insert((until, client.clone()));
            }
        }
    }

    fn unwatch(&mut self, client: &str, key: &[u8]) -> bool {
        let Some(keys) = self.watched.get_mut(client) else {
            return false;
        };
        if !keys.remove(key) {
            return false;
        }
        if keys.is_empty() {
            self.watched.remove(client);
        }
        remove_watcher(&mut self.watchers, key, client);
        self.watch_count -= 1;
        true
    }

    fn scan(
        &self,
        pattern: &Pattern,
        after: Option<&[u8]>,
        limit: usize,
        budget: usize,
        out: &mut Vec<Bytes>,
    ) -> Option<Bytes> {
        // Every match starts with the pattern's literal prefix: start there, stop past it.
        let prefix = pattern.literal_prefix();
        let start = match after {
            Some(after) if after >= prefix.as_slice() => Bound::Excluded(after),
            _ => Bound::Included(prefix.as_slice()),
        };
        let mut last: Option<&Bytes> = None;
        let range = self.order.range::<[u8], _>((start, Bound::Unbounded));
        for (examined, key) in range.enumerate() {
            if !key.starts_with(&prefix) {
                return None;
            }
            if examined == budget.max(1) || out.len() == limit.max(1) {
                // More keys follow: continue after the last one examined.
                return last.cloned();
            }
            last = Some(key);
            if pattern.matches(key) {
                out.push(key.clone());
            }
        }
        None
    }
}

impl Store for MemoryStore {
    /// Expired keys are gone already: the engine pops them before every op.
    fn apply(&mut self, op: &StoreOp, _now_ms: u64) -> StoreReply {
        match op {
            StoreOp::Get { key } => StoreReply::Get(self.get(key)),
            StoreOp::Set {
                key,
                value,
                condition,
                expires_at,
                fencing_token,
                version,
                persist: _, // nothing survives a restart of this store, as documented
            } => StoreReply::Set(self.set(
                key,
                value,
                *condition,
                *expires_at,
                fencing_token.as_ref(),
                version,
            )),
            StoreOp::Delete {
                key,
                if_value,
                fencing_token,
                version,
            } => StoreReply::Delete(self.delete(
                key,
                if_value.as_deref(),
                fencing_token.as_ref(),
                version,
            )),
            StoreOp::Watch {
                client,
                key,
                lease_until,
            } => {
                let watched = self.watch(client, key);
                if let (Ok(()), Some(until)) = (&watched, lease_until) {
                    self.renew_lease(client, *until);
                }
                StoreReply::Watch(watched)
            }
            StoreOp::Unwatch { client, key } => StoreReply::Unwatch(self.unwatch(client, key)),
            StoreOp::Scan {
                pattern,
                after,
                limit,
                budget,
            } => {
                let mut keys = Vec::new();
                let last = self.scan(pattern, after.as_deref(), *limit, *budget, &mut keys);
                StoreReply::Scan { keys, last }
            }
        }
    }

    fn pop_expired(&mut self, now_ms: u64) -> Option<Expired> {
        let (deadline, key) = self.deadlines.first()?.clone();
        if deadline > now_ms {
            return None;
        }
        let (key, entry) = self.remove(&key)?;
        // The expiry's version: after the key's and every version issued before, as a
        // deletion's (with the node of the key's last writer, as on Redis).
        let at = Hlc {
            wall_ms: now_ms,
            counter: 0,
            node: entry.version.node.clone(),
        };
        let version = version_after(Some(&entry.version), &at);
        let version = version_after(self.newest.as_ref(), &version);
        self.newest = Some(version.clone());
        Some(Expired {
            watchers: self.watchers_of(&key),
            key,
            version,
            replaced: entry.version,
        })
    }

    fn drop_client(&mut self, client: &str) -> usize {
        if let Some((client, until)) = self.leases.remove_entry(client) {
            self.lease_order.remove(&(until, client));
        }
        let Some(keys) = self.watched.remove(client) else {
            return 0;
        };
        for key in &keys {
            remove_watcher(&mut self.watchers, key, client);
        }
        self.watch_count -= keys.len() as u64;
        keys.len()
    }

    fn pop_expired_lease(&mut self, now_ms: u64) -> Option<(ClientId, usize)> {
        let (until, client) = self.lease_order.first()?;
        if *until > now_ms {
            return None;
        }
        let client = client.clone();
        let dropped = self.drop_client(&client);
        Some((client, dropped))
    }

    fn next_deadline(&self) -> Option<u64> {
        let key = self.deadlines.first().map(|(deadline, _)| *deadline);
        let lease = self.lease_order.first().map(|(until, _)| *until);
        key.into_iter().chain(lease).min()
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            keys: self.entries.len() as u64,
            bytes: self.bytes,
            watches: self.watch_count,
        }
    }
}

/// Removes `client` from the watchers of `key`, and the key from the map when none are left.
fn remove_watcher(watchers: &mut HashMap<Bytes, Vec<ClientId>>, key: &[u8], client: &str) {
    if let Some(clients) = watchers.get_mut(key) {
        clients.retain(|c| &**c != client);
        if clients.is_empty() {
            watchers.remove(key);
        }
    }
}
