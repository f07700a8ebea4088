//! Encoding responses: status lines, validated header fields, canned errors.
//!
//! The server builds responses straight into its output buffer with these
//! functions. Header names and values that come from applications are
//! validated here, so no CR, LF or NUL from an app can split a response on
//! the wire.
//!
//! Status lines for every registered code are complete `&'static` byte
//! strings generated at compile time from one table, so the common case is a
//! single `extend_from_slice`; unregistered codes fall back to `itoa`.

use crate::ProtoError;

/// Defines [`reason_phrase`] and the precomputed status lines from one table,
/// so the two can never disagree.
macro_rules! status_table {
    ($($code:literal => $reason:literal,)*) => {
        /// The reason phrase for a status code (`"OK"`, `"Not Found"`, ...); `""` for unknown codes.
        pub fn reason_phrase(status: u16) -> &'static str {
            match status {
                $($code => $reason,)*
                _ => "",
            }
        }

        /// The whole `HTTP/1.1 <status> <reason>\r\n` line of a registered status code.
        fn registered_status_line(status: u16) -> Option<&'static [u8]> {
            match status {
                $($code => Some(concat!("HTTP/1.1 ", $code, " ", $reason, "\r\n").as_bytes()),)*
                _ => None,
            }
        }
    };
}

// The IANA HTTP status code registry (RFC 9110 wording where it renamed a
// phrase, e.g. 413 "Content Too Large" and 422 "Unprocessable Content").
status_table! {
    100 => "Continue",
    101 => "Switching Protocols",
    102 => "Processing",
    103 => "Early Hints",
    200 => "OK",
    201 => "Created",
    202 => "Accepted",
    203 => "Non-Authoritative Information",
    204 => "No Content",
    205 => "Reset Content",
    206 => "Partial Content",
    207 => "Multi-Status",
    208 => "Already Reported",
    226 => "IM Used",
    300 => "Multiple Choices",
    301 => "Moved Permanently",
    302 => "Found",
    303 => "See Other",
    304 => "Not Modified",
    305 => "Use Proxy",
    307 => "Temporary Redirect",
    308 => "Permanent Redirect",
    400 => "Bad Request",
    401 => "Unauthorized",
    402 => "Payment Required",
    403 => "Forbidden",
    404 => "Not Found",
    405 => "Method Not Allowed",
    406 => "Not Acceptable",
    407 => "Proxy Authentication Required",
    408 => "Request Timeout",
    409 => "Conflict",
    410 => "Gone",
    411 => "Length Required",
    412 => "Precondition Failed",
    413 => "Content Too Large",
    414 => "URI Too Long",
    415 => "Unsupported Media Type",
    416 => "Range Not Satisfiable",
    417 => "Expectation Failed",
    418 => "I'm a teapot",
    421 => "Misdirected Request",
    422 => "Unprocessable Content",
    423 => "Locked",
    424 => "Failed Dependency",
    425 => "Too Early",
    426 => "Upgrade Required",
    428 => "Precondition Required",
    429 => "Too Many Requests",
    431 => "Request Header Fields Too Large",
    451 => "Unavailable For Legal Reasons",
    500 => "Internal Server Error",
    501 => "Not Implemented",
    502 => "Bad Gateway",
    503 => "Service Unavailable",
    504 => "Gateway Timeout",
    505 => "HTTP Version Not Supported",
    506 => "Variant Also Negotiates",
    507 => "Insufficient Storage",
    508 => "Loop Detected",
    510 => "Not Extended",
    511 => "Network Authentication Required",
}

/// Appends `HTTP/1.1 <status> <reason>\r\n` to `out`.
///
/// For a code without a registered reason phrase the line is
/// `HTTP/1.1 <status> \r\n` (RFC 9112 allows an empty reason but keeps the
/// space). The caller is responsible for `status` being a three-digit code
/// (100..=999); this function does not check it.
pub fn write_status_line(out: &mut Vec<u8>, status: u16) {
    if let Some(line) = registered_status_line(status) {
        out.extend_from_slice(line);
        return;
    }
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(digits.format(status).as_bytes());
    out.extend_from_slice(b" \r\n");
}

