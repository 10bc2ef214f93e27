//! Device shadows: AWS IoT Device Shadow's MQTT API, so that devices written for AWS (its
//! device SDKs' shadow clients) keep working on any broker.
//!
//! A shadow is a JSON document per thing — the classic one, and named ones — with `desired`
//! and `reported` state, per-leaf metadata timestamps, and a version. Requests go to
//! `$aws/things/{thing}/shadow[/name/{shadow}]/{get,update,delete}`; answers and
//! notifications to their subscribers on the same prefix (`…/accepted`, `…/rejected`,
//! `…/update/delta`, `…/update/documents`). The rules (merge, `null` removes, delta, limits,
//! codes and messages) are in `document.rs`; this module turns one request and the shadow as
//! stored into the write to make and the publishes to send ([`handle`]). The store is the
//! jobs store's table [`TABLE`] (memory, a data directory, Redis).

mod document;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::envelope::{Properties, Publish};
use crate::jobs::{self, Answered, JobsStore};
use document::{Envelope, Update};
pub use document::{
    MAX_CLIENT_TOKEN, MAX_DEPTH, MAX_REQUEST_BYTES, MAX_STATE_BYTES, Rejection, Sections, Shadow,
};

/// The jobs store table that holds the shadows, by [`Target::key`].
pub const TABLE: &str = "shadows";

/// The request topics a node subscribes to: classic and named shadows' `get`, `update` and
/// `delete` of every thing (not their answers, which share the prefix).
pub const REQUEST_FILTERS: [&str; 6] = [
    "$aws/things/+/shadow/get",
    "$aws/things/+/shadow/update",
    "$aws/things/+/shadow/delete",
    "$aws/things/+/shadow/name/+/get",
    "$aws/things/+/shadow/name/+/update",
    "$aws/things/+/shadow/name/+/delete",
];

/// The longest thing name AWS allows.
pub const MAX_THING_NAME: usize = 128;
/// The longest shadow name AWS allows.
pub const MAX_SHADOW_NAME: usize = 64;

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `get`: the whole document.
    Get,
    /// `update`: merge a partial state.
    Update,
    /// `delete`: remove the shadow (its version stays).
    Delete,
}

impl Op {
    /// The request's topic suffix.
    pub fn suffix(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }

    /// The operation a topic suffix (`get`, `update`, `delete`) names.
    pub fn parse(suffix: &str) -> Option<Op> {
        [Op::Get, Op::Update, Op::Delete]
            .into_iter()
            .find(|op| op.suffix() == suffix)
    }
}

/// Which shadow a topic is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    /// The thing.
    pub thing: &'a str,
    /// The named shadow, or `None` for the classic one.
    pub name: Option<&'a str>,
}

impl Target<'_> {
    /// The topic prefix of this shadow's API.
    pub fn prefix(&self) -> String {
        match self.name {
            None => format!("$aws/things/{}/shadow", self.thing),
            Some(name) => format!("$aws/things/{}/shadow/name/{name}", self.thing),
        }
    }

    /// Its entry in [`TABLE`]: `{thing}/` for the classic shadow, `{thing}/{name}` for a
    /// named one (neither name holds a `/`: it would split the topic).
    pub fn key(&self) -> String {
        format!("{}/{}", self.thing, self.name.unwrap_or(""))
    }

    /// The name AWS's "not found" message gives.
    fn display(&self) -> &str {
        self.name.unwrap_or(self.thing)
    }

    fn check(&self) -> Result<(), Rejection> {
        if !jobs::valid_name(self.thing, MAX_THING_NAME) {
            let message = format!("Invalid thing name: {}", jobs::THING_NAME_RULE);
            return Err(Rejection::bad_name(&message));
        }
        if self
            .name
            .is_some_and(|n| !jobs::valid_name(n, MAX_SHADOW_NAME))
        {
            let message = "Invalid shadow name: 1-64 characters of a-z, A-Z, 0-9, ':', '_' and '-'";
            return Err(Rejection::bad_name(message));
        }
        Ok(())
    }
}

/// The shadow and operation of a request topic; `None` for any other topic (answers too).
pub fn parse_topic(topic: &str) -> Option<(Target<'_>, Op)> {
    let rest = topic.strip_prefix("$aws/things/")?;
    let (thing, rest) = rest.split_once("/shadow/")?;
    let (name, op) = match rest.strip_prefix("name/") {
        Some(named) => {
            let (name, op) = named.split_once('/')?;
            (Some(name), op)
        }
        None => (None, rest),
    };
    let op = Op::parse(op)?;
    if thing.is_empty() || thing.contains('/') || name.is_some_and(str::is_empty) {
        return None;
    }
    Some((Target { thing, name }, op))
}

