//! `mqstore nodes`: the server nodes on the broker as their retained presence says — the same
//! messages the nodes read to notice two of them answering one request.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use mqstore_core::client::ClientError;
use mqstore_core::presence::{ServerPresence, Services, Subscription};
use mqstore_core::topics;
use mqstore_net::BrokerConfig;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, SubscribeReasonCode};
use rumqttc::v5::{AsyncClient, Event};
use serde_json::json;

use crate::call::CallArgs;
use crate::store::not_connected;

/// How long after the subscription (and after each presence since) more retained presences may
/// still come: the broker sends them all right after its SUBACK.
const QUIET: Duration = Duration::from_millis(300);

/// Reads the presences, prints them (the offline ones with `all`), and exits 0 when some node
/// is online, 1 when none is.
pub(crate) async fn list(
    broker: &BrokerConfig,
    client_id: &str,
    all: bool,
    call: CallArgs,
) -> ExitCode {
    let address = format!("{}:{}", broker.host, broker.port);
    let timeout = call.timeout.unwrap_or(Duration::from_secs(5));
    let mut nodes = match read(broker, client_id, timeout).await {
        Ok(nodes) => nodes,
        Err(Unread::Connection(e)) => return not_connected(e, &address),
        Err(Unread::Refused(code)) => {
            eprintln!(
                "error: the broker at {address} refused the subscription to {}: {code:?} (its access rules must let this client read it)",
                topics::SERVER_PRESENCE_FILTER
            );
            return ExitCode::from(5);
        }
    };
    let clashes = clashes(&nodes);
    let online = nodes.values().filter(|p| p.online).count();
    let offline = nodes.len() - online;
    if !all {
        nodes.retain(|_, p| p.online);
    }
    if call.json {
        let nodes: Vec<_> = nodes
            .iter()
            .map(|(node, p)| {
                json!({
                    "node": node,
                    "online": p.online,
                    "epoch": p.epoch,
                    "share_group": match &p.subscription {
                        Some(Subscription::Shared(group)) => json!(group),
                        _ => json!(null),
                    },
                    "takes_every_request": p.subscription.as_ref().map(|s| *s == Subscription::Every),
                    "serves": p.services.map(|s| s.names().collect::<Vec<_>>()),
                    "max_packet_size": p.max_packet_size,
                    "registration_lease_ms": p.registration_lease_ms,
                })
            })
            .collect();
        println!("{}", json!({ "nodes": nodes, "clashes": clashes }));
    } else {
        print!("{}", table(&nodes));
        for [a, b] in &clashes {
            let both = nodes[a].serves().both(nodes[b].serves());
            println!(
                "clash: {a} and {b} both take requests of {both} (outside one share group): each is answered twice"
            );
        }
        if offline > 0 && !all {
            println!("({offline} offline, not shown: --all)");
        }
    }
    if online == 0 {
        eprintln!(
            "no mqstore node is online on the broker at {address} (is `mqstore serve` running, connected to it?)"
        );
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}

/// Why the presences could not be read.
enum Unread {
    /// The connection failed.
    Connection(ClientError),
    /// The broker refused the subscription (its access rules).
    Refused(SubscribeReasonCode),
}

/// The retained presences on the broker, by node id.
async fn read(
    broker: &BrokerConfig,
    client_id: &str,
    timeout: Duration,
) -> Result<BTreeMap<String, ServerPresence>, Unread> {
    let (client, mut events) = AsyncClient::new(broker.options(client_id), 16);
    let mut nodes = BTreeMap::new();
    let mut subscribed = false;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let wait = match subscribed {
            true => QUIET,
            false => deadline.saturating_duration_since(tokio::time::Instant::now()),
        };
        let event = match tokio::time::timeout(wait, events.poll()).await {
            Ok(event) => event,
            // Quiet since the last presence: every retained one has come.
            Err(_) if subscribed => break,
            Err(_) => {
                let e = ClientError::Unreachable(format!("no answer within {timeout:?}"));
                return Err(Unread::Connection(e));
            }
        };
        let event = event.map_err(|e| Unread::Connection(mqstore_net::connection_error(&e)))?;
        match event {
            Event::Incoming(Packet::ConnAck(_)) => {
                let filter = topics::SERVER_PRESENCE_FILTER;
                // Queued for the event loop: it cannot fail while the loop runs.
                let _ = client.try_subscribe(filter, QoS::AtLeastOnce);
            }
            Event::Incoming(Packet::SubAck(suback)) => {
                let refused = suback
                    .return_codes
                    .iter()
                    .find(|code| !matches!(code, SubscribeReasonCode::Success(_)));
                if let Some(code) = refused {
                    return Err(Unread::Refused(*code));
                }
                subscribed = true;
            }
            Event::Incoming(Packet::Publish(publish)) => {
                let topic = String::from_utf8_lossy(&publish.topic);
                let node = topics::node_of_server_presence_topic(&topic);
                if let (Some(node), Some(presence)) =
                    (node, ServerPresence::parse(&publish.payload))
                {
                    nodes.insert(node, presence);
                }
            }
            _ => {}
        }
    }
    let _ = client.try_disconnect();
    Ok(nodes)
}

