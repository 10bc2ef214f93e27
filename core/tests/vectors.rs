//! The shared wire vectors (`testdata/state-store.json`, the same file every binding tests
//! against): exact bytes for requests, responses, notifications, topics and HLCs.

use std::num::NonZeroU64;

use bytes::Bytes;
use mqstore_core::ServiceError;
use mqstore_core::codec::{
    Bulk, Condition, Notification, Request, Response, SetRequest, decode_notification,
    decode_request, decode_response,
};
use mqstore_core::hlc::Hlc;
use mqstore_core::topics;
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/state-store.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("testdata/state-store.json"))
        .expect("valid JSON")
}

fn bytes(v: &Value) -> Bytes {
    Bytes::from(v.as_str().expect("a string").as_bytes().to_vec())
}

fn field(v: &Value, name: &str) -> Option<Bytes> {
    v.get(name).map(bytes)
}

fn list<'a>(v: &'a Value, name: &str) -> &'a Vec<Value> {
    v[name]
        .as_array()
        .unwrap_or_else(|| panic!("{name} is a list"))
}

/// The request a vector's `command` object describes.
fn command(c: &Value) -> Request {
    let key = || field(c, "key").expect("key");
    match c["op"].as_str().unwrap() {
        "SET" => Request::Set(SetRequest {
            key: key(),
            value: Bulk::new(field(c, "value").expect("value")),
            condition: match c.get("condition").and_then(Value::as_str) {
                None => Condition::Always,
                Some("NX") => Condition::NotExists,
                Some("NEX") => Condition::NotExistsOrEqual,
                Some(other) => panic!("condition {other}"),
            },
            expires_in_ms: c["px_ms"].as_u64().and_then(NonZeroU64::new),
        }),
        "GET" => Request::Get { key: key() },
        "DEL" => Request::Del { key: key() },
        "VDEL" => Request::VDel {
            key: key(),
            value: field(c, "value").unwrap(),
        },
        "KEYNOTIFY" => Request::KeyNotify {
            key: key(),
            stop: c["stop"].as_bool().unwrap_or(false),
        },
        "SCAN" => Request::Scan {
            pattern: field(c, "pattern").unwrap(),
            token: field(c, "token"),
        },
        other => panic!("op {other}"),
    }
}

#[test]
fn requests_encode_to_and_decode_from_exact_bytes() {
    let v = vectors();
    let requests = list(&v, "requests");
    assert!(requests.len() >= 13);
    for case in requests {
        let name = case["name"].as_str().unwrap();
        let expected = command(&case["command"]);
        let wire = bytes(&case["bytes"]);
        assert_eq!(expected.to_bytes(), wire, "encode {name}");
        assert_eq!(expected.encoded_len(), wire.len(), "encoded_len {name}");
        assert_eq!(decode_request(&wire), Ok(expected), "decode {name}");
    }
}

#[test]
fn lower_case_requests_are_accepted() {
    let v = vectors();
    let by_name = |name: &str| {
        list(&v, "requests")
            .iter()
            .find(|r| r["name"] == name)
            .map(|r| command(&r["command"]))
            .unwrap()
    };
    for case in list(&v, "requests_accepted_by_engine_only") {
        let same_as = by_name(case["same_as"].as_str().unwrap());
        assert_eq!(decode_request(&bytes(&case["bytes"])), Ok(same_as));
    }
}

#[test]
fn bad_requests_get_their_exact_error_text() {
    let v = vectors();
    for case in list(&v, "bad_requests") {
        let wire = bytes(&case["bytes"]);
        let text = case["error"].as_str().unwrap();
        let error = decode_request(&wire).expect_err(text);
        assert_eq!(error.text(), text, "{:?} ({})", wire, case["why"]);
        assert_eq!(ServiceError::from_text(text.as_bytes()), error);
    }
}

fn expected_response(d: &Value) -> Response {
    match d["kind"].as_str().unwrap() {
        "ok" => Response::Ok,
        "not_applied" => Response::NotApplied,
        "deleted" => Response::Deleted(d["count"].as_u64().unwrap()),
        "value" => Response::Value(Bulk::new(field(d, "value").unwrap())),
        "absent" => Response::Absent,
        "error" => Response::Error(ServiceError::from_text(
            d["text"].as_str().unwrap().as_bytes(),
        )),
        "keys" => Response::Keys {
            keys: list(d, "keys").iter().map(bytes).collect(),
            token: field(d, "token"),
        },
        other => panic!("kind {other}"),
    }
}

#[test]
fn responses_encode_to_and_decode_from_exact_bytes() {
    let v = vectors();
    for case in list(&v, "responses") {
        let name = case["name"].as_str().unwrap();
        let expected = expected_response(&case["decoded"]);
        let wire = bytes(&case["bytes"]);
        assert_eq!(
            decode_response(&wire),
            Ok(expected.clone()),
            "decode {name}"
        );
        assert_eq!(expected.to_bytes(), wire, "encode {name}");
        assert_eq!(expected.encoded_len(), wire.len(), "encoded_len {name}");
    }
}

#[test]
fn notifications_encode_to_and_decode_from_exact_bytes() {
    let v = vectors();
    for case in list(&v, "notifications") {
        let name = case["name"].as_str().unwrap();
        let d = &case["decoded"];
        let expected = match d["op"].as_str().unwrap() {
            "SET" => Notification::Set(Bulk::new(field(d, "value").unwrap())),
            "DELETE" => Notification::Delete,
            other => panic!("op {other}"),
        };
        let wire = bytes(&case["bytes"]);
        assert_eq!(decode_notification(&wire), Ok(expected.clone()), "{name}");
        // The engine always writes DELETE; only the accepted spelling differs.
        if !name.contains("(accept)") {
            assert_eq!(expected.to_bytes(), wire, "encode {name}");
        }
    }
}

#[test]
fn topics_match() {
    let v = vectors();
    let t = &v["topics"];
    assert_eq!(t["invoke"], topics::INVOKE);
    let n = &t["notify_example"];
    assert_eq!(
        topics::notify_topic(
            n["client_id"].as_str().unwrap(),
            n["key"].as_str().unwrap().as_bytes()
        ),
        n["topic"].as_str().unwrap()
    );
}

#[test]
fn hlcs_format_parse_and_order() {
    let v = vectors();
    let h = &v["hlc"];
    for case in list(h, "format") {
        let hlc = Hlc::new(
            case["wall_ms"].as_u64().unwrap(),
            case["counter"].as_u64().unwrap() as u32,
            case["node"].as_str().unwrap(),
        )
        .unwrap();
        assert_eq!(hlc.to_string(), case["text"].as_str().unwrap());
        assert_eq!(Hlc::parse(case["text"].as_str().unwrap()), Ok(hlc));
    }
    for case in list(h, "parse_ok") {
        let hlc = Hlc::parse(case["text"].as_str().unwrap()).unwrap();
        assert_eq!(hlc.wall_ms, case["wall_ms"].as_u64().unwrap());
        assert_eq!(u64::from(hlc.counter), case["counter"].as_u64().unwrap());
        assert_eq!(&*hlc.node, case["node"].as_str().unwrap());
    }
    for text in list(h, "parse_err") {
        assert!(Hlc::parse(text.as_str().unwrap()).is_err(), "{text}");
    }
    for pair in h["order"].as_array().unwrap() {
        let a = Hlc::parse(pair[0].as_str().unwrap()).unwrap();
        let b = Hlc::parse(pair[1].as_str().unwrap()).unwrap();
        assert!(a < b, "{a} < {b}");
    }
}
