//! Work that finishes off the loop's own pass: an async handler's or a
//! pool thread's result, an ASGI app's later messages, and the start of a
//! graceful drain. Python calls these through the guarded methods of
//! [`Server`], so a panic here costs one connection, never the worker.

use std::time::{Duration, Instant, SystemTime};

use pyo3::prelude::*;

use super::event_loop::ACCEPT_BATCH;
use super::{Listener, Server};

/// Most accept batches a draining worker takes from its backlog.
const BACKLOG_DRAIN_BATCHES: usize = 64;
use crate::conn::{ReadState, WriteState};
use crate::dispatch::{AsgiWrite, Outcome, RequestLine};
use crate::inflight::{AsgiExchange, InFlight};
use crate::wsgi::WsgiResponse;

impl Server {
    pub(super) fn write_asgi_progress(&mut self, py: Python<'_>, key: usize, request_id: u64) {
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let Some(InFlight::Handler(awaiting)) = &connection.in_flight else {
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
        let unread_body = matches!(connection.state.read(), ReadState::BodyToApp(_));
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

    pub(super) fn start_drain(&mut self, py: Python<'_>, graceful_timeout: Duration) {
        if self.drain_deadline.is_some() {
            return;
        }
        self.core.draining = true;
        self.drain_deadline = Some(Instant::now() + graceful_timeout);
        // Connections already queued on the listening socket were accepted by
        // the kernel: serve them (with `Connection: close`) rather than let
        // them be reset when this worker's copy of the socket closes.
        // Bounded, so a flood cannot hold the drain open.
        for _ in 0..BACKLOG_DRAIN_BATCHES {
            if self.accept_connections(py) < ACCEPT_BATCH {
                break;
            }
        }
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
                matches!(connection.state.read(), ReadState::Idle)
                    && connection.state.write() == WriteState::Ready
                    && !connection.has_pending_output()
            })
            .map(|(key, _)| key)
            .collect();
        for key in idle {
            self.close_connection(key);
        }
    }

    pub(super) fn complete_request(
        &mut self,
        py: Python<'_>,
        key: usize,
        request_id: u64,
        task: &Bound<'_, PyAny>,
    ) {
        self.core.now = Instant::now();
        self.core.date.refresh(SystemTime::now());
        let current = self.connections.get(key).is_some_and(|connection| {
            matches!(&connection.in_flight, Some(InFlight::Handler(awaiting)) if awaiting.request_id == request_id)
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
        let Some(InFlight::Handler(awaiting)) = connection.in_flight.take() else {
            return;
        };
        let result = task.call_method0("result");
        let line = RequestLine::Owned(&awaiting.request_line);
        let wsgi = match &result {
            Ok(value) => value.cast::<WsgiResponse>().ok(),
            Err(_) => None,
        };
        if let Some(response) = wsgi {
            let mut response = response.borrow_mut();
            if response.channel.is_some() {
                // A pool thread goes on iterating the body: stream it.
                let outcome =
                    self.core
                        .start_wsgi_stream(py, connection, &awaiting, &line, &mut response);
                drop(response);
                self.core.after_outcome(connection, outcome);
                self.drive_connection(py, key);
                return;
            }
        }
        if let Some(exchange) = &awaiting.asgi {
            let mut outcome = self
                .core
                .complete_asgi(py, connection, &awaiting, exchange, &line, result);
            if matches!(connection.state.read(), ReadState::BodyToApp(_))
                && matches!(outcome, Outcome::KeepAlive)
            {
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
