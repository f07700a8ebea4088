//! A resumable decoder for `Transfer-Encoding: chunked` request bodies.
//!
//! The decoder is a small state machine fed whatever bytes have arrived; it
//! consumes as much as it can, appends decoded data to the caller's vector,
//! and remembers where it stopped, so a body split at any offset decodes the
//! same. Chunk extensions and trailer fields are parsed for framing and then
//! ignored (their sizes are bounded), except that a trailer field a
//! recipient must not take from a trailer (RFC 9110 section 6.5.1: framing,
//! routing, request modifiers, authentication, response control data, how
//! to process the content; see [`trailers::FORBIDDEN_TRAILER_FIELDS`]) is refused in
//! a request: a peer that merges trailers into the header section (an
//! origin behind the proxy, a framework) would let it stand in for a header
//! that was checked. A proxy relays a response's trailers as they are
//! ([`ChunkedDecoder::for_response`]).
//!
//! The grammar enforced is RFC 9112 section 7.1, strictly:
//!
//! ```text
//! chunked-body   = *chunk last-chunk trailer-section CRLF
//! chunk          = chunk-size [ chunk-ext ] CRLF chunk-data CRLF
//! chunk-size     = 1*HEXDIG
//! chunk-ext      = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
//! chunk-ext-name = token
//! chunk-ext-val  = token / quoted-string
//! quoted-string  = DQUOTE *( qdtext / quoted-pair ) DQUOTE
//! ```
//!
//! Every line ends in CRLF; a bare CR or a bare LF is refused, because
//! peers that disagree on where a line ends disagree on where a body ends.
//! Whitespace (`BWS`) is only accepted where the grammar puts it: before a
//! `;`, around `=`, after a `;`; so `5 \r\n` and `5;a \r\n` are refused like
//! any other trailing garbage. Extensions are checked against the grammar
//! above, although rush ignores them: a peer that reads a malformed
//! extension differently (where a quoted string ends, say) reads a
//! different size line, and the strict answer to that is to refuse.
//!
//! Chunk data is copied in bulk; only the framing bytes (size lines, CRLFs,
//! trailers) go through the byte-at-a-time state machine.

#[cfg(test)]
mod tests;
mod trailers;

pub use trailers::FORBIDDEN_TRAILER_FIELDS;

use crate::response::{is_field_value_character, is_token_character};
use crate::{Limits, ProtoError};
use trailers::LONGEST_FORBIDDEN_NAME;

/// What one call to [`ChunkedDecoder::decode`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedProgress {
    /// How many input bytes were consumed; the caller drops them from its buffer.
    pub consumed: usize,
    /// The last chunk and the trailer section have been read: the body is complete,
    /// and any input after `consumed` belongs to the next request.
    pub done: bool,
}

/// Where the decoder is in the chunked grammar; it stops between any two bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In the hex digits of a chunk size (possibly before the first one).
    Size,
    /// After the size, in whitespace that must lead to a `;`.
    SizeWhitespace,
    /// In the chunk extensions, up to the CR; where exactly is the [`Extension`].
    Extension(Extension),
    /// The CR of the chunk-size line was read; its LF must follow.
    SizeLineFeed,
    /// Copying the data of the current chunk.
    Data,
    /// The CR that must follow chunk data.
    DataCarriageReturn,
    /// The LF that must follow chunk data.
    DataLineFeed,
    /// At the start of a trailer field line or of the final empty line.
    TrailerLineStart,
    /// In a trailer field name, up to the colon.
    TrailerName,
    /// In a trailer field value, up to the CR.
    TrailerValue,
    /// The CR of a trailer field line was read; its LF must follow.
    TrailerLineFeed,
    /// The CR of the final empty line was read; its LF ends the body.
    FinalLineFeed,
    /// The body is complete.
    Done,
    /// A refusal was returned; it is returned again on every later call.
    Failed(ProtoError),
}

/// Where the decoder is inside the chunk extensions of a size line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extension {
    /// After a `;`, in optional whitespace before the name.
    BeforeName,
    /// In a name (a token).
    Name,
    /// In whitespace after a name: `=` or `;` must come.
    AfterName,
    /// After `=`, in optional whitespace before the value.
    BeforeValue,
    /// In a token value.
    TokenValue,
    /// Inside a quoted-string value.
    QuotedValue,
    /// After a backslash inside a quoted-string: one escaped byte follows.
    QuotedPair,
    /// Right after the closing quote of a value.
    AfterQuote,
    /// In whitespace after a value: `;` must come.
    AfterValue,
}

