//! The state store engine: a request, its envelope and the current time in; the response and
//! the notifications it causes out, notifications first (spec §4). No I/O: a driver moves
//! messages between the broker and [`Engine::handle`], and sleeps until
//! [`Engine::next_deadline`] to call [`Engine::expire`].

mod access;
mod pattern;

use bytes::Bytes;

pub use access::{Access, AccessRule, AccessRules};
pub use pattern::Pattern;

use crate::ServiceError;
use crate::codec::{Command, Notification, Request, Response, SetRequest, decode_request};
use crate::envelope::{
    self, Checked, DropReason, EnvelopeError, Invocation, Publish, notification_properties,
};
use crate::hlc::{Hlc, HlcClock, HlcError, MAX_SKEW_MS};
use crate::store::{
    ClientId, DelOp, DelOutcome, MemoryStore, SetOp, SetOutcome, Store, StoreStats,
};
use crate::topics;

/// Prefix of SCAN continuation tokens: `k:` then the last key a page examined.
const SCAN_TOKEN_PREFIX: &[u8] = b"k:";

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// This node's id: the `__srcId` of its responses and the node part of every version it
    /// issues. Must not contain `:`.
    pub node_id: String,
    /// Most keys in one SCAN page.
    pub scan_page_size: usize,
    /// Most keys one SCAN request examines, so a rare pattern over many keys cannot stall the
    /// engine: a page may then hold fewer keys than asked, with a token to go on.
    pub scan_budget: usize,
    pub access: AccessRules,
}

impl EngineConfig {
    /// Defaults for a node: pages of 100 keys, 10 000 keys examined per page, no access rules.
    pub fn new(node_id: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            scan_page_size: 100,
            scan_budget: 10_000,
            access: AccessRules::allow_all(),
        }
    }
}

/// What the envelope said that the state store itself uses, borrowed from wherever the driver
/// keeps it (an [`Invocation`], or a binding's own types).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestContext<'a> {
    pub client_id: Option<&'a str>,
    /// `__ts`, unparsed.
    pub timestamp: Option<&'a str>,
    /// `__ft`, unparsed.
    pub fencing_token: Option<&'a str>,
    pub persist: bool,
}

impl Invocation {
    /// The parts of the envelope the engine reads.
    pub fn context(&self) -> RequestContext<'_> {
        RequestContext {
            client_id: self.client_id.as_deref(),
            timestamp: self.timestamp.as_deref(),
            fencing_token: self.fencing_token.as_deref(),
            persist: self.persist,
        }
    }
}

/// The answer to one command: the payload and the `__ts` to send with it (none only for GET
/// of an absent key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub response: Response,
    pub version: Option<Hlc>,
}

/// What [`Engine::handle`] did with a message, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with status 200; `error` when the payload was `-ERR`. `command` is `None` when
    /// the payload could not be decoded.
    Answered {
        command: Option<Command>,
        error: Option<ServiceError>,
    },
    /// Answered with an envelope error status.
    Rejected(EnvelopeError),
    /// Not answered.
    Dropped(DropReason),
}

/// The state store.
#[derive(Debug)]
pub struct Engine<S: Store = MemoryStore> {
    store: S,
    clock: HlcClock,
    config: EngineConfig,
    /// Reused for the watchers of each change, so writes do not allocate for them.
    watchers: Vec<ClientId>,
}

impl Engine<MemoryStore> {
    /// An engine over an empty memory store without quotas.
    pub fn in_memory(node_id: impl Into<String>) -> Result<Self, HlcError> {
        Self::new(EngineConfig::new(node_id), MemoryStore::new())
    }
}

