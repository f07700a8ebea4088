//! The server endpoint: datagrams in, datagrams, events and deadlines out.
//!
//! [`H3Endpoint`] owns quinn-proto's [`Endpoint`] (connection ids, Initial
//! packets, Retry, stateless resets, version negotiation) and every
//! connection it accepted, each with its HTTP/3 layer
//! ([`crate::connection`]). The server loop gives it each datagram read from
//! the UDP socket, sends what [`H3Endpoint::poll_transmit`] gives until it
//! gives nothing, arms a timer for [`H3Endpoint::poll_timeout`] and calls
//! [`H3Endpoint::handle_timeout`] when it fires, and answers the
//! [`Event`]s with commands. Nothing here reads a clock: every call takes
//! `now`.
//!
//! Admission, in order: past [`H3Settings::max_connections`] a new client
//! is refused; past [`H3Settings::retry_above_unvalidated`] handshakes from
//! unproven addresses, a client that has not proved its address gets a
//! stateless Retry and holds no state here until it comes back with the
//! token; otherwise it is accepted. Until an address is validated quinn-proto
//! sends it at most three times what it received from it (RFC 9000 section
//! 8), so a spoofed Initial cannot make this endpoint a reflector.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::{
    ConnectionHandle, DatagramEvent, EcnCodepoint, Endpoint, EndpointConfig,
    HashedConnectionIdGenerator, IdleTimeout, Incoming, ServerConfig, TransportConfig, VarInt,
};
use ring::{hkdf, hmac};

pub use quinn_proto::Transmit;

use crate::connection::H3Connection;
use crate::messages::{Event, H3Error};
use crate::quic::QuicConnection;
use crate::settings::{EndpointSecret, H3Settings};

/// One connection of an endpoint.
pub type ConnId = ConnectionHandle;

/// Counters of what the endpoint did on its own.
#[derive(Debug, Default, Clone, Copy)]
pub struct EndpointStats {
    /// Retry packets sent (clients asked to prove their address).
    pub retries: u64,
    /// New connections refused (over [`H3Settings::max_connections`]).
    pub refused: u64,
    /// Connections accepted.
    pub accepted: u64,
}

/// A QUIC + HTTP/3 server endpoint without I/O: see the module docs.
pub struct H3Endpoint {
    endpoint: Endpoint,
    settings: H3Settings,
    conns: HashMap<ConnId, H3Connection>,
    /// Connections handshaking with an address not yet validated.
    unvalidated: HashSet<ConnId>,
    /// Datagrams of the endpoint itself (Retry, refusals, version
    /// negotiation, stateless resets), sent before the connections'.
    responses: VecDeque<(Transmit, Vec<u8>)>,
    /// Connections that may have something to send, in turn.
    dirty: VecDeque<ConnId>,
    dirty_set: HashSet<ConnId>,
    events: VecDeque<(ConnId, Event)>,
    stats: EndpointStats,
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

impl H3Endpoint {
    /// A server endpoint with the certificates of `tls` (the same
    /// configuration TCP TLS uses: it is copied with ALPN `h3` and without
    /// early data, so 0-RTT is off).
    pub fn new(
        tls: Arc<rustls::ServerConfig>,
        settings: H3Settings,
    ) -> Result<H3Endpoint, ConfigError> {
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
            // Path MTU discovery needs the socket's don't-fragment option,
            // which the loop sets when it wires this in.
            false,
            None,
        );
        Ok(H3Endpoint {
            endpoint,
            settings,
            conns: HashMap::new(),
            unvalidated: HashSet::new(),
            responses: VecDeque::new(),
            dirty: VecDeque::new(),
            dirty_set: HashSet::new(),
            events: VecDeque::new(),
            stats: EndpointStats::default(),
        })
    }

