//! The WebSocket frame decoder: a table of inputs fed whole, split in two
//! at every offset and byte by byte; masking; close-code rules; UTF-8
//! failing fast within and across fragments; size limits.

#[path = "ws/common.rs"]
mod common;

use common::{client, decode_pieces, raw, Item, Outcome, KEY};
use rush_proto::ws::{MessageDecoder, Role, WsError};

const MAX: usize = 64;

fn decoder() -> MessageDecoder {
    MessageDecoder::new(Role::Server, MAX, None)
}

fn whole(input: &[u8]) -> Outcome {
    decode_pieces(&mut decoder(), &[input])
}

fn cat(frames: &[Vec<u8>]) -> Vec<u8> {
    frames.concat()
}

/// The items a valid input gives, or the close code of the error.
type Expected = Result<Vec<Item>, u16>;

fn ok(items: Vec<Item>) -> Expected {
    Ok(items)
}

fn text(value: &str) -> Item {
    Item::Text(value.to_string())
}

/// (name, input, expected items or the close code of the error).
fn table() -> Vec<(&'static str, Vec<u8>, Expected)> {
    let kosme = "κόσμε".as_bytes();
    let mut non_minimal = vec![0x82, 0xFF, 0, 0, 0, 0, 0, 0, 0, 3];
    non_minimal.extend_from_slice(&KEY);
    non_minimal.extend_from_slice(&[b'a' ^ KEY[0], b'b' ^ KEY[1], b'c' ^ KEY[2]]);
    vec![
        ("text", client(0x81, b"Hello"), ok(vec![text("Hello")])),
        ("empty text", client(0x81, b""), ok(vec![text("")])),
        (
            "binary",
            client(0x82, &[0, 255, 1]),
            ok(vec![Item::Binary(vec![0, 255, 1])]),
        ),
        (
            "16-bit length",
            client(0x82, &[7; 60]),
            ok(vec![Item::Binary(vec![7; 60])]),
        ),
        (
            "non-minimal 64-bit length",
            non_minimal,
            ok(vec![Item::Binary(b"abc".to_vec())]),
        ),
        (
            "fragments",
            cat(&[client(0x01, b"He"), client(0x00, b""), client(0x80, b"llo")]),
            ok(vec![text("Hello")]),
        ),
        (
            "a character split across fragments",
            cat(&[client(0x01, &kosme[..3]), client(0x80, &kosme[3..])]),
            ok(vec![text("κόσμε")]),
        ),
        (
            "control frames between fragments",
            cat(&[
                client(0x02, b"ab"),
                client(0x89, b"p"),
                client(0x8A, b""),
                client(0x80, b"c"),
                client(0x81, b"next"),
            ]),
            ok(vec![
                Item::Ping(b"p".to_vec()),
                Item::Pong(vec![]),
                Item::Binary(b"abc".to_vec()),
                text("next"),
            ]),
        ),
        (
            "ping of 125 bytes",
            client(0x89, &[1; 125]),
            ok(vec![Item::Ping(vec![1; 125])]),
        ),
        (
            "empty close",
            client(0x88, b""),
            ok(vec![Item::Close(None, String::new())]),
        ),
        (
            "close with reason",
            client(0x88, b"\x03\xe8bye"),
            ok(vec![Item::Close(Some(1000), "bye".into())]),
        ),
        (
            "close 1012",
            client(0x88, b"\x03\xf4"),
            ok(vec![Item::Close(Some(1012), "".into())]),
        ),
        (
            "close 3000",
            client(0x88, b"\x0b\xb8"),
            ok(vec![Item::Close(Some(3000), "".into())]),
        ),
        (
            "close 4999",
            client(0x88, b"\x13\x87"),
            ok(vec![Item::Close(Some(4999), "".into())]),
        ),
        (
            "message of exactly the limit",
            client(0x82, &[0; MAX]),
            ok(vec![Item::Binary(vec![0; MAX])]),
        ),
        // 1002: framing rules.
        (
            "unmasked client frame",
            raw(0x81, b"Hello", None),
            Err(1002),
        ),
        ("reserved data opcode", client(0x83, b""), Err(1002)),
        ("reserved control opcode", client(0x8B, b""), Err(1002)),
        ("RSV1 without deflate", client(0xC1, b"x"), Err(1002)),
        ("RSV2", client(0xA1, b"x"), Err(1002)),
        ("RSV3", client(0x91, b"x"), Err(1002)),
        ("fragmented ping", client(0x09, b""), Err(1002)),
        ("ping of 126 bytes", client(0x89, &[1; 126]), Err(1002)),
        ("close of 126 bytes", client(0x88, &[b'a'; 126]), Err(1002)),
        ("continuation first", client(0x80, b"x"), Err(1002)),
        (
            "text inside a fragmented message",
            cat(&[client(0x01, b"a"), client(0x81, b"b")]),
            Err(1002),
        ),
        (
            "continuation after a finished message",
            cat(&[client(0x81, b"a"), client(0x80, b"b")]),
            Err(1002),
        ),
        (
            "64-bit length with the top bit set",
            [&[0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0][..], &KEY].concat(),
            Err(1002),
        ),
        ("close of 1 byte", client(0x88, b"\x03"), Err(1002)),
        ("close 999", client(0x88, b"\x03\xe7"), Err(1002)),
        ("close 1004", client(0x88, b"\x03\xec"), Err(1002)),
        ("close 1005", client(0x88, b"\x03\xed"), Err(1002)),
        ("close 1006", client(0x88, b"\x03\xee"), Err(1002)),
        ("close 1015", client(0x88, b"\x03\xf7"), Err(1002)),
        ("close 1016", client(0x88, b"\x03\xf8"), Err(1002)),
        ("close 2999", client(0x88, b"\x0b\xb7"), Err(1002)),
        ("close 5000", client(0x88, b"\x13\x88"), Err(1002)),
        ("close 0", client(0x88, b"\x00\x00"), Err(1002)),
        // 1007: invalid UTF-8.
        ("invalid text", client(0x81, b"a\xffb"), Err(1007)),
        (
            "surrogate in text",
            client(0x81, b"\xed\xa0\x80"),
            Err(1007),
        ),
        (
            "text ending mid-character",
            client(0x81, &kosme[..3]),
            Err(1007),
        ),
        (
            "invalid across fragments",
            cat(&[client(0x01, b"\xce"), client(0x80, b"a")]),
            Err(1007),
        ),
        (
            "message ending mid-character across fragments",
            cat(&[client(0x01, b"a"), client(0x80, b"\xe2\x82")]),
            Err(1007),
        ),
        (
            "close reason not UTF-8",
            client(0x88, b"\x03\xe8\xff"),
            Err(1007),
        ),
        // Binary messages are not checked.
        (
            "binary is not UTF-8",
            client(0x82, b"\xff"),
            ok(vec![Item::Binary(vec![0xff])]),
        ),
        // 1009: over the limit.
        (
            "one byte over the limit",
            client(0x82, &[0; MAX + 1]),
            Err(1009),
        ),
        (
            "fragments over the limit",
            cat(&[client(0x02, &[0; 40]), client(0x80, &[0; 40])]),
            Err(1009),
        ),
    ]
}

