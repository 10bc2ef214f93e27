//! The command service as a state machine: callers' requests (`mqstore/commands/v1/…`) and
//! devices' answers in, commands, answers to callers, events and acknowledgements out, and the
//! timeouts of commands at [`Service::next_deadline`]. The server node ([`super::Node`]) runs
//! it; a host only moves messages and time.
//!
//! Its registry is either in the service ([`Service::new`]: memory, one node) or reached by
//! round trips ([`Service::remote`]: Redis, shared by many nodes). Then every registry method
//! the service needs is a [`RegistryCall`] the host takes from [`Service::poll_call`], runs
//! (many at once, off its loop) and hands back to [`Service::answered`]; the service goes on
//! from there. A settled record another node read the answer of comes in through
//! [`Service::forwarded`]. Both registries run the same code: the memory one answers each call
//! at once.
//!
//! Modes: `await` answers the caller when the command is settled or timed out; `detached`
//! answers at once with the SENT record (the answer goes to the record); `one-way` answers
//! DELIVERED once the broker took the command, which the host reports
//! ([`Service::acknowledged`], for the publish that carries a [`Receipt`]).
//!
//! What the service did, for the host's counters and logs, is in [`Service::poll_seen`].

use std::collections::{BTreeSet, HashMap, VecDeque};

use super::{Out, Receipt, To};
use crate::commands::definitions::{
    DEFINITIONS_TOPIC, Definition, DefinitionsAnswer, DefinitionsRequest,
};
use crate::commands::wire::{self, Refusal};
use crate::commands::{
    Acknowledgement, CommandError, CommandRequest, Matched, Mode, Profile, Profiles, Record,
    Registry, RegistryAnswer, RegistryCall, Sender, Status, aws_event, is_reserved_topic,
};
use crate::envelope::Publish;

/// Settings of a [`Service`].
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The node's name in records (and, on a shared registry, where answers are forwarded).
    pub node_id: String,
    /// The client id MQTT 5 devices answer to (`clients/{client_id}/…`): the service reads
    /// every answer published there.
    pub client_id: String,
    /// How commands go out and answers are matched, by profile name.
    pub profiles: Profiles,
    /// Publish every status change on `mqstore/commands/v1/events/{id}`.
    pub events: bool,
    /// 16 random bytes per command (its id), from the host's source of randomness.
    pub random_id: fn() -> [u8; 16],
}

/// What the service did, for the host's counters and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Seen {
    /// A command went out to a device.
    Sent,
    /// A caller's request was refused, with this answer.
    Refused(Refusal),
    /// A request that names no response topic or correlation data: dropped.
    Unanswerable,
    /// A device's answer that cannot be read (refused to the device where its profile
    /// acknowledges).
    Malformed,
    /// A device's answer nobody waits for (an unknown id, or forgotten).
    Unknown,
    /// A device's answer matched a command: how, and the status the command has now (an
    /// uncorrelated answer settles every command waiting on its topic: one each).
    Matched(Matched, Status),
    /// A command had no answer within its timeout (its waiting caller was told so).
    TimedOut(String),
    /// A settled record went to the node whose caller waits for it.
    Forwarded,
    /// The node whose caller waited for command `id` is gone: its record says so.
    Orphaned {
        /// The command.
        id: String,
        /// The node that sent it.
        node: String,
    },
    /// The registry failed: what was lost, and why.
    Failed(String),
}

/// Why a caller's request was not served: answered over MQTT as a [`Refusal`] (its `__stat`
/// and `__stMsg`), to the host's own calls ([`Service::invoke`], [`Service::status`]) as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Declined {
    /// The request is wrong (unknown profile, bad timeout, topic or payload; a stored command
    /// that does not exist): nothing was sent.
    Command(CommandError),
    /// No command with this id is known (never sent, or forgotten).
    NotFound(String),
    /// The registry failed (nothing was sent, or the status could not be read).
    Unavailable(String),
    /// The broker refused a one-way command's publish (its PUBACK reason code).
    NotDelivered(u8),
    /// The connection dropped before the broker acknowledged a one-way command.
    Disconnected,
    /// Refused as the service's wire API says (a bad request, a stored command's id taken).
    Refused(Refusal),
}

impl Declined {
    /// The answer over MQTT.
    pub fn refusal(&self) -> Refusal {
        let unavailable = |message| Refusal {
            status: 503,
            message,
        };
        match self {
            Declined::Command(e) => Refusal::of_command(e),
            Declined::NotFound(id) => Refusal::not_found(id),
            Declined::Unavailable(why) => {
                unavailable(format!("the command registry is unavailable: {why}"))
            }
            Declined::NotDelivered(code) => unavailable(format!(
                "the broker refused the command (PUBACK reason code 0x{code:02X})"
            )),
            Declined::Disconnected => unavailable(
                "the connection dropped before the broker acknowledged the command".into(),
            ),
            Declined::Refused(refusal) => refusal.clone(),
        }
    }
}

/// What a caller is told when its command went out while it was recorded, and the record
/// then failed or was refused: the outcome is unknown, as a one-way command cut at its PUBACK.
const SENT_WHILE_RECORDED: &str =
    "; the command was sent while it was recorded: the device may act on it";

/// Who waits for an answer.
#[derive(Debug)]
enum Caller {
    /// A caller over MQTT, answered on its request's response topic (the payload not kept).
    Mqtt {
        request: Publish,
        sender: Option<String>,
    },
    /// The host itself, by the token it gave ([`Service::poll_answer`]).
    Host(u64),
}

impl Caller {
    fn of(request: Publish, sender: Option<&str>) -> Self {
        Caller::Mqtt {
            request: Publish {
                payload: bytes::Bytes::new(),
                ..request
            },
            sender: sender.map(str::to_owned),
        }
    }
}

