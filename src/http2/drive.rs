//! Driving one HTTP/2 connection: feed what was read to `H2Connection`,
//! turn its events into requests and request events, write what it owes,
//! read again; until the socket would block or the connection is done.
//!
//! Each `Request` event becomes an [`H2Stream`] (`request.rs`) dispatched
//! through `Core::dispatch` (a complete body) or, for an ASGI app, at once
//! with its body handed to `receive()` as DATA arrives. A body's flow-control
//! credit is released as the app takes it (an ASGI app whose queue is full
//! leaves the chunks here, unreleased, so the client waits), or as it is
//! stored (a complete body, bounded by `--max-body-size`: past it, 413).
//! A `Reset` tells the running app its client is gone (`http.disconnect`).
//!
//! A request without a body that must wait for another request's cache
//! fill of its key is parked on its stream (its head kept in the request
//! unit) and dispatched again when the fill completes (`http2_wake`); the
//! connection's other streams go on meanwhile.

use std::io::{self, Read};

use pyo3::prelude::*;
use rush_h2::Event;

use super::{H2Session, StreamBody, StreamWriter};
use crate::body::SpoolError;
use crate::conn::{Connection, Disposition, Protocol};
use crate::dispatch::incoming::IncomingRequest;
use crate::dispatch::Core;
use crate::exchange::{ResponseWriter, StreamKey};
use crate::inflight::InFlight;
use crate::metrics;
use crate::options::{FRAMES_PER_TURN, LINGER_MAX_BYTES, LINGER_TIMEOUT, READ_BUDGET_PER_TURN};

/// The HTTP/2 session of a connection driven by this module.
pub(super) fn h2_session(connection: &mut Connection) -> &mut H2Session {
    match &mut connection.protocol {
        Protocol::Http2(session) => session,
        _ => unreachable!("only HTTP/2 connections are driven here"),
    }
}

/// The response writer of stream `id` on `connection`, if it is still
/// being answered.
pub(crate) fn stream_writer(connection: &mut Connection, id: u32) -> Option<StreamWriter<'_>> {
    let Connection {
        stream: transport,
        protocol,
        peer_objects,
        sink,
        client,
        listener,
        proxy_info,
        ..
    } = connection;
    let Protocol::Http2(session) = protocol else {
        return None;
    };
    let H2Session { conn, streams, .. } = &mut **session;
    let stream = streams.get_mut(&id)?;
    Some(StreamWriter {
        conn,
        id,
        stream,
        sink,
        transport,
        peer_objects,
        client: *client,
        proxy: proxy_info.as_deref(),
        listener: *listener,
    })
}

/// Forgets stream `id` once its response is complete and all of it was
/// handed to `H2Connection` (which sends the rest as the windows allow).
/// A response whose app never ended it is reset rather than left open.
pub(super) fn finish_if_sent(connection: &mut Connection, id: u32) {
    let session = h2_session(connection);
    let Some(stream) = session.streams.get(&id) else {
        return;
    };
    let draining = matches!(stream.body, StreamBody::Discard { .. });
    if !stream.answered || stream.out.file.is_some() || draining {
        return;
    }
    let ended = stream.out.ended;
    session.streams.remove(&id);
    if !ended {
        session.conn.reset(id, rush_h2::Reason::INTERNAL_ERROR);
    }
}

