//! Detached cache refreshes: the handler called again for an answer past
//! its TTL, tied to no client.
//!
//! How it works: a request that finds its answer stale (within `stale=`)
//! is answered with it at once, and queues a [`RefreshJob`]: a copy of its
//! request as a plain GET (its target and header fields, without the
//! conditional, range and framing ones), its origin and the cache fill the
//! lookup started. After the current event the server turns each job into
//! a [`DetachedRefresh`] and dispatches it like any request, under a
//! `StreamKey` of its own ([`REFRESH_CONNECTION`], a refresh number):
//! the response writer it goes to writes nowhere and records the answer
//! into the cache (the lookup hands the fill over at once, see
//! `ResponseWriter::detached_fill`). A handler that continues off the loop
//! (an async handler, an ASGI app, a WSGI app on the `--threads` pool)
//! completes it later through that key, as it would a client's request.
//!
//! The store keeps one fill per entry, so at most one refresh of an entry
//! runs; every request of the key meanwhile gets the stale answer. A
//! refresh that fails (a 5xx, an exception) keeps the stale answer and is
//! logged (`cached.rs`); one that outlives the route's lock timeout is
//! dropped by the server's sweep (and logged), so the next stale hit may
//! start another.
//!
//! A handler that runs on the loop thread (a sync App handler, WSGI
//! without `--threads`) still holds the worker while it runs: the stale
//! answer goes out first, and requests that arrive meanwhile wait for the
//! loop as they would for any such handler.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use rush_proto::{parse_request_head, HeadStatus, RequestHead};

use super::incoming::IncomingRequest;
use super::{Core, Outcome};
use crate::body::RequestBody;
use crate::cache::{CacheFill, Recording, Stored};
use crate::conn::TlsInfo;
use crate::exchange::{Peer, ResponseHead, ResponseWriter, StreamKey, WholeResponse};
use crate::forwarding::RequestOrigin;
use crate::http_write::{OutgoingBody, ResponseContext};
use crate::inflight::{InFlight, PeerObjects, RequestUnit};
use crate::request::header_fields;

/// The connection part of every refresh's `StreamKey`: no slab key of a
/// real connection reaches it (a token keeps 32 bits of it).
pub(crate) const REFRESH_CONNECTION: usize = 0xffff_ffff;

/// Request fields a refresh does not copy: it asks for the whole answer,
/// unconditionally, with no body.
const NOT_COPIED: [&[u8]; 13] = [
    b"if-none-match",
    b"if-modified-since",
    b"if-match",
    b"if-unmodified-since",
    b"if-range",
    b"range",
    b"content-length",
    b"transfer-encoding",
    b"expect",
    b"connection",
    b"keep-alive",
    b"upgrade",
    b"te",
];

/// A refresh a stale hit asked for, to be started after the current event.
pub(crate) struct RefreshJob {
    fill: CacheFill,
    head: Vec<u8>,
    origin: Option<Box<RequestOrigin>>,
    client: Option<SocketAddr>,
    listener: usize,
}

impl RefreshJob {
    /// A refresh of the entry `fill` completes, asked for by the request
    /// `head` that `writer` answers; `https`: the scheme it came with.
    pub(crate) fn new<W: ResponseWriter>(
        fill: CacheFill,
        head_bytes: &[u8],
        head: &RequestHead,
        writer: &W,
        https: bool,
    ) -> RefreshJob {
        let mut text = Vec::with_capacity(head_bytes.len());
        text.extend_from_slice(b"GET ");
        text.extend_from_slice(head.target.of(head_bytes));
        text.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in header_fields(head_bytes) {
            if NOT_COPIED
                .iter()
                .any(|field| name.eq_ignore_ascii_case(field))
            {
                continue;
            }
            text.extend_from_slice(name);
            text.extend_from_slice(b": ");
            text.extend_from_slice(value);
            text.extend_from_slice(b"\r\n");
        }
        text.extend_from_slice(b"\r\n");
        // The scheme travels in the origin: the refresh has no TLS session.
        let mut origin = writer.origin().cloned().unwrap_or(RequestOrigin {
            client: None,
            https: None,
            host: None,
        });
        origin.https = Some(https);
        RefreshJob {
            fill,
            head: text,
            origin: Some(Box::new(origin)),
            client: writer.client(),
            listener: writer.listener(),
        }
    }
}

/// A refresh being answered: the response writer of a request no client
/// made (see the module).
pub(crate) struct DetachedRefresh {
    /// Its request unit, as a client's request has one: the Python side in
    /// flight, and the recording of its answer.
    pub(crate) unit: RequestUnit,
    fill: Option<CacheFill>,
    head: Vec<u8>,
    client: Option<SocketAddr>,
    listener: usize,
    peer_objects: PeerObjects,
    /// Past this the refresh is given up (the route's lock timeout).
    pub(crate) deadline: Instant,
}

