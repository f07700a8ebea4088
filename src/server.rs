//! The worker's event loop: one epoll instance, every socket, every request.
//!
//! How it works:
//! * All sockets are registered edge-triggered (mio). An event means "drive
//!   this connection": process buffered requests, write, read, repeat until
//!   the kernel says EAGAIN ([`Server::drive`]).
//! * Every complete request in the buffer is answered, in order, into one
//!   output buffer, which is written once (pipelining costs nothing extra).
//! * Python handlers are called right here on the loop thread with the GIL
//!   held. The GIL is released only while the loop sleeps in `epoll_wait`.
//! * `async def` handlers are first driven with `coroutine.send(None)`: one
//!   that finishes without suspending never touches asyncio. One that
//!   suspends is handed to asyncio (the worker then runs this loop as an
//!   asyncio reader), and its connection waits in `Phase::AwaitingHandler`
//!   with its later pipelined requests buffered, so order is kept.
//! * Deadlines are checked by a sweep once a second: O(connections) per
//!   second is far below the per-request work and needs no timer structure.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use mio::net::{TcpListener, UnixListener};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyString, PyTuple};
use rush_proto::{
    parse_request_head, BodyFraming, ChunkedDecoder, DateCache, HeadStatus, HeaderSpan, Limits,
    Method, ProtoError, RequestHead, Version,
};
use slab::Slab;

use crate::asgi::{address_object, build_scope, AsgiReceive, AsgiSend, AsgiSettings, SendState};
use crate::body::{BodyBuffer, RequestBody};
use crate::connection::{
    AsgiExchange, AwaitingResponse, BodyProgress, Connection, PendingBody, Phase, Stream,
};
use crate::request::{decode_path, header_fields, Request, RequestParts};
use crate::response::{finish_head, render_result, write_status_page, ResponseContext};
use crate::router::{Handler, RouteDecision, Router};
use crate::static_files::{ConditionalHeaders, StaticFiles};
use crate::wsgi::{build_environ, call_wsgi, WsgiSettings};

const LISTENER: Token = Token(0);
const WAKEUP: Token = Token(1);
const FILE_EVENTS: Token = Token(2);
const COMPLETIONS: Token = Token(3);
const FIRST_CONNECTION: usize = 4;

/// Most connections one worker accepts per listener event. Every worker
/// sharing the listening socket wakes for it; one that accepted until
/// EAGAIN would take the whole queue and leave the others idle.
const ACCEPT_BATCH: usize = 16;
/// Bytes read per `read` call.
const READ_CHUNK: usize = 64 * 1024;
/// Stop turning input into responses while this much output is unsent.
const OUTPUT_HIGH_WATER: usize = 1024 * 1024;
/// How long to discard input after refusing a request, before closing.
const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes discarded while lingering.
const LINGER_MAX_BYTES: usize = 1024 * 1024;

const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

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

    fn is_set(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }
}

