//! The limits an HTTP/2 connection enforces, with rush's defaults.
//!
//! Each field maps to one `h2::server::Builder` option or to a bound of the
//! in-memory adapter ([`crate::io`]). The defaults follow nginx and hyper
//! where they agree and RFC 9113 where they do not; docs/architecture.md
//! ("HTTP/2") lists the attack each one answers.

use crate::FloodLimit;

/// Every limit of one HTTP/2 server connection. `H2Settings::default()` is
/// what rush uses unless configured otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct H2Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS: streams the peer may have open at
    /// once. A HEADERS frame past it is refused with RST_STREAM
    /// (REFUSED_STREAM). Default 128 (nginx's value; hyper uses 200).
    pub max_concurrent_streams: u32,
    /// SETTINGS_INITIAL_WINDOW_SIZE: how much request body each stream may
    /// send before the application consumed any ([`crate::H2Connection::release`]).
    /// Default 1 MiB (hyper's), so one upload is not limited by round trips.
    pub initial_stream_window: u32,
    /// The connection-level receive window: all request bodies of the
    /// connection not yet consumed by the application, so the bound on the
    /// request-body memory of one connection. Default 2 MiB.
    pub initial_connection_window: u32,
    /// SETTINGS_MAX_FRAME_SIZE: the largest frame payload the peer may send.
    /// Default 16 KiB (the protocol's minimum, nginx's and hyper's value).
    pub max_frame_size: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: the largest decoded header list
    /// (RFC 9113's size: names, values and 32 bytes per field). A larger
    /// one, however small its HPACK encoding (an HPACK bomb), is refused
    /// while decoding; CONTINUATION frames are counted against it too.
    /// Default 32 KiB (nginx's large_client_header_buffers, 4 x 8 KiB).
    pub max_header_list_size: u32,
    /// SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the peer may make
    /// the server keep. Default 4096 (the protocol's default).
    pub header_table_size: u32,
    /// Rapid Reset (CVE-2023-44487): streams the peer opened and reset
    /// before the application accepted them; past this the connection is
    /// closed with GOAWAY (ENHANCE_YOUR_CALM). Default 20 (hyper's).
    pub max_pending_accept_reset_streams: usize,
    /// Rapid Reset after acceptance: streams the peer reset before their
    /// response was complete, less one for each response completed; past
    /// this the connection is closed with GOAWAY (ENHANCE_YOUR_CALM). `h2`
    /// counts only streams reset before they were accepted, but this layer
    /// accepts a request as soon as its head is decoded, so a peer that
    /// sends HEADERS and RST_STREAM in separate reads would otherwise make
    /// the application start work for every stream without limit.
    /// Default 100: a browser cancels a few streams per page, not hundreds.
    pub max_peer_reset_streams: usize,
    /// Streams the server had to reset because the peer broke the protocol
    /// on them; past this the connection is closed with GOAWAY
    /// (ENHANCE_YOUR_CALM). Default 1024 (hyper's).
    pub max_local_error_reset_streams: usize,
    /// Recently reset streams remembered so that their late frames are
    /// ignored instead of being connection errors. Default 50 (h2's).
    pub max_concurrent_reset_streams: usize,
    /// Response bytes `h2` may buffer per stream beyond what the peer's
    /// window lets out. rush queues the rest itself and reports it
    /// ([`crate::H2Connection::pending_send`]), so the server can pace the
    /// application. Default 64 KiB.
    pub max_send_buffer_size: usize,
    /// Input bytes buffered before the server should stop reading the
    /// socket ([`crate::H2Connection::wants_read`]): a peer that floods
    /// PINGs or SETTINGS and never reads the answers stops being read.
    /// Default 64 KiB.
    pub max_input_buffer: usize,
    /// Output bytes buffered before `h2` is told that the socket is full;
    /// then it stops writing and, having nowhere to put its answers, stops
    /// reading. Default 256 KiB: the server writes the socket once per fill,
    /// so 64 KiB cost 17 sends per 1 MiB download (HTTP/1.1 needs 2); the
    /// buffer is freed once drained (`io::KEEP_CAPACITY`), so an idle
    /// connection does not keep it.
    pub max_output_buffer: usize,
    /// SETTINGS_ENABLE_CONNECT_PROTOCOL (RFC 8441, WebSocket over HTTP/2):
    /// off by default until the server serves it.
    pub enable_connect_protocol: bool,
    /// Requests kept waiting while the server holds them back
    /// ([`crate::H2Connection::hold_requests`]); more are refused with
    /// RST_STREAM(REFUSED_STREAM), safe to retry. Default 16.
    pub max_waiting_requests: usize,
    /// When a peer's frames count as a flood (nginx's rule): it then gets
    /// GOAWAY(ENHANCE_YOUR_CALM). Default: received bytes over 8 times the
    /// request and response bytes, plus 8 MiB.
    pub flood: FloodLimit,
}

impl Default for H2Settings {
    fn default() -> Self {
        H2Settings {
            max_concurrent_streams: 128,
            initial_stream_window: 1024 * 1024,
            initial_connection_window: 2 * 1024 * 1024,
            max_frame_size: 16 * 1024,
            max_header_list_size: 32 * 1024,
            header_table_size: 4096,
            max_pending_accept_reset_streams: 20,
            max_local_error_reset_streams: 1024,
            max_peer_reset_streams: 100,
            max_concurrent_reset_streams: 50,
            max_send_buffer_size: 64 * 1024,
            max_input_buffer: 64 * 1024,
            max_output_buffer: 256 * 1024,
            enable_connect_protocol: false,
            max_waiting_requests: 16,
            flood: FloodLimit::default(),
        }
    }
}

impl H2Settings {
    pub(crate) fn builder(&self) -> h2::server::Builder {
        let mut builder = h2::server::Builder::new();
        builder
            .max_concurrent_streams(self.max_concurrent_streams)
            .initial_window_size(self.initial_stream_window)
            .initial_connection_window_size(self.initial_connection_window)
            .max_frame_size(self.max_frame_size)
            .max_header_list_size(self.max_header_list_size)
            .header_table_size(self.header_table_size)
            .max_pending_accept_reset_streams(self.max_pending_accept_reset_streams)
            .max_local_error_reset_streams(Some(self.max_local_error_reset_streams))
            .max_concurrent_reset_streams(self.max_concurrent_reset_streams)
            .max_send_buffer_size(self.max_send_buffer_size);
        if self.enable_connect_protocol {
            builder.enable_connect_protocol();
        }
        builder
    }
}
