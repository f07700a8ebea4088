//! The dispatcher's request events: what a protocol driver tells a request
//! in flight, whichever interface runs it.
//!
//! A driver (HTTP/1.1 today, HTTP/2 next) names no interface: when its
//! client can take more output, when body bytes of a running request
//! arrive, when it asks whether the app takes more of its body, or when the
//! client leaves, it calls one of these with the request's writer
//! ([`ResponseWriter`]). Each looks at the request unit (the writer's
//! [`InFlight`]) and hands the event to the interface that owns it: a
//! streamed WSGI body, an ASGI app's `send`/`receive`. One `match` per
//! event, no virtual call.

use pyo3::prelude::*;

use super::incoming::IncomingRequest;
use super::{AppInterface, Core, Outcome, RequestLine};
use crate::asgi::dispatch::AsgiBody;
use crate::exchange::ResponseWriter;
use crate::inflight::InFlight;
use crate::options::OUTPUT_FAIR_SHARE;

impl Core {
    /// Whether a request whose body is still arriving is dispatched at once,
    /// its body handed over as it comes (an ASGI app, unless a static mount
    /// answers the path), rather than after the body is complete.
    pub(crate) fn takes_body_as_it_comes(&self, raw_path: &[u8]) -> bool {
        matches!(self.app, AppInterface::Asgi(_))
            && self.static_files.find_mount(raw_path).is_none()
    }

    /// Dispatches a request whose body is still arriving (see
    /// [`Core::takes_body_as_it_comes`]): `initial` came with the head,
    /// the rest arrives through [`Core::request_body`], decoded by the
    /// protocol, which set its progress aside before this call.
    pub(crate) fn dispatch_body_flowing<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        writer: &mut W,
        request: IncomingRequest<'_>,
        initial: Vec<u8>,
    ) -> Outcome {
        let body = AsgiBody::Streaming { initial };
        self.dispatch_asgi(py, writer, request, body, None)
    }

    /// The client can take more output: a streamed body goes on.
    /// `Some`: the response is over, with this outcome.
    pub(crate) fn request_writable<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        writer: &mut W,
    ) -> Option<Outcome> {
        match writer.request_ref() {
            Some(InFlight::Stream(_)) => self.pump_wsgi(py, writer),
            _ => None,
        }
    }

    /// Bytes of the request body arrived for the running app (`done`: the
    /// body is complete).
    pub(crate) fn request_body<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        writer: &mut W,
        chunk: &[u8],
        done: bool,
    ) {
        if let Some(InFlight::Handler(awaiting)) = writer.request_ref() {
            if let Some(exchange) = &awaiting.asgi {
                self.push_asgi_body(py, exchange, chunk, done);
            }
        }
    }

    /// Whether the running app takes more of its request body now.
    pub(crate) fn request_wants_body<W: ResponseWriter>(&self, py: Python<'_>, writer: &W) -> bool {
        match writer.request_ref() {
            Some(InFlight::Handler(awaiting)) => awaiting
                .asgi
                .as_ref()
                .is_some_and(|exchange| exchange.wants_body(py)),
            _ => false,
        }
    }

    /// An HTTP/1.1 connection closes (the socket failed, a timeout) while
    /// its request is still answered: the request's one access-log line and
    /// count, as an HTTP/2 stream cut the same way gets
    /// (`Core::http2_stream_cut`): the status that went out, or `-` if no
    /// head did, and the body bytes written so far.
    pub(crate) fn log_cut_request<W: ResponseWriter>(&self, py: Python<'_>, writer: &W) {
        let (line, status, length) = match writer.request_ref() {
            Some(InFlight::Handler(awaiting)) => {
                let sent = awaiting.asgi.as_ref().and_then(|exchange| {
                    let send = exchange.send.bind(py).try_borrow().ok()?;
                    send.head_written
                        .then_some((send.status, send.body_written))
                });
                match sent {
                    Some((status, length)) => (&awaiting.request_line, Some(status), length),
                    None => (&awaiting.request_line, None, 0),
                }
            }
            Some(InFlight::Stream(stream)) => (
                &stream.request_line,
                Some(stream.status),
                stream.encoder.written(),
            ),
            Some(InFlight::AwaitingFill(_)) | None => return,
        };
        let line = RequestLine::Owned(line);
        self.access_log_status(py, writer, &line, status, length as usize);
    }

    /// The client closed its side while the app runs (its output may still
    /// be written until the socket fails).
    pub(crate) fn request_client_left<W: ResponseWriter>(&self, py: Python<'_>, writer: &W) {
        if let Some(InFlight::Handler(awaiting)) = writer.request_ref() {
            if let Some(exchange) = &awaiting.asgi {
                exchange.client_left(py);
            }
        }
    }

    /// The request body flowing to the running app is refused (past
    /// `--max-body-size`, or its framing broke): the app is told its
    /// client is gone (ASGI `http.disconnect`; a later `send()` raises) and
    /// nothing it still sends is written. Returns whether its response had
    /// begun (its head written), past which the protocol can only cut it
    /// (HTTP/2 a reset, HTTP/1.1 a close) instead of answering the refusal.
    pub(crate) fn request_body_refused<W: ResponseWriter>(
        &self,
        py: Python<'_>,
        writer: &mut W,
    ) -> bool {
        let begun = match writer.request_ref() {
            Some(InFlight::Handler(awaiting)) => awaiting
                .asgi
                .as_ref()
                .is_none_or(|exchange| exchange.response_begun(py)),
            // Only an ASGI app reads its body as it comes; anything else
            // here is a response already being written.
            Some(_) | None => true,
        };
        if let Some(in_flight) = writer.request().take() {
            in_flight.client_gone();
        }
        begun
    }

    /// After a drive: a producer that waits on the water marks (an ASGI
    /// `send()`) is paused or resumed. Only a request that has such a
    /// producer is looked at (see [`InFlight::needs_pacing`]).
    ///
    /// While the worker's output is over its budget, a response holding
    /// more than a fair share counts as full, as a connection holding more
    /// takes no new request then (`may_produce`): each producer waits for
    /// its own client instead of filling its whole high-water mark.
    pub(crate) fn pace_request<W: ResponseWriter>(&self, py: Python<'_>, writer: &W) {
        if let Some(InFlight::Handler(awaiting)) = writer.request_ref() {
            if let Some(exchange) = &awaiting.asgi {
                let over_budget = self.output_total > self.config.output_budget;
                let unsent = if over_budget { writer.unsent() } else { 0 };
                let full = writer.is_full() || unsent >= OUTPUT_FAIR_SHARE;
                let room = writer.has_room() && unsent < OUTPUT_FAIR_SHARE / 2;
                exchange.pace(py, full, room);
            }
        }
    }
}
