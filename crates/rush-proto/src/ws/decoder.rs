//! Received bytes to messages and control frames (RFC 6455 5, RFC 7692 6).
//!
//! [`MessageDecoder::decode`] is fed whatever bytes arrived. It consumes
//! them as far as it can and stops at the end of the input or right after
//! the next thing to report: a whole data message (its payload appended to
//! the caller's vector) or a control frame. A frame header that arrives in
//! pieces is collected in a 14-byte array; payload bytes are processed as
//! they come, unmasked in place where they land (the caller's message
//! vector, or a 125-byte array for control frames), so a large frame never
//! waits for its end to be checked, and an invalid byte in a text message
//! fails the connection as soon as it arrives (Autobahn 6.x).
//!
//! Rules, and the close code each breach fails the connection with:
//! * 1002: a reserved opcode; RSV2 or RSV3 set; RSV1 set without
//!   permessage-deflate, or on a continuation or control frame; an unmasked
//!   frame from a client (or a masked one from a server); a control frame
//!   that is fragmented or longer than 125 bytes; a continuation frame with
//!   no message under way; a new text or binary frame inside an unfinished
//!   message; a 64-bit length with its top bit set; a close payload of one
//!   byte or with a code not allowed on the wire.
//! * 1007: text (or a close reason) that is not UTF-8; compressed data that
//!   does not inflate.
//! * 1009: a message longer than `max_message_size` bytes (after
//!   inflating). An uncompressed frame that would take the message over is
//!   refused from its header, before its payload arrives; inflated output
//!   as soon as it passes the limit. A compressed message may be a little
//!   longer on the wire than inflated (stored blocks add 5 bytes per 64 KiB),
//!   so its compressed bytes are held to [`compressed_limit`] instead, from
//!   each frame's header: enough for any real deflate stream, and it stops a
//!   peer from sending compressed bytes that inflate to nothing forever.
//!
//! Control frames may arrive between the fragments of a message; they are
//! reported without disturbing the message being assembled. After an
//! error the decoder is dead: every later call returns the same error.

use super::close::parse_close_payload;
use super::deflate::{Decompressor, DeflateParams};
use super::frame::{
    apply_mask, header_length, FrameHeader, Opcode, MAX_CONTROL_PAYLOAD, MAX_HEADER_LENGTH,
};
use super::utf8::Utf8Validator;
use super::{MessageKind, Role, WsError};

/// The payload of a control frame (at most 125 bytes), kept inline so that
/// reporting one never allocates.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ControlPayload {
    bytes: [u8; MAX_CONTROL_PAYLOAD],
    len: u8,
}

impl ControlPayload {
    /// An empty payload.
    pub const EMPTY: ControlPayload = ControlPayload {
        bytes: [0; MAX_CONTROL_PAYLOAD],
        len: 0,
    };

    /// A payload holding `data`, cut at 125 bytes.
    pub fn new(data: &[u8]) -> ControlPayload {
        let mut payload = ControlPayload::EMPTY;
        let len = data.len().min(MAX_CONTROL_PAYLOAD);
        payload.bytes[..len].copy_from_slice(&data[..len]);
        payload.len = len as u8;
        payload
    }

    /// The payload bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// The payload as text; empty if it is not UTF-8 (close reasons
    /// reported by the decoder always are).
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

impl std::fmt::Debug for ControlPayload {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            formatter,
            "ControlPayload({:?})",
            String::from_utf8_lossy(self.as_bytes())
        )
    }
}

/// Something the peer sent, complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming {
    /// A whole data message; its payload was appended to the caller's vector
    /// (for text, valid UTF-8; inflated if it was compressed).
    Message(MessageKind),
    /// A ping; the answer is a pong with the same payload.
    Ping(ControlPayload),
    /// A pong (the answer to a ping, or unsolicited: a heartbeat).
    Pong(ControlPayload),
    /// A close frame: its code (`None` for an empty payload, which
    /// applications see as 1005) and reason (valid UTF-8).
    Close {
        /// The status code, already checked to be allowed on the wire.
        code: Option<u16>,
        /// The reason text after the code (empty when none).
        reason: ControlPayload,
    },
}

/// What one call to [`MessageDecoder::decode`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Input bytes consumed; the caller drops them from its buffer.
    pub consumed: usize,
    /// What became complete, if anything; decoding stopped right after it,
    /// so call again with the rest of the input.
    pub incoming: Option<Incoming>,
}

/// The data message being assembled.
#[derive(Debug, Clone, Copy)]
struct Assembling {
    kind: MessageKind,
    compressed: bool,
    /// Payload bytes of the message so far (after inflating).
    size: usize,
    /// Payload bytes of its frames so far, as sent (compressed).
    wire_size: u64,
}

/// How many compressed bytes a message of at most `max_message_size`
/// bytes may take: an eighth more, plus 1 KiB. Deflate's worst case
/// (stored blocks) adds 5 bytes per 65,535, far less.
pub fn compressed_limit(max_message_size: usize) -> u64 {
    let max = max_message_size as u64;
    max.saturating_add(max / 8).saturating_add(1024)
}

