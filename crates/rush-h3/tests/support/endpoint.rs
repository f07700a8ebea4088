//! A convenience endpoint: [`H3Router`] and a map of its connections.
//!
//! [`H3Endpoint`] owns what a server keeps apart (the router, and each
//! [`H3Conn`] in a slab entry of its own): one object that takes datagrams
//! and gives datagrams, events keyed by connection and deadlines, with
//! commands addressed by [`ConnId`]. The crate's in-memory tests drive it;
//! rush's server drives the router and the connections itself.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use quinn_proto::EcnCodepoint;

use rush_h3::{
    ConfigError, ConnId, EndpointStats, Event, H3Conn, H3Error, H3Router, H3Settings, Routed,
    Transmit,
};

/// A QUIC + HTTP/3 server endpoint without I/O: see the module docs.
pub struct H3Endpoint {
    router: H3Router,
    conns: HashMap<ConnId, H3Conn>,
    /// Connections that may have something to send, in turn.
    dirty: VecDeque<ConnId>,
    dirty_set: HashSet<ConnId>,
    /// Connections that may have events, in turn: events wait in their
    /// connection until taken, so [`H3Conn::hold_requests`] sees them.
    ready: VecDeque<ConnId>,
    ready_set: HashSet<ConnId>,
    /// The last events of connections already drained and dropped.
    leftover: VecDeque<(ConnId, Event)>,
    max_segments: usize,
}

impl H3Endpoint {
    /// A server endpoint with the certificates of `tls` (see
    /// [`H3Router::new`]).
    pub fn new(
        tls: Arc<rustls::ServerConfig>,
        settings: H3Settings,
    ) -> Result<H3Endpoint, ConfigError> {
        let max_segments = settings.max_gso_segments.max(1);
        Ok(H3Endpoint {
            router: H3Router::new(tls, settings)?,
            conns: HashMap::new(),
            dirty: VecDeque::new(),
            dirty_set: HashSet::new(),
            ready: VecDeque::new(),
            ready_set: HashSet::new(),
            leftover: VecDeque::new(),
            max_segments,
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
        match self
            .router
            .handle_datagram(now, remote, local_ip, ecn, data)
        {
            None => {}
            Some(Routed::New(ch, conn)) => {
                self.conns.insert(ch, *conn);
                self.after(ch, now);
            }
            Some(Routed::Event(ch, event)) => {
                if let Some(c) = self.conns.get_mut(&ch) {
                    c.handle_event(event, now);
                    self.after(ch, now);
                }
            }
        }
    }

    /// After anything happened to a connection: syncs it with the router,
    /// and forgets it (keeping its last events) once it is drained.
    fn after(&mut self, ch: ConnId, now: Instant) {
        let Some(c) = self.conns.get_mut(&ch) else {
            return;
        };
        if self.router.sync(ch, c, now) {
            while let Some(e) = c.poll_event() {
                self.leftover.push_back((ch, e));
            }
            self.conns.remove(&ch);
            return;
        }
        if self.dirty_set.insert(ch) {
            self.dirty.push_back(ch);
        }
        if self.ready_set.insert(ch) {
            self.ready.push_back(ch);
        }
    }

    /// The next datagram to send, written into `buf` (cleared first; keep
    /// one buffer for every call). With `segment_size`, `buf` holds several
    /// datagrams of that size for one GSO send.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(t) = self.router.poll_transmit(buf) {
            return Some(t);
        }
        while let Some(&ch) = self.dirty.front() {
            self.dirty.pop_front();
            let Some(c) = self.conns.get_mut(&ch) else {
                self.dirty_set.remove(&ch);
                continue;
            };
            let t = c.poll_transmit(now, buf, self.max_segments);
            // An abrupt shutdown closes the connection here: Closed follows.
            if self.ready_set.insert(ch) {
                self.ready.push_back(ch);
            }
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
        self.conns.values().filter_map(|c| c.poll_timeout()).min()
    }

    /// Runs every connection timer due at `now` (loss detection, idle
    /// timeout, the end of closing and draining).
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.poll_timeout().is_some_and(|t| t <= now))
            .map(|(ch, _)| *ch)
            .collect();
        for ch in due {
            if let Some(c) = self.conns.get_mut(&ch) {
                c.handle_timeout(now);
                self.after(ch, now);
            }
        }
    }

    /// The next event of any connection.
    pub fn poll_event(&mut self) -> Option<(ConnId, Event)> {
        if let Some(e) = self.leftover.pop_front() {
            return Some(e);
        }
        while let Some(&ch) = self.ready.front() {
            if let Some(e) = self.conns.get_mut(&ch).and_then(|c| c.poll_event()) {
                return Some((ch, e));
            }
            self.ready.pop_front();
            self.ready_set.remove(&ch);
        }
        None
    }

    /// Runs `f` on connection `ch`, then syncs it.
    pub fn command<T>(
        &mut self,
        ch: ConnId,
        f: impl FnOnce(&mut H3Conn) -> Result<T, H3Error>,
    ) -> Result<T, H3Error> {
        let c = self.conns.get_mut(&ch).ok_or(H3Error::UnknownStream)?;
        let now = c.now();
        let result = f(c);
        self.after(ch, now);
        result
    }

    /// The connections held.
    pub fn conn_ids(&self) -> impl Iterator<Item = ConnId> + '_ {
        self.conns.keys().copied()
    }

    /// Connection `ch`, if the endpoint holds it.
    pub fn conn(&self, ch: ConnId) -> Option<&H3Conn> {
        self.conns.get(&ch)
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
        let status = StatusCode::from_u16(status).map_err(|_| H3Error::BadStatus)?;
        let mut head = Response::new(());
        *head.status_mut() = status;
        *head.headers_mut() = headers;
        self.command(ch, |c| c.send_response(stream, head, end))
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
    /// (RESET_STREAM and STOP_SENDING); unknown streams are ignored, an
    /// unknown connection is [`H3Error::UnknownStream`].
    pub fn reset(&mut self, ch: ConnId, stream: u64, code: u64) -> Result<(), H3Error> {
        self.command(ch, |c| {
            c.reset(stream, code.into());
            Ok(())
        })
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
        self.conns.get(&ch).map_or(0, |c| c.pending_send_total())
    }

    /// Streams of `ch` with an exchange in progress.
    pub fn open_streams(&self, ch: ConnId) -> usize {
        self.conns.get(&ch).map_or(0, |c| c.open_streams())
    }

    /// Connections held (handshaking, open, closing or draining).
    pub fn connections(&self) -> usize {
        self.router.connections()
    }

    /// What the endpoint did on its own so far.
    pub fn stats(&self) -> EndpointStats {
        self.router.stats()
    }
}
