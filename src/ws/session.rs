//! The state one WebSocket connection keeps on the loop's side, held by
//! the connection (`conn::Protocol::WebSocket`) once its protocol switched.
//! Only the state lives here, so that the connection can hold it without
//! knowing the drive; the drive and the sweep are in `mod.rs`.

use std::time::Instant;

use pyo3::prelude::*;

use super::channel::WebSocket;

/// The loop's side of one WebSocket connection.
pub struct WsSession {
    pub channel: Py<WebSocket>,
    /// Names the app's task in completions (as a request id does).
    pub id: u64,
    /// A message being reassembled from its frames.
    pub(super) message: Vec<u8>,
    /// `GET /path HTTP/1.1`, for logs.
    pub(super) line: String,
    /// The app accepted (the accept deadline no longer applies).
    pub(super) opened: bool,
    /// When bytes last arrived (pings go out after `ping_interval` of silence).
    pub(super) last_heard: Instant,
    /// Our unanswered ping, if any.
    pub(super) ping_sent: Option<Instant>,
    /// When our close frame went out.
    pub(super) close_started: Option<Instant>,
    /// The denial response is queued: close once it is written.
    pub(super) closing: bool,
    /// The app's coroutine returned or raised.
    pub app_done: bool,
}

impl WsSession {
    /// The state of a session whose app was just made (`id` names its
    /// task in completions; `line` is its request line, for logs).
    pub(crate) fn new(channel: Py<WebSocket>, id: u64, line: String, now: Instant) -> WsSession {
        WsSession {
            channel,
            id,
            message: Vec::new(),
            line,
            opened: false,
            last_heard: now,
            ping_sent: None,
            close_started: None,
            closing: false,
            app_done: false,
        }
    }

    /// Bytes arrived from the client: the keepalive's silence starts over.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last_heard = now;
        self.ping_sent = None;
    }

    /// The request line, for logs.
    pub(crate) fn line(&self) -> &str {
        &self.line
    }
}

impl Drop for WsSession {
    /// The socket is closing: the app hears of it (1006 unless the closing
    /// handshake was over), and its waiting `send()` raises.
    fn drop(&mut self) {
        Python::attach(|py| {
            if let Ok(mut channel) = self.channel.bind(py).try_borrow_mut() {
                channel.transport_gone(py);
            }
        });
    }
}
