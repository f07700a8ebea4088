//! The `Date` response header, formatted at most once a second.
//!
//! Formatting an IMF-fixdate costs far more than copying it, and a busy
//! server answers many requests per second: the loop calls
//! [`DateCache::refresh`] when its clock moves and copies the cached line.

use std::time::SystemTime;

/// Holds the current `Date: <IMF-fixdate>\r\n` header line.
#[derive(Debug, Clone)]
pub struct DateCache {
    // unix second the line was formatted for, and the formatted line
}

impl DateCache {
    /// A cache already holding the line for `now`.
    pub fn new(now: SystemTime) -> DateCache {
        let _ = now;
        todo!()
    }

    /// Re-formats the line if `now` is in a different second than the cached one.
    pub fn refresh(&mut self, now: SystemTime) {
        let _ = now;
        todo!()
    }

    /// The whole header line, e.g. `b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"`.
    pub fn header_line(&self) -> &[u8] {
        todo!()
    }
}
