//! Work that finishes off the loop's own pass: an async handler's or a
//! pool thread's result, an ASGI app's later messages, and the start of a
//! graceful drain. Python calls these through the guarded methods of
//! [`Server`](super::Server), so a panic here costs one connection, never
//! the worker.

use std::time::{Duration, Instant, SystemTime};

use pyo3::prelude::*;
use slab::Slab;

use super::app_server::AppServer;
use super::listener::{ACCEPT_BATCH, BACKLOG_DRAIN_BATCHES};
use crate::conn::{Connection, Protocol, ReadState, WriteState};
use crate::dispatch::refresh::REFRESH_CONNECTION;
use crate::exchange::StreamKey;
use crate::inflight::{InFlight, RequestUnit};

/// At most this much of `--graceful-timeout` is kept back from the drain
/// for the worker to end it and exit before the supervisor's SIGKILL.
const DRAIN_END_MARGIN: Duration = Duration::from_millis(250);

/// How long a draining worker keeps an idle keep-alive connection open for
/// a request its client may already have sent.
const DRAIN_IDLE_GRACE: Duration = Duration::from_secs(1);

impl AppServer {
    /// A suspended ASGI app sent more: write it (see `Core::asgi_progress`).
    pub(super) fn write_asgi_progress(&mut self, py: Python<'_>, key: StreamKey, request_id: u64) {
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        if key.connection == REFRESH_CONNECTION {
            if let Some(refresh) = self.refreshes.get_mut(&key.stream) {
                if self.core.asgi_progress(py, refresh, request_id).is_some() {
                    self.refreshes.remove(&key.stream);
                }
            }
            self.wake_parked(py);
            return;
        }
        if let Some(connection) = self.connections.get_mut(key.connection) {
            if let Protocol::Http2(_) = connection.protocol {
                self.core
                    .http2_asgi_progress(py, connection, key.stream, request_id);
                self.drive_connection(py, key.connection);
                return;
            }
        }
        let Some(connection) = stream_writer(&mut self.connections, key) else {
            return;
        };
        self.core.pipelined_after = !connection.input.is_empty();
        if let Some(outcome) = self.core.asgi_progress(py, connection, request_id) {
            self.core.after_outcome(connection, outcome);
        }
        self.core.pipelined_after = false;
        self.drive_connection(py, key.connection);
        self.wake_parked(py);
    }

    /// The request unit a completion names (see [`stream_writer`]).
    pub(super) fn request_unit(&self, key: StreamKey) -> Option<&RequestUnit> {
        if key.connection == REFRESH_CONNECTION {
            return self.refreshes.get(&key.stream).map(|refresh| &refresh.unit);
        }
        let connection = self.connections.get(key.connection)?;
        if let Protocol::Http2(session) = &connection.protocol {
            return session.unit(key.stream);
        }
        (key.stream == 0 && matches!(connection.protocol, Protocol::Http1))
            .then_some(&connection.request)
    }

    /// Drives the WebSocket connections on the flush queue (see `ws::channel`).
    pub(super) fn flush_websockets_now(&mut self, py: Python<'_>) {
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        for (key, session) in self.core.ws_flush.take() {
            // The key may name a newer connection by now: only the session's own is driven.
            let current = self.connections.get(key).is_some_and(|connection| {
                match &connection.protocol {
                    Protocol::WebSocket(ws) => ws.id == session,
                    // A WebSocket on one of its streams (RFC 8441).
                    Protocol::Http2(h2) => h2.has_websocket(session),
                    Protocol::Http1 => false,
                }
            });
            if current {
                self.drive_connection(py, key);
            }
        }
    }

    pub(super) fn start_drain(&mut self, py: Python<'_>, graceful_timeout: Duration) {
        if self.drain_deadline.is_some() {
            return;
        }
        self.core.draining = true;
        // The supervisor's SIGKILL falls due `graceful_timeout` after it sent
        // the signal, a little before this worker started counting: ending
        // the drain a margin earlier lets the worker close its connections
        // (GOAWAY over HTTP/2, apps told the client left) and exit on its own.
        let margin = DRAIN_END_MARGIN.min(graceful_timeout / 10);
        self.drain_deadline = Some(Instant::now() + graceful_timeout - margin);
        // Connections already queued on the listening socket were accepted by
        // the kernel: serve them (with `Connection: close`) rather than let
        // them be reset when this worker's copy of the socket closes.
        // Bounded, so a flood cannot hold the drain open.
        for _ in 0..BACKLOG_DRAIN_BATCHES {
            if self.accept_connections(py) < ACCEPT_BATCH {
                break;
            }
        }
        self.stop_accepting();
        // WebSocket clients are told the server is going away (1001), or
        // restarting (1012) when the supervisor replaces this worker; the
        // drain ends when they answered or at the graceful timeout.
        let restarting = self
            .core
            .liveness
            .as_ref()
            .is_some_and(|liveness| liveness.get().is_restarting());
        for (key, connection) in self.connections.iter_mut() {
            match &mut connection.protocol {
                Protocol::WebSocket(session) => {
                    crate::ws::close_for_shutdown(py, session, restarting);
                    self.drive_soon.push(key);
                }
                // GOAWAY; the streams in flight finish, then it closes.
                Protocol::Http2(session) => {
                    crate::http2::websocket::close_websockets_for_shutdown(py, session, restarting);
                    session.shut_down();
                    self.drive_soon.push(key);
                }
                Protocol::Http1 => {}
            }
        }
    }

