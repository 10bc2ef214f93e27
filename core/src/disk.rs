//! The durable store's log on disk (`mqstore serve --data-dir`, the mosquitto plugin's
//! `plugin_opt_data_dir`), with the standard library only: the driver gives it a way to run a
//! sync off its own thread (tokio's blocking pool, or a thread). The store
//! ([`crate::store::DurableStore`]) records each write; this file appends the records to
//! `DIR/state.log` and syncs them, by the `--fsync` policy:
//!
//! * `always`: an answer (and every publish after it) is held until the records before it are
//!   on disk. One sync at a time, in a blocking task; the records of requests that arrive
//!   meanwhile wait and go in the next one together (group commit).
//! * `everysec`: records are written at once (to the page cache) and synced about once a
//!   second: a power loss loses at most about the last second; a crash of the process alone
//!   loses nothing.
//!
//! At start the log is read and replayed (and written anew when it ends in a torn record or
//! has grown past four times what the store holds, 64 MiB at least); so at run time. A failed write
//! or sync stops the server: answers of writes that may not be on disk are never sent.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::hlc::Hlc;
use crate::jobs::DurableJobs;
use crate::store::{DurableStore, Quotas, Recovered, Store, log};

/// When written records reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fsync {
    /// Before the answer is sent (group commit).
    Always,
    /// About once a second.
    #[default]
    EverySec,
}

impl std::str::FromStr for Fsync {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "always" => Ok(Self::Always),
            "everysec" => Ok(Self::EverySec),
            _ => Err(format!("--fsync {text:?}: always or everysec")),
        }
    }
}

/// Where and how the state store is kept on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Durability {
    /// The directory the data file lives in.
    pub data_dir: PathBuf,
    /// When writes are synced: always, or about every second.
    pub fsync: Fsync,
}

/// Why the data directory cannot be used. The message names the path and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiskError {
    #[error("{what} {path}: {source}")]
    /// An I/O call failed.
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    #[error(
        "another process (an mqstore serve?) uses the data directory {0}: one server per data \
         directory"
    )]
    /// Another process holds the data directory.
    Locked(PathBuf),
    #[error("the data file {path} holds a jobs record that cannot be read: {reason}")]
    /// A jobs record in the data file cannot be read.
    JobsRecord {
        /// The data file.
        path: PathBuf,
        /// What is wrong with the record.
        reason: String,
    },
    #[error(
        "the data file {path} is damaged at byte offset {offset}: {reason}. mqstore does not \
         start over it, so as not to drop acknowledged writes silently; to start from the \
         records before the damage, keep a copy of the file and cut it there: \
         truncate -s {offset} {path}"
    )]
    /// The data file is damaged.
    Damaged {
        /// The file.
        path: PathBuf,
        /// Where, in bytes from the start.
        offset: usize,
        /// What is wrong there.
        reason: String,
    },
}

/// A copy for each host that reports the failure (the operating system's error keeps its
/// code, or its kind and message).
impl Clone for DiskError {
    fn clone(&self) -> Self {
        match self {
            DiskError::Io { what, path, source } => DiskError::Io {
                what,
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(code) => io::Error::from_raw_os_error(code),
                    None => io::Error::new(source.kind(), source.to_string()),
                },
            },
            DiskError::Locked(path) => DiskError::Locked(path.clone()),
            DiskError::JobsRecord { path, reason } => DiskError::JobsRecord {
                path: path.clone(),
                reason: reason.clone(),
            },
            DiskError::Damaged {
                path,
                offset,
                reason,
            } => DiskError::Damaged {
                path: path.clone(),
                offset: *offset,
                reason: reason.clone(),
            },
        }
    }
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> DiskError + use<> {
    let path = path.to_owned();
    move |source| DiskError::Io { what, path, source }
}

/// What a compaction did (for the driver's log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compacted {
    /// The file's size before, in bytes.
    pub before: u64,
    /// Its size after, in bytes.
    pub after: u64,
    /// How long it took.
    pub took: Duration,
}

/// The log's least size before it is compacted again.
const COMPACT_AT_LEAST: u64 = 64 << 20;
/// How often `everysec` syncs.
const SYNC_EVERY_MS: u64 = 1000;

