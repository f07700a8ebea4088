//! AFL++ entry point of the `encode_roundtrip` target (see the library).
fn main() {
    afl::fuzz!(|data: &[u8]| {
        rush_proto_fuzz::encode_roundtrip(data);
    });
}
