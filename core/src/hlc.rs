//! Hybrid logical clocks (spec §5): the versions of keys and the fencing tokens.
//!
//! The wall clock is always passed in (milliseconds since the Unix epoch), so the same code
//! runs under tokio, in a browser and in firmware. [`Clock`] is the small trait drivers use to
//! read it; [`ManualClock`] drives tests.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};

/// The highest counter a version may carry: one deployed client parses it as an `i32`.
pub const MAX_COUNTER: u32 = i32::MAX as u32;

/// How far ahead of the engine's wall clock a request's timestamp may be.
pub const MAX_SKEW_MS: u64 = 60_000;

/// Why an HLC could not be parsed, built or advanced.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HlcError {
    #[error("an HLC is `{{wall ms}}:{{counter}}:{{node id}}`: {0}")]
    /// The text is not `wall:counter:node` (what is wrong).
    Malformed(&'static str),
    #[error("a node id must not contain ':'")]
    /// The node id is empty or contains `:`.
    InvalidNodeId,
    #[error("the timestamp is more than {MAX_SKEW_MS} ms ahead of this clock")]
    /// A received time is too far ahead of this clock.
    TooFarAhead,
    #[error("the HLC counter would pass {MAX_COUNTER}")]
    /// The counter would pass its maximum within one millisecond.
    CounterOverflow,
}

/// A hybrid logical clock value: `{wall ms}:{counter}:{node id}`.
///
/// Ordered by wall clock, then counter, then node id bytes. Cloning is cheap (the node id is
/// shared).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Hlc {
    /// Milliseconds since the epoch of the clock that issued it.
    pub wall_ms: u64,
    /// The logical counter: orders versions of the same millisecond.
    pub counter: u32,
    /// The node (or client) that issued it.
    pub node: Arc<str>,
}

impl Hlc {
    /// Builds a value; the node id must not contain `:` and the counter must not pass
    /// [`MAX_COUNTER`].
    pub fn new(wall_ms: u64, counter: u32, node: impl Into<Arc<str>>) -> Result<Self, HlcError> {
        let node = node.into();
        if node.contains(':') {
            return Err(HlcError::InvalidNodeId);
        }
        if counter > MAX_COUNTER {
            return Err(HlcError::CounterOverflow);
        }
        Ok(Self {
            wall_ms,
            counter,
            node,
        })
    }

    /// Parses `wall:counter:node`, accepting any number of digits (writers pad, readers must
    /// not care).
    pub fn parse(text: &str) -> Result<Self, HlcError> {
        let (wall_ms, counter, node) = split(text)?;
        Ok(Self {
            wall_ms,
            counter,
            node: node.into(),
        })
    }

    /// Parses and checks `wall:counter:node` like [`Hlc::parse`], returning only the wall
    /// clock and counter, without allocating: all a clock needs to receive it.
    pub fn parse_logical(text: &str) -> Result<(u64, u32), HlcError> {
        split(text).map(|(wall_ms, counter, _)| (wall_ms, counter))
    }

    /// Whether this timestamp is too far ahead of `wall_ms` to be accepted.
    pub fn is_too_far_ahead_of(&self, wall_ms: u64) -> bool {
        self.wall_ms > wall_ms.saturating_add(MAX_SKEW_MS)
    }

    fn logical(&self) -> (u64, u32) {
        (self.wall_ms, self.counter)
    }
}

fn split(text: &str) -> Result<(u64, u32, &str), HlcError> {
    let mut parts = text.split(':');
    let (Some(wall), Some(counter), Some(node), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HlcError::Malformed("not three parts"));
    };
    let wall_ms = crate::codec::resp::parse_u64(wall.as_bytes())
        .ok_or(HlcError::Malformed("wall clock is not a decimal number"))?;
    let counter = crate::codec::resp::parse_u64(counter.as_bytes())
        .ok_or(HlcError::Malformed("counter is not a decimal number"))?;
    let counter = u32::try_from(counter)
        .ok()
        .filter(|c| *c <= MAX_COUNTER)
        .ok_or(HlcError::Malformed("counter is too large"))?;
    Ok((wall_ms, counter, node))
}

impl Ord for Hlc {
    fn cmp(&self, other: &Self) -> Ordering {
        self.logical()
            .cmp(&other.logical())
            .then_with(|| self.node.as_bytes().cmp(other.node.as_bytes()))
    }
}

