//! The protocol engine under a multiplexed session: `h2` over a TCP or TLS
//! socket (`rush_h2::H2Connection`), or HTTP/3 over QUIC
//! (`rush_h3::H3Conn`).
//!
//! HTTP/2 and HTTP/3 give a server the same things: request heads, body
//! data, ends, resets, per-stream flow control and queues. So one session
//! (`session.rs`), one stream writer (`writer.rs`) and one set of drivers
//! for events, progress, refusals and cuts serve both; this enum is the one
//! place that tells them apart below the drive. Its methods keep
//! `H2Connection`'s names and meanings; an HTTP/3 call translates stream
//! ids (see [`stream_key`]), error codes (RFC 9114 section 8.1 against RFC
//! 9113 section 7) and events, and the methods that only make sense on a
//! byte stream (`feed`, `take_output`) do nothing there: QUIC's datagrams
//! go through the worker's UDP socket (`crate::http3`).
//!
//! A `match` per call costs one predictable branch on the HTTP/2 path.

use rush_h2::{Bytes, Event, H2Connection, H2Error, Reason, ResponseHead};

/// The engine of one multiplexed connection (see the module). HTTP/2's is
/// kept inline (its calls are the hot path; the session around it is boxed
/// already), HTTP/3's boxed.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Engine {
    Http2(H2Connection),
    Http3(Box<rush_h3::H3Conn>),
}

/// HTTP/3 request streams are QUIC's client-initiated bidirectional
/// streams (0, 4, 8...); the session names them as HTTP/2 names its own, by
/// a `u32`: the stream's ordinal plus one (never 0, which is HTTP/1.1's
/// one stream in a `StreamKey`). A connection would need 4 billion requests
/// to exhaust it; past that its requests are refused.
pub(crate) fn stream_key(quic_id: u64) -> Option<u32> {
    u32::try_from((quic_id >> 2) + 1).ok()
}

fn quic_id(key: u32) -> u64 {
    u64::from(key.saturating_sub(1)) << 2
}

/// An HTTP/2 reason as the HTTP/3 error code of the same meaning.
fn h3_code(reason: Reason) -> rush_h3::Code {
    match reason {
        Reason::NO_ERROR => rush_h3::Code::H3_NO_ERROR,
        Reason::CANCEL => rush_h3::Code::H3_REQUEST_CANCELLED,
        Reason::REFUSED_STREAM => rush_h3::Code::H3_REQUEST_REJECTED,
        Reason::PROTOCOL_ERROR => rush_h3::Code::H3_MESSAGE_ERROR,
        Reason::ENHANCE_YOUR_CALM => rush_h3::Code::H3_EXCESSIVE_LOAD,
        _ => rush_h3::Code::H3_INTERNAL_ERROR,
    }
}

/// An HTTP/3 error code as the HTTP/2 reason of the same meaning (for the
/// access log's cut lines and debug messages).
fn h2_reason(code: u64) -> Reason {
    let code = rush_h3::Code::from(code);
    if code == rush_h3::Code::H3_NO_ERROR {
        Reason::NO_ERROR
    } else if code == rush_h3::Code::H3_REQUEST_CANCELLED {
        Reason::CANCEL
    } else if code == rush_h3::Code::H3_REQUEST_REJECTED {
        Reason::REFUSED_STREAM
    } else if code == rush_h3::Code::H3_EXCESSIVE_LOAD {
        Reason::ENHANCE_YOUR_CALM
    } else if code == rush_h3::Code::H3_INTERNAL_ERROR {
        Reason::INTERNAL_ERROR
    } else {
        Reason::PROTOCOL_ERROR
    }
}

fn h3_error(error: rush_h3::H3Error) -> H2Error {
    match error {
        rush_h3::H3Error::UnknownStream => H2Error::WrongState("no such stream awaits a response"),
        rush_h3::H3Error::BadStatus => H2Error::WrongState("invalid status"),
        rush_h3::H3Error::HeadAlreadySent => H2Error::WrongState("the response head was sent"),
        rush_h3::H3Error::NotSending => H2Error::WrongState("the response is not being sent"),
        rush_h3::H3Error::OutputFull => H2Error::WrongState("the connection's output is full"),
    }
}

