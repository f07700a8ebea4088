//! A bound on the HTTP/3 frames `h3` must hold whole: [`FrameGuard`].
//!
//! `h3` 0.0.8 buffers every frame but DATA until all of it arrived, whatever
//! length its header announces: a HEADERS frame (or a frame of an unknown
//! type, which it then discards) announcing gigabytes makes it read, and so
//! makes QUIC reopen the window for, as much as the client sends. The guard
//! follows frame boundaries in the bytes handed to `h3` (the varint type
//! and length of each frame, skipping payloads) on request streams and on
//! the control stream, and reports a frame other than DATA longer than the
//! limit before `h3` sees its first byte, so the stream is ended instead.
//! DATA payloads are streamed by `h3` and bounded by the flow control rush
//! applies; the QPACK streams carry no frames and `h3` reads none of them
//! past their type, so the guard names them ([`FrameGuard::is_qpack`]) for
//! rush to drain.
//!
//! It also counts, for the flood meter, the payload bytes of HEADERS and
//! DATA frames on a request stream: what a request carries, against every
//! byte the client sends.
//!
//! rush's own parsing of client bytes, so it has a fuzz target:
//! crates/rush-proto/fuzz (`h3_guard`) compiles this file as it is.

/// HTTP/3 DATA frame type (RFC 9114 section 7.2.1).
const DATA: u64 = 0x00;
/// HTTP/3 HEADERS frame type (RFC 9114 section 7.2.2).
const HEADERS: u64 = 0x01;
/// Unidirectional stream type of the control stream (section 6.2.1).
const CONTROL: u64 = 0x00;
/// Unidirectional stream types of QPACK's encoder and decoder streams (RFC
/// 9204 section 4.2).
const QPACK_ENCODER: u64 = 0x02;
const QPACK_DECODER: u64 = 0x03;

/// A QUIC variable-length integer being read across chunks (RFC 9000
/// section 16).
#[derive(Debug, Default, Clone, Copy)]
struct Varint {
    value: u64,
    /// Bytes still to read; 0 before the first byte.
    left: u8,
}

impl Varint {
    /// Takes one byte; returns the value when complete.
    fn push(&mut self, byte: u8) -> Option<u64> {
        if self.left == 0 {
            self.left = 1 << (byte >> 6);
            self.value = u64::from(byte & 0x3f);
        } else {
            self.value = (self.value << 8) | u64::from(byte);
        }
        self.left -= 1;
        (self.left == 0).then(|| std::mem::take(self).value)
    }
}

#[derive(Debug, Clone, Copy)]
enum State {
    /// The type of a unidirectional stream.
    StreamType(Varint),
    FrameType(Varint),
    FrameLength {
        ty: u64,
        len: Varint,
    },
    Payload {
        left: u64,
        /// A request's HEADERS or DATA: counted as useful.
        useful: bool,
    },
    /// A QPACK encoder or decoder stream: instructions, no frames.
    Qpack,
    /// Not a stream of frames (or already over the limit): nothing checked.
    Off,
}

/// Follows the frames of one stream; see the module documentation.
#[derive(Debug, Clone)]
pub struct FrameGuard {
    state: State,
    limit: u64,
    /// A request stream (bidirectional): its HEADERS and DATA are useful.
    request: bool,
}

/// A frame other than DATA announced more bytes than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLarge;

impl FrameGuard {
    /// For a request stream (bidirectional): frames from its first byte.
    pub fn request(limit: u64) -> FrameGuard {
        FrameGuard {
            state: State::FrameType(Varint::default()),
            limit,
            request: true,
        }
    }

    /// For a unidirectional stream: frames only if it is the control stream.
    pub fn unidirectional(limit: u64) -> FrameGuard {
        FrameGuard {
            state: State::StreamType(Varint::default()),
            limit,
            request: false,
        }
    }

    /// Whether the stream's type said it is a QPACK encoder or decoder
    /// stream (unidirectional streams only).
    pub fn is_qpack(&self) -> bool {
        matches!(self.state, State::Qpack)
    }

