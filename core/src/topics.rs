//! Every topic name of the state store, and the builders for the ones that carry ids.

/// The state store's service id, part of every topic it uses.
pub const SERVICE: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// Requests are published here; the engine subscribes to it.
pub const INVOKE: &str = "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";

/// Notifications and other engine-owned client topics start with this; a request may not name
/// a response topic under it.
pub const CLIENTS_PREFIX: &str = "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8";

/// Each server node keeps a retained message here saying it is online (and its epoch), and
/// leaves an "offline" one as its Will: see [`crate::presence`].
pub const SERVER_PRESENCE_FILTER: &str =
    "statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/server/+";

/// The server presence topic of node `node_id`.
pub fn server_presence_topic(node_id: &str) -> String {
    let mut topic = format!("{SERVICE}/server/");
    push_hex(&mut topic, node_id.as_bytes());
    topic
}

/// The node a server presence topic names.
pub fn node_of_server_presence_topic(topic: &str) -> Option<String> {
    let hex = topic.strip_prefix(SERVICE)?.strip_prefix("/server/")?;
    String::from_utf8(from_hex(hex)?).ok()
}

/// The invoke topic as a shared subscription, so that each request reaches one engine node.
pub fn shared_invoke(group: &str) -> String {
    format!("$share/{group}/{INVOKE}")
}

/// The response topic mqstore clients use (the spec's recommendation).
pub fn response_topic(client_id: &str) -> String {
    format!("clients/{client_id}/services/statestore/_any_/command/invoke/response")
}

/// `{CLIENTS_PREFIX}/{HEX(client_id)}{suffix}`, with room for `extra` more bytes.
fn client_topic(client_id: &str, suffix: &str, extra: usize) -> String {
    let mut topic = String::with_capacity(
        CLIENTS_PREFIX.len() + 1 + 2 * client_id.len() + suffix.len() + extra,
    );
    topic.push_str(CLIENTS_PREFIX);
    topic.push('/');
    push_hex(&mut topic, client_id.as_bytes());
    topic.push_str(suffix);
    topic
}

/// Where the engine publishes changes of `key` to the client `client_id` (as the engine keys
/// registrations: see [`identified`]).
pub fn notify_topic(client_id: &str, key: &[u8]) -> String {
    let mut topic = match client_id.strip_prefix(IDENTIFIED_MARK) {
        Some(id) => own_topic(id, "/command/notify/", 2 * key.len()),
        None => client_topic(client_id, "/command/notify/", 2 * key.len()),
    };
    push_hex(&mut topic, key);
    topic
}

/// The filter a client subscribes to for all of its notifications (the standard topics).
pub fn notify_filter(client_id: &str) -> String {
    client_topic(client_id, "/command/notify/+", 0)
}

// ---- Identified requests ----
//
// A request published under the client's own `clients/{clientId}/` tree names its sender in a
// way the broker can enforce (mosquitto: `pattern readwrite clients/%c/#`, see
// docs/mosquitto-acl.conf), unlike `__srcId`. The answers, notifications and presence of such
// a client stay in the same tree, so the same rule keeps others from reading them.

/// Marks an identified client's id where the engine keys registrations. MQTT client ids never
/// contain NUL, so a request that only claims the id (in `__srcId`) cannot reach them.
const IDENTIFIED_MARK: char = '\0';

/// The id under which the engine keeps an identified client's registrations.
pub fn identified(client_id: &str) -> String {
    format!("{IDENTIFIED_MARK}{client_id}")
}

/// `clients/{clientId}/{SERVICE}{suffix}`, with room for `extra` more bytes.
fn own_topic(client_id: &str, suffix: &str, extra: usize) -> String {
    let mut topic = String::with_capacity(
        "clients/".len() + client_id.len() + 1 + SERVICE.len() + suffix.len() + extra,
    );
    topic.push_str("clients/");
    topic.push_str(client_id);
    topic.push('/');
    topic.push_str(SERVICE);
    topic.push_str(suffix);
    topic
}

/// Where an identified client publishes its requests.
pub fn identified_invoke(client_id: &str) -> String {
    own_topic(client_id, "/command/invoke", 0)
}

/// The filter the engine subscribes to for identified requests.
pub const IDENTIFIED_INVOKE_FILTER: &str =
    "clients/+/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke";

