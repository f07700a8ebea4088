//! Request heads: the request line and header fields, validated strictly.
//!
//! httparse does the tokenising; this module adds what httparse leaves to its
//! caller: size limits (414/431), version policy (505), Host rules, and the
//! RFC 9112 section 6 framing decision between Content-Length and
//! Transfer-Encoding, refusing every ambiguous combination (request
//! smuggling lives in those ambiguities).
//!
//! How a parse goes:
//!
//! 1. Leading empty lines (CRLF) are skipped, at most [`MAX_LEADING_EMPTY_LINES`].
//! 2. httparse runs on a *window* of the buffer cut at the size limits: at
//!    `max_request_line + 2` bytes after the request line start if no LF came
//!    by then, and at `max_head_size` bytes. A syntax error httparse finds
//!    inside the window wins; if httparse needs more bytes than the window
//!    holds, the limit that cut the window is the answer (414 or 431). This
//!    makes the outcome depend only on bytes before the limit, so feeding a
//!    head in pieces gives the same answer as feeding it at once.
//! 3. On a complete head, every line ending is checked to be CRLF: httparse
//!    accepts a bare LF as a line ending, rush does not (RFC 9112 2.2 makes
//!    that a MAY, and a front end that disagrees about where a line ends is
//!    the recipe for request smuggling).
//! 4. The request target is checked against the method (the `target`
//!    module): its form, its bytes, and for absolute-form its authority,
//!    which then stands for the request's host.
//! 5. One pass over the fields applies Host, Content-Length,
//!    Transfer-Encoding, Connection and Expect rules.
//! 6. A CONNECT that passed all of that is refused with 405, last, so that
//!    a malformed one is still answered with the 400 it deserves (except by
//!    [`parse_proxy_request_head`], for which it is a request like any other).
//!
//! The hot path does not allocate: httparse fills a stack array of
//! [`STACK_HEADER_SLOTS`] uninitialised slots (sliced to `limits.max_headers`),
//! and the caller's `headers` vector is reused. Only a configuration with
//! `max_headers` above [`STACK_HEADER_SLOTS`] allocates the slots per call.
//! Error paths are allowed to be slower: to name the problem precisely, they
//! re-run httparse on prefixes of the window to find the offending byte.

use std::mem::MaybeUninit;

use memchr::{memchr, memchr2};

use crate::response::is_token_character;
use crate::target::{parse_target, TargetForm};
use crate::{BodyFraming, HeaderSpan, Limits, Method, ProtoError, Span, Version};

/// Header slots on the stack (32 bytes each, left uninitialised, so they cost
/// nothing to set up). Configurations allowing more fields use a heap array.
const STACK_HEADER_SLOTS: usize = 128;

/// Empty lines tolerated before the request line. RFC 9112 2.2 asks to
/// ignore "at least one"; a few cover clients that send CRLF after a body.
const MAX_LEADING_EMPTY_LINES: usize = 8;

/// A parsed, validated request head. All spans point into the buffer given
/// to [`parse_request_head`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// The method, classified; [`Method::Other`] for extension methods.
    pub method: Method,
    /// The method token exactly as sent.
    pub method_span: Span,
    /// The whole request target: origin-form `/a/b?x=1`, absolute-form
    /// `http://host/a?x=1`, or `*` with OPTIONS (a CONNECT's authority-form
    /// target is refused with 405, so it never reaches a complete head).
    pub target: Span,
    /// The path part of the target: up to (not including) the first `?`,
    /// still percent-encoded. For an absolute-form target it is the part after
    /// the authority (empty when there is none, which means `/`); for `*` it is `*`.
    pub path: Span,
    /// The query part of the target, after the `?` (without it); `None` when there is no `?`.
    pub query: Option<Span>,
    /// HTTP/1.0 or HTTP/1.1; any other version was refused.
    pub version: Version,
    /// Length of the head in bytes including the final empty line: the body (or the next request) starts here.
    pub head_len: usize,
    /// How the request body after the head is delimited.
    pub framing: BodyFraming,
    /// Whether the connection may serve another request after this one:
    /// HTTP/1.1 unless a `Connection: close` token; HTTP/1.0 only with a `Connection: keep-alive` token.
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent (case-insensitive) in an HTTP/1.1 request
    /// (RFC 9110 10.1.1: the expectation is ignored in HTTP/1.0).
    pub expect_continue: bool,
    /// The request's host: the authority of an absolute-form target (RFC 9112
    /// 3.2.2: the Host field, still required in HTTP/1.1, is then ignored),
    /// otherwise the value of the single Host field, if present.
    pub host: Option<Span>,
}

