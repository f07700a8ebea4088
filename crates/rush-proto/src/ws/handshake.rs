//! The opening handshake, server side (RFC 6455 4.2).
//!
//! The loop parses the request head as usual (`parse_request_head`), asks
//! [`is_upgrade_request`] (one pass over the field names, no allocation) and,
//! if so, [`validate_handshake`]. A valid handshake gives the
//! `Sec-WebSocket-Accept` value; the application then picks a subprotocol
//! from [`protocol_offers`] and the server negotiates extensions from
//! [`extension_offers`] (see `deflate`), and [`write_accept_response`]
//! writes the `101 Switching Protocols` head. An invalid one is answered
//! with [`write_rejection`]: 426 with `Sec-WebSocket-Version: 13` for a
//! version rush does not speak (RFC 6455 4.4), 400 for everything else.
//!
//! Fields are read through the request's [`HeaderSpan`]s, so nothing is
//! copied. Lists are comma-separated and may repeat over several fields;
//! tokens compare case-insensitively, except the key, which is base64.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use sha1::{Digest, Sha1};

use super::deflate::DeflateParams;
pub use super::extension::ExtensionOffer;
use super::extension::{is_token, split_outside_quotes, trim};
use crate::head::list_elements;
use crate::response::{
    is_valid_header_name, is_valid_header_value, write_closing_response, write_header,
    write_status_line,
};
use crate::{BodyFraming, HeaderSpan, Method, ProtoError, RequestHead, Version};

/// The GUID RFC 6455 1.3 appends to the key before hashing.
const ACCEPT_GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// Why a handshake was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeError {
    /// 400: not a valid WebSocket handshake; the text says what is wrong.
    BadRequest(&'static str),
    /// 426: `Sec-WebSocket-Version` missing or not 13; the answer carries
    /// `Sec-WebSocket-Version: 13` so the client can retry.
    UnsupportedVersion,
}

impl HandshakeError {
    /// The status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            HandshakeError::BadRequest(_) => 400,
            HandshakeError::UnsupportedVersion => 426,
        }
    }

    /// A short explanation, sent as the text/plain body.
    pub fn message(&self) -> &'static str {
        match self {
            HandshakeError::BadRequest(message) => message,
            HandshakeError::UnsupportedVersion => "only WebSocket version 13 is supported",
        }
    }
}

impl std::fmt::Display for HandshakeError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{} {}", self.status(), self.message())
    }
}

impl std::error::Error for HandshakeError {}

/// A valid handshake: what the server needs to answer it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handshake {
    /// The `Sec-WebSocket-Accept` value for the client's key.
    pub accept: AcceptKey,
}

/// A `Sec-WebSocket-Accept` value: base64 of a SHA-1 digest, always 28 ASCII bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptKey([u8; 28]);

impl AcceptKey {
    /// The value as text.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("base64 is ASCII")
    }

    /// The value as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// `Sec-WebSocket-Accept` for `key` (the key field's value as sent):
/// base64(SHA-1(key + GUID)), RFC 6455 4.2.2.
pub fn accept_key(key: &[u8]) -> AcceptKey {
    let mut hasher = Sha1::new();
    hasher.update(key);
    hasher.update(ACCEPT_GUID);
    let digest = hasher.finalize();
    let mut encoded = [0; 28];
    let written = STANDARD
        .encode_slice(digest, &mut encoded)
        .expect("20 bytes encode to 28");
    debug_assert_eq!(written, 28);
    AcceptKey(encoded)
}

/// The values of every field named `name` (case-insensitively).
fn field_values<'a>(
    buffer: &'a [u8],
    headers: &'a [HeaderSpan],
    name: &'static [u8],
) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |header| header.name.of(buffer).eq_ignore_ascii_case(name))
        .map(move |header| header.value.of(buffer))
}

/// Whether any field `name` lists `token` (case-insensitively).
fn lists_token(buffer: &[u8], headers: &[HeaderSpan], name: &'static [u8], token: &[u8]) -> bool {
    field_values(buffer, headers, name)
        .flat_map(list_elements)
        .any(|element| element.eq_ignore_ascii_case(token))
}

/// Whether the request asks to become a WebSocket (`Upgrade` lists
/// `websocket`). Cheap enough for every request: only a field whose name
/// is 7 bytes long is compared, and only `Upgrade` values are split. The
/// rest of the rules are [`validate_handshake`]'s.
pub fn is_upgrade_request(buffer: &[u8], headers: &[HeaderSpan]) -> bool {
    headers.iter().any(|header| {
        header.name.len() == 7
            && header.name.of(buffer).eq_ignore_ascii_case(b"upgrade")
            && list_elements(header.value.of(buffer))
                .any(|protocol| protocol.eq_ignore_ascii_case(b"websocket"))
    })
}

