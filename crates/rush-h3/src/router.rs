//! The router: quinn-proto's endpoint, admission, and the datagrams of no
//! connection.
//!
//! [`H3Router`] owns quinn-proto's [`Endpoint`] (connection ids, Initial
//! packets, Retry, stateless resets, version negotiation); the server owns
//! the connections ([`H3Conn`]), one per entry of its slab, as it owns its
//! HTTP/2 connections. The loop gives the router each datagram read from the
//! UDP socket: a datagram of a known connection comes back as
//! [`Routed::Event`] for the server to hand to that connection, a new
//! accepted connection as [`Routed::New`]; after anything happened to a
//! connection the server calls [`H3Router::sync`], which passes quinn's
//! endpoint events both ways (new connection ids, retirements, the end of a
//! connection) and says when the connection is drained and can be dropped.
//! The router's own datagrams come from [`H3Router::poll_transmit`]. Nothing
//! here reads a clock: every call takes `now`.
//!
//! Admission, in order: past [`H3Settings::max_connections`] a new client
//! is refused; past [`H3Settings::retry_above_unvalidated`] handshakes from
//! unproven addresses, a client that has not proved its address gets a
//! stateless Retry and holds no state here until it comes back with the
//! token; otherwise it is accepted. Until an address is validated quinn-proto
//! sends it at most three times what it received from it (RFC 9000 section
//! 8), so a spoofed Initial cannot make this endpoint a reflector.

use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::{
    ConnectionHandle, DatagramEvent, EcnCodepoint, Endpoint, EndpointConfig, EndpointEvent,
    HashedConnectionIdGenerator, IdleTimeout, Incoming, ServerConfig, TransportConfig, VarInt,
};
use ring::{hkdf, hmac};

pub use quinn_proto::Transmit;

use crate::connection::{ConnEvent, H3Conn};
use crate::messages::Event;
use crate::quic::QuicConnection;
use crate::settings::{EndpointSecret, H3Settings};

/// One connection of a router.
pub type ConnId = ConnectionHandle;

/// Counters of what the router did on its own.
#[derive(Debug, Default, Clone, Copy)]
pub struct EndpointStats {
    /// Retry packets sent (clients asked to prove their address).
    pub retries: u64,
    /// New connections refused (over [`H3Settings::max_connections`]).
    pub refused: u64,
    /// Connections accepted.
    pub accepted: u64,
}

/// What a datagram was for, when the server has something to do.
// `Event` is a datagram's event, about 220 bytes: boxing it would cost an
// allocation per datagram to save a move of the enum, once per datagram.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Routed {
    /// A new connection was accepted: keep it (it was synced already).
    New(ConnId, Box<H3Conn>),
    /// A packet of connection `ConnId`: give it to its
    /// [`H3Conn::handle_event`], then call [`H3Router::sync`]. A
    /// connection the server no longer has may be ignored.
    Event(ConnId, ConnEvent),
}

/// quinn-proto's endpoint and the admission of new connections: see the
/// module docs.
pub struct H3Router {
    endpoint: Endpoint,
    settings: H3Settings,
    /// Connections accepted and not yet drained or forgotten.
    live: HashSet<ConnId>,
    /// Connections handshaking with an address not yet validated.
    unvalidated: HashSet<ConnId>,
    /// Datagrams of the router itself (Retry, refusals, version
    /// negotiation, stateless resets).
    responses: VecDeque<(Transmit, Vec<u8>)>,
    stats: EndpointStats,
    /// A draining server takes no new connection (see [`H3Router::refuse_new`]).
    refusing: bool,
}

/// The keys a shared secret gives: stateless resets, Retry tokens and the
/// connection-id check, each from its own HKDF extraction so none reveals
/// another.
struct SharedKeys {
    reset: hmac::Key,
    token: hkdf::Prk,
    /// quinn's connection ids carry a keyed hash: an endpoint drops short
    /// packets whose id it did not make (and so would never reset them)
    /// unless it shares this key.
    cid: u64,
}

/// An HKDF output length (ring asks for a type).
struct Len(usize);

