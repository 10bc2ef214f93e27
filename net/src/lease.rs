//! Leases, locks and leader election on top of the state store, from the async Rust client.
//! The protocol and its timing are the core session's lease machine (claim; wait for the
//! holder's deletion or the retry period; renew a third of the ttl after each claim's answer;
//! lost when a renewal is refused or not confirmed before the lease would lapse): this file
//! only sends the client's task its calls.
//!
//! Pass a lease's fencing token (`SetOptions::fencing_token`, or to `del`/`vdel`) to writes of
//! the keys the lease guards, and the engine refuses writes from a holder whose lease was since
//! taken by someone else.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::oneshot;

use crate::client::{Client, Command};
use mqstore_core::client::{CallId, ClientError};
use mqstore_core::hlc::Hlc;

/// A held lease, renewed by the client until released, lost, or dropped (a dropped lease is
/// no longer renewed: it lapses after its ttl). `C` is the client that holds it: the async
/// [`Client`], or the blocking one (`mqstore_net::blocking::Client`).
pub struct Lease<C: Holder = Client> {
    pub(crate) client: C,
    key: Bytes,
    pub(crate) id: CallId,
    token: Hlc,
    held: Arc<AtomicBool>,
    pub(crate) released: bool,
}

/// A client that can hold leases.
pub trait Holder {
    /// Stops renewing lease `id` (its handle was dropped): it lapses.
    #[doc(hidden)]
    fn forget_lease(&self, id: CallId);
}

impl Holder for Client {
    fn forget_lease(&self, id: CallId) {
        // A client whose task is gone (or whose queue is full, which a closing client's is)
        // renews nothing either way.
        let _ = self.commands.try_send(Command::ForgetLease { lease: id });
    }
}

impl<C: Holder> Lease<C> {
    /// The lease `id` on `key`, held by `client` with fencing token `token`; `held` is the
    /// flag the client clears when it learns the lease is lost.
    pub(crate) fn held(
        client: C,
        key: Bytes,
        id: CallId,
        token: Hlc,
        held: Arc<AtomicBool>,
    ) -> Self {
        Lease {
            client,
            key,
            id,
            token,
            held,
            released: false,
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

    /// False once lost: a renewal found the lease taken by someone else, or none was confirmed
    /// before it would lapse.
    pub fn is_held(&self) -> bool {
        self.held.load(Ordering::Relaxed)
    }
}

impl<C: Holder> Drop for Lease<C> {
    fn drop(&mut self) {
        if !self.released {
            // No longer renewed: it lapses after its ttl.
            self.client.forget_lease(self.id);
        }
    }
}

impl Lease {
    /// Tries once to take `key` for `ttl`, with this client's id as the holder. `None` when
    /// someone else holds it.
    pub async fn try_acquire(
        client: &Client,
        key: impl Into<Bytes>,
        ttl: Duration,
    ) -> Result<Option<Lease>, ClientError> {
        Lease::take(client, key.into(), ttl, Some(Duration::ZERO)).await
    }

    /// Waits until `key` is free and takes it: tries, and while someone else holds it, waits
    /// for the key's deletion (release or expiry) or the retry period (the ttl) and tries
    /// again. Gives up after `timeout` (`None`: never; zero: after one try, as
    /// [`Lease::try_acquire`]).
    pub async fn acquire(
        client: &Client,
        key: impl Into<Bytes>,
        ttl: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<Lease>, ClientError> {
        Lease::take(client, key.into(), ttl, timeout).await
    }

    async fn take(
        client: &Client,
        key: Bytes,
        ttl: Duration,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, ClientError> {
        let held = Arc::new(AtomicBool::new(true));
        let (reply, answer) = oneshot::channel();
        client
            .send(Command::Lease {
                key: key.clone(),
                ttl_ms: (ttl.as_millis() as u64).max(1),
                wait_ms: wait.map(|w| w.as_millis() as u64),
                held: held.clone(),
                reply,
            })
            .await?;
        let Some((id, token)) = answer.await.map_err(|_| ClientError::Disconnected)?? else {
            return Ok(None);
        };
        Ok(Some(Lease::held(client.clone(), key, id, token, held)))
    }

    /// Releases the lease (VDEL: only if this client still holds it). Returns whether it was
    /// still held.
    pub async fn release(mut self) -> Result<bool, ClientError> {
        self.released = true;
        let (reply, answer) = oneshot::channel();
        self.client
            .send(Command::ReleaseLease {
                lease: self.id,
                reply,
            })
            .await?;
        answer.await.map_err(|_| ClientError::Disconnected)?
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
