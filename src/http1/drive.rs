//! Driving one connection: process buffered input, write, read, repeat,
//! until the kernel says EAGAIN, the connection closes, or it waits for
//! a handler.

use std::io::{self, Read};

use pyo3::prelude::*;
use rush_proto::ProtoError;

use super::input::BodyError;
use crate::conn::{BodyProgress, Connection, Disposition, ReadState, WriteState};
use crate::dispatch::{Core, Outcome};
use crate::metrics;
use crate::options::{LINGER_MAX_BYTES, READ_BUDGET_PER_TURN};
use crate::response::{write_status_page, ResponseContext};

impl Core {
    /// Processes, writes and reads until the connection would block, closes,
    /// or waits for an async handler.
    pub(crate) fn drive(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) -> Disposition {
        // A read shorter than the buffer drained the socket; data arriving
        // later raises a new edge-triggered event. Skipping the read that
        // would only say EAGAIN saves a third of the syscalls per request.
        let mut socket_may_have_input = true;
        let mut read_this_turn = 0;
        loop {
            if connection.state.write() == WriteState::Streaming && connection.sink.has_room() {
                if let Some(outcome) = self.request_writable(py, connection) {
                    self.after_outcome(connection, outcome);
                }
            }
            if connection.protocol_pending && !connection.input.is_empty() {
                match self.pick_protocol(connection) {
                    // HTTP/2 takes the connection over, its bytes included.
                    crate::http2::Pick::Http2 => return Disposition::Upgraded,
                    crate::http2::Pick::Http1 | crate::http2::Pick::NeedMore => {}
                }
            }
            if connection.can_process()
                && !connection.input.is_empty()
                && !connection.protocol_pending
            {
                self.process_input(py, connection, key);
                if let crate::conn::Protocol::WebSocket(_) = connection.protocol {
                    // Upgraded: the rest of this connection is the
                    // WebSocket's (`crate::drive` drives it on).
                    return Disposition::Upgraded;
                }
            }
            if connection.has_pending_output() {
                if connection.write_output().is_err() {
                    return Disposition::Close;
                }
                connection.track_write_progress(self.now, self.config.send_timeout);
                if connection.has_pending_output() {
                    // Socket full: wait for EPOLLOUT; read nothing meanwhile (backpressure).
                    return Disposition::Open;
                }
                if connection.state.write() == WriteState::Streaming {
                    continue;
                }
                if connection.can_process() && !connection.input.is_empty() {
                    continue;
                }
            }
            match self.body_to_app(py, connection) {
                Err(()) => return Disposition::Close,
                // Refused with an answer: write it before the close below.
                Ok(true) => continue,
                Ok(false) => {}
            }
            if let Some(linger) = connection.state.closes() {
                if matches!(connection.state.read(), ReadState::Lingering { .. }) {
                    // Discarding input until the peer closes (below).
                } else if !linger || connection.peer_closed {
                    return Disposition::Close;
                } else {
                    connection.stream.shutdown_write();
                    let timer = connection.state.linger_started();
                    connection.start_timer(Some(timer), self.now, &self.config);
                    connection.input = Vec::new();
                }
            }
            if connection.state.write() == WriteState::Handler
                && !(matches!(connection.state.read(), ReadState::BodyToApp(_))
                    && self.request_wants_body(py, connection))
            {
                if connection.peer_sent_fin {
                    // The client closed while the app still runs (a stream,
                    // say): an ASGI receive() now says http.disconnect.
                    self.request_client_left(py, connection);
                }
                return Disposition::Open;
            }
            if !connection.state.reads_input() {
                // Later pipelined requests wait in the socket, not in memory,
                // until the response in progress is done.
                return Disposition::Open;
            }
            if connection.peer_closed {
                return Disposition::Close;
            }
            if !socket_may_have_input {
                return Disposition::Open;
            }
            if read_this_turn >= READ_BUDGET_PER_TURN {
                // Its share of this turn is used (a pipelining client that
                // reads its answers as fast as they come, an upload at
                // loopback speed): the others go first (`crate::next_turn`).
                self.next_turn.push(key);
                return Disposition::Open;
            }
            match connection.stream.read(&mut self.read_buffer) {
                Ok(0) => {
                    connection.peer_closed = true;
                    if !connection.can_process() && connection.state.closes().is_none() {
                        return Disposition::Close;
                    }
                }
                Ok(count) => {
                    read_this_turn += count;
                    metrics::count(metrics::Counter::BytesIn, count as u64);
                    socket_may_have_input =
                        connection.may_have_more_input(count, self.read_buffer.len());
                    if let ReadState::Lingering { .. } = connection.state.read() {
                        // Discarded, counted: past the bound, close now.
                        if !connection.state.discard(count, LINGER_MAX_BYTES) {
                            return Disposition::Close;
                        }
                        continue;
                    }
                    if let Some(timer) = connection.state.bytes_arrived() {
                        connection.start_timer(Some(timer), self.now, &self.config);
                    }
                    connection
                        .input
                        .extend_from_slice(&self.read_buffer[..count]);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return Disposition::Open;
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_)
                    if connection
                        .stream
                        .tls()
                        .is_some_and(|tls| tls.refused_plain_http()) =>
                {
                    // Plain HTTP on the TLS port, answered with a hint
                    // already: close as after any refusal (lingering), so
                    // what the client still sends cannot turn our FIN into
                    // an RST that costs it the hint.
                    metrics::refused(400);
                    connection.state.refused();
                }
                Err(_) => return Disposition::Close,
            }
        }
    }