impl PartialOrd for Hlc {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Hlc {
    /// The padded wire form: `001696374425000:00001:StateStore`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:0>15}:{:0>5}:{}",
            self.wall_ms, self.counter, self.node
        )
    }
}

impl fmt::Debug for Hlc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Hlc({self})")
    }
}

impl std::str::FromStr for Hlc {
    type Err = HlcError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// One node's hybrid logical clock. Every value it issues carries its node id and is greater
/// than every value it issued or received before.
#[derive(Debug, Clone)]
pub struct HlcClock {
    last: Hlc,
}

impl HlcClock {
    /// A clock for `node` (which must not contain `:`).
    pub fn new(node: impl Into<Arc<str>>) -> Result<Self, HlcError> {
        Ok(Self {
            last: Hlc::new(0, 0, node)?,
        })
    }

    /// This clock's node id.
    pub fn node(&self) -> &Arc<str> {
        &self.last.node
    }

    /// The latest value, pulled up to `wall_ms` if the wall clock is ahead; not a new event.
    pub fn current(&mut self, wall_ms: u64) -> Hlc {
        if wall_ms > self.last.wall_ms {
            self.last.wall_ms = wall_ms;
            self.last.counter = 0;
        }
        self.last.clone()
    }

    /// Makes every later value greater than `seen` (a version this node issued before a
    /// restart), however far ahead of the wall clock it is: unlike [`HlcClock::receive`], no
    /// skew limit, since it is this node's own past.
    pub fn witness(&mut self, seen: &Hlc) {
        if seen.logical() > self.last.logical() {
            (self.last.wall_ms, self.last.counter) = seen.logical();
        }
    }

    /// A new local event (the HLC send rule): a value greater than any before.
    pub fn tick(&mut self, wall_ms: u64) -> Result<Hlc, HlcError> {
        if wall_ms > self.last.wall_ms {
            self.last.wall_ms = wall_ms;
            self.last.counter = 0;
        } else {
            (self.last.wall_ms, self.last.counter) = next(self.last.wall_ms, self.last.counter)?;
        }
        Ok(self.last.clone())
    }

    /// Receives `remote` (the HLC receive rule): a value greater than both this clock's last
    /// value and `remote`. Rejects `remote` more than [`MAX_SKEW_MS`] ahead of `wall_ms`.
    pub fn receive(&mut self, remote: &Hlc, wall_ms: u64) -> Result<Hlc, HlcError> {
        self.receive_logical((remote.wall_ms, remote.counter), wall_ms)
    }

    /// [`HlcClock::receive`] given only the remote value's wall clock and counter (the node id
    /// plays no part in the rule), as [`Hlc::parse_logical`] returns them.
    pub fn receive_logical(&mut self, remote: (u64, u32), wall_ms: u64) -> Result<Hlc, HlcError> {
        let (remote_wall, remote_counter) = remote;
        if remote_wall > wall_ms.saturating_add(MAX_SKEW_MS) {
            return Err(HlcError::TooFarAhead);
        }
        let last = self.last.logical();
        let wall = wall_ms.max(last.0).max(remote_wall);
        (self.last.wall_ms, self.last.counter) = match (wall == last.0, wall == remote_wall) {
            (true, true) => next(wall, last.1.max(remote_counter))?,
            (true, false) => next(wall, last.1)?,
            (false, true) => next(wall, remote_counter)?,
            (false, false) => (wall, 0),
        };
        Ok(self.last.clone())
    }
}

/// The logical time right after `(wall, counter)`, as [`next`] gives it, saturating at the end
/// of time (which no wall clock reaches).
pub(crate) fn after(wall: u64, counter: u32) -> (u64, u32) {
    next(wall, counter).unwrap_or((wall, counter))
}

/// The logical time right after `(wall, counter)`. A counter at [`MAX_COUNTER`] (the protocol's
/// limit: one deployed client reads it as a 32-bit int) moves the clock 1 ms ahead instead,
/// which is still greater than everything before. Fails only at the end of time.
fn next(wall: u64, counter: u32) -> Result<(u64, u32), HlcError> {
    match counter.checked_add(1).filter(|c| *c <= MAX_COUNTER) {
        Some(counter) => Ok((wall, counter)),
        None => wall
            .checked_add(1)
            .map(|wall| (wall, 0))
            .ok_or(HlcError::CounterOverflow),
    }
}

/// A source of wall-clock time in milliseconds since the Unix epoch.
pub trait Clock {
    /// Now, in milliseconds since the epoch.
    fn now_ms(&self) -> u64;
}

/// The operating system's clock. Not on `wasm32-unknown-unknown`, where the driver reads
/// `Date.now()` and passes it in.
#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

#[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to, for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock that reads `now_ms` until told otherwise.
    pub fn new(now_ms: u64) -> Self {
        Self(AtomicU64::new(now_ms))
    }