#[test]
fn table_fed_whole() {
    for (name, input, expected) in table() {
        let outcome = whole(&input);
        match &expected {
            Ok(items) => {
                assert_eq!(outcome.error, None, "{name}");
                assert_eq!(&outcome.items, items, "{name}");
                assert_eq!(outcome.consumed, input.len(), "{name}");
            }
            Err(code) => {
                let (error, _) = outcome.error.unwrap_or_else(|| panic!("{name}: no error"));
                assert_eq!(error.close_code(), *code, "{name}: {error}");
            }
        }
    }
}

#[test]
fn table_split_at_every_offset_and_byte_by_byte() {
    for (name, input, _) in table() {
        let reference = whole(&input);
        for split in 0..=input.len() {
            let (first, second) = input.split_at(split);
            let outcome = decode_pieces(&mut decoder(), &[first, second]);
            assert_eq!(outcome.items, reference.items, "{name} split at {split}");
            assert_eq!(
                outcome.error.map(|(error, _)| error),
                reference.error.map(|(error, _)| error),
                "{name} split at {split}"
            );
        }
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        let outcome = decode_pieces(&mut decoder(), &bytes);
        assert_eq!(outcome.items, reference.items, "{name} byte by byte");
        assert_eq!(
            outcome.error.map(|(error, _)| error),
            reference.error.map(|(error, _)| error),
            "{name} byte by byte"
        );
    }
}

