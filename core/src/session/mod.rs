//! The client session: everything a client does over one MQTT connection, as one state
//! machine with no I/O — the state store's calls and observations ([`ClientCore`]), leases
//! (locks with fencing tokens, and leader election, on top of the state store), the jobs
//! operator and device calls ([`JobsClient`]) and commands ([`CommandsClient`]) behind one
//! call-id space, one subscription set and one queue of publishes and events.
//!
//! A driver (the wasm binding, the C library's bring-your-own-MQTT layer) owns the transport
//! and the clock, and only moves bytes:
//!
//! * it subscribes (QoS 1) to [`Session::subscriptions`] and waits for the SUBACKs before the
//!   first call, and again after every reconnect, then calls [`Session::resume`];
//! * it tells the session the broker's maximum packet size ([`Session::set_max_packet_size`]);
//! * it publishes (QoS 1) every [`Outgoing`] of [`Session::poll_publish`], in order, and
//!   reports a PUBACK refusal with [`Session::publish_refused`];
//! * it feeds every message of the subscriptions to [`Session::handle`], calls
//!   [`Session::expire`] at [`Session::next_deadline`], and [`Session::connection_lost`] when
//!   the connection drops;
//! * it takes what happened from [`Session::poll_event`].
//!
//! The three clients number their calls apart; the session gives each call one id of its own
//! and routes every incoming message to the client whose topic it is.

mod leases;

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use self::leases::{Lease, Step};
use crate::client::commands::{CommandReply, CommandsClient, CommandsEvent, DefinitionsReply};
use crate::client::jobs::{DeviceRequest, JobNotification, JobsAnswer, JobsClient, JobsEvent};
use crate::client::{
    Answer, CallId, CallOptions, ClientConfig, ClientCore, ClientError, Deleted, Event,
};
use crate::codec::{Notification, Request};
use crate::commands::definitions::DefinitionsRequest;
use crate::commands::wire::{EVENTS_FILTER, EVENTS_PREFIX};
use crate::commands::{CommandRequest, Record};
use crate::envelope::Publish;
use crate::hlc::{Hlc, HlcError};
use crate::jobs::OperatorRequest;
use crate::lease::LeaseTerms;
use crate::shadow;
use crate::topics;

/// A publish to send, with the call it belongs to (`None`: the session's own, such as the
/// renewal of its registrations).
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    /// What to publish.
    pub publish: Publish,
    /// The call it belongs to, if any (a refused publish fails that call).
    pub call: Option<CallId>,
}

/// What a finished call gives, by kind of call.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Completion {
    /// A state store call (or an observation's registration): the answer and its version.
    Store(Answer),
    /// A jobs call: the record(s) it asks for, read by its type (see [`JobsAnswer`]).
    Jobs(JobsAnswer),
    /// A command: the device's reply (or the service's DELIVERED/SENT).
    Command(CommandReply),
    /// A command's status record.
    CommandStatus(Record),
    /// A stored-commands call's answer (see [`Session::command_definitions`]).
    CommandDefinitions(DefinitionsReply),
    /// A lease acquisition: the fencing token when held (the lease's id is the call's), `None`
    /// when someone else still holds it after the wait.
    Lease(Option<Hlc>),
    /// A lease release: whether it was still held.
    Released(bool),
}

/// What happened.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// Call `call` finished. `op` names what it was: the state store command (`SET`, `GET`,
    /// ..., `KEYNOTIFY` for observe and unobserve), `jobs`, `command` or `commandStatus`.
    Completed {
        /// The call it answers.
        call: CallId,
        /// Which call it was (`SET`, `createJob`, ...).
        op: &'static str,
        /// Its result.
        result: Result<Completion, ClientError>,
    },
    /// An observed key changed (see [`Event::Changed`]).
    Changed {
        /// The key that changed.
        key: Bytes,
        /// How: a new value, or deleted.
        change: Notification,
        /// The change's version, when the notification carried one.
        version: Option<Hlc>,
        /// Found by reading the key back after a reconnect (the notification was missed).
        synthetic: bool,
        /// Changes before this one were not reported (see [`Event::Changed`]'s `gap`).
        gap: bool,
    },
    /// A jobs notification for a thing this session acts as.
    Jobs(JobNotification),
    /// A delta or documents of a device shadow this session uses ([`Session::use_shadow`]).
    Shadow(shadow::Notification),
    /// A command's status changed (after [`Session::watch_commands`]).
    CommandRecord(Record),
    /// A key was made (`created`) or is gone, from the server's keyspace events (after
    /// [`Session::watch_keyspace`]). Events are QoS 0 and may come out of order across
    /// nodes: a key browser scans again after a reconnect.
    Keyspace {
        /// The key.
        key: Bytes,
        /// True when it was made, false when it was deleted or expired.
        created: bool,
    },
    /// Held lease `lease` was renewed (`version`: the renewing SET's; the fencing token stays
    /// the one it was acquired with).
    LeaseRenewed {
        /// The lease (the id its acquisition returned).
        lease: CallId,
        /// The renewal's version.
        version: Hlc,
    },
    /// Held lease `lease` is lost: a renewal found someone else holding the key, or none was
    /// confirmed before it would lapse. Writes with its fencing token will be refused.
    LeaseLost {
        /// The lease (the id its acquisition returned).
        lease: CallId,
        /// Its key.
        key: Bytes,
    },
}

