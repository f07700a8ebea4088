//! permessage-deflate (RFC 7692): negotiation, compression, decompression.
//!
//! **Negotiation.** The client offers the extension, possibly several times
//! with different parameters, in `Sec-WebSocket-Extensions`; the server
//! accepts the first offer it can honour ([`DeflateConfig::negotiate`]) and
//! answers with the parameters both ends will use ([`DeflateParams`]). An
//! offer with an unknown or repeated parameter or an invalid value is
//! declined (RFC 7692 5).
//!
//! An 8-bit window (256 bytes) needs care: zlib (and zlib-rs) cannot
//! compress raw deflate with one (it silently uses 512 bytes, and a
//! back-reference 300 bytes back would break a client inflating with 256).
//! A window limits how far back-references reach, so an end asked for 8
//! bits sends *stored* blocks (compression level 0), which have none: the
//! offer is honoured exactly, at the cost of compression. Autobahn offers
//! `server_max_window_bits=8` in cases 13.3 and 13.5; declining would leave
//! them unimplemented.
//!
//! Windows default to 12 bits (4 KiB) in both directions, as the websockets
//! library tunes them, instead of deflate's 15 (32 KiB). The client's window
//! can only be limited if its offer says it accepts a limit
//! (`client_max_window_bits`); otherwise it may use 15 bits.
//!
//! **Memory.** A zlib-rs compressor costs about 300 KB (a fixed 128 KiB
//! hash table, and flate2 exposes no memory level), so one per connection
//! cost 3 GB at 10,000 connections. By default the server therefore
//! answers every offer with `server_no_context_takeover` and
//! `client_no_context_takeover` (RFC 7692 lets a server add both): no
//! stream state outlives a message, so a message is compressed with the
//! thread's shared compressor for its window and level (compressing a
//! message is one call, never interleaved with another), and a
//! connection's decompressor exists only while a compressed message is
//! arriving (its frames may interleave with other connections'), dropped
//! at the message's end. An idle connection holds no deflate state; the
//! price is the ratio on small similar messages, which context takeover
//! would have compressed against each other. A `DeflateConfig` that keeps
//! context takeover gets a compressor and decompressor per connection.
//!
//! **Backend.** flate2 with its `zlib-rs` feature: `Compress` and
//! `Decompress::new_with_window_bits` exist only with a zlib-style backend
//! (the default miniz_oxide backend always uses a 32 KiB window, which
//! would break a negotiated smaller one), and zlib-rs is that backend in
//! Rust, so no C library or build step is added. zlib-rs uses memory level
//! 8 (flate2 has no knob for it).
//!
//! **Messages.** A compressed message is the deflate stream of its payload,
//! flushed with a sync flush, minus the `00 00 FF FF` that the flush ends
//! with (RFC 7692 7.2.1); the receiver appends those four bytes back before
//! the last inflate (7.2.2). With context takeover the stream (and its
//! window) continues from message to message; without it, it is reset after
//! every message. Inflating is bounded: the output is produced into a
//! window of at most the remaining message budget plus one byte, so a
//! "zip bomb" is stopped as soon as it exceeds the maximum message size,
//! never after.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::extension::ExtensionOffer;
use super::{Role, WsError};

/// The extension's name in `Sec-WebSocket-Extensions`.
pub const EXTENSION_NAME: &[u8] = b"permessage-deflate";

/// What the server is willing to negotiate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateConfig {
    /// The largest window the server compresses with, 9..=15 (default 12).
    /// A client offer with a smaller `server_max_window_bits` lowers it
    /// (down to 8, which means sending stored blocks).
    pub server_max_window_bits: u8,
    /// The window asked of the client, 8..=15 (default 12), when its offer
    /// allows a limit.
    pub client_max_window_bits: u8,
    /// Reset the compressor after every message even if the client did not
    /// ask (saves the memory of the window between messages, costs ratio).
    pub server_no_context_takeover: bool,
    /// Ask the client to reset its compressor after every message, so the
    /// server's decompressor keeps no window between messages.
    pub client_no_context_takeover: bool,
    /// zlib compression level 0..=9 (default 6).
    pub level: u32,
}

