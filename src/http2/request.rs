//! A request on one HTTP/2 stream, from its head to its outcome: the head
//! written as HTTP/1.1 text and parsed with rush-proto's limits (malformed
//! shapes reset), the stream dispatched through `Core::dispatch` (at once,
//! or once its body is complete), dispatched again after a cache fill it
//! waited for (`http2_wake`), moved on from its outcome, and the
//! completions of work that ran off the loop (a suspended ASGI app, a pool
//! thread). The loop that feeds it is `drive.rs`; streams the server ends
//! itself (refusals, timeouts, cuts) are `stream_end.rs`.

use pyo3::prelude::*;
use rush_h2::RequestHead as H2Head;
use rush_proto::{parse_request_head, HeadStatus, RequestHead, Version};

use super::drive::{finish_if_sent, h2_session, stream_writer};
use super::{H2Stream, StreamBody, StreamOut};
use crate::body::{BodyBuffer, RequestBody, SpoolError};
use crate::conn::Connection;
use crate::dispatch::incoming::IncomingRequest;
use crate::dispatch::{Core, Outcome};
use crate::exchange::StreamKey;
use crate::inflight::{InFlight, RequestUnit};
use crate::metrics;
use crate::request::header_fields;

/// The request head as HTTP/1.1 text for rush-proto's parser (see the
/// module `crate::http2`): `:authority` as `Host`, `cookie` fields joined
/// with `; `, connection-specific fields left out.
/// The version a session's requests carry: HTTP/2, or HTTP/3 over QUIC.
fn session_version(connection: &mut Connection) -> Version {
    if h2_session(connection).conn.is_quic() {
        Version::Http3
    } else {
        Version::Http2
    }
}

pub(super) fn head_text(head: &H2Head) -> Vec<u8> {
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
    /// A new request on stream `id`: parsed, then dispatched now (no body,
    /// or an ASGI app taking it as it comes) or once its body is complete.
    pub(super) fn http2_request(
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
                websocket: None,
            },
        );
        if let Some(why) = h2_head.malformed() {
            return self.http2_malformed(py, connection, id, why);
        }
        if h2_head.protocol.is_some() {
            // An extended CONNECT (RFC 8441): a WebSocket, or refused.
            return self.http2_websocket_request(py, connection, key, id, h2_head, end_stream);
        }
        let head_bytes = head_text(h2_head);
        let Some(head) = self.http2_read_head(py, connection, id, &head_bytes) else {
            return;
        };
        if !end_stream && head.expect_continue {
            // The client waits for this before it sends its body (RFC 9110
            // 10.1.1); HTTP/1.1 sends it the same way, before the app runs.
            if let Some(writer) = stream_writer(connection, id) {
                let _ = writer
                    .conn
                    .send_response(id, 100, std::iter::empty(), false);
            }
        }
        let stream = StreamKey {
            connection: key,
            stream: id,
        };
        if end_stream {
            let request = IncomingRequest::new(stream, &head_bytes, &head);
            return self.http2_dispatch(py, connection, request, RequestBody::Bytes(&[]));
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
            let request = IncomingRequest {
                keep_alive: !self.closes_for_drain(),
                ..IncomingRequest::new(stream, &head_bytes, &head)
            };
            let outcome = self.dispatch_body_flowing(py, &mut writer, request, Vec::new());
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
    pub(super) fn http2_malformed(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        why: &str,
    ) {
        metrics::refused(400);
        if let Some(writer) = stream_writer(connection, id) {
            let what = format!("malformed HTTP/2 request, stream reset: {why}");
            self.log_refusal(py, &writer, &what);
        }
        let session = h2_session(connection);
        session.streams.remove(&id);
        session.conn.reset(id, rush_h2::Reason::PROTOCOL_ERROR);
    }

    /// The head text of stream `id` parsed under HTTP/1.1's limits (the
    /// headers left in `header_scratch`) and its answer begun; or the
    /// stream refused, with the parser's status, and None.
    pub(super) fn http2_read_head(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        head_bytes: &[u8],
    ) -> Option<RequestHead> {
        let parsed = parse_request_head(head_bytes, &self.config.limits, &mut self.header_scratch);
        let mut head = match parsed {
            Ok(HeadStatus::Complete(head)) => head,
            Ok(HeadStatus::Partial) => {
                self.http2_refuse(py, connection, id, 400);
                return None;
            }
            Err(error) => {
                if let Some(writer) = stream_writer(connection, id) {
                    self.log_refusal(py, &writer, &error.to_string());
                }
                self.http2_refuse_error(py, connection, id, &error);
                return None;
            }
        };
        head.version = session_version(connection);
        self.http2_begin_request(connection, id, head_bytes);
        Some(head)
    }

    /// What every later step of a stream's answer needs from its head (as
    /// `begin_request` notes it for HTTP/1.1).
    pub(super) fn http2_begin_request(
        &self,
        connection: &mut Connection,
        id: u32,
        head_bytes: &[u8],
    ) {
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
    pub(super) fn http2_dispatch(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        request: IncomingRequest<'_>,
        body: RequestBody<'_>,
    ) {
        let id = request.key.stream;
        let Some(mut writer) = stream_writer(connection, id) else {
            return;
        };
        // A request with no body can be dispatched again from its head: it
        // may wait for another request's cache fill of its key.
        self.may_park = matches!(body, RequestBody::Bytes(bytes) if bytes.is_empty());
        let outcome = self.dispatch(py, &mut writer, request, body);
        self.may_park = false;
        if let Outcome::Parked = outcome {
            // The stream waits, its head kept; the other streams go on.
            let head_bytes = request.head_bytes.into();
            writer.stream.unit.in_flight = Some(InFlight::AwaitingFill(Some(head_bytes)));
            return;
        }
        drop(writer); // commits what the call sent
        self.http2_after_outcome(connection, id, outcome);
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
        head.version = session_version(connection);
        let body = RequestBody::Bytes(&[]);
        let stream = StreamKey {
            connection: key,
            stream: id,
        };
        let request = IncomingRequest::new(stream, &head_bytes, &head);
        self.http2_dispatch(py, connection, request, body);
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
        if let Some(done) = self.http2_websocket_finished(py, connection, id, request_id, task) {
            return done;
        }
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