/// The outcome of parsing a buffer that may hold only part of a head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadStatus {
    /// The head is not complete yet and no limit is broken: read more.
    Partial,
    /// A complete, valid head.
    Complete(RequestHead),
}

/// Parses the request head at the start of `buffer`.
///
/// `headers` is cleared and filled with the header fields in order (a reused
/// vector, so the hot path does not allocate). On `Partial`, its contents are
/// unspecified.
///
/// Rules (each refusal is a [`ProtoError`], after which the caller answers
/// and closes):
/// * up to a few leading empty lines (CRLF) before the request line are ignored (RFC 9112 2.2);
/// * request line longer than `limits.max_request_line`, complete or not: 414;
/// * head larger than `limits.max_head_size`, complete or not, or more than `limits.max_headers` fields: 431;
/// * a version `HTTP/x.y` with major version other than 1 (e.g. HTTP/2.0, HTTP/3.0): 505;
///   HTTP/1.0 and HTTP/1.1 are accepted; any other malformed version: 400;
/// * bare CR, whitespace between a field name and the colon, control
///   characters (other than HTAB) in field values, obsolete line folding, an
///   invalid method or field-name token: 400;
/// * a request target that is not valid for its method (see the `target`
///   module: visible ASCII only, no `#` fragment, origin-form or http(s)
///   absolute-form, `*` only with OPTIONS, authority-form only and always
///   with CONNECT): 400;
/// * HTTP/1.1 without a Host field, or any request with more than one Host field: 400;
/// * Content-Length that is not a valid decimal number (digits only, no sign,
///   no overflow of u64), a Content-Length list (`5, 5`, even of equal
///   values) or more than one Content-Length field (even with equal values): 400;
/// * Content-Length larger than `limits.max_body_size`: 413 (before any body byte is read);
/// * both Content-Length and Transfer-Encoding: 400;
/// * Transfer-Encoding in an HTTP/1.0 request: 400;
/// * Transfer-Encoding with a coding other than chunked/gzip/deflate/compress/x-gzip/x-compress: 501;
///   with `chunked` not the last coding, or `chunked` more than once: 400;
///   with a known compression coding before `chunked` (which rush does not decode): 501;
///   exactly `chunked` (case-insensitive, optional whitespace): `BodyFraming::Chunked`;
/// * CONNECT with a valid authority-form target: 405, once everything above
///   passed (rush is not a proxy).
///
/// Details of this implementation:
/// * line endings must be CRLF: a bare LF anywhere in the head is a 400, as
///   are more than 8 leading empty lines;
/// * `HTTP/1.x` with a minor version other than 0 or 1 is a 505 as well;
/// * the head size includes the leading empty lines;
/// * an empty element in a Transfer-Encoding list (`chunked,`) is a 400; a
///   Transfer-Encoding without `chunked` (e.g. only `gzip`) is a 400, as
///   RFC 9112 6.3 requires;
/// * `expect_continue` is only set for HTTP/1.1 (RFC 9110 10.1.1: a server
///   must ignore 100-continue in an HTTP/1.0 request);
/// * a Host field value must look like `host[:port]`, checked more loosely
///   than a target's authority (an empty value or port and unchecked `%`
///   escapes pass).
pub fn parse_request_head(
    buffer: &[u8],
    limits: &Limits,
    headers: &mut Vec<HeaderSpan>,
) -> Result<HeadStatus, ProtoError> {
    parse_head(buffer, limits, headers, Role::Server)
}

