//! A resumable decoder for `Transfer-Encoding: chunked` request bodies.
//!
//! The decoder is a small state machine fed whatever bytes have arrived; it
//! consumes as much as it can, appends decoded data to the caller's vector,
//! and remembers where it stopped, so a body split at any offset decodes the
//! same. Chunk extensions and trailer fields are parsed for framing and then
//! ignored (their sizes are bounded), except that a trailer field a
//! recipient must not take from a trailer (RFC 9110 section 6.5.1: framing,
//! routing, request modifiers, authentication, response control data, how
//! to process the content; see [`FORBIDDEN_TRAILER_FIELDS`]) is refused in
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

use crate::response::{is_field_value_character, is_token_character};
use crate::{Limits, ProtoError};

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
    /// Refuse [`FORBIDDEN_TRAILER_FIELDS`] (requests); a response's
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

/// Fields a trailer must not carry (lowercase), by RFC 9110 section 6.5.1's
/// categories: message framing, routing, request modifiers (controls and
/// conditionals), authentication, response control data, and how to
/// process the content; plus the connection-specific fields, which mean
/// nothing after the body.
pub const FORBIDDEN_TRAILER_FIELDS: &[&str] = &[
    // Framing.
    "content-length",
    "transfer-encoding",
    "trailer",
    // Routing.
    "host",
    // Request modifiers: controls.
    "cache-control",
    "expect",
    "max-forwards",
    "pragma",
    "range",
    "te",
    // Request modifiers: conditionals.
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    // Authentication.
    "authorization",
    "proxy-authorization",
    "www-authenticate",
    "proxy-authenticate",
    "authentication-info",
    "proxy-authentication-info",
    "cookie",
    "set-cookie",
    // Response control data.
    "age",
    "date",
    "expires",
    "location",
    "retry-after",
    "vary",
    "warning",
    // How to process the content.
    "content-encoding",
    "content-type",
    "content-range",
    "content-location",
    "content-language",
    // Connection-specific.
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
];

