//! The opening handshake: which requests are upgrades, which are valid,
//! the accept key, the offers, and the exact bytes of the answers.

use rush_proto::ws::handshake::{
    accept_fields, accept_key, extension_offers, protocol_offers, validate_extended_connect,
    write_accept_response, write_rejection,
};
use rush_proto::ws::{is_upgrade_request, validate_handshake, DeflateConfig, HandshakeError};
use rush_proto::{parse_request_head, HeadStatus, HeaderSpan, Limits, RequestHead};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

fn parse(request: &str) -> (RequestHead, Vec<HeaderSpan>) {
    let mut headers = Vec::new();
    match parse_request_head(request.as_bytes(), &Limits::default(), &mut headers).unwrap() {
        HeadStatus::Complete(head) => (head, headers),
        HeadStatus::Partial => panic!("incomplete: {request:?}"),
    }
}

fn request(first_line: &str, fields: &[&str]) -> String {
    let mut text = format!("{first_line}\r\nHost: example\r\n");
    for field in fields {
        text.push_str(field);
        text.push_str("\r\n");
    }
    text.push_str("\r\n");
    text
}

const GOOD: [&str; 4] = [
    "Upgrade: websocket",
    "Connection: Upgrade",
    "Sec-WebSocket-Version: 13",
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
];

fn with(replacements: &[(usize, &'static str)], extra: &[&'static str]) -> Vec<&'static str> {
    let mut fields: Vec<&str> = GOOD.to_vec();
    for &(index, field) in replacements.iter().rev() {
        if field.is_empty() {
            fields.remove(index);
        } else {
            fields[index] = field;
        }
    }
    fields.extend_from_slice(extra);
    fields
}

fn check(first_line: &str, fields: &[&str]) -> Result<(), HandshakeError> {
    let text = request(first_line, fields);
    let (head, headers) = parse(&text);
    validate_handshake(&head, text.as_bytes(), &headers).map(|handshake| {
        assert_eq!(handshake.accept, accept_key(KEY.as_bytes()));
    })
}

