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
    write_closing_response(out, 408, date_line, &[]);
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
        if data.is_empty() {
            return Ok(());
        }
        let length = data.len() as u64;
        match &mut self.kind {
            BodyKind::Empty => return Ok(()),
            BodyKind::Length { remaining } => {
                if length > *remaining {
                    return Err(EncodeError::TooLong {
                        declared: self.written + *remaining,
                    });
                }
                *remaining -= length;
                out.extend_from_slice(data);
            }
            BodyKind::Chunked => {
                if self.finished {
                    return Err(EncodeError::Finished);
                }
                // Size line (at most 16 hex digits) and the two CRLFs.
                out.reserve(data.len() + 20);
                write_chunk_size(out, length);
                out.extend_from_slice(data);
                out.extend_from_slice(b"\r\n");
            }
            BodyKind::CloseDelimited => {
                if self.finished {
                    return Err(EncodeError::Finished);
                }
                out.extend_from_slice(data);
            }
        }
        self.written += length;
        Ok(())
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
        match self.kind {
            BodyKind::Length { remaining } if remaining > 0 => {
                return Err(EncodeError::TooShort { missing: remaining });
            }
            BodyKind::Chunked if !self.finished => out.extend_from_slice(b"0\r\n\r\n"),
            _ => {}
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
mod tests {
    use super::*;
    use crate::response::write_status_line;
    use crate::{ChunkedDecoder, Limits};
    use proptest::prelude::*;

    fn plan(
        status: u16,
        head_request: bool,
        declared_length: Option<u64>,
        known_length: Option<u64>,
        http10: bool,
    ) -> FramingPlan {
        FramingPlan {
            status,
            head_request,
            declared_length,
            known_length,
            http10,
        }
    }

    /// A plain HTTP/1.1 GET response of unknown length.
    fn streaming() -> BodyEncoder {
        BodyEncoder::choose(plan(200, false, None, None, false))
    }

    fn header_line(encoder: &BodyEncoder) -> String {
        let mut out = Vec::new();
        encoder.write_framing_header(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn choice_table() {
        const GET: bool = false;
        const HEAD: bool = true;
        const HTTP11: bool = false;
        const HTTP10: bool = true;
        const CHUNKED: &str = "Transfer-Encoding: chunked\r\n";
        let length = |remaining| BodyKind::Length { remaining };
        #[rustfmt::skip]
        let rows: Vec<(FramingPlan, &str, BodyKind, bool)> = vec![
            // Ordinary statuses: declared wins, then known, then chunked or close.
            (plan(200, GET, Some(5), None, HTTP11), "Content-Length: 5\r\n", length(5), false),
            (plan(200, GET, None, Some(5), HTTP11), "Content-Length: 5\r\n", length(5), false),
            (plan(200, GET, Some(5), Some(3), HTTP11), "Content-Length: 5\r\n", length(5), false),
            (plan(200, GET, Some(0), None, HTTP11), "Content-Length: 0\r\n", length(0), false),
            (plan(200, GET, None, Some(0), HTTP11), "Content-Length: 0\r\n", length(0), false),
            (plan(200, GET, None, None, HTTP11), CHUNKED, BodyKind::Chunked, false),
            (plan(200, GET, None, None, HTTP10), "", BodyKind::CloseDelimited, true),
            (plan(200, GET, Some(7), None, HTTP10), "Content-Length: 7\r\n", length(7), false),
            (plan(200, GET, None, Some(0), HTTP10), "Content-Length: 0\r\n", length(0), false),
            (plan(404, GET, None, Some(9), HTTP11), "Content-Length: 9\r\n", length(9), false),
            (plan(500, GET, None, None, HTTP11), CHUNKED, BodyKind::Chunked, false),
            (plan(206, GET, Some(u64::MAX), None, HTTP11), "Content-Length: 18446744073709551615\r\n", length(u64::MAX), false),
            // HEAD: the GET header, no body, never closing for framing.
            (plan(200, HEAD, Some(5), None, HTTP11), "Content-Length: 5\r\n", BodyKind::Empty, false),
            (plan(200, HEAD, None, Some(9), HTTP11), "Content-Length: 9\r\n", BodyKind::Empty, false),
            (plan(200, HEAD, None, None, HTTP11), CHUNKED, BodyKind::Empty, false),
            (plan(200, HEAD, None, None, HTTP10), "", BodyKind::Empty, false),
            (plan(200, HEAD, Some(5), Some(0), HTTP10), "Content-Length: 5\r\n", BodyKind::Empty, false),
            // 1xx and 204: no body and no Content-Length, whatever the app said.
            (plan(100, GET, None, None, HTTP11), "", BodyKind::Empty, false),
            (plan(101, GET, Some(3), None, HTTP11), "", BodyKind::Empty, false),
            (plan(103, GET, None, Some(3), HTTP10), "", BodyKind::Empty, false),
            (plan(199, HEAD, None, None, HTTP11), "", BodyKind::Empty, false),
            (plan(204, GET, Some(5), Some(5), HTTP11), "", BodyKind::Empty, false),
            (plan(204, GET, None, None, HTTP10), "", BodyKind::Empty, false),
            (plan(204, HEAD, None, None, HTTP11), "", BodyKind::Empty, false),
            // 304: the declared length of the representation, never the known one.
            (plan(304, GET, Some(120), None, HTTP11), "Content-Length: 120\r\n", BodyKind::Empty, false),
            (plan(304, GET, None, Some(0), HTTP11), "", BodyKind::Empty, false),
            (plan(304, GET, None, None, HTTP10), "", BodyKind::Empty, false),
            (plan(304, HEAD, Some(120), Some(0), HTTP11), "Content-Length: 120\r\n", BodyKind::Empty, false),
            // 205: Content-Length: 0 and no body.
            (plan(205, GET, Some(5), None, HTTP11), "Content-Length: 0\r\n", BodyKind::Empty, false),
            (plan(205, GET, None, None, HTTP10), "Content-Length: 0\r\n", BodyKind::Empty, false),
            (plan(205, HEAD, None, None, HTTP11), "Content-Length: 0\r\n", BodyKind::Empty, false),
        ];
        for (plan, header, kind, closes) in rows {
            let encoder = BodyEncoder::choose(plan);
            assert_eq!(header_line(&encoder), header, "{plan:?}");
            assert_eq!(encoder.kind(), kind, "{plan:?}");
            assert_eq!(encoder.closes_connection(), closes, "{plan:?}");
            assert_eq!(encoder.written(), 0, "{plan:?}");
        }
    }

    #[test]
    fn framing_header_values_match_the_lines() {
        let cases = [
            (
                plan(200, false, Some(5), None, false),
                FramingHeader::ContentLength(5),
            ),
            (plan(200, false, None, None, false), FramingHeader::Chunked),
            (plan(200, false, None, None, true), FramingHeader::Omitted),
            (
                plan(204, false, Some(5), None, false),
                FramingHeader::Omitted,
            ),
            (
                plan(205, true, None, None, false),
                FramingHeader::ContentLength(0),
            ),
        ];
        for (plan, header) in cases {
            assert_eq!(
                BodyEncoder::choose(plan).framing_header(),
                header,
                "{plan:?}"
            );
        }
    }

    #[test]
    fn bodyless_statuses() {
        for status in [100, 101, 102, 103, 150, 199, 204, 304] {
            assert!(status_has_no_body(status), "{status}");
        }
        for status in [
            200, 201, 203, 205, 206, 299, 300, 301, 303, 305, 400, 404, 500, 599,
        ] {
            assert!(!status_has_no_body(status), "{status}");
        }
    }

    #[test]
    fn chunked_output_bytes() {
        let mut encoder = streaming();
        let mut out = b"head\r\n\r\n".to_vec();
        encoder.encode(b"hello", &mut out).unwrap();
        encoder.encode(b" world", &mut out).unwrap();
        encoder.encode(b"0123456789abcdef", &mut out).unwrap();
        assert!(!encoder.is_complete());
        encoder.finish(&mut out).unwrap();
        assert!(encoder.is_complete());
        assert!(!encoder.closes_connection());
        assert_eq!(encoder.written(), 27);
        assert_eq!(
            out,
            b"head\r\n\r\n5\r\nhello\r\n6\r\n world\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n"
        );

        // A chunk of 4096 bytes has the size line "1000".
        let mut encoder = streaming();
        let mut out = Vec::new();
        encoder.encode(&[b'x'; 4096], &mut out).unwrap();
        assert!(out.starts_with(b"1000\r\nxxx"));
        assert!(out.ends_with(b"xxx\r\n"));
        assert_eq!(out.len(), 6 + 4096 + 2);
    }

    #[test]
    fn chunk_size_lines() {
        let cases: [(u64, &[u8]); 8] = [
            (0, b"0\r\n"),
            (1, b"1\r\n"),
            (10, b"a\r\n"),
            (15, b"f\r\n"),
            (16, b"10\r\n"),
            (255, b"ff\r\n"),
            (0xdead_beef, b"deadbeef\r\n"),
            (u64::MAX, b"ffffffffffffffff\r\n"),
        ];
        for (size, line) in cases {
            let mut out = Vec::new();
            write_chunk_size(&mut out, size);
            assert_eq!(out, line, "{size}");
        }
    }

    #[test]
    fn empty_chunks_are_skipped() {
        let mut encoder = streaming();
        let mut out = Vec::new();
        encoder.encode(b"", &mut out).unwrap();
        assert!(out.is_empty(), "an empty chunk would end the body");
        encoder.encode(b"a", &mut out).unwrap();
        encoder.encode(b"", &mut out).unwrap();
        encoder.finish(&mut out).unwrap();
        assert_eq!(out, b"1\r\na\r\n0\r\n\r\n");
    }

    #[test]
    fn finishing_twice_is_harmless_but_data_after_finish_is_refused() {
        let mut encoder = streaming();
        let mut out = Vec::new();
        encoder.encode(b"abc", &mut out).unwrap();
        encoder.finish(&mut out).unwrap();
        encoder.finish(&mut out).unwrap();
        assert_eq!(out, b"3\r\nabc\r\n0\r\n\r\n", "one last chunk only");
        assert_eq!(
            encoder.encode(b"late", &mut out),
            Err(EncodeError::Finished)
        );
        encoder.encode(b"", &mut out).unwrap();
        assert_eq!(out, b"3\r\nabc\r\n0\r\n\r\n");
        assert!(encoder.is_complete());

        let mut encoder = BodyEncoder::choose(plan(200, false, None, None, true));
        let mut out = Vec::new();
        encoder.encode(b"raw", &mut out).unwrap();
        assert!(!encoder.is_complete());
        encoder.finish(&mut out).unwrap();
        encoder.finish(&mut out).unwrap();
        assert!(encoder.is_complete());
        assert!(encoder.closes_connection());
        assert_eq!(
            encoder.encode(b"late", &mut out),
            Err(EncodeError::Finished)
        );
        assert_eq!(out, b"raw");
    }

    #[test]
    fn length_bodies_refuse_too_much_and_too_little() {
        let mut encoder = BodyEncoder::choose(plan(200, false, Some(5), None, false));
        let mut out = Vec::new();
        encoder.encode(b"abc", &mut out).unwrap();
        assert_eq!(encoder.kind(), BodyKind::Length { remaining: 2 });
        assert_eq!(
            encoder.encode(b"def", &mut out),
            Err(EncodeError::TooLong { declared: 5 })
        );
        assert_eq!(out, b"abc", "nothing appended on error");
        assert_eq!(encoder.kind(), BodyKind::Length { remaining: 2 });
        encoder.encode(b"de", &mut out).unwrap();
        assert!(encoder.is_complete());
        encoder.finish(&mut out).unwrap();
        encoder.finish(&mut out).unwrap();
        assert_eq!(
            encoder.encode(b"f", &mut out),
            Err(EncodeError::TooLong { declared: 5 })
        );
        assert_eq!(out, b"abcde");
        assert_eq!(encoder.written(), 5);

        let mut encoder = BodyEncoder::choose(plan(200, false, Some(5), Some(5), true));
        let mut out = Vec::new();
        encoder.encode(b"ab", &mut out).unwrap();
        assert_eq!(
            encoder.finish(&mut out),
            Err(EncodeError::TooShort { missing: 3 })
        );
        assert_eq!(
            encoder.finish(&mut out),
            Err(EncodeError::TooShort { missing: 3 })
        );
        assert!(!encoder.is_complete());
        assert_eq!(out, b"ab");

        let mut encoder = BodyEncoder::choose(plan(200, false, Some(0), None, false));
        let mut out = Vec::new();
        assert!(encoder.is_complete());
        assert_eq!(
            encoder.encode(b"x", &mut out),
            Err(EncodeError::TooLong { declared: 0 })
        );
        encoder.finish(&mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn head_and_bodyless_responses_write_no_body_bytes() {
        let plans = [
            plan(200, true, Some(5), None, false),
            plan(200, true, None, Some(11), false),
            plan(200, true, None, None, false),
            plan(200, true, None, None, true),
            plan(204, false, None, None, false),
            plan(304, false, Some(11), None, false),
            plan(205, false, None, Some(11), false),
            plan(101, false, None, None, false),
        ];
        for plan in plans {
            let mut encoder = BodyEncoder::choose(plan);
            let mut out = Vec::new();
            assert!(encoder.is_complete(), "{plan:?}");
            encoder.encode(b"hello world", &mut out).unwrap();
            encoder.encode(b"more than declared", &mut out).unwrap();
            encoder.finish(&mut out).unwrap();
            encoder.encode(b"after finish", &mut out).unwrap();
            assert!(out.is_empty(), "{plan:?}");
            assert_eq!(encoder.written(), 0, "{plan:?}");
            assert!(encoder.is_complete(), "{plan:?}");
            assert!(!encoder.closes_connection(), "{plan:?}");
        }
    }

    #[test]
    fn connection_tokens() {
        let cases: [(&[u8], bool); 20] = [
            (b"close", true),
            (b"Close", true),
            (b"CLOSE", true),
            (b" Close ", true),
            (b"\tclose\t", true),
            (b"keep-alive, close", true),
            (b"keep-alive,close", true),
            (b"close, keep-alive", true),
            (b",,close,,", true),
            (b"upgrade, \t close \t, te", true),
            (b"closed-beta", false),
            (b"x-close", false),
            (b"close-x", false),
            (b"closed", false),
            (b"clos", false),
            (b"keep-alive", false),
            (b"", false),
            (b",,", false),
            (b"\"close\"", false),
            (b"clo se", false),
        ];
        for (value, closes) in cases {
            assert_eq!(
                connection_has_close(value),
                closes,
                "{:?}",
                String::from_utf8_lossy(value)
            );
        }
        assert!(connection_has_token(b"close, Keep-Alive", b"keep-alive"));
        assert!(connection_has_token(b"Upgrade", b"upgrade"));
        assert!(!connection_has_token(b"keep-alive-x", b"keep-alive"));
        assert!(
            !connection_has_token(b"a,,b", b""),
            "empty elements are not tokens"
        );
        assert!(!connection_has_token(b"", b""));
    }

    #[test]
    fn framing_headers() {
        for name in [
            &b"Content-Length"[..],
            b"content-length",
            b"CONTENT-LENGTH",
            b"Transfer-Encoding",
            b"transfer-encoding",
            b"Connection",
            b"cOnNeCtIoN",
        ] {
            assert!(
                is_framing_header(name),
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
        for name in [
            &b"Date"[..],
            b"Content-Type",
            b"Content-Length2",
            b"Content_Length",
            b" content-length",
            b"Keep-Alive",
            b"TE",
            b"Trailer",
            b"Upgrade",
            b"X-Connection",
            b"",
        ] {
            assert!(
                !is_framing_header(name),
                "{:?}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn canned_answers() {
        let mut status_line = Vec::new();
        write_status_line(&mut status_line, 100);
        status_line.extend_from_slice(b"\r\n");
        assert_eq!(CONTINUE_100, status_line.as_slice());

        let mut out = b"earlier".to_vec();
        write_request_timeout(&mut out, b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "earlierHTTP/1.1 408 Request Timeout\r\n\
             Content-Length: 0\r\n\
             Connection: close\r\n\
             Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
             \r\n"
        );
    }

    #[test]
    fn error_messages() {
        let cases = [
            (
                EncodeError::TooLong { declared: 5 },
                "body longer than its Content-Length of 5",
            ),
            (
                EncodeError::TooShort { missing: 3 },
                "body ended 3 bytes short of its Content-Length",
            ),
            (EncodeError::Finished, "body data after the end of the body"),
        ];
        for (error, message) in cases {
            assert_eq!(error.to_string(), message);
            let _: &dyn std::error::Error = &error;
        }
    }

    fn any_plan() -> impl Strategy<Value = FramingPlan> {
        let status = prop_oneof![
            Just(100u16),
            Just(101),
            Just(200),
            Just(204),
            Just(205),
            Just(304),
            Just(404),
            100u16..600,
        ];
        (
            status,
            any::<bool>(),
            proptest::option::of(0u64..64),
            proptest::option::of(0u64..64),
            any::<bool>(),
        )
            .prop_map(|(status, head_request, declared, known, http10)| {
                plan(status, head_request, declared, known, http10)
            })
    }

    proptest! {
        /// Chunked-encoding any pieces and decoding the result with the
        /// crate's own decoder, fed split at arbitrary points, gives back
        /// their concatenation, and stops right after the last chunk.
        #[test]
        fn chunked_round_trip(
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..12),
            splits in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut encoder = streaming();
            let mut wire = Vec::new();
            for piece in &pieces {
                encoder.encode(piece, &mut wire).unwrap();
            }
            encoder.finish(&mut wire).unwrap();
            let body_end = wire.len();
            wire.extend_from_slice(b"GET / HTTP/1.1\r\n");
            let expected = pieces.concat();
            prop_assert_eq!(encoder.written(), expected.len() as u64);

            let mut cuts: Vec<usize> = splits.iter().map(|split| split.index(wire.len() + 1)).collect();
            cuts.push(wire.len());
            cuts.sort_unstable();
            let mut decoder = ChunkedDecoder::new(&Limits::default());
            let mut body = Vec::new();
            let mut pending = Vec::new();
            let (mut start, mut consumed, mut done) = (0, 0, false);
            for cut in cuts {
                pending.extend_from_slice(&wire[start..cut]);
                start = cut;
                let progress = decoder.decode(&pending, &mut body).unwrap();
                pending.drain(..progress.consumed);
                consumed += progress.consumed;
                done = progress.done;
            }
            prop_assert!(done);
            prop_assert_eq!(consumed, body_end);
            prop_assert_eq!(body, expected);
        }

        /// HEAD announces what GET would, sends nothing and never closes.
        #[test]
        fn head_announces_the_get_framing(plan in any_plan()) {
            let get = BodyEncoder::choose(FramingPlan { head_request: false, ..plan });
            let head = BodyEncoder::choose(FramingPlan { head_request: true, ..plan });
            prop_assert_eq!(head.framing_header(), get.framing_header());
            prop_assert_eq!(head.kind(), BodyKind::Empty);
            prop_assert!(!head.closes_connection());
        }

        /// Whatever the plan and the pieces, the encoder never sends more
        /// than the head announced, and the header and body kind agree.
        #[test]
        fn encoders_keep_the_promise_of_the_head(
            plan in any_plan(),
            pieces in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..8),
        ) {
            let mut encoder = BodyEncoder::choose(plan);
            match (encoder.framing_header(), encoder.kind()) {
                (FramingHeader::ContentLength(length), BodyKind::Length { remaining }) => {
                    prop_assert_eq!(length, remaining);
                }
                (FramingHeader::Chunked, BodyKind::Chunked)
                | (FramingHeader::Omitted, BodyKind::CloseDelimited)
                | (_, BodyKind::Empty) => {}
                (header, kind) => prop_assert!(false, "{:?} with {:?}", header, kind),
            }
            let mut out = Vec::new();
            let mut accepted = Vec::new();
            for piece in &pieces {
                let before = out.len();
                match encoder.encode(piece, &mut out) {
                    Ok(()) => accepted.extend_from_slice(piece),
                    Err(error) => {
                        prop_assert!(matches!(error, EncodeError::TooLong { .. }), "{:?}", error);
                        prop_assert_eq!(out.len(), before);
                    }
                }
            }
            match encoder.kind() {
                BodyKind::Empty => prop_assert!(out.is_empty()),
                BodyKind::Length { remaining } => {
                    prop_assert_eq!(&out, &accepted);
                    prop_assert_eq!(encoder.written() + remaining, plan.declared_length.or(plan.known_length).unwrap());
                }
                BodyKind::CloseDelimited => prop_assert_eq!(&out, &accepted),
                BodyKind::Chunked => prop_assert_eq!(encoder.written(), accepted.len() as u64),
            }
            let finished = encoder.finish(&mut out);
            prop_assert_eq!(finished.is_ok(), encoder.is_complete());
        }
    }
}
