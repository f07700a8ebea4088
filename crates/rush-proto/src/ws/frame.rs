//! The frame format (RFC 6455 5.2) and the encoder for outgoing frames.
//!
//! ```text
//!  0               1               2               3
//!  F R R R opcode  M len7          extended length (16 or 64 bits, if len7 is 126 or 127)
//!  I S S S (4)     A (7)           masking key (4 bytes, if MASK)
//!  N V V V         S                payload
//!    1 2 3         K
//! ```
//!
//! Decoding the header is split in two steps so the decoder can collect a
//! header that arrives in pieces: [`header_length`] tells from the first two
//! bytes how long the whole header is, and [`FrameHeader::parse`] reads it
//! once that many bytes are there. Rules that depend on the connection
//! (masking, RSV bits, fragmentation) are the decoder's; this file only
//! refuses what no connection allows: unknown opcodes, control frames that
//! are fragmented or longer than 125 bytes, and 64-bit lengths with the most
//! significant bit set.
//!
//! [`MessageEncoder`] writes whole messages: one frame, or several when a
//! maximum frame payload is set, compressed when permessage-deflate was
//! negotiated (RSV1 on the first frame only, RFC 7692 6.1). Control frames
//! are never compressed nor fragmented.

use std::num::NonZeroUsize;

use super::deflate::{Compressor, DeflateParams};
use super::{close, MessageKind, Role};

/// A frame's opcode (RFC 6455 5.2); the reserved values 3-7 and 11-15 are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// 0: a later fragment of a text or binary message.
    Continuation,
    /// 1: the first (or only) frame of a text message.
    Text,
    /// 2: the first (or only) frame of a binary message.
    Binary,
    /// 8: close.
    Close,
    /// 9: ping.
    Ping,
    /// 10: pong.
    Pong,
}

impl Opcode {
    /// The opcode for the 4-bit value, or `None` for a reserved one.
    pub fn from_bits(bits: u8) -> Option<Opcode> {
        match bits {
            0 => Some(Opcode::Continuation),
            1 => Some(Opcode::Text),
            2 => Some(Opcode::Binary),
            8 => Some(Opcode::Close),
            9 => Some(Opcode::Ping),
            10 => Some(Opcode::Pong),
            _ => None,
        }
    }

    /// The 4-bit value on the wire.
    pub fn bits(self) -> u8 {
        match self {
            Opcode::Continuation => 0,
            Opcode::Text => 1,
            Opcode::Binary => 2,
            Opcode::Close => 8,
            Opcode::Ping => 9,
            Opcode::Pong => 10,
        }
    }

    /// Close, ping and pong: at most 125 bytes, never fragmented, and
    /// allowed between the fragments of a message.
    pub fn is_control(self) -> bool {
        matches!(self, Opcode::Close | Opcode::Ping | Opcode::Pong)
    }
}

/// Largest payload of a control frame (RFC 6455 5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;

/// Longest frame header: 2 bytes, a 64-bit length and a masking key.
pub const MAX_HEADER_LENGTH: usize = 14;

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// The last frame of its message.
    pub fin: bool,
    /// RSV1: with permessage-deflate, "this message is compressed".
    pub rsv1: bool,
    /// RSV2 and RSV3 (no extension rush knows uses them).
    pub rsv2_or_rsv3: bool,
    /// What the frame carries.
    pub opcode: Opcode,
    /// The masking key, when the MASK bit is set.
    pub mask: Option<[u8; 4]>,
    /// Payload length in bytes.
    pub payload_length: u64,
}

/// The length of the whole header announced by its first two bytes.
pub fn header_length(first_two: [u8; 2]) -> usize {
    let extended = match first_two[1] & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let mask = if first_two[1] & 0x80 != 0 { 4 } else { 0 };
    2 + extended + mask
}

