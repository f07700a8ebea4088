//! [`rush_h3::H3Router`] driven as the server drives it: the test owns each
//! [`rush_h3::H3Conn`] in a map of its own, routes datagrams through the
//! router and calls `sync` after everything, with a raw quinn-proto client
//! and a virtual clock (tests/support has the certificate and the client).

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use rush_h3::quic::QuicConnection;
use rush_h3::quinn_proto::{ConnectionError, DatagramEvent, Endpoint, EndpointConfig};
use rush_h3::{Code, ConnId, Event, H3Conn, H3Router, Routed};
use support::{client_config, settings, tls_configs, CLIENT, SERVER};

/// Bound on loop turns in any one wait.
const MAX_TURNS: usize = 10_000;

struct Server {
    router: H3Router,
    conns: HashMap<ConnId, H3Conn>,
    /// How often `sync` reported each connection drained.
    drained: HashMap<ConnId, usize>,
    /// Events of every connection, the drained ones' last ones included.
    events: Vec<(ConnId, Event)>,
}

impl Server {
    fn sync(&mut self, id: ConnId, now: Instant) {
        let conn = self.conns.get_mut(&id).unwrap();
        let drained = self.router.sync(id, conn, now);
        while let Some(e) = conn.poll_event() {
            self.events.push((id, e));
        }
        if drained {
            *self.drained.entry(id).or_default() += 1;
            self.conns.remove(&id);
        }
    }
}

struct Wire {
    now: Instant,
    server: Server,
    client: Endpoint,
    quic: QuicConnection,
    client_handle: rush_h3::quinn_proto::ConnectionHandle,
    server_addr: SocketAddr,
    client_addr: SocketAddr,
}

impl Wire {
    fn new() -> Wire {
        let (server_tls, client_tls) = tls_configs(0);
        let now = Instant::now();
        let server_addr: SocketAddr = SERVER.parse().unwrap();
        let mut client = Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
        let (client_handle, conn) = client
            .connect(now, client_config(client_tls), server_addr, "localhost")
            .unwrap();
        Wire {
            now,
            server: Server {
                router: H3Router::new(server_tls, settings()).unwrap(),
                conns: HashMap::new(),
                drained: HashMap::new(),
                events: Vec::new(),
            },
            client,
            quic: QuicConnection::new(conn, now),
            client_handle,
            server_addr,
            client_addr: CLIENT.parse().unwrap(),
        }
    }

    /// One datagram from the client, as the server loop takes it.
    fn deliver_to_server(&mut self, data: &[u8]) {
        let now = self.now;
        let s = &mut self.server;
        match s
            .router
            .handle_datagram(now, self.client_addr, None, None, data)
        {
            None => {}
            Some(Routed::New(id, conn)) => {
                assert_eq!(conn.remote_address(), self.client_addr);
                s.conns.insert(id, *conn);
                s.sync(id, now);
            }
            Some(Routed::Event(id, event)) => {
                if let Some(conn) = s.conns.get_mut(&id) {
                    conn.handle_event(event, now);
                    s.sync(id, now);
                }
            }
        }
    }

    fn deliver_to_client(&mut self, data: &[u8]) {
        let mut buf = Vec::new();
        let event = self.client.handle(
            self.now,
            self.server_addr,
            None,
            None,
            BytesMut::from(data),
            &mut buf,
        );
        if let Some(DatagramEvent::ConnectionEvent(_, ev)) = event {
            self.quic.handle_event(ev, self.now);
        }
    }