impl Default for DeflateConfig {
    fn default() -> Self {
        DeflateConfig {
            server_max_window_bits: 12,
            client_max_window_bits: 12,
            server_no_context_takeover: true,
            client_no_context_takeover: true,
            level: 6,
        }
    }
}

/// The parameters both ends use once an offer was accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeflateParams {
    /// The server resets its compressor after every message.
    pub server_no_context_takeover: bool,
    /// The client resets its compressor after every message.
    pub client_no_context_takeover: bool,
    /// The server's compression window, 8..=15 (8: stored blocks only).
    pub server_max_window_bits: u8,
    /// The client's compression window, 8..=15 (15 when not limited).
    pub client_max_window_bits: u8,
    /// The server's compression level (not sent to the client).
    pub level: u32,
}

impl DeflateConfig {
    /// Accepts the first permessage-deflate offer that can be honoured, or
    /// `None` (then the connection runs without compression). Offers of
    /// other extensions are skipped.
    pub fn negotiate<'a>(
        &self,
        offers: impl IntoIterator<Item = ExtensionOffer<'a>>,
    ) -> Option<DeflateParams> {
        offers
            .into_iter()
            .filter(|offer| offer.name.eq_ignore_ascii_case(EXTENSION_NAME))
            .find_map(|offer| self.accept(&offer))
    }

    fn accept(&self, offer: &ExtensionOffer<'_>) -> Option<DeflateParams> {
        let mut server_no_context_takeover = None;
        let mut client_no_context_takeover = None;
        let mut server_max_window_bits = None;
        let mut client_max_window_bits: Option<Option<u8>> = None;
        for param in offer.params() {
            let (name, value) = param.ok()?;
            // Each parameter at most once (RFC 7692 7: otherwise decline).
            let (slot_taken, allows_value) =
                if name.eq_ignore_ascii_case(b"server_no_context_takeover") {
                    (server_no_context_takeover.replace(()).is_some(), false)
                } else if name.eq_ignore_ascii_case(b"client_no_context_takeover") {
                    (client_no_context_takeover.replace(()).is_some(), false)
                } else if name.eq_ignore_ascii_case(b"server_max_window_bits") {
                    let bits = window_bits(value?)?;
                    (server_max_window_bits.replace(bits).is_some(), true)
                } else if name.eq_ignore_ascii_case(b"client_max_window_bits") {
                    let bits = match value {
                        Some(value) => Some(window_bits(value)?),
                        None => None,
                    };
                    (client_max_window_bits.replace(bits).is_some(), true)
                } else {
                    return None;
                };
            if slot_taken || (!allows_value && value.is_some()) {
                return None;
            }
        }
        let server_bits = self
            .server_max_window_bits
            .clamp(9, 15)
            .min(server_max_window_bits.unwrap_or(15));
        let client_bits = match client_max_window_bits {
            // The client accepts a limit: ours, or its own if smaller.
            Some(offered) => self
                .client_max_window_bits
                .clamp(8, 15)
                .min(offered.unwrap_or(15)),
            // It did not: it may use any window up to 15 bits.
            None => 15,
        };
        Some(DeflateParams {
            server_no_context_takeover: server_no_context_takeover.is_some()
                || self.server_no_context_takeover,
            client_no_context_takeover: client_no_context_takeover.is_some()
                || self.client_no_context_takeover,
            server_max_window_bits: server_bits,
            client_max_window_bits: client_bits,
            level: self.level.min(9),
        })
    }
}

/// A window size parameter value: 8..=15 in decimal, no leading zero
/// (RFC 7692 7.1.2.1: `1*DIGIT` without leading zeros).
fn window_bits(value: &[u8]) -> Option<u8> {
    match value {
        [digit @ b'8'..=b'9'] => Some(digit - b'0'),
        [b'1', digit @ b'0'..=b'5'] => Some(10 + digit - b'0'),
        _ => None,
    }
}