/// `tchar` of RFC 9110 5.6.2, as a lookup table indexed by byte.
static TOKEN_CHARACTERS: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = matches!(
            byte as u8,
            b'a'..=b'z'
                | b'A'..=b'Z'
                | b'0'..=b'9'
                | b'!'
                | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        );
        byte += 1;
    }
    table
};

/// Whether `byte` is a `tchar` (RFC 9110 5.6.2), the alphabet of tokens:
/// method names, header names, transfer codings.
#[inline]
pub(crate) fn is_token_character(byte: u8) -> bool {
    TOKEN_CHARACTERS[byte as usize]
}

/// Whether `byte` may appear in a field value: HTAB, visible ASCII, space,
/// and obs-text (0x80..=0xFF); never a control character or DEL.
#[inline]
pub(crate) fn is_field_value_character(byte: u8) -> bool {
    byte == b'\t' || (b' '..=b'~').contains(&byte) || byte >= 0x80
}

/// Whether `name` is a valid field-name token (RFC 9110 5.1): non-empty, tchar only.
pub fn is_valid_header_name(name: &[u8]) -> bool {
    !name.is_empty() && name.iter().all(|&byte| is_token_character(byte))
}

/// Whether `value` may be sent as a field value: no CR, LF, NUL or other control
/// characters except HTAB.
///
/// DEL (0x7F) counts as a control character; bytes 0x80..=0xFF (obs-text) are
/// allowed, as RFC 9110 5.5 does.
pub fn is_valid_header_value(value: &[u8]) -> bool {
    value.iter().all(|&byte| is_field_value_character(byte))
}