    /// Datagrams both ways until none is left; whether any moved.
    fn turn(&mut self) -> bool {
        let mut moved = false;
        while let Some(ev) = self.quic.poll_endpoint_event() {
            if let Some(reply) = self.client.handle_event(self.client_handle, ev) {
                self.quic.handle_event(reply, self.now);
            }
        }
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let t = self
                .quic
                .0
                .borrow_mut()
                .conn
                .poll_transmit(self.now, 1, &mut buf);
            let Some(t) = t else { break };
            moved = true;
            let data = buf[..t.size].to_vec();
            self.deliver_to_server(&data);
        }
        let mut out = Vec::new();
        while let Some(t) = self.server.router.poll_transmit(&mut buf) {
            out.push(buf[..t.size].to_vec());
        }
        let ids: Vec<ConnId> = self.server.conns.keys().copied().collect();
        for id in ids {
            let conn = self.server.conns.get_mut(&id).unwrap();
            while let Some(t) = conn.poll_transmit(self.now, &mut buf, 1) {
                out.push(buf[..t.size].to_vec());
            }
        }
        for data in out {
            moved = true;
            self.deliver_to_client(&data);
        }
        moved
    }

    /// Turns, moving the clock to the next timer when nothing is in
    /// flight, until `done` holds.
    fn run_until(&mut self, mut done: impl FnMut(&mut Wire) -> bool) {
        for _ in 0..MAX_TURNS {
            if done(self) {
                return;
            }
            if self.turn() {
                continue;
            }
            let server = self.server.conns.values().filter_map(|c| c.poll_timeout());
            let Some(next) = server.chain(self.quic.poll_timeout()).min() else {
                panic!("nothing left to happen and the condition never held");
            };
            self.now = self.now.max(next);
            if self.quic.poll_timeout().is_some_and(|t| t <= self.now) {
                self.quic.handle_timeout(self.now);
            }
            let due: Vec<ConnId> = self
                .server
                .conns
                .iter()
                .filter(|(_, c)| c.poll_timeout().is_some_and(|t| t <= self.now))
                .map(|(id, _)| *id)
                .collect();
            for id in due {
                self.server
                    .conns
                    .get_mut(&id)
                    .unwrap()
                    .handle_timeout(self.now);
                self.server.sync(id, self.now);
            }
        }
        panic!("the condition never held within {MAX_TURNS} turns");
    }
}

#[test]
fn sync_reports_a_drained_connection_once_and_the_router_forgets_it() {
    let mut w = Wire::new();
    w.run_until(|w| w.quic.is_connected() && w.server.conns.values().all(|c| !c.is_handshaking()));
    assert_eq!(w.server.router.connections(), 1);
    let id = *w.server.conns.keys().next().unwrap();

    // The client closes; the server drains (three PTOs) and is done.
    {
        let mut q = w.quic.0.borrow_mut();
        let now = w.now;
        let code = rush_h3::quinn_proto::VarInt::from_u64(Code::H3_NO_ERROR.value()).unwrap();
        q.conn.close(now, code, bytes::Bytes::new());
    }
    w.run_until(|w| w.server.conns.get(&id).is_some_and(|c| c.is_closed()));
    assert_eq!(w.server.router.connections(), 1, "draining, not drained");
    assert!(w.server.drained.is_empty());
    w.run_until(|w| w.server.drained.contains_key(&id));
    assert_eq!(w.server.drained[&id], 1);
    assert_eq!(w.server.router.connections(), 0);
    let closed: Vec<_> = w
        .server
        .events
        .iter()
        .filter(|(_, e)| matches!(e, Event::Closed { .. }))
        .collect();
    assert_eq!(closed.len(), 1, "{:?}", w.server.events);
    assert!(
        matches!(
            closed[0].1,
            Event::Closed {
                code: None,
                error: None
            }
        ),
        "a client's H3_NO_ERROR is a clean close: {:?}",
        closed[0].1
    );
}

#[test]
fn a_connection_forgotten_before_it_drained_is_reset_on_its_next_packet() {
    let mut w = Wire::new();
    w.run_until(|w| w.quic.is_connected() && w.server.conns.values().all(|c| !c.is_handshaking()));
    let id = *w.server.conns.keys().next().unwrap();
    // The server drops it (a worker stopping at once) and tells the router.
    w.server.conns.remove(&id);
    w.server.router.forget(id);
    w.server.router.forget(id); // twice is harmless
    assert_eq!(w.server.router.connections(), 0);
    // The client's next packet is for a connection id the router no longer
    // routes: it answers with a stateless reset, which ends the client.
    w.quic.0.borrow_mut().conn.ping();
    w.run_until(|w| w.quic.lost().is_some());
    assert!(
        matches!(w.quic.lost(), Some(ConnectionError::Reset)),
        "{:?}",
        w.quic.lost()
    );
}

#[test]
fn a_router_that_refuses_new_connections_takes_none_and_the_client_learns_it() {
    let mut w = Wire::new();
    w.server.router.refuse_new();
    w.run_until(|w| w.quic.lost().is_some());
    assert!(
        matches!(w.quic.lost(), Some(ConnectionError::ConnectionClosed(_))),
        "refused with CONNECTION_CLOSE, not left to time out: {:?}",
        w.quic.lost()
    );
    assert!(w.server.conns.is_empty());
    assert_eq!(w.server.router.connections(), 0);
    assert_eq!(w.server.router.stats().refused, 1);
}
