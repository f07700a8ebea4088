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

    /// Polls tasks and streams until nothing changes, then settles the end
    /// of the connection.
    pub(crate) fn drive(&mut self) {
        self.dirty = false;
        if self.closed {
            return;
        }
        let input = std::mem::take(&mut self.input);
        if input {
            self.quic.0.borrow_mut().drain_qpack();
        }
        for _ in 0..MAX_PASSES {
            let mut progress = self.run_tasks();
            progress |= self.take_resolved();
            progress |= self.poll_bodies();
            progress |= self.poll_responses();
            if !progress {
                break;
            }
        }
        self.check_abuse(input);
        self.settle_connection();
    }

    /// Closes the connection with H3_EXCESSIVE_LOAD if the client reset
    /// too many requests before their answer (Rapid Reset), or sent far
    /// more than its requests and responses carried (a flood of frames,
    /// streams or packets that cost more than they bring).
    /// The flood meter is read only after a datagram (`input`): nothing
    /// else adds to what was received.
    fn check_abuse(&mut self, input: bool) {
        if self.calmed.is_some() || self.is_closed() {
            return;
        }
        let failed = self.shared.borrow().resolve_failed;
        self.reset_debt += failed - self.resolve_failed_seen;
        self.resolve_failed_seen = failed;
        let reason = if self.reset_debt > self.settings.max_peer_reset_streams {
            format!(
                "rapid reset: {} request streams reset before their response",
                self.reset_debt
            )
        } else {
            let useful = self.quic.0.borrow().useful;
            if !input || !self.settings.flood.flooded(self.received, useful) {
                return;
            }
            format!(
                "flood: {} bytes received for {useful} of requests and responses",
                self.received
            )
        };
        self.calmed = Some(reason);
        self.abrupt_shutdown(Code::H3_EXCESSIVE_LOAD);
    }

    fn run_tasks(&mut self) -> bool {
        let spawned = std::mem::take(&mut self.shared.borrow_mut().spawned);
        let mut progress = !spawned.is_empty();
        self.tasks.extend(spawned);
        let mut cx = noop_cx();
        let before = self.tasks.len();
        self.tasks
            .retain_mut(|t| t.as_mut().poll(&mut cx).is_pending());
        progress |= self.tasks.len() != before;
        progress |= !self.shared.borrow().spawned.is_empty();
        progress
    }

    fn take_resolved(&mut self) -> bool {
        let mut progress = false;
        loop {
            let Some(r) = self.shared.borrow_mut().resolved.pop_front() else {
                break;
            };
            progress = true;
            let goaway = self.shared.borrow().goaway_id;
            // Past the GOAWAY the client was told the request is not
            // processed; while the server holds requests, one past the few
            // waiting is refused the same way, so it may be retried (RFC
            // 9114 section 4.1.1) rather than kept.
            let held = self.holding && self.waiting_requests >= self.settings.max_waiting_requests;
            if goaway.is_some_and(|g| r.id >= g) || held || self.close_pending.is_some() {
                let mut send = r.send;
                let mut recv = r.recv;
                send.stop_stream(Code::H3_REQUEST_REJECTED);
                recv.stop_sending(Code::H3_REQUEST_REJECTED);
                continue;
            }
            let queue = Rc::new(RefCell::new(SendQueue::default()));
            self.tasks
                .push(Box::pin(writer_task(r.send, queue.clone())));
            self.streams.insert(
                r.id,
                Stream {
                    recv: Some(r.recv),
                    body_ended: false,
                    unreleased: 0,
                    queue,
                    head_sent: false,
                    end_sent: false,
                    notify_drain: false,
                },
            );
            self.quic.0.borrow_mut().written.insert(r.id, 0);
            let mut ev = Vec::new();
            let ended = self.poll_body(r.id, &mut ev);
            // A request whose stream already ended with no body and no
            // trailers says so in its head, as over HTTP/2.
            let no_body =
                ended && ev.len() == 1 && matches!(ev[0], Event::RequestEnd { trailers: None, .. });
            if no_body {
                ev.clear();
            }
            self.events.push_back(Event::Request {
                stream: r.id,
                head: r.head,
                end_stream: no_body,
            });
            self.waiting_requests += 1;
            self.events.extend(ev);
        }
        progress
    }

    fn poll_bodies(&mut self) -> bool {
        let ids: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.recv.is_some())
            .map(|(id, _)| *id)
            .collect();
        let mut ev = Vec::new();
        for id in ids {
            self.poll_body(id, &mut ev);
        }
        let progress = !ev.is_empty();
        self.events.extend(ev);
        progress
    }

    /// Reads what `stream` has of its body, within the window the
    /// application leaves; returns whether the request ended.
    fn poll_body(&mut self, id: u64, ev: &mut Vec<Event>) -> bool {
        let window = self.settings.stream_receive_window as usize;
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        let mut cx = noop_cx();
        while let Some(recv) = s.recv.as_mut() {
            if !s.body_ended {
                if s.unreleased >= window {
                    return false;
                }
                match recv.poll_recv_data(&mut cx) {
                    Poll::Pending => return false,
                    Poll::Ready(Ok(Some(mut buf))) => {
                        let data = buf.copy_to_bytes(buf.remaining());
                        s.unreleased += data.len();
                        if !data.is_empty() {
                            ev.push(Event::Data { stream: id, data });
                        }
                    }
                    Poll::Ready(Ok(None)) => s.body_ended = true,
                    Poll::Ready(Err(e)) => {
                        s.recv = None;
                        if !s.queue.borrow().done {
                            self.reset_debt += 1;
                        }
                        ev.push(reset_event(id, &e));
                        self.abort(id, Code::H3_REQUEST_CANCELLED.value());
                        return false;
                    }
                }
            } else {
                match recv.poll_recv_trailers(&mut cx) {
                    Poll::Pending => return false,
                    Poll::Ready(Ok(trailers)) => {
                        s.recv = None;
                        ev.push(Event::RequestEnd {
                            stream: id,
                            trailers,
                        });
                        return true;
                    }
                    Poll::Ready(Err(e)) => {
                        s.recv = None;
                        if !s.queue.borrow().done {
                            self.reset_debt += 1;
                        }
                        ev.push(reset_event(id, &e));
                        self.abort(id, Code::H3_REQUEST_CANCELLED.value());
                        return false;
                    }
                }
            }
        }
        false
    }

    /// Sees which writers finished, failed or emptied their queue.
    fn poll_responses(&mut self) -> bool {
        let mut progress = false;
        let mut gone = Vec::new();
        for (id, s) in self.streams.iter_mut() {
            let q = s.queue.borrow();
            if let Some(code) = q.failed {
                // The client stopped the response (STOP_SENDING).
                if code.is_some() {
                    self.reset_debt += 1;
                }
                self.events.push_back(Event::Reset { stream: *id, code });
                gone.push(*id);
            } else if s.settled() {
                self.reset_debt = self.reset_debt.saturating_sub(1);
                self.unacked.insert(*id);
                gone.push(*id);
            } else if s.notify_drain && q.bytes == 0 {
                s.notify_drain = false;
                if !s.end_sent {
                    self.events.push_back(Event::SendReady { stream: *id });
                }
            }
        }
        for id in gone {
            progress = true;
            self.abort(id, Code::H3_REQUEST_CANCELLED.value());
        }
        progress
    }

    fn forget(&mut self, id: u64) {
        let mut q = self.quic.0.borrow_mut();
        if !self.unacked.contains(&id) {
            q.finished.remove(&id);
        }
        q.written.remove(&id);
        drop(q);
        if let Some(s) = self.streams.remove(&id) {
            // The writer task ends on its own: its queue says so.
            let mut q = s.queue.borrow_mut();
            if !q.done && q.failed.is_none() {
                q.failed = Some(None);
                q.commands.clear();
            }
        }
    }

    fn settle_connection(&mut self) {
        let lost = self.quic.lost();
        if let Some(reason) = lost {
            let ids: Vec<u64> = self.streams.keys().copied().collect();
            for id in ids {
                self.events.push_back(Event::Reset {
                    stream: id,
                    code: None,
                });
                self.forget(id);
            }
            self.tasks.clear();
            let code = match &reason {
                quinn_proto::ConnectionError::ApplicationClosed(c) => {
                    Some(c.error_code.into_inner())
                }
                quinn_proto::ConnectionError::LocallyClosed => self.quic.0.borrow().closed_with,
                _ => None,
            };
            let clean = matches!(reason, quinn_proto::ConnectionError::LocallyClosed)
                && self.closing
                || code == Some(Code::H3_NO_ERROR.value());
            self.events.push_back(Event::Closed {
                code: code.filter(|_| !clean),
                error: (!clean).then(|| {
                    // h3 closed it itself (a protocol error): its account
                    // says more than quinn's "closed".
                    let h3 = self.calmed.clone().or(self.shared.borrow().ended.clone());
                    match (&reason, h3) {
                        (quinn_proto::ConnectionError::LocallyClosed, Some(e)) => e,
                        _ => reason.to_string(),
                    }
                }),
            });
            self.closed = true;
            return;
        }
        {
            let mut q = self.quic.0.borrow_mut();
            let finished = &mut q.finished;
            self.unacked.retain(|id| !finished.remove(id));
        }
        let sh = self.shared.borrow();
        let drained = sh.goaway_id.is_some()
            && self.streams.is_empty()
            && self.unacked.is_empty()
            && sh.resolving == 0;
        drop(sh);
        // GOAWAY sent and every admitted request answered: close with
        // H3_NO_ERROR once the GOAWAY went out (a client whose request
        // crossed it learns from it that the request was not processed).
        // An abrupt shutdown closes with its own code instead.
        if drained && !self.closing && self.close_pending.is_none() {
            self.closing = true;
            self.close_pending = Some(Code::H3_NO_ERROR.value());
        }
    }

    fn stream(&mut self, id: u64) -> Result<&mut Stream, H3Error> {
        self.streams.get_mut(&id).ok_or(H3Error::UnknownStream)
    }

    /// The time of the last call that gave one.
    pub(crate) fn now(&self) -> Instant {
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

    /// Sends a response head: a final one (status 200 to 999), or an
    /// informational one (100 to 199 but 101, e.g. 103 Early Hints), of
    /// which any number may precede the final head. `end_stream` (final
    /// heads only) means no body follows. Connection-specific fields
    /// (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`,
    /// `upgrade`), which RFC 9114 section 4.2 forbids, are dropped, as is
    /// `te`, and whitespace around a value is trimmed, as rush-h2 does.
    /// HTTP/3 has no 101 (RFC 9114 section 4.5): it is refused with
    /// [`H3Error::BadStatus`].
    pub fn send_response(
        &mut self,
        stream: u64,
        mut head: Response<()>,
        end_stream: bool,
    ) -> Result<(), H3Error> {
        let status = head.status();
        if status == http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(H3Error::BadStatus);
        }
        let informational = status.is_informational();
        http3_fields(head.headers_mut());
        let s = self.stream(stream)?;
        if s.head_sent {
            return Err(H3Error::HeadAlreadySent);
        }
        let mut q = s.queue.borrow_mut();
        q.commands.push_back(Command::Head(head));
        if !informational && end_stream {
            q.commands.push_back(Command::Finish);
        }
        drop(q);
        if !informational {
            s.head_sent = true;
            s.end_sent = end_stream;
        }
        self.dirty = true;
        Ok(())
    }

    /// Queues response body data on `stream`; `end_stream` ends the
    /// response. Data goes to QUIC as the client's windows allow; until
    /// then it waits here ([`pending_send`](Self::pending_send)), and an
    /// [`Event::SendReady`] says when it all went. Refused with
    /// [`H3Error::OutputFull`] past [`H3Settings::max_pending_send`] queued
    /// on the connection.
    pub fn send_data(&mut self, stream: u64, data: Bytes, end_stream: bool) -> Result<(), H3Error> {
        let limit = self.settings.max_pending_send;
        let pending = self.pending_send_total();
        let s = self.stream(stream)?;
        if !s.head_sent || s.end_sent {
            return Err(H3Error::NotSending);
        }
        if pending + data.len() > limit && !data.is_empty() {
            return Err(H3Error::OutputFull);
        }
        let mut q = s.queue.borrow_mut();
        q.bytes += data.len();
        if !data.is_empty() {
            q.commands.push_back(Command::Data(data));
            s.notify_drain = true;
        }
        if end_stream {
            q.commands.push_back(Command::Finish);
        }
        drop(q);
        s.end_sent |= end_stream;
        self.dirty = true;
        Ok(())
    }

    /// Ends the response on `stream` with trailer fields (after any queued
    /// data).
    pub fn send_trailers(&mut self, stream: u64, trailers: HeaderMap) -> Result<(), H3Error> {
        let s = self.stream(stream)?;
        if !s.head_sent || s.end_sent {
            return Err(H3Error::NotSending);
        }
        s.end_sent = true;
        let mut q = s.queue.borrow_mut();
        q.commands.push_back(Command::Trailers(trailers));
        q.commands.push_back(Command::Finish);
        drop(q);
        self.dirty = true;
        Ok(())
    }

    /// Abandons `stream` in both directions with `code` (RESET_STREAM and
    /// STOP_SENDING; H3_INTERNAL_ERROR when the application failed
    /// mid-response, H3_REQUEST_CANCELLED when it gave up). Queued data is
    /// dropped; no event follows. Unknown streams are ignored.
    pub fn reset(&mut self, stream: u64, code: Code) {
        if self.streams.contains_key(&stream) {
            self.abort(stream, code.value());
            self.dirty = true;
        }
    }

    /// Stops receiving `stream`'s request body (the client stalled, or the
    /// response no longer needs it): STOP_SENDING with H3_NO_ERROR, as RFC
    /// 9114 section 4.1 asks of a server that answers before the request
    /// is complete; what the client still sends is dropped by QUIC and
    /// counts against no window, and no more [`Event::Data`] comes for it.
    /// The response goes on. Unknown streams are ignored.
    pub fn stop_request_body(&mut self, stream: u64) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        if let Some(mut recv) = s.recv.take() {
            recv.stop_sending(Code::H3_NO_ERROR);
        }
        s.body_ended = true;
        s.unreleased = 0;
        self.dirty = true;
    }

    /// Whether `stream`'s request body may still bring data: it has not
    /// ended and [`stop_request_body`](Self::stop_request_body) was not
    /// called.
    pub fn request_body_open(&self, stream: u64) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.recv.is_some())
    }

    /// The application consumed `len` bytes of `stream`'s request body: no
    /// more than [`H3Settings::stream_receive_window`] is read from a
    /// stream while its bytes are held, so releasing lets the client send
    /// more.
    pub fn release(&mut self, stream: u64, len: usize) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.unreleased = s.unreleased.saturating_sub(len);
            self.dirty = true;
        }
    }

    /// Response body bytes queued on `stream` and not yet taken by QUIC (0
    /// for an unknown stream). A chunk given to
    /// [`send_data`](Self::send_data) counts here until QUIC took all of
    /// it.
    pub fn pending_send(&self, stream: u64) -> usize {
        self.streams
            .get(&stream)
            .map_or(0, |s| s.queue.borrow().bytes)
    }

    /// Response body bytes queued on every stream, not yet taken by QUIC:
    /// the memory this connection holds for the application's answers.
    pub fn pending_send_total(&self) -> usize {
        self.streams.values().map(|s| s.queue.borrow().bytes).sum()
    }

    /// Response bytes of `stream` QUIC took so far, HTTP/3 framing
    /// included (0 for an unknown stream): with
    /// [`pending_send`](Self::pending_send), how a server sees a stream
    /// whose client never opens its window (the count stands still while
    /// data waits).
    pub fn sent(&self, stream: u64) -> u64 {
        if !self.streams.contains_key(&stream) {
            return 0;
        }
        self.quic
            .0
            .borrow()
            .written
            .get(&stream)
            .copied()
            .unwrap_or(0)
    }

    /// The server takes no new requests for now (its output is over its
    /// share) or takes them again. While it holds them, requests past
    /// [`H3Settings::max_waiting_requests`] waiting (`Request` events not
    /// yet taken with [`poll_event`](Self::poll_event)) are refused with
    /// H3_REQUEST_REJECTED on both directions, which tells the client they
    /// were not processed and may be retried (RFC 9114 section 4.1.1),
    /// rather than decoded and kept, as rush-h2 refuses them with
    /// REFUSED_STREAM.
    pub fn hold_requests(&mut self, hold: bool) {
        self.holding = hold;
    }

    /// Sends GOAWAY; requests already admitted complete, later ones are
    /// refused with H3_REQUEST_REJECTED, and once the last is answered (and
    /// acknowledged) the connection closes with H3_NO_ERROR.
    pub fn graceful_shutdown(&mut self) {
        if self.is_closed() {
            return;
        }
        self.shared.borrow_mut().shutdown_requested = true;
        self.dirty = true;
    }

    /// Ends the connection now: every open stream is reset (an
    /// [`Event::Reset`] each), GOAWAY is queued, and CONNECTION_CLOSE with
    /// `code` follows as soon as [`poll_transmit`](Self::poll_transmit)
    /// has sent what was queued before it (a CONNECTION_CLOSE discards
    /// unsent stream data, the GOAWAY included). Then [`Event::Closed`].
    pub fn abrupt_shutdown(&mut self, code: Code) {
        if self.is_closed() {
            return;
        }
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            self.events.push_back(Event::Reset {
                stream: id,
                code: Some(code.value()),
            });
            self.abort(id, code.value());
        }
        self.close_pending = Some(code.value());
        self.shared.borrow_mut().shutdown_requested = true;
        self.dirty = true;
    }

    /// Ends both directions of a stream that did not complete (a no-op on
    /// a direction that did), and forgets it.
    fn abort(&mut self, id: u64, code: u64) {
        let done = self.streams.get(&id).is_some_and(|s| s.settled());
        if !done {
            let mut q = self.quic.0.borrow_mut();
            let sid = quinn_stream(id);
            let code = VarInt::from_u64(code).unwrap_or(VarInt::MAX);
            let _ = q.conn.send_stream(sid).reset(code);
            let _ = q.conn.recv_stream(sid).stop(code);
        }
        self.forget(id);
    }

    /// CONNECTION_CLOSE with `code`, at once.
    fn close_now(&mut self, code: u64) {
        {
            let mut q = self.quic.0.borrow_mut();
            if q.lost.is_some() {
                return;
            }
            let now = q.now;
            q.closed_with = Some(code);
            q.conn.close(
                now,
                VarInt::from_u64(code).unwrap_or(VarInt::MAX),
                Bytes::new(),
            );
            q.drain_events();
            q.lost
                .get_or_insert(quinn_proto::ConnectionError::LocallyClosed);
        }
        self.settle_connection();
    }

    /// The connection is closed, closing or draining, or shutting down
    /// abruptly: no more requests, and commands on its streams are refused
    /// ([`H3Error::UnknownStream`]) or ignored.
    pub fn is_closed(&self) -> bool {
        self.closed
            || self.closing
            || self.close_pending.is_some()
            || self.quic.0.borrow().lost.is_some()
    }

    /// Streams with an exchange in progress: a request seen, and its
    /// response not complete or its request body not ended.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
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

