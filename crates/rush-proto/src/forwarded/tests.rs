//! Unit tests of the forwarding rules: header bytes in, origin out.

use super::*;

fn rules(headers: ProxyHeaders, trusted: &str, host: bool) -> ForwardingRules {
    ForwardingRules {
        headers,
        trusted: TrustedProxies::parse(trusted).unwrap(),
        host,
    }
}

fn resolve_fields<'a>(
    rules: &ForwardingRules,
    fields: &[(&'a str, &'a str)],
) -> Option<Origin<'a>> {
    resolve(
        rules,
        fields
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes())),
    )
}

fn ip(text: &str) -> Option<Node<'static>> {
    Some(Node::Ip(text.parse().unwrap(), None))
}

fn name(text: &'static str) -> Option<Node<'static>> {
    Some(Node::Name(Cow::Borrowed(text.as_bytes())))
}

#[test]
fn trusted_proxies_parse_addresses_networks_and_everyone() {
    let trusted = TrustedProxies::parse("127.0.0.1, ::1,10.0.0.0/8,fd00::/8").unwrap();
    for yes in [
        "127.0.0.1",
        "::1",
        "10.1.2.3",
        "fd12::1",
        "::ffff:127.0.0.1",
        "::ffff:10.9.9.9",
    ] {
        assert!(trusted.trusts(yes.parse().unwrap()), "{yes}");
    }
    for no in ["127.0.0.2", "11.0.0.1", "fe80::1", "::2", "192.168.1.1"] {
        assert!(!trusted.trusts(no.parse().unwrap()), "{no}");
    }
    assert!(!trusted.trusts_everyone());
    let everyone = TrustedProxies::parse("*").unwrap();
    assert!(everyone.trusts_everyone() && everyone.trusts("8.8.8.8".parse().unwrap()));
    assert!(TrustedProxies::parse("0.0.0.0/0")
        .unwrap()
        .trusts("8.8.8.8".parse().unwrap()));
    assert!(!TrustedProxies::parse("")
        .unwrap()
        .trusts("127.0.0.1".parse().unwrap()));
    for bad in ["localhost", "10.0.0.0/33", "::/129", "10.0.0.1/x", "1.2.3"] {
        assert!(TrustedProxies::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn no_forwarding_header_is_none() {
    let rules = rules(ProxyHeaders::XForwarded, "127.0.0.1", true);
    assert_eq!(
        resolve_fields(&rules, &[("Host", "a"), ("X-Forwarded", "1")]),
        None
    );
    let forwarded = super::tests::rules(ProxyHeaders::Forwarded, "127.0.0.1", true);
    assert_eq!(resolve_fields(&forwarded, &[("Host", "a")]), None);
    let off = super::tests::rules(ProxyHeaders::Off, "*", true);
    assert_eq!(
        resolve_fields(&off, &[("X-Forwarded-For", "1.2.3.4")]),
        None
    );
}

#[test]
fn x_forwarded_for_takes_the_rightmost_untrusted_entry() {
    let rules = rules(ProxyHeaders::XForwarded, "127.0.0.1,10.0.0.0/8", false);
    let origin =
        resolve_fields(&rules, &[("X-Forwarded-For", "6.6.6.6, 1.2.3.4, 10.0.0.2")]).unwrap();
    assert_eq!(origin.client, ip("1.2.3.4"));
    // Split over two lines: the same list.
    let origin = resolve_fields(
        &rules,
        &[
            ("x-forwarded-for", "6.6.6.6, 1.2.3.4"),
            ("X-FORWARDED-FOR", "10.0.0.2"),
        ],
    )
    .unwrap();
    assert_eq!(origin.client, ip("1.2.3.4"));
    // Every entry trusted: the left-most.
    let origin = resolve_fields(&rules, &[("X-Forwarded-For", "10.0.0.3,127.0.0.1")]).unwrap();
    assert_eq!(origin.client, ip("10.0.0.3"));
    // IPv6, bracketed or not; a name is reported as is.
    let origin = resolve_fields(&rules, &[("X-Forwarded-For", "[2001:db8::1]")]).unwrap();
    assert_eq!(origin.client, ip("2001:db8::1"));
    let origin = resolve_fields(&rules, &[("X-Forwarded-For", "2001:db8::1,,")]).unwrap();
    assert_eq!(origin.client, ip("2001:db8::1"));
    let origin = resolve_fields(&rules, &[("X-Forwarded-For", "unknown, 10.0.0.1")]).unwrap();
    assert_eq!(origin.client, name("unknown"));
}

#[test]
fn x_forwarded_for_entries_with_a_port() {
    let rules = rules(ProxyHeaders::XForwarded, "127.0.0.1", false);
    let client = |value| {
        resolve_fields(&rules, &[("X-Forwarded-For", value)])
            .unwrap()
            .client
    };
    let with_port = |text: &str, port| Some(Node::Ip(text.parse().unwrap(), Some(port)));
    assert_eq!(client("192.0.2.7:4711"), with_port("192.0.2.7", 4711));
    assert_eq!(client("[2001:db8::7]:4711"), with_port("2001:db8::7", 4711));
    // A trusted proxy written with its port is still a trusted proxy.
    assert_eq!(client("192.0.2.7, 127.0.0.1:4711"), ip("192.0.2.7"));
    // Not an address with a port, nor `unknown` or an obfuscated id: no
    // client at all (the app then sees its peer).
    assert_eq!(client("192.0.2.7:http"), None);
    assert_eq!(client("192.0.2.7:99999"), None);
    assert_eq!(client("2001:db8::7:4711:1:2:3:4"), None);
}

/// An entry that is no address (`unknown` and obfuscated ids aside) hides
/// itself and what stands left of it, as a malformed `Forwarded` element
/// does: the client is then the nearest valid hop right of it.
#[test]
fn x_forwarded_for_entries_that_are_no_address_are_not_a_client() {
    let rules = rules(ProxyHeaders::XForwarded, "127.0.0.1, 10.0.0.0/8", false);
    let client = |value: &str| -> Option<Node<'static>> {
        match resolve_fields(&rules, &[("X-Forwarded-For", value)])
            .unwrap()
            .client?
        {
            Node::Ip(address, port) => Some(Node::Ip(address, port)),
            Node::Name(name) => Some(Node::Name(Cow::Owned(name.into_owned()))),
        }
    };
    for hostile in [
        "1.2.3.4\"><script>",
        "evil.test",
        "1.2.3.4 5.6.7.8",
        "_",
        "_a/b",
        "unknown2",
    ] {
        assert_eq!(client(hostile), None, "{hostile:?}");
        // Left of a trusted proxy: that proxy is as far as can be told.
        assert_eq!(
            client(&format!("{hostile}, 10.0.0.2")),
            ip("10.0.0.2"),
            "{hostile:?}"
        );
        // Right of a real client: hidden with it (a client can write
        // anything left of what its proxy appends, never right of it).
        assert_eq!(
            client(&format!("1.2.3.4, {hostile}, 10.0.0.2")),
            ip("10.0.0.2"),
            "{hostile:?}"
        );
    }
    assert_eq!(client("fe80::1%eth0"), name("fe80::1%eth0"));
    assert_eq!(client("203.0.113.7:"), name("203.0.113.7:"));
    assert_eq!(client("fe80::1%eth0\"><b>"), None);
    assert_eq!(client("fe80::1%"), None);
    assert_eq!(client("unknown, 10.0.0.2"), name("unknown"));
    assert_eq!(client("UNKNOWN"), name("UNKNOWN"));
    assert_eq!(client("_hidden.proxy-1, 10.0.0.2"), name("_hidden.proxy-1"));
    assert_eq!(client("6.6.6.6, 1.2.3.4, 10.0.0.2"), ip("1.2.3.4"));
}

#[test]
fn everyone_trusted_means_the_leftmost_entry() {
    let rules = rules(ProxyHeaders::XForwarded, "*", false);
    let origin = resolve_fields(&rules, &[("X-Forwarded-For", "1.1.1.1, 2.2.2.2")]).unwrap();
    assert_eq!(origin.client, ip("1.1.1.1"));
}

#[test]
fn past_the_line_limit_the_nearest_lines_count() {
    // A client's own lines in front of the one its proxy adds: the proxy's
    // line is read, not dropped with them (the client would pass for the proxy).
    let rules = rules(ProxyHeaders::XForwarded, "127.0.0.1,10.0.0.0/8", false);
    let mut fields = vec![("X-Forwarded-For", "10.0.0.1"); 6];
    fields.push(("X-Forwarded-For", "1.2.3.4"));
    fields.push(("X-Forwarded-For", "10.0.0.2"));
    assert_eq!(
        resolve_fields(&rules, &fields).unwrap().client,
        ip("1.2.3.4")
    );
    let rules = super::tests::rules(ProxyHeaders::Forwarded, "127.0.0.1,10.0.0.0/8", false);
    let mut fields = vec![("Forwarded", "for=10.0.0.1"); 6];
    fields.push(("Forwarded", "for=1.2.3.4, for=10.0.0.3"));
    fields.push(("Forwarded", "for=10.0.0.2"));
    assert_eq!(
        resolve_fields(&rules, &fields).unwrap().client,
        ip("1.2.3.4")
    );
    // Only the kept lines are walked: with the chain trusted through them, the
    // left-most kept entry.
    let fields = [
        ("Forwarded", "for=1.2.3.4"),
        ("Forwarded", "for=10.0.0.1"),
        ("Forwarded", "for=10.0.0.2"),
        ("Forwarded", "for=10.0.0.3"),
        ("Forwarded", "for=10.0.0.4"),
    ];
    assert_eq!(
        resolve_fields(&rules, &fields).unwrap().client,
        ip("10.0.0.1")
    );
}

#[test]
fn a_malformed_forwarded_line_hides_only_what_is_left_of_it() {
    let rules = rules(ProxyHeaders::Forwarded, "127.0.0.1", false);
    let fields = [
        ("Forwarded", "for=not an address"),
        ("Forwarded", "for=1.2.3.4;proto=https"),
    ];
    let origin = resolve_fields(&rules, &fields).unwrap();
    assert_eq!(
        (origin.client, origin.scheme),
        (ip("1.2.3.4"), Some(Scheme::Https))
    );
    let fields = [("Forwarded", "for=1.2.3.4"), ("Forwarded", "for=\"broken")];
    assert_eq!(resolve_fields(&rules, &fields), None);
}

#[test]
fn proto_host_and_port_follow_the_chosen_hop() {
    let rules = super::tests::rules(ProxyHeaders::XForwarded, "10.0.0.0/8", true);
    let origin = resolve_fields(
        &rules,
        &[
            ("X-Forwarded-For", "1.2.3.4, 10.0.0.2"),
            ("X-Forwarded-Proto", "https, http"),
            ("X-Forwarded-Host", "example.com, inner"),
            ("X-Forwarded-Port", "443, 80"),
        ],
    )
    .unwrap();
    assert_eq!(origin.client, ip("1.2.3.4"));
    assert_eq!(origin.scheme, Some(Scheme::Https));
    assert_eq!(origin.host.as_deref(), Some(&b"example.com"[..]));
    assert_eq!(origin.port, Some(443));
    // Lists of another length: the right-most entry (the nearest proxy's).
    let origin = resolve_fields(
        &rules,
        &[
            ("X-Forwarded-For", "1.2.3.4, 10.0.0.2"),
            ("X-Forwarded-Proto", "wss"),
        ],
    )
    .unwrap();
    assert_eq!(origin.scheme, Some(Scheme::Https));
    // Proto alone, without a client.
    let origin = resolve_fields(&rules, &[("X-Forwarded-Proto", " HTTPS ")]).unwrap();
    assert_eq!((origin.client, origin.scheme), (None, Some(Scheme::Https)));
    // Unknown schemes, hosts with bytes no authority has, bad ports: ignored.
    let origin = resolve_fields(
        &rules,
        &[
            ("X-Forwarded-Proto", "ftp"),
            ("X-Forwarded-Host", "evil.com/path"),
            ("X-Forwarded-Port", "99999"),
        ],
    )
    .unwrap();
    assert_eq!(origin, Origin::default());
}

#[test]
fn host_headers_only_when_asked() {
    let rules = rules(ProxyHeaders::XForwarded, "127.0.0.1", false);
    let origin = resolve_fields(
        &rules,
        &[
            ("X-Forwarded-Host", "example.com"),
            ("X-Forwarded-Port", "8443"),
        ],
    );
    assert_eq!(origin, None);
}

#[test]
fn forwarded_elements_and_nodes() {
    let rules = rules(ProxyHeaders::Forwarded, "127.0.0.1,10.0.0.0/8", true);
    let origin = resolve_fields(
        &rules,
        &[(
            "Forwarded",
            r#"for=6.6.6.6;proto=http, for="[2001:db8:cafe::17]:4711";proto=https;host="example.com:8443", for=10.0.0.5;proto=http"#,
        )],
    )
    .unwrap();
    assert_eq!(
        origin.client,
        Some(Node::Ip("2001:db8:cafe::17".parse().unwrap(), Some(4711)))
    );
    assert_eq!(origin.scheme, Some(Scheme::Https));
    assert_eq!(origin.host.as_deref(), Some(&b"example.com:8443"[..]));
    let cases: [(&str, Option<Node<'static>>); 6] = [
        ("for=192.0.2.43", ip("192.0.2.43")),
        (
            r#"for="192.0.2.43:47011""#,
            Some(Node::Ip("192.0.2.43".parse().unwrap(), Some(47011))),
        ),
        ("for=unknown", name("unknown")),
        ("For=_hidden ; by=_proxy", name("_hidden")),
        (r#"for="_hidden:_port""#, name("_hidden")),
        (r#"for="[::ffff:1.2.3.4]""#, ip("1.2.3.4")),
    ];
    for (value, expected) in cases {
        let origin = resolve_fields(&rules, &[("forwarded", value)]).unwrap();
        assert_eq!(origin.client, expected, "{value}");
    }
    // Escapes in a quoted string are undone.
    let origin = resolve_fields(
        &rules,
        &[("Forwarded", r#"for=1.2.3.4;host="ex\ample.com""#)],
    )
    .unwrap();
    assert_eq!(origin.host.as_deref(), Some(&b"example.com"[..]));
}

#[test]
fn forwarded_across_lines_and_without_for() {
    let rules = rules(ProxyHeaders::Forwarded, "10.0.0.0/8", false);
    let origin = resolve_fields(
        &rules,
        &[
            ("Forwarded", "for=1.2.3.4;proto=https"),
            ("Forwarded", "for=10.1.1.1"),
        ],
    )
    .unwrap();
    assert_eq!(origin.client, ip("1.2.3.4"));
    assert_eq!(origin.host, None);
    // A hop that only says the scheme: the client stays the peer.
    let origin = resolve_fields(&rules, &[("Forwarded", "proto=https")]).unwrap();
    assert_eq!((origin.client, origin.scheme), (None, Some(Scheme::Https)));
}

#[test]
fn malformed_forwarded_is_not_believed() {
    let rules = rules(ProxyHeaders::Forwarded, "127.0.0.1", true);
    for bad in [
        "for",
        r#"for="1.2.3.4"#,
        "for=1.2.3.4;for=5.6.7.8",
        "for=[2001:db8::1]",
        "for=2001:db8::1",
        "for=example.com",
        "for=1.2.3.4 junk",
        "for=1.2.3.4:99999",
        "for=_",
        "f(o)r=1.2.3.4",
        "for=1.2.3.4,,",
    ] {
        assert_eq!(resolve_fields(&rules, &[("Forwarded", bad)]), None, "{bad}");
    }
}

#[test]
fn the_other_family_is_ignored() {
    // A proxy that sets X-Forwarded-For passes a client's Forwarded through.
    let x = rules(ProxyHeaders::XForwarded, "127.0.0.1", true);
    assert_eq!(
        resolve_fields(&x, &[("Forwarded", "for=6.6.6.6;proto=https")]),
        None
    );
    let f = rules(ProxyHeaders::Forwarded, "127.0.0.1", true);
    let fields = [
        ("X-Forwarded-For", "6.6.6.6"),
        ("X-Forwarded-Proto", "https"),
    ];
    assert_eq!(resolve_fields(&f, &fields), None);
}

#[test]
fn a_forwarded_host_is_checked_as_the_host_field_is() {
    let rules = rules(ProxyHeaders::XForwarded, "127.0.0.1", true);
    let host = |value| {
        resolve_fields(&rules, &[("X-Forwarded-Host", value)])
            .and_then(|origin| origin.host)
            .map(|host| String::from_utf8(host.into_owned()).unwrap())
    };
    for good in [
        "example.com",
        "example.com:8443",
        "[2001:db8::7]:8443",
        "ex%2Dample.com",
    ] {
        assert_eq!(host(good).as_deref(), Some(good), "{good}");
    }
    for bad in [
        "evil.test:abc",
        "evil.test:80:81",
        "[2001:db8::7",
        "[nope]",
        "a b",
        "user@evil.test",
        "%zz",
    ] {
        assert_eq!(host(bad), None, "{bad}");
    }
}
