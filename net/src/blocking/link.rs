//! One MQTT 5 connection over a std socket (plain or TLS), for the blocking client: connected
//! and set up (CONNECT, CONNACK, SUBSCRIBE, SUBACK) in blocking mode, then non-blocking —
//! packets are queued with [`Link::publish`] and [`Link::subscribe`], written by
//! [`Link::flush`] and read by [`Link::receive`], and whoever waits for the connection polls
//! its descriptor ([`Link::fd`]) itself. rumqttc's packet codec is used alone, without its
//! event loop.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use rumqttc::v5::mqttbytes::v5::{
    ConnAck, Connect, ConnectProperties, ConnectReturnCode, Disconnect, DisconnectReasonCode,
    Filter, LastWill, Login, Packet, PingReq, PubAck, Publish as MqttPublish, Subscribe,
    SubscribeReasonCode,
};
use rumqttc::v5::mqttbytes::{Error as PacketError, QoS};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConnection, RootCertStore};

use crate::{BrokerConfig, TlsConfig, connack_code, to_mqtt_properties};
use mqstore_core::client::{CallId, ClientError};
use mqstore_core::envelope::Publish;

/// How much is read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

/// What the client asks of a new connection.
pub(super) struct Hello<'a> {
    pub client_id: &'a str,
    /// The presence Will.
    pub will: LastWill,
    pub filters: Vec<String>,
    pub timeout: Duration,
}

/// A live connection.
pub(super) struct Link {
    socket: TcpStream,
    tls: Option<Box<ClientConnection>>,
    /// Bytes read and not yet decoded.
    incoming: BytesMut,
    /// Encoded packets not yet written (to the socket, or to TLS).
    outgoing: BytesMut,
    /// The largest packet taken from the broker.
    max_incoming: u32,
    /// The largest the broker takes (its CONNACK), or ours.
    pub max_outgoing: u32,
    keep_alive: Duration,
    last_sent: Instant,
    ping_sent: Option<Instant>,
    next_pkid: u16,
    /// QoS 1 publishes sent and not acknowledged: whose call each was.
    unacked: HashMap<u16, Option<CallId>>,
    /// SUBSCRIBEs sent on the live connection and not acknowledged.
    subscribing: HashSet<u16>,
}

/// A packet read: rumqttc's, or a PUBACK read by hand.
#[allow(clippy::large_enum_variant)] // short-lived, never stored: a box would allocate per packet
enum Decoded {
    Packet(Packet),
    /// A PUBACK and its reason code (rumqttc's enum lacks some that brokers send).
    PubAck {
        pkid: u16,
        code: u8,
    },
}

/// What came in, for the client to act on.
pub(super) enum Received {
    Publish(Publish),
    /// A PUBACK with a refusal (0x80 or more) of a call's publish.
    Refused(CallId, u8),
    /// The broker closes the connection, saying why.
    Disconnect(ClientError),
    /// The SUBACK of [`Link::subscribe`]'s packet `pkid`: the first refusal among its codes.
    SubAck {
        pkid: u16,
        refused: Option<SubscribeReasonCode>,
    },
}