/// Parses a request head sent to a forward proxy: the same rules as
/// [`parse_request_head`], except that a well-formed CONNECT is a complete
/// head (its target, `host:port`, is [`RequestHead::target`]) instead of a 405.
pub fn parse_proxy_request_head(
    buffer: &[u8],
    limits: &Limits,
    headers: &mut Vec<HeaderSpan>,
) -> Result<HeadStatus, ProtoError> {
    parse_head(buffer, limits, headers, Role::Proxy)
}

/// Who parses: an origin server refuses CONNECT, a proxy serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Server,
    Proxy,
}

fn parse_head(
    buffer: &[u8],
    limits: &Limits,
    headers: &mut Vec<HeaderSpan>,
    role: Role,
) -> Result<HeadStatus, ProtoError> {
    if limits.max_headers <= STACK_HEADER_SLOTS {
        let mut slots: [MaybeUninit<httparse::Header<'_>>; STACK_HEADER_SLOTS] =
            [const { MaybeUninit::uninit() }; STACK_HEADER_SLOTS];
        parse_with_slots(
            buffer,
            limits,
            headers,
            &mut slots[..limits.max_headers],
            role,
        )
    } else {
        let mut slots = Vec::with_capacity(limits.max_headers);
        slots.resize_with(limits.max_headers, MaybeUninit::uninit);
        parse_with_slots(buffer, limits, headers, &mut slots, role)
    }
}

const BARE_CR: ProtoError = ProtoError::BadRequest("bare CR");
const BARE_LF: ProtoError = ProtoError::BadRequest("bare LF");
const INVALID_VERSION: ProtoError = ProtoError::BadRequest("invalid HTTP version");
const INVALID_CONTENT_LENGTH: ProtoError = ProtoError::BadRequest("invalid Content-Length");
const CONTENT_LENGTH_LIST: ProtoError =
    ProtoError::BadRequest("more than one Content-Length value");
const REPEATED_CONTENT_LENGTH: ProtoError =
    ProtoError::BadRequest("more than one Content-Length field");

/// Which limit, if any, cut the window given to httparse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WindowCut {
    /// The window is the whole buffer.
    None,
    /// No LF within `max_request_line + 2` bytes of the request line start.
    RequestLine,
    /// The buffer holds at least `max_head_size` bytes.
    Head,
}

impl WindowCut {
    /// The answer when httparse needs more bytes than the window holds.
    fn need_more(self) -> Result<HeadStatus, ProtoError> {
        match self {
            WindowCut::None => Ok(HeadStatus::Partial),
            WindowCut::RequestLine => Err(ProtoError::UriTooLong),
            WindowCut::Head => Err(ProtoError::HeadersTooLarge),
        }
    }
}