/// Appends `name: value\r\n` to `out` after validating both; on an invalid
/// name or value nothing is appended and `Err` is returned.
///
/// The error is a [`ProtoError::BadRequest`] naming the problem; since the
/// field comes from the application, the server should treat it as an
/// application error (500), not as the client's fault.
pub fn write_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> Result<(), ProtoError> {
    if !is_valid_header_name(name) {
        return Err(ProtoError::BadRequest("invalid response header name"));
    }
    if !is_valid_header_value(value) {
        return Err(ProtoError::BadRequest("invalid response header value"));
    }
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// Appends `Content-Length: <length>\r\n`.
pub fn write_content_length(out: &mut Vec<u8>, length: u64) {
    let mut digits = itoa::Buffer::new();
    out.extend_from_slice(b"Content-Length: ");
    out.extend_from_slice(digits.format(length).as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends a complete response for a refused request: status line,
/// `Content-Type: text/plain; charset=utf-8`, `Content-Length`, `Connection: close`,
/// the given `date_line` (a whole `Date: ...\r\n` line from [`crate::DateCache`]),
/// and a body of the status code, reason phrase and `error.message()`.
///
/// The body is one line: `<status> <reason>: <message>\n`, for example
/// `400 Bad Request: bare CR\n`.
pub fn write_error_response(out: &mut Vec<u8>, error: &ProtoError, date_line: &[u8]) {
    let mut digits = itoa::Buffer::new();
    let body = error_page_parts(error, &mut digits);
    let fields: &[u8] = match error {
        ProtoError::MethodNotAllowed(_) => b"Allow: \r\n",
        _ => b"",
    };
    write_closing_response(out, error.status(), fields, date_line, &body);
}

/// The text/plain body of a refusal, `<status> <reason>: <message>\n`: what
/// [`write_error_response`] sends, for a protocol that frames its own
/// answer (HTTP/2), so a refusal reads the same over either protocol.
pub fn error_page(error: &ProtoError) -> Vec<u8> {
    let mut digits = itoa::Buffer::new();
    error_page_parts(error, &mut digits).concat()
}

/// [`error_page`] in pieces, so the HTTP/1.1 answer is written without
/// allocating.
fn error_page_parts<'a>(error: &'a ProtoError, digits: &'a mut itoa::Buffer) -> [&'a [u8]; 6] {
    let status = error.status();
    [
        digits.format(status).as_bytes(),
        b" ",
        reason_phrase(status).as_bytes(),
        b": ",
        error.message().as_bytes(),
        b"\n",
    ]
}

/// Appends a whole response the server answers on its own before closing
/// the connection: status line, `fields` (whole header lines, usually
/// none), `Content-Type: text/plain; charset=utf-8` (only when there is a
/// body), `Content-Length`, `Connection: close`, `date_line` (a whole
/// `Date: ...\r\n` line), the blank line, then the body, given as pieces so
/// callers can assemble it without allocating.
///
/// Every canned answer (refusals, [`crate::encode::write_request_timeout`])
/// goes through here, so they cannot drift apart in layout.
pub(crate) fn write_closing_response(
    out: &mut Vec<u8>,
    status: u16,
    fields: &[u8],
    date_line: &[u8],
    body: &[&[u8]],
) {
    let body_length: usize = body.iter().map(|piece| piece.len()).sum();
    write_status_line(out, status);
    out.extend_from_slice(fields);
    if body_length > 0 {
        out.extend_from_slice(b"Content-Type: text/plain; charset=utf-8\r\n");
    }
    write_content_length(out, body_length as u64);
    out.extend_from_slice(b"Connection: close\r\n");
    out.extend_from_slice(date_line);
    out.extend_from_slice(b"\r\n");
    for piece in body {
        out.extend_from_slice(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_phrases_cover_the_registry() {
        let expected = [
            (100, "Continue"),
            (101, "Switching Protocols"),
            (103, "Early Hints"),
            (200, "OK"),
            (204, "No Content"),
            (206, "Partial Content"),
            (301, "Moved Permanently"),
            (304, "Not Modified"),
            (308, "Permanent Redirect"),
            (400, "Bad Request"),
            (404, "Not Found"),
            (413, "Content Too Large"),
            (414, "URI Too Long"),
            (418, "I'm a teapot"),
            (422, "Unprocessable Content"),
            (431, "Request Header Fields Too Large"),
            (500, "Internal Server Error"),
            (501, "Not Implemented"),
            (505, "HTTP Version Not Supported"),
            (511, "Network Authentication Required"),
        ];
        for (status, phrase) in expected {
            assert_eq!(reason_phrase(status), phrase, "{status}");
        }
        for unknown in [
            0,
            99,
            104,
            199,
            306,
            420,
            499,
            509,
            512,
            599,
            600,
            999,
            1000,
            u16::MAX,
        ] {
            assert_eq!(reason_phrase(unknown), "", "{unknown}");
        }
    }

    #[test]
    fn every_registered_code_between_100_and_511_has_a_consistent_status_line() {
        let mut registered = 0;
        for status in 100..=511u16 {
            let phrase = reason_phrase(status);
            let mut out = Vec::new();
            write_status_line(&mut out, status);
            assert_eq!(out, format!("HTTP/1.1 {status} {phrase}\r\n").as_bytes());
            if !phrase.is_empty() {
                registered += 1;
                assert!(is_valid_header_value(phrase.as_bytes()));
            }
        }
        assert_eq!(registered, 62);
    }

    #[test]
    fn status_lines() {
        let mut out = b"existing".to_vec();
        write_status_line(&mut out, 200);
        assert_eq!(out, b"existingHTTP/1.1 200 OK\r\n");

        let mut out = Vec::new();
        write_status_line(&mut out, 599);
        assert_eq!(out, b"HTTP/1.1 599 \r\n");

        let mut out = Vec::new();
        write_status_line(&mut out, 404);
        assert_eq!(out, b"HTTP/1.1 404 Not Found\r\n");
    }

    #[test]
    fn header_names() {
        for valid in [
            &b"Content-Type"[..],
            b"x",
            b"X-Custom_Header.1",
            b"!#$%&'*+-.^_`|~09azAZ",
        ] {
            assert!(is_valid_header_name(valid), "{valid:?}");
        }
        for invalid in [
            &b""[..],
            b"Content Type",
            b"Content-Type:",
            b"a\r\nb",
            b"a\0",
            b"caf\xc3\xa9",
            b"(comment)",
            b"a/b",
            b"\"quoted\"",
            b"a\tb",
            b"\x7f",
        ] {
            assert!(!is_valid_header_name(invalid), "{invalid:?}");
        }
    }

    #[test]
    fn header_values() {
        for valid in [
            &b""[..],
            b"text/html",
            b"a\tb",
            b" padded ",
            b"caf\xc3\xa9",
            b"\x80\xff",
            b"~!@#",
        ] {
            assert!(is_valid_header_value(valid), "{valid:?}");
        }
        for invalid in [
            &b"a\rb"[..],
            b"a\nb",
            b"a\r\nSet-Cookie: x",
            b"\0",
            b"\x01",
            b"\x1f",
            b"\x7f",
            b"a\x0bb",
        ] {
            assert!(!is_valid_header_value(invalid), "{invalid:?}");
        }
        for byte in 0..=255u8 {
            let expected = byte == b'\t' || (0x20..0x7f).contains(&byte) || byte >= 0x80;
            assert_eq!(is_valid_header_value(&[byte]), expected, "{byte:#x}");
        }
    }

    #[test]
    fn write_header_validates_before_appending() {
        let mut out = Vec::new();
        write_header(&mut out, b"Content-Type", b"text/plain").unwrap();
        assert_eq!(out, b"Content-Type: text/plain\r\n");

        write_header(&mut out, b"X-Empty", b"").unwrap();
        assert_eq!(out, b"Content-Type: text/plain\r\nX-Empty: \r\n");

        let before = out.clone();
        assert_eq!(
            write_header(&mut out, b"X-Split", b"a\r\nSet-Cookie: evil=1"),
            Err(ProtoError::BadRequest("invalid response header value"))
        );
        assert_eq!(
            write_header(&mut out, b"Bad Name", b"x"),
            Err(ProtoError::BadRequest("invalid response header name"))
        );
        assert_eq!(
            write_header(&mut out, b"", b"x"),
            Err(ProtoError::BadRequest("invalid response header name"))
        );
        assert_eq!(out, before, "nothing appended on error");
    }

    #[test]
    fn content_length_lines() {
        let mut out = Vec::new();
        write_content_length(&mut out, 0);
        write_content_length(&mut out, 1234);
        write_content_length(&mut out, u64::MAX);
        assert_eq!(
            out,
            b"Content-Length: 0\r\nContent-Length: 1234\r\nContent-Length: 18446744073709551615\r\n"
        );
    }

    #[test]
    fn error_responses_are_complete_and_self_consistent() {
        let date = b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n";
        let mut out = Vec::new();
        write_error_response(&mut out, &ProtoError::BadRequest("bare CR"), date);
        let expected = "HTTP/1.1 400 Bad Request\r\n\
                        Content-Type: text/plain; charset=utf-8\r\n\
                        Content-Length: 25\r\n\
                        Connection: close\r\n\
                        Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n\
                        \r\n\
                        400 Bad Request: bare CR\n";
        assert_eq!(String::from_utf8(out).unwrap(), expected);

        let errors = [
            ProtoError::BadRequest("invalid header name"),
            ProtoError::MethodNotAllowed("CONNECT is not supported"),
            ProtoError::UriTooLong,
            ProtoError::HeadersTooLarge,
            ProtoError::PayloadTooLarge,
            ProtoError::NotImplemented("unsupported transfer coding"),
            ProtoError::VersionNotSupported,
        ];
        for error in errors {
            let mut out = Vec::new();
            write_error_response(&mut out, &error, date);
            let text = String::from_utf8(out).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            // HTTP/2 answers a refusal with the same text (`error_page`).
            assert_eq!(body.as_bytes(), error_page(&error));
            let status = error.status();
            assert!(head.starts_with(&format!("HTTP/1.1 {status} {}\r\n", reason_phrase(status))));
            assert!(head.contains("\r\nConnection: close\r\n"));
            // RFC 9110 15.5.6: a 405 carries Allow (and no other refusal does).
            assert_eq!(head.contains("\r\nAllow: \r\n"), status == 405, "{head}");
            assert!(head.ends_with("\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT"));
            assert!(head.contains(&format!("\r\nContent-Length: {}\r\n", body.len())));
            assert_eq!(
                body,
                format!("{status} {}: {}\n", reason_phrase(status), error.message())
            );
        }
    }
}