    /// Sets the time.
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, AtomicOrdering::Relaxed);
    }

    /// Moves the time forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, AtomicOrdering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(AtomicOrdering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hlc(text: &str) -> Hlc {
        Hlc::parse(text).unwrap()
    }

    #[test]
    fn spec_example_receive() {
        // Client `__ts = 1696374425000:0:CLIENT`, clocks equal → `1696374425000:1:{node}`.
        let mut clock = HlcClock::new("StateStore").unwrap();
        let v = clock
            .receive(&hlc("1696374425000:0:CLIENT"), 1696374425000)
            .unwrap();
        assert_eq!(v.to_string(), "001696374425000:00001:StateStore");
    }

    #[test]
    fn receive_is_greater_than_both() {
        let mut clock = HlcClock::new("n").unwrap();
        let a = clock.tick(1000).unwrap();
        assert_eq!((a.wall_ms, a.counter), (1000, 0));
        let b = clock.receive(&hlc("1000:7:x"), 900).unwrap();
        assert_eq!((b.wall_ms, b.counter), (1000, 8));
        let c = clock.receive(&hlc("999:9:x"), 900).unwrap();
        assert_eq!((c.wall_ms, c.counter), (1000, 9));
        let d = clock.receive(&hlc("1500:3:x"), 1200).unwrap();
        assert_eq!((d.wall_ms, d.counter), (1500, 4));
        let e = clock.receive(&hlc("1:0:x"), 2000).unwrap();
        assert_eq!((e.wall_ms, e.counter), (2000, 0));
        assert!(a < b && b < c && c < d && d < e);
    }

    #[test]
    fn skew_is_sixty_seconds() {
        let mut clock = HlcClock::new("n").unwrap();
        assert!(clock.receive(&hlc("61000:0:x"), 1000).is_ok());
        assert_eq!(
            clock.receive(&hlc("61001:0:x"), 1000),
            Err(HlcError::TooFarAhead)
        );
    }

    #[test]
    fn a_counter_at_the_limit_moves_the_clock_a_millisecond_ahead() {
        let mut clock = HlcClock::new("n").unwrap();
        let top = Hlc::new(5, MAX_COUNTER, "x").unwrap();
        // Still greater than the remote value, with a counter a 32-bit reader can parse.
        let after = clock.receive(&top, 5).unwrap();
        assert_eq!(after.logical(), (6, 0));
        assert!(after > top);
        let mut clock = HlcClock::new("n").unwrap();
        clock
            .receive(&Hlc::new(5, MAX_COUNTER - 1, "x").unwrap(), 5)
            .unwrap();
        assert_eq!(clock.tick(5).unwrap().logical(), (6, 0));
        assert_eq!(clock.tick(5).unwrap().logical(), (6, 1));
        // The wall clock moving on resets the counter.
        assert_eq!(clock.tick(7).unwrap().counter, 0);
        // Only the end of time is an error.
        let end = Hlc::new(u64::MAX, MAX_COUNTER, "x").unwrap();
        assert_eq!(
            HlcClock::new("n").unwrap().receive(&end, u64::MAX),
            Err(HlcError::CounterOverflow)
        );
        assert!(Hlc::parse("1:2147483648:x").is_err());
        assert_eq!(
            Hlc::new(1, MAX_COUNTER + 1, "x"),
            Err(HlcError::CounterOverflow)
        );
    }

    #[test]
    fn current_does_not_tick() {
        let mut clock = HlcClock::new("n").unwrap();
        clock.tick(10).unwrap();
        let t = clock.tick(10).unwrap();
        assert_eq!(clock.current(10), t);
        assert_eq!(clock.current(11).logical(), (11, 0));
    }

    #[test]
    fn node_ids_cannot_hold_colons() {
        assert_eq!(HlcClock::new("a:b").unwrap_err(), HlcError::InvalidNodeId);
    }

    #[test]
    fn manual_clock() {
        let clock = ManualClock::new(5);
        clock.advance(10);
        assert_eq!(clock.now_ms(), 15);
        clock.set(1);
        assert_eq!(clock.now_ms(), 1);
        assert!(SystemClock.now_ms() > 1_600_000_000_000);
    }
}
