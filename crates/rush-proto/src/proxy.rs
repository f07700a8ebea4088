//! Forward-proxy decisions on parsed heads, without I/O.
//!
//! A forward proxy receives two kinds of request (RFC 9112 3.2):
//! `CONNECT host:port` (a tunnel) and absolute-form requests
//! (`GET http://host:port/path HTTP/1.1`) that it forwards to the origin in
//! origin-form. This module decides everything about them that needs no
//! socket: where a request goes ([`proxy_target`]), the head sent to the
//! origin ([`write_forward_head`]: hop-by-hop fields removed, `Host` from
//! the target, `Via` added), how the origin's response is framed
//! ([`parse_response_head`]) and the head the client gets back
//! ([`write_client_response_head`]).
//!
//! Request framing itself (and refusing every smuggling shape: CL+TE,
//! repeated or listed Content-Length, bare LF...) is done by
//! [`crate::parse_proxy_request_head`] before any of this runs, so nothing
//! ambiguous ever reaches an origin. Responses get the same strictness: a
//! response whose framing is ambiguous is a bad response (the proxy answers
//! 502) rather than something to guess at.

use crate::{HeaderSpan, Method, ProtoError, RequestHead, Span};

/// Where a proxy request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyTarget {
    /// `CONNECT host:port`: open a tunnel.
    Tunnel {
        /// The host name or IP literal (without brackets).
        host: String,
        /// The port.
        port: u16,
    },
    /// An absolute-form `http://` request, forwarded in origin-form.
    Forward {
        /// The host name or IP literal (without brackets).
        host: String,
        /// The port (80 when the target names none).
        port: u16,
        /// The authority as sent (`host[:port]`), the `Host` the origin gets.
        authority: String,
        /// The origin-form target: path and query, `/` when the target has no path.
        origin_form: Vec<u8>,
    },
}

const NOT_A_PROXY_REQUEST: ProtoError =
    ProtoError::BadRequest("a proxy needs an absolute-form target (http://host/path) or CONNECT");
const HTTPS_TARGET: ProtoError =
    ProtoError::BadRequest("https:// targets go through a CONNECT tunnel, not as plain requests");
const BAD_PORT: ProtoError = ProtoError::BadRequest("invalid port in the request target");

/// Where the request parsed from `buffer` goes: a tunnel for CONNECT, a
/// forward for an `http://` absolute-form target. Origin-form and `*`
/// targets (requests for the proxy itself) and `https://` targets (which a
/// client sends through CONNECT) are 400s.
pub fn proxy_target(buffer: &[u8], head: &RequestHead) -> Result<ProxyTarget, ProtoError> {
    let target = head.target.of(buffer);
    if head.method == Method::Connect {
        let (host, port) = split_authority(target, None)?;
        return Ok(ProxyTarget::Tunnel { host, port });
    }
    // Not origin-form or `*`: the head parser took it for absolute-form,
    // and its `host` is then the target's authority, already validated.
    let authority = match (target.first(), head.host) {
        (Some(b'/' | b'*') | None, _) | (_, None) => return Err(NOT_A_PROXY_REQUEST),
        (_, Some(host)) if host.start < head.target.start || host.end > head.target.end => {
            return Err(NOT_A_PROXY_REQUEST)
        }
        (_, Some(host)) => host.of(buffer),
    };
    // The head parser accepted only http and https schemes, case-insensitively.
    if target[..5].eq_ignore_ascii_case(b"https") {
        return Err(HTTPS_TARGET);
    }
    let (host, port) = split_authority(authority, Some(80))?;
    let mut origin_form = Vec::with_capacity(head.path.len() + 16);
    let path = head.path.of(buffer);
    if path.is_empty() {
        origin_form.push(b'/');
    } else {
        origin_form.extend_from_slice(path);
    }
    if let Some(query) = head.query {
        origin_form.push(b'?');
        origin_form.extend_from_slice(query.of(buffer));
    }
    Ok(ProxyTarget::Forward {
        host,
        port,
        authority: ascii_string(authority.to_vec()),
        origin_form,
    })
}