#[test]
fn the_rfc_example_key() {
    // RFC 6455 1.3.
    assert_eq!(
        accept_key(KEY.as_bytes()).as_str(),
        "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    );
}

#[test]
fn validation_table() {
    use HandshakeError::{BadRequest, UnsupportedVersion};
    let get = "GET /chat HTTP/1.1";
    let cases: Vec<(&str, Vec<&str>, Result<(), HandshakeError>)> = vec![
        (get, with(&[], &[]), Ok(())),
        // Token lists, any case, over several fields.
        (
            get,
            with(
                &[
                    (0, "upgrade: WebSocket"),
                    (1, "connection: keep-alive, UPGRADE"),
                ],
                &[],
            ),
            Ok(()),
        ),
        (
            get,
            with(
                &[
                    (0, "Upgrade: foo, websocket"),
                    (1, "Connection: keep-alive"),
                ],
                &["Connection: upgrade"],
            ),
            Ok(()),
        ),
        (
            get,
            with(&[(0, "")], &[]),
            Err(BadRequest("Upgrade must list websocket")),
        ),
        (
            get,
            with(&[(0, "Upgrade: websockets")], &[]),
            Err(BadRequest("Upgrade must list websocket")),
        ),
        (
            get,
            with(&[(1, "")], &[]),
            Err(BadRequest("Connection must list upgrade")),
        ),
        (
            get,
            with(&[(1, "Connection: upgraded")], &[]),
            Err(BadRequest("Connection must list upgrade")),
        ),
        (get, with(&[(2, "")], &[]), Err(UnsupportedVersion)),
        (
            get,
            with(&[(2, "Sec-WebSocket-Version: 8")], &[]),
            Err(UnsupportedVersion),
        ),
        (
            get,
            with(&[(2, "Sec-WebSocket-Version: 13, 8")], &[]),
            Err(UnsupportedVersion),
        ),
        (
            get,
            with(&[], &["Sec-WebSocket-Version: 13"]),
            Err(UnsupportedVersion),
        ),
        (
            get,
            with(&[(3, "")], &[]),
            Err(BadRequest("missing Sec-WebSocket-Key")),
        ),
        (
            get,
            with(&[], &["Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]),
            Err(BadRequest("more than one Sec-WebSocket-Key")),
        ),
        // 15 bytes, 17 bytes, not base64, bad padding.
        (
            get,
            with(&[(3, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ")], &[]),
            Err(BadRequest("Sec-WebSocket-Key must be 16 bytes in base64")),
        ),
        (
            get,
            with(&[(3, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZT8=")], &[]),
            Err(BadRequest("Sec-WebSocket-Key must be 16 bytes in base64")),
        ),
        (
            get,
            with(&[(3, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZX==")], &[]),
            Err(BadRequest("Sec-WebSocket-Key must be 16 bytes in base64")),
        ),
        (
            get,
            with(&[(3, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25j*Q==")], &[]),
            Err(BadRequest("Sec-WebSocket-Key must be 16 bytes in base64")),
        ),
        (
            get,
            with(&[(3, "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAAA")], &[]),
            Err(BadRequest("Sec-WebSocket-Key must be 16 bytes in base64")),
        ),
        (
            "POST /chat HTTP/1.1",
            with(&[], &[]),
            Err(BadRequest("a WebSocket handshake must be a GET request")),
        ),
        (
            "GET /chat HTTP/1.0",
            with(&[], &[]),
            Err(BadRequest("a WebSocket handshake needs HTTP/1.1")),
        ),
        (get, with(&[], &["Content-Length: 0"]), Ok(())),
    ];
    for (first_line, fields, expected) in cases {
        assert_eq!(
            check(first_line, &fields),
            expected,
            "{first_line} {fields:?}"
        );
    }
    // A body on the upgrade request.
    let text = "GET / HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 3\r\n\r\nabc";
    let (head, headers) = parse(text);
    assert_eq!(
        validate_handshake(&head, text.as_bytes(), &headers),
        Err(HandshakeError::BadRequest(
            "a WebSocket handshake cannot have a body"
        ))
    );
}

#[test]
fn upgrade_detection() {
    for (fields, expected) in [
        (&["Upgrade: websocket"][..], true),
        (&["upgrade: h2c, WebSocket"], true),
        (&["Upgrade: h2c"], false),
        (&["Upgrades: websocket"], false),
        (&["X-Upgrade: websocket"], false),
        (&[], false),
    ] {
        let text = request("GET / HTTP/1.1", fields);
        let (_, headers) = parse(&text);
        assert_eq!(
            is_upgrade_request(text.as_bytes(), &headers),
            expected,
            "{fields:?}"
        );
    }
}

#[test]
fn offers() {
    let text = request(
        "GET / HTTP/1.1",
        &[
            "Sec-WebSocket-Protocol: chat, , superchat",
            "Sec-WebSocket-Protocol: v2.json",
            "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits, foo; a=\"x,y\"; b",
            "Sec-WebSocket-Extensions: bar",
        ],
    );
    let (_, headers) = parse(&text);
    let protocols: Vec<&[u8]> = protocol_offers(text.as_bytes(), &headers).collect();
    assert_eq!(protocols, [&b"chat"[..], b"superchat", b"v2.json"]);
    let offers: Vec<_> = extension_offers(text.as_bytes(), &headers).collect();
    let names: Vec<&[u8]> = offers.iter().map(|offer| offer.name).collect();
    assert_eq!(names, [&b"permessage-deflate"[..], b"foo", b"bar"]);
    let params: Vec<_> = offers[0].params().collect();
    assert_eq!(params, [Ok((&b"client_max_window_bits"[..], None))]);
    // A quoted value that is not a token is refused (the offer is declined).
    let params: Vec<_> = offers[1].params().collect();
    assert_eq!(params, [Err(()), Ok((&b"b"[..], None))]);
    assert_eq!(offers[2].params().count(), 0);
    assert!(DeflateConfig::default().negotiate(offers).is_some());
}

#[test]
fn the_101_response() {
    let accept = accept_key(KEY.as_bytes());
    let mut out = b"kept".to_vec();
    let params = DeflateConfig::default().negotiate([]);
    assert_eq!(params, None);
    let text = request(
        "GET / HTTP/1.1",
        &["Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"],
    );
    let (_, headers) = parse(&text);
    let params = DeflateConfig::default().negotiate(extension_offers(text.as_bytes(), &headers));
    write_accept_response(
        &mut out,
        &accept,
        Some(b"chat"),
        params.as_ref(),
        &[
            (b"X-Room", b"7"),
            (b"connection", b"close"),
            (b"Sec-WebSocket-Protocol", b"other"),
        ],
    )
    .unwrap();
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "keptHTTP/1.1 101 Switching Protocols\r\n\
         Upgrade: websocket\r\n\
         Connection: Upgrade\r\n\
         Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
         Sec-WebSocket-Protocol: chat\r\n\
         Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; \
         client_no_context_takeover; server_max_window_bits=12; client_max_window_bits=12\r\n\
         X-Room: 7\r\n\r\n"
    );
    // Invalid input from the application: nothing is written.
    let mut out = b"kept".to_vec();
    assert!(write_accept_response(&mut out, &accept, Some(b"a b"), None, &[]).is_err());
    assert!(write_accept_response(&mut out, &accept, None, None, &[(b"X", b"a\r\nb")]).is_err());
    assert_eq!(out, b"kept");
    write_accept_response(&mut out, &accept, None, None, &[]).unwrap();
    assert!(out.ends_with(b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"));
}

#[test]
fn rejections() {
    let mut out = Vec::new();
    write_rejection(
        &mut out,
        &HandshakeError::UnsupportedVersion,
        b"Date: x\r\n",
    );
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("HTTP/1.1 426 Upgrade Required\r\nSec-WebSocket-Version: 13\r\n"),
        "{text}"
    );
    assert!(text.contains("Connection: close\r\n"));
    let mut out = Vec::new();
    write_rejection(
        &mut out,
        &HandshakeError::BadRequest("missing Sec-WebSocket-Key"),
        b"",
    );
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    assert!(
        text.ends_with("\r\n\r\nmissing Sec-WebSocket-Key\n"),
        "{text}"
    );
    assert!(!text.contains("Sec-WebSocket-Version"));
}

#[test]
fn an_extended_connect_needs_version_13_once() {
    // RFC 8441 section 5: the request is a CONNECT over HTTP/2, without a
    // key; what is left for this check is the version, as over HTTP/1.1.
    let cases: [(&[&str], Result<(), HandshakeError>); 5] = [
        (&["Sec-WebSocket-Version: 13"], Ok(())),
        (
            &["Sec-WebSocket-Version: 13", "Sec-WebSocket-Protocol: chat"],
            Ok(()),
        ),
        (&[], Err(HandshakeError::UnsupportedVersion)),
        (
            &["Sec-WebSocket-Version: 8"],
            Err(HandshakeError::UnsupportedVersion),
        ),
        (
            &["Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 13"],
            Err(HandshakeError::UnsupportedVersion),
        ),
    ];
    for (fields, expected) in cases {
        let text = request("GET /chat HTTP/1.1", fields);
        let (_, headers) = parse(&text);
        assert_eq!(
            validate_extended_connect(text.as_bytes(), &headers),
            expected,
            "{fields:?}"
        );
    }
}

#[test]
fn the_fields_of_an_http2_accept() {
    let text = request(
        "GET /chat HTTP/1.1",
        &["Sec-WebSocket-Extensions: permessage-deflate"],
    );
    let (_, headers) = parse(&text);
    let deflate = DeflateConfig::default().negotiate(extension_offers(text.as_bytes(), &headers));
    let extra: [(&[u8], &[u8]); 4] = [
        (b"X-Extra", b"yes"),
        (b"Sec-WebSocket-Accept", b"dropped"),
        (b"Sec-WebSocket-Protocol", b"dropped, one was chosen"),
        (b"Upgrade", b"dropped"),
    ];
    let fields = accept_fields(Some(b"chat"), deflate.as_ref(), &extra).unwrap();
    // The same parameters the 101 of HTTP/1.1 names.
    let mut negotiated = Vec::new();
    deflate.unwrap().write_response_value(&mut negotiated);
    let fields: Vec<(&[u8], &[u8])> = fields
        .iter()
        .map(|(name, value)| (name.as_slice(), value.as_slice()))
        .collect();
    assert_eq!(
        fields,
        [
            (&b"sec-websocket-protocol"[..], &b"chat"[..]),
            (b"sec-websocket-extensions", negotiated.as_slice()),
            (b"x-extra", b"yes"),
        ]
    );
    assert!(accept_fields(Some(b"not a token"), None, &[]).is_err());
    assert!(accept_fields(None, None, &[(b"Bad Name", b"v")]).is_err());
    assert!(accept_fields(None, None, &[(b"x-split", b"a\r\nInjected: yes")]).is_err());
    assert!(accept_fields(None, None, &[]).unwrap().is_empty());
}
