//! AFL++ entry point of the `ws_frames` target (see the library).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        rush_proto_fuzz::ws_frames(data);
    });
}
