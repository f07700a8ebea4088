//! One HTTP/3 server connection over one QUIC connection: `h3` driven from
//! memory.
//!
//! `h3`'s server API is async: building the connection (its SETTINGS),
//! accepting a request, reading its head and writing a response are futures.
//! They run here as tasks of a tiny executor polled with a no-op waker: one
//! task owns `h3`'s connection and accepts request streams, one per new
//! stream reads its head, one per answered stream writes the response from a
//! queue of commands. The request body is read directly with `h3`'s
//! `poll_recv_data`, and only while the application holds less than a
//! stream window of it unreleased, so QUIC flow control makes a client wait
//! for a slow application. As nothing is woken, [`H3Connection::drive`] polls
//! every task and every receiving stream after each packet, timeout and
//! command, until a pass changes nothing.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use bytes::{Buf, Bytes};
use h3::error::{Code, StreamError};
use h3::server::RequestStream;
use http::{HeaderMap, Response, StatusCode};
use quinn_proto::VarInt;

use crate::messages::{Event, H3Error, RequestHead};
use crate::quic::{QuicConnection, RecvHalf, SendHalf};
use crate::settings::H3Settings;

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

/// A sans-IO HTTP/3 server connection; its endpoint feeds it packets.
pub(crate) struct H3Connection {
    pub(crate) quic: QuicConnection,
    tasks: Vec<Task>,
    shared: Rc<RefCell<Shared>>,
    streams: HashMap<u64, Stream>,
    pub(crate) events: VecDeque<Event>,
    settings: H3Settings,
    /// Responses complete whose last bytes the client has not acknowledged
    /// yet: a graceful close waits for them, as CONNECTION_CLOSE discards
    /// whatever is unsent.
    unacked: HashSet<u64>,
    /// CONNECTION_CLOSE was asked of quinn after a graceful shutdown.
    closing: bool,
    /// `Closed` was given.
    pub(crate) closed: bool,
}

fn noop_cx() -> Context<'static> {
    Context::from_waker(Waker::noop())
}

impl H3Connection {
    pub(crate) fn new(quic: QuicConnection, settings: H3Settings) -> H3Connection {
        let shared = Rc::new(RefCell::new(Shared::default()));
        quic.0.borrow_mut().frame_limit = settings.max_field_section_size;
        let accept = Box::pin(accept_task(quic.clone(), shared.clone(), settings.clone()));
        let mut conn = H3Connection {
            quic,
            tasks: vec![accept],
            shared,
            streams: HashMap::new(),
            events: VecDeque::new(),
            settings,
            unacked: HashSet::new(),
            closing: false,
            closed: false,
        };
        conn.drive();
        conn
    }

    /// Polls tasks and streams until nothing changes, then settles the end
    /// of the connection.
    pub(crate) fn drive(&mut self) {
        if self.closed {
            return;
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
        self.settle_connection();
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
            if goaway.is_some_and(|g| r.id >= g) {
                // Past the GOAWAY: the client was told it is not processed.
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
                self.events.push_back(Event::Reset { stream: *id, code });
                gone.push(*id);
            } else if s.settled() {
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
        if !self.unacked.contains(&id) {
            self.quic.0.borrow_mut().finished.remove(&id);
        }
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
                    let h3 = self.shared.borrow().ended.clone();
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
        if drained && !self.closing {
            // GOAWAY sent and every admitted request answered.
            self.closing = true;
            let mut q = self.quic.0.borrow_mut();
            let now = q.now;
            q.closed_with = Some(Code::H3_NO_ERROR.value());
            q.conn.close(
                now,
                VarInt::from_u32(Code::H3_NO_ERROR.value() as u32),
                Bytes::new(),
            );
            q.drain_events();
            q.lost
                .get_or_insert(quinn_proto::ConnectionError::LocallyClosed);
            drop(q);
            self.settle_connection();
        }
    }

    fn stream(&mut self, id: u64) -> Result<&mut Stream, H3Error> {
        self.streams.get_mut(&id).ok_or(H3Error::UnknownStream)
    }

    pub(crate) fn send_response(
        &mut self,
        id: u64,
        status: u16,
        headers: HeaderMap,
        end: bool,
    ) -> Result<(), H3Error> {
        let status = StatusCode::from_u16(status).map_err(|_| H3Error::BadStatus)?;
        let s = self.stream(id)?;
        if s.head_sent {
            return Err(H3Error::HeadAlreadySent);
        }
        let mut resp = Response::new(());
        *resp.status_mut() = status;
        *resp.headers_mut() = headers;
        s.head_sent = true;
        let mut q = s.queue.borrow_mut();
        q.commands.push_back(Command::Head(resp));
        if end {
            q.commands.push_back(Command::Finish);
            drop(q);
            s.end_sent = true;
        }
        Ok(())
    }

    pub(crate) fn send_data(&mut self, id: u64, data: Bytes, end: bool) -> Result<(), H3Error> {
        let limit = self.settings.max_pending_send;
        let pending = self.pending_send();
        let s = self.stream(id)?;
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
        if end {
            q.commands.push_back(Command::Finish);
            drop(q);
            s.end_sent = true;
        }
        Ok(())
    }

    pub(crate) fn send_trailers(&mut self, id: u64, trailers: HeaderMap) -> Result<(), H3Error> {
        let s = self.stream(id)?;
        if !s.head_sent || s.end_sent {
            return Err(H3Error::NotSending);
        }
        s.end_sent = true;
        let mut q = s.queue.borrow_mut();
        q.commands.push_back(Command::Trailers(trailers));
        q.commands.push_back(Command::Finish);
        Ok(())
    }

    pub(crate) fn reset(&mut self, id: u64, code: u64) -> Result<(), H3Error> {
        self.stream(id)?;
        self.abort(id, code);
        Ok(())
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

    pub(crate) fn release(&mut self, id: u64, n: usize) {
        if let Some(s) = self.streams.get_mut(&id) {
            s.unreleased = s.unreleased.saturating_sub(n);
        }
    }

    pub(crate) fn graceful_shutdown(&mut self) {
        self.shared.borrow_mut().shutdown_requested = true;
    }

    /// Response body bytes queued here, not yet taken by quinn.
    pub(crate) fn pending_send(&self) -> usize {
        self.streams.values().map(|s| s.queue.borrow().bytes).sum()
    }

    /// Streams with a request in progress.
    pub(crate) fn open_streams(&self) -> usize {
        self.streams.len()
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
