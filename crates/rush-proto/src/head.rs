//! Request heads: the request line and header fields, validated strictly.
//!
//! httparse does the tokenising; this module adds what httparse leaves to its
//! caller: size limits (414/431), version policy (505), Host rules, and the
//! RFC 9112 section 6 framing decision between Content-Length and
//! Transfer-Encoding, refusing every ambiguous combination (request
//! smuggling lives in those ambiguities).

use crate::{BodyFraming, HeaderSpan, Limits, Method, ProtoError, Span, Version};

/// A parsed, validated request head. All spans point into the buffer given
/// to [`parse_request_head`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    pub method: Method,
    /// The method token exactly as sent.
    pub method_span: Span,
    /// The whole request target (origin-form `/a/b?x=1`, absolute-form, authority-form for CONNECT, or `*`).
    pub target: Span,
    /// The path part of the target: up to (not including) the first `?`, still percent-encoded.
    pub path: Span,
    /// The query part of the target, after the `?` (without it); `None` when there is no `?`.
    pub query: Option<Span>,
    pub version: Version,
    /// Length of the head in bytes including the final empty line: the body (or the next request) starts here.
    pub head_len: usize,
    pub framing: BodyFraming,
    /// Whether the connection may serve another request after this one:
    /// HTTP/1.1 unless a `Connection: close` token; HTTP/1.0 only with a `Connection: keep-alive` token.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent (case-insensitive).
    pub expect_continue: bool,
    /// The value of the single Host header, if present.
    pub host: Option<Span>,
}

/// The outcome of parsing a buffer that may hold only part of a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadStatus {
    /// The head is not complete yet and no limit is broken: read more.
    Partial,
    /// A complete, valid head.
    Complete(RequestHead),
}

/// Parses the request head at the start of `buffer`.
///
/// `headers` is cleared and filled with the header fields in order (a reused
/// vector, so the hot path does not allocate). On `Partial`, its contents are
/// unspecified.
///
/// Rules (each refusal is a [`ProtoError`], after which the caller answers
/// and closes):
/// * up to a few leading empty lines (CRLF) before the request line are ignored (RFC 9112 2.2);
/// * request line longer than `limits.max_request_line`, complete or not: 414;
/// * head larger than `limits.max_head_size`, complete or not, or more than `limits.max_headers` fields: 431;
/// * a version `HTTP/x.y` with major version other than 1 (e.g. HTTP/2.0, HTTP/3.0): 505;
///   HTTP/1.0 and HTTP/1.1 are accepted; any other malformed version: 400;
/// * bare CR, whitespace between a field name and the colon, control
///   characters (other than HTAB) in field values, obsolete line folding, an
///   invalid method or field-name token: 400;
/// * HTTP/1.1 without a Host field, or any request with more than one Host field: 400;
/// * Content-Length that is not a valid decimal number (digits only, no sign,
///   no overflow of u64), or several Content-Length values that differ (as
///   separate fields or as a comma-separated list): 400; identical duplicates are accepted;
/// * Content-Length larger than `limits.max_body_size`: 413 (before any body byte is read);
/// * both Content-Length and Transfer-Encoding: 400;
/// * Transfer-Encoding in an HTTP/1.0 request: 400;
/// * Transfer-Encoding with a coding other than chunked/gzip/deflate/compress/x-gzip/x-compress: 501;
///   with `chunked` not the last coding, or `chunked` more than once: 400;
///   with a known compression coding before `chunked` (which rush does not decode): 501;
///   exactly `chunked` (case-insensitive, optional whitespace): `BodyFraming::Chunked`.
pub fn parse_request_head(
    buffer: &[u8],
    limits: &Limits,
    headers: &mut Vec<HeaderSpan>,
) -> Result<HeadStatus, ProtoError> {
    let _ = (buffer, limits, headers);
    todo!()
}
