//! Where a connection stands, as data: what it is reading and what it is
//! writing, as two separate states, and every transition between them.
//!
//! How it works (the h11 idea, for one HTTP/1.1 connection):
//! * [`ReadState`] says what incoming bytes mean now: the start of the next
//!   head, more of a head, a body being collected, a body flowing to a
//!   running app, nothing (held in the socket until the response is done),
//!   or bytes to discard after a refusal.
//! * [`WriteState`] says what the connection owes the client: nothing
//!   (ready for a request), the response of a running handler, a streamed
//!   body, or a last response followed by a close.
//! * An ASGI app streaming its response while its body still arrives is
//!   just `BodyToApp` + `Handler`; no flag combinations.
//! * Each transition is one method of [`ConnState`], named after the event
//!   that causes it; nothing else assigns the states. The read state
//!   decides which timer applies ([`ConnState::timer`]); unsent output puts
//!   the send timeout above any of them (kept by the connection, since it
//!   depends on write progress, not on state).
//!
//! No I/O and no Python here: the table of transitions is unit-tested below.

use rush_proto::{ChunkedDecoder, RequestHead};

use crate::body::BodyBuffer;

/// A request whose head is complete but whose body is still arriving.
pub struct PendingBody {
    /// A copy of the head; the spans in `head` are offsets into it.
    pub head_bytes: Vec<u8>,
    pub head: RequestHead,
    pub body: BodyBuffer,
    pub framing: BodyProgress,
}

/// How much of a body is still to come.
pub enum BodyProgress {
    /// Content-Length: this many bytes are still to come.
    Remaining(u64),
    /// Boxed: the decoder is large, and this enum lives inline in every
    /// connection's state, idle ones included (issue 25's memory per idle
    /// connection).
    Chunked(Box<ChunkedDecoder>),
}

/// What incoming bytes are, now.
pub enum ReadState {
    /// Between requests, nothing buffered. Timer: keep-alive.
    Idle,
    /// Some bytes of a head have arrived. Timer: header timeout, counted
    /// from the first byte, so a slow drip cannot hold the connection.
    Head,
    /// A body collected before its request is dispatched (WSGI, the App).
    /// Timer: body timeout, renewed whenever body bytes arrive.
    Body(Box<PendingBody>),
    /// A body flowing to the app that already runs (ASGI). Timer: body
    /// timeout, renewed whenever body bytes arrive.
    BodyToApp(BodyProgress),
    /// Not reading: a response is in progress, and later pipelined bytes
    /// wait (in the buffer or the socket) so responses keep their order.
    Held,
    /// Write side shut after a refusal; input is discarded until the peer
    /// closes, so it reads our answer rather than a reset, up to a byte
    /// bound (`discarded` counts them). Timer: linger.
    Lingering { discarded: usize },
}

/// What the connection owes the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteState {
    /// Nothing: the next request may be answered.
    Ready,
    /// The response of a handler that is still running (a suspended
    /// coroutine, a pool thread).
    Handler,
    /// A response body streamed as the app produces it.
    Streaming,
    /// The last response is queued; close once it is written. With
    /// `linger` (after a refusal), shut the write side and linger first.
    Closing { linger: bool },
}

/// The timer that applies to a connection with no output pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    KeepAlive,
    Header,
    Body,
    Linger,
}

/// A connection's read and write states.
pub struct ConnState {
    read: ReadState,
    write: WriteState,
    /// The response's head said `Connection: close` because the request's
    /// body was still arriving (`close_if_body_unread`): the connection
    /// closes after it even if the body has arrived by then.
    close_announced: bool,
}

impl Default for ConnState {
    fn default() -> Self {
        ConnState {
            read: ReadState::Idle,
            write: WriteState::Ready,
            close_announced: false,
        }
    }
}

impl ConnState {
    pub fn read(&self) -> &ReadState {
        &self.read
    }

    pub fn read_mut(&mut self) -> &mut ReadState {
        &mut self.read
    }

    pub fn write(&self) -> WriteState {
        self.write
    }

    /// Whether buffered input may be turned into requests now.
    pub fn can_process(&self) -> bool {
        self.write == WriteState::Ready
            && matches!(
                self.read,
                ReadState::Idle | ReadState::Head | ReadState::Body(_)
            )
    }

    /// Bytes discarded while lingering; `false` once more than `limit`
    /// have been (a client that keeps sending is cut off).
    pub fn discard(&mut self, count: usize, limit: usize) -> bool {
        match &mut self.read {
            ReadState::Lingering { discarded } => {
                *discarded += count;
                *discarded <= limit
            }
            _ => true,
        }
    }

