//! The worker's event loop: one epoll instance, every socket, every request.
//!
//! How it works:
//! * All sockets are registered edge-triggered (mio). An event means "drive
//!   this connection": process buffered requests, write, read, repeat until
//!   the kernel says EAGAIN (`crate::http1`).
//! * This is the Python binding of the loop: every method Python calls
//!   enters through [`guarded`], so a panic costs at most the
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
//! * A worker may listen on several sockets (`listeners`: every `--bind`,
//!   every socket systemd passed); each has its own token in the range
//!   from `listener::LISTENER_TOKENS`, so an event names the socket to accept
//!   from, and draining stops accepting on all of them at once.
//! * What a worker serves is picked once, when it is built, by the settings
//!   object it is given (as gunicorn's arbiter picks a worker class): an
//!   [`AppServer`] for `AppServerSettings`, a
//!   [`ProxyServer`] for `ProxySettings`
//!   (`rush proxy`). Both are a [`Worker`]; `Server::worker` is the one
//!   place that tells them apart, and each runs a loop of its own that
//!   never asks which kind it is.

mod app_server;
mod completion;
mod event_loop;
mod listener;
mod proxy_server;
mod quic_loop;
mod settings;

use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Poll};
use pyo3::prelude::*;

use crate::exchange::StreamKey;
use crate::liveness::Liveness;
use crate::options::seconds_or_zero;
use crate::proxy::ProxySettings;
use app_server::AppServer;
use listener::{listener_token, Listener, WAKEUP};
use proxy_server::ProxyServer;
pub use settings::{
    AppServerSettings, AppSettings, ForwardingSettings, HeaderSettings, LimitSettings, LogSettings,
    TimeoutSettings, WebSocketSettings,
};

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
/// What a kind of worker does with the turns of its loop. `Server` holds
/// one, picked when it is built, and reaches it only through this trait
/// (dynamic dispatch once per call from Python, never per event: each
/// kind's own loop runs inside `run_once`).
trait Worker {
    /// One epoll wait (without the GIL when it may block) and the work it reports.
    fn run_once(&mut self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<()>;
    /// The once-a-second work: deadlines, and accepting again after a pause.
    fn tick(&mut self, py: Python<'_>);
    /// Stops accepting and lets open connections finish, for at most `graceful_timeout`.
    fn start_drain(&mut self, py: Python<'_>, graceful_timeout: Duration);
    fn drain_started(&self) -> bool;
    fn drain_finished(&self) -> bool;
    fn close_all(&mut self);
    /// Whether the loop should wake soon (draining, or an accept to retry).
    fn wants_early_wake(&self) -> bool;
    fn open_connections(&self) -> usize;
    fn fileno(&self) -> RawFd;
    fn liveness(&self) -> Option<&Py<Liveness>>;
    /// Shares the worker's liveness page with the supervisor (src/liveness.rs).
    fn set_liveness(&mut self, liveness: Py<Liveness>);
    /// After a panic in work for connection `key` (or for the loop): log it,
    /// and close that connection.
    fn recover(&mut self, py: Python<'_>, key: Option<usize>);
    /// Control goes back to Python: an asyncio task the loop kept current
    /// for its coroutines stops being current (`coroutine::Runner::release`).
    fn release_current_task(&mut self, _py: Python<'_>) {}
    /// The app server, for the calls only it answers (schedulers, ASGI and
    /// WebSocket progress, finished handlers).
    fn app(&mut self) -> Option<&mut AppServer> {
        None
    }
}

/// The one way Python's calls reach a worker's loop: `work` runs under
/// `catch_unwind`, and a panic (a bug of ours) is logged and costs at most
/// the connection `key` the work was for, never the worker. `None` means
/// the work panicked.
fn guarded<W: Worker + ?Sized, R>(
    worker: &mut W,
    py: Python<'_>,
    key: Option<usize>,
    work: impl FnOnce(&mut W) -> R,
) -> Option<R> {
    let result = match catch_unwind(AssertUnwindSafe(|| work(&mut *worker))) {
        Ok(result) => Some(result),
        Err(_) => {
            worker.recover(py, key);
            None
        }
    };
    worker.release_current_task(py);
    result
}

/// What this worker serves.
enum Kind {
    App(Box<AppServer>),
    Proxy(Box<ProxyServer>),
}

/// The native server loop of one worker.
#[pyclass(module = "rush._rush", unsendable)]
pub struct Server {
    kind: Kind,
}

#[pymethods]
impl Server {
    /// `listeners` are the `(fd, is_unix)` sockets to accept from, in
    /// `--bind` order (each is duplicated; the caller keeps its own);
    /// `serves` picks what the worker is: an app server
    /// (`AppServerSettings`) or a forward proxy (`ProxySettings`).
    #[new]
    #[pyo3(signature = (listeners, serves, logging, *, wakeup_fd=None))]
    fn new(
        py: Python<'_>,
        listeners: Vec<(RawFd, bool)>,
        serves: &Bound<'_, PyAny>,
        logging: &Bound<'_, LogSettings>,
        wakeup_fd: Option<RawFd>,
    ) -> PyResult<Self> {
        if listeners.is_empty() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "a server needs at least one listening socket",
            ));
        }
        let poll = Poll::new()?;
        let mut adopted = Vec::with_capacity(listeners.len());
        for (index, (fd, unix)) in listeners.into_iter().enumerate() {
            let mut listener = Listener::adopt(fd, unix)?;
            listener.register(poll.registry(), listener_token(index), false)?;
            adopted.push(listener);
        }
        if let Some(fd) = wakeup_fd {
            poll.registry()
                .register(&mut SourceFd(&fd), WAKEUP, Interest::READABLE)?;
        }
        let logging = logging.get();
        let kind = if let Ok(proxy) = serves.cast::<ProxySettings>() {
            Kind::Proxy(Box::new(ProxyServer::new(
                py, poll, adopted, proxy, logging,
            )?))
        } else if let Ok(settings) = serves.cast::<AppServerSettings>() {
            Kind::App(Box::new(AppServer::new(
                py,
                poll,
                adopted,
                settings.get(),
                logging,
            )?))
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a Server serves AppServerSettings or ProxySettings",
            ));
        };
        Ok(Server { kind })
    }