/// The log file and what waits for it. `T` is what the server holds until a sync (its
/// answers and notifications).
pub struct Disk<T> {
    path: PathBuf,
    file: Arc<File>,
    /// `DIR/lock`, locked while the server runs: two servers on one log would corrupt it.
    _lock: File,
    pub(crate) fsync: Fsync,
    /// Records not yet handed to a write (`always`: waiting for the sync in flight).
    staged: Vec<u8>,
    /// A sync is running in a blocking task.
    syncing: bool,
    /// Batches handed to syncs so far (`always`); the one in flight is the last.
    started: u64,
    /// What is held, each with the batch that must be on disk first.
    held: VecDeque<(u64, T)>,
    /// The file's length.
    len: u64,
    /// `everysec`: written since the last sync, and when the next sync is due.
    dirty: bool,
    next_sync_ms: u64,
}

/// A sync of the data file for the driver to run off its own thread (it writes and syncs;
/// it never touches the node): [`Sync::run`], then [`Disk::sync_ended`] with the result.
#[must_use = "a sync not run holds every answer after it"]
pub struct Sync {
    file: Arc<File>,
    records: Vec<u8>,
}

impl Sync {
    /// Writes what the sync carries and syncs the file.
    pub fn run(self) -> io::Result<()> {
        (&*self.file).write_all(&self.records)?;
        self.file.sync_data()
    }
}

impl std::fmt::Debug for Sync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sync")
            .field("bytes", &self.records.len())
            .finish()
    }
}

/// The state store, the jobs service's store, and what recovery found.
pub type Opened<T> = (DurableStore, DurableJobs, Recovered, Disk<T>);

/// Reads, replays and rewrites `DIR/state.log`: the stores it holds, what recovery found, and
/// the disk to write to. `clock` makes the clock that the rewritten log records from the
/// recovery (the engine's, once it has witnessed the newest version).
pub fn open<T>(
    durability: &Durability,
    quotas: Quotas,
    now_ms: u64,
    clock: impl FnOnce(&Recovered) -> Hlc,
) -> Result<Opened<T>, DiskError> {
    let dir = &durability.data_dir;
    fs::create_dir_all(dir).map_err(io_error("cannot create the data directory", dir))?;
    let lock_path = dir.join("lock");
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io_error("cannot open the lock file", &lock_path))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => return Err(DiskError::Locked(dir.clone())),
        Err(fs::TryLockError::Error(e)) => {
            return Err(io_error("cannot lock the lock file", &lock_path)(e));
        }
    }
    let path = dir.join("state.log");
    let file = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(io_error("cannot read the data file", &path)(e)),
    };
    let mut jobs = DurableJobs::recording();
    let mut jobs_error = None;
    let (store, recovered) = DurableStore::recover(&file, quotas, now_ms, |record| {
        if let Err(reason) = jobs.replay(record) {
            jobs_error.get_or_insert(reason);
        }
    })
    .map_err(|e| DiskError::Damaged {
        path: path.clone(),
        offset: e.offset,
        reason: e.reason,
    })?;
    if let Some(reason) = jobs_error {
        return Err(DiskError::JobsRecord { path, reason });
    }
    // Written anew when it is new, ends in a torn record, or holds much more than the store.
    let len = file.len() as u64;
    let rewrite = file.is_empty()
        || recovered.torn_at.is_some()
        || len >= COMPACT_AT_LEAST.max(store.stats().bytes.saturating_mul(4));
    drop(file);
    let (file, len) = match rewrite {
        true => {
            let snapshot = snapshot(&store, &jobs, &clock(&recovered));
            (replace(&path, &snapshot)?, snapshot.len() as u64)
        }
        false => {
            clock(&recovered);
            let file = OpenOptions::new()
                .append(true)
                .open(&path)
                .map_err(io_error("cannot open the data file", &path))?;
            (file, len)
        }
    };
    let disk = Disk {
        path,
        file: Arc::new(file),
        _lock: lock,
        fsync: durability.fsync,
        staged: Vec::new(),
        syncing: false,
        started: 0,
        held: VecDeque::new(),
        len,
        dirty: false,
        next_sync_ms: 0,
    };
    Ok((store, jobs, recovered, disk))
}

