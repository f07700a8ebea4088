//! Sans-IO QUIC + HTTP/3 server endpoint for rush: datagrams in, events and
//! datagrams out.
//!
//! rush owns its sockets in one epoll loop per worker (mio, no async
//! runtime), and drives HTTP/2 from memory (crates/rush-h2), one
//! `H2Connection` per slab entry. This crate does the same for HTTP/3: the
//! loop gives [`H3Router`] each UDP datagram it read and gets back either a
//! new connection ([`H3Conn`], which the server keeps as it keeps an HTTP/2
//! connection) or a packet for one it holds; after anything happened to a
//! connection it calls [`H3Router::sync`]. It sends the datagrams
//! [`H3Router::poll_transmit`] and [`H3Conn::poll_transmit`] give, arms a
//! timer for [`H3Conn::poll_timeout`], reads [`Event`]s (a request head,
//! body data, the end of a request, a reset, the end of a connection) and
//! answers with commands that mirror `H2Connection`'s (send a response
//! head, body data, trailers, reset a stream, stop a request body, hold
//! requests, shut down gracefully or at once). The crate's tests bundle a
//! router and its connections in one object (tests/support/endpoint.rs).
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
//! * [`H3Router`], [`Routed`], [`H3Conn`], [`Event`], [`RequestHead`]:
//!   the router and the connections.
//! * [`quic`]: `h3`'s QUIC traits over a quinn-proto connection (the tests
//!   run `h3`'s client over it too).

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod connection;
mod guard;
mod messages;
pub mod quic;
mod router;
mod settings;

/// Maps and sets keyed by stream id, with a fast hash keyed per process
/// (stream ids are the peer's, but bounded in number by QUIC's stream
/// limits, so no flood can fill one bucket).
type StreamMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
type StreamSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

pub use connection::{ConnEvent, H3Conn};
pub use messages::{Event, H3Error, RequestHead};
pub use router::{ConfigError, ConnId, EndpointStats, H3Router, Routed, Transmit};
pub use settings::{EndpointSecret, FloodLimit, H3Settings};

/// Body chunks: reference-counted.
pub use bytes::Bytes;
/// HTTP/3 error codes (RFC 9114 section 8.1), as `h3` names them.
pub use h3::error::Code;
/// Header maps, as `h3` and `http` represent them.
pub use http::{HeaderMap, HeaderName, HeaderValue, Method};
/// quinn-proto, for the loop's types (ECN codepoints) and for clients in
/// tests.
pub use quinn_proto;
