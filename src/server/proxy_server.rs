//! The forward proxy (`rush proxy`) as a kind of worker: the same epoll
//! loop, listeners, signals, deadline sweep and graceful drain as the app
//! server, around the proxy's own connections (`crate::proxy::ProxyLoop`),
//! with no router, app or HTTP server state it would not use.
//!
//! Like the app server, it shares a liveness page with the supervisor
//! (src/liveness.rs): every loop pass stores its time there (`--timeout`
//! kills a worker whose loop stops turning), and the proxy counts the
//! requests it lets through; the one that reaches `--max-requests` makes
//! the worker close its listening sockets, let its idle clients go, finish
//! what it has and ask the supervisor for its successor
//! (`stop_at_request_limit`).

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use mio::{Events, Poll};
use pyo3::prelude::*;

use super::listener::{
    listener_index, listener_token, Listener, ACCEPT_BATCH, ACCEPT_RETRY, BACKLOG_DRAIN_BATCHES,
    WAKEUP,
};
use super::settings::LogSettings;
use super::Worker;
use crate::liveness::Liveness;
use crate::proxy::{ProxyLoop, ProxySettings, RESOLVER};

/// One worker's forward proxy: its sockets and its proxy connections.
pub(crate) struct ProxyServer {
    poll: Poll,
    events: Events,
    /// The listening sockets, in `--bind` order; emptied when draining starts.
    listeners: Vec<Listener>,
    proxy: ProxyLoop,
    error_logger: Py<PyAny>,
    /// The time of this loop pass.
    now: Instant,
    /// Accepting paused at `--max-connections`, until a connection closes.
    accept_paused: bool,
    /// After an accept error: when to try again.
    accept_retry_at: Option<Instant>,
    drain_deadline: Option<Instant>,
    next_sweep: Instant,
}

impl ProxyServer {
    /// The proxy on `listeners` (already registered with `poll`), which
    /// must all be TCP sockets.
    pub(super) fn new(
        py: Python<'_>,
        poll: Poll,
        listeners: Vec<Listener>,
        settings: &Bound<'_, ProxySettings>,
        logging: &LogSettings,
    ) -> PyResult<ProxyServer> {
        if listeners
            .iter()
            .any(|listener| matches!(listener, Listener::Unix(_)))
        {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "the proxy listens on TCP, not on a Unix socket",
            ));
        }
        let proxy = ProxyLoop::new(
            py,
            settings,
            poll.registry(),
            &logging.error_logger,
            logging.access_logger.as_ref(),
        )?;
        let now = Instant::now();
        Ok(ProxyServer {
            poll,
            events: Events::with_capacity(1024),
            listeners,
            proxy,
            error_logger: logging.error_logger.clone_ref(py),
            now,
            accept_paused: false,
            accept_retry_at: None,
            drain_deadline: None,
            next_sweep: now + Duration::from_secs(1),
        })
    }

    fn log_error(&self, py: Python<'_>, message: &str) {
        if let Err(logging_error) = self.error_logger.call1(py, (message, py.None())) {
            // The logger itself failed: say so on stderr rather than nowhere.
            logging_error.print(py);
        }
    }

    fn sweep(&mut self, py: Python<'_>) {
        self.next_sweep = self.now + Duration::from_secs(1);
        self.proxy.sweep(py, self.now);
    }

    /// Accepting paused at the connection cap resumes once there is room,
    /// and accepting after an error once its back-off has passed
    /// (edge-triggered: what queued meanwhile raises no new event).
    fn resume_accepting(&mut self, py: Python<'_>) {
        if let Some(retry_at) = self.accept_retry_at {
            if self.now < retry_at {
                return;
            }
            self.accept_retry_at = None;
            self.accept_connections(py);
        }
        if self.accept_paused && !self.proxy.is_full() {
            self.accept_paused = false;
            self.accept_connections(py);
        }
    }

    /// Accepts connections queued on every listener, at most one batch
    /// from each; returns the most taken from one of them.
    fn accept_connections(&mut self, py: Python<'_>) -> usize {
        let mut most = 0;
        for index in 0..self.listeners.len() {
            most = most.max(self.accept_from(py, index));
            if self.accept_paused || self.accept_retry_at.is_some() {
                break;
            }
        }
        most
    }

    /// Accepts (and serves at once) connections queued on listener `index`,
    /// at most one batch (the rest is left to the other workers woken by
    /// the same event); returns how many it accepted.
    fn accept_from(&mut self, py: Python<'_>, index: usize) -> usize {
        let mut accepted_now = 0;
        loop {
            if self.proxy.request_limit_reached() {
                // --max-requests: not one connection more (they wait in the
                // socket's queue for the successor).
                return accepted_now;
            }
            if accepted_now == ACCEPT_BATCH {
                // Re-arming raises a new event here if any remain.
                if let Some(listener) = self.listeners.get_mut(index) {
                    let _ = listener.register(self.poll.registry(), listener_token(index), true);
                }
                return accepted_now;
            }
            let Some(Listener::Tcp(listener)) = self.listeners.get(index) else {
                return accepted_now;
            };
            if self.proxy.is_full() {
                // Resumed by `resume_accepting` once a connection closes.
                self.accept_paused = true;
                return accepted_now;
            }
            match listener.accept() {
                Ok((stream, address)) => {
                    self.proxy.adopt(py, stream, address, self.now);
                    accepted_now += 1;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return accepted_now,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    // EMFILE, ENFILE, ENOBUFS: retry after a pause (the loop
                    // wakes for it), logging once per back-off.
                    if self.accept_retry_at.is_none() {
                        let message = format!(
                            "accept failed: {error}; retrying in {} ms",
                            ACCEPT_RETRY.as_millis()
                        );
                        self.log_error(py, &message);
                    }
                    self.accept_retry_at = Some(self.now + ACCEPT_RETRY);
                    return accepted_now;
                }
            }
        }
    }

    /// `--max-requests`: the request that reached the limit goes on (with
    /// `Connection: close`); the worker closes its copies of the listening
    /// sockets (the supervisor keeps its own, so what arrives now queues
    /// for the successor and none fails), lets its idle clients go, and asks
    /// the supervisor for the successor, which retires it (SIGTERM, a
    /// drain) once ready. Done once: the listeners are gone afterwards.
    fn stop_at_request_limit(&mut self, py: Python<'_>) {
        if !self.proxy.request_limit_reached() || self.listeners.is_empty() {
            return;
        }
        for mut listener in std::mem::take(&mut self.listeners) {
            listener.deregister(self.poll.registry());
        }
        self.proxy.start_drain(py);
        if let Some(liveness) = self.proxy.liveness() {
            liveness.get().ask_for_successor();
        }
        let message = "reached --max-requests: no longer accepting, waiting for a successor";
        if let Err(logging_error) = self.error_logger.call1(py, (message, py.None(), "info")) {
            logging_error.print(py);
        }
    }
}

