//! HTTP/2's side of the response-writer seam (`crate::exchange`): one
//! stream's response framed as HEADERS, DATA and trailers through the
//! connection's `H2Connection`.
//!
//! A [`StreamWriter`] is made for one call into the interfaces (a
//! dispatch, a completion, an event): it borrows the connection's HTTP/2
//! engine, the stream's request unit and response state, and the
//! transport and output buffer (for `flush`). The app is paced per stream
//! on the response data `H2Connection` still queues for it
//! (`pending_send`): the peer's flow-control windows, not the socket, are
//! what a stream waits for.
//!
//! A response that fills a cache entry is recorded as values into the
//! stream's request unit (`recording`) as it is framed; a cache hit is
//! encoded from the stored fields like any head, its body the stored
//! bytes, shared.
//!
//! What HTTP/1.1 has and HTTP/2 does not: no `Connection` or
//! `Transfer-Encoding` fields (the stream's end delimits the body), and no
//! sendfile (a file body is read and framed, a bounded amount at a time).
//!
//! Taking a response back (`retract`: a static 404 the app's own 404 page
//! replaces, a failed render replaced by a 500) works as HTTP/1.1's does,
//! where the bytes wait in the output buffer until flushed: a final head
//! and the body parts after it are held in the stream's [`HeldResponse`]
//! rather than handed to `H2Connection`, whose frames cannot be taken
//! back. They are committed (handed over, in order) when the writer is
//! done with this call into the interfaces (it is dropped), when it
//! flushes, and before anything that is never taken back (a file or
//! shared body, trailers). A retract before that drops them: no frame of
//! the abandoned response ever goes out. Only a retract of something
//! already committed resets the stream.

use std::fs::File;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rush_h2::{Bytes, Reason, ResponseHead as H2Head};

use super::engine::Engine;
use rush_proto::encode::{is_framing_header, status_has_no_body};

use super::session::HeldResponse;
use super::H2Stream;
use crate::cache::{Recording, Stored};
use crate::conn::{ResponseSink, Stream, TlsInfo};
use crate::exchange::{BodyLength, Peer, ResponseHead, ResponseWriter, WholeResponse};
use crate::forwarding::RequestOrigin;
use crate::http_write::{OutgoingBody, ResponseContext};
use crate::inflight::{InFlight, PeerObjects};

/// Response data queued on one stream past which its producer pauses;
/// it resumes under half of it. Bounds a stream's memory when the peer's
/// window is closed (128 streams at most hold 32 MiB).
pub(super) const STREAM_HIGH_WATER: usize = 256 * 1024;
const STREAM_LOW_WATER: usize = STREAM_HIGH_WATER / 2;
/// How much of a file body is read into one DATA payload.
const FILE_CHUNK: usize = 64 * 1024;

/// One stream's response writer (see the module).
pub(crate) struct StreamWriter<'a> {
    pub(crate) conn: &'a mut Engine,
    pub(crate) id: u32,
    pub(crate) stream: &'a mut H2Stream,
    pub(crate) sink: &'a mut ResponseSink,
    pub(crate) transport: &'a mut Stream,
    pub(crate) peer_objects: &'a mut PeerObjects,
    pub(crate) client: Option<SocketAddr>,
    /// The connection's PROXY header TLVs (`--proxy-protocol`).
    pub(crate) proxy: Option<&'a crate::proxy_protocol::ProxyInfo>,
    /// The connection's listener (see `ResponseWriter::listener`).
    pub(crate) listener: u16,
}

/// The server's own fields (`Server`, `--header`, `Date`) as pairs, from
/// the header lines the date cache keeps; those the app set are skipped.
fn server_fields<'c>(
    context: &ResponseContext<'c>,
    app_date: bool,
    app_server: bool,
) -> impl Iterator<Item = (&'c [u8], &'c [u8])> {
    context
        .date_line
        .split(|&byte| byte == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|&byte| byte == b':')?;
            let value = &line[colon + 1..];
            let start = value
                .iter()
                .position(|&byte| byte != b' ')
                .unwrap_or(value.len());
            Some((&line[..colon], &value[start..]))
        })
        .filter(move |(name, _)| {
            !(app_date && name.eq_ignore_ascii_case(b"date")
                || app_server && name.eq_ignore_ascii_case(b"server"))
        })
}

