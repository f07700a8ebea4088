//! `h3`'s QUIC traits over a quinn-proto connection held in memory.
//!
//! `h3` speaks to QUIC through the traits of [`h3::quic`] (accept and open
//! streams, read and write them, close the connection); `h3-quinn` implements
//! them over async quinn. Here they are implemented over one
//! [`quinn_proto::Connection`] that the owner feeds with packets and polls
//! for packets, shared through an `Rc<RefCell<..>>` by the connection handle
//! given to `h3` and every stream handle `h3` holds. A read with no data
//! buffered, a write into a full window and an open past the peer's stream
//! limit are `Pending`, and nobody is woken: the owner polls again after
//! every packet, timeout and command, as [`crate`] explains. One
//! connection per worker thread; nothing here is `Send`.
//!
//! The same adapter serves the server ([`crate::H3Conn`]) and, in the
//! tests, `h3`'s client over a quinn-proto client connection.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use crate::guard::FrameGuard;
use bytes::{Buf, Bytes};
use h3::error::Code;
use h3::quic::{self, ConnectionErrorIncoming, StreamErrorIncoming, WriteBuf};
use quinn_proto::{
    Connection, ConnectionError, ConnectionEvent, Dir, EndpointEvent, Event, ReadError,
    ReadableError, StreamEvent, StreamId, VarInt, WriteError,
};

/// Largest piece read from a stream at once: one chunk of quinn's receive
/// buffer, so a read never copies.
const READ_CHUNK: usize = 64 * 1024;

/// One QUIC connection and what its owner needs to know about it.
pub struct QuicState {
    /// The QUIC state machine.
    pub conn: Connection,
    /// The time of the call being served: `close` needs it.
    pub now: Instant,
    /// Why the connection ended, once it did.
    pub lost: Option<ConnectionError>,
    /// The handshake completed.
    pub connected: bool,
    /// Streams whose sending side the peer acknowledged to its end or
    /// stopped, not yet taken by the owner.
    pub finished: crate::StreamSet<u64>,
    /// The HTTP/3 error code this side closed the connection with.
    pub closed_with: Option<u64>,
    /// Longest frame other than DATA a stream may announce to `h3`
    /// (`FrameGuard`); no bound by default.
    pub frame_limit: u64,
    /// Bytes quinn took so far on the sending side of each stream the owner
    /// asked to count (frames included): its progress, per stream.
    pub written: crate::StreamMap<u64, u64>,
    /// Bytes that carried requests and responses, for the flood meter: the
    /// payload of HEADERS and DATA frames read on request streams, and
    /// every byte written to them.
    pub useful: u64,
    /// The peer's QPACK encoder and decoder streams: `h3` reads only their
    /// type, so the owner drains them ([`QuicState::drain_qpack`]).
    pub qpack: Vec<StreamId>,
}

/// The shared handle: the owner keeps one, `h3` and its streams the others.
#[derive(Clone)]
pub struct QuicConnection(pub Rc<RefCell<QuicState>>);

impl QuicConnection {
    /// Wraps a connection quinn-proto's endpoint accepted or connected.
    pub fn new(conn: Connection, now: Instant) -> QuicConnection {
        QuicConnection(Rc::new(RefCell::new(QuicState {
            conn,
            now,
            lost: None,
            connected: false,
            finished: crate::StreamSet::default(),
            closed_with: None,
            frame_limit: u64::MAX,
            written: crate::StreamMap::default(),
            useful: 0,
            qpack: Vec::new(),
        })))
    }

    /// Hands a packet (an event from the endpoint) to the connection.
    pub fn handle_event(&self, event: ConnectionEvent, now: Instant) {
        let mut s = self.0.borrow_mut();
        s.now = now;
        s.conn.handle_event(event);
        s.drain_events();
    }

    /// Runs the connection's timers up to `now`.
    pub fn handle_timeout(&self, now: Instant) {
        let mut s = self.0.borrow_mut();
        s.now = now;
        s.conn.handle_timeout(now);
        s.drain_events();
    }

    /// The next endpoint event (new connection IDs, drained), if any.
    pub fn poll_endpoint_event(&self) -> Option<EndpointEvent> {
        self.0.borrow_mut().conn.poll_endpoint_events()
    }

    /// When the connection's next timer fires.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.0.borrow_mut().conn.poll_timeout()
    }

    /// The handshake completed.
    pub fn is_connected(&self) -> bool {
        self.0.borrow().connected
    }

    /// Why the connection ended, if it did.
    pub fn lost(&self) -> Option<ConnectionError> {
        self.0.borrow().lost.clone()
    }
}

