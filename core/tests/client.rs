//! The client state machine against the engine, wired back to back with no broker in between:
//! every publish the client makes goes to `Engine::handle`, and every publish the engine makes
//! for this client comes back to `ClientCore::handle`.

use bytes::Bytes;
use mqstore_core::ServiceError;
use mqstore_core::client::{
    Answer, CallId, CallOptions, ClientConfig, ClientCore, ClientError, Event,
};
use mqstore_core::codec::{Bulk, Notification, Request, Response, SetRequest};
use mqstore_core::engine::Engine;
use mqstore_core::envelope::Publish;
use mqstore_core::hlc::Hlc;
use mqstore_core::topics;

const T0: u64 = 1_700_000_000_000;

struct Loop {
    engine: Engine,
    now: u64,
}

impl Loop {
    fn new() -> Self {
        Self {
            engine: Engine::in_memory("engine").unwrap(),
            now: T0,
        }
    }

    /// Delivers a client's publish to the engine; returns what the engine published for
    /// `client`, in order.
    fn deliver(&mut self, client: &ClientCore, publish: Publish) -> Vec<Publish> {
        // mqstore clients publish in their own tree (identified requests).
        assert_eq!(
            topics::client_of_identified_invoke(&publish.topic).as_deref(),
            Some(client.client_id())
        );
        let mut out = Vec::new();
        self.engine.handle(publish, self.now, &mut out);
        let subscriptions = client.subscriptions();
        let notify_prefix = subscriptions[1].trim_end_matches('+');
        out.into_iter()
            .filter(|p| p.topic == subscriptions[0] || p.topic.starts_with(notify_prefix))
            .collect()
    }

    /// A call all the way round: its events.
    fn round_trip(
        &mut self,
        client: &mut ClientCore,
        request: &Request,
        options: &CallOptions,
    ) -> (CallId, Vec<Event>) {
        let (call, publish) = client.call(request, options, self.now).unwrap();
        let events = self
            .deliver(client, publish)
            .iter()
            .filter_map(|p| client.handle(p, self.now))
            .collect();
        (call, events)
    }

    fn answer(
        &mut self,
        client: &mut ClientCore,
        request: &Request,
        options: &CallOptions,
    ) -> Result<Answer, ClientError> {
        let (call, events) = self.round_trip(client, request, options);
        match events.last() {
            Some(Event::Completed { call: c, result }) if *c == call => result.clone(),
            other => panic!("no completion for {call}: {other:?}"),
        }
    }
}

fn client(id: &str) -> ClientCore {
    ClientCore::new(ClientConfig::new(id, 42)).unwrap()
}

fn set(key: &'static str, value: &'static str) -> Request {
    Request::Set(SetRequest::new(key, value))
}

fn get(key: &'static str) -> Request {
    Request::Get {
        key: Bytes::from_static(key.as_bytes()),
    }
}

