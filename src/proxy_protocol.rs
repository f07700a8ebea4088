//! The PROXY protocol (`--proxy-protocol`): the header a load balancer in
//! TCP mode (HAProxy `send-proxy`/`send-proxy-v2`, AWS NLB, GCP, many
//! Kubernetes ingresses) puts before the client's first byte, naming the
//! client it accepted. Version 1 is one text line, version 2 binary with
//! optional type-length-values (TLVs); HAProxy's proxy-protocol.txt is the
//! specification.
//!
//! The `ppp` crate parses both versions from a byte slice without copying
//! and tells an incomplete header from a malformed one. This module adds
//! what rush decides: the bounds (a v1 line of at most 107 bytes, a v2
//! payload of at most [`V2_MAX_PAYLOAD`]), which commands and families are
//! taken, and which TLVs reach the app ([`ProxyInfo`]).
//!
//! The header is read from the socket itself, before any transport reads
//! it ([`read_header`]): the bytes are peeked until the whole header is
//! there, then exactly the header's length is consumed. What follows it
//! (a TLS ClientHello, an HTTP/1.1 request, an HTTP/2 preface) stays in
//! the socket for the transport, which therefore needs no notion of the
//! header at all.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::RawFd;

use ppp::v2;
use ppp::{v1, PartialResult};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The longest v1 header, its CRLF included (the specification's bound).
pub(crate) const V1_MAX: usize = 107;
/// The longest v2 payload (addresses and TLVs) rush takes. The
/// specification allows 65,535 bytes; what load balancers send (addresses,
/// the TLS TLVs with a certificate's CN, an AWS endpoint id) is a few
/// hundred, and a larger one would make every connection's first read
/// that much bigger.
pub(crate) const V2_MAX_PAYLOAD: usize = 2048;
/// The v2 fixed part: signature, version and command, family, length.
const V2_FIXED: usize = 16;
/// The most bytes a header can span, so the most ever peeked.
const PEEK_MAX: usize = V2_FIXED + V2_MAX_PAYLOAD;

/// What the app may read of a v2 header's TLVs (ASGI's
/// `scope["extensions"]["proxy_protocol"]`, WSGI's
/// `environ["rush.proxy_protocol"]`).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProxyInfo {
    /// PP2_TYPE_AUTHORITY: the host name the client asked for (its SNI).
    pub authority: Option<String>,
    /// PP2_TYPE_SSL: the client's TLS session at the load balancer.
    pub ssl: Option<SslInfo>,
}

impl ProxyInfo {
    /// As the app reads it: `{"authority": str | None, "ssl": dict | None}`,
    /// the `ssl` dict with `client` and `verify` (ints) and `version`,
    /// `cn`, `cipher`, `sig_alg`, `key_alg` (str or None).
    pub(crate) fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let info = PyDict::new(py);
        info.set_item("authority", self.authority.as_deref())?;
        let ssl = match &self.ssl {
            Some(ssl) => {
                let dict = PyDict::new(py);
                dict.set_item("client", ssl.client)?;
                dict.set_item("verify", ssl.verify)?;
                for (name, value) in [
                    ("version", &ssl.version),
                    ("cn", &ssl.cn),
                    ("cipher", &ssl.cipher),
                    ("sig_alg", &ssl.sig_alg),
                    ("key_alg", &ssl.key_alg),
                ] {
                    dict.set_item(name, value.as_deref())?;
                }
                Some(dict)
            }
            None => None,
        };
        info.set_item("ssl", ssl)?;
        Ok(info)
    }
}

/// PP2_TYPE_SSL and its sub-TLVs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SslInfo {
    /// PP2_CLIENT_* bits: 0x01 TLS, 0x02 a certificate on this connection,
    /// 0x04 a certificate in the session.
    pub client: u8,
    /// 0 when the client's certificate was verified (or none was given).
    pub verify: u32,
    /// PP2_SUBTYPE_SSL_VERSION, e.g. `TLSv1.3`.
    pub version: Option<String>,
    /// PP2_SUBTYPE_SSL_CN: the client certificate's Common Name.
    pub cn: Option<String>,
    /// PP2_SUBTYPE_SSL_CIPHER.
    pub cipher: Option<String>,
    /// PP2_SUBTYPE_SSL_SIG_ALG.
    pub sig_alg: Option<String>,
    /// PP2_SUBTYPE_SSL_KEY_ALG.
    pub key_alg: Option<String>,
}