/// What the service does with a [`RegistryCall`]'s answer.
#[derive(Debug)]
enum Then {
    /// A stored command's definition was read: start the command.
    Start {
        request: CommandRequest,
        caller: Caller,
    },
    /// The command is recorded: publish it (`None`: published while it was recorded, see
    /// [`Service::registering`]).
    Registered {
        record: Record,
        publish: Option<Publish>,
        mode: Mode,
        caller: Caller,
    },
    /// A device's answer was applied: acknowledge it, settle what it matched.
    Answered {
        update: Publish,
        direct: bool,
        id: String,
    },
    /// A settled record was handed to its node.
    Forwarded { id: String, node: String },
    /// Publish the event of the record that comes back.
    Event,
    /// The broker took a one-way command: its caller hears DELIVERED.
    Delivered { caller: Caller, id: String },
    /// A command's deadline passed.
    TimedOut { id: String },
    /// Answer the caller with the record (`status`: a status request's JSON form).
    Reply {
        caller: Caller,
        id: String,
        status: bool,
    },
    /// A stored command was created (or its id was taken).
    Defined { caller: Caller, command: Definition },
    /// A stored command was read.
    Definition { caller: Caller, id: String },
    /// The stored commands were listed.
    Listed { caller: Caller },
    /// A stored command was deleted (or there was none).
    Undefined { caller: Caller, id: String },
}

impl Then {
    /// The caller this step answers, if one waits on it.
    fn into_caller(self) -> Option<Caller> {
        match self {
            Then::Start { caller, .. }
            | Then::Registered { caller, .. }
            | Then::Delivered { caller, .. }
            | Then::Reply { caller, .. }
            | Then::Defined { caller, .. }
            | Then::Definition { caller, .. }
            | Then::Listed { caller }
            | Then::Undefined { caller, .. } => Some(caller),
            Then::Answered { .. }
            | Then::Forwarded { .. }
            | Then::Event
            | Then::TimedOut { .. } => None,
        }
    }
}

/// A [`RegistryCall`] for the host to run, and what to answer it with
/// ([`Service::answered`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryWork {
    /// Hand this back with the answer.
    pub token: u64,
    /// The service's clock when it asked (the time the registry records).
    pub now_ms: u64,
    /// What to run.
    pub call: RegistryCall,
}

/// The command service: see the module's documentation.
#[derive(Debug)]
pub struct Service {
    config: ServiceConfig,
    /// `clients/{client_id}/`: where MQTT 5 devices answer.
    direct_prefix: String,
    /// The registry, when it is this service's own (memory); `None`: the host runs the calls.
    registry: Option<Registry>,
    /// Calls for the host to run, in order.
    calls: VecDeque<RegistryWork>,
    /// What to do with each call's answer, by token.
    waiting: HashMap<u64, Then>,
    next_token: u64,
    /// Callers waiting for an answer (await mode) or for the broker (one-way), by command id.
    callers: HashMap<String, Caller>,
    /// When each command waiting for its answer times out.
    deadlines: BTreeSet<(u64, String)>,
    /// Direct commands published while a remote registry records them, by id, with the
    /// answers that came back before the record was written (applied once it is).
    registering: HashMap<String, Vec<Publish>>,
    output: VecDeque<Out>,
    /// Answers to the host's own calls, by token.
    answers: VecDeque<(u64, Result<Record, Declined>)>,
    seen: VecDeque<Seen>,
    /// Definitions created or deleted since the host last took them (see
    /// [`Service::take_definition_changes`]; a memory registry's only).
    definition_changes: Vec<(String, Option<Definition>)>,
}

impl Service {
    /// A service with its registry in memory (empty).
    pub fn new(config: ServiceConfig) -> Self {
        Self::with_registry(config, Some(Registry::new()))
    }

    /// A service whose registry the host reaches by round trips ([`Service::poll_call`]).
    pub fn remote(config: ServiceConfig) -> Self {
        Self::with_registry(config, None)
    }

    fn with_registry(config: ServiceConfig, registry: Option<Registry>) -> Self {
        Self {
            direct_prefix: format!("clients/{}/", config.client_id),
            config,
            registry,
            calls: VecDeque::new(),
            waiting: HashMap::new(),
            next_token: 0,
            callers: HashMap::new(),
            deadlines: BTreeSet::new(),
            registering: HashMap::new(),
            output: VecDeque::new(),
            answers: VecDeque::new(),
            seen: VecDeque::new(),
            definition_changes: Vec::new(),
        }
    }

    /// Stored commands kept from before (a data directory's), defined again at start (a
    /// memory registry's; a remote registry keeps its own).
    pub fn restore_definitions(&mut self, definitions: impl IntoIterator<Item = Definition>) {
        if let Some(registry) = &mut self.registry {
            for definition in definitions {
                registry.define(definition);
            }
        }
    }

    /// The stored commands created (`Some`) or deleted (`None`) since the last call, by id,
    /// in order: what a host that keeps them (a data directory) writes.
    pub fn take_definition_changes(&mut self) -> Vec<(String, Option<Definition>)> {
        std::mem::take(&mut self.definition_changes)
    }

    /// Whether a message on `topic` is the service's: a caller's request, or a device's
    /// answer (on the direct topics, or a topic profile's answer topic).
    pub fn is_for(&self, topic: &str) -> bool {
        is_request(topic)
            || topic.starts_with(&self.direct_prefix)
            || self.config.profiles.for_answer(topic).is_some()
    }

    /// Records kept in a memory registry (settled ones for a while, for status requests).
    pub fn records(&self) -> usize {
        self.registry.as_ref().map_or(0, Registry::len)
    }

    /// Registry calls given to the host and not answered yet.
    pub fn calls_in_flight(&self) -> usize {
        self.waiting.len()
    }

    /// Handles a caller's request or a device's answer (see [`Service::is_for`]); what it
    /// publishes is in [`Service::poll_output`], what it did in [`Service::poll_seen`].
    pub fn handle(&mut self, publish: Publish, sender: Option<&str>, now_ms: u64) {
        if is_request(&publish.topic) {
            return self.request(publish, sender, now_ms);
        }
        let direct = publish.topic.starts_with(&self.direct_prefix);
        self.answer(publish, direct, now_ms);
    }

    /// When the next command waiting for its answer times out, or a record is forgotten.
    pub fn next_deadline(&self) -> Option<u64> {
        let timeout = self.deadlines.first().map(|(at, _)| *at);
        let forget = self.registry.as_ref().and_then(Registry::next_forget);
        timeout.into_iter().chain(forget).min()
    }

