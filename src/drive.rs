//! Driving one connection under its protocol: the one place where the
//! protocol of a connection is matched.
//!
//! A connection's protocol is chosen once, when it is accepted or on its
//! first bytes (HTTP/1.1 or HTTP/2, `crate::http2::Core::pick_protocol`),
//! and changes at most once more, after an upgrade (a WebSocket
//! session): it is `conn::Protocol`, and this `match` picks the driver
//! that serves it. A driver that switched the protocol mid-drive returns
//! `Disposition::Upgraded`, and the connection is driven on at once under
//! the new one, so no driver calls another.
//!
//! Before the first protocol, with `--proxy-protocol`, a connection's PROXY
//! header is read here (`Core::read_proxy_header`): no protocol and no
//! transport (TLS included) reads a byte before it is consumed.
//!
//! After a drive, a request whose producer waits on the response's water
//! marks (an ASGI `send()`, see `InFlight::needs_pacing`) is paced; every
//! other connection skips that, and the worker's output budget is brought
//! up to date.

use std::os::fd::AsRawFd;

use pyo3::prelude::*;

use crate::conn::{Connection, Disposition, Protocol};
use crate::dispatch::Core;
use crate::inflight::{InFlight, PeerObjects};
use crate::metrics;
use crate::proxy_protocol::{self, Source};

impl Core {
    /// Drives `connection` (slab key `key`) until it would block, closes,
    /// or waits for its app. Never returns `Disposition::Upgraded`.
    pub(crate) fn drive_protocol(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) -> Disposition {
        if connection.awaiting_proxy_header {
            if let Some(disposition) = self.read_proxy_header(py, connection) {
                return disposition;
            }
        }
        let disposition = loop {
            let disposition = match connection.protocol {
                Protocol::Http1 => self.drive(py, connection, key),
                Protocol::WebSocket(_) => self.drive_websocket(py, connection, key),
                Protocol::Http2(ref session) if session.conn.is_quic() => {
                    self.drive_http3(py, connection, key)
                }
                Protocol::Http2(_) => self.drive_http2(py, connection, key),
            };
            if disposition != Disposition::Upgraded {
                break disposition;
            }
        };
        if disposition == Disposition::Open
            && connection
                .request
                .in_flight
                .as_ref()
                .is_some_and(InFlight::needs_pacing)
        {
            self.pace_request(py, connection);
        }
        self.account_output(connection);
        disposition
    }

    /// Reads the connection's PROXY header (`--proxy-protocol`): the
    /// client it names becomes the connection's peer. Returns what the
    /// drive does now, or `None` to go on to the protocol. A peer not in
    /// `--forwarded-allow-ips`, a malformed header or none is refused: the
    /// connection closes without an answer (a PROXY-speaking balancer
    /// would not understand one, and a client that sent none must learn
    /// nothing), with a refusal line and a count in the metrics.
    fn read_proxy_header(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
    ) -> Option<Disposition> {
        let trusted = match (&self.config.proxy_protocol, connection.client) {
            (None, _) => {
                connection.awaiting_proxy_header = false;
                return None;
            }
            (Some(trusted), Some(peer)) => trusted.trusts(peer.ip()),
            // A Unix-socket peer: trusted, as for proxy headers.
            (Some(_), None) => true,
        };
        if !trusted {
            self.refuse_proxy_header(
                py,
                connection,
                "a PROXY protocol connection from a peer not in --forwarded-allow-ips",
            );
            return Some(Disposition::Close);
        }
        let read = proxy_protocol::read_header(
            connection.stream.as_raw_fd(),
            connection.peer_sent_fin || connection.peer_closed,
        );
        match read {
            Ok(proxy_protocol::Read::Waiting) => Some(Disposition::Open),
            // Gone before a byte (a port probe): nothing to refuse.
            Ok(proxy_protocol::Read::Closed) | Err(_) => Some(Disposition::Close),
            Ok(proxy_protocol::Read::Refused(why)) => {
                self.refuse_proxy_header(py, connection, &format!("PROXY protocol: {why}"));
                Some(Disposition::Close)
            }
            Ok(proxy_protocol::Read::Done { source, info }) => {
                match source {
                    Source::Peer => {}
                    Source::Address(address) => connection.client = Some(address),
                    Source::Unix => connection.client = None,
                }
                connection.awaiting_proxy_header = false;
                connection.proxy_info = info;
                connection.peer_objects = PeerObjects::default();
                // Proxy headers are believed from the client the header
                // names (an L7 proxy behind the balancer), not from the
                // balancer: each hop must be trusted.
                connection.trusted_proxy = self
                    .forwarding
                    .as_ref()
                    .is_some_and(|forwarding| forwarding.trusts_peer(connection.client));
                if !connection.stream.is_tls() {
                    // The first request may now wait as long as any.
                    connection.deadline = Some(self.now + self.config.keep_alive_timeout);
                }
                None
            }
        }
    }

    /// Logs (as any refusal) and counts a connection refused for its
    /// PROXY header; the caller closes it.
    pub(crate) fn refuse_proxy_header(
        &mut self,
        py: Python<'_>,
        connection: &Connection,
        what: &str,
    ) {
        metrics::count(metrics::Counter::ProxyHeaderRefused, 1);
        self.log_refusal(py, connection, what);
    }
}