fn parse_with_slots<'buffer>(
    buffer: &'buffer [u8],
    limits: &Limits,
    headers: &mut Vec<HeaderSpan>,
    slots: &mut [MaybeUninit<httparse::Header<'buffer>>],
    role: Role,
) -> Result<HeadStatus, ProtoError> {
    let Some(line_start) = skip_leading_empty_lines(buffer)? else {
        return Ok(HeadStatus::Partial);
    };
    let (window_end, cut) = parse_window(buffer, line_start, limits);
    if window_end <= line_start {
        // Only possible when max_head_size is smaller than the empty lines.
        return cut.need_more();
    }
    let window = &buffer[line_start..window_end];

    let mut request = httparse::Request::new(&mut []);
    let parsed_len = match request.parse_with_uninit_headers(window, slots) {
        Ok(httparse::Status::Complete(parsed_len)) => parsed_len,
        Ok(httparse::Status::Partial) => return cut.need_more(),
        Err(error) => {
            return match refusal_for(window, error, slots) {
                Some(refusal) => Err(refusal),
                None => cut.need_more(),
            };
        }
    };
    let head_len = line_start + parsed_len;

    // httparse accepts a bare LF wherever CRLF belongs. Every LF of a head
    // ends a line, and every line ends either right before a field name or
    // in the last four bytes, so checking those places finds them all.
    if buffer[head_len - 4..head_len] != *b"\r\n\r\n" {
        return Err(BARE_LF);
    }

    // Offsets are computed from the addresses of httparse's sub-slices of
    // `buffer`; no unsafe code is needed for that.
    let base = buffer.as_ptr() as usize;
    let offset_of = |part: &[u8]| part.as_ptr() as usize - base;
    let span_of = |part: &[u8]| {
        let start = offset_of(part);
        Span::new(start, start + part.len())
    };

    let method_token = request
        .method
        .expect("httparse sets the method of a complete head");
    let target_text = request
        .path
        .expect("httparse sets the target of a complete head");
    let version = match request.version {
        Some(0) => Version::Http10,
        Some(1) => Version::Http11,
        other => unreachable!("httparse only completes HTTP/1.0 and HTTP/1.1, got {other:?}"),
    };
    let method = Method::from_token(method_token.as_bytes());
    let method_span = span_of(method_token.as_bytes());
    let target = span_of(target_text.as_bytes());
    let target_form = parse_target(target_text.as_bytes(), method)?;
    // Routing uses the path: all of an origin-form target up to `?`, the
    // part after the authority of an absolute-form one (empty there means
    // `/`), and the whole target of the other forms.
    let (path, query) = match target_form.path_start() {
        None => (target, None),
        Some(path_start) => {
            let origin = Span::new(target.start as usize + path_start, target.end as usize);
            match memchr(b'?', &target_text.as_bytes()[path_start..]) {
                Some(question_mark) => {
                    let question_mark = origin.start as usize + question_mark;
                    (
                        Span::new(origin.start as usize, question_mark),
                        Some(Span::new(question_mark + 1, origin.end as usize)),
                    )
                }
                None => (origin, None),
            }
        }
    };
    // RFC 9112 3.2.2: the authority of an absolute-form target is the
    // request's host; the Host field is still required and checked, then ignored.
    let target_host = match target_form {
        TargetForm::Absolute { authority, .. } => Some(Span::new(
            target.start as usize + authority.0,
            target.start as usize + authority.1,
        )),
        _ => None,
    };

    let mut fields = FieldSummary::default();
    headers.clear();
    headers.reserve(request.headers.len());
    for header in request.headers.iter() {
        let name = header.name.as_bytes();
        let name_start = offset_of(name);
        // The byte before a field name is the LF ending the previous line.
        if buffer[name_start - 2] != b'\r' {
            return Err(BARE_LF);
        }
        let span = HeaderSpan {
            name: Span::new(name_start, name_start + name.len()),
            value: span_of(header.value),
        };
        headers.push(span);
        fields.add(name, header.value, span.value)?;
    }

    let framing = fields.framing(version, limits)?;
    if target_form == TargetForm::Authority && role == Role::Server {
        // A well-formed CONNECT asks for a tunnel, which only a proxy makes.
        // Refused last, so a malformed CONNECT gets the 400 it deserves.
        return Err(ProtoError::MethodNotAllowed(
            "CONNECT is not supported: this server is not a proxy",
        ));
    }
    let keep_alive =
        !fields.connection_close && (version == Version::Http11 || fields.connection_keep_alive);
    Ok(HeadStatus::Complete(RequestHead {
        method,
        method_span,
        target,
        path,
        query,
        version,
        head_len,
        framing,
        keep_alive,
        expect_continue: fields.expect_continue && version == Version::Http11,
        host: target_host.or(fields.host),
    }))
}

/// The offset of the request line, or `None` if the buffer ends before it.
fn skip_leading_empty_lines(buffer: &[u8]) -> Result<Option<usize>, ProtoError> {
    let mut position = 0;
    for _ in 0..=MAX_LEADING_EMPTY_LINES {
        match buffer.get(position) {
            None => return Ok(None),
            Some(b'\r') => match buffer.get(position + 1) {
                None => return Ok(None),
                Some(b'\n') => position += 2,
                Some(_) => return Err(BARE_CR),
            },
            Some(b'\n') => return Err(BARE_LF),
            Some(_) => return Ok(Some(position)),
        }
    }
    Err(ProtoError::BadRequest(
        "too many empty lines before the request line",
    ))
}

