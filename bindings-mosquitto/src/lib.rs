//! mqstore inside mosquitto 2.0: a v5 broker plugin that drives the same server node as
//! `mqstore serve` ([`mqstore_core::server::Node`]: the state store, the jobs service, the
//! data directory) on the broker's own thread, from its events.
//!
//! * `MOSQ_EVT_MESSAGE` on the node's topics ([`Node::route`]: state store requests, jobs
//!   device and operator requests, client presence) runs the message at once and publishes
//!   what the node returns with `mosquitto_broker_publish_copy` (never the non-copy call with
//!   the event's buffers: a double free). The message is let through (`MOSQ_ERR_SUCCESS`: the
//!   requester gets PUBACK 0x10, which the Azure SDKs accept; a refusal would be 0x87, a
//!   failure to them) with its retain flag cleared.
//! * Each publish goes where the node says ([`To`]): an answer to the client that asked, a
//!   notification to the watching client directly (it gets them without subscribing, as on
//!   the Azure IoT Operations broker), jobs replies, notifications and events to the topic's
//!   subscribers. Topics are checked with `mosquitto_pub_topic_check` (2.0.11 lets wildcards
//!   through).
//! * `MOSQ_EVT_TICK` (about every 100 ms when idle; its time fields are zero in 2.0.x, so the
//!   clock is read here) runs the node's timers: expiry, leases, jobs timeouts and rollouts;
//!   `MOSQ_EVT_DISCONNECT` drops the client's registrations when it is the connection that
//!   made them (a takeover reports the old connection under the same id).
//! * With `plugin_opt_data_dir`, the node's syncs run on a thread of the plugin's own (nothing
//!   may block mosquitto's) and report back at the next callback.
//! * The node's presence (`online {epoch}`, retained) is published on the first tick: mqstore
//!   clients that see a new epoch (mosquitto restarted) register again.
//! * A QoS 2 request sent again before PUBREL (mosquitto hands the plugin every copy) is run
//!   once ([`exactly_once`]).
//! * A `mqstore serve` that serves what the plugin serves beside it (its presence arrives) is
//!   warned about once per start of it ([`Peers`]): each such request would get two answers.
//!
//! No panic crosses into mosquitto: every callback catches it and lets the message through.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;

use bytes::Bytes;
use mqstore_core::commands::Profiles;
use mqstore_core::disk::{Durability, Fsync, Sync};
use mqstore_core::engine::EngineConfig;
use mqstore_core::envelope::{Properties, Publish};
use mqstore_core::presence::{Clash, Peers, ServerPresence, Services, Subscription};
use mqstore_core::server::commands::{Seen, ServiceConfig};
use mqstore_core::server::{JobsConfig, Node, NodeConfig, Route, To, registrations_of};
use mqstore_core::store::Quotas;
use mqstore_core::topics;

mod exactly_once;

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code
)]
mod sys {
    include!(concat!(env!("OUT_DIR"), "/mosquitto.rs"));
}

unsafe extern "C" {
    // What mosquitto_property_read_* copies out is allocated with plain malloc.
    fn free(ptr: *mut c_void);
}

const SUCCESS: c_int = sys::MOSQ_ERR_SUCCESS;

/// The plugin's state: one per `plugin` line.
struct Plugin {
    id: *mut sys::mosquitto_plugin_id_t,
    node: Node,
    /// Client id → the connection (`struct mosquitto *`) that last sent it a request: a
    /// DISCONNECT drops registrations only when it is that connection's.
    connections: HashMap<String, usize>,
    presence: Option<Publish>,
    /// QoS 2 requests run lately, so that a copy is not run again.
    seen_qos2: exactly_once::SeenRequests,
    /// Nodes of `mqstore serve` serving the state store beside the plugin (warned of).
    peers: Peers,
    /// With `plugin_opt_data_dir`: the thread the node's syncs run on.
    syncer: Option<Syncer>,
    /// The data directory's failure was logged.
    failure_logged: bool,
}

/// The node's syncs run on a thread of their own (nothing may block mosquitto's); they report
/// here, read at the next callback.
struct Syncer {
    syncs: std::sync::mpsc::Sender<Sync>,
    synced: std::sync::mpsc::Receiver<std::io::Result<()>>,
}

