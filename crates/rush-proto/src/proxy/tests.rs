//! Proxy decisions, checked by feeding request and response bytes.

use super::*;
use crate::{parse_proxy_request_head, HeadStatus, Limits};

fn head(input: &[u8]) -> (RequestHead, Vec<HeaderSpan>) {
    let mut headers = Vec::new();
    match parse_proxy_request_head(input, &Limits::default(), &mut headers) {
        Ok(HeadStatus::Complete(head)) => (head, headers),
        other => panic!("{:?} for {}", other, String::from_utf8_lossy(input)),
    }
}

fn target(input: &[u8]) -> Result<ProxyTarget, ProtoError> {
    let (parsed, _) = head(input);
    proxy_target(input, &parsed)
}

#[test]
fn connect_targets() {
    assert_eq!(
        target(b"CONNECT Example.COM:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"),
        Ok(ProxyTarget::Tunnel {
            host: "example.com".into(),
            port: 443
        })
    );
    assert_eq!(
        target(b"CONNECT [::1]:8443 HTTP/1.1\r\nHost: [::1]:8443\r\n\r\n"),
        Ok(ProxyTarget::Tunnel {
            host: "::1".into(),
            port: 8443
        })
    );
    assert_eq!(
        target(b"CONNECT example.com:0 HTTP/1.1\r\nHost: x\r\n\r\n"),
        Err(BAD_PORT)
    );
}

#[test]
fn connect_without_port_is_refused_by_the_parser() {
    let mut headers = Vec::new();
    let result = parse_proxy_request_head(
        b"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\n\r\n",
        &Limits::default(),
        &mut headers,
    );
    assert_eq!(result.unwrap_err().status(), 400);
}

#[test]
fn forward_targets() {
    assert_eq!(
        target(b"GET http://Example.com:8080/a/b?x=1 HTTP/1.1\r\nHost: other\r\n\r\n"),
        Ok(ProxyTarget::Forward {
            host: "example.com".into(),
            port: 8080,
            authority: "Example.com:8080".into(),
            origin_form: b"/a/b?x=1".to_vec(),
        })
    );
    assert_eq!(
        target(b"GET http://example.com HTTP/1.1\r\nHost: example.com\r\n\r\n"),
        Ok(ProxyTarget::Forward {
            host: "example.com".into(),
            port: 80,
            authority: "example.com".into(),
            origin_form: b"/".to_vec(),
        })
    );
    assert_eq!(
        target(b"GET http://example.com?q HTTP/1.1\r\nHost: example.com\r\n\r\n").map(
            |t| match t {
                ProxyTarget::Forward { origin_form, .. } => origin_form,
                _ => Vec::new(),
            }
        ),
        Ok(b"/?q".to_vec())
    );
}

