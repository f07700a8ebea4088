//! A per-worker cap on how many lines a noisy event may log per second.
//!
//! Refused requests (400, 408, 413, 414, 431, 505) are logged at warning
//! level so an operator can see why clients fail, but a scanner or a broken
//! client can send thousands a second: past [`LogLimit::PER_SECOND`] lines
//! in one second the rest are only counted, and the first line logged after
//! that says how many were left out; so does the loop's once-a-second
//! sweep ([`LogLimit::overdue_count`]) when no later line comes. The clock
//! is the loop's own `now`.

use std::time::{Duration, Instant};

pub(crate) struct LogLimit {
    window_start: Instant,
    logged_in_window: u32,
    suppressed: u64,
}

impl LogLimit {
    /// Most lines per second per worker.
    pub(crate) const PER_SECOND: u32 = 10;

    pub(crate) fn new(now: Instant) -> LogLimit {
        LogLimit {
            window_start: now,
            logged_in_window: 0,
            suppressed: 0,
        }
    }

    /// `None`: do not log now (counted). `Some(n)`: log, and say that `n`
    /// lines were left out before this one (0: none).
    pub(crate) fn admit(&mut self, now: Instant) -> Option<u64> {
        if now.saturating_duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.logged_in_window = 0;
        }
        if self.logged_in_window >= Self::PER_SECOND {
            self.suppressed += 1;
            return None;
        }
        self.logged_in_window += 1;
        Some(std::mem::take(&mut self.suppressed))
    }

    /// Lines left out in a second that is over, not reported yet (taken:
    /// the caller reports them).
    pub(crate) fn overdue_count(&mut self, now: Instant) -> Option<u64> {
        let over = now.saturating_duration_since(self.window_start) >= Duration::from_secs(1);
        (over && self.suppressed > 0).then(|| std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_per_second_then_the_count_of_the_rest() {
        let start = Instant::now();
        let mut limit = LogLimit::new(start);
        for _ in 0..LogLimit::PER_SECOND {
            assert_eq!(limit.admit(start), Some(0));
        }
        assert_eq!(limit.admit(start), None);
        assert_eq!(limit.admit(start + Duration::from_millis(999)), None);
        assert_eq!(limit.admit(start + Duration::from_secs(1)), Some(2));
        assert_eq!(limit.admit(start + Duration::from_secs(1)), Some(0));
        // No later line: the sweep reports the count once the second is over
        // (two lines of that second were logged above, so 3 are left out).
        for _ in 0..LogLimit::PER_SECOND + 1 {
            limit.admit(start + Duration::from_secs(1));
        }
        assert_eq!(
            limit.overdue_count(start + Duration::from_millis(1500)),
            None
        );
        assert_eq!(limit.overdue_count(start + Duration::from_secs(2)), Some(3));
        assert_eq!(limit.overdue_count(start + Duration::from_secs(3)), None);
    }
}
