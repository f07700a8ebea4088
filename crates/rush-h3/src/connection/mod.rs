//! One HTTP/3 server connection over one QUIC connection, owned by the
//! server: [`H3Conn`], `h3` driven from memory.
//!
//! The server keeps one [`H3Conn`] per QUIC connection (in its own slab, as
//! it keeps an HTTP/2 connection) and an [`crate::H3Router`] that routes
//! datagrams to it. Its commands mirror `rush_h2::H2Connection`'s, so the
//! server can drive both through one enum.
//!
//! `h3`'s server API is async: building the connection (its SETTINGS),
//! accepting a request, reading its head and writing a response are futures.
//! They run here as tasks of a tiny executor polled with a no-op waker: one
//! task owns `h3`'s connection and accepts request streams, one per new
//! stream reads its head, one per answered stream writes the response from a
//! queue of commands. The request body is read directly with `h3`'s
//! `poll_recv_data`, and only while the application holds less than a
//! stream window of it unreleased, so QUIC flow control makes a client wait
//! for a slow application. As nothing is woken, `drive` polls
//! every task and every receiving stream after each packet, timeout and
//! command, until a pass changes nothing.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use bytes::{Buf, Bytes};
use h3::error::{Code, StreamError};
use h3::server::RequestStream;
use http::{header, HeaderMap, HeaderName, HeaderValue, Response};
use quinn_proto::{ConnectionEvent, Transmit, VarInt};

use crate::messages::{Event, H3Error, RequestHead};
use crate::quic::{QuicConnection, RecvHalf, SendHalf};
use crate::settings::H3Settings;

// The connection's parts, each an `impl H3Conn` (or the tasks it runs):
// commands.rs what the server tells it, drive.rs how it runs `h3` and
// settles, tasks.rs the async tasks `h3`'s server API needs.
mod commands;
mod drive;
mod tasks;

use tasks::{accept_task, reset_event, writer_task};

/// A packet (or another event) for one connection, from
/// [`crate::H3Router::handle_datagram`]: give it to
/// [`H3Conn::handle_event`].
#[derive(Debug)]
pub struct ConnEvent {
    pub(crate) event: ConnectionEvent,
    /// The datagram's size: bytes received, for the flood meter.
    pub(crate) len: usize,
}

type Task = Pin<Box<dyn Future<Output = ()>>>;

/// Passes over the tasks and streams per drive: each pass that changed
/// something may have unblocked another; a bound keeps a turn finite.
const MAX_PASSES: usize = 16;

/// What the tasks hand back to the connection.
#[derive(Default)]
struct Shared {
    /// Tasks spawned by tasks, started on the next pass.
    spawned: Vec<Task>,
    /// Request heads read, in order.
    resolved: VecDeque<Resolved>,
    /// Streams whose head could not be read (reset, malformed).
    resolve_failed: usize,
    /// Streams accepted whose head is still being read.
    resolving: usize,
    /// Request streams `h3` accepted so far.
    accepted: u64,
    /// The application asked for a graceful shutdown.
    shutdown_requested: bool,
    /// GOAWAY went out with this stream id: streams at or above it are
    /// refused.
    goaway_id: Option<u64>,
    /// `h3`'s connection ended (an error, or the QUIC connection closed).
    ended: Option<String>,
}

struct Resolved {
    id: u64,
    head: RequestHead,
    send: RequestStream<SendHalf, Bytes>,
    recv: RequestStream<RecvHalf, Bytes>,
}

/// One response command, queued for the stream's writer task.
enum Command {
    Head(Response<()>),
    Data(Bytes),
    Trailers(HeaderMap),
    Finish,
}

#[derive(Default)]
struct SendQueue {
    commands: VecDeque<Command>,
    /// Body bytes in `commands`.
    bytes: usize,
    /// The writer finished the response.
    done: bool,
    /// The writer failed: the peer stopped the stream (its code) or the
    /// connection ended (`None` inside).
    failed: Option<Option<u64>>,
}

