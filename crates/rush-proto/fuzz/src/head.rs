//! The `request_head` target: `parse_request_head` on arbitrary bytes.
//!
//! The input is the buffer itself, so the corpus is plain HTTP. Each input
//! is parsed with the default limits (what the server runs with) and with
//! tiny ones, which put the 414/431 cut-offs within reach of small inputs.
//!
//! Invariants, for each set of limits:
//!
//! 1. No panic (a panic is what the fuzzer reports).
//! 2. Split consistency. The parser is one-shot: a server re-parses its
//!    whole buffer after each read. So "the same bytes in two reads give the
//!    same result" means: for every prefix, parsing the prefix gives either
//!    `Partial` or exactly the answer for the whole input (the same head and
//!    the same header spans, or the same error). Moreover a complete head is
//!    `Partial` exactly on the prefixes shorter than it, a `Partial` input has
//!    only `Partial` prefixes, and once a prefix is refused every longer one
//!    is refused the same way.
//! 3. An accepted head is re-checked independently: its spans tile the head
//!    exactly (leading CRLFs, request line, one line per field, final CRLF),
//!    every line ends in CRLF, tokens and values use their alphabets, the
//!    limits hold, and framing, keep-alive, Host and Expect follow the rules
//!    of the crate's documentation, recomputed here from the field list.
//! 4. Differential oracle: a head rush-proto accepts, httparse accepts too,
//!    with the same length, method, target, version and fields. (rush-proto
//!    is stricter, so httparse accepting what rush-proto refuses is fine.)
//!    An input rush-proto calls `Partial` is never complete for httparse.

use rush_proto::{
    parse_request_head, BodyFraming, HeadStatus, HeaderSpan, Limits, Method, ProtoError,
    RequestHead, Span, Version,
};

use crate::show;

/// Inputs longer than this are skipped: past the default 16 KiB head limit
/// every parse is a 431 and only costs time.
const MAX_INPUT: usize = 20 * 1024;

/// Inputs up to this long are checked at every split point; longer ones at
/// a sample that includes both ends and every limit boundary.
const EXHAUSTIVE_SPLITS: usize = 256;

type Outcome = Result<HeadStatus, ProtoError>;

/// The entry point of the target.
pub fn request_head(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    check_with(data, &Limits::default());
    check_with(data, &tiny_limits());
}

/// Limits small enough for short inputs to reach every cut-off.
pub fn tiny_limits() -> Limits {
    Limits {
        max_request_line: 32,
        max_head_size: 96,
        max_headers: 4,
        max_body_size: 100,
        ..Limits::default()
    }
}

fn parse(input: &[u8], limits: &Limits) -> (Outcome, Vec<HeaderSpan>) {
    let mut headers = Vec::new();
    let outcome = parse_request_head(input, limits, &mut headers);
    (outcome, headers)
}

fn check_with(data: &[u8], limits: &Limits) {
    let (whole, whole_headers) = parse(data, limits);
    match &whole {
        Ok(HeadStatus::Complete(head)) => {
            check_accepted(data, head, &whole_headers, limits);
            check_httparse_agrees(data, head, &whole_headers, limits);
        }
        Ok(HeadStatus::Partial) => check_httparse_not_complete(data, limits),
        Err(_) => {}
    }
    check_prefixes(data, limits, &whole, &whole_headers);
}

/// Invariant 2: every prefix is `Partial` or the whole input's own answer.
fn check_prefixes(data: &[u8], limits: &Limits, whole: &Outcome, whole_headers: &[HeaderSpan]) {
    let mut refused_at: Option<usize> = None;
    for end in split_points(data.len(), whole, limits) {
        let (prefix, prefix_headers) = parse(&data[..end], limits);
        let context = || {
            format!(
                "input {} cut at {end} (limits {limits:?}): prefix gives {prefix:?}, whole gives {whole:?}",
                show(data)
            )
        };
        match (whole, &prefix) {
            (Ok(HeadStatus::Complete(head)), Ok(HeadStatus::Partial)) => {
                assert!(end < head.head_len, "partial past the head: {}", context());
            }
            (Ok(HeadStatus::Complete(head)), Ok(HeadStatus::Complete(prefix_head))) => {
                assert!(
                    end >= head.head_len,
                    "complete before the head ends: {}",
                    context()
                );
                assert_eq!(prefix_head, head, "{}", context());
                assert_eq!(prefix_headers, whole_headers, "{}", context());
            }
            (Ok(HeadStatus::Partial), Ok(HeadStatus::Partial)) => {}
            (Err(_), Ok(HeadStatus::Partial)) => {
                if let Some(first) = refused_at {
                    panic!(
                        "partial after the prefix of {first} bytes was refused: {}",
                        context()
                    );
                }
            }
            (Err(error), Err(prefix_error)) => {
                assert_eq!(prefix_error, error, "{}", context());
                refused_at.get_or_insert(end);
            }
            _ => panic!("a prefix decided differently: {}", context()),
        }
    }
}