impl StreamWriter<'_> {
    /// Takes a final response head, held until the response is committed;
    /// `false`: the stream is gone or the fields cannot be carried (then
    /// it is reset).
    fn head<'f>(&mut self, status: u16, fields: Vec<(&'f [u8], &'f [u8])>, end: bool) -> bool {
        let out = &mut self.stream.out;
        let first_send = out.sends;
        out.sends += 1;
        if out.ended {
            return false;
        }
        if out.head_sent {
            // A second final head: the response cannot be made whole.
            self.fail(Reason::INTERNAL_ERROR);
            return false;
        }
        match H2Head::new(status, fields) {
            Ok(head) => {
                out.head_sent = true;
                out.status = status;
                out.ended = end;
                out.held = Some(Box::new(HeldResponse {
                    head,
                    head_ends: end,
                    first_send,
                    body: Vec::new(),
                    body_bytes: 0,
                    body_ends: false,
                }));
                true
            }
            Err(_) => {
                self.fail(Reason::INTERNAL_ERROR);
                false
            }
        }
    }

    /// Queues body data (held with the head while that is held), ending
    /// the stream with it if `end`.
    fn data(&mut self, data: Bytes, end: bool) {
        let out = &mut self.stream.out;
        out.sends += 1;
        if out.ended {
            return;
        }
        out.ended = end;
        out.body_bytes += data.len() as u64;
        if let Some(held) = &mut out.held {
            held.body_bytes += data.len();
            held.body.push(data);
            held.body_ends = end;
            return;
        }
        if self.conn.send_data(self.id, data, end).is_err() {
            self.fail(Reason::INTERNAL_ERROR);
        }
    }

    /// Hands a held response to `H2Connection`: from here on it cannot be
    /// taken back.
    pub(crate) fn commit(&mut self) {
        let Some(held) = self.stream.out.held.take() else {
            return;
        };
        let HeldResponse {
            head,
            head_ends,
            body,
            body_ends,
            ..
        } = *held;
        if self.conn.send_head(self.id, head, head_ends).is_err() {
            self.fail(Reason::INTERNAL_ERROR);
            return;
        }
        let parts = body.len();
        for (index, part) in body.into_iter().enumerate() {
            let end = body_ends && index + 1 == parts;
            if self.conn.send_data(self.id, part, end).is_err() {
                self.fail(Reason::INTERNAL_ERROR);
                return;
            }
        }
    }

    /// Response bytes queued for the stream: in `H2Connection` and held.
    fn queued(&self) -> usize {
        let held = self
            .stream
            .out
            .held
            .as_ref()
            .map_or(0, |held| held.body_bytes);
        self.conn.pending_send(self.id) + held
    }

    /// Resets the stream: nothing more is framed for it (a held response
    /// is dropped unsent).
    fn fail(&mut self, reason: Reason) {
        self.stream.out.ended = true;
        self.stream.out.file = None;
        self.stream.out.held = None;
        self.conn.reset(self.id, reason);
    }

    /// Reads more of a file body into DATA frames while the stream's queue
    /// is under its high-water mark; the last part ends the stream.
    pub(crate) fn pump_file(&mut self) {
        // Paced on what `H2Connection` queues: nothing may be held.
        self.commit();
        while let Some((file, offset, end)) = self.stream.out.file.take() {
            if self.stream.out.ended || self.conn.pending_send(self.id) >= STREAM_HIGH_WATER {
                if !self.stream.out.ended {
                    self.stream.out.file = Some((file, offset, end));
                }
                return;
            }
            let length = ((end - offset) as usize).min(FILE_CHUNK);
            match read_file_part(&file, offset, length) {
                Ok(buffer) if !buffer.is_empty() => {
                    let next = offset + buffer.len() as u64;
                    let last = next >= end;
                    self.data(Bytes::from(buffer), last);
                    if !last {
                        self.stream.out.file = Some((file, next, end));
                    }
                }
                _ => {
                    // The file shrank or failed under us: the response
                    // cannot be completed, and must not look complete.
                    self.fail(Reason::INTERNAL_ERROR);
                    return;
                }
            }
        }
    }
}

