//! Leases, locks and leader election on top of the state store: the tokio driver of the
//! protocol in [`crate::lease`] (which requests, what their answers mean, when to renew).
//!
//! Pass a lease's fencing token (`SetOptions::fencing_token`, or to `del`/`vdel`) to writes of
//! the keys the lease guards, and the engine refuses writes from a holder whose lease was since
//! taken by someone else.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use super::client::{Client, Deleted};
use crate::client::{CallOptions, ClientError};
use crate::hlc::Hlc;
use crate::lease::LeaseTerms;

/// A held lease, renewed in the background every third of its time to live until released or
/// lost.
pub struct Lease {
    client: Client,
    terms: LeaseTerms,
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
        Lease::try_terms(client, terms(client, key.into(), ttl)).await
    }

    async fn try_terms(client: &Client, terms: LeaseTerms) -> Result<Option<Lease>, ClientError> {
        let Some(token) = claim(client, &terms).await? else {
            return Ok(None);
        };
        let state = Arc::new(Mutex::new(LeaseState::Held));
        let renewer = tokio::spawn(renew(client.clone(), terms.clone(), state.clone()));
        Ok(Some(Lease {
            client: client.clone(),
            terms,
            token,
            state,
            renewer,
        }))
    }

    /// Waits until `key` is free and takes it: tries, and while someone else holds it, waits
    /// for the key's deletion (release or expiry) and tries again. Gives up after `timeout`
    /// (`None`: never; zero: after one try, as [`Lease::try_acquire`]).
    pub async fn acquire(
        client: &Client,
        key: impl Into<Bytes>,
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<Lease>, ClientError> {
        let terms = terms(client, key.into(), ttl);
        if timeout == Some(Duration::ZERO) {
            // No time to wait: one try.
            return Lease::try_terms(client, terms).await;
        }
        let key = terms.key.clone();
        let attempt = async {
            let mut changes = client.observe(key.clone()).await?;
            let lease = loop {
                if let Some(lease) = Lease::try_terms(client, terms.clone()).await? {
                    break lease;
                }
                // Wait for a deletion; re-try at least once per ttl in case a notification
                // was lost with a connection.
                let retry = Duration::from_millis(terms.retry_after_ms());
                let wait = tokio::time::timeout(retry, async {
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
        &self.terms.key
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
        let answer = self
            .client
            .call(self.terms.release(), CallOptions::default())
            .await?;
        Ok(answer.into_deletion().outcome == Deleted::Deleted)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // Without `release`, the lease simply expires after its ttl.
        self.renewer.abort();
    }
}

/// The terms of this client's lease on `key` (its id is the holder).
fn terms(client: &Client, key: Bytes, ttl: Duration) -> LeaseTerms {
    let holder = Bytes::copy_from_slice(client.client_id().as_bytes());
    LeaseTerms::new(key, holder, (ttl.as_millis() as u64).max(1)).expect("a ttl of at least 1 ms")
}

/// Claims (takes or renews) the lease: its fencing token, or `None` when someone else holds it.
async fn claim(client: &Client, terms: &LeaseTerms) -> Result<Option<Hlc>, ClientError> {
    let set = client
        .call(terms.claim(), CallOptions::default())
        .await?
        .into_set_result();
    Ok(LeaseTerms::claimed(set.applied, set.version))
}

async fn renew(client: Client, terms: LeaseTerms, state: Arc<Mutex<LeaseState>>) {
    let period = Duration::from_millis(terms.renew_every_ms());
    let key = &terms.key;
    loop {
        tokio::time::sleep(period).await;
        match claim(&client, &terms).await {
            Ok(Some(_)) => debug!(key = ?key, "lease renewed"),
            Ok(None) => {
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