/// Both stores as a new log: header, their records, the clock.
fn snapshot(store: &DurableStore, jobs: &DurableJobs, clock: &Hlc) -> Vec<u8> {
    let mut out = log::MAGIC.to_vec();
    store.snapshot(&mut out);
    jobs.snapshot(&mut out);
    log::clock(&mut out, clock);
    out
}

/// Writes `bytes` as the new content of `path` (a file beside it, synced, renamed over it,
/// the directory synced) and opens it for appending.
fn replace(path: &Path, bytes: &[u8]) -> Result<File, DiskError> {
    let temporary = path.with_extension("log.new");
    let write = || -> io::Result<()> {
        let mut file = File::create(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()
    };
    write().map_err(io_error("cannot write the data file", &temporary))?;
    fs::rename(&temporary, path).map_err(io_error("cannot replace the data file", path))?;
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(io_error("cannot sync the data directory", dir))?;
    }
    OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(io_error("cannot open the data file", path))
}

impl<T> Disk<T> {
    /// The data file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes a step's records. `everysec` writes them at once.
    pub fn stage(&mut self, records: Vec<u8>) -> Result<(), DiskError> {
        if records.is_empty() {
            return Ok(());
        }
        self.len += records.len() as u64;
        match self.fsync {
            // The first records of a batch are taken as they are, not copied.
            Fsync::Always if self.staged.is_empty() => self.staged = records,
            Fsync::Always => self.staged.extend_from_slice(&records),
            Fsync::EverySec => {
                (&*self.file)
                    .write_all(&records)
                    .map_err(io_error("cannot write the data file", &self.path))?;
                self.dirty = true;
            }
        }
        Ok(())
    }

    /// The batch what is queued now must wait for (`always`), or `None`: send at once.
    pub fn hold_until(&self) -> Option<u64> {
        match (self.fsync, self.staged.is_empty(), self.syncing) {
            (Fsync::EverySec, ..) => None,
            (Fsync::Always, false, _) => Some(self.started + 1),
            (Fsync::Always, true, true) => Some(self.started),
            (Fsync::Always, true, false) => self.held.back().map(|(batch, _)| *batch),
        }
    }

    /// Keeps `item` until the writes of `batch` are synced.
    pub fn hold(&mut self, batch: u64, item: T) {
        self.held.push_back((batch, item));
    }

    /// Starts the next sync if one is due and none runs: `always` when records are staged,
    /// `everysec` when the second is up. The driver runs the sync off its own thread and
    /// reports its result to [`Disk::sync_ended`].
    pub fn start_sync(&mut self, now_ms: u64) -> Option<Sync> {
        if self.syncing {
            return None;
        }
        let records = match self.fsync {
            Fsync::Always if !self.staged.is_empty() => std::mem::take(&mut self.staged),
            Fsync::EverySec if self.dirty && now_ms >= self.next_sync_ms => {
                self.dirty = false;
                Vec::new()
            }
            _ => return None,
        };
        self.syncing = true;
        self.started += 1;
        Some(Sync {
            file: self.file.clone(),
            records,
        })
    }

    /// A sync ended well: what it released, in order.
    pub fn synced(&mut self, now_ms: u64) -> Vec<T> {
        self.syncing = false;
        self.next_sync_ms = now_ms + SYNC_EVERY_MS;
        let mut released = Vec::new();
        while self
            .held
            .front()
            .is_some_and(|(batch, _)| *batch <= self.started)
        {
            released.extend(self.held.pop_front().map(|(_, item)| item));
        }
        released
    }

    /// The error for a failed sync (the node stops: nothing after it is acknowledged).
    pub fn sync_failed(&self, error: io::Error) -> DiskError {
        io_error("cannot write or sync the data file", &self.path)(error)
    }