impl FrameHeader {
    /// Reads a header from exactly [`header_length`] bytes.
    ///
    /// Errors (all 1002): a reserved opcode, a control frame without FIN or
    /// with more than 125 bytes, a 64-bit length with its top bit set.
    pub fn parse(bytes: &[u8]) -> Result<FrameHeader, super::WsError> {
        use super::WsError::Protocol;
        debug_assert_eq!(bytes.len(), header_length([bytes[0], bytes[1]]));
        let fin = bytes[0] & 0x80 != 0;
        let opcode = Opcode::from_bits(bytes[0] & 0x0F).ok_or(Protocol("reserved opcode"))?;
        let (payload_length, rest) = match bytes[1] & 0x7F {
            126 => (u16::from_be_bytes([bytes[2], bytes[3]]) as u64, &bytes[4..]),
            127 => {
                let mut length = [0; 8];
                length.copy_from_slice(&bytes[2..10]);
                let length = u64::from_be_bytes(length);
                if length >> 63 != 0 {
                    return Err(Protocol("64-bit payload length with the top bit set"));
                }
                (length, &bytes[10..])
            }
            short => (short as u64, &bytes[2..]),
        };
        if opcode.is_control() {
            if !fin {
                return Err(Protocol("fragmented control frame"));
            }
            if payload_length > MAX_CONTROL_PAYLOAD as u64 {
                return Err(Protocol("control frame payload over 125 bytes"));
            }
        }
        let mask = (bytes[1] & 0x80 != 0).then(|| [rest[0], rest[1], rest[2], rest[3]]);
        Ok(FrameHeader {
            fin,
            rsv1: bytes[0] & 0x40 != 0,
            rsv2_or_rsv3: bytes[0] & 0x30 != 0,
            opcode,
            mask,
            payload_length,
        })
    }

    /// Appends the header in its shortest form (lengths up to 125 in 7
    /// bits, up to 65535 in 16, the rest in 64).
    pub fn write(&self, out: &mut Vec<u8>) {
        let mut first = self.opcode.bits();
        if self.fin {
            first |= 0x80;
        }
        if self.rsv1 {
            first |= 0x40;
        }
        if self.rsv2_or_rsv3 {
            first |= 0x30;
        }
        let mask_bit = if self.mask.is_some() { 0x80 } else { 0 };
        out.push(first);
        match self.payload_length {
            length @ 0..=125 => out.push(mask_bit | length as u8),
            length @ 126..=0xFFFF => {
                out.push(mask_bit | 126);
                out.extend_from_slice(&(length as u16).to_be_bytes());
            }
            length => {
                out.push(mask_bit | 127);
                out.extend_from_slice(&length.to_be_bytes());
            }
        }
        if let Some(mask) = self.mask {
            out.extend_from_slice(&mask);
        }
    }
}

/// XORs `data` with the masking key, starting at byte `offset` of the
/// frame's payload (masking is its own inverse, RFC 6455 5.3).
pub fn apply_mask(data: &mut [u8], mask: [u8; 4], offset: u64) {
    // Rotate the key so that data[0] meets the key byte for its offset,
    // then XOR eight bytes at a time as one u64 (the key repeated twice);
    // byte order does not matter since bytes and key stay in step.
    let shift = (offset % 4) as usize;
    let key = [
        mask[shift],
        mask[(shift + 1) % 4],
        mask[(shift + 2) % 4],
        mask[(shift + 3) % 4],
    ];
    let word = u64::from_ne_bytes([
        key[0], key[1], key[2], key[3], key[0], key[1], key[2], key[3],
    ]);
    let mut chunks = data.chunks_exact_mut(8);
    for chunk in &mut chunks {
        let bytes: [u8; 8] = (*chunk).try_into().expect("chunks of 8");
        chunk.copy_from_slice(&(u64::from_ne_bytes(bytes) ^ word).to_ne_bytes());
    }
    for (byte, key_byte) in chunks.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *byte ^= key_byte;
    }
}

/// Appends one frame with its payload to `out`, masked when `mask` is given.
pub fn write_frame(out: &mut Vec<u8>, header: FrameHeader, payload: &[u8]) {
    debug_assert_eq!(header.payload_length, payload.len() as u64);
    header.write(out);
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(mask) = header.mask {
        apply_mask(&mut out[start..], mask, 0);
    }
}

