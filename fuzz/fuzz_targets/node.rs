//! The whole server node — state store, jobs (device and operator API, shadows) and commands on
//! memory — over arbitrary sequences of inputs: requests built from the protocols' own words
//! (so that most of them are valid and reach deep) or raw bytes, devices' answers to the
//! commands the node sent, acknowledgements, clients gone and time. Checked after every input:
//! it never panics; every topic it publishes to is one a broker takes; what it publishes on the
//! jobs and shadow topics (`$aws/things/`, `$aws/events/`) is a JSON object, and no command goes
//! to one of the node's own topics; a device request is answered exactly once, on its own
//! `/accepted` or `/rejected`, echoing its `clientToken`; and a request that names a response
//! topic is answered there at most once, for the requester alone, with its own correlation data
//! — exactly once right away for the state store and the operator API, and, once every deadline
//! has passed and every publish has been acknowledged, exactly once for the command service.
//! One run in four keeps a data directory (`fsync always`, its syncs run at once) and is
//! stopped and started again on it now and then and at the end: asked about everything it
//! keeps (keys, jobs, executions, groups, templates, things' pending lists, shadows, stored
//! commands), it must say after a restart what it said before.
#![no_main]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use mqstore_core::commands::{Profiles, is_reserved_topic};
use mqstore_core::disk::{Durability, Fsync};
use mqstore_core::engine::{EngineConfig, Outcome};
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::jobs::OPERATOR_TOPIC;
use mqstore_core::jobs::wire::OPERATOR_CALLS;
use mqstore_core::server::commands::ServiceConfig;
use mqstore_core::server::{Handled, JobsConfig, Node, NodeConfig, Out, Receipt, To};
use mqstore_core::store::Quotas;
use mqstore_core::topics;
use serde_json::{Map, Value};

const T0: u64 = 1_700_000_000_000;
const NODE: &str = "fuzz-node";
/// Inputs per run at most (each may be a whole rollout's tick).
const STEPS: usize = 48;

/// The words the requests are made of: the JSON keys and values of the jobs, shadow and
/// command APIs (from `docs/protocol/wire.schema.json` and the device API), a few things,
/// jobs, groups and keys.
#[rustfmt::skip]
const KEYS: &[&str] = &[
    "op", "jobId", "targets", "document", "thingName", "thingArn", "status", "force",
    "expectedVersion", "executionNumber", "statusDetails", "clientToken", "stepTimeoutInMinutes",
    "includeJobDocument", "includeJobExecutionState", "timeoutConfig", "inProgressTimeoutInMinutes",
    "jobExecutionsRetryConfig", "criteriaList", "failureType", "numberOfRetries",
    "jobExecutionsRolloutConfig", "maximumPerMinute", "exponentialRate", "baseRatePerMinute",
    "incrementFactor", "rateIncreaseCriteria", "numberOfNotifiedThings", "numberOfSucceededThings",
    "abortConfig", "action", "minNumberOfExecutedThings", "thresholdPercentage", "thingGroupName",
    "thingGroupArn", "thingGroupProperties", "thingGroupDescription", "targetSelection",
    "schedulingConfig", "startTime", "endTime", "endBehavior", "maintenanceWindows",
    "durationInMinutes", "expression", "maxResults", "nextToken", "jobTemplateId", "jobTemplateArn",
    "documentParameters", "description", "reasonCode", "comment", "state", "desired", "reported",
    "version", "tid", "bid", "data", "result", "method", "id", "command", "parameters", "profile",
    "topic", "payload", "payloadTemplate", "answer", "mandatoryParameters", "defaultValue", "name",
    "contentType",
];
#[rustfmt::skip]
const WORDS: &[&str] = &[
    "T1", "T2", "T3", "j1", "j2", "j3", "G1", "G2", "$next", "QUEUED", "IN_PROGRESS", "SUCCEEDED",
    "FAILED", "REJECTED", "CANCELED", "TIMED_OUT", "REMOVED", "SCHEDULED", "COMPLETED",
    "DELETION_IN_PROGRESS", "CONTINUOUS", "SNAPSHOT", "ALL", "CANCEL", "FORCE_CANCEL",
    "STOP_ROLLOUT", "create", "delete", "get", "list",
    "arn:aws:iot:us-east-1:123456789012:thing/T1",
    "arn:aws:iot:us-east-1:123456789012:thinggroup/G1",
    "arn:aws:iot:us-east-1:123456789012:jobtemplate/t1", "thinggroup/G1", "t1", "reboot",
    "dev/1/cmd", "thing/product/GW1/services", "$iothub/methods/POST/reboot/?$rid={id}", "mqtt5",
    "dji", "iothub", "aws", "await", "oneway", "detached", "{\"a\":1}", "2023-01-01T00:00:00Z",
    "cron(0 0 * * ? *)",
];
/// State store commands and arguments (RESP3 arrays of bulk strings).
#[rustfmt::skip]
const RESP_WORDS: &[&str] = &[
    "SET", "GET", "DEL", "VDEL", "KEYNOTIFY", "SCAN", "k1", "k2", "k3", "v", "NX", "NEX", "PX",
    "ON", "STOP", "MATCH", "COUNT", "TYPE", "k*", "1", "100", "0",
];

