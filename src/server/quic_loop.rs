//! The app server's side of HTTP/3 (`crate::http3`): datagrams read from
//! the worker's UDP sockets and routed to their connections, new QUIC
//! connections admitted into the connection slab, what a connection has to
//! send sent after each drive, and QUIC's timers.

use std::time::Instant;

use pyo3::prelude::*;
use rush_h3::Routed;

use super::app_server::AppServer;
use crate::conn::{Connection, Protocol, Stream, TlsInfo};
use crate::http2::H2Session;
use crate::http3::{Datagram, QuicSide, DATAGRAM_BUDGET_PER_TURN};
use crate::metrics;

/// `NextTurn` keys that stand for a UDP socket with datagrams left unread
/// (socket `i` is `SOCKET_TURN + i`), beyond any slab key.
pub(crate) const SOCKET_TURN: usize = usize::MAX - 1024;

impl AppServer {
    /// Reads the datagrams waiting on UDP socket `index` (at most this
    /// turn's budget; the rest on the next turn), hands each to the router
    /// and its connection, then drives the connections they touched.
    pub(crate) fn quic_readable(&mut self, py: Python<'_>, index: usize) {
        let Some(quic) = self.quic.as_mut() else {
            return;
        };
        let now = self.core.now;
        let mut datagrams: Vec<Datagram> = Vec::new();
        let mut touched: Vec<usize> = Vec::new();
        let mut read = 0;
        loop {
            if read >= DATAGRAM_BUDGET_PER_TURN {
                self.core.next_turn.push(SOCKET_TURN + index);
                break;
            }
            match quic.receive(index, &mut datagrams) {
                Ok(Some(count)) => read += count,
                Ok(None) | Err(_) => break,
            }
            for datagram in &datagrams {
                let QuicSide {
                    router, receive, ..
                } = &mut *quic;
                let data = &receive[datagram.range.clone()];
                let routed = router.handle_datagram(
                    now,
                    datagram.remote,
                    datagram.local_ip,
                    datagram.ecn,
                    data,
                );
                let key = match routed {
                    None => continue,
                    Some(Routed::New(handle, conn)) => {
                        let listener = quic.listeners.get(index).copied().unwrap_or(0);
                        let connection =
                            self.core
                                .quic_connection(conn, datagram.remote, listener, now);
                        let key = self.connections.insert(connection);
                        quic.keys.insert(handle, key);
                        quic.handles.insert(key, (handle, index));
                        metrics::count(metrics::Counter::ConnectionsAccepted, 1);
                        key
                    }
                    Some(Routed::Event(handle, event)) => {
                        let Some(&key) = quic.keys.get(&handle) else {
                            continue;
                        };
                        if let Some(conn) = self.connections.get_mut(key).and_then(quic_conn) {
                            conn.handle_event(event, now);
                        }
                        key
                    }
                };
                if !touched.contains(&key) {
                    touched.push(key);
                }
            }
            quic.send_router_datagrams(index);
        }
        for key in touched {
            self.drive_connection(py, key);
        }
    }

    /// After a QUIC connection was driven: syncs it with the router, sends
    /// what it has, files its next deadline, and closes it once it drained.
    pub(crate) fn quic_after(&mut self, key: usize) {
        let Some(quic) = self.quic.as_mut() else {
            return;
        };
        let Some(&(handle, socket)) = quic.handles.get(&key) else {
            return;
        };
        let Some(conn) = self.connections.get_mut(key).and_then(quic_conn) else {
            return;
        };
        let now = Instant::now().max(self.core.now);
        let drained = quic.router.sync(handle, conn, now);
        quic.send_connection(socket, conn, now);
        let deadline = conn.poll_timeout();
        quic.deadlines.set(key, deadline);
        quic.arm_timer(now);
        if drained {
            // The router forgot it already, and quinn may give its handle
            // to a new connection: it must not be forgotten again.
            quic.keys.remove(&handle);
            quic.handles.remove(&key);
            quic.deadlines.set(key, None);
            self.close_connection(key);
        }
    }

    /// QUIC's timer fired: runs the timers due (loss detection, delayed
    /// acknowledgements, idle and closing timeouts) and drives their
    /// connections.
    pub(crate) fn quic_timers(&mut self, py: Python<'_>) {
        let Some(quic) = self.quic.as_mut() else {
            return;
        };
        quic.clear_timer();
        let now = self.core.now;
        let due = quic.deadlines.due(now);
        for &key in &due {
            if let Some(conn) = self.connections.get_mut(key).and_then(quic_conn) {
                conn.handle_timeout(now);
            }
        }
        for key in due {
            self.drive_connection(py, key);
        }
        if let Some(quic) = self.quic.as_mut() {
            quic.arm_timer(now);
        }
    }
}

/// The QUIC connection under `connection`, if it is one.
fn quic_conn(connection: &mut Connection) -> Option<&mut rush_h3::H3Conn> {
    match &mut connection.protocol {
        Protocol::Http2(session) => session.conn.quic(),
        _ => None,
    }
}

impl crate::dispatch::Core {
    /// The slab entry of a new QUIC connection from `remote`: an encrypted
    /// transport with no socket of its own and an HTTP/3 session, under
    /// the keep-alive timer until its first request (its handshake is
    /// bounded by QUIC's own idle timeout).
    fn quic_connection(
        &self,
        conn: Box<rush_h3::H3Conn>,
        remote: std::net::SocketAddr,
        listener: u16,
        now: Instant,
    ) -> Connection {
        // QUIC is TLS 1.3 only (RFC 9001); quinn-proto does not name the
        // cipher suite it negotiated, so none is claimed.
        let info = TlsInfo {
            version_code: 0x0304,
            version_name: "TLSv1.3",
            cipher_code: 0,
            cipher_name: "",
            client_chain_pem: Vec::new(),
        };
        let mut connection = Connection::new(
            Stream::Quic(Box::new(info)),
            Some(remote),
            listener,
            now,
            &self.config,
        );
        // A PROXY header travels over TCP only.
        connection.awaiting_proxy_header = false;
        connection.protocol_pending = false;
        connection.trusted_proxy = self
            .forwarding
            .as_ref()
            .is_some_and(|forwarding| forwarding.trusts_peer(Some(remote)));
        connection.protocol = Protocol::Http2(Box::new(H2Session::quic(conn)));
        connection.deadline = Some(now + self.config.keep_alive_timeout);
        connection
    }
}
