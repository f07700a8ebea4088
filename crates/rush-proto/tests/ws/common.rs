//! Helpers shared by the WebSocket tests: raw frame building and a driver
//! that feeds a decoder in given pieces and records what it reports.

#![allow(dead_code)]

use rush_proto::ws::frame::apply_mask;
use rush_proto::ws::{Incoming, MessageDecoder, MessageKind, WsError};

/// The masking key the tests use for client frames.
pub const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// A raw frame: `first` is FIN/RSV/opcode as sent, the payload is masked
/// with `mask` if given. The length uses the shortest form.
pub fn raw(first: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![first];
    let mask_bit = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        length @ 0..=125 => out.push(mask_bit | length as u8),
        length @ 126..=0xFFFF => {
            out.push(mask_bit | 126);
            out.extend_from_slice(&(length as u16).to_be_bytes());
        }
        length => {
            out.push(mask_bit | 127);
            out.extend_from_slice(&(length as u64).to_be_bytes());
        }
    }
    if let Some(key) = mask {
        out.extend_from_slice(&key);
    }
    let data_start = out.len();
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[data_start..], key, 0);
    }
    out
}

/// A masked client frame.
pub fn client(first: u8, payload: &[u8]) -> Vec<u8> {
    raw(first, payload, Some(KEY))
}

/// What the decoder reported, in a form that compares easily.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(Option<u16>, String),
}

/// Everything reported for an input, and the error that ended it (with
/// the number of input bytes fed when it came).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub items: Vec<Item>,
    pub error: Option<(WsError, usize)>,
    pub consumed: usize,
}

/// Feeds `pieces` in order, each as soon as the previous one is used up.
pub fn decode_pieces(decoder: &mut MessageDecoder, pieces: &[&[u8]]) -> Outcome {
    let mut items = Vec::new();
    let mut payload = Vec::new();
    let mut fed = 0;
    let mut consumed = 0;
    for piece in pieces {
        fed += piece.len();
        let mut offset = 0;
        loop {
            match decoder.decode(&piece[offset..], &mut payload) {
                Err(error) => {
                    // The decoder stays failed.
                    assert_eq!(decoder.decode(b"\x81\x80", &mut payload), Err(error));
                    return Outcome {
                        items,
                        error: Some((error, fed)),
                        consumed,
                    };
                }
                Ok(progress) => {
                    offset += progress.consumed;
                    consumed += progress.consumed;
                    match progress.incoming {
                        None => {
                            assert_eq!(offset, piece.len(), "stopped early without reporting");
                            break;
                        }
                        Some(incoming) => items.push(match incoming {
                            Incoming::Message(MessageKind::Text) => {
                                Item::Text(String::from_utf8(std::mem::take(&mut payload)).unwrap())
                            }
                            Incoming::Message(MessageKind::Binary) => {
                                Item::Binary(std::mem::take(&mut payload))
                            }
                            Incoming::Ping(data) => Item::Ping(data.as_bytes().to_vec()),
                            Incoming::Pong(data) => Item::Pong(data.as_bytes().to_vec()),
                            Incoming::Close { code, reason } => {
                                Item::Close(code, reason.as_str().to_string())
                            }
                        }),
                    }
                }
            }
        }
    }
    Outcome {
        items,
        error: None,
        consumed,
    }
}