/// An HTTP/3 event in HTTP/2's terms; `None` for a stream beyond
/// [`stream_key`]'s range (refused there).
fn h2_event(conn: &mut rush_h3::H3Conn, event: rush_h3::Event) -> Option<Event> {
    let key = |conn: &mut rush_h3::H3Conn, id: u64| {
        let key = stream_key(id);
        if key.is_none() {
            conn.reset(id, rush_h3::Code::H3_REQUEST_REJECTED);
        }
        key
    };
    Some(match event {
        rush_h3::Event::Request {
            stream,
            head,
            end_stream,
        } => Event::Request {
            stream: key(conn, stream)?,
            head: rush_h2::RequestHead {
                method: head.method,
                uri: head.uri,
                protocol: None,
                headers: head.headers,
            },
            end_stream,
        },
        rush_h3::Event::Data { stream, data } => Event::Data {
            stream: key(conn, stream)?,
            data,
        },
        rush_h3::Event::RequestEnd { stream, trailers } => Event::RequestEnd {
            stream: key(conn, stream)?,
            trailers,
        },
        rush_h3::Event::Reset { stream, code } => Event::Reset {
            stream: key(conn, stream)?,
            reason: code.map_or(Reason::CANCEL, h2_reason),
        },
        rush_h3::Event::SendReady { stream } => Event::SendReady {
            stream: key(conn, stream)?,
        },
        rush_h3::Event::Closed { code, error } => Event::Closed {
            reason: code.map(h2_reason),
            error,
        },
    })
}

impl Engine {
    /// Whether this is an HTTP/3 connection (driven by `crate::http3`).
    pub(crate) fn is_quic(&self) -> bool {
        matches!(self, Engine::Http3(_))
    }

    /// The QUIC connection, for the worker's UDP side.
    pub(crate) fn quic(&mut self) -> Option<&mut rush_h3::H3Conn> {
        match self {
            Engine::Http3(conn) => Some(conn),
            Engine::Http2(_) => None,
        }
    }

    pub(crate) fn hold_requests(&mut self, hold: bool) {
        match self {
            Engine::Http2(conn) => conn.hold_requests(hold),
            Engine::Http3(conn) => conn.hold_requests(hold),
        }
    }

    /// HTTP/2 only: bytes read from the socket.
    pub(crate) fn feed(&mut self, data: &[u8]) {
        if let Engine::Http2(conn) = self {
            conn.feed(data);
        }
    }

    /// HTTP/2 only (see `H2Connection::feed_frames`); an HTTP/3 engine
    /// takes nothing this way.
    pub(crate) fn feed_frames(&mut self, data: &[u8], frames: usize) -> usize {
        match self {
            Engine::Http2(conn) => conn.feed_frames(data, frames),
            Engine::Http3(_) => 0,
        }
    }

    pub(crate) fn frames_received(&self) -> u64 {
        match self {
            Engine::Http2(conn) => conn.frames_received(),
            Engine::Http3(_) => 0,
        }
    }

    pub(crate) fn feed_eof(&mut self) {
        if let Engine::Http2(conn) = self {
            conn.feed_eof();
        }
    }

    pub(crate) fn wants_read(&self) -> bool {
        match self {
            Engine::Http2(conn) => conn.wants_read(),
            Engine::Http3(_) => false,
        }
    }

    pub(crate) fn poll_event(&mut self) -> Option<Event> {
        match self {
            Engine::Http2(conn) => conn.poll_event(),
            Engine::Http3(conn) => loop {
                let event = conn.poll_event()?;
                if let Some(event) = h2_event(conn, event) {
                    return Some(event);
                }
            },
        }
    }

    /// HTTP/2 only: the bytes to write to the socket.
    pub(crate) fn take_output(&mut self, dst: &mut Vec<u8>) {
        if let Engine::Http2(conn) = self {
            conn.take_output(dst);
        }
    }

    /// The connection is over: nothing more to send for it.
    pub(crate) fn is_done(&self) -> bool {
        match self {
            Engine::Http2(conn) => conn.is_done(),
            Engine::Http3(conn) => conn.is_closed(),
        }
    }

