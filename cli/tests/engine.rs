//! The state store's semantics, row by row of spec §1–7, through `Engine::handle` exactly as
//! a server drives it.

mod common;

use std::collections::HashSet;
use std::num::NonZeroU64;

use bytes::Bytes;
use common::{Answer, Harness, NODE, T0, client_ts, seen};
use mqstore_core::ServiceError;
use mqstore_core::codec::{Bulk, Condition, Notification, Request, Response, SetRequest};
use mqstore_core::engine::{AccessRule, AccessRules, EngineConfig, Outcome};
use mqstore_core::envelope::{DropReason, EnvelopeError};
use mqstore_core::hlc::Hlc;
use mqstore_core::store::Quotas;
use mqstore_core::topics;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn set(key: &str, value: &str) -> Request {
    Request::Set(SetRequest::new(b(key), b(value)))
}

fn set_with(key: &str, value: &str, condition: Condition, px: Option<u64>) -> Request {
    Request::Set(SetRequest {
        key: b(key),
        value: Bulk::new(b(value)),
        condition,
        expires_in_ms: px.and_then(NonZeroU64::new),
    })
}

fn get(key: &str) -> Request {
    Request::Get { key: b(key) }
}

fn del(key: &str) -> Request {
    Request::Del { key: b(key) }
}

fn vdel(key: &str, value: &str) -> Request {
    Request::VDel {
        key: b(key),
        value: b(value),
    }
}

fn watch(key: &str) -> Request {
    Request::KeyNotify {
        key: b(key),
        stop: false,
    }
}

fn stop(key: &str) -> Request {
    Request::KeyNotify {
        key: b(key),
        stop: true,
    }
}

fn scan(pattern: &str, token: Option<Bytes>) -> Request {
    Request::Scan {
        pattern: b(pattern),
        token,
    }
}

fn value(v: &str) -> Response {
    Response::Value(Bulk::new(b(v)))
}

fn err(e: ServiceError) -> Response {
    Response::Error(e)
}

fn version(answer: &Answer) -> Hlc {
    Hlc::parse(answer.ts().expect("__ts")).unwrap()
}

// ---- §1 transport and §1.1 envelope ----

#[test]
fn every_200_response_carries_the_envelope() {
    let mut h = Harness::new();
    for request in [
        set("k", "v"),
        get("k"),
        get("absent"),
        Request::Get { key: Bytes::new() },
    ] {
        let a = h.call("c1", &request, &[]);
        let r = a.response.as_ref().unwrap();
        assert_eq!(a.status(), Some("200"), "{request:?}");
        assert_eq!(a.prop("__srcId"), Some(NODE));
        assert_eq!(a.prop("__protVer"), Some("1.0"));
        assert_eq!(
            r.properties.content_type.as_deref(),
            Some("application/octet-stream")
        );
        assert_eq!(r.properties.payload_format_indicator, Some(0));
        assert_eq!(r.properties.message_expiry_interval, Some(10));
        assert_eq!(r.topic, topics::response_topic("c1"));
    }
}

#[test]
fn unanswerable_requests_are_dropped() {
    let mut h = Harness::new();
    let mut m = h.message("c1", get("k").to_bytes(), &[]);
    m.properties.response_topic = None;
    assert_eq!(
        h.handle(m).outcome,
        Outcome::Dropped(DropReason::NoResponseTopic)
    );
    for topic in [
        topics::INVOKE.to_owned(),
        format!("{}/636C69656E74/command/notify/6B", topics::CLIENTS_PREFIX),
    ] {
        let mut m = h.message("c1", get("k").to_bytes(), &[]);
        m.properties.response_topic = Some(topic);
        let a = h.handle(m);
        assert_eq!(
            a.outcome,
            Outcome::Dropped(DropReason::ForbiddenResponseTopic)
        );
        assert!(a.notifications.is_empty());
    }
}

#[test]
fn envelope_errors_are_answered_with_their_status_and_change_nothing() {
    let mut h = Harness::new();
    let mut m = h.message(
        "c1",
        set("k", "v").to_bytes(),
        &[("__ts", &client_ts(T0, "c1"))],
    );
    m.properties.correlation_data = None;
    let a = h.handle(m);
    assert_eq!(
        a.outcome,
        Outcome::Rejected(EnvelopeError::MissingCorrelationData)
    );
    assert_eq!(a.status(), Some("400"));
    assert_eq!(a.prop("__propName"), Some("Correlation Data"));

    let mut m = h.message(
        "c1",
        set("k", "v").to_bytes(),
        &[("__ts", &client_ts(T0, "c1"))],
    );
    m.qos = 0;
    let a = h.handle(m);
    assert_eq!(a.status(), Some("400"));
    assert_eq!(a.outcome, Outcome::Rejected(EnvelopeError::QosZero));

    let a = h.raw(
        "c1",
        &set("k", "v").to_bytes(),
        &[("__protVer", "2.1"), ("__ts", "1:0:c1")],
    );
    assert_eq!(a.status(), Some("505"));
    assert_eq!(a.prop("__supProtMajVer"), Some("1"));
    assert_eq!(a.prop("__requestProtVer"), Some("2.1"));
    assert!(a.response.unwrap().payload.is_empty());

    assert_eq!(h.engine.stats().keys, 0, "nothing was set");
}

#[test]
fn client_id_comes_from_src_id_or_the_response_topic() {
    let mut h = Harness::new();
    // No __srcId: the id is taken from clients/{id}/...
    let mut m = h.message("dev-9", watch("k").to_bytes(), &[]);
    m.properties.user_properties.clear();
    assert_eq!(h.handle(m).payload(), Response::Ok);
    let a = h.call("writer", &set("k", "v"), &[]);
    assert_eq!(seen(&a.notifications[0]).client, "dev-9");

    // Neither: KEYNOTIFY cannot name a notification topic.
    let mut m = h.message("dev-9", watch("k").to_bytes(), &[]);
    m.properties.user_properties.clear();
    m.properties.response_topic = Some("replies/anonymous".into());
    let a = h.handle(m);
    assert_eq!(a.outcome, Outcome::Rejected(EnvelopeError::MissingClientId));
    assert_eq!(a.status(), Some("400"));
    assert_eq!(a.prop("__propName"), Some("__srcId"));
}

