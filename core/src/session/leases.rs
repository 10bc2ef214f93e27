//! Leases inside the session: claim; wait for the holder's deletion or the retry period;
//! renew a third of the ttl after each claim's answer; lost when a renewal is refused or not
//! confirmed before the lease would lapse; released on request. The requests are the
//! protocol's ([`LeaseTerms`]); this module decides when to send them and what their answers
//! mean, and the session sends them through its state store client.

use crate::client::{Answer, CallId, ClientError};
use crate::hlc::Hlc;
use crate::lease::LeaseTerms;

/// One lease of the session: being acquired, or held.
#[derive(Debug)]
pub(super) struct Lease {
    /// The session's id for it: the id of the call that acquires it.
    pub id: CallId,
    pub terms: LeaseTerms,
    pub phase: Phase,
    /// Whether it observes its key for the holder's deletion (while waiting to acquire).
    pub observing: bool,
}

#[derive(Debug)]
pub(super) enum Phase {
    /// Not held yet: a claim in flight (`claim`), or waiting for the key's deletion or
    /// `retry_at`, until `give_up_at` (`None`: until held).
    Acquiring {
        claim: Option<CallId>,
        retry_at: u64,
        give_up_at: Option<u64>,
    },
    /// Held with fencing token `token`: renewed at `renew_at` (a renewal in flight:
    /// `renewal`), lost unless a renewal is confirmed before `lapses_at`.
    Held {
        token: Hlc,
        renew_at: u64,
        lapses_at: u64,
        renewal: Option<CallId>,
    },
}

/// What a lease's state change means for the session.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// Nothing to report or send.
    Quiet,
    /// Send a claim now.
    Claim,
    /// Start observing the key (it waits for a deletion).
    Wait,
    /// The acquisition ended: held with this token, or `None` (someone else holds it).
    Acquired(Option<Hlc>),
    /// The acquisition failed.
    Failed(ClientError),
    /// A renewal was confirmed (the renewing SET's version).
    Renewed(Hlc),
    /// Someone else holds it now, or no renewal was confirmed in time.
    Lost,
}

impl Lease {
    /// A lease to acquire now, waiting `wait_ms` at most for its holder (`None`: until held;
    /// 0: one claim).
    pub(super) fn new(id: CallId, terms: LeaseTerms, wait_ms: Option<u64>, now_ms: u64) -> Self {
        Self {
            id,
            terms,
            phase: Phase::Acquiring {
                claim: None,
                retry_at: now_ms,
                give_up_at: wait_ms.map(|w| now_ms.saturating_add(w)),
            },
            observing: false,
        }
    }

    /// A claim went out as store call `call`.
    pub(super) fn claiming(&mut self, call: CallId) {
        match &mut self.phase {
            Phase::Acquiring { claim, .. } => *claim = Some(call),
            Phase::Held { renewal, .. } => *renewal = Some(call),
        }
    }

    /// Whether store call `call` is this lease's claim in flight.
    pub(super) fn waits_for(&self, call: CallId) -> bool {
        match self.phase {
            Phase::Acquiring { claim, .. } => claim == Some(call),
            Phase::Held { renewal, .. } => renewal == Some(call),
        }
    }

    /// The answer to its claim, sent at `sent_ms`.
    pub(super) fn answered(
        &mut self,
        result: Result<Answer, ClientError>,
        sent_ms: u64,
        now_ms: u64,
    ) -> Step {
        let ttl = self.terms.ttl_ms();
        let renew_every = self.terms.renew_every_ms();
        let claimed = result.map(|a| LeaseTerms::claimed(a.applied(), a.version));
        match &mut self.phase {
            Phase::Acquiring {
                claim,
                retry_at,
                give_up_at,
            } => match claimed {
                Ok(Some(token)) => {
                    self.phase = Phase::Held {
                        token: token.clone(),
                        renew_at: now_ms + renew_every,
                        lapses_at: sent_ms + ttl,
                        renewal: None,
                    };
                    Step::Acquired(Some(token))
                }
                Ok(None) if give_up_at.is_some_and(|g| now_ms >= g) => Step::Acquired(None),
                Ok(None) => {
                    *claim = None;
                    let retry = now_ms + self.terms.retry_after_ms();
                    *retry_at = give_up_at.map_or(retry, |g| retry.min(g));
                    Step::Wait
                }
                Err(e) => Step::Failed(e),
            },
            Phase::Held {
                renew_at,
                lapses_at,
                renewal,
                ..
            } => {
                *renewal = None;
                match claimed {
                    Ok(Some(version)) => {
                        *renew_at = now_ms + renew_every;
                        *lapses_at = sent_ms + ttl;
                        Step::Renewed(version)
                    }
                    Ok(None) => Step::Lost,
                    // Tried again at the next period, unless it lapses first.
                    Err(_) => {
                        *renew_at = (now_ms + renew_every).min(*lapses_at);
                        Step::Quiet
                    }
                }
            }
        }
    }

    /// Its key was deleted: a waiting claimant tries at once.
    pub(super) fn key_deleted(&self) -> Step {
        match self.phase {
            Phase::Acquiring { claim: None, .. } => Step::Claim,
            _ => Step::Quiet,
        }
    }

    /// What the time `now_ms` asks of it.
    pub(super) fn expire(&self, now_ms: u64) -> Step {
        match self.phase {
            // The last retry is at the give-up time (retry_at ≤ give_up_at): its refusal ends
            // the acquisition (`answered`).
            Phase::Acquiring {
                claim: None,
                retry_at,
                ..
            } if retry_at <= now_ms => Step::Claim,
            Phase::Acquiring { .. } => Step::Quiet,
            Phase::Held {
                renew_at,
                lapses_at,
                renewal,
                ..
            } => match (lapses_at <= now_ms, renewal, renew_at <= now_ms) {
                (true, _, _) => Step::Lost,
                (false, None, true) => Step::Claim,
                _ => Step::Quiet,
            },
        }
    }

    /// When it next needs [`Lease::expire`].
    pub(super) fn deadline(&self) -> Option<u64> {
        match self.phase {
            Phase::Acquiring {
                claim: None,
                retry_at,
                ..
            } => Some(retry_at),
            Phase::Acquiring { claim: Some(_), .. } => None,
            Phase::Held {
                renew_at,
                lapses_at,
                renewal: None,
                ..
            } => Some(renew_at.min(lapses_at)),
            Phase::Held { lapses_at, .. } => Some(lapses_at),
        }
    }

    /// Its fencing token, while held.
    pub(super) fn token(&self) -> Option<&Hlc> {
        match &self.phase {
            Phase::Held { token, .. } => Some(token),
            Phase::Acquiring { .. } => None,
        }
    }

    /// Whether it is held (and so can be released).
    pub(super) fn is_held(&self) -> bool {
        matches!(self.phase, Phase::Held { .. })
    }
}