/// Decodes the frames one end receives. One per connection.
#[derive(Debug)]
pub struct MessageDecoder {
    role: Role,
    max_message_size: usize,
    /// Bytes of the current frame header collected so far.
    header: [u8; MAX_HEADER_LENGTH],
    header_have: usize,
    /// The current frame, once its header is complete.
    frame: Option<FrameHeader>,
    /// Payload bytes of the current frame processed so far.
    frame_position: u64,
    message: Option<Assembling>,
    utf8: Utf8Validator,
    control: ControlPayload,
    decompressor: Option<Decompressor>,
    /// Unmasked compressed bytes waiting to be inflated (deflate only).
    scratch: Vec<u8>,
    failed: Option<WsError>,
}

impl MessageDecoder {
    /// A decoder for `role` (a server receives masked frames) that refuses
    /// messages over `max_message_size` bytes, inflating compressed
    /// messages when permessage-deflate was negotiated (`deflate` is `Some`).
    pub fn new(
        role: Role,
        max_message_size: usize,
        deflate: Option<&DeflateParams>,
    ) -> MessageDecoder {
        MessageDecoder {
            role,
            max_message_size,
            header: [0; MAX_HEADER_LENGTH],
            header_have: 0,
            frame: None,
            frame_position: 0,
            message: None,
            utf8: Utf8Validator::default(),
            control: ControlPayload::EMPTY,
            decompressor: deflate.map(|params| Decompressor::new(params, role)),
            scratch: Vec::new(),
            failed: None,
        }
    }

    /// Whether a fragmented data message is under way (some of its
    /// payload may already be in the caller's vector).
    pub fn in_message(&self) -> bool {
        self.message.is_some()
    }