impl Syncer {
    fn start() -> Result<Syncer, String> {
        let (syncs, to_run) = std::sync::mpsc::channel::<Sync>();
        let (results, synced) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("mqstore-sync".into())
            .spawn(move || {
                for sync in to_run {
                    if results.send(sync.run()).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| format!("cannot start the sync thread: {e}"))?;
        Ok(Syncer { syncs, synced })
    }
}

/// The options of the `plugin_opt_…` lines.
struct Options {
    node_id: String,
    quotas: Quotas,
    access_rules: Vec<mqstore_core::engine::AccessRule>,
    response_topic_prefixes: Vec<String>,
    durability: Option<Durability>,
    fsync: Fsync,
    keyspace_events: bool,
    jobs: bool,
    commands: bool,
    command_profiles: Profiles,
}

fn options(opts: *mut sys::mosquitto_opt, count: c_int) -> Result<Options, String> {
    let mut options = Options {
        node_id: "mosquitto".into(),
        quotas: Quotas::SERVER_DEFAULT,
        access_rules: Vec::new(),
        response_topic_prefixes: Vec::new(),
        durability: None,
        fsync: Fsync::default(),
        keyspace_events: true,
        jobs: true,
        commands: true,
        command_profiles: Profiles::built_in(),
    };
    for i in 0..count.max(0) as usize {
        // SAFETY: mosquitto passes `count` options with NUL-terminated strings.
        let opt = unsafe { &*opts.add(i) };
        let text = |p: *mut c_char| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        let (key, value) = (text(opt.key), text(opt.value));
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("plugin_opt_{key} {value:?}: a whole number"))
        };
        match key.as_str() {
            "node_id" => options.node_id = value,
            "max_keys" => options.quotas.max_keys = Some(number()?),
            "max_bytes" => options.quotas.max_bytes = Some(number()?),
            "max_watches" => options.quotas.max_watches = Some(number()?),
            "max_watches_per_client" => options.quotas.max_watches_per_client = Some(number()?),
            // Repeatable (`plugin_opt_access_rule` lines, in order), as --access-rule.
            "access_rule" => options.access_rules.push(
                value
                    .parse()
                    .map_err(|e| format!("plugin_opt_access_rule: {e}"))?,
            ),
            // Repeatable, as --response-topic-prefix.
            "response_topic_prefix" => options.response_topic_prefixes.push(value),
            "data_dir" => {
                options.durability = Some(Durability {
                    data_dir: value.into(),
                    fsync: options.fsync,
                })
            }
            "fsync" => options.fsync = value.parse()?,
            // As serve's --no-keyspace-events: `plugin_opt_keyspace_events false`.
            "keyspace_events" => options.keyspace_events = boolean(&key, &value)?,
            "jobs" => options.jobs = boolean(&key, &value)?,
            "commands" => options.commands = boolean(&key, &value)?,
            "command_profiles" => {
                let added = std::fs::read_to_string(&value)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        options
                            .command_profiles
                            .add_json(&text)
                            .map_err(|e| e.to_string())
                    });
                added.map_err(|e| format!("plugin_opt_command_profiles {value}: {e}"))?;
            }
            _ => return Err(format!("unknown option plugin_opt_{key}")),
        }
    }
    if let Some(durability) = &mut options.durability {
        durability.fsync = options.fsync;
    }
    Ok(options)
}

fn boolean(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("plugin_opt_{key} {value:?}: true or false")),
    }
}

fn log(level: u32, message: &str) {
    let Ok(message) = CString::new(message.replace('%', "%%")) else {
        return;
    };
    // SAFETY: a format string without conversions.
    unsafe { sys::mosquitto_log_printf(level as c_int, message.as_ptr()) };
}

/// `N` bytes from the operating system's random generator. Without one the plugin does not
/// start: the SCAN token key would be guessable, and anyone could forge a token.
fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).map_err(|e| {
        format!("the operating system's random generator cannot be read ({e}): not starting without a secret SCAN token key")
    })?;
    Ok(bytes)
}

