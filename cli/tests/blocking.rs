//! The blocking client (`mqstore_net::blocking`) against `mqstore serve` over a real mosquitto:
//! calls made from plain threads, many threads on one client, observations while no call is
//! made, a broker restart, TLS, and closing.

mod broker;
mod tls;

use std::sync::Arc;
use std::time::{Duration, Instant};

use broker::Mosquitto;
use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_core::codec::Condition;
use mqstore_net::BrokerConfig;
use mqstore_net::blocking::Client;
use mqstore_net::client::{ClientOptions, Deleted, SetOptions};
use mqstore_server::{ServerConfig, ServerHandle, spawn};

/// How long a test waits for what must happen.
const WAIT: Duration = Duration::from_secs(10);

/// `mqstore serve` on the broker, on a runtime of its own (the clients under test have none).
struct Server {
    runtime: tokio::runtime::Runtime,
    handle: Option<ServerHandle>,
}

impl Server {
    fn start(broker: BrokerConfig, node_id: &str) -> Server {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = runtime
            .block_on(spawn(ServerConfig::new(broker, node_id)))
            .expect("the server starts");
        Server {
            runtime,
            handle: Some(handle),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            let _ = self.runtime.block_on(handle.stop());
        }
    }
}

fn broker_at(port: u16) -> BrokerConfig {
    BrokerConfig {
        port,
        ..BrokerConfig::default()
    }
}

fn options(broker: BrokerConfig, id: &str) -> ClientOptions {
    let mut options = ClientOptions::new(id, "127.0.0.1", broker.port);
    options.broker = broker;
    options.timeout = Duration::from_secs(2);
    options
}

/// A blocking client once the server answers it (it may still be subscribing).
fn ready(broker: BrokerConfig, id: &str) -> Client {
    let client = Client::connect(options(broker, id)).expect("the client connects");
    let deadline = Instant::now() + WAIT;
    while let Err(ClientError::Timeout(_) | ClientError::Disconnected) = client.get("ready?") {
        assert!(Instant::now() < deadline, "the server never answered");
    }
    client
}

#[test]
fn blocking_calls_give_the_state_stores_answers() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let client = ready(broker_at(broker.port), "blocking-calls");

    let set = client.set("k", "one", SetOptions::default()).unwrap();
    assert!(set.applied);
    let read = client.get("k").unwrap().expect("k is there");
    assert_eq!(&read.value[..], b"one");
    assert_eq!(read.version, set.version, "GET gives the SET's version");

    // NX on a key that exists is not applied, and changes nothing.
    let nx = SetOptions {
        condition: Condition::NotExists,
        ..SetOptions::default()
    };
    assert!(!client.set("k", "two", nx).unwrap().applied);
    assert_eq!(&client.get("k").unwrap().unwrap().value[..], b"one");

    client.set("k2", "x", SetOptions::default()).unwrap();
    let mut keys = client.scan("k*").unwrap();
    keys.sort();
    assert_eq!(keys, [Bytes::from_static(b"k"), Bytes::from_static(b"k2")]);

    assert_eq!(
        client.vdel("k", "not it", None).unwrap().outcome,
        Deleted::ValueMismatch
    );
    assert_eq!(
        client.vdel("k", "one", None).unwrap().outcome,
        Deleted::Deleted
    );
    assert_eq!(client.del("k2", None).unwrap().outcome, Deleted::Deleted);
    assert_eq!(client.del("k2", None).unwrap().outcome, Deleted::Absent);
    assert_eq!(client.get("k").unwrap(), None);
    client.close();
}