/// Who the header says the client is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Keep the connection's own peer: v2 LOCAL (the balancer's own health
    /// check), v1 UNKNOWN, v2 UNSPEC (the specification says to use the
    /// real connection's address then).
    Peer,
    /// A TCP client over IPv4 or IPv6.
    Address(SocketAddr),
    /// A client on a Unix socket of the balancer's host: shown as rush
    /// shows its own Unix-socket peers (no address).
    Unix,
}

/// What the bytes received so far make of a header.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A prefix of a valid header: wait for more.
    Incomplete,
    /// A header of `length` bytes.
    Complete {
        length: usize,
        source: Source,
        info: Option<Box<ProxyInfo>>,
    },
    /// Not a header rush takes: refuse the connection (the text says why,
    /// for the log).
    Invalid(String),
}

/// Parses the header at the start of `input` (which may hold more).
pub fn parse(input: &[u8]) -> Parsed {
    if input.is_empty() {
        return Parsed::Incomplete;
    }
    if input[0] == b'P' {
        return parse_v1(input);
    }
    if input[0] == v2::PROTOCOL_PREFIX[0] {
        return parse_v2(input);
    }
    Parsed::Invalid("no PROXY protocol header".to_owned())
}

fn parse_v1(input: &[u8]) -> Parsed {
    const PREFIX: &[u8] = b"PROXY ";
    let start = &input[..input.len().min(PREFIX.len())];
    if start != &PREFIX[..start.len()] {
        return Parsed::Invalid("no PROXY protocol header".to_owned());
    }
    // The line is handed to ppp only once its CRLF is there: ppp's own
    // partial-input checks take a line cut right after a separator
    // (`... 56324 `) for a malformed one.
    let line = &input[..input.len().min(V1_MAX)];
    let Some(end) = memchr::memchr2(b'\r', b'\n', line) else {
        if input.len() >= V1_MAX {
            return Parsed::Invalid(format!("a v1 header longer than {V1_MAX} bytes"));
        }
        return Parsed::Incomplete;
    };
    match line.get(end..end + 2) {
        // A bare LF is refused, as rush refuses it in request heads.
        _ if line[end] == b'\n' => {
            return Parsed::Invalid("a v1 header ending in a bare LF".to_owned())
        }
        Some(b"\r\n") => {}
        Some(_) => return Parsed::Invalid("a v1 header with a CR not followed by LF".to_owned()),
        None if end + 1 >= V1_MAX => {
            return Parsed::Invalid(format!("a v1 header longer than {V1_MAX} bytes"))
        }
        None => return Parsed::Incomplete,
    }
    let header = match v1::Header::try_from(&input[..end + 2]) {
        Ok(header) => header,
        Err(error) => return Parsed::Invalid(format!("a malformed v1 header: {error}")),
    };
    let source = match header.addresses {
        v1::Addresses::Unknown => Source::Peer,
        v1::Addresses::Tcp4(addresses) => Source::Address(SocketAddr::new(
            IpAddr::V4(addresses.source_address),
            addresses.source_port,
        )),
        v1::Addresses::Tcp6(addresses) => Source::Address(SocketAddr::new(
            IpAddr::V6(addresses.source_address),
            addresses.source_port,
        )),
    };
    Parsed::Complete {
        length: header.header.len(),
        source,
        info: None,
    }
}