#[test]
fn sdk_extra_properties_are_ignored() {
    let mut h = Harness::new();
    let a = h.call(
        "c1",
        &set("k", "v"),
        &[
            ("$partition", "p"),
            ("$high_priority", "true"),
            ("__invId", "x"),
            ("metriccategory", "m"),
        ],
    );
    assert_eq!(a.payload(), Response::Ok);
}

// ---- §2/§3 commands and their responses ----

#[test]
fn set_get_del_round_trip() {
    let mut h = Harness::new();
    assert_eq!(h.call("c", &set("k", "v1"), &[]).payload(), Response::Ok);
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value("v1"));
    assert_eq!(h.call("c", &set("k", "v2"), &[]).payload(), Response::Ok);
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value("v2"));
    assert_eq!(h.call("c", &del("k"), &[]).payload(), Response::Deleted(1));
    assert_eq!(h.call("c", &get("k"), &[]).payload(), Response::Absent);
    assert_eq!(h.call("c", &del("k"), &[]).payload(), Response::Deleted(0));
}

#[test]
fn values_are_binary_and_may_be_empty() {
    let mut h = Harness::new();
    let binary = "a\r\nb\0c$-1\r\n";
    h.call("c", &set("k", binary), &[]);
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value(binary));
    h.call("c", &set("e", ""), &[]);
    assert_eq!(h.call("c", &get("e"), &[]).payload(), value(""));
}

#[test]
fn lower_case_verbs_work() {
    let mut h = Harness::new();
    let a = h.raw(
        "c",
        b"*3\r\n$3\r\nset\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n",
        &[("__ts", &client_ts(T0, "c"))],
    );
    assert_eq!(a.payload(), Response::Ok);
    assert_eq!(h.call("c", &get("SETKEY2"), &[]).payload(), value("VALUE5"));
}

#[test]
fn nx_sets_only_absent_keys() {
    let mut h = Harness::new();
    let nx = set_with("k", "first", Condition::NotExists, None);
    let first = h.call("c", &nx, &[]);
    assert_eq!(first.payload(), Response::Ok);
    let again = h.call(
        "c",
        &set_with("k", "second", Condition::NotExists, None),
        &[],
    );
    assert_eq!(again.payload(), Response::NotApplied);
    // Not applied still carries a __ts: the key's current version.
    assert_eq!(again.ts(), first.ts());
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value("first"));
}

#[test]
fn nex_renews_for_the_holder_only() {
    let mut h = Harness::new();
    let lease = |who: &str| set_with("LockName", who, Condition::NotExistsOrEqual, Some(10_000));
    assert_eq!(h.call("c1", &lease("Client1"), &[]).payload(), Response::Ok);
    h.now += 5_000;
    assert_eq!(
        h.call("c1", &lease("Client1"), &[]).payload(),
        Response::Ok,
        "renewal"
    );
    assert_eq!(
        h.call("c2", &lease("Client2"), &[]).payload(),
        Response::NotApplied
    );
    // The renewal moved the deadline: 9 s after it the lease still holds.
    h.now += 9_000;
    assert_eq!(
        h.call("c2", &get("LockName"), &[]).payload(),
        value("Client1")
    );
    h.now += 1_000;
    assert_eq!(
        h.call("c2", &lease("Client2"), &[]).payload(),
        Response::Ok,
        "expired"
    );
}

#[test]
fn vdel_deletes_only_a_matching_value() {
    let mut h = Harness::new();
    h.call("c", &set("k", "ABC"), &[]);
    assert_eq!(
        h.call("c", &vdel("k", "XYZ"), &[]).payload(),
        Response::NotApplied
    );
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value("ABC"));
    assert_eq!(
        h.call("c", &vdel("k", "ABC"), &[]).payload(),
        Response::Deleted(1)
    );
    assert_eq!(
        h.call("c", &vdel("k", "ABC"), &[]).payload(),
        Response::Deleted(0)
    );
}

#[test]
fn keynotify_register_is_idempotent_and_stop_reports_absence() {
    let mut h = Harness::new();
    assert_eq!(
        h.call("c", &watch("never-set"), &[]).payload(),
        Response::Ok
    );
    assert_eq!(
        h.call("c", &watch("never-set"), &[]).payload(),
        Response::Ok
    );
    assert_eq!(h.engine.stats().watches, 1);
    assert_eq!(h.call("c", &stop("never-set"), &[]).payload(), Response::Ok);
    assert_eq!(
        h.call("c", &stop("never-set"), &[]).payload(),
        Response::Deleted(0)
    );
    assert_eq!(h.engine.stats().watches, 0);
    // The GET option is accepted.
    let a = h.raw(
        "c",
        b"*3\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n$3\r\nGET\r\n",
        &[],
    );
    assert_eq!(a.payload(), Response::Ok);
}

// ---- every error text over the engine ----

