//! Sans-IO HTTP/1.1 for rush: bytes in, decisions out.
//!
//! This crate owns every rule of RFC 9112 about *framing*: where a request
//! head ends, which body follows it, whether the connection stays open, and
//! which requests must be refused (and with which status). It never touches a
//! socket, a clock or Python; the server loop in the `rush` crate feeds it the
//! bytes it read and acts on what comes back.
//!
//! The shape follows httparse (which parses the head for us): results borrow
//! nothing and instead carry [`Span`]s, offsets into the caller's buffer, so
//! the caller can keep its buffer and the parse result side by side without
//! lifetimes or copies.
//!
//! * [`parse_request_head`]: one request head, validated, with its framing
//!   (request targets are checked by the private `target` module);
//!   [`parse_proxy_request_head`] is the same for a forward proxy, which
//!   serves CONNECT instead of refusing it.
//! * [`proxy`]: a forward proxy's decisions: where a request goes, the head
//!   sent to the origin (hop-by-hop fields removed), origin response framing.
//! * [`absolute_form_authority`]: the host an absolute-form target names.
//! * [`ChunkedDecoder`]: a resumable `Transfer-Encoding: chunked` decoder.
//! * [`response`]: status lines, header validation, canned error responses.
//! * [`encode`]: response framing: Content-Length, chunked or close-delimited
//!   bodies, HEAD and bodyless statuses, `Connection` tokens.
//! * [`DateCache`]: the `Date` header, formatted once a second.
//! * [`ws`]: WebSocket (RFC 6455) and permessage-deflate (RFC 7692): the
//!   handshake, frames, messages and the closing handshake.
//! * [`forwarded`]: the client, scheme and host a trusted reverse proxy
//!   reports (`X-Forwarded-*`, RFC 7239 `Forwarded`), and which peers to trust.
//!
//! Incomplete input is always [`HeadStatus::Partial`] / "need more", never an
//! error, so the same input split at any offset gives the same result.
//!
//! Like httparse, the crate forbids `unsafe` code and requires documentation
//! on every public item.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod chunked;
mod date;
pub mod encode;
mod error;
pub mod fields;
pub mod forwarded;
mod head;
pub mod proxy;
pub mod response;
mod target;
pub mod ws;

pub use chunked::{ChunkedDecoder, ChunkedProgress, FORBIDDEN_TRAILER_FIELDS};
pub use date::{date_field_of, server_fields_without, DateCache, SERVER_LINE};
pub use encode::{BodyEncoder, BodyKind, EncodeError, FramingHeader, FramingPlan};
pub use error::ProtoError;
pub use head::{parse_proxy_request_head, parse_request_head, HeadStatus, RequestHead};
pub use target::absolute_form_authority;

/// Every size bound the parser enforces. Each has a default; the server makes
/// them configurable.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Longest request line (method, target, version) in bytes; over it: 414.
    pub max_request_line: usize,
    /// Largest whole head (request line + all header lines) in bytes; over it: 431.
    pub max_head_size: usize,
    /// Most header fields in one head; over it: 431.
    pub max_headers: usize,
    /// Largest request body in bytes, declared or decoded; over it: 413.
    pub max_body_size: u64,
    /// Longest chunk-size line (size plus extensions) in a chunked body; over it: 400.
    pub max_chunk_line: usize,
    /// Largest trailer section of a chunked body in bytes; over it: 431.
    pub max_trailer_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_head_size: 16 * 1024,
            max_headers: 100,
            max_body_size: 16 * 1024 * 1024,
            max_chunk_line: 1024,
            max_trailer_size: 8 * 1024,
        }
    }
}

/// A byte range inside the buffer that was parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// Offset of the first byte.
    pub start: u32,
    /// Offset just past the last byte (`start == end` for an empty span).
    pub end: u32,
}

impl Span {
    /// The span `start..end`. Offsets are stored as `u32` to keep spans
    /// small; heads are bounded far below 4 GiB by [`Limits`].
    pub fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// The bytes this span covers in `buffer` (the buffer that was parsed).
    #[inline]
    pub fn of<'a>(&self, buffer: &'a [u8]) -> &'a [u8] {
        &buffer[self.start as usize..self.end as usize]
    }

    /// How many bytes the span covers.
    #[inline]
    pub fn len(&self) -> usize {
        (self.end - self.start) as usize
    }

    /// Whether the span covers no bytes (an empty value, for instance).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// One header field of a parsed head, as offsets into the parsed buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeaderSpan {
    /// The field name, as sent (case preserved).
    pub name: Span,
    /// The field value without its leading and trailing whitespace.
    pub value: Span,
}

/// The request methods the server treats specially; anything else is `Other`
/// (the exact token is still available through [`RequestHead::method_span`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`: answered like GET, but the response carries no body.
    Head,
    /// `POST`.
    Post,
    /// `PUT`.
    Put,
    /// `DELETE`.
    Delete,
    /// `PATCH`.
    Patch,
    /// `OPTIONS`.
    Options,
    /// `CONNECT`: its target must be in authority-form (`host:port`); rush
    /// is not a proxy, so a valid one is refused with 405.
    Connect,
    /// `TRACE`.
    Trace,
    /// Any other valid method token (extension methods).
    Other,
}

impl Method {
    /// Maps a method token (case-sensitive, as RFC 9110 says) to a [`Method`].
    pub fn from_token(token: &[u8]) -> Method {
        match token {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"PATCH" => Method::Patch,
            b"OPTIONS" => Method::Options,
            b"CONNECT" => Method::Connect,
            b"TRACE" => Method::Trace,
            _ => Method::Other,
        }
    }
}

/// The HTTP versions a request may carry; anything else is refused with 505.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0: no chunked bodies, keep-alive only when asked for.
    Http10,
    /// HTTP/1.1: persistent connections by default, Host required.
    Http11,
    /// HTTP/2: never parsed from a request line; a server that carries an
    /// HTTP/2 request in this crate's head form sets it (rush's HTTP/2
    /// driver), so what the application is told names the protocol.
    Http2,
    /// HTTP/3: set as [`Version::Http2`] is, by rush's HTTP/3 driver.
    Http3,
}

impl Version {
    /// As ASGI spells it: `"1.0"`, `"1.1"`, `"2"` or `"3"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Version::Http10 => "1.0",
            Version::Http11 => "1.1",
            Version::Http2 => "2",
            Version::Http3 => "3",
        }
    }
}

/// How the body after a head is delimited (RFC 9112 section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body: no Content-Length and no Transfer-Encoding (or Content-Length: 0).
    Empty,
    /// Exactly this many bytes follow the head (already checked against the limit).
    ContentLength(u64),
    /// A chunked body follows; decode it with [`ChunkedDecoder`].
    Chunked,
}