    /// Takes one datagram read from the socket (`local_ip`: the address it
    /// was sent to, when the socket reports it).
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        local_ip: Option<IpAddr>,
        ecn: Option<EcnCodepoint>,
        data: &[u8],
    ) {
        let mut buf = Vec::new();
        let event =
            self.endpoint
                .handle(now, remote, local_ip, ecn, BytesMut::from(data), &mut buf);
        match event {
            None => {}
            Some(DatagramEvent::ConnectionEvent(ch, event)) => {
                if let Some(c) = self.conns.get(&ch) {
                    c.quic.handle_event(event, now);
                    self.after(ch, now);
                }
            }
            Some(DatagramEvent::NewConnection(incoming)) => self.incoming(now, incoming),
            Some(DatagramEvent::Response(t)) => {
                buf.truncate(t.size);
                self.responses.push_back((t, buf));
            }
        }
    }

    fn incoming(&mut self, now: Instant, incoming: Incoming) {
        let mut buf = Vec::new();
        if self.conns.len() >= self.settings.max_connections {
            let t = self.endpoint.refuse(incoming, &mut buf);
            self.stats.refused += 1;
            buf.truncate(t.size);
            self.responses.push_back((t, buf));
            return;
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
            return;
        }
        match self.endpoint.accept(incoming, now, &mut buf, None) {
            Ok((ch, conn)) => {
                self.stats.accepted += 1;
                let quic = QuicConnection::new(conn, now);
                self.conns
                    .insert(ch, H3Connection::new(quic, self.settings.clone()));
                if !validated {
                    self.unvalidated.insert(ch);
                }
                self.after(ch, now);
            }
            Err(e) => {
                if let Some(t) = e.response {
                    buf.truncate(t.size);
                    self.responses.push_back((t, buf));
                }
            }
        }
    }

    /// After anything happened to a connection: runs its HTTP/3 layer,
    /// passes its endpoint events on, collects its events, and forgets it
    /// once it is drained.
    fn after(&mut self, ch: ConnId, now: Instant) {
        let Some(c) = self.conns.get_mut(&ch) else {
            return;
        };
        c.drive();
        let mut drained = false;
        while let Some(event) = c.quic.poll_endpoint_event() {
            drained |= event.is_drained();
            if let Some(reply) = self.endpoint.handle_event(ch, event) {
                c.quic.handle_event(reply, now);
            }
        }
        // Events from the replies (new connection ids) may matter to h3.
        c.drive();
        if !c.quic.0.borrow().conn.is_handshaking() {
            self.unvalidated.remove(&ch);
        }
        self.events.extend(c.events.drain(..).map(|e| (ch, e)));
        if drained {
            if !c.closed {
                self.events.push_back((
                    ch,
                    Event::Closed {
                        code: None,
                        error: Some("connection drained".into()),
                    },
                ));
            }
            self.conns.remove(&ch);
            self.unvalidated.remove(&ch);
        } else if self.dirty_set.insert(ch) {
            self.dirty.push_back(ch);
        }
    }

    /// The next datagram to send, written into `buf` (cleared first; keep
    /// one buffer for every call). With `segment_size`, `buf` holds several
    /// datagrams of that size for one GSO send.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        if let Some((t, data)) = self.responses.pop_front() {
            buf.extend_from_slice(&data);
            return Some(t);
        }
        let segments = self.settings.max_gso_segments.max(1);
        while let Some(&ch) = self.dirty.front() {
            self.dirty.pop_front();
            let Some(c) = self.conns.get(&ch) else {
                self.dirty_set.remove(&ch);
                continue;
            };
            let t = c.quic.0.borrow_mut().conn.poll_transmit(now, segments, buf);
            match t {
                Some(t) => {
                    // It may have more; the others get their turn first.
                    self.dirty.push_back(ch);
                    return Some(t);
                }
                None => {
                    self.dirty_set.remove(&ch);
                }
            }
        }
        None
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|c| c.quic.poll_timeout())
            .min()
    }

    /// Runs every connection timer due at `now` (loss detection, idle
    /// timeout, the end of closing and draining).
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.quic.poll_timeout().is_some_and(|t| t <= now))
            .map(|(ch, _)| *ch)
            .collect();
        for ch in due {
            if let Some(c) = self.conns.get(&ch) {
                c.quic.handle_timeout(now);
                self.after(ch, now);
            }
        }
    }

    /// The next event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnId, Event)> {
        self.events.pop_front()
    }

    fn command<T>(
        &mut self,
        ch: ConnId,
        f: impl FnOnce(&mut H3Connection) -> Result<T, H3Error>,
    ) -> Result<T, H3Error> {
        let c = self.conns.get_mut(&ch).ok_or(H3Error::UnknownStream)?;
        let now = c.quic.0.borrow().now;
        let result = f(c);
        self.after(ch, now);
        result
    }

    /// Sends the response head on `stream`; `end` if no body follows.
    pub fn send_response(
        &mut self,
        ch: ConnId,
        stream: u64,
        status: u16,
        headers: HeaderMap,
        end: bool,
    ) -> Result<(), H3Error> {
        self.command(ch, |c| c.send_response(stream, status, headers, end))
    }

    /// Queues response body data on `stream`; `end` ends the response.
    pub fn send_data(
        &mut self,
        ch: ConnId,
        stream: u64,
        data: Bytes,
        end: bool,
    ) -> Result<(), H3Error> {
        self.command(ch, |c| c.send_data(stream, data, end))
    }

    /// Ends the response on `stream` with trailers.
    pub fn send_trailers(
        &mut self,
        ch: ConnId,
        stream: u64,
        trailers: HeaderMap,
    ) -> Result<(), H3Error> {
        self.command(ch, |c| c.send_trailers(stream, trailers))
    }

    /// Abandons `stream` in both directions with an HTTP/3 error code
    /// (RESET_STREAM and STOP_SENDING).
    pub fn reset(&mut self, ch: ConnId, stream: u64, code: u64) -> Result<(), H3Error> {
        self.command(ch, |c| c.reset(stream, code))
    }

    /// The application consumed `n` bytes of `stream`'s request body.
    pub fn release(&mut self, ch: ConnId, stream: u64, n: usize) {
        let _ = self.command(ch, |c| {
            c.release(stream, n);
            Ok(())
        });
    }

    /// Sends GOAWAY; requests already admitted complete, later ones are
    /// refused, and once the last is answered the connection closes with
    /// H3_NO_ERROR.
    pub fn graceful_shutdown(&mut self, ch: ConnId) {
        let _ = self.command(ch, |c| {
            c.graceful_shutdown();
            Ok(())
        });
    }

    /// [`graceful_shutdown`](Self::graceful_shutdown) for every connection
    /// (a graceful stop or reload of the worker).
    pub fn graceful_shutdown_all(&mut self) {
        let all: Vec<ConnId> = self.conns.keys().copied().collect();
        for ch in all {
            self.graceful_shutdown(ch);
        }
    }

    /// Response bytes queued on `ch` and not yet taken by QUIC.
    pub fn pending_send(&self, ch: ConnId) -> usize {
        self.conns.get(&ch).map_or(0, |c| c.pending_send())
    }

    /// Streams of `ch` with an exchange in progress.
    pub fn open_streams(&self, ch: ConnId) -> usize {
        self.conns.get(&ch).map_or(0, |c| c.open_streams())
    }

    /// Connections held (handshaking, open, closing or draining).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// What the endpoint did on its own so far.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }
}