/// Which client a call belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Service {
    Store,
    Jobs,
    Commands,
}

/// The client session, without I/O.
#[derive(Debug)]
pub struct Session {
    store: ClientCore,
    jobs: JobsClient,
    commands: CommandsClient,
    /// Each call in flight: the session's id and op, by its client and that client's id.
    calls: HashMap<(Service, CallId), (CallId, &'static str)>,
    next_call: u64,
    /// Leases being acquired or held.
    leases: Vec<Lease>,
    /// The state store calls the session makes for itself, by the store client's id: lease
    /// claims (with the lease's id and when each was sent) and the observations of keys
    /// leases wait on (`None`: the answer only acknowledges).
    internal: HashMap<CallId, Option<(CallId, u64)>>,
    /// The keys the caller observes (leases observe keys too; their changes are theirs).
    observed: Vec<Bytes>,
    /// The latest time an input gave, for inputs without one (a lost connection).
    now_ms: u64,
    /// The things this session acts as in the jobs device API, in the order it began to (a
    /// few per session: a list, rather than a set's code in the wasm binding).
    things: Vec<String>,
    /// The device shadows this session uses: a thing, and a shadow's name (`None`: classic).
    shadows: Vec<(String, Option<String>)>,
    watching_commands: bool,
    watching_keyspace: bool,
    outgoing: VecDeque<Outgoing>,
    events: VecDeque<SessionEvent>,
}

impl Session {
    /// A session for `config`'s client. Fails when the client id contains `:` (it is the node
    /// part of its clock).
    pub fn new(config: ClientConfig) -> Result<Self, HlcError> {
        // The clients' tokens must differ from each other's: one seed, turned apart.
        let seed = config.correlation_seed;
        let jobs = JobsClient::new(
            config.client_id.as_str(),
            seed.rotate_left(21),
            config.default_timeout_ms,
        );
        let commands = CommandsClient::new(config.client_id.as_str(), seed.rotate_left(42));
        Ok(Self {
            store: ClientCore::new(config)?,
            jobs,
            commands,
            calls: HashMap::new(),
            next_call: 0,
            leases: Vec::new(),
            internal: HashMap::new(),
            observed: Vec::new(),
            now_ms: 0,
            things: Vec::new(),
            shadows: Vec::new(),
            watching_commands: false,
            watching_keyspace: false,
            outgoing: VecDeque::new(),
            events: VecDeque::new(),
        })
    }

    /// The MQTT client id.
    pub fn client_id(&self) -> &str {
        self.store.client_id()
    }

    /// Every topic filter to subscribe to (QoS 1) before the first call and after every
    /// reconnect: the state store's, the jobs operator's and the commands' answers, the
    /// things of [`Session::act_as`], and the command events of [`Session::watch_commands`].
    pub fn subscriptions(&self) -> Vec<String> {
        let mut filters: Vec<String> = self.store.subscriptions().into();
        filters.push(self.jobs.operator_subscription().to_owned());
        filters.push(self.commands.response_subscription().to_owned());
        for thing in &self.things {
            filters.extend(JobsClient::device_subscriptions(thing));
        }
        for (thing, name) in &self.shadows {
            filters.extend(shadow::client_subscriptions(target(thing, name)));
        }
        if self.watching_commands {
            filters.push(EVENTS_FILTER.to_owned());
        }
        if self.watching_keyspace {
            filters.push(topics::KEYSPACE_FILTER.to_owned());
        }
        filters
    }

