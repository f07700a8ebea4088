//! Properties of the WebSocket codec, and tungstenite as a reference.
//!
//! * decode(encode(messages)) == messages, in both roles, with and without
//!   permessage-deflate (and context takeover), fragmented or not, the
//!   bytes split at arbitrary points;
//! * arbitrary bytes never panic the decoder, and give the same outcome
//!   whole and in pieces;
//! * differential: what tungstenite (as a client) sends, we decode to the
//!   same messages; what we send, tungstenite decodes to the same messages.

#[path = "ws/common.rs"]
mod common;

use std::io::{self, Cursor, Read, Write};
use std::num::NonZeroUsize;

use common::{decode_pieces, Item};
use proptest::prelude::*;
use rush_proto::ws::{DeflateParams, MessageDecoder, MessageEncoder, MessageKind, Role};

fn message() -> impl Strategy<Value = (MessageKind, Vec<u8>)> {
    prop_oneof![
        ".{0,200}".prop_map(|text: String| (MessageKind::Text, text.into_bytes())),
        proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|bytes| (MessageKind::Binary, bytes)),
        // Long and compressible, to cross the 126-byte and 64 KiB length forms.
        (0usize..70_000, any::<u8>())
            .prop_map(|(length, byte)| (MessageKind::Binary, vec![byte; length])),
    ]
}

fn items(messages: &[(MessageKind, Vec<u8>)]) -> Vec<Item> {
    messages
        .iter()
        .map(|(kind, payload)| match kind {
            MessageKind::Text => Item::Text(String::from_utf8(payload.clone()).unwrap()),
            MessageKind::Binary => Item::Binary(payload.clone()),
        })
        .collect()
}

/// Cuts `bytes` at the given fractions of its length.
fn cut<'a>(bytes: &'a [u8], fractions: &[f64]) -> Vec<&'a [u8]> {
    let mut points: Vec<usize> = fractions
        .iter()
        .map(|f| (f * bytes.len() as f64) as usize)
        .collect();
    points.push(0);
    points.push(bytes.len());
    points.sort_unstable();
    points
        .windows(2)
        .map(|pair| &bytes[pair[0]..pair[1]])
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn decode_of_encode_is_identity(
        messages in proptest::collection::vec(message(), 0..6),
        fragment in proptest::option::of(1usize..500),
        deflate in proptest::option::of((9u8..=15, 9u8..=15, any::<bool>())),
        client_sends in any::<bool>(),
        fractions in proptest::collection::vec(0.0f64..1.0, 0..8),
    ) {
        let params = deflate.map(|(server_bits, client_bits, no_takeover)| DeflateParams {
            server_no_context_takeover: no_takeover,
            client_no_context_takeover: !no_takeover,
            server_max_window_bits: server_bits,
            client_max_window_bits: client_bits,
            level: 6,
        });
        let (sender, receiver) = if client_sends { (Role::Client, Role::Server) } else { (Role::Server, Role::Client) };
        let mut encoder = MessageEncoder::new(sender, params.as_ref());
        encoder.set_mask_key([0xde, 0xad, 0xbe, 0xef]);
        encoder.set_max_frame_payload(fragment.and_then(NonZeroUsize::new));
        let mut wire = Vec::new();
        for (kind, payload) in &messages {
            encoder.message(&mut wire, *kind, payload);
        }
        let mut decoder = MessageDecoder::new(receiver, 1 << 20, params.as_ref());
        let outcome = decode_pieces(&mut decoder, &cut(&wire, &fractions));
        prop_assert_eq!(outcome.error, None);
        prop_assert_eq!(outcome.items, items(&messages));
        prop_assert_eq!(outcome.consumed, wire.len());
    }

    #[test]
    fn arbitrary_bytes_decode_the_same_in_pieces(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        fractions in proptest::collection::vec(0.0f64..1.0, 0..6),
        deflate in any::<bool>(),
    ) {
        let params = DeflateParams {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 12,
            client_max_window_bits: 15,
            level: 6,
        };
        let params = deflate.then_some(params);
        let whole = decode_pieces(&mut MessageDecoder::new(Role::Server, 256, params.as_ref()), &[&bytes]);
        let pieces = decode_pieces(&mut MessageDecoder::new(Role::Server, 256, params.as_ref()), &cut(&bytes, &fractions));
        prop_assert_eq!(whole.items, pieces.items);
        prop_assert_eq!(whole.error.map(|(error, _)| error), pieces.error.map(|(error, _)| error));
    }
}

