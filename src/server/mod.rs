//! The worker's event loop: one epoll instance, every socket, every request.
//!
//! How it works:
//! * All sockets are registered edge-triggered (mio). An event means "drive
//!   this connection": process buffered requests, write, read, repeat until
//!   the kernel says EAGAIN (`crate::http1`).
//! * This is the Python binding of the loop: every method Python calls
//!   enters through [`Server::guarded`], so a panic costs at most the
//!   connection it happened on. What a request means to the app (Python
//!   objects, results) is `crate::dispatch`'s business; the loop here deals
//!   in connections, keys and request ids.
//! * Every complete request in the buffer is answered, in order, into one
//!   output buffer, which is written once (pipelining costs nothing extra).
//! * Python handlers are called right here on the loop thread with the GIL
//!   held. The GIL is released only while the loop sleeps in `epoll_wait`.
//! * `async def` handlers are first driven with `coroutine.send(None)`: one
//!   that finishes without suspending never touches asyncio. One that
//!   suspends is handed to asyncio (the worker then runs this loop as an
//!   asyncio reader), and its connection waits in the `Handler` write state
//!   with its later pipelined requests buffered, so order is kept.
//! * Deadlines are checked by a sweep once a second: O(connections) per
//!   second is far below the per-request work and needs no timer structure.
//! * A worker may listen on several sockets (`more_listeners`: every
//!   `--bind`, every socket systemd passed); each has its own token in the
//!   range from `LISTENER_TOKENS`, so an event names the socket to accept
//!   from, and draining stops accepting on all of them at once.
//! * Built with `proxy=ProxySettings(...)` (`rush proxy`), every accepted
//!   connection is a forward-proxy connection instead (`crate::proxy`),
//!   driven by this same loop: tokens above `proxy::PROXY_TOKENS` are its.

mod completion;
mod event_loop;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use mio::net::{TcpListener, UnixListener};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rush_proto::{DateCache, Limits};
use slab::Slab;

use crate::access_log::AccessFormat;
use crate::asgi::AsgiSettings;
use crate::conn::Connection;
use crate::dispatch::{AppInterface, Core};
use crate::forwarding::Forwarding;
use crate::liveness::Liveness;
use crate::log_limit::LogLimit;
use crate::options::{seconds, seconds_or_zero, LoopConfig, OUTPUT_HIGH_WATER, READ_CHUNK};
use crate::proxy::{ProxyLoop, ProxySettings};
use crate::router::Router;
use crate::static_files::StaticFiles;
use crate::wsgi::WsgiSettings;
use event_loop::{listener_token, COMPLETIONS, FILE_EVENTS, WAKEUP};

/// Set from a Python signal handler while `serve` runs; checked by the loop.
#[pyclass(module = "rush._rush", frozen)]
pub struct StopHandle {
    requested: AtomicBool,
}

#[pymethods]
impl StopHandle {
    #[new]
    fn new() -> Self {
        StopHandle {
            requested: AtomicBool::new(false),
        }
    }

    /// Asks the loop to stop accepting and drain (graceful shutdown).
    fn set(&self) {
        self.requested.store(true, Ordering::SeqCst);
    }

    pub(crate) fn is_set(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}
/// A listening socket a worker accepts from.
enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Our own non-blocking descriptor for the listening socket `fd` (which
    /// the caller keeps), as TCP or, with `unix`, as a Unix socket.
    fn adopt(fd: RawFd, unix: bool) -> PyResult<Listener> {
        let owned = adopt_listening_socket(fd)?;
        Ok(if unix {
            let listener = std::os::unix::net::UnixListener::from(owned);
            listener.set_nonblocking(true)?;
            Listener::Unix(UnixListener::from_std(listener))
        } else {
            let listener = std::net::TcpListener::from(owned);
            listener.set_nonblocking(true)?;
            Listener::Tcp(TcpListener::from_std(listener))
        })
    }

    /// Registers (or, with `again`, re-arms) the socket for readability under `token`.
    fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        again: bool,
    ) -> std::io::Result<()> {
        match (self, again) {
            (Listener::Tcp(socket), false) => registry.register(socket, token, Interest::READABLE),
            (Listener::Tcp(socket), true) => registry.reregister(socket, token, Interest::READABLE),
            (Listener::Unix(socket), false) => registry.register(socket, token, Interest::READABLE),
            (Listener::Unix(socket), true) => {
                registry.reregister(socket, token, Interest::READABLE)
            }
        }
    }

    fn deregister(&mut self, registry: &mio::Registry) {
        let _ = match self {
            Listener::Tcp(socket) => registry.deregister(socket),
            Listener::Unix(socket) => registry.deregister(socket),
        };
    }
}