    /// Where this client's presence goes: its Will (payload `gone`).
    pub fn presence_topic(&self) -> String {
        self.store.presence_topic()
    }

    /// The broker's Maximum Packet Size from its CONNACK (`None`: no limit).
    pub fn set_max_packet_size(&mut self, max: Option<u32>) {
        self.store.set_max_packet_size(max);
    }

    /// Acts as `thing` in the jobs device API from now on: the filters to subscribe to now
    /// (empty when it already does); they stay in [`Session::subscriptions`].
    pub fn act_as(&mut self, thing: &str) -> Result<Vec<String>, ClientError> {
        JobsClient::check_thing(thing)?;
        if self.acts_as(thing) {
            return Ok(Vec::new());
        }
        self.things.push(thing.to_owned());
        Ok(JobsClient::device_subscriptions(thing))
    }

    /// Stops acting as `thing` (and reporting its notifications): the filters to unsubscribe
    /// from (empty when it did not act as it). A driver whose subscription for
    /// [`Session::act_as`] failed calls it too.
    pub fn leave(&mut self, thing: &str) -> Vec<String> {
        let before = self.things.len();
        self.things.retain(|t| t != thing);
        match self.things.len() < before {
            true => JobsClient::device_subscriptions(thing),
            false => Vec::new(),
        }
    }

    fn acts_as(&self, thing: &str) -> bool {
        self.things.iter().any(|t| t == thing)
    }

    /// Uses `thing`'s shadow (`name`, or the classic one) from now on: its requests' answers
    /// come, and its delta and documents are reported ([`SessionEvent::Shadow`]). The filters
    /// to subscribe to now (empty when it already does); they stay in
    /// [`Session::subscriptions`].
    pub fn use_shadow(
        &mut self,
        thing: &str,
        name: Option<&str>,
    ) -> Result<Vec<String>, ClientError> {
        let wanted = shadow::Target { thing, name };
        shadow::check_target(wanted).map_err(|r| ClientError::Status {
            status: r.code,
            message: r.message,
        })?;
        if self.uses_shadow(thing, name) {
            return Ok(Vec::new());
        }
        self.shadows
            .push((thing.to_owned(), name.map(str::to_owned)));
        Ok(shadow::client_subscriptions(wanted))
    }

    /// Stops using a shadow: the filters to unsubscribe from (empty when it did not use it).
    pub fn leave_shadow(&mut self, thing: &str, name: Option<&str>) -> Vec<String> {
        let before = self.shadows.len();
        self.shadows
            .retain(|(t, n)| !(t == thing && n.as_deref() == name));
        match self.shadows.len() < before {
            true => shadow::client_subscriptions(shadow::Target { thing, name }),
            false => Vec::new(),
        }
    }

    fn uses_shadow(&self, thing: &str, name: Option<&str>) -> bool {
        self.shadows
            .iter()
            .any(|(t, n)| t == thing && n.as_deref() == name)
    }

    /// Starts a request on a shadow this session uses ([`Session::use_shadow`]): `op` with
    /// `body` (an update's `state` and optional `version`; `null` for get and delete). The
    /// call completes with the `/accepted` document ([`Completion::Jobs`]), or fails with
    /// [`ClientError::Status`] carrying AWS's code and message.
    pub fn shadow(
        &mut self,
        thing: &str,
        name: Option<&str>,
        op: shadow::Op,
        body: &serde_json::Value,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<CallId, ClientError> {
        if !self.uses_shadow(thing, name) {
            return Err(ClientError::Status {
                status: 400,
                message: format!(
                    "not using the shadow {:?} of thing {thing:?}: use it (and subscribe to \
                     what that returns) first, or its answers never arrive",
                    name.unwrap_or("(classic)")
                ),
            });
        }
        let wanted = shadow::Target { thing, name };
        let (call, publish) = self.jobs.shadow(wanted, op, body, timeout_ms, now_ms)?;
        Ok(self.sent(Service::Jobs, call, "shadow", [publish]))
    }

    /// Reports every command's status change as [`SessionEvent::CommandRecord`] from now on:
    /// the filter to subscribe to now (`None` when it already does).
    pub fn watch_commands(&mut self) -> Option<&'static str> {
        (!std::mem::replace(&mut self.watching_commands, true)).then_some(EVENTS_FILTER)
    }