/// Splits an authority the head parser validated into host and port.
/// `default_port` applies when there is none (CONNECT always has one).
fn split_authority(
    authority: &[u8],
    default_port: Option<u16>,
) -> Result<(String, u16), ProtoError> {
    let (host, port) = if let Some(rest) = authority.strip_prefix(b"[") {
        let close = memchr::memchr(b']', rest).ok_or(BAD_PORT)?;
        (&rest[..close], &rest[close + 1..])
    } else {
        let colon = memchr::memchr(b':', authority).unwrap_or(authority.len());
        (&authority[..colon], &authority[colon..])
    };
    let port = match port {
        [] => default_port.ok_or(BAD_PORT)?,
        [b':', digits @ ..] => std::str::from_utf8(digits)
            .ok()
            .and_then(|digits| digits.parse::<u16>().ok())
            .filter(|&port| port != 0)
            .ok_or(BAD_PORT)?,
        _ => return Err(BAD_PORT),
    };
    // Host names are case-insensitive; lower-casing makes cache keys and logs agree.
    Ok((ascii_string(host.to_ascii_lowercase()), port))
}

/// Bytes the head parser validated as ASCII (an authority, a host) as a
/// String, in place, without `from_utf8_lossy`'s slow path for the valid case.
fn ascii_string(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
}

/// The fields a proxy never passes on (RFC 9110 7.6.1), besides those the
/// `Connection` fields name. `Proxy-*` covers Proxy-Authorization,
/// Proxy-Authenticate and Proxy-Connection. Asked for every field of
/// every forwarded head, so the length picks the candidates first.
fn is_always_hop_by_hop(name: &[u8]) -> bool {
    let fixed: &[&[u8]] = match name.len() {
        2 => &[b"te"],
        4 => &[b"host"],
        7 => &[b"trailer", b"upgrade"],
        10 => &[b"connection", b"keep-alive"],
        _ => &[],
    };
    fixed.iter().any(|fixed| name.eq_ignore_ascii_case(fixed))
        || (name.len() >= 6 && name[..6].eq_ignore_ascii_case(b"proxy-"))
}

/// The names listed in the `Connection` fields of a head (no allocation
/// when there is none, the usual case).
fn connection_named<'a>(buffer: &'a [u8], headers: &[HeaderSpan]) -> Vec<&'a [u8]> {
    let mut named = Vec::new();
    for header in headers {
        if header.name.of(buffer).eq_ignore_ascii_case(b"connection") {
            for token in header.value.of(buffer).split(|&byte| byte == b',') {
                let token = token.trim_ascii();
                if !token.is_empty() {
                    named.push(token);
                }
            }
        }
    }
    named
}

fn is_hop_by_hop(name: &[u8], connection_named: &[&[u8]]) -> bool {
    is_always_hop_by_hop(name)
        || connection_named
            .iter()
            .any(|token| token.eq_ignore_ascii_case(name))
}

/// The fields not to forward from a head in `buffer`: the fixed
/// hop-by-hop set (and `Host`, which the proxy writes itself) plus every
/// name listed in a `Connection` field. Returns one flag per header.
pub fn hop_by_hop_mask(buffer: &[u8], headers: &[HeaderSpan]) -> Vec<bool> {
    let named = connection_named(buffer, headers);
    headers
        .iter()
        .map(|header| is_hop_by_hop(header.name.of(buffer), &named))
        .collect()
}

/// Whether the request already passed through this proxy: a `Via` element
/// equal to `via` (the value this proxy adds, which names its host). A
/// proxy that forwards to itself (a target that resolves to its own
/// address) would otherwise loop until the head outgrows the size limit,
/// holding two connections per hop.
pub fn is_forwarding_loop(buffer: &[u8], headers: &[HeaderSpan], via: &[u8]) -> bool {
    headers
        .iter()
        .filter(|header| header.name.of(buffer).eq_ignore_ascii_case(b"via"))
        .flat_map(|header| header.value.of(buffer).split(|&byte| byte == b','))
        .any(|element| element.trim_ascii().eq_ignore_ascii_case(via))
}