impl Link {
    /// Connects to `broker` as `hello` says, and returns once subscribed (or the first
    /// failure, with what the user can do about it).
    pub(super) fn open(broker: &BrokerConfig, hello: Hello<'_>) -> Result<Link, ClientError> {
        let deadline = Instant::now() + hello.timeout;
        let socket = tcp(broker, hello.timeout)?;
        let unreachable = |e: io::Error| ClientError::Unreachable(e.to_string());
        socket.set_nodelay(true).map_err(unreachable)?;
        let tls = match &broker.tls {
            Some(tls) => Some(Box::new(tls_client(tls, &broker.host)?)),
            None => None,
        };
        let mut link = Link {
            socket,
            tls,
            incoming: BytesMut::with_capacity(READ_CHUNK),
            outgoing: BytesMut::with_capacity(READ_CHUNK),
            max_incoming: broker.max_packet_size,
            max_outgoing: broker.max_packet_size,
            keep_alive: broker.keep_alive,
            last_sent: Instant::now(),
            ping_sent: None,
            next_pkid: 0,
            unacked: HashMap::new(),
            subscribing: HashSet::new(),
        };
        link.socket.set_nonblocking(true).map_err(unreachable)?;
        let mut properties = ConnectProperties::new();
        properties.max_packet_size = Some(broker.max_packet_size);
        let connect = Connect {
            keep_alive: broker.keep_alive.as_secs().min(u16::MAX.into()) as u16,
            client_id: hello.client_id.to_owned(),
            clean_start: true,
            properties: Some(properties),
        };
        let login = match (&broker.username, &broker.password) {
            (Some(user), Some(password)) => Some(Login::new(user, password)),
            _ => None,
        };
        link.write_packet(&Packet::Connect(connect, Some(hello.will), login))?;
        let connack = link.wait_for(deadline, "a CONNACK", |packet| match packet {
            Packet::ConnAck(connack) => Some(connack),
            _ => None,
        })?;
        link.accept(connack)?;
        let filters = hello
            .filters
            .into_iter()
            .map(|f| Filter::new(f, QoS::AtLeastOnce));
        let mut subscribe = Subscribe::new_many(filters, None);
        subscribe.pkid = link.packet_id();
        link.write_packet(&Packet::Subscribe(subscribe))?;
        let suback = link.wait_for(deadline, "a SUBACK", |packet| match packet {
            Packet::SubAck(suback) => Some(suback),
            _ => None,
        })?;
        if let Some(code) = refusal(&suback.return_codes) {
            return Err(ClientError::Unreachable(format!(
                "the broker refused the client's subscriptions: {code:?}"
            )));
        }
        Ok(link)
    }

    /// Takes the CONNACK: a refusal fails the connection; the broker's packet limit is kept.
    fn accept(&mut self, connack: ConnAck) -> Result<(), ClientError> {
        if connack.code != ConnectReturnCode::Success {
            return Err(ClientError::Refused {
                code: connack_code(connack.code),
                reason: connack.properties.and_then(|p| p.reason_string),
            });
        }
        if let Some(max) = connack.properties.and_then(|p| p.max_packet_size) {
            self.max_outgoing = self.max_outgoing.min(max);
        }
        Ok(())
    }