impl QuicState {
    /// Takes quinn-proto's application events. Stream events are not kept:
    /// every stream that may have changed is polled anyway.
    pub fn drain_events(&mut self) {
        while let Some(event) = self.conn.poll() {
            match event {
                Event::Connected => self.connected = true,
                Event::ConnectionLost { reason } => {
                    self.lost.get_or_insert(reason);
                }
                Event::Stream(StreamEvent::Finished { id })
                | Event::Stream(StreamEvent::Stopped { id, .. })
                    if id.dir() == Dir::Bi =>
                {
                    self.finished.insert(u64::from(id));
                }
                _ => {}
            }
        }
    }

    /// Reads and drops what the peer sent on its QPACK streams; returns the
    /// bytes dropped. rush advertises no dynamic table (`h3` 0.0.8 has
    /// none), so the only instructions a client may send there change
    /// nothing: left unread they would sit in quinn's buffers, a stream
    /// window each, for the connection's life. Dropped, they count only
    /// against the flood meter. A stream that ended is forgotten.
    pub fn drain_qpack(&mut self) -> u64 {
        let mut dropped = 0;
        let conn = &mut self.conn;
        self.qpack.retain(|&id| {
            let mut recv = conn.recv_stream(id);
            let Ok(mut chunks) = recv.read(true) else {
                return false;
            };
            let open = loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(chunk)) => dropped += chunk.bytes.len() as u64,
                    Ok(None) | Err(ReadError::Reset(_)) => break false,
                    Err(ReadError::Blocked) => break true,
                }
            };
            let _ = chunks.finalize();
            open
        });
        dropped
    }

    fn connection_error(&self) -> Option<ConnectionErrorIncoming> {
        self.lost.as_ref().map(connection_error)
    }
}

fn connection_error(e: &ConnectionError) -> ConnectionErrorIncoming {
    match e {
        ConnectionError::ApplicationClosed(close) => ConnectionErrorIncoming::ApplicationClose {
            error_code: close.error_code.into_inner(),
        },
        ConnectionError::TimedOut => ConnectionErrorIncoming::Timeout,
        other => ConnectionErrorIncoming::Undefined(Arc::new(other.clone())),
    }
}

fn stream_closed(state: &QuicState) -> StreamErrorIncoming {
    match state.connection_error() {
        Some(connection_error) => StreamErrorIncoming::ConnectionErrorIncoming { connection_error },
        None => StreamErrorIncoming::Unknown("stream closed".into()),
    }
}

fn h3_id(id: StreamId) -> quic::StreamId {
    // quinn's ids are QUIC varints, as h3's are: the conversion cannot fail.
    quic::StreamId::try_from(u64::from(id)).expect("a QUIC stream id is a varint")
}

fn varint(code: u64) -> VarInt {
    VarInt::from_u64(code).unwrap_or(VarInt::MAX)
}

impl quic::Connection<Bytes> for QuicConnection {
    type RecvStream = RecvHalf;
    type OpenStreams = QuicConnection;

