//! The state of one HTTP/2 connection and its streams, apart from the code
//! that drives it (`drive.rs`) and writes responses (`writer.rs`): the
//! connection (`crate::conn::Protocol::Http2`) holds it, so it names
//! nothing above the request unit.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use rush_h2::{Bytes, H2Connection, H2Settings};

use super::engine::Engine;
use rush_proto::RequestHead;

use crate::body::BodyBuffer;
use crate::inflight::RequestUnit;
use crate::options::LINGER_TIMEOUT;

/// One HTTP/2 connection's state beside its transport: the protocol
/// engine and the streams being answered.
pub struct H2Session {
    /// The sans-IO protocol engine: HTTP/2, or HTTP/3 over QUIC.
    pub(crate) conn: Engine,
    /// The requests being answered, by stream id.
    /// Keyed with foldhash (per process, as the proxy pool's): looked up
    /// several times per request, where SipHash cost about 3% of an HTTP/3
    /// one; the ids are the peer's but bounded by the stream limits.
    pub(crate) streams: HashMap<u32, H2Stream, foldhash::fast::RandomState>,
    /// `H2Connection` reported `Closed`: write what is left, then close.
    pub(crate) closed: bool,
    /// A graceful shutdown was asked for (drain, idle timeout).
    pub(crate) shutdown_requested: bool,
    /// After the last frame: the write side is shut and input is
    /// discarded until the peer closes or the linger's time ends, as
    /// HTTP/1.1 refusals linger, so the peer reads the GOAWAY rather than
    /// a reset.
    pub(crate) lingering: bool,
    /// Stream ids a pass walks while it drives the streams (which borrow
    /// the connection): kept between passes so a drive allocates no list.
    pub(crate) scratch_ids: Vec<u32>,
    /// The earliest `--body-timeout` deadline of a stream whose request
    /// body waits on the client (see [`H2Stream::body_deadline`]): the
    /// sweep wakes the connection then, and the drive resets the overdue
    /// streams. Kept apart from the connection's deadline, which is the
    /// keep-alive's and the shutdown's.
    pub(crate) body_deadline: Option<Instant>,
    /// Input read past the connection's frame budget for a turn
    /// (`FRAMES_PER_TURN`): fed first on its next turn, before the socket
    /// is read again.
    pub(crate) unfed: Vec<u8>,
}

impl H2Session {
    /// A session; `websocket`: offer RFC 8441's extended CONNECT
    /// (`SETTINGS_ENABLE_CONNECT_PROTOCOL`), so clients may open WebSockets.
    pub(crate) fn new(websocket: bool) -> H2Session {
        let settings = H2Settings {
            enable_connect_protocol: websocket,
            ..H2Settings::default()
        };
        H2Session::with_engine(Engine::Http2(H2Connection::new(settings)))
    }

    /// The session of an HTTP/3 connection (`crate::http3`).
    pub(crate) fn quic(conn: Box<rush_h3::H3Conn>) -> H2Session {
        H2Session::with_engine(Engine::Http3(conn))
    }

    fn with_engine(conn: Engine) -> H2Session {
        H2Session {
            conn,
            streams: HashMap::default(),
            closed: false,
            shutdown_requested: false,
            lingering: false,
            scratch_ids: Vec::new(),
            body_deadline: None,
            unfed: Vec::new(),
        }
    }

    /// Starts a graceful shutdown (GOAWAY; the streams in flight finish).
    pub(crate) fn shut_down(&mut self) {
        if !self.shutdown_requested {
            self.shutdown_requested = true;
            self.conn.graceful_shutdown();
        }
    }

    /// Closes a connection with no stream open (idle past
    /// `--keep-alive-timeout`): GOAWAY at once, as nginx does, rather than
    /// the graceful round trip, which waits on a PING the idle client may
    /// never answer. A request it sent meanwhile is beyond GOAWAY's last
    /// stream id: not processed, safe to retry.
    pub(crate) fn close_idle(&mut self) {
        self.shutdown_requested = true;
        self.conn.abrupt_shutdown(rush_h2::Reason::NO_ERROR);
    }