/// Command ids in order: the node asks for 16 random bytes per command.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn counted_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    id[8..].copy_from_slice(&NEXT_ID.fetch_add(1, Ordering::Relaxed).to_be_bytes());
    id
}

fn word(u: &mut Unstructured, seen: &[String]) -> Result<String> {
    Ok(match u.int_in_range(0..=9)? {
        0 => u.arbitrary()?,
        1 if !seen.is_empty() => u.choose(seen)?.clone(),
        2 => (*u.choose(&OPERATOR_CALLS)?).to_owned(),
        _ => (*u.choose(WORDS)?).to_owned(),
    })
}

fn number(u: &mut Unstructured) -> Result<Value> {
    Ok(match u.int_in_range(0..=3)? {
        0 => Value::from(u.int_in_range(-2i64..=12)?),
        1 => Value::from(u.arbitrary::<i64>()?),
        2 => serde_json::Number::from_f64(u.arbitrary()?).map_or(Value::Null, Value::Number),
        _ => Value::from(u.int_in_range(0u64..=2_000)?),
    })
}

/// A JSON value, most often an object of the APIs' keys.
fn value(u: &mut Unstructured, seen: &[String], depth: u8) -> Result<Value> {
    let pick = if depth >= 3 {
        u.int_in_range(0..=4)?
    } else {
        u.int_in_range(0..=9)?
    };
    Ok(match pick {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => number(u)?,
        3 | 4 => Value::String(word(u, seen)?),
        5 | 6 => {
            let n = u.int_in_range(0..=3)?;
            let items = (0..n).map(|_| value(u, seen, depth + 1));
            Value::Array(items.collect::<Result<_>>()?)
        }
        _ => Value::Object(object(u, seen, depth + 1)?),
    })
}

fn pick(u: &mut Unstructured, words: &[&str]) -> Result<Value> {
    Ok(Value::String((*u.choose(words)?).to_owned()))
}

fn small(u: &mut Unstructured) -> Result<Value> {
    Ok(Value::from(u.int_in_range(0u32..=12)?))
}

const THINGS: &[&str] = &["T1", "T2", "T3"];
#[rustfmt::skip]
const DEVICE_TOPICS: &[&str] = &[
    "dev/1/cmd", "thing/product/GW1/services", "$iothub/methods/POST/reboot/?$rid={id}",
    "$aws/commands/things/T1/executions/{id}/request/json",
];
const JOBS: &[&str] = &["j1", "j2", "j3"];
const STATUSES: &[&str] = &["IN_PROGRESS", "SUCCEEDED", "FAILED", "REJECTED", "QUEUED"];

