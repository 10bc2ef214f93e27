//! One task drives an MQTT connection and the state machine beside it (the server's engine,
//! the client's [`ClientCore`](mqstore_core::client::ClientCore)).
//!
//! rumqttc's `EventLoop::poll` is not cancellation safe: a poll that loses a `select!` race
//! can lose a request half-written. Handing every event to another task through a channel
//! avoids that but costs a wake-up and a move per event. Instead, [`Connection::next`] keeps the
//! poll future alive across its `select!` and serves, meanwhile, the owner's other wake-ups
//! (commands, shutdown), the state machine's next deadline, and the reconnect backoff. Nothing
//! awaits while a poll is pending: what handlers publish goes to an [`Outbox`], which hands it
//! to rumqttc without waiting and keeps, in order, what does not fit yet.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, EventLoop};
use tokio::time::{Instant, Sleep};
use tracing::warn;

use crate::{Polled, Queued, backoff, now_ms, try_publish};
use mqstore_core::envelope::Publish;

/// What the owner of a connection does besides handling its events.
pub trait Driver {
    /// Something other than the connection that wants attention.
    type Wake;
    /// The state machine's next deadline, in ms since the epoch.
    fn deadline(&self) -> Option<u64>;
    /// The deadline has passed.
    fn on_deadline(&mut self, now_ms: u64);
    /// Handles a wake-up; `false` stops the connection.
    fn on_wake(&mut self, wake: Self::Wake) -> bool;
    /// Handles what a poll of the connection gave; `false` stops the connection.
    fn on_polled(&mut self, polled: Polled) -> bool;
}

/// A source of wake-ups other than the connection: commands from handles, a shutdown signal.
pub trait Wakes {
    /// What woke the task.
    type Wake;
    /// The next wake-up. Must be cancellation safe: it loses races against the connection.
    fn next(&mut self) -> impl Future<Output = Self::Wake>;
}

/// An MQTT connection, with the timers of the task that drives it.
pub struct Connection {
    eventloop: EventLoop,
    /// Fires at the driver's deadline, when `armed`.
    deadline: Pin<Box<Sleep>>,
    armed: Option<u64>,
    /// Fires when the next connection attempt is due, while `backing_off`.
    retry: Pin<Box<Sleep>>,
    backing_off: bool,
    /// Failed attempts in a row (connections that dropped within [`STABLE`] included).
    failures: u32,
    /// When the current connection's CONNACK arrived.
    connected_at: Option<Instant>,
}

/// A connection that lasted this long resets the backoff: one that drops sooner (a broker
/// that refuses what we send at once) counts as a failed attempt, so there is no tight loop,
/// while a broker that restarts after a good connection is tried again at once.
const STABLE: Duration = Duration::from_secs(2);

impl Connection {
    /// A connection over rumqttc's event loop (not yet polled).
    pub fn new(eventloop: EventLoop) -> Self {
        Self {
            eventloop,
            deadline: Box::pin(tokio::time::sleep(Duration::ZERO)),
            armed: None,
            retry: Box::pin(tokio::time::sleep(Duration::ZERO)),
            backing_off: false,
            failures: 0,
            connected_at: None,
        }
    }

    /// Drives the connection and `driver` until the driver stops.
    pub async fn run<D: Driver>(mut self, wakes: &mut impl Wakes<Wake = D::Wake>, driver: &mut D) {
        while let Some(polled) = self.next(wakes, driver).await {
            if !driver.on_polled(polled) {
                return;
            }
        }
    }