#[test]
fn every_error_text_is_produced() {
    let mut produced = HashSet::new();
    let mut expect = |a: Answer, e: ServiceError| {
        assert_eq!(a.payload(), err(e.clone()));
        assert_eq!(
            a.status(),
            Some("200"),
            "-ERR payloads still have status 200"
        );
        assert!(a.ts().is_some(), "errors carry the engine's current HLC");
        produced.insert(e);
    };
    let mut h = Harness::with(
        EngineConfig {
            access: AccessRules::new(vec![
                AccessRule::new("*", b"secret/*", false, false),
                AccessRule::new("*", b"*", true, true),
            ]),
            ..EngineConfig::new(NODE)
        },
        Quotas {
            max_keys: Some(3),
            max_bytes: None,
            ..Quotas::default()
        },
    );
    let ahead = client_ts(T0 + 60_001, "c");
    expect(
        h.call("c", &set("k", "v"), &[("__ts", &ahead)]),
        ServiceError::TimestampSkew,
    );
    h.call(
        "c",
        &set("fenced", "v"),
        &[("__ft", &client_ts(T0, "lock"))],
    );
    expect(
        h.call("c", &set("fenced", "w"), &[]),
        ServiceError::FencingTokenRequired,
    );
    expect(
        h.call("c", &set("fenced", "w"), &[("__ft", &ahead)]),
        ServiceError::FencingTokenSkew,
    );
    expect(
        h.call(
            "c",
            &set("fenced", "w"),
            &[("__ft", &client_ts(T0 - 1, "lock"))],
        ),
        ServiceError::FencingTokenLowerVersion,
    );
    h.call("c", &set("a", "v"), &[]);
    h.call("c", &set("b", "v"), &[]);
    expect(
        h.call("c", &set("d", "v"), &[]),
        ServiceError::QuotaExceeded,
    );
    expect(
        h.raw("c", b"*2\r\n$3\r\nGET\r\n", &[]),
        ServiceError::SyntaxError,
    );
    expect(
        h.call("c", &get("secret/x"), &[]),
        ServiceError::NotAuthorized,
    );
    expect(
        h.raw("c", b"*1\r\n$4\r\nPING\r\n", &[]),
        ServiceError::UnknownCommand,
    );
    expect(
        h.raw("c", b"*1\r\n$3\r\nGET\r\n", &[]),
        ServiceError::WrongNumberOfArguments,
    );
    expect(
        h.raw("c", &set("k", "v").to_bytes(), &[]),
        ServiceError::MissingTimestamp,
    );
    expect(
        h.call("c", &set("k", "v"), &[("__ts", "yesterday")]),
        ServiceError::MalformedTimestamp,
    );
    expect(
        h.raw("c", b"*2\r\n$3\r\nGET\r\n$0\r\n\r\n", &[]),
        ServiceError::KeyLengthZero,
    );
    expect(
        h.call(
            "c",
            &Request::KeyNotify {
                key: Bytes::from(vec![b'k'; 33_000]),
                stop: false,
            },
            &[],
        ),
        ServiceError::NotificationTopicTooLong,
    );
    // The server, not the engine, answers with this one (it knows the broker's limit; see
    // tests/server.rs).
    let engine_errors = ServiceError::KNOWN
        .iter()
        .filter(|e| **e != ServiceError::ResponseTooLarge)
        .count();
    assert_eq!(produced.len(), engine_errors);
}

#[test]
fn errors_change_nothing() {
    let mut h = Harness::new();
    h.call("c", &set("k", "v"), &[("__ft", &client_ts(T0, "lock"))]);
    h.call("c", &watch("k"), &[]);
    let before = h.engine.stats();
    let a = h.call("c", &set("k", "w"), &[]);
    assert_eq!(a.payload(), err(ServiceError::FencingTokenRequired));
    assert!(a.notifications.is_empty());
    let a = h.call("c", &del("k"), &[("__ft", "garbage")]);
    assert_eq!(a.payload(), err(ServiceError::MalformedTimestamp));
    assert_eq!(h.engine.stats(), before);
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value("v"));
}

#[test]
fn access_rules_filter_scan_and_guard_writes() {
    let mut h = Harness::with(
        EngineConfig {
            access: AccessRules::new(vec![
                AccessRule::new("admin", b"*", true, true),
                AccessRule::new("*", b"public/*", true, false),
            ]),
            ..EngineConfig::new(NODE)
        },
        Quotas::default(),
    );
    h.call("admin", &set("public/a", "1"), &[]);
    h.call("admin", &set("private/b", "2"), &[]);
    assert_eq!(
        h.call("guest", &set("public/a", "x"), &[]).payload(),
        err(ServiceError::NotAuthorized)
    );
    assert_eq!(h.call("guest", &get("public/a"), &[]).payload(), value("1"));
    assert_eq!(
        h.call("guest", &watch("private/b"), &[]).payload(),
        err(ServiceError::NotAuthorized)
    );
    let Response::Keys { keys, token: None } = h.call("guest", &scan("*", None), &[]).payload()
    else {
        panic!("one page")
    };
    assert_eq!(keys, vec![b("public/a")]);
}

// ---- §4 notifications ----