    /// A step of a durable node's write path: stages the step's `records`, starts a sync if
    /// one is due, and gives the batch what the step sends must wait for (`None`: send at
    /// once; hold it with [`Disk::hold`]).
    pub fn persist(
        &mut self,
        records: Vec<u8>,
        now_ms: u64,
    ) -> Result<(Option<u64>, Option<Sync>), DiskError> {
        self.stage(records)?;
        let hold_until = self.hold_until();
        Ok((hold_until, self.start_sync(now_ms)))
    }

    /// A sync ended with `result`: what waited for it, in order, to send now; or the failure
    /// (what waits is then never sent: it may not be on disk).
    pub fn sync_ended(&mut self, result: io::Result<()>, now_ms: u64) -> Result<Vec<T>, DiskError> {
        match result {
            Ok(()) => Ok(self.synced(now_ms)),
            Err(error) => Err(self.sync_failed(error)),
        }
    }

    /// When `everysec` syncs next (`None`: nothing to sync, or a sync runs).
    pub fn deadline(&self) -> Option<u64> {
        (self.fsync == Fsync::EverySec && self.dirty && !self.syncing).then_some(self.next_sync_ms)
    }

    /// Nothing waits for the disk.
    pub fn idle(&self) -> bool {
        !self.syncing && self.staged.is_empty() && self.held.is_empty()
    }

    /// Rewrites the log from `store` when it has grown past four times what the store holds
    /// (and nothing waits for it): the log's size stays in proportion to the data.
    pub fn compact_if_due(
        &mut self,
        store: &DurableStore,
        jobs: &DurableJobs,
        clock: &Hlc,
    ) -> Result<Option<Compacted>, DiskError> {
        let holds = store.stats().bytes;
        if self.len < COMPACT_AT_LEAST.max(holds.saturating_mul(4)) || !self.idle() || self.dirty {
            return Ok(None);
        }
        let started = Instant::now();
        let snapshot = snapshot(store, jobs, clock);
        let before = self.len;
        self.file = Arc::new(replace(&self.path, &snapshot)?);
        self.len = snapshot.len() as u64;
        Ok(Some(Compacted {
            before,
            after: self.len,
            took: started.elapsed(),
        }))
    }

