//! Many nodes on one Redis (or a Redis Cluster) behind one `$share` group, over a real
//! mosquitto and real redis-servers started on free ports.

mod broker;
mod calls;
mod history;
#[path = "redis/mod.rs"]
mod redis;
mod tls;

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use broker::{Broker, Process};
use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_core::hlc::Hlc;
use mqstore_net::BrokerConfig;
use mqstore_net::client::{Client, SetOptions};
use mqstore_server::metrics::Metrics;
use mqstore_server::redis_store::RedisConfig;
use mqstore_server::{ServerConfig, ServerHandle, StoreConfig, spawn};
use redis::{Cluster, Redis, Sentinels};

use calls::{WAIT, next_change};
const GROUP: &str = "nodes";
const JOBS_MINUTE: Duration = Duration::from_millis(300);

/// A node in this process, on the store at `url`, its clock `offset_ms` off.
/// A client once a node answers (calls time out after 3 s: the nodes share a Redis).
async fn client(port: u16, id: &str) -> Client {
    calls::ready_client_timing_out(port, id, Duration::from_secs(3)).await
}

async fn node(broker: &Broker, url: &str, id: &str, offset_ms: i64) -> ServerHandle {
    let config = ServerConfig {
        share_group: Some(GROUP.into()),
        store: StoreConfig::Redis(RedisConfig::parse(url).unwrap()),
        clock_offset_ms: offset_ms,
        // Jobs timers run out within the tests.
        jobs_minute: JOBS_MINUTE,
        ..ServerConfig::new(
            BrokerConfig {
                port: broker.port,
                ..BrokerConfig::default()
            },
            id,
        )
    };
    spawn(config).await.expect("the node starts")
}

