//! The `encode_roundtrip` target: body pieces through `BodyEncoder` and back.
//!
//! Input layout: a sequence of pieces, each a length then that many bytes
//! (the last piece takes what is left). A length byte below 0x80 is the
//! length; otherwise its low 7 bits and the next byte make a 15-bit length,
//! so pieces of up to 32 KiB are reachable. Empty pieces are kept: the
//! encoder must write nothing for them (a zero-size chunk would end the body).
//!
//! Checks:
//!
//! * chunked (an HTTP/1.1 response of unknown length): the encoded bytes
//!   decode with `ChunkedDecoder`, whole and fed piece by piece as written,
//!   to exactly the concatenation, consuming exactly the encoded bytes even
//!   when another request follows; the reference decoder agrees; `written`
//!   counts the data; `finish` is idempotent and data after it is refused;
//! * Content-Length framing with the exact total: the output is the
//!   concatenation, complete after the last piece;
//! * Content-Length one byte short: the piece that crosses it is refused
//!   and nothing of it written; `finish` then reports what is missing.

use rush_proto::encode::{BodyEncoder, BodyKind, EncodeError, FramingHeader, FramingPlan};
use rush_proto::{ChunkedDecoder, Limits};

use crate::chunked::{feed, Outcome};
use crate::reference::{self, Verdict};
use crate::show;

/// Splits the input into pieces as the module documentation describes.
pub fn pieces(data: &[u8]) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    let mut rest = data;
    while let Some((&first, tail)) = rest.split_first() {
        let (length, tail) = if first < 0x80 {
            (usize::from(first), tail)
        } else {
            match tail.split_first() {
                Some((&second, tail)) => {
                    (usize::from(first & 0x7f) << 8 | usize::from(second), tail)
                }
                None => (0, tail),
            }
        };
        let (piece, tail) = tail.split_at(length.min(tail.len()));
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

fn plan(declared_length: Option<u64>) -> FramingPlan {
    FramingPlan {
        status: 200,
        head_request: false,
        declared_length,
        known_length: None,
        http10: false,
    }
}

/// The entry point of the target.
pub fn encode_roundtrip(data: &[u8]) {
    let pieces = pieces(data);
    let expected: Vec<u8> = pieces.concat();
    check_chunked(&pieces, &expected);
    check_content_length(&pieces, &expected);
}

fn check_chunked(pieces: &[&[u8]], expected: &[u8]) {
    let context = || {
        format!(
            "pieces {:?}",
            pieces.iter().map(|p| show(p)).collect::<Vec<_>>()
        )
    };
    let mut encoder = BodyEncoder::choose(plan(None));
    assert_eq!(encoder.framing_header(), FramingHeader::Chunked);
    assert_eq!(encoder.kind(), BodyKind::Chunked);
    let mut out = Vec::new();
    // Where each call's output ends, to feed the decoder as the server sends.
    let mut boundaries = vec![0];
    for piece in pieces {
        let before = out.len();
        encoder
            .encode(piece, &mut out)
            .expect("chunked data is never refused");
        if piece.is_empty() {
            assert_eq!(
                out.len(),
                before,
                "an empty piece wrote bytes: {}",
                context()
            );
        }
        boundaries.push(out.len());
    }
    assert!(!encoder.is_complete(), "{}", context());
    encoder.finish(&mut out).expect("finish of a chunked body");
    boundaries.push(out.len());
    assert!(encoder.is_complete() && !encoder.closes_connection());
    assert_eq!(encoder.written(), expected.len() as u64, "{}", context());

    // Idempotent finish; data after it refused without output.
    let length = out.len();
    encoder.finish(&mut out).expect("a second finish succeeds");
    assert_eq!(
        out.len(),
        length,
        "a second finish wrote bytes: {}",
        context()
    );
    assert_eq!(encoder.encode(b"x", &mut out), Err(EncodeError::Finished));
    assert_eq!(out.len(), length, "{}", context());

    let limits = Limits {
        max_body_size: u64::MAX,
        ..Limits::default()
    };
    let decoded = Outcome::Decoded {
        body: expected.to_vec(),
        consumed: out.len(),
        done: true,
    };
    let whole = feed(&limits, &[&out]);
    assert_eq!(whole, decoded, "encoded {}: {}", show(&out), context());
    let as_written: Vec<&[u8]> = boundaries.windows(2).map(|w| &out[w[0]..w[1]]).collect();
    let streamed = feed(&limits, &as_written);
    assert_eq!(streamed, decoded, "fed as written: {}", context());

    // A pipelined request after the body is left alone.
    let mut followed = out.clone();
    followed.extend_from_slice(b"GET / HTTP/1.1\r\n");
    let mut decoder = ChunkedDecoder::new(&limits);
    let mut body = Vec::new();
    let progress = decoder.decode(&followed, &mut body).expect("decodes");
    assert!(progress.done, "{}", context());
    assert_eq!(progress.consumed, out.len(), "{}", context());
    assert_eq!(body, expected, "{}", context());

    assert_eq!(
        reference::decode(&out, &limits),
        Verdict::Done {
            body: expected.to_vec(),
            consumed: out.len()
        },
        "the reference decoder: {}",
        context()
    );
}

fn check_content_length(pieces: &[&[u8]], expected: &[u8]) {
    let context = || {
        format!(
            "pieces {:?}",
            pieces.iter().map(|p| show(p)).collect::<Vec<_>>()
        )
    };
    let total = expected.len() as u64;

    let mut encoder = BodyEncoder::choose(plan(Some(total)));
    assert_eq!(
        encoder.framing_header(),
        FramingHeader::ContentLength(total)
    );
    let mut out = Vec::new();
    for piece in pieces {
        encoder.encode(piece, &mut out).expect("within the length");
    }
    assert!(encoder.is_complete(), "{}", context());
    encoder.finish(&mut out).expect("exact length");
    assert_eq!(out, expected, "{}", context());

    let Some(short) = total.checked_sub(1) else {
        return;
    };
    let mut encoder = BodyEncoder::choose(plan(Some(short)));
    let mut out = Vec::new();
    let mut refused = false;
    for piece in pieces {
        let before = out.len();
        if let Err(error) = encoder.encode(piece, &mut out) {
            // The server closes the connection here; nothing more is sent.
            assert_eq!(
                error,
                EncodeError::TooLong { declared: short },
                "{}",
                context()
            );
            assert_eq!(
                out.len(),
                before,
                "a refused piece wrote bytes: {}",
                context()
            );
            refused = true;
            break;
        }
    }
    assert!(refused, "one byte too many went out: {}", context());
    assert_eq!(out, expected[..out.len()], "{}", context());
    let missing = short - out.len() as u64;
    if missing > 0 {
        assert_eq!(
            encoder.finish(&mut Vec::new()),
            Err(EncodeError::TooShort { missing }),
            "{}",
            context()
        );
    }
}
