//! Behind a reverse proxy: the client, scheme and host of one request as a
//! trusted proxy reports them, applied to what every interface shows (the
//! rush `Request`, WSGI `environ`, ASGI `scope`) and to the access log.
//!
//! How it works: whether a peer is a trusted proxy is decided once, when
//! its connection is accepted ([`Forwarding::trusts_peer`]). For each
//! request from such a peer, [`Forwarding::read`] walks the header fields
//! once through `rush_proto::forwarded` (no allocation when none of the
//! family is there) and leaves the result on the connection as a
//! [`RequestOrigin`], which the dispatchers read where they build the
//! client, the scheme and the host. Requests from other peers cost one
//! boolean test. The rules themselves live in rush-proto, sans-IO.

use std::net::SocketAddr;

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};
use rush_proto::forwarded::{resolve, ForwardingRules, Node, ProxyHeaders, Scheme, TrustedProxies};

use rush_proto::fields::header_fields;

/// The worker's forwarding rules (`--proxy-headers`, `--forwarded-allow-ips`,
/// `--forwarded-host`).
pub(crate) struct Forwarding {
    rules: ForwardingRules,
}

impl Forwarding {
    /// The rules, or `None` when proxy headers are off (then no peer is
    /// trusted and nothing is read). The error is a message for a
    /// ValueError (a plain string, so unit tests need no interpreter).
    pub(crate) fn new(
        mode: &str,
        allow_ips: &str,
        host: bool,
    ) -> Result<Option<Forwarding>, String> {
        let headers = match mode {
            "off" => return Ok(None),
            "x-forwarded" => ProxyHeaders::XForwarded,
            "forwarded" => ProxyHeaders::Forwarded,
            other => {
                return Err(format!(
                    "proxy_headers must be off, x-forwarded or forwarded (got {other:?})"
                ))
            }
        };
        let trusted = TrustedProxies::parse(allow_ips)
            .map_err(|problem| format!("forwarded_allow_ips: {problem}"))?;
        Ok(Some(Forwarding {
            rules: ForwardingRules {
                headers,
                trusted,
                host,
            },
        }))
    }

    /// Whether a newly accepted peer may send forwarding headers. A Unix
    /// socket peer is a process on this machine, allowed by the socket's
    /// file permissions: trusted, as the loopback addresses are by default.
    pub(crate) fn trusts_peer(&self, peer: Option<SocketAddr>) -> bool {
        match peer {
            Some(address) => self.rules.trusted.trusts(address.ip()),
            None => true,
        }
    }

    /// What the forwarding headers of one request head say, if it has any.
    pub(crate) fn read(&self, head_bytes: &[u8]) -> Option<Box<RequestOrigin>> {
        if !mentions_forwarded(head_bytes) {
            // The usual case (loopback peers are trusted by default): no
            // field of the family, known without walking the fields.
            return None;
        }
        let origin = resolve(&self.rules, header_fields(head_bytes))?;
        let client = origin.client.map(|node| match node {
            Node::Ip(address, port) => (address.to_string(), port.unwrap_or(0)),
            Node::Name(name) => (String::from_utf8_lossy(&name).into_owned(), 0),
        });
        let https = origin.scheme.map(|scheme| scheme == Scheme::Https);
        let mut host = origin
            .host
            .map(|host| String::from_utf8_lossy(&host).into_owned());
        if let Some(port) = origin.port {
            // Only a port: it applies to the host the request named.
            let base = host.take().or_else(|| {
                header_fields(head_bytes)
                    .find(|(name, _)| name.eq_ignore_ascii_case(b"host"))
                    .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
            });
            host = base.map(|base| with_port(&base, port, https.unwrap_or(false)));
        }
        if client.is_none() && https.is_none() && host.is_none() {
            return None;
        }
        Some(Box::new(RequestOrigin {
            client,
            https,
            host,
        }))
    }
}

/// Whether `head` has the word "forwarded" anywhere, in any case: every
/// field name of both families (`Forwarded`, `X-Forwarded-*`) has it, so a
/// head without it has no forwarding fields. One vectorised scan for its
/// `w` (rare in a request head) instead of splitting the head into fields
/// (~300 instructions a field, paid by every request from a trusted peer).
fn mentions_forwarded(head: &[u8]) -> bool {
    memchr::memchr2_iter(b'w', b'W', head).any(|w| {
        // "for" comes before the `w`, "arded" after it.
        w >= 3
            && head
                .get(w - 3..w + 6)
                .is_some_and(|word| word.eq_ignore_ascii_case(b"forwarded"))
    })
}

