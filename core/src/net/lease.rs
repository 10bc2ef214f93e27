//! Leases, locks and leader election on top of the state store.
//!
//! A lease is a key holding its holder's id, set with `NEX PX ttl`: the SET succeeds for a free
//! key and for the current holder (renewal), and fails for everyone else. The version of the
//! acquiring SET is the lease's fencing token: pass it (`SetOptions::fencing_token`, or to
//! `del`/`vdel`) to writes of the keys the lease guards, and the engine refuses writes from a
//! holder whose lease was since taken by someone else.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::client::{Client, Deleted, SetOptions};
use crate::client::ClientError;
use crate::codec::Condition;
use crate::hlc::Hlc;

/// A held lease, renewed in the background every third of its time to live until released or
/// lost.
pub struct Lease {
    client: Client,
    key: Bytes,
    holder: Bytes,
    token: Hlc,
    state: Arc<Mutex<LeaseState>>,
    renewer: JoinHandle<()>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseState {
    Held,
    /// A renewal found someone else holding the key (or the key gone and taken).
    Lost,
}

impl Lease {
    /// Tries once to take `key` for `ttl`, with this client's id as the holder. `None` when
    /// someone else holds it.
    pub async fn try_acquire(
        client: &Client,
        key: impl Into<Bytes>,
        ttl: Duration,
    ) -> Result<Option<Lease>, ClientError> {
        let key = key.into();
        let holder = Bytes::copy_from_slice(client.client_id().as_bytes());
        let set = client
            .set(key.clone(), holder.clone(), lease_options(ttl))
            .await?;
        let (true, Some(token)) = (set.applied, set.version) else {
            return Ok(None);
        };
        let state = Arc::new(Mutex::new(LeaseState::Held));
        let renewer = tokio::spawn(renew(
            client.clone(),
            key.clone(),
            holder.clone(),
            ttl,
            state.clone(),
        ));
        Ok(Some(Lease {
            client: client.clone(),
            key,
            holder,
            token,
            state,
            renewer,
        }))
    }

    /// Waits until `key` is free and takes it: tries, and while someone else holds it, waits
    /// for the key's deletion (release or expiry) and tries again. Gives up after `timeout`
    /// (`None`: never).
    pub async fn acquire(
        client: &Client,
        key: impl Into<Bytes>,
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<Lease>, ClientError> {
        let key = key.into();
        let attempt = async {
            let mut changes = client.observe(key.clone()).await?;
            let lease = loop {
                if let Some(lease) = Lease::try_acquire(client, key.clone(), ttl).await? {
                    break lease;
                }
                // Wait for a deletion; re-try at least once per ttl in case a notification
                // was lost with a connection.
                let wait = tokio::time::timeout(ttl, async {
                    while let Some(change) = changes.next().await {
                        if change.value.is_none() {
                            return;
                        }
                    }
                });
                let _ = wait.await;
            };
            client.unobserve(key.clone()).await?;
            Ok(lease)
        };
        match timeout {
            Some(limit) => match tokio::time::timeout(limit, attempt).await {
                Ok(result) => result.map(Some),
                Err(_) => {
                    let _ = client.unobserve(key).await;
                    Ok(None)
                }
            },
            None => attempt.await.map(Some),
        }
    }

    /// The fencing token: the version of the SET that took the lease.
    pub fn fencing_token(&self) -> &Hlc {
        &self.token
    }

    /// The key this lease holds.
    pub fn key(&self) -> &Bytes {
        &self.key
    }

    /// False once a renewal found the lease taken by someone else.
    pub fn is_held(&self) -> bool {
        self.state
            .lock()
            .map(|s| *s == LeaseState::Held)
            .unwrap_or(false)
    }

    /// Releases the lease (VDEL: only if this client still holds it). Returns whether it was
    /// still held.
    pub async fn release(self) -> Result<bool, ClientError> {
        self.renewer.abort();
        let deleted = self
            .client
            .vdel(self.key.clone(), self.holder.clone(), None)
            .await?;
        Ok(deleted.outcome == Deleted::Deleted)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Without `release`, the lease simply expires after its ttl.
        self.renewer.abort();
    }
}

fn lease_options(ttl: Duration) -> SetOptions {
    SetOptions {
        condition: Condition::NotExistsOrEqual,
        expires: Some(ttl),
        ..SetOptions::default()
    }
}

async fn renew(
    client: Client,
    key: Bytes,
    holder: Bytes,
    ttl: Duration,
    state: Arc<Mutex<LeaseState>>,
) {
    let period = (ttl / 3).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        match client
            .set(key.clone(), holder.clone(), lease_options(ttl))
            .await
        {
            Ok(set) if set.applied => debug!(key = ?key, "lease renewed"),
            Ok(_) => {
                warn!(key = ?key, "lease lost: someone else holds the key");
                if let Ok(mut state) = state.lock() {
                    *state = LeaseState::Lost;
                }
                return;
            }
            // A failed renewal is retried at the next period; the lease may still expire.
            Err(e) => warn!(key = ?key, error = %e, "lease renewal failed"),
        }
    }
}

/// Leader election: campaigns until this client leads (holds the lease on `key`), then returns
/// the lease. Leadership lasts while [`Lease::is_held`]; step down with [`Lease::release`].
pub async fn lead(
    client: &Client,
    key: impl Into<Bytes>,
    ttl: Duration,
) -> Result<Lease, ClientError> {
    let key = key.into();
    loop {
        // Without a timeout `acquire` only returns once it holds the lease.
        if let Some(lease) = Lease::acquire(client, key.clone(), ttl, None).await? {
            return Ok(lease);
        }
    }
}