/// A value that makes sense for `key` (three times in four), or any value.
fn value_of(u: &mut Unstructured, seen: &[String], key: &str, depth: u8) -> Result<Value> {
    if depth >= 3 || u.ratio(1, 4)? {
        return value(u, seen, depth);
    }
    let criteria = |u: &mut Unstructured, with_action: bool| -> Result<Value> {
        let mut c = Map::new();
        c.insert(
            "failureType".into(),
            pick(u, &["FAILED", "REJECTED", "TIMED_OUT", "ALL"])?,
        );
        if with_action {
            c.insert("action".into(), pick(u, &["CANCEL"])?);
            c.insert(
                "minNumberOfExecutedThings".into(),
                Value::from(u.int_in_range(1u32..=3)?),
            );
            c.insert(
                "thresholdPercentage".into(),
                Value::from(u.int_in_range(1u32..=100)?),
            );
        } else {
            c.insert(
                "numberOfRetries".into(),
                Value::from(u.int_in_range(0u32..=10)?),
            );
        }
        Ok(Value::Array(vec![Value::Object(c)]))
    };
    Ok(match key {
        "jobId" => pick(u, JOBS)?,
        "thingName" => pick(u, THINGS)?,
        "thingGroupName" => pick(u, &["G1", "G2"])?,
        "jobTemplateId" => pick(u, &["t1"])?,
        "commandId" => pick(u, &["c1", "c2"])?,
        "command" => serde_json::json!({
            "commandId": value_of(u, seen, "commandId", depth + 1)?,
            "payload": {"content": "{\"go\":1}", "contentType": "application/json"},
        }),
        "status" => pick(u, STATUSES)?,
        "targetSelection" => pick(u, &["CONTINUOUS", "SNAPSHOT"])?,
        "targets" => {
            let n = u.int_in_range(1..=3)?;
            let targets = (0..n).map(|_| pick(u, &["T1", "T2", "T3", "thinggroup/G1"]));
            Value::Array(targets.collect::<Result<_>>()?)
        }
        "document" | "statusDetails" | "desired" | "reported" => {
            let mut d = Map::new();
            d.insert((*u.choose(&["a", "b"])?).into(), small(u)?);
            Value::Object(d)
        }
        "state" => {
            let mut d = Map::new();
            for part in ["desired", "reported"] {
                if u.arbitrary()? {
                    d.insert(part.into(), value_of(u, seen, part, depth + 1)?);
                }
            }
            Value::Object(d)
        }
        "force" | "includeJobDocument" | "includeJobExecutionState" => Value::Bool(u.arbitrary()?),
        "expectedVersion"
        | "executionNumber"
        | "stepTimeoutInMinutes"
        | "maxResults"
        | "version"
        | "inProgressTimeoutInMinutes"
        | "maximumPerMinute" => small(u)?,
        "timeoutConfig" => serde_json::json!({"inProgressTimeoutInMinutes": small(u)?}),
        "jobExecutionsRetryConfig" => serde_json::json!({"criteriaList": criteria(u, false)?}),
        "abortConfig" => serde_json::json!({"criteriaList": criteria(u, true)?}),
        "jobExecutionsRolloutConfig" => match u.arbitrary()? {
            true => serde_json::json!({"maximumPerMinute": small(u)?}),
            false => serde_json::json!({"exponentialRate": {
                "baseRatePerMinute": small(u)?, "incrementFactor": 1.5,
                "rateIncreaseCriteria": {"numberOfNotifiedThings": small(u)?}}}),
        },
        _ => Value::String(word(u, seen)?),
    })
}

fn object(u: &mut Unstructured, seen: &[String], depth: u8) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let key = match u.ratio(1, 12)? {
            true => u.arbitrary()?,
            false => (*u.choose(KEYS)?).to_owned(),
        };
        let value = value_of(u, seen, &key, depth)?;
        map.insert(key, value);
    }
    Ok(map)
}

/// The fields an operator call needs.
fn required(op: &str) -> &'static [&'static str] {
    match op {
        "createJob" => &["jobId", "targets", "document"],
        "updateJob" | "cancelJob" | "deleteJob" | "describeJob" => &["jobId"],
        "cancelJobExecution" | "deleteJobExecution" | "describeJobExecution" => {
            &["jobId", "thingName"]
        }
        "createThingGroup"
        | "deleteThingGroup"
        | "describeThingGroup"
        | "listThingsInThingGroup" => &["thingGroupName"],
        "addThingToThingGroup" | "removeThingFromThingGroup" => &["thingGroupName", "thingName"],
        "listNamedShadowsForThing" => &["thingName"],
        "createJobTemplate" => &["jobTemplateId", "document", "description"],
        "describeJobTemplate" | "deleteJobTemplate" => &["jobTemplateId"],
        "create" => &["command"],
        "get" | "delete" => &["commandId"],
        _ => &[],
    }
}

/// The stored-commands calls (`mqstore/commands/v1/definitions`).
const DEFINITION_CALLS: &[&str] = &["create", "get", "list", "delete"];

