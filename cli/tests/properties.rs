//! Property tests: codec round trips, decoders on arbitrary bytes, and the engine against a
//! small reference model over random command sequences with expiry, fencing and watches.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;

use bytes::Bytes;
use common::{Harness, T0, seen};
use mqstore_core::ServiceError;
use mqstore_core::codec::{
    Bulk, Condition, Notification, Request, Response, SetRequest, decode_notification,
    decode_request, decode_response,
};
use mqstore_core::hlc::Hlc;
use proptest::prelude::*;

fn any_bytes(max: usize) -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 0..max).prop_map(Bytes::from)
}

fn key() -> impl Strategy<Value = Bytes> {
    proptest::collection::vec(any::<u8>(), 1..24).prop_map(Bytes::from)
}

fn condition() -> impl Strategy<Value = Condition> {
    prop_oneof![
        Just(Condition::Always),
        Just(Condition::NotExists),
        Just(Condition::NotExistsOrEqual)
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            key(),
            any_bytes(64),
            condition(),
            proptest::option::of(1u64..)
        )
            .prop_map(|(key, value, condition, px)| Request::Set(SetRequest {
                key,
                value: Bulk::new(value),
                condition,
                expires_in_ms: px.and_then(NonZeroU64::new),
            })),
        key().prop_map(|key| Request::Get { key }),
        key().prop_map(|key| Request::Del { key }),
        (key(), any_bytes(32)).prop_map(|(key, value)| Request::VDel { key, value }),
        (key(), any::<bool>()).prop_map(|(key, stop)| Request::KeyNotify { key, stop }),
        (any_bytes(16), proptest::option::of(any_bytes(16)))
            .prop_map(|(pattern, token)| Request::Scan { pattern, token }),
    ]
}

fn response() -> impl Strategy<Value = Response> {
    prop_oneof![
        Just(Response::Ok),
        Just(Response::NotApplied),
        Just(Response::Absent),
        (0u64..=i64::MAX as u64).prop_map(Response::Deleted),
        any_bytes(64).prop_map(|v| Response::Value(Bulk::new(v))),
        (
            proptest::collection::vec(any_bytes(16), 0..8),
            proptest::option::of(any_bytes(16))
        )
            .prop_map(|(keys, token)| Response::Keys { keys, token }),
        prop::sample::select(ServiceError::KNOWN.to_vec()).prop_map(Response::Error),
        "[a-z ]{1,20}".prop_map(|t| Response::Error(ServiceError::from_text(t.as_bytes()))),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(request in request()) {
        let wire = request.to_bytes();
        prop_assert_eq!(wire.len(), request.encoded_len());
        prop_assert_eq!(decode_request(&wire), Ok(request));
    }

    #[test]
    fn responses_round_trip(response in response()) {
        let wire = response.to_bytes();
        prop_assert_eq!(wire.len(), response.encoded_len());
        prop_assert_eq!(decode_response(&wire), Ok(response));
    }

    #[test]
    fn notifications_round_trip(value in proptest::option::of(any_bytes(64))) {
        let n = value.map_or(Notification::Delete, |v| Notification::Set(Bulk::new(v)));
        prop_assert_eq!(n.to_bytes().len(), n.encoded_len());
        prop_assert_eq!(decode_notification(&n.to_bytes()), Ok(n));
    }

    #[test]
    fn hlcs_round_trip(wall in any::<u64>(), counter in 0u32..=mqstore_core::hlc::MAX_COUNTER, node in "[^:]{0,12}") {
        let hlc = Hlc::new(wall, counter, node.as_str()).unwrap();
        prop_assert_eq!(Hlc::parse(&hlc.to_string()), Ok(hlc));
    }

    /// Decoders never panic, whatever the bytes.
    #[test]
    fn decoders_survive_arbitrary_bytes(bytes in any_bytes(256)) {
        let _ = decode_request(&bytes);
        let _ = decode_response(&bytes);
        let _ = decode_notification(&bytes);
        let _ = Hlc::parse(&String::from_utf8_lossy(&bytes));
    }

    /// Damaging a valid request (cutting or flipping a byte) is an error or another valid
    /// request, never a panic; cutting it is always an error.
    #[test]
    fn damaged_requests_are_rejected(request in request(), cut in any::<prop::sample::Index>(), flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let wire = request.to_bytes();
        let cut_at = cut.index(wire.len());
        prop_assert_eq!(decode_request(&wire.slice(..cut_at)), Err(ServiceError::SyntaxError));
        let mut flipped = wire.to_vec();
        let i = flip.index(flipped.len());
        flipped[i] ^= 1 << bit;
        let _ = decode_request(&Bytes::from(flipped));
    }
}

// ---- the engine against a reference model ----

const CLIENTS: [&str; 2] = ["x", "y"];
const KEYS: [&str; 3] = ["a", "b", "c"];
const VALUES: [&str; 2] = ["1", "2"];

#[derive(Debug, Clone)]
enum Op {
    Set {
        client: usize,
        key: usize,
        value: usize,
        condition: Condition,
        px: Option<u64>,
        fence: Option<u64>,
    },
    Get(usize),
    Del {
        key: usize,
        only: Option<usize>,
        fence: Option<u64>,
    },
    Watch(usize, usize),
    Stop(usize, usize),
    DropClient(usize),
    Advance(u64),
}

fn op() -> impl Strategy<Value = Op> {
    let fence = proptest::option::of(0u64..6);
    prop_oneof![
        4 => (0..2usize, 0..3usize, 0..2usize, condition(), proptest::option::of(1u64..30), fence.clone())
            .prop_map(|(client, key, value, condition, px, fence)| Op::Set { client, key, value, condition, px, fence }),
        2 => (0..3usize).prop_map(Op::Get),
        2 => (0..3usize, proptest::option::of(0..2usize), fence)
            .prop_map(|(key, only, fence)| Op::Del { key, only, fence }),
        2 => (0..2usize, 0..3usize).prop_map(|(c, k)| Op::Watch(c, k)),
        1 => (0..2usize, 0..3usize).prop_map(|(c, k)| Op::Stop(c, k)),
        1 => (0..2usize).prop_map(Op::DropClient),
        2 => (1u64..20).prop_map(Op::Advance),
    ]
}

#[derive(Debug, Clone)]
struct ModelEntry {
    value: &'static str,
    expires_at: Option<u64>,
    fence: Option<u64>,
    /// The `__ts` the engine gave the SET that wrote it.
    version: String,
}

#[derive(Default)]
struct Model {
    keys: BTreeMap<&'static str, ModelEntry>,
    watches: BTreeSet<(&'static str, &'static str)>,
}

/// A notification as (client, key, Some(value) for SET / None for DELETE).
type Note = (String, Vec<u8>, Option<Vec<u8>>);

impl Model {
    fn watchers(&self, key: &str) -> Vec<&'static str> {
        self.watches
            .iter()
            .filter(|(_, k)| *k == key)
            .map(|(c, _)| *c)
            .collect()
    }

    /// Removes expired keys, in deadline order, and returns their DELETE notifications.
    fn expire(&mut self, now: u64) -> Vec<Vec<Note>> {
        let mut due: Vec<_> = self
            .keys
            .iter()
            .filter_map(|(k, e)| e.expires_at.filter(|d| *d <= now).map(|d| (d, *k)))
            .collect();
        due.sort();
        due.into_iter()
            .map(|(_, key)| {
                self.keys.remove(key);
                self.notes(key, None)
            })
            .collect()
    }

    fn notes(&self, key: &str, value: Option<&str>) -> Vec<Note> {
        self.watchers(key)
            .into_iter()
            .map(|c| {
                (
                    c.to_owned(),
                    key.as_bytes().to_vec(),
                    value.map(|v| v.as_bytes().to_vec()),
                )
            })
            .collect()
    }

    fn fence_check(&self, key: &str, fence: Option<u64>) -> Result<(), ServiceError> {
        match (self.keys.get(key).and_then(|e| e.fence), fence) {
            (Some(_), None) => Err(ServiceError::FencingTokenRequired),
            (Some(stored), Some(given)) if given < stored => {
                Err(ServiceError::FencingTokenLowerVersion)
            }
            _ => Ok(()),
        }
    }
}