/// Reads up to `length` bytes of `file` at `offset` into a new buffer, the
/// part of a file body one DATA payload carries. Read straight into the
/// buffer's spare capacity: `vec![0; length]` before `read_at` wrote every
/// byte twice, a 1 MiB body's worth of memset per download (HTTP/1.1 sends
/// files with sendfile and copies nothing).
fn read_file_part(file: &File, offset: u64, length: usize) -> io::Result<Vec<u8>> {
    let mut buffer: Vec<u8> = Vec::with_capacity(length);
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    loop {
        // SAFETY: `buffer` owns `length` bytes of spare capacity from its
        // start (it is empty); pread(2) writes at most `length` bytes there
        // and says how many, and only that many are marked initialised.
        let read = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buffer.as_mut_ptr().cast::<libc::c_void>(),
                length,
                offset,
            )
        };
        if read >= 0 {
            // SAFETY: pread initialised the first `read` (<= `length`,
            // the capacity) bytes.
            unsafe { buffer.set_len(read as usize) };
            return Ok(buffer);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

impl Drop for StreamWriter<'_> {
    /// The call into the interfaces that this writer was made for is over:
    /// whatever it sent is no longer taken back.
    fn drop(&mut self) {
        self.commit();
    }
}

/// A shared body's range as a `Bytes` without copying it.
struct SharedRange {
    data: Arc<[u8]>,
    offset: usize,
    end: usize,
}

impl AsRef<[u8]> for SharedRange {
    fn as_ref(&self) -> &[u8] {
        &self.data[self.offset..self.end]
    }
}

/// Appends the app's fields to `pairs`, leaving out the framing ones
/// (HTTP/2 frames the body itself); says whether the app set `Date` and
/// `Server`, which the server's own fields then leave alone.
fn push_app_fields<'p, 'f: 'p, I>(fields: I, pairs: &mut Vec<(&'p [u8], &'p [u8])>) -> (bool, bool)
where
    I: Iterator<Item = (&'f [u8], &'f [u8])>,
{
    let (mut app_date, mut app_server) = (false, false);
    for (name, value) in fields {
        if is_framing_header(name) {
            continue;
        }
        app_date |= name.eq_ignore_ascii_case(b"date");
        app_server |= name.eq_ignore_ascii_case(b"server");
        pairs.push((name, value));
    }
    (app_date, app_server)
}

