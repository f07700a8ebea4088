//! WebSocket over HTTP/2 (RFC 8441): an extended CONNECT opens a WebSocket
//! on one stream of the connection, and the stream's DATA carries its
//! frames both ways.
//!
//! How it works: the connection offers `SETTINGS_ENABLE_CONNECT_PROTOCOL`
//! when its app takes WebSockets (`Core::pick_protocol`); `h2` resets a
//! `:protocol` the setting did not allow (PROTOCOL_ERROR, as RFC 8441
//! section 3 asks). A CONNECT with `:protocol websocket` is written as the
//! GET head an HTTP/1.1 upgrade would be and parsed with the same limits,
//! checked as HTTP/1.1's handshake is (the app's target, `--ws-allowed-
//! origins`, the drain, `Sec-WebSocket-Version: 13`; there is no key), and
//! starts the app with the same `ws::channel::WebSocket` object the
//! HTTP/1.1 upgrade makes: an ASGI app gets a `websocket` scope with
//! `http_version` "2", a rush `App` its WebSocket handler. The stream's
//! `H2Stream::websocket` keeps the loop's side (`ws::WsSession`, the
//! received bytes not yet decoded).
//!
//! The app's answer goes out on the stream: `accept` as a `200` HEADERS
//! (no `Sec-WebSocket-Accept`, RFC 8441 section 5), a close before accept
//! or a `websocket.http.response` as that response, then the frames the
//! codec wrote (RFC 6455 framing and masking rules, deflate, `--ws-max-size`)
//! as DATA. Received DATA is decoded by the same codec; its flow-control
//! credit is released only as it is decoded, so a client that outruns its
//! app (`--ws-max-queue` full) is held by the stream's window. A client
//! that does not read holds the app's `send()` at the stream's high-water
//! mark, as an HTTP/2 response is paced, and the queue counts in
//! `--max-worker-output`. The closing handshake ends the server's side
//! with END_STREAM (RFC 8441 section 5: the stream's end is the TCP
//! close); a client's RST_STREAM, or an END_STREAM without a close, is an
//! abnormal closure (1006) for the app, as hypercorn reports it.

use std::time::Instant;

use pyo3::prelude::*;
use rush_h2::{Bytes, RequestHead as H2Head};
use rush_proto::ws::handshake::{validate_extended_connect, Field};
use rush_proto::ws::ConnectionState;
use rush_proto::{HeaderSpan, RequestHead};

use super::drive::{h2_session, stream_writer};
use super::request::head_text;
use super::session::H2WebSocket;
use super::writer::STREAM_HIGH_WATER;
use super::{H2Session, StreamWriter};
use crate::conn::Connection;
use crate::dispatch::{Core, RequestLine};
use crate::exchange::{BodyLength, ResponseHead, ResponseWriter, StreamKey, WholeResponse};
use crate::http_write::ResponseContext;
use crate::options::OUTPUT_FAIR_SHARE;
use crate::ws::channel::{Denial, Phase};
use crate::ws::{origin_allowed, ChannelOpening, WsAppCall, WsSession, CLOSE_TIMEOUT};

/// The one `:protocol` rush speaks (RFC 8441's registry entry).
const WEBSOCKET: &str = "websocket";

impl Core {
    /// Whether this worker's connections offer RFC 8441 (the setting is
    /// sent): its app takes WebSockets, as HTTP/1.1 upgrades go to an ASGI
    /// app or a rush `App` (a WSGI app has none).
    pub(crate) fn offers_websocket(&self) -> bool {
        !matches!(self.app, crate::dispatch::AppInterface::Wsgi(_))
    }

    /// An extended CONNECT on stream `id` (see the module): refused, or a
    /// WebSocket whose app is started.
    pub(super) fn http2_websocket_request(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
        id: u32,
        h2_head: &H2Head,
        end_stream: bool,
    ) {
        if h2_head.protocol.as_deref() != Some(WEBSOCKET) {
            // A protocol rush does not speak: RFC 8441 leaves the answer to
            // the server; 501 says the method is not supported for it.
            return self.http2_refuse(py, connection, id, 501);
        }
        if end_stream {
            // The client closed its side before the WebSocket began.
            return self.http2_refuse(py, connection, id, 400);
        }
        // The GET an HTTP/1.1 upgrade would send: the interfaces and their
        // limits read one head form, and the request line's method names
        // no tunnel to anyone reading the head.
        let mut head_bytes = head_text(h2_head);
        head_bytes.splice(..b"CONNECT".len(), *b"GET");
        let Some(head) = self.http2_read_head(py, connection, id, &head_bytes) else {
            return;
        };
        let headers = std::mem::take(&mut self.header_scratch);
        let request = (head_bytes.as_slice(), &head, headers.as_slice());
        self.http2_open_websocket(
            py,
            connection,
            StreamKey {
                connection: key,
                stream: id,
            },
            request,
        );
        self.header_scratch = headers;
    }

