//! Who the client really is behind a reverse proxy: the `X-Forwarded-*`
//! family and RFC 7239 `Forwarded`, and which peers may set them.
//!
//! A proxy in front of the server (nginx, a cloud balancer, an ingress)
//! connects to it itself, so the peer address is the proxy's. The proxy
//! appends what it saw to a header: the client's address, the scheme it
//! was reached by, the host name asked for. Anyone can send such headers,
//! so they count only from a peer the operator trusts ([`TrustedProxies`]),
//! and only the header family that the operator's proxy sets
//! ([`ProxyHeaders`]): a proxy that sets `X-Forwarded-For` passes a
//! client's own `Forwarded` through untouched, and reading both would let
//! the client choose its address.
//!
//! How a hop list is read: each proxy appends the address it received the
//! request from, so the list reads client-first, nearest-proxy-last. Walking
//! it from the right, entries that are themselves trusted proxies are
//! skipped; the first one that is not is the client (anything left of it
//! was written by that client and proves nothing). If every entry is
//! trusted, the left-most is the client. The scheme and host are taken
//! from the same hop: the element of `Forwarded` whose `for` was chosen, or
//! the `X-Forwarded-Proto`/`-Host`/`-Port` entry at the same position from
//! the right when that list is as long as `X-Forwarded-For` (else its
//! right-most entry, the one the nearest proxy wrote).
//!
//! [`resolve`] takes the request's header fields as `(name, value)` pairs
//! and returns `None` at no cost when none of the family is present.

use std::borrow::Cow;
use std::net::{IpAddr, SocketAddr};

#[cfg(test)]
mod tests;

/// Which header family carries forwarding information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyHeaders {
    /// Neither: the peer is the client.
    Off,
    /// `X-Forwarded-For`, `-Proto`, `-Host`, `-Port` (nginx, most balancers).
    XForwarded,
    /// RFC 7239 `Forwarded`.
    Forwarded,
}

/// The peers whose forwarding headers are believed: addresses and networks,
/// or everyone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    everyone: bool,
    /// `(network, prefix length)`; IPv4 networks hold IPv4 addresses.
    networks: Vec<(IpAddr, u8)>,
}

impl TrustedProxies {
    /// Parses a comma-separated list: IP addresses (`10.0.0.1`, `::1`),
    /// networks (`10.0.0.0/8`, `fd00::/8`) and `*` for everyone. Empty
    /// entries are skipped; anything else is an error naming the entry.
    pub fn parse(text: &str) -> Result<TrustedProxies, String> {
        let mut trusted = TrustedProxies::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if entry == "*" {
                trusted.everyone = true;
                continue;
            }
            let (address, prefix) = match entry.split_once('/') {
                Some((address, prefix)) => (address, Some(prefix)),
                None => (entry, None),
            };
            let address: IpAddr = address
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|_| format!("{entry:?} is not an IP address or network"))?;
            let address = canonical(address);
            let bits = if address.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                None => bits,
                Some(prefix) => match prefix.parse::<u8>() {
                    Ok(length) if length <= bits => length,
                    _ => return Err(format!("{entry:?} has a bad prefix length")),
                },
            };
            trusted.networks.push((address, prefix));
        }
        Ok(trusted)
    }

    /// Whether every peer is trusted (`*`).
    pub fn trusts_everyone(&self) -> bool {
        self.everyone
    }

    /// Whether `address` is a trusted proxy. An IPv4-mapped IPv6 address
    /// (`::ffff:127.0.0.1`, as a dual-stack socket reports IPv4 peers)
    /// counts as the IPv4 address it maps.
    pub fn trusts(&self, address: IpAddr) -> bool {
        if self.everyone {
            return true;
        }
        let address = canonical(address);
        self.networks
            .iter()
            .any(|&(network, prefix)| in_network(address, network, prefix))
    }

    fn trusts_node(&self, node: &Node<'_>) -> bool {
        match node {
            Node::Ip(address, _) => self.trusts(*address),
            // A name is never a trusted proxy's address, except under `*`.
            Node::Name(_) => self.everyone,
        }
    }
}

fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

fn in_network(address: IpAddr, network: IpAddr, prefix: u8) -> bool {
    match (address, network) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// The client one hop names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node<'a> {
    /// An address, with the port when the hop gave one (`Forwarded` may).
    Ip(IpAddr, Option<u16>),
    /// Anything else, as sent: `unknown`, an obfuscated id such as
    /// `_hidden` (RFC 7239 6.3), or whatever a proxy wrote that is not an
    /// address. It is reported as is; it is never a trusted proxy.
    Name(Cow<'a, [u8]>),
}

/// The scheme a client used to reach the first proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// `http` (or `ws`).
    Http,
    /// `https` (or `wss`).
    Https,
}

