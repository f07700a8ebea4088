//! The checks behind rush-proto's fuzz targets.
//!
//! Each target is a function of the fuzzer's bytes that panics when an
//! invariant breaks. The AFL++ entry points in `src/bin/` only call them, and
//! so does `reproduce`, a plain binary that replays saved inputs without any
//! fuzzing runtime. Keeping the checks here means a crash found by the
//! fuzzer replays under `cargo run`, a debugger or a unit test unchanged.
//!
//! * [`request_head`]: `parse_request_head` never panics, agrees with
//!   itself on every prefix of its input (bytes arriving in two reads decide
//!   the same), obeys rules re-checked here independently, and agrees with
//!   httparse on what it accepts.
//! * [`chunked`]: `ChunkedDecoder` gives the same body, consumed count and
//!   outcome whether its input arrives whole, in two or three pieces or a
//!   byte at a time, never exceeds the body limit, and agrees with
//!   [`reference`], a plain reading of the RFC 9112 7.1 grammar.
//! * [`encode_roundtrip`]: pieces framed by `BodyEncoder` decode back to
//!   their concatenation.
//! * [`ws_frames`]: the WebSocket decoder gives the same messages and
//!   errors however its input is split, agrees with the encoder on what it
//!   accepted, and the connection state machine answers and closes sanely.
//! * [`h2_frames`]: rush-h2's HTTP/2 connection, driven by arbitrary client
//!   bytes as the server loop would, keeps the stream rules, its limits and
//!   whole frames in its output.
//! * [`h3_guard`]: rush-h3's frame-boundary guard over a stream's bytes
//!   agrees with itself however they are split, and with a separate
//!   reading of the frames, on where it refuses a frame and what it counts.

pub mod chunked;
pub mod encode;
pub mod h2;
pub mod h3;
pub mod head;
pub mod reference;
pub mod ws;

pub use chunked::chunked;
pub use encode::encode_roundtrip;
pub use h2::h2_frames;
pub use h3::h3_guard;
pub use head::request_head;
pub use ws::ws_frames;

/// Runs the named target on `data`; `None` for an unknown name.
pub fn run_target(name: &str, data: &[u8]) -> Option<()> {
    match name {
        "request_head" => request_head(data),
        "chunked" => chunked(data),
        "encode_roundtrip" => encode_roundtrip(data),
        "ws_frames" => ws_frames(data),
        "h2_frames" => h2_frames(data),
        "h3_guard" => h3_guard(data),
        _ => return None,
    }
    Some(())
}

/// The names of the targets, as `run_target` and the corpus folders spell them.
pub const TARGETS: [&str; 6] = [
    "request_head",
    "chunked",
    "encode_roundtrip",
    "ws_frames",
    "h2_frames",
    "h3_guard",
];

/// Bytes shown for a failure message: printable ASCII as is, the rest escaped.
pub fn show(bytes: &[u8]) -> String {
    let shown: String = bytes.escape_ascii().to_string();
    if shown.len() > 400 {
        format!("{}... ({} bytes)", &shown[..400], bytes.len())
    } else {
        shown
    }
}

/// Reads a little-endian u16 at `index`, or 0 past the end.
pub(crate) fn u16_at(data: &[u8], index: usize) -> usize {
    let low = data.get(index).copied().unwrap_or(0);
    let high = data.get(index + 1).copied().unwrap_or(0);
    usize::from(u16::from_le_bytes([low, high]))
}