    /// Checks the handshake of stream `key` as HTTP/1.1's is checked and
    /// starts the app (`upgrade.rs` does the same for an upgrade).
    fn http2_open_websocket(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: StreamKey,
        (head_bytes, head, headers): (&[u8], &RequestHead, &[HeaderSpan]),
    ) {
        let id = key.stream;
        let Some(target) = self.websocket_target(py, head_bytes, head) else {
            // Over HTTP/1.1 such a request goes on as a GET; a CONNECT
            // answered 2xx would be a tunnel, so it is refused instead.
            return self.http2_refuse(py, connection, id, 404);
        };
        if self.draining {
            // As over HTTP/1.1: the client retries, on another worker.
            let fields: &[(&[u8], &[u8])] = &[(b"retry-after", b"1")];
            let body = b"Service Unavailable";
            return self.http2_refuse_with_fields(py, connection, id, (503, body), fields);
        }
        if let Err(error) = validate_extended_connect(head_bytes, headers) {
            let version: &[(&[u8], &[u8])] = &[(b"sec-websocket-version", b"13")];
            let fields = if error.status() == 426 { version } else { &[] };
            let body = format!("{}\n", error.message());
            let answer = (error.status(), body.as_bytes());
            return self.http2_refuse_with_fields(py, connection, id, answer, fields);
        }
        if !origin_allowed(&self.config.ws_allowed_origins, head_bytes, headers) {
            let body = b"this Origin may not open a WebSocket here (--ws-allowed-origins)\n";
            return self.http2_refuse_with_fields(py, connection, id, (403, body), &[]);
        }
        let opening = ChannelOpening {
            key: key.connection,
            accept_key: None,
            high_water: STREAM_HIGH_WATER,
            request: (head_bytes, head, headers),
        };
        let Some(made) = self.websocket_channel(py, opening, &target) else {
            return self.http2_refuse(py, connection, id, 500);
        };
        let target_line = String::from_utf8_lossy(head.target.of(head_bytes));
        let line = format!("CONNECT {target_line} HTTP/2");
        let mut state = Box::new(H2WebSocket {
            session: WsSession::new(made.channel, made.session, line, self.now),
            input: Vec::new(),
            input_ended: false,
            answered: false,
            // The app has until the body timeout to answer, as over HTTP/1.1.
            accept_deadline: Some(self.now + self.config.body_timeout),
            end_sent: None,
        });
        let origin = h2_session(connection)
            .streams
            .get(&id)
            .and_then(|stream| stream.unit.origin.clone());
        let call = WsAppCall {
            request: (head_bytes, head, origin.as_deref()),
            subprotocols: &made.subprotocols,
            key,
        };
        self.start_websocket_app(py, connection, target, &mut state.session, call);
        if let Some(stream) = h2_session(connection).streams.get_mut(&id) {
            stream.websocket = Some(state);
        }
    }

    /// Moves every WebSocket stream of the connection on (see
    /// [`Core::http2_websocket_step`]); a drive calls it on each pass.
    pub(super) fn http2_websockets(&mut self, py: Python<'_>, connection: &mut Connection) {
        let session = h2_session(connection);
        let any = session
            .streams
            .values()
            .any(|stream| stream.websocket.is_some());
        if !any {
            return;
        }
        let ids: Vec<u32> = session
            .streams
            .iter()
            .filter_map(|(&id, stream)| stream.websocket.is_some().then_some(id))
            .collect();
        for id in ids {
            self.http2_websocket_step(py, connection, id);
        }
    }