#[test]
fn notifications_for_set_del_vdel_precede_the_response() {
    let mut h = Harness::new();
    assert_eq!(
        h.call("watcher", &watch("SOMEKEY"), &[]).payload(),
        Response::Ok
    );

    let a = h.call("writer", &set("SOMEKEY", "abc"), &[]);
    assert_eq!(a.notifications.len(), 1);
    let n = &a.notifications[0];
    assert_eq!(
        n.topic,
        format!(
            "{}/77617463686572/command/notify/534F4D454B4559",
            topics::CLIENTS_PREFIX
        )
    );
    assert_eq!(
        &n.payload[..],
        b"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nabc\r\n"
    );
    assert_eq!(
        n.properties.content_type.as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(
        seen(n).ts,
        a.ts().unwrap(),
        "notification __ts = the change's version"
    );

    let a = h.call("writer", &vdel("SOMEKEY", "abc"), &[]);
    assert_eq!(seen(&a.notifications[0]).change, Notification::Delete);
    assert_eq!(
        &a.notifications[0].payload[..],
        b"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"
    );
    assert_eq!(seen(&a.notifications[0]).ts, a.ts().unwrap());

    h.call("writer", &set("SOMEKEY", "x"), &[]);
    let a = h.call("writer", &del("SOMEKEY"), &[]);
    assert_eq!(seen(&a.notifications[0]).change, Notification::Delete);
    assert_eq!(seen(&a.notifications[0]).ts, a.ts().unwrap());

    // Writes that change nothing notify nobody.
    for request in [del("SOMEKEY"), vdel("SOMEKEY", "x")] {
        assert!(h.call("writer", &request, &[]).notifications.is_empty());
    }
    h.call("writer", &set("SOMEKEY", "x"), &[]);
    let nx = set_with("SOMEKEY", "y", Condition::NotExists, None);
    assert!(h.call("writer", &nx, &[]).notifications.is_empty());
}

#[test]
fn watcher_sees_its_own_write_before_stopping() {
    let mut h = Harness::new();
    h.call("c", &watch("k"), &[]);
    let a = h.call("c", &set("k", "v"), &[]);
    assert_eq!(seen(&a.notifications[0]).client, "c");
    assert_eq!(h.call("c", &stop("k"), &[]).payload(), Response::Ok);
    assert!(h.call("c", &set("k", "w"), &[]).notifications.is_empty());
}

#[test]
fn every_watcher_is_notified_and_dropping_a_client_removes_only_its_watches() {
    let mut h = Harness::new();
    for client in ["a", "b", "c"] {
        h.call(client, &watch("k"), &[]);
        h.call(client, &watch("other"), &[]);
    }
    let a = h.call("w", &set("k", "v"), &[]);
    let clients: HashSet<_> = a.notifications.iter().map(|n| seen(n).client).collect();
    assert_eq!(clients, ["a", "b", "c"].map(String::from).into());
    assert_eq!(h.engine.drop_client("b"), 2);
    assert_eq!(h.engine.drop_client("b"), 0);
    let a = h.call("w", &set("k", "v2"), &[]);
    let clients: HashSet<_> = a.notifications.iter().map(|n| seen(n).client).collect();
    assert_eq!(clients, ["a", "c"].map(String::from).into());
    assert_eq!(h.engine.stats().watches, 4);
}

/// A node on Redis that learns nobody received a notification (the broker's PUBACK 0x10)
/// drops that client's registrations made before the change, never one made since: the
/// client, back and subscribed again, may have registered through another node before this
/// drop reaches Redis (a nemesis run's observer went deaf to three keys that way).
#[test]
fn a_notification_nobody_received_drops_only_the_registrations_made_before_it() {
    let mut h = Harness::on_redis();
    h.call("c", &watch("k"), &[]);
    h.call("c", &watch("j"), &[]);
    let unheard = h.call("w", &set("k", "v1"), &[]).notifications.remove(0);
    assert_eq!(seen(&unheard).client, "c");
    // The client came back and registered both keys again before the drop ran.
    h.call("c", &watch("k"), &[]);
    h.call("c", &watch("j"), &[]);
    assert_eq!(h.drop_unheard(&unheard), 0);
    assert_eq!(h.engine.stats().watches, 2);
    let heard = h.call("w", &set("k", "v2"), &[]);
    assert_eq!(seen(&heard.notifications[0]).client, "c");
    // Not back this time: a drop for the latest change takes every registration made before.
    let later = h.call("w", &set("j", "v1"), &[]).notifications.remove(0);
    assert_eq!(h.drop_unheard(&later), 2);
    assert_eq!(h.engine.stats().watches, 0);
    assert!(h.call("w", &set("k", "v3"), &[]).notifications.is_empty());
    // A registration made after the drop's change but before it ran stays, the others go.
    h.call("c", &watch("k"), &[]);
    let unheard = h.call("w", &set("k", "v4"), &[]).notifications.remove(0);
    h.call("c", &watch("j"), &[]);
    assert_eq!(h.drop_unheard(&unheard), 1);
    assert!(h.call("w", &set("k", "v5"), &[]).notifications.is_empty());
    let j = h.call("w", &set("j", "v2"), &[]);
    assert_eq!(seen(&j.notifications[0]).client, "c");
}

#[test]
fn expiry_notifies_watchers_with_a_fresh_version() {
    let mut h = Harness::new();
    h.call("c", &watch("k"), &[]);
    let a = h.call("c", &set_with("k", "v", Condition::Always, Some(100)), &[]);
    let written = version(&a);
    assert_eq!(h.engine.next_deadline(), Some(T0 + 100));
    h.now += 99;
    assert!(h.expire().is_empty());
    h.now += 1;
    let notes = h.expire();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].change, Notification::Delete);
    let deleted = Hlc::parse(&notes[0].ts).unwrap();
    assert!(deleted > written);
    assert_eq!(&*deleted.node, NODE);
    assert_eq!(h.engine.next_deadline(), None);
}

#[test]
fn expired_keys_are_never_seen_even_before_a_sweep() {
    let mut h = Harness::new();
    h.call("c", &watch("k"), &[]);
    h.call("c", &set_with("k", "v", Condition::Always, Some(50)), &[]);
    h.now += 50;
    // No expire() call: the request itself sweeps first, and the DELETE precedes the answer.
    let a = h.call("c", &get("k"), &[]);
    assert_eq!(a.payload(), Response::Absent);
    assert_eq!(a.notifications.len(), 1);
    assert_eq!(seen(&a.notifications[0]).change, Notification::Delete);
    // NX sees the key as gone too.
    h.call("c", &set_with("j", "1", Condition::Always, Some(10)), &[]);
    h.now += 10;
    let a = h.call("c", &set_with("j", "2", Condition::NotExists, None), &[]);
    assert_eq!(a.payload(), Response::Ok);
}

#[test]
fn set_without_px_makes_a_key_persistent() {
    let mut h = Harness::new();
    h.call("c", &set_with("k", "v", Condition::Always, Some(10)), &[]);
    h.call("c", &set("k", "w"), &[]);
    assert_eq!(h.engine.next_deadline(), None);
    h.now += 1_000;
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value("w"));
}

// ---- §5 versions ----

#[test]
fn versions_follow_the_spec() {
    let mut h = Harness::new();
    // The spec's example: client ts = engine clock → counter 1 on the engine's node.
    let a = h.call("c", &set("k", "v"), &[("__ts", &format!("{T0}:0:CLIENT"))]);
    assert_eq!(a.ts(), Some(format!("00{T0}:00001:{NODE}").as_str()));
    // GET returns that version byte for byte.
    assert_eq!(h.call("c", &get("k"), &[]).ts(), a.ts());
    // GET of an absent key has no __ts at all.
    assert_eq!(h.call("c", &get("nope"), &[]).ts(), None);
    // DEL: a fresh version, newer than the key's.
    let d = h.call("c", &del("k"), &[]);
    assert!(version(&d) > version(&a));
    // :0, KEYNOTIFY, SCAN: the engine's current HLC, never behind what it issued.
    for request in [del("k"), watch("k"), scan("*", None)] {
        let other = h.call("c", &request, &[]);
        assert!(version(&other) >= version(&d), "{request:?}");
        assert_eq!(&*version(&other).node, NODE);
    }
}