/// Where to cut the bytes given to httparse, and which limit cut them.
fn parse_window(buffer: &[u8], line_start: usize, limits: &Limits) -> (usize, WindowCut) {
    // The request line plus its CRLF fits in max_request_line + 2 bytes; if
    // that many bytes hold no LF, the line is too long. Small buffers (the
    // common case) cannot be too long yet and skip the search.
    let line_bound = line_start
        .saturating_add(limits.max_request_line)
        .saturating_add(2);
    let line_cut = (buffer.len() >= line_bound
        && memchr(b'\n', &buffer[line_start..line_bound]).is_none())
    .then_some(line_bound);
    // With max_head_size bytes buffered and no complete head among them, the
    // head is too large.
    let head_cut = (buffer.len() >= limits.max_head_size).then_some(limits.max_head_size);
    match (line_cut, head_cut) {
        (Some(line_end), Some(head_end)) if head_end < line_end => (head_end, WindowCut::Head),
        (Some(line_end), _) => (line_end, WindowCut::RequestLine),
        (None, Some(head_end)) => (head_end, WindowCut::Head),
        (None, None) => (buffer.len(), WindowCut::None),
    }
}

/// Turns an httparse error on `window` into a refusal, or `None` when the
/// bytes so far are a valid beginning and only more input can decide.
///
/// The latter happens for versions: httparse refuses `HTTP/2` as soon as it
/// sees the `2`, but whether that is a 505 (`HTTP/2.0`) or a 400 (`HTTP/2x`)
/// depends on bytes that may not have arrived.
#[cold]
fn refusal_for<'buffer>(
    window: &'buffer [u8],
    error: httparse::Error,
    slots: &mut [MaybeUninit<httparse::Header<'buffer>>],
) -> Option<ProtoError> {
    match error {
        httparse::Error::TooManyHeaders => Some(ProtoError::HeadersTooLarge),
        httparse::Error::Version => refusal_for_version(window),
        other => Some(ProtoError::BadRequest(describe_syntax_error(
            window, other, slots,
        ))),
    }
}

/// Classifies the version of a request line httparse refused for its
/// version: `HTTP/<digit>.<digit>` followed by the line end is a 505 (for
/// any major version other than 1, and for HTTP/1.x other than 1.0/1.1);
/// anything else is a 400.
fn refusal_for_version(request_line: &[u8]) -> Option<ProtoError> {
    // httparse read "method SP target SP" before refusing the version, and
    // neither the method nor the target can hold a space.
    let method_end = memchr(b' ', request_line)?;
    let target_end = method_end + 1 + memchr(b' ', &request_line[method_end + 1..])?;
    let rest = &request_line[target_end + 1..];
    let (version, terminated) = match memchr2(b'\r', b'\n', rest) {
        Some(line_end) => (&rest[..line_end], true),
        None => (rest, false),
    };

    const SHAPE: &[u8; 8] = b"HTTP/d.d";
    let fits_shape = version.len() <= SHAPE.len()
        && version
            .iter()
            .zip(SHAPE)
            .all(|(&byte, &expected)| match expected {
                b'd' => byte.is_ascii_digit(),
                _ => byte == expected,
            });
    if !fits_shape {
        return Some(INVALID_VERSION);
    }
    if !terminated {
        return None;
    }
    if version.len() < SHAPE.len() {
        return Some(INVALID_VERSION);
    }
    let (major, minor) = (version[5], version[7]);
    if major == b'1' && (minor == b'0' || minor == b'1') {
        // httparse accepts these; it refused something after them.
        return Some(ProtoError::BadRequest("invalid request line"));
    }
    Some(ProtoError::VersionNotSupported)
}

