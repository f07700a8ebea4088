//! AFL++ entry point of the `h2_frames` target (see the library).
//!
//! `fuzz_nohook!`, unlike the other targets' `fuzz!`: `fuzz!` installs a
//! panic hook that aborts on any panic, even one the check catches, and the
//! check catches exactly one known panic inside `h2` (see
//! `run_tolerating_h2_assertion`). Every other panic still escapes the
//! closure, and afl.rs aborts on it, so it is still a finding.
fn main() {
    afl::fuzz_nohook!(|data: &[u8]| {
        rush_proto_fuzz::h2_frames(data);
    });
}