/// Every pair of nodes that would both take some request (`ServerPresence::clashes_with`).
fn clashes(nodes: &BTreeMap<String, ServerPresence>) -> Vec<[String; 2]> {
    let nodes: Vec<_> = nodes.iter().collect();
    let mut pairs = Vec::new();
    for (i, (a, pa)) in nodes.iter().enumerate() {
        for (b, pb) in &nodes[i + 1..] {
            if pa.clashes_with(pb) {
                pairs.push([a.to_string(), b.to_string()]);
            }
        }
    }
    pairs
}

/// One line per node, its columns aligned.
fn table(nodes: &BTreeMap<String, ServerPresence>) -> String {
    let mut rows = vec![[
        "node".to_owned(),
        "state".into(),
        "share group".into(),
        "serves".into(),
        "max packet".into(),
        "lease".into(),
        "epoch".into(),
    ]];
    for (node, p) in nodes {
        let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        rows.push([
            node.clone(),
            if p.online { "online" } else { "offline" }.into(),
            match &p.subscription {
                Some(Subscription::Shared(group)) => group.clone(),
                Some(Subscription::Every) => "(none)".into(),
                None if p.online => "(not said)".into(),
                None => "-".into(),
            },
            match p.services {
                Some(services) if services.is_empty() => "(nothing)".into(),
                Some(services) => services.names().collect::<Vec<_>>().join(","),
                None if p.online => Services::STATE_STORE.names().collect(),
                None => "-".into(),
            },
            or_dash(p.max_packet_size.map(|n| n.to_string())),
            or_dash(p.registration_lease_ms.map(|ms| format!("{ms} ms"))),
            p.epoch.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..7)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn presence(online: bool, subscription: Option<Subscription>) -> ServerPresence {
        ServerPresence {
            epoch: "e1".into(),
            online,
            max_packet_size: Some(1024),
            registration_lease_ms: None,
            subscription,
            services: None,
        }
    }

    #[test]
    fn clashes_are_the_online_pairs_outside_one_share_group() {
        let shared = |g: &str| Some(Subscription::Shared(g.into()));
        let nodes: BTreeMap<String, ServerPresence> = [
            ("a", presence(true, shared("g"))),
            ("b", presence(true, shared("g"))),
            ("c", presence(true, shared("h"))),
            ("d", presence(false, Some(Subscription::Every))),
            ("e", presence(true, None)),
        ]
        .into_iter()
        .map(|(n, p)| (n.to_owned(), p))
        .collect();
        // A and B share "g"; C is in "h"; D is offline; E says nothing.
        assert_eq!(
            clashes(&nodes),
            [["a", "c"], ["b", "c"]].map(|pair| pair.map(str::to_owned))
        );
        let mut with_plain = nodes.clone();
        with_plain.insert("f".into(), presence(true, Some(Subscription::Every)));
        // A node taking every request clashes with every online one, E included.
        assert_eq!(clashes(&with_plain).len(), 2 + 4);
        // ... that serves a service it serves: C, of commands only, with none of them.
        let commands = Services {
            commands: true,
            ..Services::default()
        };
        with_plain.get_mut("c").unwrap().services = Some(commands);
        assert_eq!(clashes(&with_plain).len(), 3);
    }

    #[test]
    fn the_table_aligns_its_columns() {
        let nodes: BTreeMap<String, ServerPresence> = [
            (
                "node-1".to_owned(),
                presence(true, Some(Subscription::Every)),
            ),
            ("n2".to_owned(), presence(false, None)),
            ("old".to_owned(), presence(true, None)),
            (
                "side".to_owned(),
                ServerPresence {
                    services: Some(Services {
                        state_store: false,
                        ..Services::ALL
                    }),
                    ..presence(true, Some(Subscription::Shared("g".into())))
                },
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            table(&nodes),
            "node    state    share group  serves         max packet  lease  epoch\n\
             n2      offline  -            -              1024        -      e1\n\
             node-1  online   (none)       state          1024        -      e1\n\
             old     online   (not said)   state          1024        -      e1\n\
             side    online   g            jobs,commands  1024        -      e1\n"
        );
    }
}
