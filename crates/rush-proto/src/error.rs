//! Why a request was refused, and the status code that says so.

/// A request the server must refuse. Each variant maps to one status code;
/// after any of them the connection is closed, because the framing of what
/// follows can no longer be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtoError {
    /// 400: malformed syntax or ambiguous framing; the text says what.
    BadRequest(&'static str),
    /// 405: a well-formed request for a method the server never serves
    /// (CONNECT: rush is not a proxy); the text says which. The answer
    /// carries an empty `Allow` field: the target allows no method here.
    MethodNotAllowed(&'static str),
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
        match self {
            ProtoError::BadRequest(_) => 400,
            ProtoError::MethodNotAllowed(_) => 405,
            ProtoError::UriTooLong => 414,
            ProtoError::HeadersTooLarge => 431,
            ProtoError::PayloadTooLarge => 413,
            ProtoError::NotImplemented(_) => 501,
            ProtoError::VersionNotSupported => 505,
        }
    }

    /// A short human-readable explanation, sent as the text/plain body.
    pub fn message(&self) -> &'static str {
        match self {
            ProtoError::BadRequest(message)
            | ProtoError::MethodNotAllowed(message)
            | ProtoError::NotImplemented(message) => message,
            ProtoError::UriTooLong => "request line too long",
            ProtoError::HeadersTooLarge => "too many header fields or header section too large",
            ProtoError::PayloadTooLarge => "request body too large",
            ProtoError::VersionNotSupported => "only HTTP/1.0 and HTTP/1.1 are supported",
        }
    }
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} {}", self.status(), self.message())
    }
}

impl std::error::Error for ProtoError {}

#[cfg(test)]
mod tests {
    use super::ProtoError;

    #[test]
    fn every_variant_has_its_status_and_message() {
        let cases = [
            (ProtoError::BadRequest("bare CR"), 400, "bare CR"),
            (
                ProtoError::MethodNotAllowed("CONNECT is not supported"),
                405,
                "CONNECT is not supported",
            ),
            (ProtoError::UriTooLong, 414, "request line too long"),
            (
                ProtoError::HeadersTooLarge,
                431,
                "too many header fields or header section too large",
            ),
            (ProtoError::PayloadTooLarge, 413, "request body too large"),
            (
                ProtoError::NotImplemented("unsupported transfer coding"),
                501,
                "unsupported transfer coding",
            ),
            (
                ProtoError::VersionNotSupported,
                505,
                "only HTTP/1.0 and HTTP/1.1 are supported",
            ),
        ];
        for (error, status, message) in cases {
            assert_eq!(error.status(), status, "{error:?}");
            assert_eq!(error.message(), message, "{error:?}");
            assert_eq!(error.to_string(), format!("{status} {message}"));
        }
    }
}
