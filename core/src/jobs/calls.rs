//! The jobs store's methods as data: a [`StoreCall`] names one [`JobsStore`] method with its
//! arguments, a [`StoreAnswer`] holds what it returned. With them the engine runs on a store
//! the host reaches however it likes — on Redis, from the node's own event loop, with no
//! thread waiting for a round trip:
//!
//! * [`Calls`] is a [`JobsStore`] made of something that answers calls ([`Answers`]): each
//!   method becomes one call and its answer is unpacked;
//! * [`Replay`] answers from the answers it was given so far and, at the first call it has no
//!   answer for, records that call and fails the run (see [`Replay`]);
//! * [`StoreCall::run`] runs a call on any [`JobsStore`] (the memory store, a test's store).

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::model::{Job, StoreError, Stored};
use super::store::{Counts, Entries, JobsStore, Rollout, Tally, ThingRecord, ThingWrite};

/// One [`JobsStore`] method and its arguments.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StoreCall {
    /// [`JobsStore::job`].
    Job(String),
    /// [`JobsStore::insert_job`].
    InsertJob(Box<Job>, Vec<String>),
    /// [`JobsStore::put_job`].
    PutJob(Box<Job>),
    /// [`JobsStore::delete_job`].
    DeleteJob(String),
    /// [`JobsStore::job_ids`].
    JobIds,
    /// [`JobsStore::job_things`].
    JobThings(String, u64, u64),
    /// [`JobsStore::counts`].
    Counts(String),
    /// [`JobsStore::thing`].
    Thing(String),
    /// [`JobsStore::thing_records`].
    ThingRecords(Vec<String>),
    /// [`JobsStore::put_thing`].
    PutThing(String, ThingRecord, Tally),
    /// [`JobsStore::put_things`].
    PutThings(Vec<ThingWrite>),
    /// [`JobsStore::things`].
    Things,
    /// [`JobsStore::due`].
    Due(u64),
    /// [`JobsStore::next_deadline`].
    NextDeadline,
    /// [`JobsStore::rollouts`].
    Rollouts,
    /// [`JobsStore::take_rollout`].
    TakeRollout(String, u64, u64, Option<Box<Job>>),
    /// [`JobsStore::stop_rollout`].
    StopRollout(String),
    /// [`JobsStore::add_job_things`].
    AddJobThings(String, Vec<String>),
    /// [`JobsStore::entry`].
    Entry(String, String),
    /// [`JobsStore::put_entry`].
    PutEntry(String, String, Option<Vec<u8>>, bool),
    /// [`JobsStore::swap_entry`]: table, name, expected, value.
    SwapEntry(String, String, Option<Vec<u8>>, Vec<u8>),
    /// [`JobsStore::entries`].
    Entries(String, Option<String>, u64),
    /// [`JobsStore::drop_table`].
    DropTable(String),
}

/// What a [`StoreCall`] returned, by the method's return type.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StoreAnswer {
    /// [`StoreCall::Job`].
    Job(Stored<Option<Arc<Job>>>),
    /// A write that says whether it happened (insert, put, put entry, stop a rollout).
    Written(Stored<bool>),
    /// A write that returns nothing.
    Done(Stored<()>),
    /// Job ids, a job's things, every thing.
    Names(Stored<Vec<String>>),
    /// [`StoreCall::Counts`].
    Counts(Stored<Counts>),
    /// [`StoreCall::Thing`].
    Thing(Stored<Arc<ThingRecord>>),
    /// [`StoreCall::ThingRecords`].
    ThingRecords(Stored<Vec<Arc<ThingRecord>>>),
    /// [`StoreCall::PutThings`]: one result per write.
    WrittenEach(Vec<Stored<bool>>),
    /// [`StoreCall::Due`].
    Due(Stored<Vec<(String, String)>>),
    /// [`StoreCall::NextDeadline`].
    NextDeadline(Stored<Option<u64>>),
    /// [`StoreCall::Rollouts`].
    Rollouts(Stored<Vec<Rollout>>),
    /// [`StoreCall::TakeRollout`].
    Taken(Stored<Option<Vec<String>>>),
    /// [`StoreCall::Entry`].
    Entry(Stored<Option<Vec<u8>>>),
    /// [`StoreCall::Entries`].
    Entries(Stored<Entries>),
}