struct Stream {
    recv: Option<RequestStream<RecvHalf, Bytes>>,
    /// The body ended; trailers are read next.
    body_ended: bool,
    /// Body bytes delivered as `Data` and not yet released.
    unreleased: usize,
    queue: Rc<RefCell<SendQueue>>,
    head_sent: bool,
    end_sent: bool,
    /// A `SendReady` is owed when the queued body data has gone to QUIC.
    notify_drain: bool,
}

impl Stream {
    fn settled(&self) -> bool {
        self.recv.is_none() && self.queue.borrow().done
    }
}

/// A sans-IO HTTP/3 server connection: one QUIC connection and its HTTP/3
/// layer. The server owns it; [`crate::H3Router`] hands it its packets
/// ([`Routed::Event`](crate::Routed::Event)) and must be told, with
/// [`crate::H3Router::sync`], after anything happened to it.
///
/// The loop, per connection: [`handle_event`](Self::handle_event) or
/// [`handle_timeout`](Self::handle_timeout), then `sync`, then
/// [`poll_event`](Self::poll_event) until `None` (answering with commands,
/// `sync` again after them), then [`poll_transmit`](Self::poll_transmit)
/// until `None`, then arm a timer for [`poll_timeout`](Self::poll_timeout).
/// Commands read no clock: each takes effect at the `now` of the last call
/// that gave one.
pub struct H3Conn {
    pub(crate) quic: QuicConnection,
    tasks: Vec<Task>,
    shared: Rc<RefCell<Shared>>,
    streams: crate::StreamMap<u64, Stream>,
    pub(crate) events: VecDeque<Event>,
    settings: H3Settings,
    /// `Request` events waiting in `events`.
    waiting_requests: usize,
    /// Streams whose `Request` event was dropped undelivered (see
    /// [`H3Conn::poll_event`]): their later events are dropped too, up to
    /// their `Reset`.
    undelivered: Vec<u64>,
    /// The server takes no requests for now ([`H3Conn::hold_requests`]).
    holding: bool,
    /// The code of a CONNECTION_CLOSE decided (an abrupt shutdown, or a
    /// graceful one done): it goes out once what is queued, the GOAWAY
    /// among it, was transmitted, as it discards unsent stream data.
    close_pending: Option<u64>,
    /// A command changed something since the last `drive`: commands only
    /// queue, and the next `sync`, `poll_event` or `poll_transmit` drives
    /// once for all of them.
    dirty: bool,
    /// Responses complete whose last bytes the client has not acknowledged
    /// yet: a graceful close waits for them, as CONNECTION_CLOSE discards
    /// whatever is unsent.
    unacked: crate::StreamSet<u64>,
    /// CONNECTION_CLOSE was asked of quinn after a graceful shutdown.
    closing: bool,
    /// `Closed` was given.
    pub(crate) closed: bool,
    /// Request streams the client reset or stopped (or `h3` refused) before
    /// their response completed, less the responses completed since (see
    /// [`H3Settings::max_peer_reset_streams`]).
    reset_debt: usize,
    /// `Shared::resolve_failed` already counted in `reset_debt`.
    resolve_failed_seen: usize,
    /// Why the connection was closed with H3_EXCESSIVE_LOAD (rapid reset or
    /// a flood), once it was.
    calmed: Option<String>,
    /// Bytes of the datagrams routed to this connection (the flood meter's
    /// "received").
    received: u64,
    /// A datagram arrived since the last drive: the QPACK streams may have
    /// bytes, and the flood meter may have moved.
    input: bool,
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

impl H3Conn {
    pub(crate) fn new(quic: QuicConnection, settings: H3Settings) -> H3Conn {
        let shared = Rc::new(RefCell::new(Shared::default()));
        quic.0.borrow_mut().frame_limit = settings.max_field_section_size;
        let accept = Box::pin(accept_task(quic.clone(), shared.clone(), settings.clone()));
        let mut conn = H3Conn {
            quic,
            tasks: vec![accept],
            shared,
            streams: crate::StreamMap::default(),
            events: VecDeque::new(),
            settings,
            waiting_requests: 0,
            undelivered: Vec::new(),
            holding: false,
            close_pending: None,
            dirty: false,
            unacked: crate::StreamSet::default(),
            closing: false,
            closed: false,
            reset_debt: 0,
            resolve_failed_seen: 0,
            calmed: None,
            received: 0,
            input: false,
        };
        conn.drive();
        conn
    }
    /// The time of the last call that gave one.
    pub fn now(&self) -> Instant {
        self.quic.0.borrow().now
    }

