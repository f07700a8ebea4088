//! The request unit: what one request owns while it is answered (its
//! Python side in flight, its origin, its clock), apart from the
//! connection and stream it came on; and what the loop tells the app when
//! the client goes away.
//!
//! A protocol keeps a [`RequestUnit`] per request it is answering
//! (HTTP/1.1: one per connection) without looking inside its
//! [`InFlight`]: the interfaces create and use it through the
//! response-writer seam (`crate::exchange`); the connection only calls
//! [`InFlight::client_gone`] when it is dropped with one still there.
//! This module sits below both, so neither depends on the other's types.

use std::net::SocketAddr;
use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::PyString;
use rush_proto::encode::{BodyEncoder, EncodeError};
use rush_proto::RequestHead;

use crate::forwarding::RequestOrigin;
use crate::wsgi::objects::BodyIterator;

/// The request unit: what one request owns while it is answered, apart
/// from the connection (and, with HTTP/2, the stream) it came on. A
/// protocol keeps one per stream it is answering (HTTP/1.1: one per
/// connection) and reaches it through the request's `StreamKey`
/// (`crate::exchange`).
pub struct RequestUnit {
    /// The response still being produced, if any (a running handler, a
    /// streamed body): the dispatchers' business.
    pub in_flight: Option<InFlight>,
    /// The request's origin as its trusted proxy reports it
    /// (`crate::forwarding`); `None` for most requests.
    pub origin: Option<Box<RequestOrigin>>,
    /// When the request was dispatched (the access log's duration).
    pub started: Instant,
    /// Request header values `--access-log-format` shows (copied at dispatch).
    pub log_headers: Vec<Option<String>>,
    /// The answer as the writer frames it, recorded while it fills a
    /// response-cache entry (`crate::cache::Recording`); `None` otherwise.
    pub recording: Option<Box<crate::cache::Recording>>,
}

impl RequestUnit {
    pub fn new(now: Instant) -> RequestUnit {
        RequestUnit {
            in_flight: None,
            origin: None,
            started: now,
            log_headers: Vec::new(),
            recording: None,
        }
    }
}

/// A response still being produced.
pub enum InFlight {
    /// A handler or app still running (a suspended coroutine, a pool thread).
    Handler(Box<AwaitingResponse>),
    /// A WSGI body being streamed.
    Stream(Box<WsgiStream>),
    /// A request parked until another request's answer fills the cache
    /// entry it wants. HTTP/1.1: its bytes wait in the connection's input
    /// (`None`); HTTP/2: its head is kept here, to be dispatched again.
    AwaitingFill(Option<Box<[u8]>>),
}

impl InFlight {
    /// Whether a producer of this request waits on the response's water
    /// marks (an ASGI `send()`), to be paused and resumed after a drive.
    pub fn needs_pacing(&self) -> bool {
        matches!(self, InFlight::Handler(awaiting) if awaiting.asgi.is_some())
    }

    /// The client is gone while this runs: an ASGI app's `receive()` says
    /// `http.disconnect` and its `send()` raises; a streamed body is closed
    /// (its `Drop` does that).
    pub fn client_gone(&self) {
        if let InFlight::Handler(awaiting) = self {
            if let Some(exchange) = &awaiting.asgi {
                Python::attach(|py| exchange.client_gone(py));
            }
        }
    }
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
    /// The cache entry this response fills, on a cached route's miss.
    pub cache_fill: Option<crate::cache::CacheFill>,
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
            cache_fill: None,
        }
    }
}

pub struct AsgiExchange {
    pub send: pyo3::Py<crate::asgi::send::AsgiSend>,
    pub receive: pyo3::Py<crate::asgi::objects::AsgiReceive>,
}

impl AsgiExchange {
    /// Whether the app takes more of its request body now (its queue is
    /// under its bound); when it does not, its next `receive()` asks the
    /// loop to read on.
    pub fn wants_body(&self, py: Python<'_>) -> bool {
        self.receive
            .bind(py)
            .try_borrow_mut()
            .is_ok_and(|mut receive| receive.wants_more())
    }

    /// The client closed its side: `receive()` says `http.disconnect`
    /// (`send()` still works until the socket fails).
    pub fn client_left(&self, py: Python<'_>) {
        if let Ok(mut receive) = self.receive.bind(py).try_borrow_mut() {
            receive.client_gone(py);
        }
    }