    /// The epoll fd, for registering this loop as a reader with asyncio.
    fn fileno(&mut self) -> RawFd {
        self.worker().fileno()
    }

    /// Sets the `CoroutineRunner` (python/rush/coroutines.py): its `spare`
    /// task is current while a coroutine's first step runs here, and its
    /// `adopt(...)` continues a coroutine that suspended, as that task,
    /// which later calls [`Server::complete`].
    fn set_async_scheduler(&mut self, py: Python<'_>, runner: Py<PyAny>) -> PyResult<()> {
        if let Some(app) = self.worker().app() {
            app.core.async_scheduler = Some(crate::coroutine::Runner::new(py, runner)?);
        }
        Ok(())
    }

    /// Sets the no-argument callable a WebSocket calls when it leaves work
    /// for the loop and none is pending yet: it should schedule
    /// `flush_websockets()` on the event loop (never run it inline).
    fn set_websocket_notifier(&mut self, notifier: Py<PyAny>) {
        if let Some(app) = self.worker().app() {
            *app.core
                .ws_flush
                .notify
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = Some(notifier);
        }
    }

    /// Drives the WebSocket connections whose app sent, accepted, closed or
    /// took from a full queue since the last call (scheduled by the notifier).
    fn flush_websockets(&mut self, py: Python<'_>) {
        self.guarded_app(py, None, |app| app.flush_websockets_now(py));
    }

    /// Sets `notifier(key, request_id)`, returning the no-argument callable an
    /// ASGI `send` calls after each message once its app has suspended (it
    /// should schedule `flush_asgi(key, request_id)` on the event loop).
    fn set_asgi_notifier(&mut self, notifier: Py<PyAny>) {
        if let Some(app) = self.worker().app() {
            app.core.asgi_notifier = Some(notifier);
        }
    }

    /// Sets the callable `scheduler(app, environ, key, request_id)` that runs a
    /// WSGI app on a thread pool instead of the loop thread.
    fn set_blocking_scheduler(&mut self, scheduler: Py<PyAny>) {
        if let Some(app) = self.worker().app() {
            app.core.blocking_scheduler = Some(scheduler);
        }
    }