/// Every split point for short inputs; for long ones both ends, an even
/// sample, and the neighbourhood of the head's end and of every limit.
fn split_points(len: usize, whole: &Outcome, limits: &Limits) -> Vec<usize> {
    if len <= EXHAUSTIVE_SPLITS {
        return (0..=len).collect();
    }
    let mut points: Vec<usize> = (0..=64).collect();
    points.extend(len - 64..=len);
    let step = len / 128;
    points.extend((0..128).map(|index| index * step));
    let mut around = |center: usize| {
        points.extend(center.saturating_sub(3)..=center.saturating_add(3).min(len));
    };
    if let Ok(HeadStatus::Complete(head)) = whole {
        around(head.head_len);
    }
    around(limits.max_head_size);
    // The request line cut-off, for up to 8 leading empty lines.
    for empty_lines in 0..=8 {
        around(2 * empty_lines + limits.max_request_line + 2);
    }
    points.retain(|&point| point <= len);
    points.sort_unstable();
    points.dedup();
    points
}

/// RFC 9110 5.6.2 `tchar`.
fn is_tchar(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

/// HTAB, SP, visible ASCII and obs-text; no other control byte, no DEL.
fn is_value_byte(byte: u8) -> bool {
    byte == b'\t' || (b' '..=b'~').contains(&byte) || byte >= 0x80
}

fn is_blank(byte: u8) -> bool {
    byte == b' ' || byte == b'\t'
}

/// Comma-separated elements with optional whitespace removed (empty ones kept).
fn elements(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&byte| byte == b',').map(|element| {
        let start = element
            .iter()
            .position(|&byte| !is_blank(byte))
            .unwrap_or(element.len());
        let end = element
            .iter()
            .rposition(|&byte| !is_blank(byte))
            .map_or(start, |last| last + 1);
        &element[start..end]
    })
}

