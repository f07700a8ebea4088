//! Test harness for rush-h2: an `H2Connection` and a real HTTP/2 client
//! (the `h2` crate's) joined by in-memory buffers, and a small frame codec
//! for the peers that misbehave on purpose (no HPACK beyond literals and the
//! static table, which is all the attack tests need).
#![allow(dead_code)]

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use rush_h2::io::{Buffers, MemoryIo};
use rush_h2::{Event, H2Connection, H2Settings};

pub fn cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

/// A server connection and an `h2` client talking through memory.
pub struct Pair {
    pub server: H2Connection,
    pub client_bufs: Rc<RefCell<Buffers>>,
    pub client: h2::client::SendRequest<Bytes>,
    pub client_conn: h2::client::Connection<MemoryIo, Bytes>,
    pub events: Vec<Event>,
}

impl Pair {
    pub fn new(settings: H2Settings) -> Pair {
        Pair::with_client(settings, h2::client::Builder::new())
    }

    pub fn with_client(settings: H2Settings, builder: h2::client::Builder) -> Pair {
        let mut server = H2Connection::new(settings);
        let client_bufs = Rc::new(RefCell::new(Buffers {
            output_limit: usize::MAX,
            ..Buffers::default()
        }));
        let mut handshake = Box::pin(builder.handshake::<_, Bytes>(MemoryIo(client_bufs.clone())));
        let mut events = Vec::new();
        let (client, client_conn) = loop {
            if let Poll::Ready(r) = handshake.as_mut().poll(&mut cx()) {
                break r.expect("client handshake");
            }
            assert!(
                move_bytes(&mut server, &client_bufs, &mut events),
                "handshake stalled"
            );
        };
        let mut pair = Pair {
            server,
            client_bufs,
            client,
            client_conn,
            events,
        };
        pair.pump();
        pair
    }

    /// Polls the client and moves bytes both ways until nothing moves.
    pub fn pump(&mut self) {
        for _ in 0..100_000 {
            let _ = Pin::new(&mut self.client_conn).poll(&mut cx());
            if !move_bytes(&mut self.server, &self.client_bufs, &mut self.events) {
                let _ = Pin::new(&mut self.client_conn).poll(&mut cx());
                if !move_bytes(&mut self.server, &self.client_bufs, &mut self.events) {
                    return;
                }
            }
        }
        panic!("pump never settled");
    }

    /// Takes the events seen so far.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }
}

/// One step: client output to the server, server events collected, server
/// output to the client. True if any byte moved.
fn move_bytes(
    server: &mut H2Connection,
    client: &Rc<RefCell<Buffers>>,
    events: &mut Vec<Event>,
) -> bool {
    let to_server = std::mem::take(&mut client.borrow_mut().output);
    let mut moved = !to_server.is_empty();
    server.feed(&to_server);
    while let Some(e) = server.poll_event() {
        events.push(e);
    }
    let mut out = Vec::new();
    server.take_output(&mut out);
    moved |= !out.is_empty();
    client.borrow_mut().input.extend_from_slice(&out);
    while let Some(e) = server.poll_event() {
        events.push(e);
    }
    moved
}

/// Polls a future once with a no-op waker.
pub fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    Pin::new(f).poll(&mut cx())
}

// ---- A raw frame codec for misbehaving peers ------------------------------

pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;

pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;

pub fn frame(ty: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, ty, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// The client preface and an empty SETTINGS frame.
pub fn client_start() -> Vec<u8> {
    let mut v = rush_h2::PREFACE.to_vec();
    v.extend(frame(SETTINGS, 0, 0, &[]));
    v
}

/// The same with settings (id, value).
pub fn client_start_with(settings: &[(u16, u32)]) -> Vec<u8> {
    let mut v = rush_h2::PREFACE.to_vec();
    let mut p = Vec::new();
    for (id, value) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&value.to_be_bytes());
    }
    v.extend(frame(SETTINGS, 0, 0, &p));
    v
}

/// An HPACK string literal, no Huffman coding (lengths under 127 only).
pub fn hpack_str(s: &[u8]) -> Vec<u8> {
    assert!(s.len() < 127);
    let mut v = vec![s.len() as u8];
    v.extend_from_slice(s);
    v
}

/// A GET / header block: static-table indexes and one literal authority.
pub fn get_block() -> Vec<u8> {
    let mut b = vec![0x82, 0x86, 0x84]; // :method GET, :scheme http, :path /
    b.push(0x01); // literal without indexing, name :authority (index 1)
    b.extend(hpack_str(b"example.com"));
    b
}

pub fn get_headers(stream: u32, end_stream: bool) -> Vec<u8> {
    let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
    frame(HEADERS, flags, stream, &get_block())
}

/// A parsed frame of server output.
#[derive(Debug, Clone)]
pub struct Frame {
    pub ty: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// The error code of a RST_STREAM or GOAWAY frame.
    pub fn error_code(&self) -> u32 {
        let at = if self.ty == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().unwrap())
    }
}

/// Splits server output into frames (it never starts with a preface).
pub fn parse_frames(mut bytes: &[u8]) -> Vec<Frame> {
    let mut frames = Vec::new();
    while bytes.len() >= 9 {
        let len = (bytes[0] as usize) << 16 | (bytes[1] as usize) << 8 | bytes[2] as usize;
        assert!(bytes.len() >= 9 + len, "truncated frame in server output");
        frames.push(Frame {
            ty: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes(bytes[5..9].try_into().unwrap()) & 0x7fff_ffff,
            payload: bytes[9..9 + len].to_vec(),
        });
        bytes = &bytes[9 + len..];
    }
    assert!(bytes.is_empty(), "trailing bytes in server output");
    frames
}

/// A server fed raw bytes; its output collected.
pub struct Raw {
    pub server: H2Connection,
    pub output: Vec<u8>,
    pub events: Vec<Event>,
}

impl Raw {
    pub fn new(settings: H2Settings) -> Raw {
        Raw {
            server: H2Connection::new(settings),
            output: Vec::new(),
            events: Vec::new(),
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        self.server.feed(bytes);
        self.settle();
    }

    pub fn settle(&mut self) {
        while let Some(e) = self.server.poll_event() {
            self.events.push(e);
        }
        self.server.take_output(&mut self.output);
        while let Some(e) = self.server.poll_event() {
            self.events.push(e);
        }
    }

    pub fn frames(&self) -> Vec<Frame> {
        parse_frames(&self.output)
    }

    pub fn goaway(&self) -> Option<Frame> {
        self.frames().into_iter().find(|f| f.ty == GOAWAY)
    }

    pub fn closed(&self) -> bool {
        self.events
            .iter()
            .any(|e| matches!(e, Event::Closed { .. }))
    }

    pub fn requests(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, Event::Request { .. }))
            .count()
    }
}
