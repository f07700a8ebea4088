//! HTTP/1.1's side of the response-writer seam (`crate::exchange`): a
//! request's response goes into the connection's `ResponseSink`, its
//! progress into the connection's `ConnState`.
//!
//! An HTTP/1.1 connection has one stream, so the connection itself is the
//! writer of the request it is answering: pipelined requests wait in the
//! input until the response before them is complete, and the request unit
//! (`Connection::in_flight`) holds at most one request.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::conn::{Connection, TlsInfo};
use crate::exchange::{Peer, ResponseWriter};
use crate::forwarding::RequestOrigin;
use crate::http_write::OutgoingBody;
use crate::inflight::{InFlight, PeerObjects};

impl ResponseWriter for Connection {
    #[inline]
    fn output(&mut self) -> &mut Vec<u8> {
        &mut self.sink.output
    }

    #[inline]
    fn pending_output(&self) -> &[u8] {
        &self.sink.output
    }

    #[inline]
    fn set_body(&mut self, body: Option<OutgoingBody>) {
        self.sink.body = body;
    }

    #[inline]
    fn has_body(&self) -> bool {
        self.sink.body.is_some()
    }

    #[inline]
    fn is_full(&self) -> bool {
        self.sink.is_full()
    }

    #[inline]
    fn has_room(&self) -> bool {
        self.sink.has_room()
    }

    fn flush(&mut self, now: Instant, send_timeout: Duration) -> io::Result<()> {
        self.write_output()?;
        self.track_write_progress(now, send_timeout);
        Ok(())
    }

    fn response_pending(&mut self, body_flowing: bool) {
        // The body's progress was set aside when the request was
        // dispatched (`process_input`): the app now takes it as it comes.
        let body = if body_flowing {
            self.state.take_body_to_app()
        } else {
            None
        };
        self.state.handler_pending(body);
    }

    fn streaming_started(&mut self) {
        self.state.streaming_started();
    }

    #[inline]
    fn request(&mut self) -> &mut Option<InFlight> {
        &mut self.request.in_flight
    }

    #[inline]
    fn request_and_output(&mut self) -> (&mut Option<InFlight>, &mut Vec<u8>) {
        (&mut self.request.in_flight, &mut self.sink.output)
    }

    #[inline]
    fn request_ref(&self) -> Option<&InFlight> {
        self.request.in_flight.as_ref()
    }

    #[inline]
    fn client(&self) -> Option<SocketAddr> {
        self.client
    }

    #[inline]
    fn origin(&self) -> Option<&RequestOrigin> {
        self.request.origin.as_deref()
    }

    #[inline]
    fn started(&self) -> Instant {
        self.request.started
    }

    #[inline]
    fn log_headers(&self) -> &[Option<String>] {
        &self.request.log_headers
    }

    fn tls(&self) -> Option<&TlsInfo> {
        self.stream.tls().map(|tls| tls.info())
    }

    #[inline]
    fn peer_objects(&mut self) -> &mut PeerObjects {
        &mut self.peer_objects
    }

    fn peer(&mut self) -> Peer<'_> {
        Peer {
            objects: &mut self.peer_objects,
            client: self.client,
            origin: self.request.origin.as_deref(),
            tls: self.stream.tls().map(|tls| tls.info()),
        }
    }
}