    /// Times out the commands whose deadline passed (their waiting callers are answered
    /// TIMED_OUT, unless an answer came first) and forgets old records: how many timed out
    /// by the time it returns (a remote registry's are counted once it answered).
    pub fn on_deadline(&mut self, now_ms: u64) -> usize {
        let seen = self.seen.len();
        while let Some((at, _)) = self.deadlines.first()
            && *at <= now_ms
        {
            let Some((at, id)) = self.deadlines.pop_first() else {
                break;
            };
            let call = RegistryCall::TimeOut(id.clone());
            self.call(call, now_ms.max(at), Then::TimedOut { id });
        }
        if let Some(registry) = &mut self.registry {
            registry.forget(now_ms);
        }
        let timed_out = self.seen.range(seen..);
        timed_out.filter(|s| matches!(s, Seen::TimedOut(_))).count()
    }

    /// The broker took (reason code below 0x80) or refused the publish of a one-way command
    /// (`None`: the connection dropped before the broker said): its caller gets DELIVERED, or
    /// why not.
    pub fn acknowledged(&mut self, receipt: &Receipt, code: Option<u8>, now_ms: u64) {
        let Some(caller) = self.callers.remove(&receipt.0) else {
            return;
        };
        let declined = match code {
            Some(code) if code < 0x80 => {
                let (id, call) = (
                    receipt.0.clone(),
                    RegistryCall::Delivered(receipt.0.clone()),
                );
                return self.call(call, now_ms, Then::Delivered { caller, id });
            }
            Some(code) => Declined::NotDelivered(code),
            None => Declined::Disconnected,
        };
        self.refuse(caller, declined);
    }

    /// A settled record whose answer another node read, for a caller waiting here (on Redis,
    /// heard on this node's channel).
    pub fn forwarded(&mut self, mut record: Record) {
        // The set's key is owned: the id is lent to it and taken back, not copied.
        let key = (record.deadline_ms, std::mem::take(&mut record.id));
        self.deadlines.remove(&key);
        record.id = key.1;
        self.answer_caller(record);
    }

    /// Sends a command for the host itself (a service embedding the commands in its own
    /// process): its answer comes out of [`Service::poll_answer`] with `token` when its mode
    /// says (await: settled or timed out; one-way: the broker took it; detached: at once).
    pub fn invoke(&mut self, request: CommandRequest, token: u64, now_ms: u64) {
        self.command(request, Caller::Host(token), now_ms);
    }

    /// Reads command `id`'s record for the host itself ([`Service::poll_answer`]).
    pub fn status(&mut self, id: &str, token: u64, now_ms: u64) {
        let then = Then::Reply {
            caller: Caller::Host(token),
            id: id.to_owned(),
            status: true,
        };
        self.call(RegistryCall::Get(id.to_owned()), now_ms, then);
    }

    /// The next answer to the host's own calls ([`Service::invoke`], [`Service::status`]).
    pub fn poll_answer(&mut self) -> Option<(u64, Result<Record, Declined>)> {
        self.answers.pop_front()
    }

    /// Callers waiting for a command's answer or for the broker's acknowledgement.
    pub fn waiting(&self) -> usize {
        self.callers.len()
    }

    /// The next registry call for the host to run (a remote registry's).
    pub fn poll_call(&mut self) -> Option<RegistryWork> {
        self.calls.pop_front()
    }

    /// The answer to the call given with `token` ([`Service::poll_call`]); `now_ms`: the
    /// host's clock now.
    pub fn answered(&mut self, token: u64, answer: RegistryAnswer, now_ms: u64) {
        if let Some(then) = self.waiting.remove(&token) {
            self.resume(then, answer, now_ms);
        }
    }

    /// The next publish, in order.
    pub fn poll_output(&mut self) -> Option<Out> {
        self.output.pop_front()
    }

    /// What the service did next, in order.
    pub fn poll_seen(&mut self) -> Option<Seen> {
        self.seen.pop_front()
    }

    /// Runs `call` on the service's own registry and goes on at once, or gives it to the host.
    fn call(&mut self, call: RegistryCall, now_ms: u64, then: Then) {
        if let Some(registry) = &mut self.registry {
            let answer = registry.run(call, now_ms);
            return self.resume(then, answer, now_ms);
        }
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        self.waiting.insert(token, then);
        self.calls.push_back(RegistryWork {
            token,
            now_ms,
            call,
        });
    }

    /// Goes on from `then` with the registry's answer.
    fn resume(&mut self, then: Then, answer: RegistryAnswer, now_ms: u64) {
        use RegistryAnswer as A;
        match (then, answer) {
            (Then::Start { request, caller }, A::Definition(definition)) => {
                self.start(request, definition.as_ref(), caller, now_ms)
            }
            (
                Then::Registered {
                    record,
                    publish,
                    mode,
                    caller,
                },
                A::Registered(Ok(())),
            ) => {
                // Sent while it was recorded: the answers that came back meanwhile apply now.
                let early = match publish {
                    None => self.registering.remove(&record.id),
                    Some(_) => None,
                };
                self.send(record, publish, mode, caller);
                for answer in early.into_iter().flatten() {
                    self.answer(answer, true, now_ms);
                }
            }
            (
                Then::Registered {
                    caller,
                    record,
                    publish,
                    ..
                },
                A::Registered(Err(e)),
            ) => {
                if publish.is_some() {
                    return self.refuse(caller, Declined::Command(e));
                }
                let lost = self.not_recorded(&record.id);
                self.seen.push_back(Seen::Failed(format!(
                    "the command registry refused the record ({e}); lost: {lost}"
                )));
                // The caller hears the refusal, and that the command is out all the same.
                let mut refusal = Refusal::of_command(&e);
                refusal.message.push_str(SENT_WHILE_RECORDED);
                self.refuse(caller, Declined::Refused(refusal))
            }
            (Then::Answered { update, direct, id }, A::Matched(matched)) => {
                self.settle(&update, direct, &id, matched, now_ms)
            }
            (Then::Forwarded { id, node }, A::Done(heard)) => match heard {
                true => self.seen.push_back(Seen::Forwarded),
                false => {
                    self.call(RegistryCall::Orphan(id.clone()), now_ms, Then::Event);
                    self.seen.push_back(Seen::Orphaned { id, node });
                }
            },
            (Then::Event, A::Record(record)) => {
                if let Some(record) = record {
                    self.event(&record);
                }
            }
            (Then::Delivered { caller, .. }, A::Record(Some(record))) => {
                self.event(&record);
                self.reply_record(caller, record, false);
            }
            // Settled before the broker's acknowledgement came: the record as it is.
            (Then::Delivered { caller, id }, A::Record(None)) => {
                let call = RegistryCall::Get(id.clone());
                let then = Then::Reply {
                    caller,
                    id,
                    status: false,
                };
                self.call(call, now_ms, then);
            }
            (Then::TimedOut { id }, A::Record(record)) => match record {
                Some(record) => {
                    if record.status == Status::TimedOut {
                        self.seen.push_back(Seen::TimedOut(id));
                        self.event(&record);
                    }
                    self.answer_caller(record);
                }
                None => {
                    if let Some(caller) = self.callers.remove(&id) {
                        self.refuse(caller, Declined::NotFound(id));
                    }
                }
            },
            (Then::Reply { caller, status, .. }, A::Record(Some(record))) => {
                self.reply_record(caller, record, status)
            }
            (Then::Reply { caller, id, .. }, A::Record(None)) => {
                self.refuse(caller, Declined::NotFound(id))
            }
            (Then::Defined { caller, command }, A::Done(true)) => {
                let answer = DefinitionsAnswer::Command { command };
                self.reply_json(caller, &answer);
                if let (Some(_), DefinitionsAnswer::Command { command }) = (&self.registry, answer)
                {
                    let id = command.command_id.clone();
                    self.definition_changes.push((id, Some(command)));
                }
            }
            (Then::Defined { caller, command }, A::Done(false)) => self.refuse(
                caller,
                Declined::Refused(Refusal::taken(&command.command_id)),
            ),
            (Then::Definition { caller, .. }, A::Definition(Some(command))) => {
                self.reply_json(caller, &DefinitionsAnswer::Command { command })
            }
            (Then::Definition { caller, id }, A::Definition(None)) => {
                self.refuse(caller, Declined::Refused(Refusal::no_definition(&id)))
            }
            (Then::Listed { caller }, A::Definitions(commands)) => {
                self.reply_json(caller, &DefinitionsAnswer::Commands { commands })
            }
            (Then::Undefined { caller, id }, A::Done(deleted)) => {
                if deleted && self.registry.is_some() {
                    self.definition_changes.push((id, None));
                }
                self.reply_json(caller, &DefinitionsAnswer::Deleted { deleted })
            }
            (then, answer) => self.failed(then, answer),
        }
    }

