//! Request targets (RFC 9112 section 3.2): which of the four forms a target
//! has, whether the method may use that form, and where its path, query and
//! authority are.
//!
//! httparse only checks that a target is a run of bytes other than controls,
//! space and DEL that is valid UTF-8; everything else is decided here, once
//! the head is complete:
//!
//! * Every byte must be visible ASCII (`0x21..=0x7E`). Raw bytes of 0x80 and
//!   above are refused even when they are valid UTF-8: the grammar has no
//!   place for them, so a client must percent-encode them, and servers that
//!   disagree on how to read them route the same request differently.
//! * A `#` is refused: the grammar has no fragment (a client must strip it
//!   before sending). Refusing rather than stripping is what strict servers
//!   do, and it keeps one meaning of the target for all three interfaces
//!   (rush `App`, WSGI, ASGI), which each expose the raw target in some way.
//! * origin-form, `/path?query`: any method but CONNECT.
//! * absolute-form, `http://authority/path?query`: any method but CONNECT;
//!   the scheme must be `http` or `https` (case-insensitive), the authority
//!   valid (below), the path empty or starting with `/` (empty means `/`).
//!   The authority is then the request's host (RFC 9112 3.2.2: a server
//!   ignores the Host field for such a request).
//! * asterisk-form, `*`: OPTIONS only.
//! * authority-form, `host:port`: CONNECT only, and CONNECT only with it.
//!   rush is not a proxy, so the head parser refuses a CONNECT with a valid
//!   authority-form target with 405 once the rest of the head checked out.
//! * Anything else (`foo/bar`, `?x`, `ftp://host/`) is refused.
//!
//! An authority is a host and an optional port (required in authority-form):
//! the host is a reg-name (unreserved characters, sub-delims and `%HH`
//! escapes, which covers IPv4 addresses) or an IPv6 address in brackets; the
//! port is 1 to 5 digits no larger than 65535. Userinfo (`user@`) is refused:
//! RFC 9110 4.2.4 deprecates it in `http` URIs, and it is a classic way to
//! make a URL look like it names another host.
//!
//! Every refusal here is a 400. The checks are one pass over the target plus
//! a look at its start; nothing allocates.

use std::net::Ipv6Addr;

use memchr::memchr;

use crate::{Method, ProtoError};

const INVALID_TARGET: ProtoError = ProtoError::BadRequest("invalid request target");
const FRAGMENT: ProtoError = ProtoError::BadRequest("fragment in request target");
const INVALID_AUTHORITY: ProtoError = ProtoError::BadRequest("invalid authority in request target");
const UNSUPPORTED_SCHEME: ProtoError =
    ProtoError::BadRequest("absolute-form request target must use http or https");
const ASTERISK_NOT_OPTIONS: ProtoError =
    ProtoError::BadRequest("asterisk-form request target is only allowed with OPTIONS");
const AUTHORITY_NOT_CONNECT: ProtoError =
    ProtoError::BadRequest("authority-form request target is only allowed with CONNECT");
const CONNECT_NOT_AUTHORITY: ProtoError =
    ProtoError::BadRequest("CONNECT needs an authority-form request target (host:port)");

/// The form of a valid request target, with offsets into the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TargetForm {
    /// `/path?query`.
    Origin,
    /// `scheme://authority/path?query`: the authority is `target[authority.0..authority.1]`,
    /// the path (possibly empty) starts at `path_start`.
    Absolute {
        authority: (usize, usize),
        path_start: usize,
    },
    /// `*` (OPTIONS).
    Asterisk,
    /// `host:port` (CONNECT).
    Authority,
}

impl TargetForm {
    /// Where the path of `target` starts: what follows it up to a `?` is the
    /// path, the rest the query. `None` for forms without a path.
    pub(crate) fn path_start(&self) -> Option<usize> {
        match *self {
            TargetForm::Origin => Some(0),
            TargetForm::Absolute { path_start, .. } => Some(path_start),
            TargetForm::Asterisk | TargetForm::Authority => None,
        }
    }
}

