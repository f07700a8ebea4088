//! `rush proxy`: a forward HTTP proxy with CONNECT tunnels. A
//! `crate::server::Server` built with [`ProxySettings`] is a proxy worker
//! (`server/proxy_server.rs`: the same epoll, accept, signals, deadline
//! sweep and graceful drain as the app server), and hands every connection
//! it accepts to its [`ProxyLoop`], which keeps and drives them.
//!
//! How it works:
//! * Proxy connections live in a slab of their own. Connection `k`'s client
//!   socket has token `PROXY_TOKENS + 2k`, far above the listeners' tokens;
//!   an upstream socket with descriptor `fd` has `PROXY_TOKENS + 2fd + 1`,
//!   and the origin pool (`pool.rs`) knows which connection uses it, so a
//!   pooled socket changes hands without an `epoll_ctl`. An event on either
//!   socket drives the connection (`conn.rs` for the client side and the
//!   request's decisions, `upstream.rs` for the origin side).
//! * A request head is parsed by rush-proto (strict framing, CONNECT
//!   allowed), its target and the head for the origin come from
//!   `rush_proto::proxy`, and the access rules from `policy.rs`, all pure.
//! * Names are resolved on a few threads (`resolver.rs`) that wake the loop
//!   through a `mio::Waker`; connects are non-blocking (EINPROGRESS, then
//!   writability says done). bcrypt passwords are checked on threads of
//!   their own (`auth.rs`) that wake the loop through the same waker.
//! * A CONNECT tunnel relays with splice(2) through pooled pipes
//!   (`relay.rs`); a forwarded request streams both bodies as framed
//!   (`forward.rs`), and origin connections are kept alive per worker (`pool.rs`).
//! * Deadlines are checked by the server's sweep, once a second.
//! * `--timeout` and `--max-requests` work as for the app server: the
//!   server's loop beats the worker's liveness page (src/liveness.rs) and
//!   each request the rules let through (a forwarded request, a tunnel) is
//!   counted there; the one that reaches the limit makes the worker stop
//!   taking requests (`request_limit_reached`, read by the server's loop).
//!
//! Python (the GIL) is touched only for the optional policy hook, once per
//! request or tunnel, and for log lines; never per byte.

mod auth;
mod conn;
mod forward;
mod input_hint;
mod offload;
mod policy;
mod pool;
mod relay;
mod resolver;
mod settings;
mod upstream;

use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rush_proto::{HeaderSpan, Limits};
use slab::Slab;

use crate::liveness::Liveness;
use crate::options::READ_CHUNK;
use auth::Verifier;
use conn::{client_token, Disposition, Phase, ProxyConn};
use policy::Policy;
use pool::OriginPool;
use relay::PipePool;
use resolver::Resolver;
pub use settings::{ProxyAccessSettings, ProxyLimitSettings, ProxySettings, ProxyTimeoutSettings};

/// The resolver threads wake the loop with this token (below the listeners').
pub(crate) const RESOLVER: Token = Token(4);
/// Proxy connections' tokens start here, far above the listeners'.
pub(crate) const PROXY_TOKENS: usize = 1 << 40;
/// Kept for `conn.rs`: where the proxy's token range starts.
pub(crate) const FIRST_CONNECTION: usize = PROXY_TOKENS;

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
    pub(crate) verifier: Verifier,
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
    /// The page shared with the supervisor (`--timeout`, `--max-requests`).
    pub(crate) liveness: Option<Py<Liveness>>,
    /// This worker began its `--max-requests`: no new request is kept
    /// alive, and the server's loop stops accepting.
    pub(crate) request_limit_reached: bool,
    error_logger: Py<PyAny>,
    serial: u64,
}

impl Worker {
    pub(crate) fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// A request the rules let through (forwarded or tunnelled) begins:
    /// counted on the liveness page with its request line (`head` starts
    /// with it). At the limit the worker drains as for a stop, which also
    /// answers this request with `Connection: close`.
    pub(crate) fn count_request(&mut self, head: &[u8]) {
        let Some(liveness) = &self.liveness else {
            return;
        };
        if liveness.get().request_started(head) {
            self.request_limit_reached = true;
            self.draining = true;
        }
    }

    pub(crate) fn log_error(&self, py: Python<'_>, message: &str, error: Option<PyErr>) {
        let exception = error.map(|error| error.into_value(py).into_any());
        let _ = self.error_logger.call1(py, (message, exception));
    }
}

/// The proxy connections of a worker's loop, and what they share.
pub(crate) struct ProxyLoop {
    connections: Slab<ProxyConn>,
    worker: Worker,
    access_logger: Option<Py<PyAny>>,
    _waker: Arc<mio::Waker>,
}

