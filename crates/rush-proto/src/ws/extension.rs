//! One offer of a WebSocket extension (RFC 6455 9.1): its name and its
//! parameters, as the client wrote them in `Sec-WebSocket-Extensions`, and
//! the small grammar they are read with. The handshake finds the offers
//! (handshake.rs); an extension decides on its own offer (deflate.rs).

use crate::response::is_token_character;

/// One extension offer from `Sec-WebSocket-Extensions`: a name and its
/// parameters (RFC 6455 9.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtensionOffer<'a> {
    /// The extension's name, as sent.
    pub name: &'a [u8],
    /// Everything after the name (`; a; b=1`), parsed by [`ExtensionOffer::params`].
    pub params_text: &'a [u8],
}

impl<'a> ExtensionOffer<'a> {
    /// The parameters: `(name, value)` pairs, the value a token or the
    /// contents of a quoted string (quoted strings with backslash escapes
    /// are refused: RFC 6455 9.1 wants their contents to be tokens anyway).
    /// `Err(())` for a parameter outside that grammar; an offer with one
    /// should be declined.
    pub fn params(&self) -> impl Iterator<Item = Result<(&'a [u8], Option<&'a [u8]>), ()>> + 'a {
        split_outside_quotes(self.params_text, b';')
            .skip(1)
            .map(parse_param)
    }
}

pub(crate) fn is_token(bytes: &[u8]) -> bool {
    !bytes.is_empty() && bytes.iter().all(|&byte| is_token_character(byte))
}

fn parse_param(text: &[u8]) -> Result<(&[u8], Option<&[u8]>), ()> {
    let Some(equals) = text.iter().position(|&byte| byte == b'=') else {
        return if is_token(text) {
            Ok((text, None))
        } else {
            Err(())
        };
    };
    let name = trim(&text[..equals]);
    let mut value = trim(&text[equals + 1..]);
    if let [b'"', inner @ .., b'"'] = value {
        value = inner;
    }
    if is_token(name) && is_token(value) {
        Ok((name, Some(value)))
    } else {
        Err(())
    }
}

pub(crate) fn trim(mut bytes: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = bytes {
        bytes = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = bytes {
        bytes = rest;
    }
    bytes
}

/// Splits at `delimiter` where it is not inside a quoted string; trims whitespace.
pub(crate) fn split_outside_quotes(text: &[u8], delimiter: u8) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let text = rest?;
        let mut quoted = false;
        let mut escaped = false;
        for (index, &byte) in text.iter().enumerate() {
            if escaped {
                escaped = false;
            } else if quoted && byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                quoted = !quoted;
            } else if byte == delimiter && !quoted {
                rest = Some(&text[index + 1..]);
                return Some(trim(&text[..index]));
            }
        }
        rest = None;
        Some(trim(text))
    })
}
