//! Driving one HTTP/2 connection: feed what was read to `H2Connection`,
//! turn its events into requests and request events, write what it owes,
//! read again; until the socket would block or the connection is done.
//!
//! Each `Request` event becomes an [`H2Stream`] dispatched through
//! `Core::dispatch` (a complete body) or, for an ASGI app, at once with
//! its body handed to `receive()` as DATA arrives. A body's flow-control
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
use rush_h2::{Event, RequestHead as H2Head};
use rush_proto::{parse_request_head, HeadStatus, Version};

use super::{H2Session, H2Stream, StreamBody, StreamOut, StreamWriter};
use crate::body::{BodyBuffer, RequestBody, SpoolError};
use crate::conn::{Connection, Disposition, Protocol};
use crate::dispatch::{Core, Outcome, RequestLine};
use crate::exchange::{ResponseWriter, StreamKey, WholeResponse};
use crate::http_write::TEXT_PLAIN;
use crate::inflight::{InFlight, RequestUnit};
use crate::metrics;
use crate::options::{FRAMES_PER_TURN, LINGER_MAX_BYTES, LINGER_TIMEOUT, READ_BUDGET_PER_TURN};
use crate::request::header_fields;
use crate::response::ResponseContext;

/// The HTTP/2 session of a connection driven by this module.
fn h2_session(connection: &mut Connection) -> &mut H2Session {
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
        listener: *listener,
    })
}