impl ProxyLoop {
    /// Takes the settings (a `ProxySettings` serves one server) and starts
    /// the resolver threads, which wake the loop through `registry`.
    pub(crate) fn new(
        py: Python<'_>,
        settings: &Bound<'_, ProxySettings>,
        registry: &Registry,
        error_logger: &Py<PyAny>,
        access_logger: Option<&Py<PyAny>>,
    ) -> PyResult<ProxyLoop> {
        let Some(settings) = settings.borrow_mut().settings.take() else {
            return Err(PyValueError::new_err(
                "these ProxySettings are in use by another server",
            ));
        };
        let waker = Arc::new(mio::Waker::new(registry, RESOLVER)?);
        Ok(ProxyLoop {
            connections: Slab::with_capacity(1024),
            worker: Worker {
                registry: registry.try_clone()?,
                config: settings.config,
                policy: settings.policy,
                resolver: Resolver::start(Arc::clone(&waker))?,
                verifier: Verifier::start(Arc::clone(&waker))?,
                origins: OriginPool::default(),
                pipes: PipePool::default(),
                scratch: vec![0; READ_CHUNK],
                headers: Vec::with_capacity(32),
                now: Instant::now(),
                draining: false,
                hook: settings.hook,
                log_access: access_logger.is_some(),
                log_lines: Vec::new(),
                via: settings.via,
                liveness: None,
                request_limit_reached: false,
                error_logger: error_logger.clone_ref(py),
                serial: 0,
            },
            access_logger: access_logger.map(|logger| logger.clone_ref(py)),
            _waker: waker,
        })
    }

    /// Shares the worker's liveness page: requests are counted there from now on.
    pub(crate) fn set_liveness(&mut self, liveness: Py<Liveness>) {
        self.worker.liveness = Some(liveness);
    }

    pub(crate) fn liveness(&self) -> Option<&Py<Liveness>> {
        self.worker.liveness.as_ref()
    }

    /// Whether this worker began its `--max-requests`.
    pub(crate) fn request_limit_reached(&self) -> bool {
        self.worker.request_limit_reached
    }

    /// Whether `token` belongs to a proxy connection.
    pub(crate) fn owns(token: Token) -> bool {
        token.0 >= PROXY_TOKENS
    }

    pub(crate) fn len(&self) -> usize {
        self.connections.len()
    }

    /// Whether `--max-connections` is reached (accepting then pauses).
    pub(crate) fn is_full(&self) -> bool {
        self.connections.len() >= self.worker.config.max_connections
    }

    /// Takes a connection the server accepted, and serves what it already sent.
    pub(crate) fn adopt(
        &mut self,
        py: Python<'_>,
        stream: TcpStream,
        peer: SocketAddr,
        now: Instant,
    ) {
        let _ = stream.set_nodelay(true);
        self.worker.now = now;
        let serial = self.worker.next_serial();
        let deadline = now + self.worker.config.header_timeout;
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
            return;
        }
        self.drive(py, key);
    }

    /// An event on a proxy connection's client or upstream socket.
    /// `readable`: the event reports bytes to read; `ended`: the peer's
    /// end, a reset or an error (see `conn::InputHint`).
    pub(crate) fn handle(
        &mut self,
        py: Python<'_>,
        token: Token,
        (readable, ended): (bool, bool),
        now: Instant,
    ) {
        self.worker.now = now;
        let offset = token.0 - PROXY_TOKENS;
        let key = if offset.is_multiple_of(2) {
            let key = offset / 2;
            if let Some(connection) = self.connections.get_mut(key) {
                connection.client_input.on_event(readable, ended);
            }
            key
        } else {
            // An upstream socket's token names the socket (pool.rs).
            let fd = offset / 2;
            let Some(key) = self.worker.origins.user_of(fd) else {
                return;
            };
            match self.connections.get_mut(key) {
                Some(connection) => match &mut connection.upstream {
                    Some(upstream) if upstream.stream.as_raw_fd() as usize == fd => {
                        upstream.input.on_event(readable, ended)
                    }
                    // A socket closed since, whose event came in the same batch.
                    _ => return,
                },
                None => return,
            }
            key
        };
        self.drive(py, key);
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

    /// The resolver threads finished lookups: connections waiting for them go on.
    pub(crate) fn deliver_answers(&mut self, py: Python<'_>, now: Instant) {
        self.worker.now = now;
        for answer in self.worker.resolver.take_answers(now) {
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

    /// The password threads finished checks: connections waiting for them
    /// decide their head again, now with the verdict.
    pub(crate) fn deliver_verdicts(&mut self, py: Python<'_>, now: Instant) {
        self.worker.now = now;
        for verdict in self.worker.verifier.take_verdicts(now) {
            let Some(connection) = self.connections.get_mut(verdict.key) else {
                continue;
            };
            if connection.serial != verdict.serial
                || !matches!(connection.phase, Phase::Authorizing)
            {
                continue;
            }
            connection.auth_verdict = Some((verdict.digest, verdict.valid));
            connection.phase = Phase::Idle;
            self.drive(py, verdict.key);
        }
    }

    /// Closes connections whose timer ran out; a request still waiting for
    /// its origin gets a 504 (one stalled in its head a 408) first, with the
    /// send timeout to deliver it, after which it is closed like the rest.
    pub(crate) fn sweep(&mut self, py: Python<'_>, now: Instant) {
        self.worker.now = now;
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
                Phase::Authorizing => Some((503, "the credentials could not be checked in time")),
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

    /// Graceful shutdown: idle clients are closed now (after a last read, so
    /// a request that just arrived is answered), busy ones after their
    /// current request; tunnels run until they end or the server's graceful
    /// timeout.
    pub(crate) fn start_drain(&mut self, py: Python<'_>) {
        self.worker.draining = true;
        let idle: Vec<usize> = self
            .connections
            .iter()
            .filter(|(_, connection)| connection.is_idle())
            .map(|(key, _)| key)
            .collect();
        for key in idle {
            // Reads what may have arrived; closes the connection if nothing did.
            self.drive(py, key);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.connections.clear();
    }

    /// Hands the access log lines of this turn to Python.
    pub(crate) fn flush_log(&mut self, py: Python<'_>) {
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
