//! Sans-IO HTTP/2 server connections for rush: bytes in, events and bytes out.
//!
//! rush owns its sockets in one epoll loop per worker (mio, no async
//! runtime). This crate gives that loop an HTTP/2 server connection it can
//! drive like h11 or rush-proto: the loop [`feeds`](H2Connection::feed) the
//! bytes it read, takes the bytes to write
//! ([`take_output`](H2Connection::take_output)), reads [`Event`]s (a request
//! head, body data, the end of a request, a reset by the peer, the end of the
//! connection) and answers with commands (send a response head, body data,
//! trailers, reset a stream, shut down gracefully).
//!
//! The protocol itself (frames, HPACK, stream states, flow control, SETTINGS,
//! PING, GOAWAY and the limits against the HTTP/2 attack family) is hyper's
//! [`h2`] crate, the code behind hyper, granian and most Rust servers, with
//! its h2spec record and its fixes for Rapid Reset, CONTINUATION floods and
//! small-frame floods. `h2` speaks through tokio's `AsyncRead`/`AsyncWrite`;
//! [`io`] implements them over two in-memory buffers, and [`H2Connection`]
//! polls `h2` with a no-op waker after every input and before every output, so
//! no runtime, thread or timer is involved. Why this path and what it costs:
//! docs/architecture.md, "HTTP/2".
//!
//! * [`detect_preface`]: on a cleartext port that serves HTTP/1.1 too, tells
//!   from the first bytes whether a client speaks HTTP/2 with prior knowledge.
//! * [`H2Settings`]: every limit the connection enforces, with defaults.
//! * [`H2Connection`], [`Event`], [`RequestHead`]: the connection itself.
//!
//! The crate is separate from rush-proto because `h2` depends on tokio (its
//! I/O traits only: no runtime is built or started), which rush-proto's rule
//! of small, runtime-free dependencies excludes.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod connection;
mod flood;
pub mod io;
mod messages;
mod preface;
mod settings;

pub use connection::H2Connection;
pub use flood::FloodLimit;
pub use messages::{field_map, Event, H2Error, RequestHead, ResponseHead};
pub use preface::{detect_preface, Preface, PREFACE};
pub use settings::H2Settings;

/// Body chunks: reference-counted, so a chunk is never copied on its way out.
pub use bytes::Bytes;
/// HTTP/2 error codes (RFC 9113 section 7), as `h2` names them.
pub use h2::Reason;
/// Header maps and methods, as `h2` and `http` represent them.
pub use http::{HeaderMap, HeaderName, HeaderValue, Method};
