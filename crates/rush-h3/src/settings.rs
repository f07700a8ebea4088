//! Every bound an HTTP/3 endpoint enforces, as data: [`H3Settings`].

use std::time::Duration;

/// The limits of an [`crate::H3Router`] and its connections. The defaults
/// are production values; see docs/architecture.md, "HTTP/3 (foundation)".
#[derive(Debug, Clone)]
pub struct H3Settings {
    /// Request streams a client may have open at once (RFC 9114 asks for at
    /// least 100).
    pub max_concurrent_bidi_streams: u32,
    /// Unidirectional streams a client may have open at once: its control
    /// stream, its QPACK encoder and decoder streams, and room beyond them,
    /// so that a stream of a reserved type (which `h3` stops at once) waits
    /// for nothing, and a second control or QPACK stream reaches `h3`, which
    /// closes the connection with H3_STREAM_CREATION_ERROR (RFC 9114
    /// section 6.2.1). With room for only three, QUIC holds a client's
    /// fourth back and the mistake is never seen.
    pub max_concurrent_uni_streams: u32,
    /// A connection with no packet in either direction this long is closed
    /// silently (both sides know the bound from the transport parameters).
    pub idle_timeout: Duration,
    /// Request body bytes a client may send on one stream beyond what the
    /// application released (the QUIC stream window).
    pub stream_receive_window: u32,
    /// The same over all streams of a connection.
    pub receive_window: u32,
    /// Response bytes quinn keeps unacknowledged per connection; writes past
    /// it wait for acknowledgements.
    pub send_window: u64,
    /// Response bytes queued in the endpoint per connection before quinn
    /// takes them; [`crate::H3Conn::send_data`] past it is refused with
    /// [`crate::H3Error::OutputFull`].
    pub max_pending_send: usize,
    /// Connections the endpoint holds; new ones past it are refused
    /// (CONNECTION_CLOSE with CONNECTION_REFUSED).
    pub max_connections: usize,
    /// Handshakes from addresses not yet validated allowed at once; past it
    /// every new client is sent a Retry and must prove its address first.
    /// 0 sends every client a Retry.
    pub retry_above_unvalidated: usize,
    /// Requests that may wait undelivered while the server holds requests
    /// back ([`crate::H3Conn::hold_requests`]); later ones are refused
    /// with H3_REQUEST_REJECTED.
    pub max_waiting_requests: usize,
    /// Largest request head (QPACK-decoded field section) accepted.
    pub max_field_section_size: u64,
    /// Datagrams one [`crate::H3Conn::poll_transmit`] may return as one
    /// GSO batch (1 without segmentation offload).
    pub max_gso_segments: usize,
    /// The secret the keys of stateless resets and Retry tokens derive
    /// from. Workers of one server given the same secret recognise each
    /// other's tokens and resets: a client whose packets reach a worker
    /// that does not know its connection (a restart, a changed address) is
    /// reset at once instead of waiting out its idle timeout. `None`: keys
    /// random to this endpoint.
    pub secret: Option<EndpointSecret>,
}

/// 32 secret bytes (see [`H3Settings::secret`]); never printed.
#[derive(Clone)]
pub struct EndpointSecret(pub [u8; 32]);

impl std::fmt::Debug for EndpointSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EndpointSecret(..)")
    }
}

impl Default for H3Settings {
    fn default() -> H3Settings {
        H3Settings {
            max_concurrent_bidi_streams: 100,
            max_concurrent_uni_streams: 8,
            idle_timeout: Duration::from_secs(30),
            stream_receive_window: 256 * 1024,
            receive_window: 1024 * 1024,
            send_window: 1024 * 1024,
            max_pending_send: 1024 * 1024,
            max_connections: 10_000,
            retry_above_unvalidated: 64,
            max_waiting_requests: 16,
            max_field_section_size: 64 * 1024,
            max_gso_segments: 1,
            secret: None,
        }
    }
}