/// Checks an upgrade request against RFC 6455 4.2.1 and computes the accept key.
///
/// 400 unless said otherwise: not GET; not HTTP/1.1; a request body
/// (the bytes after the head belong to the WebSocket); no `websocket` in
/// `Upgrade` or no `upgrade` in `Connection`; `Sec-WebSocket-Version`
/// missing, repeated or not `13` (426); `Sec-WebSocket-Key` missing,
/// repeated, or not the base64 form of 16 bytes. (Host was already
/// required by `parse_request_head`.)
pub fn validate_handshake(
    head: &RequestHead,
    buffer: &[u8],
    headers: &[HeaderSpan],
) -> Result<Handshake, HandshakeError> {
    use HandshakeError::BadRequest;
    if head.method != Method::Get {
        return Err(BadRequest("a WebSocket handshake must be a GET request"));
    }
    if head.version != Version::Http11 {
        return Err(BadRequest("a WebSocket handshake needs HTTP/1.1"));
    }
    if head.framing != BodyFraming::Empty {
        return Err(BadRequest("a WebSocket handshake cannot have a body"));
    }
    if !lists_token(buffer, headers, b"upgrade", b"websocket") {
        return Err(BadRequest("Upgrade must list websocket"));
    }
    if !lists_token(buffer, headers, b"connection", b"upgrade") {
        return Err(BadRequest("Connection must list upgrade"));
    }
    let mut versions = field_values(buffer, headers, b"sec-websocket-version");
    match (versions.next(), versions.next()) {
        (Some(b"13"), None) => {}
        _ => return Err(HandshakeError::UnsupportedVersion),
    }
    let mut keys = field_values(buffer, headers, b"sec-websocket-key");
    let key = match (keys.next(), keys.next()) {
        (Some(key), None) => key,
        (None, _) => return Err(BadRequest("missing Sec-WebSocket-Key")),
        (Some(_), Some(_)) => return Err(BadRequest("more than one Sec-WebSocket-Key")),
    };
    // 16 bytes are 24 base64 characters ending in "=="; decode to be sure
    // the rest is base64 (the padding rules of STANDARD are strict).
    let mut nonce = [0; 18];
    if key.len() != 24 || STANDARD.decode_slice(key, &mut nonce) != Ok(16) {
        return Err(BadRequest("Sec-WebSocket-Key must be 16 bytes in base64"));
    }
    Ok(Handshake {
        accept: accept_key(key),
    })
}

/// The subprotocols the client offers (`Sec-WebSocket-Protocol`), in its
/// order of preference, across all such fields; empty elements are skipped.
pub fn protocol_offers<'a>(
    buffer: &'a [u8],
    headers: &'a [HeaderSpan],
) -> impl Iterator<Item = &'a [u8]> + 'a {
    field_values(buffer, headers, b"sec-websocket-protocol")
        .flat_map(list_elements)
        .filter(|protocol| !protocol.is_empty())
}

/// The extensions the client offers, in order, across all
/// `Sec-WebSocket-Extensions` fields; empty list elements are skipped.
pub fn extension_offers<'a>(
    buffer: &'a [u8],
    headers: &'a [HeaderSpan],
) -> impl Iterator<Item = ExtensionOffer<'a>> + 'a {
    field_values(buffer, headers, b"sec-websocket-extensions")
        .flat_map(|value| split_outside_quotes(value, b','))
        .filter(|element| !element.is_empty())
        .map(|element| {
            let name_end = element
                .iter()
                .position(|&byte| byte == b';')
                .unwrap_or(element.len());
            ExtensionOffer {
                name: trim(&element[..name_end]),
                params_text: &element[name_end..],
            }
        })
}

/// Response fields the handshake writes itself; the same names among the
/// application's extra fields are dropped rather than sent twice.
fn is_handshake_field(name: &[u8]) -> bool {
    [
        &b"upgrade"[..],
        b"connection",
        b"sec-websocket-accept",
        b"sec-websocket-extensions",
        b"content-length",
        b"transfer-encoding",
    ]
    .iter()
    .any(|owned| name.eq_ignore_ascii_case(owned))
}