/// What a client hears on a shadow's topics: the answer to a request, or a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// `…/{op}/accepted`.
    Accepted,
    /// `…/{op}/rejected`.
    Rejected,
    /// `…/update/delta`: what `desired` asks that `reported` lacks.
    Delta,
    /// `…/update/documents`: the documents before and after an update.
    Documents,
}

/// The shadow and what a client hears on one of its answer topics; `None` for any other topic
/// (requests too).
pub fn parse_answer(topic: &str) -> Option<(Target<'_>, Heard)> {
    let (request, kind) = topic.rsplit_once('/')?;
    let (target, op) = parse_topic(request)?;
    let heard = match (op, kind) {
        (_, "accepted") => Heard::Accepted,
        (_, "rejected") => Heard::Rejected,
        (Op::Update, "delta") => Heard::Delta,
        (Op::Update, "documents") => Heard::Documents,
        _ => return None,
    };
    Some((target, heard))
}

/// What a client subscribes to before it uses a shadow: the answers to its requests and the
/// shadow's delta and documents. (AWS delivers answers without a subscription; a standard
/// broker needs one.)
pub fn client_subscriptions(target: Target<'_>) -> Vec<String> {
    let prefix = target.prefix();
    ["get/+", "update/+", "delete/+"]
        .iter()
        .map(|suffix| format!("{prefix}/{suffix}"))
        .collect()
}

/// Checks a thing's and a shadow's name as the service does, so that a client never makes a
/// topic the service refuses (or that is no topic at all).
pub fn check_target(target: Target<'_>) -> Result<(), Rejection> {
    target.check()
}

/// A shadow's notification to a client that uses it: a delta or an update's documents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The thing.
    pub thing: String,
    /// The named shadow, or `None` for the classic one.
    pub name: Option<String>,
    /// `update/delta` or `update/documents`.
    pub stream: Stream,
    /// Its JSON as the service sent it (a delta's `state`, `metadata`, `version`; the
    /// documents' `previous` and `current`).
    pub body: Value,
}

impl Notification {
    /// The form clients hand their callers (the CLI's `watch` lines, Python's dicts, npm's
    /// objects, C's JSON): `{"stream": "delta" | "documents", "body": ...}`.
    pub fn to_json(&self) -> Value {
        json!({ "stream": self.stream.as_str(), "body": self.body })
    }
}

/// Which of a shadow's notifications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// `update/delta`.
    Delta,
    /// `update/documents`.
    Documents,
}

impl Stream {
    /// Its name in a notification's JSON: `"delta"` or `"documents"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Delta => "delta",
            Stream::Documents => "documents",
        }
    }
}

/// An update's request body, as clients send it: `state`, and `version` when the update is to
/// apply only at that version.
pub fn update_body(state: Value, version: Option<u64>) -> Value {
    let mut body = json!({ "state": state });
    if let Some(version) = version {
        body["version"] = version.into();
    }
    body
}

/// The operator calls the shadow service answers (beside the jobs service's, on its topic).
const OPERATOR_CALL: &str = "listNamedShadowsForThing";

/// Answers an operator request when it is the shadow service's (`listNamedShadowsForThing`:
/// AWS's ListNamedShadowsForThing); `None` for the jobs service's requests.
pub fn operate(
    store: &mut dyn JobsStore,
    payload: &[u8],
    now_ms: u64,
) -> Option<jobs::wire::OperatorAnswer<jobs::NamedShadowsPage>> {
    // Most operator requests are the jobs service's: only a request that names the call is
    // parsed here (the jobs service explains what does not fit).
    let named_call = OPERATOR_CALL.as_bytes();
    if !payload.windows(named_call.len()).any(|w| w == named_call) {
        return None;
    }
    let Ok(jobs::OperatorRequest::ListNamedShadowsForThing { thing_name, page }) =
        serde_json::from_slice(payload)
    else {
        return None;
    };
    let listed = jobs::page_size(&page)
        .and_then(|limit| named(&*store, &thing_name, &page, limit).map_err(jobs::operator_error));
    Some(match listed {
        Ok((results, next_token)) => jobs::wire::OperatorAnswer::Ok(jobs::NamedShadowsPage {
            results,
            next_token,
            timestamp: now_ms / 1000,
        }),
        Err(error) => jobs::wire::OperatorAnswer::Error(error),
    })
}