/// A frame the caller asked for cannot be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// A ping or pong payload over 125 bytes, or a close reason over 123.
    ControlPayloadTooLong,
    /// A close code that may not be sent (see [`close::is_valid_close_code`]).
    InvalidCloseCode,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(match self {
            FrameError::ControlPayloadTooLong => "control frame payload over 125 bytes",
            FrameError::InvalidCloseCode => "close code that may not be sent",
        })
    }
}

impl std::error::Error for FrameError {}

/// A message framed once for many receivers (a broadcast): the frames a
/// server sends without compression. Connections without
/// permessage-deflate copy these bytes as they are; the others compress
/// the payload with their own context ([`crate::ws::Connection::send_prepared`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedMessage {
    kind: MessageKind,
    payload: Vec<u8>,
    frames: Vec<u8>,
}

impl PreparedMessage {
    /// Frames `payload` once, as one frame or fragments of at most
    /// `max_frame_payload` bytes. A text payload must be UTF-8.
    pub fn new(
        kind: MessageKind,
        payload: &[u8],
        max_frame_payload: Option<NonZeroUsize>,
    ) -> PreparedMessage {
        let mut encoder = MessageEncoder::new(Role::Server, None);
        encoder.set_max_frame_payload(max_frame_payload);
        let mut frames = Vec::with_capacity(payload.len() + 14);
        encoder.message(&mut frames, kind, payload);
        PreparedMessage {
            kind,
            payload: payload.to_vec(),
            frames,
        }
    }

    /// The kind of message.
    pub fn kind(&self) -> MessageKind {
        self.kind
    }

    /// The payload, for receivers that compress.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The uncompressed frames, ready to write.
    pub fn frames(&self) -> &[u8] {
        &self.frames
    }
}

/// Writes the messages and control frames one end sends, into buffers the
/// caller owns.
#[derive(Debug)]
pub struct MessageEncoder {
    role: Role,
    mask_key: [u8; 4],
    max_frame_payload: Option<NonZeroUsize>,
    compressor: Option<Compressor>,
    /// Holds a compressed message before it is framed (only with deflate).
    compressed: Vec<u8>,
}

impl MessageEncoder {
    /// An encoder for `role`, compressing every data message when
    /// permessage-deflate was negotiated (`deflate` is `Some`).
    pub fn new(role: Role, deflate: Option<&DeflateParams>) -> MessageEncoder {
        MessageEncoder {
            role,
            mask_key: [0; 4],
            max_frame_payload: None,
            compressor: deflate.map(|params| Compressor::new(params, role)),
            compressed: Vec::new(),
        }
    }

    /// Splits data messages into frames of at most this many payload bytes
    /// (`None`, the default: one frame per message).
    pub fn set_max_frame_payload(&mut self, limit: Option<NonZeroUsize>) {
        self.max_frame_payload = limit;
    }

    /// The masking key for the frames a [`Role::Client`] encoder writes.
    /// RFC 6455 5.3 wants a fresh unpredictable key per frame; this crate
    /// has no randomness, so a real client sets one before each message.
    pub fn set_mask_key(&mut self, key: [u8; 4]) {
        self.mask_key = key;
    }

    fn mask(&self) -> Option<[u8; 4]> {
        (self.role == Role::Client).then_some(self.mask_key)
    }

    /// Whether data messages are compressed (permessage-deflate negotiated).
    pub fn compresses(&self) -> bool {
        self.compressor.is_some()
    }