    /// Follows `bytes`, the next bytes of the stream; returns how many of
    /// them are payload of a request's HEADERS or DATA frames (0 on a
    /// unidirectional stream).
    pub fn observe(&mut self, bytes: &[u8]) -> Result<u64, FrameTooLarge> {
        let mut i = 0;
        let mut useful_bytes = 0;
        while i < bytes.len() {
            match &mut self.state {
                State::Off | State::Qpack => break,
                State::Payload { left, useful } => {
                    let n = (*left).min((bytes.len() - i) as u64);
                    *left -= n;
                    if *useful {
                        useful_bytes += n;
                    }
                    i += n as usize;
                    if *left == 0 {
                        self.state = State::FrameType(Varint::default());
                    }
                }
                State::StreamType(v) => {
                    if let Some(ty) = v.push(bytes[i]) {
                        self.state = match ty {
                            CONTROL => State::FrameType(Varint::default()),
                            QPACK_ENCODER | QPACK_DECODER => State::Qpack,
                            _ => State::Off,
                        };
                    }
                    i += 1;
                }
                State::FrameType(v) => {
                    if let Some(ty) = v.push(bytes[i]) {
                        self.state = State::FrameLength {
                            ty,
                            len: Varint::default(),
                        };
                    }
                    i += 1;
                }
                State::FrameLength { ty, len } => {
                    if let Some(n) = len.push(bytes[i]) {
                        if *ty != DATA && n > self.limit {
                            self.state = State::Off;
                            return Err(FrameTooLarge);
                        }
                        self.state = if n == 0 {
                            State::FrameType(Varint::default())
                        } else {
                            State::Payload {
                                left: n,
                                useful: self.request && matches!(*ty, DATA | HEADERS),
                            }
                        };
                    }
                    i += 1;
                }
            }
        }
        Ok(useful_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_within_the_limit_pass_in_any_split() {
        // HEADERS of 3 bytes, DATA of 300 bytes (2-byte length), an unknown
        // frame type 0x21 (1 byte) of 2 bytes.
        let mut stream = vec![0x01, 0x03, 1, 2, 3, 0x00, 0x41, 0x2c];
        stream.extend(std::iter::repeat_n(9, 300));
        stream.extend([0x21, 0x02, 7, 7]);
        for split in 1..stream.len() {
            let mut useful = 0;
            let mut g = FrameGuard::request(16);
            for piece in stream.chunks(split) {
                useful += g.observe(piece).expect("within the limit");
            }
            assert!(matches!(g.state, State::FrameType(_)));
            // The HEADERS and DATA payloads, not the unknown frame's.
            assert_eq!(useful, 303, "split {split}");
        }
    }

    #[test]
    fn a_long_frame_other_than_data_is_refused_before_its_payload() {
        // HEADERS announcing 2^20 bytes with a 4-byte length.
        let mut g = FrameGuard::request(64 * 1024);
        assert_eq!(g.observe(&[0x01, 0x80, 0x10, 0x00]), Ok(0));
        assert_eq!(g.observe(&[0x00]), Err(FrameTooLarge));
        // DATA may be as long as it likes: flow control bounds it.
        let mut g = FrameGuard::request(16);
        assert_eq!(g.observe(&[0x00, 0x80, 0x10, 0x00, 0x00, 1, 2]), Ok(2));
    }

    #[test]
    fn only_the_control_stream_among_unidirectional_ones_is_followed() {
        let mut control = FrameGuard::unidirectional(16);
        assert_eq!(
            control.observe(&[0x00, 0x04, 0x40, 0x20]),
            Err(FrameTooLarge)
        );
        let mut encoder = FrameGuard::unidirectional(16);
        assert_eq!(encoder.observe(&[0x02, 0x04, 0x40, 0x20, 0xff]), Ok(0));
        assert!(encoder.is_qpack());
        let mut unknown = FrameGuard::unidirectional(16);
        assert_eq!(unknown.observe(&[0x21, 0x04, 0x40, 0x20, 0xff]), Ok(0));
        assert!(!unknown.is_qpack());
        // The control stream's frames are followed, never useful.
        let mut control = FrameGuard::unidirectional(16);
        assert_eq!(control.observe(&[0x00, 0x04, 0x02, 0x01, 0x02]), Ok(0));
        assert!(!control.is_qpack());
    }
}