#[test]
fn incomplete_input_is_never_an_error_and_reports_nothing_early() {
    let input = cat(&[
        client(0x01, b"Hel"),
        client(0x89, b"x"),
        client(0x80, b"lo"),
    ]);
    for end in 0..input.len() {
        let outcome = whole(&input[..end]);
        assert_eq!(outcome.error, None, "prefix {end}");
        assert_eq!(outcome.consumed, end, "prefix {end}");
        assert!(!outcome.items.contains(&text("Hello")), "prefix {end}");
    }
}

/// Feeds `input` byte by byte and returns how many bytes had been fed when
/// the decoder failed.
fn failing_byte(input: &[u8]) -> (WsError, usize) {
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    decode_pieces(
        &mut MessageDecoder::new(Role::Server, 1 << 20, None),
        &bytes,
    )
    .error
    .expect("the input is invalid")
}

#[test]
fn invalid_utf8_fails_at_the_offending_byte() {
    // A 100-byte text frame whose 11th payload byte is invalid: the error
    // comes with that byte, long before the frame ends (Autobahn 6.4.x).
    let mut payload = vec![b'a'; 100];
    payload[10] = 0xff;
    let frame = client(0x81, &payload);
    let header = 2 + 4;
    assert_eq!(
        failing_byte(&frame),
        (
            WsError::InvalidPayload("text message is not UTF-8"),
            header + 11
        )
    );

    // F4 90 can never become a character: refused on the 0x90, which is
    // in the second fragment.
    let mut first = vec![b'a'; 20];
    first.push(0xf4);
    let input = cat(&[
        client(0x01, &first),
        client(0x80, &[0x90, 0x80, 0x80, b'z', b'z']),
    ]);
    let second_header = 6 + first.len() + 6;
    assert_eq!(failing_byte(&input).1, second_header + 1);

    // Across a ping between fragments too.
    let input = cat(&[
        client(0x01, b"\xce"),
        client(0x89, b""),
        client(0x00, b"\xba"),
        client(0x80, b"\x80"),
    ]);
    let before_last_payload = input.len() - 1;
    assert_eq!(failing_byte(&input).1, before_last_payload + 1);
}

#[test]
fn oversized_frames_are_refused_from_their_header() {
    // Only the 10-byte header and key of a 1 MiB + 1 frame are fed.
    let mut decoder = MessageDecoder::new(Role::Server, 1 << 20, None);
    let mut header = vec![0x82, 0xFF];
    header.extend_from_slice(&((1u64 << 20) + 1).to_be_bytes());
    header.extend_from_slice(&KEY);
    let outcome = decode_pieces(&mut decoder, &[&header]);
    assert_eq!(outcome.error, Some((WsError::TooBig, header.len())));
    assert_eq!(WsError::TooBig.close_code(), 1009);

    // A continuation that would take the message over: refused at its header.
    let mut decoder = MessageDecoder::new(Role::Server, 10, None);
    let first = client(0x02, &[0; 6]);
    let second_header = &client(0x80, &[0; 5])[..6];
    let outcome = decode_pieces(&mut decoder, &[&first, second_header]);
    assert_eq!(outcome.error, Some((WsError::TooBig, first.len() + 6)));
}

#[test]
fn client_role_refuses_masked_frames() {
    let mut decoder = MessageDecoder::new(Role::Client, MAX, None);
    let outcome = decode_pieces(&mut decoder, &[&raw(0x81, b"hi", None)]);
    assert_eq!(outcome.items, vec![text("hi")]);
    let outcome = decode_pieces(&mut decoder, &[&client(0x81, b"hi")]);
    assert_eq!(
        outcome.error.map(|(error, _)| error.close_code()),
        Some(1002)
    );
}

#[test]
fn masking_keys_at_every_offset() {
    // Payloads of every length up to 20 with a key that is not symmetric,
    // split at every offset: unmasking must follow the payload position.
    for length in 0..20 {
        let payload: Vec<u8> = (0..length as u8)
            .map(|byte| byte.wrapping_mul(37))
            .collect();
        let frame = raw(0x82, &payload, Some([1, 2, 4, 8]));
        for split in 0..=frame.len() {
            let (a, b) = frame.split_at(split);
            let outcome = decode_pieces(&mut decoder(), &[a, b]);
            assert_eq!(outcome.items, vec![Item::Binary(payload.clone())]);
        }
    }
}
