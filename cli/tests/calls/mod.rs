//! Calls to the state store over a live broker, as the integration tests make them: clients
//! that wait until a service answers, and the next change of an observation.

#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_net::client::{Client, ClientOptions, KeyChange, Observation};

/// How long a test waits for what must happen.
pub const WAIT: Duration = Duration::from_secs(10);

/// A client on the broker at `port` whose calls time out after 2 s.
pub async fn client(port: u16, id: &str) -> Client {
    connect(port, id, Duration::from_secs(2)).await
}

/// A client whose calls time out after `timeout`.
pub async fn connect(port: u16, id: &str, timeout: Duration) -> Client {
    let mut options = ClientOptions::new(id, "127.0.0.1", port);
    options.timeout = timeout;
    Client::connect(options).await.expect("the client connects")
}

/// A client once the service answers (it may still be subscribing when the broker is up).
pub async fn ready_client(port: u16, id: &str) -> Client {
    ready_client_timing_out(port, id, Duration::from_secs(2)).await
}

/// [`ready_client`] whose calls time out after `timeout`.
pub async fn ready_client_timing_out(port: u16, id: &str, timeout: Duration) -> Client {
    let client = connect(port, id, timeout).await;
    wait_ready(&client).await;
    client
}

/// Returns once the service answers `client`.
pub async fn wait_ready(client: &Client) {
    let deadline = tokio::time::Instant::now() + WAIT;
    // Any answer will do (access rules may refuse the key).
    while let Err(ClientError::Timeout(_) | ClientError::Disconnected) =
        client.get(Bytes::from_static(b"ready?")).await
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the service never answered"
        );
    }
}

/// The next change `observation` reports, within [`WAIT`].
pub async fn next_change(observation: &mut Observation) -> KeyChange {
    tokio::time::timeout(WAIT, observation.next())
        .await
        .expect("a change within 10 s")
        .expect("the observation is open")
}
