//! The server-side traces (`testdata/server/*.json`, described in its README) against the core's
//! server node: messages and time in; the publishes, whom each is for, and the next deadline
//! out. The plugin and `mqstore serve` drive this node; their live suites run the same
//! protocol over real brokers.

mod matching;

use matching::matches;

use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;

use bytes::Bytes;
use mqstore_core::commands::Profiles;
use mqstore_core::engine::EngineConfig;
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::server::commands::ServiceConfig;
use mqstore_core::server::{Handled, JobsConfig, Node, NodeConfig, Receipt, To};
use mqstore_core::store::Quotas;
use serde_json::{Map, Value, json};

/// Every time in a trace is an offset from this.
const T0: u64 = 1_700_000_000_000;

thread_local! {
    /// Command ids, made in order (the node asks for 16 random bytes per command). One counter
    /// per thread: the tests run traces on threads of their own, at once, and each trace counts
    /// from 1.
    static NEXT_ID: Cell<u64> = const { Cell::new(1) };
}

fn counted_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    let next = NEXT_ID.replace(NEXT_ID.get() + 1);
    id[8..].copy_from_slice(&next.to_be_bytes());
    id
}

fn node(config: &Value) -> Node {
    let node_id = config["nodeId"].as_str().unwrap_or("node").to_owned();
    let flag = |name: &str| config[name].as_bool().unwrap_or(false);
    let config = NodeConfig {
        engine: EngineConfig {
            scan_token_key: [7; 32],
            scan_token_seed: [9; 16],
            ..EngineConfig::new(node_id.clone())
        },
        quotas: Quotas::default(),
        jobs: flag("jobs").then(JobsConfig::default),
        durability: None,
        commands: flag("commands").then(|| ServiceConfig {
            client_id: format!("{node_id}-commands"),
            node_id,
            profiles: Profiles::built_in(),
            events: true,
            random_id: counted_id,
        }),
    };
    Node::open(config, T0).expect("the node starts").0
}

/// A publish as a trace gives it: `topic`, `payload` (text) or `json`, `responseTopic`,
/// `correlation` (text) or `correlationHex`, `userProperties`, `qos` (1 when absent).
fn incoming(value: &Value) -> Publish {
    let payload = match (&value["payload"], &value["json"]) {
        (Value::String(text), _) => Bytes::from(text.clone()),
        (_, Value::Null) => Bytes::new(),
        (_, json) => Bytes::from(json.to_string()),
    };
    let text = |name: &str| value[name].as_str().map(str::to_owned);
    let properties = Properties {
        response_topic: text("responseTopic"),
        correlation_data: text("correlation")
            .map(Bytes::from)
            .or_else(|| text("correlationHex").map(|hex| Bytes::from(from_hex(&hex)))),
        content_type: text("contentType"),
        user_properties: value["userProperties"]
            .as_array()
            .map(|pairs| {
                pairs
                    .iter()
                    .map(|p| (p[0].as_str().unwrap().into(), p[1].as_str().unwrap().into()))
                    .collect()
            })
            .unwrap_or_default(),
        ..Properties::default()
    };
    Publish {
        topic: text("topic").expect("a topic"),
        payload,
        qos: value["qos"].as_u64().unwrap_or(1) as u8,
        properties,
    }
}

fn from_hex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
        .collect()
}

/// An output as a trace states it: `to`, `topic`, `payload` (text) and `json` (when it is
/// JSON), `responseTopic`, `correlation` (as text when it is UTF-8) and `correlationHex`,
/// `messageExpiryInterval`, `userProperties`, `receipt`.
fn outgoing(to: &To, publish: &Publish, receipt: bool) -> Value {
    let to = match to {
        To::Requester(Some(client)) => format!("requester:{client}"),
        To::Requester(None) => "requester".to_owned(),
        To::Watcher(_) => format!("watcher:{}", to.client_id().unwrap_or_default()),
        To::Subscribers => "subscribers".to_owned(),
    };
    let mut out = json!({
        "to": to,
        "topic": publish.topic,
        "payload": String::from_utf8_lossy(&publish.payload),
        "qos": publish.qos,
        "userProperties": publish.properties.user_properties,
    });
    if let Ok(json) = serde_json::from_slice::<Value>(&publish.payload) {
        out["json"] = json;
    }
    if let Some(correlation) = &publish.properties.correlation_data {
        if let Ok(text) = std::str::from_utf8(correlation) {
            out["correlation"] = json!(text);
        }
        let hex: String = correlation.iter().map(|b| format!("{b:02x}")).collect();
        out["correlationHex"] = json!(hex);
    }
    if let Some(topic) = &publish.properties.response_topic {
        out["responseTopic"] = json!(topic);
    }
    if let Some(expiry) = publish.properties.message_expiry_interval {
        out["messageExpiryInterval"] = json!(expiry);
    }
    if receipt {
        out["receipt"] = json!(true);
    }
    out
}

