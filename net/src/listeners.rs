//! Who hears what a client session reports besides its calls' answers — observers of keys,
//! things of the jobs device API, command and keyspace watchers, held leases — shared by the
//! async client's task (tokio channels) and the blocking client (functions).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use tracing::{debug, warn};

use mqstore_core::client::jobs::JobNotification;
use mqstore_core::client::{CallId, ClientError};
use mqstore_core::commands::Record;
use mqstore_core::hlc::Hlc;
use mqstore_core::session::{Completion, SessionEvent};
use mqstore_core::shadow;

/// A change of an observed key (the async client's `Observation` and the blocking client's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyChange {
    /// The key that changed.
    pub key: Bytes,
    /// The new value, or `None` when the key was deleted (or expired).
    pub value: Option<Bytes>,
    /// The change's version, when the notification carried one.
    pub version: Option<Hlc>,
    /// Found by reading the key back after a reconnect: the notification itself was missed.
    pub synthetic: bool,
    /// Changes between the last one reported and this one were not reported (overtaken, or
    /// lost with a server's connection): the changes seen are not the key's whole history,
    /// and this one is its state now. Set on every `synthetic` change too.
    pub gap: bool,
}

/// A key made (`created`) or gone (deleted or expired): the clients' `watch_keyspace`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyspaceEvent {
    /// The key made or deleted.
    pub key: Bytes,
    /// True when the key was made, false when it was deleted or expired.
    pub created: bool,
}

/// The sending end of a channel to a listener.
pub(crate) trait Sink<T> {
    /// Hands `value` over: false when the listener is gone.
    fn give(&self, value: T) -> bool;
}

impl<T> Sink<T> for tokio::sync::mpsc::UnboundedSender<T> {
    fn give(&self, value: T) -> bool {
        self.send(value).is_ok()
    }
}

/// A function that takes each value on the thread that reads the connection (with the client
/// locked: it hands the value over, and makes no call of the client); false when the
/// listener is gone.
pub type Listener<T> = Box<dyn Fn(T) -> bool + Send>;

impl<T> Sink<T> for Listener<T> {
    fn give(&self, value: T) -> bool {
        self(value)
    }
}

/// A kind of channel: the driver's.
pub(crate) trait Channels {
    type Sender<T>: Sink<T>;
}

/// tokio's unbounded channels (the async client).
pub(crate) struct Tokio;

impl Channels for Tokio {
    type Sender<T> = tokio::sync::mpsc::UnboundedSender<T>;
}

/// Functions (the blocking client: its channels, or a binding's own queues).
pub(crate) struct Functions;

impl Channels for Functions {
    type Sender<T> = Listener<T>;
}

/// A device shadow: its thing, and its name (`None`: the classic shadow).
pub(crate) type ShadowKey = (String, Option<String>);

/// The listeners of one client.
pub(crate) struct Listeners<C: Channels> {
    pub observers: HashMap<Bytes, Vec<C::Sender<KeyChange>>>,
    /// The things this client acts for in the jobs device API, and who hears their
    /// notifications.
    pub things: HashMap<String, Vec<C::Sender<JobNotification>>>,
    /// The device shadows this client uses (a thing, and a shadow's name or `None` for the
    /// classic one), and who hears their deltas and documents.
    pub shadows: HashMap<ShadowKey, Vec<C::Sender<shadow::Notification>>>,
    pub command_watchers: Vec<C::Sender<Record>>,
    pub keyspace_watchers: Vec<C::Sender<KeyspaceEvent>>,
    /// Held leases: their handles' flag, cleared when the session reports one lost.
    pub leases: HashMap<CallId, Arc<AtomicBool>>,
}

impl<C: Channels> Default for Listeners<C> {
    fn default() -> Self {
        Self {
            observers: HashMap::new(),
            things: HashMap::new(),
            shadows: HashMap::new(),
            command_watchers: Vec::new(),
            keyspace_watchers: Vec::new(),
            leases: HashMap::new(),
        }
    }
}

/// A finished call, for the driver to hand to its caller.
pub(crate) type Finished = (CallId, Result<Completion, ClientError>);

impl<C: Channels> Listeners<C> {
    /// Hands `event` to who listens for it (dropping listeners gone); a call's completion is
    /// handed back.
    pub(crate) fn tell(&mut self, event: SessionEvent) -> Option<Finished> {
        match event {
            SessionEvent::Completed { call, result, .. } => return Some((call, result)),
            SessionEvent::Changed {
                key,
                change,
                version,
                synthetic,
                gap,
            } => {
                if let Some(list) = self.observers.get_mut(&key) {
                    let change = KeyChange {
                        key,
                        value: change.into_value(),
                        version,
                        synthetic,
                        gap,
                    };
                    list.retain(|sink| sink.give(change.clone()));
                }
            }
            SessionEvent::Jobs(notification) => {
                let thing = match &notification {
                    JobNotification::Notify { thing, .. }
                    | JobNotification::NotifyNext { thing, .. } => thing,
                };
                if let Some(list) = self.things.get_mut(thing) {
                    list.retain(|sink| sink.give(notification.clone()));
                }
            }
            SessionEvent::Shadow(notification) => {
                let key = (notification.thing.clone(), notification.name.clone());
                if let Some(list) = self.shadows.get_mut(&key) {
                    list.retain(|sink| sink.give(notification.clone()));
                }
            }
            SessionEvent::CommandRecord(record) => {
                self.command_watchers
                    .retain(|sink| sink.give(record.clone()));
            }
            SessionEvent::Keyspace { key, created } => {
                let event = KeyspaceEvent { key, created };
                self.keyspace_watchers
                    .retain(|sink| sink.give(event.clone()));
            }
            SessionEvent::LeaseRenewed { lease, .. } => {
                debug!(lease = %lease, "lease renewed");
            }
            SessionEvent::LeaseLost { lease, key } => {
                warn!(key = ?key, "lease lost: someone else holds the key, or no renewal was confirmed in time");
                if let Some(held) = self.leases.remove(&lease) {
                    held.store(false, Ordering::Relaxed);
                }
            }
            // An event a newer core reports: nothing here listens for it.
            _ => {}
        }
        None
    }
}