    /// The registry failed (or answered what was not asked: a host's bug, handled the same).
    fn failed(&mut self, then: Then, answer: RegistryAnswer) {
        let mut why = match answer {
            RegistryAnswer::Failed(why) => why,
            other => format!("the registry answered {other:?}"),
        };
        let lost = match &then {
            Then::Answered { update, direct, .. } => {
                let ack = Acknowledgement::failed(&why);
                let reply = self
                    .profile(&update.topic, *direct)
                    .map(|p| p.acknowledge(update, &ack));
                self.push_all(reply.into_iter().flatten(), To::Subscribers);
                format!("an answer on {} (it is lost)", update.topic)
            }
            Then::Forwarded { id, node } => {
                format!("the answer to {id} for node {node} (it stays in the command's status)")
            }
            Then::TimedOut { id } => {
                if let Some(caller) = self.callers.remove(id) {
                    self.refuse(caller, Declined::Unavailable(why.clone()));
                }
                format!("the timeout of {id}")
            }
            Then::Event => "an event".into(),
            Then::Registered {
                record,
                publish: None,
                ..
            } => {
                why.push_str(SENT_WHILE_RECORDED);
                self.not_recorded(&record.id)
            }
            _ => "a caller's request".into(),
        };
        self.seen.push_back(Seen::Failed(format!(
            "the command registry failed: {why}; lost: {lost}"
        )));
        if let Some(caller) = then.into_caller() {
            self.refuse(caller, Declined::Unavailable(why.clone()));
        }
    }

    fn request(&mut self, publish: Publish, sender: Option<&str>, now_ms: u64) {
        if publish.properties.response_topic.is_none() {
            return self.seen.push_back(Seen::Unanswerable);
        }
        if publish.topic == DEFINITIONS_TOPIC {
            return self.definitions(publish, sender, now_ms);
        }
        if publish.topic == wire::STATUS_TOPIC {
            let id = String::from_utf8_lossy(&publish.payload).trim().to_owned();
            let caller = Caller::of(publish, sender);
            let call = RegistryCall::Get(id.clone());
            let then = Then::Reply {
                caller,
                id,
                status: true,
            };
            return self.call(call, now_ms, then);
        }
        let request = match wire::read_invoke(&publish) {
            None => return self.seen.push_back(Seen::Unanswerable),
            Some(Err(refusal)) => {
                return self.refuse(Caller::of(publish, sender), Declined::Refused(refusal));
            }
            Some(Ok(request)) => request,
        };
        self.command(request, Caller::of(publish, sender), now_ms);
    }

    /// A command for `caller`: a stored command's definition read first.
    fn command(&mut self, request: CommandRequest, caller: Caller, now_ms: u64) {
        match request.command.clone() {
            // A stored command: its payload, for the target the topic names.
            Some(id) => self.call(
                RegistryCall::Definition(id),
                now_ms,
                Then::Start { request, caller },
            ),
            None => self.start(request, None, caller, now_ms),
        }
    }

    /// Prepares a command in its profile's shape and records it; it goes out once recorded.
    fn start(
        &mut self,
        request: CommandRequest,
        definition: Option<&Definition>,
        caller: Caller,
        now_ms: u64,
    ) {
        let node = Sender {
            node: &self.config.node_id,
            client_id: &self.config.client_id,
        };
        let prepared = request.start_stored(definition).and_then(|request| {
            let profile = self.config.profiles.get(&request.profile)?;
            let prepared = profile.prepare(&request, node, (self.config.random_id)(), now_ms)?;
            Ok((request.mode, prepared))
        });
        let (mode, prepared) = match prepared {
            Ok(prepared) => prepared,
            Err(e) => return self.refuse(caller, Declined::Command(e)),
        };
        // Published with the node's rights: never where the node's own protocols speak, nor
        // where this service reads answers (a command there would settle others' commands).
        let topic = &prepared.publish.topic;
        if is_reserved_topic(topic) || self.is_for(topic) {
            let reserved = CommandError::ReservedTopic(topic.clone());
            return self.refuse(caller, Declined::Command(reserved));
        }
        // Recorded before it is published, so that any node can match a fast answer. A
        // command awaited here whose device answers here (MQTT 5 direct) goes out while a
        // remote registry records it: an answer that comes back first waits for the record,
        // and the command costs one round trip to the registry less before it is sent.
        let answers_here = mode == Mode::Await
            && self.registry.is_none()
            && (prepared.publish.properties.response_topic.as_deref())
                .is_some_and(|topic| topic.starts_with(&self.direct_prefix));
        let publish = match answers_here {
            true => {
                self.registering
                    .insert(prepared.record.id.clone(), Vec::new());
                self.push(prepared.publish, To::Subscribers);
                None
            }
            false => Some(prepared.publish),
        };
        let call = RegistryCall::Register(prepared.record.clone());
        let then = Then::Registered {
            record: prepared.record,
            publish,
            mode,
            caller,
        };
        self.call(call, now_ms, then);
    }

