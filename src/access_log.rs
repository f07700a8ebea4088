//! `--access-log-format`: the access log line in gunicorn's `%(x)s` atoms,
//! parsed once per worker and rendered natively for each request.
//!
//! How it works: [`AccessFormat::parse`] turns the format into literal text
//! and atoms at start-up (an unknown atom is a start-up error, not a line
//! of garbage per request). Most atoms come from what the loop already has
//! when it logs: the client, the request line (method, target and protocol
//! are cut from it), the status, the size and the request's start. The
//! request header atoms (`%(f)s` referer, `%(a)s` user agent, `%({name}i)s`)
//! need the head, which is gone by the time a long response completes:
//! their values are copied when the request is dispatched, and only when
//! the access log is on and the format uses them.

use std::time::{Duration, SystemTime};

/// One piece of a parsed format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    /// `h`: the client's address (as a trusted proxy reports it).
    RemoteHost,
    /// `l`, `u`: always `-` (no identd, no authenticated user).
    Dash,
    /// `t`: `[25/Nov/2026:13:45:01 +0000]`.
    Time,
    /// `r`: `GET /path?q HTTP/1.1`.
    RequestLine,
    /// `m`, `U`, `q`, `H`: method, path, query, protocol.
    Method,
    Path,
    Query,
    Protocol,
    /// `s`: the status code.
    Status,
    /// `B`: body bytes; `b`: the same (gunicorn writes `-` only when unknown).
    Bytes,
    /// `T`, `D`, `M`, `L`: the duration in whole seconds, microseconds,
    /// milliseconds, and seconds with six decimals.
    Seconds,
    Micros,
    Millis,
    DecimalSeconds,
    /// `p`: `<pid>`.
    Pid,
    /// `f`, `a`, `{name}i`: a request header's value (index into the
    /// values copied at dispatch), `-` when absent.
    Header(usize),
}

/// A parsed `--access-log-format`.
#[derive(Debug, Clone)]
pub(crate) struct AccessFormat {
    segments: Vec<Segment>,
    /// Lower-case names of the request headers the format shows.
    header_names: Vec<Vec<u8>>,
}

/// What one access-log line shows about a request.
pub(crate) struct AccessEntry<'a> {
    pub client: &'a str,
    pub request_line: &'a str,
    /// `None`: no response head went out (the client left first); shown
    /// as `-`, as hypercorn and gunicorn show a status they do not have.
    pub status: Option<u16>,
    pub length: usize,
    pub duration: Duration,
    /// Values of [`AccessFormat::header_names`], in order.
    pub headers: &'a [Option<String>],
}

impl AccessFormat {
    /// Parses `%(x)s` atoms; `%%` is a literal `%`.
    pub(crate) fn parse(format: &str) -> Result<AccessFormat, String> {
        let mut parsed = AccessFormat {
            segments: Vec::new(),
            header_names: Vec::new(),
        };
        let mut literal = String::new();
        let mut rest = format;
        while let Some(percent) = rest.find('%') {
            literal.push_str(&rest[..percent]);
            rest = &rest[percent + 1..];
            if let Some(after) = rest.strip_prefix('%') {
                literal.push('%');
                rest = after;
                continue;
            }
            let Some(inner) = rest.strip_prefix('(') else {
                return Err(format!(
                    "a lone '%' in {format:?} (write %% for a percent sign)"
                ));
            };
            let Some(close) = inner.find(")s") else {
                return Err(format!("an atom without ')s' in {format:?}"));
            };
            let atom = &inner[..close];
            rest = &inner[close + 2..];
            if !literal.is_empty() {
                parsed
                    .segments
                    .push(Segment::Literal(std::mem::take(&mut literal)));
            }
            let segment = match atom {
                "h" => Segment::RemoteHost,
                "l" | "u" => Segment::Dash,
                "t" => Segment::Time,
                "r" => Segment::RequestLine,
                "m" => Segment::Method,
                "U" => Segment::Path,
                "q" => Segment::Query,
                "H" => Segment::Protocol,
                "s" => Segment::Status,
                "b" | "B" => Segment::Bytes,
                "T" => Segment::Seconds,
                "D" => Segment::Micros,
                "M" => Segment::Millis,
                "L" => Segment::DecimalSeconds,
                "p" => Segment::Pid,
                "f" => parsed.header(b"referer"),
                "a" => parsed.header(b"user-agent"),
                _ => match atom
                    .strip_prefix('{')
                    .and_then(|atom| atom.strip_suffix("}i"))
                {
                    Some(name) if !name.is_empty() => {
                        parsed.header(name.to_ascii_lowercase().as_bytes())
                    }
                    _ => return Err(format!("unknown access log atom %({atom})s")),
                },
            };
            parsed.segments.push(segment);
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parsed.segments.push(Segment::Literal(literal));
        }
        Ok(parsed)
    }

    fn header(&mut self, name: &[u8]) -> Segment {
        let index = match self.header_names.iter().position(|known| known == name) {
            Some(index) => index,
            None => {
                self.header_names.push(name.to_vec());
                self.header_names.len() - 1
            }
        };
        Segment::Header(index)
    }