    /// Appends a whole data message: compressed if deflate was negotiated,
    /// fragmented if a maximum frame payload is set. The caller guarantees
    /// that a text payload is UTF-8 (a `&str` turned into bytes).
    pub fn message(&mut self, out: &mut Vec<u8>, kind: MessageKind, payload: &[u8]) {
        let compressed = match self.compressor.as_mut() {
            Some(compressor) => {
                self.compressed.clear();
                compressor.compress_message(payload, &mut self.compressed);
                true
            }
            None => false,
        };
        let body = if compressed {
            &self.compressed[..]
        } else {
            payload
        };
        let first_opcode = match kind {
            MessageKind::Text => Opcode::Text,
            MessageKind::Binary => Opcode::Binary,
        };
        let piece_length = self
            .max_frame_payload
            .map_or(usize::MAX, NonZeroUsize::get)
            .min(body.len().max(1));
        let mask = self.mask();
        let mut offset = 0;
        loop {
            let end = body.len().min(offset + piece_length);
            let header = FrameHeader {
                fin: end == body.len(),
                // RFC 7692 6.1: RSV1 marks the first frame of a compressed message only.
                rsv1: compressed && offset == 0,
                rsv2_or_rsv3: false,
                opcode: if offset == 0 {
                    first_opcode
                } else {
                    Opcode::Continuation
                },
                mask,
                payload_length: (end - offset) as u64,
            };
            write_frame(out, header, &body[offset..end]);
            if end == body.len() {
                break;
            }
            offset = end;
        }
    }

    fn control(&self, out: &mut Vec<u8>, opcode: Opcode, payload: &[u8]) -> Result<(), FrameError> {
        if payload.len() > MAX_CONTROL_PAYLOAD {
            return Err(FrameError::ControlPayloadTooLong);
        }
        let header = FrameHeader {
            fin: true,
            rsv1: false,
            rsv2_or_rsv3: false,
            opcode,
            mask: self.mask(),
            payload_length: payload.len() as u64,
        };
        write_frame(out, header, payload);
        Ok(())
    }

    /// Appends a ping carrying `payload` (at most 125 bytes).
    pub fn ping(&self, out: &mut Vec<u8>, payload: &[u8]) -> Result<(), FrameError> {
        self.control(out, Opcode::Ping, payload)
    }

    /// Appends a pong carrying `payload` (at most 125 bytes); the answer to
    /// a ping repeats the ping's payload.
    pub fn pong(&self, out: &mut Vec<u8>, payload: &[u8]) -> Result<(), FrameError> {
        self.control(out, Opcode::Pong, payload)
    }