/// Invariant 3: the accepted head, re-checked from its spans and bytes.
fn check_accepted(data: &[u8], head: &RequestHead, headers: &[HeaderSpan], limits: &Limits) {
    let context = || format!("accepted head {} ({head:?}, limits {limits:?})", show(data));
    let head_len = head.head_len;
    assert!(head_len <= data.len(), "head past the input: {}", context());
    assert!(
        head_len <= limits.max_head_size,
        "head over max_head_size: {}",
        context()
    );
    assert!(
        headers.len() <= limits.max_headers,
        "too many fields: {}",
        context()
    );
    let bytes = &data[..head_len];

    // Every line ends in CRLF: no bare CR, no bare LF.
    for (index, &byte) in bytes.iter().enumerate() {
        match byte {
            b'\r' => assert_eq!(
                bytes.get(index + 1),
                Some(&b'\n'),
                "bare CR at {index}: {}",
                context()
            ),
            b'\n' => assert!(
                index > 0 && bytes[index - 1] == b'\r',
                "bare LF at {index}: {}",
                context()
            ),
            _ => {}
        }
    }
    assert!(bytes.ends_with(b"\r\n\r\n"), "head end: {}", context());

    // Leading empty lines, then the request line: method SP target SP version CRLF.
    let line_start = head.method_span.start as usize;
    assert!(
        line_start.is_multiple_of(2)
            && line_start <= 16
            && bytes[..line_start].chunks(2).all(|pair| pair == b"\r\n"),
        "leading empty lines: {}",
        context()
    );
    let method = head.method_span.of(data);
    assert!(
        !method.is_empty() && method.iter().all(|&byte| is_tchar(byte)),
        "method token: {}",
        context()
    );
    assert_eq!(head.method, Method::from_token(method), "{}", context());
    assert_eq!(data[head.method_span.end as usize], b' ', "{}", context());
    assert_eq!(head.target.start, head.method_span.end + 1, "{}", context());
    let target = head.target.of(data);
    assert!(
        !target.is_empty()
            && std::str::from_utf8(target).is_ok()
            && target.iter().all(|&byte| byte > b' ' && byte != 0x7f),
        "request target: {}",
        context()
    );
    let version_start = head.target.end as usize + 1;
    assert_eq!(data[version_start - 1], b' ', "{}", context());
    let version_text: &[u8] = match head.version {
        Version::Http10 => b"HTTP/1.0\r\n",
        Version::Http11 => b"HTTP/1.1\r\n",
        Version::Http2 | Version::Http3 => {
            panic!("the parser never reports HTTP/2 or HTTP/3: {}", context())
        }
    };
    assert_eq!(
        &data[version_start..version_start + version_text.len()],
        version_text,
        "version: {}",
        context()
    );
    let line_end = version_start + 8;
    assert!(
        line_end - line_start <= limits.max_request_line,
        "request line over max_request_line: {}",
        context()
    );

    // Path and query split the origin part of the target at its first '?'.
    let (path, query) = (head.path, head.query);
    assert!(
        head.target.start <= path.start && path.start <= path.end && path.end <= head.target.end,
        "path span: {}",
        context()
    );
    match query {
        Some(query) => {
            assert_eq!(data[path.end as usize], b'?', "{}", context());
            assert_eq!(query.start, path.end + 1, "{}", context());
            assert_eq!(query.end, head.target.end, "{}", context());
        }
        None => assert_eq!(path.end, head.target.end, "{}", context()),
    }
    assert!(
        !path.of(data).contains(&b'?'),
        "path holds a '?': {}",
        context()
    );

    // One line per field, each right after the previous line's CRLF.
    let mut next_line = line_end + 2;
    for (index, field) in headers.iter().enumerate() {
        let context = || format!("field {index} of {}", context());
        assert_eq!(field.name.start as usize, next_line, "{}", context());
        let name = field.name.of(data);
        assert!(
            !name.is_empty() && name.iter().all(|&byte| is_tchar(byte)),
            "field name: {}",
            context()
        );
        assert_eq!(data[field.name.end as usize], b':', "{}", context());
        let after_colon = field.name.end as usize + 1;
        let cr = after_colon
            + bytes[after_colon..]
                .iter()
                .position(|&byte| byte == b'\r')
                .expect("every field line ends in CRLF");
        let (value_start, value_end) = (field.value.start as usize, field.value.end as usize);
        assert!(
            after_colon <= value_start && value_start <= value_end && value_end <= cr,
            "value span outside its line: {}",
            context()
        );
        assert!(
            bytes[after_colon..value_start].iter().all(|&b| is_blank(b))
                && bytes[value_end..cr].iter().all(|&b| is_blank(b)),
            "value not trimmed, or bytes lost around it: {}",
            context()
        );
        let value = &bytes[value_start..value_end];
        assert!(
            value.iter().all(|&byte| is_value_byte(byte)),
            "value bytes: {}",
            context()
        );
        if let (Some(&first), Some(&last)) = (value.first(), value.last()) {
            assert!(!is_blank(first) && !is_blank(last), "{}", context());
        }
        next_line = cr + 2;
    }
    assert_eq!(
        next_line + 2,
        head_len,
        "bytes after the last field: {}",
        context()
    );

    check_field_rules(data, head, headers, limits);
}

/// The authority of an absolute-form target (`http://` or `https://`, any
/// case), up to the first `/` or `?`; None for the other forms.
fn absolute_authority(data: &[u8], target: Span) -> Option<Span> {
    let text = target.of(data);
    let scheme = [&b"http://"[..], &b"https://"[..]]
        .into_iter()
        .find(|scheme| {
            text.len() >= scheme.len() && text[..scheme.len()].eq_ignore_ascii_case(scheme)
        })?;
    let rest = &text[scheme.len()..];
    let end = rest
        .iter()
        .position(|&byte| byte == b'/' || byte == b'?')
        .unwrap_or(rest.len());
    let start = target.start as usize + scheme.len();
    Some(Span::new(start, start + end))
}

