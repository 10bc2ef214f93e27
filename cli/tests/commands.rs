//! Commands to devices over a real mosquitto (and a real Redis for many nodes), with device
//! simulators: DJI-style devices that answer on a fixed topic with the id in `tid`, and MQTT 5
//! devices that answer to the response topic with the correlation data.

mod broker;
mod calls;
#[path = "redis/mod.rs"]
mod redis;
mod tls;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use broker::{Broker, Process};
use mqstore_core::client::ClientError;
use mqstore_core::commands::{CommandRequest, MQTT5, Mode, Status};
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, ClientOptions};
use mqstore_server::commander::{Commander, CommanderConfig, CommanderError, RegistryConfig};
use mqstore_server::metrics::CommandCount;
use mqstore_server::redis_store::{PIPE_NAME, RedisConfig, RedisTls};
use mqstore_server::{ServerConfig, ServerHandle, spawn};
use redis::Redis;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};
use serde_json::{Value, json};

const GROUP: &str = "cmds";
const WAIT: Duration = Duration::from_secs(20);

fn broker_config(broker: &Broker) -> BrokerConfig {
    BrokerConfig {
        port: broker.port,
        ..BrokerConfig::default()
    }
}

/// How many times a device ran each command (by id).
type Runs = Arc<Mutex<HashMap<String, u32>>>;

/// A DJI-style device pool: `thing/product/{sn}/services` in, `…/services_reply` out, the id
/// in `tid`; `{"data": {"delay": ms, "fail": true, "twice": true}}` steer it; the answer echoes
/// `data`.
async fn dji_devices(broker: &Broker, runs: Runs) -> tokio::task::JoinHandle<()> {
    calls::device(broker.port, "dji-devices", "thing/product/+/services", move |topic, payload, _| {
        let sn = topic.split('/').nth(2).unwrap_or_default().to_owned();
        let Ok(command) = serde_json::from_slice::<Value>(payload) else {
            return Vec::new();
        };
        let tid = command["tid"].as_str().unwrap_or_default().to_owned();
        *runs.lock().unwrap().entry(tid.clone()).or_default() += 1;
        let data = &command["data"];
        let result = if data["fail"] == json!(true) { 314 } else { 0 };
        let reply = json!({"tid": tid, "method": command["method"], "data": {"result": result, "echo": data}});
        let delay = data["delay"].as_u64().unwrap_or(0);
        let times = if data["twice"] == json!(true) { 2 } else { 1 };
        (0..times)
            .map(|_| {
                (
                    format!("thing/product/{sn}/services_reply"),
                    reply.to_string().into_bytes(),
                    PublishProperties::default(),
                    delay,
                )
            })
            .collect()
    })
    .await
}

async fn commander(broker: &Broker, node: &str, registry: RegistryConfig) -> Commander {
    let config = CommanderConfig {
        share_group: Some(GROUP.into()),
        registry,
        ..CommanderConfig::new(broker_config(broker), node)
    };
    Commander::start(config, None)
        .await
        .expect("the commander starts")
}

fn redis_registry(redis: &Redis) -> RegistryConfig {
    RegistryConfig::Redis(RedisConfig::parse(&redis.url()).unwrap())
}

fn dji(sn: &str, data: Value) -> CommandRequest {
    CommandRequest {
        profile: "dji".into(),
        ..CommandRequest::new(
            format!("thing/product/{sn}/services"),
            json!({"method": "takeoff", "data": data}).to_string(),
        )
    }
}

fn echo(record: &mqstore_core::commands::Record) -> Value {
    let answer = record.answer.as_ref().expect("an answer");
    serde_json::from_slice::<Value>(&answer.payload).unwrap()["data"]["echo"].clone()
}