/// Classifies and validates `target` for `method` (see the module docs).
pub(crate) fn parse_target(target: &[u8], method: Method) -> Result<TargetForm, ProtoError> {
    check_bytes(target)?;
    if method == Method::Connect {
        return if is_valid_authority(target, Port::Required) {
            Ok(TargetForm::Authority)
        } else {
            Err(CONNECT_NOT_AUTHORITY)
        };
    }
    match target {
        [b'/', ..] => Ok(TargetForm::Origin),
        b"*" if method == Method::Options => Ok(TargetForm::Asterisk),
        b"*" => Err(ASTERISK_NOT_OPTIONS),
        _ if is_valid_authority(target, Port::Required) => Err(AUTHORITY_NOT_CONNECT),
        _ => parse_absolute_form(target),
    }
}

/// The authority of an absolute-form target that [`parse_request_head`]
/// accepted (`http://example.com:8080/a` gives `example.com:8080`); `None`
/// for the other forms.
///
/// A server that keeps the raw head can use this to present the request's
/// host to applications without keeping the parsed head around.
///
/// [`parse_request_head`]: crate::parse_request_head
pub fn absolute_form_authority(target: &[u8]) -> Option<&[u8]> {
    if matches!(target.first(), None | Some(b'/' | b'*')) {
        return None;
    }
    match parse_absolute_form(target) {
        Ok(TargetForm::Absolute { authority, .. }) => Some(&target[authority.0..authority.1]),
        _ => None,
    }
}

/// Visible ASCII only, and no fragment.
fn check_bytes(target: &[u8]) -> Result<(), ProtoError> {
    for &byte in target {
        if !(0x21..=0x7e).contains(&byte) {
            return Err(INVALID_TARGET);
        }
        if byte == b'#' {
            return Err(FRAGMENT);
        }
    }
    Ok(())
}

/// `http://authority[/path][?query]` or the same with `https`.
fn parse_absolute_form(target: &[u8]) -> Result<TargetForm, ProtoError> {
    let Some(colon) = memchr(b':', target) else {
        return Err(INVALID_TARGET);
    };
    let scheme = &target[..colon];
    // RFC 3986 3.1: scheme = ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )
    let looks_like_scheme = scheme.first().is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .iter()
            .all(|&byte| byte.is_ascii_alphanumeric() || matches!(byte, b'+' | b'-' | b'.'));
    if !looks_like_scheme {
        return Err(INVALID_TARGET);
    }
    if !(scheme.eq_ignore_ascii_case(b"http") || scheme.eq_ignore_ascii_case(b"https")) {
        return Err(UNSUPPORTED_SCHEME);
    }
    let authority_start = colon + 3;
    if !target[colon..].starts_with(b"://") {
        // `http:/path` or `http:path`: http URIs always have an authority.
        return Err(INVALID_AUTHORITY);
    }
    let authority_end = target[authority_start..]
        .iter()
        .position(|&byte| matches!(byte, b'/' | b'?'))
        .map_or(target.len(), |position| authority_start + position);
    if !is_valid_authority(&target[authority_start..authority_end], Port::Optional) {
        return Err(INVALID_AUTHORITY);
    }
    Ok(TargetForm::Absolute {
        authority: (authority_start, authority_end),
        path_start: authority_end,
    })
}

/// Whether an authority must carry a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Port {
    /// authority-form (RFC 9112 3.2.3: `uri-host ":" port`).
    Required,
    /// absolute-form: the scheme's default port applies without one.
    Optional,
}

/// A `Host` field value (RFC 9112 3.2): `uri-host [ ":" port ]`, checked
/// exactly as the authority of an absolute-form target is; an empty value
/// is valid (a request whose target has no authority).
pub(crate) fn is_valid_host_field(value: &[u8]) -> bool {
    value.is_empty() || is_valid_authority(value, Port::Optional)
}

