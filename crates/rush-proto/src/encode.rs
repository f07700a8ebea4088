//! Response framing: which header delimits a response body, and the body
//! bytes framed to match it.
//!
//! Every framing decision about a response is made here, once, so native,
//! WSGI and ASGI responses cannot disagree about when a body may be sent, how
//! its end is marked, or which app headers the server replaces.
//!
//! The API:
//!
//! * [`FramingPlan`]: what the server knows about a response before writing
//!   its head (status, HEAD or not, the app's Content-Length, the body length
//!   if the whole body is in hand, HTTP/1.0 or not).
//! * [`BodyEncoder::choose`] turns a plan into an encoder.
//!   [`BodyEncoder::write_framing_header`] appends the one framing header line
//!   (or nothing); [`BodyEncoder::encode`] appends body data framed;
//!   [`BodyEncoder::finish`] ends the body; [`BodyEncoder::is_complete`] and
//!   [`BodyEncoder::closes_connection`] tell the server whether the
//!   connection can carry another response.
//! * [`status_has_no_body`]: 1xx, 204 and 304 end at their head.
//! * [`connection_has_token`] / [`connection_has_close`]: `Connection`
//!   options as a token list, never as a substring.
//! * [`is_framing_header`]: app headers the server drops because it writes
//!   its own.
//! * [`CONTINUE_100`] and [`write_request_timeout`]: the interim and timeout
//!   answers the server sends on its own.
//!
//! How the choice works: an encoder makes two decisions that usually agree,
//! the *framing header* (what the head announces, [`FramingHeader`]) and the
//! *body kind* (what goes on the wire, [`BodyKind`]). They differ exactly
//! where RFC 9110 lets a head describe a body that is not sent:
//!
//! ```text
//! status     request         lengths              header                      body
//! 1xx, 204   any             any                  none                        Empty
//! 304        any             declared n           Content-Length: n           Empty
//! 304        any             none declared        none                        Empty
//! 205        any             any                  Content-Length: 0           Empty
//! other      not HEAD        declared n           Content-Length: n           Length n
//! other      not HEAD        known n, none decl.  Content-Length: n           Length n
//! other      HTTP/1.1        neither              Transfer-Encoding: chunked  Chunked
//! other      HTTP/1.0        neither              none                        CloseDelimited
//! other      HEAD            as for GET           same header as GET          Empty
//! ```
//!
//! * A declared length wins over a known one: the head says what the app
//!   declared, and a body that disagrees is refused by [`BodyEncoder::encode`]
//!   ([`EncodeError::TooLong`]) or [`BodyEncoder::finish`]
//!   ([`EncodeError::TooShort`]), never sent mislabelled. A caller holding
//!   the whole body can compare the two lengths before writing the head.
//! * 304 repeats the app's declared length because RFC 9110 8.6 allows a 304
//!   to carry the length a 200 would have had; a *known* length is never
//!   used, since the body in hand for a 304 (empty) is not that
//!   representation. 1xx and 204 must not carry Content-Length at all.
//! * 205 Reset Content must not have content, and RFC 9110 15.3.6 asks the
//!   server to say so with `Content-Length: 0` (or by closing), since unlike
//!   204 its framing is the ordinary one.
//! * HEAD announces exactly what the same plan would announce for GET (RFC
//!   9110 9.3.2), including `Transfer-Encoding: chunked` when the length is
//!   unknown, which RFC 9112 6.1 allows in a HEAD response. Its message ends
//!   at the head, so it never closes the connection for framing reasons.
//!   A caller that elided the body of a HEAD response must pass
//!   `known_length: None`, or the header would announce the elided length.
//!
//! [`BodyKind::Empty`] drops whatever data it is given, silently: it only
//! arises for HEAD, where WSGI and ASGI apps routinely produce the GET body
//! and the server must discard it, and for statuses that cannot have content,
//! where the head is already out and correct by the time data arrives.
//! Sending the bytes would make the client read them as the next response;
//! refusing them could only close a connection that is still sound.

