//! AFL++ entry point of the `chunked` target (see the library).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        rush_proto_fuzz::chunked(data);
    });
}