/// `host [ ":" port ]` as described in the module docs.
fn is_valid_authority(authority: &[u8], port: Port) -> bool {
    let (valid_host, rest) = if let Some(rest) = authority.strip_prefix(b"[") {
        let Some(close) = memchr(b']', rest) else {
            return false;
        };
        (is_ipv6_address(&rest[..close]), &rest[close + 1..])
    } else {
        let host_end = memchr(b':', authority).unwrap_or(authority.len());
        (is_reg_name(&authority[..host_end]), &authority[host_end..])
    };
    valid_host
        && match rest {
            [] => port == Port::Optional,
            [b':', digits @ ..] => is_port(digits),
            _ => false,
        }
}

/// A non-empty reg-name (RFC 3986 3.2.2): unreserved, sub-delims, `%HH`.
/// RFC 9110 4.2.1 makes an empty host invalid in `http` URIs. Checked for
/// every request's Host field (and a proxy's target), so a byte is looked
/// up in a table rather than matched against ranges.
fn is_reg_name(host: &[u8]) -> bool {
    let mut rest = host;
    while let [byte, tail @ ..] = rest {
        rest = if REG_NAME_BYTES[usize::from(*byte)] {
            tail
        } else if *byte == b'%' {
            match tail {
                [high, low, after @ ..] if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() => {
                    after
                }
                _ => return false,
            }
        } else {
            return false;
        };
    }
    !host.is_empty()
}

/// The bytes a reg-name takes as they are: unreserved and sub-delims.
const REG_NAME_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = matches!(
            byte as u8,
            b'A'..=b'Z'
                | b'a'..=b'z'
                | b'0'..=b'9'
                | b'-'
                | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
        );
        byte += 1;
    }
    table
};

/// The inside of an IP literal: an IPv6 address (no zone identifier, no IPvFuture).
fn is_ipv6_address(literal: &[u8]) -> bool {
    std::str::from_utf8(literal).is_ok_and(|text| text.parse::<Ipv6Addr>().is_ok())
}

/// 1 to 5 decimal digits, at most 65535.
fn is_port(digits: &[u8]) -> bool {
    (1..=5).contains(&digits.len())
        && digits.iter().all(u8::is_ascii_digit)
        && digits
            .iter()
            .fold(0u32, |port, &digit| port * 10 + u32::from(digit - b'0'))
            <= 65535
}

#[cfg(test)]
mod tests {
    use super::*;

    fn show(bytes: &[u8]) -> String {
        String::from_utf8_lossy(bytes).into_owned()
    }

    #[test]
    fn authorities() {
        for (authority, port) in [
            (&b"example.com"[..], Port::Optional),
            (b"example.com:8080", Port::Optional),
            (b"example.com:8080", Port::Required),
            (b"EXAMPLE.com:0", Port::Required),
            (b"127.0.0.1:65535", Port::Required),
            (b"127.0.0.1", Port::Optional),
            (b"[::1]", Port::Optional),
            (b"[::1]:443", Port::Required),
            (b"[2001:db8::ff00:42:8329]:80", Port::Required),
            (b"[::ffff:192.0.2.1]", Port::Optional),
            (b"a_b~c-d", Port::Optional),
            (b"%41%62c", Port::Optional),
            (b"!$&'()*+,;=:1", Port::Required),
            (b"host:00080", Port::Required),
        ] {
            assert!(is_valid_authority(authority, port), "{}", show(authority));
        }
        for (authority, port) in [
            (&b""[..], Port::Optional),
            (b":80", Port::Optional),
            (b"example.com", Port::Required),
            (b"example.com:", Port::Optional),
            (b"example.com:", Port::Required),
            (b"example.com:65536", Port::Required),
            (b"example.com:99999", Port::Required),
            (b"example.com:123456", Port::Required),
            (b"example.com:-1", Port::Required),
            (b"example.com:8x", Port::Required),
            (b"example.com:80:80", Port::Required),
            (b"user@example.com", Port::Optional),
            (b"user:pass@example.com:80", Port::Required),
            (b"exa mple.com", Port::Optional),
            (b"exa\"mple", Port::Optional),
            (b"a[b]", Port::Optional),
            (b"%4", Port::Optional),
            (b"%zz", Port::Optional),
            (b"]ufd", Port::Optional),
            (b"[::1", Port::Optional),
            (b"[]", Port::Optional),
            (b"[::1]x", Port::Optional),
            (b"[::1]:", Port::Optional),
            (b"[127.0.0.1]", Port::Optional),
            (b"[fe80::1%25eth0]", Port::Optional),
            (b"[v1.fe80::a]", Port::Optional),
            (b"[::g]", Port::Optional),
        ] {
            assert!(!is_valid_authority(authority, port), "{}", show(authority));
        }
    }

