//! WebSocket on the loop: a connection whose protocol switched after an
//! upgrade (`conn::Protocol::WebSocket`).
//!
//! How it works: `upgrade.rs` turns a valid handshake into a [`WsSession`]
//! and starts the app (ASGI, or a rush `App` route) with a
//! [`channel::WebSocket`], which owns the sans-IO `rush_proto::ws::Connection`.
//! [`Core::drive_websocket`] is this protocol's drive: it moves what the app
//! framed (`WebSocket.out`) into the sink, feeds received bytes to
//! `Connection::receive` (whose pongs and close echoes go straight into the
//! sink) until the app's queue is full, hands messages to the app, writes,
//! and reads on. The socket closes once the closing handshake is over and
//! flushed (the server closes TCP first, RFC 6455 7.1.1).
//!
//! Over HTTP/2 (RFC 8441) the same object and session ride one stream of
//! the connection instead: `crate::http2::websocket` is that drive.
//!
//! Time is the sweep's business ([`Core::sweep_websocket`], once a second):
//! the accept deadline, keepalive pings and their timeout, and the close
//! timeout; no connection has a timer of its own.

pub mod broadcast;
pub mod channel;
pub mod flush;
pub mod session;
mod upgrade;

pub use session::WsSession;
pub(crate) use upgrade::{origin_allowed, ChannelOpening, WsAppCall};

use std::io::{self, Read};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use rush_proto::ws::{ConnectionState, MessageKind, Received};

use crate::conn::{Connection, Disposition, Protocol};
use crate::dispatch::{Core, RequestLine};
use crate::metrics;
use crate::options::READ_BUDGET_PER_TURN;
use channel::{Phase, WebSocket};

/// How long the peer has to answer our close frame before the socket is closed.
pub(crate) const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most capacity a connection's message buffer keeps between messages.
const IDLE_MESSAGE_CAPACITY: usize = 16 * 1024;

/// What the sweep decided for a WebSocket connection.
pub(crate) enum SweepAction {
    Nothing,
    /// Something was queued (a ping): drive it.
    Drive,
    /// A deadline passed: close the socket.
    Close,
}

