//! Leases (locks with fencing tokens) as a protocol with no I/O, shared by every driver (the
//! tokio client's `mqstore_net::lease`, the npm package): which request takes or renews a lease, how to
//! read its answer, how often to renew, and which request releases it.
//!
//! A lease is a key holding its holder's id, set with `NEX PX ttl`: the SET succeeds for a free
//! key and for the current holder (a renewal), and fails for everyone else. The version of the
//! SET that took it is the lease's fencing token: writes of the keys the lease guards carry it,
//! and the engine refuses writes from a holder whose lease was since taken by someone else.

use std::num::NonZeroU64;

use bytes::Bytes;

use crate::codec::{Bulk, Condition, Request, SetRequest};
use crate::hlc::Hlc;

/// One holder's lease on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseTerms {
    /// The leased key.
    pub key: Bytes,
    /// Who holds it: the client's id, stored as the key's value.
    pub holder: Bytes,
    ttl_ms: NonZeroU64,
}

impl LeaseTerms {
    /// The lease on `key` for `holder`, lasting `ttl_ms` unless renewed (`None` for a ttl of 0).
    pub fn new(key: impl Into<Bytes>, holder: impl Into<Bytes>, ttl_ms: u64) -> Option<Self> {
        Some(Self {
            key: key.into(),
            holder: holder.into(),
            ttl_ms: NonZeroU64::new(ttl_ms)?,
        })
    }

    /// How long the lease lasts unless renewed.
    pub fn ttl_ms(&self) -> u64 {
        self.ttl_ms.get()
    }

    /// The SET that takes the lease, and renews it while this holder has it:
    /// `SET key holder NEX PX ttl`.
    pub fn claim(&self) -> Request {
        Request::Set(SetRequest {
            key: self.key.clone(),
            value: Bulk::new(self.holder.clone()),
            condition: Condition::NotExistsOrEqual,
            expires_in_ms: Some(self.ttl_ms),
        })
    }

    /// What a claim's answer means: the fencing token when this holder now holds the lease,
    /// `None` when someone else does.
    pub fn claimed(applied: bool, version: Option<Hlc>) -> Option<Hlc> {
        version.filter(|_| applied)
    }

    /// How often a holder renews: a third of the ttl, so two renewals may fail before it lapses.
    pub fn renew_every_ms(&self) -> u64 {
        (self.ttl_ms.get() / 3).max(1)
    }

    /// How long a refused claimant waits for the key's deletion before it tries again: the ttl
    /// (by then the lease was renewed, released, or it expired).
    pub fn retry_after_ms(&self) -> u64 {
        self.ttl_ms.get()
    }

    /// The VDEL that releases the lease, only if this holder still has it.
    pub fn release(&self) -> Request {
        Request::VDel {
            key: self.key.clone(),
            value: self.holder.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_is_nex_px_with_the_holder_as_value() {
        let terms = LeaseTerms::new("LockName", "Client1", 10_000).unwrap();
        // The worked example of the protocol's documentation (the shared vector "set nex px").
        assert_eq!(
            &terms.claim().to_bytes()[..],
            b"*6\r\n$3\r\nSET\r\n$8\r\nLockName\r\n$7\r\nClient1\r\n$3\r\nNEX\r\n$2\r\nPX\r\n$5\r\n10000\r\n"
        );
        assert_eq!(
            terms.release(),
            Request::VDel {
                key: Bytes::from("LockName"),
                value: Bytes::from("Client1")
            }
        );
        assert_eq!(terms.renew_every_ms(), 3_333);
        assert_eq!(terms.retry_after_ms(), 10_000);
        assert_eq!(LeaseTerms::new("k", "h", 2).unwrap().renew_every_ms(), 1);
        assert!(LeaseTerms::new("k", "h", 0).is_none());
    }

    #[test]
    fn only_an_applied_claim_with_a_version_holds() {
        let version = Hlc::new(1, 0, "node").unwrap();
        assert_eq!(
            LeaseTerms::claimed(true, Some(version.clone())),
            Some(version.clone())
        );
        assert_eq!(LeaseTerms::claimed(false, Some(version)), None);
        assert_eq!(LeaseTerms::claimed(true, None), None);
    }
}
