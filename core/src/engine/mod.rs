//! The state store engine: a request, its envelope and the current time in; the response and
//! the notifications it causes out, notifications first (spec §4). No I/O: a driver moves
//! messages between the broker and [`Engine::handle`], and sleeps until
//! [`Engine::next_deadline`] to call [`Engine::expire`].

mod access;
mod scan_token;

use bytes::Bytes;

pub use access::{Access, AccessRule, AccessRules};

use crate::ServiceError;
use crate::codec::{Command, Notification, Request, Response, decode_request};
use crate::envelope::{
    self, Checked, DropReason, EnvelopeError, Invocation, Publish, notification_properties,
};
use crate::hlc::{Hlc, HlcClock, HlcError, MAX_SKEW_MS};
use crate::store::{
    ClientId, DelOutcome, Expired, MemoryStore, Pattern, SetOutcome, Store, StoreOp, StoreReply,
    StoreStats,
};
use crate::topics;

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
    /// Who may read and write which keys.
    pub access: AccessRules,
    /// Response topics a request that is not identified may name (empty: any). An identified
    /// request's answer always goes to its client's own `clients/{clientId}/` tree.
    pub response_topic_prefixes: Vec<String>,
    /// Seals SCAN continuation tokens so they reveal no key and cannot be forged. Drivers
    /// pass a random secret; nodes that continue each other's scans share it.
    pub scan_token_key: [u8; 32],
    /// Makes this engine's tokens unique among engines that share `scan_token_key`: random.
    pub scan_token_seed: [u8; 16],
    /// How long an identified client's registrations last after its last KEYNOTIFY (mqstore
    /// clients renew every third of it): whichever way a client left, its registrations go.
    /// `None`: until the client is known to be gone.
    pub registration_lease_ms: Option<u64>,
    /// The same for clients on the standard topics, which do not renew (the Azure SDK
    /// clients): `None` (the default) keeps their registrations until they are known to be
    /// gone.
    pub standard_registration_lease_ms: Option<u64>,
    /// Publish a keyspace event ([`topics::KEYSPACE_CREATED`], [`topics::KEYSPACE_DELETED`])
    /// when a key is made or goes, so that a key browser learns of new keys without scanning
    /// again: on by default.
    pub keyspace_events: bool,
}

impl EngineConfig {
    /// Defaults for a node: pages of 100 keys, 10 000 keys examined per page, no access rules.
    pub fn new(node_id: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            scan_page_size: 100,
            scan_budget: 10_000,
            access: AccessRules::allow_all(),
            response_topic_prefixes: Vec::new(),
            scan_token_key: [0; 32],
            scan_token_seed: [0; 16],
            registration_lease_ms: None,
            standard_registration_lease_ms: None,
            keyspace_events: true,
        }
    }
}

/// What the envelope said that the state store itself uses, borrowed from wherever the driver
/// keeps it (an [`Invocation`], or a binding's own types).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestContext<'a> {
    /// The requesting client's id, when known.
    pub client_id: Option<&'a str>,
    /// `__ts`, unparsed.
    pub timestamp: Option<&'a str>,
    /// `__ft`, unparsed.
    pub fencing_token: Option<&'a str>,
    /// The request asked for the key to be kept durably (`aio-persistence`).
    pub persist: bool,
    /// `client_id` comes from the request topic (see [`Invocation::identified`]).
    pub identified: bool,
}

impl Invocation {
    /// The parts of the envelope the engine reads.
    pub fn context(&self) -> RequestContext<'_> {
        RequestContext {
            client_id: self.client_id.as_deref(),
            timestamp: self.timestamp.as_deref(),
            fencing_token: self.fencing_token.as_deref(),
            persist: self.persist,
            identified: self.identified,
        }
    }
}

/// The answer to one command: the payload and the `__ts` to send with it (none only for GET
/// of an absent key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The answer.
    pub response: Response,
    /// The version the answer carries (`__ts`).
    pub version: Option<Hlc>,
}

/// What [`Engine::handle`] did with a message, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Answered with status 200; `error` when the payload was `-ERR`. `command` is `None` when
    /// the payload could not be decoded.
    Answered {
        /// The request's command, when it could be read.
        command: Option<Command>,
        /// The state store error it was answered with, if any.
        error: Option<ServiceError>,
    },
    /// Answered with an envelope error status.
    Rejected(EnvelopeError),
    /// Not answered.
    Dropped(DropReason),
}

