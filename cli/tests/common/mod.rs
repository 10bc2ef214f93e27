//! A harness that drives the engine the way a server does: whole MQTT messages in, publishes
//! out. The store is the memory store, or with `MQSTORE_TEST_STORE=redis` the Redis store
//! over a real redis-server (the test command runs the engine suites both ways).

#![allow(dead_code)]

#[path = "../redis/mod.rs"]
pub mod redis;

use std::collections::VecDeque;

use bytes::Bytes;
use mqstore_core::codec::{Notification, Request, Response, decode_notification, decode_response};
use mqstore_core::engine::{Engine, EngineConfig, Outcome};
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::store::{
    ClientId, Expired, MemoryStore, Quotas, Store, StoreOp, StoreReply, StoreStats,
};
use mqstore_core::topics;
use mqstore_server::redis_store::{RedisConfig, RedisStore};

pub const NODE: &str = "engine-1";
pub const T0: u64 = 1_700_000_000_000;

/// The store the engine suites run against.
#[allow(clippy::large_enum_variant)] // one per test
pub enum TestStore {
    Memory(MemoryStore),
    Redis(Box<BlockingRedis>),
}

impl TestStore {
    /// What `MQSTORE_TEST_STORE` asks for (`memory` unless it says `redis`).
    pub fn from_env(quotas: Quotas) -> Self {
        match std::env::var("MQSTORE_TEST_STORE").as_deref() {
            Ok("redis") => Self::Redis(Box::new(BlockingRedis::start(quotas))),
            Ok("memory") | Err(_) => Self::Memory(MemoryStore::with_quotas(quotas)),
            Ok(other) => panic!("MQSTORE_TEST_STORE={other:?}: use memory or redis"),
        }
    }
}

/// The Redis store over its own redis-server, driven to completion call by call: the engine
/// suites' synchronous `Store`.
pub struct BlockingRedis {
    runtime: tokio::runtime::Runtime,
    store: RedisStore,
    /// Keys one sweep found expired, handed out one by one.
    expired: VecDeque<Expired>,
    /// Clients one lease sweep dropped, handed out one by one.
    leases: VecDeque<(ClientId, usize)>,
    _server: redis::Redis,
}

impl BlockingRedis {
    pub fn start(quotas: Quotas) -> Self {
        let server = redis::Redis::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let config = RedisConfig::parse(&server.url()).unwrap();
        let store = runtime
            .block_on(RedisStore::connect(&config, quotas))
            .expect("the Redis store connects");
        Self {
            runtime,
            store,
            expired: VecDeque::new(),
            leases: VecDeque::new(),
            _server: server,
        }
    }
}

impl Store for TestStore {
    fn apply(&mut self, op: &StoreOp, now_ms: u64) -> StoreReply {
        match self {
            Self::Memory(store) => store.apply(op, now_ms),
            Self::Redis(r) => {
                let applied = r
                    .runtime
                    .block_on(r.store.apply(op, now_ms))
                    .expect("Redis");
                // The engine swept expired keys just before: none is left for the op to find.
                assert_eq!(applied.expired, None, "an expired key the sweep missed");
                applied.reply
            }
        }
    }

    fn pop_expired(&mut self, now_ms: u64) -> Option<Expired> {
        match self {
            Self::Memory(store) => store.pop_expired(now_ms),
            Self::Redis(r) => {
                if r.expired.is_empty() {
                    let (swept, failed) = r.runtime.block_on(r.store.sweep(now_ms));
                    if let Some(e) = failed {
                        panic!("Redis: {e}");
                    }
                    r.expired.extend(swept);
                }
                r.expired.pop_front()
            }
        }
    }

    fn next_deadline(&self) -> Option<u64> {
        match self {
            Self::Memory(store) => store.next_deadline(),
            Self::Redis(r) => r.runtime.block_on(r.store.next_deadline()).expect("Redis"),
        }
    }

    fn drop_client(&mut self, client: &str) -> usize {
        match self {
            Self::Memory(store) => store.drop_client(client),
            Self::Redis(r) => r
                .runtime
                .block_on(r.store.drop_client(client))
                .expect("Redis"),
        }
    }

    fn pop_expired_lease(&mut self, now_ms: u64) -> Option<(ClientId, usize)> {
        match self {
            Self::Memory(store) => store.pop_expired_lease(now_ms),
            Self::Redis(r) => {
                if r.leases.is_empty() {
                    let dropped = r.runtime.block_on(r.store.expire_leases(now_ms));
                    r.leases.extend(dropped.expect("Redis"));
                }
                r.leases.pop_front()
            }
        }
    }

    fn stats(&self) -> StoreStats {
        match self {
            Self::Memory(store) => store.stats(),
            Self::Redis(r) => r.runtime.block_on(r.store.stats()).expect("Redis"),
        }
    }
}

pub struct Harness {
    pub engine: Engine<TestStore>,
    pub now: u64,
    correlation: u32,
}

/// What one request produced.
#[derive(Debug)]
pub struct Answer {
    pub outcome: Outcome,
    /// The response publish (None when dropped).
    pub response: Option<Publish>,
    /// The notifications published before the response, in order.
    pub notifications: Vec<Publish>,
    /// The keyspace events the request caused (a key made or gone), in order.
    pub keyspace: Vec<Publish>,
}

/// Whether `publish` is a keyspace event (checked to be QoS 0).
pub fn is_keyspace_event(publish: &Publish) -> bool {
    let event = topics::is_keyspace_event(&publish.topic);
    if event {
        assert_eq!(publish.qos, 0, "keyspace events are QoS 0");
    }
    event
}