/// Bounds and timeouts, fixed for the life of the worker.
struct LoopConfig {
    limits: Limits,
    max_connections: usize,
    keep_alive_timeout: Duration,
    header_timeout: Duration,
    body_timeout: Duration,
    send_timeout: Duration,
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

/// What the request-handling code needs besides the connection itself.
struct Core {
    router: Py<Router>,
    static_files: StaticFiles,
    config: LoopConfig,
    date: DateCache,
    now: Instant,
    read_buffer: Vec<u8>,
    header_scratch: Vec<HeaderSpan>,
    /// Decoded chunked-body bytes on their way to a `BodyBuffer`.
    body_scratch: Vec<u8>,
    error_logger: Py<PyAny>,
    access_logger: Option<Py<PyAny>>,
    async_scheduler: Option<Py<PyAny>>,
    /// Runs `call_wsgi(app, environ)` on a thread pool (`--threads`):
    /// called as `scheduler(app, environ, key, request_id)`.
    blocking_scheduler: Option<Py<PyAny>>,
    wsgi: Option<WsgiSettings>,
    asgi: Option<AsgiSettings>,
    /// `notifier(key, request_id)` returns the callable an ASGI `send` calls
    /// after each message once the app has suspended.
    asgi_notifier: Option<Py<PyAny>>,
    /// The id given to the next request that continues off the loop.
    next_request_id: u64,
    /// Request lines of ASGI apps still running after their response was
    /// complete (background work), by request id: a late exception is
    /// logged with the request it belongs to.
    detached_requests: std::collections::HashMap<u64, String>,
    draining: bool,
}

/// What became of a dispatched request.
enum Outcome {
    /// Answered; the connection may serve the next request.
    KeepAlive,
    /// Answered; close after writing.
    Close,
    /// An async handler is still running.
    Pending,
}

/// Whether a connection survives a drive.
#[derive(PartialEq, Eq)]
enum Disposition {
    Open,
    Close,
}

/// The native server loop of one worker.
#[pyclass(module = "rush._rush", unsendable)]
pub struct Server {
    poll: Poll,
    events: Events,
    listener: Option<Listener>,
    connections: Slab<Connection>,
    core: Core,
    accept_paused: bool,
    drain_deadline: Option<Instant>,
    next_sweep: Instant,
    /// Pool threads signal finished work here; `completion_drain()` returns
    /// `(key, request_id, future)` tuples to complete.
    completion_source: Option<(RawFd, Py<PyAny>)>,
}

#[pymethods]
impl Server {
    #[new]
    #[pyo3(signature = (
        listener_fd, router, error_logger, *, unix=false, access_logger=None, wakeup_fd=None,
        max_request_line=8192, max_head_size=16384, max_headers=100,
        max_body_size=16 * 1024 * 1024, max_connections=10000,
        keep_alive_timeout=5.0, header_timeout=10.0, body_timeout=30.0, send_timeout=30.0,
        wsgi_app=None, root_path=String::new(), wsgi_multithread=false, wsgi_multiprocess=false,
        asgi_app=None, asgi_state=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        listener_fd: RawFd,
        router: Py<Router>,
        error_logger: Py<PyAny>,
        unix: bool,
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
    ) -> PyResult<Self> {
        let poll = Poll::new()?;
        // SAFETY: the Python socket object that owns `listener_fd` outlives
        // this call; we only borrow it to duplicate it into an fd we own.
        let owned = unsafe { BorrowedFd::borrow_raw(listener_fd) }.try_clone_to_owned()?;
        let mut listener = if unix {
            let listener = std::os::unix::net::UnixListener::from(owned);
            listener.set_nonblocking(true)?;
            Listener::Unix(UnixListener::from_std(listener))
        } else {
            let listener = std::net::TcpListener::from(owned);
            listener.set_nonblocking(true)?;
            Listener::Tcp(TcpListener::from_std(listener))
        };
        match &mut listener {
            Listener::Tcp(socket) => {
                poll.registry()
                    .register(socket, LISTENER, Interest::READABLE)?
            }
            Listener::Unix(socket) => {
                poll.registry()
                    .register(socket, LISTENER, Interest::READABLE)?
            }
        }
        if let Some(fd) = wakeup_fd {
            poll.registry()
                .register(&mut SourceFd(&fd), WAKEUP, Interest::READABLE)?;
        }
        let server_address = match &listener {
            Listener::Tcp(socket) => socket.local_addr().ok(),
            Listener::Unix(_) => None,
        };
        let asgi = asgi_app
            .map(|app| AsgiSettings::new(py, app, root_path.clone(), asgi_state, server_address))
            .transpose()?;
        let wsgi = wsgi_app
            .map(|app| {
                WsgiSettings::new(
                    py,
                    app,
                    root_path,
                    wsgi_multithread,
                    wsgi_multiprocess,
                    server_address,
                )
            })
            .transpose()?;
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
        let seconds = |value: f64| Duration::from_secs_f64(value.max(0.001));
        let now = Instant::now();
        Ok(Server {
            poll,
            events: Events::with_capacity(1024),
            listener: Some(listener),
            connections: Slab::with_capacity(1024),
            core: Core {
                router,
                static_files,
                config: LoopConfig {
                    limits: Limits {
                        max_request_line,
                        max_head_size,
                        max_headers,
                        max_body_size,
                        ..Limits::default()
                    },
                    max_connections: max_connections.max(1),
                    keep_alive_timeout: seconds(keep_alive_timeout),
                    header_timeout: seconds(header_timeout),
                    body_timeout: seconds(body_timeout),
                    send_timeout: seconds(send_timeout),
                },
                date: DateCache::new(SystemTime::now()),
                now,
                read_buffer: vec![0; READ_CHUNK],
                header_scratch: Vec::with_capacity(32),
                body_scratch: Vec::new(),
                error_logger,
                access_logger,
                async_scheduler: None,
                blocking_scheduler: None,
                wsgi,
                asgi,
                asgi_notifier: None,
                next_request_id: 0,
                detached_requests: std::collections::HashMap::new(),
                draining: false,
            },
            accept_paused: false,
            drain_deadline: None,
            next_sweep: now + Duration::from_secs(1),
            completion_source: None,
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

    /// Sets `notifier(key, request_id)`, returning the no-argument callable an
    /// ASGI `send` calls after each message once its app has suspended (it
    /// should schedule `flush_asgi(key, request_id)` on the event loop).
    fn set_asgi_notifier(&mut self, notifier: Py<PyAny>) {
        self.core.asgi_notifier = Some(notifier);
    }

    /// Writes what a suspended ASGI app has sent so far (scheduled by its notifier).
    fn flush_asgi(&mut self, py: Python<'_>, key: usize, request_id: u64) {
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let Phase::AwaitingHandler(awaiting) = &connection.phase else {
            return;
        };
        if awaiting.request_id != request_id {
            return;
        }
        let Some(exchange) = &awaiting.asgi else {
            return;
        };
        let exchange = AsgiExchange {
            send: exchange.send.clone_ref(py),
            receive: exchange.receive.clone_ref(py),
        };
        let (keep_alive, head_only, http10) =
            (awaiting.keep_alive, awaiting.head_only, awaiting.http10);
        let unread_body = awaiting.body_stream.is_some();
        let request_line = awaiting.request_line.clone();
        let outcome = self.core.write_asgi(
            py,
            connection,
            &exchange,
            AsgiWrite {
                keep_alive,
                head_only,
                http10,
                app_finished: false,
            },
            &RequestLine::Owned(&request_line),
        );
        if let Some(mut outcome) = outcome {
            // The response is complete even if the app goes on (background work).
            if unread_body && matches!(outcome, Outcome::KeepAlive) {
                outcome = Outcome::Close;
            }
            self.core.after_outcome(connection, outcome);
            self.core.detached_requests.insert(request_id, request_line);
        }
        self.drive_connection(py, key);
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

    /// Runs the loop until a graceful shutdown (requested through `stop`)
    /// has drained every connection or timed out.
    #[pyo3(signature = (stop, graceful_timeout=30.0))]
    fn serve(
        &mut self,
        py: Python<'_>,
        stop: &Bound<'_, StopHandle>,
        graceful_timeout: f64,
    ) -> PyResult<()> {
        loop {
            if self.drain_deadline.is_none() && stop.get().is_set() {
                self.begin_shutdown(graceful_timeout);
            }
            if self.drain_finished() {
                self.close_all();
                return Ok(());
            }
            let timeout = if self.drain_deadline.is_some() {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(1)
            };
            self.run_once(py, Some(timeout))?;
        }
    }

    /// Handles whatever is ready without blocking (asyncio mode calls this
    /// when the epoll fd is readable).
    fn poll(&mut self, py: Python<'_>) -> PyResult<()> {
        self.run_once(py, Some(Duration::ZERO))
    }

    /// Checks deadlines; returns True once a requested shutdown has drained
    /// (asyncio mode calls this periodically).
    fn tick(&mut self) -> bool {
        self.core.now = Instant::now();
        self.sweep_deadlines();
        if self.drain_finished() {
            self.close_all();
            return true;
        }
        false
    }

    /// Stops accepting, closes idle connections, and lets busy ones finish
    /// their current request (answered with `Connection: close`).
    fn begin_shutdown(&mut self, graceful_timeout: f64) {
        if self.drain_deadline.is_some() {
            return;
        }
        self.core.draining = true;
        self.drain_deadline =
            Some(Instant::now() + Duration::from_secs_f64(graceful_timeout.max(0.0)));
        if let Some(mut listener) = self.listener.take() {
            let registry = self.poll.registry();
            let _ = match &mut listener {
                Listener::Tcp(socket) => registry.deregister(socket),
                Listener::Unix(socket) => registry.deregister(socket),
            };
        }
        let idle: Vec<usize> = self
            .connections
            .iter()
            .filter(|(_, connection)| {
                matches!(connection.phase, Phase::Idle) && !connection.has_pending_output()
            })
            .map(|(key, _)| key)
            .collect();
        for key in idle {
            self.connections.remove(key);
        }
    }

    /// Number of open connections.
    #[getter]
    fn connection_count(&self) -> usize {
        self.connections.len()
    }

    /// Finishes the request whose async handler was scheduled for
    /// request `request_id` on connection `key`: `task` is the finished
    /// asyncio task (or pool future).
    fn complete(&mut self, py: Python<'_>, key: usize, request_id: u64, task: &Bound<'_, PyAny>) {
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        let current = self.connections.get(key).is_some_and(|connection| {
            matches!(&connection.phase, Phase::AwaitingHandler(awaiting) if awaiting.request_id == request_id)
        });
        if !current {
            // The response was already complete (an ASGI app working on after
            // it), or the client left: an exception still deserves a log line.
            let line = self.core.detached_requests.remove(&request_id);
            self.core.log_late_failure(py, task, line.as_deref());
            return;
        }
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let Phase::AwaitingHandler(awaiting) =
            std::mem::replace(&mut connection.phase, Phase::Idle)
        else {
            return;
        };
        let result = task.call_method0("result");
        let line = RequestLine::Owned(&awaiting.request_line);
        if let Some(exchange) = &awaiting.asgi {
            let mut outcome = self
                .core
                .complete_asgi(py, connection, &awaiting, exchange, &line, result);
            if awaiting.body_stream.is_some() && matches!(outcome, Outcome::KeepAlive) {
                // The app finished before its body fully arrived.
                outcome = Outcome::Close;
            }
            self.core.after_outcome(connection, outcome);
            self.drive_connection(py, key);
            return;
        }
        let outcome = self.core.finish(
            py,
            connection,
            &awaiting,
            &awaiting.request_head,
            &line,
            result,
        );
        self.core.after_outcome(connection, outcome);
        self.drive_connection(py, key);
    }
}

impl Server {
    fn drain_finished(&self) -> bool {
        match self.drain_deadline {
            Some(deadline) => self.connections.is_empty() || Instant::now() >= deadline,
            None => false,
        }
    }

    fn close_all(&mut self) {
        self.connections.clear();
    }

    /// One epoll wait (without the GIL when it may block) and the work it reports.
    fn run_once(&mut self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<()> {
        let poll = &mut self.poll;
        let events = &mut self.events;
        let result = if timeout == Some(Duration::ZERO) {
            poll.poll(events, timeout)
        } else {
            py.detach(|| poll.poll(events, timeout))
        };
        match result {
            Ok(()) => {}
            // A signal arrived: let Python run its handlers (which may raise).
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {
                return py.check_signals();
            }
            Err(error) => return Err(error.into()),
        }
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        // A file change reported in the same batch as a request must be seen
        // first, or that request could get the stale cached file.
        if events.iter().any(|event| event.token() == FILE_EVENTS) {
            self.core.static_files.handle_file_events();
        }
        let mut check_signals = false;
        let mut completions = false;
        for event in events.iter() {
            match event.token() {
                LISTENER => self.accept_connections(py),
                WAKEUP => check_signals = true,
                FILE_EVENTS => {}
                COMPLETIONS => completions = true,
                Token(token) => {
                    let key = token - FIRST_CONNECTION;
                    // Writability matters only to a connection with output waiting.
                    let writable_only = event.is_writable()
                        && !event.is_readable()
                        && !event.is_error()
                        && !event.is_write_closed();
                    if writable_only
                        && self
                            .connections
                            .get(key)
                            .is_some_and(|connection| !connection.has_pending_output())
                    {
                        continue;
                    }
                    if event.is_read_closed() || event.is_error() || event.is_write_closed() {
                        if let Some(connection) = self.connections.get_mut(key) {
                            connection.peer_sent_fin = true;
                        }
                    }
                    self.drive_connection(py, key);
                }
            }
        }
        self.events = events;
        if self.core.now >= self.next_sweep {
            self.sweep_deadlines();
        }
        if completions {
            self.complete_finished_work(py)?;
        }
        self.resume_accepting(py);
        if check_signals {
            py.check_signals()?;
        }
        Ok(())
    }

    /// Completes requests whose work finished on a pool thread.
    fn complete_finished_work(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some((fd, drain)) = &self.completion_source else {
            return Ok(());
        };
        let mut scratch = [0u8; 256];
        // SAFETY: `fd` is the non-blocking read end registered by
        // `set_completion_source`, kept open by its Python owner; `scratch`
        // is a live local buffer of the length passed.
        while unsafe { libc::read(*fd, scratch.as_mut_ptr().cast(), scratch.len()) } > 0 {}
        let finished = drain.call0(py)?;
        for item in finished.bind(py).try_iter()? {
            let (key, request_id, future): (usize, u64, Bound<'_, PyAny>) = item?.extract()?;
            self.complete(py, key, request_id, &future);
        }
        Ok(())
    }

    fn drive_connection(&mut self, py: Python<'_>, key: usize) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let core = &mut self.core;
        let disposition = match catch_unwind(AssertUnwindSafe(|| core.drive(py, connection, key))) {
            Ok(disposition) => disposition,
            Err(_) => {
                core.log_error(
                    py,
                    "internal error while serving a connection; closing it",
                    None,
                );
                Disposition::Close
            }
        };
        if disposition == Disposition::Close {
            self.close_connection(key);
        }
    }

    fn close_connection(&mut self, key: usize) {
        self.connections.try_remove(key);
    }

    fn rearm_listener(&mut self) {
        let registry = self.poll.registry();
        let _ = match &mut self.listener {
            Some(Listener::Tcp(socket)) => {
                registry.reregister(socket, LISTENER, Interest::READABLE)
            }
            Some(Listener::Unix(socket)) => {
                registry.reregister(socket, LISTENER, Interest::READABLE)
            }
            None => Ok(()),
        };
    }

    /// Accepting paused at the connection cap resumes once there is room.
    /// Edge-triggered: connections that queued meanwhile raise no new event,
    /// so the loop accepts them itself.
    fn resume_accepting(&mut self, py: Python<'_>) {
        if self.accept_paused && self.connections.len() < self.core.config.max_connections {
            self.accept_paused = false;
            self.accept_connections(py);
        }
    }

    fn accept_connections(&mut self, py: Python<'_>) {
        let mut accepted_now = 0;
        loop {
            if accepted_now == ACCEPT_BATCH {
                // Leave the rest of the queue to the other workers woken by the
                // same event; re-arming raises a new event here if any remain.
                self.rearm_listener();
                return;
            }
            if self.connections.len() >= self.core.config.max_connections {
                self.accept_paused = true;
                return;
            }
            let accepted = match &self.listener {
                Some(Listener::Tcp(listener)) => listener.accept().map(|(stream, address)| {
                    // Responses are written whole; Nagle would only delay them.
                    let _ = stream.set_nodelay(true);
                    (Stream::Tcp(stream), Some(address))
                }),
                Some(Listener::Unix(listener)) => listener
                    .accept()
                    .map(|(stream, _)| (Stream::Unix(stream), None)),
                None => return,
            };
            let (stream, client) = match accepted {
                Ok(accepted) => {
                    accepted_now += 1;
                    accepted
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    // EMFILE, ENFILE, ENOBUFS, ECONNABORTED: the listener stays
                    // usable; log and let the next event retry.
                    self.core
                        .log_error(py, &format!("accept failed: {error}"), None);
                    return;
                }
            };
            let deadline = self.core.now + self.core.config.keep_alive_timeout;
            let key = self
                .connections
                .insert(Connection::new(stream, client, deadline));
            // A connection accepted now may carry a request sent after a file
            // changed, later than this batch's inotify events: read them first.
            if !self.core.static_files.is_empty() {
                self.core.static_files.handle_file_events();
            }
            // The listener has TCP_DEFER_ACCEPT, so the request is usually here
            // already: serve it now, and register with epoll only a connection
            // that stays open (a `Connection: close` exchange never needs to).
            self.drive_connection(py, key);
            let Some(connection) = self.connections.get_mut(key) else {
                continue;
            };
            let token = Token(key + FIRST_CONNECTION);
            if self
                .poll
                .registry()
                .register(
                    &mut connection.stream,
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                self.connections.remove(key);
            }
        }
    }

    /// Closes connections whose deadline passed; a client that stalled in
    /// the middle of a request gets a 408 first.
    fn sweep_deadlines(&mut self) {
        let now = self.core.now;
        self.next_sweep = now + Duration::from_secs(1);
        let mut expired = Vec::new();
        self.core.date.refresh(SystemTime::now());
        let date_line = self.core.date.header_line();
        for (key, connection) in self.connections.iter_mut() {
            if now < connection.deadline {
                continue;
            }
            match &connection.phase {
                Phase::AwaitingHandler(awaiting) if awaiting.body_stream.is_none() => {}
                Phase::AwaitingHandler(_) => expired.push(key),
                Phase::ReadingHead | Phase::ReadingBody(_) if connection.output.is_empty() => {
                    // Best effort: one write attempt, then close.
                    connection.output.extend_from_slice(
                        b"HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n",
                    );
                    connection.output.extend_from_slice(date_line);
                    connection.output.extend_from_slice(b"\r\n");
                    let _ = connection.write_output();
                    expired.push(key);
                }
                _ => expired.push(key),
            }
        }
        for key in expired {
            self.connections.remove(key);
        }
    }
}

impl Core {
    /// Processes, writes and reads until the connection would block, closes,
    /// or waits for an async handler.
    fn drive(&mut self, py: Python<'_>, connection: &mut Connection, key: usize) -> Disposition {
        // A read shorter than the buffer drained the socket; data arriving
        // later raises a new edge-triggered event. Skipping the read that
        // would only say EAGAIN saves a third of the syscalls per request.
        let mut socket_may_have_input = true;
        loop {
            if connection.can_process() && !connection.input.is_empty() {
                self.process_input(py, connection, key);
            }
            if connection.has_pending_output() {
                if connection.write_output().is_err() {
                    return Disposition::Close;
                }
                if connection.has_pending_output() {
                    // Socket full: wait for EPOLLOUT; read nothing meanwhile (backpressure).
                    connection.deadline = self.now + self.config.send_timeout;
                    return Disposition::Open;
                }
                if connection.can_process() && !connection.input.is_empty() {
                    continue;
                }
            }
            if self.feed_body_stream(py, connection).is_err() {
                return Disposition::Close;
            }
            match &connection.phase {
                Phase::AwaitingHandler(awaiting) => {
                    let streaming = awaiting.body_stream.is_some()
                        && awaiting.asgi.as_ref().is_some_and(|exchange| {
                            exchange
                                .receive
                                .bind(py)
                                .try_borrow_mut()
                                .is_ok_and(|mut receive| receive.wants_more())
                        });
                    if !streaming {
                        // The client closed while an ASGI app still runs (a
                        // stream, say): its receive() now says http.disconnect.
                        if connection.peer_sent_fin {
                            if let Some(exchange) = &awaiting.asgi {
                                if let Ok(mut receive) = exchange.receive.bind(py).try_borrow_mut()
                                {
                                    receive.finish(py);
                                }
                            }
                        }
                        return Disposition::Open;
                    }
                    // Read on: the body goes to the running app.
                }
                &Phase::Closing { linger } => {
                    if !linger || connection.peer_closed {
                        return Disposition::Close;
                    }
                    connection.stream.shutdown_write();
                    connection.phase = Phase::Lingering;
                    connection.input = Vec::new();
                    connection.deadline = self.now + LINGER_TIMEOUT;
                }
                _ => {}
            }
            if connection.peer_closed {
                return Disposition::Close;
            }
            if !socket_may_have_input {
                return Disposition::Open;
            }
            match connection.stream.read(&mut self.read_buffer) {
                Ok(0) => {
                    connection.peer_closed = true;
                    if !connection.can_process()
                        && !matches!(connection.phase, Phase::Closing { .. })
                    {
                        return Disposition::Close;
                    }
                }
                Ok(count) => {
                    // With the peer's FIN already signalled, read on to see the EOF.
                    socket_may_have_input =
                        count == self.read_buffer.len() || connection.peer_sent_fin;
                    if let Phase::Lingering = connection.phase {
                        // Count discarded bytes in `input`'s length without keeping them.
                        if connection.input.capacity() + count > LINGER_MAX_BYTES {
                            return Disposition::Close;
                        }
                        connection.input.reserve(count);
                        continue;
                    }
                    if let Phase::Idle = connection.phase {
                        connection.phase = Phase::ReadingHead;
                        connection.deadline = self.now + self.config.header_timeout;
                    }
                    if let Phase::ReadingBody(_) | Phase::AwaitingHandler(_) = connection.phase {
                        connection.deadline = self.now + self.config.body_timeout;
                    }
                    connection
                        .input
                        .extend_from_slice(&self.read_buffer[..count]);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Disposition::Open;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Disposition::Close,
            }
        }
    }

    /// Turns buffered input into responses until it runs out, a response
    /// closes the connection, an async handler suspends, or output is over
    /// the high-water mark.
    fn process_input(&mut self, py: Python<'_>, connection: &mut Connection, key: usize) {
        let input = std::mem::take(&mut connection.input);
        let mut offset = 0;
        while offset < input.len()
            && connection.can_process()
            && connection.output.len() < OUTPUT_HIGH_WATER
        {
            let available = &input[offset..];
            if let Phase::ReadingBody(pending) = &mut connection.phase {
                match continue_body(pending, available, &mut self.body_scratch) {
                    Ok((consumed, false)) => {
                        offset += consumed;
                        break;
                    }
                    Ok((consumed, true)) => {
                        offset += consumed;
                        let Phase::ReadingBody(pending) =
                            std::mem::replace(&mut connection.phase, Phase::Idle)
                        else {
                            unreachable!("phase checked above");
                        };
                        let outcome = self.dispatch(
                            py,
                            connection,
                            key,
                            &pending.head_bytes,
                            &pending.head,
                            pending.body.as_request_body(),
                        );
                        self.after_outcome(connection, outcome);
                    }
                    Err(error) => {
                        self.refuse_body(py, connection, error);
                        offset = input.len();
                    }
                }
                continue;
            }
            match parse_request_head(available, &self.config.limits, &mut self.header_scratch) {
                Ok(HeadStatus::Partial) => {
                    if let Phase::Idle = connection.phase {
                        connection.phase = Phase::ReadingHead;
                        connection.deadline = self.now + self.config.header_timeout;
                    }
                    break;
                }
                Err(error) => {
                    self.refuse(connection, &error);
                    offset = input.len();
                }
                Ok(HeadStatus::Complete(head)) => {
                    let head_end = head.head_len;
                    let head_bytes = &available[..head_end];
                    match start_body(&head, &available[head_end..], &self.config.limits) {
                        Err(error) => {
                            self.refuse_body(py, connection, error);
                            offset = input.len();
                        }
                        Ok(BodyStart::Complete { body, consumed }) => {
                            offset += head_end + consumed;
                            let outcome = self.dispatch(
                                py,
                                connection,
                                key,
                                head_bytes,
                                &head,
                                RequestBody::Bytes(body),
                            );
                            self.after_outcome(connection, outcome);
                        }
                        Ok(BodyStart::Decoded { body, consumed }) => {
                            offset += head_end + consumed;
                            let outcome = self.dispatch(
                                py,
                                connection,
                                key,
                                head_bytes,
                                &head,
                                RequestBody::Bytes(&body),
                            );
                            self.after_outcome(connection, outcome);
                        }
                        Ok(BodyStart::Incomplete {
                            body: BodyBuffer::Memory(initial),
                            progress,
                            consumed,
                        }) if self.streams_body_to_asgi(head.path.of(head_bytes)) => {
                            // An ASGI app starts now and receives the body as it comes.
                            if head.expect_continue
                                && consumed == 0
                                && head.version == Version::Http11
                            {
                                connection.output.extend_from_slice(CONTINUE_100);
                            }
                            offset += head_end + consumed;
                            let keep_alive = head.keep_alive && !self.draining;
                            let body = AsgiBody::Streaming { initial, progress };
                            let outcome = self.dispatch_asgi(
                                py, connection, key, head_bytes, &head, body, keep_alive,
                            );
                            self.after_outcome(connection, outcome);
                            connection.deadline = self.now + self.config.body_timeout;
                        }
                        Ok(BodyStart::Incomplete {
                            body,
                            progress,
                            consumed,
                        }) => {
                            if head.expect_continue
                                && consumed == 0
                                && head.version == Version::Http11
                            {
                                connection.output.extend_from_slice(CONTINUE_100);
                            }
                            offset += head_end + consumed;
                            connection.phase = Phase::ReadingBody(Box::new(PendingBody {
                                head_bytes: head_bytes.to_vec(),
                                head,
                                body,
                                framing: progress,
                            }));
                            connection.deadline = self.now + self.config.body_timeout;
                        }
                    }
                }
            }
        }
        let mut input = input;
        if offset >= input.len() {
            input.clear();
            if input.capacity() > 64 * 1024 {
                input = Vec::new();
            }
        } else {
            input.drain(..offset);
        }
        if matches!(connection.phase, Phase::Closing { .. } | Phase::Lingering) {
            input.clear();
        }
        connection.input = input;
    }

    /// Sets the connection's phase from what became of a request.
    fn after_outcome(&self, connection: &mut Connection, outcome: Outcome) {
        match outcome {
            Outcome::Pending => {}
            Outcome::Close => connection.phase = Phase::Closing { linger: false },
            Outcome::KeepAlive if self.draining => {
                connection.phase = Phase::Closing { linger: false };
            }
            Outcome::KeepAlive => {
                connection.phase = Phase::Idle;
                connection.deadline = self.now + self.config.keep_alive_timeout;
            }
        }
    }

    /// Answers a request whose body could not be received, and closes.
    fn refuse_body(&mut self, py: Python<'_>, connection: &mut Connection, error: BodyError) {
        match error {
            BodyError::Protocol(error) => self.refuse(connection, &error),
            BodyError::Storage(error) => {
                self.log_error(py, &format!("cannot store a request body: {error}"), None);
                write_status_page(
                    &mut connection.output,
                    500,
                    std::iter::empty(),
                    &ResponseContext {
                        date_line: self.date.header_line(),
                        head_only: false,
                        keep_alive: false,
                        http10: false,
                        request_head: &[],
                        allow: None,
                    },
                    true,
                );
                connection.phase = Phase::Closing { linger: true };
            }
        }
    }

    /// Answers a request the protocol refused, and closes.
    fn refuse(&mut self, connection: &mut Connection, error: &ProtoError) {
        rush_proto::response::write_error_response(
            &mut connection.output,
            error,
            self.date.header_line(),
        );
        connection.phase = Phase::Closing { linger: true };
    }

    /// Routes one complete request and answers it (or starts its async handler).
    fn dispatch(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        head_bytes: &[u8],
        head: &RequestHead,
        body: RequestBody<'_>,
    ) -> Outcome {
        let keep_alive = head.keep_alive && !self.draining;
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: head.method == Method::Head,
            keep_alive,
            http10: head.version == Version::Http10,
            request_head: head_bytes,
            allow: None,
        };
        let method = head.method_span.of(head_bytes);
        let path = decode_path(head.path.of(head_bytes));
        let router = self.router.clone_ref(py);
        let router = router.bind(py).borrow();
        let decision = router.route(method, &path);
        let mut params: Option<Bound<'_, PyDict>> = None;
        let mut allow_for_handler: Option<Vec<u8>> = None;
        let (handler, default_status) = match decision {
            RouteDecision::Redirect(redirect) => {
                connection.output.extend_from_slice(&redirect.head_prefix);
                finish_head(&mut connection.output, &context, false);
                self.access_log(
                    py,
                    connection,
                    &RequestLine::Raw(head_bytes, head),
                    redirect.status,
                    0,
                );
                return keep_or_close(keep_alive);
            }
            RouteDecision::NotFound
                if !self.static_files.is_empty() && {
                    let raw_path = head.path.of(head_bytes);
                    self.static_files.find_mount(raw_path).is_some()
                } =>
            {
                let raw_path = head.path.of(head_bytes);
                let (mount, rest) = self
                    .static_files
                    .find_mount(raw_path)
                    .expect("mount found by the guard");
                let conditional = ConditionalHeaders::from_fields(header_fields(head_bytes));
                let start = connection.output.len();
                let outcome = self.static_files.respond(
                    mount,
                    rest,
                    raw_path,
                    head.query.map(|query| query.of(head_bytes)),
                    matches!(head.method, Method::Get | Method::Head),
                    &conditional,
                    &context,
                    &mut connection.output,
                );
                match router.error_handler(404) {
                    // The app's own 404 page wins over the native one.
                    Some(handler) if outcome.status == 404 => {
                        connection.output.truncate(start);
                        (handler, 404)
                    }
                    _ => {
                        connection.body = outcome.body;
                        let length = outcome.body_length as usize;
                        self.access_log(
                            py,
                            connection,
                            &RequestLine::Raw(head_bytes, head),
                            outcome.status,
                            length,
                        );
                        return keep_or_close(keep_alive);
                    }
                }
            }
            RouteDecision::NotFound if self.asgi.is_some() => {
                let body = AsgiBody::Complete(body);
                return self.dispatch_asgi(py, connection, key, head_bytes, head, body, keep_alive);
            }
            RouteDecision::NotFound if self.wsgi.is_some() => {
                return self.dispatch_wsgi(py, connection, key, head_bytes, head, body, keep_alive);
            }
            RouteDecision::NotFound => match router.error_handler(404) {
                Some(handler) => (handler, 404),
                None => {
                    let length = write_status_page(
                        &mut connection.output,
                        404,
                        std::iter::empty(),
                        &context,
                        false,
                    );
                    self.access_log(
                        py,
                        connection,
                        &RequestLine::Raw(head_bytes, head),
                        404,
                        length,
                    );
                    return keep_or_close(keep_alive);
                }
            },
            RouteDecision::MethodNotAllowed { allow } => match router.error_handler(405) {
                Some(handler) => {
                    allow_for_handler = Some(allow.to_vec());
                    (handler, 405)
                }
                None => {
                    let allow_header = std::iter::once((&b"Allow"[..], allow));
                    let length = write_status_page(
                        &mut connection.output,
                        405,
                        allow_header,
                        &context,
                        false,
                    );
                    self.access_log(
                        py,
                        connection,
                        &RequestLine::Raw(head_bytes, head),
                        405,
                        length,
                    );
                    return keep_or_close(keep_alive);
                }
            },
            RouteDecision::Handler {
                handler,
                params: matched,
            } => {
                if !matched.is_empty() {
                    let dict = PyDict::new(py);
                    for (name, value) in matched.iter() {
                        if dict.set_item(name, value).is_err() {
                            break;
                        }
                    }
                    params = Some(dict);
                }
                (handler, 200)
            }
        };
        let request = body.to_owned_body().map_err(PyErr::from).and_then(|body| {
            Bound::new(
                py,
                Request::new(RequestParts {
                    head: head_bytes,
                    method: head.method_span,
                    target: head.target,
                    path: head.path,
                    query: head.query,
                    version: head.version,
                    body,
                    client: connection.client,
                }),
            )
        });
        let mut awaiting = AwaitingResponse::new(head, keep_alive, default_status);
        awaiting.allow = allow_for_handler;
        if router.error_handler(500).is_some() {
            // Kept for the app's 500 handler, should this one raise.
            awaiting.request = request
                .as_ref()
                .ok()
                .map(|request| request.clone().unbind());
        }
        let line = RequestLine::Raw(head_bytes, head);
        let result =
            request.and_then(|request| call_handler(py, handler, &request, params.as_ref()));
        match result {
            Err(error) => self.finish(py, connection, &awaiting, head_bytes, &line, Err(error)),
            Ok(coroutine) if handler.is_async => {
                self.next_request_id += 1;
                awaiting.request_id = self.next_request_id;
                match self.start_coroutine(py, &coroutine, key, awaiting.request_id) {
                    Ok(CoroutineStart::Finished(result)) => {
                        self.finish(py, connection, &awaiting, head_bytes, &line, Ok(result))
                    }
                    Ok(CoroutineStart::Continuing) => {
                        awaiting.request_line = line.text().into_owned();
                        awaiting.request_head = head_bytes.to_vec();
                        connection.phase = Phase::AwaitingHandler(Box::new(awaiting));
                        Outcome::Pending
                    }
                    Err(error) => {
                        self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
                    }
                }
            }
            Ok(value) => self.finish(py, connection, &awaiting, head_bytes, &line, Ok(value)),
        }
    }

    /// Runs the ASGI app for a request: first step inline, the rest (if it
    /// suspends) as an asyncio task.
    #[allow(clippy::too_many_arguments)]
    fn dispatch_asgi(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        head_bytes: &[u8],
        head: &RequestHead,
        body: AsgiBody<'_>,
        keep_alive: bool,
    ) -> Outcome {
        let mut awaiting = AwaitingResponse::new(head, keep_alive, 200);
        let line = RequestLine::Raw(head_bytes, head);
        let (receive, body_stream) = match body {
            AsgiBody::Complete(body) => (body.to_owned_body().map(AsgiReceive::new), None),
            AsgiBody::Streaming { initial, progress } => {
                (Ok(AsgiReceive::streaming(initial)), Some(progress))
            }
        };
        let receive = match receive {
            Ok(receive) => receive,
            Err(error) => {
                return self.finish(
                    py,
                    connection,
                    &awaiting,
                    head_bytes,
                    &line,
                    Err(error.into()),
                )
            }
        };
        if connection.client_object.is_none() {
            match address_object(py, connection.client) {
                Ok(client) => connection.client_object = Some(client),
                Err(error) => {
                    return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
                }
            }
        }
        let Some(settings) = &self.asgi else {
            unreachable!("dispatch_asgi is called only with an ASGI app");
        };
        let app = settings.app.clone_ref(py);
        let client = connection.client_object.as_ref().expect("set just above");
        let started = build_scope(py, settings, head_bytes, head, client).and_then(|scope| {
            let receive = Py::new(py, receive)?;
            let send = Py::new(py, AsgiSend::new())?;
            let coroutine =
                app.bind(py)
                    .call1((scope, receive.clone_ref(py), send.clone_ref(py)))?;
            Ok((coroutine, AsgiExchange { send, receive }))
        });
        let (coroutine, exchange) = match started {
            Ok(started) => started,
            Err(error) => {
                return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
            }
        };
        let write = AsgiWrite {
            keep_alive,
            head_only: awaiting.head_only,
            http10: awaiting.http10,
            app_finished: false,
        };
        self.next_request_id += 1;
        awaiting.request_id = self.next_request_id;
        // An app that answers before its body has fully arrived leaves the
        // connection mid-body: it closes after the response.
        let unread_body = |outcome: Outcome| match outcome {
            Outcome::KeepAlive if body_stream.is_some() => Outcome::Close,
            other => other,
        };
        match self.start_coroutine(py, &coroutine, key, awaiting.request_id) {
            Ok(CoroutineStart::Finished(_)) => unread_body(self.complete_asgi(
                py,
                connection,
                &awaiting,
                &exchange,
                &line,
                Ok(py.None().into_bound(py)),
            )),
            Err(error) => unread_body(self.complete_asgi(
                py,
                connection,
                &awaiting,
                &exchange,
                &line,
                Err(error),
            )),
            Ok(CoroutineStart::Continuing) => {
                // The app goes on as a task: from now on each send() is flushed,
                // and a drained body queue lets the loop read on.
                if let Some(notifier) = &self.asgi_notifier {
                    match notifier.call1(py, (key, awaiting.request_id)) {
                        Ok(notify) => {
                            exchange.receive.bind(py).borrow_mut().notify =
                                Some(notify.clone_ref(py));
                            exchange.send.bind(py).borrow_mut().notify = Some(notify);
                        }
                        Err(error) => {
                            self.log_error(py, "cannot stream an ASGI response", Some(error))
                        }
                    }
                }
                // Whatever was sent before the first suspension goes out now.
                if let Some(outcome) = self.write_asgi(py, connection, &exchange, write, &line) {
                    return unread_body(outcome);
                }
                awaiting.request_line = line.text().into_owned();
                awaiting.asgi = Some(exchange);
                awaiting.body_stream = body_stream;
                connection.phase = Phase::AwaitingHandler(Box::new(awaiting));
                Outcome::Pending
            }
        }
    }

    /// Runs a coroutine's first step inline, as the runner's spare asyncio
    /// task (see python/rush/coroutines.py), in a fresh context copy. A
    /// coroutine that suspends is handed to `runner.adopt(...)` and goes on
    /// as that task. Without a runner (no asyncio loop), a coroutine that
    /// finishes at once is still fine; one that would suspend is an error.
    fn start_coroutine<'py>(
        &self,
        py: Python<'py>,
        coroutine: &Bound<'py, PyAny>,
        key: usize,
        request_id: u64,
    ) -> PyResult<CoroutineStart<'py>> {
        let Some(runner) = &self.async_scheduler else {
            return match send_none(py, coroutine)? {
                Step::Returned(value) => Ok(CoroutineStart::Finished(value)),
                Step::Yielded(_) => {
                    let _ = coroutine.call_method0(pyo3::intern!(py, "close"));
                    Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "a coroutine suspended but no asyncio loop is running",
                    ))
                }
            };
        };
        let runner = runner.bind(py);
        let task = runner.getattr(pyo3::intern!(py, "spare"))?;
        let event_loop = runner.getattr(pyo3::intern!(py, "loop"))?;
        let (enter_task, leave_task) = task_switchers(py)?;
        // SAFETY: called with the GIL held; returns a new reference or NULL
        // with an exception set, which from_owned_ptr_or_err turns into Err.
        let context =
            unsafe { Bound::from_owned_ptr_or_err(py, pyo3::ffi::PyContext_CopyCurrent())? };
        enter_task.call1((&event_loop, &task))?;
        // SAFETY: `context` is a live Context object; Enter/Exit are paired
        // below whatever the step does, on this thread, with the GIL held.
        let entered = unsafe { pyo3::ffi::PyContext_Enter(context.as_ptr()) };
        let step = if entered == 0 {
            let step = send_none(py, coroutine);
            // SAFETY: pairs the successful PyContext_Enter above.
            unsafe { pyo3::ffi::PyContext_Exit(context.as_ptr()) };
            step
        } else {
            Err(PyErr::fetch(py))
        };
        leave_task.call1((&event_loop, &task))?;
        match step? {
            Step::Returned(value) => Ok(CoroutineStart::Finished(value)),
            Step::Yielded(yielded) => {
                runner.call_method1(
                    pyo3::intern!(py, "adopt"),
                    (coroutine, yielded, context, key, request_id),
                )?;
                Ok(CoroutineStart::Continuing)
            }
        }
    }

    /// Whether a request whose body is still arriving goes to the ASGI app
    /// at once (no static mount answers its path).
    fn streams_body_to_asgi(&self, raw_path: &[u8]) -> bool {
        self.asgi.is_some() && self.static_files.find_mount(raw_path).is_none()
    }

    /// Hands body bytes that arrived for a running ASGI app to its
    /// `receive()`. `Err` means the body was malformed (logged): close.
    fn feed_body_stream(&mut self, py: Python<'_>, connection: &mut Connection) -> Result<(), ()> {
        let Connection { phase, input, .. } = connection;
        let Phase::AwaitingHandler(awaiting) = phase else {
            return Ok(());
        };
        let Some(progress) = &mut awaiting.body_stream else {
            return Ok(());
        };
        let scratch = &mut self.body_scratch;
        scratch.clear();
        let (consumed, done) = match progress {
            BodyProgress::Remaining(remaining) => {
                let take = (*remaining).min(input.len() as u64) as usize;
                scratch.extend_from_slice(&input[..take]);
                *remaining -= take as u64;
                (take, *remaining == 0)
            }
            BodyProgress::Chunked(decoder) => match decoder.decode(input, scratch) {
                Ok(progress) => (progress.consumed, progress.done),
                Err(error) => {
                    let message = format!("malformed request body while an ASGI app ran: {error}");
                    self.log_error(py, &message, None);
                    return Err(());
                }
            },
        };
        input.drain(..consumed);
        if done {
            awaiting.body_stream = None;
        }
        if let Some(exchange) = &awaiting.asgi {
            if let Ok(mut receive) = exchange.receive.bind(py).try_borrow_mut() {
                if let Err(error) = receive.push_body(py, &self.body_scratch, done) {
                    self.log_error(
                        py,
                        "cannot hand a request body to the ASGI app",
                        Some(error),
                    );
                }
            }
        }
        Ok(())
    }

    /// Finishes an ASGI exchange whose app returned (or raised).
    fn complete_asgi(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        awaiting: &AwaitingResponse,
        exchange: &AsgiExchange,
        line: &RequestLine<'_>,
        result: PyResult<Bound<'_, PyAny>>,
    ) -> Outcome {
        let (head_written, complete) = {
            let send = exchange.send.bind(py).borrow();
            (send.head_written, send.state == SendState::Complete)
        };
        let write = AsgiWrite {
            keep_alive: awaiting.keep_alive,
            head_only: awaiting.head_only,
            http10: awaiting.http10,
            app_finished: true,
        };
        if let Err(error) = result {
            self.log_error(
                py,
                &format!("Exception in ASGI app for {}", line.text()),
                Some(error),
            );
            if complete {
                // The app sent its whole response (an error page, say) and then
                // raised, for the server to log: the client gets that response.
                return self
                    .write_asgi(py, connection, exchange, write, line)
                    .unwrap_or(Outcome::Close);
            }
            exchange.receive.bind(py).borrow_mut().finish(py);
            if !head_written {
                return self.write_internal_error(connection, awaiting);
            }
            // Part of the response is on the wire: all we can do is close.
            return Outcome::Close;
        }
        match self.write_asgi(py, connection, exchange, write, line) {
            Some(outcome) => outcome,
            None => Outcome::Close,
        }
    }

    /// Writes what the app has sent so far. Returns the outcome once the
    /// response is complete (or can never be), `None` while it goes on.
    fn write_asgi(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        exchange: &AsgiExchange,
        write: AsgiWrite,
        line: &RequestLine<'_>,
    ) -> Option<Outcome> {
        let send = exchange.send.bind(py);
        let mut send = send.borrow_mut();
        if !send.head_written {
            let unfinished = send.state != SendState::Complete;
            if send.state == SendState::AwaitingStart && !write.app_finished {
                return None;
            }
            if unfinished && write.app_finished {
                // Nothing is on the wire yet: the app's incomplete response
                // becomes a 500 (a complete one is sent as the app made it).
                let message = if send.state == SendState::AwaitingStart {
                    "the ASGI app returned without sending a response"
                } else {
                    "the ASGI app returned before finishing its response"
                };
                drop(send);
                exchange.receive.bind(py).borrow_mut().finish(py);
                let error = pyo3::exceptions::PyRuntimeError::new_err(message);
                let awaiting = AwaitingResponse {
                    request_id: 0,
                    head_only: write.head_only,
                    keep_alive: write.keep_alive,
                    http10: write.http10,
                    default_status: 500,
                    request_line: String::new(),
                    request_head: Vec::new(),
                    asgi: None,
                    allow: None,
                    request: None,
                    body_stream: None,
                };
                return Some(self.finish(py, connection, &awaiting, &[], line, Err(error)));
            }
            let bodyless = send.status < 200 || send.status == 204 || send.status == 304;
            let complete = send.state == SendState::Complete;
            let framing = if bodyless {
                AsgiFraming::NoBody
            } else if let Some(length) = send.declared_length {
                AsgiFraming::Length(length)
            } else if complete {
                AsgiFraming::Length(send.pending_body.len() as u64)
            } else if !write.http10 {
                AsgiFraming::Chunked
            } else {
                AsgiFraming::UntilClose
            };
            let app_close = send.headers.iter().any(|(name, value)| {
                name.eq_ignore_ascii_case(b"connection")
                    && value
                        .to_ascii_lowercase()
                        .windows(5)
                        .any(|window| window == b"close")
            });
            let close = app_close || framing == AsgiFraming::UntilClose;
            let out = &mut connection.output;
            rush_proto::response::write_status_line(out, send.status);
            for (name, value) in &send.headers {
                if crate::asgi::is_server_framing_header(name) {
                    continue;
                }
                out.extend_from_slice(name);
                out.extend_from_slice(b": ");
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            match framing {
                AsgiFraming::Length(length) => {
                    rush_proto::response::write_content_length(out, length)
                }
                AsgiFraming::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
                AsgiFraming::NoBody | AsgiFraming::UntilClose => {}
            }
            let context = ResponseContext {
                date_line: self.date.header_line(),
                head_only: write.head_only,
                keep_alive: write.keep_alive && !close && !self.draining,
                http10: write.http10,
                request_head: &[],
                allow: None,
            };
            finish_head(out, &context, close);
            send.head_written = true;
            send.framing_chunked = framing == AsgiFraming::Chunked;
            send.framing_close = close;
            send.bodyless = bodyless;
        }
        let pending = std::mem::take(&mut send.pending_body);
        send.body_written += pending.len() as u64;
        if !write.head_only && !send.bodyless && !pending.is_empty() {
            let out = &mut connection.output;
            if send.framing_chunked {
                out.extend_from_slice(format!("{:x}\r\n", pending.len()).as_bytes());
                out.extend_from_slice(&pending);
                out.extend_from_slice(b"\r\n");
            } else {
                out.extend_from_slice(&pending);
            }
        }
        let complete = send.state == SendState::Complete;
        if !complete && !write.app_finished {
            return None;
        }
        // The response is over: complete, or cut short by the app returning.
        // A cut-short response is never made to look complete: no final
        // chunk, and the connection closes.
        if complete && send.framing_chunked && !write.head_only {
            connection.output.extend_from_slice(b"0\r\n\r\n");
        }
        let short = send.declared_length.is_some_and(|declared| {
            !write.head_only && !send.bodyless && send.body_written < declared
        });
        let close = send.framing_close || short || !complete || !write.keep_alive;
        let status = send.status;
        let length = send.body_written;
        drop(send);
        exchange.receive.bind(py).borrow_mut().finish(py);
        if !complete {
            self.log_error(
                py,
                &format!(
                    "the ASGI app for {} returned before finishing its response; closing the connection",
                    line.text()
                ),
                None,
            );
        } else if short {
            self.log_error(
                py,
                &format!(
                    "the ASGI app for {} sent less body than its Content-Length; closing the connection",
                    line.text()
                ),
                None,
            );
        }
        self.access_log(py, connection, line, status, length as usize);
        Some(keep_or_close(!close))
    }

    /// Logs the exception of a task that finished after its response was
    /// complete or its connection gone.
    fn log_late_failure(&self, py: Python<'_>, task: &Bound<'_, PyAny>, line: Option<&str>) {
        let cancelled = task
            .call_method0(pyo3::intern!(py, "cancelled"))
            .and_then(|cancelled| cancelled.is_truthy())
            .unwrap_or(false);
        if cancelled {
            return;
        }
        if let Ok(exception) = task.call_method0(pyo3::intern!(py, "exception")) {
            if !exception.is_none() {
                let error = PyErr::from_value(exception);
                let message = match line {
                    Some(line) => {
                        format!("Exception in ASGI app for {line} after its response was complete")
                    }
                    None => "Exception in an app whose client had left".to_owned(),
                };
                self.log_error(py, &message, Some(error));
            }
        }
    }

    /// A native 500 for an error that was already logged.
    fn write_internal_error(
        &self,
        connection: &mut Connection,
        awaiting: &AwaitingResponse,
    ) -> Outcome {
        let keep_alive = awaiting.keep_alive && !self.draining;
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: awaiting.head_only,
            keep_alive,
            http10: awaiting.http10,
            request_head: &[],
            allow: None,
        };
        write_status_page(
            &mut connection.output,
            500,
            std::iter::empty(),
            &context,
            false,
        );
        keep_or_close(keep_alive)
    }

    /// Runs the WSGI app for a request, on this thread or on the pool.
    #[allow(clippy::too_many_arguments)]
    fn dispatch_wsgi(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        head_bytes: &[u8],
        head: &RequestHead,
        body: RequestBody<'_>,
        keep_alive: bool,
    ) -> Outcome {
        let mut awaiting = AwaitingResponse::new(head, keep_alive, 200);
        let line = RequestLine::Raw(head_bytes, head);
        if connection.remote_strings.is_none() {
            if let Some(client) = connection.client {
                connection.remote_strings = Some((
                    PyString::new(py, &client.ip().to_string()).unbind(),
                    PyString::new(py, &client.port().to_string()).unbind(),
                ));
            }
        }
        let Some(settings) = &self.wsgi else {
            unreachable!("dispatch_wsgi is called only with a WSGI app");
        };
        let app = settings.app.clone_ref(py);
        let environ = build_environ(
            py,
            settings,
            head_bytes,
            head,
            body,
            connection.remote_strings.as_ref(),
        );
        let environ = match environ {
            Ok(environ) => environ,
            Err(error) => {
                return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
            }
        };
        self.next_request_id += 1;
        awaiting.request_id = self.next_request_id;
        if let Some(scheduler) = &self.blocking_scheduler {
            return match scheduler.call1(py, (app, environ, key, awaiting.request_id)) {
                Ok(_) => {
                    awaiting.request_line = line.text().into_owned();
                    awaiting.request_head = head_bytes.to_vec();
                    connection.phase = Phase::AwaitingHandler(Box::new(awaiting));
                    Outcome::Pending
                }
                Err(error) => self.finish(py, connection, &awaiting, head_bytes, &line, Err(error)),
            };
        }
        let result = call_wsgi(py, app.bind(py), &environ)
            .and_then(|response| Ok(Bound::new(py, response)?.into_any()));
        self.finish(py, connection, &awaiting, head_bytes, &line, result)
    }

    /// Writes the response for a handler's result (or its exception).
    fn finish(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        awaiting: &AwaitingResponse,
        request_head: &[u8],
        line: &RequestLine<'_>,
        result: PyResult<Bound<'_, PyAny>>,
    ) -> Outcome {
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: awaiting.head_only,
            // A drain that began while the handler ran closes after its response.
            keep_alive: awaiting.keep_alive && !self.draining,
            http10: awaiting.http10,
            request_head,
            allow: awaiting.allow.as_deref(),
        };
        let start = connection.output.len();
        let rendered = result.and_then(|value| {
            render_result(
                py,
                &value,
                awaiting.default_status,
                &context,
                &mut connection.output,
            )
        });
        let (status, length, close) = match rendered {
            Ok(rendered) => {
                connection.body = rendered.body;
                (rendered.status, rendered.body_length, rendered.close)
            }
            Err(error) => {
                connection.output.truncate(start);
                self.log_error(
                    py,
                    &format!("Exception in handler for {}", line.text()),
                    Some(error),
                );
                match self.render_error_page(py, awaiting, &context, &mut connection.output) {
                    Some(rendered) => {
                        connection.body = rendered.body;
                        (rendered.status, rendered.body_length, rendered.close)
                    }
                    None => {
                        let length = write_status_page(
                            &mut connection.output,
                            500,
                            std::iter::empty(),
                            &context,
                            false,
                        );
                        (500, length, false)
                    }
                }
            }
        };
        self.access_log(py, connection, line, status, length);
        keep_or_close(awaiting.keep_alive && !close && !self.draining)
    }

    /// The app's 500 page for a request whose handler raised, if it has one
    /// and it answers at once; `None` means the native 500.
    fn render_error_page(
        &self,
        py: Python<'_>,
        awaiting: &AwaitingResponse,
        context: &ResponseContext<'_>,
        out: &mut Vec<u8>,
    ) -> Option<crate::response::Rendered> {
        let request = awaiting.request.as_ref()?;
        let router = self.router.bind(py).borrow();
        let handler = router.error_handler(500)?;
        let mut value = handler.callable.bind(py).call1((request.bind(py),));
        if handler.is_async {
            // A 500 page that awaits something is not worth a second
            // suspension; it must answer in its first step.
            value = value.and_then(|coroutine| match send_none(py, &coroutine)? {
                Step::Returned(value) => Ok(value),
                Step::Yielded(_) => {
                    let _ = coroutine.call_method0(pyo3::intern!(py, "close"));
                    Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "an async 500 handler must not suspend",
                    ))
                }
            });
        }
        let start = out.len();
        match value.and_then(|value| render_result(py, &value, 500, context, out)) {
            Ok(rendered) => Some(rendered),
            Err(error) => {
                out.truncate(start);
                self.log_error(py, "the app's 500 handler failed too", Some(error));
                None
            }
        }
    }

    /// One access-log line, if the access log is on.
    fn access_log(
        &self,
        py: Python<'_>,
        connection: &Connection,
        line: &RequestLine<'_>,
        status: u16,
        length: usize,
    ) {
        if let Some(logger) = &self.access_logger {
            let entry = format!(
                "{} - \"{}\" {} {}",
                client_text(connection),
                line.text(),
                status,
                length
            );
            let _ = logger.call1(py, (entry,));
        }
    }

    fn log_error(&self, py: Python<'_>, message: &str, error: Option<PyErr>) {
        let exception = error.map(|error| error.into_value(py).into_any());
        if let Err(logging_error) = self.error_logger.call1(py, (message, exception)) {
            // The logger itself failed: say so on stderr rather than nowhere.
            logging_error.print(py);
        }
    }
}