    /// Reads until `pick` takes a packet or `deadline` passes (setting up the connection).
    fn wait_for<T>(
        &mut self,
        deadline: Instant,
        what: &str,
        mut pick: impl FnMut(Packet) -> Option<T>,
    ) -> Result<T, ClientError> {
        loop {
            while let Some(decoded) = self.decode()? {
                if let Decoded::Packet(packet) = decoded
                    && let Some(found) = pick(packet)
                {
                    return Ok(found);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(ClientError::Unreachable(format!(
                    "no {what} from the broker in time"
                )));
            }
            self.wait(deadline - now)?;
            self.fill()?;
        }
    }

    /// Waits until the socket can be read (or written, while something waits to be) or
    /// `timeout` passes: only while setting up.
    fn wait(&mut self, timeout: Duration) -> Result<(), ClientError> {
        self.flush()?;
        super::poll::wait(&[(self.fd(), self.wants_write())], Some(timeout))
            .map(drop)
            .map_err(|e| ClientError::Unreachable(e.to_string()))
    }

    /// The socket's descriptor, to poll.
    pub(super) fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Whether bytes wait to be written (poll for writability too).
    pub(super) fn wants_write(&self) -> bool {
        !self.outgoing.is_empty() || self.tls.as_ref().is_some_and(|tls| tls.wants_write())
    }

    /// A fresh packet id, not used by a publish or a SUBSCRIBE still unacknowledged.
    fn packet_id(&mut self) -> u16 {
        loop {
            self.next_pkid = self.next_pkid.wrapping_add(1).max(1);
            if !self.unacked.contains_key(&self.next_pkid)
                && !self.subscribing.contains(&self.next_pkid)
            {
                return self.next_pkid;
            }
        }
    }

    /// Subscribes to `filters` on the live connection: the packet id its
    /// [`Received::SubAck`] will carry.
    pub(super) fn subscribe(&mut self, filters: Vec<String>) -> Result<u16, ClientError> {
        let filters = filters
            .into_iter()
            .map(|f| Filter::new(f, QoS::AtLeastOnce));
        let mut subscribe = Subscribe::new_many(filters, None);
        let pkid = self.packet_id();
        subscribe.pkid = pkid;
        self.subscribing.insert(pkid);
        self.write_packet(&Packet::Subscribe(subscribe))?;
        Ok(pkid)
    }

    /// Queues `publish` (of `call`, whose call a refusal fails) and writes what it can.
    pub(super) fn publish(
        &mut self,
        publish: Publish,
        call: Option<CallId>,
    ) -> Result<(), ClientError> {
        let qos = match publish.qos {
            0 => QoS::AtMostOnce,
            _ => QoS::AtLeastOnce,
        };
        let mut packet = MqttPublish::new(publish.topic, qos, publish.payload, None);
        packet.properties = Some(to_mqtt_properties(publish.properties));
        if qos == QoS::AtLeastOnce {
            packet.pkid = self.packet_id();
            self.unacked.insert(packet.pkid, call);
        }
        self.write_packet(&Packet::Publish(packet))
    }

    /// Queues `packet` and writes what the socket takes now.
    fn write_packet(&mut self, packet: &Packet) -> Result<(), ClientError> {
        self.queue_packet(packet)?;
        self.flush()
    }

    /// Queues `packet` to be written by the next [`Link::flush`] (acknowledgements of what was
    /// read: one write for all of them).
    fn queue_packet(&mut self, packet: &Packet) -> Result<(), ClientError> {
        packet
            .write(&mut self.outgoing, Some(self.max_outgoing))
            .map_err(|e| match e {
                PacketError::OutgoingPacketTooLarge { pkt_size, max } => ClientError::Malformed(
                    format!("a packet of {pkt_size} bytes is larger than the broker takes ({max})"),
                ),
                e => ClientError::Malformed(e.to_string()),
            })?;
        self.last_sent = Instant::now();
        Ok(())
    }

    /// Writes what waits, as far as the socket takes it now.
    pub(super) fn flush(&mut self) -> Result<(), ClientError> {
        let lost = |e: io::Error| ClientError::Unreachable(format!("the connection failed: {e}"));
        match &mut self.tls {
            None => {
                while !self.outgoing.is_empty() {
                    match self.socket.write(&self.outgoing) {
                        Ok(0) => return Err(lost(io::ErrorKind::WriteZero.into())),
                        Ok(n) => drop(self.outgoing.split_to(n)),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(lost(e)),
                    }
                }
            }
            Some(tls) => loop {
                // rustls takes plaintext up to its buffer limit; the rest waits here.
                if !self.outgoing.is_empty() {
                    let taken = tls.writer().write(&self.outgoing).map_err(lost)?;
                    drop(self.outgoing.split_to(taken));
                }
                if !tls.wants_write() {
                    break;
                }
                match tls.write_tls(&mut self.socket) {
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(lost(e)),
                }
            },
        }
        Ok(())
    }

    /// Reads what the socket has now into the buffer of bytes to decode.
    fn fill(&mut self) -> Result<(), ClientError> {
        let lost = |e: io::Error| ClientError::Unreachable(format!("the connection failed: {e}"));
        let closed = || ClientError::Unreachable("the broker closed the connection".into());
        loop {
            match &mut self.tls {
                None => {
                    let start = self.incoming.len();
                    self.incoming.resize(start + READ_CHUNK, 0);
                    let read = self.socket.read(&mut self.incoming[start..]);
                    self.incoming.truncate(start + *read.as_ref().unwrap_or(&0));
                    match read {
                        Ok(0) => return Err(closed()),
                        Ok(n) if n < READ_CHUNK => return Ok(()),
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(lost(e)),
                    }
                }
                Some(tls) => {
                    match tls.read_tls(&mut self.socket) {
                        Ok(0) => return Err(closed()),
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            // The handshake may have something to say back.
                            return self.flush();
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(lost(e)),
                    }
                    let state = tls.process_new_packets().map_err(|e| {
                        ClientError::Unreachable(format!("TLS with the broker failed: {e}"))
                    })?;
                    let plain = state.plaintext_bytes_to_read();
                    if plain > 0 {
                        let start = self.incoming.len();
                        self.incoming.resize(start + plain, 0);
                        tls.reader()
                            .read_exact(&mut self.incoming[start..])
                            .map_err(lost)?;
                    }
                }
            }
        }
    }

    /// The next whole packet read, if one is.
    fn decode(&mut self) -> Result<Option<Decoded>, ClientError> {
        if self.incoming.is_empty() {
            return Ok(None);
        }
        // A PUBACK with a one-byte length is read by hand (packet id, reason code): rumqttc
        // fails on a reason code it does not know (mosquitto 2.0's 0x95, packet too large),
        // after taking the packet's bytes.
        if let [0x40, length @ 2..0x80, ..] = self.incoming[..] {
            let whole = 2 + length as usize;
            if self.incoming.len() < whole {
                return Ok(None);
            }
            let ack = self.incoming.split_to(whole);
            return Ok(Some(Decoded::PubAck {
                pkid: u16::from_be_bytes([ack[2], ack[3]]),
                code: if length > 2 { ack[4] } else { 0 },
            }));
        }
        match Packet::read(&mut self.incoming, Some(self.max_incoming)) {
            Ok(Packet::PubAck(ack)) => Ok(Some(Decoded::PubAck {
                pkid: ack.pkid,
                code: crate::puback_code(ack.reason),
            })),
            Ok(packet) => Ok(Some(Decoded::Packet(packet))),
            Err(PacketError::InsufficientBytes(_)) => Ok(None),
            Err(e) => Err(ClientError::Protocol(format!(
                "the broker sent a malformed packet ({e})"
            ))),
        }
    }

    /// Reads what arrived and hands each publish, refusal and disconnect to `on`; answers
    /// QoS 1 publishes and pings. An error is the connection's end.
    pub(super) fn receive(&mut self, mut on: impl FnMut(Received)) -> Result<(), ClientError> {
        self.fill()?;
        while let Some(decoded) = self.decode()? {
            let packet = match decoded {
                Decoded::PubAck { pkid, code } => {
                    if let Some(Some(call)) = self.unacked.remove(&pkid)
                        && code >= 0x80
                    {
                        on(Received::Refused(call, code));
                    }
                    continue;
                }
                Decoded::Packet(packet) => packet,
            };
            match packet {
                Packet::Publish(publish) => {
                    if publish.qos != QoS::AtMostOnce {
                        self.queue_packet(&Packet::PubAck(PubAck::new(publish.pkid, None)))?;
                    }
                    on(Received::Publish(crate::from_mqtt(publish)));
                }
                Packet::PingResp(_) => self.ping_sent = None,
                Packet::SubAck(suback) if self.subscribing.remove(&suback.pkid) => {
                    on(Received::SubAck {
                        pkid: suback.pkid,
                        refused: refusal(&suback.return_codes).cloned(),
                    })
                }
                Packet::Disconnect(disconnect) => {
                    on(Received::Disconnect(ClientError::BrokerDisconnected {
                        code: disconnect.reason_code as u8,
                        reason: disconnect.properties.and_then(|p| p.reason_string),
                    }))
                }
                _ => {}
            }
        }
        self.flush()
    }

    /// When keep-alive needs the connection next ([`Link::keep_alive`]).
    pub(super) fn keep_alive_deadline(&self) -> Instant {
        match self.ping_sent {
            Some(sent) => sent + self.keep_alive,
            None => self.last_sent + self.keep_alive,
        }
    }

    /// Sends a PINGREQ when nothing was sent for the keep-alive interval; fails when the
    /// last one had no answer within it.
    pub(super) fn keep_alive(&mut self, now: Instant) -> Result<(), ClientError> {
        if self.keep_alive.is_zero() || now < self.keep_alive_deadline() {
            return Ok(());
        }
        if self.ping_sent.is_some() {
            return Err(ClientError::Unreachable(
                "the broker did not answer a PINGREQ within the keep-alive interval".into(),
            ));
        }
        self.write_packet(&Packet::PingReq(PingReq))?;
        self.ping_sent = Some(now);
        Ok(())
    }

    /// Sends a DISCONNECT (normal: no Will) and waits up to `grace` for it to be written and
    /// the broker to close the connection.
    pub(super) fn disconnect(mut self, grace: Duration) {
        let deadline = Instant::now() + grace;
        let disconnect = Disconnect::new(DisconnectReasonCode::NormalDisconnection);
        if self.write_packet(&Packet::Disconnect(disconnect)).is_err() {
            return;
        }
        if let Some(tls) = &mut self.tls {
            tls.send_close_notify();
        }
        // Closing first, with the broker's packets unread, would reset the connection, and the
        // broker could lose the DISCONNECT and publish the Will.
        while Instant::now() < deadline {
            if self.flush().is_err() {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if super::poll::wait(&[(self.fd(), self.wants_write())], Some(left)).is_err() {
                return;
            }
            if self.receive(drop).is_err() {
                return;
            }
        }
    }
}

/// The first refusal among a SUBACK's reason codes.
fn refusal(codes: &[SubscribeReasonCode]) -> Option<&SubscribeReasonCode> {
    codes
        .iter()
        .find(|c| !matches!(c, SubscribeReasonCode::Success(_)))
}

/// A TCP connection to the broker, trying each of its addresses within `timeout`.
fn tcp(broker: &BrokerConfig, timeout: Duration) -> Result<TcpStream, ClientError> {
    let addresses = (broker.host.as_str(), broker.port)
        .to_socket_addrs()
        .map_err(|e| ClientError::Unreachable(format!("cannot resolve {}: {e}", broker.host)))?;
    let mut last = None;
    for address in addresses {
        match TcpStream::connect_timeout(&address, timeout) {
            Ok(socket) => return Ok(socket),
            Err(e) => last = Some(e),
        }
    }
    Err(ClientError::Unreachable(match last {
        Some(e) => format!("{}:{}: {e}", broker.host, broker.port),
        None => format!("{} has no address", broker.host),
    }))
}

/// A TLS client for `host` that trusts `tls`'s authorities (and presents its certificate).
fn tls_client(tls: &TlsConfig, host: &str) -> Result<ClientConnection, ClientError> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        ClientError::Unreachable(format!("TLS settings: {what}: {e}"))
    };
    // rustls needs a process-wide crypto provider; installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&tls.ca_pem) {
        let cert = cert.map_err(|e| bad("the CA file", &e))?;
        roots.add(cert).map_err(|e| bad("the CA file", &e))?;
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match &tls.client_auth {
        None => builder.with_no_client_auth(),
        Some((chain, key)) => {
            let chain = CertificateDer::pem_slice_iter(chain)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| bad("the client certificate", &e))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| bad("the client key", &e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| bad("the client certificate", &e))?
        }
    };
    let name = ServerName::try_from(host.to_owned()).map_err(|e| bad("the broker's name", &e))?;
    ClientConnection::new(Arc::new(config), name).map_err(|e| bad("TLS", &e))
}