/// Makes a response's fields what HTTP/3 carries, as rush-h2 does for
/// HTTP/2: drops the fields RFC 9114 section 4.2 forbids, and the
/// whitespace an application may leave around a value (RFC 9114 section
/// 4.2 makes such a value malformed; HTTP/1.1 readers drop it anyway).
fn http3_fields(headers: &mut HeaderMap) {
    const FORBIDDEN: [&str; 3] = ["keep-alive", "proxy-connection", "te"];
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    for name in FORBIDDEN {
        headers.remove(HeaderName::from_static(name));
    }
    let padded = |byte: Option<&u8>| matches!(byte, Some(b' ' | b'\t'));
    for value in headers.values_mut() {
        let bytes = value.as_bytes();
        if padded(bytes.first()) || padded(bytes.last()) {
            // A part of a valid value is a valid value.
            if let Ok(trimmed) = HeaderValue::from_bytes(bytes.trim_ascii()) {
                *value = trimmed;
            }
        }
    }
}

fn quinn_stream(id: u64) -> quinn_proto::StreamId {
    // Client-initiated bidirectional: the only kind of request stream.
    quinn_proto::StreamId::new(quinn_proto::Side::Client, quinn_proto::Dir::Bi, id >> 2)
}

fn reset_event(id: u64, e: &StreamError) -> Event {
    let code = match e {
        StreamError::RemoteTerminate { code, .. } => Some(code.value()),
        StreamError::StreamError { code, .. } => Some(code.value()),
        _ => None,
    };
    Event::Reset { stream: id, code }
}