/// The body an ASGI app gets: complete, or still arriving.
enum AsgiBody<'a> {
    Complete(RequestBody<'a>),
    Streaming {
        initial: Vec<u8>,
        progress: BodyProgress,
    },
}

/// How an ASGI response body is delimited on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AsgiFraming {
    NoBody,
    Length(u64),
    Chunked,
    /// HTTP/1.0 without a known length: the body ends when the connection does.
    UntilClose,
}

/// The request facts `write_asgi` needs.
#[derive(Clone, Copy)]
struct AsgiWrite {
    keep_alive: bool,
    head_only: bool,
    http10: bool,
    /// The app returned: whatever is unsent now ends the response.
    app_finished: bool,
}

fn keep_or_close(keep_alive: bool) -> Outcome {
    if keep_alive {
        Outcome::KeepAlive
    } else {
        Outcome::Close
    }
}

fn client_text(connection: &Connection) -> String {
    match connection.client {
        Some(address) => address.to_string(),
        None => "unix".to_owned(),
    }
}

/// `METHOD target HTTP/x.y` of a request, formatted only when a log needs it.
enum RequestLine<'a> {
    Raw(&'a [u8], &'a RequestHead),
    Owned(&'a str),
}

impl RequestLine<'_> {
    fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            RequestLine::Raw(head_bytes, head) => request_line(head_bytes, head).into(),
            RequestLine::Owned(text) => (*text).into(),
        }
    }
}