use crate::head::list_elements;
use crate::response::{write_closing_response, write_content_length};

/// The interim response to `Expect: 100-continue`, sent before reading the body.
pub const CONTINUE_100: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// Appends the answer to a client that stalled in the middle of a request:
/// `408 Request Timeout` with an empty body, `Connection: close`, and
/// `date_line` (a whole `Date: ...\r\n` line from [`crate::DateCache`]).
///
/// It is laid out like every other canned answer (see
/// [`crate::response::write_error_response`]); with no body there is no
/// `Content-Type`.
pub fn write_request_timeout(out: &mut Vec<u8>, date_line: &[u8]) {
    write_closing_response(out, 408, b"", date_line, &[]);
}

/// Whether `status` may end a response: 200 to 599. A 1xx is interim (an
/// app that answers with one has not answered), and numbers outside the
/// classes of RFC 9110 §15 are not HTTP statuses at all.
pub fn is_final_status(status: u16) -> bool {
    (200..=599).contains(&status)
}

/// Whether a response with this status ends at its head whatever its header
/// fields say: 1xx, 204 and 304 (RFC 9110 6.4.1, RFC 9112 6.3 rule 1).
///
/// 205 is not among them: its content must be empty, but it is framed as
/// usual (see [`BodyEncoder::choose`]). Codes outside 100..=999 are the
/// caller's to refuse.
pub fn status_has_no_body(status: u16) -> bool {
    matches!(status, 100..=199 | 204 | 304)
}

/// Whether a `Connection` field value lists `token` as one of its options.
///
/// The value is a comma-separated list (RFC 9110 7.6.1) with optional spaces
/// and tabs around each element; elements compare case-insensitively and
/// whole, so `closed-beta` or `x-close` do not list `close`. Empty elements
/// are skipped, and an empty `token` is listed by nothing.
pub fn connection_has_token(value: &[u8], token: &[u8]) -> bool {
    !token.is_empty() && list_elements(value).any(|option| option.eq_ignore_ascii_case(token))
}

/// Whether a `Connection` field value asks to close the connection after
/// this message (lists the `close` option).
pub fn connection_has_close(value: &[u8]) -> bool {
    connection_has_token(value, b"close")
}

/// Whether a response header from an app is one the server writes itself and
/// so never copies: `Content-Length`, `Transfer-Encoding`, `Connection`
/// (case-insensitive).
///
/// An app's copy of these would contradict the framing the encoder chose
/// (or the connection decision), and two conflicting framing headers are
/// exactly what response splitting needs. `Date` is not one of them: the
/// server only adds its own when the app did not set one.
pub fn is_framing_header(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"transfer-encoding")
        || name.eq_ignore_ascii_case(b"connection")
}

/// What the server knows about a response when it is about to write the head;
/// the input of [`BodyEncoder::choose`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramingPlan {
    /// The response status code.
    pub status: u16,
    /// The request was HEAD: the head describes the GET body, none is sent.
    pub head_request: bool,
    /// The length the app declared with its own `Content-Length`, if any.
    pub declared_length: Option<u64>,
    /// The length of the body when all of it is already in hand (a complete
    /// ASGI body in the first message, a WSGI byte string, a file).
    pub known_length: Option<u64>,
    /// The request was HTTP/1.0, whose clients cannot decode chunked bodies:
    /// an unknown length is delimited by closing the connection instead.
    pub http10: bool,
}

/// The framing header line a response head carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingHeader {
    /// No framing header: the body is empty by status, or ends when the connection closes.
    Omitted,
    /// `Content-Length: n`.
    ContentLength(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// How body bytes go on the wire after the head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyKind {
    /// No body bytes at all (HEAD, or a status without content); data is dropped.
    Empty,
    /// Raw bytes, exactly as many as the Content-Length said; `remaining` are still owed.
    Length {
        /// Body bytes still to send before the body is complete.
        remaining: u64,
    },
    /// `{hex size}\r\n{data}\r\n` per piece, then `0\r\n\r\n`.
    Chunked,
    /// Raw bytes; the body ends when the server closes the connection.
    CloseDelimited,
}

