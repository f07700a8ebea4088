//! Tests of the response framing decisions: the choice table, exact bytes,
//! errors, and properties checked against the crate's own chunked decoder.

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

proptest! {
    /// `admit` and `admit_end` make the same decisions as `encode` and
    /// `finish` (the same errors, the same counts), for a caller that
    /// frames the bytes itself: for any plan and any parts.
    #[test]
    fn admit_agrees_with_encode(
        status in prop::sample::select(vec![200u16, 204, 205, 304, 404]),
        head_request in any::<bool>(),
        declared in prop::option::of(0u64..64),
        http10 in any::<bool>(),
        parts in prop::collection::vec(0usize..40, 0..6),
        finish_early in any::<bool>(),
    ) {
        let chosen = plan(status, head_request, declared, None, http10);
        let mut encoding = BodyEncoder::choose(chosen);
        let mut admitting = BodyEncoder::choose(chosen);
        let mut out = Vec::new();
        if finish_early {
            prop_assert_eq!(encoding.finish(&mut out).is_ok(), admitting.admit_end().is_ok());
        }
        for length in parts {
            let data = vec![b'x'; length];
            let before = out.len();
            let encoded = encoding.encode(&data, &mut out);
            let admitted = admitting.admit(length as u64);
            prop_assert_eq!(encoded.is_ok(), admitted.is_ok());
            if let (Err(encoded), Err(admitted)) = (&encoded, &admitted) {
                prop_assert_eq!(encoded, admitted);
            }
            // Admitted for the wire exactly when encode appended something.
            prop_assert_eq!(admitted.unwrap_or(false), out.len() > before);
            prop_assert_eq!(encoding.written(), admitting.written());
        }
        prop_assert_eq!(encoding.finish(&mut out), admitting.admit_end());
        prop_assert_eq!(encoding.is_complete(), admitting.is_complete());
    }
}