/// A command's id: 16 bytes from the operating system (a failed read, which Linux does not
/// have after boot, falls back to the clock and a counter: ids stay unique).
fn random_id() -> [u8; 16] {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    random_bytes().unwrap_or_else(|_| {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&now_ms().to_le_bytes());
        id[8..].copy_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
        id
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// mosquitto asks which plugin API versions this plugin speaks: 5.
///
/// # Safety
/// Called by mosquitto with `count` versions at `versions`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mosquitto_plugin_version(count: c_int, versions: *const c_int) -> c_int {
    // SAFETY: mosquitto passes `count` versions.
    let offered = (0..count.max(0) as usize).any(|i| unsafe { *versions.add(i) } == 5);
    if offered { 5 } else { -1 }
}

/// Loads the plugin: reads its options, makes the engine, registers the callbacks.
///
/// # Safety
/// Called by mosquitto with its plugin id, a place for the user data and the options.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mosquitto_plugin_init(
    id: *mut sys::mosquitto_plugin_id_t,
    userdata: *mut *mut c_void,
    opts: *mut sys::mosquitto_opt,
    count: c_int,
) -> c_int {
    let started = catch_unwind(AssertUnwindSafe(|| -> Result<Box<Plugin>, String> {
        let mut options = options(opts, count)?;
        let config = EngineConfig {
            scan_token_key: random_bytes()?,
            scan_token_seed: random_bytes()?,
            access: mqstore_core::engine::AccessRules::new(std::mem::take(
                &mut options.access_rules,
            )),
            response_topic_prefixes: std::mem::take(&mut options.response_topic_prefixes),
            keyspace_events: options.keyspace_events,
            ..EngineConfig::new(options.node_id.clone())
        };
        let config = NodeConfig {
            engine: config,
            quotas: options.quotas,
            jobs: options.jobs.then(JobsConfig::default),
            durability: options.durability.clone(),
            commands: options.commands.then(|| ServiceConfig {
                node_id: options.node_id.clone(),
                client_id: format!("{}-commands", options.node_id),
                profiles: std::mem::take(&mut options.command_profiles),
                events: true,
                random_id,
            }),
        };
        let (node, opened) = Node::open(config, now_ms()).map_err(|e| match e {
            mqstore_core::server::NodeError::NodeId(..) => format!("plugin_opt_node_id: {e}"),
            e => e.to_string(),
        })?;
        let syncer = match (&opened, &options.durability) {
            (Some(opened), Some(durability)) => {
                log(
                    sys::MOSQ_LOG_INFO,
                    &format!(
                        "mqstore: the state store on disk in {} ({} keys, fsync {:?})",
                        opened.path.display(),
                        opened.recovered.keys,
                        durability.fsync
                    ),
                );
                Some(Syncer::start()?)
            }
            _ => None,
        };
        let epoch = format!("{:016x}", u64::from_le_bytes(random_bytes()?));
        let services = Services {
            state_store: true,
            jobs: options.jobs,
            commands: options.commands,
        };
        let presence = Publish {
            topic: topics::server_presence_topic(&options.node_id),
            payload: ServerPresence {
                epoch,
                online: true,
                max_packet_size: None,
                registration_lease_ms: None,
                subscription: Some(Subscription::Every),
                services: Some(services),
            }
            .to_bytes(),
            qos: 1,
            properties: Properties::default(),
        };
        Ok(Box::new(Plugin {
            id,
            node,
            connections: HashMap::new(),
            presence: Some(presence),
            seen_qos2: exactly_once::SeenRequests::new(16_384),
            peers: Peers::new(options.node_id.clone(), Subscription::Every, services),
            syncer,
            failure_logged: false,
        }))
    }));
    let plugin = match started {
        Ok(Ok(plugin)) => plugin,
        Ok(Err(error)) => {
            log(sys::MOSQ_LOG_ERR, &format!("mqstore: {error}"));
            return sys::MOSQ_ERR_INVAL;
        }
        Err(_) => return sys::MOSQ_ERR_UNKNOWN,
    };
    let started = format!("mqstore: {} run inside this broker", plugin.peers.serves());
    let raw = Box::into_raw(plugin);
    for (event, callback) in callbacks() {
        // SAFETY: the plugin id is mosquitto's; the user data lives until cleanup.
        let registered = unsafe {
            sys::mosquitto_callback_register(
                id,
                event as c_int,
                Some(callback),
                ptr::null(),
                raw.cast(),
            )
        };
        if registered != SUCCESS {
            log(
                sys::MOSQ_LOG_ERR,
                "mqstore: cannot register the plugin's callbacks",
            );
            // SAFETY: made above, never handed out.
            drop(unsafe { Box::from_raw(raw) });
            return registered;
        }
    }
    // SAFETY: mosquitto hands this back to cleanup.
    unsafe { *userdata = raw.cast() };
    log(sys::MOSQ_LOG_INFO, &started);
    SUCCESS
}