/// A request waiting for its store op: made by [`Engine::begin`], finished by
/// [`Engine::finish`] with the store's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    /// What the store must do, atomically.
    pub op: StoreOp,
    /// Who reads a SCAN's page (the access rules filter it, and its token is bound to them).
    reader: Option<ClientId>,
    /// A SCAN's pattern as sent (its token is bound to it).
    pattern: Bytes,
}

/// A checked request waiting for its store op: made by [`Engine::accept`], finished by
/// [`Engine::complete`].
#[derive(Debug)]
pub struct Call {
    invocation: Invocation,
    command: Command,
    pending: Pending,
}

impl Call {
    /// What the store must do, atomically.
    pub fn op(&self) -> &StoreOp {
        &self.pending.op
    }

    /// The request's command (for logs and metrics).
    pub fn command(&self) -> Command {
        self.command
    }
}

/// What [`Engine::accept`] decided.
#[derive(Debug)]
pub enum Accepted {
    /// Answered (or dropped) without the store.
    Done(Outcome),
    /// Run [`Call::op`] on the store, then call [`Engine::complete`]. Boxed: it waits in
    /// the driver (many at once) while the store works.
    Store(Box<Call>),
}

/// What [`Engine::begin`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Answered without the store (an error found before it was needed).
    Done(Reply),
    /// Run the op on the store, then call [`Engine::finish`].
    Store(Pending),
}

/// The state store. `S` is where state lives; with a [`Store`] (the memory store) the engine
/// drives it itself ([`Engine::handle`], [`Engine::execute`]); with a store that answers
/// later (Redis), a driver runs each [`StoreOp`] between [`Engine::begin`] and
/// [`Engine::finish`].
#[derive(Debug)]
pub struct Engine<S = MemoryStore> {
    store: S,
    clock: HlcClock,
    scan_tokens: scan_token::ScanTokens,
    config: EngineConfig,
}

impl Engine<MemoryStore> {
    /// An engine over an empty memory store without quotas.
    pub fn in_memory(node_id: impl Into<String>) -> Result<Self, HlcError> {
        Self::new(EngineConfig::new(node_id), MemoryStore::new())
    }
}

