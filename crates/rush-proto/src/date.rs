//! The `Date` response header, formatted at most once a second.
//!
//! Formatting an IMF-fixdate costs far more than copying it, and a busy
//! server answers many requests per second: the loop calls
//! [`DateCache::refresh`] when its clock moves and copies the cached line.
//!
//! The cache remembers the unix second it formatted; `refresh` compares
//! seconds (one integer comparison) and only re-formats, with
//! `httpdate::fmt_http_date`, when the second changed. The line lives in a
//! `Vec` whose capacity is reused, so a refresh does not grow it.
//!
//! The same line carries the other fields the server adds to every
//! response ([`DateCache::with_fields`]: `Server`, the operator's
//! `--header` fields), in the order `Server`, extra fields, `Date`, so the
//! one copy per response stays one copy. Where the app set its own `Server`
//! or `Date`, [`server_fields_without`] cuts the server's from either end.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The last second httpdate can format (9999-12-31T23:59:59Z); it panics after it.
const LAST_FORMATTABLE_SECOND: u64 = 253_402_300_799;

/// `Date: ` + 29-byte IMF-fixdate + CRLF.
const HEADER_LINE_LENGTH: usize = 6 + 29 + 2;

/// Holds the current `Date: <IMF-fixdate>\r\n` header line.
#[derive(Debug, Clone)]
pub struct DateCache {
    /// The unix second `line` was formatted for.
    unix_second: u64,
    /// The fixed fields, then (when `date`) the `Date` line, CRLFs included.
    line: Vec<u8>,
    /// Bytes of `line` before the `Date` line.
    fixed: usize,
    /// Whether the `Date` field is sent at all.
    date: bool,
}

/// The `Server` line [`DateCache::with_fields`] puts first.
pub const SERVER_LINE: &[u8] = b"Server: rush\r\n";

impl DateCache {
    /// A cache already holding the line for `now`.
    pub fn new(now: SystemTime) -> DateCache {
        DateCache::with_fields(now, false, b"", true)
    }

    /// A cache whose line also carries [`SERVER_LINE`] (if `server`) and
    /// `extra` (whole header lines, each ending in CRLF, already
    /// validated), and the `Date` line only if `date`.
    pub fn with_fields(now: SystemTime, server: bool, extra: &[u8], date: bool) -> DateCache {
        let unix_second = unix_second(now);
        let server_length = if server { SERVER_LINE.len() } else { 0 };
        let mut line = Vec::with_capacity(server_length + extra.len() + HEADER_LINE_LENGTH);
        if server {
            line.extend_from_slice(SERVER_LINE);
        }
        line.extend_from_slice(extra);
        let mut cache = DateCache {
            unix_second,
            fixed: line.len(),
            line,
            date,
        };
        cache.format(unix_second);
        cache
    }

    /// Re-formats the line if `now` is in a different second than the cached one.
    ///
    /// A clock that jumps backwards is followed too: any change of second
    /// re-formats. Times before 1970 format as the epoch and times after
    /// year 9999 as its last second, instead of panicking.
    #[inline]
    pub fn refresh(&mut self, now: SystemTime) {
        let second = unix_second(now);
        if second != self.unix_second {
            self.format(second);
        }
    }

    /// The whole header line, e.g. `b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"`,
    /// after the fixed fields if there are any.
    #[inline]
    pub fn header_line(&self) -> &[u8] {
        &self.line
    }

    fn format(&mut self, second: u64) {
        self.unix_second = second;
        if !self.date {
            return;
        }
        let date = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(second));
        self.line.truncate(self.fixed);
        self.line.extend_from_slice(b"Date: ");
        self.line.extend_from_slice(date.as_bytes());
        self.line.extend_from_slice(b"\r\n");
    }
}

/// The server's fields (`header_line()` of a [`DateCache`]) minus its
/// `Server` line when `app_server` and minus its `Date` line when
/// `app_date`: the app's own field is sent instead of the server's.
pub fn server_fields_without(fields: &[u8], app_server: bool, app_date: bool) -> &[u8] {
    let mut fields = fields;
    if app_date && fields.len() >= HEADER_LINE_LENGTH {
        let start = fields.len() - HEADER_LINE_LENGTH;
        if fields[start..].starts_with(b"Date: ") {
            fields = &fields[..start];
        }
    }
    if app_server {
        fields = fields.strip_prefix(SERVER_LINE).unwrap_or(fields);
    }
    fields
}