/// A short description of the syntax error httparse found in `window`.
fn describe_syntax_error<'buffer>(
    window: &'buffer [u8],
    error: httparse::Error,
    slots: &mut [MaybeUninit<httparse::Header<'buffer>>],
) -> &'static str {
    let error_length = first_error_length(window, slots);
    let offending = window[error_length - 1];
    let previous = error_length.checked_sub(2).map(|index| window[index]);
    if previous == Some(b'\r') && offending != b'\n' {
        // httparse accepted the CR and refused what followed instead of LF.
        return "bare CR";
    }
    match error {
        httparse::Error::Token => {
            let method_end = memchr(b' ', window).unwrap_or(window.len());
            let method = &window[..method_end];
            if !method.is_empty() && method.iter().all(|&byte| is_token_character(byte)) {
                "invalid request target"
            } else {
                "invalid method"
            }
        }
        httparse::Error::HeaderName => match offending {
            b' ' | b'\t' if previous == Some(b'\n') => {
                "whitespace at start of header line (obsolete line folding)"
            }
            b' ' | b'\t' => "whitespace in header field name",
            b'\r' | b'\n' => "header field without colon",
            _ => "invalid header name",
        },
        httparse::Error::HeaderValue => "invalid character in header value",
        httparse::Error::NewLine => "invalid request line",
        _ => "malformed request head",
    }
}

/// The length of the shortest prefix of `window` that httparse refuses, so
/// `window[length - 1]` is the byte it choked on. httparse reads left to
/// right and refuses as soon as it can, so "refused" is monotone in the
/// prefix length and a binary search finds the boundary. `window` itself
/// must be refused.
fn first_error_length<'buffer>(
    window: &'buffer [u8],
    slots: &mut [MaybeUninit<httparse::Header<'buffer>>],
) -> usize {
    // Invariant: window[..accepted] is not refused, window[..refused] is.
    let (mut accepted, mut refused) = (0, window.len());
    while refused - accepted > 1 {
        let middle = accepted + (refused - accepted) / 2;
        let mut request = httparse::Request::new(&mut []);
        if request
            .parse_with_uninit_headers(&window[..middle], slots)
            .is_err()
        {
            refused = middle;
        } else {
            accepted = middle;
        }
    }
    refused
}

/// What the framing-relevant header fields of one head said.
#[derive(Debug, Default)]
struct FieldSummary {
    host: Option<Span>,
    host_count: usize,
    content_length: Option<u64>,
    transfer_codings: TransferCodings,
    connection_close: bool,
    connection_keep_alive: bool,
    expect_continue: bool,
}

impl FieldSummary {
    /// Takes one field into account; refuses a malformed Content-Length at once.
    #[inline]
    fn add(&mut self, name: &[u8], value: &[u8], value_span: Span) -> Result<(), ProtoError> {
        // Dispatching on the length first keeps most fields to one comparison.
        match name.len() {
            4 if name.eq_ignore_ascii_case(b"host") => {
                if !crate::target::is_valid_host_field(value) {
                    return Err(ProtoError::BadRequest("invalid Host header"));
                }
                self.host_count += 1;
                self.host = Some(value_span);
            }
            6 if name.eq_ignore_ascii_case(b"expect") => {
                self.expect_continue |= list_elements(value)
                    .any(|element| element.eq_ignore_ascii_case(b"100-continue"));
            }
            10 if name.eq_ignore_ascii_case(b"connection") => {
                for option in list_elements(value) {
                    if option.eq_ignore_ascii_case(b"close") {
                        self.connection_close = true;
                    } else if option.eq_ignore_ascii_case(b"keep-alive") {
                        self.connection_keep_alive = true;
                    }
                }
            }
            14 if name.eq_ignore_ascii_case(b"content-length") => {
                let length = parse_content_length(value)?;
                if self.content_length.is_some() {
                    // Even with an equal value, which RFC 9110 8.6 would
                    // allow: a front end that picks one of the fields and a
                    // back end that picks another must never both accept.
                    return Err(REPEATED_CONTENT_LENGTH);
                }
                self.content_length = Some(length);
            }
            17 if name.eq_ignore_ascii_case(b"transfer-encoding") => {
                self.transfer_codings.add_field(value);
            }
            _ => {}
        }
        Ok(())
    }