impl Scheme {
    fn parse(value: &[u8]) -> Option<Scheme> {
        let value = trim(value);
        if value.eq_ignore_ascii_case(b"http") || value.eq_ignore_ascii_case(b"ws") {
            Some(Scheme::Http)
        } else if value.eq_ignore_ascii_case(b"https") || value.eq_ignore_ascii_case(b"wss") {
            Some(Scheme::Https)
        } else {
            None
        }
    }
}

/// What the forwarding headers of one request say; `None` fields leave
/// the connection's own values in place.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Origin<'a> {
    /// The client.
    pub client: Option<Node<'a>>,
    /// The scheme the client used.
    pub scheme: Option<Scheme>,
    /// The host the client asked for (`host[:port]`), only when asked for.
    pub host: Option<Cow<'a, [u8]>>,
    /// The port the client connected to (`X-Forwarded-Port`), only when
    /// host headers were asked for.
    pub port: Option<u16>,
}

/// How [`resolve`] reads a request's headers.
#[derive(Debug, Clone)]
pub struct ForwardingRules {
    /// The header family to read.
    pub headers: ProxyHeaders,
    /// Which hops are proxies (and which peers may send the headers at all:
    /// the caller checks the peer before calling [`resolve`]).
    pub trusted: TrustedProxies,
    /// Also take the host (`X-Forwarded-Host`, `-Port`; `Forwarded: host=`).
    pub host: bool,
}

/// Most field lines of one header name read. With more, the right-most
/// ones are kept: they were written by the proxies nearest this server,
/// and the walk from the right finds the client among them unless the
/// trusted chain itself is longer. Ignoring the whole list instead would
/// let a client that sends a few lines of its own, in front of the line
/// its proxy adds (HAProxy's `option forwardfor` adds one), pass for the
/// proxy, whose address is often one the app trusts.
const MAX_LINES: usize = 4;

/// The last [`MAX_LINES`] field lines of one header name, in order,
/// without allocating.
#[derive(Default)]
struct Lines<'a> {
    lines: [&'a [u8]; MAX_LINES],
    count: usize,
}

impl<'a> Lines<'a> {
    fn push(&mut self, value: &'a [u8]) {
        if self.count == MAX_LINES {
            self.lines.rotate_left(1);
            self.lines[MAX_LINES - 1] = value;
        } else {
            self.lines[self.count] = value;
            self.count += 1;
        }
    }

    fn usable(&self) -> bool {
        self.count > 0
    }

    /// The comma-separated entries, right-most first, trimmed.
    fn entries_from_right(&self) -> impl Iterator<Item = &'a [u8]> + '_ {
        self.lines[..self.count]
            .iter()
            .rev()
            .flat_map(|line| line.rsplit(|&byte| byte == b','))
            .map(trim)
            // `a,,b` or a trailing comma: no hop, not an empty client.
            .filter(|entry| !entry.is_empty())
    }

    /// The entry `index` places from the right when the list has exactly
    /// `aligned` entries, else the right-most entry.
    fn hop_entry(&self, index: usize, aligned: usize) -> Option<&'a [u8]> {
        if !self.usable() {
            return None;
        }
        let count = self.entries_from_right().count();
        let position = if count == aligned { index } else { 0 };
        self.entries_from_right().nth(position)
    }
}

/// Reads the forwarding headers of one request from a trusted peer; `None`
/// when it carries none of the family `rules` reads.
pub fn resolve<'a>(
    rules: &ForwardingRules,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Option<Origin<'a>> {
    match rules.headers {
        ProxyHeaders::Off => None,
        ProxyHeaders::XForwarded => resolve_x_forwarded(rules, fields),
        ProxyHeaders::Forwarded => resolve_forwarded(rules, fields),
    }
}

