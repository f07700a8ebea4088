//! What crosses the boundary of an [`crate::H2Connection`]: the request
//! heads and events it reports ([`RequestHead`], [`Event`]), the response
//! heads it is given ([`ResponseHead`], checked when built), and why a
//! command was refused ([`H2Error`]).

use bytes::Bytes;
use h2::Reason;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Response, StatusCode};

/// A request head, as HTTP/2 carries it: the pseudo-header fields apart from
/// the regular fields (which never include them). The pseudo-fields stay in
/// the `Uri` `h2` built (no copy); the methods read them.
#[derive(Debug, Clone)]
pub struct RequestHead {
    /// `:method`.
    pub method: Method,
    /// `:scheme`, `:authority` and `:path`, as `h2` validated them.
    pub uri: http::Uri,
    /// `:protocol` of an extended CONNECT (RFC 8441), e.g. `websocket`.
    pub protocol: Option<String>,
    /// The regular fields, lowercase names; repeated `cookie` fields stay
    /// separate (joining them with `; ` is the application interface's job).
    pub headers: HeaderMap,
}

impl RequestHead {
    /// `:scheme` (`http` or `https`); absent only for CONNECT.
    pub fn scheme(&self) -> Option<&str> {
        self.uri.scheme_str()
    }

    /// `:authority`, the HTTP/2 form of `Host` (absent if the client sent
    /// only a `host` field, which then is among `headers`).
    pub fn authority(&self) -> Option<&str> {
        self.uri.authority().map(|a| a.as_str())
    }

    /// `:path`, with the query (`/a?b=1`); `*` for `OPTIONS *`; empty for
    /// CONNECT.
    pub fn path(&self) -> &str {
        self.uri.path_and_query().map_or("", |pq| pq.as_str())
    }
}

/// A response head checked and built, not yet sent: a status and fields
/// HTTP/2 can carry (see [`H2Connection::send_response`] for the fields
/// left out). Sent with [`H2Connection::send_head`].
#[derive(Debug)]
pub struct ResponseHead(pub(crate) Response<()>);

impl ResponseHead {
    /// Builds a head; refuses a status outside 100..=999 and fields HTTP/2
    /// cannot carry.
    pub fn new<'a, I>(status: u16, headers: I) -> Result<ResponseHead, H2Error>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let status = StatusCode::from_u16(status).map_err(|_| H2Error::InvalidStatus(status))?;
        let mut response = Response::new(());
        *response.status_mut() = status;
        let map = response.headers_mut();
        for (name, value) in headers {
            let name = HeaderName::from_bytes(name).map_err(|_| H2Error::InvalidHeader)?;
            if is_connection_specific(&name) {
                continue;
            }
            let value = HeaderValue::from_bytes(value).map_err(|_| H2Error::InvalidHeader)?;
            map.append(name, value);
        }
        Ok(ResponseHead(response))
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.0.status().as_u16()
    }
}

/// What happened on the connection, in the order it happened.
#[derive(Debug)]
pub enum Event {
    /// A new request on `stream`. If `end_stream`, it has no body and no
    /// [`Event::RequestEnd`] follows; otherwise [`Event::Data`] events and
    /// one `RequestEnd` (or an [`Event::Reset`]) follow.
    Request {
        /// The stream id (odd, increasing).
        stream: u32,
        /// Method, scheme, authority, path and fields.
        head: RequestHead,
        /// No request body follows.
        end_stream: bool,
    },
    /// Request body bytes. The peer may send only as much as its windows
    /// allow; call [`H2Connection::release`] with the length once the
    /// application consumed them, which opens the windows again (a slow
    /// application so slows the client, never grows memory).
    Data {
        /// The stream.
        stream: u32,
        /// The bytes (one DATA frame's payload, padding removed).
        data: Bytes,
    },
    /// The request body is complete; `trailers` if the client sent any.
    RequestEnd {
        /// The stream.
        stream: u32,
        /// The trailer fields, if any.
        trailers: Option<HeaderMap>,
    },
    /// The stream ended abnormally before the response was complete: the
    /// peer reset it (RST_STREAM), or `h2` reset it for a protocol error.
    /// For ASGI this is `http.disconnect`. No command on it has any effect.
    Reset {
        /// The stream.
        stream: u32,
        /// The error code (CANCEL when a browser navigates away).
        reason: Reason,
    },
    /// All response data queued on `stream` went to `h2` (the peer's
    /// windows let it out): the application may send more.
    SendReady {
        /// The stream.
        stream: u32,
    },
    /// The connection ended; nothing more will happen. `error` is `None`
    /// after a clean close (graceful shutdown done, or the peer's GOAWAY and
    /// close); otherwise what ended it. Every stream not yet complete gets
    /// an [`Event::Reset`] first. The remaining output (a GOAWAY, say) must
    /// still be written before the socket is closed.
    Closed {
        /// The error code, when the connection was ended by an error.
        reason: Option<Reason>,
        /// A human-readable account of the error, for the log.
        error: Option<String>,
    },
}

/// Why a command was refused.
#[derive(Debug)]
pub enum H2Error {
    /// No such stream awaits a response any longer (it completed or was reset).
    UnknownStream(u32),
    /// The command does not fit the stream's state: data before the head,
    /// a second final head, anything after the end of the response.
    WrongState(&'static str),
    /// A header field name or value HTTP/2 cannot carry.
    InvalidHeader,
    /// A status code outside 100..=999.
    InvalidStatus(u16),
    /// `h2` refused it (the connection is closing, say).
    Protocol(h2::Error),
}

impl std::fmt::Display for H2Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            H2Error::UnknownStream(id) => write!(f, "no stream {id} awaits a response"),
            H2Error::WrongState(what) => write!(f, "{what}"),
            H2Error::InvalidHeader => write!(f, "invalid header field for HTTP/2"),
            H2Error::InvalidStatus(code) => write!(f, "invalid status code {code}"),
            H2Error::Protocol(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for H2Error {}

/// Fields RFC 9113 section 8.2.2 forbids in HTTP/2: dropped from a response head.
fn is_connection_specific(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "proxy-connection" | "transfer-encoding" | "upgrade" | "te"
    )
}
