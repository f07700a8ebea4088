//! Why a request was refused, and the status code that says so.

/// A request the server must refuse. Each variant maps to one status code;
/// after any of them the connection is closed, because the framing of what
/// follows can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoError {
    /// 400: malformed syntax or ambiguous framing; the text says what.
    BadRequest(&'static str),
    /// 414: the request line is longer than `Limits::max_request_line`.
    UriTooLong,
    /// 431: too many header fields, or the head (or trailers) too large.
    HeadersTooLarge,
    /// 413: the declared or decoded body is larger than `Limits::max_body_size`.
    PayloadTooLarge,
    /// 501: a transfer coding the server does not implement.
    NotImplemented(&'static str),
    /// 505: an HTTP major version other than 1 (HTTP/2.0 over plain HTTP/1 framing, HTTP/3.0, ...).
    VersionNotSupported,
}

impl ProtoError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        todo!()
    }

    /// A short human-readable explanation, sent as the text/plain body.
    pub fn message(&self) -> &'static str {
        todo!()
    }
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} {}", self.status(), self.message())
    }
}

impl std::error::Error for ProtoError {}