    fn poll_accept_recv(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<RecvHalf, ConnectionErrorIncoming>> {
        let mut s = self.0.borrow_mut();
        if let Some(e) = s.connection_error() {
            return Poll::Ready(Err(e));
        }
        match s.conn.streams().accept(Dir::Uni) {
            Some(id) => Poll::Ready(Ok(RecvHalf {
                conn: self.clone(),
                id,
                guard: FrameGuard::unidirectional(s.frame_limit),
                drained: false,
            })),
            None => Poll::Pending,
        }
    }

    fn poll_accept_bidi(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<BidiStream, ConnectionErrorIncoming>> {
        let mut s = self.0.borrow_mut();
        if let Some(e) = s.connection_error() {
            return Poll::Ready(Err(e));
        }
        match s.conn.streams().accept(Dir::Bi) {
            Some(id) => Poll::Ready(Ok(BidiStream::new(self, id, s.frame_limit))),
            None => Poll::Pending,
        }
    }

    fn opener(&self) -> QuicConnection {
        self.clone()
    }
}

impl quic::OpenStreams<Bytes> for QuicConnection {
    type BidiStream = BidiStream;
    type SendStream = SendHalf;

    fn poll_open_bidi(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<BidiStream, StreamErrorIncoming>> {
        let mut s = self.0.borrow_mut();
        if s.lost.is_some() {
            return Poll::Ready(Err(stream_closed(&s)));
        }
        match s.conn.streams().open(Dir::Bi) {
            Some(id) => Poll::Ready(Ok(BidiStream::new(self, id, s.frame_limit))),
            None => Poll::Pending,
        }
    }

    fn poll_open_send(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<SendHalf, StreamErrorIncoming>> {
        let mut s = self.0.borrow_mut();
        if s.lost.is_some() {
            return Poll::Ready(Err(stream_closed(&s)));
        }
        match s.conn.streams().open(Dir::Uni) {
            Some(id) => Poll::Ready(Ok(SendHalf::new(self, id))),
            None => Poll::Pending,
        }
    }

    fn close(&mut self, code: h3::error::Code, reason: &[u8]) {
        let mut s = self.0.borrow_mut();
        let now = s.now;
        s.closed_with.get_or_insert(code.value());
        s.conn
            .close(now, varint(code.value()), Bytes::copy_from_slice(reason));
        // quinn reports no loss for a close of our own: record it, so
        // streams and the owner see the end now.
        s.lost.get_or_insert(ConnectionError::LocallyClosed);
        s.drain_events();
    }
}

/// The sending side of a stream: what `h3` gives to write is kept until
/// quinn takes all of it.
pub struct SendHalf {
    conn: QuicConnection,
    id: StreamId,
    writing: Option<WriteBuf<Bytes>>,
}

impl SendHalf {
    fn new(conn: &QuicConnection, id: StreamId) -> SendHalf {
        SendHalf {
            conn: conn.clone(),
            id,
            writing: None,
        }
    }
}

/// Dropped unfinished and not reset, a stream is finished, as quinn does
/// with its streams: `h3` drops the stream it answered 431 on without
/// finishing it, and the client would wait for the rest until the idle
/// timeout. A write still pending means the message is incomplete: the
/// stream is reset instead, as is one the peer stopped. rush-h3 itself
/// resets every stream it abandons before dropping it, so no truncated
/// response ends with a FIN.
impl Drop for SendHalf {
    fn drop(&mut self) {
        let Ok(mut s) = self.conn.0.try_borrow_mut() else {
            return;
        };
        let mut stream = s.conn.send_stream(self.id);
        if self.writing.is_some() {
            let _ = stream.reset(varint(Code::H3_INTERNAL_ERROR.value()));
        } else if let Err(quinn_proto::FinishError::Stopped(code)) = stream.finish() {
            // The peer stopped the stream (a request cancelled before its
            // head was read): quinn keeps a stopped stream, and its slot
            // of the stream limit, until it is reset (RFC 9000 section
            // 3.5: with the peer's code).
            let _ = stream.reset(code);
        }
    }
}

impl quic::SendStream<Bytes> for SendHalf {
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        let Some(buf) = self.writing.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let mut s = self.conn.0.borrow_mut();
        while buf.has_remaining() {
            match s.conn.send_stream(self.id).write(buf.chunk()) {
                Ok(n) => {
                    buf.advance(n);
                    if let Some(w) = s.written.get_mut(&u64::from(self.id)) {
                        *w += n as u64;
                    }
                    if self.id.dir() == Dir::Bi {
                        s.useful += n as u64;
                    }
                }
                Err(WriteError::Blocked) => return Poll::Pending,
                Err(WriteError::Stopped(code)) => {
                    self.writing = None;
                    return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                        error_code: code.into_inner(),
                    }));
                }
                Err(WriteError::ClosedStream) => {
                    self.writing = None;
                    return Poll::Ready(Err(stream_closed(&s)));
                }
            }
        }
        self.writing = None;
        Poll::Ready(Ok(()))
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        if self.writing.is_some() {
            return Err(StreamErrorIncoming::Unknown(
                "send_data before the last write completed".into(),
            ));
        }
        self.writing = Some(data.into());
        Ok(())
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        if self.writing.is_some() {
            match self.poll_ready(cx) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
        }
        let mut s = self.conn.0.borrow_mut();
        match s.conn.send_stream(self.id).finish() {
            Ok(()) => Poll::Ready(Ok(())),
            Err(quinn_proto::FinishError::Stopped(code)) => {
                Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                    error_code: code.into_inner(),
                }))
            }
            Err(quinn_proto::FinishError::ClosedStream) => Poll::Ready(Err(stream_closed(&s))),
        }
    }

    fn reset(&mut self, reset_code: u64) {
        self.writing = None;
        let _ = self
            .conn
            .0
            .borrow_mut()
            .conn
            .send_stream(self.id)
            .reset(varint(reset_code));
    }

    fn send_id(&self) -> quic::StreamId {
        h3_id(self.id)
    }
}