impl DetachedRefresh {
    pub(crate) fn new(job: RefreshJob, now: Instant) -> DetachedRefresh {
        let mut unit = RequestUnit::new(now);
        unit.origin = job.origin;
        let lock_timeout: Duration = job.fill.policy.lock_timeout;
        DetachedRefresh {
            unit,
            fill: Some(job.fill),
            head: job.head,
            client: job.client,
            listener: job.listener,
            peer_objects: PeerObjects::default(),
            deadline: now + lock_timeout,
        }
    }
}

impl Core {
    /// Dispatches a refresh (`key` names it for later completions).
    pub(crate) fn run_refresh(
        &mut self,
        py: Python<'_>,
        refresh: &mut DetachedRefresh,
        key: StreamKey,
    ) -> Outcome {
        let head_bytes = std::mem::take(&mut refresh.head);
        let parsed = parse_request_head(&head_bytes, &self.config.limits, &mut self.header_scratch);
        let Ok(HeadStatus::Complete(head)) = parsed else {
            // The head a client sent passed these limits; its copy is no
            // larger. Should it fail all the same, the fill fails.
            let fill = refresh.fill.take();
            self.complete_cache_fill(py, refresh, fill, None, &Outcome::Close);
            return Outcome::Close;
        };
        let request = IncomingRequest::new(key, &head_bytes, &head);
        self.dispatch(py, refresh, request, RequestBody::Bytes(&[]))
    }
}

impl ResponseWriter for DetachedRefresh {
    fn send_head<'f, I>(&mut self, head: &ResponseHead<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        if let Some(recording) = self.unit.recording.as_deref_mut() {
            head.record(recording, fields);
        }
    }

    fn send_whole<'f, I>(&mut self, response: &WholeResponse<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        if let Some(recording) = self.unit.recording.as_deref_mut() {
            response.record(recording, fields);
        }
    }

    fn response_mark(&self) -> usize {
        0
    }

    fn retractable(&self, _mark: usize) -> bool {
        false
    }

    fn retract(&mut self, _mark: usize) {
        if let Some(recording) = self.unit.recording.as_deref_mut() {
            recording.reset();
        }
    }

    fn recording(&mut self) -> &mut Option<Box<Recording>> {
        &mut self.unit.recording
    }

    fn send_stored(
        &mut self,
        _stored: &Stored,
        _not_modified: bool,
        _age: Option<u64>,
        _context: &ResponseContext<'_>,
    ) {
        // No client to answer.
    }

    fn detached_fill(&mut self) -> Option<CacheFill> {
        self.fill.take()
    }

    fn send_body(&mut self, data: &[u8]) {
        if let Some(recording) = self.unit.recording.as_deref_mut() {
            recording.body(data);
        }
    }

    fn end_body<'f, I>(&mut self, trailers: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        if let Some(recording) = self.unit.recording.as_deref_mut() {
            recording.end(trailers.count() > 0);
        }
    }

    fn send_early_hints<'f, I>(&mut self, _links: I)
    where
        I: Iterator<Item = &'f [u8]>,
    {
        // No client to hint; hints are not part of the stored answer.
    }

    fn abort_body(&mut self) {
        if let Some(recording) = self.unit.recording.as_deref_mut() {
            recording.spoil();
        }
    }

    fn set_body(&mut self, body: Option<OutgoingBody>) {
        if let (Some(recording), Some(body)) = (self.unit.recording.as_deref_mut(), &body) {
            match body {
                OutgoingBody::Shared { data, offset, end } => {
                    recording.shared(&data[*offset..*end])
                }
                OutgoingBody::File { .. } => recording.spoil(),
            }
        }
    }

    fn is_full(&self) -> bool {
        false
    }

    fn has_room(&self) -> bool {
        true
    }

    fn flush(&mut self, _now: Instant, _send_timeout: Duration) -> io::Result<()> {
        Ok(())
    }

    fn response_pending(&mut self, _body_flowing: bool) {}

    fn streaming_started(&mut self) {}

    fn request(&mut self) -> &mut Option<InFlight> {
        &mut self.unit.in_flight
    }

    fn request_ref(&self) -> Option<&InFlight> {
        self.unit.in_flight.as_ref()
    }

    fn client(&self) -> Option<SocketAddr> {
        self.client
    }

    fn listener(&self) -> usize {
        self.listener
    }

    fn origin(&self) -> Option<&RequestOrigin> {
        self.unit.origin.as_deref()
    }

    fn started(&self) -> Instant {
        self.unit.started
    }

    fn log_headers(&self) -> &[Option<String>] {
        &self.unit.log_headers
    }

    fn tls(&self) -> Option<&TlsInfo> {
        None
    }

    fn peer_objects(&mut self) -> &mut PeerObjects {
        &mut self.peer_objects
    }

    fn peer(&mut self) -> Peer<'_> {
        Peer {
            objects: &mut self.peer_objects,
            client: self.client,
            origin: self.unit.origin.as_deref(),
            tls: None,
            proxy: None,
            listener: self.listener,
        }
    }
}