/// How many state store requests a node answered (any command, any outcome).
fn answered(metrics: &Metrics) -> u64 {
    metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("mqstore_requests_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// Waits until a node's metric `name` (one without labels) reaches `at_least`.
async fn wait_for_metric(metrics: &Metrics, name: &str, at_least: u64) {
    let reached = |line: &str| {
        let value = line.strip_prefix(name).and_then(|l| l.strip_prefix(' '));
        value.and_then(|v| v.parse::<u64>().ok()) >= Some(at_least)
    };
    calls::wait_for_metric(metrics, &format!("{name} >= {at_least}"), reached).await;
}

/// The scenario every shared store must pass: reads see writes answered by other nodes,
/// versions of a key increase although the nodes' clocks disagree by seconds, watchers
/// registered through one node hear of changes applied by the others, each notification names
/// the version it replaced (so a watcher that heard every change is told of no gap), and an
/// expiry is notified exactly once.
async fn three_nodes_share_one_state(url: &str) -> (Broker, Vec<ServerHandle>) {
    let broker = Broker::start();
    let mut nodes = Vec::new();
    for (id, offset) in [("n1", 0), ("n2", 4_000), ("n3", -4_000)] {
        nodes.push(node(&broker, url, id, offset).await);
    }
    let writer = client(broker.port, "writer").await;
    let reader = client(broker.port, "reader").await;
    let watcher = client(broker.port, "watcher").await;
    let mut observed = watcher.observe("shared").await.unwrap();

    let mut last: Option<Hlc> = None;
    for i in 0..30 {
        let value = format!("v{i}");
        let set = writer
            .set("shared", value.clone(), SetOptions::default())
            .await
            .unwrap();
        let version = set.version.expect("a version");
        if let Some(last) = &last {
            assert!(version > *last, "version {version} after {last}: not newer");
        }
        // Whichever node answers the read has the write.
        let got = reader.get("shared").await.unwrap().expect("the key");
        assert_eq!(got.value, value);
        assert_eq!(got.version.as_ref(), Some(&version));
        let change = next_change(&mut observed).await;
        assert_eq!(change.value.as_deref(), Some(value.as_bytes()));
        assert_eq!(change.version.as_ref(), Some(&version));
        assert!(!change.gap, "no change was missed: {change:?}");
        last = Some(version);
    }
    // A deletion replaced the last value the watcher saw: no gap either.
    writer.del("shared", None).await.unwrap();
    let deleted = next_change(&mut observed).await;
    assert_eq!((deleted.value.as_deref(), deleted.gap), (None, false));
    // Every node answered some of them (mosquitto deals shared messages round robin).
    for handle in &nodes {
        assert!(answered(&handle.metrics) > 0, "a node answered nothing");
    }

    // An expiry: one DELETE, whichever node sweeps first.
    let mut expiring = watcher.observe("expiring").await.unwrap();
    let options = SetOptions {
        expires: Some(Duration::from_millis(300)),
        ..SetOptions::default()
    };
    writer.set("expiring", "soon", options).await.unwrap();
    assert_eq!(
        next_change(&mut expiring).await.value.as_deref(),
        Some(&b"soon"[..])
    );
    let deleted = next_change(&mut expiring).await;
    assert_eq!(deleted.value, None, "{deleted:?}");
    assert!(
        !deleted.gap,
        "the expiry replaced the value seen: {deleted:?}"
    );
    // Every node swept many times since: no second DELETE.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(expiring.try_next(), None, "a second notification");
    assert_eq!(reader.get("expiring").await.unwrap(), None);
    (broker, nodes)
}

/// The jobs service on nodes that share one store: a rollout hands each target to one node,
/// concurrent updates of one execution through different nodes lose none, concurrent
/// start-next requests start an execution once, a timeout happens once although every node
/// watches the timers, and every node answers from the same jobs.
async fn three_nodes_share_jobs(broker: &Broker) {
    use mqstore_core::client::jobs::{JobNotification, Update};
    use mqstore_core::jobs::{JobSpec, Status};
    use mqstore_net::jobs::StartNext;
    use serde_json::json;

    let operator = client(broker.port, "operator").await;
    let device = client(broker.port, "fleet").await;
    let first = device.jobs("d000").await.unwrap();
    let things: Vec<String> = (0..200).map(|i| format!("d{i:03}")).collect();
    operator
        .create_job(JobSpec::new(
            "fw",
            things.clone(),
            json!({ "url": "https://example.com/fw.bin" }),
        ))
        .await
        .unwrap();
    // The rollout goes on in batches, on whichever nodes claim them.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let job = operator.describe_job("fw").await.unwrap();
        if job.executions.get(&Status::Queued) == Some(&200) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "rollout stuck: {job:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listed = operator
        .list_job_executions(mqstore_net::jobs::ExecutionFilter {
            job_id: Some("fw".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(listed.len(), 200, "one execution per target");
    assert!(listed.iter().all(|e| e.execution_number == 1));
    // Each target was handed out once: one notify and one notify-next, nothing more.
    let notify = tokio::time::timeout(WAIT, first.next_notification())
        .await
        .unwrap();
    assert!(
        matches!(notify, Some(JobNotification::Notify { .. })),
        "{notify:?}"
    );
    let next = tokio::time::timeout(WAIT, first.next_notification())
        .await
        .unwrap();
    assert!(
        matches!(next, Some(JobNotification::NotifyNext { .. })),
        "{next:?}"
    );

    // Thirty updates of one execution at once (each engine call on a thread of its own,
    // against the shared record): none lost.
    let d001 = device.jobs("d001").await.unwrap();
    let started = d001
        .start_next(StartNext::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (started.status, started.version_number),
        (Status::InProgress, 2)
    );
    let updates = (0..30).map(|i| {
        let update = Update {
            job_id: "fw".into(),
            status: Some(Status::InProgress),
            status_details: [("step".to_owned(), format!("{i}"))].into(),
            ..Update::default()
        };
        d001.update(update)
    });
    for result in futures::future::join_all(updates).await {
        result.expect("every update is accepted");
    }
    let after = d001.describe("fw").await.unwrap();
    assert_eq!(after.version_number, 32, "2 + 30 updates, none lost");

    // Twenty start-next requests at once for one thing: it starts once.
    let d002 = device.jobs("d002").await.unwrap();
    let starts = (0..20).map(|_| d002.start_next(StartNext::default()));
    let executions: Vec<_> = futures::future::join_all(starts)
        .await
        .into_iter()
        .map(|r| r.unwrap().expect("an execution"))
        .collect();
    for execution in &executions {
        assert_eq!(execution.status, Status::InProgress);
        assert_eq!(execution.version_number, 2, "started once: {execution:?}");
        assert_eq!(execution.started_at, executions[0].started_at);
    }
    assert_eq!(d002.describe("fw").await.unwrap().version_number, 2);

    // A timeout, watched by three nodes' timers, happens once.
    let late = device.jobs("late").await.unwrap();
    operator
        .create_job(
            JobSpec::new("slow", vec!["late".into()], json!({})).in_progress_timeout(Some(1)),
        )
        .await
        .unwrap();
    // The create's notify and notify-next (whichever node queued the execution).
    for _ in 0..2 {
        tokio::time::timeout(WAIT, late.next_notification())
            .await
            .expect("the create's notifications")
            .unwrap();
    }
    let started = late
        .start_next(StartNext::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(started.job_id, "slow");
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while late.describe("slow").await.unwrap().status != Status::TimedOut {
        assert!(tokio::time::Instant::now() < deadline, "never timed out");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every node ticked many times since (every 100 ms).
    tokio::time::sleep(JOBS_MINUTE * 2).await;
    while let Some(n) = late.try_next_notification() {
        seen.push(n);
    }
    let kinds: Vec<&str> = seen
        .iter()
        .map(|n| match n {
            JobNotification::Notify { .. } => "notify",
            JobNotification::NotifyNext { .. } => "notify-next",
        })
        .collect();
    assert_eq!(
        kinds,
        ["notify", "notify-next"],
        "one timeout, told once: {seen:?}"
    );
    assert_eq!(late.describe("slow").await.unwrap().version_number, 3);

    // d000's target was handed out once: nothing came after its notify and notify-next
    // (every node's rollout ticks ran many times since).
    assert_eq!(first.try_next_notification(), None);

    // Any node answers from the same jobs.
    for _ in 0..6 {
        let jobs = operator.list_jobs().await.unwrap();
        let ids: Vec<&str> = jobs.iter().map(|j| j.job_id.as_str()).collect();
        assert_eq!(ids, ["fw", "slow"]);
    }
    operator.close().await;
    device.close().await;
}

/// A plain MQTT 5 client that hands every message it receives to a channel, its payload as
/// JSON, once its subscriptions to `filters` are made.
async fn json_client(
    broker: &Broker,
    id: &str,
    filters: &[String],
) -> (
    rumqttc::v5::AsyncClient,
    tokio::sync::mpsc::UnboundedReceiver<(String, serde_json::Value)>,
) {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::Packet;
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let (client, mut eventloop) =
        AsyncClient::new(MqttOptions::new(id, "127.0.0.1", broker.port), 256);
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
    let (filters, subscriber) = (filters.to_vec(), client.clone());
    tokio::spawn(async move {
        let (mut subscribed_tx, mut acks) = (Some(subscribed_tx), 0);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    for filter in &filters {
                        let _ = subscriber.subscribe(filter.clone(), QoS::AtLeastOnce).await;
                    }
                    if filters.is_empty() {
                        subscribed_tx.take().map(|tx| tx.send(()));
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    acks += 1;
                    if acks == filters.len() {
                        subscribed_tx.take().map(|tx| tx.send(()));
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let topic = String::from_utf8_lossy(&p.topic).into_owned();
                    let body = serde_json::from_slice(&p.payload).unwrap_or_default();
                    if tx.send((topic, body)).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    tokio::time::timeout(WAIT, subscribed)
        .await
        .expect("the client subscribes")
        .unwrap();
    (client, rx)
}

/// Device shadows on nodes that share one store: two writers update one shadow at once, through
/// the node elected to listen to `$aws/things/…` (mosquitto delivers no `$` topic to a shared
/// subscription); each update is applied once (versions 1 to n, none twice),
/// none is lost (each writes a field of its own: the document holds them all), and the device
/// sees each update's delta once. Both writers send all their updates at once: one refused
/// with AWS's 429 (its thing had ten in flight) is sent again a moment later, as an AWS client
/// would.
async fn three_nodes_share_shadows(broker: &Broker) {
    use rumqttc::v5::mqttbytes::QoS;
    const UPDATES: u64 = 20;
    let shadow = "$aws/things/shared-lamp/shadow";
    let answers = [
        "update/accepted",
        "update/rejected",
        "update/delta",
        "get/accepted",
    ]
    .map(|a| format!("{shadow}/{a}"));
    let (device, mut heard) = json_client(broker, "shadow-device", &answers).await;
    let (a, _) = json_client(broker, "shadow-writer-a", &[]).await;
    let (b, _) = json_client(broker, "shadow-writer-b", &[]).await;
    let send = |field: &'static str, i: u64| {
        let writer = if field == "a" { a.clone() } else { b.clone() };
        // A field of its own per update: a lost update is a field missing.
        let update = serde_json::json!({
            "state": {"desired": {format!("{field}{i}"): i}},
            "clientToken": format!("{field}-{i}"),
        });
        let topic = format!("{shadow}/update");
        async move {
            writer
                .publish(topic, QoS::AtLeastOnce, false, update.to_string())
                .await
                .unwrap()
        }
    };
    for i in 0..UPDATES {
        for field in ["a", "b"] {
            send(field, i).await;
        }
    }
    let (mut accepted, mut deltas, mut throttled) = (Vec::new(), Vec::new(), 0);
    while accepted.len() < 2 * UPDATES as usize || deltas.len() < 2 * UPDATES as usize {
        let (topic, body) = tokio::time::timeout(WAIT, heard.recv())
            .await
            .expect("every update answered and its delta sent")
            .unwrap();
        let version = body["version"].as_u64();
        match topic.rsplit_once("shadow/").map(|(_, t)| t) {
            Some("update/accepted") => accepted.push(version.unwrap()),
            Some("update/delta") => deltas.push(version.unwrap()),
            Some("update/rejected") if body["code"] == 429 => {
                throttled += 1;
                let token = body["clientToken"].as_str().unwrap();
                let (field, i) = token.split_once('-').unwrap();
                let field = if field == "a" { "a" } else { "b" };
                // Backing off a little, as AWS's clients do.
                let again = send(field, i.parse().unwrap());
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    again.await
                });
            }
            other => panic!("{other:?}: {body}"),
        }
    }
    println!("{throttled} updates refused with 429 and sent again");
    accepted.sort_unstable();
    deltas.sort_unstable();
    let all: Vec<u64> = (1..=2 * UPDATES).collect();
    assert_eq!(
        accepted, all,
        "each update applied once, at its own version"
    );
    assert_eq!(deltas, all, "each update's delta sent once");
    device
        .publish(format!("{shadow}/get"), QoS::AtLeastOnce, false, "{}")
        .await
        .unwrap();
    let (topic, document) = tokio::time::timeout(WAIT, heard.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(topic.ends_with("/get/accepted"), "{topic}: {document}");
    assert_eq!(document["version"], 2 * UPDATES);
    let fields: serde_json::Map<String, serde_json::Value> = (0..UPDATES)
        .flat_map(|i| [(format!("a{i}"), i.into()), (format!("b{i}"), i.into())])
        .collect();
    assert_eq!(
        document["state"]["desired"],
        serde_json::Value::Object(fields),
        "no update lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_one_redis() {
    let redis = Redis::start();
    let (broker, nodes) = three_nodes_share_one_state(&redis.url()).await;
    three_nodes_share_jobs(&broker).await;
    three_nodes_share_shadows(&broker).await;
    for node in nodes {
        let _ = tokio::time::timeout(WAIT, node.stop()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_on_a_redis_cluster_spread_keys_over_every_primary() {
    let cluster = Cluster::start();
    let (broker, nodes) = three_nodes_share_one_state(&cluster.url()).await;
    three_nodes_share_jobs(&broker).await;
    three_nodes_share_shadows(&broker).await;
    let c = client(broker.port, "many").await;
    for i in 0..100 {
        c.set(format!("spread/{i}"), "x", SetOptions::default())
            .await
            .unwrap();
    }
    assert_eq!(c.scan("spread/*").await.unwrap().len(), 100);
    for primary in &cluster.nodes {
        let keys: u64 = primary.cli(&["dbsize"]).trim().parse().unwrap();
        assert!(keys > 0, "a primary holds no keys");
    }
    for node in nodes {
        let _ = tokio::time::timeout(WAIT, node.stop()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_means_status_503_with_a_reason_and_the_node_recovers() {
    let mut redis = Redis::start();
    let broker = Broker::start();
    let node = node(&broker, &redis.url(), "n1", 0).await;
    let c = client(broker.port, "dev").await;
    c.set("k", "before", SetOptions::default()).await.unwrap();
    redis.kill();
    match c.set("k", "during", SetOptions::default()).await {
        Err(ClientError::Status { status, message }) => {
            assert_eq!(status, 503);
            assert!(message.contains("the store failed"), "{message}");
        }
        other => panic!("expected status 503, got {other:?}"),
    }
    let render = node.metrics.render();
    assert!(render.contains("mqstore_store_up 0\n"), "{render}");
    assert!(
        !render.contains("mqstore_store_errors_total 0\n"),
        "{render}"
    );
    redis.restart();
    // The node reconnects by itself.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match c.set("k", "after", SetOptions::default()).await {
            Ok(set) if set.applied => break,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "never recovered: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.get("k").await.unwrap().unwrap().value, "after");
    assert!(node.metrics.render().contains("mqstore_store_up 1\n"));
    let _ = tokio::time::timeout(WAIT, node.stop()).await;
}

/// `mqstore serve` as a process of its own (to kill -9 it).
fn serve_process(broker: &Broker, store: &str, id: &str) -> Process {
    let child = Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args(["--port", &broker.port.to_string(), "serve"])
        .args(["--store", store, "--node-id", id, "--share-group", GROUP])
        .env("MQSTORE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("mqstore serve starts");
    Process(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_node_under_load_loses_no_acknowledged_write() {
    let redis = Redis::start();
    let broker = Broker::start();
    let mut nodes: Vec<Process> = ["k1", "k2", "k3"]
        .iter()
        .map(|id| serve_process(&broker, &redis.url(), id))
        .collect();
    let watcher = client(broker.port, "watcher").await;
    let mut observed = watcher.observe("load/0").await.unwrap();
    let acknowledged = Arc::new(std::sync::Mutex::new(HashMap::new()));
    let mut writers = Vec::new();
    for w in 0..4 {
        let c = client(broker.port, &format!("writer-{w}")).await;
        let acknowledged = acknowledged.clone();
        writers.push(tokio::spawn(async move {
            let (mut ok, mut timed_out) = (0, 0);
            for i in 0..150 {
                let key = format!("load/{w}");
                match c
                    .set(key.clone(), format!("{i}"), SetOptions::default())
                    .await
                {
                    Ok(set) => {
                        ok += 1;
                        acknowledged
                            .lock()
                            .unwrap()
                            .insert(key, (format!("{i}"), set.version.unwrap()));
                    }
                    // Sent to the node that died: never answered.
                    Err(ClientError::Timeout(_)) => timed_out += 1,
                    Err(e) => panic!("{e}"),
                }
            }
            (ok, timed_out)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut victim = nodes.remove(1);
    victim.kill().unwrap(); // SIGKILL
    victim.wait().unwrap();
    let mut total_ok = 0;
    for writer in writers {
        let (ok, _timed_out) = writer.await.unwrap();
        assert!(
            ok > 100,
            "the surviving nodes kept answering ({ok} answered)"
        );
        total_ok += ok;
    }
    assert!(total_ok > 400);
    // Every last acknowledged write is there, with its version.
    let reader = client(broker.port, "reader").await;
    let acknowledged = acknowledged.lock().unwrap().clone();
    for (key, (value, version)) in acknowledged {
        let got = reader.get(key.clone()).await.unwrap().expect("the key");
        assert_eq!(
            (got.value, got.version),
            (Bytes::from(value), Some(version)),
            "{key}"
        );
    }
    // The observation goes on: a change applied now reaches the watcher.
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(300), observed.next()).await
    {
    }
    reader
        .set("load/0", "after", SetOptions::default())
        .await
        .unwrap();
    let change = next_change(&mut observed).await;
    assert_eq!(change.value.as_deref(), Some(&b"after"[..]));
    // The node comes back and serves again.
    nodes.push(serve_process(&broker, &redis.url(), "k2"));
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut by_node = std::collections::HashSet::new();
    while by_node.len() < 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "served by {by_node:?} only"
        );
        let set = reader
            .set("again", "x", SetOptions::default())
            .await
            .unwrap();
        by_node.insert(set.version.unwrap().node.to_string());
    }
    for mut node in nodes {
        let _ = node.kill();
        let _ = node.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_hold_across_nodes_and_a_client_that_leaves_is_cleaned_up_everywhere() {
    use mqstore_core::store::Quotas;
    let redis = Redis::start();
    let broker = Broker::start();
    let mut nodes = Vec::new();
    for id in ["q1", "q2", "q3"] {
        let config = ServerConfig {
            share_group: Some(GROUP.into()),
            store: StoreConfig::Redis(RedisConfig::parse(&redis.url()).unwrap()),
            quotas: Quotas {
                max_keys: Some(5),
                ..Quotas::default()
            },
            ..ServerConfig::new(
                BrokerConfig {
                    port: broker.port,
                    ..BrokerConfig::default()
                },
                id,
            )
        };
        nodes.push(spawn(config).await.expect("the node starts"));
    }
    let writer = client(broker.port, "writer").await;
    let (mut applied, mut refused) = (0, 0);
    for i in 0..12 {
        match writer
            .set(format!("q/{i}"), "x", SetOptions::default())
            .await
        {
            Ok(set) if set.applied => applied += 1,
            Err(ClientError::Service(mqstore_core::ServiceError::QuotaExceeded)) => refused += 1,
            other => panic!("{other:?}"),
        }
    }
    // One count in Redis, whichever node answered each SET.
    assert_eq!((applied, refused), (5, 7));
    for node in &nodes {
        assert!(answered(&node.metrics) > 0, "a node answered nothing");
    }

    // A watcher registered through some node; it leaves, and its registrations go when the
    // next notification for it finds nobody (its goodbye alone does not drop them on Redis:
    // it is not ordered against a KEYNOTIFY of its next connection, written by another node).
    let watches = || redis.cli(&["hget", "mqstore:{b0}:stats", "watches"]);
    for node in &nodes {
        // mosquitto says "no matching subscribers": the nodes rely on that, once they know it.
        wait_for_metric(&node.metrics, "mqstore_broker_reports_no_subscribers", 1).await;
    }
    let watcher = client(broker.port, "watcher").await;
    let _observed = watcher.observe("q/0").await.unwrap();
    assert_eq!(watches().trim(), "1");
    watcher.close().await;
    for node in &nodes {
        wait_for_metric(&node.metrics, "mqstore_clients_gone_total", 1).await;
    }
    assert_eq!(
        watches().trim(),
        "1",
        "every node heard the goodbye, and none may drop the registrations on it"
    );
    writer
        .set("q/0", "changed", SetOptions::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while watches().trim() != "0" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "registrations left behind"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(redis.cli(&["exists", "mqstore:{b0}:w:q/0"]).trim(), "0");
    for node in nodes {
        let _ = tokio::time::timeout(WAIT, node.stop()).await;
    }
}

/// Which node holds the jobs device API listener's lease (`None`: nobody).
fn listener(redis: &Redis) -> Option<String> {
    let holder = redis.cli(&["get", "mqstore:{jobs}:listener"]);
    let node = holder.trim().split('/').next().unwrap_or_default();
    (!node.is_empty()).then(|| node.to_owned())
}

/// Waits until a device API request is answered; how long it took.
async fn device_api_answers(jobs: &mqstore_net::jobs::Jobs, within: Duration) -> Duration {
    let start = tokio::time::Instant::now();
    loop {
        match jobs.pending().await {
            Ok(_) => return start.elapsed(),
            Err(ClientError::Timeout(_)) => {}
            Err(e) => panic!("{e}"),
        }
        assert!(start.elapsed() < within, "no node took the device API over");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_device_api_moves_to_another_node_when_its_listener_dies_or_stops() {
    // Brokers such as mosquitto deliver no `$aws/...` message to a shared subscription, so
    // one node listens to the device API for all, elected through a lease in Redis.
    let redis = Redis::start();
    let broker = Broker::start();
    let mut nodes: HashMap<String, Process> = ["j1", "j2", "j3"]
        .iter()
        .map(|id| (id.to_string(), serve_process(&broker, &redis.url(), id)))
        .collect();
    let device = client(broker.port, "device").await;
    let jobs = device.jobs("T").await.unwrap();
    device_api_answers(&jobs, WAIT).await;
    let first = listener(&redis).expect("a listener");
    // kill -9: its lease runs out (3 s) and another node takes over.
    let mut victim = nodes.remove(&first).unwrap();
    victim.kill().unwrap();
    victim.wait().unwrap();
    device_api_answers(&jobs, Duration::from_secs(15)).await;
    let second = listener(&redis).expect("a listener");
    assert_ne!(first, second);
    // A clean stop gives the lease up: the next node takes over without waiting for it.
    let stopping = nodes.remove(&second).unwrap();
    let status = Command::new("kill")
        .args(["-TERM", &stopping.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let mut stopping = stopping;
    assert!(stopping.wait().unwrap().success());
    assert_ne!(
        listener(&redis),
        Some(second.clone()),
        "the lease was given up"
    );
    device_api_answers(&jobs, WAIT).await;
    let third = listener(&redis).expect("a listener");
    assert!(third != first && third != second, "{third}");
    device.close().await;
    for (_, mut node) in nodes {
        let _ = node.kill();
        let _ = node.wait();
    }
}

/// A node on memory behind a share group serves the jobs device API and device shadows (no
/// broker delivers `$aws/…` to a shared subscription: it subscribes to those plainly).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_on_memory_behind_a_share_group_serves_the_device_api_and_shadows() {
    let broker = Broker::start();
    let config = ServerConfig {
        share_group: Some(GROUP.into()),
        ..ServerConfig::new(
            BrokerConfig {
                port: broker.port,
                ..BrokerConfig::default()
            },
            "alone",
        )
    };
    let node = spawn(config).await.expect("the node starts");
    let c = client(broker.port, "device").await;
    let spec = mqstore_core::jobs::JobSpec::new("j", vec!["T".into()], serde_json::json!({}));
    c.create_job(spec).await.unwrap();
    let jobs = c.jobs("T").await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    while jobs.pending().await.unwrap().queued_jobs.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shadow = c.shadow("T", None).await.unwrap();
    let updated = shadow
        .update(serde_json::json!({"reported": {"on": true}}), None)
        .await
        .unwrap();
    assert_eq!(updated["version"], 1);
    c.close().await;
    let _ = tokio::time::timeout(WAIT, node.stop()).await;
}

/// One node on `redis`, no share group: it listens to the device API itself.
async fn solo_node(broker: &Broker, redis: &Redis) -> ServerHandle {
    let config = ServerConfig {
        store: StoreConfig::Redis(RedisConfig::parse(&redis.url()).unwrap()),
        ..ServerConfig::new(
            BrokerConfig {
                port: broker.port,
                ..BrokerConfig::default()
            },
            "solo",
        )
    };
    spawn(config).await.expect("the node starts")
}

/// AWS's limit of ten shadow requests in flight per device: with Redis paused, a thing's first
/// ten requests wait for it and the ones after are refused at once with 429 (and their client
/// tokens), counted as rejected; once Redis is back the ten are applied, and the thing may
/// send again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thing_with_ten_shadow_requests_in_flight_has_the_next_refused_with_429() {
    use rumqttc::v5::mqttbytes::QoS;
    let redis = Redis::start();
    let broker = Broker::start();
    let node = solo_node(&broker, &redis).await;
    client(broker.port, "ready").await.close().await;
    let shadow = "$aws/things/busy-lamp/shadow";
    let answers =
        ["update/accepted", "update/rejected", "get/accepted"].map(|a| format!("{shadow}/{a}"));
    let (device, mut heard) = json_client(&broker, "busy-device", &answers).await;
    let update = |i: usize| {
        let body =
            serde_json::json!({"state": {"reported": {"n": i}}, "clientToken": format!("u{i}")});
        device.publish(
            format!("{shadow}/update"),
            QoS::AtLeastOnce,
            false,
            body.to_string(),
        )
    };
    const SENT: usize = 15;
    let pid = redis.pid().unwrap().to_string();
    let signal = |signal: &str| {
        let status = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(status.success(), "kill {signal}");
    };
    signal("-STOP");
    for i in 0..SENT {
        update(i).await.unwrap();
    }
    async fn next(
        heard: &mut tokio::sync::mpsc::UnboundedReceiver<(String, serde_json::Value)>,
    ) -> (String, serde_json::Value) {
        tokio::time::timeout(WAIT, heard.recv())
            .await
            .expect("an answer")
            .unwrap()
    }
    // The device's requests reach the node in order: the first ten wait for Redis.
    for i in 10..SENT {
        let (topic, body) = next(&mut heard).await;
        assert!(topic.ends_with("/update/rejected"), "{topic}: {body}");
        assert_eq!(
            (&body["code"], &body["message"], &body["clientToken"]),
            (
                &429.into(),
                &"Too many requests".into(),
                &format!("u{i}").into()
            ),
        );
    }
    signal("-CONT");
    let mut tokens = Vec::new();
    for version in 1..=10 {
        let (topic, body) = next(&mut heard).await;
        assert!(topic.ends_with("/update/accepted"), "{topic}: {body}");
        assert_eq!(body["version"], version);
        tokens.push(body["clientToken"].as_str().unwrap().to_owned());
    }
    tokens.sort_by_key(|t| t[1..].parse::<usize>().unwrap());
    let first_ten: Vec<String> = (0..10).map(|i| format!("u{i}")).collect();
    assert_eq!(tokens, first_ten, "the first ten applied, each once");
    device
        .publish(format!("{shadow}/get"), QoS::AtLeastOnce, false, "{}")
        .await
        .unwrap();
    let (topic, document) = next(&mut heard).await;
    assert!(topic.ends_with("/get/accepted"), "{topic}: {document}");
    assert_eq!(document["version"], 10, "the refused ones changed nothing");
    let rendered = node.metrics.render();
    assert!(
        rendered.contains("mqstore_shadow_requests_total{op=\"update\",outcome=\"rejected\"} 5"),
        "{rendered}"
    );
    let _ = tokio::time::timeout(WAIT, node.stop()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_away_means_jobs_requests_are_rejected_with_internal_error() {
    use mqstore_core::jobs::{JobSpec, Status};
    let mut redis = Redis::start();
    let broker = Broker::start();
    let node = solo_node(&broker, &redis).await;
    let operator = client(broker.port, "operator").await;
    let jobs = operator.jobs("T").await.unwrap();
    let spec = |id: &str| JobSpec::new(id, vec!["T".into()], serde_json::json!({}));
    operator.create_job(spec("before")).await.unwrap();
    redis.kill();
    match jobs.pending().await {
        Err(ClientError::Jobs { code, message, .. }) => {
            assert_eq!(code, "InternalError");
            assert!(message.contains("the jobs store failed"), "{message}");
        }
        other => panic!("expected InternalError, got {other:?}"),
    }
    match operator.create_job(spec("during")).await {
        Err(ClientError::Jobs { code, .. }) => assert_eq!(code, "InternalError"),
        other => panic!("expected InternalError, got {other:?}"),
    }
    redis.restart();
    let deadline = tokio::time::Instant::now() + WAIT;
    let pending = loop {
        match jobs.pending().await {
            Ok(pending) => break pending,
            other => assert!(
                tokio::time::Instant::now() < deadline,
                "never recovered: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Redis here runs without persistence: what it held before the kill is gone, and what
    // was refused during the outage was never written.
    assert!(pending.queued_jobs.is_empty(), "{pending:?}");
    operator.create_job(spec("after")).await.unwrap();
    // Its first batch is queued by the request or, when the node's timer tick took the new
    // rollout first (they run side by side on Redis), by that tick a moment later.
    let deadline = tokio::time::Instant::now() + WAIT;
    while jobs.pending().await.unwrap().queued_jobs.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = jobs.start_next(Default::default()).await.unwrap().unwrap();
    assert_eq!(
        (started.job_id.as_str(), started.status),
        ("after", Status::InProgress)
    );
    operator.close().await;
    let _ = tokio::time::timeout(WAIT, node.stop()).await;
}

/// Numbers serde_json's default parsing reads one unit in the last place off (found by the
/// fuzz target `node`; `8.289173127734035e-200` came back as `…037e-200`), and the extremes;
/// the core's test on a data directory sends the same.
const NUMBERS: &str = include_str!("../../testdata/numbers.json");

/// A job's document and a shadow's state go to Redis as JSON text and are parsed again by every
/// node that reads them: their numbers come back to the last bit, to the operator, to the
/// device, and from a node started afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_in_job_documents_and_shadows_come_back_from_redis_to_the_last_bit() {
    use mqstore_core::jobs::JobSpec;
    use serde_json::{Value, json};
    let redis = Redis::start();
    let broker = Broker::start();
    let sent: Value = serde_json::from_str(NUMBERS).unwrap();
    let node = solo_node(&broker, &redis).await;
    let operator = client(broker.port, "operator").await;
    let spec = JobSpec::new("numbers", vec!["T".into()], json!({ "n": sent }));
    operator.create_job(spec).await.unwrap();
    let described = operator.describe_job("numbers").await.unwrap();
    assert_eq!(described.document["n"], sent, "to the operator");
    let shadow = operator.shadow("T", None).await.unwrap();
    let updated = shadow
        .update(json!({"reported": {"n": sent}}), None)
        .await
        .unwrap();
    assert_eq!(
        updated["state"]["reported"]["n"], sent,
        "in the update's answer"
    );
    assert_eq!(shadow.get().await.unwrap()["state"]["reported"]["n"], sent);
    operator.close().await;
    let _ = tokio::time::timeout(WAIT, node.stop()).await;

    let node = solo_node(&broker, &redis).await;
    let device = client(broker.port, "T").await;
    let jobs = device.jobs("T").await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let started = loop {
        if let Some(started) = jobs.start_next(Default::default()).await.unwrap() {
            break started;
        }
        assert!(tokio::time::Instant::now() < deadline, "never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let document = started.job_document.expect("start-next sends the document");
    assert_eq!(document["n"], sent, "to the device, from the next node");
    let shadow = device.shadow("T", None).await.unwrap();
    assert_eq!(shadow.get().await.unwrap()["state"]["reported"]["n"], sent);
    device.close().await;
    let _ = tokio::time::timeout(WAIT, node.stop()).await;
}

#[test]
fn bad_store_configuration_fails_at_start_with_a_clear_message() {
    let broker = Broker::start();
    let locked = Redis::start_with_password("right");
    let nobody = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    // (store, what stderr says, --fail-fast): a Redis that is not there is waited for unless
    // --fail-fast; a refused password fails at once either way (waiting cannot mend it).
    let cases = [
        (
            format!("redis://127.0.0.1:{nobody}"),
            "cannot use the Redis store",
            true,
        ),
        (
            format!("redis://:wrong@127.0.0.1:{}", locked.port),
            "authentication failed",
            false,
        ),
        (
            format!("redis://127.0.0.1:{}", locked.port),
            "NOAUTH",
            false,
        ),
        (
            format!("redis-cluster://127.0.0.1:{nobody}"),
            "cannot use the Redis store",
            true,
        ),
        (
            "memcached://127.0.0.1:1".to_owned(),
            "unknown store scheme",
            false,
        ),
    ];
    for (url, expected, fail_fast) in cases {
        let started = std::time::Instant::now();
        let fail_fast = fail_fast.then_some("--fail-fast");
        let out = Command::new(env!("CARGO_BIN_EXE_mqstore"))
            .args(["--port", &broker.port.to_string(), "serve", "--store", &url])
            .args(fail_fast)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: started");
        assert!(stderr.contains(expected), "{url}: {stderr}");
        assert!(
            !stderr.contains(":wrong@"),
            "the password is shown: {stderr}"
        );
        assert!(started.elapsed() < Duration::from_secs(15), "{url}: hung");
    }
    // A broker that is not there, with --fail-fast: on memory and on Redis alike.
    let redis = Redis::start();
    for store in ["memory".to_owned(), redis.url()] {
        let out = Command::new(env!("CARGO_BIN_EXE_mqstore"))
            .args(["--port", &nobody.to_string(), "serve", "--fail-fast"])
            .args(["--store", &store])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{store}: started");
        assert!(
            stderr.contains("cannot reach the broker at ")
                && stderr.contains(&format!(":{nobody}:")),
            "{store}: {stderr}"
        );
    }
}

/// The `mqstore` command against the broker on `port`.
fn mqstore_cli(port: u16, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args(["--port", &port.to_string()])
        .args(args)
        .env_remove("MQSTORE_LOG")
        .output()
        .unwrap()
}

/// `rediss://` as Redis ships TLS: its certificate signed by a private CA, and a certificate
/// asked of every client. `serve` takes the CA and its own certificate (its key encrypted)
/// from `--redis-ca-file`, `--redis-cert-file`, `--redis-key-file` and the key's password from
/// the environment, and stores in that Redis; without either file Redis is not reached, and
/// says why.
#[test]
fn serve_stores_in_a_redis_that_wants_tls_and_a_client_certificate() {
    let files = tls::TlsFiles::new("nodes-redis-tls");
    let key = files.encrypted_client_key("fleet-key-1");
    let tls_port = broker::free_port();
    let redis = Redis::start_tls(tls_port, &files.ca, &files.cert, &files.key);
    let broker = Broker::start();
    let store = format!("rediss://127.0.0.1:{tls_port}");
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let (ca, cert, key) = (path(&files.ca), path(&files.client_cert), path(&key));
    let serve = |files: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mqstore"));
        command
            .args(["--port", &broker.port.to_string(), "serve", "--fail-fast"])
            .args(["--node-id", "node-redis-tls", "--store", &store])
            .args(files)
            .env("MQSTORE_KEY_PASSWORD", "not this one")
            .env("MQSTORE_REDIS_KEY_PASSWORD", "fleet-key-1")
            .env_remove("MQSTORE_LOG");
        command
    };

    // The system's CAs do not know Redis's; Redis refuses a client without a certificate.
    let client = ["--redis-cert-file", &cert, "--redis-key-file", &key];
    for (files, why) in [
        (&client[..], "UnknownIssuer"),
        (&["--redis-ca-file", &ca][..], "CertificateRequired"),
    ] {
        let out = serve(files).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{files:?}: started");
        assert!(stderr.contains(why), "{files:?}: {stderr}");
        // The hint is about the TLS files, not whether Redis runs.
        assert!(
            stderr.contains("TLS: --redis-ca-file names"),
            "{files:?}: {stderr}"
        );
    }
    // TLS files for a store that is not TLS: a usage error.
    let plain = Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args([
            "--port",
            &broker.port.to_string(),
            "serve",
            "--store",
            &redis.url(),
        ])
        .args(["--redis-ca-file", &ca])
        .output()
        .unwrap();
    assert_eq!(plain.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&plain.stderr).contains("is not rediss://"));

    let mut node = serve(&[
        "--redis-ca-file",
        &ca,
        "--redis-cert-file",
        &cert,
        "--redis-key-file",
        &key,
    ]);
    let _node = node.stderr(Stdio::null()).spawn().map(Process).unwrap();
    let cli = |args: &[&str]| mqstore_cli(broker.port, args);
    set_once_served(broker.port, "over-tls", "stored");
    assert_eq!(cli(&["get", "over-tls"]).stdout, b"stored\n");
    // It is in Redis (read on its plain port).
    let keys = redis.cli(&["--scan", "--pattern", "mqstore:*"]);
    assert!(!keys.trim().is_empty(), "nothing in Redis: {keys:?}");
}

/// `mqstore serve` as `node_id` on the TLS Redis `store`, with the CA and the client
/// certificate of `files`.
fn serve_on_tls_redis(
    broker: &Broker,
    node_id: &str,
    store: &str,
    files: &tls::TlsFiles,
) -> Process {
    Command::new(env!("CARGO_BIN_EXE_mqstore"))
        .args(["--port", &broker.port.to_string(), "serve", "--fail-fast"])
        .args(["--node-id", node_id, "--store", store])
        .arg("--redis-ca-file")
        .arg(&files.ca)
        .arg("--redis-cert-file")
        .arg(&files.client_cert)
        .arg("--redis-key-file")
        .arg(&files.client_key)
        .env_remove("MQSTORE_LOG")
        .stderr(Stdio::null())
        .spawn()
        .map(Process)
        .unwrap()
}

/// Sets `key` through the broker on `port`, again and again until a node answers (30 s at
/// most: one starting, or following a failover).
fn set_once_served(port: u16, key: &str, value: &str) {
    let started = std::time::Instant::now();
    while !mqstore_cli(port, &["set", key, value, "--timeout", "1"])
        .status
        .success()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{key}: no answer"
        );
    }
}

/// `rediss-sentinel://`: sentinels, their primary and its replica all on TLS (each asking
/// for a client certificate, and speaking TLS to each other). `serve` asks the sentinels over
/// TLS where the primary is, stores there with the same files, and follows the sentinels to
/// the replica they promote when the primary dies.
#[test]
fn serve_stores_through_sentinels_over_tls_and_follows_a_failover() {
    let files = tls::TlsFiles::new("nodes-sentinel-tls");
    let (ca, cert, key) = (&files.ca, &files.cert, &files.key);
    let primary_tls = broker::free_port();
    let mut primary = Redis::start_tls(primary_tls, ca, cert, key);
    let replica = Redis::tls_replica_of(primary_tls, broker::free_port(), ca, cert, key);
    let sentinels = Sentinels::start_tls(primary_tls, 3, ca, cert, key);
    assert_eq!(sentinels.primary_port(), primary_tls);
    let broker = Broker::start();
    let hosts: Vec<String> = sentinels
        .tls_ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let store = format!(
        "rediss-sentinel://{}/{}",
        hosts.join(","),
        redis::PRIMARY_NAME
    );
    let _node = serve_on_tls_redis(&broker, "node-sentinel-tls", &store, &files);
    let cli = |args: &[&str]| mqstore_cli(broker.port, args);
    set_once_served(broker.port, "before", "the failover");
    let keys = primary.cli(&["--scan", "--pattern", "mqstore:*"]);
    assert!(!keys.trim().is_empty(), "nothing in the primary: {keys:?}");

    primary.kill();
    let started = std::time::Instant::now();
    while !replica.is_primary() {
        assert!(started.elapsed() < Duration::from_secs(30), "no promotion");
        std::thread::sleep(Duration::from_millis(100));
    }
    set_once_served(broker.port, "after", "it");
    for (key, value) in [("before", "the failover"), ("after", "it")] {
        assert_eq!(cli(&["get", key]).stdout, format!("{value}\n").as_bytes());
    }
    let keys = replica.cli(&["--scan", "--pattern", "mqstore:*"]);
    assert!(
        !keys.trim().is_empty(),
        "nothing in the promoted replica: {keys:?}"
    );
}

/// `rediss-cluster://`: a Redis Cluster whose nodes take TLS (and speak it to each other),
/// each asking for a client certificate; the node follows the slots to the nodes' TLS ports.
#[test]
fn serve_stores_in_a_redis_cluster_over_tls() {
    let files = tls::TlsFiles::new("nodes-cluster-tls");
    let cluster = Cluster::start_tls(&files.ca, &files.cert, &files.key);
    let broker = Broker::start();
    let seeds: Vec<String> = cluster.tls_ports[..2]
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let store = format!("rediss-cluster://{}", seeds.join(","));
    let _node = serve_on_tls_redis(&broker, "node-cluster-tls", &store, &files);
    let cli = |args: &[&str]| mqstore_cli(broker.port, args);
    set_once_served(broker.port, "k0", "v");
    // Keys on every primary's slots, each read back.
    for i in 1..30 {
        let key = format!("k{i}");
        assert!(cli(&["set", &key, &key]).status.success(), "{key}");
    }
    for i in 0..30 {
        let key = format!("k{i}");
        let expected = if i == 0 { "v".to_owned() } else { key.clone() };
        assert_eq!(
            cli(&["get", &key]).stdout,
            format!("{expected}\n").as_bytes()
        );
    }
    let stored: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|node| node.cli(&["dbsize"]).trim().parse().unwrap())
        .collect();
    assert!(
        stored.iter().all(|&n| n > 0),
        "not on every primary: {stored:?}"
    );
}

/// Started before its broker and its Redis (compose or Kubernetes start them in any order):
/// the node waits for each, says so, answers /healthz all along and /readyz only once it is
/// connected, and serves as soon as both are there. `mqstore health` (the container image's
/// health check) says the same with its exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_started_before_its_broker_and_redis_serves_once_they_are_there() {
    let (broker_port, redis_port, metrics_port) = (
        broker::free_port(),
        broker::free_port(),
        broker::free_port(),
    );
    let health = |live: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mqstore"));
        command.args(["health", "--metrics", &format!("0.0.0.0:{metrics_port}")]);
        if live {
            command.arg("--live");
        }
        let out = command.output().expect("mqstore health runs");
        out.status.code()
    };
    assert_eq!(health(false), Some(4), "nothing answers yet: exit 4");
    let mut node = Process(
        Command::new(env!("CARGO_BIN_EXE_mqstore"))
            .args(["--port", &broker_port.to_string(), "serve"])
            .args(["--store", &format!("redis://127.0.0.1:{redis_port}")])
            .args(["--metrics", &format!("127.0.0.1:{metrics_port}")])
            .env("MQSTORE_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("mqstore serve starts"),
    );
    let probe = |path: &str| {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).ok()?;
        use std::io::{Read, Write};
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").ok()?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).ok()?;
        answer.split(' ').nth(1).map(str::to_owned)
    };
    let status_becomes = |path: &str, status: &str| {
        let deadline = std::time::Instant::now() + WAIT;
        while probe(path).as_deref() != Some(status) {
            assert!(
                std::time::Instant::now() < deadline,
                "{path} never answered {status}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    status_becomes("/healthz", "200");
    assert_eq!(
        probe("/readyz").as_deref(),
        Some("503"),
        "not ready without Redis"
    );
    assert_eq!(health(false), Some(1), "mqstore health: not ready");
    assert_eq!(health(true), Some(0), "mqstore health --live: live");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        node.try_wait().unwrap().is_none(),
        "it waits instead of exiting"
    );
    let _redis = Redis::start_on(redis_port);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        probe("/readyz").as_deref(),
        Some("503"),
        "not ready without the broker"
    );
    assert_eq!(probe("/healthz").as_deref(), Some("200"));
    let broker = Broker::start_on(broker_port);
    status_becomes("/readyz", "200");
    assert_eq!(health(false), Some(0), "mqstore health: ready");
    let client = client(broker.port, "late-client").await;
    client.set("k", "v", SetOptions::default()).await.unwrap();
    assert_eq!(
        client.get("k").await.unwrap().unwrap().value,
        Bytes::from("v")
    );
    node.kill().unwrap();
    let mut log = String::new();
    use std::io::Read;
    node.stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    for said in [
        "waiting for Redis at",
        "waiting for the broker at",
        "answers: starting",
    ] {
        assert!(log.contains(said), "the log says {said:?}: {log}");
    }
}

/// Concurrent clients on three nodes (one killed with SIGKILL and started again mid-run)
/// record every SET, SET NX, GET, DEL and VDEL on three keys with its invocation and
/// completion; porcupine checks the history key by key. Requests the dead node took never
/// complete: they may have happened or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn histories_on_three_nodes_are_linearizable_across_a_node_crash() {
    let redis = Redis::start();
    let broker = Broker::start();
    let mut nodes: Vec<Process> = ["l1", "l2", "l3"]
        .iter()
        .map(|id| serve_process(&broker, &redis.url(), id))
        .collect();
    let mut clients = Vec::new();
    for c in 0..6 {
        clients.push(client(broker.port, &format!("lin-{c}")).await);
    }
    let load = history::Load::start();
    let mut tasks = Vec::new();
    for (c, client) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(history::run(client, c, 3, load.clone())));
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let mut victim = nodes.remove(2);
    victim.kill().unwrap();
    victim.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    nodes.push(serve_process(&broker, &redis.url(), "l3"));
    load.stop_at(Duration::from_millis(3_000)).await;
    let mut history = Vec::new();
    for task in tasks {
        history.extend(task.await.unwrap());
    }
    for mut node in nodes {
        let _ = node.kill();
        let _ = node.wait();
    }
    assert!(history.len() > 300, "only {} operations", history.len());
    let (linearizable, report) = history::check(&history, "history.jsonl");
    assert!(linearizable, "not linearizable: {report}");
}

/// With Redis's append-only file fsynced at every write (`appendfsync always`, as docs/guide/redis.md
/// asks), every write a node acknowledged is there after Redis is killed and restarted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_a_redis_crash_with_appendfsync_always() {
    let mut redis = Redis::start_durable();
    let broker = Broker::start();
    let node = node(&broker, &redis.url(), "d1", 0).await;
    let c = client(broker.port, "durable").await;
    let mut written = Vec::new();
    for i in 0..50 {
        let set = c
            .set(
                format!("durable/{i}"),
                format!("{i}"),
                SetOptions::default(),
            )
            .await
            .unwrap();
        written.push((format!("durable/{i}"), set.version.unwrap()));
    }
    redis.restart(); // SIGKILL, then start on the same files
    let deadline = tokio::time::Instant::now() + WAIT;
    for (key, version) in written {
        loop {
            match c.get(key.clone()).await {
                Ok(got) => {
                    assert_eq!(got.expect("the key").version, Some(version), "{key}");
                    break;
                }
                Err(e) => assert!(tokio::time::Instant::now() < deadline, "{key}: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let _ = tokio::time::timeout(WAIT, node.stop()).await;
}
