//! RFC 7239 `Forwarded`: `for=192.0.2.60;proto=https;host=example.com,
//! for="[2001:db8::17]:4711"`, one comma-separated element per hop, each a
//! `;`-separated list of `name=value` pairs whose values are tokens or
//! quoted strings.
//!
//! A field line is believed whole or not at all: any syntax error (an
//! unclosed quote, a pair without `=`, a repeated parameter, a `for` that is
//! no node) makes it and every line before it count as absent, since a
//! proxy writes its line correctly and a broken one is more likely a
//! client's attempt than a proxy's; lines after it, which nearer proxies
//! added, are still read.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{
    canonical, is_host, is_unknown_or_obfuscated, trim, ForwardingRules, Node, Origin, Scheme,
};

/// One hop: the parameters this server reads.
#[derive(Default)]
struct Element<'a> {
    client: Option<Node<'a>>,
    proto: Option<Cow<'a, [u8]>>,
    host: Option<Cow<'a, [u8]>>,
}

pub(super) fn resolve_forwarded<'a>(
    rules: &ForwardingRules,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Option<Origin<'a>> {
    let mut elements: Vec<Element<'a>> = Vec::new();
    // Where each kept line's elements start in `elements`.
    let mut line_starts: Vec<usize> = Vec::new();
    for (name, value) in fields {
        if name.len() != 9 || !name.eq_ignore_ascii_case(b"forwarded") {
            continue;
        }
        line_starts.push(elements.len());
        if parse_line(value, &mut elements).is_none() {
            // Whatever stood left of a malformed line cannot be placed in
            // the chain; the lines right of it, added by the proxies
            // nearest this server, still can. Believing none of them would
            // let a client pass for its proxy by sending a broken line.
            elements.clear();
            line_starts.clear();
        } else if line_starts.len() > super::MAX_LINES {
            // Only the right-most lines are kept, as for X-Forwarded-For.
            // The first kept line starts at 0: drop what is before the second.
            line_starts.remove(0);
            let kept_from = line_starts[0];
            elements.drain(..kept_from);
            line_starts.iter_mut().for_each(|start| *start -= kept_from);
        }
    }
    // Right to left: skip the hops that are trusted proxies themselves.
    let mut chosen = None;
    for element in elements.into_iter().rev() {
        let trusted = match &element.client {
            Some(node) => rules.trusted.trusts_node(node),
            // A hop that does not say whom it heard from ends the walk.
            None => false,
        };
        chosen = Some(element);
        if !trusted {
            break;
        }
    }
    let element = chosen?;
    Some(Origin {
        client: element.client,
        scheme: element.proto.as_deref().and_then(Scheme::parse),
        host: element.host.filter(|host| rules.host && is_host(host)),
        port: None,
    })
}

/// Appends the elements of one field line; `None` if it is malformed.
fn parse_line<'a>(line: &'a [u8], elements: &mut Vec<Element<'a>>) -> Option<()> {
    let mut rest = line;
    loop {
        let mut element = Element::default();
        let mut seen = (false, false, false, false);
        loop {
            let (name, value, after) = parse_pair(rest)?;
            rest = after;
            let name = trim(name);
            let repeated = if name.eq_ignore_ascii_case(b"for") {
                element.client = Some(parse_node(&value)?);
                std::mem::replace(&mut seen.0, true)
            } else if name.eq_ignore_ascii_case(b"proto") {
                element.proto = Some(value);
                std::mem::replace(&mut seen.1, true)
            } else if name.eq_ignore_ascii_case(b"host") {
                element.host = Some(value);
                std::mem::replace(&mut seen.2, true)
            } else if name.eq_ignore_ascii_case(b"by") {
                std::mem::replace(&mut seen.3, true)
            } else {
                // Extensions are allowed; their names must be tokens.
                if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
                    return None;
                }
                false
            };
            if repeated {
                return None;
            }
            match rest.first() {
                Some(b';') => rest = &rest[1..],
                _ => break,
            }
        }
        elements.push(element);
        match rest.first() {
            None => return Some(()),
            Some(b',') => rest = &rest[1..],
            Some(_) => return None,
        }
    }
}

