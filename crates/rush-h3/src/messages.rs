//! What an HTTP/3 connection tells its server and what it refuses.

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};

/// A request head, as `h3` validated and QPACK-decoded it.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// `:method`.
    pub method: Method,
    /// `:scheme`, `:authority` and `:path`.
    pub uri: Uri,
    /// The regular fields, lowercase names.
    pub headers: HeaderMap,
}

impl RequestHead {
    /// `:scheme` (`https` over QUIC).
    pub fn scheme(&self) -> Option<&str> {
        self.uri.scheme_str()
    }

    /// `:authority`.
    pub fn authority(&self) -> Option<&str> {
        self.uri.authority().map(|a| a.as_str())
    }

    /// `:path`, with its query.
    pub fn path(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }
}

/// What happened on a connection, in order. Stream ids are QUIC stream ids
/// (client-initiated bidirectional: 0, 4, 8...).
#[derive(Debug)]
pub enum Event {
    /// A new request on `stream`. If `end_stream`, it has no body and no
    /// [`Event::RequestEnd`] follows; otherwise [`Event::Data`] events and one
    /// `RequestEnd` (or an [`Event::Reset`]) follow.
    Request {
        /// The stream.
        stream: u64,
        /// Method, scheme, authority, path and fields.
        head: RequestHead,
        /// No request body follows.
        end_stream: bool,
    },
    /// Request body bytes. Release them with
    /// [`crate::H3Conn::release`] once consumed: no more than a stream
    /// window is read from a stream while its bytes are held, so QUIC flow
    /// control makes the client wait for a slow application.
    Data {
        /// The stream.
        stream: u64,
        /// The bytes.
        data: Bytes,
    },
    /// The request body is complete; `trailers` if the client sent any.
    RequestEnd {
        /// The stream.
        stream: u64,
        /// The trailer fields, if any.
        trailers: Option<HeaderMap>,
    },
    /// The stream ended before the exchange completed: the client reset or
    /// stopped it, or `h3` found it malformed. No command on it has any
    /// effect.
    Reset {
        /// The stream.
        stream: u64,
        /// The HTTP/3 error code, when there was one
        /// (H3_REQUEST_CANCELLED when a browser navigates away).
        code: Option<u64>,
    },
    /// All response data queued on `stream` went to QUIC (the peer's
    /// windows let it in): the application may send more. Pace the
    /// application on this; [`crate::H3Conn::send_data`] refuses data
    /// past [`crate::H3Settings::max_pending_send`] per connection.
    SendReady {
        /// The stream.
        stream: u64,
    },
    /// The connection ended; nothing more happens on it. `error` is `None`
    /// after a clean close (graceful shutdown done, or the client closed
    /// with H3_NO_ERROR); otherwise what ended it. Open streams got a
    /// [`Event::Reset`] first.
    Closed {
        /// The application error code the connection was closed with, if
        /// it was not a clean close (0x106 is H3_FRAME_ERROR).
        code: Option<u64>,
        /// A human-readable account of the error, for the log.
        error: Option<String>,
    },
}

/// Why a command was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum H3Error {
    /// No such connection, or no such stream awaits a response any longer.
    UnknownStream,
    /// The status is not a valid HTTP status.
    BadStatus,
    /// The response head was sent already.
    HeadAlreadySent,
    /// No response head yet, or the response ended.
    NotSending,
    /// The connection's queued output is at
    /// [`crate::H3Settings::max_pending_send`]: send more once it drains
    /// ([`crate::H3Conn::pending_send_total`]).
    OutputFull,
}

impl std::fmt::Display for H3Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            H3Error::UnknownStream => "no such stream",
            H3Error::BadStatus => "invalid status",
            H3Error::HeadAlreadySent => "response head already sent",
            H3Error::NotSending => "no response in progress",
            H3Error::OutputFull => "output queue full",
        })
    }
}

impl std::error::Error for H3Error {}