#[test]
fn calls_round_trip_with_versions() {
    let mut l = Loop::new();
    let mut c = client("dev-1");
    let none = CallOptions::default();
    let set_answer = l.answer(&mut c, &set("k", "v"), &none).unwrap();
    assert_eq!(set_answer.response, Response::Ok);
    let version = set_answer.version.expect("a SET has a version");
    assert_eq!(&*version.node, "engine");
    let got = l.answer(&mut c, &get("k"), &none).unwrap();
    assert_eq!(got.response, Response::Value(Bulk::from("v")));
    assert_eq!(got.version, Some(version));
    let absent = l.answer(&mut c, &get("nope"), &none).unwrap();
    assert_eq!(
        absent,
        Answer {
            response: Response::Absent,
            version: None
        }
    );
    let deleted = l
        .answer(
            &mut c,
            &Request::Del {
                key: Bytes::from_static(b"k"),
            },
            &none,
        )
        .unwrap();
    assert_eq!(deleted.response, Response::Deleted(1));
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn service_errors_are_typed() {
    let mut l = Loop::new();
    let mut c = client("dev-1");
    let guard = CallOptions {
        fencing_token: Some(Hlc::parse(&format!("{T0}:0:lock")).unwrap()),
        ..CallOptions::default()
    };
    l.answer(&mut c, &set("k", "v"), &guard).unwrap();
    let error = l
        .answer(&mut c, &set("k", "w"), &CallOptions::default())
        .unwrap_err();
    assert_eq!(
        error,
        ClientError::Service(ServiceError::FencingTokenRequired)
    );
    assert_eq!(error.code(), 102);
    let ahead = CallOptions {
        fencing_token: Some(Hlc::parse(&format!("{}:0:lock", T0 + 120_000)).unwrap()),
        ..CallOptions::default()
    };
    let error = l.answer(&mut c, &set("k", "w"), &ahead).unwrap_err();
    assert_eq!(error, ClientError::Service(ServiceError::FencingTokenSkew));
}

#[test]
fn requests_carry_the_envelope() {
    let mut c = client("dev-1");
    let options = CallOptions {
        persist: true,
        timeout_ms: Some(2_500),
        ..CallOptions::default()
    };
    let (_, p) = c.call(&set("k", "v"), &options, T0).unwrap();
    let (_, q) = c.call(&get("k"), &CallOptions::default(), T0).unwrap();
    assert_eq!(p.qos, 1);
    assert_eq!(
        p.properties.response_topic.as_deref(),
        Some(topics::response_topic("dev-1").as_str())
    );
    assert_eq!(p.properties.user_property("__srcId"), Some("dev-1"));
    assert_eq!(p.properties.user_property("__protVer"), Some("1.0"));
    assert_eq!(p.properties.user_property("aio-persistence"), Some("true"));
    assert_eq!(p.properties.message_expiry_interval, Some(3));
    let ts = Hlc::parse(p.properties.user_property("__ts").unwrap()).unwrap();
    assert_eq!((ts.wall_ms, &*ts.node), (T0, "dev-1"));
    let (a, b) = (
        p.properties.correlation_data.unwrap(),
        q.properties.correlation_data.unwrap(),
    );
    assert_eq!(a.len(), 16);
    assert_ne!(a, b, "every call has its own correlation id");
    assert!(ClientCore::new(ClientConfig::new("bad:id", 1)).is_err());
}

#[test]
fn observed_changes_arrive_as_events_before_the_answer() {
    let mut l = Loop::new();
    let mut watcher = client("watcher");
    let mut writer = client("writer");
    l.answer(&mut writer, &set("k", "v0"), &CallOptions::default())
        .unwrap();
    let (_, publishes) = watcher.observe(Bytes::from_static(b"k"), l.now).unwrap();
    assert_eq!(
        publishes.len(),
        2,
        "KEYNOTIFY, then GET for the starting version"
    );
    let delivered: Vec<_> = publishes
        .into_iter()
        .flat_map(|p| l.deliver(&watcher, p))
        .collect();
    let answers: Vec<_> = delivered
        .iter()
        .filter_map(|p| watcher.handle(p, l.now))
        .collect();
    // The starting value is not a change: only the registration's answer is an event.
    assert!(matches!(
        &answers[..],
        [Event::Completed { result: Ok(_), .. }]
    ));

    // The watcher writes the key itself: the notification comes before the SET's answer.
    let (call, events) = l.round_trip(&mut watcher, &set("k", "v1"), &CallOptions::default());
    let [
        Event::Changed {
            key,
            change,
            version,
            synthetic: false,
            gap: false,
        },
        Event::Completed {
            call: done,
            result: Ok(answer),
        },
    ] = &events[..]
    else {
        panic!("{events:?}")
    };
    assert_eq!(
        (key.as_ref(), change),
        (&b"k"[..], &Notification::Set(Bulk::from("v1")))
    );
    assert_eq!(*done, call);
    assert_eq!(version, &answer.version);
    assert_eq!(watcher.observed_keys().count(), 1);

    let (_, publish) = watcher.unobserve(Bytes::from_static(b"k"), l.now).unwrap();
    l.deliver(&watcher, publish);
    let (_, events) = l.round_trip(&mut watcher, &set("k", "v2"), &CallOptions::default());
    assert_eq!(
        events.len(),
        1,
        "no notification after unobserve: {events:?}"
    );
}

#[test]
fn timeouts_fail_calls_and_late_answers_are_ignored() {
    let mut l = Loop::new();
    let mut c = client("dev-1");
    let options = CallOptions {
        timeout_ms: Some(100),
        ..CallOptions::default()
    };
    let (call, publish) = c.call(&get("k"), &options, l.now).unwrap();
    assert_eq!(c.next_deadline(), Some(T0 + 100));
    assert!(c.expire(T0 + 99).is_empty());
    let events = c.expire(T0 + 100);
    assert_eq!(
        events,
        vec![Event::Completed {
            call,
            result: Err(ClientError::Timeout(100))
        }]
    );
    // The message says what a timeout means for a write.
    assert!(
        ClientError::Timeout(100)
            .to_string()
            .contains("a write may still be applied"),
    );
    assert_eq!(c.next_deadline(), None);
    // The engine answers after all: nobody is waiting.
    for p in l.deliver(&c, publish) {
        assert_eq!(c.handle(&p, l.now), None);
    }
}

#[test]
fn a_lost_connection_fails_calls_in_flight() {
    let mut c = client("dev-1");
    let (a, _) = c.call(&get("a"), &CallOptions::default(), T0).unwrap();
    let (b, _) = c.call(&get("b"), &CallOptions::default(), T0).unwrap();
    assert_eq!(
        c.connection_lost(),
        vec![
            Event::Completed {
                call: a,
                result: Err(ClientError::Disconnected)
            },
            Event::Completed {
                call: b,
                result: Err(ClientError::Disconnected)
            },
        ]
    );
    assert_eq!(c.in_flight(), 0);
}

#[test]
fn a_publish_the_broker_refuses_fails_its_call_alone() {
    let mut c = client("dev-1");
    let (a, _) = c.call(&set("a", "v"), &CallOptions::default(), T0).unwrap();
    let (b, _) = c.call(&get("b"), &CallOptions::default(), T0).unwrap();
    let refused = c.publish_refused(a, 0x95).expect("a is in flight");
    assert_eq!(
        refused,
        Event::Completed {
            call: a,
            result: Err(ClientError::PublishRefused { code: 0x95 })
        }
    );
    if let Event::Completed { result: Err(e), .. } = &refused {
        assert_eq!(e.code(), 216);
        assert_eq!(
            e.to_string(),
            "the MQTT broker refused the request: Packet too large (reason code 0x95); it was not applied"
        );
    }
    // Once: a call already ended is not ended again; the other call still waits.
    assert_eq!(c.publish_refused(a, 0x95), None);
    assert_eq!(c.in_flight(), 1);
    assert_eq!(
        c.connection_lost(),
        vec![Event::Completed {
            call: b,
            result: Err(ClientError::Disconnected)
        }]
    );
}

#[test]
fn resume_reports_changes_missed_while_away_and_only_those() {
    let mut l = Loop::new();
    let mut watcher = client("watcher");
    let mut writer = client("writer");
    for key in [&b"changed"[..], b"same", b"deleted"] {
        l.answer(
            &mut writer,
            &Request::Set(SetRequest::new(key, "v1")),
            &CallOptions::default(),
        )
        .unwrap();
        let (_, publishes) = watcher.observe(Bytes::from_static(key), l.now).unwrap();
        for p in publishes {
            for answer in l.deliver(&watcher, p) {
                watcher.handle(&answer, l.now);
            }
        }
    }

    // The watcher disconnects; the engine forgets its registrations; changes happen.
    assert!(watcher.connection_lost().is_empty());
    l.engine.drop_client("watcher");
    l.now += 10;
    l.answer(&mut writer, &set("changed", "v2"), &CallOptions::default())
        .unwrap();
    l.answer(
        &mut writer,
        &Request::Del {
            key: Bytes::from_static(b"deleted"),
        },
        &CallOptions::default(),
    )
    .unwrap();

    // Back: re-register and read back.
    let mut events = Vec::new();
    for p in watcher.resume(l.now).unwrap() {
        for answer in l.deliver(&watcher, p) {
            events.extend(watcher.handle(&answer, l.now));
        }
    }
    let mut seen: Vec<_> = events
        .iter()
        .map(|e| match e {
            Event::Changed {
                key,
                change,
                synthetic: true,
                ..
            } => (key.clone(), change.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        seen,
        vec![
            (
                Bytes::from_static(b"changed"),
                Notification::Set(Bulk::from("v2"))
            ),
            (Bytes::from_static(b"deleted"), Notification::Delete),
        ]
    );
    // Registered again: live notifications flow.
    let (_, events) = {
        let (call, publish) = writer
            .call(&set("same", "v3"), &CallOptions::default(), l.now)
            .unwrap();
        let mut out = Vec::new();
        l.engine.handle(publish, l.now, &mut out);
        let events: Vec<_> = out
            .iter()
            .filter_map(|p| watcher.handle(p, l.now))
            .collect();
        (call, events)
    };
    assert!(
        matches!(
            &events[..],
            [Event::Changed {
                synthetic: false,
                gap: false,
                ..
            }]
        ),
        "{events:?}"
    );
}

#[test]
fn a_change_is_reported_when_the_observations_first_read_was_lost_with_the_connection() {
    let mut l = Loop::new();
    let mut watcher = client("watcher");
    let mut writer = client("writer");
    l.answer(&mut writer, &set("k", "v1"), &CallOptions::default())
        .unwrap();
    let (call, publishes) = watcher.observe(Bytes::from_static(b"k"), l.now).unwrap();
    let [register, _first_read] = <[Publish; 2]>::try_from(publishes).unwrap();
    // The registration is answered (so `observe` has returned); the connection drops before
    // the first read's answer arrives.
    let events: Vec<_> = l
        .deliver(&watcher, register)
        .iter()
        .filter_map(|p| watcher.handle(p, l.now))
        .collect();
    assert!(
        matches!(&events[..], [Event::Completed { call: c, result: Ok(_) }] if *c == call),
        "{events:?}"
    );
    assert!(watcher.connection_lost().is_empty());
    l.engine.drop_client("watcher");
    l.now += 10;
    l.answer(&mut writer, &set("k", "v2"), &CallOptions::default())
        .unwrap();
    // Back: the read-back cannot tell what the observation began with, so it reports what
    // the key holds now — the change is not lost.
    let mut events = Vec::new();
    for p in watcher.resume(l.now).unwrap() {
        for answer in l.deliver(&watcher, p) {
            events.extend(watcher.handle(&answer, l.now));
        }
    }
    assert!(
        matches!(
            &events[..],
            [Event::Changed { change: Notification::Set(v), synthetic: true, .. }] if v == &Bulk::from("v2")
        ),
        "{events:?}"
    );
}

#[test]
fn answers_that_do_not_fit_or_cannot_be_read_are_errors() {
    let mut c = client("dev-1");
    let (call, request) = c.call(&set("k", "v"), &CallOptions::default(), T0).unwrap();
    let mut reply = Publish {
        topic: topics::response_topic("dev-1"),
        payload: Bytes::from_static(b"$1\r\nx\r\n"),
        qos: 1,
        properties: mqstore_core::envelope::Properties {
            correlation_data: request.properties.correlation_data.clone(),
            user_properties: vec![("__stat".into(), "200".into())],
            ..Default::default()
        },
    };
    let Some(Event::Completed {
        call: done,
        result: Err(ClientError::Unexpected { command: "SET", .. }),
    }) = c.handle(&reply, T0)
    else {
        panic!()
    };
    assert_eq!(done, call);

    let (_, request) = c.call(&get("k"), &CallOptions::default(), T0).unwrap();
    reply.properties.correlation_data = request.properties.correlation_data.clone();
    reply.payload = Bytes::from_static(b"$5\r\nx\r\n");
    assert!(matches!(
        c.handle(&reply, T0),
        Some(Event::Completed {
            result: Err(ClientError::Malformed(_)),
            ..
        })
    ));

    let (_, request) = c.call(&get("k"), &CallOptions::default(), T0).unwrap();
    reply.properties.correlation_data = request.properties.correlation_data.clone();
    reply.properties.user_properties = vec![
        ("__stat".into(), "505".into()),
        ("__stMsg".into(), "too new".into()),
    ];
    let Some(Event::Completed {
        result: Err(ClientError::Status {
            status: 505,
            message,
        }),
        ..
    }) = c.handle(&reply, T0)
    else {
        panic!()
    };
    assert_eq!(message, "too new");
}

#[test]
fn answers_read_as_typed_results() {
    use mqstore_core::client::Deleted;

    let mut l = Loop::new();
    let mut c = client("dev-1");
    let none = CallOptions::default();
    assert!(l.answer(&mut c, &set("k", "v"), &none).unwrap().applied());
    let nx = Request::Set(SetRequest {
        condition: mqstore_core::codec::Condition::NotExists,
        ..SetRequest::new("k", "w")
    });
    assert!(!l.answer(&mut c, &nx, &none).unwrap().applied());
    assert_eq!(
        l.answer(&mut c, &get("k"), &none).unwrap().value(),
        Some(Bytes::from_static(b"v"))
    );
    assert_eq!(l.answer(&mut c, &get("x"), &none).unwrap().value(), None);
    let vdel = |v: &'static str| Request::VDel {
        key: Bytes::from_static(b"k"),
        value: Bytes::from_static(v.as_bytes()),
    };
    assert_eq!(
        l.answer(&mut c, &vdel("w"), &none).unwrap().deleted(),
        Deleted::ValueMismatch
    );
    assert_eq!(
        l.answer(&mut c, &vdel("v"), &none).unwrap().deleted(),
        Deleted::Deleted
    );
    assert_eq!(
        l.answer(&mut c, &vdel("v"), &none).unwrap().deleted(),
        Deleted::Absent
    );
    let scan = Request::Scan {
        pattern: Bytes::from_static(b"*"),
        token: None,
    };
    assert_eq!(
        l.answer(&mut c, &scan, &none).unwrap().into_page(),
        Ok((vec![], None))
    );
    assert!(
        l.answer(&mut c, &get("x"), &none)
            .unwrap()
            .into_page()
            .is_err()
    );
    // The typed results every client hands out, each with the answer's version.
    let written = l.answer(&mut c, &set("t", "1"), &none).unwrap();
    let version = written.version.clone();
    assert!(version.is_some());
    let result = written.into_set_result();
    assert!(result.applied);
    assert_eq!(result.version, version);
    let read = l
        .answer(&mut c, &get("t"), &none)
        .unwrap()
        .into_versioned()
        .unwrap();
    assert_eq!(read.value, Bytes::from_static(b"1"));
    assert_eq!(read.version, version);
    assert_eq!(
        l.answer(&mut c, &get("x"), &none).unwrap().into_versioned(),
        None
    );
    let del = Request::Del {
        key: Bytes::from_static(b"t"),
    };
    let deletion = l.answer(&mut c, &del, &none).unwrap().into_deletion();
    assert_eq!(deletion.outcome, Deleted::Deleted);
    assert!(deletion.version > version);
}

#[test]
fn a_reregistration_nobody_answered_is_sent_again_until_answered() {
    let mut l = Loop::new();
    let mut watcher = client("watcher");
    let mut writer = client("writer");
    let (_, publishes) = watcher.observe(Bytes::from_static(b"k"), l.now).unwrap();
    for p in publishes {
        for answer in l.deliver(&watcher, p) {
            watcher.handle(&answer, l.now);
        }
    }
    // The broker restarts and publishes the watcher's Will: the engine forgets the watcher.
    watcher.connection_lost();
    l.engine.drop_client("watcher");
    // Back before the engine listens again: the re-registration and read-back are lost.
    let lost = watcher.resume(l.now).unwrap();
    assert_eq!(lost.len(), 2);
    l.answer(&mut writer, &set("k", "missed"), &CallOptions::default())
        .unwrap();
    // Nothing is sent again before the re-registration's timeout...
    assert!(watcher.expire(l.now + 2_999).is_empty());
    assert!(watcher.take_publishes().is_empty());
    // ...and after it, both go out again; no caller hears of the timeout.
    l.now += 3_000;
    assert!(watcher.expire(l.now).is_empty());
    let retries = watcher.take_publishes();
    assert_eq!(retries.len(), 2, "KEYNOTIFY and GET again");
    let mut events = Vec::new();
    for p in retries {
        for answer in l.deliver(&watcher, p) {
            events.extend(watcher.handle(&answer, l.now));
        }
    }
    // The change made meanwhile is reported, and the registration is live again.
    assert!(
        matches!(&events[..], [Event::Changed { synthetic: true, change: Notification::Set(v), .. }] if v.value() == "missed"),
        "{events:?}"
    );
    assert_eq!(watcher.in_flight(), 0, "answered: nothing left to retry");
    assert!(watcher.expire(l.now + 60_000).is_empty());
    assert!(watcher.take_publishes().is_empty());
    let (call, publish) = writer
        .call(&set("k", "live"), &CallOptions::default(), l.now)
        .unwrap();
    let mut out = Vec::new();
    l.engine.handle(publish, l.now, &mut out);
    let live: Vec<_> = out
        .iter()
        .filter_map(|p| watcher.handle(p, l.now))
        .collect();
    assert!(
        matches!(
            &live[..],
            [Event::Changed {
                synthetic: false,
                ..
            }]
        ),
        "{live:?} ({call})"
    );
}

#[test]
fn an_observer_renews_its_registrations_every_third_of_the_announced_lease() {
    let mut l = Loop::new();
    let mut watcher = client("watcher");
    // A server node announces itself with a 3 s lease.
    let presence = Publish {
        topic: topics::server_presence_topic("engine"),
        payload: Bytes::from_static(b"online e1 max_packet_size=1048576 lease_ms=3000"),
        qos: 1,
        properties: Default::default(),
    };
    assert_eq!(watcher.handle(&presence, l.now), None);
    // Nothing to renew while nothing is observed.
    assert_eq!(watcher.next_deadline(), None);
    let (_, publishes) = watcher.observe(Bytes::from_static(b"k"), l.now).unwrap();
    for p in publishes {
        for answer in l.deliver(&watcher, p) {
            watcher.handle(&answer, l.now);
        }
    }
    assert_eq!(watcher.next_deadline(), Some(T0 + 1_000));
    l.now += 1_000;
    assert!(watcher.expire(l.now).is_empty());
    let renewal = watcher.take_publishes();
    assert_eq!(renewal.len(), 1, "one KEYNOTIFY renews them all");
    assert_eq!(
        &renewal[0].payload[..],
        b"*2\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n"
    );
    for p in renewal {
        for answer in l.deliver(&watcher, p) {
            assert_eq!(watcher.handle(&answer, l.now), None, "nobody waits for it");
        }
    }
    assert_eq!(watcher.next_deadline(), Some(T0 + 2_000));
}

#[test]
fn a_node_that_serves_no_state_store_is_passed_by() {
    let mut l = Loop::new();
    let mut watcher = client("watcher");
    let (_, publishes) = watcher.observe(Bytes::from_static(b"k"), l.now).unwrap();
    for p in publishes {
        for answer in l.deliver(&watcher, p) {
            watcher.handle(&answer, l.now);
        }
    }
    let presence = |node: &str, payload: &[u8]| Publish {
        topic: topics::server_presence_topic(node),
        payload: Bytes::copy_from_slice(payload),
        qos: 1,
        properties: Default::default(),
    };
    // A node of jobs and commands only starts, restarts, and asks for a short lease: the
    // client's registrations are none of its business.
    for payload in [
        &b"online j1 lease_ms=3000 serves=jobs,commands"[..],
        b"online j2 lease_ms=3000 serves=jobs,commands",
    ] {
        assert_eq!(watcher.handle(&presence("jobs-node", payload), l.now), None);
        assert!(watcher.take_publishes().is_empty());
    }
    assert_eq!(watcher.next_deadline(), None, "no lease to renew");
    // A state store node's restart is news: the observed key is registered again.
    for payload in [&b"online s1 serves=state"[..], b"online s2 serves=state"] {
        watcher.handle(&presence("store-node", payload), l.now);
    }
    let again = watcher.take_publishes();
    assert!(
        again
            .iter()
            .any(|p| p.payload.windows(9).any(|w| w == b"KEYNOTIFY")),
        "{again:?}"
    );
}