impl Worker for ProxyServer {
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
        self.now = Instant::now();
        if let Some(liveness) = self.proxy.liveness() {
            liveness.get().beat();
        }
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        let mut check_signals = false;
        for event in events.iter() {
            match event.token() {
                token if listener_index(token).is_some() => {
                    if let Some(index) = listener_index(token) {
                        self.accept_from(py, index);
                    }
                }
                WAKEUP => check_signals = true,
                RESOLVER => {
                    self.proxy.deliver_answers(py, self.now);
                    self.proxy.deliver_verdicts(py, self.now);
                }
                token if ProxyLoop::owns(token) => {
                    let input = (
                        event.is_readable(),
                        event.is_read_closed() || event.is_error(),
                    );
                    self.proxy.handle(py, token, input, self.now)
                }
                _ => {}
            }
        }
        self.events = events;
        if self.now >= self.next_sweep {
            self.sweep(py);
        }
        self.proxy.flush_log(py);
        self.stop_at_request_limit(py);
        self.resume_accepting(py);
        if check_signals {
            py.check_signals()?;
        }
        Ok(())
    }

    fn tick(&mut self, py: Python<'_>) {
        self.now = Instant::now();
        self.sweep(py);
        self.resume_accepting(py);
    }

    /// Serves what the kernel already accepted (bounded, as the app server
    /// does), stops accepting, and lets the proxy close its idle clients.
    fn start_drain(&mut self, py: Python<'_>, graceful_timeout: Duration) {
        if self.drain_deadline.is_some() {
            return;
        }
        self.drain_deadline = Some(Instant::now() + graceful_timeout);
        for _ in 0..BACKLOG_DRAIN_BATCHES {
            if self.accept_connections(py) < ACCEPT_BATCH {
                break;
            }
        }
        for mut listener in std::mem::take(&mut self.listeners) {
            listener.deregister(self.poll.registry());
        }
        self.proxy.start_drain(py);
    }

    fn drain_started(&self) -> bool {
        self.drain_deadline.is_some()
    }

    fn drain_finished(&self) -> bool {
        match self.drain_deadline {
            Some(deadline) => self.proxy.len() == 0 || Instant::now() >= deadline,
            None => false,
        }
    }

    fn close_all(&mut self) {
        self.proxy.clear();
    }

    fn wants_early_wake(&self) -> bool {
        self.drain_deadline.is_some() || self.accept_retry_at.is_some()
    }

    fn open_connections(&self) -> usize {
        self.proxy.len()
    }

    fn fileno(&self) -> RawFd {
        self.poll.as_raw_fd()
    }

    fn liveness(&self) -> Option<&Py<Liveness>> {
        self.proxy.liveness()
    }

    fn set_liveness(&mut self, liveness: Py<Liveness>) {
        liveness.get().beat();
        self.proxy.set_liveness(liveness);
    }

    /// A panic in a proxy connection is caught (and the connection closed)
    /// by the proxy itself; one that reaches here was in the loop.
    fn recover(&mut self, py: Python<'_>, _key: Option<usize>) {
        self.log_error(py, "internal error in the worker's loop; serving on");
    }
}