impl hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn derive_keys(secret: &EndpointSecret) -> SharedKeys {
    let extract = |label: &[u8]| hkdf::Salt::new(hkdf::HKDF_SHA256, label).extract(&secret.0);
    // Output lengths of 32 and 8 bytes are far below HKDF-SHA256's
    // 8,160-byte bound: these expansions cannot fail.
    let reset = extract(b"rush-h3 stateless reset")
        .expand(&[b"reset key"], hmac::HMAC_SHA256)
        .map(hmac::Key::from)
        .expect("a valid HKDF length");
    let mut cid = [0u8; 8];
    extract(b"rush-h3 connection id")
        .expand(&[b"cid key"], Len(8))
        .and_then(|okm| okm.fill(&mut cid))
        .expect("a valid HKDF length");
    SharedKeys {
        reset,
        token: extract(b"rush-h3 retry token"),
        cid: u64::from_le_bytes(cid),
    }
}

/// The TLS configuration could not serve QUIC (it lacks TLS 1.3 or its
/// initial cipher suite).
#[derive(Debug)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QUIC TLS configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl H3Router {
    /// A server router with the certificates of `tls` (the same
    /// configuration TCP TLS uses: it is copied with ALPN `h3` and without
    /// early data, so 0-RTT is off).
    pub fn new(
        tls: Arc<rustls::ServerConfig>,
        settings: H3Settings,
    ) -> Result<H3Router, ConfigError> {
        let mut tls = (*tls).clone();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        // 0-RTT data can be replayed; quinn accepts it only when this is
        // u32::MAX.
        tls.max_early_data_size = 0;
        let crypto = QuicServerConfig::try_from(tls).map_err(|e| ConfigError(e.to_string()))?;
        let mut transport = TransportConfig::default();
        transport
            .max_concurrent_bidi_streams(VarInt::from_u32(settings.max_concurrent_bidi_streams))
            .max_concurrent_uni_streams(VarInt::from_u32(settings.max_concurrent_uni_streams))
            .max_idle_timeout(Some(
                IdleTimeout::try_from(settings.idle_timeout)
                    .map_err(|e| ConfigError(e.to_string()))?,
            ))
            .stream_receive_window(VarInt::from_u32(settings.stream_receive_window))
            .receive_window(VarInt::from_u32(settings.receive_window))
            .send_window(settings.send_window)
            .initial_rtt(settings.initial_rtt)
            .crypto_buffer_size(settings.crypto_buffer_size)
            // No DATAGRAM frames (RFC 9221): rush serves none, and quinn
            // would otherwise keep up to 1.25 MB of them per connection
            // for an application that never reads them.
            .datagram_receive_buffer_size(None)
            .enable_segmentation_offload(settings.max_gso_segments > 1);
        let (endpoint_config, mut server) = match &settings.secret {
            Some(secret) => {
                let keys = derive_keys(secret);
                let mut config = EndpointConfig::new(Arc::new(keys.reset));
                let cid = keys.cid;
                config.cid_generator(move || Box::new(HashedConnectionIdGenerator::from_key(cid)));
                (
                    config,
                    ServerConfig::new(Arc::new(crypto), Arc::new(keys.token)),
                )
            }
            None => (
                EndpointConfig::default(),
                ServerConfig::with_crypto(Arc::new(crypto)),
            ),
        };
        server.transport_config(Arc::new(transport));
        server.max_incoming(settings.max_connections.max(1));
        let endpoint = Endpoint::new(
            Arc::new(endpoint_config),
            Some(Arc::new(server)),
            // Only where the socket never fragments (see the setting).
            settings.path_mtu_discovery,
            None,
        );
        Ok(H3Router {
            endpoint,
            settings,
            live: HashSet::new(),
            refusing: false,
            unvalidated: HashSet::new(),
            responses: VecDeque::new(),
            stats: EndpointStats::default(),
        })
    }

    /// Takes one datagram read from the socket (`local_ip`: the address it
    /// was sent to, when the socket reports it); tells what the server must
    /// do with it, if anything.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        data: &[u8],
    ) -> Option<Routed> {
        // quinn decrypts in place and takes the datagram by value: one
        // allocation of its size each. Reusing one buffer saved 0.05 of
        // the 68 allocations per request of the in-memory benchmark
        // (several requests share a datagram) and would let a datagram
        // that carried unread stream data, which quinn keeps as slices of
        // it, hold a larger buffer than its own: not worth it
        // (docs/architecture.md, "HTTP/3 (foundation)").
        let datagram = BytesMut::from(data);
        // Written only for a response of the router's own (no allocation
        // otherwise).
        let mut buf = Vec::new();
        let event = self
            .endpoint
            .handle(now, remote, local_ip, ecn, datagram, &mut buf);
        match event? {
            DatagramEvent::ConnectionEvent(ch, event) => Some(Routed::Event(
                ch,
                ConnEvent {
                    event,
                    len: data.len(),
                },
            )),
            DatagramEvent::NewConnection(incoming) => self.incoming(now, incoming),
            DatagramEvent::Response(t) => {
                buf.truncate(t.size);
                self.responses.push_back((t, buf));
                None
            }
        }
    }

    fn incoming(&mut self, now: Instant, incoming: Incoming) -> Option<Routed> {
        let mut buf = Vec::new();
        if self.refusing || self.live.len() >= self.settings.max_connections {
            let t = self.endpoint.refuse(incoming, &mut buf);
            self.stats.refused += 1;
            buf.truncate(t.size);
            self.responses.push_back((t, buf));
            return None;
        }
        let validated = incoming.remote_address_validated();
        if !validated && self.unvalidated.len() >= self.settings.retry_above_unvalidated {
            match self.endpoint.retry(incoming, &mut buf) {
                Ok(t) => {
                    self.stats.retries += 1;
                    buf.truncate(t.size);
                    self.responses.push_back((t, buf));
                }
                Err(e) => self.endpoint.ignore(e.into_incoming()),
            }
            return None;
        }
        match self.endpoint.accept(incoming, now, &mut buf, None) {
            Ok((ch, conn)) => {
                self.stats.accepted += 1;
                self.live.insert(ch);
                let quic = QuicConnection::new(conn, now);
                let mut conn = Box::new(H3Conn::new(quic, self.settings.clone()));
                if !validated {
                    self.unvalidated.insert(ch);
                }
                // A connection just accepted cannot be drained yet.
                self.sync(ch, &mut conn, now);
                Some(Routed::New(ch, conn))
            }
            Err(e) => {
                if let Some(t) = e.response {
                    buf.truncate(t.size);
                    self.responses.push_back((t, buf));
                }
                None
            }
        }
    }

    /// The router's own datagrams (Retry, refusals, version negotiation,
    /// stateless resets), written into `buf` (cleared first); call until
    /// `None`.
    pub fn poll_transmit(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        let (t, data) = self.responses.pop_front()?;
        buf.extend_from_slice(&data);
        Some(t)
    }

    /// After anything happened to `conn` (a datagram, a timeout, commands):
    /// runs its HTTP/3 layer, exchanges quinn's endpoint events both ways,
    /// and tells whether the connection is drained. Then the router has
    /// already forgotten it: take its last events
    /// ([`H3Conn::poll_event`], an [`Event::Closed`] among them) and drop
    /// it.
    pub fn sync(&mut self, id: ConnId, conn: &mut H3Conn, now: Instant) -> bool {
        if !self.live.contains(&id) {
            return true;
        }
        conn.drive();
        let mut drained = false;
        let mut replied = false;
        while let Some(event) = conn.quic.poll_endpoint_event() {
            drained |= event.is_drained();
            if let Some(reply) = self.endpoint.handle_event(id, event) {
                conn.quic.handle_event(reply, now);
                replied = true;
            }
        }
        // Events from the replies (new connection ids) may matter to h3.
        if replied {
            conn.drive();
        }
        if !conn.is_handshaking() {
            self.unvalidated.remove(&id);
        }
        if drained {
            if !conn.closed {
                conn.closed = true;
                conn.events.push_back(Event::Closed {
                    code: None,
                    error: Some("connection drained".into()),
                });
            }
            self.live.remove(&id);
            self.unvalidated.remove(&id);
        }
        drained
    }

    /// Forgets a connection the server drops before it drained (a worker
    /// stopping at once): its connection ids stop routing to it, and later
    /// packets for it get stateless resets. Unknown ids are ignored. Only
    /// for a connection the server still holds: quinn reuses the ids of
    /// drained connections.
    pub fn forget(&mut self, id: ConnId) {
        if self.live.remove(&id) {
            self.unvalidated.remove(&id);
            self.endpoint.handle_event(id, EndpointEvent::drained());
        }
    }

    /// Connections held (handshaking, open, closing or draining).
    /// From now on every new client is refused (CONNECTION_REFUSED, as past
    /// [`H3Settings::max_connections`]): a worker that drains for a stop or
    /// a reload finishes its connections and takes none, so the client
    /// tries again and reaches a worker that serves.
    pub fn refuse_new(&mut self) {
        self.refusing = true;
    }

    /// Connections accepted and not yet drained or forgotten.
    pub fn connections(&self) -> usize {
        self.live.len()
    }

    /// What the router did on its own so far.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// The settings it was made with.
    pub fn settings(&self) -> &H3Settings {
        &self.settings
    }
}