    /// Decodes body bytes that arrived for a running app (its framing is
    /// HTTP/1.1's business) and hands them to it through the dispatcher.
    /// A body past `--max-body-size` or malformed is refused (see
    /// [`Core::refuse_flowing_body`]): `Ok(true)` when a refusal was queued
    /// to be written, `Err` when the connection must close at once.
    fn body_to_app(&mut self, py: Python<'_>, connection: &mut Connection) -> Result<bool, ()> {
        let ReadState::BodyToApp(progress) = connection.state.read_mut() else {
            return Ok(false);
        };
        let input = &mut connection.input;
        let mut scratch = std::mem::take(&mut self.body_scratch);
        scratch.clear();
        let (consumed, done) = match progress {
            BodyProgress::Remaining(remaining) => {
                let take = (*remaining).min(input.len() as u64) as usize;
                scratch.extend_from_slice(&input[..take]);
                *remaining -= take as u64;
                (take, *remaining == 0)
            }
            BodyProgress::Chunked(decoder) => match decoder.decode(input, &mut scratch) {
                Ok(progress) => (progress.consumed, progress.done),
                Err(error) => {
                    self.body_scratch = scratch;
                    return self.refuse_flowing_body(py, connection, &error);
                }
            },
        };
        input.drain(..consumed);
        if done {
            connection.state.body_to_app_complete();
        }
        self.request_body(py, connection, &scratch, done);
        self.body_scratch = scratch;
        Ok(false)
    }

    /// The body flowing to a running app went past `--max-body-size` (a
    /// chunked body: a Content-Length over it was refused with the head) or
    /// broke its framing: the client's fault, logged as a refusal as it is
    /// when the body is collected first. The app is told its client left
    /// (`http.disconnect`). If its response has not begun, the refusal is
    /// the answer (`Ok(true)`: 413 or 400, then the lingering close of
    /// every refusal); otherwise the connection closes at once (`Err`), so
    /// the client cannot take the cut response for complete.
    fn refuse_flowing_body(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        error: &ProtoError,
    ) -> Result<bool, ()> {
        metrics::refused(error.status());
        if self.request_body_refused(py, connection) {
            let what = format!("{error} (its response had begun: the connection was closed)");
            self.log_refusal(py, connection, &what);
            return Err(());
        }
        self.log_refusal(py, connection, &error.to_string());
        rush_proto::response::write_error_response(
            &mut connection.sink.output,
            error,
            self.date.header_line(),
        );
        connection.state.refused();
        Ok(true)
    }

    /// Moves the connection's state on from what became of a request.
    pub(crate) fn after_outcome(&self, connection: &mut Connection, outcome: Outcome) {
        let keep_alive = match outcome {
            Outcome::Pending => {
                // A handler or a stream goes on: its state says which timer
                // (the body's, while its body flows to the app) applies.
                let timer = connection.state.timer();
                return connection.start_timer(timer, self.now, &self.config);
            }
            Outcome::Parked => {
                connection.state.request_parked();
                connection.request.in_flight = Some(crate::inflight::InFlight::AwaitingFill(None));
                // No timer: the cache fill's lock timeout releases it.
                connection.deadline = None;
                return;
            }
            Outcome::Close => false,
            Outcome::KeepAlive => !self.closes_for_drain(),
        };
        // The response is complete: whatever still runs (an ASGI app's
        // background work) is no longer this connection's business.
        connection.request.in_flight = None;
        let timer = connection.state.response_complete(keep_alive);
        connection.start_timer(timer, self.now, &self.config);
    }

    /// Answers a request whose body could not be received, and closes.
    pub(crate) fn refuse_body(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        error: BodyError,
    ) {
        match error {
            BodyError::Protocol(error) => self.refuse(py, connection, &error),
            BodyError::Busy => {
                // Not the client's fault and not a failure: other uploads
                // hold the worker's spool budget. Logged as a refusal.
                connection.request.origin = None;
                self.log_refusal(py, connection, "503 request body spool full");
                metrics::refused(503);
                let retry = std::iter::once((&b"retry-after"[..], &b"5"[..]));
                self.close_with_status_page(connection, 503, retry);
            }
            BodyError::Storage(error) => {
                self.log_error(py, &format!("cannot store a request body: {error}"), None);
                self.close_with_status_page(connection, 500, std::iter::empty());
            }
        }
    }

    /// A status page of rush's own for a request whose body was not taken,
    /// then the lingering close of every refusal.
    fn close_with_status_page<'f>(
        &self,
        connection: &mut Connection,
        status: u16,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: false,
            keep_alive: false,
            http10: false,
            request_head: &[],
            allow: None,
        };
        write_status_page(connection, status, fields, &context, true);
        connection.state.refused();
    }

    /// Answers a request the protocol refused, and closes.
    pub(crate) fn refuse(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        error: &ProtoError,
    ) {
        // The refused request's own headers were never read: the peer is
        // named, not the client an earlier request was forwarded for.
        connection.request.origin = None;
        self.log_refusal(py, connection, &error.to_string());
        metrics::refused(error.status());
        rush_proto::response::write_error_response(
            &mut connection.sink.output,
            error,
            self.date.header_line(),
        );
        connection.state.refused();
    }
}