    /// The connection's next event, serving `wakes` and the driver's deadline meanwhile; `None`
    /// once the driver asks to stop. After a failed poll (rumqttc reconnects on the next one)
    /// the next attempt waits: 100 ms, doubling, at most 5 s, until a connection lasts 2 s.
    async fn next<D: Driver>(
        &mut self,
        wakes: &mut impl Wakes<Wake = D::Wake>,
        driver: &mut D,
    ) -> Option<Polled> {
        let Self {
            eventloop,
            deadline,
            armed,
            retry,
            backing_off,
            failures,
            connected_at,
        } = self;
        // Created once and kept until it completes: never dropped half-way.
        let poll = eventloop.poll();
        tokio::pin!(poll);
        loop {
            let due = driver.deadline();
            if due != *armed {
                *armed = due;
                if let Some(due) = due {
                    let wait = Duration::from_millis(due.saturating_sub(now_ms()));
                    deadline.as_mut().reset(Instant::now() + wait);
                }
            }
            tokio::select! {
                biased;
                polled = &mut poll, if !*backing_off => {
                    match &polled {
                        Ok(Event::Incoming(Packet::ConnAck(_))) => *connected_at = Some(Instant::now()),
                        Ok(_) => {}
                        Err(_) => {
                            // A connection that dropped soon after it came up (a broker that
                            // refuses what we send) counts as a failure too: no tight loop.
                            if connected_at.take().is_some_and(|at| at.elapsed() >= STABLE) {
                                *failures = 0;
                            }
                            retry.as_mut().reset(Instant::now() + backoff(*failures));
                            *backing_off = true;
                            *failures = failures.saturating_add(1);
                        }
                    }
                    return Some(polled);
                }
                _ = retry.as_mut(), if *backing_off => *backing_off = false,
                _ = deadline.as_mut(), if armed.is_some() => {
                    *armed = None;
                    driver.on_deadline(now_ms());
                }
                wake = wakes.next() => {
                    if !driver.on_wake(wake) {
                        return None;
                    }
                }
            }
        }
    }
}

/// Publishes rumqttc took, until their PUBACKs: each with its tag (`None`: nobody waits for its
/// acknowledgement), matched to its packet id when rumqttc reports it sent (in the order it
/// took them), then to its PUBACK. The one PUBACK tracker of every host of a connection: the
/// client's task, the server node, the commander.
#[derive(Debug)]
pub struct Unacked<T> {
    /// Taken by rumqttc, not yet sent.
    taken: VecDeque<Option<T>>,
    /// Sent with a packet id, oldest first.
    sent: VecDeque<(u16, Option<T>)>,
}

impl<T> Default for Unacked<T> {
    fn default() -> Self {
        Self {
            taken: VecDeque::new(),
            sent: VecDeque::new(),
        }
    }
}

impl<T> Unacked<T> {
    /// rumqttc took a publish (the [`Outbox`]'s callback), in order.
    pub fn taken(&mut self, tag: Option<T>) {
        self.taken.push_back(tag);
    }

    /// rumqttc sent the oldest publish it took, as packet `pkid` (0: QoS 0, no PUBACK comes).
    pub fn on_sent(&mut self, pkid: u16) {
        let tag = self.taken.pop_front().flatten();
        if pkid != 0 {
            self.sent.push_back((pkid, tag));
        }
    }

    /// The tag of the publish the PUBACK of packet `pkid` acknowledges (usually the oldest).
    pub fn on_acked(&mut self, pkid: u16) -> Option<T> {
        let at = self.sent.iter().position(|(id, _)| *id == pkid)?;
        self.sent.remove(at).and_then(|(_, tag)| tag)
    }

    /// The oldest publish waiting for its PUBACK: the one an acknowledgement rumqttc could not
    /// read was for (a broker acknowledges QoS 1 publishes in the order it received them).
    pub fn oldest(&self) -> Option<&T> {
        self.sent.front().and_then(|(_, tag)| tag.as_ref())
    }

    /// Publishes taken and not acknowledged yet (sent or not).
    pub fn len(&self) -> usize {
        self.taken.len() + self.sent.len()
    }

    /// Whether every publish taken was acknowledged.
    pub fn is_empty(&self) -> bool {
        self.taken.is_empty() && self.sent.is_empty()
    }

    /// The connection is gone: the tags still waiting, oldest first (their PUBACKs will not
    /// come; with a clean start rumqttc sends nothing again).
    pub fn lost(&mut self) -> Vec<T> {
        let sent = self.sent.drain(..).filter_map(|(_, tag)| tag);
        sent.chain(self.taken.drain(..).flatten()).collect()
    }
}

