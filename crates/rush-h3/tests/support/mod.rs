//! An in-memory network for the tests: rush-h3's server endpoint and a
//! quinn-proto client endpoint exchanging datagrams in a loop, with a
//! virtual clock and `h3`'s client driven over the crate's QUIC adapter.
//! No sockets, no threads, no sleeps: time moves only when nothing is in
//! flight, straight to the next timer.

#![allow(dead_code)]

mod endpoint;

pub use endpoint::H3Endpoint;

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use rush_h3::quic::QuicConnection;
use rush_h3::quinn_proto::{
    self, ClientConfig, ConnectionHandle, DatagramEvent, Endpoint, EndpointConfig,
};
use rush_h3::{ConnId, Event, H3Settings, HeaderMap};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

pub const SERVER: &str = "127.0.0.1:4433";
pub const CLIENT: &str = "127.0.0.1:50000";

/// Bound on loop turns in any one wait.
const MAX_TURNS: usize = 200_000;

type Task = Pin<Box<dyn Future<Output = ()>>>;

pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A self-signed certificate for `localhost` and its TLS configurations.
/// `extra_names` grows the certificate (one subject name each), to make
/// the server's first flight larger than three Initial packets.
pub fn tls_configs(extra_names: usize) -> (Arc<rustls::ServerConfig>, rustls::ClientConfig) {
    let mut names = vec!["localhost".to_string()];
    names.extend((0..extra_names).map(|i| format!("host-{i}.padding.example")));
    let certified = rcgen::generate_simple_self_signed(names).expect("certificate");
    let cert: CertificateDer<'static> = certified.cert.der().clone();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
        certified.signing_key.serialize_der(),
    ));
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let mut client = rustls::ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"h3".to_vec()];
    (Arc::new(server), client)
}

pub fn client_config(tls: rustls::ClientConfig) -> ClientConfig {
    let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    ClientConfig::new(Arc::new(crypto))
}

/// Polls futures with a no-op waker (the test's client side).
#[derive(Default)]
pub struct Tasks(Vec<Task>);

impl Tasks {
    pub fn spawn(&mut self, f: impl Future<Output = ()> + 'static) {
        self.0.push(Box::pin(f));
    }

    /// Polls every task once; returns whether any finished.
    pub fn run(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let before = self.0.len();
        self.0.retain_mut(|t| t.as_mut().poll(&mut cx).is_pending());
        self.0.len() != before
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }
}

/// A result a task fills in.
pub type Slot<T> = Rc<RefCell<Option<T>>>;

pub fn slot<T>() -> Slot<T> {
    Rc::new(RefCell::new(None))
}

/// The server endpoint, one client endpoint and the wire between them.
pub struct Net {
    pub now: Instant,
    pub server: H3Endpoint,
    /// The server's TLS configuration (for another endpoint of the same
    /// server).
    pub server_tls: Arc<rustls::ServerConfig>,
    pub server_addr: SocketAddr,
    pub client: Endpoint,
    pub client_addr: SocketAddr,
    pub client_config: ClientConfig,
    pub clients: HashMap<ConnectionHandle, QuicConnection>,
    pub tasks: Tasks,
    /// Server events not yet taken by the test.
    pub events: Vec<(ConnId, Event)>,
    /// Bytes the server sent, and received, per address.
    pub sent_to: HashMap<SocketAddr, u64>,
    pub received_from: HashMap<SocketAddr, u64>,
    /// Wall time spent inside the server endpoint's calls (for the
    /// benchmark: the client shares the thread).
    pub server_time: Duration,
    /// Leave the server's events in the server (a server that does not
    /// take its events, e.g. while it holds requests back).
    pub hold_events: bool,
    buf: Vec<u8>,
}

impl Net {
    pub fn new(settings: H3Settings) -> Net {
        Net::with_certificate(settings, 0)
    }