/// A page of `thing`'s named shadows' names, in name order, after the page's token (a name);
/// deleted shadows (kept for their version) are left out. An invalid thing name is refused.
pub(crate) fn named<S: JobsStore + ?Sized>(
    store: &S,
    thing: &str,
    page: &jobs::PageRequest,
    limit: usize,
) -> Result<(Vec<String>, Option<String>), jobs::JobsError> {
    Target { thing, name: None }
        .check()
        .map_err(|r| jobs::JobsError::Invalid(r.message))?;
    // Keys are `{thing}/{name}`: the classic shadow's, `{thing}/`, sorts first and is skipped.
    let prefix = format!("{thing}/");
    let mut after = format!("{prefix}{}", page.next_token.as_deref().unwrap_or(""));
    let mut names = Vec::new();
    const BATCH: u64 = 100;
    loop {
        let entries = store.entries(TABLE, Some(&after), BATCH)?;
        let last_batch = (entries.len() as u64) < BATCH;
        for (key, document) in entries {
            let Some(name) = key.strip_prefix(&prefix) else {
                return Ok((names, None));
            };
            let deleted = serde_json::from_slice::<Shadow>(&document).map_or(true, |s| s.deleted);
            if !deleted {
                if names.len() == limit {
                    let token = names.last().cloned();
                    return Ok((names, token));
                }
                names.push(name.to_owned());
            }
            after = key;
        }
        if last_batch {
            return Ok((names, None));
        }
    }
}

/// Whether `topic` is a shadow request.
pub fn is_request(topic: &str) -> bool {
    parse_topic(topic).is_some()
}

/// What a request does to the store.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// Nothing (a `get`, or a refused request).
    None,
    /// The shadow's new document (a deleted one keeps its version), to store as JSON at the
    /// target's key in place of the entry the request was run on.
    Put {
        /// The document to store.
        document: Vec<u8>,
    },
}

/// What [`handle`] decided: the write to make, then the publishes to send once it is made.
#[derive(Debug, Clone, PartialEq)]
pub struct Handled {
    /// Accepted (its first publish is `…/accepted`) or refused (`…/rejected`).
    pub answered: Answered,
    /// The store's write.
    pub write: Write,
    /// `…/accepted` or `…/rejected`, then (an update) `…/update/delta` and
    /// `…/update/documents`.
    pub publishes: Vec<Publish>,
}

/// Handles one request on `target` with `stored`, the shadow's entry in [`TABLE`] (as
/// stored, or `None`), at `now_ms`.
pub fn handle(
    target: Target<'_>,
    op: Op,
    payload: &[u8],
    stored: Option<&[u8]>,
    now_ms: u64,
) -> Handled {
    let now_s = now_ms / 1000;
    let prefix = target.prefix();
    match run(target, op, payload, stored, now_s) {
        Ok(ran) => {
            let token = ran.envelope.client_token.as_deref();
            let publishes = ran
                .publishes
                .into_iter()
                .map(|(suffix, body)| reply(&prefix, suffix, body, now_s, token))
                .collect();
            Handled {
                answered: Answered::Accepted,
                write: ran.write,
                publishes,
            }
        }
        Err((rejection, envelope)) => rejected(&prefix, op, rejection, &envelope, now_s),
    }
}

/// What [`serve`] did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Served {
    /// Whether it was accepted.
    pub answered: Answered,
    /// How many times it ran again because another write came between its read and its own.
    pub races: usize,
}

/// Runs one request against the shadows in a jobs store (read, then write when the request
/// writes), pushing its publishes onto `out`. When the store fails the request is refused
/// with AWS's 500, and nothing else is published.
pub(crate) fn serve<S: JobsStore + ?Sized>(
    store: &mut S,
    target: Target<'_>,
    op: Op,
    payload: &[u8],
    now_ms: u64,
    out: &mut Vec<Publish>,
) -> Served {
    let key = target.key();
    let mut handled = failed(target, op, payload, now_ms);
    let mut races = 0;
    // Another node may write the shadow between the read and the write: the write is a
    // compare-and-set, and a request that lost the race runs again on what won.
    for _ in 0..RACES {
        let stored = match store.entry(TABLE, &key) {
            Ok(stored) => stored,
            Err(_) => break,
        };
        let ran = handle(target, op, payload, stored.as_deref(), now_ms);
        let Write::Put { document } = &ran.write else {
            handled = ran;
            break;
        };
        match store.swap_entry(TABLE, &key, stored.as_deref(), document) {
            Ok(true) => {
                handled = ran;
                break;
            }
            Ok(false) => races += 1,
            Err(_) => break,
        }
    }
    out.extend(handled.publishes);
    Served {
        answered: handled.answered,
        races,
    }
}