/// The native server loop of one worker.
#[pyclass(module = "rush._rush", unsendable)]
pub struct Server {
    poll: Poll,
    events: Events,
    /// The listening sockets, in `--bind` order; emptied when draining starts.
    listeners: Vec<Listener>,
    /// Set when the listeners speak TLS: every accepted TCP connection gets
    /// a session from it, and its handshake a slot in the gate (the cap on
    /// handshakes in progress, see `conn/tls.rs`).
    tls: Option<(
        std::sync::Arc<rustls::ServerConfig>,
        std::rc::Rc<crate::conn::HandshakeGate>,
    )>,
    /// When handshakes refused at the cap may next be logged.
    next_handshake_warning: Instant,
    connections: Slab<Connection>,
    core: Core,
    accept_paused: bool,
    /// Connections the sweep found with work to do (a request arrived on an
    /// idle one), driven by the loop's next pass rather than by the sweep.
    drive_soon: Vec<usize>,
    /// After an accept error: when to try again.
    accept_retry_at: Option<Instant>,
    /// When closing idle connections at the cap may be logged again.
    next_eviction_warning: Instant,
    drain_deadline: Option<Instant>,
    next_sweep: Instant,
    /// Pool threads signal finished work here; `completion_drain()` returns
    /// `(key, request_id, future)` tuples to complete.
    completion_source: Option<(RawFd, Py<PyAny>)>,
    /// `rush proxy`: every accepted connection is a proxy connection, kept
    /// and driven there (`crate::proxy`) on this same loop.
    proxy: Option<ProxyLoop>,
}
#[pymethods]
impl Server {
    #[new]
    #[pyo3(signature = (
        listener_fd, router, error_logger, *, unix=false, more_listeners=Vec::new(),
        access_logger=None, wakeup_fd=None,
        max_request_line=8192, max_head_size=16384, max_headers=100,
        max_body_size=16 * 1024 * 1024, max_connections=10000,
        keep_alive_timeout=5.0, header_timeout=10.0, body_timeout=30.0, send_timeout=30.0,
        wsgi_app=None, root_path=String::new(), wsgi_multithread=false, wsgi_multiprocess=false,
        asgi_app=None, asgi_state=None, max_worker_output=64 * 1024 * 1024, tls=None,
        tls_max_handshakes=256, proxy=None,
        proxy_headers="x-forwarded", forwarded_allow_ips="127.0.0.1,::1", forwarded_host=false,
        server_header=false, date_header=true, extra_headers=Vec::new(),
        access_log_format=None, access_log_fields=false, log_refusals=true, debug=false,
        ws_max_size=16 * 1024 * 1024, ws_max_queue=32,
        ws_ping_interval=20.0, ws_ping_timeout=20.0, ws_per_message_deflate=true,
        ws_allowed_origins=Vec::new(),
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        listener_fd: RawFd,
        router: Py<Router>,
        error_logger: Py<PyAny>,
        unix: bool,
        more_listeners: Vec<(RawFd, bool)>,
        access_logger: Option<Py<PyAny>>,
        wakeup_fd: Option<RawFd>,
        max_request_line: usize,
        max_head_size: usize,
        max_headers: usize,
        max_body_size: u64,
        max_connections: usize,
        keep_alive_timeout: f64,
        header_timeout: f64,
        body_timeout: f64,
        send_timeout: f64,
        wsgi_app: Option<Py<PyAny>>,
        root_path: String,
        wsgi_multithread: bool,
        wsgi_multiprocess: bool,
        asgi_app: Option<Py<PyAny>>,
        asgi_state: Option<Py<PyDict>>,
        max_worker_output: usize,
        tls: Option<PyRef<'_, crate::tls::TlsSettings>>,
        tls_max_handshakes: usize,
        proxy: Option<Bound<'_, ProxySettings>>,
        proxy_headers: &str,
        forwarded_allow_ips: &str,
        forwarded_host: bool,
        server_header: bool,
        date_header: bool,
        extra_headers: Vec<(String, String)>,
        access_log_format: Option<String>,
        access_log_fields: bool,
        log_refusals: bool,
        debug: bool,
        ws_max_size: usize,
        ws_max_queue: usize,
        ws_ping_interval: f64,
        ws_ping_timeout: f64,
        ws_per_message_deflate: bool,
        ws_allowed_origins: Vec<String>,
    ) -> PyResult<Self> {
        let optional = |name: &str, value: f64| {
            crate::options::seconds_or_zero(name, value)
                .map(|duration| (!duration.is_zero()).then_some(duration))
        };
        let ws = crate::options::WsConfig {
            max_size: ws_max_size.max(1),
            max_queue: ws_max_queue.max(1),
            ping_interval: optional("ws_ping_interval", ws_ping_interval)?,
            ping_timeout: optional("ws_ping_timeout", ws_ping_timeout)?,
            per_message_deflate: ws_per_message_deflate,
        };
        let tls = tls.map(|settings| {
            let gate = crate::conn::HandshakeGate::new(tls_max_handshakes);
            (settings.config.clone(), std::rc::Rc::new(gate))
        });
        let access_format = access_log_format
            .map(|format| AccessFormat::parse(&format))
            .transpose()
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let forwarding = Forwarding::new(proxy_headers, forwarded_allow_ips, forwarded_host)
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let extra_lines = header_lines(&extra_headers)?;
        let config = LoopConfig {
            limits: Limits {
                max_request_line,
                max_head_size,
                max_headers,
                max_body_size,
                ..Limits::default()
            },
            max_connections: max_connections.max(1),
            keep_alive_timeout: seconds("keep_alive_timeout", keep_alive_timeout)?,
            header_timeout: seconds("header_timeout", header_timeout)?,
            body_timeout: seconds("body_timeout", body_timeout)?,
            send_timeout: seconds("send_timeout", send_timeout)?,
            output_budget: max_worker_output.max(OUTPUT_HIGH_WATER),
            ws,
            ws_allowed_origins: ws_allowed_origins
                .iter()
                .map(|origin| origin.trim().to_ascii_lowercase().into_bytes())
                .collect(),
        };
        let poll = Poll::new()?;
        let mut listeners = Vec::with_capacity(1 + more_listeners.len());
        for (index, (fd, unix)) in std::iter::once((listener_fd, unix))
            .chain(more_listeners)
            .enumerate()
        {
            let mut listener = Listener::adopt(fd, unix)?;
            listener.register(poll.registry(), listener_token(index), false)?;
            listeners.push(listener);
        }
        if let Some(fd) = wakeup_fd {
            poll.registry()
                .register(&mut SourceFd(&fd), WAKEUP, Interest::READABLE)?;
        }
        // What WSGI's SERVER_NAME/SERVER_PORT and ASGI's scope["server"] name:
        // the first TCP listener.
        let server_address = listeners.iter().find_map(|listener| match listener {
            Listener::Tcp(socket) => socket.local_addr().ok(),
            Listener::Unix(_) => None,
        });
        let unix = listeners
            .iter()
            .any(|listener| matches!(listener, Listener::Unix(_)));
        let app = match (wsgi_app, asgi_app) {
            (Some(_), Some(_)) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a worker serves a WSGI app or an ASGI app, not both",
                ))
            }
            (Some(app), None) => AppInterface::Wsgi(WsgiSettings::new(
                py,
                app,
                root_path,
                wsgi_multithread,
                wsgi_multiprocess,
                server_address,
            )?),
            (None, Some(app)) => AppInterface::Asgi(AsgiSettings::new(
                py,
                app,
                root_path,
                asgi_state,
                server_address,
            )?),
            (None, None) => AppInterface::Native,
        };
        let mut warnings = Vec::new();
        let static_files = StaticFiles::new(router.bind(py).borrow().static_mounts(), |warning| {
            warnings.push(warning)
        });
        for warning in warnings {
            error_logger.call1(py, (warning, py.None()))?;
        }
        if let Some(fd) = static_files.event_fd() {
            poll.registry()
                .register(&mut SourceFd(&fd), FILE_EVENTS, Interest::READABLE)?;
        }
        let proxy = match proxy {
            None => None,
            Some(_) if unix => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "the proxy listens on TCP, not on a Unix socket",
                ))
            }
            Some(settings) => Some(ProxyLoop::new(
                py,
                &settings,
                poll.registry(),
                &error_logger,
                access_logger.as_ref(),
            )?),
        };
        let now = Instant::now();
        Ok(Server {
            poll,
            events: Events::with_capacity(1024),
            listeners,
            tls,
            connections: Slab::with_capacity(1024),
            core: Core {
                router,
                static_files,
                config,
                date: DateCache::with_fields(
                    SystemTime::now(),
                    server_header,
                    &extra_lines,
                    date_header,
                ),
                forwarding,
                access_format,
                access_fields: access_log_fields,
                log_refusals,
                refusal_limit: LogLimit::new(now),
                debug,
                now,
                read_buffer: vec![0; READ_CHUNK],
                header_scratch: Vec::with_capacity(32),
                body_scratch: Vec::new(),
                error_logger,
                access_logger,
                async_scheduler: None,
                blocking_scheduler: None,
                app,
                asgi_notifier: None,
                next_request_id: 0,
                detached_requests: std::collections::HashMap::new(),
                draining: false,
                request_limit_reached: false,
                pipelined_after: false,
                output_total: 0,
                may_park: false,
                woken: Default::default(),
                liveness: None,
                ws_flush: Default::default(),
            },
            accept_paused: false,
            drive_soon: Vec::new(),
            accept_retry_at: None,
            next_eviction_warning: now,
            next_handshake_warning: now,
            drain_deadline: None,
            next_sweep: now + Duration::from_secs(1),
            completion_source: None,
            proxy,
        })
    }

    /// The epoll fd, for registering this loop as a reader with asyncio.
    fn fileno(&self) -> RawFd {
        self.poll.as_raw_fd()
    }

    /// Sets the `CoroutineRunner` (python/rush/coroutines.py): its `spare`
    /// task is current while a coroutine's first step runs here, and its
    /// `adopt(...)` continues a coroutine that suspended, as that task,
    /// which later calls [`Server::complete`].
    fn set_async_scheduler(&mut self, runner: Py<PyAny>) {
        self.core.async_scheduler = Some(runner);
    }

    /// Sets the no-argument callable a WebSocket calls when it leaves work
    /// for the loop and none is pending yet: it should schedule
    /// `flush_websockets()` on the event loop (never run it inline).
    fn set_websocket_notifier(&mut self, notifier: Py<PyAny>) {
        *self
            .core
            .ws_flush
            .notify
            .lock()
            .unwrap_or_else(|poison| poison.into_inner()) = Some(notifier);
    }

    /// Drives the WebSocket connections whose app sent, accepted, closed or
    /// took from a full queue since the last call (scheduled by the notifier).
    fn flush_websockets(&mut self, py: Python<'_>) {
        self.guarded(py, None, |server| server.flush_websockets_now(py));
    }

    /// Sets `notifier(key, request_id)`, returning the no-argument callable an
    /// ASGI `send` calls after each message once its app has suspended (it
    /// should schedule `flush_asgi(key, request_id)` on the event loop).
    fn set_asgi_notifier(&mut self, notifier: Py<PyAny>) {
        self.core.asgi_notifier = Some(notifier);
    }

    /// Sets the callable `scheduler(app, environ, key, request_id)` that runs a
    /// WSGI app on a thread pool instead of the loop thread.
    fn set_blocking_scheduler(&mut self, scheduler: Py<PyAny>) {
        self.core.blocking_scheduler = Some(scheduler);
    }

    /// Registers `fd` (made readable by pool threads when work finishes) and
    /// `drain()`, which returns the finished `(key, request_id, future)` tuples.
    fn set_completion_source(&mut self, fd: RawFd, drain: Py<PyAny>) -> PyResult<()> {
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), COMPLETIONS, Interest::READABLE)?;
        self.completion_source = Some((fd, drain));
        Ok(())
    }

    /// Shares `liveness` with the supervisor: from now on every loop pass
    /// stores its time there, and every request is counted (src/liveness.rs).
    fn set_liveness(&mut self, liveness: Py<Liveness>) {
        liveness.get().beat();
        self.core.liveness = Some(liveness);
    }

    /// Runs the loop until a graceful shutdown (requested through `stop`)
    /// has drained every connection or timed out.
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
                self.guarded(py, None, |server| server.start_drain(py, graceful_timeout));
            }
            if self.drain_finished() {
                self.close_all();
                return Ok(());
            }
            let timeout = if self.drain_deadline.is_some() || self.accept_retry_at.is_some() {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(1)
            };
            self.guarded(py, None, |server| server.run_once(py, Some(timeout)))
                .unwrap_or(Ok(()))?;
        }
    }

    /// Handles whatever is ready without blocking (asyncio mode calls this
    /// when the epoll fd is readable).
    fn poll(&mut self, py: Python<'_>) -> PyResult<()> {
        self.guarded(py, None, |server| server.run_once(py, Some(Duration::ZERO)))
            .unwrap_or(Ok(()))
    }

    /// Checks deadlines; returns True once a requested shutdown has drained
    /// (asyncio mode calls this periodically, from a task: connections with
    /// work it finds are driven by the next `poll`, which the caller
    /// schedules outside any task).
    fn tick(&mut self, py: Python<'_>) -> bool {
        if let Some(liveness) = &self.core.liveness {
            liveness.get().beat();
        }
        self.guarded(py, None, |server| {
            server.core.now = Instant::now();
            server.sweep_deadlines(py);
            server.resume_accepting(py);
        });
        if self.drain_finished() {
            self.close_all();
            return true;
        }
        false
    }

    /// Writes what a suspended ASGI app has sent so far (scheduled by its notifier).
    fn flush_asgi(&mut self, py: Python<'_>, key: usize, request_id: u64) {
        self.guarded(py, Some(key), |server| {
            server.write_asgi_progress(py, key, request_id)
        });
    }

    /// Stops accepting, closes idle connections, and lets busy ones finish
    /// their current request (answered with `Connection: close`).
    fn begin_shutdown(&mut self, py: Python<'_>, graceful_timeout: f64) -> PyResult<()> {
        let graceful_timeout = seconds_or_zero("graceful_timeout", graceful_timeout)?;
        self.guarded(py, None, |server| server.start_drain(py, graceful_timeout));
        Ok(())
    }

    /// Finishes the request whose async handler was scheduled for
    /// request `request_id` on connection `key`: `task` is the finished
    /// asyncio task (or pool future).
    fn complete(&mut self, py: Python<'_>, key: usize, request_id: u64, task: &Bound<'_, PyAny>) {
        self.guarded(py, Some(key), |server| {
            server.complete_request(py, key, request_id, task)
        });
    }

    /// Number of open connections.
    #[getter]
    fn connection_count(&self) -> usize {
        self.open_connections()
    }
}