impl<S: Store> Engine<S> {
    /// An engine over `store`. Fails when the node id contains `:`.
    pub fn new(config: EngineConfig, store: S) -> Result<Self, HlcError> {
        Ok(Self {
            clock: HlcClock::new(config.node_id.as_str())?,
            store,
            config,
            watchers: Vec::new(),
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.config.node_id
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// How much the store holds.
    pub fn stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// When the next key expires: sleep until then and call [`Engine::expire`].
    pub fn next_deadline(&self) -> Option<u64> {
        self.store.next_deadline()
    }

    /// Drops every KEYNOTIFY registration of a client that is gone; how many there were.
    pub fn drop_client(&mut self, client_id: &str) -> usize {
        self.store.drop_client(client_id)
    }

    /// Handles one message from the invoke topic, pushing what to publish onto `out`: DELETE
    /// notifications of keys that expired by `now_ms`, the notifications the request causes,
    /// then its response (nothing for a dropped request).
    pub fn handle(&mut self, message: Publish, now_ms: u64, out: &mut Vec<Publish>) -> Outcome {
        let mut invocation =
            match envelope::check_request(message.qos, message.properties, &self.config.node_id) {
                Checked::Accept(invocation) => invocation,
                Checked::Reject(reply, error) => {
                    out.push(*reply);
                    return Outcome::Rejected(error);
                }
                Checked::Drop(reason) => return Outcome::Dropped(reason),
            };
        self.expire(now_ms, out);
        let (command, reply) = match decode_request(&message.payload) {
            Ok(Request::KeyNotify { .. }) if invocation.client_id.is_none() => {
                let error = EnvelopeError::MissingClientId;
                out.push(envelope::error_reply(
                    &mut invocation,
                    &error,
                    &self.config.node_id,
                ));
                return Outcome::Rejected(error);
            }
            Ok(request) => (
                Some(request.command()),
                self.execute(request, invocation.context(), now_ms, out),
            ),
            Err(error) => (None, self.error_reply(error, now_ms)),
        };
        let properties = envelope::response_properties(
            &invocation,
            200,
            reply.version.as_ref(),
            &self.config.node_id,
        );
        let error = match &reply.response {
            Response::Error(e) => Some(e.clone()),
            _ => None,
        };
        out.push(Publish {
            topic: invocation.response_topic,
            payload: reply.response.to_bytes(),
            qos: 1,
            properties,
        });
        Outcome::Answered { command, error }
    }

    /// Runs one decoded request, pushing the notifications it causes onto `notifications`.
    /// Keys that expired by `now_ms` must have been expired first ([`Engine::handle`] does).
    pub fn execute(
        &mut self,
        request: Request,
        context: RequestContext<'_>,
        now_ms: u64,
        notifications: &mut Vec<Publish>,
    ) -> Reply {
        let result = match request {
            Request::Set(set) => self.set(set, context, now_ms, notifications),
            Request::Get { key } => self.get(&key, context),
            Request::Del { key } => self.delete(&key, None, context, now_ms, notifications),
            Request::VDel { key, value } => {
                self.delete(&key, Some(&value), context, now_ms, notifications)
            }
            Request::KeyNotify { key, stop } => self.keynotify(key, stop, context, now_ms),
            Request::Scan { pattern, token } => self.scan(&pattern, token, context, now_ms),
        };
        result.unwrap_or_else(|error| self.error_reply(error, now_ms))
    }

    /// Expires every key whose deadline is at or before `now_ms`, pushing a DELETE
    /// notification (with a fresh version) to each watcher. Returns how many keys expired.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Publish>) -> usize {
        let mut expired = 0;
        let mut watchers = std::mem::take(&mut self.watchers);
        while let Some(key) = self.store.pop_expired(now_ms, &mut watchers) {
            expired += 1;
            if !watchers.is_empty() {
                let version = self.fresh_version(now_ms);
                notify(&mut watchers, &key, &Notification::Delete, &version, out);
            }
        }
        self.watchers = watchers;
        expired
    }

    fn error_reply(&mut self, error: ServiceError, now_ms: u64) -> Reply {
        Reply {
            response: Response::Error(error),
            version: Some(self.clock.current(now_ms)),
        }
    }

    fn ok(&mut self, response: Response, now_ms: u64) -> Result<Reply, ServiceError> {
        Ok(Reply {
            response,
            version: Some(self.clock.current(now_ms)),
        })
    }

    /// A new version for a change the engine makes on its own (deletion, expiry). The counter
    /// can only overflow after 2^31 events within one millisecond; then the clock's latest
    /// value is still a valid (if not fresh) version.
    fn fresh_version(&mut self, now_ms: u64) -> Hlc {
        self.clock
            .tick(now_ms)
            .unwrap_or_else(|_| self.clock.current(now_ms))
    }

    fn authorize(
        &self,
        context: RequestContext<'_>,
        key: &[u8],
        access: Access,
    ) -> Result<(), ServiceError> {
        if self.config.access.allows(context.client_id, key, access) {
            Ok(())
        } else {
            Err(ServiceError::NotAuthorized)
        }
    }

    fn fencing_token(
        &self,
        context: RequestContext<'_>,
        now_ms: u64,
    ) -> Result<Option<Hlc>, ServiceError> {
        let Some(text) = context.fencing_token else {
            return Ok(None);
        };
        let token = Hlc::parse(text).map_err(|_| ServiceError::MalformedTimestamp)?;
        if token.is_too_far_ahead_of(now_ms) {
            return Err(ServiceError::FencingTokenSkew);
        }
        Ok(Some(token))
    }

    fn set(
        &mut self,
        set: SetRequest,
        context: RequestContext<'_>,
        now_ms: u64,
        notifications: &mut Vec<Publish>,
    ) -> Result<Reply, ServiceError> {
        let timestamp = context.timestamp.ok_or(ServiceError::MissingTimestamp)?;
        let timestamp =
            Hlc::parse_logical(timestamp).map_err(|_| ServiceError::MalformedTimestamp)?;
        if timestamp.0 > now_ms.saturating_add(MAX_SKEW_MS) {
            return Err(ServiceError::TimestampSkew);
        }
        let fencing_token = self.fencing_token(context, now_ms)?;
        self.authorize(context, &set.key, Access::Write)?;
        // Skew was checked above, so this fails only when the request's counter is at the
        // protocol's limit: its timestamp cannot be followed.
        let version = self
            .clock
            .receive_logical(timestamp, now_ms)
            .map_err(|_| ServiceError::MalformedTimestamp)?;
        let op = SetOp {
            key: &set.key,
            value: &set.value,
            condition: set.condition,
            expires_at: set.expires_in_ms.map(|ms| now_ms.saturating_add(ms.get())),
            fencing_token: fencing_token.as_ref(),
            version: &version,
            persist: context.persist,
        };
        let mut watchers = std::mem::take(&mut self.watchers);
        let outcome = self.store.set(op, &mut watchers);
        if matches!(outcome, Ok(SetOutcome::Applied)) {
            let change = Notification::Set(set.value);
            notify(&mut watchers, &set.key, &change, &version, notifications);
        }
        self.watchers = watchers;
        Ok(match outcome? {
            SetOutcome::Applied => Reply {
                response: Response::Ok,
                version: Some(version),
            },
            SetOutcome::NotApplied { version } => Reply {
                response: Response::NotApplied,
                version: Some(version),
            },
        })
    }

    fn get(&mut self, key: &Bytes, context: RequestContext<'_>) -> Result<Reply, ServiceError> {
        self.authorize(context, key, Access::Read)?;
        Ok(match self.store.get(key) {
            Some((value, version)) => Reply {
                response: Response::Value(value),
                version: Some(version),
            },
            None => Reply {
                response: Response::Absent,
                version: None,
            },
        })
    }

    fn delete(
        &mut self,
        key: &Bytes,
        if_value: Option<&Bytes>,
        context: RequestContext<'_>,
        now_ms: u64,
        notifications: &mut Vec<Publish>,
    ) -> Result<Reply, ServiceError> {
        let fencing_token = self.fencing_token(context, now_ms)?;
        self.authorize(context, key, Access::Write)?;
        let op = DelOp {
            key,
            if_value: if_value.map(|v| &v[..]),
            fencing_token: fencing_token.as_ref(),
        };
        let mut watchers = std::mem::take(&mut self.watchers);
        let outcome = self.store.delete(op, &mut watchers);
        let reply = match outcome {
            Ok(DelOutcome::Deleted) => {
                let version = self.fresh_version(now_ms);
                notify(
                    &mut watchers,
                    key,
                    &Notification::Delete,
                    &version,
                    notifications,
                );
                Ok(Reply {
                    response: Response::Deleted(1),
                    version: Some(version),
                })
            }
            Ok(DelOutcome::Absent) => self.ok(Response::Deleted(0), now_ms),
            Ok(DelOutcome::ValueMismatch) => self.ok(Response::NotApplied, now_ms),
            Err(error) => Err(error),
        };
        self.watchers = watchers;
        reply
    }

    fn keynotify(
        &mut self,
        key: Bytes,
        stop: bool,
        context: RequestContext<'_>,
        now_ms: u64,
    ) -> Result<Reply, ServiceError> {
        // `handle` answers a KEYNOTIFY without a client id with status 400; a direct caller
        // of `execute` gets this.
        let client = context.client_id.ok_or(ServiceError::NotAuthorized)?;
        self.authorize(context, &key, Access::Read)?;
        let response = if !stop {
            self.store.watch(&ClientId::from(client), &key);
            Response::Ok
        } else if self.store.unwatch(client, &key) {
            Response::Ok
        } else {
            Response::Deleted(0)
        };
        self.ok(response, now_ms)
    }

    fn scan(
        &mut self,
        pattern: &[u8],
        token: Option<Bytes>,
        context: RequestContext<'_>,
        now_ms: u64,
    ) -> Result<Reply, ServiceError> {
        let after = match &token {
            None => None,
            Some(token) => Some(
                token
                    .strip_prefix(SCAN_TOKEN_PREFIX)
                    .ok_or(ServiceError::SyntaxError)?,
            ),
        };
        let pattern = Pattern::new(pattern);
        let mut keys = Vec::new();
        let access = &self.config.access;
        let mut readable = |key: &[u8]| access.allows(context.client_id, key, Access::Read);
        let last = self.store.scan(
            &pattern,
            after,
            self.config.scan_page_size,
            self.config.scan_budget,
            &mut readable,
            &mut keys,
        );
        let token = last.map(|last| [SCAN_TOKEN_PREFIX, &last].concat().into());
        self.ok(Response::Keys { keys, token }, now_ms)
    }
}

/// Publishes `change` of `key` to every client in `watchers` (and empties it). The payload is
/// encoded once and shared.
fn notify(
    watchers: &mut Vec<ClientId>,
    key: &[u8],
    change: &Notification,
    version: &Hlc,
    out: &mut Vec<Publish>,
) {
    if watchers.is_empty() {
        return;
    }
    let payload = change.to_bytes();
    let properties = notification_properties(version);
    for client in watchers.drain(..) {
        out.push(Publish {
            topic: topics::notify_topic(&client, key),
            payload: payload.clone(),
            qos: 1,
            properties: properties.clone(),
        });
    }
}