#[test]
fn requests_that_are_not_for_a_proxy() {
    assert_eq!(
        target(b"GET /index.html HTTP/1.1\r\nHost: x\r\n\r\n"),
        Err(NOT_A_PROXY_REQUEST)
    );
    assert_eq!(
        target(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"),
        Err(NOT_A_PROXY_REQUEST)
    );
    assert_eq!(
        target(b"GET https://example.com/ HTTP/1.1\r\nHost: x\r\n\r\n"),
        Err(HTTPS_TARGET)
    );
}

#[test]
fn smuggling_shapes_never_become_heads() {
    for input in [
        &b"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        b"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n",
        b"POST http://a/ HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
        b"POST http://a/ HTTP/1.1\nHost: a\r\nContent-Length: 1\r\n\r\n",
        b"POST http://a/ HTTP/1.1\r\nHost: a\r\nContent-Length : 1\r\n\r\n",
        b"POST http://a/ HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let mut headers = Vec::new();
        let result = parse_proxy_request_head(input, &Limits::default(), &mut headers);
        assert!(result.is_err(), "{}", String::from_utf8_lossy(input));
    }
}

#[test]
fn forward_head_drops_hop_by_hop_fields_and_sets_host_and_via() {
    let input = b"POST http://origin:81/p?q HTTP/1.0\r\nHost: wrong\r\nConnection: keep-alive, X-Secret\r\n\
X-Secret: 1\r\nKeep-Alive: timeout=5\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\n\
TE: trailers\r\nTrailer: X\r\nUpgrade: h2c\r\nAccept: */*\r\nVia: 1.0 other\r\nContent-Length: 3\r\n\r\nabc";
    let (parsed, headers) = head(input);
    let mut out = Vec::new();
    write_forward_head(
        &mut out,
        ParsedHead {
            buffer: input,
            head: &parsed,
            headers: &headers,
        },
        b"origin:81",
        b"/p?q",
        b"1.1 rush",
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "POST /p?q HTTP/1.1\r\nHost: origin:81\r\nAccept: */*\r\nVia: 1.0 other\r\n\
Content-Length: 3\r\nVia: 1.1 rush\r\n\r\n"
    );
}

fn response(input: &[u8], method: Method) -> Result<ResponseStatus, ProtoError> {
    let mut headers = Vec::new();
    parse_response_head(input, method, 16384, &mut headers)
}

fn framing(input: &[u8], method: Method) -> ResponseFraming {
    match response(input, method) {
        Ok(ResponseStatus::Complete(head)) => head.framing,
        other => panic!("{other:?}"),
    }
}

#[test]
fn response_framing() {
    use ResponseFraming::*;
    let get = Method::Get;
    assert_eq!(
        framing(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", get),
        Length(12)
    );
    assert_eq!(
        framing(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            get
        ),
        Chunked
    );
    assert_eq!(framing(b"HTTP/1.1 200 OK\r\n\r\n", get), UntilClose);
    assert_eq!(
        framing(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n",
            Method::Head
        ),
        Empty
    );
    assert_eq!(framing(b"HTTP/1.1 204 No Content\r\n\r\n", get), Empty);
    assert_eq!(framing(b"HTTP/1.1 304 Not Modified\r\n\r\n", get), Empty);
    assert_eq!(framing(b"HTTP/1.1 100 Continue\r\n\r\n", get), Empty);
}

#[test]
fn response_heads_with_many_fields_up_to_the_limit() {
    // More fields than the slots tried first, then more than the limit.
    for (count, accepted) in [
        (24, true),
        (25, true),
        (MAX_RESPONSE_HEADERS, true),
        (MAX_RESPONSE_HEADERS + 1, false),
    ] {
        let mut input = b"HTTP/1.1 200 OK\r\n".to_vec();
        for n in 0..count - 1 {
            input.extend_from_slice(format!("X-Field-{n}: {n}\r\n").as_bytes());
        }
        input.extend_from_slice(b"Content-Length: 2\r\n\r\nok");
        let mut headers = Vec::new();
        let parsed = parse_response_head(&input, Method::Get, 16384, &mut headers);
        match parsed {
            Ok(ResponseStatus::Complete(head)) if accepted => {
                assert_eq!(head.framing, ResponseFraming::Length(2));
                assert_eq!(headers.len(), count);
                // Cut short, it is partial (not an error) whatever its field count.
                let cut = &input[..head.head_len - 10];
                assert_eq!(response(cut, Method::Get), Ok(ResponseStatus::Partial));
            }
            Err(_) if !accepted => {}
            other => panic!("{count} fields: {other:?}"),
        }
    }
}

#[test]
fn response_keep_alive() {
    let keep = |input: &[u8]| match response(input, Method::Get) {
        Ok(ResponseStatus::Complete(head)) => head.keep_alive,
        other => panic!("{other:?}"),
    };
    assert!(keep(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(!keep(
        b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    ));
    assert!(!keep(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n"));
    assert!(keep(
        b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n"
    ));
    assert!(!keep(b"HTTP/1.1 200 OK\r\n\r\n"));
}

#[test]
fn bad_responses() {
    for input in [
        &b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        b"HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
    ] {
        assert!(
            response(input, Method::Get).is_err(),
            "{}",
            String::from_utf8_lossy(input)
        );
    }
    let mut headers = Vec::new();
    let huge = [b"HTTP/1.1 200 OK\r\nX: ".as_slice(), &[b'a'; 100]].concat();
    assert_eq!(
        parse_response_head(&huge, Method::Get, 64, &mut headers),
        Err(ProtoError::HeadersTooLarge)
    );
}

#[test]
fn response_split_at_every_offset_is_partial_until_complete() {
    let input = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X\r\nX: 1\r\n\r\n";
    for cut in 0..input.len() {
        assert_eq!(
            response(&input[..cut], Method::Get),
            Ok(ResponseStatus::Partial)
        );
    }
    let Ok(ResponseStatus::Complete(parsed)) = response(input, Method::Get) else {
        panic!()
    };
    let mut headers = Vec::new();
    parse_response_head(input, Method::Get, 16384, &mut headers).unwrap();
    let out = client_response_head(input, &parsed, &headers, false);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nVia: 1.1 rush\r\nConnection: close\r\n\r\n"
    );
}

#[test]
fn a_dechunked_response_head_drops_transfer_encoding() {
    let input = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX: 1\r\n\r\n";
    let mut headers = Vec::new();
    let Ok(ResponseStatus::Complete(parsed)) =
        parse_response_head(input, Method::Get, 16384, &mut headers)
    else {
        panic!()
    };
    let out = client_response_head(input, &parsed, &headers, true);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "HTTP/1.1 200 OK\r\nX: 1\r\nVia: 1.1 rush\r\nConnection: close\r\n\r\n"
    );
}

mod properties {
    use super::*;
    use crate::parse_request_head;
    use proptest::prelude::*;

    /// A field name; never `Connection`, whose own tokens the test lists separately.
    fn token() -> impl Strategy<Value = String> {
        "[A-Za-z][A-Za-z0-9-]{0,12}".prop_filter("not Connection", |name| {
            !name.eq_ignore_ascii_case("connection")
        })
    }

    fn field_value() -> impl Strategy<Value = String> {
        "[ -~]{0,20}".prop_map(|value| value.trim().to_owned())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

        /// Whatever an origin sends, parsing its response head never panics,
        /// and a prefix is either partial or already the final answer.
        #[test]
        fn response_parsing_never_panics(input in proptest::collection::vec(any::<u8>(), 0..300), cut in any::<prop::sample::Index>()) {
            let mut headers = Vec::new();
            let whole = parse_response_head(&input, Method::Get, 128, &mut headers);
            let cut = cut.index(input.len() + 1);
            let prefix = parse_response_head(&input[..cut], Method::Get, 128, &mut headers);
            if cut < input.len() && prefix != Ok(ResponseStatus::Partial) && whole != prefix {
                // Only an error found early may differ from a later error.
                prop_assert!(prefix.is_err() && whole.is_err());
            }
        }

        /// The head a proxy forwards is itself a valid origin-form request
        /// with the target's Host, no hop-by-hop field and every other field kept.
        #[test]
        fn forwarded_heads_are_valid_and_carry_no_hop_by_hop_field(
            fields in proptest::collection::vec((token(), field_value()), 0..8),
            named in proptest::collection::vec(token(), 0..3),
            path in "(/[a-z0-9]{0,6}){0,3}",
        ) {
            let mut input = format!("GET http://origin.example:8080{path} HTTP/1.1\r\nHost: other\r\n");
            if !named.is_empty() {
                input += &format!("Connection: {}\r\n", named.join(", "));
            }
            for (name, value) in &fields {
                input += &format!("{name}: {value}\r\n");
            }
            input += "\r\n";
            let mut headers = Vec::new();
            let parsed = match parse_proxy_request_head(input.as_bytes(), &Limits::default(), &mut headers) {
                Ok(HeadStatus::Complete(head)) => head,
                // Generated fields may be refused (a second Host, a bad Content-Length...): fine.
                _ => return Ok(()),
            };
            let Ok(ProxyTarget::Forward { authority, origin_form, .. }) = proxy_target(input.as_bytes(), &parsed) else {
                return Err(TestCaseError::fail("not a forward"));
            };
            let mut out = Vec::new();
            write_forward_head(&mut out, ParsedHead { buffer: input.as_bytes(), head: &parsed, headers: &headers }, authority.as_bytes(), &origin_form, b"1.1 rush");
            let mut forwarded_headers = Vec::new();
            let Ok(HeadStatus::Complete(forwarded)) = parse_request_head(&out, &Limits::default(), &mut forwarded_headers) else {
                return Err(TestCaseError::fail(format!("not a valid head: {}", String::from_utf8_lossy(&out))));
            };
            prop_assert_eq!(forwarded.host.map(|host| host.of(&out).to_vec()), Some(b"origin.example:8080".to_vec()));
            prop_assert!(forwarded.target.of(&out).starts_with(b"/"));
            let names: Vec<Vec<u8>> = forwarded_headers.iter().map(|h| h.name.of(&out).to_ascii_lowercase()).collect();
            for hop in ["connection", "keep-alive", "te", "trailer", "upgrade"] {
                prop_assert!(!names.contains(&hop.as_bytes().to_vec()));
            }
            // The proxy adds a Via of its own, whatever the client's
            // Connection named (a client's Via listed there is dropped; the
            // proxy's stays).
            prop_assert!(names.contains(&b"via".to_vec()));
            for name in &named {
                if name.eq_ignore_ascii_case("via") {
                    continue;
                }
                prop_assert!(!names.contains(&name.to_ascii_lowercase().into_bytes()));
            }
            prop_assert!(names.iter().all(|name| !name.starts_with(b"proxy-")));
            for (name, _) in &fields {
                let lower = name.to_ascii_lowercase();
                if lower == "via" {
                    continue;
                }
                let hop = ["connection", "keep-alive", "te", "trailer", "upgrade", "host"].contains(&lower.as_str())
                    || lower.starts_with("proxy-")
                    || named.iter().any(|n| n.eq_ignore_ascii_case(name));
                prop_assert_eq!(names.contains(&lower.into_bytes()), !hop);
            }
        }
    }
}

/// The property test's shrunk case (`Connection: vIA`): a client's Via that
/// its Connection names is dropped, and the proxy's own Via is still added.
#[test]
fn a_via_named_in_connection_is_dropped_and_the_proxys_own_is_added() {
    let input = b"GET http://origin.example/ HTTP/1.1\r\nHost: other\r\nConnection: vIA\r\nVia: 1.0 client-side\r\n\r\n";
    let mut headers = Vec::new();
    let Ok(HeadStatus::Complete(parsed)) =
        parse_proxy_request_head(input, &Limits::default(), &mut headers)
    else {
        panic!("a valid head");
    };
    let Ok(ProxyTarget::Forward {
        authority,
        origin_form,
        ..
    }) = proxy_target(input, &parsed)
    else {
        panic!("a forward");
    };
    let mut out = Vec::new();
    write_forward_head(
        &mut out,
        ParsedHead {
            buffer: input,
            head: &parsed,
            headers: &headers,
        },
        authority.as_bytes(),
        &origin_form,
        b"1.1 rush",
    );
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("client-side"), "{text}");
    assert!(
        text.to_ascii_lowercase().contains("via: 1.1 rush\r\n"),
        "{text}"
    );
}

#[test]
fn forwarding_loops_are_seen_in_via() {
    let me = b"1.1 proxy-a (rush)";
    for (input, looped) in [
        (&b"GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n"[..], false),
        (
            b"GET http://a/ HTTP/1.1\r\nHost: a\r\nVia: 1.1 proxy-b (rush)\r\n\r\n",
            false,
        ),
        (
            b"GET http://a/ HTTP/1.1\r\nHost: a\r\nVia: 1.0 x, 1.1 PROXY-A (rush) \r\n\r\n",
            true,
        ),
        (
            b"GET http://a/ HTTP/1.1\r\nHost: a\r\nVia: 1.0 x\r\nVia: 1.1 proxy-a (rush)\r\n\r\n",
            true,
        ),
    ] {
        let (_, headers) = head(input);
        assert_eq!(
            is_forwarding_loop(input, &headers, me),
            looped,
            "{}",
            String::from_utf8_lossy(input)
        );
    }
}

/// The head a client gets for `parsed` (closing, `Via: 1.1 rush`).
fn client_response_head(
    input: &[u8],
    parsed: &ResponseHead,
    headers: &[HeaderSpan],
    dechunked: bool,
) -> Vec<u8> {
    let mut out = Vec::new();
    let response = ParsedHead {
        buffer: input,
        head: parsed,
        headers,
    };
    write_client_response_head(&mut out, response, true, dechunked, b"1.1 rush");
    out
}