#[test]
fn a_set_version_is_newer_than_the_request_timestamp_and_pulls_the_clock_ahead() {
    let mut h = Harness::new();
    let ahead = format!("{}:7:fast-client", T0 + 30_000);
    let a = h.call("c", &set("k", "v"), &[("__ts", &ahead)]);
    let v = version(&a);
    assert!(v > Hlc::parse(&ahead).unwrap());
    assert_eq!((v.wall_ms, v.counter), (T0 + 30_000, 8));
    // Later versions stay ahead even though the wall clock is behind.
    let b = h.call("c", &set("j", "v"), &[]);
    assert!(version(&b) > v);
}

#[test]
fn a_timestamp_at_the_counter_limit_is_accepted_and_one_past_it_is_not() {
    let mut h = Harness::new();
    let a = h.call(
        "c",
        &set("k", "v"),
        &[("__ts", &format!("{T0}:2147483647:c"))],
    );
    assert_eq!(a.payload(), Response::Ok);
    // The version follows it, its counter still a valid 32-bit int: 1 ms later.
    let v = version(&a);
    assert_eq!((v.wall_ms, v.counter), (T0 + 1, 0));
    let a = h.call(
        "c",
        &set("k", "v"),
        &[("__ts", &format!("{T0}:2147483648:c"))],
    );
    assert_eq!(a.payload(), err(ServiceError::MalformedTimestamp));
}

// ---- §6 fencing ----

#[test]
fn fencing_tokens_guard_set_del_and_vdel() {
    let mut h = Harness::new();
    let lock = h.call(
        "holder",
        &set_with("lock", "holder", Condition::NotExistsOrEqual, Some(10_000)),
        &[],
    );
    let token = lock.ts().unwrap().to_owned();
    assert_eq!(
        h.call("holder", &set("guarded", "1"), &[("__ft", &token)])
            .payload(),
        Response::Ok
    );
    // A newer holder's token replaces it; the old holder is now stale.
    h.now += 1;
    let newer = client_ts(h.now, "next");
    assert_eq!(
        h.call("next", &set("guarded", "2"), &[("__ft", &newer)])
            .payload(),
        Response::Ok
    );
    for request in [set("guarded", "3"), del("guarded"), vdel("guarded", "2")] {
        assert_eq!(
            h.call("holder", &request, &[("__ft", &token)]).payload(),
            err(ServiceError::FencingTokenLowerVersion),
            "{request:?}"
        );
        assert_eq!(
            h.call("holder", &request, &[]).payload(),
            err(ServiceError::FencingTokenRequired),
            "{request:?}"
        );
    }
    // An equal token is enough, and DEL with it removes the key and its token.
    assert_eq!(
        h.call("next", &vdel("guarded", "2"), &[("__ft", &newer)])
            .payload(),
        Response::Deleted(1)
    );
    assert_eq!(
        h.call("anyone", &set("guarded", "4"), &[]).payload(),
        Response::Ok
    );
}

#[test]
fn a_fencing_token_is_checked_before_the_condition() {
    let mut h = Harness::new();
    h.call("c", &set("k", "v"), &[("__ft", &client_ts(T0, "x"))]);
    let nx = set_with("k", "w", Condition::NotExists, None);
    assert_eq!(
        h.call("c", &nx, &[]).payload(),
        err(ServiceError::FencingTokenRequired)
    );
}

// ---- §7 quotas ----

#[test]
fn byte_quota_counts_keys_and_values_and_rejects_without_change() {
    let mut h = Harness::with(
        EngineConfig::new(NODE),
        Quotas {
            max_keys: None,
            max_bytes: Some(10),
            ..Quotas::default()
        },
    );
    assert_eq!(
        h.call("c", &set("k", "123456789"), &[]).payload(),
        Response::Ok
    );
    assert_eq!(
        h.call("c", &set("k", "1234567890"), &[]).payload(),
        err(ServiceError::QuotaExceeded)
    );
    assert_eq!(h.call("c", &get("k"), &[]).payload(), value("123456789"));
    assert_eq!(h.engine.stats().bytes, 10);
    // Replacing with something smaller frees room.
    assert_eq!(h.call("c", &set("k", "1"), &[]).payload(), Response::Ok);
    assert_eq!(
        h.call("c", &set("j", "1234567"), &[]).payload(),
        Response::Ok
    );
    assert_eq!(h.engine.stats().bytes, 10);
}

#[test]
fn key_quota_frees_with_deletion_and_expiry() {
    let mut h = Harness::with(
        EngineConfig::new(NODE),
        Quotas {
            max_keys: Some(1),
            max_bytes: None,
            ..Quotas::default()
        },
    );
    h.call("c", &set_with("a", "v", Condition::Always, Some(5)), &[]);
    assert_eq!(
        h.call("c", &set("b", "v"), &[]).payload(),
        err(ServiceError::QuotaExceeded)
    );
    assert_eq!(
        h.call("c", &set("a", "overwrite"), &[]).payload(),
        Response::Ok
    );
    h.call("c", &del("a"), &[]);
    assert_eq!(
        h.call("c", &set_with("b", "v", Condition::Always, Some(5)), &[])
            .payload(),
        Response::Ok
    );
    h.now += 5;
    assert_eq!(h.call("c", &set("c", "v"), &[]).payload(), Response::Ok);
}

// ---- SCAN ----

fn scan_all(
    h: &mut Harness,
    pattern: &str,
    mut between: impl FnMut(&mut Harness, usize),
) -> Vec<Bytes> {
    let mut found = Vec::new();
    let mut token = None;
    for page in 0.. {
        let a = h.call("c", &scan(pattern, token.take()), &[]);
        let Response::Keys { keys, token: next } = a.payload() else {
            panic!("{:?}", a.payload())
        };
        found.extend(keys);
        match next {
            Some(next) => token = Some(next),
            None => break,
        }
        between(h, page);
    }
    found
}

