//! HTTP/1.1's side of the response-writer seam (`crate::exchange`): a
//! request's response goes into the connection's `ResponseSink`, its
//! progress into the connection's `ConnState`.
//!
//! An HTTP/1.1 connection has one stream, so the connection itself is the
//! writer of the request it is answering: pipelined requests wait in the
//! input until the response before them is complete, and the request unit
//! (`Connection::in_flight`) holds at most one request.
//!
//! A response that fills a cache entry is also recorded as values into the
//! request unit's `recording` as it is framed; a cache hit is the stored
//! pre-rendered head copied into the output, then `Age`, the server's own
//! fields, and the shared body bytes.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rush_proto::encode::{is_framing_header, status_has_no_body};
use rush_proto::response::{write_content_length, write_status_line};

use crate::cache::{Recording, Stored};
use crate::conn::{BodyFraming, Connection, TlsInfo};
use crate::exchange::{BodyLength, Peer, ResponseHead, ResponseWriter, WholeResponse};
use crate::forwarding::RequestOrigin;
use crate::http_write::{finish_head_after, AppFields, OutgoingBody, ResponseContext};
use crate::inflight::{InFlight, PeerObjects};

/// Stored bodies up to this size are copied into the output with the head
/// (one write, pipelined answers together); larger ones are sent from the
/// shared stored bytes.
const COPY_LIMIT: usize = 16 * 1024;

/// Appends one chunk of a chunked body: its size in hex, the bytes, CRLF
/// (formatted in place: no allocation per chunk).
fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut size = data.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789abcdef"[size & 15];
        size >>= 4;
        if size == 0 {
            break;
        }
    }
    out.reserve(data.len() + 20);
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

impl Connection {
    /// Frames a response head into the output (see `send_head`).
    fn write_head<'f>(
        &mut self,
        head: &ResponseHead<'_>,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        let close = self.state.close_if_body_unread() || head.close;
        let out = &mut self.sink.output;
        write_status_line(out, head.status);
        let mut app = AppFields::default();
        for (name, value) in fields {
            if !is_framing_header(name) {
                app.write(out, name, value);
            }
        }
        match head.length {
            BodyLength::Known(length) => write_content_length(out, length),
            BodyLength::Streamed => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            BodyLength::Empty | BodyLength::UntilClose => {}
        }
        finish_head_after(out, &head.context, close, app);
        self.sink.framing = BodyFraming {
            chunked: head.length == BodyLength::Streamed,
            discard: head.context.head_only || head.length == BodyLength::Empty,
        };
    }

    /// Frames a whole response into the output (see `send_whole`).
    #[inline]
    fn write_whole<'f>(
        &mut self,
        response: &WholeResponse<'_>,
        fields: impl Iterator<Item = (&'f [u8], &'f [u8])>,
    ) {
        let close = self.state.close_if_body_unread() || response.close;
        write_response(&mut self.sink.output, response, fields, close);
    }
}

