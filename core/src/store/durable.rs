//! The durable store: the memory store, with every key's change appended to a log
//! ([`super::log`]) that a driver writes to disk. No I/O here: the store fills a buffer of
//! records ([`DurableStore::take_pending`]) and the driver (`mqstore serve --data-dir`)
//! writes and syncs it, holding answers until then when asked to (`--fsync always`).
//!
//! Every key is durable, not only those SET with `aio-persistence`: see `docs/guide/durability.md`.

use super::log::{self, LogError, Record};
use super::{
    ClientId, DelOutcome, Expired, MemoryStore, Quotas, SetOutcome, Store, StoreOp, StoreReply,
    StoreStats,
};
use crate::codec::Bulk;
use crate::hlc::Hlc;

/// The memory store and the log records of its changes not yet taken by the driver.
#[derive(Debug)]
pub struct DurableStore {
    inner: MemoryStore,
    /// Whether changes are recorded: a store made by [`DurableStore::with_quotas`] is the
    /// memory store alone (what `mqstore serve` runs without `--data-dir`).
    recording: bool,
    /// Records appended since the last [`DurableStore::take_pending`].
    pending: Vec<u8>,
}

/// What recovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Records replayed.
    pub records: usize,
    /// Keys in the store after recovery.
    pub keys: usize,
    /// Keys whose deadline passed while the server was down: not restored.
    pub expired: usize,
    /// Where the log's last complete record ends, when bytes after it were cut off (a write
    /// interrupted by a crash).
    pub torn_at: Option<usize>,
    /// The newest version, fencing token or clock in the log: the node's clock must not
    /// issue anything older.
    pub newest: Option<Hlc>,
}

impl DurableStore {
    /// An empty store with these quotas that records nothing: the memory store.
    pub fn with_quotas(quotas: Quotas) -> Self {
        Self {
            inner: MemoryStore::with_quotas(quotas),
            recording: false,
            pending: Vec::new(),
        }
    }

    /// The store a log holds (`file`, the whole log as read from disk) at `now_ms`: the last
    /// state of each key, without the keys whose deadline has passed. The records that are
    /// not the state store's (the jobs service's) go to `other`, in order. A damaged record
    /// before the last is an error ([`log::replay`]).
    pub fn recover(
        file: &[u8],
        quotas: Quotas,
        now_ms: u64,
        mut other: impl FnMut(Record),
    ) -> Result<(Self, Recovered), LogError> {
        // Replayed straight into the store: a PUT replaces the key, a DEL removes it.
        let mut store = Self {
            recording: true,
            ..Self::with_quotas(quotas)
        };
        let mut newest: Option<Hlc> = None;
        let mut witness = |hlc: &Hlc| {
            if newest.as_ref().is_none_or(|n| hlc > n) {
                newest = Some(hlc.clone());
            }
        };
        let inner = &mut store.inner;
        let replayed = log::replay(file, |record| match record {
            Record::Put {
                key,
                value,
                version,
                fencing_token,
                expires_at,
            } => {
                witness(&version);
                fencing_token.iter().for_each(&mut witness);
                inner.restore(key, Bulk::new(value), version, fencing_token, expires_at);
            }
            Record::Del { key } => inner.forget(&key),
            Record::Clock(clock) => witness(&clock),
            jobs => other(jobs),
        })?;
        // Keys whose deadline passed while the server was down: gone (nobody watches yet).
        let mut expired = 0;
        while store.inner.pop_expired(now_ms).is_some() {
            expired += 1;
        }
        let recovered = Recovered {
            records: replayed.records,
            keys: store.inner.stats().keys as usize,
            expired,
            torn_at: (replayed.valid_len < file.len()).then_some(replayed.valid_len),
            newest,
        };
        Ok((store, recovered))
    }

    /// The log records of the changes since the last call, to append to the file.
    pub fn take_pending(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    /// Whether changes wait to be taken.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The whole store as records (one PUT per key), appended to `out`: with the jobs
    /// service's and the clock, what replaces the log when it is compacted.
    pub fn snapshot(&self, out: &mut Vec<u8>) {
        for (key, state) in self.inner.key_states() {
            log::put(
                out,
                key,
                state.value.as_slice(),
                state.version,
                state.fencing_token,
                state.expires_at,
            );
        }
    }

    fn record_put(&mut self, key: &[u8]) {
        if let Some(state) = self.inner.key_state(key) {
            log::put(
                &mut self.pending,
                key,
                state.value.as_slice(),
                state.version,
                state.fencing_token,
                state.expires_at,
            );
        }
    }
}

impl Store for DurableStore {
    fn apply(&mut self, op: &StoreOp, now_ms: u64) -> StoreReply {
        let reply = self.inner.apply(op, now_ms);
        if !self.recording {
            return reply;
        }
        match (op, &reply) {
            (StoreOp::Set { key, .. }, StoreReply::Set(Ok(SetOutcome::Applied { .. }))) => {
                self.record_put(key)
            }
            (StoreOp::Delete { key, .. }, StoreReply::Delete(Ok(DelOutcome::Deleted { .. }))) => {
                log::del(&mut self.pending, key)
            }
            _ => {}
        }
        reply
    }

    // An expired key needs no record: recovery drops keys whose deadline has passed, and a
    // later SET of the key is a record after it.
    fn pop_expired(&mut self, now_ms: u64) -> Option<Expired> {
        self.inner.pop_expired(now_ms)
    }

