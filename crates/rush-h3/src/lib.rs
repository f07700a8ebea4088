//! Sans-IO QUIC + HTTP/3 server endpoint for rush: datagrams in, events and
//! datagrams out.
//!
//! rush owns its sockets in one epoll loop per worker (mio, no async
//! runtime), and drives HTTP/2 from memory (crates/rush-h2). This crate does
//! the same for HTTP/3: the loop gives [`H3Endpoint`] each UDP datagram it
//! read, sends the datagrams [`H3Endpoint::poll_transmit`] gives, arms a
//! timer for [`H3Endpoint::poll_timeout`], reads [`Event`]s (a request head,
//! body data, the end of a request, a reset, the end of a connection) and
//! answers with commands (send a response head, body data, trailers, reset a
//! stream, shut down gracefully).
//!
//! QUIC is quinn-proto, the state machine under quinn (handshake over
//! rustls, loss recovery, congestion control, flow control, connection ids,
//! Retry, stateless reset, the anti-amplification limit), which has no I/O
//! and no runtime of its own. HTTP/3 and QPACK are hyperium's [`h3`] crate,
//! driven through its QUIC traits ([`quic`]) over quinn-proto's streams and
//! polled with a no-op waker, as rush-h2 polls `h2`. Why this path and what
//! it costs: docs/architecture.md, "HTTP/3 (foundation)".
//!
//! * [`H3Settings`]: every bound the endpoint enforces, with defaults.
//! * [`H3Endpoint`], [`Event`], [`RequestHead`]: the endpoint itself.
//! * [`quic`]: `h3`'s QUIC traits over a quinn-proto connection (the tests
//!   run `h3`'s client over it too).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod connection;
mod endpoint;
mod guard;
mod messages;
pub mod quic;
mod settings;

pub use endpoint::{ConfigError, ConnId, EndpointStats, H3Endpoint, Transmit};
pub use messages::{Event, H3Error, RequestHead};
pub use settings::{EndpointSecret, H3Settings};

/// Body chunks: reference-counted.
pub use bytes::Bytes;
/// HTTP/3 error codes (RFC 9114 section 8.1), as `h3` names them.
pub use h3::error::Code;
/// Header maps, as `h3` and `http` represent them.
pub use http::{HeaderMap, HeaderName, HeaderValue, Method};
/// quinn-proto, for the loop's types (ECN codepoints) and for clients in
/// tests.
pub use quinn_proto;