    /// One WebSocket stream: the app's answer to the handshake sent, its
    /// frames handed to the stream, received bytes decoded for it while its
    /// queue has room (their credit released as decoded), the stream ended
    /// after the closing handshake or forgotten once both sides ended, and
    /// the app's `send()` resumed once the stream's queue drained.
    fn http2_websocket_step(&mut self, py: Python<'_>, connection: &mut Connection, id: u32) {
        let Some(mut writer) = stream_writer(connection, id) else {
            return;
        };
        let Some(mut state) = writer.stream.websocket.take() else {
            return;
        };
        let channel = state.session.channel.clone_ref(py);
        let channel = channel.bind(py);
        // The app is never running while the loop drives (same thread, no
        // re-entry), so this borrow succeeds; if not, try on the next pass.
        let Ok(mut ws) = channel.try_borrow_mut() else {
            writer.stream.websocket = Some(state);
            return;
        };
        ws.flush_requested = false;
        if let Some(denial) = ws.take_denial() {
            drop(ws);
            let line = state.session.line();
            self.http2_websocket_denial(py, &mut writer, line, &denial);
            state.answered = true;
            drop(writer);
            h2_session(connection).streams.remove(&id);
            // Dropped after the stream: the app hears 1006, as over HTTP/1.1.
            drop(state);
            return;
        }
        if let Some(fields) = ws.h2_accept.take() {
            self.http2_websocket_accept(py, &mut writer, state.session.line(), &fields);
            state.answered = true;
            state.accept_deadline = None;
            state.session.heard(self.now);
        }
        if !ws.out.is_empty() {
            let frames = Bytes::from(std::mem::take(&mut ws.out));
            writer.stream.out.body_bytes += frames.len() as u64;
            let _ = writer.conn.send_data(id, frames, false);
        }
        if matches!(ws.phase, Phase::Open) && !state.input.is_empty() {
            let before = state.input.len();
            // Pongs and the close echo the codec writes on its own.
            let mut replies = Vec::new();
            let H2WebSocket { session, input, .. } = &mut *state;
            self.receive_frames(py, &mut ws, session, input, &mut replies);
            writer.conn.release(id, before - state.input.len());
            if !replies.is_empty() {
                let _ = writer.conn.send_data(id, Bytes::from(replies), false);
            }
        }
        if ws.queue_full() && !state.session.app_done {
            // Backpressure: the app's next receive() asks for more, and
            // until then the stream's window holds the client.
            ws.read_paused = true;
        }
        let proto_state = ws.proto.as_ref().map(|proto| proto.state());
        if proto_state == Some(ConnectionState::Closed) && state.end_sent.is_none() {
            // The closing handshake is over: the server ends its side
            // first, as it closes TCP first over HTTP/1.1 (RFC 6455 7.1.1).
            let _ = writer.conn.send_data(id, Bytes::new(), true);
            state.end_sent = Some(self.now);
        }
        let client_done = state.input_ended && (state.input.is_empty() || ws.proto.is_none());
        if client_done {
            // The client ended its side: after a close, the end; without
            // one, an abnormal closure (1006) for the app.
            ws.transport_gone(py);
            if state.end_sent.is_none() {
                let _ = writer.conn.send_data(id, Bytes::new(), true);
            }
        }
        // As an HTTP/2 response's producer: the stream's mark, or while the
        // worker is over its output budget, the fair share.
        let mark = if self.output_total > self.config.output_budget {
            OUTPUT_FAIR_SHARE
        } else {
            STREAM_HIGH_WATER
        };
        ws.set_high_water(mark);
        ws.sink_pending = writer.conn.pending_send(id);
        if ws.sink_pending < mark / 2 && ws.out.is_empty() {
            ws.resume_sender(py);
        }
        drop(ws);
        if client_done && !state.answered {
            // The client left before the app answered: its line, with `-`.
            let line = RequestLine::Owned(state.session.line());
            self.access_log_status(py, &writer, &line, None, 0);
        }
        if client_done {
            drop(writer);
            h2_session(connection).streams.remove(&id);
            return;
        }
        writer.stream.websocket = Some(state);
    }

    /// The app's denial of the handshake (a close before accept: 403; an
    /// app that failed: 500; or its `websocket.http.response`) as the
    /// stream's whole response; then no WebSocket follows, so what the
    /// client still sends is let go and `h2` resets the stream (NO_ERROR)
    /// once the answer is out.
    fn http2_websocket_denial(
        &self,
        py: Python<'_>,
        writer: &mut StreamWriter<'_>,
        line: &str,
        denial: &Denial,
    ) {
        let Denial {
            status,
            headers,
            body,
        } = denial;
        let (status, body) = (*status, body.as_slice());
        crate::metrics::refused(status);
        let date_line = self.date.header_line().to_vec();
        let page = WholeResponse {
            status,
            content_type: b"",
            body,
            close: false,
            context: &plain_context(&date_line),
        };
        // Fields HTTP/2 cannot carry are dropped, as HTTP/1.1 drops them
        // from a denial, rather than failing the whole answer.
        let fields = headers.iter().filter(|(name, value)| {
            rush_proto::response::is_valid_header_name(name)
                && rush_proto::response::is_valid_header_value(value)
        });
        let fields = fields.map(|(name, value)| (name.as_slice(), value.as_slice()));
        writer.send_whole(&page, fields);
        writer.commit();
        self.access_log(py, &*writer, &RequestLine::Owned(line), status, body.len());
        writer.conn.stop_request_body(writer.id);
    }

