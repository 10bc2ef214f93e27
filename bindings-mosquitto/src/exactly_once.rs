//! QoS 2 requests already run. mosquitto 2.0 calls a plugin's MESSAGE callback before it
//! recognises a QoS 2 PUBLISH sent again (a client resends one it has no PUBREC for, with the
//! same packet id, after a reconnect): the broker then routes it only once, but the plugin
//! would run the request twice. The plugin recognises the copy itself.

use std::collections::hash_map::RandomState;
use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasher;

use mqstore_core::envelope::Publish;

/// The QoS 2 requests seen lately, by a fingerprint of who sent what: the sender, the topic,
/// the payload, the correlation data and the user properties (whose `__ts` no client repeats
/// on a new request). mosquitto's own test is the same packet id with the same topic and
/// payload; the packet id is not in the event, the correlation data stands in for it.
pub struct SeenRequests {
    order: VecDeque<u64>,
    seen: HashSet<u64>,
    capacity: usize,
    hasher: RandomState,
}

impl SeenRequests {
    /// Remembers the last `capacity` requests: a copy arrives within the requester's
    /// reconnect, long before so many other QoS 2 requests.
    pub fn new(capacity: usize) -> Self {
        Self {
            order: VecDeque::with_capacity(capacity),
            seen: HashSet::with_capacity(capacity),
            capacity,
            hasher: RandomState::new(),
        }
    }

    /// Whether `request` from `sender` is new (and remembers it); `false` for a copy.
    pub fn first_time(&mut self, sender: &str, request: &Publish) -> bool {
        let p = &request.properties;
        let fingerprint = self.hasher.hash_one((
            sender,
            &request.topic,
            &request.payload[..],
            p.correlation_data.as_deref(),
            &p.user_properties,
        ));
        if !self.seen.insert(fingerprint) {
            return false;
        }
        if self.order.len() == self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        self.order.push_back(fingerprint);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use mqstore_core::envelope::Properties;

    fn request(correlation: &'static [u8], payload: &'static [u8], ts: &str) -> Publish {
        Publish {
            topic: "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke".into(),
            payload: Bytes::from_static(payload),
            qos: 2,
            properties: Properties {
                correlation_data: Some(Bytes::from_static(correlation)),
                user_properties: vec![("__ts".into(), ts.into())],
                ..Properties::default()
            },
        }
    }

    #[test]
    fn a_copy_from_the_same_sender_is_recognised() {
        let mut seen = SeenRequests::new(8);
        let first = request(b"0123456789abcdef", b"SET", "1:0:a");
        assert!(seen.first_time("a", &first));
        assert!(!seen.first_time("a", &first.clone()));
        // The same request from another client, or anything differing, is new.
        assert!(seen.first_time("b", &first));
        assert!(seen.first_time("a", &request(b"0123456789abcdeX", b"SET", "1:0:a")));
        assert!(seen.first_time("a", &request(b"0123456789abcdef", b"GET", "1:0:a")));
        assert!(seen.first_time("a", &request(b"0123456789abcdef", b"SET", "2:0:a")));
    }

    #[test]
    fn only_the_last_capacity_requests_are_remembered() {
        let mut seen = SeenRequests::new(2);
        let [a, b, c] = ["1:0:a", "2:0:a", "3:0:a"].map(|ts| request(b"c", b"SET", ts));
        assert!(seen.first_time("a", &a));
        assert!(seen.first_time("a", &b));
        assert!(seen.first_time("a", &c)); // a is forgotten
        assert!(!seen.first_time("a", &c));
        assert!(!seen.first_time("a", &b));
        assert!(seen.first_time("a", &a));
        assert_eq!(seen.seen.len(), 2);
    }
}
