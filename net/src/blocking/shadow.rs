//! Device shadows from the blocking client: the same handle as the async client's
//! ([`crate::shadow::Shadow`]), each call a session call the calling thread waits for.

use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use super::{Client, State, calls, lock};
use crate::Listener;
use crate::shadow::{Notification, Op};
use mqstore_core::client::ClientError;
use mqstore_core::shadow::update_body;

impl Client {
    /// Uses `thing`'s shadow `name` (`None`: its classic shadow): subscribes to its answers,
    /// delta and documents (and again after every reconnect) and returns once subscribed.
    pub fn shadow(&self, thing: &str, name: Option<&str>) -> Result<Shadow, ClientError> {
        let (notifications, receiver) = mpsc::channel();
        let listener = Box::new(move |heard| notifications.send(heard).is_ok());
        let mut shadow = self.shadow_with(thing, name, listener)?;
        shadow.notifications = Some(std::sync::Mutex::new(receiver));
        Ok(shadow)
    }

    /// [`Client::shadow`], handing the shadow's deltas and documents to `on_notification`
    /// instead (as [`Client::observe_with`] hands changes); the handle's `next_notification`
    /// then has none.
    pub fn shadow_with(
        &self,
        thing: &str,
        name: Option<&str>,
        on_notification: Listener<Notification>,
    ) -> Result<Shadow, ClientError> {
        (self.handle.shared).subscribe(|state| use_shadow(state, thing, name, on_notification))?;
        Ok(Shadow {
            client: self.clone(),
            thing: thing.to_owned(),
            name: name.map(str::to_owned),
            notifications: None,
        })
    }

    /// [`Client::shadow_with`], started: `deliver` hears once the shadow's topics are
    /// subscribed (see [`Client::start`]); its calls are [`calls::shadow`].
    pub fn start_shadow_with(
        &self,
        thing: &str,
        name: Option<&str>,
        on_notification: Listener<Notification>,
        deliver: impl FnOnce(Result<(), ClientError>) + Send + 'static,
    ) {
        (self.handle.shared).start_subscribe(
            |state| use_shadow(state, thing, name, on_notification),
            deliver,
        );
    }
}

/// Registers `on_notification` for a shadow: the filters to subscribe to.
fn use_shadow(
    state: &mut State,
    thing: &str,
    name: Option<&str>,
    on_notification: Listener<Notification>,
) -> Result<Vec<String>, ClientError> {
    let filters = state.session.use_shadow(thing, name)?;
    let key = (thing.to_owned(), name.map(str::to_owned));
    state
        .listeners
        .shadows
        .entry(key)
        .or_default()
        .push(on_notification);
    Ok(filters)
}

/// One device shadow: AWS IoT's get, update and delete, answered with AWS's documents; a
/// rejection fails the call with [`ClientError::Status`] (AWS's code and message).
pub struct Shadow {
    client: Client,
    thing: String,
    name: Option<String>,
    /// Behind a lock so that one handle, shared, can make calls while another thread waits
    /// for notifications (`None`: they go to a function, [`Client::shadow_with`]).
    notifications: Option<std::sync::Mutex<mpsc::Receiver<Notification>>>,
}

impl Shadow {
    /// The thing.
    pub fn thing(&self) -> &str {
        &self.thing
    }

    /// The shadow's name (`None`: the classic shadow).
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn call(&self, op: Op, body: Value) -> Result<Value, ClientError> {
        let call = calls::shadow(&self.thing, self.name.as_deref(), op, body);
        self.client.wait(call)
    }

    /// The whole document (see the async client's [`crate::shadow::Shadow::get`]); a shadow
    /// that does not exist is a 404.
    pub fn get(&self) -> Result<Value, ClientError> {
        self.call(Op::Get, Value::Null)
    }

    /// Merges `state` into the shadow, made if it does not exist; with `version`, only if the
    /// shadow is at that version (else 409).
    pub fn update(&self, state: Value, version: Option<u64>) -> Result<Value, ClientError> {
        self.call(Op::Update, update_body(state, version))
    }

    /// Deletes the shadow (its version is kept); a shadow that does not exist is a 404.
    pub fn delete(&self) -> Result<Value, ClientError> {
        self.call(Op::Delete, Value::Null)
    }

    /// The next delta or documents, waiting up to `timeout`; `None` when none came (or the
    /// client is closed, or they go to a function).
    pub fn next_notification(&self, timeout: Duration) -> Option<Notification> {
        lock(self.notifications.as_ref()?)
            .recv_timeout(timeout)
            .ok()
    }
}
