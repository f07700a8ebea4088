//! One client connection: its socket, its buffers, and where it stands.
//!
//! The state is an explicit enum ([`Phase`]) so every place that acts on a
//! connection says which states it handles, and each state names the
//! deadline that applies to it. Buffers are per connection but stay small:
//! `input` holds only bytes not yet consumed (usually a partial request or
//! nothing), `output` only bytes the kernel has not taken yet.

mod drive;
mod input;
mod transport;

use std::net::SocketAddr;
use std::time::Instant;

use rush_proto::{ChunkedDecoder, RequestHead};

use crate::static_files::OutgoingBody;

pub(crate) use drive::Disposition;
pub(crate) use transport::Stream;

/// A request whose head is complete but whose body is still arriving.
pub struct PendingBody {
    /// A copy of the head; the spans in `head` are offsets into it.
    pub head_bytes: Vec<u8>,
    pub head: RequestHead,
    pub body: crate::body::BodyBuffer,
    pub framing: BodyProgress,
}

pub enum BodyProgress {
    /// Content-Length: this many bytes are still to come.
    Remaining(u64),
    Chunked(ChunkedDecoder),
}

/// What the loop needs to finish a request whose async handler is running.
pub struct AwaitingResponse {
    /// Names this request in completions from asyncio or the pool: unique
    /// per worker, so a late completion can never land on a later request
    /// of the same connection.
    pub request_id: u64,
    pub head_only: bool,
    pub keep_alive: bool,
    pub http10: bool,
    pub default_status: u16,
    /// `METHOD target HTTP/x.y`, for the access log and error messages.
    pub request_line: String,
    /// A copy of the request head, for `Response.file` (conditional, ranges).
    pub request_head: Vec<u8>,
    /// For an ASGI app: its `send` and `receive` objects.
    pub asgi: Option<AsgiExchange>,
    /// The `Allow` value when an app's 405 handler answers.
    pub allow: Option<Vec<u8>>,
    /// The request object, kept only when the app has a 500 handler.
    pub request: Option<pyo3::Py<crate::request::Request>>,
    /// The body still arriving while an ASGI app already runs: the loop
    /// reads it and hands it to the app's `receive()`.
    pub body_stream: Option<BodyProgress>,
}

impl AwaitingResponse {
    /// The facts about `head` that answering it needs; the rest is filled
    /// in only when the request continues off the loop.
    pub fn new(head: &RequestHead, keep_alive: bool, default_status: u16) -> AwaitingResponse {
        AwaitingResponse {
            request_id: 0,
            head_only: head.method == rush_proto::Method::Head,
            keep_alive,
            http10: head.version == rush_proto::Version::Http10,
            default_status,
            request_line: String::new(),
            request_head: Vec::new(),
            asgi: None,
            allow: None,
            request: None,
            body_stream: None,
        }
    }
}

pub struct AsgiExchange {
    pub send: pyo3::Py<crate::asgi::AsgiSend>,
    pub receive: pyo3::Py<crate::asgi::AsgiReceive>,
}

/// Where a connection stands. Each phase has its own deadline.
pub enum Phase {
    /// Between requests, nothing buffered. Deadline: keep-alive timeout.
    Idle,
    /// Some bytes of a head have arrived. Deadline: header timeout, counted
    /// from the first byte, so a slow drip cannot hold the connection.
    ReadingHead,
    /// The head is complete, the body is arriving. Deadline: body timeout,
    /// renewed whenever body bytes arrive.
    ReadingBody(Box<PendingBody>),
    /// An async handler is running. Input stays buffered until it finishes,
    /// so responses leave in request order. No deadline.
    AwaitingHandler(Box<AwaitingResponse>),
    /// A WSGI body is being streamed. Later pipelined requests wait in
    /// `input`. Deadline: the send timeout, while output is pending.
    StreamingWsgi(Box<crate::dispatch::WsgiStream>),
    /// The last response is queued; close once it is written. With `linger`,
    /// (after refusing a request) shut the write side and discard input
    /// until the peer closes, so the client reads our answer instead of a reset.
    Closing { linger: bool },
    /// Write side shut, discarding input. Deadline: linger timeout.
    Lingering,
}