impl Core {
    /// Drives a WebSocket connection (slab key `key`) until it would block,
    /// closes, or has read its share of this turn of the loop.
    pub(crate) fn drive_websocket(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) -> Disposition {
        let Protocol::WebSocket(session) = &mut connection.protocol else {
            return Disposition::Close;
        };
        let channel = session.channel.clone_ref(py);
        let channel = channel.bind(py);
        let mut socket_may_have_input = true;
        let mut read_this_turn = 0;
        loop {
            // The handshake's answer for the access log: (line, status), once.
            let mut answered: Option<(String, u16)> = None;
            let Protocol::WebSocket(session) = &mut connection.protocol else {
                return Disposition::Close;
            };
            // The app is never running while the loop drives (same thread,
            // no re-entry), so this borrow succeeds; if not, try later.
            let Ok(mut ws) = channel.try_borrow_mut() else {
                return Disposition::Open;
            };
            ws.flush_requested = false;
            if let Some(denial) = ws.take_denial() {
                write_denial(
                    &mut connection.sink.output,
                    denial.status,
                    &denial.headers,
                    &denial.body,
                    self.date.header_line(),
                );
                metrics::refused(denial.status);
                answered = Some((session.line.clone(), denial.status));
                session.closing = true;
                connection.input.clear();
            }
            if !ws.out.is_empty() {
                connection.sink.output.extend_from_slice(&ws.out);
                ws.out.clear();
            }
            if matches!(ws.phase, Phase::Open) && !session.opened {
                session.opened = true;
                answered = Some((session.line.clone(), 101));
                session.last_heard = self.now;
                connection.deadline = None;
            }
            if matches!(ws.phase, Phase::Open) {
                self.receive_frames(
                    py,
                    &mut ws,
                    session,
                    &mut connection.input,
                    &mut connection.sink.output,
                );
            }
            let proto_state = ws.proto.as_ref().map(|proto| proto.state());
            if proto_state == Some(ConnectionState::CloseSent) && session.close_started.is_none() {
                session.close_started = Some(self.now);
            }
            let closing = session.closing;
            // A finished app takes nothing more: its queue no longer holds reading up.
            let app_done = session.app_done;
            if let Some((line, status)) = answered {
                self.access_log(py, connection, &RequestLine::Owned(&line), status, 0);
            }
            if connection.sink.has_pending() || connection.stream.wants_write() {
                if connection.write_output().is_err() {
                    return Disposition::Close;
                }
                connection.track_write_progress(self.now, self.config.send_timeout);
            }
            ws.sink_pending = connection.sink.output.len();
            if connection.sink.has_room() && ws.out.is_empty() {
                ws.resume_sender(py);
            }
            if connection.has_pending_output() {
                // Socket full: wait for EPOLLOUT; read nothing meanwhile.
                return Disposition::Open;
            }
            if closing || proto_state == Some(ConnectionState::Closed) {
                return Disposition::Close;
            }
            if !matches!(ws.phase, Phase::Open) {
                // Before the app answers the handshake, nothing is read:
                // the client may not send frames yet.
                return Disposition::Open;
            }
            if ws.queue_full() && !app_done {
                // Backpressure: the app's next receive() asks for more.
                ws.read_paused = true;
                return Disposition::Open;
            }
            if !connection.input.is_empty() {
                continue;
            }
            if connection.peer_closed || !socket_may_have_input {
                return if connection.peer_closed {
                    Disposition::Close
                } else {
                    Disposition::Open
                };
            }
            drop(ws);
            if read_this_turn >= READ_BUDGET_PER_TURN {
                // Its share of this turn is used (pings answered as fast as
                // a peer sends them never fill the app's queue): the other
                // connections go first (`crate::next_turn`).
                self.next_turn.push(key);
                return Disposition::Open;
            }
            match connection.stream.read(&mut self.read_buffer) {
                Ok(0) => {
                    connection.peer_closed = true;
                    return Disposition::Close;
                }
                Ok(count) => {
                    read_this_turn += count;
                    metrics::count(metrics::Counter::BytesIn, count as u64);
                    socket_may_have_input =
                        connection.may_have_more_input(count, self.read_buffer.len());
                    if let Protocol::WebSocket(session) = &mut connection.protocol {
                        session.last_heard = self.now;
                        session.ping_sent = None;
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

    /// Decodes buffered input into messages for the app until the input
    /// is used up or the app's queue is full.
    pub(crate) fn receive_frames(
        &self,
        py: Python<'_>,
        ws: &mut WebSocket,
        session: &mut WsSession,
        input: &mut Vec<u8>,
        output: &mut Vec<u8>,
    ) {
        let mut offset = 0;
        while offset < input.len() && !ws.queue_full() {
            let Some(proto) = ws.proto.as_mut() else {
                break;
            };
            if proto.state() == ConnectionState::Closed {
                offset = input.len();
                break;
            }
            let (consumed, received) =
                proto.receive(&input[offset..], &mut session.message, output);
            offset += consumed;
            match received {
                Some(Received::Message(kind)) => {
                    let message = match kind {
                        // Validated as UTF-8 by the decoder.
                        MessageKind::Text => PyString::new(
                            py,
                            std::str::from_utf8(&session.message).unwrap_or_default(),
                        )
                        .into_any()
                        .unbind(),
                        MessageKind::Binary => {
                            PyBytes::new(py, &session.message).into_any().unbind()
                        }
                    };
                    session.message.clear();
                    // An idle connection keeps no large buffer: inflating
                    // grows it in 64 KiB steps, and a thousand idle
                    // connections would each hold one.
                    if session.message.capacity() > IDLE_MESSAGE_CAPACITY {
                        session.message = Vec::new();
                    }
                    ws.deliver_message(py, message);
                }
                Some(Received::Pong(_)) => session.ping_sent = None,
                Some(Received::Disconnect(disconnect)) => {
                    ws.deliver_disconnect(py, disconnect.code, disconnect.reason.as_str());
                }
                None => {}
            }
            if consumed == 0 && received.is_none() {
                break;
            }
        }
        input.drain(..offset.min(input.len()));
        if input.capacity() > 1024 * 1024 && input.is_empty() {
            *input = Vec::new();
        }
    }

    /// The app's coroutine ended (`Err`: it raised). Before accept the
    /// client gets 500 (raised) or 403 (returned); after it, a close with
    /// 1011 (raised) or 1000 (returned) unless one was already sent.
    pub(crate) fn websocket_app_finished(
        &self,
        py: Python<'_>,
        session: &mut WsSession,
        result: PyResult<Bound<'_, PyAny>>,
    ) {
        session.app_done = true;
        let channel = session.channel.bind(py);
        let Ok(mut ws) = channel.try_borrow_mut() else {
            return;
        };
        let error = result.err();
        // The app's send() or receive() raised because the client left, and
        // the app let it propagate: the client's doing, not worth a traceback.
        let client_left = ws.gone
            && error.as_ref().is_some_and(|error| {
                error.is_instance_of::<pyo3::exceptions::PyConnectionResetError>(py)
                    || error.is_instance_of::<pyo3::exceptions::asyncio::CancelledError>(py)
            });
        if let Some(error) = error.filter(|_| !client_left) {
            let message = format!("Exception in WebSocket app for {}", session.line);
            drop(ws);
            self.log_error(py, &message, Some(error));
            let Ok(mut ws) = channel.try_borrow_mut() else {
                return;
            };
            let _ = match ws.phase {
                Phase::Connecting | Phase::Responding { .. } => {
                    ws.deny(py, 500, Vec::new(), Vec::new())
                }
                _ => ws.close_with(py, Some(rush_proto::ws::close::INTERNAL_ERROR), ""),
            };
            return;
        }
        let _ = match ws.phase {
            Phase::Connecting => ws.deny(py, 403, Vec::new(), Vec::new()),
            Phase::Responding { .. } => ws.deny(py, 500, Vec::new(), Vec::new()),
            _ => ws.close_with(py, Some(rush_proto::ws::close::NORMAL), ""),
        };
    }

    /// Once a second: the accept deadline, keepalive pings, ping and close timeouts.
    pub(crate) fn sweep_websocket(
        &self,
        py: Python<'_>,
        session: &mut WsSession,
        now: Instant,
    ) -> SweepAction {
        let channel = session.channel.bind(py);
        let Ok(mut ws) = channel.try_borrow_mut() else {
            return SweepAction::Nothing;
        };
        let state = ws.proto.as_ref().map(|proto| proto.state());
        match state {
            None => SweepAction::Nothing,
            Some(ConnectionState::CloseSent) => {
                let started = *session.close_started.get_or_insert(now);
                if now >= started + CLOSE_TIMEOUT {
                    SweepAction::Close
                } else {
                    SweepAction::Nothing
                }
            }
            Some(ConnectionState::Closed) => SweepAction::Nothing,
            Some(ConnectionState::Open) => {
                let ws_config = &self.config.ws;
                if let (Some(sent), Some(timeout)) = (session.ping_sent, ws_config.ping_timeout) {
                    if now >= sent + timeout {
                        return SweepAction::Close;
                    }
                }
                match ws_config.ping_interval {
                    Some(interval)
                        if session.ping_sent.is_none() && now >= session.last_heard + interval =>
                    {
                        if ws.ping(py) {
                            session.ping_sent = Some(now);
                            SweepAction::Drive
                        } else {
                            SweepAction::Nothing
                        }
                    }
                    _ => SweepAction::Nothing,
                }
            }
        }
    }
}

/// Starts a graceful close of a WebSocket connection (the worker drains):
/// 1001, going away.
pub(crate) fn close_for_shutdown(py: Python<'_>, session: &WsSession, restarting: bool) {
    // A client told 1012 knows to reconnect (to the new worker); 1001
    // says the server is going away.
    let (code, reason) = if restarting {
        (rush_proto::ws::close::SERVICE_RESTART, "server restarting")
    } else {
        (rush_proto::ws::close::GOING_AWAY, "server shutting down")
    };
    if let Ok(mut ws) = session.channel.bind(py).try_borrow_mut() {
        let _ = ws.close_with(py, Some(code), reason);
    }
}

/// An HTTP answer to the handshake (a denial), then the connection closes.
fn write_denial(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(Vec<u8>, Vec<u8>)],
    body: &[u8],
    date_line: &[u8],
) {
    use rush_proto::response::{write_content_length, write_header, write_status_line};
    write_status_line(out, status);
    for (name, value) in headers {
        let owned = name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"connection")
            || name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"date");
        if !owned {
            // An invalid field from the app is dropped, not written.
            let start = out.len();
            if write_header(out, name, value).is_err() {
                out.truncate(start);
            }
        }
    }
    write_content_length(out, body.len() as u64);
    out.extend_from_slice(b"Connection: close\r\n");
    out.extend_from_slice(date_line);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::write_denial;

    #[test]
    fn a_denial_is_a_complete_closing_response_without_the_apps_framing_fields() {
        let mut out = Vec::new();
        let headers = vec![
            (b"X-Why".to_vec(), b"no".to_vec()),
            (b"Content-Length".to_vec(), b"999".to_vec()),
            (b"Bad Name".to_vec(), b"dropped".to_vec()),
            (b"X-Split".to_vec(), b"a\r\nInjected: yes".to_vec()),
        ];
        write_denial(&mut out, 401, &headers, b"not you", b"Date: x\r\n");
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 401 "));
        assert!(text.contains("\r\nX-Why: no\r\n"));
        assert!(text.contains("\r\nContent-Length: 7\r\n"));
        assert!(text.contains("\r\nConnection: close\r\n"));
        assert!(!text.contains("999") && !text.contains("Bad Name") && !text.contains("Injected"));
        assert!(text.ends_with("\r\n\r\nnot you"));
    }
}