type Callback = unsafe extern "C" fn(c_int, *mut c_void, *mut c_void) -> c_int;

fn callbacks() -> [(u32, Callback); 3] {
    [
        (sys::MOSQ_EVT_MESSAGE, on_message),
        (sys::MOSQ_EVT_TICK, on_tick),
        (sys::MOSQ_EVT_DISCONNECT, on_disconnect),
    ]
}

/// Unloads the plugin.
///
/// # Safety
/// Called by mosquitto with what init stored.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mosquitto_plugin_cleanup(
    userdata: *mut c_void,
    _opts: *mut sys::mosquitto_opt,
    _count: c_int,
) -> c_int {
    if userdata.is_null() {
        return SUCCESS;
    }
    // SAFETY: made by init.
    let mut plugin = unsafe { Box::from_raw(userdata.cast::<Plugin>()) };
    if let Err(error) = plugin.node.close() {
        log(sys::MOSQ_LOG_ERR, &format!("mqstore: {error}"));
    }
    for (event, callback) in callbacks() {
        // SAFETY: registered by init with this id.
        unsafe {
            sys::mosquitto_callback_unregister(
                plugin.id,
                event as c_int,
                Some(callback),
                ptr::null(),
            )
        };
    }
    SUCCESS
}

/// Runs `body` on the plugin, never letting a panic into mosquitto.
fn with_plugin(userdata: *mut c_void, body: impl FnOnce(&mut Plugin)) {
    if userdata.is_null() {
        return;
    }
    let run = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: made by init; mosquitto calls back on its one thread.
        let plugin = unsafe { &mut *userdata.cast::<Plugin>() };
        plugin.poll_synced();
        body(plugin);
    }));
    if run.is_err() {
        log(
            sys::MOSQ_LOG_ERR,
            "mqstore: a panic in the plugin (the message was let through)",
        );
    }
}

unsafe extern "C" fn on_message(_event: c_int, data: *mut c_void, userdata: *mut c_void) -> c_int {
    // SAFETY: mosquitto passes its message event.
    let message = unsafe { &mut *data.cast::<sys::mosquitto_evt_message>() };
    if message.topic.is_null() {
        return SUCCESS;
    }
    // SAFETY: a NUL-terminated topic.
    let topic = unsafe { CStr::from_ptr(message.topic) }.to_string_lossy();
    if topics::node_of_server_presence_topic(&topic).is_some() {
        // SAFETY: `payloadlen` bytes, valid during the callback.
        let payload = match message.payload.is_null() {
            true => &[][..],
            false => unsafe {
                std::slice::from_raw_parts(
                    message.payload.cast::<u8>(),
                    message.payloadlen as usize,
                )
            },
        };
        with_plugin(userdata, |plugin| {
            // The plugin receives every request: any other node serving a service it serves
            // clashes with it (said once per start of that node).
            if let Some(clash) = plugin.peers.seen(&topic, payload) {
                log(sys::MOSQ_LOG_WARNING, &clash_warning(&clash));
            }
        });
        return SUCCESS;
    }
    let Some(sender) = (unsafe { client_id(message.client) }) else {
        return SUCCESS;
    };
    with_plugin(userdata, |plugin| {
        // Every message a plugin sees is live, retained or not (a retained one is news now,
        // not a replay at a subscription).
        let route = plugin.node.route(&topic, false);
        match route {
            Route::Other => return,
            Route::Presence(_) => {}
            // A request (or a device's answer) is not kept for later subscribers.
            _ => message.retain = false,
        }
        if plugin.node.failure().is_some() {
            return; // the data directory failed: nothing more is acknowledged
        }
        let publish = unsafe { read_publish(message, &topic) };
        if publish.qos == 2 && !plugin.seen_qos2.first_time(&sender, &publish) {
            return; // answered already; mosquitto routes the copy nowhere
        }
        if route == Route::StateStore {
            plugin
                .connections
                .insert(sender.clone(), message.client as usize);
        }
        plugin.node.handle(publish, Some(&sender), false, now_ms());
        plugin.send();
    });
    SUCCESS
}

