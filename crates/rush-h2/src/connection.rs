//! One HTTP/2 server connection, driven without I/O: [`H2Connection`].
//!
//! The server loop calls [`H2Connection::feed`] with the bytes it read,
//! [`H2Connection::poll_event`] until it returns `None`, gives the events to
//! the application, issues commands (`send_response`, `send_data`,
//! `send_trailers`, `reset`, `release`, `graceful_shutdown`) as the
//! application answers, and writes what [`H2Connection::take_output`] gives.
//!
//! Inside, `h2`'s server `Connection` and its per-stream handles are polled
//! with a no-op waker. As nothing is ever woken, the connection polls what
//! may have changed instead: after input, every stream that still receives a
//! body or awaits the application (to see data, trailers and resets); after
//! commands, before output is taken, the streams with response data queued
//! (to hand it to `h2` as the peer's windows allow) and the connection itself
//! (to write the frames). Response data waits in a per-stream queue here,
//! not in `h2`, and goes to `h2` only as flow-control capacity is granted, so
//! a peer that never opens its window holds at most the queue the server let
//! the application fill ([`H2Connection::pending_send`]).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use h2::server::{Connection, Handshake, SendResponse};
use h2::{Reason, RecvStream, SendStream};
use http::HeaderMap;

use crate::flood::FloodMeter;
use crate::io::{Buffers, MemoryIo, KEEP_CAPACITY};
use crate::messages::{Event, H2Error, RequestHead, ResponseHead};
use crate::settings::H2Settings;

enum State {
    Handshaking(Handshake<MemoryIo, Bytes>),
    Open(Connection<MemoryIo, Bytes>),
    Closed,
}

/// One stream's handles and its queued response.
struct Stream {
    /// Until the final response head is sent.
    respond: Option<SendResponse<Bytes>>,
    /// After the final head, until the response ends.
    send: Option<SendStream<Bytes>>,
    /// Until the request body ended and the application released all of
    /// it, or the response is complete: while it is held, `h2` keeps the
    /// unreleased bytes counted against the connection window too.
    recv: Option<RecvStream>,
    /// The request body ended (`RequestEnd` or no body at all).
    recv_ended: bool,
    /// Request bytes delivered as `Data` and not yet released.
    unreleased: usize,
    /// Response data not yet handed to `h2`.
    queue: VecDeque<Bytes>,
    queued: usize,
    /// Response data handed to `h2` so far (let out by the peer's windows).
    sent: u64,
    /// The application ended the response; sent when the queue drains.
    end_queued: bool,
    trailers: Option<HeaderMap>,
    /// A `SendReady` is owed when the queue drains.
    notify_drain: bool,
}

impl Stream {
    fn response_done(&self) -> bool {
        self.respond.is_none() && self.send.is_none()
    }

    /// Request and response complete: forget the stream (dropping the
    /// request body releases what the application did not).
    fn settled(&self) -> bool {
        self.response_done() && self.recv_ended
    }
}