/// Decodes one chunked body. Create one per request.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    /// The chunk size read so far (then the size of the current chunk).
    chunk_size: u64,
    /// Whether the current chunk-size line has at least one hex digit.
    has_size_digit: bool,
    /// Bytes of the current chunk-size line so far, CRLF excluded.
    size_line_length: usize,
    /// Bytes of the current chunk still to copy.
    remaining_in_chunk: u64,
    /// Bytes appended to the caller's body so far.
    decoded: u64,
    /// Bytes of trailer field lines so far, their CRLFs included.
    trailer_length: usize,
    /// The current trailer field name, lowercased, as far as it could still
    /// be a forbidden one (a longer name cannot be).
    trailer_name: [u8; LONGEST_FORBIDDEN_NAME],
    /// Length of the current trailer field name (it may exceed the array).
    trailer_name_length: usize,
    /// Refuse [`trailers::FORBIDDEN_TRAILER_FIELDS`] (requests); a response's
    /// trailers are relayed as they are (see [`ChunkedDecoder::for_response`]).
    refuse_forbidden_trailers: bool,
    max_body_size: u64,
    max_chunk_line: usize,
    max_trailer_size: usize,
}

const CHUNK_SIZE_OVERFLOW: ProtoError = ProtoError::BadRequest("chunk size too large");
const INVALID_CHUNK_SIZE: ProtoError = ProtoError::BadRequest("invalid chunk size");
const MISSING_CHUNK_SIZE: ProtoError = ProtoError::BadRequest("missing chunk size");
const CHUNK_LINE_TOO_LONG: ProtoError = ProtoError::BadRequest("chunk size line too long");
const INVALID_CHUNK_EXTENSION: ProtoError = ProtoError::BadRequest("invalid chunk extension");
const MISSING_CRLF_AFTER_DATA: ProtoError = ProtoError::BadRequest("missing CRLF after chunk data");
const BARE_CR: ProtoError = ProtoError::BadRequest("bare CR in chunked body");
const BARE_LF: ProtoError = ProtoError::BadRequest("bare LF in chunked body");
const INVALID_TRAILER_NAME: ProtoError = ProtoError::BadRequest("invalid trailer field name");
const INVALID_TRAILER_VALUE: ProtoError = ProtoError::BadRequest("invalid trailer field value");
const TRAILER_LINE_FOLDING: ProtoError = ProtoError::BadRequest("obsolete line folding in trailer");
const FORBIDDEN_TRAILER: ProtoError = ProtoError::BadRequest(
    "a field that must not be sent in a trailer (framing, routing, authentication...)",
);

