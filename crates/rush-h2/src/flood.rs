//! Telling a flood of frames that carry nothing from traffic that carries
//! requests: [`FloodMeter`].
//!
//! `h2` bounds what a peer can make it hold (one pending PONG, one pending
//! SETTINGS ACK, the reset-stream budgets), but not how much work a peer
//! can make it do: PING, SETTINGS, WINDOW_UPDATE, PRIORITY and RST_STREAM
//! frames, or empty DATA and HEADERS frames, sent at loopback speed, each
//! cost the server a frame's parse and often an answer, and carry nothing
//! an application asked for. nginx ends such a connection when the bytes it
//! received, divided by 8, exceed the bytes that carried requests and
//! responses plus 1 MiB ("http2 flood detected"); this meter applies the
//! same rule. A browser's or a gRPC client's control frames are a small
//! fraction of its traffic; a flood is almost all of it.
//!
//! The meter reads only frame headers (9 bytes: a 24-bit length, the type)
//! as the bytes are fed, before `h2` parses them, so it needs nothing from
//! `h2` and costs a few instructions per frame. It counts:
//! * every byte received (the client preface included);
//! * as useful, the payload of DATA, HEADERS and CONTINUATION frames the
//!   peer sent (request bodies and heads), and the response body bytes the
//!   server sent ([`FloodMeter::credit`]), as nginx counts both directions.

/// The client connection preface, which precedes the first frame.
const PREFACE_LEN: usize = 24;
/// A frame header: length (3 bytes), type, flags, stream id (4 bytes).
const FRAME_HEADER_LEN: usize = 9;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;

/// The rule: flooded once `received / ratio > useful + allowance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FloodLimit {
    /// How many received bytes one useful byte pays for (nginx: 8).
    pub ratio: u64,
    /// Received bytes (divided by `ratio`) allowed with nothing useful
    /// (nginx: 1 MiB, so 8 MiB of control frames on a connection that
    /// carried nothing).
    pub allowance: u64,
}

impl Default for FloodLimit {
    fn default() -> Self {
        FloodLimit {
            ratio: 8,
            allowance: 1024 * 1024,
        }
    }
}

/// Counts received and useful bytes as input is fed (see the module).
#[derive(Debug)]
pub(crate) struct FloodMeter {
    limit: FloodLimit,
    /// Bytes of the client preface still to come.
    preface_left: usize,
    /// The frame header being read, and how much of it arrived.
    header: [u8; FRAME_HEADER_LEN],
    header_len: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: usize,
    /// Whether the current frame's payload counts as useful.
    payload_useful: bool,
    received: u64,
    useful: u64,
    /// Frame headers read so far.
    frames: u64,
}

impl FloodMeter {
    pub(crate) fn new(limit: FloodLimit) -> FloodMeter {
        FloodMeter {
            limit,
            preface_left: PREFACE_LEN,
            header: [0; FRAME_HEADER_LEN],
            header_len: 0,
            payload_left: 0,
            payload_useful: false,
            received: 0,
            useful: 0,
            frames: 0,
        }
    }

    /// Counts the next bytes received from the peer, up to the end of the
    /// `frames`-th frame header that completes in them; returns how many
    /// bytes were counted (all of `bytes` when fewer frames start in them).
    pub(crate) fn observe_frames(&mut self, bytes: &[u8], frames: usize) -> usize {
        let skip = self.preface_left.min(bytes.len());
        self.preface_left -= skip;
        let mut rest = &bytes[skip..];
        let mut headers = 0;
        while !rest.is_empty() && headers < frames {
            if self.payload_left > 0 {
                let take = self.payload_left.min(rest.len());
                self.payload_left -= take;
                if self.payload_useful {
                    self.useful += take as u64;
                }
                rest = &rest[take..];
                continue;
            }
            let take = (FRAME_HEADER_LEN - self.header_len).min(rest.len());
            self.header[self.header_len..self.header_len + take].copy_from_slice(&rest[..take]);
            self.header_len += take;
            rest = &rest[take..];
            if self.header_len == FRAME_HEADER_LEN {
                self.header_len = 0;
                headers += 1;
                let [l0, l1, l2, kind, ..] = self.header;
                self.payload_left = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
                self.payload_useful = matches!(kind, DATA | HEADERS | CONTINUATION);
            }
        }
        let counted = bytes.len() - rest.len();
        self.received += counted as u64;
        self.frames += headers as u64;
        counted
    }

