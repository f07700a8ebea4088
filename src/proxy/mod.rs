//! `rush proxy`: a forward HTTP proxy with CONNECT tunnels, run by a
//! worker process like the server (same supervisor, same signals, same
//! graceful drain).
//!
//! How it works:
//! * One mio `Poll` per worker; every socket edge-triggered. A client
//!   connection has slab key `k`; its client socket has token
//!   `FIRST_CONNECTION + 2k` and its upstream socket `FIRST_CONNECTION + 2k + 1`,
//!   so any event on either drives the same connection (`conn.rs` for the
//!   client side and the request's decisions, `upstream.rs` for the origin side).
//! * A request head is parsed by rush-proto (strict framing, CONNECT
//!   allowed), its target and the head for the origin come from
//!   `rush_proto::proxy`, and the access rules from `policy.rs`, all pure.
//! * Names are resolved on a few threads (`resolver.rs`) that wake the loop
//!   through a `mio::Waker`; connects are non-blocking (EINPROGRESS, then
//!   writability says done).
//! * A CONNECT tunnel relays with splice(2) through pooled pipes
//!   (`relay.rs`); a forwarded request streams both bodies as framed
//!   (`forward.rs`), and origin connections are kept alive per worker (`pool.rs`).
//! * Deadlines are checked by a sweep once a second, as in the server.
//!
//! Python (the GIL) is touched only for the optional policy hook, once per
//! request or tunnel, and for log lines; never per byte.

mod conn;
mod forward;
mod policy;
mod pool;
mod relay;
mod resolver;
mod upstream;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rush_proto::{HeaderSpan, Limits};
use slab::Slab;

use crate::options::{seconds, seconds_or_zero, READ_CHUNK};
use crate::server::{adopt_listening_socket, StopHandle};
use conn::{client_token, Disposition, Phase, ProxyConn};
use policy::{Credential, Policy};
use pool::OriginPool;
use relay::PipePool;
use resolver::Resolver;

const LISTENER: Token = Token(0);
const WAKEUP: Token = Token(1);
const RESOLVER: Token = Token(2);
pub(crate) const FIRST_CONNECTION: usize = 4;
/// Most connections accepted per listener event (see the server's ACCEPT_BATCH).
const ACCEPT_BATCH: usize = 16;
/// How long accepting pauses after an error such as EMFILE.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Timeouts and limits of one worker's proxy loop.
pub(crate) struct ProxyConfig {
    pub(crate) limits: Limits,
    pub(crate) max_connections: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) keep_alive_timeout: Duration,
    pub(crate) upstream_timeout: Duration,
    pub(crate) tunnel_idle_timeout: Duration,
    pub(crate) send_timeout: Duration,
    pub(crate) dns_timeout: Duration,
}

/// Everything a connection's drive needs besides the connection itself.
pub(crate) struct Worker {
    pub(crate) registry: Registry,
    pub(crate) config: ProxyConfig,
    pub(crate) policy: Policy,
    pub(crate) resolver: Resolver,
    pub(crate) origins: OriginPool,
    pub(crate) pipes: PipePool,
    pub(crate) scratch: Vec<u8>,
    pub(crate) headers: Vec<HeaderSpan>,
    pub(crate) now: Instant,
    pub(crate) draining: bool,
    pub(crate) hook: Option<Py<PyAny>>,
    pub(crate) log_access: bool,
    /// Access log lines not yet handed to Python.
    pub(crate) log_lines: Vec<String>,
    /// The `Via` value this proxy adds (`1.1 HOST (rush)`), also how it recognises its own requests.
    pub(crate) via: Vec<u8>,
    error_logger: Py<PyAny>,
    serial: u64,
}

impl Worker {
    pub(crate) fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    pub(crate) fn log_error(&self, py: Python<'_>, message: &str, error: Option<PyErr>) {
        let exception = error.map(|error| error.into_value(py).into_any());
        let _ = self.error_logger.call1(py, (message, exception));
    }
}