impl DeflateParams {
    /// Appends the extension as the server answers it in
    /// `Sec-WebSocket-Extensions`, for example
    /// `permessage-deflate; server_max_window_bits=12; client_max_window_bits=12`.
    ///
    /// `server_max_window_bits` is sent whenever it is under 15 (a server
    /// may announce a smaller window than offered); `client_max_window_bits`
    /// only when limited, which the negotiation allows only if offered.
    pub fn write_response_value(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(EXTENSION_NAME);
        if self.server_no_context_takeover {
            out.extend_from_slice(b"; server_no_context_takeover");
        }
        if self.client_no_context_takeover {
            out.extend_from_slice(b"; client_no_context_takeover");
        }
        let mut digits = itoa::Buffer::new();
        if self.server_max_window_bits < 15 {
            out.extend_from_slice(b"; server_max_window_bits=");
            out.extend_from_slice(digits.format(self.server_max_window_bits).as_bytes());
        }
        if self.client_max_window_bits < 15 {
            out.extend_from_slice(b"; client_max_window_bits=");
            out.extend_from_slice(digits.format(self.client_max_window_bits).as_bytes());
        }
    }

    /// (window bits, resets after each message) of what `role` sends.
    fn sending(&self, role: Role) -> (u8, bool) {
        match role {
            Role::Server => (self.server_max_window_bits, self.server_no_context_takeover),
            Role::Client => (self.client_max_window_bits, self.client_no_context_takeover),
        }
    }
}

/// The four bytes a sync flush ends with, stripped by the sender and
/// appended back by the receiver.
const SYNC_TAIL: [u8; 4] = [0x00, 0x00, 0xFF, 0xFF];

/// The compressing half of a connection.
#[derive(Debug)]
pub(crate) struct Compressor {
    /// The connection's own stream, with context takeover; `None` without
    /// (the thread's shared one for `settings` serves).
    own: Option<Compress>,
    settings: StreamSettings,
}

/// What a compressor is made with: zlib level and window bits (9..=15).
type StreamSettings = (u32, u8);

