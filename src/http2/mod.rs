//! HTTP/2 on a connection (`--http 2` or `auto`): many requests at once,
//! each on its own stream, over one socket the worker's epoll loop owns.
//!
//! How it works: the protocol itself (frames, HPACK, flow control, the
//! streams' states) is `rush_h2::H2Connection`, sans-IO; this module is
//! the server around it. `drive.rs` feeds it the bytes read, turns its
//! events into request units (one [`H2Stream`] per open stream, keyed by
//! stream id in [`H2Session::streams`]) dispatched through the same entry
//! HTTP/1.1 uses (`Core::dispatch`, so the native App, WSGI, ASGI and
//! static files answer over HTTP/2 unchanged), and writes what it owes
//! under the send-timeout rules of every connection. `writer.rs` is this
//! protocol's side of the response-writer seam: a [`StreamWriter`] frames
//! one stream's response as HEADERS and DATA through the connection.
//!
//! A request reaches the interfaces in rush-proto's head form (the
//! interfaces read `RequestHead` spans): the driver writes the HTTP/2 head
//! as an HTTP/1.1 head (`:authority` as `Host`, repeated `cookie` fields
//! joined with `; `, pseudo-fields and connection-specific fields left
//! out), parses it with the same parser and limits, and marks it
//! `Version::Http2`, which the interfaces report (`http_version: "2"`,
//! `SERVER_PROTOCOL: HTTP/2`).
//!
//! Which protocol a connection speaks is decided on its first bytes
//! ([`Core::pick_protocol`]): ALPN over TLS, the client preface in clear.

mod drive;
mod writer;

use std::collections::{HashMap, VecDeque};

use rush_h2::{detect_preface, Bytes, H2Connection, H2Settings, Preface};
use rush_proto::RequestHead;

use crate::body::BodyBuffer;
use crate::conn::{Connection, Protocol};
use crate::dispatch::Core;
use crate::inflight::RequestUnit;
use crate::options::HttpMode;

pub(crate) use writer::{StreamOut, StreamWriter};

/// One HTTP/2 connection's state beside its transport: the protocol
/// engine and the streams being answered.
pub struct H2Session {
    /// The sans-IO HTTP/2 connection.
    pub(crate) conn: H2Connection,
    /// The requests being answered, by stream id.
    pub(crate) streams: HashMap<u32, H2Stream>,
    /// `H2Connection` reported `Closed`: write what is left, then close.
    pub(crate) closed: bool,
    /// A graceful shutdown was asked for (drain, idle timeout).
    pub(crate) shutdown_requested: bool,
    /// After the last frame: the write side is shut and input is
    /// discarded (this many bytes so far) until the peer closes, as
    /// HTTP/1.1 refusals linger, so the peer reads the GOAWAY rather than
    /// a reset.
    pub(crate) lingering: Option<usize>,
}

impl H2Session {
    fn new() -> H2Session {
        H2Session {
            conn: H2Connection::new(H2Settings::default()),
            streams: HashMap::new(),
            closed: false,
            shutdown_requested: false,
            lingering: None,
        }
    }

    /// Starts a graceful shutdown (GOAWAY; the streams in flight finish).
    pub(crate) fn shut_down(&mut self) {
        if !self.shutdown_requested {
            self.shutdown_requested = true;
            self.conn.graceful_shutdown();
        }
    }

    /// The request unit of stream `id`, if it is being answered.
    pub(crate) fn unit(&self, id: u32) -> Option<&RequestUnit> {
        self.streams.get(&id).map(|stream| &stream.unit)
    }
}

impl Drop for H2Session {
    /// The connection closed while streams were answered: each running
    /// app is told its client is gone (ASGI `http.disconnect`).
    fn drop(&mut self) {
        for stream in self.streams.values() {
            if let Some(in_flight) = &stream.unit.in_flight {
                in_flight.client_gone();
            }
        }
    }
}

/// One request being answered on a stream.
pub(crate) struct H2Stream {
    /// What the request owns while it is answered (its Python side, its
    /// origin, its clock), as HTTP/1.1 keeps one per connection.
    pub(crate) unit: RequestUnit,
    /// Where its response stands.
    pub(crate) out: StreamOut,
    /// Where its request body stands.
    pub(crate) body: StreamBody,
    /// The response is complete (its outcome came): the stream stays only
    /// while a file body is still being read into DATA frames.
    pub(crate) answered: bool,
}

/// A stream's request body as it arrives.
pub(crate) enum StreamBody {
    /// None follows (or it ended and was handed over).
    Done,
    /// Collected whole, then the request is dispatched (the native App,
    /// WSGI, and ASGI on a static path take complete bodies).
    Collect {
        head_bytes: Vec<u8>,
        head: Box<RequestHead>,
        buffer: BodyBuffer,
        received: u64,
    },
    /// Handed to a running ASGI app as it comes: chunks wait here (their
    /// flow-control credit unreleased) while the app's queue is full.
    ToApp {
        waiting: VecDeque<Bytes>,
        ended: bool,
    },
    /// Refused (413): what still comes is released and dropped.
    Discard,
}

/// What a connection's first bytes decided.
pub(crate) enum Pick {
    Http1,
    Http2,
    NeedMore,
}

impl Core {
    /// On a connection whose protocol is not decided yet (`--http 2` or
    /// `auto`), once bytes arrived: HTTP/2 if ALPN chose `h2`, if `--http
    /// 2` serves nothing else, or (cleartext `auto`) if the bytes are the
    /// client preface. HTTP/2 takes the connection over with those bytes.
    pub(crate) fn pick_protocol(&self, connection: &mut Connection) -> Pick {
        let h2 = match (self.config.http, connection.stream.tls()) {
            (HttpMode::Http1, _) => false,
            (HttpMode::Http2, _) => true,
            (HttpMode::Auto, Some(tls)) => tls.negotiated_h2(),
            (HttpMode::Auto, None) => match detect_preface(&connection.input) {
                Preface::Http2 => true,
                Preface::Http1 => false,
                Preface::NeedMore => return Pick::NeedMore,
            },
        };
        connection.protocol_pending = false;
        if !h2 {
            return Pick::Http1;
        }
        let mut session = H2Session::new();
        session.conn.feed(&connection.input);
        connection.input = Vec::new();
        // The HTTP/1.1 head timer no longer applies: HTTP/2 keeps its own.
        connection.deadline = Some(self.now + self.config.keep_alive_timeout);
        connection.protocol = Protocol::Http2(Box::new(session));
        Pick::Http2
    }
}
