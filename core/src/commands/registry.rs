//! The command registry in memory: records by id, and the legacy index of uncorrelated
//! commands by answer topic; and its methods as data ([`RegistryCall`], [`RegistryAnswer`]) for
//! a command service whose registry is reached by round trips (Redis, shared by many nodes).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::definitions::Definition;
use super::{Answer, AnswerKey, CommandError, Matched, Record};

/// Records of commands in flight and recently settled, in memory.
#[derive(Debug, Default)]
pub struct Registry {
    records: HashMap<String, Record>,
    /// Uncorrelated commands still waiting, by answer filter, oldest first.
    by_filter: HashMap<String, Vec<String>>,
    /// When each record is forgotten.
    forget: BTreeSet<(u64, String)>,
    /// Stored commands, by id.
    definitions: BTreeMap<String, Definition>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a command before it is published (a fast device may answer at once).
    pub fn register(&mut self, record: Record, now_ms: u64) -> Result<(), CommandError> {
        self.forget(now_ms);
        if self.records.contains_key(&record.id) {
            return Err(CommandError::Duplicate(record.id));
        }
        if !record.correlated {
            self.by_filter
                .entry(record.answer_filter.clone())
                .or_default()
                .push(record.id.clone());
        }
        self.forget.insert((record.forget_at(), record.id.clone()));
        self.records.insert(record.id.clone(), record);
        Ok(())
    }

    /// Applies an answer: to the command its id names (if the answer came from where that
    /// command's answer is expected), or, without an id, to every uncorrelated command
    /// waiting on its topic. Empty: it matches nothing known (an unknown id, or an answer
    /// nobody waits for), for the caller to count.
    pub fn answer(
        &mut self,
        key: &AnswerKey,
        answer: Answer,
        now_ms: u64,
    ) -> Vec<(Matched, Record)> {
        self.forget(now_ms);
        match &key.id {
            Some(id) => match self.records.get_mut(id) {
                Some(record) if record.answer_filter == key.filter && record.correlated => {
                    let matched = record.answer(answer, now_ms);
                    vec![(matched, record.clone())]
                }
                _ => Vec::new(),
            },
            None => {
                let ids = self.by_filter.remove(&key.filter).unwrap_or_default();
                let mut matched = Vec::with_capacity(ids.len());
                for id in ids {
                    if let Some(record) = self.records.get_mut(&id)
                        && record.status.is_waiting()
                    {
                        matched.push((record.answer(answer.clone(), now_ms), record.clone()));
                    }
                }
                matched
            }
        }
    }

    /// The broker acknowledged the command's publish: the record if that changed it.
    pub fn delivered(&mut self, id: &str, now_ms: u64) -> Option<Record> {
        let record = self.records.get_mut(id)?;
        record.delivered(now_ms).then(|| record.clone())
    }

    /// The command's timeout passed: its record afterwards (TIMED_OUT unless an answer came
    /// first), `None` if it is forgotten.
    pub fn time_out(&mut self, id: &str, now_ms: u64) -> Option<Record> {
        let record = self.records.get_mut(id)?;
        let unindex = record.time_out(now_ms) && !record.correlated;
        let record = record.clone();
        if unindex {
            self.unindex(&record.answer_filter, id);
        }
        Some(record)
    }

    /// The answer was forwarded to a node that is gone.
    pub fn orphan(&mut self, id: &str, now_ms: u64) -> Option<Record> {
        let record = self.records.get_mut(id)?;
        record.orphan(now_ms);
        Some(record.clone())
    }

    /// Stores `definition` unless its id is taken: whether it was stored.
    pub fn define(&mut self, definition: Definition) -> bool {
        match self.definitions.entry(definition.command_id.clone()) {
            std::collections::btree_map::Entry::Occupied(_) => false,
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(definition);
                true
            }
        }
    }

    /// The stored command of this id.
    pub fn definition(&self, id: &str) -> Option<&Definition> {
        self.definitions.get(id)
    }

    /// Stored commands, by id.
    pub fn definitions(&self) -> impl Iterator<Item = &Definition> {
        self.definitions.values()
    }

    /// Deletes stored command `id`: whether there was one.
    pub fn undefine(&mut self, id: &str) -> bool {
        self.definitions.remove(id).is_some()
    }

    /// The record of the command of this id.
    pub fn get(&self, id: &str) -> Option<&Record> {
        self.records.get(id)
    }

    /// Records kept (waiting or settled, until forgotten).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether no command is recorded.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Commands still waiting for an answer.
    pub fn waiting(&self) -> usize {
        self.records
            .values()
            .filter(|r| r.status.is_waiting())
            .count()
    }

    /// Drops the records whose time is up ([`Record::forget_at`]).
    pub fn forget(&mut self, now_ms: u64) {
        while let Some(first) = self.forget.first() {
            if first.0 > now_ms {
                break;
            }
            let Some((_, id)) = self.forget.pop_first() else {
                break;
            };
            if let Some(record) = self.records.remove(&id)
                && !record.correlated
            {
                self.unindex(&record.answer_filter, &id);
            }
        }
    }

    /// When the next record is forgotten.
    pub fn next_forget(&self) -> Option<u64> {
        self.forget.first().map(|(at, _)| *at)
    }

    fn unindex(&mut self, filter: &str, id: &str) {
        if let Some(ids) = self.by_filter.get_mut(filter) {
            ids.retain(|i| i != id);
            if ids.is_empty() {
                self.by_filter.remove(filter);
            }
        }
    }
}