impl ResponseWriter for Connection {
    fn send_head<'f, I>(&mut self, head: &ResponseHead<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        if let Some(recording) = self.request.recording.as_deref_mut() {
            let fields: Vec<(&[u8], &[u8])> = fields.collect();
            head.record(recording, fields.iter().copied());
            return self.write_head(head, fields.into_iter());
        }
        self.write_head(head, fields);
    }

    #[inline]
    fn send_whole<'f, I>(&mut self, response: &WholeResponse<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        if let Some(recording) = self.request.recording.as_deref_mut() {
            let fields: Vec<(&[u8], &[u8])> = fields.collect();
            response.record(recording, fields.iter().copied());
            return self.write_whole(response, fields.into_iter());
        }
        self.write_whole(response, fields);
    }

    #[inline]
    fn response_mark(&self) -> usize {
        self.sink.output.len()
    }

    fn retractable(&self, mark: usize) -> bool {
        self.sink.body.is_none() && mark <= self.sink.output.len()
    }

    fn retract(&mut self, mark: usize) {
        self.sink.output.truncate(mark);
        self.sink.framing = BodyFraming::default();
        if let Some(recording) = self.request.recording.as_deref_mut() {
            recording.reset();
        }
    }

    fn recording(&mut self) -> &mut Option<Box<Recording>> {
        &mut self.request.recording
    }

    fn send_stored(
        &mut self,
        stored: &Stored,
        not_modified: bool,
        age: Option<u64>,
        context: &ResponseContext<'_>,
    ) {
        let out = &mut self.sink.output;
        let mut app = AppFields::default();
        if not_modified {
            out.extend_from_slice(&stored.http1_not_modified_head);
        } else {
            out.extend_from_slice(&stored.http1_head);
            app.server = stored.app_server;
        }
        if let Some(age) = age {
            out.extend_from_slice(b"Age: ");
            out.extend_from_slice(itoa::Buffer::new().format(age).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        finish_head_after(out, context, false, app);
        if not_modified || context.head_only || status_has_no_body(stored.status) {
            return;
        }
        if stored.body.len() <= COPY_LIMIT {
            out.extend_from_slice(&stored.body);
        } else {
            self.sink.body = Some(OutgoingBody::Shared {
                data: stored.body.clone(),
                offset: 0,
                end: stored.body.len(),
            });
        }
    }

    fn send_body(&mut self, data: &[u8]) {
        if let Some(recording) = self.request.recording.as_deref_mut() {
            recording.body(data);
        }
        let framing = self.sink.framing;
        if framing.discard || data.is_empty() {
            return;
        }
        if framing.chunked {
            write_chunk(&mut self.sink.output, data);
        } else {
            self.sink.output.extend_from_slice(data);
        }
    }

    fn end_body<'f, I>(&mut self, trailers: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        // Trailers are dropped: `accepts_trailers` says no over HTTP/1.1
        // (see the trait), so no interface hands any here.
        if let Some(recording) = self.request.recording.as_deref_mut() {
            recording.end(trailers.count() > 0);
        }
        let framing = std::mem::take(&mut self.sink.framing);
        if framing.chunked && !framing.discard {
            self.sink.output.extend_from_slice(b"0\r\n\r\n");
        }
    }

    fn send_early_hints<'f, I>(&mut self, links: I)
    where
        I: Iterator<Item = &'f [u8]>,
    {
        // An interim response: the final head follows in the same output,
        // and the client reads it as the answer (RFC 9110 section 15.2).
        let out = &mut self.sink.output;
        out.extend_from_slice(b"HTTP/1.1 103 Early Hints\r\n");
        for link in links {
            out.extend_from_slice(b"Link: ");
            out.extend_from_slice(link);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
    }

    fn abort_body(&mut self) {
        // No last chunk: a cut-short body must not look complete; the
        // caller's outcome closes the connection.
        self.sink.framing = BodyFraming::default();
        if let Some(recording) = self.request.recording.as_deref_mut() {
            recording.spoil();
        }
    }

    #[inline]
    fn set_body(&mut self, body: Option<OutgoingBody>) {
        if let (Some(recording), Some(body)) = (self.request.recording.as_deref_mut(), &body) {
            match body {
                OutgoingBody::Shared { data, offset, end } => {
                    recording.shared(&data[*offset..*end])
                }
                OutgoingBody::File { .. } => recording.spoil(),
            }
        }
        self.sink.body = body;
    }

    #[inline]
    fn is_full(&self) -> bool {
        self.sink.is_full()
    }

    #[inline]
    fn has_room(&self) -> bool {
        self.sink.has_room()
    }

    fn unsent(&self) -> usize {
        self.sink.output.len()
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
    fn request_ref(&self) -> Option<&InFlight> {
        self.request.in_flight.as_ref()
    }

    #[inline]
    fn client(&self) -> Option<SocketAddr> {
        self.client
    }

    #[inline]
    fn listener(&self) -> usize {
        usize::from(self.listener)
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
        self.stream.tls_info()
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
            tls: self.stream.tls_info(),
            proxy: self.proxy_info.as_deref(),
            listener: usize::from(self.listener),
        }
    }
}

/// Appends a complete response to `out`; `close` (the response's own wish
/// or the connection's) adds `Connection: close`.
fn write_response<'h>(
    out: &mut Vec<u8>,
    response: &WholeResponse<'_>,
    extra_headers: impl Iterator<Item = (&'h [u8], &'h [u8])>,
    close: bool,
) {
    let WholeResponse {
        status,
        content_type,
        body,
        context,
        ..
    } = *response;
    write_status_line(out, status);
    if !content_type.is_empty() {
        out.extend_from_slice(b"Content-Type: ");
        out.extend_from_slice(content_type);
        out.extend_from_slice(b"\r\n");
    }
    let mut app_fields = AppFields::default();
    for (name, value) in extra_headers {
        app_fields.write(out, name, value);
    }
    let bodyless = status_has_no_body(status);
    if !bodyless {
        write_content_length(out, body.len() as u64);
    }
    finish_head_after(out, context, close, app_fields);
    if !context.head_only && !bodyless {
        out.extend_from_slice(body);
    }
}

#[cfg(test)]
mod tests {
    use rush_proto::encode::{BodyEncoder, FramingPlan};

    use super::write_chunk;

    /// The writer's chunks are byte for byte rush-proto's chunked encoding
    /// (the bytes a streamed response had before the seam took values).
    #[test]
    fn chunks_match_rush_proto() {
        for length in [1, 9, 10, 15, 16, 17, 255, 256, 4096, 65535, 70000] {
            let data = vec![b'a'; length];
            let mut encoder = BodyEncoder::choose(FramingPlan {
                status: 200,
                head_request: false,
                declared_length: None,
                known_length: None,
                http10: false,
            });
            let mut expected = Vec::new();
            encoder.encode(&data, &mut expected).unwrap();
            let mut written = Vec::new();
            write_chunk(&mut written, &data);
            assert_eq!(written, expected, "a chunk of {length} bytes");
        }
    }
}