/// A request payload: a JSON object with the fields `needs` (now and then one left out) and a
/// few more, and with an `op` of `ops` and its fields when it is a call of an API of `op`s;
/// now and then raw bytes.
fn payload(u: &mut Unstructured, seen: &[String], ops: &[&str], needs: &[&str]) -> Result<Bytes> {
    if u.ratio(1, 12)? {
        return Ok(Bytes::from(u.arbitrary::<Vec<u8>>()?));
    }
    let mut map = object(u, seen, 1)?;
    let mut needs = needs.to_vec();
    if !ops.is_empty() {
        let name = match u.ratio(1, 10)? {
            true => word(u, seen)?,
            false => (*u.choose(ops)?).to_owned(),
        };
        needs.extend(required(&name));
        map.insert("op".into(), Value::String(name));
    }
    for key in needs {
        if !u.ratio(1, 16)? {
            let value = value_of(u, seen, key, 1)?;
            map.insert(key.into(), value);
        }
    }
    if u.ratio(1, 2)? {
        map.insert("clientToken".into(), Value::String(word(u, seen)?));
    }
    Ok(Bytes::from(Value::Object(map).to_string()))
}

/// A state store request: RESP3 words, now and then raw bytes.
fn resp(u: &mut Unstructured) -> Result<Bytes> {
    if u.ratio(1, 10)? {
        return Ok(Bytes::from(u.arbitrary::<Vec<u8>>()?));
    }
    let n = u.int_in_range(1..=5)?;
    let mut out = format!("*{n}\r\n").into_bytes();
    for _ in 0..n {
        let arg: Vec<u8> = match u.ratio(1, 8)? {
            true => u.arbitrary()?,
            false => u.choose(RESP_WORDS)?.as_bytes().to_vec(),
        };
        out.extend(format!("${}\r\n", arg.len()).bytes());
        out.extend(arg);
        out.extend(b"\r\n");
    }
    Ok(Bytes::from(out))
}

/// A topic name as a broker delivers one: no wildcard, no NUL (a broker disconnects the client
/// that publishes one), so the fuzzer's words are mended to that.
fn topic_name(words: String) -> String {
    words.replace(['+', '#', '\0'], "_")
}

/// The node, what it published, and what the checks keep.
struct Run {
    node: Node,
    /// The data directory, when the node keeps one (and may be restarted).
    data_dir: Option<PathBuf>,
    now: u64,
    /// Ids and names seen in what the node published (command ids, `tid`s): words for the
    /// next requests.
    seen: Vec<String>,
    /// Commands the node sent to devices, for devices to answer.
    sent: Vec<Publish>,
    /// Receipts the node waits for.
    receipts: Vec<Receipt>,
    /// Per response topic of a request: its correlation data, and how many answers came.
    asked: HashMap<String, (Bytes, usize)>,
    /// Response topics of command service requests (answered once, eventually).
    commands_asked: Vec<String>,
}

impl Run {
    fn config(data_dir: Option<&PathBuf>) -> NodeConfig {
        NodeConfig {
            engine: EngineConfig {
                registration_lease_ms: Some(5_000),
                ..EngineConfig::new(NODE)
            },
            quotas: Quotas::default(),
            jobs: Some(JobsConfig {
                minute_ms: 1_000,
                rollout_batch: 4,
            }),
            durability: data_dir.map(|dir| Durability {
                data_dir: dir.clone(),
                fsync: Fsync::Always,
            }),
            commands: Some(ServiceConfig {
                node_id: NODE.into(),
                client_id: format!("{NODE}-commands"),
                profiles: Profiles::built_in(),
                events: true,
                random_id: counted_id,
            }),
        }
    }