fn request_line(head_bytes: &[u8], head: &RequestHead) -> String {
    format!(
        "{} {} HTTP/{}",
        String::from_utf8_lossy(head.method_span.of(head_bytes)),
        String::from_utf8_lossy(head.target.of(head_bytes)),
        head.version.as_str()
    )
}

/// Calls a handler with the request and its path parameters as keywords.
fn call_handler<'py>(
    py: Python<'py>,
    handler: &Handler,
    request: &Bound<'py, Request>,
    params: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let callable = handler.callable.bind(py);
    match params {
        None => callable.call1((request,)),
        Some(params) => callable.call(PyTuple::new(py, [request])?, Some(params)),
    }
}

/// What `coroutine.send(None)` did.
enum Step<'py> {
    Returned(Bound<'py, PyAny>),
    Yielded(Bound<'py, PyAny>),
}

/// `coroutine.send(None)` without the StopIteration exception that a
/// Python-level `send` raises on return (creating it costs about as much as
/// a small handler).
fn send_none<'py>(py: Python<'py>, coroutine: &Bound<'py, PyAny>) -> PyResult<Step<'py>> {
    let mut result: *mut pyo3::ffi::PyObject = std::ptr::null_mut();
    // SAFETY: the GIL is held, `coroutine` is a live object and Py_None a
    // valid borrowed argument; PyIter_Send stores a new reference in
    // `result` for PYGEN_RETURN and PYGEN_NEXT, and sets an exception
    // (leaving `result` NULL) for PYGEN_ERROR.
    let status =
        unsafe { pyo3::ffi::PyIter_Send(coroutine.as_ptr(), pyo3::ffi::Py_None(), &mut result) };
    match status {
        pyo3::ffi::PySendResult::PYGEN_RETURN => {
            // SAFETY: a new reference returned by PyIter_Send (see above).
            Ok(Step::Returned(unsafe { Bound::from_owned_ptr(py, result) }))
        }
        pyo3::ffi::PySendResult::PYGEN_NEXT => {
            // SAFETY: a new reference returned by PyIter_Send (see above).
            Ok(Step::Yielded(unsafe { Bound::from_owned_ptr(py, result) }))
        }
        pyo3::ffi::PySendResult::PYGEN_ERROR => Err(PyErr::fetch(py)),
    }
}

static ENTER_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static LEAVE_TASK: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// asyncio's `_enter_task` and `_leave_task`, which make a task current.
fn task_switchers(py: Python<'_>) -> PyResult<(&Bound<'_, PyAny>, &Bound<'_, PyAny>)> {
    let load = |name: &str| -> PyResult<Py<PyAny>> {
        Ok(py.import("asyncio.tasks")?.getattr(name)?.unbind())
    };
    let enter = ENTER_TASK.get_or_try_init(py, || load("_enter_task"))?;
    let leave = LEAVE_TASK.get_or_try_init(py, || load("_leave_task"))?;
    Ok((enter.bind(py), leave.bind(py)))
}

/// What the first step of a coroutine led to.
enum CoroutineStart<'py> {
    /// It returned this value.
    Finished(Bound<'py, PyAny>),
    /// It suspended and continues as an asyncio task.
    Continuing,
}

/// Why a body could not be received.
enum BodyError {
    /// The client broke the protocol (or a limit): refuse with its status.
    Protocol(ProtoError),
    /// The server could not store it (spooling to disk failed): a 500.
    Storage(io::Error),
}

impl From<ProtoError> for BodyError {
    fn from(error: ProtoError) -> Self {
        BodyError::Protocol(error)
    }
}

impl From<io::Error> for BodyError {
    fn from(error: io::Error) -> Self {
        BodyError::Storage(error)
    }
}

/// How a body begins right after its head.
enum BodyStart<'a> {
    /// The whole body is in the buffer (for Content-Length, a slice of it).
    Complete { body: &'a [u8], consumed: usize },
    /// A chunked body that was complete in the buffer, decoded.
    Decoded { body: Vec<u8>, consumed: usize },
    /// More is to come; `body` holds what was received so far.
    Incomplete {
        body: BodyBuffer,
        progress: BodyProgress,
        consumed: usize,
    },
}

fn start_body<'a>(
    head: &RequestHead,
    available: &'a [u8],
    limits: &Limits,
) -> Result<BodyStart<'a>, BodyError> {
    match head.framing {
        BodyFraming::Empty => Ok(BodyStart::Complete {
            body: &[],
            consumed: 0,
        }),
        BodyFraming::ContentLength(length) => {
            let length_usize = length as usize;
            if available.len() >= length_usize {
                Ok(BodyStart::Complete {
                    body: &available[..length_usize],
                    consumed: length_usize,
                })
            } else {
                let mut body = BodyBuffer::new(Some(length));
                body.append(available)?;
                Ok(BodyStart::Incomplete {
                    body,
                    progress: BodyProgress::Remaining(length - available.len() as u64),
                    consumed: available.len(),
                })
            }
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new(limits);
            let mut decoded = Vec::new();
            let progress = decoder.decode(available, &mut decoded)?;
            if progress.done {
                Ok(BodyStart::Decoded {
                    body: decoded,
                    consumed: progress.consumed,
                })
            } else {
                let mut body = BodyBuffer::new(None);
                body.append(&decoded)?;
                Ok(BodyStart::Incomplete {
                    body,
                    progress: BodyProgress::Chunked(decoder),
                    consumed: progress.consumed,
                })
            }
        }
    }
}

/// Feeds newly arrived bytes to a body in progress; `true` once it is complete.
fn continue_body(
    pending: &mut PendingBody,
    available: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<(usize, bool), BodyError> {
    match &mut pending.framing {
        BodyProgress::Remaining(remaining) => {
            let take = (*remaining).min(available.len() as u64) as usize;
            pending.body.append(&available[..take])?;
            *remaining -= take as u64;
            Ok((take, *remaining == 0))
        }
        BodyProgress::Chunked(decoder) => {
            scratch.clear();
            let progress = decoder.decode(available, scratch)?;
            pending.body.append(scratch)?;
            Ok((progress.consumed, progress.done))
        }
    }
}