    /// The app accepted: a `200` with the fields `accept` made (RFC 8441
    /// section 5: no `Sec-WebSocket-Accept`), the stream left open.
    fn http2_websocket_accept(
        &self,
        py: Python<'_>,
        writer: &mut StreamWriter<'_>,
        line: &str,
        fields: &[Field],
    ) {
        let date_line = self.date.header_line().to_vec();
        let head = ResponseHead {
            status: 200,
            length: BodyLength::Streamed,
            close: false,
            context: plain_context(&date_line),
        };
        let fields = fields
            .iter()
            .map(|(name, value)| (name.as_slice(), value.as_slice()));
        writer.send_head(&head, fields);
        writer.commit();
        self.access_log(py, &*writer, &RequestLine::Owned(line), 200, 0);
    }

    /// A WebSocket stream is cut (the client reset it, or the connection
    /// ended): the whole messages it had received but not yet decoded (its
    /// app's queue was full) still reach the app, before its 1006, as over
    /// HTTP/1.1 the bytes that came before the socket's end are read. They
    /// are bounded by the stream's window.
    pub(super) fn http2_websocket_last_input(&self, py: Python<'_>, state: &mut H2WebSocket) {
        if state.input.is_empty() {
            return;
        }
        let channel = state.session.channel.clone_ref(py);
        let channel = channel.bind(py);
        let Ok(mut ws) = channel.try_borrow_mut() else {
            return;
        };
        if !matches!(ws.phase, Phase::Open) {
            return;
        }
        ws.unbound_queue();
        // Pongs or a close echo have no one to go to.
        let mut replies = Vec::new();
        let H2WebSocket { session, input, .. } = state;
        self.receive_frames(py, &mut ws, session, input, &mut replies);
    }

    /// The app of a WebSocket on stream `id` returned or raised (a
    /// completion): `None` if no WebSocket session `request_id` is there.
    pub(crate) fn http2_websocket_finished(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        id: u32,
        request_id: u64,
        task: &Bound<'_, PyAny>,
    ) -> Option<bool> {
        let stream = h2_session(connection).streams.get_mut(&id)?;
        let state = stream
            .websocket
            .as_mut()
            .filter(|state| state.session.id == request_id)?;
        let result = task.call_method0(pyo3::intern!(py, "result"));
        self.websocket_app_finished(py, &mut state.session, result);
        Some(true)
    }

    /// Once a second, for the WebSocket streams of a connection: the accept
    /// deadline, keepalive pings and their timeout, and the close timeouts
    /// (ours, and the client's END_STREAM after ours). Streams past one are
    /// added to `expired` (the sweep resets and cuts them: their apps hear
    /// 1006); `true` if a ping was queued and the connection needs a drive.
    pub(crate) fn http2_sweep_websockets(
        &self,
        py: Python<'_>,
        session: &mut H2Session,
        now: Instant,
        expired: &mut Vec<u32>,
    ) -> bool {
        let mut drive = false;
        for (&id, stream) in session.streams.iter_mut() {
            let Some(state) = stream.websocket.as_mut() else {
                continue;
            };
            let overdue = state
                .accept_deadline
                .is_some_and(|deadline| now >= deadline)
                || state
                    .end_sent
                    .is_some_and(|sent| now >= sent + CLOSE_TIMEOUT);
            if overdue {
                expired.push(id);
                continue;
            }
            match self.sweep_websocket(py, &mut state.session, now) {
                crate::ws::SweepAction::Close => expired.push(id),
                crate::ws::SweepAction::Drive => drive = true,
                crate::ws::SweepAction::Nothing => {}
            }
        }
        drive
    }
}

/// The request facts a WebSocket's answer goes out with: none but the
/// server's own fields (`date_line`).
fn plain_context(date_line: &[u8]) -> ResponseContext<'_> {
    ResponseContext {
        date_line,
        head_only: false,
        keep_alive: true,
        http10: false,
        request_head: &[],
        allow: None,
    }
}

/// The worker drains: every WebSocket stream of the connection starts its
/// closing handshake with 1001 (1012 when the worker is replaced), as over
/// HTTP/1.1; the connection's GOAWAY lets the streams finish.
pub(crate) fn close_websockets_for_shutdown(py: Python<'_>, session: &H2Session, restarting: bool) {
    for stream in session.streams.values() {
        if let Some(state) = &stream.websocket {
            crate::ws::close_for_shutdown(py, &state.session, restarting);
        }
    }
}
