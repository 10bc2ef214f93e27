//! The default store: everything in the process.

use std::collections::hash_map::Entry as Slot;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::num::NonZeroU64;
use std::ops::Bound;

use bytes::Bytes;

use super::{
    ClientId, DelOp, DelOutcome, Quotas, SetOp, SetOutcome, Store, StoreStats, check_fencing,
    condition_holds, fencing_token_after_set, footprint, within_quotas,
};
use crate::ServiceError;
use crate::codec::Bulk;
use crate::engine::Pattern;
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
    bytes: u64,
    quotas: Quotas,
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

    fn push_watchers(&self, key: &[u8], out: &mut Vec<ClientId>) {
        // Most stores watch few keys: skip hashing the key when none is watched.
        if self.watchers.is_empty() {
            return;
        }
        if let Some(clients) = self.watchers.get(key) {
            out.extend(clients.iter().cloned());
        }
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

impl Store for MemoryStore {
    fn get(&self, key: &[u8]) -> Option<(Bulk, Hlc)> {
        self.entries
            .get(key)
            .map(|e| (e.value.clone(), e.version.clone()))
    }

    fn set(
        &mut self,
        op: SetOp<'_>,
        watchers: &mut Vec<ClientId>,
    ) -> Result<SetOutcome, ServiceError> {
        let (keys, bytes) = (self.entries.len() as u64, self.bytes);
        // The key is hashed once: every check and the write go through this slot.
        let slot = self.entries.entry(op.key.clone());
        let current = match &slot {
            Slot::Occupied(o) => Some(o.get()),
            Slot::Vacant(_) => None,
        };
        let stored_token = current.and_then(|e| e.fencing_token.as_deref());
        check_fencing(stored_token, op.fencing_token)?;
        if let Some(current) =
            current.filter(|c| !condition_holds(op.condition, Some(&c.value), op.value))
        {
            return Ok(SetOutcome::NotApplied {
                version: current.version.clone(),
            });
        }
        let old_footprint = current.map_or(0, |e| footprint(op.key, &e.value));
        let new_bytes = bytes - old_footprint + footprint(op.key, op.value);
        let new_keys = keys + u64::from(current.is_none());
        if !within_quotas(&self.quotas, keys, bytes, new_keys, new_bytes) {
            return Err(ServiceError::QuotaExceeded);
        }
        let fencing_token = fencing_token_after_set(stored_token, op.fencing_token).map(Box::new);
        let old_deadline = current.and_then(Entry::deadline);
        let entry = Entry {
            value: op.value.clone(),
            version: op.version.clone(),
            fencing_token,
            expires_at: op.expires_at.and_then(NonZeroU64::new),
        };
        let deadline_moved = old_deadline != op.expires_at;
        let key = match slot {
            Slot::Occupied(mut o) => {
                *o.get_mut() = entry;
                deadline_moved.then(|| o.key().clone())
            }
            Slot::Vacant(v) => {
                // A new key gets bytes of its own: a slice of the request would keep the
                // whole first payload alive for as long as the key lives. (So a new key is
                // hashed twice; overwrites, the common case, once.)
                drop(v);
                let key = Bytes::copy_from_slice(op.key);
                self.order.insert(key.clone());
                self.entries.insert(key.clone(), entry);
                deadline_moved.then_some(key)
            }
        };
        if let Some(key) = key {
            if let Some(old) = old_deadline {
                self.deadlines.remove(&(old, key.clone()));
            }
            if let Some(new) = op.expires_at {
                self.deadlines.insert((new, key));
            }
        }
        self.bytes = new_bytes;
        self.push_watchers(op.key, watchers);
        Ok(SetOutcome::Applied)
    }

    fn delete(
        &mut self,
        op: DelOp<'_>,
        watchers: &mut Vec<ClientId>,
    ) -> Result<DelOutcome, ServiceError> {
        let Some(current) = self.entries.get(op.key) else {
            return Ok(DelOutcome::Absent);
        };
        check_fencing(current.fencing_token.as_deref(), op.fencing_token)?;
        if op
            .if_value
            .is_some_and(|value| value != current.value.as_slice())
        {
            return Ok(DelOutcome::ValueMismatch);
        }
        self.remove(op.key);
        self.push_watchers(op.key, watchers);
        Ok(DelOutcome::Deleted)
    }

    fn watch(&mut self, client: &ClientId, key: &Bytes) {
        if self
            .watched
            .entry(client.clone())
            .or_default()
            .insert(key.clone())
        {
            self.watchers
                .entry(key.clone())
                .or_default()
                .push(client.clone());
            self.watch_count += 1;
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
        if let Some(clients) = self.watchers.get_mut(key) {
            clients.retain(|c| &**c != client);
            if clients.is_empty() {
                self.watchers.remove(key);
            }
        }
        self.watch_count -= 1;
        true
    }

    fn drop_client(&mut self, client: &str) -> usize {
        let Some(keys) = self.watched.remove(client) else {
            return 0;
        };
        for key in &keys {
            if let Some(clients) = self.watchers.get_mut(key) {
                clients.retain(|c| &**c != client);
                if clients.is_empty() {
                    self.watchers.remove(key);
                }
            }
        }
        self.watch_count -= keys.len() as u64;
        keys.len()
    }

    fn scan(
        &self,
        pattern: &Pattern,
        after: Option<&[u8]>,
        limit: usize,
        budget: usize,
        include: &mut dyn FnMut(&[u8]) -> bool,
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
            if pattern.matches(key) && include(key) {
                out.push(key.clone());
            }
        }
        None
    }

    fn pop_expired(&mut self, now_ms: u64, watchers: &mut Vec<ClientId>) -> Option<Bytes> {
        let (deadline, key) = self.deadlines.first()?.clone();
        if deadline > now_ms {
            return None;
        }
        self.remove(&key);
        self.push_watchers(&key, watchers);
        Some(key)
    }

    fn next_deadline(&self) -> Option<u64> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    fn stats(&self) -> StoreStats {
        StoreStats {
            keys: self.entries.len() as u64,
            bytes: self.bytes,
            watches: self.watch_count,
        }
    }
}
