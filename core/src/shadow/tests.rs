//! AWS's rules, one test each, with the documents of AWS's developer guide where it gives them.

use serde_json::{Value, json};

use super::*;

const NOW_MS: u64 = 1_700_000_000_500;
const NOW_S: u64 = 1_700_000_000;

fn classic(thing: &str) -> Target<'_> {
    Target { thing, name: None }
}

/// A store of one shadow: runs each request against what the last one wrote.
#[derive(Default)]
struct One {
    stored: Option<Vec<u8>>,
}

impl One {
    fn send(&mut self, op: Op, payload: Value) -> Vec<(String, Value)> {
        let payload = match payload {
            Value::Null => Vec::new(),
            payload => serde_json::to_vec(&payload).unwrap(),
        };
        self.raw(classic("lamp"), op, &payload)
    }

    fn raw(&mut self, target: Target<'_>, op: Op, payload: &[u8]) -> Vec<(String, Value)> {
        let handled = handle(target, op, payload, self.stored.as_deref(), NOW_MS);
        // What it says it did is what its first publish says.
        let first = &handled.publishes[0].topic;
        let accepted = handled.answered == crate::jobs::Answered::Accepted;
        assert_eq!(accepted, first.ends_with("/accepted"), "{first}");
        if let Write::Put { document } = handled.write {
            self.stored = Some(document);
        }
        handled
            .publishes
            .into_iter()
            .map(|p| (p.topic, serde_json::from_slice(&p.payload).unwrap()))
            .collect()
    }

    fn shadow(&self) -> Shadow {
        serde_json::from_slice(self.stored.as_deref().unwrap()).unwrap()
    }
}

fn topics(out: &[(String, Value)]) -> Vec<&str> {
    out.iter().map(|(t, _)| t.as_str()).collect()
}