/// Owns `h3`'s connection: sends SETTINGS, accepts request streams (a
/// task each to read the head), and sends GOAWAY when asked.
async fn accept_task(quic: QuicConnection, shared: Rc<RefCell<Shared>>, settings: H3Settings) {
    let mut conn = match h3::server::builder()
        .max_field_section_size(settings.max_field_section_size)
        .build::<_, Bytes>(quic)
        .await
    {
        Ok(conn) => conn,
        Err(e) => {
            shared.borrow_mut().ended = Some(e.to_string());
            return;
        }
    };
    enum Next<T> {
        Shutdown,
        Accepted(T),
    }
    loop {
        let next = {
            let mut accept = std::pin::pin!(conn.accept());
            poll_fn(|cx| {
                let sh = shared.borrow();
                if sh.shutdown_requested && sh.goaway_id.is_none() {
                    return Poll::Ready(Next::Shutdown);
                }
                drop(sh);
                accept.as_mut().poll(cx).map(Next::Accepted)
            })
            .await
        };
        match next {
            Next::Shutdown => {
                // Client request streams are accepted in order (0, 4, 8...),
                // so after n of them h3 announces 4n: every accepted stream
                // is below it and will be answered.
                let accepted = shared.borrow().accepted;
                shared.borrow_mut().goaway_id = Some(accepted * 4);
                if let Err(e) = conn.shutdown(1).await {
                    shared.borrow_mut().ended = Some(e.to_string());
                    return;
                }
            }
            Next::Accepted(Ok(Some(resolver))) => {
                let mut sh = shared.borrow_mut();
                sh.accepted += 1;
                sh.resolving += 1;
                sh.spawned
                    .push(Box::pin(resolve_task(resolver, shared.clone())));
            }
            Next::Accepted(Ok(None)) => return,
            Next::Accepted(Err(e)) => {
                shared.borrow_mut().ended = Some(e.to_string());
                return;
            }
        }
    }
}

