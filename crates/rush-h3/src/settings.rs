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
    /// Path MTU discovery (quinn's DPLPMTUD, RFC 8899): datagrams grow
    /// past the 1,200 bytes every path carries, up to quinn's bound
    /// (1,452). Only where the socket never fragments (IP_MTU_DISCOVER /
    /// IPV6_DONTFRAG set, which quinn-udp does on Linux): a probe that
    /// was fragmented would be taken for a path that carries it.
    pub path_mtu_discovery: bool,
    /// The secret the keys of stateless resets and Retry tokens derive
    /// from. Workers of one server given the same secret recognise each
    /// other's tokens and resets: a client whose packets reach a worker
    /// that does not know its connection (a restart, a changed address) is
    /// reset at once instead of waiting out its idle timeout. `None`: keys
    /// random to this endpoint.
    pub secret: Option<EndpointSecret>,
    /// Rapid Reset (CVE-2023-44487) over HTTP/3: request streams the client
    /// reset or stopped (RESET_STREAM, STOP_SENDING) before their response
    /// was complete, or that `h3` refused as malformed, less one for each
    /// response completed; past this the connection is closed with
    /// H3_EXCESSIVE_LOAD. rush-h2's `max_peer_reset_streams`, with the
    /// same default, 100: a browser cancels a few streams per page.
    pub max_peer_reset_streams: usize,
    /// When a client's traffic counts as a flood (nginx's rule, as rush-h2
    /// applies it): every byte of its datagrams against the request and
    /// response bytes they carried; past it the connection is closed with
    /// H3_EXCESSIVE_LOAD.
    pub flood: FloodLimit,
    /// The round-trip time assumed before the first sample (RFC 9002
    /// section 6.2.2: 333 ms), which times the first retransmissions of the
    /// handshake.
    pub initial_rtt: Duration,
    /// CRYPTO bytes a client may send out of order (ahead of a gap) that
    /// quinn buffers; past it the connection fails with
    /// CRYPTO_BUFFER_EXCEEDED.
    pub crypto_buffer_size: usize,
}

/// The flood rule: a connection is flooded once `received / ratio >
/// useful + allowance`, where `received` counts every byte of the client's
/// datagrams and `useful` the payload of its request HEADERS and DATA
/// frames and the response bytes sent (see docs/architecture.md, "HTTP/3
/// (foundation)").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodLimit {
    /// How many received bytes one useful byte pays for (nginx: 8).
    pub ratio: u64,
    /// Received bytes (divided by `ratio`) allowed with nothing useful
    /// (nginx: 1 MiB, so 8 MiB of datagrams that carried nothing).
    pub allowance: u64,
}

impl Default for FloodLimit {
    fn default() -> FloodLimit {
        FloodLimit {
            ratio: 8,
            allowance: 1024 * 1024,
        }
    }
}

impl FloodLimit {
    /// Whether `received` bytes are far more than `useful` ones pay for.
    pub fn flooded(&self, received: u64, useful: u64) -> bool {
        received / self.ratio.max(1) > useful.saturating_add(self.allowance)
    }
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
            path_mtu_discovery: false,
            secret: None,
            max_peer_reset_streams: 100,
            flood: FloodLimit::default(),
            initial_rtt: Duration::from_millis(333),
            crypto_buffer_size: 16 * 1024,
        }
    }
}
