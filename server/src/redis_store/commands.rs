//! The command registry in Redis, shared by every node: the records of [`mqstore_core::commands`]
//! and the forwarding of answers to the node that waits (the seed's design, keyed by id).
//!
//! * `{P}cmd:<id>`: a command's record (a hash: `r` revision, `d` the record as JSON), kept
//!   [`KEEP_TIMEOUTS`](mqstore_core::commands::KEEP_TIMEOUTS) timeouts after it was sent (its TTL).
//!   Every change is a compare-and-set on `r` (one script), the change itself computed by the
//!   core's [`Record`] methods, so two nodes never both settle a command.
//! * `{P}cmdtopic:<answer filter>`: uncorrelated (legacy) commands waiting on an answer topic,
//!   scored by deadline; ids past their deadline are dropped whenever it is written or read.
//! * `{P}node:<node>`: the pub/sub channel where a node hears the answers other nodes read for
//!   it. PUBLISH says how many heard one: 0 means the node is gone, and the record says so
//!   (`orphaned`).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use redis::Value;
use tracing::{info, warn};

use super::pipe::{self, Reply};
use super::{Lua, RedisStore, RedisStoreError, RedisTls, Result};
use mqstore_core::commands::definitions::Definition;
use mqstore_core::commands::{
    Answer, AnswerKey, CommandError, Matched, Record, RegistryAnswer, RegistryCall,
};

/// How often one change is retried when another node changed the record in between.
const MAX_TRIES: usize = 16;

/// The name, in Redis's `CLIENT LIST`, of the connection on which a node writes its commands'
/// records (a pipeline its own loop drives).
pub const PIPE_NAME: &str = "mqstore-command-records";

/// Records this node wrote last that it keeps (see [`Written`]).
const WRITTEN: usize = 4096;

/// The command registry in Redis. Cheap to clone.
#[derive(Clone)]
pub struct RedisRegistry {
    store: RedisStore,
    put: Arc<Lua>,
    index: Arc<Lua>,
    written: Arc<Mutex<Written>>,
}

/// The records of commands still waiting that this node wrote last, with their revision: the
/// answer to a command usually comes back to the node that sent it, before anyone else wrote
/// its record, and then its compare-and-set can start from this copy instead of reading the
/// record again (one round trip to Redis fewer per command). A copy is only a guess: a change
/// made from it is written by compare-and-set on its revision, and a change it refuses or a
/// write it loses is decided again from a fresh read. The oldest go first beyond [`WRITTEN`].
#[derive(Default)]
struct Written {
    records: HashMap<String, (u64, Record)>,
    order: VecDeque<String>,
}

impl Written {
    /// Keeps `record` (a final one is dropped instead: no answer will come for it).
    fn keep(&mut self, revision: u64, record: Record) {
        if record.is_final() {
            self.records.remove(&record.id);
            return;
        }
        let id = record.id.clone();
        if self
            .records
            .insert(id.clone(), (revision, record))
            .is_none()
        {
            if self.order.len() >= WRITTEN
                && let Some(oldest) = self.order.pop_front()
            {
                self.records.remove(&oldest);
            }
            self.order.push_back(id);
        }
    }
}

impl std::fmt::Debug for RedisRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRegistry")
            .field("store", &self.store)
            .finish()
    }
}

/// A registry call as one compare-and-set of a command's record ([`RedisRegistry::put_of`]).
#[derive(Debug)]
pub(crate) struct Put {
    key: Vec<u8>,
    revision: u64,
    json: Vec<u8>,
    keep_ms: u64,
    then: PutThen,
}

#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // one per write in flight: a box would allocate per command
enum PutThen {
    Register(Record),
    /// The record answered from this node's copy, and the call to run again when the copy
    /// was stale.
    Answer {
        how: Matched,
        record: Record,
        call: RegistryCall,
    },
}

