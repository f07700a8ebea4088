//! Pins the httparse 1.10 behaviours rush-proto builds on, so that an
//! httparse upgrade that changes one of them fails here, next to an
//! explanation, rather than somewhere in the head parser's tests.

use httparse::{Error, Request, Status, EMPTY_HEADER};

fn parse(input: &[u8]) -> httparse::Result<usize> {
    let mut headers = [EMPTY_HEADER; 8];
    Request::new(&mut headers).parse(input)
}

/// httparse accepts a bare LF as a line ending everywhere; rush-proto
/// therefore checks the line endings of every complete head itself.
#[test]
fn bare_lf_is_accepted_as_a_line_ending() {
    assert_eq!(
        parse(b"GET / HTTP/1.1\nHost: a\n\n"),
        Ok(Status::Complete(24))
    );
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nHost: a\n\r\n"),
        Ok(Status::Complete(26))
    );
}

/// httparse skips any number of leading empty lines, CRLF or bare LF;
/// rush-proto skips them itself (CRLF only, a bounded number) before calling it.
#[test]
fn leading_empty_lines_are_skipped_without_bound() {
    let mut input = b"\r\n\n".repeat(50);
    input.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(parse(&input), Ok(Status::Complete(input.len())));
}

/// A CR not followed by LF is refused, with an error kind that depends on
/// where it is; rush-proto finds the CR itself to say "bare CR".
#[test]
fn bare_cr_is_refused_with_various_kinds() {
    assert_eq!(parse(b"GET / HTTP/1.1\rX"), Err(Error::NewLine));
    assert_eq!(parse(b"GET / HTTP/1.1\r\nA: b\rX"), Err(Error::HeaderValue));
    assert_eq!(parse(b"GET / HTTP/1.1\r\nA: b\r\n\rX"), Err(Error::NewLine));
    assert_eq!(parse(b"GET /a\rb HTTP/1.1\r\n\r\n"), Err(Error::Token));
}

/// Requests get the strict header rules: no whitespace before the colon, no
/// obsolete line folding.
#[test]
fn strict_field_syntax_for_requests() {
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"),
        Err(Error::HeaderName)
    );
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n"),
        Err(Error::HeaderName)
    );
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\n A: b\r\n\r\n"),
        Err(Error::HeaderName)
    );
}

/// Control characters and DEL in values are refused, HTAB and obs-text are not.
#[test]
fn field_value_characters() {
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nA: \x01\r\n\r\n"),
        Err(Error::HeaderValue)
    );
    assert_eq!(
        parse(b"GET / HTTP/1.1\r\nA: \x7f\r\n\r\n"),
        Err(Error::HeaderValue)
    );
    assert!(matches!(
        parse(b"GET / HTTP/1.1\r\nA: a\tb\xff\r\n\r\n"),
        Ok(Status::Complete(_))
    ));
}

/// Request targets: httparse refuses controls and DEL, but takes a `#`,
/// raw UTF-8 and any form; rush-proto checks targets itself.
#[test]
fn request_target_bytes() {
    assert_eq!(parse(b"GET /a\x01 HTTP/1.1\r\n\r\n"), Err(Error::Token));
    assert_eq!(parse(b"GET /a\x7f HTTP/1.1\r\n\r\n"), Err(Error::Token));
    assert_eq!(parse(b"GET /a\tb HTTP/1.1\r\n\r\n"), Err(Error::Token));
    assert_eq!(parse(b"GET /\xff HTTP/1.1\r\n\r\n"), Err(Error::Token));
    for accepted in [
        &b"GET /a#b HTTP/1.1\r\n\r\n"[..],
        b"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n",
        b"GET foo/bar HTTP/1.1\r\n\r\n",
        b"GET s://]ufd/admin HTTP/1.1\r\n\r\n",
    ] {
        assert!(
            matches!(parse(accepted), Ok(Status::Complete(_))),
            "{accepted:?}"
        );
    }
}

/// Values come back without the whitespace around them.
#[test]
fn values_are_trimmed() {
    let mut headers = [EMPTY_HEADER; 2];
    let mut request = Request::new(&mut headers);
    request
        .parse(b"GET / HTTP/1.1\r\nA: \t 5 \t\r\n\r\n")
        .unwrap();
    assert_eq!(request.headers[0].value, b"5");
}

/// Only HTTP/1.0 and HTTP/1.1 parse; any other version is `Error::Version`,
/// even before the version is complete (`HTTP/2` is refused at the `2`).
/// rush-proto re-reads the version to choose between 505, 400 and "need more".
#[test]
fn versions() {
    assert_eq!(parse(b"GET / HTTP/2.0\r\n\r\n"), Err(Error::Version));
    assert_eq!(parse(b"GET / HTTP/1.2\r\n\r\n"), Err(Error::Version));
    assert_eq!(parse(b"GET / HTTP/2"), Err(Error::Version));
    assert_eq!(parse(b"GET / HTTP/1."), Ok(Status::Partial));
    assert_eq!(parse(b"GET / HTTP/1.10\r\n\r\n"), Err(Error::NewLine));
}

/// The (n+1)th field is only refused once its line is complete.
#[test]
fn too_many_headers_is_detected_at_the_end_of_the_extra_line() {
    let mut headers = [EMPTY_HEADER; 1];
    assert_eq!(
        Request::new(&mut headers).parse(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2"),
        Ok(Status::Partial)
    );
    let mut headers = [EMPTY_HEADER; 1];
    assert_eq!(
        Request::new(&mut headers).parse(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n"),
        Err(Error::TooManyHeaders)
    );
}