pub struct Connection {
    pub stream: Stream,
    pub client: Option<SocketAddr>,
    /// `client` as a Python `(host, port)` tuple (or None), made once per
    /// connection when an ASGI scope first needs it.
    pub client_object: Option<pyo3::Py<pyo3::PyAny>>,
    /// WSGI's REMOTE_ADDR and REMOTE_PORT strings, made once per connection.
    pub remote_strings: Option<(
        pyo3::Py<pyo3::types::PyString>,
        pyo3::Py<pyo3::types::PyString>,
    )>,
    /// Received bytes not consumed yet.
    pub input: Vec<u8>,
    /// Response bytes not written yet.
    pub output: Vec<u8>,
    /// A large body (file or shared memory) that follows `output` on the
    /// wire. While it is pending, no further request is processed, so
    /// responses keep their order.
    pub body: Option<OutgoingBody>,
    pub phase: Phase,
    pub deadline: Instant,
    /// The peer closed its side (read returned 0).
    pub peer_closed: bool,
    /// epoll reported the peer's FIN (EPOLLRDHUP); reads go on until EOF.
    pub peer_sent_fin: bool,
    /// Bytes written to the socket so far: a change means write progress.
    pub written: u64,
    /// While output is pending: when the connection is dropped unless the
    /// client reads some of it first (the send timeout, in every state,
    /// also while a handler runs).
    pub write_deadline: Option<Instant>,
    /// `written` when `write_deadline` was last set.
    written_at_deadline: u64,
    /// Unsent output bytes counted in the worker's output budget.
    pub accounted_output: usize,
}

impl Connection {
    pub fn new(stream: Stream, client: Option<SocketAddr>, deadline: Instant) -> Self {
        Connection {
            stream,
            client,
            client_object: None,
            remote_strings: None,
            input: Vec::new(),
            output: Vec::new(),
            body: None,
            phase: Phase::Idle,
            deadline,
            peer_closed: false,
            peer_sent_fin: false,
            written: 0,
            write_deadline: None,
            written_at_deadline: 0,
            accounted_output: 0,
        }
    }

    /// Whether buffered input may be turned into requests now.
    pub fn can_process(&self) -> bool {
        self.body.is_none()
            && matches!(
                self.phase,
                Phase::Idle | Phase::ReadingHead | Phase::ReadingBody(_)
            )
    }

    /// Renews the send deadline after a write attempt: it moves only when
    /// the client took some bytes since it was last set, so an app that
    /// keeps sending to a client that never reads is still cut off.
    pub fn track_write_progress(&mut self, now: Instant, send_timeout: std::time::Duration) {
        if !self.has_pending_output() {
            self.write_deadline = None;
        } else if self.write_deadline.is_none() || self.written != self.written_at_deadline {
            self.write_deadline = Some(now + send_timeout);
            self.written_at_deadline = self.written;
        }
    }

    /// Whether anything is still to be written.
    pub fn has_pending_output(&self) -> bool {
        !self.output.is_empty() || self.body.is_some()
    }
}

impl Drop for Connection {
    /// A connection closed while an ASGI app still runs: its `receive()`
    /// says `http.disconnect` and its `send()` raises from now on.
    fn drop(&mut self) {
        if let Phase::AwaitingHandler(awaiting) = &self.phase {
            if let Some(exchange) = &awaiting.asgi {
                pyo3::Python::attach(|py| {
                    if let Ok(mut send) = exchange.send.bind(py).try_borrow_mut() {
                        send.disconnect(py);
                    }
                    if let Ok(mut receive) = exchange.receive.bind(py).try_borrow_mut() {
                        receive.finish(py);
                    }
                });
            }
        }
    }
}