    /// A head from its parts (see `H2Connection::send_response`).
    pub(crate) fn send_response<'a, I>(
        &mut self,
        stream: u32,
        status: u16,
        headers: I,
        end_stream: bool,
    ) -> Result<(), H2Error>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        match self {
            Engine::Http2(conn) => conn.send_response(stream, status, headers, end_stream),
            Engine::Http3(_) => {
                let head = ResponseHead::new(status, headers)?;
                self.send_head(stream, head, end_stream)
            }
        }
    }

    pub(crate) fn send_head(
        &mut self,
        stream: u32,
        head: ResponseHead,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        match self {
            Engine::Http2(conn) => conn.send_head(stream, head, end_stream),
            Engine::Http3(conn) => conn
                .send_response(quic_id(stream), head.into_response(), end_stream)
                .map_err(h3_error),
        }
    }

    pub(crate) fn send_data(
        &mut self,
        stream: u32,
        data: Bytes,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        match self {
            Engine::Http2(conn) => conn.send_data(stream, data, end_stream),
            Engine::Http3(conn) => conn
                .send_data(quic_id(stream), data, end_stream)
                .map_err(h3_error),
        }
    }

    pub(crate) fn send_trailers<'a, I>(&mut self, stream: u32, trailers: I) -> Result<(), H2Error>
    where
        I: IntoIterator<Item = (&'a [u8], &'a [u8])>,
    {
        match self {
            Engine::Http2(conn) => conn.send_trailers(stream, trailers),
            Engine::Http3(conn) => {
                let map = rush_h2::field_map(trailers)?;
                conn.send_trailers(quic_id(stream), map).map_err(h3_error)
            }
        }
    }

    pub(crate) fn pending_send(&self, stream: u32) -> usize {
        match self {
            Engine::Http2(conn) => conn.pending_send(stream),
            Engine::Http3(conn) => conn.pending_send(quic_id(stream)),
        }
    }

    pub(crate) fn pending_send_total(&self) -> usize {
        match self {
            Engine::Http2(conn) => conn.pending_send_total(),
            Engine::Http3(conn) => conn.pending_send_total(),
        }
    }

    pub(crate) fn sent(&self, stream: u32) -> u64 {
        match self {
            Engine::Http2(conn) => conn.sent(stream),
            Engine::Http3(conn) => conn.sent(quic_id(stream)),
        }
    }

    pub(crate) fn reset(&mut self, stream: u32, reason: Reason) {
        match self {
            Engine::Http2(conn) => conn.reset(stream, reason),
            Engine::Http3(conn) => conn.reset(quic_id(stream), h3_code(reason)),
        }
    }

    pub(crate) fn stop_request_body(&mut self, stream: u32) {
        match self {
            Engine::Http2(conn) => conn.stop_request_body(stream),
            Engine::Http3(conn) => conn.stop_request_body(quic_id(stream)),
        }
    }

    pub(crate) fn request_body_open(&self, stream: u32) -> bool {
        match self {
            Engine::Http2(conn) => conn.request_body_open(stream),
            Engine::Http3(conn) => conn.request_body_open(quic_id(stream)),
        }
    }

    pub(crate) fn release(&mut self, stream: u32, len: usize) {
        match self {
            Engine::Http2(conn) => conn.release(stream, len),
            Engine::Http3(conn) => conn.release(quic_id(stream), len),
        }
    }

    pub(crate) fn graceful_shutdown(&mut self) {
        match self {
            Engine::Http2(conn) => conn.graceful_shutdown(),
            Engine::Http3(conn) => conn.graceful_shutdown(),
        }
    }

    pub(crate) fn abrupt_shutdown(&mut self, reason: Reason) {
        match self {
            Engine::Http2(conn) => conn.abrupt_shutdown(reason),
            Engine::Http3(conn) => conn.abrupt_shutdown(h3_code(reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_streams_map_to_nonzero_keys_and_back() {
        for id in [0u64, 4, 8, 400, (u64::from(u32::MAX) - 1) << 2] {
            let key = stream_key(id).unwrap();
            assert_ne!(key, 0);
            assert_eq!(quic_id(key), id);
        }
        assert_eq!(stream_key(u64::from(u32::MAX) << 2), None);
    }

    #[test]
    fn reasons_keep_their_meaning_both_ways() {
        for reason in [
            Reason::NO_ERROR,
            Reason::CANCEL,
            Reason::REFUSED_STREAM,
            Reason::ENHANCE_YOUR_CALM,
            Reason::INTERNAL_ERROR,
        ] {
            assert_eq!(h2_reason(h3_code(reason).value()), reason);
        }
    }
}
