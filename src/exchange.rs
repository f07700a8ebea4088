//! The seam between a protocol and the interfaces: what one request's
//! response goes through, and what a request in flight is told.
//!
//! A request is named by a [`StreamKey`]: its connection's key and its
//! stream on that connection. HTTP/1.1 has one stream at a time (stream 0:
//! pipelined requests are answered strictly in order, one after the
//! other); HTTP/2 will key many streams on one connection. A completion
//! that arrives later (a finished task, an ASGI app's notifier) carries
//! the key as one integer ([`StreamKey::token`]) and the server finds the
//! stream's request unit by it.
//!
//! The interfaces (the native App, WSGI, ASGI, static files, in
//! `crate::dispatch` and each interface's folder) hand a response to a
//! [`ResponseWriter`] as values, never as protocol bytes: a head
//! ([`ResponseHead`]: status, the app's fields, how the body is delimited)
//! (after any 103 Early Hints) then body parts, an end (with trailers
//! where the protocol and the request allow them) or an abort; or a
//! [`WholeResponse`] in one call (the hot path of the native App); a large
//! body that follows (a file, shared memory: an
//! `OutgoingBody`). The writer frames them: HTTP/1.1 encodes them with the
//! same rush-proto encoders as before, into its output buffer. Besides: the
//! water marks a producer checks
//! (backpressure), writing through to the client, and the state of the
//! response (a handler still running, a body streaming). They keep the
//! request's Python side in flight ([`InFlight`]) in the request unit the
//! writer owns for that key. HTTP/1.1 implements the trait over the
//! connection's `ResponseSink` and `ConnState` (`crate::http1::writer`);
//! HTTP/2 will implement it over a stream of a multiplexed connection.
//!
//! The interface code is generic over the writer (`W: ResponseWriter`),
//! not a trait object: each protocol gets its own monomorphised copy, so
//! the hot path keeps direct, inlinable calls and allocates nothing.
//!
//! The other direction (a protocol telling a request in flight that its
//! client can take more, that body bytes arrived, that the client is gone)
//! goes through the dispatcher's request events (`crate::dispatch::events`),
//! which pick the interface; a protocol driver names no interface.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::cache::{CacheFill, Recording, Stored};
use crate::conn::TlsInfo;
use crate::forwarding::RequestOrigin;
use crate::http_write::{OutgoingBody, ResponseContext, TEXT_PLAIN};
use crate::inflight::{InFlight, PeerObjects};

/// Names one request: its connection and its stream on that connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamKey {
    /// The connection's key in the worker's slab.
    pub connection: usize,
    /// The stream on the connection (HTTP/1.1: always 0).
    pub stream: u32,
}

impl StreamKey {
    /// The one stream of a connection that carries one request at a time
    /// (HTTP/1.1, a WebSocket session).
    pub fn single(connection: usize) -> StreamKey {
        StreamKey {
            connection,
            stream: 0,
        }
    }

    /// The key as one integer for Python, which hands it back with a
    /// completion (an ASGI app's notifier, a finished task or pool
    /// future): the stream in the high 32 bits, the connection in the low
    /// ones. For stream 0 (HTTP/1.1) it is the connection's key itself.
    pub fn token(self) -> u64 {
        (u64::from(self.stream) << 32) | (self.connection as u64 & 0xffff_ffff)
    }

    /// The key a [`StreamKey::token`] names.
    pub fn from_token(token: u64) -> StreamKey {
        StreamKey {
            connection: (token & 0xffff_ffff) as usize,
            stream: (token >> 32) as u32,
        }
    }
}

/// How a response's body is delimited, as the interface knows it when the
/// head goes out. The protocol turns it into its own framing (HTTP/1.1:
/// `Content-Length`, chunked, or the connection's end; HTTP/2: DATA frames
/// and END_STREAM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodyLength {
    /// The status has no body (1xx, 204, 304).
    Empty,
    /// The body's length is known.
    Known(u64),
    /// Sent in parts of unknown total length.
    Streamed,
    /// Unknown length and the client cannot take parts (HTTP/1.0): the
    /// body ends when the connection does.
    UntilClose,
}

impl BodyLength {
    /// The body's length as announced: 0 for a bodyless status, `None`
    /// when it is not known before the body ends.
    pub(crate) fn declared(self) -> Option<u64> {
        match self {
            BodyLength::Known(length) => Some(length),
            BodyLength::Empty => Some(0),
            BodyLength::Streamed | BodyLength::UntilClose => None,
        }
    }
}