impl StoreCall {
    /// Runs the call on `store`.
    pub fn run(self, store: &mut dyn JobsStore) -> StoreAnswer {
        use StoreAnswer as A;
        match self {
            Self::Job(id) => A::Job(store.job(&id)),
            Self::InsertJob(job, things) => A::Written(store.insert_job(*job, &things)),
            Self::PutJob(job) => A::Written(store.put_job(*job)),
            Self::DeleteJob(id) => A::Written(store.delete_job(&id)),
            Self::JobIds => A::Names(store.job_ids()),
            Self::JobThings(id, from, count) => A::Names(store.job_things(&id, from, count)),
            Self::Counts(id) => A::Counts(store.counts(&id)),
            Self::Thing(thing) => A::Thing(store.thing(&thing)),
            Self::ThingRecords(things) => A::ThingRecords(store.thing_records(&things)),
            Self::PutThing(thing, record, tally) => {
                A::Written(store.put_thing(&thing, record, &tally))
            }
            Self::PutThings(writes) => A::WrittenEach(store.put_things(writes)),
            Self::Things => A::Names(store.things()),
            Self::Due(now_ms) => A::Due(store.due(now_ms)),
            Self::NextDeadline => A::NextDeadline(store.next_deadline()),
            Self::Rollouts => A::Rollouts(store.rollouts()),
            Self::TakeRollout(id, from, count, job) => {
                A::Taken(store.take_rollout(&id, from, count, job.map(|job| *job)))
            }
            Self::StopRollout(id) => A::Written(store.stop_rollout(&id)),
            Self::AddJobThings(id, things) => A::Done(store.add_job_things(&id, &things)),
            Self::Entry(table, name) => A::Entry(store.entry(&table, &name)),
            Self::PutEntry(table, name, value, create) => {
                A::Written(store.put_entry(&table, &name, value.as_deref(), create))
            }
            Self::SwapEntry(table, name, expected, value) => {
                A::Written(store.swap_entry(&table, &name, expected.as_deref(), &value))
            }
            Self::Entries(table, after, count) => {
                A::Entries(store.entries(&table, after.as_deref(), count))
            }
            Self::DropTable(table) => A::Done(store.drop_table(&table)),
        }
    }
}

impl StoreAnswer {
    /// The answer every call gets when its store fails with `error`.
    pub fn failed(call: &StoreCall, error: StoreError) -> Self {
        use StoreCall as C;
        match call {
            C::Job(_) => Self::Job(Err(error)),
            C::InsertJob(..)
            | C::PutJob(_)
            | C::PutThing(..)
            | C::PutEntry(..)
            | C::SwapEntry(..)
            | C::StopRollout(_)
            | C::DeleteJob(_) => Self::Written(Err(error)),
            C::AddJobThings(..) | C::DropTable(_) => Self::Done(Err(error)),
            C::JobIds | C::JobThings(..) | C::Things => Self::Names(Err(error)),
            C::Counts(_) => Self::Counts(Err(error)),
            C::Thing(_) => Self::Thing(Err(error)),
            C::ThingRecords(_) => Self::ThingRecords(Err(error)),
            C::PutThings(writes) => Self::WrittenEach(vec![Err(error); writes.len()]),
            C::Due(_) => Self::Due(Err(error)),
            C::NextDeadline => Self::NextDeadline(Err(error)),
            C::Rollouts => Self::Rollouts(Err(error)),
            C::TakeRollout(..) => Self::Taken(Err(error)),
            C::Entry(..) => Self::Entry(Err(error)),
            C::Entries(..) => Self::Entries(Err(error)),
        }
    }
}

/// Something that answers store calls. The call comes as a closure that makes it, so an
/// answerer that already has the answer (a [`Replay`]) never builds the call's arguments.
pub trait Answers {
    /// The answer to the call `call` makes.
    fn answer(&self, call: impl FnOnce() -> StoreCall) -> StoreAnswer;
}

/// A [`JobsStore`] whose every method is one call to `A`.
#[derive(Debug, Default)]
pub struct Calls<A>(pub A);

/// The answer of a store that answered another method than the one called.
fn mismatch(answer: &StoreAnswer) -> StoreError {
    StoreError(format!("the store answered another call: {answer:?}"))
}

/// Unpacks `answer` as the `variant` the call expects.
macro_rules! unpack {
    ($answer:expr, $variant:ident) => {
        match $answer {
            StoreAnswer::$variant(result) => result,
            other => Err(mismatch(&other)),
        }
    };
}

