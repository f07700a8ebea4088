//! Driving one connection: polling `h3`'s tasks and the receiving streams
//! until a pass changes nothing, turning what they produced into events,
//! checking the peer against the abuse bounds, and settling the end of the
//! connection (drained, closed, or lost).

use super::*;

impl H3Conn {
    /// Polls tasks and streams until nothing changes, then settles the end
    /// of the connection.
    pub(crate) fn drive(&mut self) {
        self.dirty = false;
        if self.closed {
            return;
        }
        let input = std::mem::take(&mut self.input);
        if input {
            self.quic.0.borrow_mut().drain_qpack();
        }
        for _ in 0..MAX_PASSES {
            let mut progress = self.run_tasks();
            progress |= self.take_resolved();
            progress |= self.poll_bodies();
            progress |= self.poll_responses();
            if !progress {
                break;
            }
        }
        self.check_abuse(input);
        self.settle_connection();
    }

    /// Closes the connection with H3_EXCESSIVE_LOAD if the client reset
    /// too many requests before their answer (Rapid Reset), or sent far
    /// more than its requests and responses carried (a flood of frames,
    /// streams or packets that cost more than they bring).
    /// The flood meter is read only after a datagram (`input`): nothing
    /// else adds to what was received.
    pub(super) fn check_abuse(&mut self, input: bool) {
        if self.calmed.is_some() || self.is_closed() {
            return;
        }
        let failed = self.shared.borrow().resolve_failed;
        self.reset_debt += failed - self.resolve_failed_seen;
        self.resolve_failed_seen = failed;
        let reason = if self.reset_debt > self.settings.max_peer_reset_streams {
            format!(
                "rapid reset: {} request streams reset before their response",
                self.reset_debt
            )
        } else {
            let useful = self.quic.0.borrow().useful;
            if !input || !self.settings.flood.flooded(self.received, useful) {
                return;
            }
            format!(
                "flood: {} bytes received for {useful} of requests and responses",
                self.received
            )
        };
        self.calmed = Some(reason);
        self.abrupt_shutdown(Code::H3_EXCESSIVE_LOAD);
    }

    pub(super) fn run_tasks(&mut self) -> bool {
        let spawned = std::mem::take(&mut self.shared.borrow_mut().spawned);
        let mut progress = !spawned.is_empty();
        self.tasks.extend(spawned);
        let mut cx = noop_cx();
        let before = self.tasks.len();
        self.tasks
            .retain_mut(|t| t.as_mut().poll(&mut cx).is_pending());
        progress |= self.tasks.len() != before;
        progress |= !self.shared.borrow().spawned.is_empty();
        progress
    }

    pub(super) fn take_resolved(&mut self) -> bool {
        let mut progress = false;
        loop {
            let Some(r) = self.shared.borrow_mut().resolved.pop_front() else {
                break;
            };
            progress = true;
            let goaway = self.shared.borrow().goaway_id;
            // Past the GOAWAY the client was told the request is not
            // processed; while the server holds requests, one past the few
            // waiting is refused the same way, so it may be retried (RFC
            // 9114 section 4.1.1) rather than kept.
            let held = self.holding && self.waiting_requests >= self.settings.max_waiting_requests;
            if goaway.is_some_and(|g| r.id >= g) || held || self.close_pending.is_some() {
                let mut send = r.send;
                let mut recv = r.recv;
                send.stop_stream(Code::H3_REQUEST_REJECTED);
                recv.stop_sending(Code::H3_REQUEST_REJECTED);
                continue;
            }
            let queue = Rc::new(RefCell::new(SendQueue::default()));
            self.tasks
                .push(Box::pin(writer_task(r.send, queue.clone())));
            self.streams.insert(
                r.id,
                Stream {
                    recv: Some(r.recv),
                    body_ended: false,
                    unreleased: 0,
                    queue,
                    head_sent: false,
                    end_sent: false,
                    notify_drain: false,
                },
            );
            self.quic.0.borrow_mut().written.insert(r.id, 0);
            let mut ev = Vec::new();
            let ended = self.poll_body(r.id, &mut ev);
            // A request whose stream already ended with no body and no
            // trailers says so in its head, as over HTTP/2.
            let no_body =
                ended && ev.len() == 1 && matches!(ev[0], Event::RequestEnd { trailers: None, .. });
            if no_body {
                ev.clear();
            }
            self.events.push_back(Event::Request {
                stream: r.id,
                head: r.head,
                end_stream: no_body,
            });
            self.waiting_requests += 1;
            self.events.extend(ev);
        }
        progress
    }

    pub(super) fn poll_bodies(&mut self) -> bool {
        let ids: Vec<u64> = self
            .streams
            .iter()
            .filter(|(_, s)| s.recv.is_some())
            .map(|(id, _)| *id)
            .collect();
        let mut ev = Vec::new();
        for id in ids {
            self.poll_body(id, &mut ev);
        }
        let progress = !ev.is_empty();
        self.events.extend(ev);
        progress
    }