/// Publishes on their way to the broker, in order. Each carries a tag the owner gets back
/// once rumqttc has taken the publish (the server notes which client a notification is for).
pub struct Outbox<T = ()> {
    client: AsyncClient,
    /// Each publish, its tag, and whether it is retained.
    backlog: VecDeque<(Publish, T, bool)>,
    /// Nothing is handed over while the connection is down (see [`Outbox::hold`]).
    held: bool,
}

impl<T> Outbox<T> {
    /// An empty outbox on the connection's handle.
    pub fn new(client: AsyncClient) -> Self {
        Self {
            client,
            backlog: VecDeque::new(),
            held: false,
        }
    }

    /// The connection dropped: keep everything here until [`Outbox::resume`]. rumqttc, with a
    /// clean start, drops what it holds at the reconnect (what it had taken before the drop),
    /// but sends what it takes after the drop; kept here, what is pushed meanwhile waits
    /// behind what the owner sends again ([`Outbox::requeue`]), and the owner's count of what
    /// rumqttc took stays true.
    /// Whether it was not held before.
    pub fn hold(&mut self) -> bool {
        !std::mem::replace(&mut self.held, true)
    }

    /// Connected again: hands over what waits.
    pub fn resume(&mut self, taken: impl FnMut(T)) {
        self.held = false;
        self.flush(taken);
    }

    /// Puts publishes that were lost with the connection back at the front, oldest first,
    /// ahead of everything pushed since.
    pub fn requeue(&mut self, lost: impl DoubleEndedIterator<Item = (Publish, T)>) {
        for (message, tag) in lost.rev() {
            self.backlog.push_front((message, tag, false));
        }
    }

    /// The connection's handle, for subscribing and disconnecting.
    pub fn client(&self) -> &AsyncClient {
        &self.client
    }

    /// Publishes waiting for room in rumqttc's request queue.
    pub fn len(&self) -> usize {
        self.backlog.len()
    }

    /// Whether nothing waits for room.
    pub fn is_empty(&self) -> bool {
        self.backlog.is_empty()
    }

    /// Queues `message` behind everything queued before it, and hands over what fits.
    pub fn push(&mut self, message: Publish, tag: T, taken: impl FnMut(T)) {
        self.backlog.push_back((message, tag, false));
        self.flush(taken);
    }

    /// [`Outbox::push`] for a retained message (the node's presence).
    pub fn push_retained(&mut self, message: Publish, tag: T, taken: impl FnMut(T)) {
        self.backlog.push_back((message, tag, true));
        self.flush(taken);
    }

    /// Hands publishes to rumqttc, in order, until its queue is full (nothing while held);
    /// `taken` gets the tag of each one it took.
    pub fn flush(&mut self, mut taken: impl FnMut(T)) {
        if self.held {
            return;
        }
        while let Some((message, tag, retain)) = self.backlog.pop_front() {
            match try_publish(&self.client, message, retain) {
                Queued::Yes => taken(tag),
                Queued::Full(message) => {
                    self.backlog.push_front((message, tag, retain));
                    return;
                }
                Queued::Refused => warn!("dropped a publish to a topic with a wildcard"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Unacked;

    #[test]
    fn a_puback_finds_its_publish_by_packet_id_and_a_lost_connection_returns_what_waited() {
        let mut unacked = Unacked::default();
        unacked.taken(Some("one-way"));
        unacked.taken(None); // an answer: nobody waits for its PUBACK
        unacked.taken(Some("event")); // QoS 0: no packet id, no PUBACK
        unacked.taken(Some("second"));
        assert_eq!(unacked.len(), 4);
        unacked.on_sent(7);
        unacked.on_sent(8);
        unacked.on_sent(0);
        assert_eq!(unacked.len(), 3, "the QoS 0 publish waits for nothing");
        assert_eq!(unacked.oldest(), Some(&"one-way"));
        // Acknowledged out of order: each finds its own.
        assert_eq!(unacked.on_acked(8), None, "the answer's");
        assert_eq!(unacked.on_acked(7), Some("one-way"));
        assert_eq!(unacked.on_acked(7), None, "a second PUBACK finds nothing");
        unacked.taken(Some("third"));
        unacked.on_sent(9);
        // The connection drops: what was sent and what was only taken, oldest first.
        assert_eq!(unacked.lost(), ["second", "third"]);
        assert!(unacked.is_empty());
    }
}
