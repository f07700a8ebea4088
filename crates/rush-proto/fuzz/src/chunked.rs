//! The `chunked` target: `ChunkedDecoder` on arbitrary bytes, in pieces.
//!
//! Input layout: two little-endian u16 split points, then the body bytes.
//! (Shorter inputs are padded with zeros, so every input is valid.) The body
//! is decoded with the default limits and with small ones that put 413, 431
//! and the chunk-line limit within reach of short inputs, each time:
//!
//! * whole, in one call;
//! * in two pieces at the first split point;
//! * in three pieces at both split points;
//! * one byte at a time;
//!
//! fed as a server does (each call gets what earlier calls left unconsumed
//! plus the new piece). All four must give the same decoded bytes, consumed
//! count and done/error outcome; decoded output never exceeds
//! `max_body_size`; `decoded_len` matches the output; a failed decoder keeps
//! failing the same way and a finished one consumes nothing more; undecided
//! input is consumed whole. Finally the outcome must match
//! [`crate::reference`], an independent decoder.

use rush_proto::{ChunkedDecoder, Limits, ProtoError};

use crate::reference::{self, Verdict};
use crate::{show, u16_at};

/// Bodies longer than this are cut: the byte-at-a-time feed is linear, but
/// nothing interesting needs more.
const MAX_BODY_INPUT: usize = 64 * 1024;

/// What feeding a body produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every call succeeded.
    Decoded {
        /// The decoded bytes.
        body: Vec<u8>,
        /// Input bytes consumed over all calls.
        consumed: usize,
        /// The last call reported the body complete.
        done: bool,
    },
    /// A call failed; `body` is what had been decoded until then.
    Refused {
        /// The refusal.
        error: ProtoError,
        /// The bytes decoded before it.
        body: Vec<u8>,
    },
}

/// The entry point of the target.
pub fn chunked(data: &[u8]) {
    let (first, second) = (u16_at(data, 0), u16_at(data, 2));
    let input = data.get(4..).unwrap_or_default();
    let input = &input[..input.len().min(MAX_BODY_INPUT)];
    for limits in [Limits::default(), small_limits()] {
        check_with(input, first, second, &limits);
    }
}

/// Limits that short inputs can break.
pub fn small_limits() -> Limits {
    Limits {
        max_body_size: 64,
        max_chunk_line: 32,
        max_trailer_size: 48,
        ..Limits::default()
    }
}

fn check_with(input: &[u8], first: usize, second: usize, limits: &Limits) {
    let len = input.len();
    let (mut a, mut b) = (first % (len + 1), second % (len + 1));
    if a > b {
        std::mem::swap(&mut a, &mut b);
    }
    let whole = feed(limits, &[input]);
    let context = |how: &str, other: &Outcome| {
        format!(
            "body {} (limits {limits:?}) whole gives {whole:?}, {how} gives {other:?}",
            show(input)
        )
    };
    let two = feed(limits, &[&input[..a], &input[a..]]);
    assert_eq!(two, whole, "{}", context(&format!("split at {a}"), &two));
    let three = feed(limits, &[&input[..a], &input[a..b], &input[b..]]);
    assert_eq!(
        three,
        whole,
        "{}",
        context(&format!("split at {a} and {b}"), &three)
    );
    let pieces: Vec<&[u8]> = input.chunks(1).collect();
    let bytewise = feed(limits, &pieces);
    assert_eq!(
        bytewise,
        whole,
        "{}",
        context("one byte at a time", &bytewise)
    );

    let expected = reference::decode(input, limits);
    let agrees = match (&whole, &expected) {
        (
            Outcome::Decoded {
                body,
                consumed,
                done: true,
            },
            Verdict::Done {
                body: reference_body,
                consumed: reference_consumed,
            },
        ) => body == reference_body && consumed == reference_consumed,
        (
            Outcome::Decoded {
                body, done: false, ..
            },
            Verdict::NeedMore {
                body: reference_body,
            },
        ) => body == reference_body,
        (Outcome::Refused { .. }, Verdict::Refused) => true,
        _ => false,
    };
    assert!(
        agrees,
        "body {} (limits {limits:?}): rush-proto gives {whole:?}, the reference {expected:?}",
        show(input)
    );
}

/// Feeds `pieces` in order, as a server does, checking the per-call rules.
pub fn feed(limits: &Limits, pieces: &[&[u8]]) -> Outcome {
    let mut decoder = ChunkedDecoder::new(limits);
    let mut body = Vec::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut consumed = 0;
    let mut done = false;
    for piece in pieces {
        pending.extend_from_slice(piece);
        if done {
            // A server stops feeding a finished body; the rest is the next request.
            continue;
        }
        match decoder.decode(&pending, &mut body) {
            Ok(progress) => {
                assert!(progress.consumed <= pending.len());
                assert_eq!(decoder.decoded_len(), body.len() as u64);
                assert!(
                    decoder.decoded_len() <= limits.max_body_size,
                    "decoded {} bytes, over the limit",
                    decoder.decoded_len()
                );
                if !progress.done {
                    assert_eq!(
                        progress.consumed,
                        pending.len(),
                        "undecided input is consumed whole"
                    );
                }
                consumed += progress.consumed;
                pending.drain(..progress.consumed);
                done = progress.done;
            }
            Err(error) => {
                assert!(body.len() as u64 <= limits.max_body_size);
                let before = body.len();
                assert_eq!(
                    decoder.decode(b"0\r\n\r\n", &mut body),
                    Err(error),
                    "a failed decoder fails again the same way"
                );
                assert_eq!(body.len(), before, "a failed decoder decodes nothing");
                return Outcome::Refused { error, body };
            }
        }
    }
    if done {
        let before = body.len();
        let progress = decoder
            .decode(&pending, &mut body)
            .expect("a finished decoder does not fail");
        assert_eq!((progress.consumed, progress.done), (0, true));
        assert_eq!(body.len(), before);
    }
    Outcome::Decoded {
        body,
        consumed,
        done,
    }
}