/// The receiving side of a stream.
pub struct RecvHalf {
    conn: QuicConnection,
    id: StreamId,
    guard: FrameGuard,
    /// Handed to the owner to drain (a QPACK stream).
    drained: bool,
}

impl quic::RecvStream for RecvHalf {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        _cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        let mut s = self.conn.0.borrow_mut();
        let mut recv = s.conn.recv_stream(self.id);
        let mut chunks = match recv.read(true) {
            Ok(chunks) => chunks,
            // Read to its end before, or stopped by us: nothing more comes.
            Err(ReadableError::ClosedStream) => return Poll::Ready(Ok(None)),
            Err(ReadableError::IllegalOrderedRead) => {
                return Poll::Ready(Err(StreamErrorIncoming::Unknown("unordered read".into())))
            }
        };
        let mut too_large = false;
        let mut useful = 0;
        let result = match chunks.next(READ_CHUNK) {
            Ok(Some(chunk)) => {
                match self.guard.observe(&chunk.bytes) {
                    Ok(n) => useful = n,
                    Err(_) => too_large = true,
                }
                Poll::Ready(Ok(Some(chunk.bytes)))
            }
            Ok(None) => Poll::Ready(Ok(None)),
            Err(ReadError::Blocked) => Poll::Pending,
            Err(ReadError::Reset(code)) => {
                Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                    error_code: code.into_inner(),
                }))
            }
        };
        // Finalizing tells quinn what was read, so it can open the window.
        let _ = chunks.finalize();
        s.useful += useful;
        if self.guard.is_qpack() && !self.drained {
            self.drained = true;
            s.qpack.push(self.id);
        }
        if too_large {
            // The frame never reaches h3: the stream ends here, both ways.
            let code = VarInt::from_u32(Code::H3_EXCESSIVE_LOAD.value() as u32);
            let _ = s.conn.recv_stream(self.id).stop(code);
            if self.id.dir() == Dir::Bi {
                let _ = s.conn.send_stream(self.id).reset(code);
            }
            return Poll::Ready(Err(StreamErrorIncoming::StreamTerminated {
                error_code: code.into_inner(),
            }));
        }
        if result.is_pending() {
            if let Some(connection_error) = s.connection_error() {
                return Poll::Ready(Err(StreamErrorIncoming::ConnectionErrorIncoming {
                    connection_error,
                }));
            }
        }
        result
    }

    fn stop_sending(&mut self, error_code: u64) {
        let _ = self
            .conn
            .0
            .borrow_mut()
            .conn
            .recv_stream(self.id)
            .stop(varint(error_code));
    }

    fn recv_id(&self) -> quic::StreamId {
        h3_id(self.id)
    }
}

/// A bidirectional stream: a request stream.
pub struct BidiStream {
    send: SendHalf,
    recv: RecvHalf,
}

impl BidiStream {
    fn new(conn: &QuicConnection, id: StreamId, frame_limit: u64) -> BidiStream {
        BidiStream {
            send: SendHalf::new(conn, id),
            recv: RecvHalf {
                conn: conn.clone(),
                id,
                guard: FrameGuard::request(frame_limit),
                drained: false,
            },
        }
    }
}

impl quic::SendStream<Bytes> for BidiStream {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_ready(cx)
    }

    fn send_data<T: Into<WriteBuf<Bytes>>>(&mut self, data: T) -> Result<(), StreamErrorIncoming> {
        self.send.send_data(data)
    }

    fn poll_finish(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StreamErrorIncoming>> {
        self.send.poll_finish(cx)
    }

    fn reset(&mut self, reset_code: u64) {
        self.send.reset(reset_code)
    }

    fn send_id(&self) -> quic::StreamId {
        self.send.send_id()
    }
}

impl quic::RecvStream for BidiStream {
    type Buf = Bytes;

    fn poll_data(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Option<Bytes>, StreamErrorIncoming>> {
        self.recv.poll_data(cx)
    }

    fn stop_sending(&mut self, error_code: u64) {
        self.recv.stop_sending(error_code)
    }

    fn recv_id(&self) -> quic::StreamId {
        self.recv.recv_id()
    }
}

impl quic::BidiStream<Bytes> for BidiStream {
    type SendStream = SendHalf;
    type RecvStream = RecvHalf;

    fn split(self) -> (SendHalf, RecvHalf) {
        (self.send, self.recv)
    }
}
