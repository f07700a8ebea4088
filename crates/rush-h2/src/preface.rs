//! Which protocol a cleartext connection speaks, from its first bytes.
//!
//! An HTTP/2 client with prior knowledge (h2c, RFC 9113 section 3.3) opens
//! with the 24-byte connection preface `PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`. No
//! valid HTTP/1.1 request starts with `PRI * HTTP/2.0` (rush-proto refuses
//! the version with 505), so one port can serve both: the server looks at
//! the first bytes before choosing a parser, and hands every byte it read,
//! the preface included, to the parser it chose.

/// The client connection preface (RFC 9113 section 3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What the first bytes of a connection say about its protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preface {
    /// The whole HTTP/2 client preface arrived: an h2c connection.
    Http2,
    /// The bytes differ from the preface: HTTP/1.1 (or garbage, which the
    /// HTTP/1.1 parser refuses as usual).
    Http1,
    /// Every byte so far matches the preface but it is not complete: read more.
    /// An empty input is this too.
    NeedMore,
}

/// Tells HTTP/2 prior knowledge from HTTP/1.1 on the first bytes read.
///
/// Decides as soon as one byte differs from the preface, so an HTTP/1.1
/// request is never delayed (its first byte differs unless its method starts
/// with `P`, and even `POST` differs at the second byte). A `PRI` request
/// line that goes on differently (`PRI * HTTP/1.1`) is HTTP/1.1.
pub fn detect_preface(first_bytes: &[u8]) -> Preface {
    let n = first_bytes.len().min(PREFACE.len());
    if first_bytes[..n] != PREFACE[..n] {
        Preface::Http1
    } else if n == PREFACE.len() {
        Preface::Http2
    } else {
        Preface::NeedMore
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefix_needs_more_and_the_whole_preface_is_h2() {
        for n in 0..PREFACE.len() {
            assert_eq!(detect_preface(&PREFACE[..n]), Preface::NeedMore, "{n}");
        }
        assert_eq!(detect_preface(PREFACE), Preface::Http2);
        let mut more = PREFACE.to_vec();
        more.extend_from_slice(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00");
        assert_eq!(detect_preface(&more), Preface::Http2);
    }

    #[test]
    fn http1_is_told_at_the_first_differing_byte() {
        assert_eq!(detect_preface(b"G"), Preface::Http1);
        assert_eq!(detect_preface(b"PO"), Preface::Http1);
        assert_eq!(detect_preface(b"PRI * HTTP/1.1\r\n"), Preface::Http1);
        assert_eq!(detect_preface(b"PRI * HTTP/2.0\r\n\r\nXX"), Preface::Http1);
    }
}