/// The filter an identified client subscribes to for its notifications.
pub fn identified_notify_filter(client_id: &str) -> String {
    own_topic(client_id, "/command/notify/+", 0)
}

/// An identified client's presence topic (its Will, and where it says goodbye).
pub fn identified_presence_topic(client_id: &str) -> String {
    own_topic(client_id, "/presence", 0)
}

/// The filter the engine subscribes to for identified clients' presence.
pub const IDENTIFIED_PRESENCE_FILTER: &str =
    "clients/+/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/presence";

/// The `{clientId}` of a topic `clients/{clientId}/{SERVICE}{suffix}`.
fn owner_of(topic: &str, suffix: &str) -> Option<String> {
    let rest = topic.strip_prefix("clients/")?.strip_suffix(suffix)?;
    let id = rest.strip_suffix(SERVICE)?.strip_suffix('/')?;
    (!id.is_empty() && !id.contains('/')).then(|| id.to_owned())
}

/// The client an identified request topic names.
pub fn client_of_identified_invoke(topic: &str) -> Option<String> {
    owner_of(topic, "/command/invoke")
}

/// The client an identified presence topic names.
pub fn client_of_identified_presence(topic: &str) -> Option<String> {
    owner_of(topic, "/presence")
}

/// Whether `response_topic` lies in `client_id`'s own `clients/{clientId}/` tree.
pub fn is_own_response_topic(client_id: &str, response_topic: &str) -> bool {
    response_topic
        .strip_prefix("clients/")
        .and_then(|rest| rest.strip_prefix(client_id))
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Where an mqstore client's MQTT Will lands when it goes away without saying so: the engine
/// then drops the client's KEYNOTIFY registrations. Clients set it as their Will (QoS 1).
pub fn presence_topic(client_id: &str) -> String {
    client_topic(client_id, "/presence", 0)
}

/// Where the server publishes, once per connection, a message nobody subscribes to: whether
/// the broker's PUBACK says "no matching subscribers" (0x10) tells whether the server can
/// learn that way that a client stopped listening.
pub fn probe_topic(client_id: &str) -> String {
    client_topic(client_id, "/probe", 0)
}

/// The payload of a client's presence Will. MQTT 5 allows an empty Will payload, but some
/// brokers (Mochi MQTT) refuse the CONNECT then; the engine reads only the topic.
pub const PRESENCE_GONE: &[u8] = b"gone";

/// The filter the engine subscribes to for every client's presence Will.
pub const PRESENCE_FILTER: &str =
    "clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/+/presence";

/// The client id a presence topic names.
pub fn client_of_presence_topic(topic: &str) -> Option<String> {
    let hex = topic
        .strip_prefix(CLIENTS_PREFIX)?
        .strip_prefix('/')?
        .strip_suffix("/presence")?;
    String::from_utf8(from_hex(hex)?).ok()
}

/// The client (as the engine keys registrations: see [`identified`]) and the key a
/// notification topic names (`None` if it is not one).
pub fn parse_notify_topic(topic: &str) -> Option<(String, Vec<u8>)> {
    if let Some(rest) = topic
        .strip_prefix(CLIENTS_PREFIX)
        .and_then(|r| r.strip_prefix('/'))
    {
        let (client, key) = rest.split_once("/command/notify/")?;
        return Some((String::from_utf8(from_hex(client)?).ok()?, from_hex(key)?));
    }
    let (head, key) = topic.rsplit_once('/')?;
    let client = owner_of(head, "/command/notify")?;
    Some((identified(&client), from_hex(key)?))
}

/// The client a notification topic is for (`None` if it is not one), without decoding the key.
pub fn client_of_notify_topic(topic: &str) -> Option<String> {
    parse_notify_topic(topic).map(|(client, _)| client)
}

/// The MQTT client id a notification topic is delivered to (`None` if it is not one): the
/// client of either form, without the engine's mark for identified registrations. A broker
/// plugin publishes each notification to that client directly.
pub fn recipient_of_notify_topic(topic: &str) -> Option<String> {
    client_of_notify_topic(topic).map(|client| mqtt_client_of(&client).to_owned())
}

/// The MQTT client id of a registration (an identified one carries the engine's mark).
pub fn mqtt_client_of(registration: &str) -> &str {
    registration
        .strip_prefix(IDENTIFIED_MARK)
        .unwrap_or(registration)
}

/// The key a notification topic names, for any client (`None` if it is not one).
pub fn key_of_notify_topic(topic: &str) -> Option<Vec<u8>> {
    parse_notify_topic(topic).map(|(_, key)| key)
}

/// Whether a request may not use `topic` as its response topic: answering there could loop
/// back into the engine or impersonate it.
pub fn is_forbidden_response_topic(topic: &str) -> bool {
    topic == INVOKE || topic.starts_with(CLIENTS_PREFIX)
}

/// The longest topic MQTT can carry (a two-byte length prefix).
/// mqstore's keyspace events (an extension of the protocol): a key was made…
pub const KEYSPACE_CREATED: &str = "mqstore/statestore/v1/keyspace/created";
/// …or is gone (deleted or expired). The payload is the key; QoS 0.
pub const KEYSPACE_DELETED: &str = "mqstore/statestore/v1/keyspace/deleted";
/// Both keyspace events.
pub const KEYSPACE_FILTER: &str = "mqstore/statestore/v1/keyspace/+";

/// Whether `topic` is a keyspace event's.
pub fn is_keyspace_event(topic: &str) -> bool {
    topic == KEYSPACE_CREATED || topic == KEYSPACE_DELETED
}

/// MQTT's longest topic, in bytes.
pub const MAX_TOPIC_LEN: usize = 65_535;

/// Whether `topic` is a topic name a broker accepts in a PUBLISH (MQTT 5 §4.7): not empty,
/// at most [`MAX_TOPIC_LEN`] bytes, no wildcard, no NUL. The server never publishes to
/// anything else: a broker disconnects a client that does, and every answer in flight is lost.
pub fn is_valid_topic_name(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= MAX_TOPIC_LEN
        && !topic.bytes().any(|b| matches!(b, b'+' | b'#' | 0))
}

/// The length of [`notify_topic`]`(client_id, key)`, without building it.
pub fn notify_topic_len(client_id: &str, key: &[u8]) -> usize {
    let suffix = "/command/notify/".len() + 2 * key.len();
    match client_id.strip_prefix(IDENTIFIED_MARK) {
        Some(id) => "clients/".len() + id.len() + 1 + SERVICE.len() + suffix,
        None => CLIENTS_PREFIX.len() + 1 + 2 * client_id.len() + suffix,
    }
}

/// The `{clientId}` of a response topic of the form `clients/{clientId}/…`.
pub fn client_id_of_response_topic(topic: &str) -> Option<&str> {
    let rest = topic.strip_prefix("clients/")?;
    let (id, _) = rest.split_once('/')?;
    (!id.is_empty()).then_some(id)
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// RFC 4648 base16, upper case, appended to `out`.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    for &b in bytes {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 15)] as char);
    }
}