    pub fn with_certificate(settings: H3Settings, extra_names: usize) -> Net {
        let (server_tls, client_tls) = tls_configs(extra_names);
        Net {
            now: Instant::now(),
            server: H3Endpoint::new(server_tls.clone(), settings).unwrap(),
            server_tls,
            server_addr: SERVER.parse().unwrap(),
            client: Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None),
            client_addr: CLIENT.parse().unwrap(),
            client_config: client_config(client_tls),
            clients: HashMap::new(),
            tasks: Tasks::default(),
            events: Vec::new(),
            sent_to: HashMap::new(),
            received_from: HashMap::new(),
            server_time: Duration::ZERO,
            hold_events: false,
            buf: Vec::new(),
        }
    }

    /// Starts a QUIC connection to the server.
    pub fn connect(&mut self) -> QuicConnection {
        let (ch, conn) = self
            .client
            .connect(
                self.now,
                self.client_config.clone(),
                self.server_addr,
                "localhost",
            )
            .unwrap();
        let q = QuicConnection::new(conn, self.now);
        self.clients.insert(ch, q.clone());
        q
    }

    /// Starts an HTTP/3 client on a new connection: the driver runs as a
    /// task (its end is put in the returned slot); `ready` gets the request
    /// sender.
    pub fn h3_client(&mut self) -> (Client, Slot<String>) {
        let quic = self.connect();
        let sender: Slot<h3::client::SendRequest<QuicConnection, Bytes>> = slot();
        let closed: Slot<String> = slot();
        let (s, c) = (sender.clone(), closed.clone());
        self.tasks.spawn(async move {
            let (mut driver, send) = match h3::client::new(quic).await {
                Ok(pair) => pair,
                Err(e) => {
                    *c.borrow_mut() = Some(e.to_string());
                    return;
                }
            };
            *s.borrow_mut() = Some(send);
            let e = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            *c.borrow_mut() = Some(format!("{e:?}"));
        });
        (sender, closed)
    }

    /// One turn: client tasks, datagrams both ways, server events taken.
    /// Returns whether anything moved.
    pub fn turn(&mut self) -> bool {
        let mut moved = self.tasks.run();
        // Client to server.
        let chs: Vec<ConnectionHandle> = self.clients.keys().copied().collect();
        for ch in chs {
            let q = self.clients[&ch].clone();
            while let Some(ev) = q.poll_endpoint_event() {
                if let Some(reply) = self.client.handle_event(ch, ev) {
                    q.handle_event(reply, self.now);
                }
            }
            loop {
                let mut buf = Vec::new();
                let t = q.0.borrow_mut().conn.poll_transmit(self.now, 1, &mut buf);
                let Some(t) = t else { break };
                moved = true;
                self.deliver_to_server(self.client_addr, &buf[..t.size]);
            }
        }
        // Server to client.
        let mut buf = std::mem::take(&mut self.buf);
        loop {
            let start = Instant::now();
            let t = self.server.poll_transmit(self.now, &mut buf);
            self.server_time += start.elapsed();
            let Some(t) = t else { break };
            moved = true;
            *self.sent_to.entry(t.destination).or_default() += t.size as u64;
            if t.destination == self.client_addr {
                let data = buf[..t.size].to_vec();
                self.deliver_to_client(&data);
            }
        }
        self.buf = buf;
        if !self.hold_events {
            while let Some(e) = self.server.poll_event() {
                moved = true;
                self.events.push(e);
            }
        }
        moved
    }

    pub fn deliver_to_server(&mut self, from: SocketAddr, data: &[u8]) {
        *self.received_from.entry(from).or_default() += data.len() as u64;
        let start = Instant::now();
        self.server
            .handle_datagram(self.now, from, None, None, data);
        self.server_time += start.elapsed();
    }

    pub fn deliver_to_client(&mut self, data: &[u8]) {
        let mut buf = Vec::new();
        let event = self.client.handle(
            self.now,
            self.server_addr,
            None,
            None,
            BytesMut::from(data),
            &mut buf,
        );
        match event {
            Some(DatagramEvent::ConnectionEvent(ch, ev)) => {
                if let Some(q) = self.clients.get(&ch) {
                    q.handle_event(ev, self.now);
                }
            }
            Some(DatagramEvent::Response(t)) => {
                let data = buf[..t.size].to_vec();
                self.deliver_to_server(self.client_addr, &data);
            }
            _ => {}
        }
    }

    /// The earliest timer of either side.
    pub fn next_timeout(&self) -> Option<Instant> {
        let client = self.clients.values().filter_map(|q| q.poll_timeout()).min();
        [client, self.server.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Moves the clock to the next timer and runs it.
    pub fn advance(&mut self) -> bool {
        let Some(t) = self.next_timeout() else {
            return false;
        };
        self.now = self.now.max(t);
        for q in self.clients.values() {
            if q.poll_timeout().is_some_and(|t| t <= self.now) {
                q.handle_timeout(self.now);
            }
        }
        self.server.handle_timeout(self.now);
        true
    }

    /// Turns until nothing moves, without moving the clock.
    pub fn settle(&mut self) {
        for _ in 0..MAX_TURNS {
            if !self.turn() {
                return;
            }
        }
        panic!("the network never settled");
    }

    /// Turns (moving the clock when nothing is in flight) until `step`,
    /// which answers the server's events between turns, says it is done.
    pub fn run_until(&mut self, mut step: impl FnMut(&mut Net) -> bool) {
        for _ in 0..MAX_TURNS {
            if step(self) {
                return;
            }
            if !self.turn() && !self.tasks_progress() && !self.advance() {
                assert!(
                    step(self),
                    "nothing left to happen and the condition never held"
                );
                return;
            }
        }
        panic!("the condition never held within {MAX_TURNS} turns");
    }

    fn tasks_progress(&mut self) -> bool {
        self.tasks.run()
    }

    /// Takes the server events so far.
    pub fn take_events(&mut self) -> Vec<(ConnId, Event)> {
        std::mem::take(&mut self.events)
    }

    /// Answers every request among the server events so far with a 200
    /// and `body`, and lets the other events go.
    pub fn answer_requests(&mut self, body: &'static [u8]) {
        for (ch, e) in self.take_events() {
            if let Event::Request { stream, .. } = e {
                self.server
                    .send_response(ch, stream, 200, HeaderMap::new(), false)
                    .unwrap();
                self.server
                    .send_data(ch, stream, Bytes::from_static(body), true)
                    .unwrap();
            }
        }
    }
}

/// A client's request sender, once its connection is up.
pub type Client = Slot<h3::client::SendRequest<QuicConnection, Bytes>>;

/// What a client task saw of one exchange.
#[derive(Debug, Default, Clone)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    pub trailers: Option<http::HeaderMap>,
    pub error: Option<String>,
}