async fn resolve_task(
    resolver: h3::server::RequestResolver<QuicConnection, Bytes>,
    shared: Rc<RefCell<Shared>>,
) {
    let result = resolver.resolve_request().await;
    let mut sh = shared.borrow_mut();
    sh.resolving -= 1;
    match result {
        Ok((request, stream)) => {
            let id = stream.id().into_inner();
            let (parts, ()) = request.into_parts();
            let (send, recv) = stream.split();
            sh.resolved.push_back(Resolved {
                id,
                head: RequestHead {
                    method: parts.method,
                    uri: parts.uri,
                    headers: parts.headers,
                },
                send,
                recv,
            });
        }
        // h3 reset the stream (or closed the connection) itself.
        Err(_) => sh.resolve_failed += 1,
    }
}

/// Writes one response from its command queue, as quinn's windows allow.
async fn writer_task(mut send: RequestStream<SendHalf, Bytes>, queue: Rc<RefCell<SendQueue>>) {
    loop {
        let command = poll_fn(|_| {
            let mut q = queue.borrow_mut();
            if q.failed.is_some() {
                return Poll::Ready(None);
            }
            match q.commands.pop_front() {
                Some(c) => Poll::Ready(Some(c)),
                None => Poll::Pending,
            }
        })
        .await;
        let Some(command) = command else {
            return;
        };
        let result = match command {
            Command::Head(resp) => send.send_response(resp).await,
            Command::Data(data) => {
                let n = data.len();
                let r = send.send_data(data).await;
                queue.borrow_mut().bytes -= n;
                r
            }
            Command::Trailers(t) => send.send_trailers(t).await,
            Command::Finish => {
                let r = send.finish().await;
                if r.is_ok() {
                    queue.borrow_mut().done = true;
                    return;
                }
                r
            }
        };
        if let Err(e) = result {
            let code = match e {
                StreamError::RemoteTerminate { code, .. } => Some(code.value()),
                _ => None,
            };
            let mut q = queue.borrow_mut();
            if q.failed.is_none() {
                q.failed = Some(code);
            }
            q.commands.clear();
            return;
        }
    }
}