/// An in-memory socket for tungstenite: reads what the test queued, keeps what it writes.
struct Pipe {
    incoming: Cursor<Vec<u8>>,
    outgoing: Vec<u8>,
}

impl Read for Pipe {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self.incoming.read(buffer)? {
            0 => Err(io::ErrorKind::WouldBlock.into()),
            read => Ok(read),
        }
    }
}

impl Write for Pipe {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.outgoing.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn tungstenite_client(incoming: Vec<u8>) -> tungstenite::WebSocket<Pipe> {
    tungstenite::WebSocket::from_raw_socket(
        Pipe {
            incoming: Cursor::new(incoming),
            outgoing: Vec::new(),
        },
        tungstenite::protocol::Role::Client,
        None,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(100))]

    #[test]
    fn tungstenite_client_frames_decode_to_the_same_messages(
        messages in proptest::collection::vec(message(), 1..5),
        fragment in proptest::option::of(1usize..100),
    ) {
        use tungstenite::protocol::frame::coding::{Data, OpCode};
        use tungstenite::protocol::frame::Frame;
        let mut client = tungstenite_client(Vec::new());
        for (kind, payload) in &messages {
            let data = match kind {
                MessageKind::Text => Data::Text,
                MessageKind::Binary => Data::Binary,
            };
            match fragment {
                None => {
                    let message = match kind {
                        MessageKind::Text => tungstenite::Message::text(String::from_utf8(payload.clone()).unwrap()),
                        MessageKind::Binary => tungstenite::Message::binary(payload.clone()),
                    };
                    client.write(message).unwrap();
                }
                Some(size) => {
                    // Fragments written as raw frames (tungstenite masks them).
                    let chunks: Vec<&[u8]> = if payload.is_empty() { vec![&[][..]] } else { payload.chunks(size).collect() };
                    for (index, chunk) in chunks.iter().enumerate() {
                        let opcode = if index == 0 { OpCode::Data(data) } else { OpCode::Data(Data::Continue) };
                        let frame = Frame::message(chunk.to_vec(), opcode, index + 1 == chunks.len());
                        client.write(tungstenite::Message::Frame(frame)).unwrap();
                    }
                }
            }
        }
        client.flush().unwrap();
        let wire = std::mem::take(&mut client.get_mut().outgoing);
        prop_assert!(wire[1] & 0x80 != 0, "tungstenite masks client frames");
        let outcome = decode_pieces(&mut MessageDecoder::new(Role::Server, 1 << 20, None), &[&wire]);
        prop_assert_eq!(outcome.error, None);
        prop_assert_eq!(outcome.items, items(&messages));
    }

    #[test]
    fn our_server_frames_decode_with_tungstenite(
        messages in proptest::collection::vec(message(), 1..5),
        fragment in proptest::option::of(1usize..100),
    ) {
        let mut encoder = MessageEncoder::new(Role::Server, None);
        encoder.set_max_frame_payload(fragment.and_then(NonZeroUsize::new));
        let mut wire = Vec::new();
        for (kind, payload) in &messages {
            encoder.message(&mut wire, *kind, payload);
        }
        encoder.ping(&mut wire, b"are you there").unwrap();
        encoder.close(&mut wire, Some(1001), "going away").unwrap();
        let mut client = tungstenite_client(wire);
        let mut received = Vec::new();
        loop {
            match client.read() {
                Ok(tungstenite::Message::Text(text)) => received.push(Item::Text(text.to_string())),
                Ok(tungstenite::Message::Binary(bytes)) => received.push(Item::Binary(bytes.to_vec())),
                Ok(tungstenite::Message::Ping(bytes)) => received.push(Item::Ping(bytes.to_vec())),
                Ok(tungstenite::Message::Close(Some(frame))) => {
                    received.push(Item::Close(Some(u16::from(frame.code)), frame.reason.to_string()));
                }
                Ok(other) => panic!("unexpected {other:?}"),
                Err(_) => break,
            }
        }
        let mut expected = items(&messages);
        expected.push(Item::Ping(b"are you there".to_vec()));
        expected.push(Item::Close(Some(1001), "going away".into()));
        prop_assert_eq!(received, expected);
    }
}