/// Only the `Date` line of the server's fields (empty when it sends none):
/// for a stored response head that already holds the rest as rendered.
pub fn date_field_of(fields: &[u8]) -> &[u8] {
    match fields.len().checked_sub(HEADER_LINE_LENGTH) {
        Some(start) if fields[start..].starts_with(b"Date: ") => &fields[start..],
        _ => b"",
    }
}

/// Whole seconds since the epoch, clamped to what httpdate can format.
fn unix_second(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH)
        .map_or(0, |since_epoch| since_epoch.as_secs())
        .min(LAST_FORMATTABLE_SECOND)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(second, nanos)
    }

    #[test]
    fn formats_the_rfc_example() {
        // RFC 9110 5.6.7: 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        let cache = DateCache::new(at(784_111_777, 0));
        assert_eq!(
            cache.header_line(),
            b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        );
        assert_eq!(cache.header_line().len(), HEADER_LINE_LENGTH);
    }

    #[test]
    fn refreshes_only_when_the_second_changes() {
        let mut cache = DateCache::new(at(784_111_777, 100));
        cache.refresh(at(784_111_777, 999_999_999));
        assert_eq!(
            cache.header_line(),
            b"Date: Sun, 06 Nov 1994 08:49:37 GMT\r\n"
        );
        cache.refresh(at(784_111_778, 0));
        assert_eq!(
            cache.header_line(),
            b"Date: Sun, 06 Nov 1994 08:49:38 GMT\r\n"
        );
        // A clock stepping backwards is followed as well.
        cache.refresh(at(784_111_700, 0));
        assert_eq!(
            cache.header_line(),
            b"Date: Sun, 06 Nov 1994 08:48:20 GMT\r\n"
        );
        assert_eq!(cache.line.capacity(), HEADER_LINE_LENGTH);
    }

    #[test]
    fn out_of_range_clocks_do_not_panic() {
        let before_epoch = UNIX_EPOCH - Duration::from_secs(10);
        let cache = DateCache::new(before_epoch);
        assert_eq!(
            cache.header_line(),
            b"Date: Thu, 01 Jan 1970 00:00:00 GMT\r\n"
        );

        let far_future = at(LAST_FORMATTABLE_SECOND + 1_000_000, 0);
        let cache = DateCache::new(far_future);
        assert_eq!(
            cache.header_line(),
            b"Date: Fri, 31 Dec 9999 23:59:59 GMT\r\n"
        );
    }

    #[test]
    fn fixed_fields_come_first_and_the_app_may_replace_server_and_date() {
        let mut cache = DateCache::with_fields(at(784_111_777, 0), true, b"X-A: 1\r\n", true);
        let whole = b"Server: rush\r\nX-A: 1\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\n";
        assert_eq!(cache.header_line(), whole);
        cache.refresh(at(784_111_778, 0));
        assert!(cache
            .header_line()
            .starts_with(b"Server: rush\r\nX-A: 1\r\nDate: "));
        assert!(cache.header_line().ends_with(b":38 GMT\r\n"));
        let line = cache.header_line();
        assert_eq!(server_fields_without(line, true, false), &line[14..]);
        assert_eq!(
            server_fields_without(line, false, true),
            b"Server: rush\r\nX-A: 1\r\n"
        );
        assert_eq!(server_fields_without(line, true, true), b"X-A: 1\r\n");
        assert_eq!(
            date_field_of(line),
            &line[line.len() - HEADER_LINE_LENGTH..]
        );
        // Without Date, nothing is cut for an app's Date.
        let cache = DateCache::with_fields(at(784_111_777, 0), false, b"X-A: 1\r\n", false);
        assert_eq!(cache.header_line(), b"X-A: 1\r\n");
        assert_eq!(date_field_of(cache.header_line()), b"");
        assert_eq!(
            server_fields_without(cache.header_line(), true, true),
            b"X-A: 1\r\n"
        );
    }

    #[test]
    fn current_time_has_the_fixed_length() {
        let cache = DateCache::new(SystemTime::now());
        let line = cache.header_line();
        assert_eq!(line.len(), HEADER_LINE_LENGTH);
        assert!(line.starts_with(b"Date: "));
        assert!(line.ends_with(b" GMT\r\n"));
    }
}