impl<A: Answers> JobsStore for Calls<A> {
    fn job(&self, job_id: &str) -> Stored<Option<Arc<Job>>> {
        unpack!(self.0.answer(|| StoreCall::Job(job_id.into())), Job)
    }

    fn insert_job(&mut self, job: Job, things: &[String]) -> Stored<bool> {
        unpack!(
            self.0
                .answer(|| StoreCall::InsertJob(Box::new(job), things.to_vec())),
            Written
        )
    }

    fn put_job(&mut self, job: Job) -> Stored<bool> {
        unpack!(self.0.answer(|| StoreCall::PutJob(Box::new(job))), Written)
    }

    fn delete_job(&mut self, job_id: &str) -> Stored<bool> {
        unpack!(
            self.0.answer(|| StoreCall::DeleteJob(job_id.into())),
            Written
        )
    }

    fn job_ids(&self) -> Stored<Vec<String>> {
        unpack!(self.0.answer(|| StoreCall::JobIds), Names)
    }

    fn job_things(&self, job_id: &str, from: u64, count: u64) -> Stored<Vec<String>> {
        unpack!(
            self.0
                .answer(|| StoreCall::JobThings(job_id.into(), from, count)),
            Names
        )
    }

    fn counts(&self, job_id: &str) -> Stored<Counts> {
        unpack!(self.0.answer(|| StoreCall::Counts(job_id.into())), Counts)
    }

    fn thing(&self, thing: &str) -> Stored<Arc<ThingRecord>> {
        unpack!(self.0.answer(|| StoreCall::Thing(thing.into())), Thing)
    }

    fn thing_records(&self, things: &[String]) -> Stored<Vec<Arc<ThingRecord>>> {
        unpack!(
            self.0.answer(|| StoreCall::ThingRecords(things.to_vec())),
            ThingRecords
        )
    }

    fn put_thing(&mut self, thing: &str, record: ThingRecord, tally: &Tally) -> Stored<bool> {
        unpack!(
            self.0
                .answer(|| StoreCall::PutThing(thing.into(), record, tally.clone())),
            Written
        )
    }

    fn put_things(&mut self, writes: Vec<ThingWrite>) -> Vec<Stored<bool>> {
        let count = writes.len();
        match self.0.answer(|| StoreCall::PutThings(writes)) {
            StoreAnswer::WrittenEach(results) if results.len() == count => results,
            other => vec![Err(mismatch(&other)); count],
        }
    }

    fn things(&self) -> Stored<Vec<String>> {
        unpack!(self.0.answer(|| StoreCall::Things), Names)
    }

    fn due(&self, now_ms: u64) -> Stored<Vec<(String, String)>> {
        unpack!(self.0.answer(|| StoreCall::Due(now_ms)), Due)
    }

    fn next_deadline(&self) -> Stored<Option<u64>> {
        unpack!(self.0.answer(|| StoreCall::NextDeadline), NextDeadline)
    }

    fn rollouts(&self) -> Stored<Vec<Rollout>> {
        unpack!(self.0.answer(|| StoreCall::Rollouts), Rollouts)
    }

    fn take_rollout(
        &mut self,
        job_id: &str,
        from: u64,
        count: u64,
        job: Option<Job>,
    ) -> Stored<Option<Vec<String>>> {
        unpack!(
            self.0
                .answer(|| StoreCall::TakeRollout(job_id.into(), from, count, job.map(Box::new))),
            Taken
        )
    }

    fn stop_rollout(&mut self, job_id: &str) -> Stored<bool> {
        unpack!(
            self.0.answer(|| StoreCall::StopRollout(job_id.into())),
            Written
        )
    }

    fn add_job_things(&mut self, job_id: &str, things: &[String]) -> Stored<()> {
        unpack!(
            self.0
                .answer(|| StoreCall::AddJobThings(job_id.into(), things.to_vec())),
            Done
        )
    }

    fn entry(&self, table: &str, name: &str) -> Stored<Option<Vec<u8>>> {
        unpack!(
            self.0
                .answer(|| StoreCall::Entry(table.into(), name.into())),
            Entry
        )
    }

    fn put_entry(
        &mut self,
        table: &str,
        name: &str,
        value: Option<&[u8]>,
        create: bool,
    ) -> Stored<bool> {
        unpack!(
            self.0.answer(|| StoreCall::PutEntry(
                table.into(),
                name.into(),
                value.map(<[u8]>::to_vec),
                create
            )),
            Written
        )
    }