#[test]
fn scan_pages_through_matching_keys() {
    let config = EngineConfig {
        scan_page_size: 3,
        ..EngineConfig::new(NODE)
    };
    let mut h = Harness::with(config, Quotas::default());
    for i in 0..10 {
        h.call("c", &set(&format!("user:{i}"), "v"), &[]);
        h.call("c", &set(&format!("device:{i}"), "v"), &[]);
    }
    let mut keys = scan_all(&mut h, "user:*", |_, _| {});
    keys.sort();
    let expected: Vec<_> = (0..10).map(|i| b(&format!("user:{i}"))).collect();
    assert_eq!(keys, expected);
    assert_eq!(scan_all(&mut h, "device:[0-2]", |_, _| {}).len(), 3);
    assert_eq!(scan_all(&mut h, "nothing*", |_, _| {}).len(), 0);
    assert_eq!(scan_all(&mut h, "*", |_, _| {}).len(), 20);
    // A single page has no token.
    let a = h.call("c", &scan("user:1", None), &[]);
    assert_eq!(
        a.payload(),
        Response::Keys {
            keys: vec![b("user:1")],
            token: None
        }
    );
}

#[test]
fn scan_returns_stable_keys_exactly_once_while_keys_change() {
    let config = EngineConfig {
        scan_page_size: 4,
        ..EngineConfig::new(NODE)
    };
    let mut h = Harness::with(config, Quotas::default());
    for i in 0..40 {
        h.call("c", &set(&format!("k{i:02}"), "v"), &[]);
    }
    // Between pages, delete and add keys on both sides of the cursor (never the stable ones:
    // k00..k39 with an even number).
    let keys = scan_all(&mut h, "k*", |h, page| {
        h.call("c", &del(&format!("k{:02}", (page * 2 + 1) % 40)), &[]);
        h.call("c", &set(&format!("k{:02}x", page), "new"), &[]);
        h.call(
            "c",
            &set(&format!("k{:02}y", 39 - page.min(39)), "new"),
            &[],
        );
    });
    let mut seen_once = HashSet::new();
    for key in &keys {
        assert!(seen_once.insert(key.clone()), "{key:?} returned twice");
    }
    for i in (0..40).step_by(2) {
        assert!(
            seen_once.contains(&b(&format!("k{i:02}"))),
            "k{i:02} missing"
        );
    }
}

#[test]
fn scan_budget_bounds_work_per_page() {
    let config = EngineConfig {
        scan_page_size: 100,
        scan_budget: 5,
        ..EngineConfig::new(NODE)
    };
    let mut h = Harness::with(config, Quotas::default());
    for i in 0..20 {
        h.call("c", &set(&format!("a{i:02}"), "v"), &[]);
    }
    h.call("c", &set("a99-match", "v"), &[]);
    // The first page examines five keys, finds nothing, and still says where to go on.
    let Response::Keys {
        keys,
        token: Some(_),
    } = h.call("c", &scan("*match", None), &[]).payload()
    else {
        panic!("expected a continuation")
    };
    assert!(keys.is_empty());
    assert_eq!(scan_all(&mut h, "*match", |_, _| {}), vec![b("a99-match")]);
}

#[test]
fn a_bad_scan_token_is_a_syntax_error() {
    let mut h = Harness::new();
    let a = h.call("c", &scan("*", Some(b("not-a-token"))), &[]);
    assert_eq!(a.payload(), err(ServiceError::SyntaxError));
}

#[test]
fn malformed_payloads_are_answered_and_change_nothing() {
    let mut h = Harness::new();
    for junk in [
        &b""[..],
        b"\xff\xfe",
        b"*1\r\n",
        b"*-1\r\n",
        b"$3\r\nGET\r\n",
        b"*2\r\n$3\r\nGET\r\n$999999\r\nk\r\n",
    ] {
        let a = h.raw("c", junk, &[("__ts", "1:0:c")]);
        assert_eq!(a.payload(), err(ServiceError::SyntaxError), "{junk:?}");
        assert_eq!(
            a.outcome,
            Outcome::Answered {
                command: None,
                error: Some(ServiceError::SyntaxError)
            }
        );
    }
    assert_eq!(h.engine.stats().keys, 0);
}

// ---- stores that answer later (the shape a Redis store takes) ----

#[test]
fn a_store_that_answers_later_drives_the_same_engine() {
    use mqstore_core::engine::{Engine, RequestContext, Step};
    use mqstore_core::store::{MemoryStore, Store, StoreOp};

    // The engine owns no store; the driver ships each op and brings the reply back. (Keyspace
    // events off: the notifications are what this test follows.)
    let config = EngineConfig {
        keyspace_events: false,
        ..EngineConfig::new(NODE)
    };
    let mut engine = Engine::new(config, ()).unwrap();
    let mut remote = MemoryStore::new();
    let ts = client_ts(T0, "c");
    let context = RequestContext {
        client_id: Some("c"),
        timestamp: Some(&ts),
        ..RequestContext::default()
    };
    let mut run =
        |request: Request, notifications: &mut Vec<_>| match engine.begin(request, context, T0) {
            Step::Done(reply) => reply,
            Step::Store(pending) => {
                let reply = remote.apply(&pending.op, T0);
                engine.finish(pending, reply, T0, notifications)
            }
        };
    let mut notes = Vec::new();
    assert_eq!(run(watch("k"), &mut notes).response, Response::Ok);
    let set_reply = run(set("k", "v"), &mut notes);
    assert_eq!(set_reply.response, Response::Ok);
    assert_eq!(notes.len(), 1);
    assert_eq!(seen(&notes[0]).change, Notification::Set(Bulk::new(b("v"))));
    let got = run(get("k"), &mut notes);
    assert_eq!(got.response, value("v"));
    assert_eq!(got.version, set_reply.version);

    // Errors found before the store is needed never reach it.
    let Step::Done(reply) = engine.begin(set("k", "v"), RequestContext::default(), T0) else {
        panic!("a SET without __ts needs no store")
    };
    assert_eq!(reply.response, err(ServiceError::MissingTimestamp));

    // The op is plain data a driver can inspect (and serialize for Redis).
    let Step::Store(pending) = engine.begin(del("k"), context, T0) else {
        panic!()
    };
    assert!(
        matches!(&pending.op, StoreOp::Delete { key, if_value: None, fencing_token: None, .. } if key == "k")
    );
}