fn resolve_x_forwarded<'a>(
    rules: &ForwardingRules,
    fields: impl Iterator<Item = (&'a [u8], &'a [u8])>,
) -> Option<Origin<'a>> {
    let (mut hops, mut proto, mut host, mut port) = Default::default();
    let mut any = false;
    for (name, value) in fields {
        // Every name of the family is 15 to 17 bytes long and starts with
        // `x-forwarded-`: one length test rules out almost every field.
        if !(15..=17).contains(&name.len()) || !name[..12].eq_ignore_ascii_case(b"x-forwarded-") {
            continue;
        }
        let lines: &mut Lines<'a> = match &name[12..] {
            rest if rest.eq_ignore_ascii_case(b"for") => &mut hops,
            rest if rest.eq_ignore_ascii_case(b"proto") => &mut proto,
            rest if rest.eq_ignore_ascii_case(b"host") && rules.host => &mut host,
            rest if rest.eq_ignore_ascii_case(b"port") && rules.host => &mut port,
            _ => continue,
        };
        lines.push(value);
        any = true;
    }
    if !any {
        return None;
    }
    let mut origin = Origin::default();
    // The client's position from the right, and the list's length.
    let (mut index, mut length) = (0, 0);
    if hops.usable() {
        let nodes = hops.entries_from_right().map(parse_bare_node);
        length = hops.entries_from_right().count();
        let mut chosen = None;
        for (position, node) in nodes.enumerate() {
            // An entry that is no address, `unknown` or obfuscated id
            // (`1.2.3.4"><script>`) hides itself and what stands left of
            // it, as a malformed `Forwarded` element does: the client is
            // the nearest valid hop right of it.
            let Some(node) = node else {
                break;
            };
            let trusted = rules.trusted.trusts_node(&node);
            // Every entry trusted: the left-most one (the last seen) is the client.
            chosen = Some((position, node));
            if !trusted {
                break;
            }
        }
        if let Some((position, node)) = chosen {
            index = position;
            origin.client = Some(node);
        }
    }
    origin.scheme = proto.hop_entry(index, length).and_then(Scheme::parse);
    origin.host = host
        .hop_entry(index, length)
        .filter(|value| is_host(value))
        .map(Cow::Borrowed);
    origin.port = port.hop_entry(index, length).and_then(parse_port);
    Some(origin)
}

/// An `X-Forwarded-For` entry: an address (IPv6 possibly in brackets), an
/// address with the client's port (`192.0.2.7:4711`, `[2001:db8::7]:4711`,
/// as Azure Application Gateway and some ingresses write it), or RFC
/// 7239's `unknown` or an obfuscated id (`_hidden`); `None` for anything
/// else, which no proxy writes and an app must not be handed as its
/// client's address (uvicorn passes it on as it came).
/// Read as a name, an entry with a port would be reported whole and would
/// never count as a trusted proxy; uvicorn splits it the same way.
fn parse_bare_node(entry: &[u8]) -> Option<Node<'_>> {
    let text = std::str::from_utf8(entry).ok()?;
    let unbracketed = text
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .unwrap_or(text);
    if let Ok(address) = unbracketed.parse::<IpAddr>() {
        return Some(Node::Ip(canonical(address), None));
    }
    match text.parse::<SocketAddr>() {
        Ok(socket) => Some(Node::Ip(canonical(socket.ip()), Some(socket.port()))),
        // Reported as given, as before: an address with an empty port
        // (`203.0.113.7:`) or an IPv6 link-local address with its zone
        // (`fe80::1%eth0`, RFC 6874), which Rust's address types do not
        // hold, but which carry nothing but an address.
        Err(_) if is_unknown_or_obfuscated(text) || is_address_as_written(unbracketed) => {
            Some(Node::Name(Cow::Borrowed(entry)))
        }
        Err(_) => None,
    }
}

/// An address with an empty port, or an IPv6 address with a zone id.
fn is_address_as_written(text: &str) -> bool {
    if let Some(address) = text.strip_suffix(':') {
        return address.parse::<std::net::Ipv4Addr>().is_ok();
    }
    match text.split_once('%') {
        Some((address, zone)) => {
            address.parse::<std::net::Ipv6Addr>().is_ok()
                && !zone.is_empty()
                && zone
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'-'))
        }
        None => false,
    }
}

/// RFC 7239 section 6: a node that is no address, `unknown` or an
/// obfuscated identifier (`_` then letters, digits, `.`, `_`, `-`).
fn is_unknown_or_obfuscated(name: &str) -> bool {
    let obfuscated = name.len() > 1
        && name.starts_with('_')
        && name[1..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    obfuscated || name.eq_ignore_ascii_case("unknown")
}

fn parse_port(value: &[u8]) -> Option<u16> {
    let value = trim(value);
    if value.is_empty() || value.len() > 5 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// Whether `value` may stand as a Host value: checked as the request's own
/// Host field is (RFC 9112 3.2: `uri-host [ ":" port ]`), so the app never
/// gets from a proxy a host it would have refused from the client
/// (`evil.test:abc`, `[2001:db8::7`), and nothing else can travel in it.
fn is_host(value: &[u8]) -> bool {
    !value.is_empty() && value.len() <= 255 && crate::target::is_valid_host_field(value)
}

fn trim(mut value: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = value {
        value = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = value {
        value = rest;
    }
    value
}

mod rfc7239;
use rfc7239::resolve_forwarded;