    /// Reads what `stream` has of its body, within the window the
    /// application leaves; returns whether the request ended.
    pub(super) fn poll_body(&mut self, id: u64, ev: &mut Vec<Event>) -> bool {
        let window = self.settings.stream_receive_window as usize;
        let Some(s) = self.streams.get_mut(&id) else {
            return false;
        };
        let mut cx = noop_cx();
        while let Some(recv) = s.recv.as_mut() {
            if !s.body_ended {
                if s.unreleased >= window {
                    return false;
                }
                match recv.poll_recv_data(&mut cx) {
                    Poll::Pending => return false,
                    Poll::Ready(Ok(Some(mut buf))) => {
                        let data = buf.copy_to_bytes(buf.remaining());
                        s.unreleased += data.len();
                        if !data.is_empty() {
                            ev.push(Event::Data { stream: id, data });
                        }
                    }
                    Poll::Ready(Ok(None)) => s.body_ended = true,
                    Poll::Ready(Err(e)) => {
                        s.recv = None;
                        if !s.queue.borrow().done {
                            self.reset_debt += 1;
                        }
                        ev.push(reset_event(id, &e));
                        self.abort(id, Code::H3_REQUEST_CANCELLED.value());
                        return false;
                    }
                }
            } else {
                match recv.poll_recv_trailers(&mut cx) {
                    Poll::Pending => return false,
                    Poll::Ready(Ok(trailers)) => {
                        s.recv = None;
                        ev.push(Event::RequestEnd {
                            stream: id,
                            trailers,
                        });
                        return true;
                    }
                    Poll::Ready(Err(e)) => {
                        s.recv = None;
                        if !s.queue.borrow().done {
                            self.reset_debt += 1;
                        }
                        ev.push(reset_event(id, &e));
                        self.abort(id, Code::H3_REQUEST_CANCELLED.value());
                        return false;
                    }
                }
            }
        }
        false
    }

    /// Sees which writers finished, failed or emptied their queue.
    pub(super) fn poll_responses(&mut self) -> bool {
        let mut progress = false;
        let mut gone = Vec::new();
        for (id, s) in self.streams.iter_mut() {
            let q = s.queue.borrow();
            if let Some(code) = q.failed {
                // The client stopped the response (STOP_SENDING).
                if code.is_some() {
                    self.reset_debt += 1;
                }
                self.events.push_back(Event::Reset { stream: *id, code });
                gone.push(*id);
            } else if s.settled() {
                self.reset_debt = self.reset_debt.saturating_sub(1);
                self.unacked.insert(*id);
                gone.push(*id);
            } else if s.notify_drain && q.bytes == 0 {
                s.notify_drain = false;
                if !s.end_sent {
                    self.events.push_back(Event::SendReady { stream: *id });
                }
            }
        }
        for id in gone {
            progress = true;
            self.abort(id, Code::H3_REQUEST_CANCELLED.value());
        }
        progress
    }

    pub(super) fn forget(&mut self, id: u64) {
        let mut q = self.quic.0.borrow_mut();
        if !self.unacked.contains(&id) {
            q.finished.remove(&id);
        }
        q.written.remove(&id);
        drop(q);
        if let Some(s) = self.streams.remove(&id) {
            // The writer task ends on its own: its queue says so.
            let mut q = s.queue.borrow_mut();
            if !q.done && q.failed.is_none() {
                q.failed = Some(None);
                q.commands.clear();
            }
        }
    }

    pub(super) fn settle_connection(&mut self) {
        let lost = self.quic.lost();
        if let Some(reason) = lost {
            let ids: Vec<u64> = self.streams.keys().copied().collect();
            for id in ids {
                self.events.push_back(Event::Reset {
                    stream: id,
                    code: None,
                });
                self.forget(id);
            }
            self.tasks.clear();
            let code = match &reason {
                quinn_proto::ConnectionError::ApplicationClosed(c) => {
                    Some(c.error_code.into_inner())
                }
                quinn_proto::ConnectionError::LocallyClosed => self.quic.0.borrow().closed_with,
                _ => None,
            };
            let clean = matches!(reason, quinn_proto::ConnectionError::LocallyClosed)
                && self.closing
                || code == Some(Code::H3_NO_ERROR.value());
            self.events.push_back(Event::Closed {
                code: code.filter(|_| !clean),
                error: (!clean).then(|| {
                    // h3 closed it itself (a protocol error): its account
                    // says more than quinn's "closed".
                    let h3 = self.calmed.clone().or(self.shared.borrow().ended.clone());
                    match (&reason, h3) {
                        (quinn_proto::ConnectionError::LocallyClosed, Some(e)) => e,
                        _ => reason.to_string(),
                    }
                }),
            });
            self.closed = true;
            return;
        }
        {
            let mut q = self.quic.0.borrow_mut();
            let finished = &mut q.finished;
            self.unacked.retain(|id| !finished.remove(id));
        }
        let sh = self.shared.borrow();
        let drained = sh.goaway_id.is_some()
            && self.streams.is_empty()
            && self.unacked.is_empty()
            && sh.resolving == 0;
        drop(sh);
        // GOAWAY sent and every admitted request answered: close with
        // H3_NO_ERROR once the GOAWAY went out (a client whose request
        // crossed it learns from it that the request was not processed).
        // An abrupt shutdown closes with its own code instead.
        if drained && !self.closing && self.close_pending.is_none() {
            self.closing = true;
            self.close_pending = Some(Code::H3_NO_ERROR.value());
        }
    }

    pub(super) fn stream(&mut self, id: u64) -> Result<&mut Stream, H3Error> {
        self.streams.get_mut(&id).ok_or(H3Error::UnknownStream)
    }
}
