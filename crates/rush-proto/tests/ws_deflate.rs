//! permessage-deflate: negotiation from offers, round trips in both
//! directions with every window size and with and without context
//! takeover, agreement with an independent deflate implementation
//! (miniz_oxide), and the decompression limit (zip bombs).

#[path = "ws/common.rs"]
mod common;

use common::{decode_pieces, Item};
use miniz_oxide::deflate::core::CompressorOxide;
use miniz_oxide::inflate::stream::InflateState;
use miniz_oxide::{DataFormat, MZFlush};
use rush_proto::ws::handshake::ExtensionOffer;
use rush_proto::ws::{
    DeflateConfig, DeflateParams, MessageDecoder, MessageEncoder, MessageKind, Role, WsError,
};
use std::num::NonZeroUsize;

/// Negotiates from one `Sec-WebSocket-Extensions` value.
fn negotiate(config: &DeflateConfig, header_value: &str) -> Option<String> {
    let buffer =
        format!("GET / HTTP/1.1\r\nHost: h\r\nSec-WebSocket-Extensions: {header_value}\r\n\r\n");
    let mut headers = Vec::new();
    rush_proto::parse_request_head(
        buffer.as_bytes(),
        &rush_proto::Limits::default(),
        &mut headers,
    )
    .unwrap();
    let offers: Vec<ExtensionOffer<'_>> =
        rush_proto::ws::handshake::extension_offers(buffer.as_bytes(), &headers).collect();
    config.negotiate(offers).map(|params| {
        let mut out = Vec::new();
        params.write_response_value(&mut out);
        String::from_utf8(out).unwrap()
    })
}

#[test]
fn the_default_answers_every_offer_without_context_takeover() {
    // So no deflate state outlives a message (see deflate.rs, "Memory").
    for offer in [
        "permessage-deflate",
        "permessage-deflate; client_max_window_bits",
    ] {
        let answer = negotiate(&DeflateConfig::default(), offer).unwrap();
        assert!(
            answer.starts_with(
                "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
            ),
            "{answer}"
        );
    }
}

#[test]
fn negotiation_table() {
    // With context takeover allowed, answers carry only what the offer asked.
    let config = DeflateConfig {
        server_no_context_takeover: false,
        client_no_context_takeover: false,
        ..DeflateConfig::default()
    };
    let cases: &[(&str, Option<&str>)] = &[
        // A bare offer: our window is announced; the client's cannot be limited.
        ("permessage-deflate", Some("permessage-deflate; server_max_window_bits=12")),
        (
            "permessage-deflate; client_max_window_bits",
            Some("permessage-deflate; server_max_window_bits=12; client_max_window_bits=12"),
        ),
        (
            "permessage-deflate; client_max_window_bits=10",
            Some("permessage-deflate; server_max_window_bits=12; client_max_window_bits=10"),
        ),
        (
            "permessage-deflate; client_max_window_bits=15; server_max_window_bits=9",
            Some("permessage-deflate; server_max_window_bits=9; client_max_window_bits=12"),
        ),
        (
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
            Some(
                "permessage-deflate; server_no_context_takeover; client_no_context_takeover; server_max_window_bits=12",
            ),
        ),
        // Quoted values are allowed (RFC 6455 9.1).
        (
            "permessage-deflate; server_max_window_bits=\"10\"",
            Some("permessage-deflate; server_max_window_bits=10"),
        ),
        // Case-insensitive names, other extensions skipped.
        ("x-webkit-deflate-frame, PerMessage-Deflate", Some("permessage-deflate; server_max_window_bits=12")),
        // An 8-bit server window is honoured (with stored blocks).
        (
            "permessage-deflate; server_max_window_bits=8",
            Some("permessage-deflate; server_max_window_bits=8"),
        ),
        // Autobahn 13.7: the first offer that can be honoured wins.
        (
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=8; client_max_window_bits, permessage-deflate",
            Some("permessage-deflate; server_no_context_takeover; server_max_window_bits=8; client_max_window_bits=12"),
        ),
        // Declined offers: unknown or repeated parameters, bad values; the
        // next offer is tried.
        (
            "permessage-deflate; server_max_window_bits=7, permessage-deflate",
            Some("permessage-deflate; server_max_window_bits=12"),
        ),
        ("permessage-deflate; unknown", None),
        ("permessage-deflate; server_no_context_takeover; server_no_context_takeover", None),
        ("permessage-deflate; server_no_context_takeover=1", None),
        ("permessage-deflate; server_max_window_bits", None),
        ("permessage-deflate; server_max_window_bits=16", None),
        ("permessage-deflate; server_max_window_bits=7", None),
        ("permessage-deflate; server_max_window_bits=010", None),
        ("permessage-deflate; client_max_window_bits=1a", None),
        ("permessage-deflate; client_max_window_bits=\"1\\0\"", None),
        ("x-other", None),
    ];
    for (offer, expected) in cases {
        assert_eq!(negotiate(&config, offer).as_deref(), *expected, "{offer}");
    }
    // A server configured for 15-bit windows announces none.
    let big = DeflateConfig {
        server_max_window_bits: 15,
        client_max_window_bits: 15,
        ..config
    };
    assert_eq!(
        negotiate(&big, "permessage-deflate; client_max_window_bits").as_deref(),
        Some("permessage-deflate")
    );
}

