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
pub fn header_fields(head: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    // Skip the request line (and any leading empty lines the parser allowed).
    let mut lines = head
        .split(|&byte| byte == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let mut seen_request_line = false;
    let mut target_host: Option<&[u8]> = None;
    std::iter::from_fn(move || loop {
        let line = lines.next()?;
        if !seen_request_line {
            if !line.is_empty() {
                seen_request_line = true;
                // `method SP target SP version`; origin-form is ruled out at its first byte.
                let target = line.split(|&byte| byte == b' ').nth(1).unwrap_or_default();
                target_host = crate::target::absolute_form_authority(target);
            }
            continue;
        }
        if line.is_empty() {
            return None;
        }
        let colon = memchr::memchr(b':', line)?;
        let name = &line[..colon];
        let value = match target_host {
            Some(host) if name.eq_ignore_ascii_case(b"host") => host,
            _ => trim_whitespace(&line[colon + 1..]),
        };
        return Some((name, value));
    })
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
}