    /// Appends a close frame: empty when `code` is `None` (then `reason`
    /// must be empty too), otherwise the code and a reason of at most 123 bytes.
    /// Nothing is appended on error.
    pub fn close(
        &self,
        out: &mut Vec<u8>,
        code: Option<u16>,
        reason: &str,
    ) -> Result<(), FrameError> {
        let Some(code) = code else {
            return if reason.is_empty() {
                self.control(out, Opcode::Close, b"")
            } else {
                Err(FrameError::InvalidCloseCode)
            };
        };
        if !close::is_valid_close_code(code) {
            return Err(FrameError::InvalidCloseCode);
        }
        if reason.len() > close::MAX_CLOSE_REASON {
            return Err(FrameError::ControlPayloadTooLong);
        }
        let mut payload = [0; MAX_CONTROL_PAYLOAD];
        payload[..2].copy_from_slice(&code.to_be_bytes());
        payload[2..2 + reason.len()].copy_from_slice(reason.as_bytes());
        self.control(out, Opcode::Close, &payload[..2 + reason.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_length_forms() {
        for (length, header_bytes) in [
            (0u64, vec![0x82, 0]),
            (125, vec![0x82, 125]),
            (126, vec![0x82, 126, 0, 126]),
            (65535, vec![0x82, 126, 0xFF, 0xFF]),
            (65536, vec![0x82, 127, 0, 0, 0, 0, 0, 1, 0, 0]),
        ] {
            let header = FrameHeader {
                fin: true,
                rsv1: false,
                rsv2_or_rsv3: false,
                opcode: Opcode::Binary,
                mask: None,
                payload_length: length,
            };
            let mut out = Vec::new();
            header.write(&mut out);
            assert_eq!(out, header_bytes, "{length}");
            assert_eq!(header_length([out[0], out[1]]), out.len());
            assert_eq!(FrameHeader::parse(&out), Ok(header));
        }
    }

    #[test]
    fn header_refusals() {
        use super::super::WsError::Protocol;
        assert_eq!(
            FrameHeader::parse(&[0x83, 0]),
            Err(Protocol("reserved opcode"))
        );
        assert_eq!(
            FrameHeader::parse(&[0x8B, 0]),
            Err(Protocol("reserved opcode"))
        );
        assert_eq!(
            FrameHeader::parse(&[0x09, 0]),
            Err(Protocol("fragmented control frame"))
        );
        assert_eq!(
            FrameHeader::parse(&[0x89, 126, 0, 126]),
            Err(Protocol("control frame payload over 125 bytes"))
        );
        assert_eq!(
            FrameHeader::parse(&[0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 0]),
            Err(Protocol("64-bit payload length with the top bit set"))
        );
        // Non-minimal lengths are allowed (RFC 6455 does not require minimal ones).
        let header = FrameHeader::parse(&[0x82, 127, 0, 0, 0, 0, 0, 0, 0, 5]).unwrap();
        assert_eq!(header.payload_length, 5);
    }

    #[test]
    fn masking_at_any_offset_matches_bytewise_masking() {
        let mask = [0x37, 0xfa, 0x21, 0x3d];
        let data: Vec<u8> = (0..37).collect();
        for offset in 0..8u64 {
            let mut masked = data.clone();
            apply_mask(&mut masked, mask, offset);
            for (index, byte) in masked.iter().enumerate() {
                let key = mask[((offset as usize) + index) % 4];
                assert_eq!(*byte, data[index] ^ key);
            }
        }
        // The RFC 6455 5.7 example: a masked "Hello".
        let mut hello = *b"Hello";
        apply_mask(&mut hello, mask, 0);
        assert_eq!(hello, [0x7f, 0x9f, 0x4d, 0x51, 0x58]);
    }

    #[test]
    fn server_frames_are_unmasked_and_control_limits_hold() {
        let mut encoder = MessageEncoder::new(Role::Server, None);
        let mut out = Vec::new();
        encoder.message(&mut out, MessageKind::Text, b"Hello");
        assert_eq!(out, b"\x81\x05Hello");
        out.clear();
        encoder.set_max_frame_payload(NonZeroUsize::new(3));
        encoder.message(&mut out, MessageKind::Text, b"Hello");
        assert_eq!(out, b"\x01\x03Hel\x80\x02lo");
        out.clear();
        encoder.message(&mut out, MessageKind::Binary, b"");
        assert_eq!(out, b"\x82\x00");
        out.clear();
        encoder.ping(&mut out, b"Hello").unwrap();
        assert_eq!(out, b"\x89\x05Hello");
        assert_eq!(
            encoder.pong(&mut out, &[0; 126]),
            Err(FrameError::ControlPayloadTooLong)
        );
        out.clear();
        encoder.close(&mut out, Some(1000), "bye").unwrap();
        assert_eq!(out, b"\x88\x05\x03\xe8bye");
        out.clear();
        encoder.close(&mut out, None, "").unwrap();
        assert_eq!(out, b"\x88\x00");
        for bad in [1005, 1006, 1015, 999, 5000] {
            assert_eq!(
                encoder.close(&mut out, Some(bad), ""),
                Err(FrameError::InvalidCloseCode)
            );
        }
        assert_eq!(
            encoder.close(&mut out, None, "x"),
            Err(FrameError::InvalidCloseCode)
        );
        let long = "x".repeat(124);
        assert_eq!(
            encoder.close(&mut out, Some(1000), &long),
            Err(FrameError::ControlPayloadTooLong)
        );
        out.clear();
        encoder.close(&mut out, Some(1000), &long[..123]).unwrap();
        assert_eq!(out.len(), 2 + 125);
    }

    #[test]
    fn client_frames_are_masked() {
        let mut encoder = MessageEncoder::new(Role::Client, None);
        encoder.set_mask_key([0x37, 0xfa, 0x21, 0x3d]);
        let mut out = Vec::new();
        encoder.message(&mut out, MessageKind::Text, b"Hello");
        // RFC 6455 5.7: a single-frame masked text message.
        assert_eq!(
            out,
            [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58]
        );
    }
}