    /// Whether lines need request header values copied at dispatch.
    pub(crate) fn needs_headers(&self) -> bool {
        !self.header_names.is_empty()
    }

    /// The values of the headers the format shows, from a request's fields.
    pub(crate) fn header_values<'a>(
        &self,
        fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Vec<Option<String>> {
        let mut values = vec![None; self.header_names.len()];
        for (name, value) in fields {
            for (index, wanted) in self.header_names.iter().enumerate() {
                if values[index].is_none() && name.eq_ignore_ascii_case(wanted) {
                    values[index] = Some(String::from_utf8_lossy(value).into_owned());
                }
            }
        }
        values
    }

    /// One line.
    pub(crate) fn render(&self, entry: &AccessEntry<'_>) -> String {
        use std::fmt::Write;
        let mut line = String::with_capacity(128);
        let mut parts = entry.request_line.splitn(3, ' ');
        let (method, target, protocol) = (
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
            parts.next().unwrap_or(""),
        );
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        for segment in &self.segments {
            let _ = match segment {
                Segment::Literal(text) => write!(line, "{text}"),
                Segment::RemoteHost => write!(line, "{}", entry.client),
                Segment::Dash => write!(line, "-"),
                Segment::Time => write!(line, "[{}]", log_time(SystemTime::now())),
                Segment::RequestLine => write!(line, "{}", entry.request_line),
                Segment::Method => write!(line, "{method}"),
                Segment::Path => write!(line, "{path}"),
                Segment::Query => write!(line, "{query}"),
                Segment::Protocol => write!(line, "{protocol}"),
                Segment::Status => match entry.status {
                    Some(status) => write!(line, "{status}"),
                    None => write!(line, "-"),
                },
                Segment::Bytes => write!(line, "{}", entry.length),
                Segment::Seconds => write!(line, "{}", entry.duration.as_secs()),
                Segment::Micros => write!(line, "{}", entry.duration.as_micros()),
                Segment::Millis => write!(line, "{}", entry.duration.as_millis()),
                Segment::DecimalSeconds => write!(line, "{:.6}", entry.duration.as_secs_f64()),
                Segment::Pid => write!(line, "<{}>", std::process::id()),
                Segment::Header(index) => {
                    let value = entry.headers.get(*index).and_then(Option::as_deref);
                    write!(line, "{}", value.unwrap_or("-"))
                }
            };
        }
        line
    }
}

/// `25/Nov/2026:13:45:01 +0000` (gunicorn's `%(t)s`, in UTC), cut from
/// the IMF-fixdate `Wed, 25 Nov 2026 13:45:01 GMT`.
fn log_time(now: SystemTime) -> String {
    let date = httpdate::fmt_http_date(now);
    let (day, month, year, time) = (&date[5..7], &date[8..11], &date[12..16], &date[17..25]);
    format!("{day}/{month}/{year}:{time} +0000")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(headers: &'a [Option<String>]) -> AccessEntry<'a> {
        AccessEntry {
            client: "1.2.3.4",
            request_line: "GET /a/b?x=1 HTTP/1.1",
            status: Some(200),
            length: 12,
            duration: Duration::from_micros(1_500_250),
            headers,
        }
    }

    #[test]
    fn renders_gunicorns_atoms() {
        let format = AccessFormat::parse(
            r#"%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s" %(D)s %(L)s 100%%"#,
        )
        .unwrap();
        assert!(format.needs_headers());
        let head = b"GET / HTTP/1.1\r\nUser-Agent: curl/8\r\nHost: a\r\n\r\n";
        let values = format.header_values(crate::request::header_fields(head));
        assert_eq!(values, vec![None, Some("curl/8".to_owned())]);
        assert_eq!(
            format.render(&entry(&values)),
            r#"1.2.3.4 - - "GET /a/b?x=1 HTTP/1.1" 200 12 "-" "curl/8" 1500250 1.500250 100%"#
        );
        let format =
            AccessFormat::parse("%(m)s %(U)s %(q)s %(H)s %(T)s %(M)s %({X-Id}i)s").unwrap();
        let values = vec![Some("abc".to_owned())];
        assert_eq!(
            format.render(&entry(&values)),
            "GET /a/b x=1 HTTP/1.1 1 1500 abc"
        );
        assert!(!AccessFormat::parse("plain").unwrap().needs_headers());
        let format = AccessFormat::parse(r#""%(r)s" %(s)s %(b)s"#).unwrap();
        let cut = AccessEntry {
            status: None,
            length: 0,
            ..entry(&[])
        };
        assert_eq!(format.render(&cut), r#""GET /a/b?x=1 HTTP/1.1" - 0"#);
    }

    #[test]
    fn bad_formats_are_refused() {
        for bad in ["%(z)s", "%(h)", "50%", "%(h)d", "%({}i)s"] {
            assert!(AccessFormat::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn time_is_gunicorns_layout() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(log_time(at), "06/Nov/1994:08:49:37 +0000");
    }
}