/// A sans-IO HTTP/2 server connection: see the module documentation.
pub struct H2Connection {
    state: State,
    buffers: Rc<RefCell<Buffers>>,
    settings: H2Settings,
    streams: HashMap<u32, Stream>,
    /// Streams with response data (or an end) queued: polled for capacity.
    sending: Vec<u32>,
    events: VecDeque<Event>,
    /// Input arrived since the streams were last polled.
    input_seen: bool,
    /// A command changed something since the connection was last polled.
    dirty: bool,
    shutdown_requested: bool,
    /// Streams reset by the peer before their response completed, less the
    /// responses completed since (see [`H2Settings::max_peer_reset_streams`]).
    reset_debt: usize,
    /// The connection was closed with GOAWAY(ENHANCE_YOUR_CALM): past the
    /// reset budget, or flooding ([`FloodMeter`]). Later input is dropped.
    calmed: bool,
    /// Received bytes against the bytes that carried requests and responses.
    flood: FloodMeter,
    /// Streams whose `Request` event was dropped undelivered (see
    /// [`H2Connection::poll_event`]): their later events are dropped too,
    /// up to their `Reset`.
    undelivered: Vec<u32>,
    /// `Request` events waiting in `events`.
    waiting_requests: usize,
    /// The server takes no requests for now ([`H2Connection::hold_requests`]).
    holding: bool,
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

impl H2Connection {
    /// A new server connection. Feed it every byte read from the socket,
    /// the client preface included (after [`crate::detect_preface`] or ALPN
    /// `h2` chose HTTP/2). The server's SETTINGS frame is in the first output.
    pub fn new(settings: H2Settings) -> H2Connection {
        let buffers = Rc::new(RefCell::new(Buffers {
            output_limit: settings.max_output_buffer.max(1),
            ..Buffers::default()
        }));
        let handshake = settings.builder().handshake(MemoryIo(buffers.clone()));
        let settings_flood = settings.flood;
        let mut conn = H2Connection {
            state: State::Handshaking(handshake),
            buffers,
            settings,
            streams: HashMap::new(),
            sending: Vec::new(),
            events: VecDeque::new(),
            input_seen: false,
            dirty: true,
            shutdown_requested: false,
            reset_debt: 0,
            calmed: false,
            flood: FloodMeter::new(settings_flood),
            undelivered: Vec::new(),
            waiting_requests: 0,
            holding: false,
        };
        conn.drive();
        conn
    }

    /// The server takes no new requests for now (its output is over its
    /// share, and it polls no events until its client reads) or takes them
    /// again. While it holds them, requests past
    /// [`H2Settings::max_waiting_requests`] waiting are refused with
    /// RST_STREAM(REFUSED_STREAM), which tells the client they were not
    /// processed and may be retried (RFC 9113 section 8.7), rather than
    /// decoded and kept: a client that never reads could otherwise make
    /// the server keep every stream the concurrency limit allows.
    ///
    /// Requests that arrived before the server held them back (a page's
    /// hundred requests come in one read) all wait: refusing those would
    /// make a browser on a slow link retry half a page.
    pub fn hold_requests(&mut self, hold: bool) {
        self.holding = hold;
    }

    /// Hands bytes read from the socket to the connection and processes them.
    ///
    /// A peer whose frames carry far less than they cost (a flood of PING,
    /// SETTINGS, WINDOW_UPDATE, PRIORITY, RST_STREAM or empty frames, see
    /// [`crate::FloodLimit`]) gets GOAWAY(ENHANCE_YOUR_CALM); what it sends
    /// after that is dropped unread.
    pub fn feed(&mut self, data: &[u8]) {
        self.feed_frames(data, usize::MAX);
    }

    /// [`feed`](Self::feed), up to the header of the `frames`-th frame
    /// that begins in `data`; returns how many bytes were taken (all of
    /// them when fewer frames begin there). A server that bounds the frames it
    /// handles per turn of its loop keeps the rest for the next turn: a
    /// flood of tiny frames (30,000 SETTINGS in 256 KiB) is then no longer
    /// one long turn.
    pub fn feed_frames(&mut self, data: &[u8], frames: usize) -> usize {
        if data.is_empty() || self.calmed {
            return data.len();
        }
        let taken = self.flood.observe_frames(data, frames);
        if self.flood.flooded() {
            self.calm_down();
            return data.len();
        }
        self.buffers
            .borrow_mut()
            .input
            .extend_from_slice(&data[..taken]);
        self.input_seen = true;
        self.drive();
        taken
    }

    /// Frame headers received so far (what [`feed_frames`](Self::feed_frames)
    /// counts).
    pub fn frames_received(&self) -> u64 {
        self.flood.frames()
    }

    /// The peer closed its side of the connection (a read returned 0).
    pub fn feed_eof(&mut self) {
        self.buffers.borrow_mut().eof = true;
        self.input_seen = true;
        self.drive();
    }

