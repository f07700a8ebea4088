//! The header fields of a request head the parser already accepted, as
//! every interface reads them: name and value slices of the head itself,
//! values trimmed of optional whitespace, and the Host of an absolute-form
//! target in place of the Host field. No allocation, no I/O.

/// Iterates the header fields of a head that the parser already validated.
///
/// With an absolute-form target (`GET http://example.com/ HTTP/1.1`) the
/// Host field reads as the target's authority: RFC 9112 3.2.2 makes that the
/// request's host and has the server ignore the field, and every interface
/// (rush `App`, WSGI, ASGI) reads the fields through here.
pub fn header_fields(head: &[u8]) -> HeaderFields<'_> {
    let mut fields = HeaderFields {
        rest: head,
        target_host: None,
    };
    // Skip any leading empty lines the parser allowed, then the request line.
    while let Some(line) = fields.next_line() {
        if !line.is_empty() {
            // `method SP target SP version`; origin-form is ruled out at its first byte.
            let target = line.split(|&byte| byte == b' ').nth(1).unwrap_or_default();
            fields.target_host = crate::target::absolute_form_authority(target);
            break;
        }
    }
    fields
}

/// The iterator [`header_fields`] returns. Lines are found with `memchr`
/// (every interface walks the fields once a request: a byte-at-a-time
/// split cost about 8 instructions a byte of the head).
pub struct HeaderFields<'a> {
    /// The head after the lines already read.
    rest: &'a [u8],
    /// The authority of an absolute-form target, read in place of Host.
    target_host: Option<&'a [u8]>,
}

impl<'a> HeaderFields<'a> {
    /// The next line without its `\n` and optional `\r`.
    fn next_line(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let (line, rest) = match memchr::memchr(b'\n', self.rest) {
            Some(end) => (&self.rest[..end], &self.rest[end + 1..]),
            None => (self.rest, &self.rest[self.rest.len()..]),
        };
        self.rest = rest;
        Some(line.strip_suffix(b"\r").unwrap_or(line))
    }
}

impl<'a> Iterator for HeaderFields<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let line = self.next_line()?;
        if line.is_empty() {
            // The end of the head: nothing after it is a field.
            self.rest = &[];
            return None;
        }
        let colon = memchr::memchr(b':', line)?;
        let name = &line[..colon];
        let value = match self.target_host {
            Some(host) if name.eq_ignore_ascii_case(b"host") => host,
            _ => trim_whitespace(&line[colon + 1..]),
        };
        Some((name, value))
    }
}

/// Trims optional whitespace (SP and HTAB, RFC 9110 5.6.3) from both ends.
pub fn trim_whitespace(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_trimmed_and_an_absolute_target_names_the_host() {
        let head = b"\r\nGET http://example.com/a HTTP/1.1\r\nHost: other\r\nX-A: \t v \r\n\r\n";
        let fields: Vec<(&[u8], &[u8])> = header_fields(head).collect();
        assert_eq!(
            fields,
            [
                (&b"Host"[..], &b"example.com"[..]),
                (&b"X-A"[..], &b"v"[..])
            ]
        );
        let origin_form = b"GET /a HTTP/1.1\r\nHost: other\r\n\r\n";
        assert_eq!(
            header_fields(origin_form).next(),
            Some((&b"Host"[..], &b"other"[..]))
        );
        assert_eq!(trim_whitespace(b" \t"), b"");
    }

    #[test]
    fn bare_lf_lines_and_the_end_of_the_head() {
        let head = b"GET / HTTP/1.1\nHost: a\nX-B:c\r\n\nX-After: body\r\n";
        let fields: Vec<(&[u8], &[u8])> = header_fields(head).collect();
        assert_eq!(
            fields,
            [(&b"Host"[..], &b"a"[..]), (&b"X-B"[..], &b"c"[..])]
        );
        let mut fields = header_fields(head);
        assert_eq!(fields.by_ref().count(), 2);
        assert_eq!(
            fields.next(),
            None,
            "nothing after the empty line is a field"
        );
        assert_eq!(header_fields(b"").next(), None);
        assert_eq!(header_fields(b"GET / HTTP/1.1").next(), None);
    }
}
