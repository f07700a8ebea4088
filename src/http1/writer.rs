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

use rush_proto::encode::is_framing_header;
use rush_proto::response::{write_content_length, write_status_line};

use crate::conn::{BodyFraming, Connection, TlsInfo};
use crate::exchange::{BodyLength, Peer, ResponseHead, ResponseWriter, WholeResponse};
use crate::forwarding::RequestOrigin;
use crate::http_write::{finish_head_after, write_response, AppFields, OutgoingBody};
use crate::inflight::{InFlight, PeerObjects};

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

impl ResponseWriter for Connection {
    fn send_head<'f, I>(&mut self, head: &ResponseHead<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
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
        finish_head_after(out, &head.context, head.close, app);
        self.sink.framing = BodyFraming {
            chunked: head.length == BodyLength::Streamed,
            discard: head.context.head_only || head.length == BodyLength::Empty,
        };
    }

    #[inline]
    fn send_whole<'f, I>(&mut self, response: &WholeResponse<'_>, fields: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        write_response(
            &mut self.sink.output,
            response.status,
            response.content_type,
            fields,
            response.body,
            response.context,
            response.close,
        );
    }

    #[inline]
    fn response_mark(&self) -> usize {
        self.sink.output.len()
    }

    fn retract(&mut self, mark: usize) {
        self.sink.output.truncate(mark);
        self.sink.framing = BodyFraming::default();
    }

    fn send_body(&mut self, data: &[u8]) {
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

    fn end_body<'f, I>(&mut self, _trailers: I)
    where
        I: Iterator<Item = (&'f [u8], &'f [u8])>,
    {
        // Trailers are dropped: `accepts_trailers` says no over HTTP/1.1
        // (see the trait), so no interface hands any here.
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
    }

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