impl Core {
    /// Processes events, writes and reads until the socket would block or
    /// the connection is done (see the module).
    pub(crate) fn drive_http2(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) -> Disposition {
        let mut socket_may_have_input = true;
        // What this drive read: past its share of the turn, the connection
        // waits for the next turn (`crate::next_turn`).
        let mut read_this_turn = 0;
        let frames_at_start = h2_session(connection).conn.frames_received();
        // Input kept from the last turn goes first, under this turn's budget.
        let unfed = std::mem::take(&mut h2_session(connection).unfed);
        if !unfed.is_empty() {
            self.http2_feed(connection, &unfed, frames_at_start);
        }
        if h2_session(connection)
            .body_deadline
            .is_some_and(|deadline| self.now >= deadline)
        {
            self.http2_body_timeouts(py, connection);
        }
        loop {
            let mut progress = self.http2_events(py, connection, key);
            self.http2_progress(py, connection);
            self.http2_websockets(py, connection);
            if let Protocol::Http2(session) = &mut connection.protocol {
                session.conn.take_output(&mut connection.sink.output);
            }
            if connection.has_pending_output() {
                progress = true;
                if connection.write_output().is_err() {
                    return Disposition::Close;
                }
                connection.track_write_progress(self.now, self.config.send_timeout);
                if connection.has_pending_output() {
                    // Socket full: wait for EPOLLOUT; read nothing meanwhile.
                    return self.http2_pause(py, connection);
                }
                continue;
            }
            let session = h2_session(connection);
            let (closed, lingering) = (session.closed || session.conn.is_done(), session.lingering);
            if closed {
                if connection.peer_closed {
                    return Disposition::Close;
                }
                if !lingering {
                    // Like an HTTP/1.1 refusal: shut the write side, then
                    // discard what still comes for a bounded time.
                    let session = h2_session(connection);
                    session.lingering = true;
                    session.shutdown_requested = true;
                    connection.stream.shutdown_write();
                    connection.deadline = Some(self.now + LINGER_TIMEOUT);
                }
            }
            if connection.peer_closed {
                return Disposition::Close;
            }
            let session = h2_session(connection);
            if !session.lingering && !session.conn.wants_read() {
                if progress {
                    continue;
                }
                return self.http2_pause(py, connection);
            }
            if !socket_may_have_input {
                return self.http2_pause(py, connection);
            }
            if read_this_turn >= READ_BUDGET_PER_TURN || !h2_session(connection).unfed.is_empty() {
                self.next_turn.push(key);
                return self.http2_pause(py, connection);
            }
            match connection.stream.read(&mut self.read_buffer) {
                Ok(0) => {
                    connection.peer_closed = true;
                    h2_session(connection).conn.feed_eof();
                }
                Ok(count) => {
                    read_this_turn += count;
                    metrics::count(metrics::Counter::BytesIn, count as u64);
                    // A TLS read returns one record's plaintext at a time,
                    // short of the buffer while more waits in the socket:
                    // read on until the socket says EAGAIN.
                    socket_may_have_input = count == self.read_buffer.len()
                        || connection.peer_sent_fin
                        || connection.stream.tls().is_some();
                    let session = h2_session(connection);
                    if session.lingering {
                        // A peer closed for abuse (a flood, which `h2` or
                        // the flood meter caught) keeps sending: closing on
                        // unread input would reset the socket and lose the
                        // GOAWAY that says why, so an HTTP/2 connection is
                        // drained for the linger's time, however much comes,
                        // as nginx's lingering close is bounded by time
                        // alone (each turn reads at most its share).
                        continue;
                    }
                    let read = std::mem::take(&mut self.read_buffer);
                    self.http2_feed(connection, &read[..count], frames_at_start);
                    self.read_buffer = read;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    return self.http2_pause(py, connection);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Disposition::Close,
            }
        }
    }

    /// Drives an HTTP/3 connection (`crate::http3`): its datagrams were
    /// handed to its engine before, and what it sends goes out through
    /// the worker's UDP socket after (`AppServer::quic_after`); in between,
    /// the same events, progress and pacing as HTTP/2's. A QUIC connection
    /// closes when QUIC says it drained, never from here: until then it
    /// answers the peer's late packets with its CONNECTION_CLOSE.
    pub(crate) fn drive_http3(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) -> Disposition {
        if h2_session(connection)
            .body_deadline
            .is_some_and(|deadline| self.now >= deadline)
        {
            self.http2_body_timeouts(py, connection);
        }
        // Bounded: each pass either takes an event or ends; a connection
        // held back by the output budget takes none.
        for _ in 0..FRAMES_PER_TURN {
            let events = self.http2_events(py, connection, key);
            self.http2_progress(py, connection);
            if !events {
                break;
            }
        }
        self.http2_pause(py, connection)
    }

    /// Hands `data` to the connection as far as this turn's frame budget
    /// goes (`FRAMES_PER_TURN` since `frames_at_start`); the rest waits in
    /// `H2Session::unfed` for the next turn.
    pub(super) fn http2_feed(
        &mut self,
        connection: &mut Connection,
        data: &[u8],
        frames_at_start: u64,
    ) {
        let session = h2_session(connection);
        let spent = session.conn.frames_received() - frames_at_start;
        let left = FRAMES_PER_TURN.saturating_sub(spent).max(1) as usize;
        let taken = session.conn.feed_frames(data, left);
        session.unfed.extend_from_slice(&data[taken..]);
    }

    /// Before the drive returns: the ASGI producers waiting on their
    /// streams' water marks are paused or resumed, and the keep-alive
    /// timer runs while no stream is open.
    pub(super) fn http2_pause(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
    ) -> Disposition {
        let session = h2_session(connection);
        let paced = session.stream_ids(|stream| {
            let in_flight = stream.unit.in_flight.as_ref();
            in_flight.is_some_and(InFlight::needs_pacing)
        });
        let body_timeout = self.config.body_timeout;
        session.body_deadline = session
            .streams
            .values()
            .filter_map(|stream| stream.body_deadline(body_timeout))
            .min();
        let idle = session.streams.is_empty();
        let lingering = session.lingering;
        let shutting = session.shutdown_requested;
        for &id in &paced {
            if let Some(writer) = stream_writer(connection, id) {
                self.pace_request(py, &writer);
            }
        }
        h2_session(connection).scratch_ids = paced;
        if !lingering {
            if !shutting {
                connection.deadline = idle.then(|| self.now + self.config.keep_alive_timeout);
            } else if !idle {
                // Streams finish first; the drain's timeout bounds them.
                connection.deadline = None;
            }
            // Shutting down with nothing open: the deadline the sweep set
            // (the wait for the client's answer to GOAWAY's PING) stands.
        }
        Disposition::Open
    }

    /// Handles every event `H2Connection` has; returns whether there was any.
    pub(super) fn http2_events(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) -> bool {
        let mut any = false;
        // Over the worker's output budget, a connection holding much waits
        // with its events (new requests) until its client reads.
        loop {
            let open = self.may_produce_streams(connection);
            // Held back, the connection refuses requests past a few waiting.
            h2_session(connection).conn.hold_requests(!open);
            if !open {
                break;
            }
            let Some(event) = h2_session(connection).conn.poll_event() else {
                break;
            };
            any = true;
            match event {
                // The client is gone (its FIN or reset was reported, not
                // yet read): a request it left waiting (the connection was
                // over its output share) is never dispatched. HTTP/2 has no
                // half-close of the connection: `h2` ends every stream at
                // the end of input anyway.
                Event::Request { .. } if connection.peer_sent_fin => {}
                Event::Request {
                    stream,
                    head,
                    end_stream,
                } => self.http2_request(py, connection, key, stream, &head, end_stream),
                Event::Data { stream, data } => {
                    let session = h2_session(connection);
                    let max = self.config.limits.max_body_size;
                    let Some(entry) = session.streams.get_mut(&stream) else {
                        // Answered already: the rest is not wanted.
                        session.conn.release(stream, data.len());
                        continue;
                    };
                    if let Some(websocket) = entry.websocket.as_mut() {
                        // Frames: decoded by `http2_websockets`, released as decoded.
                        websocket.input.extend_from_slice(&data);
                        websocket.session.heard(self.now);
                        continue;
                    }
                    entry.body_progress = self.now;
                    let mut refuse_flowing = false;
                    let mut spool_full = false;
                    let refuse = match &mut entry.body {
                        StreamBody::ToApp {
                            waiting, received, ..
                        } => {
                            *received += data.len() as u64;
                            if *received <= max {
                                waiting.push_back(data);
                            } else {
                                // Never handed over: its credit and that
                                // of what waits go back, so a drain after
                                // the refusal is not held by the window.
                                let held =
                                    waiting.drain(..).map(|chunk| chunk.len()).sum::<usize>();
                                session.conn.release(stream, held + data.len());
                                refuse_flowing = true;
                            }
                            false
                        }
                        StreamBody::Collect {
                            buffer, received, ..
                        } => {
                            *received += data.len() as u64;
                            let stored = if *received > max {
                                Err(SpoolError::TooLarge)
                            } else {
                                buffer.append(&data)
                            };
                            session.conn.release(stream, data.len());
                            spool_full = matches!(stored, Err(SpoolError::Full));
                            stored.is_err()
                        }
                        StreamBody::Done => {
                            session.conn.release(stream, data.len());
                            false
                        }
                        StreamBody::Discard { discarded } => {
                            session.conn.release(stream, data.len());
                            *discarded += data.len();
                            if *discarded > LINGER_MAX_BYTES {
                                // Enough drained: `h2` resets the stream
                                // (NO_ERROR, the answer is out).
                                session.conn.stop_request_body(stream);
                                session.streams.remove(&stream);
                            }
                            false
                        }
                    };
                    if spool_full {
                        // Other uploads hold the worker's spool budget.
                        if let Some(writer) = stream_writer(connection, stream) {
                            self.log_refusal(py, &writer, "503 request body spool full");
                        }
                        self.http2_refuse_with(py, connection, stream, 503, b"Service Unavailable");
                    } else if refuse {
                        // Past --max-body-size (or unstorable): 413, and
                        // the rest of the body is let go. Logged as
                        // HTTP/1.1 logs it.
                        let error = rush_proto::ProtoError::PayloadTooLarge;
                        if let Some(writer) = stream_writer(connection, stream) {
                            self.log_refusal(py, &writer, &error.to_string());
                        }
                        self.http2_refuse_error(py, connection, stream, &error);
                    } else if refuse_flowing {
                        self.http2_refuse_flowing_body(py, connection, stream);
                    }
                }
                Event::RequestEnd { stream, .. } => {
                    let Some(entry) = h2_session(connection).streams.get_mut(&stream) else {
                        continue;
                    };
                    if let Some(websocket) = entry.websocket.as_mut() {
                        websocket.input_ended = true;
                        continue;
                    }
                    match std::mem::replace(&mut entry.body, StreamBody::Done) {
                        StreamBody::Collect {
                            head_bytes,
                            head,
                            buffer,
                            ..
                        } => {
                            let stream = StreamKey {
                                connection: key,
                                stream,
                            };
                            let request = IncomingRequest::new(stream, &head_bytes, &head);
                            self.http2_dispatch(py, connection, request, buffer.as_request_body());
                        }
                        StreamBody::ToApp {
                            waiting, received, ..
                        } => {
                            entry.body = StreamBody::ToApp {
                                waiting,
                                ended: true,
                                received,
                            };
                        }
                        // A refused body drained to its end.
                        StreamBody::Discard { .. } => finish_if_sent(connection, stream),
                        other => entry.body = other,
                    }
                }
                Event::Reset { stream, .. } => self.http2_stream_cut(py, connection, stream),
                Event::SendReady { .. } => {}
                Event::Closed { error, .. } => {
                    h2_session(connection).closed = true;
                    if let (Some(error), true) = (error, self.debug) {
                        self.log_debug(py, &format!("HTTP/2 connection ended: {error}"));
                    }
                }
            }
        }
        any
    }

    /// What goes on between events: file bodies read into frames as the
    /// peer's windows take them, streamed WSGI bodies pumped, request
    /// bodies handed to ASGI apps that take more.
    pub(super) fn http2_progress(&mut self, py: Python<'_>, connection: &mut Connection) {
        let session = h2_session(connection);
        let ids = session.stream_ids(|_| true);
        for &id in &ids {
            let Some(mut writer) = stream_writer(connection, id) else {
                continue;
            };
            if writer.stream.out.file.is_some() {
                writer.pump_file();
            }
            if let StreamBody::ToApp { .. } = writer.stream.body {
                self.http2_body_to_app(py, &mut writer);
            }
            let streaming = matches!(writer.stream.unit.in_flight, Some(InFlight::Stream(_)))
                && writer.has_room();
            let outcome = if streaming {
                self.request_writable(py, &mut writer)
            } else {
                None
            };
            drop(writer); // commits what the call sent
            if let Some(outcome) = outcome {
                self.http2_after_outcome(connection, id, outcome);
            } else {
                finish_if_sent(connection, id);
            }
        }
        h2_session(connection).scratch_ids = ids;
    }

    /// Hands waiting body chunks to the running ASGI app while it takes
    /// more, releasing their flow-control credit as they go.
    pub(super) fn http2_body_to_app(&mut self, py: Python<'_>, writer: &mut StreamWriter<'_>) {
        loop {
            let StreamBody::ToApp { waiting, ended, .. } = &mut writer.stream.body else {
                return;
            };
            let ended = *ended;
            if waiting.is_empty() {
                if ended {
                    writer.stream.body = StreamBody::Done;
                    self.request_body(py, writer, &[], true);
                }
                return;
            }
            if !self.request_wants_body(py, &*writer) {
                return;
            }
            let StreamBody::ToApp { waiting, .. } = &mut writer.stream.body else {
                return;
            };
            let chunk = waiting.pop_front().expect("checked non-empty");
            let last = ended && waiting.is_empty();
            if last {
                writer.stream.body = StreamBody::Done;
            }
            writer.conn.release(writer.id, chunk.len());
            writer.stream.body_progress = self.now;
            self.request_body(py, writer, &chunk, last);
        }
    }
}