    /// Whether the server should read the socket. False while more than
    /// [`H2Settings::max_input_buffer`] bytes wait unprocessed (`h2` stops
    /// reading while its answers cannot be written) and once the connection
    /// closed.
    pub fn wants_read(&self) -> bool {
        !matches!(self.state, State::Closed)
            && self.buffers.borrow().input_len() < self.settings.max_input_buffer
    }

    /// The next event, if any. Process every queued command's effects first.
    ///
    /// A request whose stream was reset, or whose connection closed, while
    /// its `Request` event still waited here (a server that takes events
    /// slowly while its output is over budget) is never delivered, nor are
    /// the events of its stream: no application starts for a client that
    /// is gone.
    pub fn poll_event(&mut self) -> Option<Event> {
        if self.dirty {
            self.drive();
        }
        loop {
            let event = self.events.pop_front()?;
            let stream = match &event {
                Event::Request { stream, .. } => {
                    self.waiting_requests -= 1;
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

    /// Moves the bytes to write to the socket into `dst` (appended). Take
    /// output only when the previous output was written: the connection
    /// buffers at most [`H2Settings::max_output_buffer`] and stops there.
    pub fn take_output(&mut self, dst: &mut Vec<u8>) {
        if self.dirty {
            self.drive();
        }
        let blocked = {
            let mut b = self.buffers.borrow_mut();
            if dst.is_empty() {
                std::mem::swap(dst, &mut b.output);
            } else {
                dst.append(&mut b.output);
            }
            if b.output.capacity() > KEEP_CAPACITY {
                b.output = Vec::new();
            }
            std::mem::take(&mut b.write_blocked)
        };
        if blocked {
            // Room again: let h2 write what it held back, for the next take.
            self.drive();
        }
    }

    /// Whether output is waiting for [`take_output`](Self::take_output).
    pub fn has_output(&mut self) -> bool {
        if self.dirty {
            self.drive();
        }
        !self.buffers.borrow().output.is_empty()
    }

    /// The connection is over and all its output was taken: close the socket.
    pub fn is_done(&self) -> bool {
        matches!(self.state, State::Closed) && self.buffers.borrow().output.is_empty()
    }

    /// Streams still tracked: a request seen, and its response not complete
    /// or its request body not ended (or not yet released).
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// Sends a response head: a final one (status 200 to 999), or an
    /// informational one (100 to 199, e.g. 103 Early Hints), of which any
    /// number may precede the final head. `end_stream` (final heads only)
    /// means no body follows. Connection-specific fields (`connection`,
    /// `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`),
    /// which RFC 9113 forbids, are dropped, as is `te`.
    pub fn send_response<'a, I>(
        &mut self,
        stream: u32,
        status: u16,
        headers: I,
        end_stream: bool,
    ) -> Result<(), H2Error>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let head = ResponseHead::new(status, headers)?;
        self.send_head(stream, head, end_stream)
    }

    /// Sends a head built beforehand with [`ResponseHead::new`] (see
    /// [`send_response`](Self::send_response)): an application that may
    /// still take a response back keeps it until it commits, without
    /// holding on to the fields it was made of.
    pub fn send_head(
        &mut self,
        stream: u32,
        head: ResponseHead,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        let response = head.0;
        let informational = response.status().is_informational();
        let s = self
            .streams
            .get_mut(&stream)
            .ok_or(H2Error::UnknownStream(stream))?;
        let respond = s.respond.as_mut().ok_or(H2Error::WrongState(
            "the final response head was already sent",
        ))?;
        self.dirty = true;
        if informational {
            return respond
                .send_informational(response)
                .map_err(H2Error::Protocol);
        }
        let send = respond
            .send_response(response, end_stream)
            .map_err(H2Error::Protocol)?;
        s.respond = None;
        if end_stream {
            self.reset_debt = self.reset_debt.saturating_sub(1);
        } else {
            s.send = Some(send);
        }
        self.forget_if_done(stream);
        Ok(())
    }

    /// Queues response body data; `end_stream` ends the response. Data goes
    /// out as the peer's stream and connection windows allow; until then it
    /// waits here ([`pending_send`](Self::pending_send)), and a
    /// [`Event::SendReady`] says when it all went. Pace the application on
    /// that: this queue has no bound of its own.
    pub fn send_data(&mut self, stream: u32, data: Bytes, end_stream: bool) -> Result<(), H2Error> {
        let s = self.sendable(stream)?;
        if !data.is_empty() {
            s.queued += data.len();
            s.queue.push_back(data);
        }
        s.end_queued = end_stream;
        self.mark_sending(stream);
        Ok(())
    }

    /// Ends the response with trailer fields (after any queued data).
    pub fn send_trailers<'a, I>(&mut self, stream: u32, trailers: I) -> Result<(), H2Error>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        let map = crate::messages::field_map(trailers)?;
        let s = self.sendable(stream)?;
        s.trailers = Some(map);
        s.end_queued = true;
        self.mark_sending(stream);
        Ok(())
    }

    /// Response bytes queued on `stream` that the peer's windows have not
    /// let out yet (0 for an unknown stream).
    pub fn pending_send(&self, stream: u32) -> usize {
        self.streams.get(&stream).map_or(0, |s| s.queued)
    }

    /// Response bytes queued on every stream, waiting for the peer's
    /// windows: the memory this connection holds for the application's
    /// answers, which a server counts against its output budget.
    pub fn pending_send_total(&self) -> usize {
        self.streams.values().map(|s| s.queued).sum()
    }

    /// Response bytes of `stream` the peer's windows let out so far (0 for
    /// an unknown stream): with [`pending_send`](Self::pending_send), how a
    /// server sees a stream whose peer never opens its window (the count
    /// stands still while data waits) and gives up on it after its send
    /// timeout (CVE-2019-9517).
    pub fn sent(&self, stream: u32) -> u64 {
        self.streams.get(&stream).map_or(0, |s| s.sent)
    }

    /// Resets `stream` (RST_STREAM with `reason`, e.g. INTERNAL_ERROR when
    /// the application failed mid-response, CANCEL when it gave up). Queued
    /// data is dropped. Unknown streams are ignored. After a complete
    /// response this is also how to stop a request body the application no
    /// longer reads: the stream is forgotten and `h2` cancels its receiving
    /// side.
    pub fn reset(&mut self, stream: u32, reason: Reason) {
        if let Some(mut s) = self.streams.remove(&stream) {
            if let Some(send) = s.send.as_mut() {
                send.send_reset(reason);
            } else if let Some(respond) = s.respond.as_mut() {
                respond.send_reset(reason);
            }
            self.dirty = true;
        }
    }

    /// Stops receiving `stream`'s request body (the client stalled, or the
    /// response no longer needs it): what the peer still sends is counted
    /// against no window and dropped by `h2`, no more [`Event::Data`] comes
    /// for it, and once the response is complete `h2` resets the stream
    /// with NO_ERROR, as RFC 9113 section 8.1 asks of a server that answers
    /// before the request is complete. Unknown streams are ignored.
    pub fn stop_request_body(&mut self, stream: u32) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        // Dropping the body handle is what tells `h2`: its buffered data is
        // released, and the stream is reset once no handle is left.
        s.recv = None;
        s.recv_ended = true;
        s.unreleased = 0;
        self.dirty = true;
        self.forget_if_done(stream);
    }

