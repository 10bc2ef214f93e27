//! Calls to the state store over a live broker, as the integration tests make them: clients
//! that wait until a service answers, and the next change of an observation; and the devices
//! that answer commands.

#![allow(dead_code)]

use std::time::Duration;

use bytes::Bytes;
use mqstore_core::client::ClientError;
use mqstore_net::client::{Client, ClientOptions, KeyChange, Observation};
use mqstore_server::metrics::Metrics;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, MqttOptions};

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

/// Waits until a line of `mqstore serve`'s metrics text is what `reached` looks for (`what`
/// says what, should it not come within [`WAIT`]).
pub async fn wait_for_metric(metrics: &Metrics, what: &str, reached: impl Fn(&str) -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !metrics.render().lines().any(&reached) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "metric {what:?} not reached:\n{}",
            metrics.render()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The next change `observation` reports, within [`WAIT`].
pub async fn next_change(observation: &mut Observation) -> KeyChange {
    tokio::time::timeout(WAIT, observation.next())
        .await
        .expect("a change within 10 s")
        .expect("the observation is open")
}

/// A device simulator: connects as `id`, subscribes to `filter`, and answers each command
/// with what `answer` makes of it (topic, payload, properties, delay), as often as it says.
pub async fn device(
    port: u16,
    id: &str,
    filter: &str,
    answer: impl Fn(&str, &[u8], &PublishProperties) -> Vec<(String, Vec<u8>, PublishProperties, u64)>
    + Send
    + 'static,
) -> tokio::task::JoinHandle<()> {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_max_packet_size(Some(16 * 1024 * 1024));
    let (client, mut eventloop) = AsyncClient::new(options, 1024);
    let (subscribed_tx, subscribed) = tokio::sync::oneshot::channel();
    let filter = filter.to_owned();
    let task = tokio::spawn(async move {
        let mut subscribed_tx = Some(subscribed_tx);
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    client
                        .subscribe(filter.clone(), QoS::AtLeastOnce)
                        .await
                        .unwrap();
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => {
                    if let Some(tx) = subscribed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let topic = String::from_utf8_lossy(&p.topic).into_owned();
                    let props = p.properties.unwrap_or_default();
                    for (topic, payload, props, delay) in answer(&topic, &p.payload, &props) {
                        let client = client.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                            let _ = client
                                .publish_with_properties(
                                    topic,
                                    QoS::AtLeastOnce,
                                    false,
                                    payload,
                                    props,
                                )
                                .await;
                        });
                    }
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
    tokio::time::timeout(WAIT, subscribed)
        .await
        .expect("the device subscribes")
        .unwrap();
    task
}

/// An MQTT 5 device pool (MQTT client `id`) on the broker at `port`, answering on the response
/// topic with the correlation data and `__stat: 200`, echoing the payload.
pub async fn mqtt5_devices(port: u16, id: &str) -> tokio::task::JoinHandle<()> {
    device(port, id, "dev/+/cmd", |_, payload, props| {
        let Some(response_topic) = props.response_topic.clone() else {
            return Vec::new();
        };
        let answer = PublishProperties {
            correlation_data: props.correlation_data.clone(),
            content_type: Some("application/json".into()),
            user_properties: vec![("__stat".into(), "200".into())],
            ..PublishProperties::default()
        };
        vec![(response_topic, payload.to_vec(), answer, 0)]
    })
    .await
}