    /// Publishes a recorded command (unless it went out while it was recorded); the caller
    /// hears now (detached), at the broker's acknowledgement (one-way), or when the command
    /// ends (await).
    fn send(&mut self, record: Record, publish: Option<Publish>, mode: Mode, caller: Caller) {
        self.seen.push_back(Seen::Sent);
        let id = record.id.clone();
        match mode {
            // (Only awaited commands go out while they are recorded: a one-way one always
            // has its publish here, for its receipt.)
            Mode::OneWay => {
                self.callers.insert(id.clone(), caller);
                self.output.extend(publish.map(|publish| Out {
                    publish,
                    to: To::Subscribers,
                    receipt: Some(Receipt(id)),
                }));
            }
            Mode::Await => {
                self.callers.insert(id.clone(), caller);
                self.deadlines.insert((record.deadline_ms, id));
                self.push_all(publish, To::Subscribers);
            }
            Mode::Detached => {
                self.deadlines.insert((record.deadline_ms, id));
                self.push_all(publish, To::Subscribers);
                self.reply_record(caller, record.clone(), false);
            }
        }
        // After the command itself, as when it went out while it was recorded.
        self.event(&record);
    }

    /// A command that went out while it was recorded will not be: what is lost with it (its
    /// record, and the answers that came back meanwhile).
    fn not_recorded(&mut self, id: &str) -> String {
        let answers = self.registering.remove(id).map_or(0, |early| early.len());
        format!("the record of command {id}, sent to its device, and {answers} answer(s) to it")
    }

    /// The profile an answer on `topic` is read by.
    fn profile(&self, topic: &str, direct: bool) -> Option<&Profile> {
        match direct {
            true => Some(&Profile::Mqtt5),
            false => self.config.profiles.for_answer(topic).map(|(_, p)| p),
        }
    }

    /// A device's answer: read, then applied to the registry (see [`Service::settle`]).
    fn answer(&mut self, publish: Publish, direct: bool, now_ms: u64) {
        let Some(profile) = self.profile(&publish.topic, direct) else {
            return self.seen.push_back(Seen::Unknown);
        };
        let (key, answer) = match profile.read_answer(&publish) {
            Ok(read) => read,
            Err(unreadable) => {
                let ack = Acknowledgement::unreadable(unreadable);
                let reply = profile.acknowledge(&publish, &ack);
                self.push_all(reply, To::Subscribers);
                return self.seen.push_back(Seen::Malformed);
            }
        };
        let id = key.id.clone().unwrap_or_default();
        if direct && let Some(early) = self.registering.get_mut(&id) {
            return early.push(publish);
        }
        let then = Then::Answered {
            update: publish,
            direct,
            id,
        };
        self.call(RegistryCall::Answer(key, answer), now_ms, then);
    }

    /// What an answer matched: each command's event, the callers of those it settled
    /// answered (here, or on their node), the device's update acknowledged where its profile
    /// does.
    fn settle(
        &mut self,
        update: &Publish,
        direct: bool,
        id: &str,
        matched: Vec<(Matched, Record)>,
        now_ms: u64,
    ) {
        let ack = Acknowledgement::of(&matched, id);
        let ack_reply = self
            .profile(&update.topic, direct)
            .map(|p| p.acknowledge(update, &ack));
        if matched.is_empty() {
            self.seen.push_back(Seen::Unknown);
        }
        for (how, record) in matched {
            self.seen.push_back(Seen::Matched(how, record.status));
            if how != Matched::Duplicate {
                self.event(&record);
            }
            if how != Matched::Live || !record.is_final() {
                continue;
            }
            if record.node == self.config.node_id {
                self.forwarded(record);
            } else {
                let (id, node) = (record.id.clone(), record.node.clone());
                self.call(
                    RegistryCall::Forward(record),
                    now_ms,
                    Then::Forwarded { id, node },
                );
            }
        }
        self.push_all(ack_reply.into_iter().flatten(), To::Subscribers);
    }

    /// Answers the caller waiting for `record`'s command, if one does.
    fn answer_caller(&mut self, record: Record) {
        if let Some(caller) = self.callers.remove(&record.id) {
            self.reply_record(caller, record, false);
        }
    }

    /// A request on [`DEFINITIONS_TOPIC`].
    fn definitions(&mut self, publish: Publish, sender: Option<&str>, now_ms: u64) {
        let read = DefinitionsRequest::read(&publish.payload);
        let caller = Caller::of(publish, sender);
        let (call, then) = match read.map_err(Refusal::bad_request) {
            Err(refusal) => return self.refuse(caller, Declined::Refused(refusal)),
            Ok(DefinitionsRequest::Create { mut command }) => {
                if let Err(e) = command.check() {
                    return self.refuse(caller, Declined::Refused(Refusal::bad_request(e)));
                }
                command.created_ms = now_ms;
                (
                    RegistryCall::Define(command.clone()),
                    Then::Defined { caller, command },
                )
            }
            Ok(DefinitionsRequest::Get { command_id }) => (
                RegistryCall::Definition(command_id.clone()),
                Then::Definition {
                    caller,
                    id: command_id,
                },
            ),
            Ok(DefinitionsRequest::List) => (RegistryCall::Definitions, Then::Listed { caller }),
            Ok(DefinitionsRequest::Delete { command_id }) => (
                RegistryCall::Undefine(command_id.clone()),
                Then::Undefined {
                    caller,
                    id: command_id,
                },
            ),
        };
        self.call(call, now_ms, then);
    }

    /// Publishes a status change (QoS 0), if events are on: ours, and AWS IoT commands' own
    /// for an execution of a stored command.
    fn event(&mut self, record: &Record) {
        if self.config.events {
            let events = std::iter::once(wire::event(record)).chain(aws_event(record));
            for event in events {
                self.push(event, To::Subscribers);
            }
        }
    }

