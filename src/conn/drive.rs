//! Driving one connection: process buffered input, write, read, repeat,
//! until the kernel says EAGAIN, the connection closes, or it waits for
//! a handler.

use std::io::{self, Read};

use pyo3::prelude::*;
use rush_proto::ProtoError;

use super::input::BodyError;
use super::{Connection, Phase};
use crate::dispatch::{Core, Outcome};
use crate::response::{write_status_page, ResponseContext};
use crate::server::options::{LINGER_MAX_BYTES, LINGER_TIMEOUT, OUTPUT_LOW_WATER};

/// Whether a connection survives a drive.
#[derive(PartialEq, Eq)]
pub(crate) enum Disposition {
    Open,
    Close,
}
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
        loop {
            if matches!(connection.phase, Phase::StreamingWsgi(_))
                && connection.output.len() < OUTPUT_LOW_WATER
            {
                if let Some(outcome) = self.pump_wsgi(py, connection) {
                    self.after_outcome(connection, outcome);
                }
            }
            if connection.can_process() && !connection.input.is_empty() {
                self.process_input(py, connection, key);
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
                if matches!(connection.phase, Phase::StreamingWsgi(_)) {
                    continue;
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
                // Later pipelined requests wait in the socket, not in memory,
                // until the streamed body is done.
                Phase::StreamingWsgi(_) => return Disposition::Open,
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
    pub(crate) fn after_outcome(&self, connection: &mut Connection, outcome: Outcome) {
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
    pub(crate) fn refuse_body(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        error: BodyError,
    ) {
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
    pub(crate) fn refuse(&mut self, connection: &mut Connection, error: &ProtoError) {
        rush_proto::response::write_error_response(
            &mut connection.output,
            error,
            self.date.header_line(),
        );
        connection.phase = Phase::Closing { linger: true };
    }
}
