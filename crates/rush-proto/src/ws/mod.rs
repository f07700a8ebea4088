//! WebSocket (RFC 6455) and permessage-deflate (RFC 7692), sans-IO.
//!
//! Like the rest of rush-proto this module never touches a socket: the
//! server loop hands it the bytes it read and writes out the bytes it gets
//! back. The pieces, in the order a connection meets them:
//!
//! * [`handshake`]: is this request an upgrade ([`is_upgrade_request`]), is it
//!   a valid one ([`validate_handshake`]), and the `101 Switching Protocols`
//!   or the 400/426 refusal to answer with. Also parses the subprotocol and
//!   extension offers.
//! * [`deflate`]: negotiating permessage-deflate from the client's offers,
//!   and the compressor/decompressor pair for the connection.
//! * [`frame`]: the frame header codec and the encoder of outgoing messages
//!   and control frames ([`MessageEncoder`]).
//! * [`decoder`]: [`MessageDecoder`], which turns received bytes into whole
//!   messages and control frames, enforcing every rule of RFC 6455 section 5
//!   (masking, opcodes, control frame rules, fragmentation, UTF-8 of text,
//!   close payloads, size limits) and inflating compressed messages.
//! * [`connection`]: [`Connection`], the state machine of one WebSocket
//!   connection (open, closing, closed) that answers pings and close frames
//!   by itself, so the loop only moves bytes and messages.
//!
//! Every refusal of received data is a [`WsError`], which names the close
//! code to fail the connection with (1002, 1007 or 1009).

pub mod close;
pub mod connection;
pub mod decoder;
pub mod deflate;
mod extension;
pub mod frame;
pub mod handshake;
mod utf8;

pub use connection::{Connection, ConnectionState, Disconnect, Received, SendError};
pub use decoder::{ControlPayload, Incoming, MessageDecoder, Progress};
pub use deflate::{DeflateConfig, DeflateParams};
pub use frame::{MessageEncoder, Opcode, PreparedMessage};
pub use handshake::{is_upgrade_request, validate_handshake, Handshake, HandshakeError};

/// Which end of the connection this is. Clients mask every frame they send
/// and servers never do (RFC 6455 5.1); a server refuses unmasked frames and
/// a client refuses masked ones. rush is a server; the client role exists
/// so tests can decode what the server sends with the same code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The accepting end: receives masked frames, sends unmasked ones.
    Server,
    /// The connecting end: receives unmasked frames, sends masked ones.
    Client,
}

/// The two kinds of data message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageKind {
    /// Opcode 1: the payload is UTF-8 (checked on receipt).
    Text,
    /// Opcode 2: the payload is arbitrary bytes.
    Binary,
}

/// Default largest message: 16 MiB, as the issue asks and as uvicorn's `--ws-max-size` does.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

/// Why received data was refused; each variant names the close code the
/// connection is failed with (RFC 6455 7.4.1). The text says what was wrong
/// and fits in a close reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsError {
    /// 1002: a framing rule was broken (bad opcode, unmasked frame, RSV bit,
    /// fragmented or oversized control frame, invalid close code...).
    Protocol(&'static str),
    /// 1007: text that is not UTF-8, or compressed data that does not inflate.
    InvalidPayload(&'static str),
    /// 1009: a message (after inflating) or a frame over the size limit.
    TooBig,
}

impl WsError {
    /// The close code to send when failing the connection for this error.
    pub fn close_code(&self) -> u16 {
        match self {
            WsError::Protocol(_) => close::PROTOCOL_ERROR,
            WsError::InvalidPayload(_) => close::INVALID_PAYLOAD,
            WsError::TooBig => close::MESSAGE_TOO_BIG,
        }
    }

    /// A short explanation, suitable as the close reason (under 123 bytes).
    pub fn message(&self) -> &'static str {
        match self {
            WsError::Protocol(message) | WsError::InvalidPayload(message) => message,
            WsError::TooBig => "message too big",
        }
    }
}

impl std::fmt::Display for WsError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} {}", self.close_code(), self.message())
    }
}

impl std::error::Error for WsError {}