    /// A node on memory, or on an empty data directory of this process's (in memory too:
    /// `/dev/shm` where there is one).
    fn new(durable: bool) -> Self {
        let data_dir = durable.then(|| {
            let base = Path::new("/dev/shm");
            let base = if base.is_dir() {
                base.to_owned()
            } else {
                std::env::temp_dir()
            };
            let dir = base.join(format!("mqstore-fuzz-node-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("a data directory");
            dir
        });
        let (node, _) = Node::open(Self::config(data_dir.as_ref()), T0).expect("the node starts");
        Run {
            node,
            data_dir,
            now: T0,
            seen: Vec::new(),
            sent: Vec::new(),
            receipts: Vec::new(),
            asked: HashMap::new(),
            commands_asked: Vec::new(),
        }
    }

    /// A message from `sender`, as a broker delivers it (QoS 1, not retained).
    fn receive(
        &mut self,
        topic: String,
        payload: Bytes,
        properties: Properties,
        sender: &str,
    ) -> Handled {
        let message = Publish {
            topic,
            payload,
            qos: 1,
            properties,
        };
        self.node.handle(message, Some(sender), false, self.now)
    }

    /// What the node says when asked about everything it keeps on disk: the keys, jobs,
    /// executions, groups, templates, things' pending lists, shadows and stored commands (each
    /// query read-only, answered at `now`).
    fn view(&mut self) -> Vec<(String, Bytes)> {
        let mut queries: Vec<(String, Bytes)> = Vec::new();
        for key in ["k1", "k2", "k3"] {
            let get = format!("*2\r\n$3\r\nGET\r\n$2\r\n{key}\r\n");
            queries.push((topics::INVOKE.into(), Bytes::from(get)));
        }
        let mut operator = vec![
            r#"{"op":"listJobs","maxResults":250}"#.to_owned(),
            r#"{"op":"listJobExecutions","maxResults":250}"#.to_owned(),
            r#"{"op":"listThingGroups","maxResults":250}"#.to_owned(),
            r#"{"op":"listJobTemplates","maxResults":250}"#.to_owned(),
        ];
        for job in JOBS {
            operator.push(format!(r#"{{"op":"describeJob","jobId":"{job}"}}"#));
        }
        for group in ["G1", "G2"] {
            operator.push(format!(
                r#"{{"op":"listThingsInThingGroup","thingGroupName":"{group}"}}"#
            ));
        }
        for call in operator {
            queries.push((OPERATOR_TOPIC.into(), Bytes::from(call)));
        }
        for thing in THINGS {
            for topic in [
                format!("$aws/things/{thing}/jobs/get"),
                format!("$aws/things/{thing}/shadow/get"),
                format!("$aws/things/{thing}/shadow/name/s1/get"),
            ] {
                queries.push((topic, Bytes::from_static(b"{}")));
            }
        }
        let list = Bytes::from_static(br#"{"op":"list"}"#);
        queries.push(("mqstore/commands/v1/definitions".into(), list));
        let mut answers = Vec::new();
        for (n, (topic, payload)) in queries.into_iter().enumerate() {
            let answer_on = match topic.starts_with("$aws/things/") {
                true => format!("{topic}/accepted"),
                false => format!("view/{n}"),
            };
            let properties = Properties {
                response_topic: Some(format!("view/{n}")),
                correlation_data: Some(Bytes::from_static(b"view")),
                user_properties: [("__srcId", "viewer"), ("__protVer", "1.0")]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect(),
                ..Properties::default()
            };
            self.receive(topic, payload, properties, "viewer");
            for out in self.drain() {
                if out.publish.topic == answer_on || out.publish.topic.ends_with("/rejected") {
                    answers.push((out.publish.topic, out.publish.payload));
                }
            }
        }
        answers
    }

    /// Stops the node (its last sync) and starts it again on its data directory: it says
    /// what it said before.
    fn restart(&mut self) {
        let Some(dir) = self.data_dir.clone() else {
            return;
        };
        let before = self.view();
        self.node.close().expect("the node closes");
        // The old node lets go of the directory's lock when dropped: a node on memory stands
        // in for the moment.
        let (stand_in, _) = Node::open(Self::config(None), self.now).expect("a node on memory");
        drop(std::mem::replace(&mut self.node, stand_in));
        let (node, _) = Node::open(Self::config(Some(&dir)), self.now).expect("it starts again");
        self.node = node;
        // What waited for a receipt or an answer before is gone with the node.
        self.receipts.clear();
        self.sent.clear();
        for topic in self.commands_asked.drain(..) {
            self.asked.remove(&topic);
        }
        let after = self.view();
        assert_eq!(before, after, "the node says other things after a restart");
    }

    /// A request's envelope: a response topic of its own (`step`), correlation data, and the
    /// user properties a client sends; with `more` besides.
    fn envelope(
        u: &mut Unstructured,
        step: usize,
        more: Vec<(String, String)>,
    ) -> Result<Properties> {
        let mut user_properties = vec![
            ("__srcId".to_owned(), "caller".to_owned()),
            ("__protVer".to_owned(), "1.0".to_owned()),
        ];
        if u.ratio(1, 2)? {
            let wall = T0 / 1000 * 1000;
            user_properties.push(("__ts".into(), format!("{wall:015}:00000:caller")));
        }
        user_properties.extend(more);
        if u.ratio(1, 16)? {
            user_properties.clear();
        }
        Ok(Properties {
            response_topic: Some(format!("caller/{step}")),
            correlation_data: Some(Bytes::from(format!("corr-{step}"))),
            user_properties,
            ..Properties::default()
        })
    }

    /// Takes what the node published: checks each, and keeps what later inputs use.
    fn drain(&mut self) -> Vec<Out> {
        let mut outs = Vec::new();
        // With a data directory, what waits for the disk comes out once the syncs ran.
        while let Some(sync) = self.node.poll_sync() {
            let synced = sync.run();
            self.node.synced(synced, self.now);
        }
        while let Some(out) = self.node.poll_output() {
            let topic = &out.publish.topic;
            assert!(
                !topic.is_empty()
                    && topic.len() <= usize::from(u16::MAX)
                    && !topic.contains(['+', '#', '\0']),
                "a topic no broker takes: {topic:?}"
            );
            assert!(out.publish.qos <= 1, "QoS 2 is never used: {out:?}");
            if topic.starts_with("$aws/things/") || topic.starts_with("$aws/events/") {
                let json: Value = serde_json::from_slice(&out.publish.payload)
                    .unwrap_or_else(|e| panic!("not JSON on {topic}: {e}"));
                assert!(json.is_object(), "not a JSON object on {topic}: {json}");
            }
            if let Some((correlation, answers)) = self.asked.get_mut(topic) {
                // For the requester's connection alone: a plugin publishes it to no one else
                // (its publishes skip the broker's ACL).
                assert_eq!(out.to, To::Requester(Some("caller".into())), "{out:?}");
                *answers += 1;
                assert_eq!(*answers, 1, "a second answer on {topic}: {out:?}");
                assert_eq!(
                    out.publish.properties.correlation_data.as_ref(),
                    Some(&*correlation),
                    "an answer with another request's correlation data"
                );
            }
            if let Some(response) = &out.publish.properties.response_topic
                && response.starts_with(&format!("clients/{NODE}-commands/"))
            {
                assert!(!is_reserved_topic(topic), "a command sent to {topic}");
                self.sent.push(out.publish.clone());
            } else if ["thing/product/", "$iothub/", "$aws/commands/"]
                .iter()
                .any(|p| topic.starts_with(p))
            {
                self.sent.push(out.publish.clone());
            }
            if let Ok(Value::Object(map)) = serde_json::from_slice(&out.publish.payload) {
                for key in ["tid", "id", "commandId", "jobId"] {
                    if let Some(Value::String(id)) = map.get(key)
                        && !self.seen.contains(id)
                    {
                        self.seen.push(id.clone());
                    }
                }
            }
            if let Some(receipt) = &out.receipt {
                self.receipts.push(receipt.clone());
            }
            outs.push(out);
        }
        // The latest few: what a device would answer.
        let old = self.sent.len().saturating_sub(16);
        self.sent.drain(..old);
        let old = self.seen.len().saturating_sub(32);
        self.seen.drain(..old);
        outs
    }

    /// Counts the answers on `step`'s response topic so far.
    fn answers(&self, step: usize) -> usize {
        self.asked.get(&format!("caller/{step}")).map_or(0, |a| a.1)
    }

    fn ask(&mut self, properties: &Properties) {
        if let (Some(topic), Some(correlation)) =
            (&properties.response_topic, &properties.correlation_data)
        {
            self.asked.insert(topic.clone(), (correlation.clone(), 0));
        }
    }

    fn step(&mut self, u: &mut Unstructured, step: usize) -> Result<()> {
        match u.int_in_range(0..=12)? {
            // A state store request: answered at once, exactly once.
            0 | 1 => {
                let properties = Self::envelope(u, step, Vec::new())?;
                self.ask(&properties);
                let request = resp(u)?;
                let handled = self.receive(topics::INVOKE.into(), request, properties, "caller");
                self.drain();
                if let Handled::State(Outcome::Answered { .. } | Outcome::Rejected(_)) = handled {
                    assert_eq!(self.answers(step), 1, "a state store request unanswered");
                }
            }
            // A device's jobs or shadow request: one reply, on its own topic, echoing its
            // clientToken.
            2..=4 => {
                let thing = match u.ratio(1, 8)? {
                    true => word(u, &self.seen)?,
                    false => (*u.choose(THINGS)?).to_owned(),
                };
                let api = match u.int_in_range(0..=5)? {
                    0 => "get".to_owned(),
                    1 => "start-next".to_owned(),
                    2 => format!("{}/get", u.choose(&["j1", "j2", "j3", "$next"])?),
                    3 => format!("{}/update", u.choose(JOBS)?),
                    4 => format!("shadow/{}", u.choose(&["get", "update", "delete"])?),
                    _ => word(u, &self.seen)?,
                };
                let topic = topic_name(match api.strip_prefix("shadow/") {
                    Some(op) if u.ratio(1, 2)? => {
                        format!("$aws/things/{thing}/shadow/name/s1/{op}")
                    }
                    Some(op) => format!("$aws/things/{thing}/shadow/{op}"),
                    None => format!("$aws/things/{thing}/jobs/{api}"),
                });
                let needs: &[&str] = match api.rsplit('/').next() {
                    Some("update") if api.contains("shadow") => &["state"],
                    Some("update") => &["status"],
                    _ => &[],
                };
                let body = payload(u, &self.seen, &[], needs)?;
                let handled =
                    self.receive(topic.clone(), body.clone(), Properties::default(), &thing);
                let outs = self.drain();
                if let Handled::Jobs(Ok(_)) = handled {
                    let replies: Vec<&Out> = outs
                        .iter()
                        .filter(|o| {
                            o.publish.topic == format!("{topic}/accepted")
                                || o.publish.topic == format!("{topic}/rejected")
                        })
                        .collect();
                    assert_eq!(replies.len(), 1, "not one reply to {topic}: {outs:?}");
                    let token = serde_json::from_slice::<Value>(&body)
                        .ok()
                        .and_then(|v| {
                            v.get("clientToken")
                                .and_then(Value::as_str)
                                .map(str::to_owned)
                        })
                        // A shadow echoes a token of at most 64 bytes (a longer one is refused,
                        // AWS's "Invalid clientToken"); jobs echo any, checked up to 64 chars.
                        .filter(|t| match api.starts_with("shadow/") {
                            true => t.len() <= 64,
                            false => t.chars().count() <= 64,
                        });
                    if let Some(token) = token {
                        let reply: Value =
                            serde_json::from_slice(&replies[0].publish.payload).unwrap();
                        assert_eq!(
                            reply["clientToken"],
                            Value::String(token),
                            "{topic}: {reply}"
                        );
                    }
                }
            }
            // An operator call: answered at once, exactly once, when its envelope is whole.
            5 | 6 => {
                let properties = Self::envelope(u, step, Vec::new())?;
                self.ask(&properties);
                let call = payload(u, &self.seen, &OPERATOR_CALLS, &[])?;
                let handled = self.receive(OPERATOR_TOPIC.into(), call, properties, "caller");
                self.drain();
                if let Handled::Jobs(Ok(_) | Err(mqstore_core::server::NotAnswered::Rejected)) =
                    handled
                {
                    assert_eq!(self.answers(step), 1, "an operator call unanswered");
                }
            }
            // A call of the command service: invoke, status or definitions.
            7 => {
                let topic = *u.choose(&[
                    "mqstore/commands/v1/invoke",
                    "mqstore/commands/v1/status",
                    "mqstore/commands/v1/definitions",
                ])?;
                let mut more = Vec::new();
                for _ in 0..u.int_in_range(0..=4)? {
                    let name = *u.choose(&[
                        "topic",
                        "profile",
                        "timeoutMs",
                        "mode",
                        "command",
                        "parameters",
                        "commandId",
                        "id",
                        "op",
                        "header:x",
                    ])?;
                    let text = match name {
                        // Devices' topics, or any (the node's own are refused).
                        "topic" => match u.ratio(1, 4)? {
                            true => word(u, &self.seen)?,
                            false => (*u.choose(DEVICE_TOPICS)?).to_owned(),
                        },
                        "timeoutMs" => u.int_in_range(0u32..=5_000)?.to_string(),
                        "parameters" => value(u, &self.seen, 2)?.to_string(),
                        _ => word(u, &self.seen)?,
                    };
                    more.push((name.to_owned(), text));
                }
                let properties = Self::envelope(u, step, more)?;
                self.ask(&properties);
                self.commands_asked.push(format!("caller/{step}"));
                let ops = match topic.ends_with("definitions") {
                    true => DEFINITION_CALLS,
                    false => &[],
                };
                let body = payload(u, &self.seen, ops, &[])?;
                self.receive(topic.into(), body, properties, "caller");
                self.drain();
            }
            // A device answers a command the node sent (or something like it).
            8 => {
                let Some(command) = (!self.sent.is_empty())
                    .then(|| u.choose(&self.sent))
                    .transpose()?
                else {
                    return Ok(());
                };
                let command = command.clone();
                let topic = match u.int_in_range(0..=3)? {
                    0 => command
                        .properties
                        .response_topic
                        .clone()
                        .unwrap_or_default(),
                    1 => format!("{}_reply", command.topic),
                    2 => command.topic.replace("/request/", "/response/"),
                    _ => command.topic.replace(
                        "methods/POST/reboot/",
                        &format!("methods/res/{}/", u.int_in_range(100..=599)?),
                    ),
                };
                if topic.is_empty() {
                    return Ok(());
                }
                let body = match u.ratio(1, 2)? {
                    true => command.payload.clone(),
                    false => payload(u, &self.seen, &[], &[])?,
                };
                let mut user_properties = Vec::new();
                if u.ratio(1, 3)? {
                    user_properties.push((
                        "__stat".to_owned(),
                        u.int_in_range(100u16..=599)?.to_string(),
                    ));
                }
                let properties = Properties {
                    correlation_data: command.properties.correlation_data.clone(),
                    user_properties,
                    ..Properties::default()
                };
                self.receive(topic, body, properties, "device");
                self.drain();
            }
            // The broker took (or refused) a publish that asked for a receipt.
            9 => {
                if !self.receipts.is_empty() {
                    let i = u.choose_index(self.receipts.len())?;
                    let receipt = self.receipts.swap_remove(i);
                    let code = *u.choose(&[Some(0u8), Some(0x10), Some(0x87), None])?;
                    self.node.acknowledged(&receipt, code, self.now);
                    self.drain();
                }
            }
            // A client is gone.
            10 => {
                let client = word(u, &self.seen)?;
                self.node.drop_clients(&[client, "caller".into()]);
                self.drain();
            }
            // The node stops and starts again on its data directory (with one).
            12 if self.data_dir.is_some() => self.restart(),
            // Time passes; the timers run when due.
            _ => {
                self.now +=
                    u64::from(u.arbitrary::<u16>()?) * u64::from(u.int_in_range(1u32..=40)?);
                self.tick();
            }
        }
        Ok(())
    }

    fn tick(&mut self) {
        // A deadline in the past is "now"; a rollout may ask again at once, a few times.
        for _ in 0..64 {
            match self.node.next_deadline(self.now, true) {
                Some(at) if at <= self.now => {
                    self.node.on_deadline(self.now, true);
                    self.drain();
                }
                _ => break,
            }
        }
    }

    /// Every receipt given, and all the time in the world: each command service request has
    /// had its one answer.
    fn finish(&mut self) {
        for receipt in std::mem::take(&mut self.receipts) {
            self.node.acknowledged(&receipt, Some(0), self.now);
            self.drain();
        }
        self.now += 7 * 24 * 3_600_000;
        self.tick();
        for receipt in std::mem::take(&mut self.receipts) {
            self.node.acknowledged(&receipt, Some(0), self.now);
            self.drain();
        }
        for topic in &self.commands_asked {
            assert!(
                self.asked.get(topic).is_none_or(|a| a.1 == 1),
                "a command service request not answered once: {topic}"
            );
        }
        self.restart();
    }
}

impl Drop for Run {
    /// The data directory goes with the run (one that panics leaves it, for a look).
    fn drop(&mut self) {
        if let Some(dir) = &self.data_dir {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    // One run in four keeps a data directory, synced before every answer (`fsync always`).
    let durable = u.ratio(1, 4).unwrap_or(false);
    let mut run = Run::new(durable);
    for step in 0..STEPS {
        if u.is_empty() || run.step(&mut u, step).is_err() {
            break;
        }
    }
    run.finish();
});