/// The proxy loop of one worker.
#[pyclass(module = "rush._rush", unsendable)]
pub struct ProxyServer {
    poll: Poll,
    events: Events,
    listener: Option<TcpListener>,
    connections: Slab<ProxyConn>,
    worker: Worker,
    access_logger: Option<Py<PyAny>>,
    accept_paused: bool,
    /// After an accept error (EMFILE...): when to try again. The listener is
    /// edge-triggered, so the queue would otherwise wait for a newcomer.
    accept_retry_at: Option<Instant>,
    drain_deadline: Option<Instant>,
    next_sweep: Instant,
    _waker: Arc<mio::Waker>,
}

#[pymethods]
impl ProxyServer {
    #[new]
    #[pyo3(signature = (
        listener_fd, error_logger, *, access_logger=None, policy_hook=None, wakeup_fd=None,
        max_connections=10000, max_request_line=8192, max_head_size=16384, max_headers=100,
        header_timeout=10.0, keep_alive_timeout=5.0, upstream_timeout=60.0,
        tunnel_idle_timeout=300.0, send_timeout=30.0, dns_timeout=10.0,
        allow_connect_ports=Vec::new(), allow_private=false, allow_clients=Vec::new(),
        auth=Vec::new(), htpasswd=Vec::new(), via_name=String::from("rush"),
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        listener_fd: i32,
        error_logger: Py<PyAny>,
        access_logger: Option<Py<PyAny>>,
        policy_hook: Option<Py<PyAny>>,
        wakeup_fd: Option<i32>,
        max_connections: usize,
        max_request_line: usize,
        max_head_size: usize,
        max_headers: usize,
        header_timeout: f64,
        keep_alive_timeout: f64,
        upstream_timeout: f64,
        tunnel_idle_timeout: f64,
        send_timeout: f64,
        dns_timeout: f64,
        allow_connect_ports: Vec<u16>,
        allow_private: bool,
        allow_clients: Vec<String>,
        auth: Vec<String>,
        htpasswd: Vec<String>,
        via_name: String,
    ) -> PyResult<Self> {
        let mut credentials = Vec::new();
        for text in &auth {
            credentials.push(Credential::plain(text).map_err(PyValueError::new_err)?);
        }
        for line in &htpasswd {
            credentials.push(Credential::htpasswd(line).map_err(PyValueError::new_err)?);
        }
        let mut clients = Vec::new();
        for text in &allow_clients {
            let net = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    PyValueError::new_err(format!(
                        "--allow-client takes a CIDR such as 10.0.0.0/8 (got {text:?})"
                    ))
                })?;
            clients.push(net);
        }
        let config = ProxyConfig {
            limits: Limits {
                max_request_line,
                max_head_size,
                max_headers,
                // Bodies stream through in bounded buffers; their size is the origin's business.
                max_body_size: u64::MAX,
                ..Limits::default()
            },
            max_connections: max_connections.max(1),
            header_timeout: seconds("header_timeout", header_timeout)?,
            keep_alive_timeout: seconds("keep_alive_timeout", keep_alive_timeout)?,
            upstream_timeout: seconds("upstream_timeout", upstream_timeout)?,
            tunnel_idle_timeout: seconds("tunnel_idle_timeout", tunnel_idle_timeout)?,
            send_timeout: seconds("send_timeout", send_timeout)?,
            dns_timeout: seconds("dns_timeout", dns_timeout)?,
        };
        let owned = adopt_listening_socket(listener_fd)?;
        let listener = std::net::TcpListener::from(owned);
        listener.set_nonblocking(true)?;
        let mut listener = TcpListener::from_std(listener);
        let poll = Poll::new()?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)?;
        if let Some(fd) = wakeup_fd {
            poll.registry()
                .register(&mut SourceFd(&fd), WAKEUP, Interest::READABLE)?;
        }
        let waker = Arc::new(mio::Waker::new(poll.registry(), RESOLVER)?);
        let now = Instant::now();
        Ok(ProxyServer {
            worker: Worker {
                registry: poll.registry().try_clone()?,
                config,
                policy: Policy {
                    connect_ports: allow_connect_ports,
                    allow_private,
                    clients,
                    credentials,
                },
                resolver: Resolver::start(Arc::clone(&waker))?,
                origins: OriginPool::default(),
                pipes: PipePool::default(),
                scratch: vec![0; READ_CHUNK],
                headers: Vec::with_capacity(32),
                now,
                draining: false,
                hook: policy_hook,
                log_access: access_logger.is_some(),
                log_lines: Vec::new(),
                via: via_value(&via_name),
                error_logger,
                serial: 0,
            },
            poll,
            events: Events::with_capacity(1024),
            listener: Some(listener),
            connections: Slab::with_capacity(1024),
            access_logger,
            accept_paused: false,
            accept_retry_at: None,
            drain_deadline: None,
            next_sweep: now + Duration::from_secs(1),
            _waker: waker,
        })
    }

    /// Runs until a graceful shutdown (requested through `stop`) has
    /// drained every connection or `graceful_timeout` passed.
    #[pyo3(signature = (stop, graceful_timeout=30.0))]
    fn serve(
        &mut self,
        py: Python<'_>,
        stop: &Bound<'_, StopHandle>,
        graceful_timeout: f64,
    ) -> PyResult<()> {
        let graceful_timeout = seconds_or_zero("graceful_timeout", graceful_timeout)?;
        loop {
            if self.drain_deadline.is_none() && stop.get().is_set() {
                self.start_drain(graceful_timeout);
            }
            if let Some(deadline) = self.drain_deadline {
                if self.connections.is_empty() || Instant::now() >= deadline {
                    self.connections.clear();
                    return Ok(());
                }
            }
            let timeout = if self.drain_deadline.is_some() || self.accept_retry_at.is_some() {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(1)
            };
            self.run_once(py, timeout)?;
        }
    }

    /// Connections open now (for tests and metrics).
    #[getter]
    fn connection_count(&self) -> usize {
        self.connections.len()
    }
}