    fn swap_entry(
        &mut self,
        table: &str,
        name: &str,
        expected: Option<&[u8]>,
        value: &[u8],
    ) -> Stored<bool> {
        unpack!(
            self.0.answer(|| StoreCall::SwapEntry(
                table.into(),
                name.into(),
                expected.map(<[u8]>::to_vec),
                value.to_vec()
            )),
            Written
        )
    }

    fn entries(&self, table: &str, after: Option<&str>, count: u64) -> Stored<Entries> {
        unpack!(
            self.0
                .answer(|| StoreCall::Entries(table.into(), after.map(Into::into), count)),
            Entries
        )
    }

    fn drop_table(&mut self, table: &str) -> Stored<()> {
        unpack!(self.0.answer(|| StoreCall::DropTable(table.into())), Done)
    }
}

/// The engine run as a replay: each run of a request (or tick) goes from its start, the
/// store calls answered so far are answered again from what the host gave, and the first call
/// without an answer is kept ([`Replay::take_call`]) and fails the run — whose output the
/// host drops. The host runs that call on its store, gives the answer
/// ([`Replay::answered`]), and runs the request again, until a run asks for nothing new.
///
/// The engine is deterministic (the same request, time and answers make the same calls), so
/// every store call runs exactly once and in the order the engine made it, as with a store it
/// waits on — the host only never waits. A request makes a handful of calls, so running it
/// again after each costs microseconds against a round trip's fraction of a millisecond.
#[derive(Debug, Default)]
pub struct Replay {
    answers: Vec<StoreAnswer>,
    /// The next answer this run gives.
    next: Cell<usize>,
    /// The first call of this run without an answer.
    call: RefCell<Option<StoreCall>>,
}

/// What a call the replay has no answer for fails with (the run's output is dropped).
const NOT_ANSWERED_YET: &str = "not answered yet (a replay runs again once it is)";

impl Replay {
    /// Starts a run again from the first answer.
    pub fn rewind(&mut self) {
        self.next.set(0);
        *self.call.get_mut() = None;
    }

    /// The call the last run stopped at, if it stopped at one (then its output is void).
    pub fn take_call(&mut self) -> Option<StoreCall> {
        self.call.get_mut().take()
    }

    /// The answer to the call the last run stopped at.
    pub fn answered(&mut self, answer: StoreAnswer) {
        self.answers.push(answer);
    }

    /// How many calls have been answered.
    pub fn calls(&self) -> usize {
        self.answers.len()
    }
}

impl Answers for Replay {
    fn answer(&self, call: impl FnOnce() -> StoreCall) -> StoreAnswer {
        let next = self.next.get();
        self.next.set(next + 1);
        if let Some(answer) = self.answers.get(next) {
            return answer.clone();
        }
        let call = call();
        let failed = StoreAnswer::failed(&call, StoreError(NOT_ANSWERED_YET.into()));
        let mut first = self.call.borrow_mut();
        if first.is_none() {
            *first = Some(call);
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_answers_the_calls_it_has_and_stops_at_the_first_it_has_not() {
        let mut store = Calls(Replay::default());
        let missing = store.thing("t").unwrap_err();
        assert_eq!(missing.0, NOT_ANSWERED_YET);
        // A later call of the same run is not the one kept.
        assert!(store.job("j").is_err());
        assert_eq!(store.0.take_call(), Some(StoreCall::Thing("t".into())));

        let record = Arc::new(ThingRecord::default());
        store.0.answered(StoreAnswer::Thing(Ok(record.clone())));
        store.0.rewind();
        assert_eq!(store.thing("t"), Ok(record));
        assert!(store.job("j").is_err());
        assert_eq!(store.0.take_call(), Some(StoreCall::Job("j".into())));
        assert_eq!(store.0.calls(), 1);
    }

    #[test]
    fn an_answer_to_another_call_is_an_error_not_a_wrong_value() {
        let mut store = Calls(Replay::default());
        store.0.answered(StoreAnswer::Written(Ok(true)));
        let error = store.thing("t").unwrap_err();
        assert!(error.0.contains("another call"), "{error}");
        store.0.rewind();
        let writes = vec![ThingWrite {
            thing: "t".into(),
            record: ThingRecord::default(),
            tally: Tally::new(),
        }];
        assert!(matches!(&store.put_things(writes)[..], [Err(_)]));
    }
}
