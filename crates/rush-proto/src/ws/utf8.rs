//! Incremental UTF-8 validation for text messages that arrive in pieces.
//!
//! A text message may be split across frames, and a frame across reads, at
//! any byte, including the middle of a multi-byte character. RFC 6455 8.1
//! asks the receiver to fail the connection on invalid UTF-8, and Autobahn
//! (cases 6.x) checks that it does so as soon as the invalid byte arrives,
//! not when the message ends. So every piece is validated on arrival and
//! only the (at most three) bytes of an unfinished character are carried
//! over to the next piece.
//!
//! The standard library does the validation: `std::str::from_utf8` reports
//! "unexpected end" (`error_len() == None`) only when the trailing bytes
//! are a valid *prefix* of a character (it checks the ranges of the second
//! byte, so `F4 90` or `ED A0` is refused at once), which is exactly the
//! fail-fast rule.

/// Validates a byte stream piece by piece. Create one per text message (or
/// call [`Utf8Validator::reset`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Utf8Validator {
    /// The leading bytes of a character cut off at the end of the last piece.
    pending: [u8; 4],
    pending_len: u8,
}

/// The bytes seen so far can never become valid UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InvalidUtf8;

/// How many bytes the character starting with `lead` has (for a lead byte
/// that a valid prefix can start with).
fn sequence_width(lead: u8) -> usize {
    match lead {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        _ => 4,
    }
}

impl Utf8Validator {
    /// Forgets any unfinished character, ready for a new message.
    pub(crate) fn reset(&mut self) {
        self.pending_len = 0;
    }

    /// Validates the next piece of the stream; fails as soon as the bytes so
    /// far cannot be completed to valid UTF-8.
    pub(crate) fn feed(&mut self, mut piece: &[u8]) -> Result<(), InvalidUtf8> {
        if self.pending_len > 0 {
            // Finish the character left over from the previous piece first.
            let have = self.pending_len as usize;
            let width = sequence_width(self.pending[0]);
            let take = (width - have).min(piece.len());
            let mut character = self.pending;
            character[have..have + take].copy_from_slice(&piece[..take]);
            let character = &character[..have + take];
            match std::str::from_utf8(character) {
                Ok(_) => self.pending_len = 0,
                Err(error) if error.error_len().is_none() && character.len() < width => {
                    // Still a valid prefix, and the piece is used up.
                    self.pending[..character.len()].copy_from_slice(character);
                    self.pending_len = character.len() as u8;
                    return Ok(());
                }
                Err(_) => return Err(InvalidUtf8),
            }
            piece = &piece[take..];
        }
        match std::str::from_utf8(piece) {
            Ok(_) => Ok(()),
            Err(error) if error.error_len().is_none() => {
                let tail = &piece[error.valid_up_to()..];
                self.pending[..tail.len()].copy_from_slice(tail);
                self.pending_len = tail.len() as u8;
                Ok(())
            }
            Err(_) => Err(InvalidUtf8),
        }
    }

    /// Checks that the stream ends on a character boundary.
    pub(crate) fn finish(&mut self) -> Result<(), InvalidUtf8> {
        if self.pending_len == 0 {
            Ok(())
        } else {
            self.pending_len = 0;
            Err(InvalidUtf8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in the given pieces; returns the index of the piece
    /// that failed (pieces.len() for a failure at the end), or None.
    fn first_failure(pieces: &[&[u8]]) -> Option<usize> {
        let mut validator = Utf8Validator::default();
        for (index, piece) in pieces.iter().enumerate() {
            if validator.feed(piece).is_err() {
                return Some(index);
            }
        }
        validator.finish().err().map(|_| pieces.len())
    }

    #[test]
    fn agrees_with_std_at_every_split_and_byte_by_byte() {
        let inputs: [&[u8]; 14] = [
            b"",
            b"hello",
            "κόσμε".as_bytes(),
            "\u{10FFFF}\u{7FF}\u{FFFF}".as_bytes(),
            b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited",
            b"\xf4\x90\x80\x80",
            b"\xc0\xaf",
            b"\xe0\x80\xaf",
            b"\xed\xbf\xbf",
            b"\xf0\x8f\xbf\xbf",
            b"\xce",
            b"\xe1\xbd",
            b"\x80",
            b"\xff",
        ];
        for input in inputs {
            let valid = std::str::from_utf8(input).is_ok();
            for split in 0..=input.len() {
                let (a, b) = input.split_at(split);
                assert_eq!(
                    first_failure(&[a, b]).is_none(),
                    valid,
                    "{input:?} at {split}"
                );
            }
            let bytes: Vec<&[u8]> = input.chunks(1).collect();
            assert_eq!(first_failure(&bytes).is_none(), valid, "{input:?} by byte");
        }
    }

    #[test]
    fn fails_at_the_first_impossible_byte() {
        // U+10FFFF is the last code point: F4 90 can never be completed.
        let pieces: [&[u8]; 4] = [b"ok", b"\xf4", b"\x90", b"\x80\x80"];
        assert_eq!(first_failure(&pieces), Some(2));
        // A surrogate (ED A0..) fails on its second byte.
        assert_eq!(first_failure(&[b"\xed", b"\xa0", b"\x80"]), Some(1));
        // A continuation byte with no lead fails at once.
        assert_eq!(first_failure(&[b"a", b"\x80", b"b"]), Some(1));
        // A lead byte followed by an ASCII byte fails on that byte.
        assert_eq!(first_failure(&[b"\xce", b"a"]), Some(1));
        // A valid prefix at the end fails only at the end.
        assert_eq!(first_failure(&[b"a", b"\xe2\x82"]), Some(2));
    }

    #[test]
    fn every_code_point_boundary_around_the_ranges() {
        for code_point in [
            0x7F, 0x80, 0x7FF, 0x800, 0xD7FF, 0xE000, 0xFFFF, 0x10000, 0x10FFFF,
        ] {
            let character = char::from_u32(code_point).unwrap();
            let mut encoded = [0; 4];
            let bytes = character.encode_utf8(&mut encoded).as_bytes();
            let pieces: Vec<&[u8]> = bytes.chunks(1).collect();
            assert_eq!(first_failure(&pieces), None, "U+{code_point:X}");
        }
    }
}
