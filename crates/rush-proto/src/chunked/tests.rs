//! The chunked decoder's tests: a table of whole inputs, the limits at
//! their bounds, and the same input split at every offset and fed byte by
//! byte.

use super::*;
use crate::FORBIDDEN_TRAILER_FIELDS;

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
