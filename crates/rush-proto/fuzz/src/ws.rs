//! The `ws_frames` target: the WebSocket decoder and connection on
//! arbitrary bytes, in pieces.
//!
//! Input layout: one flags byte, two little-endian u16 split points, then
//! the bytes a client sent (shorter inputs are padded with zeros). Flags:
//! bit 0 turns permessage-deflate on, bit 1 makes the client reset its
//! compressor per message, bit 2 picks a tiny message limit (64 bytes,
//! so 1009 is within reach) instead of 64 KiB.
//!
//! The checks:
//!
//! * the decoder reports the same items, consumed count and error whether
//!   the input arrives whole, in three pieces or a byte at a time, and a
//!   failed decoder keeps failing the same way;
//! * no message exceeds the limit, and text messages and close reasons are UTF-8;
//! * re-encoding what was decoded, as a client (masked, compressed the
//!   same way), decodes to the same items: the encoder and decoder agree on
//!   everything the decoder accepts;
//! * a [`Connection`] fed the same bytes reports at most one disconnect,
//!   ignores input once closed, and everything it writes back decodes
//!   cleanly as a client reads it: pongs for pings, one close frame at most,
//!   with a code allowed on the wire.

use rush_proto::ws::decoder::Progress;
use rush_proto::ws::{
    close, Connection, ConnectionState, DeflateParams, Incoming, MessageDecoder, MessageEncoder,
    MessageKind, Received, Role, WsError,
};

use crate::{show, u16_at};

/// Inputs longer than this are cut: byte-at-a-time feeding is linear, but
/// nothing interesting needs more.
const MAX_INPUT: usize = 16 * 1024;

/// What a decoder reported, comparable across feeds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A whole data message.
    Message(MessageKind, Vec<u8>),
    /// A ping and its payload.
    Ping(Vec<u8>),
    /// A pong and its payload.
    Pong(Vec<u8>),
    /// A close frame's code and reason.
    Close(Option<u16>, Vec<u8>),
}

/// Everything one feed produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The items, in order.
    pub items: Vec<Item>,
    /// Input bytes consumed (0 after an error).
    pub consumed: usize,
    /// The error that ended decoding, if any.
    pub error: Option<WsError>,
}

/// Feeds `pieces` to `decoder` as a server loop does.
pub fn feed(decoder: &mut MessageDecoder, pieces: &[&[u8]], max: usize) -> Outcome {
    let mut outcome = Outcome {
        items: Vec::new(),
        consumed: 0,
        error: None,
    };
    let mut payload = Vec::new();
    for piece in pieces {
        let mut offset = 0;
        while offset < piece.len() || offset == 0 {
            match decoder.decode(&piece[offset..], &mut payload) {
                Err(error) => {
                    assert_eq!(
                        decoder.decode(b"\x82\x80\0\0\0\0", &mut payload),
                        Err(error),
                        "a failed decoder keeps failing"
                    );
                    outcome.error = Some(error);
                    // What a failing call consumed is not reported, so the
                    // count depends on the split: leave it out.
                    outcome.consumed = 0;
                    return outcome;
                }
                Ok(Progress { consumed, incoming }) => {
                    assert!(consumed <= piece.len() - offset);
                    offset += consumed;
                    outcome.consumed += consumed;
                    let Some(incoming) = incoming else {
                        assert_eq!(
                            offset,
                            piece.len(),
                            "stopped before the end without a reason"
                        );
                        break;
                    };
                    outcome.items.push(match incoming {
                        Incoming::Message(kind) => {
                            assert!(payload.len() <= max, "message over the limit");
                            if kind == MessageKind::Text {
                                assert!(std::str::from_utf8(&payload).is_ok(), "text not UTF-8");
                            }
                            Item::Message(kind, std::mem::take(&mut payload))
                        }
                        Incoming::Ping(data) => Item::Ping(data.as_bytes().to_vec()),
                        Incoming::Pong(data) => Item::Pong(data.as_bytes().to_vec()),
                        Incoming::Close { code, reason } => {
                            if let Some(code) = code {
                                assert!(close::is_valid_close_code(code));
                            }
                            assert!(std::str::from_utf8(reason.as_bytes()).is_ok());
                            Item::Close(code, reason.as_bytes().to_vec())
                        }
                    });
                }
            }
            if piece.is_empty() {
                break;
            }
        }
    }
    outcome
}