    fn reply_record(&mut self, caller: Caller, record: Record, status: bool) {
        match caller {
            Caller::Mqtt { request, sender } => {
                let reply = wire::reply_record(&request, &record, status);
                self.push(reply, To::Requester(sender));
            }
            Caller::Host(token) => self.answers.push_back((token, Ok(record))),
        }
    }

    /// Answers a definitions request (made over MQTT only: the host's own calls are commands
    /// and statuses).
    fn reply_json(&mut self, caller: Caller, answer: &DefinitionsAnswer) {
        if let Caller::Mqtt { request, sender } = caller {
            let reply = wire::reply_json(&request, answer);
            self.push(reply, To::Requester(sender));
        }
    }

    fn refuse(&mut self, caller: Caller, declined: Declined) {
        let refusal = declined.refusal();
        match caller {
            Caller::Mqtt { request, sender } => {
                let reply = wire::reply_refusal(&request, &refusal);
                self.push(reply, To::Requester(sender));
            }
            Caller::Host(token) => self.answers.push_back((token, Err(declined))),
        }
        self.seen.push_back(Seen::Refused(refusal));
    }

    fn push(&mut self, publish: Publish, to: To) {
        self.output.push_back(Out {
            publish,
            to,
            receipt: None,
        });
    }

    fn push_all(&mut self, publishes: impl IntoIterator<Item = Publish>, to: To) {
        for publish in publishes {
            self.push(publish, to.clone());
        }
    }
}

