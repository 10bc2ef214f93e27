//! Calls in flight keyed by a token (correlation data, `clientToken`), with their deadlines:
//! the part every request/response client of mqstore shares.

use std::collections::HashMap;

use super::{CallId, ClientError};

#[derive(Debug)]
struct Waiting<T> {
    call: CallId,
    what: T,
    deadline: u64,
    timeout_ms: u64,
}

/// Calls waiting for their answers; `T` is what the caller needs to read an answer.
#[derive(Debug)]
pub(crate) struct Pending<T> {
    /// Random bytes that make tokens unique across runs and clients.
    seed: u64,
    next_call: u64,
    waiting: HashMap<String, Waiting<T>>,
}

impl<T> Pending<T> {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            seed,
            next_call: 0,
            waiting: HashMap::new(),
        }
    }

    /// A new call and its token (at most 37 characters).
    pub(crate) fn begin(&mut self) -> (CallId, String) {
        let call = CallId(self.next_call);
        self.next_call += 1;
        (call, format!("{:016x}-{}", self.seed, call.0))
    }

    /// Starts waiting for `token`'s answer until `timeout_ms` from now.
    pub(crate) fn wait(
        &mut self,
        token: String,
        call: CallId,
        what: T,
        timeout_ms: u64,
        now_ms: u64,
    ) {
        let waiting = Waiting {
            call,
            what,
            deadline: now_ms.saturating_add(timeout_ms),
            timeout_ms,
        };
        self.waiting.insert(token, waiting);
    }

    /// The call waiting for `token`, which an answer ends.
    pub(crate) fn take(&mut self, token: &str) -> Option<(CallId, T)> {
        self.waiting.remove(token).map(|w| (w.call, w.what))
    }

    pub(crate) fn len(&self) -> usize {
        self.waiting.len()
    }

    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.waiting.values().map(|w| w.deadline).min()
    }

    /// The calls whose timeout has passed, failed with [`ClientError::Timeout`], in call order.
    pub(crate) fn expire(&mut self, now_ms: u64) -> Vec<(CallId, T, ClientError)> {
        self.fail(&|w| (w.deadline <= now_ms).then_some(ClientError::Timeout(w.timeout_ms)))
    }

    /// Call `call`, failed with `error` (the broker refused its publish).
    pub(crate) fn fail_call(
        &mut self,
        call: CallId,
        error: ClientError,
    ) -> Option<(CallId, T, ClientError)> {
        self.fail(&|w| (w.call == call).then(|| error.clone()))
            .pop()
    }

    /// Every call, failed with `error` (the connection dropped).
    pub(crate) fn fail_all(&mut self, error: ClientError) -> Vec<(CallId, T, ClientError)> {
        self.fail(&|_| Some(error.clone()))
    }

    // `dyn`: one copy of this (and of its sort) for every caller, not one per closure.
    fn fail(
        &mut self,
        error: &dyn Fn(&Waiting<T>) -> Option<ClientError>,
    ) -> Vec<(CallId, T, ClientError)> {
        let failing: Vec<(String, ClientError)> = self
            .waiting
            .iter()
            .filter_map(|(token, w)| error(w).map(|e| (token.clone(), e)))
            .collect();
        let mut failed: Vec<_> = failing
            .into_iter()
            .filter_map(|(token, e)| self.waiting.remove(&token).map(|w| (w.call, w.what, e)))
            .collect();
        failed.sort_by_key(|(call, _, _)| *call);
        failed
    }
}