    /// Applies the rules that need all fields, and decides the body framing.
    fn framing(&self, version: Version, limits: &Limits) -> Result<BodyFraming, ProtoError> {
        if self.host_count > 1 {
            return Err(ProtoError::BadRequest("multiple Host headers"));
        }
        if self.host_count == 0 && version == Version::Http11 {
            return Err(ProtoError::BadRequest("missing Host header"));
        }
        if self.transfer_codings.present {
            if self.content_length.is_some() {
                return Err(ProtoError::BadRequest(
                    "both Content-Length and Transfer-Encoding",
                ));
            }
            if version == Version::Http10 {
                return Err(ProtoError::BadRequest(
                    "Transfer-Encoding in an HTTP/1.0 request",
                ));
            }
            self.transfer_codings.verdict()?;
            return Ok(BodyFraming::Chunked);
        }
        match self.content_length {
            None | Some(0) => Ok(BodyFraming::Empty),
            Some(length) if length > limits.max_body_size => Err(ProtoError::PayloadTooLarge),
            Some(length) => Ok(BodyFraming::ContentLength(length)),
        }
    }
}

/// The transfer codings of all Transfer-Encoding fields, in order.
#[derive(Debug, Default)]
struct TransferCodings {
    /// At least one Transfer-Encoding field was present.
    present: bool,
    /// `chunked` was seen (so every later coding is an error).
    chunked: bool,
    /// A known compression coding was seen.
    compressed: bool,
    /// A coding rush does not know was seen.
    unknown: bool,
    /// The first structural error: an empty element, or a coding after `chunked`.
    malformed: Option<ProtoError>,
}

impl TransferCodings {
    fn add_field(&mut self, value: &[u8]) {
        self.present = true;
        for coding in list_elements(value) {
            self.add_coding(coding);
        }
    }

    fn add_coding(&mut self, coding: &[u8]) {
        if self.malformed.is_some() {
            return;
        }
        if coding.is_empty() {
            self.malformed = Some(ProtoError::BadRequest("empty transfer coding"));
        } else if self.chunked {
            self.malformed = Some(ProtoError::BadRequest(
                if coding.eq_ignore_ascii_case(b"chunked") {
                    "chunked applied more than once"
                } else {
                    "chunked must be the final transfer coding"
                },
            ));
        } else if coding.eq_ignore_ascii_case(b"chunked") {
            self.chunked = true;
        } else if [
            &b"gzip"[..],
            b"deflate",
            b"compress",
            b"x-gzip",
            b"x-compress",
        ]
        .iter()
        .any(|known| coding.eq_ignore_ascii_case(known))
        {
            self.compressed = true;
        } else {
            self.unknown = true;
        }
    }

    /// `Ok` when the codings are exactly `chunked`.
    fn verdict(&self) -> Result<(), ProtoError> {
        if let Some(error) = self.malformed {
            return Err(error);
        }
        if self.unknown {
            return Err(ProtoError::NotImplemented("unsupported transfer coding"));
        }
        if !self.chunked {
            // RFC 9112 6.3: the length of such a request cannot be determined.
            return Err(ProtoError::BadRequest(
                "chunked must be the final transfer coding",
            ));
        }
        if self.compressed {
            return Err(ProtoError::NotImplemented(
                "compressed transfer codings are not supported",
            ));
        }
        Ok(())
    }
}

/// The elements of a comma-separated field value, with the optional
/// whitespace around each removed; empty elements are kept (as empty slices).
pub(crate) fn list_elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&byte| byte == b',').map(trim_whitespace)
}