/// Whether `topic` is one of the service's request topics.
pub fn is_request(topic: &str) -> bool {
    topic == wire::INVOKE_TOPIC || topic == wire::STATUS_TOPIC || topic == DEFINITIONS_TOPIC
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Properties;
    use bytes::Bytes;

    const NOW: u64 = 1_700_000_000_000;

    thread_local!(static NEXT: std::cell::Cell<u8> = const { std::cell::Cell::new(0) });

    /// Ids 1, 2, 3… (per thread: tests run side by side).
    fn next_id() -> [u8; 16] {
        let n = NEXT.with(|next| {
            next.set(next.get() + 1);
            next.get()
        });
        [n; 16]
    }

    fn config(node: &str) -> ServiceConfig {
        ServiceConfig {
            node_id: node.into(),
            client_id: format!("{node}-commands"),
            profiles: Profiles::built_in(),
            events: true,
            random_id: next_id,
        }
    }

    fn publish(topic: &str, payload: &str, properties: Properties) -> Publish {
        Publish {
            topic: topic.into(),
            payload: Bytes::from(payload.to_owned()),
            qos: 1,
            properties,
        }
    }

    /// A caller's request on `topic` with these user properties.
    fn request(topic: &str, payload: &str, user: &[(&str, &str)]) -> Publish {
        let properties = Properties {
            response_topic: Some("caller/response".into()),
            correlation_data: Some(Bytes::from_static(b"c1")),
            user_properties: user
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Properties::default()
        };
        publish(topic, payload, properties)
    }

    /// Runs every call `service` asks for on `registry`, at once, until it asks no more.
    fn run_calls(service: &mut Service, registry: &mut Registry) {
        while let Some(work) = service.poll_call() {
            let answer = registry.run(work.call, work.now_ms);
            service.answered(work.token, answer, work.now_ms);
        }
    }

    fn drain(service: &mut Service) -> (Vec<Out>, Vec<Seen>) {
        let out = std::iter::from_fn(|| service.poll_output()).collect();
        let seen = std::iter::from_fn(|| service.poll_seen()).collect();
        (out, seen)
    }

    /// The status a reply to a caller carries (`__stat`) and its `status` property.
    fn reply_status(out: &Out) -> (Option<&str>, Option<&str>) {
        let props = &out.publish.properties;
        (props.user_property("__stat"), props.user_property("status"))
    }

    #[test]
    fn a_remote_registry_gives_what_the_memory_one_gives() {
        let define = r#"{"op":"create","command":{"commandId":"c","payload":{"content":"{}"}}}"#;
        let await_mqtt5 = [("topic", "dev/1/cmd"), ("timeoutMs", "1000")];
        let inputs: Vec<(u64, Publish)> = vec![
            (0, request(wire::INVOKE_TOPIC, "{}", &await_mqtt5)),
            (
                1,
                request(
                    wire::INVOKE_TOPIC,
                    "{}",
                    &[("topic", "dev/2/cmd"), ("mode", "oneway")],
                ),
            ),
            (
                2,
                request(
                    wire::INVOKE_TOPIC,
                    "{}",
                    &[("topic", "d/3"), ("profile", "nope")],
                ),
            ),
            (3, request(wire::STATUS_TOPIC, "no-such-id", &[])),
            (4, request(DEFINITIONS_TOPIC, define, &[])),
            (5, request(DEFINITIONS_TOPIC, define, &[])),
            (6, request(DEFINITIONS_TOPIC, r#"{"op":"list"}"#, &[])),
            (
                7,
                request(DEFINITIONS_TOPIC, r#"{"op":"delete","commandId":"c"}"#, &[]),
            ),
            (
                8,
                publish("clients/n-commands/dev/9", "{}", Properties::default()),
            ),
        ];
        let run = |remote: bool| {
            NEXT.with(|next| next.set(0));
            let (mut service, mut registry) = match remote {
                true => (Service::remote(config("n")), Registry::new()),
                false => (Service::new(config("n")), Registry::new()),
            };
            let mut all = Vec::new();
            let step = |service: &mut Service, registry: &mut Registry| {
                run_calls(service, registry);
                drain(service)
            };
            for (at, input) in inputs.clone() {
                service.handle(input, Some("caller"), NOW + at);
                all.push(step(&mut service, &mut registry));
            }
            // The one-way command's PUBACK, then the awaited one's timeout.
            let one_way = all[1].0.iter().find_map(|out| out.receipt.clone());
            service.acknowledged(&one_way.expect("a receipt"), Some(0), NOW + 10);
            all.push(step(&mut service, &mut registry));
            service.on_deadline(NOW + 2_000);
            all.push(step(&mut service, &mut registry));
            all
        };
        let (memory, remote) = (run(false), run(true));
        assert_eq!(memory, remote);
        // And it did what it says: sent, refused, created once, deleted, timed out.
        let seen: Vec<&Seen> = memory.iter().flat_map(|(_, seen)| seen).collect();
        assert_eq!(seen.iter().filter(|s| ***s == Seen::Sent).count(), 2);
        assert!(seen.iter().any(|s| matches!(s, Seen::TimedOut(_))));
        let statuses: Vec<_> = memory
            .iter()
            .flat_map(|(out, _)| out)
            .filter(|out| out.to != To::Subscribers)
            .map(reply_status)
            .collect();
        assert_eq!(
            statuses,
            [
                (Some("400"), None),              // unknown profile
                (Some("404"), None),              // no such id
                (Some("200"), None),              // created
                (Some("409"), None),              // taken
                (Some("200"), None),              // listed
                (Some("200"), None),              // deleted
                (Some("200"), Some("DELIVERED")), // the one-way command
                (Some("200"), Some("TIMED_OUT")), // the awaited one
            ]
        );
    }

    #[test]
    fn an_answer_another_node_reads_reaches_the_caller_or_is_recorded_orphaned() {
        for caller_node_there in [true, false] {
            let mut registry = Registry::new();
            let (mut a, mut b) = (Service::remote(config("a")), Service::remote(config("b")));
            let invoke = [("topic", "thing/product/SN1/services"), ("profile", "dji")];
            a.handle(
                request(wire::INVOKE_TOPIC, r#"{"method":"m"}"#, &invoke),
                Some("caller"),
                NOW,
            );
            run_calls(&mut a, &mut registry);
            let (sent, _) = drain(&mut a);
            let command = sent
                .iter()
                .find(|o| o.publish.topic == "thing/product/SN1/services");
            let command: serde_json::Value =
                serde_json::from_slice(&command.expect("the command").publish.payload).unwrap();
            // The device answers on its fixed topic; node b reads it.
            let reply = format!(r#"{{"tid":{},"data":{{"result":0}}}}"#, command["tid"]);
            b.handle(
                publish(
                    "thing/product/SN1/services_reply",
                    &reply,
                    Properties::default(),
                ),
                None,
                NOW + 5,
            );
            let work = b.poll_call().expect("the answer applied");
            let answer = registry.run(work.call, work.now_ms);
            b.answered(work.token, answer, NOW + 5);
            // b forwards the record to a, whose caller waits.
            let work = b.poll_call().expect("the record forwarded");
            let RegistryCall::Forward(record) = work.call else {
                panic!("{work:?}");
            };
            assert_eq!(
                (record.node.as_str(), record.status),
                ("a", Status::Succeeded)
            );
            if caller_node_there {
                a.forwarded(record);
                b.answered(work.token, RegistryAnswer::Done(true), NOW + 6);
                let (out, _) = drain(&mut a);
                let to_caller: Vec<_> = out.iter().filter(|o| o.to != To::Subscribers).collect();
                assert_eq!(to_caller.len(), 1);
                assert_eq!(reply_status(to_caller[0]), (Some("200"), Some("SUCCEEDED")));
                assert!(drain(&mut b).1.contains(&Seen::Forwarded));
                // Answered: its timeout asks the registry nothing.
                a.on_deadline(NOW + 60_000);
                assert_eq!(a.poll_call(), None);
            } else {
                b.answered(work.token, RegistryAnswer::Done(false), NOW + 6);
                run_calls(&mut b, &mut registry);
                let seen = drain(&mut b).1;
                assert!(
                    seen.iter()
                        .any(|s| matches!(s, Seen::Orphaned { node, .. } if node == "a")),
                    "{seen:?}"
                );
                let id = command["tid"].as_str().unwrap();
                assert!(registry.get(id).unwrap().orphaned);
            }
        }
    }

    #[test]
    fn a_registry_that_fails_answers_503_and_sends_nothing() {
        let mut service = Service::remote(config("n"));
        let invoke = [("topic", "dev/1/cmd"), ("mode", "oneway")];
        service.handle(
            request(wire::INVOKE_TOPIC, "{}", &invoke),
            Some("caller"),
            NOW,
        );
        let work = service.poll_call().expect("the command recorded first");
        assert!(matches!(work.call, RegistryCall::Register(_)));
        assert_eq!(service.calls_in_flight(), 1);
        service.answered(
            work.token,
            RegistryAnswer::Failed("Redis is down".into()),
            NOW,
        );
        assert_eq!(service.calls_in_flight(), 0);
        let (out, seen) = drain(&mut service);
        assert_eq!(out.len(), 1, "only the answer to the caller: {out:?}");
        assert_eq!(out[0].to, To::Requester(Some("caller".into())));
        assert_eq!(reply_status(&out[0]).0, Some("503"));
        let message = out[0].publish.properties.user_property("__stMsg").unwrap();
        assert!(message.contains("Redis is down"), "{message}");
        assert!(
            matches!(&seen[..], [Seen::Failed(_), Seen::Refused(r)] if r.status == 503),
            "{seen:?}"
        );
        // An answer for a call nobody asked (a host's bug) changes nothing.
        service.answered(99, RegistryAnswer::Done(true), NOW);
        assert_eq!(drain(&mut service), (vec![], vec![]));
    }

    /// A device's MQTT 5 answer to `command` (its response topic and correlation data).
    fn answer_to(command: &Publish, payload: &str) -> Publish {
        let properties = Properties {
            correlation_data: command.properties.correlation_data.clone(),
            ..Properties::default()
        };
        let topic = command.properties.response_topic.as_deref().unwrap();
        publish(topic, payload, properties)
    }

    #[test]
    fn a_direct_command_goes_out_while_it_is_recorded_and_an_early_answer_waits_for_the_record() {
        let mut service = Service::remote(config("n"));
        let mut registry = Registry::new();
        let invoke = [("topic", "dev/1/cmd"), ("timeoutMs", "1000")];
        let request = request(wire::INVOKE_TOPIC, "{}", &invoke);
        service.handle(request, Some("caller"), NOW);
        let command = service
            .poll_output()
            .expect("published before it is recorded");
        assert_eq!(command.publish.topic, "dev/1/cmd");
        let register = service.poll_call().expect("and recorded meanwhile");
        assert!(matches!(register.call, RegistryCall::Register(_)));
        // The device answers before the record is written: the answer waits for it.
        service.handle(answer_to(&command.publish, "done"), None, NOW + 1);
        assert_eq!(service.poll_call(), None);
        assert_eq!(drain(&mut service), (vec![], vec![]));
        let recorded = registry.run(register.call, register.now_ms);
        service.answered(register.token, recorded, NOW + 2);
        run_calls(&mut service, &mut registry);
        let (out, seen) = drain(&mut service);
        let reply = out.iter().find(|out| out.to != To::Subscribers);
        let reply = reply.expect("the caller is answered");
        assert_eq!(reply.publish.payload, "done");
        assert_eq!(
            reply.publish.properties.user_property("status"),
            Some("SUCCEEDED")
        );
        assert!(seen.contains(&Seen::Sent), "{seen:?}");
        assert_eq!((service.waiting(), service.calls_in_flight()), (0, 0));
        // Its deadline went with it: the timeout asks the registry nothing.
        service.on_deadline(NOW + 5_000);
        assert_eq!(service.poll_call(), None);
    }

    #[test]
    fn a_direct_command_whose_record_fails_is_answered_503_saying_the_device_may_have_it() {
        let mut service = Service::remote(config("n"));
        let invoke = [("topic", "dev/1/cmd")];
        let call = request(wire::INVOKE_TOPIC, "{}", &invoke);
        service.handle(call, Some("caller"), NOW);
        let command = service
            .poll_output()
            .expect("published while it is recorded");
        let register = service.poll_call().unwrap();
        service.handle(answer_to(&command.publish, "done"), None, NOW + 1);
        let failed = RegistryAnswer::Failed("Redis is down".into());
        service.answered(register.token, failed, NOW + 2);
        let (out, seen) = drain(&mut service);
        assert_eq!(out.len(), 1, "only the answer to the caller: {out:?}");
        assert_eq!(reply_status(&out[0]).0, Some("503"));
        let message = out[0].publish.properties.user_property("__stMsg").unwrap();
        assert!(message.contains("Redis is down"), "{message}");
        assert!(message.contains("the device may act on it"), "{message}");
        assert!(
            matches!(&seen[..], [Seen::Failed(_), Seen::Refused(_)]),
            "{seen:?}"
        );
        let [Seen::Failed(lost), _] = &seen[..] else {
            panic!("{seen:?}")
        };
        assert!(lost.contains("1 answer(s)"), "{lost}");
        // The early answer went with the command: nothing is left waiting.
        assert_eq!((service.waiting(), service.calls_in_flight()), (0, 0));
        assert!(service.registering.is_empty());

        // A registry that refuses the record (rather than failing) loses the same, said so.
        let call = request(wire::INVOKE_TOPIC, "{}", &invoke);
        service.handle(call, Some("caller"), NOW);
        let command = service
            .poll_output()
            .expect("published while it is recorded");
        let register = service.poll_call().unwrap();
        service.handle(answer_to(&command.publish, "done"), None, NOW + 1);
        let refused = RegistryAnswer::Registered(Err(CommandError::BadTimeout(0)));
        service.answered(register.token, refused, NOW + 2);
        let (out, seen) = drain(&mut service);
        assert_eq!(out.len(), 1, "only the answer to the caller: {out:?}");
        assert_eq!(out[0].to, To::Requester(Some("caller".into())));
        assert_eq!(reply_status(&out[0]).0, Some("400"));
        let message = out[0].publish.properties.user_property("__stMsg").unwrap();
        assert!(message.contains("the device may act on it"), "{message}");
        let [Seen::Failed(lost), Seen::Refused(_)] = &seen[..] else {
            panic!("{seen:?}")
        };
        assert!(
            lost.contains("refused the record") && lost.contains("1 answer(s)"),
            "{lost}"
        );
        assert!(service.registering.is_empty());
    }

    #[test]
    fn no_command_goes_where_the_node_s_own_protocols_speak_or_answers_are_read() {
        let mut service = Service::new(config("n1"));
        let refused = [
            "$aws/things/T1/jobs/notify-next",
            "$aws/things/T1/shadow/update/delta",
            "$aws/events/job/j1/completed",
            "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
            "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/c1/command/notify/6B",
            "clients/app1/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke",
            "mqstore/jobs/v1/command/invoke",
            "mqstore/commands/v1/events/x",
            "$SYS/broker/uptime",
            // Where this service reads answers: its direct topics, a profile's answer topic.
            "clients/n1-commands/dev/1/cmd",
            "thing/product/SN1/services_reply",
        ];
        for (n, topic) in refused.into_iter().enumerate() {
            service.handle(
                request(wire::INVOKE_TOPIC, "{}", &[("topic", topic)]),
                None,
                n as u64,
            );
            let (out, seen) = drain(&mut service);
            assert_eq!(
                out.len(),
                1,
                "{topic}: only the refusal, nothing sent: {out:?}"
            );
            assert_eq!(out[0].publish.topic, "caller/response");
            assert_eq!(reply_status(&out[0]).0, Some("400"), "{topic}");
            let message = out[0].publish.properties.user_property("__stMsg").unwrap();
            assert!(message.contains("is not a device's"), "{topic}: {message}");
            assert!(matches!(&seen[..], [Seen::Refused(_)]), "{topic}: {seen:?}");
        }
        assert_eq!(service.records(), 0, "nothing recorded");
        // Devices' topics, of every shape, still take commands (AWS's own `$aws/commands/`).
        for topic in [
            "dev/1/cmd",
            "clients/dev1/cmd",
            "statestores/x",
            "$aws/commands/things/T1/executions/{id}/request/json",
        ] {
            let profile = match topic.starts_with("$aws/") {
                true => "aws",
                false => "mqtt5",
            };
            let user = [("topic", topic), ("profile", profile), ("mode", "detached")];
            service.handle(request(wire::INVOKE_TOPIC, "{}", &user), None, 100);
            let (out, _) = drain(&mut service);
            let device_topic = topic.split("{id}").next().unwrap();
            let sent = out
                .iter()
                .find(|o| o.publish.topic.starts_with(device_topic));
            assert_eq!(
                sent.map(|o| &o.to),
                Some(&To::Subscribers),
                "{topic}: {out:?}"
            );
            let reply = out.iter().find(|o| o.publish.topic == "caller/response");
            assert_eq!(
                reply.and_then(|r| reply_status(r).0),
                Some("200"),
                "{topic}"
            );
        }
    }
}