    /// Counts `bytes`, the next bytes received from the peer.
    #[cfg(test)]
    pub(crate) fn observe(&mut self, bytes: &[u8]) {
        self.observe_frames(bytes, usize::MAX);
    }

    /// Frame headers received so far.
    pub(crate) fn frames(&self) -> u64 {
        self.frames
    }

    /// The server sent `bytes` of response body: useful traffic.
    pub(crate) fn credit(&mut self, bytes: usize) {
        self.useful += bytes as u64;
    }

    /// Whether the peer sent far more than its requests and responses
    /// account for (see the module).
    pub(crate) fn flooded(&self) -> bool {
        self.received / self.limit.ratio.max(1) > self.useful + self.limit.allowance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, payload_len: usize) -> Vec<u8> {
        let mut bytes = vec![
            (payload_len >> 16) as u8,
            (payload_len >> 8) as u8,
            payload_len as u8,
            kind,
            0,
            0,
            0,
            0,
            1,
        ];
        bytes.resize(FRAME_HEADER_LEN + payload_len, 0xAB);
        bytes
    }

    fn meter() -> FloodMeter {
        FloodMeter::new(FloodLimit {
            ratio: 8,
            allowance: 1000,
        })
    }

    #[test]
    fn control_frames_alone_flood_past_the_allowance() {
        let mut meter = meter();
        meter.observe(&[b'P'; PREFACE_LEN]);
        let ping = frame(0x6, 8);
        let mut sent = PREFACE_LEN;
        while !meter.flooded() {
            meter.observe(&ping);
            sent += ping.len();
            assert!(sent < 10_000, "never flagged");
        }
        // received / 8 > 0 + 1000 first holds past 8,000 bytes.
        assert!(sent > 8_000, "flagged early, after {sent} bytes");
        assert_eq!(meter.useful, 0);
    }

    #[test]
    fn data_and_headers_payloads_pay_for_control_frames() {
        let mut meter = meter();
        meter.observe(&[b'P'; PREFACE_LEN]);
        for _ in 0..1000 {
            meter.observe(&frame(HEADERS, 20));
            meter.observe(&frame(DATA, 100));
            meter.observe(&frame(0x8, 4)); // WINDOW_UPDATE
            meter.observe(&frame(0x6, 8)); // PING
        }
        assert_eq!(meter.useful, 120_000);
        assert!(!meter.flooded());
    }

    #[test]
    fn empty_data_frames_carry_nothing() {
        let mut meter = meter();
        meter.observe(&[b'P'; PREFACE_LEN]);
        for _ in 0..1000 {
            meter.observe(&frame(DATA, 0));
        }
        assert_eq!(meter.useful, 0);
        assert!(meter.flooded());
    }

    #[test]
    fn frames_split_anywhere_count_the_same() {
        let mut stream = vec![b'P'; PREFACE_LEN];
        for (kind, len) in [(HEADERS, 30), (0x6, 8), (DATA, 16_384), (CONTINUATION, 7)] {
            stream.extend(frame(kind, len));
        }
        let mut whole = meter();
        whole.observe(&stream);
        for piece in [1, 2, 5, 9, 10, 4096] {
            let mut split = meter();
            for chunk in stream.chunks(piece) {
                split.observe(chunk);
            }
            assert_eq!(
                (split.received, split.useful),
                (whole.received, whole.useful)
            );
        }
        assert_eq!(whole.useful, 30 + 16_384 + 7);
    }

    #[test]
    fn observing_stops_after_the_frame_limit_and_goes_on_where_it_stopped() {
        let mut stream = vec![b'P'; PREFACE_LEN];
        for _ in 0..10 {
            stream.extend(frame(0x6, 8)); // PING: 17 bytes each
        }
        let mut limited = meter();
        let first = limited.observe_frames(&stream, 3);
        // The preface and three headers (the third's payload not yet).
        assert_eq!(first, PREFACE_LEN + 2 * 17 + FRAME_HEADER_LEN);
        let second = limited.observe_frames(&stream[first..], 7);
        assert_eq!(first + second, stream.len() - 8);
        let rest = limited.observe_frames(&stream[first + second..], 1);
        assert_eq!(first + second + rest, stream.len());
        let mut whole = meter();
        whole.observe(&stream);
        assert_eq!(limited.received, whole.received);
    }

    #[test]
    fn response_bytes_count_as_useful() {
        let mut meter = meter();
        meter.observe(&vec![0; 9_000]);
        assert!(meter.flooded());
        meter.credit(200);
        assert!(!meter.flooded());
    }
}