    /// Whether input is read from the socket now: while a response is held
    /// (or a refused connection closes) bytes stay in the socket, so a
    /// client that pipelines without reading cannot grow memory.
    pub fn reads_input(&self) -> bool {
        !matches!(self.read, ReadState::Held)
            && !matches!(self.write, WriteState::Closing { linger: false })
    }

    /// The timer for this state when no output is pending (`None`: none
    /// applies, e.g. while a handler runs and nothing is being read).
    pub fn timer(&self) -> Option<Timer> {
        match self.read {
            ReadState::Idle if self.write == WriteState::Ready => Some(Timer::KeepAlive),
            ReadState::Idle => None,
            ReadState::Head => Some(Timer::Header),
            ReadState::Body(_) | ReadState::BodyToApp(_) => Some(Timer::Body),
            ReadState::Held => None,
            ReadState::Lingering { .. } => Some(Timer::Linger),
        }
    }

    /// Bytes arrived. Returns the timer to (re)start: the header timer at a
    /// head's first byte, the body timer at each piece of a body.
    pub fn bytes_arrived(&mut self) -> Option<Timer> {
        match self.read {
            ReadState::Idle if self.write == WriteState::Ready => {
                self.read = ReadState::Head;
                Some(Timer::Header)
            }
            ReadState::Body(_) | ReadState::BodyToApp(_) => Some(Timer::Body),
            _ => None,
        }
    }

    /// A head is complete and its body is still to come (collected first).
    pub fn body_started(&mut self, pending: Box<PendingBody>) -> Timer {
        self.read = ReadState::Body(pending);
        Timer::Body
    }

    /// The collected body is complete: its request is dispatched now.
    pub fn body_complete(&mut self) -> Option<Box<PendingBody>> {
        match std::mem::replace(&mut self.read, ReadState::Held) {
            ReadState::Body(pending) => Some(pending),
            other => {
                self.read = other;
                None
            }
        }
    }

    /// A request is being dispatched: nothing more is read for it.
    pub fn request_dispatched(&mut self) {
        self.read = ReadState::Held;
    }

    /// A request is being dispatched while its body still arrives: what
    /// arrives flows to the app (the protocol decodes it).
    pub fn request_dispatched_with_body(&mut self, progress: BodyProgress) {
        self.read = ReadState::BodyToApp(progress);
    }

    /// The body still to come of a request dispatched with
    /// [`ConnState::request_dispatched_with_body`], taken back to hand to
    /// [`ConnState::handler_pending`]; `None` if there is none.
    pub fn take_body_to_app(&mut self) -> Option<BodyProgress> {
        match std::mem::replace(&mut self.read, ReadState::Held) {
            ReadState::BodyToApp(progress) => Some(progress),
            other => {
                self.read = other;
                None
            }
        }
    }

    /// Its handler goes on after the dispatch pass; `body` is the part of
    /// the request body still to come, which flows to the running app.
    pub fn handler_pending(&mut self, body: Option<BodyProgress>) {
        self.write = WriteState::Handler;
        self.read = match body {
            Some(progress) => ReadState::BodyToApp(progress),
            None => ReadState::Held,
        };
    }

    /// The request waits, unconsumed in the input, for another request's
    /// answer (a cache fill): nothing is read or processed meanwhile.
    pub fn request_parked(&mut self) {
        self.write = WriteState::Handler;
        self.read = ReadState::Held;
    }

    /// A parked request may go on: its bytes, still buffered, are
    /// processed again as a head that has arrived.
    pub fn request_unparked(&mut self) -> Timer {
        self.write = WriteState::Ready;
        self.read = ReadState::Head;
        Timer::Header
    }

    /// The body that flowed to the running app is complete.
    pub fn body_to_app_complete(&mut self) {
        if let ReadState::BodyToApp(_) = self.read {
            self.read = ReadState::Held;
        }
    }

    /// The response's body is streamed from now on.
    pub fn streaming_started(&mut self) {
        self.write = WriteState::Streaming;
        self.read = ReadState::Held;
    }

    /// A response is complete. `keep_alive`: the connection may serve the
    /// next request; it may not if the request's own body never fully
    /// arrived (what follows it could not be found). Then it lingers as
    /// after a refusal: the client may still be sending that body, and a
    /// close with input unread (or arriving) resets the connection, which
    /// can destroy the answer before the client reads it. Returns the
    /// timer to start.
    pub fn response_complete(&mut self, keep_alive: bool) -> Option<Timer> {
        let body_unread = matches!(self.read, ReadState::BodyToApp(_));
        let announced = std::mem::take(&mut self.close_announced);
        if keep_alive && !body_unread && !announced {
            self.write = WriteState::Ready;
            self.read = ReadState::Idle;
            Some(Timer::KeepAlive)
        } else {
            self.write = WriteState::Closing {
                linger: body_unread,
            };
            self.read = ReadState::Held;
            None
        }
    }

