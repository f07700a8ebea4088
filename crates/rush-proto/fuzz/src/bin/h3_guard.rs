//! AFL++ entry point of the `h3_guard` target (see the library).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        rush_proto_fuzz::h3_guard(data);
    });
}