fn handled(handled: &Handled) -> &'static str {
    match handled {
        Handled::State(_) => "state",
        Handled::Jobs(Ok(_)) => "jobs",
        Handled::Jobs(Err(_)) => "jobs-unanswered",
        Handled::Commands => "commands",
        Handled::ClientsGone { .. } => "clients-gone",
        Handled::Ignored => "ignored",
        _ => "new",
    }
}

fn run_trace(path: &Path) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let trace: Value = serde_json::from_slice(&std::fs::read(path).unwrap())
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let print = std::env::var_os("MQSTORE_TRACE_PRINT").is_some();
    NEXT_ID.set(1);
    let mut node = node(&trace["node"]);
    let mut now = T0;
    let mut receipts: Vec<Receipt> = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (number, step) in trace["steps"].as_array().unwrap().iter().enumerate() {
        let number = number + 1;
        let action: &Map<String, Value> = step["do"].as_object().expect("each step has a \"do\"");
        let (verb, argument) = action.iter().next().expect("one action");
        let mut what = Value::Null;
        match verb.as_str() {
            "receive" => {
                let sender = argument["sender"].as_str();
                let retained = argument["retained"].as_bool().unwrap_or(false);
                what = json!(handled(&node.handle(
                    incoming(argument),
                    sender,
                    retained,
                    now
                )));
            }
            "clock" => {
                now = T0 + argument.as_u64().expect("a time");
                let ticked = node.on_deadline(now, true);
                what = json!({"leasesEnded": ticked.leases_ended.len(), "commandsTimedOut": ticked.commands_timed_out});
            }
            "acknowledged" => {
                let receipt = receipts.remove(0);
                let code = argument["code"].as_u64().unwrap_or(0) as u8;
                node.acknowledged(&receipt, Some(code), now);
            }
            "disconnected" => {
                let client = argument.as_str().expect("a client id");
                let registrations = mqstore_core::server::registrations_of(client);
                what = json!(node.drop_clients(&registrations));
            }
            other => panic!("{name}, step {number}: no action {other:?}"),
        }
        let mut publishes = Vec::new();
        while let Some(out) = node.poll_output() {
            publishes.push(outgoing(&out.to, &out.publish, out.receipt.is_some()));
            receipts.extend(out.receipt);
        }
        let deadline = node.next_deadline(now, true).map(|d| d - T0);
        if let Some(label) = step["name"].as_str() {
            names.insert(label.to_owned(), number);
        }
        if print {
            let shown = json!({"do": action, "handled": what, "publishes": publishes, "deadline": deadline});
            eprintln!(
                "{name} step {number}: {}",
                serde_json::to_string(&shown).unwrap()
            );
            continue;
        }
        if let Some(expected) = step.get("handled") {
            assert!(
                matches(expected, &what),
                "{name}, step {number}: handled {what}, expected {expected}"
            );
        }
        let expected = step["publishes"].as_array().cloned().unwrap_or_default();
        let same = expected.len() == publishes.len()
            && expected.iter().zip(&publishes).all(|(e, a)| matches(e, a));
        assert!(
            same,
            "{name}, step {number}: publishes\n  expected {}\n  actual   {}",
            serde_json::to_string_pretty(&expected).unwrap(),
            serde_json::to_string_pretty(&publishes).unwrap(),
        );
        if let Some(expected) = step.get("deadline") {
            assert_eq!(
                &json!(deadline),
                expected,
                "{name}, step {number}: next deadline"
            );
        }
    }
}

fn traces() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/server");
    let mut traces: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    traces.sort();
    traces
}

#[test]
fn every_server_trace_gives_its_publishes() {
    let traces = traces();
    for trace in &traces {
        run_trace(trace);
    }
    assert!(traces.len() >= 3, "the traces are in testdata/server");
}

#[test]
fn a_server_trace_that_expects_other_publishes_fails() {
    let dir = std::env::temp_dir().join(format!("mqstore-server-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wrong.json");
    let trace = json!({
        "node": {"nodeId": "n"},
        "steps": [{
            "do": {"receive": {"topic": "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke", "payload": "garbage", "sender": "c"}},
            "handled": "jobs",
        }],
    });
    std::fs::write(&path, trace.to_string()).unwrap();
    let outcome = std::panic::catch_unwind(|| run_trace(&path));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(outcome.is_err(), "a wrong expectation must fail the trace");
}