    /// A response head is being written: whether it must say
    /// `Connection: close` because the request's body is still arriving
    /// (the connection cannot be kept, and a client told so opens a new
    /// one for its next request instead of racing the close).
    pub fn close_if_body_unread(&mut self) -> bool {
        if matches!(self.read, ReadState::BodyToApp(_)) {
            self.close_announced = true;
        }
        self.close_announced
    }

    /// The request was refused (a 4xx queued): close after lingering.
    pub fn refused(&mut self) {
        self.write = WriteState::Closing { linger: true };
        self.read = ReadState::Held;
    }

    /// The refusal is written: shut the write side and discard input.
    pub fn linger_started(&mut self) -> Timer {
        self.read = ReadState::Lingering { discarded: 0 };
        Timer::Linger
    }

    /// A connection that closes as soon as its output is written.
    pub fn closes(&self) -> Option<bool> {
        match self.write {
            WriteState::Closing { linger } => Some(linger),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Read {
        Idle,
        Head,
        Body,
        BodyToApp,
        Held,
        Lingering,
    }

    fn kind(state: &ConnState) -> (Read, WriteState, Option<Timer>, bool) {
        let read = match state.read() {
            ReadState::Idle => Read::Idle,
            ReadState::Head => Read::Head,
            ReadState::Body(_) => Read::Body,
            ReadState::BodyToApp(_) => Read::BodyToApp,
            ReadState::Held => Read::Held,
            ReadState::Lingering { .. } => Read::Lingering,
        };
        (read, state.write(), state.timer(), state.can_process())
    }

    fn pending() -> Box<PendingBody> {
        let head_bytes = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n".to_vec();
        let mut spans = Vec::new();
        let head = match rush_proto::parse_request_head(
            &head_bytes,
            &rush_proto::Limits::default(),
            &mut spans,
        ) {
            Ok(rush_proto::HeadStatus::Complete(head)) => head,
            _ => unreachable!("a valid head"),
        };
        Box::new(PendingBody {
            head_bytes,
            head,
            body: BodyBuffer::new(Some(5)).unwrap(),
            framing: BodyProgress::Remaining(5),
        })
    }

    type Event = fn(&mut ConnState);
    /// (read, write, timer, can process input).
    type Reached = (Read, WriteState, Option<Timer>, bool);

    fn arrive(state: &mut ConnState) {
        let _ = state.bytes_arrived();
    }
    fn collect_body(state: &mut ConnState) {
        let _ = state.body_started(pending());
    }
    fn body_complete(state: &mut ConnState) {
        let _ = state.body_complete();
    }
    fn dispatch(state: &mut ConnState) {
        state.request_dispatched();
    }
    fn run_handler(state: &mut ConnState) {
        state.handler_pending(None);
    }
    fn run_with_body(state: &mut ConnState) {
        state.handler_pending(Some(BodyProgress::Remaining(9)));
    }
    fn body_to_app_done(state: &mut ConnState) {
        state.body_to_app_complete();
    }
    fn stream(state: &mut ConnState) {
        state.streaming_started();
    }
    fn answer(state: &mut ConnState) {
        let _ = state.response_complete(true);
    }
    fn answer_and_close(state: &mut ConnState) {
        let _ = state.response_complete(false);
    }
    fn refuse(state: &mut ConnState) {
        state.refused();
    }
    fn park(state: &mut ConnState) {
        state.request_parked();
    }
    fn unpark(state: &mut ConnState) {
        let _ = state.request_unparked();
    }
    fn linger(state: &mut ConnState) {
        let _ = state.linger_started();
    }

    /// Each row: the events from a new connection, then the state reached.
    #[test]
    fn transitions() {
        use WriteState::{Closing, Handler, Ready, Streaming};
        let rows: &[(&str, &[Event], Reached)] = &[
            (
                "new",
                &[],
                (Read::Idle, Ready, Some(Timer::KeepAlive), true),
            ),
            (
                "first bytes",
                &[arrive],
                (Read::Head, Ready, Some(Timer::Header), true),
            ),
            (
                "more head bytes keep the header timer",
                &[arrive, arrive],
                (Read::Head, Ready, Some(Timer::Header), true),
            ),
            (
                "body collected",
                &[arrive, collect_body],
                (Read::Body, Ready, Some(Timer::Body), true),
            ),
            (
                "body complete, dispatched, answered",
                &[arrive, collect_body, body_complete, answer],
                (Read::Idle, Ready, Some(Timer::KeepAlive), true),
            ),
            (
                "handler running",
                &[arrive, dispatch, run_handler],
                (Read::Held, Handler, None, false),
            ),
            (
                "handler running while its body arrives",
                &[arrive, dispatch, run_with_body],
                (Read::BodyToApp, Handler, Some(Timer::Body), false),
            ),
            (
                "the body to the app complete",
                &[run_with_body, body_to_app_done],
                (Read::Held, Handler, None, false),
            ),
            (
                "handler done",
                &[dispatch, run_handler, answer],
                (Read::Idle, Ready, Some(Timer::KeepAlive), true),
            ),
            (
                "app answered before its body arrived: close, lingering",
                &[run_with_body, answer],
                (Read::Held, Closing { linger: true }, None, false),
            ),
            (
                "the same with Connection: close",
                &[run_with_body, answer_and_close],
                (Read::Held, Closing { linger: true }, None, false),
            ),
            (
                "streaming a body",
                &[dispatch, stream],
                (Read::Held, Streaming, None, false),
            ),
            (
                "stream done, keep-alive",
                &[dispatch, stream, answer],
                (Read::Idle, Ready, Some(Timer::KeepAlive), true),
            ),
            (
                "Connection: close",
                &[dispatch, answer_and_close],
                (Read::Held, Closing { linger: false }, None, false),
            ),
            (
                "parked for a cache fill: nothing read or processed",
                &[arrive, dispatch, park],
                (Read::Held, Handler, None, false),
            ),
            (
                "unparked: its buffered head is processed again",
                &[arrive, dispatch, park, unpark],
                (Read::Head, Ready, Some(Timer::Header), true),
            ),
            (
                "refused",
                &[arrive, refuse],
                (Read::Held, Closing { linger: true }, None, false),
            ),
            (
                "lingering after a refusal",
                &[arrive, refuse, linger],
                (
                    Read::Lingering,
                    Closing { linger: true },
                    Some(Timer::Linger),
                    false,
                ),
            ),
            (
                "bytes while a handler runs start nothing",
                &[run_handler, arrive],
                (Read::Held, Handler, None, false),
            ),
        ];
        for (name, events, expected) in rows {
            let mut state = ConnState::default();
            for event in events.iter() {
                event(&mut state);
            }
            assert_eq!(kind(&state), *expected, "{name}");
        }
    }

    #[test]
    fn timers_started_by_events() {
        let mut state = ConnState::default();
        assert_eq!(state.bytes_arrived(), Some(Timer::Header));
        assert_eq!(
            state.bytes_arrived(),
            None,
            "the header timer runs from the first byte"
        );
        assert_eq!(state.body_started(pending()), Timer::Body);
        assert_eq!(
            state.bytes_arrived(),
            Some(Timer::Body),
            "renewed per piece"
        );
        assert!(state.body_complete().is_some());
        assert!(state.body_complete().is_none(), "only once");
        assert_eq!(state.response_complete(true), Some(Timer::KeepAlive));
        assert_eq!(state.response_complete(false), None);
        assert_eq!(state.closes(), Some(false));
    }

    #[test]
    fn a_close_announced_while_the_body_arrived_is_kept() {
        let mut state = ConnState::default();
        state.handler_pending(Some(BodyProgress::Remaining(9)));
        assert!(state.close_if_body_unread(), "the body still arrives");
        state.body_to_app_complete();
        assert_eq!(state.response_complete(true), None);
        assert_eq!(
            state.closes(),
            Some(false),
            "closes (input complete: no linger)"
        );
        let mut state = ConnState::default();
        state.handler_pending(None);
        assert!(!state.close_if_body_unread(), "no body to come");
        assert_eq!(state.response_complete(true), Some(Timer::KeepAlive));
    }

    #[test]
    fn lingering_discards_up_to_a_bound() {
        let mut state = ConnState::default();
        state.refused();
        assert!(state.discard(10, 100), "not lingering yet: nothing counted");
        let _ = state.linger_started();
        assert!(state.discard(60, 100));
        assert!(state.discard(40, 100));
        assert!(!state.discard(1, 100));
    }

    #[test]
    fn input_is_read_unless_held() {
        let mut state = ConnState::default();
        assert!(state.reads_input());
        state.handler_pending(Some(BodyProgress::Remaining(1)));
        assert!(state.reads_input(), "a body flowing to the app is read");
        state.body_to_app_complete();
        assert!(
            !state.reads_input(),
            "pipelined requests wait in the socket"
        );
        state.refused();
        assert!(!state.reads_input());
        state.linger_started();
        assert!(state.reads_input(), "lingering discards input");
    }
}