impl Answer {
    pub fn payload(&self) -> Response {
        decode_response(&self.response.as_ref().expect("a response").payload)
            .expect("a well-formed response")
    }

    pub fn prop(&self, name: &str) -> Option<&str> {
        self.response.as_ref()?.properties.user_property(name)
    }

    pub fn ts(&self) -> Option<&str> {
        self.prop("__ts")
    }

    pub fn status(&self) -> Option<&str> {
        self.prop("__stat")
    }
}

/// A notification as a client sees it.
#[derive(Debug, PartialEq, Eq)]
pub struct Seen {
    pub client: String,
    pub key: Vec<u8>,
    pub change: Notification,
    pub ts: String,
}

pub fn seen(p: &Publish) -> Seen {
    let (client, key) = topics::parse_notify_topic(&p.topic).expect("a notify topic");
    Seen {
        client,
        key,
        change: decode_notification(&p.payload).expect("a well-formed notification"),
        ts: p.properties.user_property("__ts").expect("__ts").to_owned(),
    }
}

/// The `__ts` a client at wall time `ms` sends.
pub fn client_ts(ms: u64, client: &str) -> String {
    format!("{ms}:0:{client}")
}

impl Harness {
    pub fn new() -> Self {
        Self::with(EngineConfig::new(NODE), Quotas::default())
    }

    /// On the Redis store whatever `MQSTORE_TEST_STORE` says (a test of what only it does).
    pub fn on_redis() -> Self {
        let store = TestStore::Redis(Box::new(BlockingRedis::start(Quotas::default())));
        Self {
            engine: Engine::new(EngineConfig::new(NODE), store).unwrap(),
            now: T0,
            correlation: 0,
        }
    }

    /// What a Redis node does when the broker found nobody subscribed to `notification`:
    /// drops its client's registrations made before that change. How many it dropped.
    pub fn drop_unheard(&mut self, notification: &Publish) -> usize {
        let client = topics::client_of_notify_topic(&notification.topic).expect("a notification");
        let (key, version) =
            mqstore_core::envelope::notified_change(notification).expect("a key and a version");
        let TestStore::Redis(r) = self.engine.store_mut() else {
            panic!("only a Redis node drops this way");
        };
        r.runtime
            .block_on(r.store.drop_client_before(&client, &key, &version))
            .expect("Redis")
    }

    pub fn with(config: EngineConfig, quotas: Quotas) -> Self {
        Self {
            engine: Engine::new(config, TestStore::from_env(quotas)).unwrap(),
            now: T0,
            correlation: 0,
        }
    }

    pub fn message(&mut self, client: &str, payload: Bytes, props: &[(&str, &str)]) -> Publish {
        self.correlation += 1;
        let mut user_properties = vec![("__srcId".to_owned(), client.to_owned())];
        user_properties.extend(props.iter().map(|(n, v)| (n.to_string(), v.to_string())));
        Publish {
            topic: topics::INVOKE.to_owned(),
            payload,
            qos: 1,
            properties: Properties {
                payload_format_indicator: Some(0),
                message_expiry_interval: Some(10),
                content_type: Some("application/octet-stream".into()),
                response_topic: Some(topics::response_topic(client)),
                correlation_data: Some(Bytes::copy_from_slice(&self.correlation.to_be_bytes())),
                user_properties,
            },
        }
    }

    pub fn handle(&mut self, message: Publish) -> Answer {
        let correlation = message.properties.correlation_data.clone();
        let response_topic = message.properties.response_topic.clone();
        let mut out = Vec::new();
        let outcome = self.engine.handle(message, self.now, &mut out);
        let response = match &outcome {
            Outcome::Dropped(_) => None,
            _ => {
                let response = out.pop().expect("a response");
                assert_eq!(Some(&response.topic), response_topic.as_ref());
                assert_eq!(response.qos, 1);
                if correlation.as_ref().is_some_and(|c| !c.is_empty()) {
                    assert_eq!(response.properties.correlation_data, correlation);
                }
                Some(response)
            }
        };
        let (keyspace, out): (Vec<_>, Vec<_>) = out.into_iter().partition(is_keyspace_event);
        for n in &out {
            assert!(
                n.topic.starts_with(topics::CLIENTS_PREFIX),
                "only notifications and keyspace events precede a response: {}",
                n.topic
            );
            assert_eq!(n.qos, 1);
        }
        Answer {
            outcome,
            response,
            notifications: out,
            keyspace,
        }
    }

    /// Sends raw payload bytes with extra user properties.
    pub fn raw(&mut self, client: &str, payload: &[u8], props: &[(&str, &str)]) -> Answer {
        let message = self.message(client, Bytes::copy_from_slice(payload), props);
        self.handle(message)
    }

    /// Sends a request with extra user properties (a SET gets a `__ts` unless one is given).
    pub fn call(&mut self, client: &str, request: &Request, props: &[(&str, &str)]) -> Answer {
        let ts = client_ts(self.now, client);
        let mut props = props.to_vec();
        if matches!(request, Request::Set(_)) && !props.iter().any(|(n, _)| *n == "__ts") {
            props.push(("__ts", &ts));
        }
        let message = self.message(client, request.to_bytes(), &props);
        self.handle(message)
    }

    /// Expires due keys, returning the notifications.
    pub fn expire(&mut self) -> Vec<Seen> {
        let mut out = Vec::new();
        self.engine.expire(self.now, &mut out);
        out.iter()
            .filter(|p| !is_keyspace_event(p))
            .map(seen)
            .collect()
    }
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}