/// How long one tick may run the node's timers (a job's rollout queues a batch of things per
/// turn): requests that arrive meanwhile wait no longer than this, and a rollout still goes on
/// at thousands of things a second when the broker is idle (it ticks about every 100 ms then,
/// and at once when busy).
const TICK_BUDGET: std::time::Duration = std::time::Duration::from_millis(5);

unsafe extern "C" fn on_tick(_event: c_int, _data: *mut c_void, userdata: *mut c_void) -> c_int {
    with_plugin(userdata, |plugin| {
        if let Some(presence) = plugin.presence.take() {
            publish(&presence, None, true);
        }
        let started = std::time::Instant::now();
        while started.elapsed() < TICK_BUDGET {
            let now = now_ms();
            if plugin
                .node
                .next_deadline(now, true)
                .is_none_or(|at| at > now)
            {
                break;
            }
            let ticked = plugin.node.on_deadline(now, true);
            if let Some(error) = ticked.jobs_error {
                log(
                    sys::MOSQ_LOG_WARNING,
                    &format!("mqstore: jobs timers: {error}"),
                );
            }
            plugin.send();
        }
    });
    SUCCESS
}

unsafe extern "C" fn on_disconnect(
    _event: c_int,
    data: *mut c_void,
    userdata: *mut c_void,
) -> c_int {
    // SAFETY: mosquitto passes its disconnect event.
    let event = unsafe { &*data.cast::<sys::mosquitto_evt_disconnect>() };
    let Some(client) = (unsafe { client_id(event.client) }) else {
        return SUCCESS;
    };
    with_plugin(userdata, |plugin| {
        if plugin.connections.get(&client) == Some(&(event.client as usize)) {
            plugin.connections.remove(&client);
            plugin.node.drop_clients(&registrations_of(&client));
        }
    });
    SUCCESS
}

unsafe fn client_id(client: *mut sys::mosquitto) -> Option<String> {
    if client.is_null() {
        return None;
    }
    // SAFETY: mosquitto's connection; the id is NUL-terminated or NULL.
    let id = unsafe { sys::mosquitto_client_id(client) };
    (!id.is_null()).then(|| unsafe { CStr::from_ptr(id) }.to_string_lossy().into_owned())
}

/// The request as the engine takes it: topic, payload and the MQTT 5 properties mosquitto
/// keeps (response topic, correlation data, content type, format indicator, user properties).
unsafe fn read_publish(message: &sys::mosquitto_evt_message, topic: &str) -> Publish {
    let payload = match message.payload.is_null() {
        true => Bytes::new(),
        // SAFETY: `payloadlen` bytes.
        false => Bytes::copy_from_slice(unsafe {
            std::slice::from_raw_parts(message.payload.cast::<u8>(), message.payloadlen as usize)
        }),
    };
    let props = message.properties;
    let mut properties = Properties::default();
    if !props.is_null() {
        // SAFETY: mosquitto's property list; each read copies with malloc, freed here.
        unsafe {
            properties.response_topic = read_string(props, sys::MQTT_PROP_RESPONSE_TOPIC);
            properties.content_type = read_string(props, sys::MQTT_PROP_CONTENT_TYPE);
            let mut data: *mut c_void = ptr::null_mut();
            let mut len: u16 = 0;
            let found = sys::mosquitto_property_read_binary(
                props,
                sys::MQTT_PROP_CORRELATION_DATA as c_int,
                &mut data,
                &mut len,
                false,
            );
            if !found.is_null() && !data.is_null() {
                properties.correlation_data = Some(Bytes::copy_from_slice(
                    std::slice::from_raw_parts(data.cast::<u8>(), len as usize),
                ));
                free(data);
            }
            let mut byte: u8 = 0;
            if !sys::mosquitto_property_read_byte(
                props,
                sys::MQTT_PROP_PAYLOAD_FORMAT_INDICATOR as c_int,
                &mut byte,
                false,
            )
            .is_null()
            {
                properties.payload_format_indicator = Some(byte);
            }
            let mut at = props as *const sys::mosquitto_property;
            let mut skip = false;
            loop {
                let (mut name, mut value): (*mut c_char, *mut c_char) =
                    (ptr::null_mut(), ptr::null_mut());
                at = sys::mosquitto_property_read_string_pair(
                    at,
                    sys::MQTT_PROP_USER_PROPERTY as c_int,
                    &mut name,
                    &mut value,
                    skip,
                );
                if at.is_null() {
                    break;
                }
                skip = true;
                if !name.is_null() && !value.is_null() {
                    properties.user_properties.push((
                        CStr::from_ptr(name).to_string_lossy().into_owned(),
                        CStr::from_ptr(value).to_string_lossy().into_owned(),
                    ));
                }
                free(name.cast());
                free(value.cast());
            }
        }
    }
    Publish {
        topic: topic.to_owned(),
        payload,
        qos: message.qos,
        properties,
    }
}