/// A parsed head with the buffer its spans point into and its field spans:
/// what the writers below copy from.
#[derive(Clone, Copy)]
pub struct ParsedHead<'a, H> {
    /// The bytes the head was parsed from.
    pub buffer: &'a [u8],
    /// The head, its spans into `buffer`.
    pub head: &'a H,
    /// Its field spans, in the order received.
    pub headers: &'a [HeaderSpan],
}

/// Writes the head sent to the origin for a forwarded request: the method
/// as sent, the origin-form target, HTTP/1.1 (a proxy speaks its own
/// version), `Host` from the target, the end-to-end fields in order
/// (framing fields included: the body is passed on as framed), then `Via`
/// with the value `via` (RFC 9110 7.6.3, e.g. `1.1 host (rush)`).
pub fn write_forward_head(
    out: &mut Vec<u8>,
    request: ParsedHead<'_, RequestHead>,
    authority: &[u8],
    origin_form: &[u8],
    via: &[u8],
) {
    let ParsedHead {
        buffer,
        head,
        headers,
    } = request;
    out.extend_from_slice(head.method_span.of(buffer));
    out.push(b' ');
    out.extend_from_slice(origin_form);
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(authority);
    out.extend_from_slice(b"\r\n");
    write_end_to_end(out, buffer, headers, false, via);
    out.extend_from_slice(b"\r\n");
}

/// The end-to-end fields of a head, in order, and a `Via` (appended to the
/// `Via` values already there, which are forwarded as they are).
/// `drop_transfer_encoding` leaves `Transfer-Encoding` out too (a body sent decoded).
fn write_end_to_end(
    out: &mut Vec<u8>,
    buffer: &[u8],
    headers: &[HeaderSpan],
    drop_transfer_encoding: bool,
    via: &[u8],
) {
    let named = connection_named(buffer, headers);
    for header in headers {
        let name = header.name.of(buffer);
        if is_hop_by_hop(name, &named)
            || (drop_transfer_encoding && name.eq_ignore_ascii_case(b"transfer-encoding"))
        {
            continue;
        }
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value.of(buffer));
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Via: ");
    out.extend_from_slice(via);
    out.extend_from_slice(b"\r\n");
}

/// How an origin's response body is delimited (RFC 9112 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFraming {
    /// No body: a response to HEAD, 1xx, 204 or 304.
    Empty,
    /// Exactly this many bytes.
    Length(u64),
    /// A chunked body.
    Chunked,
    /// Everything until the origin closes the connection.
    UntilClose,
}

/// A parsed response head from an origin. Spans point into the parsed buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// The reason phrase as sent (may be empty).
    pub reason: Span,
    /// Length of the head including the final empty line.
    pub head_len: usize,
    /// How the body is delimited.
    pub framing: ResponseFraming,
    /// Whether the origin keeps the connection open after this response.
    pub keep_alive: bool,
}

/// The outcome of parsing a buffer that may hold only part of a response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseStatus {
    /// Not complete yet: read more.
    Partial,
    /// A complete, valid head.
    Complete(ResponseHead),
}

const BAD_RESPONSE: ProtoError = ProtoError::BadRequest("malformed response from the origin");
const AMBIGUOUS_RESPONSE: ProtoError =
    ProtoError::BadRequest("ambiguous response framing from the origin");

/// Most fields in a response head the proxy accepts.
pub const MAX_RESPONSE_HEADERS: usize = 128;
/// Header slots tried first (see [`parse_response_head`]).
const FEW_RESPONSE_HEADERS: usize = 24;