/// How many times a request runs again after losing a race to another write before it is
/// refused (500). Each loss is another request's success, so a burst of n updates of one
/// shadow needs at most n - 1 runs again for its last one: this allows a burst of 100.
const RACES: usize = 100;

/// The store failed: AWS's 500, with the request's token.
fn failed(target: Target<'_>, op: Op, payload: &[u8], now_ms: u64) -> Handled {
    refused(target, op, payload, Rejection::internal(), now_ms)
}

/// A request refused before it ran, whatever it holds: `rejection` with the request's token.
fn refused(
    target: Target<'_>,
    op: Op,
    payload: &[u8],
    rejection: Rejection,
    now_ms: u64,
) -> Handled {
    let envelope = document::parse(payload).map_or_else(|(_, e)| e, |(_, e)| e);
    rejected(&target.prefix(), op, rejection, &envelope, now_ms / 1000)
}

/// AWS's limit of shadow requests in flight (started, not yet answered) on one connection:
/// one more is refused with 429.
pub const MAX_IN_FLIGHT: usize = 10;

/// The shadow requests in flight on a host that answers them after it received them (on
/// Redis each is a [`crate::server::JobsWork`] whose store calls take round trips): it runs a
/// thing's requests one at a time, in the order they came, and refuses the next with AWS's
/// 429 while a thing has [`MAX_IN_FLIGHT`] (running and waiting) rather than keeping an
/// eleventh waiting. AWS counts a connection's requests; a service beside the broker does not see
/// connections, so a thing's (classic and named shadows together) stand for its device's.
///
/// One at a time, because requests of one shadow run side by side would race each other's
/// compare-and-set (see `serve`): each loser runs again, and one shadow's busy writers got
/// little done (8 writers: 0.03× the updates per second of 8 shadows, 4.7 races per update,
/// now and then a 500 after 100 lost races; docs/performance.md). Only requests through
/// different nodes race now. A host that answers each request as it handles it (a node on memory or a data
/// directory) never has one in flight, and needs none of this.
#[derive(Debug, Default)]
pub struct InFlight {
    things: std::collections::HashMap<String, Thing>,
}

/// One thing's requests in flight.
#[derive(Debug)]
struct Thing {
    /// Running and waiting.
    count: usize,
    /// Those waiting for the one running, in the order they came.
    waiting: std::collections::VecDeque<Publish>,
}

/// What [`InFlight::start`] decided about a message.
#[derive(Debug, PartialEq)]
#[non_exhaustive]
pub enum Admitted {
    /// Not a shadow request: no limit applies.
    NotShadow,
    /// A shadow request, to run now: call [`InFlight::finish`] with its topic once it is
    /// answered.
    Started,
    /// A shadow request kept until its thing's request before it is answered:
    /// [`InFlight::finish`] hands it back then, to run.
    Waiting,
    /// Refused: its thing has [`MAX_IN_FLIGHT`] in flight. Publish this (AWS's 429 on the
    /// request's `/rejected`) and do not run the request.
    Refused(Op, Publish),
}

impl InFlight {
    /// Starts the request `message` at `now_ms`, or keeps it (a copy) behind its thing's
    /// request running, unless its thing has [`MAX_IN_FLIGHT`] requests in flight.
    pub fn start(&mut self, message: &Publish, now_ms: u64) -> Admitted {
        let Some((target, op)) = parse_topic(&message.topic) else {
            return Admitted::NotShadow;
        };
        // The thing's name is copied only for its first request in flight.
        match self.things.get_mut(target.thing) {
            Some(thing) if thing.count >= MAX_IN_FLIGHT => {
                let rejection = Rejection::too_many_requests();
                let mut handled = refused(target, op, &message.payload, rejection, now_ms);
                Admitted::Refused(op, handled.publishes.remove(0))
            }
            Some(thing) => {
                thing.count += 1;
                thing.waiting.push_back(message.clone());
                Admitted::Waiting
            }
            None => {
                let thing = Thing {
                    count: 1,
                    waiting: std::collections::VecDeque::new(),
                };
                self.things.insert(target.thing.to_owned(), thing);
                Admitted::Started
            }
        }
    }