/// A registry method as data: what the command service
/// ([`crate::server::commands::Service`]) asks of a registry its host reaches by round trips
/// (Redis, shared by many nodes). [`Registry::run`] runs one on the memory registry.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryCall {
    /// [`Registry::register`]: answered [`RegistryAnswer::Registered`].
    Register(Record),
    /// [`Registry::answer`]: answered [`RegistryAnswer::Matched`].
    Answer(AnswerKey, Answer),
    /// [`Registry::delivered`]: answered [`RegistryAnswer::Record`].
    Delivered(String),
    /// [`Registry::time_out`]: answered [`RegistryAnswer::Record`].
    TimeOut(String),
    /// [`Registry::orphan`]: answered [`RegistryAnswer::Record`].
    Orphan(String),
    /// The record of a command ([`Registry::get`], after forgetting old ones): answered
    /// [`RegistryAnswer::Record`].
    Get(String),
    /// [`Registry::define`]: answered [`RegistryAnswer::Done`] (whether it was stored).
    Define(Definition),
    /// [`Registry::definition`]: answered [`RegistryAnswer::Definition`].
    Definition(String),
    /// [`Registry::definitions`]: answered [`RegistryAnswer::Definitions`].
    Definitions,
    /// [`Registry::undefine`]: answered [`RegistryAnswer::Done`] (whether there was one).
    Undefine(String),
    /// Hands a settled record to the node whose caller waits for it ([`Record::node`]; on
    /// Redis, over pub/sub): answered [`RegistryAnswer::Done`], whether that node heard it.
    Forward(Record),
}

/// What a [`RegistryCall`] returned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegistryAnswer {
    /// [`RegistryCall::Register`].
    Registered(Result<(), CommandError>),
    /// [`RegistryCall::Answer`].
    Matched(Vec<(Matched, Record)>),
    /// [`RegistryCall::Delivered`], [`RegistryCall::TimeOut`], [`RegistryCall::Orphan`],
    /// [`RegistryCall::Get`].
    Record(Option<Record>),
    /// [`RegistryCall::Define`], [`RegistryCall::Undefine`], [`RegistryCall::Forward`].
    Done(bool),
    /// [`RegistryCall::Definition`].
    Definition(Option<Definition>),
    /// [`RegistryCall::Definitions`].
    Definitions(Vec<Definition>),
    /// The registry could not be reached or failed (the change may or may not have been made).
    Failed(String),
}

impl Registry {
    /// Runs `call` on this registry. One registry in memory serves one node: nothing is
    /// forwarded ([`RegistryCall::Forward`] answers that nobody heard it).
    pub fn run(&mut self, call: RegistryCall, now_ms: u64) -> RegistryAnswer {
        match call {
            RegistryCall::Register(record) => {
                RegistryAnswer::Registered(self.register(record, now_ms))
            }
            RegistryCall::Answer(key, answer) => {
                RegistryAnswer::Matched(self.answer(&key, answer, now_ms))
            }
            RegistryCall::Delivered(id) => RegistryAnswer::Record(self.delivered(&id, now_ms)),
            RegistryCall::TimeOut(id) => RegistryAnswer::Record(self.time_out(&id, now_ms)),
            RegistryCall::Orphan(id) => RegistryAnswer::Record(self.orphan(&id, now_ms)),
            RegistryCall::Get(id) => {
                self.forget(now_ms);
                RegistryAnswer::Record(self.get(&id).cloned())
            }
            RegistryCall::Define(definition) => RegistryAnswer::Done(self.define(definition)),
            RegistryCall::Definition(id) => {
                RegistryAnswer::Definition(self.definition(&id).cloned())
            }
            RegistryCall::Definitions => {
                RegistryAnswer::Definitions(self.definitions().cloned().collect())
            }
            RegistryCall::Undefine(id) => RegistryAnswer::Done(self.undefine(&id)),
            RegistryCall::Forward(_) => RegistryAnswer::Done(false),
        }
    }
}