/// Parses the response head at the start of `buffer` from an origin that
/// was sent a request with `request_method`. Strict like the request
/// parser: a head larger than `max_head_size`, a bare LF, Content-Length
/// and Transfer-Encoding together, more than one Content-Length value, or a
/// Transfer-Encoding whose last coding is not chunked are errors (the
/// proxy answers 502); `101 Switching Protocols` is refused too (the proxy
/// never forwards `Upgrade`).
pub fn parse_response_head(
    buffer: &[u8],
    request_method: Method,
    max_head_size: usize,
    headers: &mut Vec<HeaderSpan>,
) -> Result<ResponseStatus, ProtoError> {
    let window = &buffer[..buffer.len().min(max_head_size)];
    // httparse wants initialised slots for a response (32 bytes each): a
    // few first, which fit nearly every head, all of them only for a head
    // with more fields.
    let mut few = [httparse::EMPTY_HEADER; FEW_RESPONSE_HEADERS];
    let mut many;
    let mut response = httparse::Response::new(&mut few);
    let mut parsed = response.parse(window);
    if parsed == Err(httparse::Error::TooManyHeaders) {
        many = [httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
        response = httparse::Response::new(&mut many);
        parsed = response.parse(window);
    }
    let head_len = match parsed {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) if window.len() < max_head_size => {
            return Ok(ResponseStatus::Partial)
        }
        Ok(httparse::Status::Partial) => return Err(ProtoError::HeadersTooLarge),
        Err(_) => return Err(BAD_RESPONSE),
    };
    if buffer[head_len - 4..head_len] != *b"\r\n\r\n" {
        return Err(BAD_RESPONSE);
    }
    let base = buffer.as_ptr() as usize;
    let span_of = |part: &[u8]| {
        let start = part.as_ptr() as usize - base;
        Span::new(start, start + part.len())
    };
    let status = response.code.ok_or(BAD_RESPONSE)?;
    let version = response.version.ok_or(BAD_RESPONSE)?;
    let reason = span_of(response.reason.unwrap_or("").as_bytes());
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut close = false;
    let mut keep_alive_token = false;
    headers.clear();
    for header in response.headers.iter() {
        let name = header.name.as_bytes();
        if buffer[span_of(name).start as usize - 2] != b'\r' {
            return Err(BAD_RESPONSE);
        }
        headers.push(HeaderSpan {
            name: span_of(name),
            value: span_of(header.value),
        });
        let value = header.value.trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some()
                || value.is_empty()
                || value.len() > 19
                || !value.iter().all(u8::is_ascii_digit)
            {
                return Err(AMBIGUOUS_RESPONSE);
            }
            content_length = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            let last = value.rsplit(|&byte| byte == b',').next().unwrap_or(b"");
            if chunked || !last.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                return Err(AMBIGUOUS_RESPONSE);
            }
            chunked = true;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&byte| byte == b',') {
                let token = token.trim_ascii();
                close |= token.eq_ignore_ascii_case(b"close");
                keep_alive_token |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        }
    }
    if status == 101 || !(100..=999).contains(&status) {
        return Err(BAD_RESPONSE);
    }
    if chunked && content_length.is_some() {
        return Err(AMBIGUOUS_RESPONSE);
    }
    let framing = if request_method == Method::Head
        || (100..200).contains(&status)
        || status == 204
        || status == 304
    {
        ResponseFraming::Empty
    } else if chunked {
        ResponseFraming::Chunked
    } else if let Some(length) = content_length {
        ResponseFraming::Length(length)
    } else {
        ResponseFraming::UntilClose
    };
    let keep_alive =
        !close && (version == 1 || keep_alive_token) && framing != ResponseFraming::UntilClose;
    Ok(ResponseStatus::Complete(ResponseHead {
        status,
        reason,
        head_len,
        framing,
        keep_alive,
    }))
}

/// Writes the head the client gets for an origin's response: an HTTP/1.1
/// status line with the origin's status and reason, the end-to-end fields,
/// `Via`, and `Connection: close` when the proxy closes the client
/// connection after this response. With `dechunked` (a chunked response for
/// an HTTP/1.0 client, which cannot read chunked framing), the
/// `Transfer-Encoding` field is left out: the proxy sends the decoded body
/// and ends it by closing (`close` must then be set).
pub fn write_client_response_head(
    out: &mut Vec<u8>,
    response: ParsedHead<'_, ResponseHead>,
    close: bool,
    dechunked: bool,
    via: &[u8],
) {
    let ParsedHead {
        buffer,
        head,
        headers,
    } = response;
    out.extend_from_slice(b"HTTP/1.1 ");
    let mut status = itoa::Buffer::new();
    out.extend_from_slice(status.format(head.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(head.reason.of(buffer));
    out.extend_from_slice(b"\r\n");
    write_end_to_end(out, buffer, headers, dechunked, via);
    if close {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