unsafe fn read_string(props: *const sys::mosquitto_property, id: u32) -> Option<String> {
    let mut value: *mut c_char = ptr::null_mut();
    // SAFETY: a property list; the copy is freed here.
    unsafe {
        let found = sys::mosquitto_property_read_string(props, id as c_int, &mut value, false);
        if found.is_null() || value.is_null() {
            return None;
        }
        let text = CStr::from_ptr(value).to_string_lossy().into_owned();
        free(value.cast());
        Some(text)
    }
}

impl Plugin {
    /// Publishes what the node returned, each where the node says: an answer to the client
    /// that asked and a notification to the client it is for, directly (never to whoever else
    /// subscribes to a response topic: a plugin's publishes skip the broker's write ACL, and a
    /// requester could otherwise make it publish where it may not); jobs replies,
    /// notifications and events, and keyspace events, to their topic's subscribers (topics of
    /// the services' own). Then hands the node's syncs to the sync thread.
    fn send(&mut self) {
        while let Some(out) = self.node.poll_output() {
            let client = match (&out.to, out.to.client_id()) {
                (To::Subscribers, _) => None,
                (_, Some(client)) => Some(client),
                (_, None) => continue, // an answer to a sender mosquitto did not name
            };
            let taken = publish(&out.publish, client, false);
            if let Some(receipt) = &out.receipt {
                // Inside the broker, taking the publish is its acknowledgement.
                let code = if taken { 0 } else { 0x80 };
                self.node.acknowledged(receipt, Some(code), now_ms());
            }
        }
        // What the command service did: the plugin keeps no counters, it logs a failure.
        while let Some(seen) = self.node.poll_commands_seen() {
            if let Seen::Failed(why) = seen {
                log(sys::MOSQ_LOG_WARNING, &format!("mqstore: {why}"));
            }
        }
        if let Some(syncer) = &self.syncer {
            while let Some(sync) = self.node.poll_sync() {
                // The thread ends only with the plugin.
                let _ = syncer.syncs.send(sync);
            }
        }
        if let Some(error) = self.node.failure()
            && !std::mem::replace(&mut self.failure_logged, true)
        {
            log(
                sys::MOSQ_LOG_ERR,
                &format!(
                    "mqstore: the data directory failed, requests are no longer served: {error}"
                ),
            );
        }
    }

    /// Takes the results of the syncs that ended: what waited for them goes out.
    fn poll_synced(&mut self) {
        let Some(syncer) = &self.syncer else {
            return;
        };
        let results: Vec<_> = syncer.synced.try_iter().collect();
        if results.is_empty() {
            return;
        }
        for result in results {
            if let Some(compacted) = self.node.synced(result, now_ms()) {
                log(
                    sys::MOSQ_LOG_INFO,
                    &format!(
                        "mqstore: compacted the data file ({} bytes to {})",
                        compacted.before, compacted.after
                    ),
                );
            }
        }
        self.send();
    }
}