/// What tungstenite, reading as a server, makes of `input`: the messages
/// it reports, and whether it refused the input.
fn tungstenite_server_reads(input: Vec<u8>) -> (Vec<Item>, bool) {
    let mut server = tungstenite::WebSocket::from_raw_socket(
        Pipe {
            incoming: Cursor::new(input),
            outgoing: Vec::new(),
        },
        tungstenite::protocol::Role::Server,
        None,
    );
    let mut items = Vec::new();
    loop {
        match server.read() {
            Ok(tungstenite::Message::Text(text)) => items.push(Item::Text(text.to_string())),
            Ok(tungstenite::Message::Binary(bytes)) => items.push(Item::Binary(bytes.to_vec())),
            Ok(tungstenite::Message::Ping(bytes)) => items.push(Item::Ping(bytes.to_vec())),
            Ok(tungstenite::Message::Pong(bytes)) => items.push(Item::Pong(bytes.to_vec())),
            // tungstenite answers a close code not allowed on the wire by
            // replacing it with 1002 (and closing): its way of refusing.
            Ok(tungstenite::Message::Close(Some(frame)))
                if u16::from(frame.code) == 1002
                    && frame.reason.as_str() == "Protocol violation" =>
            {
                return (items, true)
            }
            Ok(tungstenite::Message::Close(frame)) => items.push(match frame {
                Some(frame) => Item::Close(Some(u16::from(frame.code)), frame.reason.to_string()),
                None => Item::Close(None, String::new()),
            }),
            Ok(tungstenite::Message::Frame(_)) => unreachable!("not reported when reading"),
            Err(tungstenite::Error::Io(error)) if error.kind() == io::ErrorKind::WouldBlock => {
                return (items, false)
            }
            Err(tungstenite::Error::ConnectionClosed) => return (items, false),
            Err(_) => return (items, true),
        }
    }
}

#[test]
fn tungstenite_agrees_on_what_to_refuse() {
    use common::client;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("text", client(0x81, b"Hello")),
        (
            "fragments and a ping",
            [
                client(0x01, b"He"),
                client(0x89, b"p"),
                client(0x80, b"llo"),
            ]
            .concat(),
        ),
        ("close with a reason", client(0x88, b"\x03\xe8bye")),
        ("close 4999", client(0x88, b"\x13\x87")),
        ("unmasked", common::raw(0x81, b"Hello", None)),
        ("reserved opcode", client(0x83, b"")),
        ("reserved control opcode", client(0x8B, b"")),
        ("RSV1 without an extension", client(0xC1, b"x")),
        ("RSV2", client(0xA1, b"x")),
        ("fragmented ping", client(0x09, b"")),
        ("ping of 126 bytes", client(0x89, &[0; 126])),
        ("continuation first", client(0x80, b"x")),
        (
            "text inside a message",
            [client(0x01, b"a"), client(0x81, b"b")].concat(),
        ),
        ("invalid UTF-8", client(0x81, b"\xff")),
        (
            "invalid UTF-8 across fragments",
            [client(0x01, b"\xce"), client(0x80, b"a")].concat(),
        ),
        ("close of 1 byte", client(0x88, b"\x03")),
        ("close 1005", client(0x88, b"\x03\xed")),
        ("close 2999", client(0x88, b"\x0b\xb7")),
        ("close reason not UTF-8", client(0x88, b"\x03\xe8\xff")),
    ];
    for (name, input) in cases {
        let ours = decode_pieces(
            &mut MessageDecoder::new(Role::Server, 1 << 20, None),
            &[&input],
        );
        let (items, refused) = tungstenite_server_reads(input);
        assert_eq!(
            refused,
            ours.error.is_some(),
            "{name}: ours {:?}",
            ours.error
        );
        assert_eq!(items, ours.items, "{name}");
    }
}