fn rejected(out: &[(String, Value)]) -> (u64, String) {
    assert_eq!(out.len(), 1, "{out:?}");
    assert!(out[0].0.ends_with("/rejected"), "{out:?}");
    let body = &out[0].1;
    (
        body["code"].as_u64().unwrap(),
        body["message"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn topics_are_read_for_classic_and_named_shadows_and_answers_are_not_requests() {
    assert_eq!(
        parse_topic("$aws/things/lamp/shadow/update"),
        Some((classic("lamp"), Op::Update))
    );
    assert_eq!(
        parse_topic("$aws/things/lamp/shadow/name/cfg/get"),
        Some((
            Target {
                thing: "lamp",
                name: Some("cfg")
            },
            Op::Get
        ))
    );
    for other in [
        "$aws/things/lamp/shadow/update/accepted",
        "$aws/things/lamp/shadow/name/cfg/delete/rejected",
        "$aws/things/lamp/shadow/name//get",
        "$aws/things/lamp/shadow/list",
        "$aws/things/lamp/jobs/get",
        "$aws/things//shadow/get",
    ] {
        assert_eq!(parse_topic(other), None, "{other}");
    }
    // Every request filter stands for request topics (its wildcards filled in), one per
    // operation and kind of shadow, and none for an answer.
    let mut seen: Vec<(bool, Op)> = REQUEST_FILTERS
        .iter()
        .map(|filter| {
            let topic = filter.replace('+', "x");
            let (target, op) = parse_topic(&topic).expect(filter);
            assert_eq!(
                parse_answer(&format!("{topic}/accepted")).map(|(t, _)| t),
                Some(target)
            );
            (target.name.is_some(), op)
        })
        .collect();
    seen.sort_by_key(|(named, op)| (*named, op.suffix()));
    seen.dedup();
    assert_eq!(seen.len(), 6, "{seen:?}");
    assert_eq!(classic("lamp").key(), "lamp/");
    assert_eq!(
        Target {
            thing: "lamp",
            name: Some("cfg")
        }
        .key(),
        "lamp/cfg"
    );
}

#[test]
fn the_first_update_makes_version_1_with_metadata_delta_and_documents() {
    let mut one = One::default();
    let out = one.send(
        Op::Update,
        json!({"state": {"desired": {"color": {"r": 10}, "engine": "ON"}}, "clientToken": "t1"}),
    );
    assert_eq!(
        topics(&out),
        [
            "$aws/things/lamp/shadow/update/accepted",
            "$aws/things/lamp/shadow/update/delta",
            "$aws/things/lamp/shadow/update/documents"
        ]
    );
    let stamp = json!({"timestamp": NOW_S});
    assert_eq!(
        out[0].1,
        json!({
            "state": {"desired": {"color": {"r": 10}, "engine": "ON"}},
            "metadata": {"desired": {"color": {"r": stamp}, "engine": stamp}},
            "version": 1, "timestamp": NOW_S, "clientToken": "t1"
        })
    );
    assert_eq!(
        out[1].1,
        json!({
            "state": {"color": {"r": 10}, "engine": "ON"},
            "metadata": {"color": {"r": stamp}, "engine": stamp},
            "version": 1, "timestamp": NOW_S, "clientToken": "t1"
        })
    );
    // A new shadow has no previous document.
    assert_eq!(out[2].1.get("previous"), None);
    assert_eq!(out[2].1["current"]["version"], 1);
    assert_eq!(out[2].1["current"]["state"]["desired"]["engine"], "ON");
}

#[test]
fn a_report_that_meets_desired_leaves_no_delta_and_get_shows_what_differs() {
    let mut one = One::default();
    one.send(
        Op::Update,
        json!({"state": {"desired": {"color": {"r": 10, "g": 5}, "engine": "ON", "list": [1, 2]}}}),
    );
    // A report alone publishes no delta, even if some fields still differ.
    let out = one.send(
        Op::Update,
        json!({"state": {"reported": {"color": {"r": 10, "g": 4}, "engine": "ON", "list": [1]}}}),
    );
    assert_eq!(
        topics(&out),
        [
            "$aws/things/lamp/shadow/update/accepted",
            "$aws/things/lamp/shadow/update/documents"
        ]
    );
    assert_eq!(out[1].1["previous"]["version"], 1);
    assert_eq!(out[1].1["current"]["version"], 2);
    let out = one.send(Op::Get, json!({"clientToken": "g"}));
    assert_eq!(topics(&out), ["$aws/things/lamp/shadow/get/accepted"]);
    let doc = &out[0].1;
    // Nested objects differ field by field; arrays as a whole.
    assert_eq!(
        doc["state"]["delta"],
        json!({"color": {"g": 5}, "list": [1, 2]})
    );
    assert_eq!(doc["version"], 2);
    assert_eq!(doc["clientToken"], "g");
    assert_eq!(doc["metadata"]["reported"]["engine"]["timestamp"], NOW_S);
    // Desired met: no delta in the document.
    one.send(
        Op::Update,
        json!({"state": {"reported": {"color": {"g": 5}, "list": [1, 2]}}}),
    );
    let out = one.send(Op::Get, Value::Null);
    assert_eq!(out[0].1["state"].get("delta"), None);
    assert_eq!(out[0].1.get("clientToken"), None);
}

#[test]
fn null_removes_a_field_and_a_section_and_emptied_objects_go() {
    let mut one = One::default();
    one.send(
        Op::Update,
        json!({"state": {"desired": {"a": 1, "b": {"c": 2}}, "reported": {"a": 0}}}),
    );
    let out = one.send(
        Op::Update,
        json!({"state": {"desired": {"b": {"c": null}}}}),
    );
    // The request's state and its metadata are echoed, a null too.
    assert_eq!(out[0].1["state"], json!({"desired": {"b": {"c": null}}}));
    assert_eq!(
        out[0].1["metadata"]["desired"]["b"]["c"]["timestamp"],
        NOW_S
    );
    let shadow = one.shadow();
    assert_eq!(shadow.state.desired, json!({"a": 1}).as_object().cloned());
    assert_eq!(
        shadow.metadata.desired,
        json!({"a": {"timestamp": NOW_S}}).as_object().cloned()
    );
    one.send(Op::Update, json!({"state": {"desired": null}}));
    let shadow = one.shadow();
    assert_eq!(shadow.state.desired, None);
    assert_eq!(shadow.metadata.desired, None);
    assert_eq!(shadow.state.reported, json!({"a": 0}).as_object().cloned());
    // Removing the last field removes the section; the shadow stays (version 4).
    one.send(Op::Update, json!({"state": {"reported": {"a": null}}}));
    let out = one.send(Op::Get, Value::Null);
    assert_eq!(out[0].1["state"], json!({}));
    assert_eq!(out[0].1["version"], 4);
}

#[test]
fn arrays_are_replaced_whole_and_may_not_hold_null() {
    let mut one = One::default();
    one.send(
        Op::Update,
        json!({"state": {"desired": {"colors": ["RED", "GREEN", "BLUE"]}}}),
    );
    one.send(
        Op::Update,
        json!({"state": {"desired": {"colors": ["RED"]}}}),
    );
    assert_eq!(
        one.shadow().state.desired,
        json!({"colors": ["RED"]}).as_object().cloned()
    );
    let out = one.send(
        Op::Update,
        json!({"state": {"desired": {"colors": [null, "RED"]}}}),
    );
    assert_eq!(
        rejected(&out),
        (400, "State contains an invalid node".into())
    );
    assert_eq!(one.shadow().version, 2);
}

#[test]
fn a_version_that_is_not_the_current_one_is_a_conflict_and_changes_nothing() {
    let mut one = One::default();
    for _ in 0..10 {
        one.send(
            Op::Update,
            json!({"state": {"desired": {"colors": ["RED"]}}}),
        );
    }
    let out = one.send(
        Op::Update,
        json!({"state": {"desired": {"colors": ["BLUE"]}}, "version": 9, "clientToken": "c"}),
    );
    assert_eq!(rejected(&out), (409, "Version conflict".into()));
    assert_eq!(out[0].1["clientToken"], "c");
    assert_eq!(out[0].0, "$aws/things/lamp/shadow/update/rejected");
    let out = one.send(
        Op::Update,
        json!({"state": {"desired": {"colors": ["BLUE"]}}, "version": 10}),
    );
    assert_eq!(out[0].1["version"], 11);
    assert_eq!(
        one.shadow().state.desired,
        json!({"colors": ["BLUE"]}).as_object().cloned()
    );
}

#[test]
fn delete_keeps_the_version_and_a_deleted_or_unknown_shadow_is_not_found() {
    let mut one = One::default();
    let out = one.send(Op::Get, Value::Null);
    assert_eq!(
        rejected(&out),
        (404, "No shadow exists with name: 'lamp'".into())
    );
    let out = one.send(Op::Delete, json!({"clientToken": "d0"}));
    assert_eq!(
        rejected(&out),
        (404, "No shadow exists with name: 'lamp'".into())
    );
    assert_eq!(out[0].1["clientToken"], "d0");
    one.send(Op::Update, json!({"state": {"reported": {"on": true}}}));
    one.send(Op::Update, json!({"state": {"reported": {"on": false}}}));
    let out = one.send(Op::Delete, json!({"clientToken": "d1"}));
    assert_eq!(topics(&out), ["$aws/things/lamp/shadow/delete/accepted"]);
    assert_eq!(
        out[0].1,
        json!({"version": 2, "timestamp": NOW_S, "clientToken": "d1"})
    );
    assert_eq!(rejected(&one.send(Op::Get, Value::Null)).0, 404);
    assert_eq!(rejected(&one.send(Op::Delete, Value::Null)).0, 404);
    // The next shadow follows the deleted one's version, and has no previous document.
    let out = one.send(Op::Update, json!({"state": {"reported": {"on": true}}}));
    assert_eq!(out[0].1["version"], 3);
    assert_eq!(out[1].1.get("previous"), None);
}

#[test]
fn named_shadows_answer_on_their_own_topics() {
    let mut one = One::default();
    let target = Target {
        thing: "lamp",
        name: Some("cfg"),
    };
    let out = one.raw(target, Op::Get, b"");
    assert_eq!(out[0].0, "$aws/things/lamp/shadow/name/cfg/get/rejected");
    assert_eq!(out[0].1["message"], "No shadow exists with name: 'cfg'");
    let out = one.raw(target, Op::Update, br#"{"state":{"desired":{"x":1}}}"#);
    assert_eq!(out[0].0, "$aws/things/lamp/shadow/name/cfg/update/accepted");
    assert_eq!(out[1].0, "$aws/things/lamp/shadow/name/cfg/update/delta");
}

#[test]
fn malformed_requests_get_aws_codes_and_messages_and_change_nothing() {
    let mut one = One::default();
    one.send(Op::Update, json!({"state": {"reported": {"on": true}}}));
    let before = one.stored.clone();
    let deep = json!({"state": {"desired": {"1": {"2": {"3": {"4": {"5": {"6": {"7": 0}}}}}}}}});
    let six = json!({"state": {"desired": {"1": {"2": {"3": {"4": {"5": {"6": 0}}}}}}}});
    let long_token = "x".repeat(65);
    let cases: Vec<(Vec<u8>, u64, &str)> = vec![
        (b"not json".to_vec(), 400, "Invalid JSON"),
        (b"[1,2]".to_vec(), 400, "Invalid JSON"),
        (b"{}".to_vec(), 400, "Missing required node: state"),
        (
            br#"{"state": 5}"#.to_vec(),
            400,
            "State node must be an object",
        ),
        (
            br#"{"state": null}"#.to_vec(),
            400,
            "State node must be an object",
        ),
        (
            br#"{"state": {"desired": [1]}}"#.to_vec(),
            400,
            "Desired node must be an object",
        ),
        (
            br#"{"state": {"reported": "x"}}"#.to_vec(),
            400,
            "Reported node must be an object",
        ),
        (
            br#"{"state": {"delta": {}}}"#.to_vec(),
            400,
            "State contains an invalid node",
        ),
        (
            br#"{"state": {}, "version": "3"}"#.to_vec(),
            400,
            "Invalid version",
        ),
        (
            br#"{"state": {}, "version": -1}"#.to_vec(),
            400,
            "Invalid version",
        ),
        (
            br#"{"state": {}, "clientToken": 7}"#.to_vec(),
            400,
            "Invalid clientToken",
        ),
        (
            format!(r#"{{"state": {{}}, "clientToken": "{long_token}"}}"#).into_bytes(),
            400,
            "Invalid clientToken",
        ),
        (
            serde_json::to_vec(&deep).unwrap(),
            400,
            "JSON contains too many levels of nesting; maximum is 6",
        ),
        (
            b"{\"state\": \xff}".to_vec(),
            415,
            "Unsupported documented encoding; supported encoding is UTF-8",
        ),
        (
            serde_json::to_vec(&json!({"state": {"desired": {"big": "x".repeat(9000)}}})).unwrap(),
            413,
            "The payload exceeds the maximum size allowed",
        ),
        (
            vec![b' '; document::MAX_REQUEST_BYTES + 1],
            413,
            "The payload exceeds the maximum size allowed",
        ),
    ];
    for (payload, code, message) in cases {
        let out = one.raw(classic("lamp"), Op::Update, &payload);
        assert_eq!(
            rejected(&out),
            (code, message.to_owned()),
            "{}",
            String::from_utf8_lossy(&payload[..payload.len().min(80)])
        );
        assert_eq!(out[0].1.get("clientToken"), None);
        assert_eq!(one.stored, before);
    }
    // Six levels are allowed.
    let out = one.send(Op::Update, six);
    assert_eq!(out[0].0, "$aws/things/lamp/shadow/update/accepted");
    // A bad thing or shadow name is refused with a message that says the rule.
    let out = one.raw(classic("l*mp"), Op::Get, b"");
    assert_eq!(rejected(&out).0, 400);
    let long = "n".repeat(65);
    let target = Target {
        thing: "lamp",
        name: Some(&long),
    };
    assert!(
        rejected(&one.raw(target, Op::Get, b""))
            .1
            .contains("shadow name")
    );
}

#[test]
fn a_stored_entry_that_is_not_a_shadow_is_an_internal_failure() {
    let handled = handle(classic("lamp"), Op::Get, b"", Some(b"junk"), NOW_MS);
    assert_eq!(handled.write, Write::None);
    assert_eq!(handled.answered, crate::jobs::Answered::Rejected);
    let body: Value = serde_json::from_slice(&handled.publishes[0].payload).unwrap();
    assert_eq!(body["code"], 500);
}

#[test]
fn a_things_named_shadows_are_listed_in_name_order_a_page_at_a_time_without_deleted_ones() {
    let mut store = jobs::MemoryJobs::default();
    let mut put = |key: &str, shadow: Value| {
        let document = serde_json::to_vec(&shadow).unwrap();
        store.put_entry(TABLE, key, Some(&document), false).unwrap();
    };
    put("lamp/", json!({ "version": 1 })); // the classic shadow: not a named one
    for name in ["b", "a", "d", "c"] {
        put(&format!("lamp/{name}"), json!({ "version": 1 }));
    }
    put("lamp/gone", json!({ "version": 2, "deleted": true }));
    put("lamp-2/x", json!({ "version": 1 })); // another thing, sorting after
    put("lam/y", json!({ "version": 1 })); // another thing, sorting before
    let page = |max_results: Option<u32>, next_token: Option<&str>| jobs::PageRequest {
        max_results,
        next_token: next_token.map(str::to_owned),
    };
    let all = named(&store, "lamp", &page(None, None), usize::MAX).unwrap();
    assert_eq!(
        all,
        (vec!["a".into(), "b".into(), "c".into(), "d".into()], None)
    );
    let first = named(&store, "lamp", &page(Some(3), None), 3).unwrap();
    assert_eq!(
        first,
        (vec!["a".into(), "b".into(), "c".into()], Some("c".into()))
    );
    let rest = named(&store, "lamp", &page(Some(3), Some("c")), 3).unwrap();
    assert_eq!(rest, (vec!["d".into()], None));
    assert_eq!(
        named(&store, "nothing", &page(None, None), 10).unwrap(),
        (vec![], None)
    );
    let refused = named(&store, "lamp/1", &page(None, None), 10).unwrap_err();
    assert!(
        refused.to_string().contains("Invalid thing name"),
        "{refused}"
    );
}

#[test]
fn the_shadow_service_answers_its_operator_call_and_leaves_the_others_to_jobs() {
    let mut store = jobs::MemoryJobs::default();
    let document = serde_json::to_vec(&json!({ "version": 1 })).unwrap();
    store
        .put_entry(TABLE, "lamp/cfg", Some(&document), false)
        .unwrap();
    let call = |store: &mut jobs::MemoryJobs, request: Value| {
        operate(store, &serde_json::to_vec(&request).unwrap(), NOW_MS)
    };
    let listed = call(
        &mut store,
        json!({"op": "listNamedShadowsForThing", "thingName": "lamp"}),
    );
    let Some(jobs::wire::OperatorAnswer::Ok(page)) = listed else {
        panic!("{listed:?}")
    };
    assert_eq!(
        (page.results, page.next_token, page.timestamp),
        (vec!["cfg".into()], None, NOW_S)
    );
    // A job whose document names the call is still the jobs service's.
    let job = json!({"op": "createJob", "jobId": "j", "targets": ["lamp"],
                     "document": {"note": "listNamedShadowsForThing"}});
    assert!(call(&mut store, job).is_none());
    let bad_page = json!({"op": "listNamedShadowsForThing", "thingName": "lamp", "maxResults": 0});
    let refused = call(&mut store, bad_page);
    assert!(
        matches!(&refused, Some(jobs::wire::OperatorAnswer::Error(e)) if e.code == "InvalidRequest"),
        "{refused:?}"
    );
}

#[test]
fn a_thing_s_requests_run_one_at_a_time_in_order_and_the_eleventh_in_flight_is_refused_with_429() {
    let request = |thing: &str, path: &str, token: &str| Publish {
        topic: format!("$aws/things/{thing}/shadow/{path}"),
        payload: Bytes::from(json!({ "clientToken": token }).to_string()),
        qos: 1,
        properties: Properties::default(),
    };
    let token = |message: &Publish| -> String {
        let body: Value = serde_json::from_slice(&message.payload).unwrap();
        body["clientToken"].as_str().unwrap().to_owned()
    };
    let mut in_flight = InFlight::default();
    // The classic and named shadows of one thing count together (its device's requests): the
    // first runs, the others wait for it.
    for i in 0..MAX_IN_FLIGHT {
        let path = if i % 2 == 0 { "get" } else { "name/cfg/update" };
        let admitted = in_flight.start(&request("lamp", path, &format!("t{i}")), NOW_MS);
        let expected = if i == 0 {
            Admitted::Started
        } else {
            Admitted::Waiting
        };
        assert_eq!(admitted, expected, "request {i}");
    }
    assert_eq!(in_flight.len(), MAX_IN_FLIGHT);
    let Admitted::Refused(op, refusal) =
        in_flight.start(&request("lamp", "name/cfg/update", "over"), NOW_MS)
    else {
        panic!("the eleventh request is not refused");
    };
    assert_eq!(op, Op::Update);
    assert_eq!(
        refusal.topic,
        "$aws/things/lamp/shadow/name/cfg/update/rejected"
    );
    let body: Value = serde_json::from_slice(&refusal.payload).unwrap();
    assert_eq!(
        body,
        json!({ "code": 429, "message": "Too many requests", "timestamp": NOW_S, "clientToken": "over" })
    );
    assert_eq!(
        in_flight.len(),
        MAX_IN_FLIGHT,
        "a refused request is not in flight"
    );
    // Another thing is not held back; other topics are not counted.
    assert_eq!(
        in_flight.start(&request("fan", "get", "f"), NOW_MS),
        Admitted::Started
    );
    let jobs = Publish {
        topic: "$aws/things/lamp/jobs/get".into(),
        ..request("lamp", "get", "j")
    };
    assert_eq!(in_flight.start(&jobs, NOW_MS), Admitted::NotShadow);
    // One answered: the next in line runs, and there is room for one more.
    let next = in_flight.finish("$aws/things/lamp/shadow/get").unwrap();
    assert_eq!(next.topic, "$aws/things/lamp/shadow/name/cfg/update");
    assert_eq!(token(&next), "t1");
    assert_eq!(
        in_flight.start(&request("lamp", "delete", "d"), NOW_MS),
        Admitted::Waiting
    );
    // Each answer hands on the next, in the order they came; the last hands on none.
    let mut ran = vec![token(&next)];
    let mut running = next.topic;
    while let Some(next) = in_flight.finish(&running) {
        ran.push(token(&next));
        running = next.topic;
    }
    let expected: Vec<String> = (1..MAX_IN_FLIGHT)
        .map(|i| format!("t{i}"))
        .chain(["d".to_owned()])
        .collect();
    assert_eq!(ran, expected);
    assert_eq!(in_flight.finish("$aws/things/fan/shadow/get"), None);
    // Finishing what never started changes nothing.
    assert_eq!(in_flight.finish("$aws/things/fan/shadow/get"), None);
    assert!(in_flight.is_empty());
    assert_eq!(
        in_flight.start(&request("fan", "get", "f"), NOW_MS),
        Admitted::Started
    );
}