/// A response head as values: what an interface hands the writer instead
/// of protocol bytes. The fields come beside it as an iterator (no copy).
#[derive(Clone, Copy)]
pub(crate) struct ResponseHead<'a> {
    /// The status code.
    pub status: u16,
    /// How the body is delimited.
    pub length: BodyLength,
    /// The response asks the connection to close after it (an app's
    /// `Connection: close`); HTTP/2 ignores it.
    pub close: bool,
    /// The request facts and the server's fields (Date, Server) that go
    /// with every head.
    pub context: ResponseContext<'a>,
}

impl ResponseHead<'_> {
    /// Writes this head and `fields` down in a cache recording (every
    /// writer does, before it encodes them its own way).
    pub(crate) fn record<'f>(
        &self,
        recording: &mut Recording,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        recording.head(
            self.status,
            self.length.declared(),
            self.context.head_only,
            fields,
        );
    }
}

/// A whole response in one value: a head and a body already in hand (the
/// native App's answers, rush's own status pages). The hot path: HTTP/1.1
/// encodes it into its output buffer in one go.
#[derive(Clone, Copy)]
pub(crate) struct WholeResponse<'a> {
    /// The status code.
    pub status: u16,
    /// The `Content-Type` value; empty: none.
    pub content_type: &'a [u8],
    /// The body (not sent for HEAD or a bodyless status; its length is
    /// still announced).
    pub body: &'a [u8],
    /// The response asks the connection to close after it.
    pub close: bool,
    /// The request facts and the server's fields.
    pub context: &'a ResponseContext<'a>,
}

impl WholeResponse<'_> {
    /// Writes this response and `fields` down in a cache recording.
    pub(crate) fn record<'f>(
        &self,
        recording: &mut Recording,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        recording.whole(
            self.status,
            self.content_type,
            self.body,
            self.context.head_only,
            fields,
        );
    }
}