/// One step of a connection's life, from either side.
#[derive(Debug, Clone)]
enum Step {
    PeerMessage(Vec<u8>),
    PeerPing(Vec<u8>),
    PeerClose(Option<u16>),
    PeerGarbage,
    AppSends(Vec<u8>),
    AppPings,
    AppCloses(u16),
    Drop,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Step::PeerMessage),
        2 => proptest::collection::vec(any::<u8>(), 0..20).prop_map(Step::PeerPing),
        1 => proptest::option::of(prop_oneof![Just(1000u16), Just(1001), Just(4000)]).prop_map(Step::PeerClose),
        1 => Just(Step::PeerGarbage),
        3 => proptest::collection::vec(any::<u8>(), 0..40).prop_map(Step::AppSends),
        1 => Just(Step::AppPings),
        1 => prop_oneof![Just(1000u16), Just(1001), Just(1011)].prop_map(Step::AppCloses),
        1 => Just(Step::Drop),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever happens in whatever order: one disconnect at most (exactly
    /// one once closed), nothing sent after our close frame, at most one
    /// close frame, a pong for each ping received while open, and every
    /// byte written is a valid server frame.
    #[test]
    fn connection_invariants(steps in proptest::collection::vec(step(), 0..20)) {
        use rush_proto::ws::{Connection, ConnectionState, Received};
        let mut peer = MessageEncoder::new(Role::Client, None);
        peer.set_mask_key([3, 1, 4, 1]);
        let mut server = Connection::new(Role::Server, 1 << 16, None);
        let (mut message, mut out) = (Vec::new(), Vec::new());
        let mut disconnects = 0;
        let mut pings_while_open = 0;
        for step in steps {
            let mut input = Vec::new();
            match step {
                Step::PeerMessage(payload) => peer.message(&mut input, MessageKind::Binary, &payload),
                Step::PeerPing(payload) => {
                    if server.state() == ConnectionState::Open {
                        pings_while_open += 1;
                    }
                    peer.ping(&mut input, &payload).unwrap()
                }
                Step::PeerClose(code) => peer.close(&mut input, code, "").unwrap(),
                Step::PeerGarbage => input.extend_from_slice(b"\x83\x80\0\0\0\0"),
                Step::AppSends(payload) => {
                    let open = server.state() == ConnectionState::Open;
                    prop_assert_eq!(server.send(&mut out, MessageKind::Binary, &payload).is_ok(), open);
                }
                Step::AppPings => {
                    let open = server.state() == ConnectionState::Open;
                    prop_assert_eq!(server.ping(&mut out, b"").is_ok(), open);
                }
                Step::AppCloses(code) => {
                    let open = server.state() == ConnectionState::Open;
                    prop_assert_eq!(server.close(&mut out, Some(code), "").is_ok(), open);
                }
                Step::Drop => {
                    if server.transport_closed().is_some() {
                        disconnects += 1;
                    }
                }
            }
            let mut offset = 0;
            loop {
                let (consumed, received) = server.receive(&input[offset..], &mut message, &mut out);
                offset += consumed;
                match received {
                    Some(Received::Message(_)) => message.clear(),
                    Some(Received::Pong(_)) => {}
                    Some(Received::Disconnect(_)) => disconnects += 1,
                    None => break,
                }
            }
            prop_assert_eq!(offset, input.len());
            // A ping that arrives when the peer already closed is not answered.
            if matches!(server.state(), ConnectionState::Closed) {
                prop_assert_eq!(disconnects, 1);
            }
            prop_assert!(disconnects <= 1);
        }
        // Read back what the server wrote, as its client.
        let outcome = decode_pieces(&mut MessageDecoder::new(Role::Client, 1 << 20, None), &[&out]);
        prop_assert_eq!(outcome.error, None);
        let closes = outcome.items.iter().filter(|item| matches!(item, Item::Close(..))).count();
        prop_assert!(closes <= 1);
        if let Some(close_at) = outcome.items.iter().position(|item| matches!(item, Item::Close(..))) {
            prop_assert_eq!(close_at, outcome.items.len() - 1, "nothing after our close");
        }
        let pongs = outcome.items.iter().filter(|item| matches!(item, Item::Pong(_))).count();
        prop_assert!(pongs <= pings_while_open);
    }
}