    /// Backpressure: `send()` waits while the response's unsent output is
    /// over the high-water mark (`full`), and goes on once it fell below
    /// the low-water mark (`room`).
    pub fn pace(&self, py: Python<'_>, full: bool, room: bool) {
        let Ok(mut send) = self.send.bind(py).try_borrow_mut() else {
            return;
        };
        if full {
            send.paused = true;
        } else if send.paused && room {
            send.resume(py);
        }
    }

    /// Whether the response has begun: the loop wrote its head, so a
    /// refusal of the request can no longer be sent instead.
    pub fn response_begun(&self, py: Python<'_>) -> bool {
        self.send
            .bind(py)
            .try_borrow()
            .map_or(true, |send| send.head_written)
    }

    /// See [`InFlight::client_gone`].
    pub fn client_gone(&self, py: Python<'_>) {
        if let Ok(mut send) = self.send.bind(py).try_borrow_mut() {
            send.disconnect(py);
        }
        if let Ok(mut receive) = self.receive.bind(py).try_borrow_mut() {
            receive.client_gone(py);
        }
    }
}

/// Python objects made once per connection, the first time a request needs them.
#[derive(Default)]
pub struct PeerObjects {
    /// The client as a Python `(host, port)` tuple (or None): ASGI's `client`.
    pub address: Option<Py<PyAny>>,
    /// WSGI's REMOTE_ADDR and REMOTE_PORT strings.
    pub remote_strings: Option<(Py<PyString>, Py<PyString>)>,
}

impl PeerObjects {
    /// WSGI's REMOTE_ADDR and REMOTE_PORT for `client` (None: a Unix socket).
    pub fn remote_strings(
        &mut self,
        py: Python<'_>,
        client: Option<SocketAddr>,
    ) -> Option<&(Py<PyString>, Py<PyString>)> {
        if self.remote_strings.is_none() {
            if let Some(client) = client {
                self.remote_strings = Some((
                    PyString::new(py, &client.ip().to_string()).unbind(),
                    PyString::new(py, &client.port().to_string()).unbind(),
                ));
            }
        }
        self.remote_strings.as_ref()
    }
}

/// A WSGI body being streamed: where its chunks come from, and the
/// encoder that frames each.
pub struct WsgiStream {
    pub body: BodySource,
    pub encoder: BodyEncoder,
    pub status: u16,
    pub keep_alive: bool,
    pub request_line: String,
    /// The request this body answers: a pool thread's notices name it.
    pub request_id: u64,
    /// Chunks were added to the output since it was last written.
    pub unflushed: bool,
}

/// Where a streamed body's chunks come from.
pub enum BodySource {
    /// The app's iterable, iterated here on the loop thread.
    Iterator(BodyIterator),
    /// A `--threads` pool thread iterating it (python/rush/threads.py).
    Pool(PoolChannel),
}

/// The `BodyChannel` a pool thread sends a body's chunks through.
pub struct PoolChannel(pub Py<PyAny>);

/// What `BodyChannel.take()` gave.
pub enum Taken {
    /// Chunks (maybe none); more to come.
    Chunks(Vec<Vec<u8>>),
    /// The last chunks: the body is over.
    Last(Vec<Vec<u8>>),
}

impl PoolChannel {
    pub fn take(&self, py: Python<'_>) -> PyResult<Taken> {
        let (chunks, done, error): (Vec<Vec<u8>>, bool, Option<Bound<'_, PyAny>>) = self
            .0
            .bind(py)
            .call_method0(pyo3::intern!(py, "take"))?
            .extract()?;
        match (error, done) {
            (Some(error), _) => Err(PyErr::from_value(error)),
            (None, true) => Ok(Taken::Last(chunks)),
            (None, false) => Ok(Taken::Chunks(chunks)),
        }
    }
}

impl Drop for PoolChannel {
    /// The stream is over or abandoned (the client left): the pool thread
    /// stops at its next chunk and closes the app's iterable.
    fn drop(&mut self) {
        Python::attach(|py| {
            if let Err(error) = self.0.bind(py).call_method0(pyo3::intern!(py, "cancel")) {
                error.print(py);
            }
        });
    }
}

/// How a streamed WSGI body ended.
pub enum StreamEnd {
    /// The iterable ran out and the framing is complete.
    Complete,
    /// Writing failed: the client is gone.
    ClientLeft,
    /// The iterable raised (logged when it is turned into `AppRaised`).
    Raised(PyErr),
    /// The iterable raised (already logged).
    AppRaised,
    /// More or less than the app's Content-Length, or a chunk after the end.
    Misframed(EncodeError),
}