/// Issue 46: a SET and a DEL (or VDEL) of one key in flight at once on one node, the store
/// applying the DEL first (Redis serves a node's requests concurrently). The deletion and the
/// SET must get different versions, the later one in the store the newer; before the fix, on
/// Redis the SET got an older version than the deletion it followed, or the same one.
#[test]
fn a_deletion_and_a_set_in_flight_at_once_never_share_a_version() {
    use common::TestStore;
    use mqstore_core::engine::{Engine, RequestContext, Step};
    use mqstore_core::store::Store;

    let mut engine = Engine::new(EngineConfig::new(NODE), ()).unwrap();
    let mut store = TestStore::from_env(Quotas::default());
    let ts = client_ts(T0, "c");
    let context = RequestContext {
        client_id: Some("c"),
        timestamp: Some(&ts),
        ..RequestContext::default()
    };
    let mut notes = Vec::new();
    let begin = |engine: &mut Engine<()>, request: Request| match engine.begin(request, context, T0)
    {
        Step::Store(pending) => pending,
        Step::Done(reply) => panic!("{reply:?}"),
    };
    let mut versions = Vec::new();
    for delete in [del("k"), vdel("k", "v0")] {
        // The key exists.
        let pending = begin(&mut engine, set("k", "v0"));
        let reply = store.apply(&pending.op, T0);
        let first = engine.finish(pending, reply, T0, &mut notes);
        assert_eq!(first.response, Response::Ok);
        // A SET and a deletion begun in that order, applied in the other.
        let set_pending = begin(&mut engine, set("k", "v1"));
        let del_pending = begin(&mut engine, delete);
        let del_reply = store.apply(&del_pending.op, T0);
        let set_reply = store.apply(&set_pending.op, T0);
        let deleted = engine.finish(del_pending, del_reply, T0, &mut notes);
        let set = engine.finish(set_pending, set_reply, T0, &mut notes);
        assert_eq!(
            (&deleted.response, &set.response),
            (&Response::Deleted(1), &Response::Ok)
        );
        let (first, deleted, set) = (
            first.version.unwrap(),
            deleted.version.unwrap(),
            set.version.unwrap(),
        );
        assert!(
            first < deleted && deleted < set,
            "versions in the order the store applied the changes: {first:?} < {deleted:?} < {set:?}"
        );
        versions.extend([first, deleted, set]);
    }
    let distinct: HashSet<_> = versions.iter().collect();
    assert_eq!(distinct.len(), versions.len(), "{versions:?}");
}

/// The same for an expiry: a SET begun before the key's expiry was found (its candidate
/// version made), applied after it, gets a newer version than the expiry's DELETE; before,
/// the DELETE's version (the engine's clock after the key's) passed the SET's.
#[test]
fn an_expiry_and_a_set_in_flight_at_once_get_versions_in_their_order() {
    use common::TestStore;
    use mqstore_core::engine::{Engine, RequestContext, Step};
    use mqstore_core::store::Store;

    // (Keyspace events off: the notifications are what this test follows.)
    let config = EngineConfig {
        keyspace_events: false,
        ..EngineConfig::new(NODE)
    };
    let mut engine = Engine::new(config, ()).unwrap();
    let mut store = TestStore::from_env(Quotas::default());
    let mut notes = Vec::new();
    let begin = |engine: &mut Engine<()>, request: Request, now: u64| {
        let ts = client_ts(now, "c");
        let context = RequestContext {
            client_id: Some("c"),
            timestamp: Some(&ts),
            ..RequestContext::default()
        };
        match engine.begin(request, context, now) {
            Step::Store(pending) => pending,
            Step::Done(reply) => panic!("{reply:?}"),
        }
    };
    let pending = begin(&mut engine, watch("k"), T0);
    let reply = store.apply(&pending.op, T0);
    engine.finish(pending, reply, T0, &mut notes);
    let pending = begin(
        &mut engine,
        set_with("k", "v0", Condition::Always, Some(1_000)),
        T0,
    );
    let reply = store.apply(&pending.op, T0);
    engine.finish(pending, reply, T0, &mut notes);
    // Two seconds later: a SET begins, then the store finds the key expired, then the SET
    // applies.
    let later = T0 + 2_000;
    let set_pending = begin(&mut engine, set("k", "v1"), later);
    let expired = store.pop_expired(later).expect("the key expired");
    notes.clear();
    engine.expired(expired, later, &mut notes);
    let set_reply = store.apply(&set_pending.op, later);
    let set = engine.finish(set_pending, set_reply, later, &mut notes);
    let changes: Vec<_> = notes.iter().map(seen).collect();
    assert_eq!(changes.len(), 2, "{changes:?}");
    assert_eq!(changes[0].change, Notification::Delete);
    let deleted = Hlc::parse(&changes[0].ts).unwrap();
    let set = set.version.unwrap();
    assert_eq!(Hlc::parse(&changes[1].ts).unwrap(), set);
    assert!(
        deleted < set,
        "the expiry ({deleted:?}) before the SET ({set:?})"
    );
}

#[test]
fn a_store_answering_the_wrong_op_gets_an_internal_error_not_a_panic() {
    use mqstore_core::engine::{Engine, RequestContext, Step};
    use mqstore_core::store::StoreReply;

    let mut engine = Engine::new(EngineConfig::new(NODE), ()).unwrap();
    let Step::Store(pending) = engine.begin(get("k"), RequestContext::default(), T0) else {
        panic!()
    };
    let reply = engine.finish(pending, StoreReply::Watch(Ok(())), T0, &mut Vec::new());
    let Response::Error(ServiceError::Other(text)) = reply.response else {
        panic!("{reply:?}")
    };
    assert!(text.starts_with("internal error"), "{text}");
}

#[test]
fn registrations_are_bounded_per_client_and_in_all() {
    let quotas = Quotas {
        max_watches: Some(3),
        max_watches_per_client: Some(2),
        ..Quotas::default()
    };
    let mut h = Harness::with(EngineConfig::new(NODE), quotas);
    let watch = |key: &str| Request::KeyNotify {
        key: Bytes::copy_from_slice(key.as_bytes()),
        stop: false,
    };
    assert_eq!(h.call("a", &watch("k1"), &[]).payload(), Response::Ok);
    assert_eq!(h.call("a", &watch("k2"), &[]).payload(), Response::Ok);
    // Again: idempotent, not a new registration.
    assert_eq!(h.call("a", &watch("k2"), &[]).payload(), Response::Ok);
    assert_eq!(
        h.call("a", &watch("k3"), &[]).payload(),
        err(ServiceError::QuotaExceeded),
        "per client"
    );
    assert_eq!(h.call("b", &watch("k1"), &[]).payload(), Response::Ok);
    assert_eq!(
        h.call("c", &watch("k1"), &[]).payload(),
        err(ServiceError::QuotaExceeded),
        "in all"
    );
    assert_eq!(h.engine.stats().watches, 3);
    // A client that goes frees its share.
    assert_eq!(h.engine.drop_client("a"), 2);
    assert_eq!(h.call("c", &watch("k1"), &[]).payload(), Response::Ok);
    // Keys are not limited by registration quotas, nor registrations by key quotas.
    assert_eq!(h.call("a", &set("x", "v"), &[]).payload(), Response::Ok);
}

