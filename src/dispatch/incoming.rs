//! [`IncomingRequest`]: one request as every dispatch step sees it.
//!
//! The protocol drivers (HTTP/1.1 in `crate::http1`, HTTP/2 in
//! `crate::http2`) parse a head and hand the request on through the native
//! App's routing, the cache, WSGI, ASGI and the WebSocket upgrade. Each of
//! those steps needs the same four things; they travel together as one
//! `Copy` value of borrowed parts instead of four parameters of every
//! function on the way.

use rush_proto::RequestHead;

use crate::dispatch::RequestLine;
use crate::exchange::StreamKey;

/// A request on its way to an answer: borrowed from the driver's buffer for
/// the length of one dispatch call.
#[derive(Clone, Copy)]
pub(crate) struct IncomingRequest<'a> {
    /// The stream it came on (for HTTP/1.1 the connection, stream 0): how
    /// work that continues off this call finds its writer again.
    pub(crate) key: StreamKey,
    /// The head as received: access-log fields, the cache key and the
    /// interfaces' header views read it.
    pub(crate) head_bytes: &'a [u8],
    /// The head as parsed, its spans into `head_bytes`.
    pub(crate) head: &'a RequestHead,
    /// Whether the connection may stay open after this answer: the
    /// client's wish, less a drain or `--max-requests` decided by
    /// [`crate::dispatch::Core::dispatch`].
    pub(crate) keep_alive: bool,
}

impl<'a> IncomingRequest<'a> {
    /// The request as the driver hands it over: the client's keep-alive
    /// wish, not yet weighed against the worker's state.
    pub(crate) fn new(key: StreamKey, head_bytes: &'a [u8], head: &'a RequestHead) -> Self {
        IncomingRequest {
            key,
            head_bytes,
            head,
            keep_alive: head.keep_alive,
        }
    }

    /// Its four parts, for a function that reads them all.
    pub(crate) fn parts(&self) -> (StreamKey, &'a [u8], &'a RequestHead, bool) {
        (self.key, self.head_bytes, self.head, self.keep_alive)
    }

    /// Its `METHOD target HTTP/x.y`, formatted only if a log line needs it.
    pub(crate) fn line(&self) -> RequestLine<'a> {
        RequestLine::Raw(self.head_bytes, self.head)
    }
}