    /// Adds to `stalled` the streams whose queued response data has not
    /// moved for `send_timeout`: a peer that never opens its window (slow
    /// read, CVE-2019-9517) holds nothing on the socket, so the
    /// connection's own send deadline never starts. Called by the worker's
    /// sweep (once a second), which resets them (CANCEL) and logs them as
    /// cut (`Core::http2_stream_cut`): their apps are told the client left.
    pub(crate) fn find_stalled_streams(
        &mut self,
        now: Instant,
        send_timeout: Duration,
        stalled: &mut Vec<u32>,
    ) {
        for (&id, stream) in self.streams.iter_mut() {
            if self.conn.pending_send(id) == 0 {
                stream.send_watch = None;
                continue;
            }
            let sent = self.conn.sent(id);
            match stream.send_watch {
                Some((watched, since)) if watched == sent => {
                    if now.saturating_duration_since(since) >= send_timeout {
                        stalled.push(id);
                    }
                }
                _ => stream.send_watch = Some((sent, now)),
            }
        }
    }

    /// The request unit of stream `id`, if it is being answered.
    pub(crate) fn unit(&self, id: u32) -> Option<&RequestUnit> {
        self.streams.get(&id).map(|stream| &stream.unit)
    }
}

impl Drop for H2Session {
    /// The connection closed while streams were answered: each running
    /// app is told its client is gone (ASGI `http.disconnect`). The
    /// worker cuts (and logs) its streams before it drops a connection
    /// (`Core::http2_cut_all`); this is the backstop.
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
    /// The request said `TE: trailers`: the response may end with trailer
    /// fields (an ASGI app's `http.response.trailers`).
    pub(crate) takes_trailers: bool,
    /// When the request body last moved (a DATA frame arrived, or the app
    /// took a chunk): `--body-timeout` runs from here while the stream
    /// waits on the client for more.
    pub(crate) body_progress: Instant,
    /// While response data waits on the peer's windows: the bytes sent
    /// when it was last seen moving, and when (`find_stalled_streams`).
    pub(crate) send_watch: Option<(u64, Instant)>,
    /// The stream is a WebSocket (an extended CONNECT, RFC 8441): its
    /// DATA carries frames both ways (`super::websocket`).
    pub(crate) websocket: Option<Box<H2WebSocket>>,
}

/// A WebSocket on one HTTP/2 stream (RFC 8441): the session state the
/// HTTP/1.1 WebSocket keeps on its connection, and what the stream adds.
pub(crate) struct H2WebSocket {
    /// The loop's side of the WebSocket, as over HTTP/1.1; dropping it
    /// tells the app the client is gone (1006 unless a close was done).
    pub(crate) session: crate::ws::session::WsSession,
    /// Received DATA not yet decoded into messages (the app's queue was
    /// full): its flow-control credit is released only as it is decoded,
    /// so a client that outruns its app is held by the stream's window.
    pub(crate) input: Vec<u8>,
    /// The client ended its side of the stream (END_STREAM).
    pub(crate) input_ended: bool,
    /// The handshake was answered (200, or the denial's status): its
    /// access-log line was written.
    pub(crate) answered: bool,
    /// Until the app answers the handshake: when it stops waiting for it
    /// (`--body-timeout`, as over HTTP/1.1).
    pub(crate) accept_deadline: Option<Instant>,
    /// When the server ended its side (END_STREAM after the closing
    /// handshake): the client has the close timeout to end its own.
    pub(crate) end_sent: Option<Instant>,
}

impl H2Session {
    /// The ids of the streams `selected` picks, in the session's reusable
    /// list (`scratch_ids`): a pass walks them while it drives each stream
    /// (which borrows the connection), then gives the list back with
    /// `session.scratch_ids = ids`, so a drive allocates no list.
    pub(crate) fn stream_ids(&mut self, mut selected: impl FnMut(&H2Stream) -> bool) -> Vec<u32> {
        let mut ids = std::mem::take(&mut self.scratch_ids);
        ids.clear();
        ids.extend(
            self.streams
                .iter()
                .filter(|(_, stream)| selected(stream))
                .map(|(&id, _)| id),
        );
        ids
    }