    /// Consumes bytes from `input`, appending message payload to `payload`,
    /// until the input is used up or something is complete.
    ///
    /// The caller keeps `payload` untouched between calls while a message
    /// is under way and takes the message out once it is reported
    /// (`Incoming::Message`), typically by clearing it after use.
    pub fn decode(&mut self, input: &[u8], payload: &mut Vec<u8>) -> Result<Progress, WsError> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        let mut position = 0;
        let result = self.decode_inner(input, &mut position, payload);
        match result {
            Ok(incoming) => Ok(Progress {
                consumed: position,
                incoming,
            }),
            Err(error) => {
                self.failed = Some(error);
                if let Some(decompressor) = self.decompressor.as_mut() {
                    decompressor.abandon();
                }
                Err(error)
            }
        }
    }

    fn decode_inner(
        &mut self,
        input: &[u8],
        position: &mut usize,
        payload: &mut Vec<u8>,
    ) -> Result<Option<Incoming>, WsError> {
        loop {
            let frame = match self.frame {
                Some(frame) => frame,
                None => {
                    // Collect the header: 2 bytes say how long it is.
                    let mut needed = if self.header_have < 2 {
                        2
                    } else {
                        header_length([self.header[0], self.header[1]])
                    };
                    while self.header_have < needed {
                        if *position == input.len() {
                            return Ok(None);
                        }
                        let take = (needed - self.header_have).min(input.len() - *position);
                        self.header[self.header_have..self.header_have + take]
                            .copy_from_slice(&input[*position..*position + take]);
                        self.header_have += take;
                        *position += take;
                        if self.header_have >= 2 {
                            needed = header_length([self.header[0], self.header[1]]);
                        }
                    }
                    let frame = FrameHeader::parse(&self.header[..needed])?;
                    self.start_frame(&frame)?;
                    self.header_have = 0;
                    self.frame = Some(frame);
                    self.frame_position = 0;
                    frame
                }
            };

            let remaining = frame.payload_length - self.frame_position;
            let available = (input.len() - *position) as u64;
            let take = remaining.min(available) as usize;
            if take > 0 {
                let piece = &input[*position..*position + take];
                self.payload_piece(&frame, piece, payload)?;
                *position += take;
                self.frame_position += take as u64;
            }
            if self.frame_position < frame.payload_length {
                return Ok(None);
            }
            self.frame = None;
            if let Some(incoming) = self.end_frame(&frame, payload)? {
                return Ok(Some(incoming));
            }
        }
    }

    /// The rules a complete header must pass on this connection, and the
    /// start of a new message.
    fn start_frame(&mut self, frame: &FrameHeader) -> Result<(), WsError> {
        use WsError::Protocol;
        if frame.rsv2_or_rsv3 {
            return Err(Protocol("RSV2 or RSV3 set"));
        }
        match (self.role, frame.mask.is_some()) {
            (Role::Server, false) => return Err(Protocol("unmasked frame from a client")),
            (Role::Client, true) => return Err(Protocol("masked frame from a server")),
            _ => {}
        }
        if frame.rsv1 {
            if self.decompressor.is_none() {
                return Err(Protocol("RSV1 set without permessage-deflate"));
            }
            if !matches!(frame.opcode, Opcode::Text | Opcode::Binary) {
                return Err(Protocol("RSV1 set on a continuation or control frame"));
            }
        }
        // Uncompressed, the frame adds its length to the message; compressed,
        // its length to the compressed bytes (inflated output is checked as
        // it is produced).
        let max = self.max_message_size;
        let too_big = |message: &Assembling| {
            if message.compressed {
                message.wire_size.saturating_add(frame.payload_length) > compressed_limit(max)
            } else {
                message.size as u64 + frame.payload_length > max as u64
            }
        };
        match frame.opcode {
            Opcode::Continuation => match self.message.as_mut() {
                None => return Err(Protocol("continuation frame without a message")),
                Some(message) if too_big(message) => return Err(WsError::TooBig),
                Some(message) => message.wire_size += frame.payload_length,
            },
            Opcode::Text | Opcode::Binary => {
                if self.message.is_some() {
                    return Err(Protocol("new data frame inside a fragmented message"));
                }
                let message = Assembling {
                    kind: if frame.opcode == Opcode::Text {
                        MessageKind::Text
                    } else {
                        MessageKind::Binary
                    },
                    compressed: frame.rsv1,
                    size: 0,
                    wire_size: frame.payload_length,
                };
                if too_big(&Assembling {
                    wire_size: 0,
                    ..message
                }) {
                    return Err(WsError::TooBig);
                }
                self.utf8.reset();
                self.message = Some(message);
            }
            Opcode::Close | Opcode::Ping | Opcode::Pong => {}
        }
        Ok(())
    }

    /// Takes the next bytes of the current frame's payload.
    fn payload_piece(
        &mut self,
        frame: &FrameHeader,
        piece: &[u8],
        payload: &mut Vec<u8>,
    ) -> Result<(), WsError> {
        let mask = frame.mask.unwrap_or([0; 4]);
        let masked = frame.mask.is_some();
        if frame.opcode.is_control() {
            let start = self.control.len as usize;
            let end = start + piece.len();
            self.control.bytes[start..end].copy_from_slice(piece);
            if masked {
                apply_mask(
                    &mut self.control.bytes[start..end],
                    mask,
                    self.frame_position,
                );
            }
            self.control.len = end as u8;
            return Ok(());
        }
        let message = self
            .message
            .as_mut()
            .expect("start_frame opened a message for every data frame");
        let is_text = message.kind == MessageKind::Text;
        let utf8 = &mut self.utf8;
        let mut check = |output: &[u8]| check_text(utf8, is_text, output);
        if message.compressed {
            self.scratch.clear();
            self.scratch.extend_from_slice(piece);
            if masked {
                apply_mask(&mut self.scratch, mask, self.frame_position);
            }
            self.decompressor
                .as_mut()
                .expect("compressed messages need a negotiated decompressor")
                .inflate(
                    &self.scratch,
                    payload,
                    &mut message.size,
                    self.max_message_size,
                    &mut check,
                )?;
        } else {
            let start = payload.len();
            payload.extend_from_slice(piece);
            if masked {
                apply_mask(&mut payload[start..], mask, self.frame_position);
            }
            message.size += piece.len();
            check(&payload[start..])?;
        }
        Ok(())
    }

    /// Finishes a frame whose payload is complete; returns what to report.
    fn end_frame(
        &mut self,
        frame: &FrameHeader,
        payload: &mut Vec<u8>,
    ) -> Result<Option<Incoming>, WsError> {
        let incoming = match frame.opcode {
            Opcode::Ping => Some(Incoming::Ping(self.control)),
            Opcode::Pong => Some(Incoming::Pong(self.control)),
            Opcode::Close => {
                let code = parse_close_payload(self.control.as_bytes())?;
                let reason = match code {
                    Some(_) => ControlPayload::new(&self.control.as_bytes()[2..]),
                    None => ControlPayload::EMPTY,
                };
                Some(Incoming::Close { code, reason })
            }
            Opcode::Text | Opcode::Binary | Opcode::Continuation => {
                if !frame.fin {
                    return Ok(None);
                }
                let mut message = self
                    .message
                    .take()
                    .expect("a data frame belongs to a message");
                let is_text = message.kind == MessageKind::Text;
                if message.compressed {
                    // The copy of a large frame is not kept for the next
                    // message (an idle connection holds no large buffer).
                    if self.scratch.capacity() > 16 * 1024 {
                        self.scratch = Vec::new();
                    }
                    let utf8 = &mut self.utf8;
                    self.decompressor
                        .as_mut()
                        .expect("compressed messages need a negotiated decompressor")
                        .finish_message(
                            payload,
                            &mut message.size,
                            self.max_message_size,
                            &mut |output: &[u8]| check_text(utf8, is_text, output),
                        )?;
                }
                if is_text {
                    self.utf8
                        .finish()
                        .map_err(|_| WsError::InvalidPayload("text message is not UTF-8"))?;
                }
                Some(Incoming::Message(message.kind))
            }
        };
        self.control.len = 0;
        Ok(incoming)
    }
}

/// Validates the next bytes of a message's payload if it is text.
fn check_text(utf8: &mut Utf8Validator, is_text: bool, bytes: &[u8]) -> Result<(), WsError> {
    if is_text {
        utf8.feed(bytes)
            .map_err(|_| WsError::InvalidPayload("text message is not UTF-8"))?;
    }
    Ok(())
}