    /// At shutdown: what was written is synced (`everysec`).
    pub fn close(&mut self) -> Result<(), DiskError> {
        self.file
            .sync_data()
            .map_err(io_error("cannot sync the data file", &self.path))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A data directory of its own, removed when dropped.
    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn opened(name: &str, fsync: Fsync) -> (Dir, Disk<u32>) {
        let dir = std::env::temp_dir().join(format!("mqstore-disk-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let durability = Durability {
            data_dir: dir.clone(),
            fsync,
        };
        let clock = |_: &Recovered| Hlc::new(1, 0, "n").unwrap();
        let (_, _, _, disk) = open(&durability, Quotas::default(), 0, clock).unwrap();
        (Dir(dir), disk)
    }

    /// Runs a sync that is due at once, on this thread, and counts it.
    fn sync_now(disk: &mut Disk<u32>, now_ms: u64, syncs: &Arc<Mutex<u32>>) {
        if let Some(sync) = disk.start_sync(now_ms) {
            sync.run().unwrap();
            *syncs.lock().unwrap() += 1;
        }
    }

    #[test]
    fn a_log_past_four_times_the_data_is_compacted_and_reads_back_the_same() {
        use crate::codec::{Bulk, Condition};
        use crate::store::{Store, StoreOp};
        let (dir, mut disk) = opened("compact", Fsync::EverySec);
        let mut store = DurableStore::recover(b"", Quotas::default(), 0, |_| {})
            .unwrap()
            .0;
        let jobs = DurableJobs::recording();
        let clock = Hlc::new(1, 0, "n").unwrap();
        // One key rewritten until the log passes the least size of a compaction.
        let set = |version: u64| StoreOp::Set {
            key: bytes::Bytes::from_static(b"k"),
            value: Bulk::new(bytes::Bytes::from(vec![b'v'; 1024])),
            condition: Condition::Always,
            expires_at: None,
            fencing_token: None,
            version: Hlc::new(version, 0, "n").unwrap(),
            persist: false,
        };
        let mut version = 1_000;
        while disk.len < COMPACT_AT_LEAST {
            version += 1;
            store.apply(&set(version), version);
            disk.stage(store.take_pending()).unwrap();
        }
        // Not while a write waits for its sync.
        assert_eq!(disk.compact_if_due(&store, &jobs, &clock).unwrap(), None);
        let syncs = Arc::new(Mutex::new(0));
        sync_now(&mut disk, 0, &syncs);
        disk.synced(1);
        let compacted = disk
            .compact_if_due(&store, &jobs, &clock)
            .unwrap()
            .expect("compacted");
        assert!(
            compacted.before >= COMPACT_AT_LEAST && compacted.after < 2048,
            "{compacted:?}"
        );
        assert_eq!(fs::metadata(disk.path()).unwrap().len(), compacted.after);
        // Appends go on after it, and the whole reads back as the store holds it.
        version += 1;
        store.apply(&set(version), version);
        disk.stage(store.take_pending()).unwrap();
        drop(disk);
        let durability = Durability {
            data_dir: dir.0.clone(),
            fsync: Fsync::EverySec,
        };
        let (back, _, recovered, _) =
            open::<u32>(&durability, Quotas::default(), 0, |_| clock.clone()).unwrap();
        assert_eq!(recovered.keys, 1);
        assert_eq!(back.stats(), store.stats());
        assert_eq!(recovered.newest, Some(Hlc::new(version, 0, "n").unwrap()));
    }

    #[test]
    fn everysec_syncs_what_was_written_within_a_second() {
        let (_dir, mut disk) = opened("everysec", Fsync::EverySec);
        let syncs = Arc::new(Mutex::new(0));
        // Nothing written: nothing to sync.
        sync_now(&mut disk, 0, &syncs);
        assert_eq!((*syncs.lock().unwrap(), disk.deadline()), (0, None));
        // The first write is synced at once; answers are never held.
        disk.stage(vec![1; 10]).unwrap();
        assert_eq!(disk.hold_until(), None);
        sync_now(&mut disk, 0, &syncs);
        assert_eq!(*syncs.lock().unwrap(), 1);
        assert!(disk.synced(5).is_empty());
        // A write 10 ms later waits for the next sync, due a second after the last one ended:
        // what a power loss can take is what was written since, about a second.
        disk.stage(vec![2; 10]).unwrap();
        sync_now(&mut disk, 10, &syncs);
        assert_eq!(*syncs.lock().unwrap(), 1);
        assert_eq!(disk.deadline(), Some(1005));
        sync_now(&mut disk, 1005, &syncs);
        assert_eq!(*syncs.lock().unwrap(), 2);
        disk.synced(1010);
        assert!(disk.idle());
        assert_eq!(fs::metadata(disk.path()).unwrap().len(), disk.len);
    }

    #[test]
    fn always_holds_what_is_queued_until_its_batch_is_synced_and_groups_the_rest() {
        let (_dir, mut disk) = opened("always", Fsync::Always);
        let syncs = Arc::new(Mutex::new(0));
        // Nothing written and nothing syncing: sent at once.
        assert_eq!(disk.hold_until(), None);
        disk.stage(vec![1; 10]).unwrap();
        assert_eq!(disk.hold_until(), Some(1));
        disk.hold(1, 100);
        // The sync of batch 1 starts (and, here, runs at once); its result comes later.
        let result = disk.start_sync(0).expect("a sync of batch 1").run();
        // Two more writes while it runs: they wait for batch 2, together.
        disk.stage(vec![2; 10]).unwrap();
        assert_eq!(disk.hold_until(), Some(2));
        disk.hold(2, 200);
        disk.stage(vec![3; 10]).unwrap();
        disk.hold(2, 201);
        sync_now(&mut disk, 1, &syncs); // one at a time: nothing starts
        assert_eq!(*syncs.lock().unwrap(), 0);
        result.unwrap();
        assert_eq!(disk.synced(2), vec![100]);
        sync_now(&mut disk, 2, &syncs); // batch 2: both writes in one sync
        assert_eq!(*syncs.lock().unwrap(), 1);
        assert_eq!(disk.synced(3), vec![200, 201]);
        assert!(disk.idle());
        assert_eq!(fs::metadata(disk.path()).unwrap().len(), disk.len);
    }
}