/// Frames the body of one response. Create one per response with
/// [`BodyEncoder::choose`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyEncoder {
    header: FramingHeader,
    kind: BodyKind,
    /// Body bytes appended to the caller's output so far, framing excluded.
    written: u64,
    /// `finish` succeeded.
    finished: bool,
}

impl BodyEncoder {
    /// Decides the framing header and body kind of a response (the table in
    /// the [module documentation](self)).
    pub fn choose(plan: FramingPlan) -> BodyEncoder {
        let (header, kind) = if status_has_no_body(plan.status) {
            let header = match (plan.status, plan.declared_length) {
                (304, Some(length)) => FramingHeader::ContentLength(length),
                _ => FramingHeader::Omitted,
            };
            (header, BodyKind::Empty)
        } else if plan.status == 205 {
            (FramingHeader::ContentLength(0), BodyKind::Empty)
        } else {
            let (header, kind) = match plan.declared_length.or(plan.known_length) {
                Some(length) => (
                    FramingHeader::ContentLength(length),
                    BodyKind::Length { remaining: length },
                ),
                None if plan.http10 => (FramingHeader::Omitted, BodyKind::CloseDelimited),
                None => (FramingHeader::Chunked, BodyKind::Chunked),
            };
            if plan.head_request {
                (header, BodyKind::Empty)
            } else {
                (header, kind)
            }
        };
        BodyEncoder {
            header,
            kind,
            written: 0,
            finished: false,
        }
    }

    /// The framing header the head must carry.
    pub fn framing_header(&self) -> FramingHeader {
        self.header
    }

    /// How body bytes are framed, and for `Length` how many are still owed.
    pub fn kind(&self) -> BodyKind {
        self.kind
    }

    /// Appends the framing header line, `Content-Length: n\r\n` or
    /// `Transfer-Encoding: chunked\r\n`, or nothing for [`FramingHeader::Omitted`].
    pub fn write_framing_header(&self, out: &mut Vec<u8>) {
        match self.header {
            FramingHeader::Omitted => {}
            FramingHeader::ContentLength(length) => write_content_length(out, length),
            FramingHeader::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        }
    }

    /// Appends `data` to `out`, framed as the body kind says.
    ///
    /// Empty `data` appends nothing (a zero-size chunk would end a chunked
    /// body). `Empty` drops any data (see the module documentation).
    ///
    /// Errors, after which nothing was appended and the encoder is unchanged:
    /// [`EncodeError::TooLong`] when `data` is more than a `Length` body
    /// still owes, [`EncodeError::Finished`] for data after
    /// [`finish`](Self::finish) of a chunked or close-delimited body. Either
    /// way the response can no longer be completed as its head promised,
    /// and the connection must be closed.
    pub fn encode(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), EncodeError> {
        if data.is_empty() || !self.admit(data.len() as u64)? {
            return Ok(());
        }
        match self.kind {
            BodyKind::Chunked => {
                // Size line (at most 16 hex digits) and the two CRLFs.
                out.reserve(data.len() + 20);
                write_chunk_size(out, data.len() as u64);
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            _ => out.extend_from_slice(data),
        }
        Ok(())
    }

    /// [`encode`](Self::encode) without the bytes, for a caller that frames
    /// them itself (a protocol other than HTTP/1.1, or a writer that keeps
    /// its own framing): checks `length` more body bytes against what the
    /// head promised and counts them. `Ok(true)`: they go on the wire;
    /// `Ok(false)`: they are dropped (an `Empty` body, or none). The same
    /// errors as `encode`, after which the encoder is unchanged.
    pub fn admit(&mut self, length: u64) -> Result<bool, EncodeError> {
        if length == 0 {
            return Ok(false);
        }
        match &mut self.kind {
            BodyKind::Empty => return Ok(false),
            BodyKind::Length { remaining } => {
                if length > *remaining {
                    return Err(EncodeError::TooLong {
                        declared: self.written + *remaining,
                    });
                }
                *remaining -= length;
            }
            BodyKind::Chunked | BodyKind::CloseDelimited => {
                if self.finished {
                    return Err(EncodeError::Finished);
                }
            }
        }
        self.written += length;
        Ok(true)
    }

    /// Ends the body: a chunked body gets its last chunk `0\r\n\r\n` (no
    /// trailers); the other kinds append nothing.
    ///
    /// A `Length` body that is still owed bytes is [`EncodeError::TooShort`]:
    /// nothing is appended, the encoder stays incomplete (a later call
    /// returns the same error), and the connection must be closed, since
    /// the client is waiting for bytes that will not come. Calling `finish`
    /// again after it succeeded appends nothing and succeeds, so a cleanup
    /// path may call it without checking.
    pub fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        let first = !self.finished;
        self.admit_end()?;
        if first && self.kind == BodyKind::Chunked {
            out.extend_from_slice(b"0\r\n\r\n");
        }
        Ok(())
    }

