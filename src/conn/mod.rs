//! One client connection: its transport, its buffers, and where it stands.
//!
//! Where it stands is a [`ConnState`] (`state.rs`): a read state and a
//! write state, changed only through its event methods, each state naming
//! the timer that applies to it. The request being answered (its running
//! handler or streamed body, its origin, its clock) is an opaque
//! [`RequestUnit`] kept here for the interfaces. Buffers are per
//! connection but stay small: `input` holds only bytes not yet consumed
//! (usually a partial request or nothing), `output` only bytes the kernel
//! has not taken yet.

mod sink;
pub mod state;
mod tls_stream;
mod transport;

use std::net::SocketAddr;
use std::time::Instant;

use crate::inflight::{PeerObjects, RequestUnit};
use crate::options::{LoopConfig, LINGER_TIMEOUT};

pub(crate) use sink::{BodyFraming, ResponseSink};
pub(crate) use state::{BodyProgress, ConnState, PendingBody, ReadState, Timer, WriteState};
pub(crate) use tls_stream::{HandshakeGate, TlsInfo, TlsStream};
pub(crate) use transport::Stream;

/// Whether a connection survives a drive.
#[derive(PartialEq, Eq)]
pub(crate) enum Disposition {
    Open,
    Close,
    /// The protocol switched during the drive (`protocol` says to what):
    /// drive on under the new one.
    Upgraded,
}

/// The protocol a connection speaks. A connection starts with HTTP/1.1 and
/// may switch on the same transport after an upgrade (a WebSocket session,
/// a CONNECT relay: each a variant here, driven by its own module): setting
/// `protocol` hands over the transport, the unread `input` and the unsent
/// output as they are. It is matched in one place, `crate::drive`.
pub enum Protocol {
    /// Requests and responses (`crate::http1`), its state in `Connection::state`.
    Http1,
    /// A WebSocket session after an accepted upgrade (`crate::ws`).
    WebSocket(Box<crate::ws::session::WsSession>),
    /// HTTP/2 (`crate::http2`): many requests at once, one per stream.
    Http2(Box<crate::http2::session::H2Session>),
}

impl Protocol {
    /// Response bytes the protocol holds beside the output buffer: an
    /// HTTP/2 connection's stream queues, waiting for the peer's windows.
    pub fn queued_output(&self) -> usize {
        match self {
            Protocol::Http2(session) => session.conn.pending_send_total(),
            _ => 0,
        }
    }
}

pub struct Connection {
    /// The transport: a TCP or Unix socket, or TLS over TCP.
    pub stream: Stream,
    /// The protocol on the transport.
    pub protocol: Protocol,
    pub client: Option<SocketAddr>,
    /// The client's address as Python objects, made once when needed.
    pub peer_objects: PeerObjects,
    /// Received bytes not consumed yet.
    pub input: Vec<u8>,
    /// What the connection owes the client (see [`sink`]).
    pub sink: ResponseSink,
    /// What the connection is reading and writing (see [`state`]).
    pub state: ConnState,
    /// The request this connection is answering (HTTP/1.1 answers one at
    /// a time): its Python side in flight, its origin, its clock.
    pub request: RequestUnit,
    /// When the state's timer ([`ConnState::timer`]) runs out, if one applies.
    pub deadline: Option<Instant>,
    /// The peer closed its side (read returned 0).
    pub peer_closed: bool,
    /// epoll reported the peer's FIN (EPOLLRDHUP); reads go on until EOF.
    pub peer_sent_fin: bool,
    /// The peer is a trusted proxy: its forwarding headers are read.
    pub trusted_proxy: bool,
    /// HTTP/1.1 or HTTP/2 is decided on the first bytes (`--http 2` or
    /// `auto`; see `Core::pick_protocol`).
    pub protocol_pending: bool,
    /// The index of the listener it was accepted from (see
    /// `ResponseWriter::listener`).
    pub listener: u16,
    /// `--proxy-protocol`: the PROXY header has not been read yet; no
    /// transport has read a byte (see `Core::read_proxy_header`).
    pub awaiting_proxy_header: bool,
    /// What the PROXY header said beside the client's address (its TLVs),
    /// for the app.
    pub proxy_info: Option<Box<crate::proxy_protocol::ProxyInfo>>,
}

impl Connection {
    pub fn new(
        stream: Stream,
        client: Option<SocketAddr>,
        listener: u16,
        now: Instant,
        config: &LoopConfig,
    ) -> Self {
        let awaiting_proxy_header = config.proxy_protocol.is_some();
        // The header is part of the first request's head: the header
        // timeout applies from accept.
        let first_timeout = if awaiting_proxy_header {
            config.header_timeout
        } else {
            config.keep_alive_timeout
        };
        Connection {
            stream,
            protocol: Protocol::Http1,
            client,
            peer_objects: PeerObjects::default(),
            input: Vec::new(),
            sink: ResponseSink::default(),
            state: ConnState::default(),
            request: RequestUnit::new(now),
            deadline: Some(now + first_timeout),
            peer_closed: false,
            peer_sent_fin: false,
            trusted_proxy: false,
            protocol_pending: config.http != crate::options::HttpMode::Http1,
            listener,
            awaiting_proxy_header,
            proxy_info: None,
        }
    }

    /// Whether buffered input may be turned into requests now.
    pub fn can_process(&self) -> bool {
        self.sink.body.is_none() && self.state.can_process()
    }

    /// Starts `timer` (or none): the deadline the sweep checks while no
    /// output is pending.
    pub fn start_timer(&mut self, timer: Option<Timer>, now: Instant, config: &LoopConfig) {
        self.deadline = timer.map(|timer| {
            now + match timer {
                Timer::KeepAlive => config.keep_alive_timeout,
                Timer::Header => config.header_timeout,
                Timer::Body => config.body_timeout,
                Timer::Linger => LINGER_TIMEOUT,
            }
        });
    }

    /// After a read of `count` bytes into a buffer of `capacity`: whether
    /// the socket may hold more, so the drive reads again rather than wait
    /// for an edge. A full read may have left more; with the peer's FIN
    /// already signalled, read on to see the EOF; a TLS read that comes
    /// back short may still leave records in the socket (rustls reads the
    /// socket in pieces of its own size: a large upload sent in one burst
    /// once stalled until --body-timeout), so read on unless the socket
    /// itself came back short.
    pub fn may_have_more_input(&self, count: usize, capacity: usize) -> bool {
        count == capacity
            || self.peer_sent_fin
            || self.stream.tls().is_some_and(|tls| tls.may_have_input())
    }

    /// Whether anything is still to be written (TLS records included).
    pub fn has_pending_output(&self) -> bool {
        self.sink.has_pending() || self.stream.wants_write()
    }

    /// Writes what the sink holds into the transport, as far as it goes.
    pub fn write_output(&mut self) -> std::io::Result<()> {
        self.sink.write_to(&mut self.stream)?;
        self.stream.flush_records()
    }

    /// After a write attempt: see [`ResponseSink::track_progress`].
    pub fn track_write_progress(&mut self, now: Instant, send_timeout: std::time::Duration) {
        let transport_pending = self.stream.wants_write();
        self.sink
            .track_progress(now, send_timeout, transport_pending);
    }
}

impl Drop for Connection {
    /// A connection closed while its response is still being produced: the
    /// app is told (see [`crate::inflight::InFlight::client_gone`]).
    fn drop(&mut self) {
        if let Some(in_flight) = &self.request.in_flight {
            in_flight.client_gone();
        }
    }
}