    #[test]
    fn ports() {
        for valid in [&b"0"[..], b"1", b"80", b"65535", b"00000", b"08080"] {
            assert!(is_port(valid), "{}", show(valid));
        }
        for invalid in [
            &b""[..],
            b"65536",
            b"99999",
            b"000000",
            b"+1",
            b"1 ",
            b"0x10",
        ] {
            assert!(!is_port(invalid), "{}", show(invalid));
        }
    }

    #[test]
    fn forms_by_method() {
        use Method::{Connect, Get, Options, Other, Post};
        let accepted: [(&[u8], Method, TargetForm); 9] = [
            (b"/", Get, TargetForm::Origin),
            (b"//x", Get, TargetForm::Origin),
            (b"/a?b=c&d", Post, TargetForm::Origin),
            (b"*", Options, TargetForm::Asterisk),
            (b"/", Options, TargetForm::Origin),
            (b"example.com:443", Connect, TargetForm::Authority),
            (b"[::1]:8443", Connect, TargetForm::Authority),
            (
                b"http://h/p",
                Get,
                TargetForm::Absolute {
                    authority: (7, 8),
                    path_start: 8,
                },
            ),
            (
                b"HTTPS://h:1?q",
                Other,
                TargetForm::Absolute {
                    authority: (8, 11),
                    path_start: 11,
                },
            ),
        ];
        for (target, method, form) in accepted {
            assert_eq!(parse_target(target, method), Ok(form), "{}", show(target));
        }
        let refused: [(&[u8], Method, ProtoError); 20] = [
            (b"/a#b", Get, FRAGMENT),
            (b"/#", Get, FRAGMENT),
            (b"http://h/#top", Get, FRAGMENT),
            (b"/caf\xc3\xa9", Get, INVALID_TARGET),
            (b"/\x7f", Get, INVALID_TARGET),
            (b"/a\tb", Get, INVALID_TARGET),
            (b"/a b", Get, INVALID_TARGET),
            (b"*", Get, ASTERISK_NOT_OPTIONS),
            (b"*", Connect, CONNECT_NOT_AUTHORITY),
            (b"*/x", Options, INVALID_TARGET),
            (b"example.com:443", Get, AUTHORITY_NOT_CONNECT),
            (b"/", Connect, CONNECT_NOT_AUTHORITY),
            (b"example.com", Connect, CONNECT_NOT_AUTHORITY),
            (b"http://example.com:443", Connect, CONNECT_NOT_AUTHORITY),
            (b"foo/bar", Get, INVALID_TARGET),
            (b"?x", Get, INVALID_TARGET),
            (b"s://]ufd/admin", Get, UNSUPPORTED_SCHEME),
            (b"ftp://h/", Get, UNSUPPORTED_SCHEME),
            (b"http:/p", Get, INVALID_AUTHORITY),
            (b"http://u@h/", Get, INVALID_AUTHORITY),
        ];
        for (target, method, error) in refused {
            assert_eq!(parse_target(target, method), Err(error), "{}", show(target));
        }
    }

    #[test]
    fn absolute_form_authorities() {
        let cases: [(&[u8], Option<&[u8]>); 10] = [
            (b"http://example.com/a?b", Some(b"example.com")),
            (b"http://example.com", Some(b"example.com")),
            (b"http://example.com?q", Some(b"example.com")),
            (b"hTtPs://[::1]:8443/", Some(b"[::1]:8443")),
            (b"/http://example.com", None),
            (b"*", None),
            (b"", None),
            (b"example.com:80", None),
            (b"http://", None),
            (b"http://a@b/", None),
        ];
        for (target, authority) in cases {
            assert_eq!(
                absolute_form_authority(target),
                authority,
                "{}",
                show(target)
            );
        }
    }
}