/// Why a registration failed.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error(transparent)]
    /// The registry refused the change.
    Command(#[from] CommandError),
    #[error(transparent)]
    /// Redis failed.
    Redis(#[from] RedisStoreError),
}

impl RedisRegistry {
    /// The registry next to `store`'s keys, on its connection.
    pub fn new(store: RedisStore) -> Self {
        Self {
            store,
            put: Arc::new(Lua::new(include_str!("commands_put.lua"))),
            index: Arc::new(Lua::new(include_str!("commands_index.lua"))),
            written: Arc::default(),
        }
    }

    /// This node's copy of record `id`, taken: a change made from it keeps the record again
    /// once written, and one that fails decides from a fresh read anyway.
    fn taken(&self, id: &str) -> Option<(u64, Record)> {
        self.written.lock().ok()?.records.remove(id)
    }

    /// Keeps a copy of `record` as written at `revision` (copied only when not final).
    fn keep(&self, revision: u64, record: &Record) {
        if record.is_final() {
            self.forget(&record.id);
        } else {
            self.keep_owned(revision, record.clone());
        }
    }

    fn keep_owned(&self, revision: u64, record: Record) {
        if let Ok(mut written) = self.written.lock() {
            written.keep(revision, record);
        }
    }

    fn forget(&self, id: &str) {
        if let Ok(mut written) = self.written.lock() {
            written.records.remove(id);
        }
    }

    fn name(&self, kind: &str, suffix: &str) -> Vec<u8> {
        let mut name = self.store.prefix.to_vec();
        name.extend_from_slice(kind.as_bytes());
        name.extend_from_slice(suffix.as_bytes());
        name
    }

    /// Stores a command definition unless one with its id exists: whether it was stored.
    pub async fn define(&self, definition: &Definition) -> Result<bool> {
        let json = serde_json::to_vec(definition).unwrap_or_default();
        let made: i64 = self
            .store
            .write(
                redis::cmd("HSETNX")
                    .arg(self.name("cmddefs", ""))
                    .arg(&definition.command_id)
                    .arg(json),
            )
            .await?;
        Ok(made == 1)
    }

    /// The command definition with id `id`.
    pub async fn definition(&self, id: &str) -> Result<Option<Definition>> {
        let json: Option<Vec<u8>> = self
            .store
            .query(redis::cmd("HGET").arg(self.name("cmddefs", "")).arg(id))
            .await?;
        json.map(|json| parse_definition(&json)).transpose()
    }

    /// Every command definition, by id.
    pub async fn definitions(&self) -> Result<Vec<Definition>> {
        let all: Vec<Vec<u8>> = self
            .store
            .query(redis::cmd("HVALS").arg(self.name("cmddefs", "")))
            .await?;
        let mut definitions = all
            .iter()
            .map(|json| parse_definition(json))
            .collect::<Result<Vec<_>>>()?;
        definitions.sort_by(|a, b| a.command_id.cmp(&b.command_id));
        Ok(definitions)
    }

    /// Deletes command definition `id`: whether there was one.
    pub async fn undefine(&self, id: &str) -> Result<bool> {
        let gone: i64 = self
            .store
            .write(redis::cmd("HDEL").arg(self.name("cmddefs", "")).arg(id))
            .await?;
        Ok(gone == 1)
    }

    /// The pub/sub channel of `node`.
    pub fn channel(&self, node: &str) -> Vec<u8> {
        self.name("node:", node)
    }

    /// Writes `record` if it is at `revision` (0: if it does not exist).
    async fn put(&self, record: &Record, revision: u64, now_ms: u64) -> Result<bool> {
        let mut call = self.put.call();
        call.key(self.name("cmd:", &record.id))
            .arg(revision)
            .arg(record.to_json())
            .arg(record.keep_ms(now_ms));
        Ok(matches!(self.store.eval(&call).await?, Value::Int(1)))
    }

    /// A record and its revision.
    async fn read(&self, id: &str) -> Result<Option<(u64, Record)>> {
        let (revision, json): (Option<u64>, Option<Vec<u8>>) = self
            .store
            .query(
                redis::cmd("HMGET")
                    .arg(self.name("cmd:", id))
                    .arg("r")
                    .arg("d"),
            )
            .await?;
        match (revision, json) {
            (Some(revision), Some(json)) => Record::from_json(&json)
                .map(|record| Some((revision, record)))
                .map_err(|e| RedisStoreError::Reply(format!("command record {id}: {e}"))),
            _ => Ok(None),
        }
    }

    /// Registers a command before it is published.
    pub async fn register(
        &self,
        record: &Record,
        now_ms: u64,
    ) -> std::result::Result<(), RegisterError> {
        if !self.put(record, 0, now_ms).await? {
            return Err(CommandError::Duplicate(record.id.clone()).into());
        }
        self.keep(1, record);
        if !record.correlated {
            let mut call = self.index.call();
            call.key(self.name("cmdtopic:", &record.answer_filter))
                .arg(record.deadline_ms)
                .arg(&record.id)
                .arg(record.keep_ms(now_ms))
                .arg(now_ms);
            self.store.eval(&call).await?;
        }
        Ok(())
    }

    /// Changes record `id` with `change` (which says whether it changed it), retrying when
    /// another node wrote in between: what `change` returned and the record afterwards.
    async fn update<T>(
        &self,
        id: &str,
        now_ms: u64,
        mut change: impl FnMut(&mut Record) -> (T, bool),
    ) -> Result<Option<(T, Record)>> {
        if let Some((revision, mut record)) = self.taken(id) {
            let (out, changed) = change(&mut record);
            if changed && self.put(&record, revision, now_ms).await? {
                self.keep(revision + 1, &record);
                return Ok(Some((out, record)));
            }
            // Not what Redis has (or not changed), and taken: decided from a fresh read.
        }
        for _ in 0..MAX_TRIES {
            let Some((revision, mut record)) = self.read(id).await? else {
                return Ok(None);
            };
            let (out, changed) = change(&mut record);
            if !changed || self.put(&record, revision, now_ms).await? {
                return Ok(Some((out, record)));
            }
        }
        Err(RedisStoreError::Reply(format!(
            "command record {id} kept changing under {MAX_TRIES} tries"
        )))
    }

    /// Applies an answer (see [`mqstore_core::commands::Registry::answer`]).
    pub async fn answer(
        &self,
        key: &AnswerKey,
        answer: Answer,
        now_ms: u64,
    ) -> Result<Vec<(Matched, Record)>> {
        let ids = match &key.id {
            Some(id) => vec![id.clone()],
            None => {
                let index = self.name("cmdtopic:", &key.filter);
                let ids: Vec<String> = self
                    .store
                    .query(
                        redis::cmd("ZRANGEBYSCORE")
                            .arg(&index)
                            .arg(now_ms)
                            .arg("+inf"),
                    )
                    .await?;
                if !ids.is_empty() {
                    let _: i64 = self
                        .store
                        .write(redis::cmd("ZREM").arg(&index).arg(&ids))
                        .await?;
                }
                let _: i64 = self
                    .store
                    .write(
                        redis::cmd("ZREMRANGEBYSCORE")
                            .arg(&index)
                            .arg("-inf")
                            .arg(format!("({now_ms}")),
                    )
                    .await?;
                ids
            }
        };
        let mut matched = Vec::with_capacity(ids.len());
        for id in ids {
            let applied = self
                .update(&id, now_ms, |record| {
                    let fits = record.answer_filter == key.filter
                        && record.correlated == key.id.is_some()
                        && (record.correlated || record.status.is_waiting());
                    match fits {
                        true => (Some(record.answer(answer.clone(), now_ms)), true),
                        false => (None, false),
                    }
                })
                .await?;
            if let Some((Some(how), record)) = applied {
                matched.push((how, record));
            }
        }
        Ok(matched)
    }

    /// The broker acknowledged the command's publish: the record if that changed it.
    pub async fn delivered(&self, id: &str, now_ms: u64) -> Result<Option<Record>> {
        let changed = self.update(id, now_ms, |r| {
            let changed = r.delivered(now_ms);
            (changed, changed)
        });
        Ok(changed.await?.and_then(|(changed, r)| changed.then_some(r)))
    }

    /// The command's timeout passed: its record afterwards.
    pub async fn time_out(&self, id: &str, now_ms: u64) -> Result<Option<Record>> {
        let updated = self
            .update(id, now_ms, |r| ((), r.time_out(now_ms)))
            .await?;
        if let Some((_, record)) = &updated
            && !record.correlated
        {
            let index = self.name("cmdtopic:", &record.answer_filter);
            let _: i64 = self
                .store
                .write(redis::cmd("ZREM").arg(index).arg(id))
                .await?;
        }
        Ok(updated.map(|(_, record)| record))
    }

    /// The answer was forwarded to a node that is gone.
    pub async fn orphan(&self, id: &str, now_ms: u64) -> Result<Option<Record>> {
        let updated = self
            .update(id, now_ms, |r| {
                r.orphan(now_ms);
                ((), true)
            })
            .await?;
        Ok(updated.map(|(_, record)| record))
    }

    /// The command's record by id; None when unknown or expired.
    pub async fn get(&self, id: &str) -> Result<Option<Record>> {
        Ok(self.read(id).await?.map(|(_, record)| record))
    }

    /// Hands `record` (just answered) to `node`: whether a subscriber heard it. On a Cluster
    /// PUBLISH counts only the subscribers of the node it reached, so there a 0 is not taken
    /// as proof that the node is gone.
    pub async fn forward(&self, node: &str, record: &Record) -> Result<bool> {
        let heard: i64 = self
            .store
            .query(
                redis::cmd("PUBLISH")
                    .arg(self.channel(node))
                    .arg(record.to_json()),
            )
            .await?;
        Ok(heard > 0 || self.store.cluster)
    }

    /// A [`Pipe`](pipe::Pipe) of its own to the Redis server of this registry, when it is one
    /// server reached over TCP or TLS — given, or the primary the sentinels name (`None`:
    /// `#insecure`, a Cluster; every call then goes through [`RedisRegistry::run`]).
    pub(crate) async fn pipe(&self) -> Option<std::io::Result<pipe::Pipe>> {
        if !self.store.pipeable() {
            return None;
        }
        let url = self.store.pubsub_url(0);
        let opened = pipe::Pipe::connect(&url, PIPE_NAME, self.store.tls.as_deref()).await?;
        if !self.store.behind_sentinels() {
            return Some(opened);
        }
        let checked = async {
            let mut pipe = opened?;
            pipe.check_primary().await?;
            Ok(pipe)
        };
        let checked = checked.await;
        if checked.is_err() {
            self.store.call_failed();
        }
        Some(checked)
    }

    /// The `WAIT` a host's pipe sends after each batch of writes when writes wait for
    /// replicas, as Redis reads it, and how long it may wait (`None`: they do not).
    pub(crate) fn pipe_wait(&self) -> Option<(Vec<u8>, Duration)> {
        let (replicas, timeout) = self.store.waits_for_replicas()?;
        let (count, ms) = (replicas.to_string(), timeout.as_millis().to_string());
        let mut wait = Vec::new();
        pipe::encode(&mut wait, &[b"WAIT", count.as_bytes(), ms.as_bytes()]);
        Some((wait, timeout))
    }

    /// What the [`RedisRegistry::pipe_wait`] after `writes` writes answered: `Err` with why
    /// when it did not confirm them on the replicas asked for (the writes were applied on the
    /// primary all the same, as the shared client's [`RedisStoreError::NotReplicated`] says).
    pub(crate) fn replicated(&self, wait: &Reply, writes: u64) -> std::result::Result<(), String> {
        let replicas = match wait {
            Reply::Int(replicas) => u32::try_from(*replicas).unwrap_or(0),
            _ => 0,
        };
        let confirmed = self.store.confirmed_writes(replicas, writes);
        match wait {
            Reply::Int(_) => confirmed.map_err(|e| e.to_string()),
            Reply::Error(e) => Err(format!("Redis: {e}")),
            other => Err(format!("Redis: an unexpected answer to WAIT: {other:?}")),
        }
    }

    /// The host's pipe failed: on Sentinel the primary may have moved.
    pub(crate) fn pipe_failed(&self) {
        self.store.call_failed();
    }

    /// `call` as one write of a record that the host can send on its own
    /// [`Pipe`](pipe::Pipe): a correlated command's registration, or an answer to a command
    /// whose record this node wrote last. Any other call comes back (run it with
    /// [`RedisRegistry::run`]).
    #[allow(clippy::result_large_err)] // the call moves in and out once, as it would anyway
    pub(crate) fn put_of(
        &self,
        call: RegistryCall,
        now_ms: u64,
    ) -> std::result::Result<Put, RegistryCall> {
        let (revision, then) = match call {
            RegistryCall::Register(record) if record.correlated => (0, PutThen::Register(record)),
            RegistryCall::Answer(key, answer) => {
                let kept = key.id.as_deref().and_then(|id| self.taken(id));
                let Some((revision, mut record)) = kept
                    .filter(|(_, record)| record.answer_filter == key.filter && record.correlated)
                else {
                    return Err(RegistryCall::Answer(key, answer));
                };
                let how = record.answer(answer.clone(), now_ms);
                let call = RegistryCall::Answer(key, answer);
                (revision, PutThen::Answer { how, record, call })
            }
            other => return Err(other),
        };
        let record = match &then {
            PutThen::Register(record) | PutThen::Answer { record, .. } => record,
        };
        Ok(Put {
            key: self.name("cmd:", &record.id),
            revision,
            json: record.to_json(),
            keep_ms: record.keep_ms(now_ms),
            then,
        })
    }

    /// Writes `put` into `commands` for a [`Pipe`](pipe::Pipe) (`EVALSHA`, or `EVAL` with the
    /// code after a NOSCRIPT).
    pub(crate) fn encode(&self, commands: &mut Vec<u8>, put: &Put, with_code: bool) {
        let (revision, keep_ms) = (put.revision.to_string(), put.keep_ms.to_string());
        let (verb, script): (&[u8], &[u8]) = match with_code {
            true => (b"EVAL", self.put.code().as_bytes()),
            false => (b"EVALSHA", self.put.sha().as_bytes()),
        };
        let args: [&[u8]; 7] = [
            verb,
            script,
            b"1",
            &put.key,
            revision.as_bytes(),
            &put.json,
            keep_ms.as_bytes(),
        ];
        pipe::encode(commands, &args);
    }

    /// What `put` answers, given its reply; `Err` with its call when this node's copy of the
    /// record was not Redis's (another node wrote it): run it with [`RedisRegistry::run`].
    #[allow(clippy::result_large_err)] // the call moves out once, as it would anyway
    pub(crate) fn put_answer(
        &self,
        put: Put,
        reply: Reply,
    ) -> std::result::Result<RegistryAnswer, RegistryCall> {
        let written = match reply {
            Reply::Int(written) => written == 1,
            Reply::Error(e) => return Ok(RegistryAnswer::Failed(format!("Redis: {e}"))),
            other => {
                return Ok(RegistryAnswer::Failed(format!(
                    "Redis: an unexpected answer to a command record's write: {other:?}"
                )));
            }
        };
        match (put.then, written) {
            (PutThen::Register(record), true) => {
                self.keep_owned(1, record);
                Ok(RegistryAnswer::Registered(Ok(())))
            }
            (PutThen::Register(record), false) => Ok(RegistryAnswer::Registered(Err(
                CommandError::Duplicate(record.id),
            ))),
            (PutThen::Answer { how, record, .. }, true) => {
                self.keep(put.revision + 1, &record);
                Ok(RegistryAnswer::Matched(vec![(how, record)]))
            }
            // The copy (taken) was not what Redis has: decided from a fresh read.
            (PutThen::Answer { call, .. }, false) => Err(call),
        }
    }

    /// Runs a call of the core's command service ([`mqstore_core::server::commands::Service`]
    /// on a remote registry) and gives its answer; Redis failures are
    /// [`RegistryAnswer::Failed`].
    pub async fn run(&self, call: RegistryCall, now_ms: u64) -> RegistryAnswer {
        let answer = match call {
            RegistryCall::Register(record) => match self.register(&record, now_ms).await {
                Ok(()) => Ok(RegistryAnswer::Registered(Ok(()))),
                Err(RegisterError::Command(e)) => Ok(RegistryAnswer::Registered(Err(e))),
                Err(RegisterError::Redis(e)) => Err(e),
            },
            RegistryCall::Answer(key, answer) => self
                .answer(&key, answer, now_ms)
                .await
                .map(RegistryAnswer::Matched),
            RegistryCall::Delivered(id) => self
                .delivered(&id, now_ms)
                .await
                .map(RegistryAnswer::Record),
            RegistryCall::TimeOut(id) => {
                self.time_out(&id, now_ms).await.map(RegistryAnswer::Record)
            }
            RegistryCall::Orphan(id) => self.orphan(&id, now_ms).await.map(RegistryAnswer::Record),
            RegistryCall::Get(id) => self.get(&id).await.map(RegistryAnswer::Record),
            RegistryCall::Define(definition) => {
                self.define(&definition).await.map(RegistryAnswer::Done)
            }
            RegistryCall::Definition(id) => {
                self.definition(&id).await.map(RegistryAnswer::Definition)
            }
            RegistryCall::Definitions => self.definitions().await.map(RegistryAnswer::Definitions),
            RegistryCall::Undefine(id) => self.undefine(&id).await.map(RegistryAnswer::Done),
            RegistryCall::Forward(record) => self
                .forward(&record.node, &record)
                .await
                .map(RegistryAnswer::Done),
            other => {
                return RegistryAnswer::Failed(format!(
                    "not a call the Redis registry runs: {other:?}"
                ));
            }
        };
        answer.unwrap_or_else(|e| RegistryAnswer::Failed(e.to_string()))
    }

    /// Hears the answers forwarded to `node` until the returned task is aborted, handing each
    /// to `deliver`; reconnects (every second) while Redis is away. `ready` hears when the
    /// first subscription is in place.
    pub fn listen(
        &self,
        node: &str,
        mut deliver: impl FnMut(Record) + Send + 'static,
        ready: tokio::sync::oneshot::Sender<Result<()>>,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.store.clone();
        let channel = self.channel(node);
        let mut ready = Some(ready);
        tokio::spawn(async move {
            // Failed or closed subscriptions so far (on a Cluster, the next seed node is tried).
            let mut attempt = 0;
            loop {
                let subscribed = async {
                    let url = store.pubsub_url(attempt);
                    let client = RedisTls::client(store.tls.as_deref(), &url)?;
                    let mut pubsub = client.get_async_pubsub().await?;
                    pubsub.subscribe(&channel).await?;
                    Ok::<_, redis::RedisError>(pubsub)
                };
                match subscribed.await {
                    Ok(pubsub) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Ok(()));
                        }
                        let mut messages = pubsub.into_on_message();
                        while let Some(message) = messages.next().await {
                            match Record::from_json(message.get_payload_bytes()) {
                                Ok(record) => deliver(record),
                                Err(e) => {
                                    warn!(error = %e, "dropped a forwarded answer that is not a record")
                                }
                            }
                        }
                        info!(
                            "the Redis pub/sub connection for forwarded answers closed; reconnecting"
                        );
                    }
                    Err(e) => {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Err(e.into()));
                            return;
                        }
                        warn!(error = %e, "cannot subscribe to forwarded answers in Redis; retrying in 1 s");
                    }
                }
                attempt += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    }
}

