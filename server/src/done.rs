//! Work that ran off the server's loop (a Redis call, a jobs work's store call, a sync
//! of the data directory) and came back to it.

use std::time::Instant;

use crate::redis_store::pipe::Pipe;
use crate::redis_store::{Applied, RedisStoreError};
use mqstore_core::commands::{Record, RegistryAnswer};
use mqstore_core::engine::Call;
use mqstore_core::envelope::Publish;
use mqstore_core::jobs::{StoreAnswer, Stored};
use mqstore_core::server::{JobsHandled, JobsWork, NotAnswered};
use mqstore_core::store::{ClientId, Expired, StoreStats};

/// A Redis call that ended, back in the server's loop.
pub(super) enum StoreDone {
    /// A request's op.
    Call {
        call: Box<Call>,
        /// Boxed: what the store did is the largest of the loop's wake-ups.
        result: Result<Box<Applied>, RedisStoreError>,
        received: Instant,
    },
    /// A periodic sweep: expired keys, clients whose lease ended, and what the store holds.
    /// The keys a sweep removed (whatever else failed: their watchers must hear of them),
    /// and the rest of it.
    Sweep(Vec<Expired>, Result<Swept, RedisStoreError>),
    /// Registrations of clients that are gone were dropped.
    Dropped(Vec<String>, Result<usize, RedisStoreError>),
}

/// A jobs call on Redis that ended, back in the server's loop.
pub(super) enum JobsDone {
    /// A store call of a jobs work ran: its answer, for the work's next step.
    Step(Box<JobsWork>, StoreAnswer),
    /// A request ran: what it published (its notifications, then its reply).
    Request(Vec<Publish>, Result<JobsHandled, NotAnswered>),
    /// A timer tick ran: what it published, and when the engine next has work.
    Tick(Vec<Publish>, Stored<Option<u64>>),
    /// A claim of the listener lease ran (started at the given time of the node's monotonic
    /// clock): whether it holds.
    Claim(u64, Result<bool, RedisStoreError>),
    /// The listener lease was given up.
    Released(Result<(), RedisStoreError>),
}

/// A command registry call on Redis that ended, or an answer another node forwarded.
pub(super) enum CommandsDone {
    /// The answer to the call given with this token.
    Answered(u64, RegistryAnswer),
    /// A settled record whose answer another node read, for a caller waiting here.
    Forwarded(Box<Record>),
}

/// Work that ran off the server's loop and came back to it.
pub(super) enum Done {
    State(StoreDone),
    Jobs(JobsDone),
    Commands(CommandsDone),
    /// The command registry's pipe to Redis was opened again (for the wait's
    /// [`PipeReader`](crate::registry_calls::PipeReader)).
    PipeOpened(Pipe),
    /// A sync of the data file ended.
    Synced(std::io::Result<()>),
}

pub(super) struct Swept {
    pub(super) leases: Vec<(ClientId, usize)>,
    pub(super) stats: StoreStats,
}
