//! What the server tells a connection: response heads, data and trailers
//! queued for each stream's writer task, resets, released credit, the
//! shutdowns, and what it asks of it (queued bytes, open streams). Each
//! command only queues; the next sync, `poll_event` or `poll_transmit`
//! drives `h3` once for all of them.

use super::*;

impl H3Conn {
    /// Sends a response head: a final one (status 200 to 999), or an
    /// informational one (100 to 199 but 101, e.g. 103 Early Hints), of
    /// which any number may precede the final head. `end_stream` (final
    /// heads only) means no body follows. Connection-specific fields
    /// (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`,
    /// `upgrade`), which RFC 9114 section 4.2 forbids, are dropped, as is
    /// `te`, and whitespace around a value is trimmed, as rush-h2 does.
    /// HTTP/3 has no 101 (RFC 9114 section 4.5): it is refused with
    /// [`H3Error::BadStatus`].
    pub fn send_response(
        &mut self,
        stream: u64,
        mut head: Response<()>,
        end_stream: bool,
    ) -> Result<(), H3Error> {
        let status = head.status();
        if status == http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(H3Error::BadStatus);
        }
        let informational = status.is_informational();
        http3_fields(head.headers_mut());
        let s = self.stream(stream)?;
        if s.head_sent {
            return Err(H3Error::HeadAlreadySent);
        }
        let mut q = s.queue.borrow_mut();
        q.commands.push_back(Command::Head(head));
        if !informational && end_stream {
            q.commands.push_back(Command::Finish);
        }
        drop(q);
        if !informational {
            s.head_sent = true;
            s.end_sent = end_stream;
        }
        self.dirty = true;
        Ok(())
    }

    /// Queues response body data on `stream`; `end_stream` ends the
    /// response. Data goes to QUIC as the client's windows allow; until
    /// then it waits here ([`pending_send`](Self::pending_send)), and an
    /// [`Event::SendReady`] says when it all went. Refused with
    /// [`H3Error::OutputFull`] past [`H3Settings::max_pending_send`] queued
    /// on the connection.
    pub fn send_data(&mut self, stream: u64, data: Bytes, end_stream: bool) -> Result<(), H3Error> {
        let limit = self.settings.max_pending_send;
        let pending = self.pending_send_total();
        let s = self.stream(stream)?;
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
        if end_stream {
            q.commands.push_back(Command::Finish);
        }
        drop(q);
        s.end_sent |= end_stream;
        self.dirty = true;
        Ok(())
    }

    /// Ends the response on `stream` with trailer fields (after any queued
    /// data).
    pub fn send_trailers(&mut self, stream: u64, trailers: HeaderMap) -> Result<(), H3Error> {
        let s = self.stream(stream)?;
        if !s.head_sent || s.end_sent {
            return Err(H3Error::NotSending);
        }
        s.end_sent = true;
        let mut q = s.queue.borrow_mut();
        q.commands.push_back(Command::Trailers(trailers));
        q.commands.push_back(Command::Finish);
        drop(q);
        self.dirty = true;
        Ok(())
    }

    /// Abandons `stream` in both directions with `code` (RESET_STREAM and
    /// STOP_SENDING; H3_INTERNAL_ERROR when the application failed
    /// mid-response, H3_REQUEST_CANCELLED when it gave up). Queued data is
    /// dropped; no event follows. Unknown streams are ignored.
    pub fn reset(&mut self, stream: u64, code: Code) {
        if self.streams.contains_key(&stream) {
            self.abort(stream, code.value());
            self.dirty = true;
        }
    }

    /// Stops receiving `stream`'s request body (the client stalled, or the
    /// response no longer needs it): STOP_SENDING with H3_NO_ERROR, as RFC
    /// 9114 section 4.1 asks of a server that answers before the request
    /// is complete; what the client still sends is dropped by QUIC and
    /// counts against no window, and no more [`Event::Data`] comes for it.
    /// The response goes on. Unknown streams are ignored.
    pub fn stop_request_body(&mut self, stream: u64) {
        let Some(s) = self.streams.get_mut(&stream) else {
            return;
        };
        if let Some(mut recv) = s.recv.take() {
            recv.stop_sending(Code::H3_NO_ERROR);
        }
        s.body_ended = true;
        s.unreleased = 0;
        self.dirty = true;
    }

    /// Whether `stream`'s request body may still bring data: it has not
    /// ended and [`stop_request_body`](Self::stop_request_body) was not
    /// called.
    pub fn request_body_open(&self, stream: u64) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.recv.is_some())
    }

    /// The application consumed `len` bytes of `stream`'s request body: no
    /// more than [`H3Settings::stream_receive_window`] is read from a
    /// stream while its bytes are held, so releasing lets the client send
    /// more.
    pub fn release(&mut self, stream: u64, len: usize) {
        if let Some(s) = self.streams.get_mut(&stream) {
            s.unreleased = s.unreleased.saturating_sub(len);
            self.dirty = true;
        }
    }

    /// Response body bytes queued on `stream` and not yet taken by QUIC (0
    /// for an unknown stream). A chunk given to
    /// [`send_data`](Self::send_data) counts here until QUIC took all of
    /// it.
    pub fn pending_send(&self, stream: u64) -> usize {
        self.streams
            .get(&stream)
            .map_or(0, |s| s.queue.borrow().bytes)
    }

    /// Response body bytes queued on every stream, not yet taken by QUIC:
    /// the memory this connection holds for the application's answers.
    pub fn pending_send_total(&self) -> usize {
        self.streams.values().map(|s| s.queue.borrow().bytes).sum()
    }

    /// Response bytes of `stream` QUIC took so far, HTTP/3 framing
    /// included (0 for an unknown stream): with
    /// [`pending_send`](Self::pending_send), how a server sees a stream
    /// whose client never opens its window (the count stands still while
    /// data waits).
    pub fn sent(&self, stream: u64) -> u64 {
        if !self.streams.contains_key(&stream) {
            return 0;
        }
        self.quic
            .0
            .borrow()
            .written
            .get(&stream)
            .copied()
            .unwrap_or(0)
    }

    /// The server takes no new requests for now (its output is over its
    /// share) or takes them again. While it holds them, requests past
    /// [`H3Settings::max_waiting_requests`] waiting (`Request` events not
    /// yet taken with [`poll_event`](Self::poll_event)) are refused with
    /// H3_REQUEST_REJECTED on both directions, which tells the client they
    /// were not processed and may be retried (RFC 9114 section 4.1.1),
    /// rather than decoded and kept, as rush-h2 refuses them with
    /// REFUSED_STREAM.
    pub fn hold_requests(&mut self, hold: bool) {
        self.holding = hold;
    }

    /// Sends GOAWAY; requests already admitted complete, later ones are
    /// refused with H3_REQUEST_REJECTED, and once the last is answered (and
    /// acknowledged) the connection closes with H3_NO_ERROR.
    pub fn graceful_shutdown(&mut self) {
        if self.is_closed() {
            return;
        }
        self.shared.borrow_mut().shutdown_requested = true;
        self.dirty = true;
    }

    /// Ends the connection now: every open stream is reset (an
    /// [`Event::Reset`] each), GOAWAY is queued, and CONNECTION_CLOSE with
    /// `code` follows as soon as [`poll_transmit`](Self::poll_transmit)
    /// has sent what was queued before it (a CONNECTION_CLOSE discards
    /// unsent stream data, the GOAWAY included). Then [`Event::Closed`].
    pub fn abrupt_shutdown(&mut self, code: Code) {
        if self.is_closed() {
            return;
        }
        let ids: Vec<u64> = self.streams.keys().copied().collect();
        for id in ids {
            self.events.push_back(Event::Reset {
                stream: id,
                code: Some(code.value()),
            });
            self.abort(id, code.value());
        }
        self.close_pending = Some(code.value());
        self.shared.borrow_mut().shutdown_requested = true;
        self.dirty = true;
    }

    /// Ends both directions of a stream that did not complete (a no-op on
    /// a direction that did), and forgets it.
    pub(super) fn abort(&mut self, id: u64, code: u64) {
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

    /// CONNECTION_CLOSE with `code`, at once.
    pub(super) fn close_now(&mut self, code: u64) {
        {
            let mut q = self.quic.0.borrow_mut();
            if q.lost.is_some() {
                return;
            }
            let now = q.now;
            q.closed_with = Some(code);
            q.conn.close(
                now,
                VarInt::from_u64(code).unwrap_or(VarInt::MAX),
                Bytes::new(),
            );
            q.drain_events();
            q.lost
                .get_or_insert(quinn_proto::ConnectionError::LocallyClosed);
        }
        self.settle_connection();
    }

    /// The connection is closed, closing or draining, or shutting down
    /// abruptly: no more requests, and commands on its streams are refused
    /// ([`H3Error::UnknownStream`]) or ignored.
    pub fn is_closed(&self) -> bool {
        self.closed
            || self.closing
            || self.close_pending.is_some()
            || self.quic.0.borrow().lost.is_some()
    }

    /// Streams with an exchange in progress: a request seen, and its
    /// response not complete or its request body not ended.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }
}

/// Makes a response's fields what HTTP/3 carries, as rush-h2 does for
/// HTTP/2: drops the fields RFC 9114 section 4.2 forbids, and the
/// whitespace an application may leave around a value (RFC 9114 section
/// 4.2 makes such a value malformed; HTTP/1.1 readers drop it anyway).
fn http3_fields(headers: &mut HeaderMap) {
    const FORBIDDEN: [&str; 3] = ["keep-alive", "proxy-connection", "te"];
    for name in [
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
    ] {
        headers.remove(name);
    }
    for name in FORBIDDEN {
        headers.remove(HeaderName::from_static(name));
    }
    let padded = |byte: Option<&u8>| matches!(byte, Some(b' ' | b'\t'));
    for value in headers.values_mut() {
        let bytes = value.as_bytes();
        if padded(bytes.first()) || padded(bytes.last()) {
            // A part of a valid value is a valid value.
            if let Ok(trimmed) = HeaderValue::from_bytes(bytes.trim_ascii()) {
                *value = trimmed;
            }
        }
    }
}