    /// The request on `topic` that ran was answered: its thing's next request, to run now
    /// (and to finish in its turn), if one is waiting.
    pub fn finish(&mut self, topic: &str) -> Option<Publish> {
        let (target, _) = parse_topic(topic)?;
        let thing = self.things.get_mut(target.thing)?;
        thing.count -= 1;
        if thing.count == 0 {
            self.things.remove(target.thing);
            return None;
        }
        thing.waiting.pop_front()
    }

    /// Requests in flight (running and waiting), all things together.
    pub fn len(&self) -> usize {
        self.things.values().map(|thing| thing.count).sum()
    }

    /// Whether no request is in flight.
    pub fn is_empty(&self) -> bool {
        self.things.is_empty()
    }
}

fn rejected(
    prefix: &str,
    op: Op,
    rejection: Rejection,
    envelope: &Envelope,
    now_s: u64,
) -> Handled {
    let mut body = Map::new();
    body.insert("code".into(), json!(rejection.code));
    body.insert("message".into(), json!(rejection.message));
    let suffix = format!("{}/rejected", op.suffix());
    let token = envelope.client_token.as_deref();
    Handled {
        answered: Answered::Rejected,
        write: Write::None,
        publishes: vec![reply(prefix, &suffix, body, now_s, token)],
    }
}

struct Ran {
    envelope: Envelope,
    write: Write,
    publishes: Vec<(&'static str, Map<String, Value>)>,
}

fn run(
    target: Target<'_>,
    op: Op,
    payload: &[u8],
    stored: Option<&[u8]>,
    now_s: u64,
) -> Result<Ran, (Rejection, Envelope)> {
    let (body, envelope) = document::parse(payload)?;
    let fail = |rejection: Rejection| (rejection, envelope.clone());
    target.check().map_err(fail)?;
    let stored: Option<Shadow> = match stored {
        None => None,
        // A store's entry that is not a shadow is a fault of the store, not of the request.
        Some(bytes) => {
            Some(serde_json::from_slice(bytes).map_err(|_| fail(Rejection::internal()))?)
        }
    };
    let stored_version = stored.as_ref().map_or(0, |s| s.version);
    if envelope.version.is_some_and(|v| v != stored_version) {
        return Err(fail(Rejection::version_conflict()));
    }
    let live = stored.as_ref().filter(|s| !s.deleted);
    let mut publishes = Vec::new();
    let write = match op {
        Op::Get => {
            let shadow = live.ok_or_else(|| fail(Rejection::not_found(target.display())))?;
            publishes.push(("get/accepted", shadow.document()));
            Write::None
        }
        Op::Delete => {
            let shadow = live.ok_or_else(|| fail(Rejection::not_found(target.display())))?;
            let tombstone = Shadow {
                version: shadow.version,
                deleted: true,
                ..Shadow::default()
            };
            let mut body = Map::new();
            body.insert("version".into(), json!(shadow.version));
            publishes.push(("delete/accepted", body));
            put(&tombstone)
        }
        Op::Update => {
            let update = Update::from_body(body).map_err(fail)?;
            let applied = update.apply(stored, now_s).map_err(fail)?;
            publishes.push(("update/accepted", applied.accepted));
            if let Some((delta, metadata)) = applied.delta {
                let mut body = Map::new();
                body.insert("state".into(), Value::Object(delta));
                body.insert("metadata".into(), Value::Object(metadata));
                body.insert("version".into(), json!(applied.current.version));
                publishes.push(("update/delta", body));
            }
            let mut documents = Map::new();
            if let Some(previous) = &applied.previous {
                documents.insert("previous".into(), previous.snapshot());
            }
            documents.insert("current".into(), applied.current.snapshot());
            publishes.push(("update/documents", documents));
            put(&applied.current)
        }
    };
    Ok(Ran {
        envelope,
        write,
        publishes,
    })
}

fn put(shadow: &Shadow) -> Write {
    Write::Put {
        // Our own type: it always serializes.
        document: serde_json::to_vec(shadow).unwrap_or_default(),
    }
}

fn reply(
    prefix: &str,
    suffix: &str,
    mut body: Map<String, Value>,
    now_s: u64,
    client_token: Option<&str>,
) -> Publish {
    body.insert("timestamp".into(), json!(now_s));
    if let Some(token) = client_token {
        body.insert("clientToken".into(), json!(token));
    }
    Publish {
        topic: format!("{prefix}/{suffix}"),
        // A map of JSON values: it always serializes.
        payload: Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
        qos: 1,
        properties: Properties::default(),
    }
}

#[cfg(test)]
mod tests;