    /// Stops reporting command status changes: the filter to unsubscribe from (`None` when
    /// it did not watch them).
    pub fn unwatch_commands(&mut self) -> Option<&'static str> {
        std::mem::replace(&mut self.watching_commands, false).then_some(EVENTS_FILTER)
    }

    /// Reports every key made or deleted as [`SessionEvent::Keyspace`] from now on: the
    /// filter to subscribe to now (`None` when it already does).
    pub fn watch_keyspace(&mut self) -> Option<&'static str> {
        (!std::mem::replace(&mut self.watching_keyspace, true)).then_some(topics::KEYSPACE_FILTER)
    }

    /// Stops reporting keyspace events: the filter to unsubscribe from (`None` when it did
    /// not watch them).
    pub fn unwatch_keyspace(&mut self) -> Option<&'static str> {
        std::mem::replace(&mut self.watching_keyspace, false).then_some(topics::KEYSPACE_FILTER)
    }

    /// Calls waiting for an answer (lease acquisitions included).
    pub fn in_flight(&self) -> usize {
        self.calls.len() + self.leases.iter().filter(|l| !l.is_held()).count()
    }

    // ---- calls ----

    /// Starts a state store call.
    pub fn call(
        &mut self,
        request: &Request,
        options: &CallOptions,
        now_ms: u64,
    ) -> Result<CallId, ClientError> {
        let (call, publish) = self.store.call(request, options, now_ms)?;
        Ok(self.sent(Service::Store, call, request.command().as_str(), [publish]))
    }

    /// Starts observing `key`: the call completes once registered; changes come as
    /// [`SessionEvent::Changed`], across reconnects.
    pub fn observe(&mut self, key: Bytes, now_ms: u64) -> Result<CallId, ClientError> {
        let (call, publishes) = self.store.observe(key.clone(), now_ms)?;
        if !self.observed.contains(&key) {
            self.observed.push(key);
        }
        Ok(self.sent(Service::Store, call, "KEYNOTIFY", publishes))
    }

    /// Stops observing `key`. (A lease waiting on the key then retries on its timer only.)
    pub fn unobserve(&mut self, key: Bytes, now_ms: u64) -> Result<CallId, ClientError> {
        let (call, publish) = self.store.unobserve(key.clone(), now_ms)?;
        self.observed.retain(|k| *k != key);
        Ok(self.sent(Service::Store, call, "KEYNOTIFY", [publish]))
    }

    /// Takes the lease on `key` for `ttl_ms` (at least 1), with this client's id as holder,
    /// waiting up to `wait_ms` for its holder to release it or let it lapse (`Some(0)`: one
    /// try; `None`: until held — leader election). The call completes with
    /// [`Completion::Lease`]; a held lease is renewed a third of its ttl after each claim's
    /// answer until [`Session::release_lease`], or [`SessionEvent::LeaseLost`]. The call's
    /// id is the lease's.
    pub fn lease(
        &mut self,
        key: Bytes,
        ttl_ms: u64,
        wait_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<CallId, ClientError> {
        self.now_ms = now_ms;
        let holder = Bytes::copy_from_slice(self.client_id().as_bytes());
        let terms = LeaseTerms::new(key, holder, ttl_ms.max(1))
            .ok_or(ClientError::Malformed("a lease needs a ttl".into()))?;
        let id = self.next_id();
        self.leases.push(Lease::new(id, terms, wait_ms, now_ms));
        if let Err(e) = self.claim(id, now_ms) {
            self.leases.retain(|l| l.id != id);
            return Err(e);
        }
        Ok(id)
    }

    /// Stops renewing lease `lease` (or acquiring it) without releasing it: a held one lapses
    /// after its ttl. Nothing is reported.
    pub fn forget_lease(&mut self, lease: CallId) {
        if let Some(i) = self.leases.iter().position(|l| l.id == lease) {
            let forgotten = self.leases.remove(i);
            let now_ms = self.now_ms;
            self.stop_observing(lease, &forgotten.terms.key, forgotten.observing, now_ms);
        }
    }

    /// The fencing token of held lease `lease` (`None` when it is not held).
    pub fn lease_token(&self, lease: CallId) -> Option<&Hlc> {
        self.leases
            .iter()
            .find(|l| l.id == lease)
            .and_then(Lease::token)
    }

    /// Releases held lease `lease` (VDEL: only if this client still holds the key); it is no
    /// longer renewed. Completes with [`Completion::Released`]: `false` when it was no longer
    /// held (lost, released, or never acquired).
    pub fn release_lease(&mut self, lease: CallId, now_ms: u64) -> Result<CallId, ClientError> {
        self.now_ms = now_ms;
        let Some(i) = self
            .leases
            .iter()
            .position(|l| l.id == lease && l.is_held())
        else {
            let call = self.next_id();
            self.events.push_back(SessionEvent::Completed {
                call,
                op: "releaseLease",
                result: Ok(Completion::Released(false)),
            });
            return Ok(call);
        };
        let held = self.leases.remove(i);
        self.stop_observing(lease, &held.terms.key, held.observing, now_ms);
        let (call, publish) =
            self.store
                .call(&held.terms.release(), &CallOptions::default(), now_ms)?;
        Ok(self.sent(Service::Store, call, "releaseLease", [publish]))
    }

    /// Starts a jobs operator call (`timeout_ms`: `None` for the session's default).
    pub fn jobs_operate(
        &mut self,
        request: &OperatorRequest,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> CallId {
        let (call, publish) = self.jobs.operate(request, timeout_ms, now_ms);
        self.sent(Service::Jobs, call, "jobs", [publish])
    }

    /// Starts a jobs operator call given as its JSON (`{"op": ..., ...}`), sent as it is (see
    /// [`JobsClient::operate_json`]).
    pub fn jobs_operate_json(
        &mut self,
        request: &serde_json::Value,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> CallId {
        let (call, publish) = self.jobs.operate_json(request, timeout_ms, now_ms);
        self.sent(Service::Jobs, call, "jobs", [publish])
    }

    /// Starts a jobs device call as `thing`, which it must act as ([`Session::act_as`]):
    /// without the thing's subscriptions the reply would never arrive.
    pub fn jobs_device(
        &mut self,
        thing: &str,
        request: &DeviceRequest,
        timeout_ms: Option<u64>,
        now_ms: u64,
    ) -> Result<CallId, ClientError> {
        if !self.acts_as(thing) {
            JobsClient::check_thing(thing)?;
            return Err(ClientError::Jobs {
                code: "InvalidRequest".into(),
                message: format!(
                    "not acting as thing {thing:?}: act as it (and subscribe to what that \
                     returns) first, or its replies never arrive"
                ),
                execution_state: None,
            });
        }
        let (call, publish) = self.jobs.device(thing, request, timeout_ms, now_ms)?;
        Ok(self.sent(Service::Jobs, call, "jobs", [publish]))
    }

    /// Asks the command service to send a command.
    pub fn command(&mut self, request: &CommandRequest, now_ms: u64) -> CallId {
        let (call, publish) = self.commands.invoke(request, now_ms);
        self.sent(Service::Commands, call, "command", [publish])
    }

    /// Asks for command `id`'s status record.
    pub fn command_status(&mut self, id: &str, timeout_ms: u64, now_ms: u64) -> CallId {
        let (call, publish) = self.commands.status(id, timeout_ms, now_ms);
        self.sent(Service::Commands, call, "commandStatus", [publish])
    }

    /// A stored-commands call (create, get, list, delete; see
    /// [`crate::commands::definitions`]): its answer is [`Completion::CommandDefinitions`].
    pub fn command_definitions(
        &mut self,
        request: &DefinitionsRequest,
        timeout_ms: u64,
        now_ms: u64,
    ) -> CallId {
        let (call, publish) = self.commands.definitions(request, timeout_ms, now_ms);
        self.sent(Service::Commands, call, "commandDefinitions", [publish])
    }

    /// [`Session::command_definitions`] given the request as its JSON, sent as it is (the
    /// service checks it): for bindings that take the wire's JSON.
    pub fn command_definitions_json(
        &mut self,
        request: &serde_json::Value,
        timeout_ms: u64,
        now_ms: u64,
    ) -> CallId {
        let (call, publish) = self.commands.definitions_json(request, timeout_ms, now_ms);
        self.sent(Service::Commands, call, "commandDefinitions", [publish])
    }

    // ---- what happened ----

    /// A message arrived on one of the subscriptions. Messages for nobody (a late answer,
    /// another client's reply) change nothing.
    pub fn handle(&mut self, publish: &Publish, now_ms: u64) {
        self.now_ms = now_ms;
        if let Some(event) = self.store.handle(publish, now_ms) {
            self.store_event(event);
        } else if let Some(event) = self.jobs.handle(publish) {
            self.jobs_event(event);
        } else if let Some(event) = self.commands.handle(publish) {
            self.commands_event(event);
        } else if self.watching_commands
            && publish.topic.starts_with(EVENTS_PREFIX)
            && let Ok(record) = Record::from_json(&publish.payload)
        {
            self.events.push_back(SessionEvent::CommandRecord(record));
        } else if self.watching_keyspace {
            let created = match publish.topic.as_str() {
                topics::KEYSPACE_CREATED => Some(true),
                topics::KEYSPACE_DELETED => Some(false),
                _ => None,
            };
            if let Some(created) = created {
                let key = publish.payload.clone();
                self.events
                    .push_back(SessionEvent::Keyspace { key, created });
            }
        }
        self.own_publishes();
    }

    /// Fails the calls whose timeout has passed, and renews what needs renewing.
    pub fn expire(&mut self, now_ms: u64) {
        self.now_ms = now_ms;
        let ids: Vec<CallId> = self.leases.iter().map(|l| l.id).collect();
        for id in ids {
            let step = match self.leases.iter().find(|l| l.id == id) {
                Some(lease) => lease.expire(now_ms),
                None => continue,
            };
            self.lease_step(id, step, now_ms);
        }
        let store = self.store.expire(now_ms);
        let jobs = self.jobs.expire(now_ms);
        let commands = self.commands.expire(now_ms);
        self.route(store, jobs, commands);
        self.own_publishes();
    }

    /// When to call [`Session::expire`] next (`None`: nothing waits).
    pub fn next_deadline(&self) -> Option<u64> {
        [
            self.store.next_deadline(),
            self.jobs.next_deadline(),
            self.commands.next_deadline(),
            self.leases.iter().filter_map(Lease::deadline).min(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The connection dropped: every call in flight fails with [`ClientError::Disconnected`].
    /// Observations stay: [`Session::resume`] takes them up again.
    pub fn connection_lost(&mut self) {
        self.connection_failed(ClientError::Disconnected);
    }

    /// The connection dropped for a known reason (the broker's DISCONNECT, a protocol
    /// violation): every call in flight fails with `error`.
    pub fn connection_failed(&mut self, error: ClientError) {
        let store = self.store.connection_failed(error.clone());
        let jobs = self.jobs.connection_failed(error.clone());
        let commands = self.commands.connection_failed(error);
        self.route(store, jobs, commands);
    }

    /// Connected and subscribed again: registers every observed key again and reads it back,
    /// so that a change missed while away arrives as a synthetic [`SessionEvent::Changed`].
    pub fn resume(&mut self, now_ms: u64) -> Result<(), ClientError> {
        self.now_ms = now_ms;
        let publishes = self.store.resume(now_ms)?;
        self.send_own(publishes);
        Ok(())
    }

    /// The broker refused a publish of call `call` (a PUBACK reason code `code` of 0x80 or
    /// more): the call fails with [`ClientError::PublishRefused`]. A call no longer in flight
    /// changes nothing.
    pub fn publish_refused(&mut self, call: CallId, code: u8) {
        let Some(&(service, inner)) = self
            .calls
            .iter()
            .find(|(_, (id, _))| *id == call)
            .map(|(key, _)| key)
        else {
            return;
        };
        match service {
            Service::Store => {
                if let Some(event) = self.store.publish_refused(inner, code) {
                    self.store_event(event);
                }
            }
            Service::Jobs => {
                if let Some(event) = self.jobs.publish_refused(inner, code) {
                    self.jobs_event(event);
                }
            }
            Service::Commands => {
                if let Some(event) = self.commands.publish_refused(inner, code) {
                    self.commands_event(event);
                }
            }
        }
    }

    /// The next publish to send, in order.
    pub fn poll_publish(&mut self) -> Option<Outgoing> {
        self.outgoing.pop_front()
    }

    /// The next event, in order.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    // ---- routing ----

    /// Gives a client's new call its session id and queues its publishes.
    fn sent(
        &mut self,
        service: Service,
        inner: CallId,
        op: &'static str,
        publishes: impl IntoIterator<Item = Publish>,
    ) -> CallId {
        let call = self.next_id();
        self.calls.insert((service, inner), (call, op));
        self.outgoing
            .extend(publishes.into_iter().map(|publish| Outgoing {
                publish,
                call: Some(call),
            }));
        call
    }

    fn next_id(&mut self) -> CallId {
        self.next_call += 1;
        CallId(self.next_call)
    }

    /// Sends a publish of the session's own.
    fn send_own(&mut self, publishes: impl IntoIterator<Item = Publish>) {
        self.outgoing
            .extend(publishes.into_iter().map(|publish| Outgoing {
                publish,
                call: None,
            }));
    }

    // ---- leases ----

    /// Sends lease `id`'s claim (to take it, or to renew it).
    fn claim(&mut self, id: CallId, now_ms: u64) -> Result<(), ClientError> {
        let Some(lease) = self.leases.iter_mut().find(|l| l.id == id) else {
            return Ok(());
        };
        let (call, publish) =
            self.store
                .call(&lease.terms.claim(), &CallOptions::default(), now_ms)?;
        lease.claiming(call);
        self.internal.insert(call, Some((id, now_ms)));
        self.send_own([publish]);
        Ok(())
    }

    /// Carries out what lease `id`'s state machine decided.
    fn lease_step(&mut self, id: CallId, step: Step, now_ms: u64) {
        let completed = |result| SessionEvent::Completed {
            call: id,
            op: "lease",
            result,
        };
        match step {
            Step::Quiet => {}
            Step::Claim => {
                if let Err(e) = self.claim(id, now_ms) {
                    match self.leases.iter().find(|l| l.id == id).map(Lease::is_held) {
                        // A renewal that cannot be sent: tried again, until it lapses.
                        Some(true) => {}
                        _ => self.end_lease(id, Some(completed(Err(e))), now_ms),
                    }
                }
            }
            Step::Wait => {
                if let Some(i) = self.leases.iter().position(|l| l.id == id) {
                    self.start_observing(i, now_ms);
                }
            }
            Step::Acquired(Some(token)) => {
                if let Some(lease) = self.leases.iter_mut().find(|l| l.id == id) {
                    let (key, observing) = (lease.terms.key.clone(), lease.observing);
                    lease.observing = false;
                    self.stop_observing(id, &key, observing, now_ms);
                }
                self.events
                    .push_back(completed(Ok(Completion::Lease(Some(token)))));
            }
            Step::Acquired(None) => {
                self.end_lease(id, Some(completed(Ok(Completion::Lease(None)))), now_ms);
            }
            Step::Failed(e) => self.end_lease(id, Some(completed(Err(e))), now_ms),
            Step::Renewed(version) => {
                self.events
                    .push_back(SessionEvent::LeaseRenewed { lease: id, version });
            }
            Step::Lost => {
                if let Some(i) = self.leases.iter().position(|l| l.id == id) {
                    let key = self.leases.remove(i).terms.key;
                    self.events
                        .push_back(SessionEvent::LeaseLost { lease: id, key });
                }
            }
        }
    }

    /// Forgets lease `id` (no longer observing its key), reporting `event`.
    fn end_lease(&mut self, id: CallId, event: Option<SessionEvent>, now_ms: u64) {
        if let Some(i) = self.leases.iter().position(|l| l.id == id) {
            let lease = self.leases.remove(i);
            self.stop_observing(id, &lease.terms.key, lease.observing, now_ms);
        }
        self.events.extend(event);
    }

    /// Lease `i` observes its key for the holder's deletion (one registration per key,
    /// shared with the caller's own observation).
    fn start_observing(&mut self, i: usize, now_ms: u64) {
        if self.leases[i].observing {
            return;
        }
        self.leases[i].observing = true;
        let key = self.leases[i].terms.key.clone();
        let shared = self.observed.contains(&key)
            || self
                .leases
                .iter()
                .enumerate()
                .any(|(j, l)| j != i && l.observing && l.terms.key == key);
        // Without the observation it still retries on its timer.
        if !shared && let Ok((call, publishes)) = self.store.observe(key, now_ms) {
            self.internal.insert(call, None);
            self.send_own(publishes);
        }
    }

    /// Lease `id` no longer observes `key` (`observing`: whether it did): unregisters, unless
    /// the caller or another lease observes it.
    fn stop_observing(&mut self, id: CallId, key: &Bytes, observing: bool, now_ms: u64) {
        if !observing
            || self.observed.contains(key)
            || self
                .leases
                .iter()
                .any(|l| l.id != id && l.observing && l.terms.key == *key)
        {
            return;
        }
        if let Ok((call, publish)) = self.store.unobserve(key.clone(), now_ms) {
            self.internal.insert(call, None);
            self.send_own([publish]);
        }
    }

    /// What the state store client decided to send on its own.
    fn own_publishes(&mut self) {
        let own = self.store.take_publishes();
        self.send_own(own);
    }

    /// A client's call finished: its completion under the session's id. Clients complete
    /// each call once, so the entry always exists; an unknown one is dropped.
    fn finished(
        &mut self,
        service: Service,
        inner: CallId,
        result: Result<Completion, ClientError>,
    ) {
        if let Some((call, op)) = self.calls.remove(&(service, inner)) {
            let result = match (op, result) {
                ("releaseLease", Ok(Completion::Store(answer))) => {
                    Ok(Completion::Released(answer.deleted() == Deleted::Deleted))
                }
                (_, result) => result,
            };
            self.events
                .push_back(SessionEvent::Completed { call, op, result });
        }
    }

    /// The events of all three clients, in that order.
    fn route(&mut self, store: Vec<Event>, jobs: Vec<JobsEvent>, commands: Vec<CommandsEvent>) {
        for event in store {
            self.store_event(event);
        }
        for event in jobs {
            self.jobs_event(event);
        }
        for event in commands {
            self.commands_event(event);
        }
    }

    fn store_event(&mut self, event: Event) {
        let now_ms = self.now_ms;
        match event {
            Event::Completed { call, result } => match self.internal.remove(&call) {
                Some(Some((lease, sent_ms))) => {
                    let step = match self.leases.iter_mut().find(|l| l.id == lease) {
                        Some(l) if l.waits_for(call) => l.answered(result, sent_ms, now_ms),
                        _ => return, // a lease since lost or released
                    };
                    self.lease_step(lease, step, now_ms);
                }
                Some(None) => {} // an observation for a lease: acknowledged
                None => self.finished(Service::Store, call, result.map(Completion::Store)),
            },
            Event::Changed {
                key,
                change,
                version,
                synthetic,
                gap,
            } => {
                if matches!(change, Notification::Delete) {
                    let waiting: Vec<CallId> = self
                        .leases
                        .iter()
                        .filter(|l| l.terms.key == key && l.key_deleted() == Step::Claim)
                        .map(|l| l.id)
                        .collect();
                    for lease in waiting {
                        self.lease_step(lease, Step::Claim, now_ms);
                    }
                }
                if self.observed.contains(&key) {
                    self.events.push_back(SessionEvent::Changed {
                        key,
                        change,
                        version,
                        synthetic,
                        gap,
                    });
                }
            }
        }
    }

    fn jobs_event(&mut self, event: JobsEvent) {
        match event {
            JobsEvent::Completed { call, result } => {
                self.finished(Service::Jobs, call, result.map(Completion::Jobs));
            }
            // Only for the things it acts as: a wider subscription is not an invitation.
            JobsEvent::Notification(notification) => {
                let thing = match &notification {
                    JobNotification::Notify { thing, .. } => thing,
                    JobNotification::NotifyNext { thing, .. } => thing,
                };
                if self.acts_as(thing) {
                    self.events.push_back(SessionEvent::Jobs(notification));
                }
            }
            JobsEvent::Shadow(notification) => {
                if self.uses_shadow(&notification.thing, notification.name.as_deref()) {
                    self.events.push_back(SessionEvent::Shadow(notification));
                }
            }
        }
    }

    fn commands_event(&mut self, event: CommandsEvent) {
        match event {
            CommandsEvent::Invoked { call, result } => {
                self.finished(Service::Commands, call, result.map(Completion::Command));
            }
            CommandsEvent::Status { call, result } => {
                self.finished(
                    Service::Commands,
                    call,
                    result.map(Completion::CommandStatus),
                );
            }
            CommandsEvent::Definitions { call, result } => {
                self.finished(
                    Service::Commands,
                    call,
                    result.map(Completion::CommandDefinitions),
                );
            }
        }
    }
}

/// A shadow's target from a session's record of it.
fn target<'a>(thing: &'a str, name: &'a Option<String>) -> shadow::Target<'a> {
    shadow::Target {
        thing,
        name: name.as_deref(),
    }
}