    fn next_deadline(&self) -> Option<u64> {
        self.inner.next_deadline()
    }

    fn drop_client(&mut self, client: &str) -> usize {
        self.inner.drop_client(client)
    }

    fn pop_expired_lease(&mut self, now_ms: u64) -> Option<(ClientId, usize)> {
        self.inner.pop_expired_lease(now_ms)
    }

    fn stats(&self) -> StoreStats {
        self.inner.stats()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::codec::Condition;

    fn hlc(text: &str) -> Hlc {
        Hlc::parse(text).unwrap()
    }

    fn set(key: &str, value: &str, version: &str, expires_at: Option<u64>) -> StoreOp {
        set_with(key, value, version, expires_at, Condition::Always, None)
    }

    fn set_with(
        key: &str,
        value: &str,
        version: &str,
        expires_at: Option<u64>,
        condition: Condition,
        fencing_token: Option<Hlc>,
    ) -> StoreOp {
        StoreOp::Set {
            key: Bytes::copy_from_slice(key.as_bytes()),
            value: Bulk::new(Bytes::copy_from_slice(value.as_bytes())),
            condition,
            expires_at,
            fencing_token,
            version: hlc(version),
            persist: false,
        }
    }

    fn get(store: &mut DurableStore, key: &str) -> Option<(Vec<u8>, Hlc)> {
        let op = StoreOp::Get {
            key: Bytes::copy_from_slice(key.as_bytes()),
        };
        match store.apply(&op, 0) {
            StoreReply::Get(found) => found.map(|(v, h)| (v.as_slice().to_vec(), h)),
            other => panic!("{other:?}"),
        }
    }

    fn recording() -> DurableStore {
        DurableStore::recover(b"", Quotas::default(), 0, |_| {})
            .unwrap()
            .0
    }

    #[test]
    fn the_memory_store_alone_records_nothing() {
        let mut store = DurableStore::with_quotas(Quotas::default());
        store.apply(&set("a", "1", "100:0:n", None), 100);
        assert!(!store.has_pending());
        assert_eq!(get(&mut store, "a").unwrap().0, b"1");
    }

    #[test]
    fn what_was_written_is_there_after_recovery_and_what_expired_is_not() {
        let mut store = recording();
        let mut file = log::MAGIC.to_vec();
        store.apply(&set("a", "1", "100:0:n", None), 100);
        store.apply(&set("a", "2", "101:0:n", None), 101);
        store.apply(&set("gone", "x", "102:0:n", None), 102);
        store.apply(&set("brief", "x", "103:0:n", Some(5_000)), 103);
        let delete = StoreOp::Delete {
            key: Bytes::from_static(b"gone"),
            if_value: None,
            fencing_token: None,
            version: Hlc::parse("104:0:n").unwrap(),
        };
        store.apply(&delete, 104);
        // Reads and refused writes write nothing.
        let before = store.pending.len();
        get(&mut store, "a");
        let nx = set_with("a", "3", "105:0:n", None, Condition::NotExists, None);
        store.apply(&nx, 105);
        assert_eq!(store.pending.len(), before);
        file.extend(store.take_pending());
        assert!(!store.has_pending());

        let (mut back, recovered) =
            DurableStore::recover(&file, Quotas::default(), 200, |_| {}).unwrap();
        assert_eq!(get(&mut back, "a"), Some((b"2".to_vec(), hlc("101:0:n"))));
        assert_eq!(get(&mut back, "gone"), None);
        assert_eq!(get(&mut back, "brief").unwrap().0, b"x");
        assert_eq!(
            (recovered.records, recovered.keys, recovered.expired),
            (5, 2, 0)
        );
        assert_eq!(recovered.newest, Some(hlc("103:0:n")));
        assert_eq!(recovered.torn_at, None);

        // After the deadline, the key is not restored.
        let (mut later, recovered) =
            DurableStore::recover(&file, Quotas::default(), 5_000, |_| {}).unwrap();
        assert_eq!(get(&mut later, "brief"), None);
        assert_eq!(recovered.expired, 1);
    }

    #[test]
    fn a_snapshot_recovers_to_the_same_store_and_carries_the_clock() {
        let mut store = recording();
        store.apply(&set("a", "1", "100:0:n", Some(9_000)), 100);
        let token = Some(hlc("90:3:n"));
        let lock = set_with("b", "2", "101:0:n", None, Condition::Always, token);
        store.apply(&lock, 101);
        let mut snapshot = log::MAGIC.to_vec();
        store.snapshot(&mut snapshot);
        log::clock(&mut snapshot, &hlc("500:0:n"));
        let (mut back, recovered) =
            DurableStore::recover(&snapshot, Quotas::default(), 200, |_| {}).unwrap();
        assert_eq!(get(&mut back, "a").unwrap().0, b"1");
        assert_eq!(get(&mut back, "b").unwrap().1, hlc("101:0:n"));
        assert_eq!(recovered.newest, Some(hlc("500:0:n")));
        // The fencing token survived: a write without one is refused.
        let unfenced = set("b", "3", "600:0:n", None);
        assert!(matches!(
            back.apply(&unfenced, 600),
            StoreReply::Set(Err(_))
        ));
        assert_eq!(back.stats(), store.stats());
    }
}