fn fence_token(f: u64) -> String {
    format!("{}:0:fence", T0 + f)
}

fn note_of(n: &mqstore_core::envelope::Publish) -> Note {
    let s = seen(n);
    let value = match s.change {
        Notification::Set(v) => Some(v.as_slice().to_vec()),
        Notification::Delete => None,
    };
    (s.client, s.key, value)
}

fn sorted(mut notes: Vec<Note>) -> Vec<Note> {
    notes.sort();
    notes
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn engine_matches_the_reference_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut h = Harness::new();
        let mut model = Model::default();
        let mut last_version: Option<Hlc> = None;
        for op in ops {
            if let Op::Advance(ms) = op {
                h.now += ms;
                continue;
            }
            if let Op::DropClient(c) = op {
                let expected = model.watches.iter().filter(|(cl, _)| *cl == CLIENTS[c]).count();
                model.watches.retain(|(cl, _)| *cl != CLIENTS[c]);
                prop_assert_eq!(h.engine.drop_client(CLIENTS[c]), expected);
                continue;
            }
            let expired = model.expire(h.now);
            let (client, request, props, expected, expected_notes) = match op {
                Op::Set { client, key, value, condition, px, fence } => {
                    let (k, v) = (KEYS[key], VALUES[value]);
                    let request = Request::Set(SetRequest {
                        key: Bytes::from_static(k.as_bytes()),
                        value: Bulk::new(v.as_bytes()),
                        condition,
                        expires_in_ms: px.and_then(NonZeroU64::new),
                    });
                    let current = model.keys.get(k).cloned();
                    let result = model.fence_check(k, fence).map(|()| match (condition, &current) {
                        (Condition::Always, _) | (_, None) => true,
                        (Condition::NotExists, Some(_)) => false,
                        (Condition::NotExistsOrEqual, Some(e)) => e.value == v,
                    });
                    let (expected, notes) = match result {
                        Err(e) => (Response::Error(e), vec![]),
                        Ok(false) => (Response::NotApplied, vec![]),
                        Ok(true) => (Response::Ok, model.notes(k, Some(v))),
                    };
                    (client, request, fence.map(fence_token), expected, notes)
                }
                Op::Get(key) => {
                    let k = KEYS[key];
                    let expected = model.keys.get(k).map_or(Response::Absent, |e| {
                        Response::Value(Bulk::new(e.value.as_bytes()))
                    });
                    (0, Request::Get { key: Bytes::from_static(k.as_bytes()) }, None, expected, vec![])
                }
                Op::Del { key, only, fence } => {
                    let k = KEYS[key];
                    let key_bytes = Bytes::from_static(k.as_bytes());
                    let request = match only {
                        Some(v) => Request::VDel { key: key_bytes, value: Bytes::from_static(VALUES[v].as_bytes()) },
                        None => Request::Del { key: key_bytes },
                    };
                    let (expected, notes) = match model.keys.get(k) {
                        None => (Response::Deleted(0), vec![]),
                        Some(entry) => match model.fence_check(k, fence) {
                            Err(e) => (Response::Error(e), vec![]),
                            Ok(()) if only.is_some_and(|v| VALUES[v] != entry.value) => {
                                (Response::NotApplied, vec![])
                            }
                            Ok(()) => (Response::Deleted(1), model.notes(k, None)),
                        },
                    };
                    (0, request, fence.map(fence_token), expected, notes)
                }
                Op::Watch(c, key) => {
                    model.watches.insert((CLIENTS[c], KEYS[key]));
                    let request = Request::KeyNotify { key: Bytes::from_static(KEYS[key].as_bytes()), stop: false };
                    (c, request, None, Response::Ok, vec![])
                }
                Op::Stop(c, key) => {
                    let was = model.watches.remove(&(CLIENTS[c], KEYS[key]));
                    let request = Request::KeyNotify { key: Bytes::from_static(KEYS[key].as_bytes()), stop: true };
                    (c, request, None, if was { Response::Ok } else { Response::Deleted(0) }, vec![])
                }
                Op::Advance(_) | Op::DropClient(_) => unreachable!(),
            };
            let props: Vec<(&str, &str)> = props.iter().map(|f| ("__ft", f.as_str())).collect();
            let answer = h.call(CLIENTS[client], &request, &props);
            prop_assert_eq!(answer.payload(), expected.clone(), "{:?}", request);

            // Expiry notifications first (key by key), then the request's own.
            let mut got = answer.notifications.iter().map(note_of);
            for batch in expired {
                let n = batch.len();
                prop_assert_eq!(sorted(got.by_ref().take(n).collect()), sorted(batch));
            }
            prop_assert_eq!(sorted(got.collect()), sorted(expected_notes));

            // Versions: what a write returned is what GET returns; versions only grow.
            match (&request, &expected) {
                (Request::Set(set), Response::Ok) => {
                    let k = KEYS.iter().find(|k| k.as_bytes() == &set.key[..]).unwrap();
                    let v = VALUES.iter().find(|v| v.as_bytes() == set.value.as_slice()).unwrap();
                    let old_fence = model.keys.get(k).and_then(|e| e.fence);
                    let given = props.first().map(|(_, f)| Hlc::parse(f).unwrap().wall_ms - T0);
                    model.keys.insert(k, ModelEntry {
                        value: v,
                        expires_at: set.expires_in_ms.map(|ms| h.now + ms.get()),
                        fence: old_fence.max(given),
                        version: answer.ts().unwrap().to_owned(),
                    });
                    let version = Hlc::parse(answer.ts().unwrap()).unwrap();
                    prop_assert!(last_version.as_ref().is_none_or(|l| version > *l));
                    last_version = Some(version);
                }
                (Request::Set(set), Response::NotApplied) => {
                    let k = std::str::from_utf8(&set.key).unwrap();
                    prop_assert_eq!(answer.ts(), Some(model.keys[k].version.as_str()));
                }
                (Request::Get { key }, Response::Value(_)) => {
                    let k = std::str::from_utf8(key).unwrap();
                    prop_assert_eq!(answer.ts(), Some(model.keys[k].version.as_str()));
                }
                (Request::Get { .. }, Response::Absent) => prop_assert_eq!(answer.ts(), None),
                (Request::Del { key } | Request::VDel { key, .. }, Response::Deleted(1)) => {
                    model.keys.remove(std::str::from_utf8(key).unwrap());
                    let version = Hlc::parse(answer.ts().unwrap()).unwrap();
                    prop_assert!(last_version.as_ref().is_none_or(|l| version > *l));
                    last_version = Some(version);
                }
                _ => prop_assert!(answer.ts().is_some()),
            }
            prop_assert_eq!(h.engine.stats().keys, model.keys.len() as u64);
            prop_assert_eq!(h.engine.stats().watches, model.watches.len() as u64);
        }
    }
}