impl Server {
    /// Connections open now: HTTP ones and proxy ones.
    pub(crate) fn open_connections(&self) -> usize {
        self.connections.len() + self.proxy.as_ref().map_or(0, ProxyLoop::len)
    }

    /// The one way Python's calls reach the loop: `work` runs under
    /// `catch_unwind`, and a panic (a bug of ours) is logged and costs at
    /// most the connection `key` the work was for, never the worker.
    /// `None` means the work panicked.
    fn guarded<R>(
        &mut self,
        py: Python<'_>,
        key: Option<usize>,
        work: impl FnOnce(&mut Server) -> R,
    ) -> Option<R> {
        match catch_unwind(AssertUnwindSafe(|| work(self))) {
            Ok(result) => Some(result),
            Err(_) => {
                let message = match key {
                    Some(_) => "internal error while serving a connection; closing it",
                    None => "internal error in the worker's loop; serving on",
                };
                self.core.log_error(py, message, None);
                if let Some(key) = key {
                    self.close_connection(key);
                }
                None
            }
        }
    }
}

/// A descriptor of our own for the listening socket `fd`, which the caller
/// keeps. A number that is not an open listening socket is a `ValueError`,
/// never undefined behaviour: the fd is duplicated with `fcntl`, which
/// checks it, before anything treats it as a socket.
pub(crate) fn adopt_listening_socket(fd: RawFd) -> PyResult<OwnedFd> {
    let invalid = |why: &str| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "listener_fd {fd} is not a listening socket: {why}"
        ))
    };
    if fd < 0 {
        return Err(invalid("negative"));
    }
    // SAFETY: F_DUPFD_CLOEXEC reads no memory of ours; on a number that is
    // not an open descriptor it fails with EBADF and changes nothing.
    let duplicate = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if duplicate < 0 {
        return Err(invalid(&std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: `duplicate` is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(duplicate) };
    let mut listening: libc::c_int = 0;
    let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `owned` is open; `listening` and `length` are live locals of
    // the sizes passed. On a non-socket this fails with ENOTSOCK.
    let result = unsafe {
        libc::getsockopt(
            owned.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut listening as *mut libc::c_int).cast(),
            &mut length,
        )
    };
    if result != 0 {
        return Err(invalid(&std::io::Error::last_os_error().to_string()));
    }
    if listening == 0 {
        return Err(invalid("listen() was not called on it"));
    }
    Ok(owned)
}

/// `--header NAME:VALUE` pairs as header lines, each checked as a field
/// name and value (nothing else can be smuggled into every response head).
fn header_lines(headers: &[(String, String)]) -> PyResult<Vec<u8>> {
    let mut lines = Vec::new();
    for (name, value) in headers {
        let value = value.trim();
        if !rush_proto::response::is_valid_header_name(name.as_bytes())
            || !rush_proto::response::is_valid_header_value(value.as_bytes())
        {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "not a valid response header: {name:?}: {value:?}"
            )));
        }
        lines.extend_from_slice(name.as_bytes());
        lines.extend_from_slice(b": ");
        lines.extend_from_slice(value.as_bytes());
        lines.extend_from_slice(b"\r\n");
    }
    Ok(lines)
}