/// `host` with its port replaced by `port`, or dropped when `port` is the
/// scheme's default (as a browser writes the Host field).
fn with_port(host: &str, port: u16, https: bool) -> String {
    let name = match host.rfind(']') {
        // `[v6]` or `[v6]:port`.
        Some(end) => &host[..=end],
        None => host.split(':').next().unwrap_or(host),
    };
    if port == if https { 443 } else { 80 } {
        name.to_owned()
    } else {
        format!("{name}:{port}")
    }
}

/// The origin of one request as its trusted proxy reports it; `None`
/// fields leave the connection's own values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOrigin {
    /// `(host, port)` of the client; the port is 0 when the proxy gave none.
    pub client: Option<(String, u16)>,
    /// Whether the client used https (`Some(false)`: http said explicitly).
    pub https: Option<bool>,
    /// The Host the client asked for (`--forwarded-host`).
    pub host: Option<String>,
}

impl RequestOrigin {
    /// The client as ASGI's `client`: a `(host, port)` tuple.
    pub(crate) fn client_tuple<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.client
            .as_ref()
            .map(|(host, port)| {
                PyTuple::new(
                    py,
                    [
                        PyString::new(py, host).into_any(),
                        port.into_pyobject(py)?.into_any(),
                    ],
                )
            })
            .transpose()
    }
}

/// The scheme a request arrived by, as the interfaces spell it.
pub(crate) fn scheme_of(origin: Option<&RequestOrigin>) -> &'static str {
    match origin.and_then(|origin| origin.https) {
        Some(true) => "https",
        _ => "http",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarded_port_replaces_the_hosts_own() {
        assert_eq!(with_port("example.com", 8443, true), "example.com:8443");
        assert_eq!(with_port("example.com:8080", 443, true), "example.com");
        assert_eq!(with_port("example.com:8080", 80, false), "example.com");
        assert_eq!(
            with_port("[2001:db8::1]:8080", 81, false),
            "[2001:db8::1]:81"
        );
    }

    #[test]
    fn requests_without_the_headers_have_no_origin() {
        let forwarding = Forwarding::new("x-forwarded", "127.0.0.1", true)
            .unwrap()
            .unwrap();
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert_eq!(forwarding.read(head), None);
        let head = b"GET / HTTP/1.1\r\nHost: a:8000\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Port: 443\r\n\r\n";
        assert_eq!(
            forwarding.read(head).as_deref(),
            Some(&RequestOrigin {
                client: Some(("1.2.3.4".into(), 0)),
                https: Some(true),
                host: Some("a".into()),
            })
        );
        assert!(Forwarding::new("off", "*", true).unwrap().is_none());
    }

    #[test]
    fn the_family_is_found_in_any_case_and_place() {
        // The quick test before the fields are walked must miss none of them.
        for (mode, name) in [
            ("x-forwarded", "X-Forwarded-For"),
            ("x-forwarded", "x-forwarded-for"),
            ("x-forwarded", "X-FORWARDED-FOR"),
            ("x-forwarded", "x-FoRwArDeD-for"),
            ("forwarded", "Forwarded"),
            ("forwarded", "FORWARDED"),
        ] {
            let forwarding = Forwarding::new(mode, "127.0.0.1", true).unwrap().unwrap();
            let value = if mode == "forwarded" {
                "for=1.2.3.4"
            } else {
                "1.2.3.4"
            };
            // First field, last field, and right after the request line.
            for head in [
                format!("GET / HTTP/1.1\r\n{name}: {value}\r\nHost: a\r\n\r\n"),
                format!("GET / HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n{name}: {value}\r\n\r\n"),
            ] {
                let origin = forwarding.read(head.as_bytes());
                assert_eq!(
                    origin.and_then(|origin| origin.client),
                    Some(("1.2.3.4".to_owned(), 0)),
                    "{head:?}"
                );
            }
        }
        assert!(!mentions_forwarded(
            b"GET /wow HTTP/1.1\r\nHost: www.a\r\n\r\n"
        ));
        assert!(!mentions_forwarded(b"w"));
        assert!(mentions_forwarded(b"GET /forwarded HTTP/1.1\r\n\r\n"));
        assert!(Forwarding::new("x-forwarded", "nonsense", true).is_err());
    }
}