fn parse_v2(input: &[u8]) -> Parsed {
    if input.len() >= V2_FIXED && input.starts_with(v2::PROTOCOL_PREFIX) {
        // The declared length is known before the payload arrives: a
        // header over the cap is refused without waiting for it.
        let declared = usize::from(u16::from_be_bytes([input[14], input[15]]));
        if declared > V2_MAX_PAYLOAD {
            return Parsed::Invalid(format!(
                "a v2 header of {declared} bytes, over the {V2_MAX_PAYLOAD} taken"
            ));
        }
    }
    let header = v2::Header::try_from(input);
    if header.is_incomplete() {
        return Parsed::Incomplete;
    }
    let header = match header {
        Ok(header) => header,
        Err(error) => return Parsed::Invalid(format!("a malformed v2 header: {error}")),
    };
    let source =
        match (header.command, header.addresses) {
            // LOCAL: the balancer speaks for itself; its addresses, if any,
            // are to be ignored.
            (v2::Command::Local, _) => Source::Peer,
            (v2::Command::Proxy, _) if header.protocol == v2::Protocol::Datagram => {
                return Parsed::Invalid("a v2 header for a datagram (UDP) client".to_owned());
            }
            (v2::Command::Proxy, v2::Addresses::Unspecified) => Source::Peer,
            (v2::Command::Proxy, v2::Addresses::IPv4(addresses)) => Source::Address(
                SocketAddr::new(IpAddr::V4(addresses.source_address), addresses.source_port),
            ),
            (v2::Command::Proxy, v2::Addresses::IPv6(addresses)) => Source::Address(
                SocketAddr::new(IpAddr::V6(addresses.source_address), addresses.source_port),
            ),
            (v2::Command::Proxy, v2::Addresses::Unix(_)) => Source::Unix,
        };
    let mut info = ProxyInfo::default();
    for tlv in header.tlvs() {
        let tlv = match tlv {
            Ok(tlv) => tlv,
            Err(error) => return Parsed::Invalid(format!("a malformed v2 TLV: {error}")),
        };
        match tlv.kind {
            kind if kind == v2::Type::Authority as u8 => {
                info.authority = Some(text(&tlv.value));
            }
            kind if kind == v2::Type::SSL as u8 => match parse_ssl(&tlv.value) {
                Some(ssl) => info.ssl = Some(ssl),
                None => return Parsed::Invalid("a malformed v2 SSL TLV".to_owned()),
            },
            // ALPN, CRC32C, NOOP, UNIQUE_ID, NETNS, custom ones: not
            // passed on (the CRC is the balancer's integrity check of the
            // header on a network that TCP already checks).
            _ => {}
        }
    }
    let info = (info != ProxyInfo::default()).then(|| Box::new(info));
    Parsed::Complete {
        length: header.header.len(),
        source,
        info,
    }
}

/// PP2_TYPE_SSL's value: client bits, verify result, then sub-TLVs.
fn parse_ssl(value: &[u8]) -> Option<SslInfo> {
    let (&client, rest) = value.split_first()?;
    let verify = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let mut ssl = SslInfo {
        client,
        verify,
        ..SslInfo::default()
    };
    for sub in v2::TypeLengthValues::from(&rest[4..]) {
        let sub = sub.ok()?;
        let slot = match sub.kind {
            kind if kind == v2::Type::SSLVersion as u8 => &mut ssl.version,
            kind if kind == v2::Type::SSLCommonName as u8 => &mut ssl.cn,
            kind if kind == v2::Type::SSLCipher as u8 => &mut ssl.cipher,
            kind if kind == v2::Type::SSLSignatureAlgorithm as u8 => &mut ssl.sig_alg,
            kind if kind == v2::Type::SSLKeyAlgorithm as u8 => &mut ssl.key_alg,
            _ => continue,
        };
        *slot = Some(text(&sub.value));
    }
    Some(ssl)
}

/// A TLV's text: the specification says UTF-8; anything else is replaced
/// rather than refused, as the app reads it only as information.
fn text(value: &[u8]) -> String {
    String::from_utf8_lossy(value).into_owned()
}

/// What reading the socket gave.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Not all of it has arrived: wait for the socket to be readable.
    Waiting,
    /// The peer closed before sending a byte.
    Closed,
    /// The header was read and consumed; the rest is still in the socket.
    Done {
        source: Source,
        info: Option<Box<ProxyInfo>>,
    },
    /// Refused: a malformed header, no header, or one cut short (the peer
    /// closed, or `peer_done` said it will send no more).
    Refused(String),
}