impl ChunkedDecoder {
    /// A decoder that refuses bodies whose decoded size exceeds `limits.max_body_size` (413),
    /// chunk-size lines longer than `limits.max_chunk_line` (400) and trailer
    /// sections over `limits.max_trailer_size` (431).
    ///
    /// The body limit is checked against each declared chunk size as soon as
    /// its size line is complete, before any of its data is copied.
    pub fn new(limits: &Limits) -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size,
            chunk_size: 0,
            has_size_digit: false,
            size_line_length: 0,
            remaining_in_chunk: 0,
            decoded: 0,
            trailer_length: 0,
            trailer_name: [0; LONGEST_FORBIDDEN_NAME],
            trailer_name_length: 0,
            refuse_forbidden_trailers: true,
            max_body_size: limits.max_body_size,
            max_chunk_line: limits.max_chunk_line,
            max_trailer_size: limits.max_trailer_size,
        }
    }

    /// A decoder for a response body relayed by a proxy: as [`new`](Self::new),
    /// but any trailer field is accepted. What an origin puts in its
    /// trailers is its client's business; failing the response mid-body
    /// would only truncate it.
    pub fn for_response(limits: &Limits) -> ChunkedDecoder {
        ChunkedDecoder {
            refuse_forbidden_trailers: false,
            ..ChunkedDecoder::new(limits)
        }
    }

    /// Consumes bytes from `input`, appending decoded body data to `body`.
    ///
    /// Errors (400 unless said otherwise): a chunk size that is not hex or overflows
    /// u64, chunk extensions outside their grammar, a missing CRLF after chunk data, bare CR or bare LF in a chunk-size line or
    /// trailer line, body over the limit (413), trailers too large (431).
    ///
    /// Once the body is complete, nothing more is consumed (`consumed` stops
    /// right after the final CRLF). After an error the decoder is dead: every
    /// later call returns the same error.
    pub fn decode(
        &mut self,
        input: &[u8],
        body: &mut Vec<u8>,
    ) -> Result<ChunkedProgress, ProtoError> {
        let mut position = 0;
        while position < input.len() {
            match self.state {
                State::Data => position += self.copy_data(&input[position..], body),
                State::Done => break,
                State::Failed(error) => return Err(error),
                _ => {
                    let byte = input[position];
                    position += 1;
                    if let Err(error) = self.step(byte) {
                        self.state = State::Failed(error);
                        return Err(error);
                    }
                }
            }
        }
        if let State::Failed(error) = self.state {
            return Err(error);
        }
        Ok(ChunkedProgress {
            consumed: position,
            done: self.state == State::Done,
        })
    }

    /// Total decoded bytes so far.
    pub fn decoded_len(&self) -> u64 {
        self.decoded
    }

    /// Copies as much of the current chunk as `available` holds; returns how
    /// many bytes it took.
    #[inline]
    fn copy_data(&mut self, available: &[u8], body: &mut Vec<u8>) -> usize {
        let take = match usize::try_from(self.remaining_in_chunk) {
            Ok(remaining) => remaining.min(available.len()),
            Err(_) => available.len(),
        };
        body.extend_from_slice(&available[..take]);
        self.remaining_in_chunk -= take as u64;
        self.decoded += take as u64;
        if self.remaining_in_chunk == 0 {
            self.state = State::DataCarriageReturn;
        }
        take
    }

    /// Advances the state machine over one framing byte.
    fn step(&mut self, byte: u8) -> Result<(), ProtoError> {
        match self.state {
            State::Size => {
                self.count_size_line_byte(byte)?;
                if let Some(digit) = hex_digit_value(byte) {
                    // Refuse before shifting would drop high bits.
                    if self.chunk_size > u64::MAX >> 4 {
                        return Err(CHUNK_SIZE_OVERFLOW);
                    }
                    self.chunk_size = (self.chunk_size << 4) | u64::from(digit);
                    self.has_size_digit = true;
                    return Ok(());
                }
                if !self.has_size_digit {
                    return Err(match byte {
                        b'\r' | b';' => MISSING_CHUNK_SIZE,
                        b'\n' => BARE_LF,
                        _ => INVALID_CHUNK_SIZE,
                    });
                }
                self.state = match byte {
                    b'\r' => State::SizeLineFeed,
                    b';' => State::Extension(Extension::BeforeName),
                    b' ' | b'\t' => State::SizeWhitespace,
                    b'\n' => return Err(BARE_LF),
                    _ => return Err(INVALID_CHUNK_SIZE),
                };
            }
            State::SizeWhitespace => {
                self.count_size_line_byte(byte)?;
                match byte {
                    b' ' | b'\t' => {}
                    b';' => self.state = State::Extension(Extension::BeforeName),
                    b'\n' => return Err(BARE_LF),
                    _ => return Err(INVALID_CHUNK_SIZE),
                }
            }
            State::Extension(position) => {
                self.count_size_line_byte(byte)?;
                if byte == b'\n' {
                    return Err(BARE_LF);
                }
                self.state = next_extension_state(position, byte).ok_or(INVALID_CHUNK_EXTENSION)?;
            }
            State::SizeLineFeed => {
                if byte != b'\n' {
                    return Err(BARE_CR);
                }
                self.finish_size_line()?;
            }
            State::DataCarriageReturn => {
                if byte != b'\r' {
                    return Err(MISSING_CRLF_AFTER_DATA);
                }
                self.state = State::DataLineFeed;
            }
            State::DataLineFeed => {
                if byte != b'\n' {
                    return Err(MISSING_CRLF_AFTER_DATA);
                }
                self.start_size_line();
            }
            State::TrailerLineStart => match byte {
                b'\r' => self.state = State::FinalLineFeed,
                b'\n' => return Err(BARE_LF),
                b' ' | b'\t' => return Err(TRAILER_LINE_FOLDING),
                _ if is_token_character(byte) => {
                    self.count_trailer_byte()?;
                    self.trailer_name_length = 0;
                    self.push_trailer_name_byte(byte);
                    self.state = State::TrailerName;
                }
                _ => return Err(INVALID_TRAILER_NAME),
            },
            State::TrailerName => {
                self.count_trailer_byte()?;
                match byte {
                    b':' if self.trailer_name_is_forbidden() => return Err(FORBIDDEN_TRAILER),
                    b':' => self.state = State::TrailerValue,
                    _ if is_token_character(byte) => self.push_trailer_name_byte(byte),
                    _ => return Err(INVALID_TRAILER_NAME),
                }
            }
            State::TrailerValue => {
                self.count_trailer_byte()?;
                match byte {
                    b'\r' => self.state = State::TrailerLineFeed,
                    b'\n' => return Err(BARE_LF),
                    _ if is_field_value_character(byte) => {}
                    _ => return Err(INVALID_TRAILER_VALUE),
                }
            }
            State::TrailerLineFeed => {
                self.count_trailer_byte()?;
                if byte != b'\n' {
                    return Err(BARE_CR);
                }
                self.state = State::TrailerLineStart;
            }
            State::FinalLineFeed => {
                if byte != b'\n' {
                    return Err(BARE_CR);
                }
                self.state = State::Done;
            }
            // `decode` handles these without calling `step`.
            State::Data | State::Done | State::Failed(_) => {
                unreachable!("step called in state {:?}", self.state)
            }
        }
        Ok(())
    }

    /// Counts one byte of a chunk-size line (anything before its CR, and the CR).
    #[inline]
    fn count_size_line_byte(&mut self, byte: u8) -> Result<(), ProtoError> {
        if byte != b'\r' {
            self.size_line_length += 1;
            if self.size_line_length > self.max_chunk_line {
                return Err(CHUNK_LINE_TOO_LONG);
            }
        }
        Ok(())
    }

    fn push_trailer_name_byte(&mut self, byte: u8) {
        if let Some(slot) = self.trailer_name.get_mut(self.trailer_name_length) {
            *slot = byte.to_ascii_lowercase();
        }
        self.trailer_name_length += 1;
    }

    fn trailer_name_is_forbidden(&self) -> bool {
        if !self.refuse_forbidden_trailers {
            return false;
        }
        let Some(name) = self.trailer_name.get(..self.trailer_name_length) else {
            return false;
        };
        trailers::is_forbidden(name)
    }

    /// Counts one byte of a trailer field line against the trailer limit.
    #[inline]
    fn count_trailer_byte(&mut self) -> Result<(), ProtoError> {
        self.trailer_length += 1;
        if self.trailer_length > self.max_trailer_size {
            return Err(ProtoError::HeadersTooLarge);
        }
        Ok(())
    }

    /// The CRLF of a chunk-size line was read: start the chunk's data, or the
    /// trailers after the last chunk.
    fn finish_size_line(&mut self) -> Result<(), ProtoError> {
        if self.chunk_size == 0 {
            self.state = State::TrailerLineStart;
            return Ok(());
        }
        let declared_total = self.decoded.checked_add(self.chunk_size);
        if declared_total.is_none_or(|total| total > self.max_body_size) {
            return Err(ProtoError::PayloadTooLarge);
        }
        self.remaining_in_chunk = self.chunk_size;
        self.state = State::Data;
        Ok(())
    }

    fn start_size_line(&mut self) {
        self.chunk_size = 0;
        self.has_size_digit = false;
        self.size_line_length = 0;
        self.state = State::Size;
    }
}

