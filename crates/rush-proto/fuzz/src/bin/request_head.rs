//! AFL++ entry point of the `request_head` target (see the library).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        rush_proto_fuzz::request_head(data);
    });
}
