//! One client connection: its transport, its buffers, and where it stands.
//!
//! Where it stands is a [`ConnState`] (`state.rs`): a read state and a
//! write state, changed only through its event methods, each state naming
//! the timer that applies to it. The response still being produced (a
//! running handler, a streamed body) is an opaque [`InFlight`] kept here for
//! the dispatchers. Buffers are per connection but stay small: `input`
//! holds only bytes not yet consumed (usually a partial request or nothing),
//! `output` only bytes the kernel has not taken yet.

pub mod state;
mod transport;

use std::net::SocketAddr;
use std::time::Instant;

use crate::http_write::OutgoingBody;
use crate::inflight::{InFlight, PeerObjects};
use crate::options::{LoopConfig, LINGER_TIMEOUT};

pub(crate) use state::{BodyProgress, ConnState, PendingBody, ReadState, Timer, WriteState};
pub(crate) use transport::Stream;

/// Whether a connection survives a drive.
#[derive(PartialEq, Eq)]
pub(crate) enum Disposition {
    Open,
    Close,
}

pub struct Connection {
    pub stream: Stream,
    pub client: Option<SocketAddr>,
    /// The client's address as Python objects, made once when needed.
    pub peer_objects: PeerObjects,
    /// Received bytes not consumed yet.
    pub input: Vec<u8>,
    /// Response bytes not written yet.
    pub output: Vec<u8>,
    /// A large body (file or shared memory) that follows `output` on the
    /// wire. While it is pending, no further request is processed, so
    /// responses keep their order.
    pub body: Option<OutgoingBody>,
    /// What the connection is reading and writing (see [`state`]).
    pub state: ConnState,
    /// The response still being produced, if any (a running handler, a
    /// streamed body): the dispatchers' business, kept here.
    pub in_flight: Option<InFlight>,
    /// When the state's timer ([`ConnState::timer`]) runs out, if one applies.
    pub deadline: Option<Instant>,
    /// The peer closed its side (read returned 0).
    pub peer_closed: bool,
    /// epoll reported the peer's FIN (EPOLLRDHUP); reads go on until EOF.
    pub peer_sent_fin: bool,
    /// Bytes written to the socket so far: a change means write progress.
    pub written: u64,
    /// While output is pending: when the connection is dropped unless the
    /// client reads some of it first (the send timeout, in every state,
    /// also while a handler runs).
    pub write_deadline: Option<Instant>,
    /// `written` when `write_deadline` was last set.
    written_at_deadline: u64,
    /// Unsent output bytes counted in the worker's output budget.
    pub accounted_output: usize,
}

impl Connection {
    pub fn new(
        stream: Stream,
        client: Option<SocketAddr>,
        now: Instant,
        config: &LoopConfig,
    ) -> Self {
        Connection {
            stream,
            client,
            peer_objects: PeerObjects::default(),
            input: Vec::new(),
            output: Vec::new(),
            body: None,
            state: ConnState::default(),
            in_flight: None,
            deadline: Some(now + config.keep_alive_timeout),
            peer_closed: false,
            peer_sent_fin: false,
            written: 0,
            write_deadline: None,
            written_at_deadline: 0,
            accounted_output: 0,
        }
    }

    /// Whether buffered input may be turned into requests now.
    pub fn can_process(&self) -> bool {
        self.body.is_none() && self.state.can_process()
    }

    /// Starts `timer` (or none): the deadline the sweep checks while no
    /// output is pending.
    pub fn start_timer(&mut self, timer: Option<Timer>, now: Instant, config: &LoopConfig) {
        self.deadline = timer.map(|timer| {
            now + match timer {
                Timer::KeepAlive => config.keep_alive_timeout,
                Timer::Header => config.header_timeout,
                Timer::Body => config.body_timeout,
                Timer::Linger => LINGER_TIMEOUT,
            }
        });
    }

    /// Renews the send deadline after a write attempt: it moves only when
    /// the client took some bytes since it was last set, so an app that
    /// keeps sending to a client that never reads is still cut off.
    pub fn track_write_progress(&mut self, now: Instant, send_timeout: std::time::Duration) {
        if !self.has_pending_output() {
            self.write_deadline = None;
        } else if self.write_deadline.is_none() || self.written != self.written_at_deadline {
            self.write_deadline = Some(now + send_timeout);
            self.written_at_deadline = self.written;
        }
    }

    /// Whether anything is still to be written.
    pub fn has_pending_output(&self) -> bool {
        !self.output.is_empty() || self.body.is_some()
    }
}

impl Drop for Connection {
    /// A connection closed while its response is still being produced: the
    /// app is told (see [`InFlight::client_gone`]).
    fn drop(&mut self) {
        if let Some(in_flight) = &self.in_flight {
            in_flight.client_gone();
        }
    }
}
