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

    /// Why the request is malformed (RFC 9113 sections 8.2.1 and 8.3.1),
    /// for the shapes `h2` lets through; `None` if it is not. A server
    /// answers a malformed request with RST_STREAM(PROTOCOL_ERROR) (RFC
    /// 9113 section 8.1.1), as `h2` does for the shapes it finds itself
    /// (a missing or empty `:path`, connection-specific fields, `te` other
    /// than `trailers`, a body longer or shorter than its length).
    pub fn malformed(&self) -> Option<&'static str> {
        let path = self.path();
        let connect = self.method == Method::CONNECT;
        // `OPTIONS *` is the one path that is not absolute; CONNECT
        // without `:protocol` has none (`h2` checks that it has none).
        let star = path == "*" && self.method == Method::OPTIONS;
        if !(path.starts_with('/') || star || (connect && self.protocol.is_none())) {
            return Some(":path is not an absolute path");
        }
        let authority = self.authority();
        if authority.is_some_and(|authority| authority.contains('@')) {
            return Some(":authority has a userinfo part");
        }
        for (name, value) in &self.headers {
            let value = value.as_bytes();
            let padded = |byte: Option<&u8>| matches!(byte, Some(b' ' | b'\t'));
            if padded(value.first()) || padded(value.last()) {
                return Some("a field value starts or ends with whitespace");
            }
            // `h2` refuses these itself; the same check serves HTTP/3,
            // whose `h3` 0.0.8 lets them through (RFC 9114 section 4.2).
            if name == http::header::TE {
                if !value.eq_ignore_ascii_case(b"trailers") {
                    return Some("te other than trailers");
                }
            } else if is_connection_specific(name) {
                return Some("a connection-specific field");
            }
            if name == http::header::HOST {
                if let Some(authority) = authority {
                    if !same_authority(authority, value, self.scheme()) {
                        return Some("host differs from :authority");
                    }
                }
            }
        }
        None
    }
}

/// Whether a `host` field names the same entity as `:authority` (RFC 9113
/// section 8.3.1): equal but for case, or for the scheme's default port
/// written on one side only.
fn same_authority(authority: &str, host: &[u8], scheme: Option<&str>) -> bool {
    let default_port: &[u8] = match scheme {
        Some("https") => b":443",
        _ => b":80",
    };
    let strip = |text: &'_ [u8]| -> Vec<u8> {
        let text = text.strip_suffix(default_port).unwrap_or(text);
        text.to_ascii_lowercase()
    };
    strip(authority.as_bytes()) == strip(host)
}

/// A field value as HTTP/2 may carry it: without the whitespace an app
/// may leave around it (RFC 9113 8.2.1 makes a value that begins or ends
/// with SP or HTAB malformed, and a client that checks, as the `h2`
/// package does by default, refuses the response). HTTP/1.1 readers drop that
/// whitespace themselves (RFC 9110 5.5), so both protocols' clients read
/// the same value.
pub(crate) fn field_value(value: &[u8]) -> Result<HeaderValue, H2Error> {
    let start = value.iter().position(|&byte| byte != b' ' && byte != b'\t');
    let trimmed = match start {
        None => &[][..],
        Some(start) => {
            let end = value
                .iter()
                .rposition(|&byte| byte != b' ' && byte != b'\t');
            &value[start..=end.unwrap_or(start)]
        }
    };
    HeaderValue::from_bytes(trimmed).map_err(|_| H2Error::InvalidHeader)
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
            let value = field_value(value)?;
            map.append(name, value);
        }
        Ok(ResponseHead(response))
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.0.status().as_u16()
    }

    /// The checked head as `http`'s type: how another protocol's engine
    /// takes it (rush frames HTTP/3 heads built the same way, so both
    /// protocols drop and trim the same fields).
    pub fn into_response(self) -> Response<()> {
        self.0
    }
}

/// Fields (trailers) checked as a response head's are: names HTTP can
/// carry, values trimmed of the whitespace around them.
pub fn field_map<'a, I>(fields: I) -> Result<HeaderMap, H2Error>
where
    I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
{
    let mut map = HeaderMap::new();
    for (name, value) in fields {
        let name = HeaderName::from_bytes(name).map_err(|_| H2Error::InvalidHeader)?;
        map.append(name, field_value(value)?);
    }
    Ok(map)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_value_loses_the_whitespace_around_it_and_keeps_the_inside() {
        let value = |bytes: &[u8]| field_value(bytes).unwrap();
        assert_eq!(value(b" \tspaced  value\t "), "spaced  value");
        assert_eq!(value(b"plain"), "plain");
        assert_eq!(value(b"   "), "");
        assert_eq!(value(b""), "");
        assert_eq!(value(b"\tx"), "x");
        assert!(field_value(b" a\r\nb ").is_err());
    }

    fn head(method: Method, uri: &str, fields: &[(&str, &[u8])]) -> RequestHead {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            let value = HeaderValue::from_bytes(value).unwrap();
            headers.append(HeaderName::from_bytes(name.as_bytes()).unwrap(), value);
        }
        RequestHead {
            method,
            uri: uri.parse().unwrap(),
            protocol: None,
            headers,
        }
    }

    #[test]
    fn well_formed_requests_pass() {
        let cases = [
            head(Method::GET, "http://a.example/x?y=1", &[("accept", b"*/*")]),
            head(Method::GET, "http://a.example/", &[("host", b"A.example")]),
            head(
                Method::GET,
                "http://a.example:80/",
                &[("host", b"a.example")],
            ),
            head(
                Method::GET,
                "https://a.example/",
                &[("host", b"a.example:443")],
            ),
            head(Method::OPTIONS, "http://a.example/*", &[]),
            head(Method::GET, "http://a.example/", &[("x-inner", b"a b\tc")]),
            head(Method::GET, "http://a.example/", &[("x-empty", b"")]),
        ];
        for case in &cases {
            assert_eq!(case.malformed(), None, "{case:?}");
        }
        let star = star_path(Method::OPTIONS);
        assert_eq!(star.malformed(), None);
    }

    /// A request for `*` (the asterisk form, which only OPTIONS may use).
    fn star_path(method: Method) -> RequestHead {
        let mut star = head(method, "http://a.example/", &[]);
        star.uri = http::Uri::builder()
            .scheme("http")
            .authority("a.example")
            .path_and_query("*")
            .build()
            .unwrap();
        star
    }

    #[test]
    fn malformed_requests_are_named() {
        let cases = [
            (
                head(Method::GET, "http://a.example/", &[("host", b"b.example")]),
                "host differs from :authority",
            ),
            (
                head(
                    Method::GET,
                    "https://a.example/",
                    &[("host", b"a.example:80")],
                ),
                "host differs from :authority",
            ),
            (
                head(Method::GET, "http://a.example/", &[("x-a", b" v")]),
                "a field value starts or ends with whitespace",
            ),
            (
                head(Method::GET, "http://a.example/", &[("x-a", b"v\t")]),
                "a field value starts or ends with whitespace",
            ),
            (
                head(Method::GET, "http://u@a.example/", &[]),
                ":authority has a userinfo part",
            ),
            (
                head(
                    Method::GET,
                    "http://a.example/",
                    &[("connection", b"close")],
                ),
                "a connection-specific field",
            ),
            (
                head(Method::GET, "http://a.example/", &[("te", b"gzip")]),
                "te other than trailers",
            ),
        ];
        for (case, why) in &cases {
            assert_eq!(case.malformed(), Some(*why), "{case:?}");
        }
        let star = star_path(Method::GET);
        assert_eq!(star.malformed(), Some(":path is not an absolute path"));
    }
}