thread_local! {
    /// Compressors without context takeover, one per settings, shared by
    /// every connection of the thread (see the module docs).
    static SHARED_COMPRESSORS: std::cell::RefCell<Vec<(StreamSettings, Compress)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn new_compress((level, bits): StreamSettings) -> Compress {
    Compress::new_with_window_bits(Compression::new(level), false, bits)
}

impl Compressor {
    pub(crate) fn new(params: &DeflateParams, role: Role) -> Compressor {
        let (bits, reset_after_message) = params.sending(role);
        // zlib cannot compress raw deflate with an 8-bit window; stored
        // blocks (level 0) make no back-references, so they fit any window.
        let level = if bits < 9 { 0 } else { params.level };
        let settings = (level, bits.clamp(9, 15));
        Compressor {
            own: (!reset_after_message).then(|| new_compress(settings)),
            settings,
        }
    }

    /// Appends the compressed payload of one message to `out`.
    pub(crate) fn compress_message(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if let Some(stream) = &mut self.own {
            compress_message(stream, input, out);
            return;
        }
        SHARED_COMPRESSORS.with_borrow_mut(|shared| {
            let index = match shared
                .iter()
                .position(|(settings, _)| *settings == self.settings)
            {
                Some(index) => index,
                None => {
                    shared.push((self.settings, new_compress(self.settings)));
                    shared.len() - 1
                }
            };
            let stream = &mut shared[index].1;
            compress_message(stream, input, out);
            stream.reset();
        });
    }
}

/// Compresses one message with `stream` (sync flush, tail stripped).
fn compress_message(stream: &mut Compress, mut input: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    loop {
        // Deflate rarely grows data by more than a few bytes per block.
        out.reserve(input.len() / 2 + 64);
        let before = stream.total_in();
        stream
            .compress_vec(input, out, FlushCompress::Sync)
            .expect("deflate of an in-memory buffer cannot fail");
        input = &input[(stream.total_in() - before) as usize..];
        // The flush is complete once all input is taken and the output
        // was not filled to capacity (zlib's `avail_out != 0`).
        if input.is_empty() && out.len() < out.capacity() {
            break;
        }
    }
    if out[start..].ends_with(&SYNC_TAIL) {
        out.truncate(out.len() - SYNC_TAIL.len());
    } else {
        // zlib emits nothing for a flush right after a flush (an empty
        // message with context takeover): there is no tail to strip.
        debug_assert_eq!(out.len(), start, "a sync flush ends with its tail");
    }
    if out.len() == start {
        // RFC 7692 7.2.3.6: an empty message is sent as one 0x00 byte,
        // which with the tail appended is an empty stored block.
        out.push(0x00);
    }
}

/// The decompressing half of a connection.
#[derive(Debug)]
pub(crate) struct Decompressor {
    /// Made when a compressed message begins; without context takeover,
    /// dropped when it ends (an idle connection holds none).
    stream: Option<Decompress>,
    window_bits: u8,
    reset_after_message: bool,
    /// The stream of the current message had a final block; what follows
    /// it in the message is ignored and the stream is reset afterwards.
    ended: bool,
}

/// Bytes inflated per step: large enough to be efficient, small enough
/// that the zero-filling before each step stays negligible.
const INFLATE_STEP: usize = 64 * 1024;

impl Decompressor {
    pub(crate) fn new(params: &DeflateParams, role: Role) -> Decompressor {
        let peer = match role {
            Role::Server => Role::Client,
            Role::Client => Role::Server,
        };
        let (bits, reset_after_message) = params.sending(peer);
        Decompressor {
            stream: None,
            // A 9-bit window inflates what an 8-bit one compressed.
            window_bits: bits.clamp(9, 15),
            reset_after_message,
            ended: false,
        }
    }

    fn stream(&mut self) -> &mut Decompress {
        let bits = self.window_bits;
        self.stream
            .get_or_insert_with(|| Decompress::new_with_window_bits(false, bits))
    }

    /// Inflates `input` (the next compressed bytes of the message) onto
    /// `out`, adding to `size` what it appends; fails with
    /// [`WsError::TooBig`] as soon as `size` would exceed `max`.
    ///
    /// `check` sees every piece of output within the limit as soon as it
    /// is produced, before the limit or the deflate status are looked at,
    /// so whichever problem comes first in the inflated stream is the one
    /// reported, however the compressed bytes were split.
    pub(crate) fn inflate(
        &mut self,
        mut input: &[u8],
        out: &mut Vec<u8>,
        size: &mut usize,
        max: usize,
        check: &mut impl FnMut(&[u8]) -> Result<(), WsError>,
    ) -> Result<(), WsError> {
        while !self.ended {
            // One byte over the budget is enough to know the limit is broken.
            let room = (max - *size).saturating_add(1).min(INFLATE_STEP);
            let start = out.len();
            out.resize(start + room, 0);
            let stream = self.stream();
            let (before_in, before_out) = (stream.total_in(), stream.total_out());
            let status = stream.decompress(input, &mut out[start..], FlushDecompress::None);
            let used = (stream.total_in() - before_in) as usize;
            let produced = (stream.total_out() - before_out) as usize;
            out.truncate(start + produced);
            input = &input[used..];
            let within_limit = produced.min(max - *size);
            check(&out[start..start + within_limit])?;
            *size += produced;
            if *size > max {
                return Err(WsError::TooBig);
            }
            match status {
                Ok(Status::StreamEnd) => self.ended = true,
                Ok(Status::Ok) | Ok(Status::BufError) => {}
                Err(_) => return Err(WsError::InvalidPayload("invalid compressed data")),
            }
            if input.is_empty() && produced < room {
                break;
            }
            if used == 0 && produced == 0 {
                // No progress with input left: nothing more can be done.
                return Err(WsError::InvalidPayload("invalid compressed data"));
            }
        }
        Ok(())
    }

    /// Ends a message: inflates the stripped sync-flush tail, then resets
    /// the stream if there is no context takeover (or it had a final block).
    pub(crate) fn finish_message(
        &mut self,
        out: &mut Vec<u8>,
        size: &mut usize,
        max: usize,
        check: &mut impl FnMut(&[u8]) -> Result<(), WsError>,
    ) -> Result<(), WsError> {
        self.inflate(&SYNC_TAIL, out, size, max, check)?;
        if self.reset_after_message {
            self.stream = None;
        } else if self.ended {
            self.stream().reset(false);
        }
        self.ended = false;
        Ok(())
    }

    /// Forgets a message cut short by an error (the connection is failing).
    pub(crate) fn abandon(&mut self) {
        self.stream = None;
        self.ended = false;
    }
}
