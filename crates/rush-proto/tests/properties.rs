//! Property tests: hostile or random input never panics, and framing does
//! not depend on how the bytes were split across reads.
//!
//! These stand in for a coverage-guided fuzzer (cargo-fuzz needs a nightly
//! toolchain): proptest generates thousands of inputs per run, biased
//! towards HTTP-looking bytes so the interesting paths are reached.

use proptest::prelude::*;
use rush_proto::{parse_request_head, ChunkedDecoder, HeadStatus, HeaderSpan, Limits};

/// Bytes that look like HTTP often enough to get past the first checks.
fn http_like() -> impl Strategy<Value = Vec<u8>> {
    let pieces = prop_oneof![
        Just(b"GET / HTTP/1.1\r\n".to_vec()),
        Just(b"POST /a?b=c HTTP/1.0\r\n".to_vec()),
        Just(b"GET http://h:80/p#f HTTP/1.1\r\n".to_vec()),
        Just(b"CONNECT h:443 HTTP/1.1\r\n".to_vec()),
        Just(b"Host: example\r\n".to_vec()),
        Just(b"Content-Length: 5\r\n".to_vec()),
        Just(b"Content-Length: 5, 5\r\n".to_vec()),
        Just(b"Transfer-Encoding: chunked\r\n".to_vec()),
        Just(b"Transfer-Encoding: gzip, chunked\r\n".to_vec()),
        Just(b"Connection: close\r\n".to_vec()),
        Just(b"Expect: 100-continue\r\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b" ".to_vec()),
        Just(b":".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..12),
    ];
    proptest::collection::vec(pieces, 0..14).prop_map(|parts| parts.concat())
}

fn chunked_like() -> impl Strategy<Value = Vec<u8>> {
    let pieces = prop_oneof![
        Just(b"5\r\nhello\r\n".to_vec()),
        Just(b"0\r\n\r\n".to_vec()),
        Just(b"a;ext=1\r\n0123456789\r\n".to_vec()),
        Just(b"1 ; e = \"q\\\"\" ;f\r\nx\r\n".to_vec()),
        Just(b"fffffffffffffffffff\r\n".to_vec()),
        Just(b"Trailer: x\r\n".to_vec()),
        Just(b"X-Sum: 1\r\n".to_vec()),
        Just(b"\r\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..10),
    ];
    proptest::collection::vec(pieces, 0..10).prop_map(|parts| parts.concat())
}

fn small_limits() -> Limits {
    Limits {
        max_request_line: 64,
        max_head_size: 256,
        max_headers: 8,
        max_body_size: 64,
        max_chunk_line: 32,
        max_trailer_size: 64,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    #[test]
    fn head_parsing_never_panics(input in http_like(), limits in prop_oneof![Just(Limits::default()), Just(small_limits())]) {
        let mut headers: Vec<HeaderSpan> = Vec::new();
        let _ = parse_request_head(&input, &limits, &mut headers);
    }

    /// Parsing a prefix either needs more, or already gives the final answer.
    #[test]
    fn head_parsing_is_split_invariant(input in http_like(), split in any::<prop::sample::Index>()) {
        let limits = small_limits();
        let mut headers = Vec::new();
        let whole = parse_request_head(&input, &limits, &mut headers);
        let cut = split.index(input.len() + 1);
        match parse_request_head(&input[..cut], &limits, &mut headers) {
            Ok(HeadStatus::Partial) => {}
            prefix => prop_assert_eq!(prefix, whole),
        }
    }

    #[test]
    fn chunked_decoding_is_split_invariant(body in chunked_like(), split in any::<prop::sample::Index>()) {
        let limits = small_limits();
        let mut whole_body = Vec::new();
        let whole = ChunkedDecoder::new(&limits).decode(&body, &mut whole_body);
        let cut = split.index(body.len() + 1);
        let mut decoder = ChunkedDecoder::new(&limits);
        let mut split_body = Vec::new();
        let first = decoder.decode(&body[..cut], &mut split_body);
        let combined = first.and_then(|progress| {
            if progress.done {
                return Ok(progress);
            }
            let rest = &body[progress.consumed..];
            decoder.decode(rest, &mut split_body).map(|second| offset_progress(progress.consumed, second))
        });
        match (whole, combined) {
            (Ok(whole), Ok(combined)) => {
                prop_assert_eq!(whole.done, combined.done);
                if whole.done {
                    prop_assert_eq!(whole.consumed, combined.consumed);
                    prop_assert_eq!(&whole_body, &split_body);
                }
            }
            (Err(whole), Err(combined)) => prop_assert_eq!(whole, combined),
            (whole, combined) => prop_assert!(false, "whole {:?} but split {:?}", whole, combined),
        }
    }
}

/// Offsets a second decode's progress by what the first one consumed.
fn offset_progress(
    first_consumed: usize,
    second: rush_proto::ChunkedProgress,
) -> rush_proto::ChunkedProgress {
    rush_proto::ChunkedProgress {
        consumed: first_consumed + second.consumed,
        done: second.done,
    }
}
