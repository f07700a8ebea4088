//! HTTP/2 streams the server ends before their app did: refusals (a
//! status page of rush's own, the rest of the body drained), `--body-timeout`
//! per stream, a streamed body past `--max-body-size`, and streams cut by
//! a reset, a stalled window or their connection's end, each of which gets
//! its one access-log line and count when it is cut.

use pyo3::prelude::*;

use super::drive::{h2_session, stream_writer};
use super::{StreamBody, StreamWriter};
use crate::conn::{Connection, Protocol};
use crate::dispatch::{Core, Outcome, RequestLine};
use crate::exchange::{ResponseWriter, WholeResponse};
use crate::http_write::TEXT_PLAIN;
use crate::inflight::InFlight;
use crate::metrics;
use crate::response::ResponseContext;

impl Core {
    /// `--body-timeout` per stream: a stream whose request body waited on
    /// the client past it is ended, the other streams go on. Its app, if
    /// one runs, is told the client is gone (ASGI `http.disconnect`). With
    /// no response started it gets a 408 (as HTTP/1.1 and nginx answer a
    /// stalled body), then RST_STREAM(NO_ERROR) for the body that never
    /// came (RFC 9113 section 8.1); a response already under way is cut
    /// with RST_STREAM(CANCEL).
    pub(super) fn http2_body_timeouts(&mut self, py: Python<'_>, connection: &mut Connection) {
        let now = self.now;
        let body_timeout = self.config.body_timeout;
        let session = h2_session(connection);
        session.body_deadline = None;
        let overdue = session.stream_ids(|stream| {
            stream
                .body_deadline(body_timeout)
                .is_some_and(|deadline| now >= deadline)
        });
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
    pub(super) fn http2_refuse_flowing_body(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
    ) {
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
        let line = cut_request_line(&writer);
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

    /// Answers stream `id` with a status page of rush's own (a refused
    /// head or body), and lets the rest of its body go: drained while the
    /// client keeps sending (`StreamBody::Discard`), then `h2` resets the
    /// stream with NO_ERROR (RFC 9113 section 8.1), so a client that stops
    /// sending does not hold the stream open until the idle timeout.
    pub(super) fn http2_refuse(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        status: u16,
    ) {
        let body = rush_proto::response::reason_phrase(status).as_bytes();
        self.http2_refuse_with(py, connection, id, status, body);
    }

    /// As [`Core::http2_refuse`], for a request the protocol's limits
    /// refused: the body is the one HTTP/1.1 sends for `error`
    /// (`413 Content Too Large: request body too large`), so a refusal
    /// reads the same over both protocols.
    pub(super) fn http2_refuse_error(
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
    pub(super) fn http2_refuse_with(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        status: u16,
        body: &[u8],
    ) {
        self.http2_refuse_with_fields(py, connection, id, (status, body), &[]);
    }

    /// As [`Core::http2_refuse_with`], with `fields` added to the answer
    /// (a refused WebSocket's `sec-websocket-version`, a `retry-after`).
    pub(super) fn http2_refuse_with_fields(
        &mut self,
        _py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        (status, body): (u16, &[u8]),
        fields: &[(&[u8], &[u8])],
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
        writer.send_whole(&page, fields.iter().copied());
        drop(writer); // commits what the call sent
        self.http2_after_outcome(connection, id, Outcome::KeepAlive);
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
            let line = cut_request_line(&writer);
            // A WebSocket the app had not answered yet has its line, `-`
            // (one answered was logged with its handshake's answer).
            let websocket = writer.stream.websocket.as_ref();
            let line = line.or_else(|| {
                let websocket = websocket.filter(|websocket| !websocket.answered)?;
                Some(websocket.session.line().to_owned())
            });
            if let Some(line) = line {
                let out = &writer.stream.out;
                let status = out.head_sent.then_some(out.status);
                let length = out.body_bytes as usize;
                self.access_log_status(py, &writer, &RequestLine::Owned(&line), status, length);
            }
        }
        if let Some(mut entry) = h2_session(connection).streams.remove(&id) {
            if let Some(in_flight) = &entry.unit.in_flight {
                in_flight.client_gone();
            }
            if let Some(websocket) = entry.websocket.as_mut() {
                self.http2_websocket_last_input(py, websocket);
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
        let mut ids = session.stream_ids(|_| true);
        ids.sort_unstable();
        for &id in &ids {
            self.http2_stream_cut(py, connection, id);
        }
        h2_session(connection).scratch_ids = ids;
    }

    /// A dispatched request on stream `id` answered by the server instead
    /// of its app (a 408 when its body stalled): its access-log line and
    /// count, and its app is told the client is gone.
    pub(super) fn http2_answered_for_app(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        status: u16,
    ) {
        let Some(writer) = stream_writer(connection, id) else {
            return;
        };
        let line = cut_request_line(&writer);
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
pub(super) fn cut_request_line(writer: &StreamWriter<'_>) -> Option<String> {
    match writer.stream.unit.in_flight.as_ref()? {
        InFlight::Handler(awaiting) => Some(awaiting.request_line.clone()),
        InFlight::Stream(stream) => Some(stream.request_line.clone()),
        InFlight::AwaitingFill(Some(head)) => {
            // Parked with its head as `head_text` wrote it: its first line,
            // with the version the request came in.
            let end = memchr::memmem::find(&head[..], b" HTTP/1.1\r\n")?;
            let version = if writer.conn.is_quic() { 3 } else { 2 };
            Some(format!(
                "{} HTTP/{version}",
                String::from_utf8_lossy(&head[..end])
            ))
        }
        InFlight::AwaitingFill(None) => None,
    }
}
