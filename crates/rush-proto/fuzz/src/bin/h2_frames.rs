//! AFL++ entry point of the `h2_frames` target (see the library).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        rush_proto_fuzz::h2_frames(data);
    });
}