/// What a request's response goes through, implemented by each protocol.
pub(crate) trait ResponseWriter {
    /// Sends a response head. `fields` are the app's fields as it gave
    /// them: the writer drops those that are the protocol's business
    /// (`Content-Length`, `Transfer-Encoding`, `Connection`) and frames the
    /// body itself as `head.length` says.
    fn send_head<'f, I>(&mut self, head: &ResponseHead<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>;
    /// Sends a whole response (see [`WholeResponse`]); `fields` go out as
    /// given, after the content type.
    fn send_whole<'f, I>(&mut self, response: &WholeResponse<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>;
    /// Where the next response starts, for [`ResponseWriter::retract`].
    fn response_mark(&self) -> usize;
    /// Takes back what was sent for this request since `mark`, before any
    /// of it was flushed (a rendered answer the app's own error page
    /// replaces, a render that failed half-way).
    fn retract(&mut self, mark: usize);
    /// Sends a part of the body of the response whose head went out with
    /// [`ResponseWriter::send_head`] (nothing for a HEAD request or a
    /// bodyless status: the writer knows from the head).
    fn send_body(&mut self, data: &[u8]);
    /// Ends the response's body; `trailers` go after it as trailer fields
    /// (HTTP/2: a last HEADERS frame). Give trailers only where
    /// [`ResponseWriter::accepts_trailers`] says so, and then frame the
    /// body as [`BodyLength::Streamed`]: a known length ends the response
    /// at its last byte, before any trailer.
    fn end_body<'f, I>(&mut self, trailers: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>;
    /// Whether this response can end with trailer fields: the protocol
    /// carries them and the request said it takes them (`TE: trailers`).
    /// HTTP/2 only: rush sends no trailers over HTTP/1.1 (as hypercorn and
    /// uvicorn send none), so an app's trailers are dropped there.
    fn accepts_trailers(&self) -> bool {
        false
    }
    /// Sends a 103 Early Hints response (RFC 8297) with one `Link` field
    /// per value, before the final head; nothing once that head went out.
    /// The caller sends them only to a client that understands an
    /// interim response (HTTP/1.1 or later, never HTTP/1.0).
    fn send_early_hints<'f, I>(&mut self, links: I)
    where
        I: Iterator<Item = &'f [u8]>;
    /// The response cannot be completed (the app failed or returned
    /// early after the head went out): nothing more is framed for it, and
    /// it is never made to look complete. HTTP/1.1 then closes the
    /// connection (the caller's outcome); HTTP/2 resets the stream.
    fn abort_body(&mut self);
    /// Whether [`ResponseWriter::retract`] back to `mark` would take back
    /// everything since, without a trace (HTTP/1.1 before its output was
    /// flushed; HTTP/2 before the writer committed its held head and body
    /// parts to `h2`).
    fn retractable(&self, mark: usize) -> bool;
    /// The recording of this request's answer, for a response-cache fill
    /// (`crate::cache::Recording`): while it is `Some`, every head, body
    /// part and end the writer frames is recorded into it as values.
    fn recording(&mut self) -> &mut Option<Box<Recording>>;
    /// Sends an answer the response cache stored (a 304 for it when
    /// `not_modified`), with `Age` when given. HTTP/1.1 copies the
    /// pre-rendered head; HTTP/2 encodes the stored fields.
    fn send_stored(
        &mut self,
        stored: &Stored,
        not_modified: bool,
        age: Option<u64>,
        context: &ResponseContext<'_>,
    );
    /// A writer that belongs to no client (a detached cache refresh,
    /// `crate::dispatch::refresh`) hands over, once, the cache fill its
    /// request is to complete; every other writer has none.
    fn detached_fill(&mut self) -> Option<CacheFill> {
        None
    }
    /// The protocol the request came over (for the metrics).
    fn protocol(&self) -> crate::metrics::WireProtocol {
        crate::metrics::WireProtocol::Http1
    }
    /// A large body (a file, shared memory) that follows `output` on the
    /// wire, sent without copying it into `output`.
    fn set_body(&mut self, body: Option<OutgoingBody>);
    /// At or over the high-water mark: a producer stops (a streamed body
    /// pauses, an ASGI `send()` waits).
    fn is_full(&self) -> bool;
    /// Under the low-water mark: a paused producer may go on.
    fn has_room(&self) -> bool;
    /// The high-water mark [`is_full`](Self::is_full) applies: what a
    /// producer that runs between the loop's passes (an ASGI `send()`)
    /// may hand over before it waits.
    fn high_water(&self) -> usize {
        crate::options::OUTPUT_HIGH_WATER
    }
    /// The response's bytes not yet taken by the client, as the water
    /// marks count them (0 where nothing is queued: a detached refresh).
    fn unsent(&self) -> usize {
        0
    }
    /// Hands what is buffered to the client now, as far as it takes it
    /// (a streamed body writes each chunk before asking the app for the
    /// next). `Err`: the client is gone.
    fn flush(&mut self, now: Instant, send_timeout: Duration) -> io::Result<()>;
    /// The response goes on after the dispatch returns (a suspended
    /// handler, a pool thread); `body_flowing`: the request body still
    /// arrives and is handed to the app as it comes (its framing is the
    /// protocol's business).
    fn response_pending(&mut self, body_flowing: bool);
    /// The head is out and the body streams from the app.
    fn streaming_started(&mut self);
    /// The request unit: the request's Python side in flight, if any.
    fn request(&mut self) -> &mut Option<InFlight>;
    /// The request unit, read only.
    fn request_ref(&self) -> Option<&InFlight>;
    /// The peer's address (`None`: a Unix socket).
    fn client(&self) -> Option<SocketAddr>;
    /// The index of the listener the connection came through (`--bind`
    /// order): the app is told that listener's address as the server's.
    fn listener(&self) -> usize;
    /// The request's origin as a trusted proxy reported it.
    fn origin(&self) -> Option<&RequestOrigin>;
    /// When the request was dispatched (the access log's duration).
    fn started(&self) -> Instant;
    /// Request header values `--access-log-format` shows.
    fn log_headers(&self) -> &[Option<String>];
    /// The TLS session the request came over, if any.
    fn tls(&self) -> Option<&TlsInfo>;
    /// The peer's address as Python objects, made once per connection.
    fn peer_objects(&mut self) -> &mut PeerObjects;
    /// What an interface reads about the peer to describe the request to
    /// the app (environ, scope), all at once.
    fn peer(&mut self) -> Peer<'_>;
}

/// The peer of a request as an interface describes it to the app.
pub(crate) struct Peer<'a> {
    /// Its address as Python objects, made once per connection.
    pub objects: &'a mut PeerObjects,
    /// Its address (`None`: a Unix socket).
    pub client: Option<SocketAddr>,
    /// The request's origin as a trusted proxy reported it.
    pub origin: Option<&'a RequestOrigin>,
    /// The TLS session the request came over, if any.
    pub tls: Option<&'a TlsInfo>,
    /// The TLVs of the connection's PROXY header (`--proxy-protocol`).
    pub proxy: Option<&'a crate::proxy_protocol::ProxyInfo>,
    /// The listener it came through (see [`ResponseWriter::listener`]).
    pub listener: usize,
}

/// Sends a native text/plain answer whose body is the reason phrase
/// (`Not Found`, `Internal Server Error`...) through a response writer;
/// returns the body length.
pub(crate) fn write_status_page<'h, W: ResponseWriter>(
    writer: &mut W,
    status: u16,
    extra_headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
    context: &ResponseContext<'_>,
    close: bool,
) -> usize {
    let body = rush_proto::response::reason_phrase(status).as_bytes();
    let response = WholeResponse {
        status,
        content_type: TEXT_PLAIN,
        body,
        close,
        context,
    };
    writer.send_whole(&response, extra_headers);
    body.len()
}