/// The longest name in [`FORBIDDEN_TRAILER_FIELDS`] ("proxy-authentication-info").
const LONGEST_FORBIDDEN_NAME: usize = 25;

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
        FORBIDDEN_TRAILER_FIELDS
            .iter()
            .any(|forbidden| forbidden.as_bytes() == name)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What decoding a whole input produces: the body so far, the bytes
    /// consumed and whether it finished, or the error.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Outcome {
        Decoded {
            body: Vec<u8>,
            consumed: usize,
            done: bool,
        },
        Refused(ProtoError),
    }

    fn small_limits() -> Limits {
        Limits {
            max_body_size: 64,
            max_chunk_line: 32,
            max_trailer_size: 48,
            ..Limits::default()
        }
    }

    /// Feeds `pieces` one after another, as a server would: each call gets
    /// the unconsumed rest of the earlier pieces plus the new piece.
    fn decode_in_pieces(limits: &Limits, pieces: &[&[u8]]) -> Outcome {
        let mut decoder = ChunkedDecoder::new(limits);
        let mut body = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let mut total_consumed = 0;
        let mut done = false;
        for piece in pieces {
            pending.extend_from_slice(piece);
            match decoder.decode(&pending, &mut body) {
                Ok(progress) => {
                    total_consumed += progress.consumed;
                    pending.drain(..progress.consumed);
                    done = progress.done;
                    assert_eq!(decoder.decoded_len(), body.len() as u64);
                }
                Err(error) => {
                    // The decoder stays failed.
                    assert_eq!(decoder.decode(b"0\r\n\r\n", &mut body), Err(error));
                    return Outcome::Refused(error);
                }
            }
        }
        Outcome::Decoded {
            body,
            consumed: total_consumed,
            done,
        }
    }

    fn decode_whole(limits: &Limits, input: &[u8]) -> Outcome {
        decode_in_pieces(limits, &[input])
    }

    fn complete(body: &[u8], consumed: usize) -> Outcome {
        Outcome::Decoded {
            body: body.to_vec(),
            consumed,
            done: true,
        }
    }

    fn bad(message: &'static str) -> Outcome {
        Outcome::Refused(ProtoError::BadRequest(message))
    }

    /// (input, expected outcome) for complete inputs, valid and invalid.
    fn table() -> Vec<(&'static [u8], Outcome)> {
        vec![
            (b"0\r\n\r\n", complete(b"", 5)),
            (b"5\r\nhello\r\n0\r\n\r\n", complete(b"hello", 15)),
            (
                b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
                complete(b"hello world", 26),
            ),
            (b"A\r\n0123456789\r\n0\r\n\r\n", complete(b"0123456789", 20)),
            (b"a\r\n0123456789\r\n0\r\n\r\n", complete(b"0123456789", 20)),
            (b"0005\r\nhello\r\n0\r\n\r\n", complete(b"hello", 18)),
            (b"00\r\n\r\n", complete(b"", 6)),
            // Data may contain CR, LF and anything else.
            (b"4\r\n\r\n\r\n\r\n0\r\n\r\n", complete(b"\r\n\r\n", 14)),
            // Extensions are ignored.
            (
                b"5;name=value\r\nhello\r\n0\r\n\r\n",
                complete(b"hello", 26),
            ),
            (
                b"5;a;b=\"q s\"\r\nhello\r\n0;last\r\n\r\n",
                complete(b"hello", 30),
            ),
            (b"5 ;a\r\nhello\r\n0\t; b\r\n\r\n", complete(b"hello", 22)),
            // The whole extension grammar: BWS around ';' and '=', token and
            // quoted-string values, quoted-pairs, obs-text inside quotes.
            (b"1 ; a = b ; c\r\nx\r\n0\r\n\r\n", complete(b"x", 23)),
            (b"1;a=\"\"\r\nx\r\n0\r\n\r\n", complete(b"x", 16)),
            (
                b"1;a=\"q\\\"\\\\;=\t\x80\"\r\nx\r\n0\r\n\r\n",
                complete(b"x", 25),
            ),
            (b"1;a=\"x\" ;b\r\nx\r\n0\r\n\r\n", complete(b"x", 20)),
            (
                b"1;a=\"x\";b=!#$%&'*+-.^_`|~\r\nx\r\n0\r\n\r\n",
                complete(b"x", 35),
            ),
            // Trailers are parsed and ignored.
            (
                b"5\r\nhello\r\n0\r\nChecksum: abc\r\n\r\n",
                complete(b"hello", 30),
            ),
            (b"0\r\nA: 1\r\nB:\r\nC-D:  x\ty \r\n\r\n", complete(b"", 27)),
            // Whatever follows the body is not consumed.
            (b"0\r\n\r\nGET / HTTP/1.1\r\n", complete(b"", 5)),
            (b"1\r\nx\r\n0\r\n\r\n0\r\n\r\n", complete(b"x", 11)),
            // Sizes that are not hex.
            (b"0x5\r\nhello\r\n0\r\n\r\n", bad("invalid chunk size")),
            (b"-1\r\n", bad("invalid chunk size")),
            (b"+5\r\nhello\r\n0\r\n\r\n", bad("invalid chunk size")),
            (b" 5\r\nhello\r\n0\r\n\r\n", bad("invalid chunk size")),
            (b"g\r\n", bad("invalid chunk size")),
            (b"\r\n", bad("missing chunk size")),
            (b";ext\r\n", bad("missing chunk size")),
            // Trailing garbage after the size.
            (b"5x\r\nhello\r\n0\r\n\r\n", bad("invalid chunk size")),
            (b"5 x\r\nhello\r\n0\r\n\r\n", bad("invalid chunk size")),
            (b"5 \r\nhello\r\n0\r\n\r\n", bad("invalid chunk size")),
            (b"5\0\r\nhello\r\n0\r\n\r\n", bad("invalid chunk size")),
            (b"5;a\0\r\nhello\r\n", bad("invalid chunk extension")),
            (b"5;a\x7f\r\nhello\r\n", bad("invalid chunk extension")),
            // Extensions that break the grammar.
            (b"5;\r\n", bad("invalid chunk extension")),
            (b"5; \r\n", bad("invalid chunk extension")),
            (b"5;;a\r\n", bad("invalid chunk extension")),
            (b"5;a;\r\n", bad("invalid chunk extension")),
            (b"5;=b\r\n", bad("invalid chunk extension")),
            (b"5;a=\r\n", bad("invalid chunk extension")),
            (b"5;a = \r\n", bad("invalid chunk extension")),
            (b"5;a \r\n", bad("invalid chunk extension")),
            (b"5;a=b \r\n", bad("invalid chunk extension")),
            (b"5;a=\"b\" \r\n", bad("invalid chunk extension")),
            (b"5;a b\r\n", bad("invalid chunk extension")),
            (b"5;a=b c\r\n", bad("invalid chunk extension")),
            (b"5;a=b=c\r\n", bad("invalid chunk extension")),
            (b"5;a==b\r\n", bad("invalid chunk extension")),
            (b"5;a@b\r\n", bad("invalid chunk extension")),
            (b"5;a/b\r\n", bad("invalid chunk extension")),
            (b"5;a=b/c\r\n", bad("invalid chunk extension")),
            (b"5;\"a\"\r\n", bad("invalid chunk extension")),
            (b"5;a=b\"c\"\r\n", bad("invalid chunk extension")),
            (b"5;a=\"b\"c\r\n", bad("invalid chunk extension")),
            (b"5;a=\"b\r\n", bad("invalid chunk extension")),
            (b"5;a=\"\x01\"\r\nhello\r\n", bad("invalid chunk extension")),
            (b"5;a=\"\x7f\"\r\nhello\r\n", bad("invalid chunk extension")),
            (
                b"5;a=\"\\\x01\"\r\nhello\r\n",
                bad("invalid chunk extension"),
            ),
            (b"5;a=\"\\\r\nhello\r\n", bad("invalid chunk extension")),
            (b"5;a=\x80\r\nhello\r\n", bad("invalid chunk extension")),
            (b"5;a=\"b\nc\"\r\nhello\r\n", bad("bare LF in chunked body")),
            (b"5;a=\"b\"\nhello\r\n", bad("bare LF in chunked body")),
            // Overflow of u64: 17 hex digits.
            (b"fffffffffffffffff\r\n", bad("chunk size too large")),
            (b"10000000000000000\r\n", bad("chunk size too large")),
            // 16 digits fit in u64 but not under the body limit.
            (
                b"ffffffffffffffff\r\n",
                Outcome::Refused(ProtoError::PayloadTooLarge),
            ),
            // Line endings must be CRLF.
            (b"5\nhello\r\n0\r\n\r\n", bad("bare LF in chunked body")),
            (b"5;a\nhello\r\n0\r\n\r\n", bad("bare LF in chunked body")),
            (b"5 \nhello\r\n0\r\n\r\n", bad("bare LF in chunked body")),
            (b"\n", bad("bare LF in chunked body")),
            (b"5\rhello\r\n0\r\n\r\n", bad("bare CR in chunked body")),
            (b"5;a\rhello\r\n0\r\n\r\n", bad("bare CR in chunked body")),
            (b"0\r\n\n", bad("bare LF in chunked body")),
            (b"0\r\n\rX", bad("bare CR in chunked body")),
            (b"0\r\nA: 1\n\r\n", bad("bare LF in chunked body")),
            (b"0\r\nA: 1\rX\r\n\r\n", bad("bare CR in chunked body")),
            // Data not followed by CRLF.
            (
                b"5\r\nhelloX\r\n0\r\n\r\n",
                bad("missing CRLF after chunk data"),
            ),
            (
                b"5\r\nhello\rX0\r\n\r\n",
                bad("missing CRLF after chunk data"),
            ),
            (
                b"5\r\nhello\n0\r\n\r\n",
                bad("missing CRLF after chunk data"),
            ),
            (
                b"3\r\nhello\r\n0\r\n\r\n",
                bad("missing CRLF after chunk data"),
            ),
            // Trailer syntax.
            (b"0\r\n: x\r\n\r\n", bad("invalid trailer field name")),
            (b"0\r\nA B: x\r\n\r\n", bad("invalid trailer field name")),
            (b"0\r\nA\r\n\r\n", bad("invalid trailer field name")),
            (
                b"0\r\nA: 1\r\n x\r\n\r\n",
                bad("obsolete line folding in trailer"),
            ),
            (b"0\r\nA: \x01\r\n\r\n", bad("invalid trailer field value")),
            (b"0\r\nA: \x7f\r\n\r\n", bad("invalid trailer field value")),
            // Fields that must not come in a trailer, in any case.
            (
                b"0\r\nContent-Length: 5\r\n\r\n",
                Outcome::Refused(FORBIDDEN_TRAILER),
            ),
            (
                b"0\r\nX-Ok: 1\r\nTRANSFER-ENCODING: chunked\r\n\r\n",
                Outcome::Refused(FORBIDDEN_TRAILER),
            ),
            (b"0\r\nhost: a\r\n\r\n", Outcome::Refused(FORBIDDEN_TRAILER)),
            (b"0\r\nTE: x\r\n\r\n", Outcome::Refused(FORBIDDEN_TRAILER)),
            // Allowed: other names, and names that only start or end like a
            // forbidden one.
            (b"0\r\nX-Checksum: abc\r\n\r\n", complete(b"", 22)),
            (b"0\r\nHosts: a\r\n\r\n", complete(b"", 15)),
            (b"0\r\nX-Host: a\r\n\r\n", complete(b"", 16)),
            // Limits.
            (b"41\r\n", Outcome::Refused(ProtoError::PayloadTooLarge)),
            (
                b"20\r\n0123456789abcdef0123456789abcdef\r\n21\r\n",
                Outcome::Refused(ProtoError::PayloadTooLarge),
            ),
            (
                b"5;aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\nhello\r\n0\r\n\r\n",
                bad("chunk size line too long"),
            ),
            // A quoted string cannot carry the size line past the limit either.
            (
                b"5;a=\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\r\nhello\r\n",
                bad("chunk size line too long"),
            ),
            (
                b"000000000000000000000000000000005\r\nhello\r\n0\r\n\r\n",
                bad("chunk size line too long"),
            ),
            (
                b"0\r\nA: 0123456789abcdef\r\nB: 0123456789abcdef\r\nC: 0123456789abcdef\r\n\r\n",
                Outcome::Refused(ProtoError::HeadersTooLarge),
            ),
        ]
    }

    #[test]
    fn every_forbidden_trailer_field_is_refused_and_the_longest_is_known() {
        let limits = Limits::default();
        for name in FORBIDDEN_TRAILER_FIELDS {
            assert!(name.len() <= LONGEST_FORBIDDEN_NAME, "{name}");
            let input = format!("0\r\n{}: x\r\n\r\n", name.to_ascii_uppercase());
            assert_eq!(
                decode_whole(&limits, input.as_bytes()),
                Outcome::Refused(FORBIDDEN_TRAILER),
                "{name}"
            );
        }
        assert!(FORBIDDEN_TRAILER_FIELDS
            .iter()
            .any(|name| name.len() == LONGEST_FORBIDDEN_NAME));
        // A response's trailers are relayed as they are.
        assert!(matches!(
            ChunkedDecoder::for_response(&limits)
                .decode(b"0\r\nContent-Length: 5\r\n\r\n", &mut Vec::new()),
            Ok(ChunkedProgress { done: true, .. })
        ));
        // A long allowed name is not cut down into a forbidden one.
        let long = format!("0\r\nhost{}: x\r\n\r\n", "x".repeat(40));
        assert!(matches!(
            decode_whole(&limits, long.as_bytes()),
            Outcome::Decoded { done: true, .. }
        ));
    }

    #[test]
    fn table_of_whole_inputs() {
        let limits = small_limits();
        for (input, expected) in table() {
            assert_eq!(
                decode_whole(&limits, input),
                expected,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn limits_exactly_at_the_bound_are_accepted() {
        let limits = small_limits();
        // 64 bytes of body in two chunks: exactly the limit.
        let mut input = b"20\r\n".to_vec();
        input.extend_from_slice(&[b'a'; 32]);
        input.extend_from_slice(b"\r\n20\r\n");
        input.extend_from_slice(&[b'b'; 32]);
        input.extend_from_slice(b"\r\n0\r\n\r\n");
        let mut expected_body = vec![b'a'; 32];
        expected_body.extend_from_slice(&[b'b'; 32]);
        assert_eq!(
            decode_whole(&limits, &input),
            complete(&expected_body, input.len())
        );

        // Size lines of exactly max_chunk_line (32) bytes.
        for line in [
            &b"5;aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"[..],
            b"5;a=\"aaaaaaaaaaaaaaaaaaaaaaaaaa\"",
        ] {
            assert_eq!(line.len(), 32);
            let mut input = line.to_vec();
            input.extend_from_slice(b"\r\nhello\r\n0\r\n\r\n");
            assert_eq!(
                decode_whole(&limits, &input),
                complete(b"hello", input.len())
            );
        }

        // Trailer lines of exactly max_trailer_size (48) bytes, CRLFs included.
        let trailers = b"A: 0123456789012345678\r\nB: 0123456789012345678\r\n";
        assert_eq!(trailers.len(), 48);
        let mut input = b"0\r\n".to_vec();
        input.extend_from_slice(trailers);
        input.extend_from_slice(b"\r\n");
        assert_eq!(decode_whole(&limits, &input), complete(b"", input.len()));
    }

    #[test]
    fn body_limit_is_checked_before_data_arrives() {
        let limits = small_limits();
        let mut decoder = ChunkedDecoder::new(&limits);
        let mut body = Vec::new();
        assert_eq!(
            decoder.decode(b"100\r\n", &mut body),
            Err(ProtoError::PayloadTooLarge)
        );
        assert!(body.is_empty());
    }

    #[test]
    fn incomplete_input_is_never_an_error() {
        let limits = small_limits();
        let input = b"5;ext=1\r\nhello\r\n0\r\nChecksum: x\r\n\r\n";
        for end in 0..input.len() {
            match decode_whole(&limits, &input[..end]) {
                Outcome::Decoded { done, consumed, .. } => {
                    assert!(!done, "prefix of {end} bytes");
                    assert_eq!(consumed, end, "all of a valid prefix is consumed");
                }
                Outcome::Refused(error) => panic!("prefix of {end} bytes: {error:?}"),
            }
        }
    }

    #[test]
    fn every_two_piece_split_decodes_the_same() {
        let limits = small_limits();
        for (input, expected) in table() {
            for split in 0..=input.len() {
                let (first, second) = input.split_at(split);
                assert_eq!(
                    decode_in_pieces(&limits, &[first, second]),
                    expected,
                    "input {:?} split at {split}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn one_byte_at_a_time_decodes_the_same() {
        let limits = small_limits();
        for (input, expected) in table() {
            let pieces: Vec<&[u8]> = input.chunks(1).collect();
            assert_eq!(
                decode_in_pieces(&limits, &pieces),
                expected,
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn done_decoder_consumes_nothing_more() {
        let limits = small_limits();
        let mut decoder = ChunkedDecoder::new(&limits);
        let mut body = Vec::new();
        let progress = decoder
            .decode(b"1\r\na\r\n0\r\n\r\nNEXT", &mut body)
            .unwrap();
        assert_eq!(
            progress,
            ChunkedProgress {
                consumed: 11,
                done: true
            }
        );
        let progress = decoder.decode(b"NEXT", &mut body).unwrap();
        assert_eq!(
            progress,
            ChunkedProgress {
                consumed: 0,
                done: true
            }
        );
        assert_eq!(body, b"a");
        assert_eq!(decoder.decoded_len(), 1);
    }

    #[test]
    fn large_chunks_are_copied_in_bulk_across_calls() {
        let limits = Limits::default();
        let data: Vec<u8> = (0..100_000u32).map(|index| (index % 251) as u8).collect();
        let mut input = format!("{:x}\r\n", data.len()).into_bytes();
        input.extend_from_slice(&data);
        input.extend_from_slice(b"\r\n0\r\n\r\n");

        let mut decoder = ChunkedDecoder::new(&limits);
        let mut body = Vec::new();
        let mut offset = 0;
        for piece in input.chunks(4096) {
            let progress = decoder.decode(piece, &mut body).unwrap();
            assert_eq!(progress.consumed, piece.len());
            offset += progress.consumed;
        }
        assert_eq!(offset, input.len());
        assert_eq!(body, data);
        assert_eq!(decoder.decoded_len(), data.len() as u64);
    }

    #[test]
    fn body_appends_to_existing_contents() {
        let mut decoder = ChunkedDecoder::new(&Limits::default());
        let mut body = b"prefix:".to_vec();
        decoder.decode(b"3\r\nabc\r\n0\r\n\r\n", &mut body).unwrap();
        assert_eq!(body, b"prefix:abc");
        assert_eq!(decoder.decoded_len(), 3);
    }
}
