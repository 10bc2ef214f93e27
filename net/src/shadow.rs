//! Device shadows from the async Rust client: a [`Shadow`] handle for one thing's classic or
//! named shadow — get, update, delete, and its deltas and documents as they come. The
//! protocol is the core session's ([`mqstore_core::session::Session::shadow`]); this file only
//! sends calls to the client's task.

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::client::{Client, Command, JobsCall};
use mqstore_core::client::ClientError;
use mqstore_core::shadow::update_body;
/// A shadow's delta or documents.
pub use mqstore_core::shadow::{Notification, Op, Stream};

impl Client {
    /// Uses `thing`'s shadow `name` (`None`: its classic shadow): subscribes to its answers,
    /// delta and documents (and again after every reconnect) and returns once subscribed.
    pub async fn shadow(&self, thing: &str, name: Option<&str>) -> Result<Shadow, ClientError> {
        let (notifications, notifications_rx) = mpsc::unbounded_channel();
        let (reply, result) = oneshot::channel();
        self.send(Command::Shadow {
            thing: thing.to_owned(),
            name: name.map(str::to_owned),
            notifications,
            reply,
        })
        .await?;
        result.await.map_err(|_| ClientError::Disconnected)??;
        Ok(Shadow {
            client: self.clone(),
            thing: thing.to_owned(),
            name: name.map(str::to_owned),
            notifications: tokio::sync::Mutex::new(notifications_rx),
        })
    }
}

/// One device shadow: AWS IoT's get, update and delete, answered with AWS's documents; a
/// rejection fails the call with [`ClientError::Status`] (AWS's code: 400, 404, 409, 413, ...,
/// and message).
pub struct Shadow {
    client: Client,
    thing: String,
    name: Option<String>,
    /// Behind a lock so that one handle, shared, can make calls while another task waits.
    notifications: tokio::sync::Mutex<mpsc::UnboundedReceiver<Notification>>,
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

    async fn call(&self, op: Op, body: Value) -> Result<Value, ClientError> {
        let call = JobsCall::Shadow(self.thing.clone(), self.name.clone(), op, body);
        Ok(self.client.jobs_call(call).await?.into_json())
    }

    /// The whole document: `state` (`desired`, `reported`, `delta`), `metadata`, `version`,
    /// `timestamp`. A shadow that does not exist is a 404.
    pub async fn get(&self) -> Result<Value, ClientError> {
        self.call(Op::Get, Value::Null).await
    }

    /// Merges `state` (`{"desired": {...}}`, `{"reported": {...}}`; a `null` removes a field
    /// or a section) into the shadow, made if it does not exist. With `version`, only if the
    /// shadow is at that version (else 409). The answer echoes the update with its metadata
    /// and the new version.
    pub async fn update(&self, state: Value, version: Option<u64>) -> Result<Value, ClientError> {
        self.call(Op::Update, update_body(state, version)).await
    }

    /// Deletes the shadow (its version is kept: the next one follows it); the answer holds the
    /// deleted shadow's version. A shadow that does not exist is a 404.
    pub async fn delete(&self) -> Result<Value, ClientError> {
        self.call(Op::Delete, Value::Null).await
    }

    /// The next delta or documents of this shadow; `None` once the client is closed.
    pub async fn next_notification(&self) -> Option<Notification> {
        self.notifications.lock().await.recv().await
    }

    /// A notification that has arrived already, without waiting.
    pub fn try_next_notification(&self) -> Option<Notification> {
        self.notifications.try_lock().ok()?.try_recv().ok()
    }
}