/// Reads the header from the socket `fd`: peeks until it is complete, then
/// takes exactly its bytes. `peer_done`: the peer has closed its side, so
/// what is there is all there will be.
pub(crate) fn read_header(fd: RawFd, peer_done: bool) -> io::Result<Read> {
    let mut buffer = [0u8; PEEK_MAX];
    let peeked = loop {
        // SAFETY: `fd` is an open socket of the caller's; at most
        // `buffer.len()` bytes are written into the live local buffer.
        let count =
            unsafe { libc::recv(fd, buffer.as_mut_ptr().cast(), buffer.len(), libc::MSG_PEEK) };
        if count >= 0 {
            break count as usize;
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Read::Waiting),
            _ => return Err(error),
        }
    };
    if peeked == 0 {
        return Ok(Read::Closed);
    }
    match parse(&buffer[..peeked]) {
        Parsed::Incomplete if peer_done => Ok(Read::Refused(
            "the peer closed in the middle of the PROXY protocol header".to_owned(),
        )),
        Parsed::Incomplete => Ok(Read::Waiting),
        Parsed::Invalid(why) => Ok(Read::Refused(why)),
        Parsed::Complete {
            length,
            source,
            info,
        } => {
            // SAFETY: as above; `length` is at most `peeked`, bytes the
            // socket holds, so this takes them all and nothing after.
            let taken = unsafe { libc::recv(fd, buffer.as_mut_ptr().cast(), length, 0) };
            if taken != length as isize {
                return Err(io::Error::other("the PROXY header could not be consumed"));
            }
            Ok(Read::Done { source, info })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2_header(command: u8, family: u8, payload: &[u8]) -> Vec<u8> {
        let mut bytes = v2::PROTOCOL_PREFIX.to_vec();
        bytes.push(0x20 | command);
        bytes.push(family);
        bytes.extend((payload.len() as u16).to_be_bytes());
        bytes.extend(payload);
        bytes
    }

    fn tlv(kind: u8, value: &[u8]) -> Vec<u8> {
        let mut bytes = vec![kind];
        bytes.extend((value.len() as u16).to_be_bytes());
        bytes.extend(value);
        bytes
    }

    fn ipv4_payload() -> Vec<u8> {
        let mut payload = vec![203, 0, 113, 7, 10, 0, 0, 1];
        payload.extend(51000u16.to_be_bytes());
        payload.extend(443u16.to_be_bytes());
        payload
    }

    /// `ipv4_payload` with an authority TLV and an SSL TLV (`client`
    /// flags, verify 0, version and client CN, then `more` sub-TLVs).
    fn ipv4_with_tls(client: u8, more: &[u8]) -> Vec<u8> {
        let mut payload = ipv4_payload();
        payload.extend(tlv(0x02, b"example.com"));
        let mut ssl = vec![client, 0, 0, 0, 0];
        ssl.extend(tlv(0x21, b"TLSv1.3"));
        ssl.extend(tlv(0x22, b"client one"));
        ssl.extend(more);
        payload.extend(tlv(0x20, &ssl));
        payload
    }

    fn address(text: &str) -> Source {
        Source::Address(text.parse().unwrap())
    }

    /// Every valid header: whole (and followed by a request), and every
    /// strict prefix of it incomplete, so a header split anywhere by the
    /// network is waited for, never refused.
    #[test]
    fn valid_headers_whole_and_split_at_every_offset() {
        let mut with_tlvs = ipv4_with_tls(0x01, &[]);
        with_tlvs.extend(tlv(0x04, &[0; 7]));
        let mut ipv6 = Vec::new();
        ipv6.extend(
            "2001:db8::5"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets(),
        );
        ipv6.extend(std::net::Ipv6Addr::LOCALHOST.octets());
        ipv6.extend(8080u16.to_be_bytes());
        ipv6.extend(80u16.to_be_bytes());
        let cases: Vec<(Vec<u8>, Source)> = vec![
            (
                b"PROXY TCP4 192.0.2.10 10.0.0.1 56324 443\r\n".to_vec(),
                address("192.0.2.10:56324"),
            ),
            (
                b"PROXY TCP6 2001:db8::1 ::1 65535 80\r\n".to_vec(),
                address("[2001:db8::1]:65535"),
            ),
            (
                b"PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n".to_vec(),
                address("255.255.255.255:65535"),
            ),
            (b"PROXY UNKNOWN\r\n".to_vec(), Source::Peer),
            (
                b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n".to_vec(),
                Source::Peer,
            ),
            (
                v2_header(0x1, 0x11, &ipv4_payload()),
                address("203.0.113.7:51000"),
            ),
            (v2_header(0x1, 0x21, &ipv6), address("[2001:db8::5]:8080")),
            (
                v2_header(0x1, 0x11, &with_tlvs),
                address("203.0.113.7:51000"),
            ),
            (v2_header(0x0, 0x00, &[]), Source::Peer),
            (v2_header(0x0, 0x11, &ipv4_payload()), Source::Peer),
            (v2_header(0x1, 0x00, &[]), Source::Peer),
            (v2_header(0x1, 0x31, &[0; 216]), Source::Unix),
        ];
        for (header, expected) in cases {
            let mut input = header.clone();
            input.extend(b"GET / HTTP/1.1\r\n\r\n");
            match parse(&input) {
                Parsed::Complete { length, source, .. } => {
                    assert_eq!(length, header.len(), "{header:?}");
                    assert_eq!(source, expected, "{header:?}");
                }
                other => panic!("{header:?}: {other:?}"),
            }
            for cut in 0..header.len() {
                assert_eq!(
                    parse(&header[..cut]),
                    Parsed::Incomplete,
                    "{header:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn the_tls_and_authority_tlvs_reach_the_app() {
        let payload = ipv4_with_tls(0x07, &tlv(0x23, b"TLS_AES_256_GCM_SHA384"));
        let Parsed::Complete { info, .. } = parse(&v2_header(0x1, 0x11, &payload)) else {
            panic!("not parsed");
        };
        let info = info.expect("TLVs");
        assert_eq!(info.authority.as_deref(), Some("example.com"));
        let ssl = info.ssl.expect("the SSL TLV");
        assert_eq!((ssl.client, ssl.verify), (0x07, 0));
        assert_eq!(ssl.version.as_deref(), Some("TLSv1.3"));
        assert_eq!(ssl.cn.as_deref(), Some("client one"));
        assert_eq!(ssl.cipher.as_deref(), Some("TLS_AES_256_GCM_SHA384"));
        // Without TLVs there is nothing to pass on.
        let Parsed::Complete { info, .. } = parse(&v2_header(0x1, 0x11, &ipv4_payload())) else {
            panic!("not parsed");
        };
        assert_eq!(info, None);
    }

    #[test]
    fn malformed_headers_are_refused() {
        let mut too_long_v1 = b"PROXY TCP4 ".to_vec();
        too_long_v1.extend([b'1'; 120]);
        let mut cut_tlv = ipv4_payload();
        cut_tlv.extend([0x02, 0x00, 0x09, b'a']);
        let cases: Vec<Vec<u8>> = vec![
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            b"\x16\x03\x01\x02\x00\x01".to_vec(),
            b"proxy TCP4 192.0.2.10 10.0.0.1 1 2\r\n".to_vec(),
            b"PROXY TCP4 192.0.2.10 10.0.0.1 1 2\n".to_vec(),
            b"PROXY TCP4 192.0.2.10 10.0.0.1 1 2\rX".to_vec(),
            b"PROXY TCP5 192.0.2.10 10.0.0.1 1 2\r\n".to_vec(),
            b"PROXY TCP4 ::1 ::1 1 2\r\n".to_vec(),
            b"PROXY TCP6 192.0.2.10 10.0.0.1 1 2\r\n".to_vec(),
            b"PROXY TCP4 192.0.2.300 10.0.0.1 1 2\r\n".to_vec(),
            b"PROXY TCP4 192.0.2.10 10.0.0.1 65536 2\r\n".to_vec(),
            b"PROXY TCP4 192.0.2.10 10.0.0.1 080 2\r\n".to_vec(),
            b"PROXY TCP4 192.0.2.10 10.0.0.1 -1 2\r\n".to_vec(),
            b"PROXY TCP4 192.0.2.10  10.0.0.1 1 2\r\n".to_vec(),
            b"PROXY TCP4 192.0.2.10 10.0.0.1 1\r\n".to_vec(),
            too_long_v1,
            // Version 1 in the binary form, an unknown command, family.
            {
                let mut bytes = v2_header(0x1, 0x11, &ipv4_payload());
                bytes[12] = 0x11;
                bytes
            },
            v2_header(0x2, 0x11, &ipv4_payload()),
            v2_header(0x1, 0x41, &ipv4_payload()),
            // Shorter than its family's addresses.
            v2_header(0x1, 0x11, &[1, 2, 3]),
            v2_header(0x1, 0x21, &ipv4_payload()),
            // UDP.
            v2_header(0x1, 0x12, &ipv4_payload()),
            v2_header(0x1, 0x11, &cut_tlv),
            v2_header(0x1, 0x11, &[0; V2_MAX_PAYLOAD + 1]),
        ];
        for input in cases {
            assert!(
                matches!(parse(&input), Parsed::Invalid(_)),
                "{input:?}: {:?}",
                parse(&input)
            );
        }
    }

    #[test]
    fn an_oversized_v2_header_is_refused_before_its_payload_arrives() {
        let mut fixed = v2::PROTOCOL_PREFIX.to_vec();
        fixed.extend([0x21, 0x11]);
        fixed.extend(60000u16.to_be_bytes());
        assert!(matches!(parse(&fixed), Parsed::Invalid(_)));
        // A v1 line that reaches the bound without its CRLF.
        let line = [b'P'; V1_MAX];
        assert!(matches!(parse(&line), Parsed::Invalid(_)));
    }
}