#[test]
fn many_threads_share_one_blocking_client() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let client = ready(broker_at(broker.port), "blocking-threads");
    let threads: Vec<_> = (0..16)
        .map(|t| {
            let client = client.clone();
            std::thread::spawn(move || {
                for i in 0..100 {
                    let key = format!("t{t}");
                    let value = format!("{t}-{i}");
                    client
                        .set(key.clone(), value.clone(), SetOptions::default())
                        .unwrap();
                    // Each thread gets its own answer, never another's.
                    let read = client.get(key).unwrap().expect("the key is there");
                    assert_eq!(read.value, Bytes::from(value));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("every thread's calls succeed");
    }
    assert_eq!(client.scan("t*").unwrap().len(), 16);
}

#[test]
fn observations_arrive_while_no_call_is_made() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let watcher = ready(broker_at(broker.port), "blocking-watcher");
    let writer = ready(broker_at(broker.port), "blocking-writer");
    let observation = watcher.observe("watched").unwrap();
    // The watcher makes no call from here on: its helper thread reads the changes.
    for value in ["a", "b", "c"] {
        writer.set("watched", value, SetOptions::default()).unwrap();
    }
    writer.del("watched", None).unwrap();
    let values: Vec<Option<Bytes>> = (0..4)
        .map(|_| {
            observation
                .next_timeout(WAIT)
                .expect("a change within 10 s")
                .value
        })
        .collect();
    assert_eq!(
        values,
        [
            Some(Bytes::from_static(b"a")),
            Some(Bytes::from_static(b"b")),
            Some(Bytes::from_static(b"c")),
            None
        ]
    );
    watcher.unobserve("watched").unwrap();
    writer.set("watched", "d", SetOptions::default()).unwrap();
    assert_eq!(
        observation.next_timeout(Duration::from_millis(300)),
        None,
        "no change after unobserve"
    );
}

#[test]
fn a_blocking_client_reconnects_and_keeps_observing_after_a_broker_restart() {
    let mut broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let watcher = ready(broker_at(broker.port), "blocking-restart");
    let observation = watcher.observe("kept").unwrap();

    broker.restart();
    // Calls fail while the broker is away, then succeed again without a new client.
    let deadline = Instant::now() + WAIT;
    while watcher.set("probe", "x", SetOptions::default()).is_err() {
        assert!(Instant::now() < deadline, "no answer after the restart");
        std::thread::sleep(Duration::from_millis(50));
    }
    let writer = ready(broker_at(broker.port), "blocking-restart-writer");
    writer.set("kept", "after", SetOptions::default()).unwrap();
    // The observation survived: the change arrives (as the notification, or found by the
    // read-back after the reconnect when it came first).
    let change = std::iter::from_fn(|| observation.next_timeout(WAIT))
        .find(|change| change.value.as_deref() == Some(&b"after"[..]));
    assert!(change.is_some(), "the change after the restart arrives");
}

#[test]
fn connecting_where_no_broker_listens_fails_at_once() {
    let port = broker::free_port();
    let started = Instant::now();
    let mut options = options(broker_at(port), "nobody-there");
    options.timeout = Duration::from_secs(5);
    match Client::connect(options) {
        Err(ClientError::Unreachable(reason)) => {
            assert!(reason.contains(&port.to_string()), "{reason}")
        }
        Err(other) => panic!("expected Unreachable, got {other}"),
        Ok(_) => panic!("connected to nothing"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a refused connection is reported, not waited out"
    );
}

#[test]
fn calls_after_close_fail_and_closing_twice_is_harmless() {
    let broker = Mosquitto::start();
    let _server = Server::start(broker_at(broker.port), "node-blocking");
    let client = Arc::new(ready(broker_at(broker.port), "blocking-close"));
    client.set("k", "v", SetOptions::default()).unwrap();
    client.close();
    assert!(matches!(client.get("k"), Err(ClientError::Disconnected)));
    // Closing twice, and dropping after closing, are harmless.
    client.close();
    drop(client);
}

#[test]
fn a_blocking_client_connects_over_tls_and_refuses_an_untrusted_broker() {
    use mqstore_net::TlsConfig;

    let files = tls::TlsFiles::new("blocking-tls");
    let broker = Mosquitto::start_tls(&files.ca, &files.cert, &files.key);
    let tls_broker = BrokerConfig {
        tls: Some(TlsConfig::from_files(&files.ca, None).unwrap()),
        ..broker_at(broker.port)
    };
    let _server = Server::start(tls_broker.clone(), "node-blocking-tls");

    let client = ready(tls_broker.clone(), "blocking-tls");
    client.set("k", "over tls", SetOptions::default()).unwrap();
    let big = vec![b'x'; 100_000];
    client
        .set("big", big.clone(), SetOptions::default())
        .unwrap();
    assert_eq!(&client.get("k").unwrap().unwrap().value[..], b"over tls");
    assert_eq!(client.get("big").unwrap().unwrap().value, Bytes::from(big));
    client.close();

    let untrusted = BrokerConfig {
        tls: Some(TlsConfig {
            ca_pem: tls::untrusted_ca_pem(),
            client_auth: None,
        }),
        ..broker_at(broker.port)
    };
    match Client::connect(options(untrusted, "untrusted")) {
        Err(ClientError::Unreachable(reason)) => assert!(reason.contains("TLS"), "{reason}"),
        Err(other) => panic!("expected a TLS failure, got {other}"),
        Ok(_) => panic!("trusted a broker signed by an unknown authority"),
    }
}