    /// Whether one of the streams is the WebSocket session `id` (the flush
    /// queue names sessions, not streams).
    pub(crate) fn has_websocket(&self, id: u64) -> bool {
        self.streams.values().any(|stream| {
            stream
                .websocket
                .as_ref()
                .is_some_and(|websocket| websocket.session.id == id)
        })
    }
}

impl H2Stream {
    /// When the stream's request body is overdue, if it waits on the
    /// client: a body being collected, or one an app reads as it comes
    /// whose queue is empty (a full queue waits on the app, not the
    /// client, which flow control holds back meanwhile).
    pub(crate) fn body_deadline(&self, body_timeout: Duration) -> Option<Instant> {
        let waits_on_client = match &self.body {
            StreamBody::Collect { .. } => true,
            StreamBody::ToApp { waiting, ended, .. } => waiting.is_empty() && !ended,
            // Drained after a refusal only while the client keeps sending.
            StreamBody::Discard { .. } => return Some(self.body_progress + LINGER_TIMEOUT),
            StreamBody::Done => false,
        };
        waits_on_client.then(|| self.body_progress + body_timeout)
    }
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
        /// Bytes received so far, held to `--max-body-size` as a
        /// collected body is (a stream need not declare its length).
        received: u64,
    },
    /// Refused (413) before the client finished sending it: what still
    /// comes is released and dropped, as HTTP/1.1's lingering close does,
    /// so that a client still uploading (httpx cannot take a reset while it
    /// sends) reads the answer. The stream stays until the body ends, or
    /// the client stalls for `LINGER_TIMEOUT` or sends more than
    /// `LINGER_MAX_BYTES`; then `h2` resets it with NO_ERROR.
    Discard {
        /// Bytes dropped since the refusal.
        discarded: usize,
    },
}

/// A final head, and the body parts after it, not yet handed to
/// `H2Connection`, so that a retract can still take them back (see
/// `super::writer`).
pub(crate) struct HeldResponse {
    pub(crate) head: rush_h2::ResponseHead,
    /// The head ends the stream (no body follows).
    pub(crate) head_ends: bool,
    /// The stream's send count before the head: a retract to a mark at or
    /// before it takes all of this back.
    pub(crate) first_send: usize,
    pub(crate) body: Vec<Bytes>,
    /// The body bytes in `body` (counted against the stream's water marks).
    pub(crate) body_bytes: usize,
    /// The last part in `body` ends the stream.
    pub(crate) body_ends: bool,
}

/// Where one stream's response stands.
#[derive(Default)]
pub(crate) struct StreamOut {
    /// The final head was sent (it may still be held).
    pub(crate) head_sent: bool,
    /// Its status, for the access log of a stream cut off mid-response.
    pub(crate) status: u16,
    /// Body bytes handed on so far (held or queued): the length logged
    /// for a stream cut off mid-response, as HTTP/1.1 logs the bytes it
    /// wrote before its client left.
    pub(crate) body_bytes: u64,
    /// The response ended (END_STREAM queued) or the stream was reset:
    /// later sends are dropped.
    pub(crate) ended: bool,
    /// A HEAD request or a bodyless status: body parts are not sent.
    pub(crate) discard: bool,
    /// Body bytes still owed under a known length: the last of them ends
    /// the stream (a file or a `Content-Length` body has no explicit end).
    pub(crate) remaining: Option<u64>,
    /// A file body still being read into DATA frames.
    pub(crate) file: Option<(std::rc::Rc<std::fs::File>, u64, u64)>,
    /// A final head and body parts not yet handed to `H2Connection`, so
    /// that a retract can still take them back (`super::writer`).
    pub(crate) held: Option<Box<HeldResponse>>,
    /// Sends so far, for `response_mark`/`retract`.
    pub(crate) sends: usize,
}