    /// `--max-requests`: the request that reached the limit was answered
    /// (with `Connection: close`); the worker takes no new connection from
    /// now on (they wait in the socket's queue for its successor, so none
    /// fails), finishes what it has, and asks the supervisor for its
    /// successor, which retires it (SIGTERM, a drain) once ready.
    pub(super) fn stop_at_request_limit(&mut self, py: Python<'_>) {
        if !self.core.request_limit_reached || self.listeners.is_empty() {
            return;
        }
        self.stop_accepting();
        if let Some(liveness) = &self.core.liveness {
            liveness.get().ask_for_successor();
        }
        self.core.log_info(
            py,
            "reached --max-requests: no longer accepting, waiting for a successor",
        );
    }

    /// Closes this worker's copies of the listening sockets (the supervisor
    /// holds its own, so what queues there waits for the next worker), and
    /// lets its idle connections go.
    fn stop_accepting(&mut self) {
        self.core.draining = true;
        for mut listener in std::mem::take(&mut self.listeners) {
            listener.deregister(self.poll.registry());
        }
        // The UDP sockets stay: the QUIC connections this worker holds
        // finish through them. New QUIC clients are refused.
        if let Some(quic) = self.quic.as_mut() {
            quic.router.refuse_new();
        }
        // An idle keep-alive connection is not closed now: its client may
        // have sent the next request already (under load it almost always
        // has), and closing would fail it. Its next request is answered
        // with `Connection: close`; one that stays silent for a short grace
        // is closed by the deadline sweep, which first checks that nothing
        // arrived unread.
        let grace_end = self.core.now + DRAIN_IDLE_GRACE;
        for (_, connection) in self.connections.iter_mut() {
            if matches!(connection.state.read(), ReadState::Idle)
                && connection.state.write() == WriteState::Ready
            {
                connection.deadline = Some(
                    connection
                        .deadline
                        .map_or(grace_end, |deadline| deadline.min(grace_end)),
                );
            }
        }
        self.next_sweep = self.next_sweep.min(grace_end);
    }

    /// A handler that ran off the loop finished (see `Core::handler_finished`).
    pub(super) fn complete_request(
        &mut self,
        py: Python<'_>,
        key: StreamKey,
        request_id: u64,
        task: &Bound<'_, PyAny>,
    ) {
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        if key.connection == REFRESH_CONNECTION {
            self.complete_refresh(py, key.stream, request_id, task);
            self.wake_parked(py);
            return;
        }
        if let Some(connection) = self.connections.get_mut(key.connection) {
            if let Protocol::WebSocket(session) = &mut connection.protocol {
                if session.id == request_id {
                    let result = task.call_method0(pyo3::intern!(py, "result"));
                    self.core.websocket_app_finished(py, session, result);
                    self.drive_connection(py, key.connection);
                    return;
                }
            }
        }
        if let Some(connection) = self.connections.get_mut(key.connection) {
            if let Protocol::Http2(_) = connection.protocol {
                if !self
                    .core
                    .http2_handler_finished(py, connection, key.stream, request_id, task)
                {
                    self.core.log_late_failure(py, request_id, task);
                }
                self.drive_connection(py, key.connection);
                return;
            }
        }
        let connection = stream_writer(&mut self.connections, key).filter(|connection| {
            matches!(&connection.request.in_flight, Some(InFlight::Handler(awaiting)) if awaiting.request_id == request_id)
        });
        let Some(connection) = connection else {
            // The response was already complete (an ASGI app working on after
            // it), or the client left: an exception still deserves a log line.
            self.core.log_late_failure(py, request_id, task);
            return;
        };
        self.core.pipelined_after = !connection.input.is_empty();
        let outcome = self.core.handler_finished(py, connection, task);
        self.core.after_outcome(connection, outcome);
        self.core.pipelined_after = false;
        self.drive_connection(py, key.connection);
        self.wake_parked(py);
    }
}

impl AppServer {
    /// The handler of detached refresh `number` finished (see
    /// `crate::dispatch::refresh`).
    fn complete_refresh(
        &mut self,
        py: Python<'_>,
        number: u32,
        request_id: u64,
        task: &Bound<'_, PyAny>,
    ) {
        let current = self.refreshes.get(&number).is_some_and(|refresh| {
            matches!(&refresh.unit.in_flight, Some(InFlight::Handler(awaiting)) if awaiting.request_id == request_id)
        });
        if !current {
            // Given up already, or an ASGI app working on after its answer.
            self.core.log_late_failure(py, request_id, task);
            return;
        }
        let Some(mut refresh) = self.refreshes.remove(&number) else {
            return;
        };
        let outcome = self.core.handler_finished(py, &mut refresh, task);
        if matches!(outcome, crate::dispatch::Outcome::Pending) {
            self.refreshes.insert(number, refresh);
        }
    }
}

/// The writer of the request a completion names, if that request's stream
/// still exists. An HTTP/1.1 connection is the writer of its one stream
/// (0); a WebSocket session has no request unit.
fn stream_writer(connections: &mut Slab<Connection>, key: StreamKey) -> Option<&mut Connection> {
    let connection = connections.get_mut(key.connection)?;
    (key.stream == 0 && matches!(connection.protocol, Protocol::Http1)).then_some(connection)
}
