//! A harness that drives the engine the way a server does: whole MQTT messages in, publishes
//! out.

#![allow(dead_code)]

use bytes::Bytes;
use mqstore::codec::{Notification, Request, Response, decode_notification, decode_response};
use mqstore::engine::{Engine, EngineConfig, Outcome};
use mqstore::envelope::{Properties, Publish};
use mqstore::store::{MemoryStore, Quotas};
use mqstore::topics;

pub const NODE: &str = "engine-1";
pub const T0: u64 = 1_700_000_000_000;

pub struct Harness {
    pub engine: Engine,
    pub now: u64,
    correlation: u32,
}

/// What one request produced.
#[derive(Debug)]
pub struct Answer {
    pub outcome: Outcome,
    /// The response publish (None when dropped).
    pub response: Option<Publish>,
    /// Everything published before the response, in order.
    pub notifications: Vec<Publish>,
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

    pub fn with(config: EngineConfig, quotas: Quotas) -> Self {
        Self {
            engine: Engine::new(config, MemoryStore::with_quotas(quotas)).unwrap(),
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
        for n in &out {
            assert!(
                n.topic.starts_with(topics::CLIENTS_PREFIX),
                "only notifications precede a response: {}",
                n.topic
            );
            assert_eq!(n.qos, 1);
        }
        Answer {
            outcome,
            response,
            notifications: out,
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
        out.iter().map(seen).collect()
    }
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}