/// Sends one request (`body` in `pieces`, `trailers` after it) and
/// collects the answer into the returned slot.
pub fn request(
    net: &mut Net,
    client: &Client,
    req: http::Request<()>,
    body: Vec<Bytes>,
    trailers: Option<http::HeaderMap>,
) -> Slot<Answer> {
    let out: Slot<Answer> = slot();
    let (client, o) = (client.clone(), out.clone());
    net.tasks.spawn(async move {
        let mut send = std::future::poll_fn(|_| match client.borrow().clone() {
            Some(s) => Poll::Ready(s),
            None => Poll::Pending,
        })
        .await;
        let result: Result<Answer, String> = async {
            let mut stream = send.send_request(req).await.map_err(|e| e.to_string())?;
            for piece in body {
                stream.send_data(piece).await.map_err(|e| e.to_string())?;
            }
            if let Some(t) = trailers {
                stream.send_trailers(t).await.map_err(|e| e.to_string())?;
            }
            stream.finish().await.map_err(|e| e.to_string())?;
            let resp = stream.recv_response().await.map_err(|e| e.to_string())?;
            let mut answer = Answer {
                status: resp.status().as_u16(),
                ..Answer::default()
            };
            while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
                while chunk.has_remaining() {
                    let c = chunk.chunk();
                    answer.body.extend_from_slice(c);
                    let n = c.len();
                    chunk.advance(n);
                }
            }
            answer.trailers = stream.recv_trailers().await.map_err(|e| e.to_string())?;
            Ok(answer)
        }
        .await;
        *o.borrow_mut() = Some(match result {
            Ok(a) => a,
            Err(e) => Answer {
                error: Some(e),
                ..Answer::default()
            },
        });
    });
    out
}

/// A GET for `/` at `localhost`, QPACK-encoded by hand with the static
/// table only (RFC 9204 appendix A indexes), in a HEADERS frame: what a
/// raw client (no `h3`) writes on a request stream.
pub fn raw_get() -> Vec<u8> {
    let mut block = vec![0x00, 0x00]; // Required Insert Count 0, Base 0.
    block.push(0xc0 | 17); // :method GET
    block.push(0xc0 | 23); // :scheme https
    block.push(0xc0 | 1); // :path /
    block.push(0x50); // :authority, literal value follows
    block.push(9);
    block.extend_from_slice(b"localhost");
    let mut frame = vec![0x01, block.len() as u8];
    frame.extend_from_slice(&block);
    frame
}

pub fn get(path: &str) -> http::Request<()> {
    http::Request::get(format!("https://localhost{path}"))
        .body(())
        .unwrap()
}

/// Settings for tests: production values, shorter idle timeout.
pub fn settings() -> H3Settings {
    H3Settings {
        idle_timeout: Duration::from_secs(10),
        ..H3Settings::default()
    }
}