    /// Whether `stream`'s request body may still bring data: it has not
    /// ended and [`stop_request_body`](Self::stop_request_body) was not
    /// called.
    pub fn request_body_open(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| !s.recv_ended)
    }

    /// The application consumed `len` bytes of `stream`'s request body:
    /// open the windows by that much (`h2` sends WINDOW_UPDATE frames once
    /// enough was released to be worth a frame). Unreleased bytes hold the
    /// connection window even after the request ended, until the response
    /// is complete (then the stream is forgotten and they are released).
    pub fn release(&mut self, stream: u32, len: usize) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        let len = len.min(s.unreleased);
        if let Some(recv) = s.recv.as_mut() {
            s.unreleased -= len;
            let _ = recv.flow_control().release_capacity(len);
            if s.recv_ended && s.unreleased == 0 {
                s.recv = None;
            }
            self.dirty = true;
        }
    }

    /// Starts a graceful shutdown: GOAWAY, then (one PING round trip later,
    /// RFC 9113 section 6.8) GOAWAY with the last stream id accepted; the
    /// streams in flight finish, then the connection closes ([`Event::Closed`]).
    pub fn graceful_shutdown(&mut self) {
        if let State::Open(conn) = &mut self.state {
            if !self.shutdown_requested {
                conn.graceful_shutdown();
            }
        }
        self.shutdown_requested = true;
        self.dirty = true;
    }

    /// Ends the connection at once with GOAWAY(`reason`); open streams are
    /// abandoned (e.g. the worker must stop now).
    pub fn abrupt_shutdown(&mut self, reason: Reason) {
        if let State::Open(conn) = &mut self.state {
            conn.abrupt_shutdown(reason);
        }
        self.shutdown_requested = true;
        self.dirty = true;
    }

    fn sendable(&mut self, stream: u32) -> Result<&mut Stream, H2Error> {
        let s = self
            .streams
            .get_mut(&stream)
            .ok_or(H2Error::UnknownStream(stream))?;
        if s.send.is_none() {
            return Err(H2Error::WrongState(if s.respond.is_some() {
                "body data before the response head"
            } else {
                "the response already ended"
            }));
        }
        if s.end_queued {
            return Err(H2Error::WrongState("the response already ended"));
        }
        Ok(s)
    }

    fn mark_sending(&mut self, stream: u32) {
        if !self.sending.contains(&stream) {
            self.sending.push(stream);
        }
        self.dirty = true;
    }

    fn forget_if_done(&mut self, stream: u32) {
        if self.streams.get(&stream).is_some_and(Stream::settled) {
            self.streams.remove(&stream);
        }
    }

    /// Polls `h2` until nothing more can happen without new input or room.
    ///
    /// One poll of the connection reads every frame buffered and writes every
    /// frame queued, and costs the same for one stream as for a hundred, so
    /// the queued response data goes to `h2` first and the connection is
    /// polled once more only when the streams produced new frames.
    fn drive(&mut self) {
        self.dirty = false;
        let mut cx = noop_cx();
        self.poll_sending(&mut cx);
        for _round in 0..64 {
            let before = self.buffers.borrow().input_len();
            if !self.poll_connection(&mut cx) {
                return;
            }
            let consumed =
                std::mem::take(&mut self.input_seen) || self.buffers.borrow().input_len() != before;
            if consumed {
                self.poll_streams(&mut cx);
            }
            // Frames the stream handles produced (or a shutdown decided
            // while polling them) are written by the next poll of the
            // connection; stop once there are none.
            if !self.poll_sending(&mut cx) && !std::mem::take(&mut self.dirty) {
                return;
            }
        }
        // Still busy after 64 rounds: continue on the next call.
        self.dirty = true;
    }

    /// Polls the handshake or the connection; accepts new requests. False
    /// once the connection is closed.
    fn poll_connection(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            match &mut self.state {
                State::Closed => return false,
                State::Handshaking(handshake) => match std::pin::Pin::new(handshake).poll(cx) {
                    Poll::Pending => return true,
                    Poll::Ready(Ok(conn)) => {
                        self.state = State::Open(conn);
                        if self.shutdown_requested {
                            if let State::Open(conn) = &mut self.state {
                                conn.graceful_shutdown();
                            }
                        }
                    }
                    Poll::Ready(Err(e)) => {
                        self.close(Some(e));
                        return false;
                    }
                },
                State::Open(conn) => match conn.poll_accept(cx) {
                    Poll::Pending => return true,
                    Poll::Ready(Some(Ok((request, respond)))) => self.accept(request, respond),
                    Poll::Ready(Some(Err(e))) => {
                        self.close(Some(e));
                        return false;
                    }
                    Poll::Ready(None) => {
                        self.close(None);
                        return false;
                    }
                },
            }
        }
    }

    fn accept(&mut self, request: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        if self.holding && self.waiting_requests >= self.settings.max_waiting_requests {
            // Dropping the request (and its body handle) forgets it here.
            respond.send_reset(Reason::REFUSED_STREAM);
            self.dirty = true;
            return;
        }
        let stream = respond.stream_id().as_u32();
        let (parts, body) = request.into_parts();
        let end_stream = body.is_end_stream();
        let protocol = parts
            .extensions
            .get::<h2::ext::Protocol>()
            .map(|p| p.as_str().to_owned());
        let head = RequestHead {
            method: parts.method,
            uri: parts.uri,
            protocol,
            headers: parts.headers,
        };
        self.streams.insert(
            stream,
            Stream {
                respond: Some(respond),
                send: None,
                recv: (!end_stream).then_some(body),
                recv_ended: end_stream,
                unreleased: 0,
                queue: VecDeque::new(),
                queued: 0,
                sent: 0,
                end_queued: false,
                trailers: None,
                notify_drain: false,
            },
        );
        self.events.push_back(Event::Request {
            stream,
            head,
            end_stream,
        });
        self.waiting_requests += 1;
    }

    /// After input: request data, trailers and resets of every open stream.
    fn poll_streams(&mut self, cx: &mut Context<'_>) {
        let mut finished = Vec::new();
        for (&id, s) in self.streams.iter_mut() {
            let mut reset = None;
            if let (false, Some(recv)) = (s.recv_ended, s.recv.as_mut()) {
                loop {
                    match recv.poll_data(cx) {
                        Poll::Pending => break,
                        Poll::Ready(Some(Ok(data))) => {
                            s.unreleased += data.len();
                            self.events.push_back(Event::Data { stream: id, data })
                        }
                        Poll::Ready(Some(Err(e))) => {
                            reset = Some(e.reason().unwrap_or(Reason::CANCEL));
                            break;
                        }
                        Poll::Ready(None) => match recv.poll_trailers(cx) {
                            Poll::Pending => break,
                            Poll::Ready(Ok(trailers)) => {
                                self.events.push_back(Event::RequestEnd {
                                    stream: id,
                                    trailers,
                                });
                                s.recv_ended = true;
                                if s.unreleased == 0 {
                                    s.recv = None;
                                }
                                break;
                            }
                            Poll::Ready(Err(e)) => {
                                reset = Some(e.reason().unwrap_or(Reason::CANCEL));
                                break;
                            }
                        },
                    }
                }
            }
            if reset.is_none() {
                let polled = if let Some(respond) = s.respond.as_mut() {
                    respond.poll_reset(cx)
                } else if let Some(send) = s.send.as_mut() {
                    send.poll_reset(cx)
                } else {
                    Poll::Pending
                };
                match polled {
                    Poll::Ready(Ok(reason)) => reset = Some(reason),
                    Poll::Ready(Err(e)) => reset = Some(e.reason().unwrap_or(Reason::CANCEL)),
                    Poll::Pending => {}
                }
            }
            if let Some(reason) = reset {
                self.events.push_back(Event::Reset { stream: id, reason });
                if !s.response_done() {
                    self.reset_debt += 1;
                }
                finished.push(id);
            } else if s.settled() {
                finished.push(id);
            }
        }
        for id in finished {
            self.streams.remove(&id);
        }
        if self.reset_debt > self.settings.max_peer_reset_streams {
            self.calm_down();
        }
    }

    /// GOAWAY(ENHANCE_YOUR_CALM), once: the peer abused the connection.
    fn calm_down(&mut self) {
        if self.calmed {
            return;
        }
        self.calmed = true;
        match &mut self.state {
            State::Open(conn) => conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM),
            // Still in the handshake (the flood came with the preface):
            // there is no GOAWAY to send before SETTINGS, so just close.
            State::Handshaking(_) => self.close(None),
            State::Closed => {}
        }
        self.dirty = true;
    }

    /// Hands queued response data to `h2` as capacity allows. True if
    /// anything was handed over.
    fn poll_sending(&mut self, cx: &mut Context<'_>) -> bool {
        let mut progress = false;
        let mut i = 0;
        while i < self.sending.len() {
            let id = self.sending[i];
            let Some(s) = self.streams.get_mut(&id) else {
                self.sending.swap_remove(i);
                continue;
            };
            let Some(send) = s.send.as_mut() else {
                self.sending.swap_remove(i);
                continue;
            };
            let mut failed = None;
            while s.queued > 0 {
                send.reserve_capacity(s.queued);
                let mut capacity = send.capacity();
                if capacity == 0 {
                    match send.poll_capacity(cx) {
                        Poll::Ready(Some(Ok(n))) if n > 0 => capacity = n,
                        Poll::Ready(Some(Ok(_))) | Poll::Pending => break,
                        Poll::Ready(Some(Err(e))) => {
                            failed = Some(e.reason().unwrap_or(Reason::CANCEL));
                            break;
                        }
                        Poll::Ready(None) => {
                            failed = Some(Reason::CANCEL);
                            break;
                        }
                    }
                }
                let front = s.queue.front_mut().expect("queued bytes are in the queue");
                let chunk = if front.len() <= capacity {
                    s.queue.pop_front().expect("front exists")
                } else {
                    front.split_to(capacity)
                };
                s.queued -= chunk.len();
                s.sent += chunk.len() as u64;
                self.flood.credit(chunk.len());
                let end = s.queued == 0 && s.end_queued && s.trailers.is_none();
                s.notify_drain = true;
                progress = true;
                if let Err(e) = send.send_data(chunk, end) {
                    failed = Some(e.reason().unwrap_or(Reason::CANCEL));
                    break;
                }
                if end {
                    s.send = None;
                    self.reset_debt = self.reset_debt.saturating_sub(1);
                    break;
                }
            }
            if failed.is_none() && s.queued == 0 {
                if let Some(send) = s.send.as_mut() {
                    if s.end_queued {
                        let result = match s.trailers.take() {
                            Some(trailers) => send.send_trailers(trailers),
                            None => send.send_data(Bytes::new(), true),
                        };
                        if let Err(e) = result {
                            failed = Some(e.reason().unwrap_or(Reason::CANCEL));
                        }
                        s.send = None;
                        self.reset_debt = self.reset_debt.saturating_sub(1);
                        progress = true;
                    } else {
                        // Nothing queued: give back capacity reserved earlier.
                        send.reserve_capacity(0);
                    }
                }
            }
            if let Some(reason) = failed {
                self.events.push_back(Event::Reset { stream: id, reason });
                self.streams.remove(&id);
                self.sending.swap_remove(i);
                continue;
            }
            let s = self.streams.get_mut(&id).expect("stream still present");
            if s.queued == 0 {
                if s.notify_drain && s.send.is_some() {
                    self.events.push_back(Event::SendReady { stream: id });
                }
                s.notify_drain = false;
                self.sending.swap_remove(i);
                self.forget_if_done(id);
                continue;
            }
            i += 1;
        }
        progress
    }

    fn close(&mut self, error: Option<h2::Error>) {
        self.state = State::Closed;
        let reason = error.as_ref().and_then(|e| e.reason());
        let mut ids: Vec<u32> = self.streams.keys().copied().collect();
        ids.sort_unstable();
        for stream in ids {
            self.events.push_back(Event::Reset {
                stream,
                reason: reason.unwrap_or(Reason::CANCEL),
            });
        }
        self.streams.clear();
        self.sending.clear();
        // A clean end of input while nothing was in flight is a clean close.
        let error = error.filter(|e| !(e.is_io() && self.buffers.borrow().eof));
        self.events.push_back(Event::Closed {
            reason,
            error: error.map(|e| e.to_string()),
        });
    }
}

impl std::fmt::Debug for H2Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Connection")
            .field("open_streams", &self.streams.len())
            .field("closed", &matches!(self.state, State::Closed))
            .finish()
    }
}