/// The request head as HTTP/1.1 text for rush-proto's parser (see the
/// module `crate::http2`): `:authority` as `Host`, `cookie` fields joined
/// with `; `, connection-specific fields left out.
fn head_text(head: &H2Head) -> Vec<u8> {
    let mut text = Vec::with_capacity(256);
    text.extend_from_slice(head.method.as_str().as_bytes());
    text.push(b' ');
    text.extend_from_slice(head.path().as_bytes());
    text.extend_from_slice(b" HTTP/1.1\r\n");
    let authority = head.authority();
    if let Some(authority) = authority {
        text.extend_from_slice(b"host: ");
        text.extend_from_slice(authority.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    let mut cookies = 0;
    for (name, value) in &head.headers {
        let name = name.as_str();
        match name {
            "host" if authority.is_some() => continue,
            "cookie" => {
                cookies += 1;
                continue;
            }
            // `te` stays: `h2` lets only `trailers` through, which the app
            // may read as the client's word that it takes trailers (gRPC).
            "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" => {
                continue
            }
            _ => {}
        }
        text.extend_from_slice(name.as_bytes());
        text.extend_from_slice(b": ");
        text.extend_from_slice(value.as_bytes());
        text.extend_from_slice(b"\r\n");
    }
    if cookies > 0 {
        text.extend_from_slice(b"cookie: ");
        for (index, value) in head.headers.get_all("cookie").iter().enumerate() {
            if index > 0 {
                text.extend_from_slice(b"; ");
            }
            text.extend_from_slice(value.as_bytes());
        }
        text.extend_from_slice(b"\r\n");
    }
    text.extend_from_slice(b"\r\n");
    text
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
            let (closed, lingering) = (
                session.closed || session.conn.is_done(),
                session.lingering.is_some(),
            );
            if closed {
                if connection.peer_closed {
                    return Disposition::Close;
                }
                if !lingering {
                    // Like an HTTP/1.1 refusal: shut the write side, then
                    // discard what still comes for a bounded time.
                    let session = h2_session(connection);
                    session.lingering = Some(0);
                    session.shutdown_requested = true;
                    connection.stream.shutdown_write();
                    connection.deadline = Some(self.now + LINGER_TIMEOUT);
                }
            }
            if connection.peer_closed {
                return Disposition::Close;
            }
            let session = h2_session(connection);
            if session.lingering.is_none() && !session.conn.wants_read() {
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
                    if let Some(discarded) = &mut session.lingering {
                        *discarded += count;
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

    /// Hands `data` to the connection as far as this turn's frame budget
    /// goes (`FRAMES_PER_TURN` since `frames_at_start`); the rest waits in
    /// `H2Session::unfed` for the next turn.
    fn http2_feed(&mut self, connection: &mut Connection, data: &[u8], frames_at_start: u64) {
        let session = h2_session(connection);
        let spent = session.conn.frames_received() - frames_at_start;
        let left = FRAMES_PER_TURN.saturating_sub(spent).max(1) as usize;
        let taken = session.conn.feed_frames(data, left);
        session.unfed.extend_from_slice(&data[taken..]);
    }

    /// Before the drive returns: the ASGI producers waiting on their
    /// streams' water marks are paused or resumed, and the keep-alive
    /// timer runs while no stream is open.
    fn http2_pause(&mut self, py: Python<'_>, connection: &mut Connection) -> Disposition {
        let session = h2_session(connection);
        let mut paced = std::mem::take(&mut session.scratch_ids);
        paced.clear();
        paced.extend(session.streams.iter().filter_map(|(&id, stream)| {
            let in_flight = stream.unit.in_flight.as_ref();
            in_flight.is_some_and(InFlight::needs_pacing).then_some(id)
        }));
        let body_timeout = self.config.body_timeout;
        session.body_deadline = session
            .streams
            .values()
            .filter_map(|stream| stream.body_deadline(body_timeout))
            .min();
        let idle = session.streams.is_empty();
        let lingering = session.lingering.is_some();
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
    fn http2_events(&mut self, py: Python<'_>, connection: &mut Connection, key: usize) -> bool {
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
                    match std::mem::replace(&mut entry.body, StreamBody::Done) {
                        StreamBody::Collect {
                            head_bytes,
                            head,
                            buffer,
                            ..
                        } => {
                            let body = buffer;
                            self.http2_dispatch(
                                py,
                                connection,
                                key,
                                stream,
                                &head_bytes,
                                &head,
                                body.as_request_body(),
                            );
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
    fn http2_progress(&mut self, py: Python<'_>, connection: &mut Connection) {
        let session = h2_session(connection);
        let mut ids = std::mem::take(&mut session.scratch_ids);
        ids.clear();
        ids.extend(session.streams.keys().copied());
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
    fn http2_body_to_app(&mut self, py: Python<'_>, writer: &mut StreamWriter<'_>) {
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

    /// A new request on stream `id`: parsed, then dispatched now (no body,
    /// or an ASGI app taking it as it comes) or once its body is complete.
    fn http2_request(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        id: u32,
        h2_head: &H2Head,
        end_stream: bool,
    ) {
        let session = h2_session(connection);
        let unit = RequestUnit::new(self.now);
        let takes_trailers = h2_head
            .headers
            .get("te")
            .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"trailers"));
        session.streams.insert(
            id,
            H2Stream {
                unit,
                out: StreamOut::default(),
                body: StreamBody::Done,
                answered: false,
                takes_trailers,
                body_progress: self.now,
                send_watch: None,
            },
        );
        if let Some(why) = h2_head.malformed() {
            return self.http2_malformed(py, connection, id, why);
        }
        let head_bytes = head_text(h2_head);
        let mut head =
            match parse_request_head(&head_bytes, &self.config.limits, &mut self.header_scratch) {
                Ok(HeadStatus::Complete(head)) => head,
                Ok(HeadStatus::Partial) => {
                    return self.http2_refuse(py, connection, id, 400);
                }
                Err(error) => {
                    if let Some(writer) = stream_writer(connection, id) {
                        self.log_refusal(py, &writer, &error.to_string());
                    }
                    return self.http2_refuse_error(py, connection, id, &error);
                }
            };
        head.version = Version::Http2;
        self.http2_begin_request(connection, id, &head_bytes);
        if !end_stream && head.expect_continue {
            // The client waits for this before it sends its body (RFC 9110
            // 10.1.1); HTTP/1.1 sends it the same way, before the app runs.
            if let Some(writer) = stream_writer(connection, id) {
                let _ = writer
                    .conn
                    .send_response(id, 100, std::iter::empty(), false);
            }
        }
        if end_stream {
            return self.http2_dispatch(
                py,
                connection,
                key,
                id,
                &head_bytes,
                &head,
                RequestBody::Bytes(&[]),
            );
        }
        if self.takes_body_as_it_comes(head.path.of(&head_bytes)) {
            let Some(mut writer) = stream_writer(connection, id) else {
                return;
            };
            writer.stream.body = StreamBody::ToApp {
                waiting: Default::default(),
                ended: false,
                received: 0,
            };
            let stream = StreamKey {
                connection: key,
                stream: id,
            };
            let keep_alive = !self.closes_for_drain();
            let outcome = self.dispatch_body_flowing(
                py,
                &mut writer,
                stream,
                &head_bytes,
                &head,
                Vec::new(),
                keep_alive,
            );
            drop(writer); // commits what the call sent
            return self.http2_after_outcome(connection, id, outcome);
        }
        let expected = match head.framing {
            rush_proto::BodyFraming::ContentLength(length) => Some(length),
            _ => None,
        };
        let buffer = match BodyBuffer::new(expected) {
            Ok(buffer) => buffer,
            Err(error) => {
                // A declared length that does not fit the worker's spool
                // budget: refused before any of it is read.
                let (status, text) = match error {
                    SpoolError::Full => (503, "503 request body spool full"),
                    _ => (413, "413 request body too large"),
                };
                if let Some(writer) = stream_writer(connection, id) {
                    self.log_refusal(py, &writer, text);
                }
                if status == 503 {
                    self.http2_refuse_with(py, connection, id, 503, b"Service Unavailable");
                } else {
                    let error = rush_proto::ProtoError::PayloadTooLarge;
                    self.http2_refuse_error(py, connection, id, &error);
                }
                return;
            }
        };
        if let Some(entry) = h2_session(connection).streams.get_mut(&id) {
            entry.body = StreamBody::Collect {
                head_bytes,
                head: Box::new(head),
                buffer,
                received: 0,
            };
        }
    }

    /// A malformed request on stream `id` (RFC 9113 section 8.1.1): reset
    /// with PROTOCOL_ERROR, as `h2` resets the malformed requests it finds
    /// itself, before any app sees it; logged and counted as a refused
    /// head (counted under 400, HTTP/1.1's answer to a malformed head).
    fn http2_malformed(&mut self, py: Python<'_>, connection: &mut Connection, id: u32, why: &str) {
        metrics::refused(400);
        if let Some(writer) = stream_writer(connection, id) {
            let what = format!("malformed HTTP/2 request, stream reset: {why}");
            self.log_refusal(py, &writer, &what);
        }
        let session = h2_session(connection);
        session.streams.remove(&id);
        session.conn.reset(id, rush_h2::Reason::PROTOCOL_ERROR);
    }

    /// What every later step of a stream's answer needs from its head (as
    /// `begin_request` notes it for HTTP/1.1).
    fn http2_begin_request(&self, connection: &mut Connection, id: u32, head_bytes: &[u8]) {
        let trusted = connection.trusted_proxy;
        let Some(stream) = h2_session(connection).streams.get_mut(&id) else {
            return;
        };
        stream.unit.started = if metrics::enabled() {
            std::time::Instant::now()
        } else {
            self.now
        };
        stream.unit.origin = match &self.forwarding {
            Some(forwarding) if trusted => forwarding.read(head_bytes),
            _ => None,
        };
        if let Some(format) = &self.access_format {
            if self.access_logger.is_some() && format.needs_headers() {
                stream.unit.log_headers = format.header_values(header_fields(head_bytes));
            }
        }
    }

    /// Dispatches a complete request on stream `id`.
    #[allow(clippy::too_many_arguments)]
    fn http2_dispatch(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        id: u32,
        head_bytes: &[u8],
        head: &rush_proto::RequestHead,
        body: RequestBody<'_>,
    ) {
        let Some(mut writer) = stream_writer(connection, id) else {
            return;
        };
        let stream = StreamKey {
            connection: key,
            stream: id,
        };
        // A request with no body can be dispatched again from its head: it
        // may wait for another request's cache fill of its key.
        self.may_park = matches!(body, RequestBody::Bytes(bytes) if bytes.is_empty());
        let outcome = self.dispatch(py, &mut writer, stream, head_bytes, head, body);
        self.may_park = false;
        if let Outcome::Parked = outcome {
            // The stream waits, its head kept; the other streams go on.
            writer.stream.unit.in_flight = Some(InFlight::AwaitingFill(Some(head_bytes.into())));
            return;
        }
        drop(writer); // commits what the call sent
        self.http2_after_outcome(connection, id, outcome);
    }

    /// `--body-timeout` per stream: a stream whose request body waited on
    /// the client past it is ended, the other streams go on. Its app, if
    /// one runs, is told the client is gone (ASGI `http.disconnect`). With
    /// no response started it gets a 408 (as HTTP/1.1 and nginx answer a
    /// stalled body), then RST_STREAM(NO_ERROR) for the body that never
    /// came (RFC 9113 section 8.1); a response already under way is cut
    /// with RST_STREAM(CANCEL).
    fn http2_body_timeouts(&mut self, py: Python<'_>, connection: &mut Connection) {
        let now = self.now;
        let body_timeout = self.config.body_timeout;
        let session = h2_session(connection);
        session.body_deadline = None;
        let mut overdue = std::mem::take(&mut session.scratch_ids);
        overdue.clear();
        overdue.extend(session.streams.iter().filter_map(|(&id, stream)| {
            let deadline = stream.body_deadline(body_timeout)?;
            (now >= deadline).then_some(id)
        }));
        for &id in &overdue {
            let Some(writer) = stream_writer(connection, id) else {
                continue;
            };
            if let StreamBody::Discard { .. } = writer.stream.body {
                // A refused body the client stopped sending: no more
                // draining; `h2` resets the stream with NO_ERROR.
                writer.conn.stop_request_body(id);
                drop(writer);
                h2_session(connection).streams.remove(&id);
                continue;
            }
            let head_sent = writer.stream.out.head_sent;
            let what = if head_sent {
                "the request body did not arrive in time; its stream was reset"
            } else {
                "408 the request body did not arrive in time"
            };
            self.log_refusal(py, &writer, what);
            writer.conn.stop_request_body(id);
            drop(writer); // commits what the call sent
            if head_sent {
                self.http2_stream_cut(py, connection, id);
                h2_session(connection)
                    .conn
                    .reset(id, rush_h2::Reason::CANCEL);
            } else {
                // A dispatched app (one reading its body as it comes) has
                // its line with the 408 it was answered with.
                self.http2_answered_for_app(py, connection, id, 408);
                self.http2_refuse(py, connection, id, 408);
            }
        }
        h2_session(connection).scratch_ids = overdue;
    }

    /// The body of stream `id`, flowing to its running app, went past
    /// `--max-body-size`: the app is told its client left (`http.disconnect`)
    /// and the request is refused as a collected body is (413, the rest
    /// drained while it comes, logged as a refusal), or, if the response
    /// had begun, the stream is reset with INTERNAL_ERROR (what nginx sends
    /// when it ends a request whose response began). A stream already
    /// answered only stops taking its body (`h2` resets it with NO_ERROR
    /// once the response is out, RFC 9113 section 8.1).
    fn http2_refuse_flowing_body(&mut self, py: Python<'_>, connection: &mut Connection, id: u32) {
        let Some(mut writer) = stream_writer(connection, id) else {
            return;
        };
        if writer.stream.answered {
            writer.stream.body = StreamBody::Done;
            writer.conn.stop_request_body(id);
            return;
        }
        let error = rush_proto::ProtoError::PayloadTooLarge;
        // The app ran: its one access-log line, taken before its request
        // unit lets the app go.
        let line = writer
            .stream
            .unit
            .in_flight
            .as_ref()
            .and_then(cut_request_line);
        if !self.request_body_refused(py, &mut writer) {
            self.log_refusal(py, &writer, &error.to_string());
            if let Some(line) = &line {
                let status = error.status();
                self.access_log(py, &writer, &RequestLine::Owned(line), status, 0);
            }
            drop(writer); // commits what the app had sent: nothing of a head
            return self.http2_refuse_error(py, connection, id, &error);
        }
        metrics::refused(error.status());
        let what = format!("{error} (its response had begun: the stream was reset)");
        self.log_refusal(py, &writer, &what);
        if let Some(line) = &line {
            // Cut with the status that went out.
            let out = &writer.stream.out;
            let status = out.head_sent.then_some(out.status);
            let length = out.body_bytes as usize;
            self.access_log_status(py, &writer, &RequestLine::Owned(line), status, length);
        }
        writer.conn.stop_request_body(id);
        drop(writer); // commits what the call sent
        let session = h2_session(connection);
        session.streams.remove(&id);
        session.conn.reset(id, rush_h2::Reason::INTERNAL_ERROR);
    }

    /// A parked stream's cache fill completed (or its lock timed out): its
    /// request is dispatched again from the head it kept.
    pub(crate) fn http2_wake(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        id: u32,
    ) {
        let Some(writer) = stream_writer(connection, id) else {
            return;
        };
        let head_bytes = match writer.stream.unit.in_flight.take() {
            Some(InFlight::AwaitingFill(Some(head_bytes))) => head_bytes,
            other => {
                writer.stream.unit.in_flight = other;
                return;
            }
        };
        drop(writer); // nothing held: a parked stream sent nothing
        let parsed = parse_request_head(&head_bytes, &self.config.limits, &mut self.header_scratch);
        let Ok(HeadStatus::Complete(mut head)) = parsed else {
            // It parsed when it came; it cannot fail now.
            return self.http2_refuse(py, connection, id, 400);
        };
        head.version = Version::Http2;
        let body = RequestBody::Bytes(&[]);
        self.http2_dispatch(py, connection, key, id, &head_bytes, &head, body);
    }

    /// Answers stream `id` with a status page of rush's own (a refused
    /// head or body), and lets the rest of its body go: drained while the
    /// client keeps sending (`StreamBody::Discard`), then `h2` resets the
    /// stream with NO_ERROR (RFC 9113 section 8.1), so a client that stops
    /// sending does not hold the stream open until the idle timeout.
    fn http2_refuse(&mut self, py: Python<'_>, connection: &mut Connection, id: u32, status: u16) {
        let body = rush_proto::response::reason_phrase(status).as_bytes();
        self.http2_refuse_with(py, connection, id, status, body);
    }

    /// As [`Core::http2_refuse`], for a request the protocol's limits
    /// refused: the body is the one HTTP/1.1 sends for `error`
    /// (`413 Content Too Large: request body too large`), so a refusal
    /// reads the same over both protocols.
    fn http2_refuse_error(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        error: &rush_proto::ProtoError,
    ) {
        let body = rush_proto::response::error_page(error);
        self.http2_refuse_with(py, connection, id, error.status(), &body);
    }

    /// Answers stream `id` with `status` and a text/plain `body` (see
    /// [`Core::http2_refuse`]).
    fn http2_refuse_with(
        &mut self,
        _py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        status: u16,
        body: &[u8],
    ) {
        metrics::refused(status);
        let date_line = self.date.header_line().to_vec();
        let Some(mut writer) = stream_writer(connection, id) else {
            return;
        };
        writer.stream.body = if writer.conn.request_body_open(id) {
            StreamBody::Discard { discarded: 0 }
        } else {
            StreamBody::Done
        };
        let context = ResponseContext {
            date_line: &date_line,
            head_only: false,
            keep_alive: true,
            http10: false,
            request_head: &[],
            allow: None,
        };
        let page = WholeResponse {
            status,
            content_type: TEXT_PLAIN,
            body,
            close: false,
            context: &context,
        };
        writer.send_whole(&page, std::iter::empty());
        drop(writer); // commits what the call sent
        self.http2_after_outcome(connection, id, Outcome::KeepAlive);
    }

    /// Moves stream `id` on from what became of its request: a complete
    /// response lets the request unit go (the stream stays only while a
    /// file body is still being framed).
    pub(crate) fn http2_after_outcome(
        &self,
        connection: &mut Connection,
        id: u32,
        outcome: Outcome,
    ) {
        let session = h2_session(connection);
        if self.draining {
            session.shut_down();
        }
        let Some(stream) = session.streams.get_mut(&id) else {
            return;
        };
        match outcome {
            // A parked stream keeps its head (`http2_dispatch`); here it
            // can only be a dispatch that did not park it: done.
            Outcome::Pending => {}
            Outcome::Parked | Outcome::KeepAlive | Outcome::Close => {
                stream.unit.in_flight = None;
                stream.answered = true;
                finish_if_sent(connection, id);
            }
        }
    }
}

impl Core {
    /// Stream `id` ends before its answer did: reset by the client, by the
    /// server (`--body-timeout`, a peer that never opens its window), or
    /// with its connection. A request that was dispatched and not yet
    /// logged gets its one access-log line and count now, as hypercorn
    /// logs it at that moment: with the status that went out, or `-` if
    /// none did, and the body bytes handed on so far (what HTTP/1.1 logs
    /// for a client that left mid-response). Its app is told the client
    /// is gone, and the stream is forgotten.
    pub(crate) fn http2_stream_cut(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
    ) {
        if let Some(writer) = stream_writer(connection, id) {
            let line = writer
                .stream
                .unit
                .in_flight
                .as_ref()
                .and_then(cut_request_line);
            if let Some(line) = line {
                let out = &writer.stream.out;
                let status = out.head_sent.then_some(out.status);
                let length = out.body_bytes as usize;
                self.access_log_status(py, &writer, &RequestLine::Owned(&line), status, length);
            }
        }
        if let Some(entry) = h2_session(connection).streams.remove(&id) {
            if let Some(in_flight) = &entry.unit.in_flight {
                in_flight.client_gone();
            }
        }
    }

    /// Every stream of a connection that is closing (the socket failed,
    /// its send timeout passed, the drain's deadline): cut, each logged as
    /// [`Core::http2_stream_cut`] says.
    pub(crate) fn http2_cut_all(&mut self, py: Python<'_>, connection: &mut Connection) {
        let Protocol::Http2(session) = &mut connection.protocol else {
            return;
        };
        let mut ids = std::mem::take(&mut session.scratch_ids);
        ids.clear();
        ids.extend(session.streams.keys().copied());
        ids.sort_unstable();
        for &id in &ids {
            self.http2_stream_cut(py, connection, id);
        }
        h2_session(connection).scratch_ids = ids;
    }

    /// A dispatched request on stream `id` answered by the server instead
    /// of its app (a 408 when its body stalled): its access-log line and
    /// count, and its app is told the client is gone.
    fn http2_answered_for_app(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        status: u16,
    ) {
        let Some(writer) = stream_writer(connection, id) else {
            return;
        };
        let line = writer
            .stream
            .unit
            .in_flight
            .as_ref()
            .and_then(cut_request_line);
        if let Some(line) = line {
            self.access_log(py, &writer, &RequestLine::Owned(&line), status, 0);
        }
        if let Some(in_flight) = &writer.stream.unit.in_flight {
            in_flight.client_gone();
        }
    }
}

/// The request line of a request still being answered, for its access-log
/// line when its stream is cut; `None` if it has none to log.
fn cut_request_line(in_flight: &InFlight) -> Option<String> {
    match in_flight {
        InFlight::Handler(awaiting) => Some(awaiting.request_line.clone()),
        InFlight::Stream(stream) => Some(stream.request_line.clone()),
        InFlight::AwaitingFill(Some(head)) => {
            // Parked with its head as `head_text` wrote it: its first line,
            // with the version the request came in.
            let end = memchr::memmem::find(head, b" HTTP/1.1\r\n")?;
            Some(format!("{} HTTP/2", String::from_utf8_lossy(&head[..end])))
        }
        InFlight::AwaitingFill(None) => None,
    }
}

/// Forgets stream `id` once its response is complete and all of it was
/// handed to `H2Connection` (which sends the rest as the windows allow).
/// A response whose app never ended it is reset rather than left open.
fn finish_if_sent(connection: &mut Connection, id: u32) {
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
    /// A suspended ASGI app on stream `id` sent more (see
    /// `Core::asgi_progress`).
    pub(crate) fn http2_asgi_progress(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        request_id: u64,
    ) {
        let Some(mut writer) = stream_writer(connection, id) else {
            return;
        };
        if let Some(outcome) = self.asgi_progress(py, &mut writer, request_id) {
            drop(writer); // commits what the call sent
            self.http2_after_outcome(connection, id, outcome);
        }
    }

    /// A handler of stream `id` that ran off the loop finished (see
    /// `Core::handler_finished`); `false`: that request is no longer
    /// answered there (reset, or already complete).
    pub(crate) fn http2_handler_finished(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        request_id: u64,
        task: &Bound<'_, PyAny>,
    ) -> bool {
        let Some(mut writer) = stream_writer(connection, id) else {
            return false;
        };
        let current = matches!(
            &writer.stream.unit.in_flight,
            Some(InFlight::Handler(awaiting)) if awaiting.request_id == request_id
        );
        if !current {
            return false;
        }
        let outcome = self.handler_finished(py, &mut writer, task);
        drop(writer); // commits what the call sent
        self.http2_after_outcome(connection, id, outcome);
        true
    }
}