impl ResponseWriter for StreamWriter<'_> {
    fn send_head<'f, I>(&mut self, head: &ResponseHead<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        let mut length_text = itoa::Buffer::new();
        let mut pairs: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
        let (app_date, app_server) = push_app_fields(fields, &mut pairs);
        if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
            head.record(recording, pairs.iter().copied());
        }
        if let BodyLength::Known(length) = head.length {
            pairs.push((b"content-length", length_text.format(length).as_bytes()));
        }
        pairs.extend(server_fields(&head.context, app_date, app_server));
        let informational = head.status < 200;
        let discard = head.context.head_only || head.length == BodyLength::Empty;
        let end = !informational && (discard || head.length == BodyLength::Known(0));
        if !informational {
            self.stream.out.discard = discard;
            self.stream.out.remaining = match head.length {
                BodyLength::Known(length) => Some(length),
                _ => None,
            };
        }
        self.head(head.status, pairs, end);
    }

    fn send_whole<'f, I>(&mut self, response: &WholeResponse<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        let mut added_etag: Option<Box<[u8]>> = None;
        let mut length_text = itoa::Buffer::new();
        let mut pairs: Vec<(&[u8], &[u8])> = Vec::with_capacity(8);
        if !response.content_type.is_empty() {
            pairs.push((b"content-type", response.content_type));
        }
        let (app_date, app_server) = push_app_fields(fields, &mut pairs);
        if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
            // The content type is the first pair, as `Recording::whole` adds it.
            let fields = pairs
                .iter()
                .copied()
                .skip(usize::from(!response.content_type.is_empty()));
            response.record(recording, fields);
            // Frames cannot be taken back to add the cache's ETag after the
            // fact (HTTP/1.1 rewrites its unsent bytes): it goes out now.
            added_etag = recording.etag_to_add();
        }
        if let Some(etag) = &added_etag {
            pairs.push((b"etag", etag));
        }
        let bodyless = status_has_no_body(response.status);
        if !bodyless {
            let length = response.body.len() as u64;
            pairs.push((b"content-length", length_text.format(length).as_bytes()));
        }
        pairs.extend(server_fields(response.context, app_date, app_server));
        let send_body = !response.context.head_only && !bodyless && !response.body.is_empty();
        if self.head(response.status, pairs, !send_body) && send_body {
            self.data(Bytes::copy_from_slice(response.body), true);
        }
    }

    fn response_mark(&self) -> usize {
        self.stream.out.sends
    }

    fn retractable(&self, mark: usize) -> bool {
        // What the writer still holds (not committed to `h2`) can be taken
        // back; a frame handed over cannot.
        let out = &self.stream.out;
        out.sends <= mark
            || out
                .held
                .as_ref()
                .is_some_and(|held| held.first_send >= mark)
    }

    fn recording(&mut self) -> &mut Option<Box<Recording>> {
        &mut self.stream.unit.recording
    }

    fn send_stored(
        &mut self,
        stored: &Stored,
        not_modified: bool,
        age: Option<u64>,
        context: &ResponseContext<'_>,
    ) {
        let bodyless = not_modified || status_has_no_body(stored.status);
        let (status, fields, length) = if not_modified {
            (304, &stored.not_modified_fields, BodyLength::Empty)
        } else if bodyless {
            (stored.status, &stored.fields, BodyLength::Empty)
        } else {
            let length = stored.body.len() as u64;
            (stored.status, &stored.fields, BodyLength::Known(length))
        };
        let head = ResponseHead {
            status,
            length,
            close: false,
            context: *context,
        };
        let mut age_text = itoa::Buffer::new();
        let age = age.map(|age| (&b"age"[..], age_text.format(age).as_bytes()));
        let fields = fields.iter().map(|(name, value)| (&name[..], &value[..]));
        self.send_head(&head, fields.chain(age));
        if !bodyless && !context.head_only && !stored.body.is_empty() {
            self.set_body(Some(OutgoingBody::Shared {
                data: stored.body.clone(),
                offset: 0,
                end: stored.body.len(),
            }));
        }
    }

    fn retract(&mut self, mark: usize) {
        let out = &mut self.stream.out;
        if out.sends <= mark {
            if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
                recording.reset();
            }
            return;
        }
        if out
            .held
            .as_ref()
            .is_some_and(|held| held.first_send >= mark)
        {
            // Nothing of it went out: the next head starts afresh.
            out.held = None;
            out.head_sent = false;
            out.body_bytes = 0;
            out.ended = false;
            out.discard = false;
            out.remaining = None;
            out.sends = mark;
            if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
                recording.reset();
            }
        } else {
            if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
                recording.spoil();
            }
            // Committed frames cannot be taken back: the stream is reset
            // rather than left with half a response.
            self.fail(Reason::INTERNAL_ERROR);
        }
    }

    fn send_body(&mut self, data: &[u8]) {
        if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
            recording.body(data);
        }
        let out = &mut self.stream.out;
        if out.discard || out.ended || data.is_empty() {
            return;
        }
        let (data, last) = match &mut out.remaining {
            Some(remaining) => {
                let take = (*remaining).min(data.len() as u64);
                *remaining -= take;
                (&data[..take as usize], *remaining == 0)
            }
            None => (data, false),
        };
        self.data(Bytes::copy_from_slice(data), last);
    }

    fn end_body<'f, I>(&mut self, trailers: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        let trailers: Vec<(&[u8], &[u8])> = trailers.collect();
        if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
            recording.end(!trailers.is_empty());
        }
        if self.stream.out.ended {
            return;
        }
        if self
            .stream
            .out
            .remaining
            .is_some_and(|remaining| remaining > 0)
        {
            // Shorter than its declared length: it must not look complete.
            self.fail(Reason::INTERNAL_ERROR);
            return;
        }
        if trailers.is_empty() || self.stream.out.discard {
            self.data(Bytes::new(), true);
        } else {
            self.commit();
            if self.stream.out.ended {
                return;
            }
            self.stream.out.ended = true;
            if self.conn.send_trailers(self.id, trailers).is_err() {
                self.fail(Reason::INTERNAL_ERROR);
            }
        }
    }

    fn accepts_trailers(&self) -> bool {
        self.stream.takes_trailers
    }

    fn send_early_hints<'f, I>(&mut self, links: I)
    where
        I: Iterator<Item = &'f [u8]>,
    {
        if self.stream.out.head_sent || self.stream.out.ended {
            return;
        }
        // An informational HEADERS frame (`h2`'s `send_informational`);
        // not counted as a send: it takes nothing back a retract undoes.
        let fields: Vec<(&[u8], &[u8])> = links.map(|link| (&b"link"[..], link)).collect();
        if self
            .conn
            .send_response(self.id, 103, fields, false)
            .is_err()
        {
            self.fail(Reason::INTERNAL_ERROR);
        }
    }

    fn abort_body(&mut self) {
        if let Some(recording) = self.stream.unit.recording.as_deref_mut() {
            recording.spoil();
        }
        if !self.stream.out.ended {
            self.fail(Reason::INTERNAL_ERROR);
        }
    }

    fn protocol(&self) -> crate::metrics::WireProtocol {
        if self.conn.is_quic() {
            crate::metrics::WireProtocol::Http3
        } else {
            crate::metrics::WireProtocol::Http2
        }
    }

    fn set_body(&mut self, body: Option<OutgoingBody>) {
        if let (Some(recording), Some(body)) = (self.stream.unit.recording.as_deref_mut(), &body) {
            match body {
                OutgoingBody::Shared { data, offset, end } => {
                    recording.shared(&data[*offset..*end])
                }
                OutgoingBody::File { .. } => recording.spoil(),
            }
        }
        let Some(body) = body else {
            self.stream.out.file = None;
            return;
        };
        if self.stream.out.ended || self.stream.out.discard {
            return;
        }
        // The body completes the known length the head announced, and is
        // never taken back.
        self.stream.out.remaining = None;
        self.commit();
        if self.stream.out.ended {
            return;
        }
        match body {
            OutgoingBody::Shared { data, offset, end } => {
                let range = SharedRange { data, offset, end };
                self.data(Bytes::from_owner(range), true);
            }
            OutgoingBody::File { file, offset, end } => {
                if offset >= end {
                    self.data(Bytes::new(), true);
                } else {
                    self.stream.out.file = Some((file, offset, end));
                    self.pump_file();
                }
            }
        }
    }

    fn is_full(&self) -> bool {
        self.queued() >= STREAM_HIGH_WATER || self.sink.is_full()
    }

    fn has_room(&self) -> bool {
        self.queued() < STREAM_LOW_WATER && self.sink.has_room()
    }

    fn high_water(&self) -> usize {
        STREAM_HIGH_WATER
    }

    fn unsent(&self) -> usize {
        self.queued()
    }

    fn flush(&mut self, now: Instant, send_timeout: Duration) -> io::Result<()> {
        self.commit();
        self.conn.take_output(&mut self.sink.output);
        self.sink.write_to(self.transport)?;
        self.transport.flush_records()?;
        let transport_pending = self.transport.wants_write();
        self.sink
            .track_progress(now, send_timeout, transport_pending);
        Ok(())
    }

    fn response_pending(&mut self, _body_flowing: bool) {
        // The stream stays in its connection's map until its outcome; its
        // body's progress is the stream's own (`StreamBody`).
    }

    fn streaming_started(&mut self) {}

    fn request(&mut self) -> &mut Option<InFlight> {
        &mut self.stream.unit.in_flight
    }

    fn request_ref(&self) -> Option<&InFlight> {
        self.stream.unit.in_flight.as_ref()
    }

    fn client(&self) -> Option<SocketAddr> {
        self.client
    }

    fn listener(&self) -> usize {
        usize::from(self.listener)
    }

    fn origin(&self) -> Option<&RequestOrigin> {
        self.stream.unit.origin.as_deref()
    }

    fn started(&self) -> Instant {
        self.stream.unit.started
    }

    fn log_headers(&self) -> &[Option<String>] {
        &self.stream.unit.log_headers
    }

    fn tls(&self) -> Option<&TlsInfo> {
        self.transport.tls_info()
    }

    fn peer_objects(&mut self) -> &mut PeerObjects {
        self.peer_objects
    }

    fn peer(&mut self) -> Peer<'_> {
        Peer {
            objects: self.peer_objects,
            client: self.client,
            origin: self.stream.unit.origin.as_deref(),
            tls: self.transport.tls_info(),
            proxy: self.proxy,
            listener: usize::from(self.listener),
        }
    }
}