/// Publishes a copy of `message` (to one client, or to the topic's subscribers), with its
/// properties; a topic that is not a valid topic name (a wildcard response topic) is dropped.
/// Whether the broker took it.
fn publish(message: &Publish, client: Option<&str>, retain: bool) -> bool {
    let (Ok(topic), client) = (
        CString::new(message.topic.as_str()),
        client.map(CString::new).transpose(),
    ) else {
        return false;
    };
    let Ok(client) = client else { return false };
    // SAFETY: a NUL-terminated topic.
    if unsafe { sys::mosquitto_pub_topic_check(topic.as_ptr()) } != SUCCESS {
        log(
            sys::MOSQ_LOG_WARNING,
            &format!(
                "mqstore: not publishing to {:?}: not a valid topic name",
                message.topic
            ),
        );
        return false;
    }
    let mut props: *mut sys::mosquitto_property = ptr::null_mut();
    let p = &message.properties;
    // SAFETY: building a property list mosquitto takes over on success.
    unsafe {
        if let Some(data) = &p.correlation_data {
            sys::mosquitto_property_add_binary(
                &mut props,
                sys::MQTT_PROP_CORRELATION_DATA as c_int,
                data.as_ptr().cast(),
                data.len() as u16,
            );
        }
        let mut add_string = |id: u32, text: &str| {
            if let Ok(text) = CString::new(text) {
                sys::mosquitto_property_add_string(&mut props, id as c_int, text.as_ptr());
            }
        };
        if let Some(content_type) = &p.content_type {
            add_string(sys::MQTT_PROP_CONTENT_TYPE, content_type);
        }
        if let Some(topic) = &p.response_topic {
            add_string(sys::MQTT_PROP_RESPONSE_TOPIC, topic);
        }
        if let Some(indicator) = p.payload_format_indicator {
            sys::mosquitto_property_add_byte(
                &mut props,
                sys::MQTT_PROP_PAYLOAD_FORMAT_INDICATOR as c_int,
                indicator,
            );
        }
        if let Some(expiry) = p.message_expiry_interval {
            sys::mosquitto_property_add_int32(
                &mut props,
                sys::MQTT_PROP_MESSAGE_EXPIRY_INTERVAL as c_int,
                expiry,
            );
        }
        for (name, value) in &p.user_properties {
            if let (Ok(name), Ok(value)) =
                (CString::new(name.as_str()), CString::new(value.as_str()))
            {
                sys::mosquitto_property_add_string_pair(
                    &mut props,
                    sys::MQTT_PROP_USER_PROPERTY as c_int,
                    name.as_ptr(),
                    value.as_ptr(),
                );
            }
        }
        let published = sys::mosquitto_broker_publish_copy(
            client.as_ref().map_or(ptr::null(), |c| c.as_ptr()),
            topic.as_ptr(),
            message.payload.len() as c_int,
            message.payload.as_ptr().cast(),
            c_int::from(message.qos),
            retain,
            props,
        );
        if published != SUCCESS {
            sys::mosquitto_property_free_all(&mut props);
        }
        published == SUCCESS
    }
}

/// What the plugin logs about a `mqstore serve` that answers requests it answers: the
/// services, and the flags (or the plugin's options) that leave each to one of them.
fn clash_warning(clash: &Clash) -> String {
    let both = clash.services;
    let flags: Vec<&str> = [
        (both.state_store, "--no-state-store"),
        (both.jobs, "--no-jobs"),
        (both.commands, "--no-commands"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    let options: Vec<&str> = [
        (both.jobs, "plugin_opt_jobs false"),
        (both.commands, "plugin_opt_commands false"),
    ]
    .into_iter()
    .filter_map(|(on, option)| on.then_some(option))
    .collect();
    let here = match options.is_empty() {
        true => String::new(),
        false => format!(" (or set {} here)", options.join(", ")),
    };
    format!(
        "mqstore: `mqstore serve` (node {}) serves {both} beside this plugin, as the plugin \
         does, so each such request gets two answers: run it with {}{here}",
        clash.node,
        flags.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clash_is_told_with_the_flags_that_leave_each_service_to_one() {
        let clash = |services| Clash {
            node: "n1".into(),
            theirs: Some(Subscription::Every),
            services,
        };
        assert_eq!(
            clash_warning(&clash(Services::STATE_STORE)),
            "mqstore: `mqstore serve` (node n1) serves the state store beside this plugin, as \
             the plugin does, so each such request gets two answers: run it with \
             --no-state-store"
        );
        let commands = Services {
            commands: true,
            ..Services::default()
        };
        assert_eq!(
            clash_warning(&clash(commands)),
            "mqstore: `mqstore serve` (node n1) serves commands beside this plugin, as the \
             plugin does, so each such request gets two answers: run it with --no-commands (or \
             set plugin_opt_commands false here)"
        );
        let warning = clash_warning(&clash(Services::ALL));
        assert!(
            warning.ends_with(
                "run it with --no-state-store --no-jobs --no-commands (or set plugin_opt_jobs \
                 false, plugin_opt_commands false here)"
            ),
            "{warning}"
        );
    }
}