/// A parameter's name, its value, and the input after it.
type Pair<'a> = (&'a [u8], Cow<'a, [u8]>, &'a [u8]);

/// `name=value` at the start of `input` (after optional whitespace):
/// the name, the value (unquoted), and what follows it (whitespace skipped),
/// which starts with `;`, `,` or is empty.
fn parse_pair(input: &[u8]) -> Option<Pair<'_>> {
    let input = trim_start(input);
    let equals = input.iter().position(|&byte| byte == b'=')?;
    let (name, rest) = (&input[..equals], &input[equals + 1..]);
    let (value, rest) = if rest.first() == Some(&b'"') {
        parse_quoted(&rest[1..])?
    } else {
        let end = rest
            .iter()
            .position(|&byte| matches!(byte, b';' | b',' | b' ' | b'\t'))
            .unwrap_or(rest.len());
        let token = &rest[..end];
        if token.is_empty() || !token.iter().all(|&b| is_token(b)) {
            return None;
        }
        (Cow::Borrowed(token), &rest[end..])
    };
    let rest = trim_start(rest);
    if !matches!(rest.first(), None | Some(b';') | Some(b',')) {
        return None;
    }
    Some((name, value, rest))
}

/// The rest of a quoted string after its opening quote: the value, with
/// `\x` escapes undone (copied only when there is one), and what follows
/// the closing quote.
fn parse_quoted(input: &[u8]) -> Option<(Cow<'_, [u8]>, &[u8])> {
    let mut escaped: Option<Vec<u8>> = None;
    let mut index = 0;
    while index < input.len() {
        match input[index] {
            b'"' => {
                let value = match escaped {
                    Some(bytes) => Cow::Owned(bytes),
                    None => Cow::Borrowed(&input[..index]),
                };
                return Some((value, &input[index + 1..]));
            }
            b'\\' => {
                let next = *input.get(index + 1)?;
                escaped
                    .get_or_insert_with(|| input[..index].to_vec())
                    .push(next);
                index += 2;
            }
            byte => {
                if let Some(bytes) = &mut escaped {
                    bytes.push(byte);
                }
                index += 1;
            }
        }
    }
    None
}

/// A `for` value (RFC 7239 6): an address with an optional port, `unknown`,
/// or an obfuscated `_id`; `None` for anything else.
fn parse_node<'a>(value: &Cow<'a, [u8]>) -> Option<Node<'a>> {
    let text = std::str::from_utf8(value).ok()?;
    let (name, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let address: Ipv6Addr = inside.parse().ok()?;
        let port = match after {
            "" => None,
            _ => Some(after.strip_prefix(':')?),
        };
        return Some(Node::Ip(
            canonical(IpAddr::V6(address)),
            parse_node_port(port)?,
        ));
    } else {
        match text.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        }
    };
    let port = parse_node_port(port)?;
    if let Ok(address) = name.parse::<Ipv4Addr>() {
        return Some(Node::Ip(IpAddr::V4(address), port));
    }
    if is_unknown_or_obfuscated(name) {
        let end = name.len();
        return Some(Node::Name(match value {
            Cow::Borrowed(bytes) => Cow::Borrowed(&bytes[..end]),
            Cow::Owned(bytes) => Cow::Owned(bytes[..end].to_vec()),
        }));
    }
    None
}

/// A node's port: `Some(None)` when absent or obfuscated (`_abc`),
/// `Some(Some(port))` for a number, `None` when malformed.
fn parse_node_port(port: Option<&str>) -> Option<Option<u16>> {
    match port {
        None => Some(None),
        Some(port) if port.starts_with('_') && port.len() > 1 => Some(None),
        Some(port)
            if !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            port.parse().ok().map(Some)
        }
        Some(_) => None,
    }
}

fn is_token(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&byte)
}

fn trim_start(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    value
}