#[test]
fn a_registration_lease_ends_unless_renewed() {
    let config = EngineConfig {
        registration_lease_ms: Some(1_000),
        ..EngineConfig::new(NODE)
    };
    let mut h = Harness::with(config, Quotas::default());
    // Identified requests: published in the client's own tree.
    let identified = |h: &mut Harness, client: &str, key: &str| {
        let mut message = h.message(
            client,
            Request::KeyNotify {
                key: Bytes::copy_from_slice(key.as_bytes()),
                stop: false,
            }
            .to_bytes(),
            &[],
        );
        message.topic = mqstore_core::topics::identified_invoke(client);
        h.handle(message)
    };
    assert_eq!(identified(&mut h, "a", "k1").payload(), Response::Ok);
    assert_eq!(identified(&mut h, "a", "k2").payload(), Response::Ok);
    assert_eq!(identified(&mut h, "b", "k1").payload(), Response::Ok);
    // Requests on the standard topic carry no lease by default.
    assert_eq!(
        h.call(
            "c",
            &Request::KeyNotify {
                key: Bytes::from_static(b"k1"),
                stop: false
            },
            &[]
        )
        .payload(),
        Response::Ok
    );
    assert_eq!(h.engine.next_deadline(), Some(T0 + 1_000));
    // b renews (any KEYNOTIFY renews all of its registrations); a does not.
    h.now += 600;
    assert_eq!(identified(&mut h, "b", "k1").payload(), Response::Ok);
    h.now += 400;
    let ended = h.engine.expire_leases(h.now);
    assert_eq!(ended.len(), 1);
    assert_eq!(
        (&*ended[0].0, ended[0].1),
        (&*mqstore_core::topics::identified("a"), 2)
    );
    assert_eq!(h.engine.stats().watches, 2, "b's and c's remain");
    h.now += 600;
    assert_eq!(
        h.engine.expire_leases(h.now).len(),
        1,
        "b's lease ends in turn"
    );
    assert_eq!(h.engine.stats().watches, 1);
    assert_eq!(h.engine.next_deadline(), None);
}

#[test]
fn response_topic_prefixes_hold_whoever_names_the_sender() {
    let config = EngineConfig {
        response_topic_prefixes: vec!["clients/".into()],
        ..EngineConfig::new(NODE)
    };
    let mut h = Harness::with(config, Quotas::default());
    let get = Request::Get { key: b("k") };
    // Elsewhere than the prefix: dropped, whether the sender is only claimed (`__srcId`) or
    // named by the broker (a plugin's `handle_from`).
    let mut elsewhere = h.message("door", get.to_bytes(), &[]);
    elsewhere.properties.response_topic = Some("devices/door/cmd".into());
    for sender in [None, Some("door")] {
        let mut out = Vec::new();
        let outcome = h
            .engine
            .handle_from(elsewhere.clone(), sender, h.now, &mut out);
        assert_eq!(
            outcome,
            Outcome::Dropped(DropReason::ResponseTopicNotAllowed),
            "{sender:?}"
        );
        assert!(out.is_empty(), "{out:?}");
    }
    // Within it: answered, either way.
    for sender in [None, Some("door")] {
        let within = h.message("door", get.to_bytes(), &[]);
        let mut out = Vec::new();
        let outcome = h.engine.handle_from(within, sender, h.now, &mut out);
        assert!(!matches!(outcome, Outcome::Dropped(_)), "{outcome:?}");
        assert_eq!(out.len(), 1);
    }
}

#[test]
fn keyspace_events_name_keys_made_and_gone_and_can_be_turned_off() {
    let names = |events: &[mqstore_core::envelope::Publish]| -> Vec<(String, Bytes)> {
        events
            .iter()
            .map(|p| {
                (
                    p.topic.rsplit('/').next().unwrap().to_owned(),
                    p.payload.clone(),
                )
            })
            .collect()
    };
    let mut h = Harness::new();
    let made = h.call("c", &set("k", "v"), &[]);
    assert_eq!(names(&made.keyspace), [("created".to_owned(), b("k"))]);
    assert!(
        h.call("c", &set("k", "w"), &[]).keyspace.is_empty(),
        "an overwrite makes nothing"
    );
    assert!(h.call("c", &get("k"), &[]).keyspace.is_empty());
    assert!(
        h.call("c", &vdel("k", "other"), &[]).keyspace.is_empty(),
        "a VDEL that deletes nothing"
    );
    let gone = h.call("c", &del("k"), &[]);
    assert_eq!(names(&gone.keyspace), [("deleted".to_owned(), b("k"))]);
    assert!(
        h.call("c", &del("k"), &[]).keyspace.is_empty(),
        "nothing to delete"
    );

    // An expiry is a key gone too.
    let expiring = set_with("e", "v", Condition::Always, Some(100));
    assert_eq!(
        names(&h.call("c", &expiring, &[]).keyspace),
        [("created".to_owned(), b("e"))]
    );
    h.now += 1_000;
    let mut out = Vec::new();
    h.engine.expire(h.now, &mut out);
    assert_eq!(names(&out), [("deleted".to_owned(), b("e"))]);

    // Off: none.
    let config = EngineConfig {
        keyspace_events: false,
        ..EngineConfig::new(NODE)
    };
    let mut off = Harness::with(config, Quotas::default());
    assert!(off.call("c", &set("k", "v"), &[]).keyspace.is_empty());
    assert!(off.call("c", &del("k"), &[]).keyspace.is_empty());
}