fn params(flags: u8) -> Option<DeflateParams> {
    (flags & 1 != 0).then_some(DeflateParams {
        server_no_context_takeover: false,
        client_no_context_takeover: flags & 2 != 0,
        server_max_window_bits: 12,
        client_max_window_bits: 15,
        level: 6,
    })
}

/// The entry point of the target.
pub fn ws_frames(data: &[u8]) {
    let flags = data.first().copied().unwrap_or(0);
    let (first, second) = (u16_at(data, 1), u16_at(data, 3));
    let input = data.get(5..).unwrap_or_default();
    let input = &input[..input.len().min(MAX_INPUT)];
    let params = params(flags);
    let max = if flags & 4 != 0 { 64 } else { 64 * 1024 };
    let decoder = || MessageDecoder::new(Role::Server, max, params.as_ref());

    let whole = feed(&mut decoder(), &[input], max);
    let (a, b) = (first.min(input.len()), second.min(input.len()));
    let (low, high) = (a.min(b), a.max(b));
    let three = feed(
        &mut decoder(),
        &[&input[..low], &input[low..high], &input[high..]],
        max,
    );
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let by_byte = feed(&mut decoder(), &bytes, max);
    assert_eq!(
        three,
        whole,
        "three pieces at {low}, {high}: {}",
        show(input)
    );
    assert_eq!(by_byte, whole, "byte by byte: {}", show(input));
    if whole.error.is_none() {
        assert_eq!(whole.consumed, input.len());
    }

    reencode(&whole.items, params.as_ref(), max);
    connection(input, params.as_ref(), max, &whole);
}

/// Encodes `items` as a client would and checks they decode to themselves.
fn reencode(items: &[Item], params: Option<&DeflateParams>, max: usize) {
    let mut encoder = MessageEncoder::new(Role::Client, params);
    encoder.set_mask_key([0x5a, 0x01, 0xff, 0x80]);
    let mut wire = Vec::new();
    for item in items {
        match item {
            Item::Message(kind, payload) => encoder.message(&mut wire, *kind, payload),
            Item::Ping(payload) => encoder.ping(&mut wire, payload).unwrap(),
            Item::Pong(payload) => encoder.pong(&mut wire, payload).unwrap(),
            Item::Close(code, reason) => encoder
                .close(&mut wire, *code, std::str::from_utf8(reason).unwrap())
                .unwrap(),
        }
    }
    let again = feed(
        &mut MessageDecoder::new(Role::Server, max, params),
        &[&wire],
        max,
    );
    assert_eq!(again.error, None, "re-encoded items refused");
    assert_eq!(again.items, items, "re-encoded items differ");
}

/// Runs the bytes through a server [`Connection`] and checks what it does.
fn connection(input: &[u8], params: Option<&DeflateParams>, max: usize, decoded: &Outcome) {
    let mut server = Connection::new(Role::Server, max, params);
    let (mut message, mut out) = (Vec::new(), Vec::new());
    let mut offset = 0;
    let mut disconnects = 0;
    let mut pings = 0;
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
    assert_eq!(offset, input.len(), "a connection consumes all its input");
    assert!(disconnects <= 1, "more than one disconnect");
    if server.state() == ConnectionState::Closed {
        assert_eq!(disconnects, 1, "closed without a disconnect");
        assert_eq!(server.receive(b"\x81", &mut message, &mut out), (1, None));
    }
    if disconnects == 1 {
        assert_eq!(server.transport_closed(), None, "a second disconnect");
    }
    // Everything written back is clean server-to-client traffic.
    let mut client = MessageDecoder::new(Role::Client, 1 << 20, None);
    let reply = feed(&mut client, &[&out], 1 << 20);
    assert_eq!(
        reply.error,
        None,
        "the server wrote invalid frames: {}",
        show(&out)
    );
    let mut closes = 0;
    for item in &reply.items {
        match item {
            Item::Pong(_) => pings += 1,
            Item::Close(..) => closes += 1,
            other => panic!("the server wrote {other:?} on its own"),
        }
        assert!(closes <= 1);
    }
    // Every ping the decoder saw before any close was answered.
    let expected_pongs = decoded
        .items
        .iter()
        .take_while(|item| !matches!(item, Item::Close(..)))
        .filter(|item| matches!(item, Item::Ping(_)))
        .count();
    assert_eq!(pings, expected_pongs, "pongs: {}", show(input));
}