fn params(server_bits: u8, client_bits: u8, no_takeover: bool) -> DeflateParams {
    DeflateParams {
        server_no_context_takeover: no_takeover,
        client_no_context_takeover: no_takeover,
        server_max_window_bits: server_bits,
        client_max_window_bits: client_bits,
        level: 6,
    }
}

/// Text that compresses, with repeats further apart than small windows reach.
fn sample_messages() -> Vec<(MessageKind, Vec<u8>)> {
    let mut long = Vec::new();
    for index in 0..3000u32 {
        long.extend_from_slice(
            format!("line {index} of a message, κόσμε {}\n", index % 7).as_bytes(),
        );
    }
    let noise: Vec<u8> = (0..20_000u32)
        .map(|index| (index.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    vec![
        (MessageKind::Text, b"Hello".to_vec()),
        (MessageKind::Text, b"Hello".to_vec()),
        (MessageKind::Binary, Vec::new()),
        (MessageKind::Text, Vec::new()),
        (MessageKind::Text, long),
        (MessageKind::Binary, noise),
        (MessageKind::Text, b"Hello again".to_vec()),
    ]
}

fn expected_items(messages: &[(MessageKind, Vec<u8>)]) -> Vec<Item> {
    messages
        .iter()
        .map(|(kind, payload)| match kind {
            MessageKind::Text => Item::Text(String::from_utf8(payload.clone()).unwrap()),
            MessageKind::Binary => Item::Binary(payload.clone()),
        })
        .collect()
}

#[test]
fn round_trips_every_window_with_and_without_context_takeover() {
    let messages = sample_messages();
    for bits in 9..=15 {
        for no_takeover in [false, true] {
            for fragment in [None, NonZeroUsize::new(1000)] {
                let params = params(bits, bits, no_takeover);
                for (sender, receiver) in
                    [(Role::Server, Role::Client), (Role::Client, Role::Server)]
                {
                    let mut encoder = MessageEncoder::new(sender, Some(&params));
                    encoder.set_mask_key([9, 8, 7, 6]);
                    encoder.set_max_frame_payload(fragment);
                    let mut wire = Vec::new();
                    for (kind, payload) in &messages {
                        encoder.message(&mut wire, *kind, payload);
                    }
                    let mut decoder = MessageDecoder::new(receiver, 1 << 20, Some(&params));
                    // Fed in odd-sized pieces so frames and inflate steps split anywhere.
                    let pieces: Vec<&[u8]> = wire.chunks(997).collect();
                    let outcome = decode_pieces(&mut decoder, &pieces);
                    assert_eq!(outcome.error, None, "bits {bits} no_takeover {no_takeover}");
                    assert_eq!(outcome.items, expected_items(&messages), "bits {bits}");
                }
            }
        }
    }
}

#[test]
fn compressed_messages_have_rsv1_on_the_first_frame_only_and_shrink() {
    let params = params(12, 12, false);
    let mut encoder = MessageEncoder::new(Role::Server, Some(&params));
    let mut wire = Vec::new();
    encoder.message(&mut wire, MessageKind::Text, &[b'a'; 10_000]);
    assert_eq!(wire[0], 0xC1, "FIN, RSV1, text");
    assert!(wire.len() < 100, "{} bytes", wire.len());
    wire.clear();
    encoder.set_max_frame_payload(NonZeroUsize::new(4));
    encoder.message(&mut wire, MessageKind::Text, b"Hello Hello Hello");
    assert_eq!(wire[0], 0x41, "RSV1 and text, no FIN");
    let second_frame = 2 + (wire[1] as usize);
    assert_eq!(wire[second_frame] & 0x70, 0, "no RSV bit on a continuation");
    // RFC 7692 7.2.3.1: "Hello" in one compressed frame, without context.
    let mut encoder = MessageEncoder::new(Role::Server, Some(&params));
    wire.clear();
    encoder.message(&mut wire, MessageKind::Text, b"Hello");
    assert_eq!(wire, [0xc1, 0x07, 0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00]);
    // With context takeover the second "Hello" is a back-reference (7.2.3.2).
    wire.clear();
    encoder.message(&mut wire, MessageKind::Text, b"Hello");
    assert_eq!(wire, [0xc1, 0x05, 0xf2, 0x00, 0x11, 0x00, 0x00]);
}

#[test]
fn decodes_the_rfc_7692_examples() {
    let params = params(15, 15, false);
    let mut decoder = MessageDecoder::new(Role::Client, 1024, Some(&params));
    let wire: Vec<u8> = [
        // 7.2.3.1 one frame, 7.2.3.2 the same message again with a back-reference.
        &[0xc1, 0x07, 0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00][..],
        &[0xc1, 0x05, 0xf2, 0x00, 0x11, 0x00, 0x00],
        // 7.2.3.1 fragmented: "Hel" then "lo".
        &[
            0x41, 0x03, 0xf2, 0x48, 0xcd, 0x80, 0x04, 0xc9, 0xc9, 0x07, 0x00,
        ],
        // 7.2.3.3 a stored (uncompressed) block.
        &[
            0xc1, 0x0b, 0x00, 0x05, 0x00, 0xfa, 0xff, 0x48, 0x65, 0x6c, 0x6c, 0x6f, 0x00,
        ],
    ]
    .concat();
    let outcome = decode_pieces(&mut decoder, &[&wire]);
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.items, vec![Item::Text("Hello".into()); 4]);
}

/// Inflates one message with miniz_oxide (a second, independent inflater).
fn reference_inflate(state: &mut InflateState, compressed: &[u8]) -> Vec<u8> {
    let input = [compressed, &[0, 0, 0xff, 0xff][..]].concat();
    let mut output = vec![0; 1 << 20];
    let result = miniz_oxide::inflate::stream::inflate(state, &input, &mut output, MZFlush::Sync);
    assert!(result.status.is_ok(), "{:?}", result.status);
    assert_eq!(result.bytes_consumed, input.len());
    output.truncate(result.bytes_written);
    output
}

/// The payloads of unfragmented unmasked frames.
fn frame_payloads(mut wire: &[u8]) -> Vec<Vec<u8>> {
    let mut payloads = Vec::new();
    while !wire.is_empty() {
        let (length, header) = match wire[1] & 0x7f {
            126 => (u16::from_be_bytes([wire[2], wire[3]]) as usize, 4),
            127 => (
                u64::from_be_bytes(wire[2..10].try_into().unwrap()) as usize,
                10,
            ),
            length => (length as usize, 2),
        };
        payloads.push(wire[header..header + length].to_vec());
        wire = &wire[header + length..];
    }
    payloads
}

#[test]
fn our_compression_inflates_with_an_independent_implementation() {
    let messages = sample_messages();
    for bits in 9..=15 {
        for no_takeover in [false, true] {
            let params = params(bits, 15, no_takeover);
            let mut encoder = MessageEncoder::new(Role::Server, Some(&params));
            let mut wire = Vec::new();
            for (kind, payload) in &messages {
                encoder.message(&mut wire, *kind, payload);
            }
            // miniz_oxide always keeps a 32 KiB window, enough for any of ours.
            let mut state = InflateState::new_boxed(DataFormat::Raw);
            for ((_, payload), compressed) in messages.iter().zip(frame_payloads(&wire)) {
                if no_takeover {
                    state = InflateState::new_boxed(DataFormat::Raw);
                }
                assert_eq!(
                    &reference_inflate(&mut state, &compressed),
                    payload,
                    "bits {bits}"
                );
            }
        }
    }
}

/// Compresses one message with miniz_oxide and a sync flush, tail stripped.
fn reference_deflate(compressor: &mut CompressorOxide, payload: &[u8]) -> Vec<u8> {
    let mut output = vec![0; payload.len() * 2 + 64];
    let result =
        miniz_oxide::deflate::stream::deflate(compressor, payload, &mut output, MZFlush::Sync);
    assert!(result.status.is_ok());
    assert_eq!(result.bytes_consumed, payload.len());
    output.truncate(result.bytes_written);
    assert!(output.ends_with(&[0, 0, 0xff, 0xff]));
    output.truncate(output.len() - 4);
    output
}

#[test]
fn independent_compression_decodes_with_context_takeover() {
    let messages = sample_messages();
    // The reference uses a 32 KiB window: the client is not limited.
    let params = params(12, 15, false);
    let mut compressor = CompressorOxide::with_format_and_level(
        DataFormat::Raw,
        miniz_oxide::deflate::CompressionLevel::DefaultLevel,
    );
    let mut wire = Vec::new();
    for (kind, payload) in &messages {
        let compressed = reference_deflate(&mut compressor, payload);
        let opcode = if *kind == MessageKind::Text {
            0xC1
        } else {
            0xC2
        };
        wire.extend_from_slice(&common::client(opcode, &compressed));
    }
    let mut decoder = MessageDecoder::new(Role::Server, 1 << 20, Some(&params));
    for pieces in [vec![&wire[..]], wire.chunks(7).collect()] {
        let outcome = decode_pieces(&mut decoder, &pieces);
        assert_eq!(outcome.error, None);
        assert_eq!(outcome.items, expected_items(&messages));
        decoder = MessageDecoder::new(Role::Server, 1 << 20, Some(&params));
    }
}

/// A client message compressed by our own client-side encoder.
fn compressed_client_message(params: &DeflateParams, kind: MessageKind, payload: &[u8]) -> Vec<u8> {
    let mut encoder = MessageEncoder::new(Role::Client, Some(params));
    encoder.set_mask_key(common::KEY);
    let mut wire = Vec::new();
    encoder.message(&mut wire, kind, payload);
    wire
}

#[test]
fn zip_bombs_stop_at_the_message_limit() {
    let params = params(15, 15, false);
    let max = 1 << 20;
    // 64 MiB of zeros compress to about 64 KiB.
    let bomb = compressed_client_message(&params, MessageKind::Binary, &vec![0; 64 << 20]);
    assert!(bomb.len() < 100_000, "{}", bomb.len());
    let mut decoder = MessageDecoder::new(Role::Server, max, Some(&params));
    let mut payload = Vec::new();
    let mut offset = 0;
    let error = loop {
        match decoder.decode(&bomb[offset..(offset + 4096).min(bomb.len())], &mut payload) {
            Ok(progress) => {
                assert!(progress.incoming.is_none());
                offset += progress.consumed;
            }
            Err(error) => break error,
        }
        // Never more than one byte past the limit is produced.
        assert!(payload.len() <= max + 1);
    };
    assert_eq!(error, WsError::TooBig);
    assert!(payload.len() <= max + 1, "{}", payload.len());
    assert!(
        offset < bomb.len() / 4,
        "stopped after {offset} of {} bytes",
        bomb.len()
    );

    // Exactly the limit passes.
    let exact = compressed_client_message(&params, MessageKind::Binary, &vec![0; max]);
    let mut decoder = MessageDecoder::new(Role::Server, max, Some(&params));
    let outcome = decode_pieces(&mut decoder, &[&exact]);
    assert_eq!(outcome.items, vec![Item::Binary(vec![0; max])]);
}

#[test]
fn compressed_text_fails_fast_and_bad_data_is_1007() {
    let params = params(15, 15, true);
    // Invalid UTF-8 at the start of a long compressed text message: found
    // in the first piece, not at the end.
    let mut text = vec![0xff];
    text.extend((0..200_000u32).map(|index| b'a' + (index % 26) as u8));
    let mut encoder = MessageEncoder::new(Role::Client, Some(&params));
    let mut wire = Vec::new();
    encoder.message(&mut wire, MessageKind::Binary, &text);
    wire[0] = (wire[0] & 0xF0) | 0x01; // now a text message, masking unaffected
    let pieces: Vec<&[u8]> = wire.chunks(64).collect();
    let mut decoder = MessageDecoder::new(Role::Server, 1 << 20, Some(&params));
    let (error, fed) = decode_pieces(&mut decoder, &pieces).error.unwrap();
    assert_eq!(error.close_code(), 1007);
    assert!(fed <= 128, "failed after {fed} of {} bytes", wire.len());

    // Garbage that does not inflate.
    let garbage = common::client(0xC2, &[0xff; 20]);
    let mut decoder = MessageDecoder::new(Role::Server, 1 << 20, Some(&params));
    let (error, _) = decode_pieces(&mut decoder, &[&garbage]).error.unwrap();
    assert_eq!(error, WsError::InvalidPayload("invalid compressed data"));

    // RSV1 on a continuation frame or a control frame is a protocol error.
    for input in [
        [
            common::client(0x41, b"\xf2\x48"),
            common::client(0xC0, b"\xcd"),
        ]
        .concat(),
        common::client(0xC9, b""),
    ] {
        let mut decoder = MessageDecoder::new(Role::Server, 1 << 20, Some(&params));
        let (error, _) = decode_pieces(&mut decoder, &[&input]).error.unwrap();
        assert_eq!(error.close_code(), 1002);
    }
}

#[test]
fn the_first_problem_in_the_inflated_stream_wins_however_it_is_split() {
    // Found by the ws_frames fuzz target: compressed text whose first
    // inflated bytes are not UTF-8 and whose deflate data then breaks.
    // Byte by byte the text error came first, whole the deflate error did;
    // now each piece of output is checked before the deflate status, so
    // both report the text error.
    let input = [
        &[0x41, 0x83, 0x37, 0xfa, 0x21, 0x3d, 0xc5, 0xb2, 0xce][..],
        &[0x80, 0x84, 0x37, 0xfa, 0x14, 0x3d, 0xf7, 0x33, 0x26, 0x3d],
    ]
    .concat();
    let params = params(12, 15, true);
    let expected = WsError::InvalidPayload("text message is not UTF-8");
    let whole = decode_pieces(
        &mut MessageDecoder::new(Role::Server, 1 << 16, Some(&params)),
        &[&input],
    );
    assert_eq!(whole.error.map(|(error, _)| error), Some(expected));
    for split in 0..=input.len() {
        let (a, b) = input.split_at(split);
        let outcome = decode_pieces(
            &mut MessageDecoder::new(Role::Server, 1 << 16, Some(&params)),
            &[a, b],
        );
        assert_eq!(
            outcome.error.map(|(error, _)| error),
            Some(expected),
            "split at {split}"
        );
    }

    // The same for the limit: invalid text past the limit is never looked
    // at (the limit wins), before it the text error wins.
    for (invalid_at, expected) in [(10, expected), (40, WsError::TooBig)] {
        let mut text = vec![b'a'; 64];
        text[invalid_at] = 0xff;
        let mut encoder = MessageEncoder::new(Role::Client, Some(&params));
        let mut wire = Vec::new();
        encoder.message(&mut wire, MessageKind::Binary, &text);
        wire[0] = (wire[0] & 0xF0) | 0x01;
        for pieces in [vec![&wire[..]], wire.chunks(1).collect()] {
            let mut decoder = MessageDecoder::new(Role::Server, 32, Some(&params));
            let outcome = decode_pieces(&mut decoder, &pieces);
            assert_eq!(
                outcome.error.map(|(error, _)| error),
                Some(expected),
                "invalid at {invalid_at}"
            );
        }
    }
}

#[test]
fn an_8_bit_window_is_honoured_with_stored_blocks() {
    let params = params(8, 8, false);
    let messages = sample_messages();
    for (sender, receiver) in [(Role::Server, Role::Client), (Role::Client, Role::Server)] {
        let mut encoder = MessageEncoder::new(sender, Some(&params));
        encoder.set_mask_key([1, 2, 3, 4]);
        let mut wire = Vec::new();
        for (kind, payload) in &messages {
            encoder.message(&mut wire, *kind, payload);
        }
        let mut decoder = MessageDecoder::new(receiver, 1 << 20, Some(&params));
        let outcome = decode_pieces(&mut decoder, &wire.chunks(1000).collect::<Vec<_>>());
        assert_eq!(outcome.error, None);
        assert_eq!(outcome.items, expected_items(&messages));
    }
    // Every block is stored (BTYPE 00): no back-reference can reach past 256 bytes.
    let mut encoder = MessageEncoder::new(Role::Server, Some(&params));
    let mut wire = Vec::new();
    encoder.message(&mut wire, MessageKind::Text, &[b'a'; 1000]);
    let payloads = frame_payloads(&wire);
    assert_eq!(payloads[0][0] & 0b110, 0, "first block header is stored");
    assert!(payloads[0].len() >= 1000, "stored, not compressed");
    let mut state = InflateState::new_boxed(DataFormat::Raw);
    assert_eq!(
        reference_inflate(&mut state, &payloads[0]),
        vec![b'a'; 1000]
    );
}

#[test]
fn incompressible_messages_at_the_limit_pass_and_compressed_bytes_are_bounded() {
    use rush_proto::ws::decoder::compressed_limit;
    // Found by the ws_frames fuzz target: random bytes compress to stored
    // blocks a few bytes longer than the message, which must still pass.
    let params = params(15, 15, true);
    let max = 100_000;
    // xorshift64: bytes deflate cannot shrink.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..max)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 32) as u8
        })
        .collect();
    let wire = compressed_client_message(&params, MessageKind::Binary, &noise);
    assert!(
        wire.len() > max + 14,
        "the noise did not compress: {}",
        wire.len()
    );
    let outcome = decode_pieces(
        &mut MessageDecoder::new(Role::Server, max, Some(&params)),
        &[&wire],
    );
    assert_eq!(outcome.error, None);
    assert_eq!(outcome.items, vec![Item::Binary(noise)]);

    // Compressed bytes past the bound are refused from the frame header,
    // also when spread over fragments.
    let limit = compressed_limit(64);
    assert_eq!(limit, 64 + 8 + 1024);
    // Empty stored blocks: valid deflate that inflates to nothing.
    let nothing: Vec<u8> = [0x00, 0x00, 0x00, 0xff, 0xff].repeat(200);
    let first = common::client(0x42, &nothing);
    let header = &common::client(0x80, &nothing[..100])[..8];
    let mut decoder = MessageDecoder::new(Role::Server, 64, Some(&params));
    let outcome = decode_pieces(&mut decoder, &[&first[..8]]);
    assert_eq!(
        outcome.error, None,
        "1000 compressed bytes are within the bound"
    );
    let mut decoder = MessageDecoder::new(Role::Server, 64, Some(&params));
    let (error, fed) = decode_pieces(&mut decoder, &[&first, header])
        .error
        .unwrap();
    assert_eq!((error, fed), (WsError::TooBig, first.len() + 8));
}