/// Keys of the command registry in Redis.
fn registry_keys(redis: &Redis) -> Vec<String> {
    redis
        .cli(&["--scan", "--pattern", "mqstore:cmd*"])
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registry_mode_over_three_nodes_on_redis_answers_each_caller_exactly_once() {
    let broker = Broker::start();
    let redis = Redis::start();
    let runs = Runs::default();
    let _devices = dji_devices(&broker, runs.clone()).await;
    let a = commander(&broker, "a", redis_registry(&redis)).await;
    let b = commander(&broker, "b", redis_registry(&redis)).await;
    let c = commander(&broker, "c", redis_registry(&redis)).await;

    // Sent through node A; mosquitto hands the answers round robin to A, B and C, and B and
    // C forward theirs to A.
    let mut calls = Vec::new();
    for n in 0..30 {
        let a = a.clone();
        calls.push(tokio::spawn(async move {
            (
                n,
                a.invoke(dji(&format!("SN{}", n % 3), json!({"n": n})))
                    .await,
            )
        }));
    }
    for call in calls {
        let (n, record) = call.await.unwrap();
        let record = record.expect("answered");
        assert_eq!(record.status, Status::Succeeded, "{record:?}");
        assert_eq!(echo(&record), json!({"n": n}), "its own answer");
        assert_eq!(record.node, "a");
    }
    let forwarded = b.metrics().commands(CommandCount::Forwarded)
        + c.metrics().commands(CommandCount::Forwarded);
    assert!(
        forwarded > 0,
        "B and C read some of A's answers and forwarded them"
    );
    assert_eq!(runs.lock().unwrap().len(), 30);
    assert!(
        runs.lock().unwrap().values().all(|&n| n == 1),
        "each command ran once"
    );
    for node in [&a, &b, &c] {
        assert_eq!(node.metrics().commands(CommandCount::Unknown), 0);
        assert_eq!(node.metrics().commands(CommandCount::Duplicate), 0);
        assert_eq!(node.waiting(), 0);
    }

    // Two in flight to one device, answered in the opposite order: each gets its own.
    let slow = a.invoke(dji("SN9527", json!({"which": "slow", "delay": 600})));
    let fast = b.invoke(dji("SN9527", json!({"which": "fast", "delay": 50})));
    let (slow, fast) = tokio::join!(slow, fast);
    assert_eq!(echo(&slow.unwrap())["which"], "slow");
    assert_eq!(echo(&fast.unwrap())["which"], "fast");

    // A device error is a FAILED record with the device's code.
    let failed = c.invoke(dji("SN1", json!({"fail": true}))).await.unwrap();
    assert_eq!(
        (failed.status, failed.answer.unwrap().code),
        (Status::Failed, Some(314))
    );
    // Status records are shared: any node reads any command's.
    let status = b.status(&sent_through(&a).await).await.unwrap();
    assert_eq!(status.status, Status::Succeeded);
    for node in [a, b, c] {
        node.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncorrelated_commands_on_redis_take_the_next_answer_on_their_topic() {
    let broker = Broker::start();
    let redis = Redis::start();
    // A device that answers on a fixed topic with nothing to correlate by.
    let _device = calls::device(
        broker.port,
        "old-firmware",
        "old/+/in",
        |topic, payload, _| {
            let out = topic.replace("/in", "/out");
            vec![(out, payload.to_vec(), PublishProperties::default(), 100)]
        },
    )
    .await;
    let mut profiles = mqstore_core::commands::Profiles::built_in();
    profiles
        .add_json(r#"{"old": {"command": "old/{dev}/in", "answer": "old/{dev}/out", "correlation": "none"}}"#)
        .unwrap();
    let mut nodes = Vec::new();
    for id in ["a", "b"] {
        let config = CommanderConfig {
            share_group: Some(GROUP.into()),
            registry: redis_registry(&redis),
            profiles: profiles.clone(),
            ..CommanderConfig::new(broker_config(&broker), id)
        };
        nodes.push(Commander::start(config, None).await.unwrap());
    }
    let old = |dev: u32, body: &str| CommandRequest {
        profile: "old".into(),
        ..CommandRequest::new(format!("old/{dev}/in"), body.to_owned())
    };
    // One in flight per device (the legacy rule), on two devices at once, through both nodes;
    // whichever node reads an answer, the waiting one gets it.
    for round in 0..4 {
        let (one, two) = tokio::join!(
            nodes[round % 2].invoke(old(1, &format!("one-{round}"))),
            nodes[(round + 1) % 2].invoke(old(2, &format!("two-{round}")))
        );
        for (record, want) in [
            (one.unwrap(), format!("one-{round}")),
            (two.unwrap(), format!("two-{round}")),
        ] {
            assert!(!record.correlated);
            assert_eq!(record.status, Status::Succeeded, "{record:?}");
            assert_eq!(&record.answer.unwrap().payload[..], want.as_bytes());
        }
    }
    // Nothing waits on the answer topics any more.
    for dev in [1, 2] {
        let index = format!("mqstore:cmdtopic:old/{dev}/out");
        assert_eq!(redis.cli(&["ZCARD", &index]).trim(), "0", "{index}");
    }
    // An answer nobody waits for is counted.
    let before: u64 = nodes
        .iter()
        .map(|n| n.metrics().commands(CommandCount::Unknown))
        .sum();
    let mut options = MqttOptions::new("stray-publisher", "127.0.0.1", broker.port);
    options.set_keep_alive(Duration::from_secs(5));
    let (stray, mut eventloop) = AsyncClient::new(options, 16);
    tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    stray
        .publish("old/1/out", QoS::AtLeastOnce, false, "nobody asked")
        .await
        .unwrap();
    wait_for(|| {
        nodes
            .iter()
            .map(|n| n.metrics().commands(CommandCount::Unknown))
            .sum::<u64>()
            == before + 1
    })
    .await;
    for node in nodes {
        node.stop().await;
    }
}

/// Sends a quick command through `node` and returns its id.
async fn sent_through(node: &Commander) -> String {
    node.invoke(dji("SN4", json!({}))).await.unwrap().id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_answers_and_bad_requests_are_counted_and_change_nothing() {
    let broker = Broker::start();
    let runs = Runs::default();
    let _devices = dji_devices(&broker, runs.clone()).await;
    let node = commander(&broker, "solo", RegistryConfig::Memory).await;
    let metrics = node.metrics().clone();

    // A device that answers twice: the first settles the command, the second is counted.
    let twice = node
        .invoke(dji("SN1", json!({"twice": true})))
        .await
        .unwrap();
    assert_eq!(twice.status, Status::Succeeded);
    wait_for(|| metrics.commands(CommandCount::Duplicate) == 1).await;

    // Answers nobody waits for, and answers the profile cannot read.
    let mut options = MqttOptions::new("liar", "127.0.0.1", broker.port);
    options.set_keep_alive(Duration::from_secs(5));
    let (liar, mut eventloop) = AsyncClient::new(options, 16);
    tokio::spawn(async move { while eventloop.poll().await.is_ok() {} });
    for payload in [
        json!({"tid": "00000000-0000-0000-0000-000000000000", "data": {"result": 0}}).to_string(),
        "not json".to_owned(),
        json!({"data": {"result": 0}}).to_string(),
    ] {
        liar.publish(
            "thing/product/SN1/services_reply",
            QoS::AtLeastOnce,
            false,
            payload,
        )
        .await
        .unwrap();
    }
    wait_for(|| metrics.commands(CommandCount::Unknown) == 1).await;
    wait_for(|| metrics.commands(CommandCount::Malformed) == 2).await;

    // Requests that cannot be sent: nothing is published, nothing registered.
    let before = runs.lock().unwrap().len();
    let mut zero = dji("SN1", json!({}));
    zero.timeout_ms = 0;
    let mut hours = dji("SN1", json!({}));
    hours.timeout_ms = 13 * 3_600_000;
    let not_json = CommandRequest {
        profile: "dji".into(),
        ..CommandRequest::new("thing/product/SN1/services", "TAKE_OFF")
    };
    let unknown = CommandRequest {
        profile: "carrier-pigeon".into(),
        ..CommandRequest::new("a/b", "x")
    };
    for bad in [zero, hours, not_json, unknown] {
        assert!(matches!(
            node.invoke(bad).await,
            Err(CommanderError::Command(_))
        ));
    }
    assert_eq!(runs.lock().unwrap().len(), before);
    assert_eq!(node.records(), Some(1));

    // A large command and its answer go through whole.
    let big = "x".repeat(1 << 20);
    let answered = node
        .invoke(dji("SN1", json!({ "big": big })))
        .await
        .unwrap();
    assert_eq!(echo(&answered)["big"].as_str().map(str::len), Some(1 << 20));
    node.stop().await;
}

async fn wait_for(done: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn server(broker: &Broker) -> ServerHandle {
    spawn(ServerConfig::new(broker_config(broker), "serve-1"))
        .await
        .expect("the server starts")
}

async fn client(broker: &Broker, id: &str) -> Client {
    Client::connect(ClientOptions::new(id, "127.0.0.1", broker.port))
        .await
        .expect("the client connects")
}

/// A command to the MQTT 5 device `dev/7` ([`mqtt5_devices`]), which answers with its payload.
async fn echoed_by_an_mqtt5_device(
    caller: &Client,
) -> mqstore_core::client::commands::CommandReply {
    let reply = caller
        .command(CommandRequest::new("dev/7/cmd", r#"{"go":1}"#))
        .await
        .unwrap();
    assert_eq!(
        (reply.status, &reply.payload[..]),
        (Status::Succeeded, &br#"{"go":1}"#[..])
    );
    reply
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_send_commands_through_mqstore_serve() {
    callers_send_commands(false).await;
}

/// The same calls with the command service inside mosquitto (no `mqstore serve`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_send_commands_inside_mosquitto() {
    callers_send_commands(true).await;
}

/// mosquitto with mqstore inside it (`settings`: more `plugin_opt_…` lines).
fn broker_with_plugin(settings: &str) -> Broker {
    Broker::start_config(&format!(
        "plugin {}\nplugin_opt_node_id inside\n{settings}",
        broker::plugin_path().display()
    ))
}

/// Every mode and refusal of the command service, through `mqstore serve` beside mosquitto or
/// (`inside`) through the plugin in it.
async fn callers_send_commands(inside: bool) {
    let broker = match inside {
        false => Broker::start(),
        true => broker_with_plugin(""),
    };
    let runs = Runs::default();
    let _dji = dji_devices(&broker, runs.clone()).await;
    let _mqtt5 = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let server = match inside {
        false => Some(server(&broker).await),
        true => None,
    };
    let caller = client(&broker, "caller").await;
    let mut watch = caller.watch_commands().await.unwrap();

    // Direct mode: an MQTT 5 device answers on the node's own response topic.
    let reply = echoed_by_an_mqtt5_device(&caller).await;
    assert_eq!(reply.device_status, Some(200));
    // Its status changes were published: SENT, then SUCCEEDED.
    let mut seen = Vec::new();
    while seen.last() != Some(&Status::Succeeded) {
        let record = tokio::time::timeout(WAIT, watch.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(record.id, reply.id);
        seen.push(record.status);
    }
    assert_eq!(seen, [Status::Sent, Status::Succeeded]);

    // Registry mode (memory) with a DJI device; a device error is a typed error.
    let ok = caller.command(dji("SN9", json!({"n": 1}))).await.unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&ok.payload).unwrap()["data"]["echo"],
        json!({"n": 1})
    );
    match caller.command(dji("SN9", json!({"fail": true}))).await {
        Err(ClientError::CommandFailed { answer, .. }) => assert_eq!(answer.code, Some(314)),
        other => panic!("{other:?}"),
    }

    // No answer in time: a timeout error; the late answer lands in the status record.
    let mut late = dji("SN9", json!({"delay": 1500}));
    late.timeout_ms = 500;
    let id = match caller.command(late).await {
        Err(ClientError::CommandTimedOut { id }) => id,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        caller.command_status(&id).await.unwrap().status,
        Status::TimedOut
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    let record = loop {
        let record = caller.command_status(&id).await.unwrap();
        if record.late {
            break record;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the late answer was not recorded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(record.status, Status::Succeeded);
    if let Some(server) = &server {
        assert_eq!(server.metrics.commands(CommandCount::Late), 1);
    }

    // One-way: done when the broker took it. Detached: the id at once, the answer later.
    let mut oneway = CommandRequest::new("dev/1/cmd", "{}");
    oneway.mode = Mode::OneWay;
    assert_eq!(
        caller.command(oneway).await.unwrap().status,
        Status::Delivered
    );
    let mut detached = dji("SN2", json!({"delay": 300}));
    detached.mode = Mode::Detached;
    let sent = caller.command(detached).await.unwrap();
    assert_eq!(sent.status, Status::Sent);
    let deadline = tokio::time::Instant::now() + WAIT;
    while caller.command_status(&sent.id).await.unwrap().status != Status::Succeeded {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the detached command was not answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // One command to many devices: each device's result as it comes, then the summary.
    let mut fleet = caller.command_many(vec![
        dji("SN21", json!({})),
        dji("SN22", json!({"fail": true})),
        CommandRequest::new("dev/23/cmd", "{}"),
    ]);
    let mut topics = Vec::new();
    while let Some((topic, _)) = tokio::time::timeout(WAIT, fleet.next()).await.unwrap() {
        topics.push(topic);
    }
    topics.sort();
    assert_eq!(
        topics,
        [
            "dev/23/cmd",
            "thing/product/SN21/services",
            "thing/product/SN22/services"
        ]
    );
    let summary = fleet.summary();
    assert_eq!(
        (
            summary.succeeded,
            summary.failed,
            summary.rejected,
            summary.timed_out,
            summary.errors
        ),
        (2, 1, 0, 0, 0)
    );

    // What the service cannot do is refused with a clear status.
    let unknown = CommandRequest {
        profile: "carrier-pigeon".into(),
        ..CommandRequest::new("a/b", "x")
    };
    match caller.command(unknown).await {
        Err(ClientError::Status {
            status: 400,
            message,
        }) => assert!(message.contains("carrier-pigeon"), "{message}"),
        other => panic!("{other:?}"),
    }
    match caller.command_status("no-such-command").await {
        Err(ClientError::Status { status: 404, .. }) => {}
        other => panic!("{other:?}"),
    }
    // A command goes to a device's topic, never where the node's own protocols speak: a
    // caller cannot make it (inside mosquitto: past the broker's ACL) publish a job's
    // notify-next that a device would act on. The first thing the thing hears is what the
    // test itself publishes after the refusal.
    let thing = listen(&broker, "$aws/things/T1/jobs/#").await;
    let spoof = CommandRequest::new(
        "$aws/things/T1/jobs/notify-next",
        r#"{"execution":{"jobId":"evil","jobDocument":{"url":"http://evil"}}}"#,
    );
    match caller.command(spoof).await {
        Err(ClientError::Status {
            status: 400,
            message,
        }) => assert!(message.contains("is not a device's"), "{message}"),
        other => panic!("{other:?}"),
    }
    let marker = AsyncClient::new(MqttOptions::new("marker", "127.0.0.1", broker.port), 8);
    marker
        .0
        .publish("$aws/things/T1/jobs/marker", QoS::AtLeastOnce, false, "{}")
        .await
        .unwrap();
    let mut marker_loop = marker.1;
    let heard = tokio::spawn(async move { while marker_loop.poll().await.is_ok() {} });
    wait_for(|| !thing.lock().unwrap().is_empty()).await;
    heard.abort();
    assert_eq!(thing.lock().unwrap()[0].0, "$aws/things/T1/jobs/marker");
    caller.close().await;
    if let Some(server) = server {
        assert!(
            server
                .metrics
                .render()
                .contains("mqstore_commands_total{event=\"succeeded\"}")
        );
        server.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_killed_while_waiting_leaves_an_orphaned_answer_and_nothing_in_redis() {
    let broker = Broker::start();
    let redis = Redis::start();
    let runs = Runs::default();
    let _devices = dji_devices(&broker, runs.clone()).await;
    // Node A: `mqstore serve` in a process of its own, the only node when the command comes.
    let mut a = Process(
        Command::new(env!("CARGO_BIN_EXE_mqstore"))
            .args(["--port", &broker.port.to_string(), "serve"])
            .args([
                "--store",
                &redis.url(),
                "--node-id",
                "a",
                "--share-group",
                GROUP,
            ])
            .env("MQSTORE_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mqstore serve starts"),
    );
    let caller = client(&broker, "caller").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    // Ready once A answers the command service.
    while let Err(ClientError::Timeout(_) | ClientError::Disconnected) =
        caller.command_status("x").await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "node A did not start"
        );
    }
    // The device answers after 4 s: time enough, on a loaded machine too, for node B to start
    // and node A to be killed first (with 1.5 s, A sometimes still took the answer itself).
    let mut slow = dji("SN1", json!({"delay": 4000}));
    slow.timeout_ms = 5_000;
    let waiting = tokio::spawn({
        let caller = caller.clone();
        async move { caller.command(slow).await }
    });
    wait_for(|| runs.lock().unwrap().len() == 1).await;
    // Node B reads the answer; A is gone (kill -9) before it comes.
    let b = commander(&broker, "b", redis_registry(&redis)).await;
    a.0.kill().unwrap();
    a.0.wait().unwrap();
    let id = runs.lock().unwrap().keys().next().unwrap().clone();
    wait_for(|| b.metrics().commands(CommandCount::Orphaned) == 1).await;
    // B counts the orphan, then records it: read the record once it is written.
    let deadline = tokio::time::Instant::now() + WAIT;
    let record = loop {
        let record = b.status(&id).await.unwrap();
        if record.orphaned || tokio::time::Instant::now() > deadline {
            break record;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        record.orphaned && record.status == Status::Succeeded,
        "{record:?}"
    );
    // The caller, whose node died, gets a clear error (no answer from the service).
    match waiting.await.unwrap() {
        Err(ClientError::Timeout(_)) => {}
        other => panic!("{other:?}"),
    }
    // Three timeouts after it was sent, Redis holds nothing of it.
    let deadline = tokio::time::Instant::now() + WAIT;
    while !registry_keys(&redis).is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "left in Redis: {:?}",
            registry_keys(&redis)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    b.stop().await;
    caller.close().await;
}

/// `commands` concurrent commands spread over `nodes`, each to one of 16 devices; every caller
/// gets exactly its own answer.
async fn many(nodes: &[Commander], commands: usize, request: impl Fn(usize) -> CommandRequest) {
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..commands {
        let node = nodes[n % nodes.len()].clone();
        let request = request(n);
        calls.spawn(async move { (n, node.invoke(request).await) });
    }
    let mut answered = vec![false; commands];
    while let Some(done) = calls.join_next().await {
        let (n, record) = done.unwrap();
        let record = record.unwrap_or_else(|e| panic!("command {n}: {e}"));
        assert_eq!(record.status, Status::Succeeded, "command {n}: {record:?}");
        let payload: Value = serde_json::from_slice(&record.answer.unwrap().payload).unwrap();
        let got = payload["data"]["echo"]["n"]
            .as_u64()
            .or(payload["n"].as_u64());
        assert_eq!(got, Some(n as u64), "command {n} got another's answer");
        assert!(!answered[n], "command {n} answered twice");
        answered[n] = true;
    }
    assert!(answered.iter().all(|a| *a));
    for node in nodes {
        assert_eq!(node.waiting(), 0);
        assert_eq!(node.metrics().commands(CommandCount::Unknown), 0);
        assert_eq!(node.metrics().commands(CommandCount::Duplicate), 0);
        assert_eq!(node.metrics().commands(CommandCount::TimedOut), 0);
    }
}

/// How many commands each mode of the load test sends: 2,000 unless `MQSTORE_COMMAND_LOAD` says
/// (`MQSTORE_COMMAND_LOAD=10000` is the full run; three modes of 10,000 take three minutes
/// from the debug build on two cores, most of the test command's Rust tests).
fn command_load() -> usize {
    match std::env::var("MQSTORE_COMMAND_LOAD") {
        Ok(n) => n
            .parse()
            .expect("MQSTORE_COMMAND_LOAD is a number of commands"),
        Err(_) => 2_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_commands_over_three_nodes_each_get_their_own_answer() {
    let commands = command_load();
    // mosquitto queues at most 1000 messages per client by default and drops the rest; the
    // device pool here is one connection with thousands of commands queued for it.
    let broker = Broker::start_config("max_queued_messages 100000\n");
    let redis = Redis::start();
    let runs = Runs::default();
    let _dji = dji_devices(&broker, runs.clone()).await;
    let _mqtt5 = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;

    // Registry mode on Redis: answers read by any node, forwarded to the one that waits.
    let mut nodes = Vec::new();
    for id in ["a", "b", "c"] {
        nodes.push(commander(&broker, id, redis_registry(&redis)).await);
    }
    many(&nodes, commands, |n| {
        let mut request = dji(&format!("SN{}", n % 16), json!({"n": n}));
        request.timeout_ms = 60_000;
        request
    })
    .await;
    assert_eq!(runs.lock().unwrap().len(), commands);
    assert!(runs.lock().unwrap().values().all(|&n| n == 1));
    // Nothing waits in Redis: every record there is settled.
    for key in registry_keys(&redis) {
        let json = redis.cli(&["HGET", &key, "d"]);
        assert!(json.contains("\"status\":\"SUCCEEDED\""), "{key}: {json}");
    }
    for node in nodes.drain(..) {
        node.stop().await;
    }

    // Direct mode: each node's answers come back to it. Each command goes out while Redis
    // records it (an answer that comes first waits for the record), then on memory registries.
    let direct = |n: usize| {
        let mut request =
            CommandRequest::new(format!("dev/{}/cmd", n % 16), json!({"n": n}).to_string());
        request.profile = MQTT5.into();
        request.timeout_ms = 60_000;
        request
    };
    let _ = redis.cli(&["FLUSHALL"]);
    for id in ["g", "h", "i"] {
        nodes.push(commander(&broker, id, redis_registry(&redis)).await);
    }
    many(&nodes, commands, direct).await;
    let records = registry_keys(&redis);
    assert_eq!(records.len(), commands, "one record per command");
    for key in records {
        let json = redis.cli(&["HGET", &key, "d"]);
        assert!(json.contains("\"status\":\"SUCCEEDED\""), "{key}: {json}");
    }
    for node in nodes.drain(..) {
        node.stop().await;
    }
    for id in ["d", "e", "f"] {
        nodes.push(commander(&broker, id, RegistryConfig::Memory).await);
    }
    many(&nodes, commands, direct).await;
    let kept: usize = nodes.iter().map(|n| n.records().unwrap()).sum();
    assert_eq!(
        kept, commands,
        "settled records are kept for status queries"
    );
    for node in nodes {
        node.stop().await;
    }
}

/// `mqstore serve --no-state-store` beside mosquitto with the state store plugin: the plugin
/// answers the state store, the server jobs and commands — each request by the one of them
/// that serves it.
/// The plugin serving the state store only (`plugin_opt_jobs false`, `plugin_opt_commands
/// false`), and `mqstore serve --no-state-store` beside it serving jobs and commands (on
/// Redis, shared by the nodes of several brokers, say): each request is answered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_and_commands_beside_the_plugin() {
    use mqstore_core::jobs::{JobSpec, Status as JobStatus};
    use mqstore_net::client::SetOptions;
    use mqstore_net::jobs::StartNext;

    let broker = broker_with_plugin("plugin_opt_jobs false\nplugin_opt_commands false\n");
    let _mqtt5 = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let config = ServerConfig {
        state_store: false,
        ..ServerConfig::new(broker_config(&broker), "beside")
    };
    let server = spawn(config).await.expect("the server starts");
    let mut options = ClientOptions::new("operator", "127.0.0.1", broker.port);
    options.timeout = Duration::from_secs(1);
    let operator = Client::connect(options).await.unwrap();
    // Once the server has subscribed, the operator API answers.
    let deadline = tokio::time::Instant::now() + WAIT;
    while let Err(ClientError::Timeout(_)) = operator.list_jobs().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "jobs never answered"
        );
    }

    // The state store is the plugin's: its node id in the version.
    let set = operator.set("k", "v", SetOptions::default()).await.unwrap();
    assert_eq!(&*set.version.unwrap().node, "inside");
    assert_eq!(operator.get("k").await.unwrap().unwrap().value, "v");

    // Jobs, from both sides.
    let device = client(&broker, "T1").await;
    let jobs = device.jobs("T1").await.unwrap();
    let spec = JobSpec::new("fw-1", vec!["T1".into()], json!({ "firmware": 2 }));
    operator.create_job(spec).await.unwrap();
    let started = jobs
        .start_next(StartNext::default())
        .await
        .unwrap()
        .expect("fw-1 is queued for T1");
    assert_eq!(
        (started.job_id.as_str(), started.status),
        ("fw-1", JobStatus::InProgress)
    );

    // Commands to an MQTT 5 device.
    echoed_by_an_mqtt5_device(&operator).await;
    // The server took the state store's requests from the broker before the jobs' that came
    // after them, had it served them: it served none.
    assert_eq!(server.metrics.requests("SET", "ok"), 0);
    assert_eq!(server.metrics.requests("GET", "ok"), 0);
    // Neither the plugin, which warns of a server that serves what it serves beside it, nor
    // the server (which reads the plugin's presence: the state store alone) saw a clash.
    assert!(
        !broker
            .log()
            .contains("beside this plugin, as the plugin does"),
        "{}",
        broker.log()
    );
    calls::wait_for_metric(&server.metrics, "no clash", |l| {
        l == "mqstore_clashing_nodes 0"
    })
    .await;
    server.stop().await.unwrap();
}

/// A `mqstore serve --no-state-store` beside a plugin that serves commands too: each command
/// would go to its device twice. The plugin warns, naming the node and the flags; the server
/// counts the plugin as a clash and logs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_served_beside_a_plugin_that_serves_them_are_a_clash_both_tell() {
    let broker = broker_with_plugin("plugin_opt_jobs false\n");
    let config = ServerConfig {
        state_store: false,
        jobs: false,
        ..ServerConfig::new(broker_config(&broker), "beside")
    };
    let server = spawn(config).await.expect("the server starts");
    calls::wait_for_metric(&server.metrics, "the plugin clashes", |l| {
        l == "mqstore_clashing_nodes 1"
    })
    .await;
    let warning = "mqstore: `mqstore serve` (node beside) serves commands beside this plugin, as \
                   the plugin does, so each such request gets two answers: run it with \
                   --no-commands (or set plugin_opt_commands false here)";
    let deadline = std::time::Instant::now() + WAIT;
    while !broker.log().contains(warning) {
        assert!(std::time::Instant::now() < deadline, "{}", broker.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await.unwrap();
}

/// What an AWS IoT commands device received on its acknowledgement topics: `accepted` or
/// `rejected`, and the body.
type Acks = Arc<Mutex<Vec<(String, Value)>>>;

/// A device written for AWS IoT commands (as the AWS v2 SDKs' `IotCommandsV2Client` speaks
/// it): thing `thing` subscribes to its executions' requests and to the acknowledgements of its
/// updates, and sends, for each command, the updates its payload lists (`{"updates": [[delay
/// ms, update JSON, execution id or null], …]}`), one at a time.
async fn aws_device(broker: &Broker, thing: &str) -> (tokio::task::JoinHandle<()>, Acks) {
    let acks = Acks::default();
    let base = format!("$aws/commands/things/{thing}/executions");
    let mut options = MqttOptions::new(format!("aws-{thing}"), "127.0.0.1", broker.port);
    options.set_max_packet_size(Some(1024 * 1024));
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
    let seen = acks.clone();
    let task = tokio::spawn(async move {
        let mut subscribed_tx = Some(subscribed_tx);
        let mut subacks = 0;
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    for filter in [
                        format!("{base}/+/request/json"),
                        format!("{base}/+/response/accepted/json"),
                        format!("{base}/+/response/rejected/json"),
                    ] {
                        client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    subacks += 1;
                    if subacks == 3
                        && let Some(tx) = subscribed_tx.take()
                    {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let topic = String::from_utf8_lossy(&p.topic).into_owned();
                    let body: Value = serde_json::from_slice(&p.payload).unwrap_or(Value::Null);
                    if let Some(kind) = ["accepted", "rejected"]
                        .into_iter()
                        .find(|kind| topic.ends_with(&format!("/response/{kind}/json")))
                    {
                        seen.lock().unwrap().push((kind.to_owned(), body));
                        continue;
                    }
                    // A request: `$aws/commands/things/T/executions/{id}/request/json`.
                    let id = topic.split('/').nth(5).unwrap_or_default().to_owned();
                    let (client, base) = (client.clone(), base.clone());
                    tokio::spawn(async move {
                        let updates = body["updates"].as_array().cloned().unwrap_or_default();
                        for update in updates {
                            tokio::time::sleep(Duration::from_millis(
                                update[0].as_u64().unwrap_or(0),
                            ))
                            .await;
                            let execution = update[2].as_str().unwrap_or(&id).to_owned();
                            let payload = match &update[1] {
                                Value::String(raw) => raw.clone().into_bytes(),
                                json => json.to_string().into_bytes(),
                            };
                            let _ = client
                                .publish(
                                    format!("{base}/{execution}/response/json"),
                                    QoS::AtLeastOnce,
                                    false,
                                    payload,
                                )
                                .await;
                        }
                    });
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    tokio::time::timeout(WAIT, subscribed)
        .await
        .expect("the AWS device subscribes")
        .unwrap();
    (task, acks)
}

/// Everything published on `filter` from now on: topic and JSON body.
async fn listen(broker: &Broker, filter: &str) -> Acks {
    static LISTENERS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let seen = Acks::default();
    let n = LISTENERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut options = MqttOptions::new(format!("listener-{n}"), "127.0.0.1", broker.port);
    options.set_clean_start(true);
    let (client, mut eventloop) = AsyncClient::new(options, 64);
    client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
    let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
    let heard = seen.clone();
    tokio::spawn(async move {
        let _client = client;
        let mut subscribed_tx = Some(subscribed_tx);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(tx) = subscribed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let body = serde_json::from_slice(&p.payload).unwrap_or(Value::Null);
                    heard
                        .lock()
                        .unwrap()
                        .push((String::from_utf8_lossy(&p.topic).into_owned(), body));
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    tokio::time::timeout(WAIT, subscribed)
        .await
        .unwrap()
        .unwrap();
    seen
}

/// A command for the AWS device `robot1` that makes it send `updates` (see [`aws_device`]).
fn aws_command(updates: Value, timeout_ms: u64) -> CommandRequest {
    CommandRequest {
        profile: "aws".into(),
        timeout_ms,
        content_type: Some("application/json".into()),
        ..CommandRequest::new(
            "$aws/commands/things/robot1/executions/{id}/request/json",
            json!({ "updates": updates }).to_string(),
        )
    }
}

/// The statuses (and reason codes) of command `id`'s records seen on `watch` until `last`.
async fn statuses_until(
    watch: &mut mqstore_net::commands::CommandWatch,
    id: &str,
    last: Status,
) -> Vec<(Status, Option<String>)> {
    let mut seen = Vec::new();
    while seen.last().map(|(s, _)| *s) != Some(last) {
        let record = tokio::time::timeout(WAIT, watch.next())
            .await
            .expect("a status change")
            .unwrap();
        if record.id == id {
            let reason = record.answer.and_then(|a| a.reason_code);
            seen.push((record.status, reason));
        }
    }
    seen
}

/// The acknowledgements `acks` holds once it holds `n`.
async fn acks_when(acks: &Acks, n: usize) -> Vec<(String, Value)> {
    wait_for(|| acks.lock().unwrap().len() >= n).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    acks.lock().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_iot_commands_device_reports_progress_then_its_result() {
    let broker = Broker::start();
    let (_device, acks) = aws_device(&broker, "robot1").await;
    let server = server(&broker).await;
    let caller = client(&broker, "caller").await;
    let mut watch = caller.watch_commands().await.unwrap();
    let result = json!({"offset": {"s": "0.25"}, "level": {"b": true}, "raw": {"bin": "AAE="}});
    let updates = json!([
        [0, {"status": "IN_PROGRESS", "statusReason": {"reasonCode": "HEATING", "reasonDescription": "to 80 C"}}],
        [150, {"status": "IN_PROGRESS", "statusReason": {"reasonCode": "MEASURING"}}],
        [150, {"status": "DONE"}],
        [150, {"status": "SUCCEEDED", "statusReason": {"reasonCode": "OK"}, "result": result}],
        [150, {"status": "IN_PROGRESS"}],
        [150, {"status": "SUCCEEDED"}, "00000000-0000-0000-0000-000000000000"],
        [150, "not json"],
    ]);
    let reply = caller
        .command(aws_command(updates, 10_000))
        .await
        .expect("the command succeeds");
    assert_eq!(reply.status, Status::Succeeded);
    let answered: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert_eq!(answered["result"], result, "the caller gets the result");
    // The caller saw two progress events, then the result.
    let seen = statuses_until(&mut watch, &reply.id, Status::Succeeded).await;
    let progress: Vec<_> = seen
        .iter()
        .filter(|(s, _)| *s == Status::InProgress)
        .map(|(_, reason)| reason.as_deref().unwrap_or_default())
        .collect();
    assert_eq!(progress, ["HEATING", "MEASURING"], "{seen:?}");
    assert_eq!(seen.last().unwrap().1.as_deref(), Some("OK"));
    // The record holds the reason and the result.
    let record = caller.command_status(&reply.id).await.unwrap();
    let answer = record.answer.unwrap();
    assert_eq!(answer.reason_code.as_deref(), Some("OK"));
    assert_eq!(answer.result, Some(result));
    // Every update was acknowledged as AWS does.
    let acks = acks_when(&acks, 7).await;
    let said: Vec<(&str, &str)> = acks
        .iter()
        .map(|(kind, body)| (kind.as_str(), body["error"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(
        said,
        [
            ("accepted", ""),
            ("accepted", ""),
            ("rejected", "InvalidRequest"),
            ("accepted", ""),
            ("rejected", "TerminalStateReached"),
            ("rejected", "ResourceNotFound"),
            ("rejected", "InvalidJson"),
        ]
    );
    assert_eq!(acks[0].1, json!({"executionId": reply.id}));
    assert!(
        acks[2].1["errorMessage"].as_str().unwrap().contains("DONE"),
        "{acks:?}"
    );
    // The malformed update changed nothing: the record went from MEASURING to OK.
    assert!(!seen.iter().any(|(_, r)| r.as_deref() == Some("DONE")));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aws_command_that_falls_silent_times_out_and_a_late_result_replaces_the_timeout() {
    let broker = Broker::start();
    let (_device, _acks) = aws_device(&broker, "robot1").await;
    let server = server(&broker).await;
    let caller = client(&broker, "caller").await;
    let mut watch = caller.watch_commands().await.unwrap();
    let updates = json!([
        [0, {"status": "IN_PROGRESS"}],
        [2_500, {"status": "FAILED", "statusReason": {"reasonCode": "JAMMED"}}],
    ]);
    let error = caller
        .command(aws_command(updates, 1_000))
        .await
        .unwrap_err();
    let ClientError::CommandTimedOut { id } = error else {
        panic!("timed out, not {error:?}");
    };
    let seen = statuses_until(&mut watch, &id, Status::Failed).await;
    let statuses: Vec<Status> = seen.iter().map(|(s, _)| *s).collect();
    assert!(
        statuses.ends_with(&[Status::InProgress, Status::TimedOut, Status::Failed]),
        "{seen:?}"
    );
    let record = caller.command_status(&id).await.unwrap();
    assert_eq!((record.status, record.late), (Status::Failed, true));
    server.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_commands_across_three_nodes_on_redis_publish_each_transition_once() {
    use mqstore_server::StoreConfig;
    let broker = Broker::start();
    let redis = Redis::start();
    let (_device, acks) = aws_device(&broker, "robot1").await;
    let mut nodes = Vec::new();
    for n in 0..3 {
        let config = ServerConfig {
            store: StoreConfig::Redis(RedisConfig::parse(&redis.url()).unwrap()),
            share_group: Some(GROUP.into()),
            ..ServerConfig::new(broker_config(&broker), format!("aws-{n}"))
        };
        nodes.push(spawn(config).await.expect("the node starts"));
    }
    // One node is elected to read the `$aws/...` updates for all.
    wait_for(|| {
        nodes.iter().any(|node| {
            node.metrics
                .render()
                .contains("\nmqstore_jobs_device_api_listener 1\n")
        })
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let caller = client(&broker, "caller").await;
    let mut watch = caller.watch_commands().await.unwrap();
    let updates = json!([
        [0, {"status": "IN_PROGRESS", "statusReason": {"reasonCode": "ONE"}}],
        [100, {"status": "IN_PROGRESS", "statusReason": {"reasonCode": "TWO"}}],
        [100, {"status": "SUCCEEDED", "result": {"n": {"s": "3"}}}],
    ]);
    // A stored command, kept in Redis: every node starts it by id.
    let stored: mqstore_core::commands::definitions::Definition = serde_json::from_value(json!({
        "commandId": "count",
        "payload": {"content": json!({ "updates": updates }).to_string(), "contentType": "application/json"}
    }))
    .unwrap();
    caller.define_command(&stored).await.unwrap();
    let aws_events = listen(&broker, "$aws/events/commandExecution/+/#").await;
    let mut ids = Vec::new();
    for n in 0..6 {
        // Through the share group: the caller's node is any of the three.
        let request = match n % 2 {
            0 => aws_command(updates.clone(), 10_000),
            _ => CommandRequest::start("count", "robot1"),
        };
        let reply = caller
            .command(request)
            .await
            .expect("the answer reaches the node the caller waits on");
        assert_eq!(reply.status, Status::Succeeded);
        ids.push(reply.id);
    }
    // Each transition was published once: per command, SENT, two IN_PROGRESS, one SUCCEEDED
    // (DELIVERED is not published for awaited commands).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut events: HashMap<String, Vec<Status>> = HashMap::new();
    while let Ok(Some(record)) =
        tokio::time::timeout(Duration::from_millis(300), watch.next()).await
    {
        events.entry(record.id).or_default().push(record.status);
    }
    for id in &ids {
        assert_eq!(
            events.get(id).map(Vec::as_slice),
            Some(
                &[
                    Status::Sent,
                    Status::InProgress,
                    Status::InProgress,
                    Status::Succeeded
                ][..]
            ),
            "{id}"
        );
    }
    // The stored command's executions: AWS's events, each once.
    let aws_events = aws_events.lock().unwrap().clone();
    for id in ids.iter().skip(1).step_by(2) {
        let seen: Vec<&str> = aws_events
            .iter()
            .filter(|(_, body)| body["executionId"] == id.as_str())
            .map(|(topic, _)| topic.rsplit('/').next().unwrap_or_default())
            .collect();
        assert_eq!(
            seen,
            ["CREATED", "IN_PROGRESS", "IN_PROGRESS", "SUCCEEDED"],
            "{id}"
        );
    }
    // And each update acknowledged once.
    let acks = acks_when(&acks, 18).await;
    assert_eq!(acks.len(), 18, "{acks:?}");
    assert!(acks.iter().all(|(kind, _)| kind == "accepted"), "{acks:?}");
    for node in nodes {
        node.stop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_commands_are_started_by_id_and_followed_through_aws_events() {
    use mqstore_core::commands::definitions::Definition;
    let broker = Broker::start();
    let (_device, _acks) = aws_device(&broker, "robot1").await;
    let server = server(&broker).await;
    let events = listen(&broker, "$aws/events/commandExecution/+/#").await;
    let caller = client(&broker, "operator").await;
    // A template whose parameter the device echoes in its result.
    let heat: Definition = serde_json::from_value(json!({
        "commandId": "heat",
        "description": "heat up, report progress, then the temperature reached",
        "payloadTemplate": r#"{"updates": [[0, {"status": "IN_PROGRESS"}], [100, {"status": "SUCCEEDED", "result": {"reached": {"s": "${aws:iot:commandexecution::parameter:temp}"}}}]]}"#,
        "mandatoryParameters": [{"name": "temp", "defaultValue": {"S": "20"}}]
    }))
    .unwrap();
    let stored = caller.define_command(&heat).await.unwrap();
    assert!(stored.created_ms > 0);
    assert_eq!(
        caller
            .command_definition("heat")
            .await
            .unwrap()
            .payload_template,
        heat.payload_template
    );
    let ids: Vec<String> = caller
        .command_definition_list()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.command_id)
        .collect();
    assert_eq!(ids, ["heat"]);
    // The id is taken; a bad definition is refused with its reason.
    match caller.define_command(&heat).await {
        Err(ClientError::Status { status: 409, .. }) => {}
        other => panic!("409, not {other:?}"),
    }
    let bad = Definition {
        command_id: "bad id".into(),
        ..heat.clone()
    };
    match caller.define_command(&bad).await {
        Err(ClientError::Status {
            status: 400,
            message,
        }) => assert!(message.contains("commandId"), "{message}"),
        other => panic!("400, not {other:?}"),
    }
    // Started by id for a target, with a parameter (and with its default).
    for (temp, reached) in [(Some("80"), "80"), (None, "20")] {
        let mut start = CommandRequest::start("heat", "thing/robot1");
        if let Some(temp) = temp {
            start.parameters.insert("temp".into(), json!({"S": temp}));
        }
        let reply = caller
            .command(start)
            .await
            .expect("the stored command runs");
        let answered: Value = serde_json::from_slice(&reply.payload).unwrap();
        assert_eq!(answered["result"]["reached"]["s"], reached);
        let record = caller.command_status(&reply.id).await.unwrap();
        assert_eq!(record.command.as_deref(), Some("heat"));
        // AWS's events for each transition: CREATED, IN_PROGRESS, SUCCEEDED.
        wait_for(|| {
            events
                .lock()
                .unwrap()
                .iter()
                .any(|(t, b)| t.ends_with("/SUCCEEDED") && b["executionId"] == reply.id.as_str())
        })
        .await;
        let seen: Vec<String> = events
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, b)| b["executionId"] == reply.id.as_str())
            .map(|(topic, body)| {
                assert_eq!(body["eventType"], "COMMAND_EXECUTION");
                assert_eq!(
                    body["commandArn"],
                    "arn:aws:iot:mqstore:000000000000:command/heat"
                );
                assert_eq!(
                    body["targetArn"],
                    "arn:aws:iot:mqstore:000000000000:thing/robot1"
                );
                topic.clone()
            })
            .collect();
        assert_eq!(
            seen,
            [
                "$aws/events/commandExecution/heat/CREATED",
                "$aws/events/commandExecution/heat/IN_PROGRESS",
                "$aws/events/commandExecution/heat/SUCCEEDED"
            ]
        );
    }
    // Starting what cannot start sends nothing: an unknown id (404), a bad parameter (400).
    match caller
        .command(CommandRequest::start("cool", "robot1"))
        .await
    {
        Err(ClientError::Status {
            status: 404,
            message,
        }) => assert!(message.contains("cool"), "{message}"),
        other => panic!("404, not {other:?}"),
    }
    let mut unknown_parameter = CommandRequest::start("heat", "robot1");
    unknown_parameter.parameters.insert("fan".into(), json!(1));
    match caller.command(unknown_parameter).await {
        Err(ClientError::Status {
            status: 400,
            message,
        }) => assert!(message.contains("fan"), "{message}"),
        other => panic!("400, not {other:?}"),
    }
    assert!(caller.delete_command_definition("heat").await.unwrap());
    assert!(!caller.delete_command_definition("heat").await.unwrap());
    match caller.command_definition("heat").await {
        Err(ClientError::Status { status: 404, .. }) => {}
        other => panic!("404, not {other:?}"),
    }
    server.stop().await.unwrap();
}

/// A one-way command is answered DELIVERED at the broker's PUBACK; when the connection drops
/// after the broker took the command and before its PUBACK arrived, the caller hears that (503),
/// on memory and on Redis alike, and the node goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_way_command_whose_connection_drops_before_its_puback_is_answered_503() {
    use mqstore_server::StoreConfig;
    use std::sync::atomic::Ordering;
    let broker = Broker::start();
    let redis = Redis::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    for store in [
        StoreConfig::Memory,
        StoreConfig::Redis(RedisConfig::parse(&redis.url()).unwrap()),
    ] {
        let proxy = broker::cut_at(broker.port, broker::Watch::FromBroker, broker::is_puback).await;
        let through_proxy = BrokerConfig {
            port: proxy.port,
            ..broker_config(&broker)
        };
        let server = spawn(ServerConfig {
            store,
            ..ServerConfig::new(through_proxy, "cut-1")
        })
        .await
        .expect("the server starts");
        let caller = client(&broker, "caller").await;
        let mut one_way = CommandRequest::new("dev/1/cmd", "{}");
        one_way.mode = Mode::OneWay;
        proxy.armed.store(true, Ordering::SeqCst);
        match caller.command(one_way.clone()).await {
            Err(ClientError::Status {
                status: 503,
                message,
            }) => assert!(
                message.contains("the connection dropped before the broker acknowledged"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(proxy.cut.load(Ordering::SeqCst), 1);
        // The node reconnected: the next one is delivered.
        let record = caller.command(one_way).await.unwrap();
        assert_eq!(record.status, Status::Delivered);
        caller.close().await;
        server.stop().await.unwrap();
    }
}

/// A node writes its commands' records on a pipe of its own to Redis. While Redis is held
/// (SIGSTOP) a command is answered with the registry's error once the pipe's reply timeout
/// passed, not at the command's own timeout; once Redis goes on, and after it restarted (its
/// connections dropped, its scripts forgotten), commands succeed again and are recorded, and
/// the pipe is opened again each time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_on_redis_fail_fast_while_redis_is_held_and_succeed_once_it_is_back() {
    let broker = Broker::start();
    let mut redis = Redis::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let node = commander(&broker, "piped", redis_registry(&redis)).await;
    let command = |n: usize| {
        let mut request = CommandRequest::new(format!("dev/{n}/cmd"), json!({"n": n}).to_string());
        request.timeout_ms = 60_000;
        request
    };
    let record = node.invoke(command(0)).await.unwrap();
    assert_eq!(record.status, Status::Succeeded);

    redis.signal("-STOP");
    let sent = std::time::Instant::now();
    let held = tokio::time::timeout(Duration::from_secs(30), node.invoke(command(1))).await;
    let waited = sent.elapsed();
    redis.signal("-CONT");
    let Ok(held) = held else {
        panic!("no answer in {waited:?}: the pipe's reply timeout is 2 s, the command's 60 s");
    };
    assert!(
        matches!(&held, Err(CommanderError::Registry(_))),
        "{held:?}"
    );

    // Back, then restarted: the pipe is opened again (once a second), the script sent again.
    for round in ["went on", "restarted"] {
        if round == "restarted" {
            redis.restart();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let record = loop {
            match node.invoke(command(2)).await {
                Ok(record) => break record,
                Err(CommanderError::Registry(e)) => {
                    assert!(std::time::Instant::now() < deadline, "{round}: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(other) => panic!("{round}: {other:?}"),
            }
        };
        assert_eq!(record.status, Status::Succeeded, "{round}");
        // The node's pipe is open again (it names itself in Redis's client list).
        while !redis.cli(&["CLIENT", "LIST"]).contains(PIPE_NAME) {
            assert!(
                std::time::Instant::now() < deadline,
                "{round}: no pipe again"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let key = format!("mqstore:cmd:{}", record.id);
        let stored = redis.cli(&["HGET", &key, "d"]);
        assert!(
            stored.contains("\"status\":\"SUCCEEDED\""),
            "{round}: {stored}"
        );
    }
    node.stop().await;
}

/// On its pipe to Redis a node writes a command's answer from the record it wrote itself. When
/// Redis forgot the script (SCRIPT FLUSH) the write is sent again with the script's code; when
/// another node changed the record in between, the answer is written from a fresh read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_sends_a_forgotten_script_again_and_rereads_a_record_changed_meanwhile() {
    let broker = Broker::start();
    let redis = Redis::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    // Answers after a second: time for another node to change the record.
    let _slow = calls::device(
        broker.port,
        "slow-devices",
        "slow/+/cmd",
        |_, payload, props| {
            let answer = PublishProperties {
                correlation_data: props.correlation_data.clone(),
                user_properties: vec![("__stat".into(), "200".into())],
                ..PublishProperties::default()
            };
            let topic = props.response_topic.clone().unwrap_or_default();
            vec![(topic, payload.to_vec(), answer, 1000)]
        },
    )
    .await;
    let node = commander(&broker, "piped", redis_registry(&redis)).await;

    let _ = redis.cli(&["CONFIG", "RESETSTAT"]);
    let _ = redis.cli(&["SCRIPT", "FLUSH"]);
    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    assert_eq!(record.unwrap().status, Status::Succeeded);
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(
        stats.contains("cmdstat_eval:"),
        "sent with its code: {stats}"
    );

    let waiting = tokio::spawn({
        let node = node.clone();
        async move { node.invoke(CommandRequest::new("slow/1/cmd", "{}")).await }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let key = loop {
        let keys = registry_keys(&redis);
        if let Some(key) = keys
            .into_iter()
            .find(|k| redis.cli(&["HGET", k, "d"]).contains("slow/1/cmd"))
        {
            break key;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slow command is recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Another node's write: the revision this node holds is no longer Redis's.
    assert_eq!(redis.cli(&["HINCRBY", &key, "r", "1"]).trim(), "2");
    let record = waiting.await.unwrap().unwrap();
    assert_eq!(record.status, Status::Succeeded);
    assert_eq!(
        redis.cli(&["HGET", &key, "r"]).trim(),
        "3",
        "written after a fresh read"
    );
    let stored = redis.cli(&["HGET", &key, "d"]);
    assert!(stored.contains("\"status\":\"SUCCEEDED\""), "{stored}");
    node.stop().await;
}

/// A node has one batch of writes at a time on its pipe to Redis: the writes it makes while a
/// batch awaits its replies wait in the node and go out together once they are in (fewer, larger
/// reads and writes for Redis and the node). Held by `CLIENT PAUSE WRITE`, Redis keeps the first
/// write unanswered: the next commands' writes are not in its buffer for the pipe's connection
/// (`qbuf=0`, where sending them at once puts them there), and all complete once Redis goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_sends_its_next_writes_together_once_the_writes_before_are_answered() {
    let broker = Broker::start();
    let redis = Redis::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let node = commander(&broker, "batched", redis_registry(&redis)).await;
    // The script loaded and the pipe up.
    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    assert_eq!(record.unwrap().status, Status::Succeeded);
    let pipe_client = || pipe_line(&redis);

    assert_eq!(
        redis.cli(&["CLIENT", "PAUSE", "10000", "WRITE"]).trim(),
        "OK"
    );
    let invoke = |n: u32| {
        let node = node.clone();
        tokio::spawn(async move {
            let request = CommandRequest::new(format!("dev/{n}/cmd"), "{}");
            node.invoke(request).await
        })
    };
    let first = invoke(2);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    // The first write is at Redis, which holds it (the pipe's client blocked).
    while !pipe_client().contains(" flags=b ") {
        assert!(std::time::Instant::now() < deadline, "{}", pipe_client());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let more: Vec<_> = (3..6).map(invoke).collect();
    // Time for the next commands to reach the node and, were their writes sent, Redis's
    // buffer (well within the pipe's 2 s for a reply).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let held = pipe_client();
    assert_eq!(redis.cli(&["CLIENT", "UNPAUSE"]).trim(), "OK");
    assert!(
        held.contains(" qbuf=0 "),
        "the next writes wait in the node: {held}"
    );

    for call in std::iter::once(first).chain(more) {
        let record = call.await.unwrap().unwrap();
        assert_eq!(record.status, Status::Succeeded);
        let stored = redis.cli(&["HGET", &format!("mqstore:cmd:{}", record.id), "d"]);
        assert!(stored.contains("\"status\":\"SUCCEEDED\""), "{stored}");
    }
    node.stop().await;
}

/// A command's record in Redis is forgotten at a time fixed when the command is sent
/// (`KEEP_TIMEOUTS` timeouts later): its first write sets the TTL, and its answer's write,
/// which changes the record, keeps that TTL without setting it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_s_record_in_redis_keeps_the_ttl_its_first_write_set() {
    let broker = Broker::start();
    let redis = Redis::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let node = commander(&broker, "ttl", redis_registry(&redis)).await;
    let _ = redis.cli(&["CONFIG", "RESETSTAT"]);
    let request = CommandRequest {
        timeout_ms: 20_000,
        ..CommandRequest::new("dev/1/cmd", "{}")
    };
    let record = node.invoke(request).await.unwrap();
    assert_eq!(record.status, Status::Succeeded);
    let key = format!("mqstore:cmd:{}", record.id);
    assert_eq!(redis.cli(&["HGET", &key, "r"]).trim(), "2", "written twice");
    let ttl: u64 = redis.cli(&["PTTL", &key]).trim().parse().unwrap();
    let keep = 20_000 * mqstore_core::commands::KEEP_TIMEOUTS;
    assert!(
        keep - 10_000 < ttl && ttl <= keep,
        "kept {keep} ms from when it was sent: {ttl} ms left"
    );
    let stats = redis.cli(&["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_pexpire:calls=1,"), "{stats}");
    assert!(stats.contains("cmdstat_hset:calls=2,"), "{stats}");
    node.stop().await;
}

/// A node's pipe to Redis logs in and picks the database as the registry's URL says
/// (`redis://:password@host:port/db`), so its writes land where the shared client's do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_to_redis_uses_the_url_s_password_and_database() {
    let broker = Broker::start();
    let redis = Redis::start_with_password("s3cret");
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let url = format!("redis://:s3cret@127.0.0.1:{}/3", redis.port);
    let registry = RegistryConfig::Redis(RedisConfig::parse(&url).unwrap());
    let node = commander(&broker, "locked", registry).await;
    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    let record = record.unwrap();
    assert_eq!(record.status, Status::Succeeded);
    let authed = |args: &[&str]| {
        let mut all = vec!["-a", "s3cret", "--no-auth-warning", "-n", "3"];
        all.extend_from_slice(args);
        redis.cli(&all)
    };
    let clients = authed(&["CLIENT", "LIST"]);
    let pipe = pipe_line_in(&clients);
    assert!(pipe.is_some_and(|l| l.contains(" db=3 ")), "{clients}");
    let stored = authed(&["HGET", &format!("mqstore:cmd:{}", record.id), "d"]);
    assert!(stored.contains("\"status\":\"SUCCEEDED\""), "{stored}");
    node.stop().await;
}

/// On `rediss://` the node's pipe speaks TLS, with the CA and client certificate the shared
/// client uses, to a Redis that asks for a certificate (its default with TLS on): the commands'
/// records are written on it (its connection is on Redis's TLS port and its last command is
/// the record's script).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_to_redis_speaks_tls_with_a_client_certificate() {
    let files = tls::TlsFiles::new("commands-pipe-tls");
    let tls_port = broker::free_port();
    let redis = Redis::start_tls(tls_port, &files.ca, &files.cert, &files.key);
    let broker = Broker::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let read = |path: &std::path::Path| std::fs::read(path).unwrap();
    let config = RedisConfig {
        tls: Some(Arc::new(RedisTls {
            ca_pem: Some(read(&files.ca)),
            client_auth: Some((read(&files.client_cert), read(&files.client_key))),
        })),
        ..RedisConfig::parse(&format!("rediss://127.0.0.1:{tls_port}")).unwrap()
    };
    let node = commander(&broker, "over-tls", RegistryConfig::Redis(config)).await;
    for n in 0..3 {
        let payload = json!({"n": n}).to_string();
        let record = node.invoke(CommandRequest::new(format!("dev/{n}/cmd"), payload.clone()));
        let record = record.await.unwrap();
        assert_eq!(record.status, Status::Succeeded);
        let answer = record.answer.as_ref().expect("an answer");
        assert_eq!(answer.payload, payload.as_bytes());
        let stored = redis.cli(&["HGET", &format!("mqstore:cmd:{}", record.id), "d"]);
        assert!(stored.contains("\"status\":\"SUCCEEDED\""), "{stored}");
    }
    let pipe = pipe_line(&redis);
    assert!(
        pipe.contains(&format!(" laddr=127.0.0.1:{tls_port} ")),
        "{pipe}"
    );
    assert!(pipe.contains(" cmd=evalsha "), "{pipe}");
    node.stop().await;
}

/// On Sentinel a node's pipe goes to the primary the sentinels name and follows them: after a
/// switchover (`SENTINEL FAILOVER`: the old primary lives on as a replica that refuses writes)
/// and after the new primary is killed, commands succeed again with their records written on
/// a pipe to the primary of the moment, and none is left on the deposed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_follows_the_primary_the_sentinels_name() {
    let broker = Broker::start();
    let first = Redis::start();
    let mut second = Redis::replica_of(&first);
    let sentinels = redis::Sentinels::start(&first, 3);
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let registry = RegistryConfig::Redis(RedisConfig::parse(&sentinels.url()).unwrap());
    let node = commander(&broker, "sentinel", registry).await;
    // Commands until one is recorded on `primary` through the node's pipe there (while the
    // node follows the sentinels some fail with the registry's 503, or go on its shared client).
    let piped_to = async |primary: &Redis, round: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                std::time::Instant::now() < deadline,
                "{round}: no command recorded through a pipe to port {}: {}",
                primary.port,
                primary.cli(&["CLIENT", "LIST"])
            );
            let record = match node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await {
                Ok(record) => record,
                // Until the deposed primary is made a replica it takes writes that are then
                // lost (Redis's asynchronous replication; `--redis-wait-replicas` is what
                // prevents it): a record written there is not found when its answer comes.
                Err(CommanderError::Registry(_) | CommanderError::NotFound(_)) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
                Err(other) => panic!("{round}: {other:?}"),
            };
            assert_eq!(record.status, Status::Succeeded, "{round}");
            let stored = primary.cli(&["HGET", &format!("mqstore:cmd:{}", record.id), "d"]);
            let clients = primary.cli(&["CLIENT", "LIST"]);
            let pipe = pipe_line_in(&clients);
            if stored.contains("\"status\":\"SUCCEEDED\"")
                && pipe.is_some_and(|l| l.contains(" cmd=evalsha "))
            {
                return;
            }
        }
    };
    piped_to(&first, "at start").await;

    let asked = sentinels.nodes[0].cli(&["SENTINEL", "FAILOVER", redis::PRIMARY_NAME]);
    assert_eq!(asked.trim(), "OK");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sentinels.primary_port() != second.port {
        assert!(std::time::Instant::now() < deadline, "no switchover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    piped_to(&second, "after the switchover").await;
    let deposed = first.cli(&["CLIENT", "LIST"]);
    assert!(!deposed.contains(PIPE_NAME), "{deposed}");

    second.kill();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while sentinels.primary_port() != first.port {
        assert!(std::time::Instant::now() < deadline, "no failover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    piped_to(&first, "after the primary was killed").await;
    node.stop().await;
}

/// A server that turns replica under a node (`REPLICAOF`: Redis keeps its clients connected
/// and refuses their writes with `READONLY`) gets the node's pipe given up at its first refused
/// write — not kept, to refuse every write after it — and the commands meanwhile fail with the
/// registry's error. Once the server is a primary again, a new pipe records the commands.
/// (On Sentinel the next pipe goes where the sentinels say; here there is one server.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_gives_up_a_pipe_whose_server_turned_replica() {
    let broker = Broker::start();
    let redis = Redis::start();
    let other = Redis::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let node = commander(&broker, "turned", redis_registry(&redis)).await;
    let pipe_id = || {
        let clients = redis.cli(&["CLIENT", "LIST"]);
        let pipe = pipe_line_in(&clients)?;
        pipe.split(' ')
            .find(|f| f.starts_with("id="))
            .map(str::to_owned)
    };
    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    assert_eq!(record.unwrap().status, Status::Succeeded);
    let first = pipe_id().expect("the node's pipe");

    let port = other.port.to_string();
    assert_eq!(redis.cli(&["REPLICAOF", "127.0.0.1", &port]).trim(), "OK");
    match node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await {
        Err(CommanderError::Registry(why)) => assert!(why.contains("READONLY"), "{why}"),
        other => panic!("{other:?}"),
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pipe_id().as_ref() == Some(&first) {
        assert!(
            std::time::Instant::now() < deadline,
            "the pipe that was refused is still open: {}",
            redis.cli(&["CLIENT", "LIST"])
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A primary again: the pipe is opened again (once a second; meanwhile the records go on
    // the node's shared connection), and records the commands.
    assert_eq!(redis.cli(&["REPLICAOF", "NO", "ONE"]).trim(), "OK");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while pipe_id().is_none() {
        assert!(std::time::Instant::now() < deadline, "no pipe again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    let record = record.expect("a command once the server is a primary again");
    assert_eq!(record.status, Status::Succeeded);
    let stored = redis.cli(&["HGET", &format!("mqstore:cmd:{}", record.id), "d"]);
    assert!(stored.contains("\"status\":\"SUCCEEDED\""), "{stored}");
    assert_ne!(pipe_id(), Some(first));
    let pipe = pipe_line(&redis);
    assert!(pipe.contains(" cmd=evalsha "), "{pipe}");
    node.stop().await;
}

fn waiting_registry(redis: &Redis, replicas: u32) -> RegistryConfig {
    let mut config = RedisConfig::parse(&redis.url()).unwrap();
    config.wait_replicas = replicas;
    config.wait_timeout = Duration::from_millis(300);
    RegistryConfig::Redis(config)
}

/// The line of a node's pipe in `clients` (Redis's `CLIENT LIST`).
fn pipe_line_in(clients: &str) -> Option<&str> {
    clients.lines().find(|l| l.contains(PIPE_NAME))
}

/// The line of a node's pipe in `redis`'s `CLIENT LIST` (there must be one).
fn pipe_line(redis: &Redis) -> String {
    let clients = redis.cli(&["CLIENT", "LIST"]);
    let line = pipe_line_in(&clients).map(str::to_owned);
    line.unwrap_or_else(|| panic!("no pipe in {clients}"))
}

/// With `--redis-wait-replicas` a node still writes its commands' records on its pipe, each
/// batch followed by one `WAIT`: a caller hears a command's answer only once the replica has
/// the record with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_waits_for_the_replicas_after_its_writes() {
    let broker = Broker::start();
    let redis = Redis::start();
    let replica = Redis::replica_of(&redis);
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let node = commander(&broker, "replicated", waiting_registry(&redis, 1)).await;
    let calls: Vec<_> = (0..32)
        .map(|n| {
            let node = node.clone();
            tokio::spawn(async move {
                let request = CommandRequest::new(format!("dev/{n}/cmd"), "{}");
                node.invoke(request).await
            })
        })
        .collect();
    for call in calls {
        let record = call
            .await
            .unwrap()
            .expect("a command confirmed by the replica");
        assert_eq!(record.status, Status::Succeeded);
        let key = format!("mqstore:cmd:{}", record.id);
        let on_replica = replica.cli(&["HGET", &key, "d"]);
        assert!(
            on_replica.contains("\"status\":\"SUCCEEDED\""),
            "the answer's record is on the replica when the caller hears it: {on_replica}"
        );
    }
    let pipe = pipe_line(&redis);
    assert!(
        pipe.contains(" cmd=wait "),
        "the pipe's last command: {pipe}"
    );
    let stats = redis.cli(&["INFO", "commandstats"]);
    let calls = |name: &str| -> u64 {
        let line = stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{name}:")));
        let line = line.unwrap_or_else(|| panic!("no {name} in {stats}"));
        line.split(['=', ',']).nth(1).unwrap().parse().unwrap()
    };
    assert!(
        calls("wait") <= calls("evalsha"),
        "at most one WAIT a write: {stats}"
    );
    node.stop().await;
}

/// A record that the replicas do not confirm in time fails its command with the registry's
/// error (as on the shared client), and the pipe stays: once the replica is back, the next
/// commands are confirmed on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_fails_the_writes_its_replicas_do_not_confirm() {
    let broker = Broker::start();
    let redis = Redis::start();
    let replica = Redis::replica_of(&redis);
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let node = commander(&broker, "unconfirmed", waiting_registry(&redis, 1)).await;
    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    assert_eq!(record.unwrap().status, Status::Succeeded);
    let id = |line: String| {
        line.split(' ')
            .find(|f| f.starts_with("id="))
            .unwrap()
            .to_owned()
    };
    let first = id(pipe_line(&redis));

    replica.signal("-STOP");
    let held = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    replica.signal("-CONT");
    match held {
        Err(CommanderError::Registry(why)) => {
            assert!(why.contains("not confirmed on 1 replica"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    let pipe = pipe_line(&redis);
    assert_eq!(id(pipe.clone()), first, "the same pipe: {pipe}");
    assert!(pipe.contains(" cmd=wait "), "{pipe}");

    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    let record = record.expect("a command once the replica is back");
    assert_eq!(record.status, Status::Succeeded);
    let on_replica = replica.cli(&["HGET", &format!("mqstore:cmd:{}", record.id), "d"]);
    assert!(
        on_replica.contains("\"status\":\"SUCCEEDED\""),
        "{on_replica}"
    );
    node.stop().await;
}

/// A Redis user whose ACL forbids `CLIENT` commands still gets the node its pipe (the
/// connection's name is only for `CLIENT LIST`): the commands' records are written on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_pipe_opens_for_a_redis_user_that_may_not_name_its_connection() {
    let broker = Broker::start();
    let redis = Redis::start();
    let acl = [
        "ACL", "SETUSER", "limited", "on", ">pw", "~*", "&*", "+@all", "-client",
    ];
    assert_eq!(redis.cli(&acl).trim(), "OK");
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let url = format!("redis://limited:pw@127.0.0.1:{}", redis.port);
    let registry = RegistryConfig::Redis(RedisConfig::parse(&url).unwrap());
    let node = commander(&broker, "limited", registry).await;
    let record = node.invoke(CommandRequest::new("dev/1/cmd", "{}")).await;
    assert_eq!(record.unwrap().status, Status::Succeeded);
    // Its connection for calls, its pub/sub one, and its pipe (unnamed).
    let clients = redis.cli(&["CLIENT", "LIST"]);
    let limited: Vec<&str> = clients
        .lines()
        .filter(|l| l.contains(" user=limited "))
        .collect();
    assert_eq!(limited.len(), 3, "{clients}");
    node.stop().await;
}

/// `mqstore serve` on Redis drives the same pipe from its node's loop: while Redis is held
/// (SIGSTOP) a caller's command is answered 503 by the node at the pipe's reply timeout; once
/// Redis goes on, and after it restarted, the node opens its pipe again and commands succeed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqstore_serve_on_redis_answers_503_while_redis_is_held_and_reopens_its_pipe() {
    use mqstore_server::StoreConfig;
    let broker = Broker::start();
    let mut redis = Redis::start();
    let _devices = calls::mqtt5_devices(broker.port, "mqtt5-devices").await;
    let server = spawn(ServerConfig {
        store: StoreConfig::Redis(RedisConfig::parse(&redis.url()).unwrap()),
        ..ServerConfig::new(broker_config(&broker), "serve-piped")
    })
    .await
    .expect("the server starts");
    let mut options = ClientOptions::new("caller", "127.0.0.1", broker.port);
    options.timeout = Duration::from_secs(30);
    let caller = Client::connect(options).await.unwrap();
    echoed_by_an_mqtt5_device(&caller).await;
    assert!(redis.cli(&["CLIENT", "LIST"]).contains(PIPE_NAME));

    redis.signal("-STOP");
    let held = caller
        .command(CommandRequest::new("dev/7/cmd", r#"{"go":1}"#))
        .await;
    redis.signal("-CONT");
    match held {
        Err(ClientError::Status {
            status: 503,
            message,
        }) => assert!(
            message.contains("the command registry is unavailable"),
            "{message}"
        ),
        other => panic!("a 503 at the pipe's reply timeout, not {other:?}"),
    }

    for round in ["went on", "restarted"] {
        if round == "restarted" {
            redis.restart();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let request = CommandRequest::new("dev/7/cmd", r#"{"go":1}"#);
            match caller.command(request).await {
                Ok(reply) if reply.status == Status::Succeeded => break,
                other => assert!(std::time::Instant::now() < deadline, "{round}: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        while !redis.cli(&["CLIENT", "LIST"]).contains(PIPE_NAME) {
            assert!(
                std::time::Instant::now() < deadline,
                "{round}: no pipe again"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    caller.close().await;
    server.stop().await.unwrap();
}