/// The framing, keep-alive, Host and Expect decisions, recomputed from the
/// field list by the rules in the crate's documentation.
fn check_field_rules(data: &[u8], head: &RequestHead, headers: &[HeaderSpan], limits: &Limits) {
    let context = || format!("accepted head {} ({head:?})", show(data));
    let fields = |wanted: &'static str| {
        headers
            .iter()
            .filter(move |field| field.name.of(data).eq_ignore_ascii_case(wanted.as_bytes()))
            .map(|field| field.value)
    };

    let hosts: Vec<_> = fields("host").collect();
    match head.version {
        Version::Http11 => assert_eq!(hosts.len(), 1, "Host count: {}", context()),
        Version::Http10 => assert!(hosts.len() <= 1, "Host count: {}", context()),
        Version::Http2 | Version::Http3 => {
            panic!("the parser never reports HTTP/2 or HTTP/3: {}", context())
        }
    }
    // RFC 9112 3.2.2: an absolute-form target's authority stands for the
    // host (the Host field is still required above, then ignored).
    let expected_host = absolute_authority(data, head.target).or(hosts.first().copied());
    assert_eq!(head.host, expected_host, "{}", context());
    if let Some(host) = head.host {
        let allowed =
            |byte: u8| byte.is_ascii_alphanumeric() || b"-._~%!$&'()*+,;=:[]".contains(&byte);
        assert!(
            host.of(data).iter().all(|&byte| allowed(byte)),
            "Host value: {}",
            context()
        );
    }

    let codings: Vec<Vec<u8>> = fields("transfer-encoding")
        .flat_map(|value| elements(value.of(data)))
        .map(|coding| coding.to_ascii_lowercase())
        .collect();
    let has_transfer_encoding = fields("transfer-encoding").next().is_some();
    let mut lengths = Vec::new();
    for value in fields("content-length") {
        for element in elements(value.of(data)) {
            assert!(
                !element.is_empty() && element.iter().all(u8::is_ascii_digit),
                "Content-Length element {}: {}",
                show(element),
                context()
            );
            let length = std::str::from_utf8(element)
                .ok()
                .and_then(|digits| digits.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("Content-Length overflows: {}", context()));
            lengths.push(length);
        }
    }
    let expected_framing = if has_transfer_encoding {
        assert!(lengths.is_empty(), "both CL and TE: {}", context());
        assert_eq!(head.version, Version::Http11, "TE in 1.0: {}", context());
        assert_eq!(codings, [b"chunked".to_vec()], "codings: {}", context());
        BodyFraming::Chunked
    } else {
        match lengths.first() {
            None | Some(0) => BodyFraming::Empty,
            Some(&length) => {
                assert!(
                    length <= limits.max_body_size,
                    "CL over limit: {}",
                    context()
                );
                BodyFraming::ContentLength(length)
            }
        }
    };
    if let Some(&first) = lengths.first() {
        assert!(
            lengths.iter().all(|&length| length == first),
            "differing Content-Length: {}",
            context()
        );
    }
    assert_eq!(head.framing, expected_framing, "framing: {}", context());

    let listed = |name: &'static str, option: &[u8]| {
        fields(name).any(|value| {
            elements(value.of(data)).any(|element| element.eq_ignore_ascii_case(option))
        })
    };
    let keep_alive = !listed("connection", b"close")
        && (head.version == Version::Http11 || listed("connection", b"keep-alive"));
    assert_eq!(head.keep_alive, keep_alive, "keep_alive: {}", context());
    let expect_continue = head.version == Version::Http11 && listed("expect", b"100-continue");
    assert_eq!(
        head.expect_continue,
        expect_continue,
        "expect_continue: {}",
        context()
    );
}

/// Invariant 4: httparse accepts the same head and reads it the same way.
fn check_httparse_agrees(data: &[u8], head: &RequestHead, headers: &[HeaderSpan], limits: &Limits) {
    let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut request = httparse::Request::new(&mut slots);
    let status = request.parse(data);
    let context = || {
        format!(
            "rush-proto accepted {} as {head:?}; httparse gave {status:?}",
            show(data)
        )
    };
    let Ok(httparse::Status::Complete(length)) = status else {
        panic!("httparse does not accept it: {}", context());
    };
    assert_eq!(length, head.head_len, "head length: {}", context());
    assert_eq!(
        request.method.map(str::as_bytes),
        Some(head.method_span.of(data)),
        "method: {}",
        context()
    );
    assert_eq!(
        request.path.map(str::as_bytes),
        Some(head.target.of(data)),
        "target: {}",
        context()
    );
    let version = match head.version {
        Version::Http10 => 0,
        Version::Http11 => 1,
        Version::Http2 | Version::Http3 => {
            panic!("the parser never reports HTTP/2 or HTTP/3: {}", context())
        }
    };
    assert_eq!(request.version, Some(version), "version: {}", context());
    assert_eq!(
        request.headers.len(),
        headers.len(),
        "field count: {}",
        context()
    );
    for (theirs, ours) in request.headers.iter().zip(headers) {
        assert_eq!(theirs.name.as_bytes(), ours.name.of(data), "{}", context());
        assert_eq!(theirs.value, ours.value.of(data), "{}", context());
    }
}

/// Invariant 4, other side: "need more" is never a complete head for httparse.
fn check_httparse_not_complete(data: &[u8], limits: &Limits) {
    let mut slots = vec![httparse::EMPTY_HEADER; limits.max_headers];
    let mut request = httparse::Request::new(&mut slots);
    let status = request.parse(data);
    assert!(
        !matches!(status, Ok(httparse::Status::Complete(_))),
        "rush-proto wants more of {} but httparse gave {status:?}",
        show(data)
    );
}