    /// Hands the connection a packet (or another event) the router routed
    /// to it; then call [`crate::H3Router::sync`], which runs the HTTP/3
    /// layer once for everything that arrived.
    pub fn handle_event(&mut self, event: ConnEvent, now: Instant) {
        self.quic.handle_event(event.event, now);
        self.received += event.len as u64;
        self.input = true;
        self.dirty = true;
    }

    /// When [`handle_timeout`](Self::handle_timeout) must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.quic.poll_timeout()
    }

    /// Runs the connection's timers due at `now` (loss detection, idle
    /// timeout, the end of closing and draining); then call
    /// [`crate::H3Router::sync`].
    pub fn handle_timeout(&mut self, now: Instant) {
        self.quic.handle_timeout(now);
        self.dirty = true;
    }

    /// The next datagram to send, written into `buf` (cleared first; keep
    /// one buffer for every call). With `max_segments` above 1 (and
    /// [`H3Settings::max_gso_segments`] above 1, which lets quinn build
    /// them), `buf` may hold several datagrams of `segment_size` for one
    /// GSO send. Call until `None`.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        max_segments: usize,
    ) -> Option<Transmit> {
        if self.dirty {
            self.drive();
        }
        buf.clear();
        let segments = max_segments.max(1);
        let t = {
            let mut q = self.quic.0.borrow_mut();
            q.now = now;
            q.conn.poll_transmit(now, segments, buf)
        };
        if t.is_some() {
            return t;
        }
        // Everything queued (the GOAWAY) went out: now the
        // CONNECTION_CLOSE, which would have discarded it.
        let code = self.close_pending.take()?;
        self.close_now(code);
        buf.clear();
        self.quic
            .0
            .borrow_mut()
            .conn
            .poll_transmit(now, segments, buf)
    }

    /// The next event, if any.
    ///
    /// A request whose stream was reset, or whose connection closed, while
    /// its `Request` event still waited here is never delivered, nor are
    /// the events of its stream: no application starts for a client that
    /// is gone (as rush-h2 does).
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.dirty {
            self.drive();
        }
        loop {
            let event = self.events.pop_front()?;
            let stream = match &event {
                Event::Request { stream, .. } => {
                    self.waiting_requests = self.waiting_requests.saturating_sub(1);
                    if self.streams.contains_key(stream) {
                        return Some(event);
                    }
                    self.undelivered.push(*stream);
                    continue;
                }
                Event::Data { stream, .. }
                | Event::RequestEnd { stream, .. }
                | Event::Reset { stream, .. } => *stream,
                _ => return Some(event),
            };
            let Some(index) = self.undelivered.iter().position(|&id| id == stream) else {
                return Some(event);
            };
            if let Event::Reset { .. } = event {
                // The stream's last event: forget it.
                self.undelivered.swap_remove(index);
            }
        }
    }

    /// The client's address (its latest, after a migration).
    pub fn remote_address(&self) -> SocketAddr {
        self.quic.0.borrow().conn.remote_address()
    }

    /// The QUIC handshake is still in progress.
    pub fn is_handshaking(&self) -> bool {
        self.quic.0.borrow().conn.is_handshaking()
    }
}

impl std::fmt::Debug for H3Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H3Conn")
            .field("open_streams", &self.streams.len())
            .field("closed", &self.is_closed())
            .finish()
    }
}
fn quinn_stream(id: u64) -> quinn_proto::StreamId {
    // Client-initiated bidirectional: the only kind of request stream.
    quinn_proto::StreamId::new(quinn_proto::Side::Client, quinn_proto::Dir::Bi, id >> 2)
}
