//! HTTP/2 on a connection (`--http 2` or `auto`): many requests at once,
//! each on its own stream, over one socket the worker's epoll loop owns.
//!
//! How it works: the protocol itself (frames, HPACK, flow control, the
//! streams' states) is `rush_h2::H2Connection`, sans-IO; this module is
//! the server around it. `drive.rs` feeds it the bytes read, turns its
//! events into request units (one [`H2Stream`] per open stream, keyed by
//! stream id in `session::H2Session`) dispatched through the same entry
//! HTTP/1.1 uses (`Core::dispatch`, so the native App, WSGI, ASGI and
//! static files answer over HTTP/2 unchanged), and writes what it owes
//! under the send-timeout rules of every connection; `request.rs` takes
//! one stream's request from its head to its outcome, and `stream_end.rs`
//! the streams the server ends itself (refusals, timeouts, cuts, each with
//! its access-log line). `writer.rs` is this
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
pub(crate) mod engine;
mod request;
pub(crate) mod session;
mod stream_end;
pub(crate) mod websocket;
mod writer;

use rush_h2::{detect_preface, Preface};

use crate::conn::{Connection, Protocol};
use crate::dispatch::Core;
use crate::options::HttpMode;

pub(crate) use session::{H2Session, H2Stream, StreamBody, StreamOut};
pub(crate) use writer::StreamWriter;

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
        // RFC 8441's setting, when the app takes WebSockets.
        let mut session = H2Session::new(self.offers_websocket());
        session.conn.feed(&connection.input);
        connection.input = Vec::new();
        // The HTTP/1.1 head timer no longer applies: HTTP/2 keeps its own.
        connection.deadline = Some(self.now + self.config.keep_alive_timeout);
        connection.protocol = Protocol::Http2(Box::new(session));
        Pick::Http2
    }
}