/// `1.1 NAME (rush)`, NAME reduced to the characters a host name has (it
/// comes from the machine's host name, and goes into every forwarded head).
fn via_value(name: &str) -> Vec<u8> {
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(64)
        .collect();
    let name = if name.is_empty() { "rush" } else { &name };
    format!("1.1 {name} (rush)").into_bytes()
}

impl ProxyServer {
    fn run_once(&mut self, py: Python<'_>, timeout: Duration) -> PyResult<()> {
        let poll = &mut self.poll;
        let events = &mut self.events;
        match py.detach(|| poll.poll(events, Some(timeout))) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {
                return py.check_signals()
            }
            Err(error) => return Err(error.into()),
        }
        self.worker.now = Instant::now();
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        let mut check_signals = false;
        for event in events.iter() {
            match event.token() {
                LISTENER => self.accept(py),
                WAKEUP => check_signals = true,
                RESOLVER => self.deliver_answers(py),
                Token(token) => self.drive(py, (token - FIRST_CONNECTION) / 2),
            }
        }
        self.events = events;
        if self.accept_paused && self.connections.len() < self.worker.config.max_connections {
            self.accept_paused = false;
            self.accept(py);
        }
        if self.accept_retry_at.is_some_and(|at| self.worker.now >= at) {
            self.accept_retry_at = None;
            self.accept(py);
        }
        if self.worker.now >= self.next_sweep {
            self.sweep(py);
        }
        self.flush_log(py);
        if check_signals {
            py.check_signals()?;
        }
        Ok(())
    }

    fn drive(&mut self, py: Python<'_>, key: usize) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let worker = &mut self.worker;
        let disposition = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            worker.drive(py, connection, key)
        }))
        .unwrap_or_else(|_| {
            worker.log_error(
                py,
                "internal error in the proxy; closing the connection",
                None,
            );
            Disposition::Close
        });
        if disposition == Disposition::Close {
            self.connections.remove(key);
        }
    }

    fn accept(&mut self, py: Python<'_>) {
        for _ in 0..ACCEPT_BATCH {
            if self.connections.len() >= self.worker.config.max_connections {
                // Resumed by the loop once a connection closes.
                self.accept_paused = true;
                return;
            }
            let Some(listener) = &self.listener else {
                return;
            };
            let (stream, peer) = match listener.accept() {
                Ok(accepted) => accepted,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(error) => {
                    if self.accept_retry_at.is_none() {
                        let message = format!(
                            "accept failed: {error}; retrying in {} ms",
                            ACCEPT_RETRY.as_millis()
                        );
                        self.worker.log_error(py, &message, None);
                    }
                    self.accept_retry_at = Some(self.worker.now + ACCEPT_RETRY);
                    return;
                }
            };
            let _ = stream.set_nodelay(true);
            let serial = self.worker.next_serial();
            let deadline = self.worker.now + self.worker.config.header_timeout;
            let key = self
                .connections
                .insert(ProxyConn::new(stream, peer, serial, deadline));
            let connection = &mut self.connections[key];
            if self
                .worker
                .registry
                .register(
                    &mut connection.client,
                    client_token(key),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                self.connections.remove(key);
                continue;
            }
            self.drive(py, key);
        }
        // More may be queued: edge-triggered, so look again on the next turn.
        if let Some(listener) = &mut self.listener {
            let _ = self
                .worker
                .registry
                .reregister(listener, LISTENER, Interest::READABLE);
        }
    }

    fn deliver_answers(&mut self, py: Python<'_>) {
        for answer in self.worker.resolver.take_answers(self.worker.now) {
            let Some(connection) = self.connections.get_mut(answer.key) else {
                continue;
            };
            if connection.serial != answer.serial
                || !matches!(connection.phase, Phase::Resolving(_))
            {
                continue;
            }
            let _ = self.worker.resolved(connection, answer.key, answer.result);
            self.drive(py, answer.key);
        }
    }

    /// Closes connections whose timer ran out; a request still waiting for
    /// its origin gets a 504 (one stalled in its head a 408) first, with the
    /// send timeout to deliver it, after which it is closed like the rest.
    fn sweep(&mut self, py: Python<'_>) {
        let now = self.worker.now;
        self.next_sweep = now + Duration::from_secs(1);
        self.worker.origins.sweep(now);
        let mut expired = Vec::new();
        let mut answered = Vec::new();
        for (key, connection) in self.connections.iter_mut() {
            if now < connection.deadline {
                continue;
            }
            let answer = match &connection.phase {
                Phase::Idle if !connection.input.is_empty() => {
                    Some((408, "the request head took too long"))
                }
                Phase::Resolving(_) => Some((504, "the target's name did not resolve in time")),
                Phase::Connecting(_) => {
                    Some((504, "the target did not accept the connection in time"))
                }
                Phase::Forward(exchange) if !exchange.head_sent => {
                    Some((504, "the origin did not answer in time"))
                }
                _ => None,
            };
            let Some((status, message)) = answer else {
                expired.push(key);
                continue;
            };
            if let Some(record) = &mut connection.record {
                record.status = status;
            }
            conn::write_error(&mut connection.output, status, message);
            connection.upstream = None;
            connection.phase = Phase::Closing;
            connection.deadline = now + self.worker.config.send_timeout;
            answered.push(key);
        }
        for key in expired {
            if let Some(mut connection) = self.connections.try_remove(key) {
                self.worker.log_record(&mut connection);
            }
        }
        for key in answered {
            // Writes the answer; closes once it is out (or at the send timeout).
            self.drive(py, key);
        }
    }

    fn start_drain(&mut self, graceful_timeout: Duration) {
        self.drain_deadline = Some(Instant::now() + graceful_timeout);
        self.worker.draining = true;
        if let Some(mut listener) = self.listener.take() {
            let _ = self.worker.registry.deregister(&mut listener);
        }
        self.connections
            .retain(|_, connection| !connection.is_idle());
    }

    fn flush_log(&mut self, py: Python<'_>) {
        if self.worker.log_lines.is_empty() {
            return;
        }
        let lines = std::mem::take(&mut self.worker.log_lines);
        if let Some(logger) = &self.access_logger {
            for line in lines {
                let _ = logger.call1(py, (line,));
            }
        }
    }
}
