//! The `h3_guard` target: rush-h3's `FrameGuard`, the frame-boundary
//! parser that follows the bytes of each QUIC stream before `h3` reads
//! them (crates/rush-h3/src/guard.rs, compiled here as it is, so this
//! package does not build QUIC and TLS).
//!
//! Input: a flags byte (0x01: a unidirectional stream, else a request
//! stream; 0x06: the frame limit, 0, 16, 1024 or unbounded), a
//! little-endian u16 split point, then the stream's bytes.
//!
//! Invariants: no panic or overflow; the bytes fed whole, in two pieces at
//! the split point and byte by byte give the same outcome; byte by byte,
//! the error comes at the last byte of the length of the first frame other
//! than DATA announcing more than the limit, as [`reference`] (a separate
//! whole-buffer reading of RFC 9114 section 7.1 and RFC 9000 section 16)
//! finds it; until then the useful count (HEADERS and DATA payload on a
//! request stream, nothing on a unidirectional one) is the reference's and
//! never more than the bytes fed; a stream type of 0x02 or 0x03 is named a
//! QPACK stream and nothing else is; after the error, nothing is counted.

#[path = "../../../rush-h3/src/guard.rs"]
#[allow(dead_code)]
mod guard;

use crate::{show, u16_at};
use guard::FrameGuard;

/// What the reference reading finds in a whole stream.
#[derive(Debug, PartialEq, Eq)]
pub struct Expected {
    /// Index of the byte at which the guard must refuse the stream.
    pub error_at: Option<usize>,
    /// Useful bytes before that point (or in the whole stream).
    pub useful: u64,
    /// The stream is a QPACK encoder or decoder stream.
    pub qpack: bool,
}

/// A complete QUIC varint at `data[pos..]`: its value and length.
fn varint(data: &[u8], pos: usize) -> Option<(u64, usize)> {
    let first = *data.get(pos)?;
    let len = 1usize << (first >> 6);
    let bytes = data.get(pos..pos + len)?;
    let mut value = u64::from(first & 0x3f);
    for b in &bytes[1..] {
        value = value << 8 | u64::from(*b);
    }
    Some((value, len))
}

/// Reads the frames of a whole stream, as the guard must.
pub fn reference(data: &[u8], unidirectional: bool, limit: u64) -> Expected {
    let mut expected = Expected {
        error_at: None,
        useful: 0,
        qpack: false,
    };
    let mut pos = 0;
    if unidirectional {
        let Some((ty, n)) = varint(data, 0) else {
            return expected;
        };
        match ty {
            0x00 => pos = n,
            0x02 | 0x03 => {
                expected.qpack = true;
                return expected;
            }
            _ => return expected,
        }
    }
    loop {
        let Some((ty, n)) = varint(data, pos) else {
            return expected;
        };
        pos += n;
        let Some((len, n)) = varint(data, pos) else {
            return expected;
        };
        pos += n;
        if ty != 0x00 && len > limit {
            expected.error_at = Some(pos - 1);
            return expected;
        }
        let available = ((data.len() - pos) as u64).min(len);
        if !unidirectional && (ty == 0x00 || ty == 0x01) {
            expected.useful += available;
        }
        pos += available as usize;
        if available < len {
            return expected;
        }
    }
}

fn guard(unidirectional: bool, limit: u64) -> FrameGuard {
    if unidirectional {
        FrameGuard::unidirectional(limit)
    } else {
        FrameGuard::request(limit)
    }
}

/// Feeds `pieces` in turn: the useful bytes counted before an error, the
/// piece the error came in, and whether the stream was named QPACK.
fn feed<'a>(
    mut g: FrameGuard,
    pieces: impl Iterator<Item = &'a [u8]>,
) -> (u64, Option<usize>, bool) {
    let mut useful = 0;
    let mut failed = None;
    for (i, piece) in pieces.enumerate() {
        match g.observe(piece) {
            Ok(n) if failed.is_some() => assert_eq!(n, 0, "counted after the error"),
            Ok(n) => {
                assert!(n <= piece.len() as u64, "{n} useful of {}", piece.len());
                useful += n;
            }
            Err(_) => {
                assert!(failed.is_none(), "a second error");
                failed = Some(i);
            }
        }
    }
    (useful, failed, g.is_qpack())
}

/// The target: see the module documentation.
pub fn h3_guard(data: &[u8]) {
    let flags = data.first().copied().unwrap_or(0);
    let split = u16_at(data, 1);
    let stream = data.get(3..).unwrap_or(&[]);
    let unidirectional = flags & 0x01 != 0;
    let limit = [0, 16, 1024, u64::MAX][usize::from(flags >> 1 & 0x03)];
    let expected = reference(stream, unidirectional, limit);
    let context = || format!("flags {flags:#04x}, stream {}", show(stream));

    let (useful, failed, qpack) = feed(guard(unidirectional, limit), stream.chunks(1));
    assert_eq!(failed, expected.error_at, "error position; {}", context());
    assert_eq!(useful, expected.useful, "useful bytes; {}", context());
    assert_eq!(qpack, expected.qpack, "QPACK stream; {}", context());
    if unidirectional {
        assert_eq!(useful, 0, "useful bytes on a unidirectional stream");
    }

    let (useful, failed, qpack) = feed(guard(unidirectional, limit), std::iter::once(stream));
    assert_eq!(
        failed.is_some(),
        expected.error_at.is_some(),
        "whole; {}",
        context()
    );
    if failed.is_none() {
        assert_eq!(useful, expected.useful, "whole, useful; {}", context());
    }
    assert_eq!(qpack, expected.qpack, "whole, QPACK; {}", context());

    let at = split.min(stream.len());
    let (head, tail) = stream.split_at(at);
    let (useful, failed, qpack) = feed(guard(unidirectional, limit), [head, tail].into_iter());
    let piece = expected.error_at.map(|i| usize::from(i >= at));
    assert_eq!(failed, piece, "split at {at}; {}", context());
    if failed.is_none() {
        assert_eq!(useful, expected.useful, "split, useful; {}", context());
    }
    assert_eq!(qpack, expected.qpack, "split, QPACK; {}", context());
}