    /// Registers `fd` (made readable by pool threads when work finishes) and
    /// `drain()`, which returns the finished `(key, request_id, future)` tuples.
    fn set_completion_source(&mut self, fd: RawFd, drain: Py<PyAny>) -> PyResult<()> {
        match self.worker().app() {
            Some(app) => app.set_completion_source(fd, drain),
            None => Ok(()),
        }
    }

    /// Shares `liveness` with the supervisor: from now on every loop pass
    /// stores its time there, and every request is counted (src/liveness.rs);
    /// for a proxy worker, every request or tunnel its rules let through.
    fn set_liveness(&mut self, liveness: Py<Liveness>) {
        self.worker().set_liveness(liveness);
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
        let worker = self.worker();
        loop {
            if !worker.drain_started() && stop.get().is_set() {
                guarded(worker, py, None, |worker| {
                    worker.start_drain(py, graceful_timeout)
                });
            }
            if worker.drain_finished() {
                worker.close_all();
                return Ok(());
            }
            let timeout = if worker.wants_early_wake() {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(1)
            };
            guarded(worker, py, None, |worker| {
                worker.run_once(py, Some(timeout))
            })
            .unwrap_or(Ok(()))?;
        }
    }

    /// Handles whatever is ready without blocking (asyncio mode calls this
    /// when the epoll fd is readable).
    fn poll(&mut self, py: Python<'_>) -> PyResult<()> {
        guarded(self.worker(), py, None, |worker| {
            worker.run_once(py, Some(Duration::ZERO))
        })
        .unwrap_or(Ok(()))
    }

    /// Checks deadlines; returns True once a requested shutdown has drained
    /// (asyncio mode calls this periodically, from a task: connections with
    /// work it finds are driven by the next `poll`, which the caller
    /// schedules outside any task).
    fn tick(&mut self, py: Python<'_>) -> bool {
        let worker = self.worker();
        if let Some(liveness) = worker.liveness() {
            liveness.get().beat();
        }
        guarded(worker, py, None, |worker| worker.tick(py));
        if worker.drain_finished() {
            worker.close_all();
            return true;
        }
        false
    }

    /// Writes what a suspended ASGI app has sent so far (scheduled by its notifier).
    fn flush_asgi(&mut self, py: Python<'_>, key: u64, request_id: u64) {
        let key = StreamKey::from_token(key);
        self.guarded_app(py, Some(key.connection), |app| {
            app.write_asgi_progress(py, key, request_id)
        });
    }

    /// Stops accepting, closes idle connections, and lets busy ones finish
    /// their current request (answered with `Connection: close`).
    fn begin_shutdown(&mut self, py: Python<'_>, graceful_timeout: f64) -> PyResult<()> {
        let graceful_timeout = seconds_or_zero("graceful_timeout", graceful_timeout)?;
        guarded(self.worker(), py, None, |worker| {
            worker.start_drain(py, graceful_timeout)
        });
        Ok(())
    }

    /// Finishes the request whose async handler was scheduled for
    /// request `request_id` on connection `key`: `task` is the finished
    /// asyncio task (or pool future).
    fn complete(&mut self, py: Python<'_>, key: u64, request_id: u64, task: &Bound<'_, PyAny>) {
        let key = StreamKey::from_token(key);
        self.guarded_app(py, Some(key.connection), |app| {
            app.complete_request(py, key, request_id, task)
        });
    }

    /// Number of open connections.
    #[getter]
    fn connection_count(&mut self) -> usize {
        self.worker().open_connections()
    }
}

impl Server {
    /// The worker this server is: the one place its kind is looked at.
    fn worker(&mut self) -> &mut dyn Worker {
        match &mut self.kind {
            Kind::App(app) => app.as_mut(),
            Kind::Proxy(proxy) => proxy.as_mut(),
        }
    }

    /// Runs `work` on the app server, guarded (see [`guarded`]); a proxy
    /// worker has no such work, and nothing happens.
    fn guarded_app(
        &mut self,
        py: Python<'_>,
        key: Option<usize>,
        work: impl FnOnce(&mut AppServer),
    ) {
        if let Some(app) = self.worker().app() {
            guarded(app, py, key, work);
        }
    }
}