    /// [`finish`](Self::finish) without the bytes (see [`admit`](Self::admit)):
    /// the same checks; the caller ends the body in its own framing.
    pub fn admit_end(&mut self) -> Result<(), EncodeError> {
        if let BodyKind::Length { remaining } = self.kind {
            if remaining > 0 {
                return Err(EncodeError::TooShort { missing: remaining });
            }
        }
        self.finished = true;
        Ok(())
    }

    /// Whether the body is entirely on the wire: nothing more is owed, and
    /// (unless [`closes_connection`](Self::closes_connection)) the next
    /// response may follow. `Empty` and a `Length` body with nothing left to
    /// send are complete without `finish`; chunked and close-delimited
    /// bodies only after it.
    pub fn is_complete(&self) -> bool {
        match self.kind {
            BodyKind::Empty => true,
            BodyKind::Length { remaining } => remaining == 0,
            BodyKind::Chunked | BodyKind::CloseDelimited => self.finished,
        }
    }

    /// Whether the framing requires closing the connection after the body:
    /// a close-delimited body ends only when the connection does. (An
    /// encoding error requires closing too; that is the caller's to act on.)
    pub fn closes_connection(&self) -> bool {
        self.kind == BodyKind::CloseDelimited
    }

    /// Body bytes appended to the output so far, framing excluded; dropped
    /// data (`Empty`) is not counted.
    pub fn written(&self) -> u64 {
        self.written
    }
}

/// Appends a chunk-size line: the size in lowercase hex without leading
/// zeros, then CRLF.
fn write_chunk_size(out: &mut Vec<u8>, size: u64) {
    const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut start = digits.len();
    let mut rest = size;
    loop {
        start -= 1;
        digits[start] = HEX_DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[start..]);
    out.extend_from_slice(b"\r\n");
}

/// Body data that does not fit the framing the head announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// More body than the `Content-Length` of `declared` bytes allows.
    TooLong {
        /// The Content-Length the head announced.
        declared: u64,
    },
    /// The body ended `missing` bytes before its `Content-Length` was reached.
    TooShort {
        /// Bytes the head promised that were never sent.
        missing: u64,
    },
    /// Body data after a chunked or close-delimited body was finished.
    Finished,
}

impl std::fmt::Display for EncodeError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EncodeError::TooLong { declared } => {
                write!(
                    formatter,
                    "body longer than its Content-Length of {declared}"
                )
            }
            EncodeError::TooShort { missing } => write!(
                formatter,
                "body ended {missing} bytes short of its Content-Length"
            ),
            EncodeError::Finished => formatter.write_str("body data after the end of the body"),
        }
    }
}

impl std::error::Error for EncodeError {}

#[cfg(test)]
mod tests;