/// RFC 4648 base16 as a string.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::new();
    push_hex(&mut out, bytes);
    out
}

/// The value of one base16 digit (either case).
pub(crate) fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'A'..=b'F' => Some(c - b'A' + 10),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    }
}

/// Decodes base16 (either case); `None` for odd lengths or other characters.
pub fn from_hex(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(2) {
        return None;
    }
    text.chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identified_topics_live_in_the_clients_own_tree() {
        let invoke = identified_invoke("dev-1");
        assert_eq!(
            invoke,
            "clients/dev-1/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke"
        );
        assert_eq!(invoke.replace("dev-1", "+"), IDENTIFIED_INVOKE_FILTER);
        assert_eq!(
            client_of_identified_invoke(&invoke).as_deref(),
            Some("dev-1")
        );
        assert_eq!(client_of_identified_invoke(INVOKE), None);
        assert_eq!(
            client_of_identified_invoke(&format!("clients/a/b/{SERVICE}/command/invoke")),
            None
        );
        let presence = identified_presence_topic("dev-1");
        assert_eq!(presence.replace("dev-1", "+"), IDENTIFIED_PRESENCE_FILTER);
        assert_eq!(
            client_of_identified_presence(&presence).as_deref(),
            Some("dev-1")
        );
        // Notifications of an identified registration go to the client's own tree.
        let marked = identified("dev-1");
        let topic = notify_topic(&marked, b"k");
        assert_eq!(topic, format!("clients/dev-1/{SERVICE}/command/notify/6B"));
        assert_eq!(topic.replace("6B", "+"), identified_notify_filter("dev-1"));
        assert_eq!(
            parse_notify_topic(&topic),
            Some((marked.clone(), b"k".to_vec()))
        );
        assert_eq!(client_of_notify_topic(&topic), Some(marked));
        assert_eq!(recipient_of_notify_topic(&topic).as_deref(), Some("dev-1"));
        assert_eq!(key_of_notify_topic(&topic), Some(b"k".to_vec()));
        assert!(is_own_response_topic("dev-1", &response_topic("dev-1")));
        assert!(!is_own_response_topic("dev-1", &response_topic("dev-10")));
        assert!(!is_own_response_topic("dev-1", "clients/dev-1"));
        assert!(!is_own_response_topic("dev-1", "devices/door/cmd"));
    }

    #[test]
    fn forbidden_response_topics() {
        let presence = server_presence_topic("node-1");
        assert_eq!(
            node_of_server_presence_topic(&presence).as_deref(),
            Some("node-1")
        );
        assert_eq!(
            presence.replace("6E6F64652D31", "+"),
            SERVER_PRESENCE_FILTER
        );
        for bad in ["", "a/+/b", "a/#", "+", "a\0b"] {
            assert!(!is_valid_topic_name(bad), "{bad:?}");
        }
        assert!(is_valid_topic_name("a/b"));
        assert!(is_valid_topic_name(&"x".repeat(MAX_TOPIC_LEN)));
        assert!(!is_valid_topic_name(&"x".repeat(MAX_TOPIC_LEN + 1)));
        assert_eq!(
            notify_topic_len("dev-1", b"k/1"),
            notify_topic("dev-1", b"k/1").len()
        );
        let marked = identified("dev-1");
        assert_eq!(
            notify_topic_len(&marked, b"k/1"),
            notify_topic(&marked, b"k/1").len()
        );
        assert!(is_forbidden_response_topic(INVOKE));
        assert!(is_forbidden_response_topic(&format!("{CLIENTS_PREFIX}/x")));
        assert!(is_forbidden_response_topic(CLIENTS_PREFIX));
        assert!(!is_forbidden_response_topic(&response_topic("c1")));
        assert!(!is_forbidden_response_topic(&format!("{INVOKE}/response")));
    }

    #[test]
    fn client_ids_of_response_topics() {
        assert_eq!(
            client_id_of_response_topic(&response_topic("dev-7")),
            Some("dev-7")
        );
        assert_eq!(client_id_of_response_topic("clients//x"), None);
        assert_eq!(client_id_of_response_topic("devices/dev-7/x"), None);
        assert_eq!(client_id_of_response_topic("clients/dev-7"), None);
    }

    #[test]
    fn notify_topics_round_trip_keys() {
        let topic = notify_topic("c", b"\x00\xffk");
        assert!(topic.ends_with("/63/command/notify/00FF6B"));
        assert_eq!(key_of_notify_topic(&topic), Some(b"\x00\xffk".to_vec()));
        assert_eq!(key_of_notify_topic("elsewhere/x"), None);
        assert_eq!(
            parse_notify_topic(&topic),
            Some(("c".to_owned(), b"\x00\xffk".to_vec()))
        );
        assert_eq!(client_of_notify_topic(&topic).as_deref(), Some("c"));
        assert_eq!(recipient_of_notify_topic(&topic).as_deref(), Some("c"));
        assert_eq!(client_of_notify_topic(&response_topic("c")), None);
        assert_eq!(recipient_of_notify_topic(&response_topic("c")), None);
        assert_eq!(from_hex("0"), None);
        assert_eq!(from_hex("zz"), None);
        assert_eq!(
            notify_filter("c"),
            format!("{CLIENTS_PREFIX}/63/command/notify/+")
        );
        assert_eq!(shared_invoke("g"), format!("$share/g/{INVOKE}"));
        let presence = presence_topic("dev-1");
        assert_eq!(
            client_of_presence_topic(&presence).as_deref(),
            Some("dev-1")
        );
        assert_eq!(presence.replace("6465762D31", "+"), PRESENCE_FILTER);
        assert_eq!(client_of_presence_topic("clients/x/presence"), None);
    }
}