/// The state after `byte` in the extensions, or `None` if the grammar has
/// no place for it there. A CR ends the size line only after a complete
/// name or value.
fn next_extension_state(position: Extension, byte: u8) -> Option<State> {
    use Extension::*;
    let whitespace = matches!(byte, b' ' | b'\t');
    let token = is_token_character(byte);
    let next = match position {
        BeforeName if whitespace => BeforeName,
        BeforeName | Name if token => Name,
        Name | AfterName if whitespace => AfterName,
        Name | AfterName if byte == b'=' => BeforeValue,
        BeforeValue if whitespace => BeforeValue,
        BeforeValue if byte == b'"' => QuotedValue,
        BeforeValue | TokenValue if token => TokenValue,
        // qdtext: HTAB, SP, VCHAR except DQUOTE and backslash, obs-text.
        QuotedValue if byte == b'"' => AfterQuote,
        QuotedValue if byte == b'\\' => QuotedPair,
        QuotedValue if is_field_value_character(byte) => QuotedValue,
        // quoted-pair: a backslash and HTAB, SP, VCHAR or obs-text.
        QuotedPair if is_field_value_character(byte) => QuotedValue,
        TokenValue | AfterQuote | AfterValue if whitespace => AfterValue,
        Name | AfterName | TokenValue | AfterQuote | AfterValue if byte == b';' => BeforeName,
        Name | TokenValue | AfterQuote if byte == b'\r' => return Some(State::SizeLineFeed),
        _ => return None,
    };
    Some(State::Extension(next))
}

fn hex_digit_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}