fn parse_definition(json: &[u8]) -> Result<Definition> {
    serde_json::from_slice(json)
        .map_err(|e| RedisStoreError::Reply(format!("a stored command that is not one: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mqstore_core::commands::Status;

    fn record(id: &str, status: Status) -> Record {
        Record {
            id: id.into(),
            node: "n".into(),
            topic: "t".into(),
            profile: "default".into(),
            command: None,
            answer_filter: "a".into(),
            correlated: true,
            sent_ms: 0,
            deadline_ms: 1,
            status,
            answer: None,
            late: false,
            orphaned: false,
            duplicates: 0,
            updated_ms: 0,
        }
    }

    #[test]
    fn the_kept_records_are_bounded_and_a_final_one_is_not_kept() {
        let mut written = Written::default();
        for n in 0..WRITTEN + 10 {
            written.keep(1, record(&n.to_string(), Status::Sent));
        }
        assert_eq!(written.records.len(), WRITTEN);
        assert_eq!(written.order.len(), WRITTEN);
        assert!(!written.records.contains_key("0"), "the oldest went first");
        let newest = (WRITTEN + 9).to_string();
        written.keep(2, record(&newest, Status::Sent));
        assert_eq!(
            written.records[&newest].0, 2,
            "a newer revision replaces its copy"
        );
        assert_eq!(written.order.len(), WRITTEN, "and is not listed twice");
        written.keep(3, record(&newest, Status::Succeeded));
        assert!(
            !written.records.contains_key(&newest),
            "a final record is dropped"
        );
    }
}