fn trim_whitespace(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// A Content-Length value: exactly one decimal number. A list is refused
/// even when its values agree (`5, 5`): RFC 9110 8.6 lets a recipient accept
/// that, but nginx and the strict servers refuse it, and a server that
/// accepts what others refuse is where smuggling starts.
fn parse_content_length(value: &[u8]) -> Result<u64, ProtoError> {
    parse_decimal(value).ok_or_else(|| {
        if memchr(b',', value).is_some() {
            CONTENT_LENGTH_LIST
        } else {
            INVALID_CONTENT_LENGTH
        }
    })
}

/// Digits only (no sign, no whitespace), at least one, without overflowing u64.
fn parse_decimal(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |number, &byte| {
        if !byte.is_ascii_digit() {
            return None;
        }
        number.checked_mul(10)?.checked_add(u64::from(byte - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_numbers() {
        assert_eq!(parse_decimal(b"0"), Some(0));
        assert_eq!(parse_decimal(b"007"), Some(7));
        assert_eq!(parse_decimal(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_decimal(b"18446744073709551616"), None);
        assert_eq!(parse_decimal(b"99999999999999999999"), None);
        for invalid in [
            &b""[..],
            b"+5",
            b"-1",
            b" 5",
            b"5 ",
            b"0x5",
            b"5a",
            b"1.0",
            b"\xd9\xa5",
        ] {
            assert_eq!(parse_decimal(invalid), None, "{invalid:?}");
        }
    }

    #[test]
    fn content_length_is_one_number() {
        assert_eq!(parse_content_length(b"5"), Ok(5));
        assert_eq!(parse_content_length(b"0"), Ok(0));
        for list in [
            &b"5, 5"[..],
            b"5,5",
            b"5,5 ,\t5",
            b"5, 6",
            b",",
            b"5,",
            b",5",
        ] {
            assert_eq!(
                parse_content_length(list),
                Err(CONTENT_LENGTH_LIST),
                "{list:?}"
            );
        }
        for invalid in [&b""[..], b"5 5", b"5;5", b"five"] {
            assert_eq!(
                parse_content_length(invalid),
                Err(INVALID_CONTENT_LENGTH),
                "{invalid:?}"
            );
        }
    }

    #[test]
    fn list_elements_trim_optional_whitespace() {
        let elements: Vec<&[u8]> = list_elements(b" a ,\tb\t,, c d ,").collect();
        assert_eq!(elements, [&b"a"[..], b"b", b"", b"c d", b""]);
        assert_eq!(trim_whitespace(b" \t "), b"");
    }

    #[test]
    fn version_classification() {
        let cases: [(&[u8], Option<ProtoError>); 12] = [
            (b"GET / HTTP/2.0\r\n", Some(ProtoError::VersionNotSupported)),
            (b"GET / HTTP/0.9\r\n", Some(ProtoError::VersionNotSupported)),
            (b"GET / HTTP/1.2\r\n", Some(ProtoError::VersionNotSupported)),
            (b"GET / HTTP/2.0", None),
            (b"GET / HTTP/2.", None),
            (b"GET / HTTP/2", None),
            (b"GET / HTTP/2\r\n", Some(INVALID_VERSION)),
            (b"GET / HTTP/20\r\n", Some(INVALID_VERSION)),
            (b"GET / HTTP/2.0x", Some(INVALID_VERSION)),
            (b"GET / http/1.1\r\n", Some(INVALID_VERSION)),
            (b"GET /  HTTP/1.1\r\n", Some(INVALID_VERSION)),
            (
                b"GET / HTTP/1.1\rX",
                Some(ProtoError::BadRequest("invalid request line")),
            ),
        ];
        for (line, expected) in cases {
            assert_eq!(
                refusal_for_version(line),
                expected,
                "{:?}",
                String::from_utf8_lossy(line)
            );
        }
    }
}

#[cfg(test)]
mod host_tests {
    use crate::target::is_valid_host_field as is_valid_host;

    #[test]
    fn host_values() {
        for valid in [
            &b"example.com"[..],
            b"example.com:8080",
            b"127.0.0.1:80",
            b"[::1]",
            b"[::1]:8000",
            b"",
            b"a_b",
            b"%41.example",
        ] {
            assert!(is_valid_host(valid), "{:?}", String::from_utf8_lossy(valid));
        }
        for invalid in [
            &b"exa mple.com"[..],
            b"example.com/path",
            b"example.com:80x",
            b"user@example.com",
            b"[::1",
            b"[]",
            b"a:1:2",
            b"[::1]x",
            b"x:",
            b"x:99999",
            b"%zz.example",
            b"[fe80::1%eth0]",
        ] {
            assert!(
                !is_valid_host(invalid),
                "{:?}",
                String::from_utf8_lossy(invalid)
            );
        }
    }
}