/// Appends the `101 Switching Protocols` head: `Upgrade`, `Connection`,
/// `Sec-WebSocket-Accept`, the chosen subprotocol (a token, which should
/// be one the client offered), the negotiated permessage-deflate
/// parameters, then the application's `extra` fields (validated; names the
/// handshake owns, and `Sec-WebSocket-Protocol` when a subprotocol was
/// chosen, are dropped), then the blank line.
///
/// On an invalid subprotocol or extra field nothing is appended and the
/// error is returned (an application error: answer 500).
pub fn write_accept_response(
    out: &mut Vec<u8>,
    accept: &AcceptKey,
    subprotocol: Option<&[u8]>,
    deflate: Option<&DeflateParams>,
    extra: &[(&[u8], &[u8])],
) -> Result<(), ProtoError> {
    let start = out.len();
    let result = (|| {
        write_status_line(out, 101);
        out.extend_from_slice(
            b"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ",
        );
        out.extend_from_slice(accept.as_bytes());
        out.extend_from_slice(b"\r\n");
        if let Some(protocol) = subprotocol {
            if !is_token(protocol) {
                return Err(ProtoError::BadRequest("subprotocol is not a token"));
            }
            write_header(out, b"Sec-WebSocket-Protocol", protocol)?;
        }
        if let Some(params) = deflate {
            out.extend_from_slice(b"Sec-WebSocket-Extensions: ");
            params.write_response_value(out);
            out.extend_from_slice(b"\r\n");
        }
        for &(name, value) in extra {
            if is_handshake_field(name)
                || (subprotocol.is_some() && name.eq_ignore_ascii_case(b"sec-websocket-protocol"))
            {
                continue;
            }
            write_header(out, name, value)?;
        }
        out.extend_from_slice(b"\r\n");
        Ok(())
    })();
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// A response field, name and value (see [`accept_fields`]).
pub type Field = (Vec<u8>, Vec<u8>);

/// Checks the WebSocket side of an extended CONNECT (RFC 8441 section 5,
/// WebSocket over HTTP/2): `Sec-WebSocket-Version` once and `13`, as over
/// HTTP/1.1 (426 otherwise). There is no key to check: HTTP/2 carries no
/// `Sec-WebSocket-Key` or `Sec-WebSocket-Accept`, and the method, the
/// `:protocol` and the absence of `Upgrade` are the HTTP/2 layer's to check.
pub fn validate_extended_connect(
    buffer: &[u8],
    headers: &[HeaderSpan],
) -> Result<(), HandshakeError> {
    let mut versions = field_values(buffer, headers, b"sec-websocket-version");
    match (versions.next(), versions.next()) {
        (Some(b"13"), None) => Ok(()),
        _ => Err(HandshakeError::UnsupportedVersion),
    }
}

/// The fields of the `200` that accepts a WebSocket over HTTP/2 (RFC 8441
/// section 5): the chosen subprotocol, the negotiated permessage-deflate
/// parameters, then the application's `extra` fields, with the same rules
/// as [`write_accept_response`] (names the handshake owns are dropped, an
/// invalid subprotocol or field is an error). Names are lowercase, as
/// HTTP/2 requires.
pub fn accept_fields(
    subprotocol: Option<&[u8]>,
    deflate: Option<&DeflateParams>,
    extra: &[(&[u8], &[u8])],
) -> Result<Vec<Field>, ProtoError> {
    let mut fields = Vec::new();
    if let Some(protocol) = subprotocol {
        if !is_token(protocol) {
            return Err(ProtoError::BadRequest("subprotocol is not a token"));
        }
        fields.push((b"sec-websocket-protocol".to_vec(), protocol.to_vec()));
    }
    if let Some(params) = deflate {
        let mut value = Vec::new();
        params.write_response_value(&mut value);
        fields.push((b"sec-websocket-extensions".to_vec(), value));
    }
    for &(name, value) in extra {
        if is_handshake_field(name)
            || (subprotocol.is_some() && name.eq_ignore_ascii_case(b"sec-websocket-protocol"))
        {
            continue;
        }
        if !is_valid_header_name(name) {
            return Err(ProtoError::BadRequest("invalid response header name"));
        }
        if !is_valid_header_value(value) {
            return Err(ProtoError::BadRequest("invalid response header value"));
        }
        fields.push((name.to_ascii_lowercase(), value.to_vec()));
    }
    Ok(fields)
}

/// Appends the refusal of a handshake (400 or 426, see [`HandshakeError`])
/// with `Connection: close`; `date_line` is a whole `Date: ...\r\n` line.
pub fn write_rejection(out: &mut Vec<u8>, error: &HandshakeError, date_line: &[u8]) {
    let fields: &[u8] = match error {
        HandshakeError::UnsupportedVersion => b"Sec-WebSocket-Version: 13\r\n",
        HandshakeError::BadRequest(_) => b"",
    };
    let body: [&[u8]; 2] = [error.message().as_bytes(), b"\n"];
    write_closing_response(out, error.status(), fields, date_line, &body);
}