impl<S> Engine<S> {
    /// An engine over `store`. Fails when the node id contains `:`.
    pub fn new(config: EngineConfig, store: S) -> Result<Self, HlcError> {
        Ok(Self {
            clock: HlcClock::new(config.node_id.as_str())?,
            scan_tokens: scan_token::ScanTokens::new(
                &config.scan_token_key,
                config.scan_token_seed,
            ),
            store,
            config,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.config.node_id
    }

    /// Makes every version this engine issues from now on newer than `seen` (the newest
    /// version a durable store recovered), whatever the wall clock says.
    pub fn witness(&mut self, seen: &Hlc) {
        self.clock.witness(seen);
    }

    /// The clock's latest value (what a compacted log records).
    pub fn clock_now(&mut self, now_ms: u64) -> Hlc {
        self.clock.current(now_ms)
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The store, mutably (for drivers of stores that answer later).
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Checks a decoded request and decides its store op: everything that does not depend on
    /// stored state (timestamps, fencing token syntax and skew, access, the new version).
    pub fn begin(&mut self, request: Request, context: RequestContext<'_>, now_ms: u64) -> Step {
        match self.prepare(request, context, now_ms) {
            Ok(pending) => Step::Store(pending),
            Err(error) => Step::Done(self.error_reply(error, now_ms)),
        }
    }

    /// Turns the store's reply to a pending op into the answer, pushing the notifications the
    /// change causes onto `notifications`.
    pub fn finish(
        &mut self,
        pending: Pending,
        reply: StoreReply,
        now_ms: u64,
        notifications: &mut Vec<Publish>,
    ) -> Reply {
        let current = |engine: &mut Self, response| Reply {
            response,
            version: Some(engine.clock.current(now_ms)),
        };
        match (pending.op, reply) {
            (StoreOp::Get { .. }, StoreReply::Get(found)) => match found {
                Some((value, version)) => Reply {
                    response: Response::Value(value),
                    version: Some(version),
                },
                None => Reply {
                    response: Response::Absent,
                    version: None,
                },
            },
            (StoreOp::Set { key, value, .. }, StoreReply::Set(outcome)) => match outcome {
                Ok(SetOutcome::Applied {
                    watchers,
                    version,
                    replaced,
                }) => {
                    // The store may have moved the version past the key's (written by a node
                    // whose clock is ahead): later versions of this node follow it.
                    let _ = self.clock.receive(&version, now_ms);
                    if replaced.is_none() {
                        self.keyspace_event(topics::KEYSPACE_CREATED, &key, notifications);
                    }
                    let change = Notification::Set(value);
                    let replaced = replaced.as_ref();
                    notify(watchers, &key, &change, &version, replaced, notifications);
                    Reply {
                        response: Response::Ok,
                        version: Some(version),
                    }
                }
                Ok(SetOutcome::NotApplied { version }) => Reply {
                    response: Response::NotApplied,
                    version: Some(version),
                },
                Err(error) => self.error_reply(error, now_ms),
            },
            (StoreOp::Delete { key, .. }, StoreReply::Delete(outcome)) => match outcome {
                Ok(DelOutcome::Deleted {
                    watchers,
                    version,
                    replaced,
                }) => {
                    // As for a SET: the store may have moved the version past the key's.
                    let _ = self.clock.receive(&version, now_ms);
                    self.keyspace_event(topics::KEYSPACE_DELETED, &key, notifications);
                    notify(
                        watchers,
                        &key,
                        &Notification::Delete,
                        &version,
                        Some(&replaced),
                        notifications,
                    );
                    Reply {
                        response: Response::Deleted(1),
                        version: Some(version),
                    }
                }
                Ok(DelOutcome::Absent) => current(self, Response::Deleted(0)),
                Ok(DelOutcome::ValueMismatch) => current(self, Response::NotApplied),
                Err(error) => self.error_reply(error, now_ms),
            },
            (StoreOp::Watch { .. }, StoreReply::Watch(Ok(()))) => current(self, Response::Ok),
            (StoreOp::Watch { .. }, StoreReply::Watch(Err(error))) => {
                self.error_reply(error, now_ms)
            }
            (StoreOp::Unwatch { .. }, StoreReply::Unwatch(was_watched)) => current(
                self,
                if was_watched {
                    Response::Ok
                } else {
                    Response::Deleted(0)
                },
            ),
            (StoreOp::Scan { .. }, StoreReply::Scan { mut keys, last }) => {
                let reader = pending.reader.as_deref();
                let access = &self.config.access;
                keys.retain(|key| access.allows(reader, key, Access::Read));
                let token = last.map(|last| self.scan_tokens.seal(&last, &pending.pattern, reader));
                current(self, Response::Keys { keys, token })
            }
            (op, reply) => {
                // A store that answers an op with another op's reply is broken; say so rather
                // than guess (and never panic in a server loop).
                let text = format!("internal error: the store answered {op:?} with {reply:?}");
                self.error_reply(ServiceError::Other(text), now_ms)
            }
        }
    }

    /// The first half of [`Engine::handle`], for drivers of stores that answer later: checks
    /// a message from the invoke topic and either answers it at once (pushing the response
    /// onto `out`) or returns the [`Call`] whose op the store must run; then call
    /// [`Engine::complete`] with the store's reply. Expired keys are the store's business
    /// here (a store that answers later removes them itself).
    pub fn accept(&mut self, message: Publish, now_ms: u64, out: &mut Vec<Publish>) -> Accepted {
        self.accept_from(message, None, now_ms, out)
    }

    /// [`Engine::accept`] for a request whose sender the broker itself names (`sender`: a
    /// broker plugin reads it off the connection). The sender is who the request is from —
    /// for access rules and registrations — whatever `__srcId` claims; a request that claims
    /// another id is refused (`not authorized`), as an identified request that does. Answers
    /// and notifications go to the topics the request's own form names, as otherwise.
    pub fn accept_from(
        &mut self,
        message: Publish,
        sender: Option<&str>,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Accepted {
        let mut invocation =
            match envelope::check_request(message.qos, message.properties, &self.config.node_id) {
                Checked::Accept(invocation) => invocation,
                Checked::Reject(reply, error) => {
                    out.push(*reply);
                    return Accepted::Done(Outcome::Rejected(error));
                }
                Checked::Drop(reason) => return Accepted::Done(Outcome::Dropped(reason)),
            };
        let mut impersonating = false;
        match topics::client_of_identified_invoke(&message.topic) {
            // Only this client could publish here (the broker's ACL): it is who it is, whatever
            // it claims, and it is answered only in its own tree.
            Some(id) => {
                if !topics::is_own_response_topic(&id, &invocation.response_topic) {
                    return Accepted::Done(Outcome::Dropped(DropReason::ResponseTopicNotAllowed));
                }
                let claimed = invocation.client_id.replace(id);
                impersonating = claimed != invocation.client_id;
                invocation.identified = true;
            }
            None => {
                let prefixes = &self.config.response_topic_prefixes;
                if !prefixes.is_empty()
                    && !prefixes
                        .iter()
                        .any(|p| invocation.response_topic.starts_with(p.as_str()))
                {
                    return Accepted::Done(Outcome::Dropped(DropReason::ResponseTopicNotAllowed));
                }
                if let Some(sender) = sender {
                    let claimed = invocation.client_id.replace(sender.to_owned());
                    impersonating = claimed.is_some_and(|claimed| claimed != sender);
                }
            }
        }
        let (command, reply) = match decode_request(&message.payload) {
            // Claims another client's id in `__srcId`: refused, whatever it asks.
            Ok(request) if impersonating => (
                Some(request.command()),
                self.error_reply(ServiceError::NotAuthorized, now_ms),
            ),
            Ok(Request::KeyNotify { .. }) if invocation.client_id.is_none() => {
                let error = EnvelopeError::MissingClientId;
                out.push(envelope::error_reply(
                    &mut invocation,
                    &error,
                    &self.config.node_id,
                ));
                return Accepted::Done(Outcome::Rejected(error));
            }
            Ok(request) => {
                let command = request.command();
                match self.begin(request, invocation.context(), now_ms) {
                    Step::Done(reply) => (Some(command), reply),
                    Step::Store(pending) => {
                        return Accepted::Store(Box::new(Call {
                            invocation,
                            command,
                            pending,
                        }));
                    }
                }
            }
            Err(error) => (None, self.error_reply(error, now_ms)),
        };
        Accepted::Done(self.respond(invocation, command, reply, out))
    }

    /// The second half of [`Engine::handle`]: the store's reply to a [`Call`]'s op in, the
    /// notifications it causes and then the response pushed onto `out`.
    pub fn complete(
        &mut self,
        call: Box<Call>,
        reply: StoreReply,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Outcome {
        let Call {
            invocation,
            command,
            pending,
        } = *call;
        let reply = self.finish(pending, reply, now_ms, out);
        self.respond(invocation, Some(command), reply, out)
    }

    /// Answers a [`Call`] whose store failed (Redis away, or too slow) with status 503 and
    /// the store's message, so the caller learns why instead of waiting for its timeout.
    pub fn fail(&mut self, call: Box<Call>, reason: String, out: &mut Vec<Publish>) -> Outcome {
        let mut invocation = call.invocation;
        let error = EnvelopeError::StoreFailed(reason);
        out.push(envelope::error_reply(
            &mut invocation,
            &error,
            &self.config.node_id,
        ));
        Outcome::Rejected(error)
    }

    /// Pushes the response to `invocation` onto `out`.
    fn respond(
        &self,
        invocation: Invocation,
        command: Option<Command>,
        reply: Reply,
        out: &mut Vec<Publish>,
    ) -> Outcome {
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

    /// Pushes a DELETE notification to each watcher of a key that expired, with the expiry's
    /// version (for drivers of stores that find expired keys themselves).
    pub fn expired(&mut self, expired: Expired, now_ms: u64, out: &mut Vec<Publish>) {
        self.keyspace_event(topics::KEYSPACE_DELETED, &expired.key, out);
        // As for a SET: later versions of this node follow the store's.
        let _ = self.clock.receive(&expired.version, now_ms);
        if !expired.watchers.is_empty() {
            notify(
                expired.watchers,
                &expired.key,
                &Notification::Delete,
                &expired.version,
                Some(&expired.replaced),
                out,
            );
        }
    }

    /// A keyspace event about `key` (when they are on).
    fn keyspace_event(&self, topic: &str, key: &Bytes, out: &mut Vec<Publish>) {
        if self.config.keyspace_events {
            out.push(Publish {
                topic: topic.to_owned(),
                payload: key.clone(),
                qos: 0,
                properties: crate::envelope::Properties::default(),
            });
        }
    }

    fn prepare(
        &mut self,
        request: Request,
        context: RequestContext<'_>,
        now_ms: u64,
    ) -> Result<Pending, ServiceError> {
        let mut reader = None;
        let mut scan_pattern = Bytes::new();
        let op = match request {
            Request::Set(set) => {
                let timestamp = context.timestamp.ok_or(ServiceError::MissingTimestamp)?;
                let timestamp =
                    Hlc::parse_logical(timestamp).map_err(|_| ServiceError::MalformedTimestamp)?;
                if timestamp.0 > now_ms.saturating_add(MAX_SKEW_MS) {
                    return Err(ServiceError::TimestampSkew);
                }
                let fencing_token = self.fencing_token(context, now_ms)?;
                self.authorize(context, &set.key, Access::Write)?;
                // Skew was checked above, so this fails only at the end of time (a counter at
                // the protocol's limit moves the clock a millisecond on).
                let version = self
                    .clock
                    .receive_logical(timestamp, now_ms)
                    .map_err(|_| ServiceError::MalformedTimestamp)?;
                StoreOp::Set {
                    expires_at: set.expires_in_ms.map(|ms| now_ms.saturating_add(ms.get())),
                    key: set.key,
                    value: set.value,
                    condition: set.condition,
                    fencing_token,
                    version,
                    persist: context.persist,
                }
            }
            Request::Get { key } => {
                self.authorize(context, &key, Access::Read)?;
                StoreOp::Get { key }
            }
            Request::Del { key } => self.delete_op(key, None, context, now_ms)?,
            Request::VDel { key, value } => self.delete_op(key, Some(value), context, now_ms)?,
            Request::KeyNotify { key, stop } => {
                // `handle` answers a KEYNOTIFY without a client id with status 400; a direct
                // caller of `begin` or `execute` gets this.
                let client = context.client_id.ok_or(ServiceError::NotAuthorized)?;
                self.authorize(context, &key, Access::Read)?;
                // An identified client's registrations are kept apart from those of requests
                // that merely claim its id.
                let client = match context.identified {
                    true => ClientId::from(topics::identified(client)),
                    false => ClientId::from(client),
                };
                if !stop && topics::notify_topic_len(&client, &key) > topics::MAX_TOPIC_LEN {
                    return Err(ServiceError::NotificationTopicTooLong);
                }
                let lease = match context.identified {
                    true => self.config.registration_lease_ms,
                    false => self.config.standard_registration_lease_ms,
                };
                if stop {
                    StoreOp::Unwatch { client, key }
                } else {
                    StoreOp::Watch {
                        client,
                        key,
                        lease_until: lease.map(|ms| now_ms.saturating_add(ms)),
                    }
                }
            }
            Request::Scan { pattern, token } => {
                // A token this engine did not seal for this scan and client is refused.
                let after = token
                    .map(|token| {
                        self.scan_tokens
                            .open(&token, &pattern, context.client_id)
                            .ok_or(ServiceError::SyntaxError)
                    })
                    .transpose()?;
                reader = context.client_id.map(ClientId::from);
                scan_pattern = pattern.clone();
                StoreOp::Scan {
                    pattern: Pattern::new(&pattern),
                    after,
                    limit: self.config.scan_page_size,
                    budget: self.config.scan_budget,
                }
            }
        };
        Ok(Pending {
            op,
            reader,
            pattern: scan_pattern,
        })
    }

    fn delete_op(
        &mut self,
        key: Bytes,
        if_value: Option<Bytes>,
        context: RequestContext<'_>,
        now_ms: u64,
    ) -> Result<StoreOp, ServiceError> {
        let fencing_token = self.fencing_token(context, now_ms)?;
        self.authorize(context, &key, Access::Write)?;
        Ok(StoreOp::Delete {
            key,
            if_value,
            fencing_token,
            version: self.fresh_version(now_ms),
        })
    }

    fn error_reply(&mut self, error: ServiceError, now_ms: u64) -> Reply {
        Reply {
            response: Response::Error(error),
            version: Some(self.clock.current(now_ms)),
        }
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
}

impl<S: Store> Engine<S> {
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

    /// Drops the registrations of every client whose lease ended by `now_ms` (it stopped
    /// renewing them); returns those clients and how many registrations each had.
    pub fn expire_leases(&mut self, now_ms: u64) -> Vec<(ClientId, usize)> {
        std::iter::from_fn(|| self.store.pop_expired_lease(now_ms)).collect()
    }

    /// Handles one message from the invoke topic, pushing what to publish onto `out`: DELETE
    /// notifications of keys that expired by `now_ms`, the notifications the request causes,
    /// then its response (nothing for a dropped request).
    pub fn handle(&mut self, message: Publish, now_ms: u64, out: &mut Vec<Publish>) -> Outcome {
        self.handle_from(message, None, now_ms, out)
    }

    /// [`Engine::handle`] of a request whose sender the broker names (see
    /// [`Engine::accept_from`]).
    pub fn handle_from(
        &mut self,
        message: Publish,
        sender: Option<&str>,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Outcome {
        self.expire(now_ms, out);
        match self.accept_from(message, sender, now_ms, out) {
            Accepted::Done(outcome) => outcome,
            Accepted::Store(call) => {
                let reply = self.store.apply(&call.pending.op, now_ms);
                self.complete(call, reply, now_ms, out)
            }
        }
    }

    /// Runs one decoded request against the store ([`Engine::begin`], the op,
    /// [`Engine::finish`]), pushing the notifications it causes onto `notifications`. Keys
    /// that expired by `now_ms` must have been expired first ([`Engine::handle`] does).
    pub fn execute(
        &mut self,
        request: Request,
        context: RequestContext<'_>,
        now_ms: u64,
        notifications: &mut Vec<Publish>,
    ) -> Reply {
        match self.begin(request, context, now_ms) {
            Step::Done(reply) => reply,
            Step::Store(pending) => {
                let reply = self.store.apply(&pending.op, now_ms);
                self.finish(pending, reply, now_ms, notifications)
            }
        }
    }

    /// Expires every key whose deadline is at or before `now_ms`, pushing a DELETE
    /// notification (with a fresh version) to each watcher. Returns how many keys expired.
    pub fn expire(&mut self, now_ms: u64, out: &mut Vec<Publish>) -> usize {
        let mut expired = 0;
        while let Some(key) = self.store.pop_expired(now_ms) {
            expired += 1;
            self.expired(key, now_ms, out);
        }
        expired
    }
}

/// What becomes of a publish that must fit the broker's maximum packet size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fit {
    /// It fits as it is.
    Fits(Publish),
    /// An answer that did not fit (it was `size` bytes), now the `ResponseTooLarge` error.
    Replaced {
        /// The error answer that replaces it.
        message: Publish,
        /// The size the original would have had.
        size: usize,
    },
    /// Nothing of it fits (a notification, or an answer whose topic alone is too long): drop
    /// it and count it.
    TooLarge {
        /// The topic it was for.
        topic: String,
        /// Its size in bytes.
        size: usize,
    },
}

/// Makes `message` fit a broker that takes packets of at most `max` bytes: a broker
/// disconnects whoever sends it a larger one, and every answer in flight would be lost with
/// the connection. An answer too large becomes the `ResponseTooLarge` error, so its caller
/// learns why; a notification too large cannot be shortened.
pub fn fit_for_broker(mut message: Publish, is_answer: bool, max: usize) -> Fit {
    let size = message.packet_size();
    if size <= max {
        return Fit::Fits(message);
    }
    if is_answer {
        message.payload = Response::Error(ServiceError::ResponseTooLarge).to_bytes();
        if message.packet_size() <= max {
            return Fit::Replaced { message, size };
        }
    }
    Fit::TooLarge {
        topic: message.topic,
        size,
    }
}

/// Publishes `change` of `key` to every client in `watchers`, with its version and the version
/// of the value it replaced. The payload is encoded once and shared.
fn notify(
    watchers: Vec<ClientId>,
    key: &[u8],
    change: &Notification,
    version: &Hlc,
    replaced: Option<&Hlc>,
    out: &mut Vec<Publish>,
) {
    if watchers.is_empty() {
        return;
    }
    let payload = change.to_bytes();
    let properties = notification_properties(version, replaced);
    for client in watchers {
        out.push(Publish {
            topic: topics::notify_topic(&client, key),
            payload: payload.clone(),
            qos: 1,
            properties: properties.clone(),
        });
    }
}
