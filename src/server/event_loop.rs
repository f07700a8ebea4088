//! The app server's loop (`AppServer`): wait in epoll, accept, route
//! each event to its connection, sweep deadlines.

use std::io::{self, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant, SystemTime};

use mio::{Events, Interest, Token};
use pyo3::prelude::*;

use super::app_server::{AppServer, COMPLETIONS, FILE_EVENTS, FIRST_CONNECTION, NEXT_TURN};
use super::listener::{
    listener_index, listener_token, Listener, ACCEPT_BATCH, ACCEPT_RETRY, WAKEUP,
};
use crate::conn::{Connection, Disposition, Protocol, ReadState, Stream, TlsStream, WriteState};
use crate::dispatch::client_text;
use crate::dispatch::refresh::{DetachedRefresh, RefreshJob, REFRESH_CONNECTION};
use crate::dispatch::Outcome;
use crate::exchange::StreamKey;
use crate::inflight::InFlight;
use crate::metrics;

/// Most reads that discard a closing HTTP/2 client's input at the drain's
/// deadline (of the read buffer's size each).
const CLOSE_READ_ROUNDS: usize = 16;

/// Most one warning per this interval about idle connections closed at the cap.
pub(crate) const EVICTION_WARNING_INTERVAL: Duration = Duration::from_secs(10);

impl AppServer {
    pub(crate) fn drain_finished(&self) -> bool {
        match self.drain_deadline {
            Some(deadline) => self.connections.is_empty() || Instant::now() >= deadline,
            None => false,
        }
    }

    /// Ends the drain: every connection left is closed. An HTTP/2 one first
    /// gets GOAWAY with the last stream it took (its streams still running
    /// are cut: the deadline passed), written as far as the socket takes
    /// it; its FIN follows, and what the client still sent is read away so
    /// the close is not a reset that could discard the GOAWAY on its side.
    /// Each request or stream still answered gets its access-log line as a
    /// cut one (`Core::http2_stream_cut`); dropping a connection tells its
    /// running apps the client is gone (ASGI `http.disconnect`).
    pub(crate) fn close_all(&mut self) {
        // QUIC connections: their CONNECTION_CLOSE goes out through the UDP
        // socket once the loop over the slab is done.
        let mut quic_closing = Vec::new();
        for (key, connection) in self.connections.iter_mut() {
            match connection.protocol {
                Protocol::Http2(_) => {}
                // A request still answered is cut: logged once.
                Protocol::Http1 if connection.request.in_flight.is_some() => {
                    Python::attach(|py| self.core.log_cut_request(py, &*connection));
                    continue;
                }
                _ => continue,
            }
            // The streams still answered are cut: each logged once.
            Python::attach(|py| self.core.http2_cut_all(py, connection));
            let Protocol::Http2(session) = &mut connection.protocol else {
                continue;
            };
            session.conn.abrupt_shutdown(rush_h2::Reason::NO_ERROR);
            if session.conn.is_quic() {
                quic_closing.push(key);
                continue;
            }
            session.conn.take_output(&mut connection.sink.output);
            if connection.write_output().is_err() {
                continue;
            }
            connection.stream.shutdown_write();
            for _ in 0..CLOSE_READ_ROUNDS {
                match connection.stream.read(&mut self.core.read_buffer) {
                    Ok(count) if count > 0 => {}
                    _ => break,
                }
            }
        }
        for key in quic_closing {
            self.quic_after(key);
        }
        self.connections.clear();
    }

    /// One epoll wait (without the GIL when it may block) and the work it reports.
    pub(crate) fn run_once(&mut self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<()> {
        let poll = &mut self.poll;
        let events = &mut self.events;
        let result = if timeout == Some(Duration::ZERO) {
            poll.poll(events, timeout)
        } else {
            py.detach(|| poll.poll(events, timeout))
        };
        match result {
            Ok(()) => {}
            // A signal arrived: let Python run its handlers (which may raise).
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {
                return py.check_signals();
            }
            Err(error) => return Err(error.into()),
        }
        self.core.now = Instant::now();
        if let Some(liveness) = &self.core.liveness {
            liveness.get().beat();
        }
        self.core.date.refresh(SystemTime::now());
        let events = std::mem::replace(&mut self.events, Events::with_capacity(0));
        // A file change reported in the same batch as a request must be seen
        // first, or that request could get the stale cached file.
        if events.iter().any(|event| event.token() == FILE_EVENTS) {
            self.core.static_files.handle_file_events();
        }
        let mut check_signals = false;
        let mut completions = false;
        // Connections that used their share of the last turn: driven after
        // every connection this turn reports.
        let next_turn = self.core.next_turn.take();
        for event in events.iter() {
            match event.token() {
                token if listener_index(token).is_some() => {
                    if let Some(index) = listener_index(token) {
                        self.accept_from(py, index);
                    }
                }
                WAKEUP => check_signals = true,
                crate::http3::QUIC_TIMER => self.quic_timers(py),
                token if crate::http3::socket_index(token).is_some() => {
                    if let Some(index) = crate::http3::socket_index(token) {
                        self.quic_readable(py, index);
                    }
                }
                FILE_EVENTS => {}
                COMPLETIONS => completions = true,
                NEXT_TURN => {}
                Token(token) => {
                    let key = token - FIRST_CONNECTION;
                    // Writability matters only to a connection with output waiting.
                    let writable_only = event.is_writable()
                        && !event.is_readable()
                        && !event.is_error()
                        && !event.is_write_closed();
                    if writable_only
                        && self
                            .connections
                            .get(key)
                            .is_some_and(|connection| !connection.has_pending_output())
                    {
                        continue;
                    }
                    if event.is_read_closed() || event.is_error() || event.is_write_closed() {
                        if let Some(connection) = self.connections.get_mut(key) {
                            connection.peer_sent_fin = true;
                        }
                    }
                    self.drive_connection(py, key);
                }
            }
        }
        self.events = events;
        if self.core.now >= self.next_sweep {
            self.sweep_deadlines(py);
        }
        if completions {
            self.complete_finished_work(py)?;
        }
        for key in std::mem::take(&mut self.drive_soon) {
            self.drive_connection(py, key);
        }
        for key in next_turn {
            if key >= super::quic_loop::SOCKET_TURN {
                self.quic_readable(py, key - super::quic_loop::SOCKET_TURN);
            } else {
                self.drive_connection(py, key);
            }
        }
        self.wake_parked(py);
        self.stop_at_request_limit(py);
        self.resume_accepting(py);
        if check_signals {
            py.check_signals()?;
        }
        Ok(())
    }

    /// Completes requests whose work finished on a pool thread.
    pub(crate) fn complete_finished_work(&mut self, py: Python<'_>) -> PyResult<()> {
        let Some((fd, drain)) = &self.completion_source else {
            return Ok(());
        };
        let mut scratch = [0u8; 256];
        // SAFETY: `fd` is the non-blocking read end registered by
        // `set_completion_source`, kept open by its Python owner; `scratch`
        // is a live local buffer of the length passed.
        while unsafe { libc::read(*fd, scratch.as_mut_ptr().cast(), scratch.len()) } > 0 {}
        let finished = drain.call0(py)?;
        for item in finished.bind(py).try_iter()? {
            let (key, request_id, future): (u64, u64, Bound<'_, PyAny>) = item?.extract()?;
            let key = StreamKey::from_token(key);
            if future.is_none() {
                // A pool thread streaming a body queued more of it.
                if self.is_streaming_from_pool(key, request_id) {
                    self.drive_connection(py, key.connection);
                }
                continue;
            }
            super::guarded(self, py, Some(key.connection), |app| {
                app.complete_request(py, key, request_id, &future)
            });
        }
        Ok(())
    }

    /// Whether connection `key` is streaming the body of request `request_id`.
    fn is_streaming_from_pool(&self, key: StreamKey, request_id: u64) -> bool {
        self.request_unit(key).is_some_and(|unit| {
            matches!(&unit.in_flight, Some(InFlight::Stream(stream)) if stream.request_id == request_id)
        })
    }

    pub(crate) fn drive_connection(&mut self, py: Python<'_>, key: usize) {
        let Some(connection) = self.connections.get_mut(key) else {
            return;
        };
        let core = &mut self.core;
        let disposition = match catch_unwind(AssertUnwindSafe(|| {
            core.drive_protocol(py, connection, key)
        })) {
            Ok(disposition) => disposition,
            Err(_) => {
                core.log_error(
                    py,
                    "internal error while serving a connection; closing it",
                    None,
                );
                Disposition::Close
            }
        };
        if disposition == Disposition::Close {
            self.close_connection(key);
        } else if self.quic.is_some() {
            // A QUIC connection sends through the worker's UDP socket.
            self.quic_after(key);
        }
    }

    /// Dispatches again the parked requests that may go on (a cache fill
    /// they waited for completed, or its lock timed out): an HTTP/1.1
    /// connection's buffered request is processed again, an HTTP/2 stream's
    /// kept head dispatched again. Then starts the detached refreshes the
    /// lookups asked for. Either may complete another fill, so this runs
    /// until none is left.
    pub(crate) fn wake_parked(&mut self, py: Python<'_>) {
        loop {
            let woken = std::mem::take(self.core.woken.get_mut());
            let jobs = std::mem::take(self.core.refresh_jobs.get_mut());
            if woken.is_empty() && jobs.is_empty() {
                return;
            }
            for key in woken {
                self.wake_request(py, key);
            }
            for job in jobs {
                self.start_refresh(py, job);
            }
        }
    }

    /// Dispatches one parked request again (see [`Self::wake_parked`]).
    fn wake_request(&mut self, py: Python<'_>, key: StreamKey) {
        let Some(connection) = self.connections.get_mut(key.connection) else {
            return;
        };
        if let Protocol::Http2(_) = connection.protocol {
            self.core
                .http2_wake(py, connection, key.connection, key.stream);
            self.drive_connection(py, key.connection);
            return;
        }
        // The key may name a newer connection by now: only a parked
        // request is woken.
        if key.stream != 0
            || !matches!(
                connection.request.in_flight,
                Some(InFlight::AwaitingFill(None))
            )
        {
            return;
        }
        connection.request.in_flight = None;
        let timer = connection.state.request_unparked();
        connection.start_timer(Some(timer), self.core.now, &self.core.config);
        self.drive_connection(py, key.connection);
    }

    /// Starts a detached cache refresh; one whose handler goes on off the
    /// loop is kept until it completes.
    fn start_refresh(&mut self, py: Python<'_>, job: RefreshJob) {
        self.next_refresh = self.next_refresh.wrapping_add(1).max(1);
        let number = self.next_refresh;
        let key = StreamKey {
            connection: REFRESH_CONNECTION,
            stream: number,
        };
        let mut refresh = DetachedRefresh::new(job, self.core.now);
        let outcome = self.core.run_refresh(py, &mut refresh, key);
        if matches!(outcome, Outcome::Pending) {
            self.refreshes.insert(number, refresh);
        }
    }

    /// From the sweep: refreshes still running past their lock timeout are
    /// given up (their app is told its client left); the stale answer stays,
    /// and the next stale hit may start another.
    pub(crate) fn drop_overdue_refreshes(&mut self, py: Python<'_>) {
        let now = self.core.now;
        let overdue: Vec<u32> = self
            .refreshes
            .iter()
            .filter(|(_, refresh)| refresh.deadline <= now)
            .map(|(&number, _)| number)
            .collect();
        for number in overdue {
            if let Some(refresh) = self.refreshes.remove(&number) {
                if let Some(in_flight) = &refresh.unit.in_flight {
                    in_flight.client_gone();
                }
                self.core.log_warning(
                    py,
                    "a cache refresh outlived the route's lock timeout: given up, the stale answer stays",
                );
            }
        }
    }

    /// Closes a connection (dropping it closes the socket and tells a
    /// running app), and takes its output off the worker's budget.
    pub(crate) fn close_connection(&mut self, key: usize) {
        if let Some(mut connection) = self.connections.try_remove(key) {
            match connection.protocol {
                // Its streams still answered are cut: each logged once.
                Protocol::Http2(ref session) if !session.streams.is_empty() => {
                    Python::attach(|py| self.core.http2_cut_all(py, &mut connection));
                }
                Protocol::Http1 if connection.request.in_flight.is_some() => {
                    Python::attach(|py| self.core.log_cut_request(py, &connection));
                }
                _ => {}
            }
            metrics::count(metrics::Counter::ConnectionsClosed, 1);
            self.core.unaccount_output(&connection);
            if let Some(quic) = self.quic.as_mut() {
                quic.forget(key);
            }
            if self.core.debug {
                // Called from paths with and without a `py` at hand; the
                // loop thread holds the GIL either way.
                Python::attach(|py| {
                    let message = format!("connection from {} closed", client_text(&connection));
                    self.core.log_debug(py, &message);
                });
            }
        }
    }

    fn rearm_listener(&mut self, index: usize) {
        if let Some(listener) = self.listeners.get_mut(index) {
            let _ = listener.register(self.poll.registry(), listener_token(index), true);
        }
    }

    /// Accepting paused at the connection cap resumes once there is room.
    /// Edge-triggered: connections that queued meanwhile raise no new event,
    /// so the loop accepts them itself.
    /// Also retries accepting after an error (EMFILE, ENFILE) once its
    /// back-off has passed.
    pub(crate) fn resume_accepting(&mut self, py: Python<'_>) {
        if let Some(retry_at) = self.accept_retry_at {
            if self.core.now < retry_at {
                return;
            }
            self.accept_retry_at = None;
            self.accept_connections(py);
        }
        let room = self.connections.len() < self.core.config.max_connections;
        if self.accept_paused && room {
            self.accept_paused = false;
            self.accept_connections(py);
        }
    }

    /// Accepts (and serves at once) connections queued on every listener,
    /// at most one batch from each; returns the most taken from one of them.
    pub(crate) fn accept_connections(&mut self, py: Python<'_>) -> usize {
        let mut most = 0;
        for index in 0..self.listeners.len() {
            most = most.max(self.accept_from(py, index));
            if self.accept_paused || self.accept_retry_at.is_some() {
                break;
            }
        }
        most
    }

    /// Accepts (and serves at once) connections queued on listener `index`,
    /// at most one batch; returns how many it accepted.
    fn accept_from(&mut self, py: Python<'_>, index: usize) -> usize {
        let mut accepted_now = 0;
        loop {
            if self.core.request_limit_reached {
                // --max-requests: not one connection more (see
                // `stop_at_request_limit`, which the loop calls next).
                return accepted_now;
            }
            if accepted_now == ACCEPT_BATCH {
                // Leave the rest of the queue to the other workers woken by the
                // same event; re-arming raises a new event here if any remain.
                self.rearm_listener(index);
                return accepted_now;
            }
            // At the cap, a newcomer is admitted only in exchange for an idle
            // keep-alive connection; with none, accepting pauses.
            let at_cap = self.connections.len() >= self.core.config.max_connections;
            if at_cap && self.longest_idle_connection().is_none() {
                self.accept_paused = true;
                return accepted_now;
            }
            let tls = &self.tls;
            let accepted = match self.listeners.get(index) {
                Some(Listener::Tcp(listener)) => listener.accept().and_then(|(stream, address)| {
                    // Responses are written whole; Nagle would only delay them.
                    let _ = stream.set_nodelay(true);
                    let stream = match tls {
                        None => Stream::Tcp(stream),
                        Some((config, gate)) => {
                            let session = rustls::ServerConnection::new(config.clone())
                                .map_err(io::Error::other)?;
                            Stream::Tls(Box::new(TlsStream::new(stream, session, gate)))
                        }
                    };
                    Ok((stream, Some(address)))
                }),
                Some(Listener::Unix(listener)) => listener
                    .accept()
                    .map(|(stream, _)| (Stream::Unix(stream), None)),
                None => return accepted_now,
            };
            let (stream, client) = match accepted {
                Ok(accepted) => {
                    accepted_now += 1;
                    if at_cap {
                        self.evict_longest_idle(py);
                    }
                    accepted
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return accepted_now,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if error.kind() == io::ErrorKind::ConnectionAborted => continue,
                Err(error) => {
                    // EMFILE, ENFILE, ENOBUFS: the queue is still there, but
                    // the edge-triggered listener will not report it again
                    // until someone new arrives. Retry after a pause (the
                    // loop wakes for it), logging once per back-off.
                    if self.accept_retry_at.is_none() {
                        let message = format!(
                            "accept failed: {error}; retrying in {} ms",
                            ACCEPT_RETRY.as_millis()
                        );
                        self.core.log_error(py, &message, None);
                    }
                    self.accept_retry_at = Some(self.core.now + ACCEPT_RETRY);
                    return accepted_now;
                }
            };
            // Listener indices fit: `--bind` takes a handful of addresses.
            let listener = u16::try_from(index).unwrap_or(u16::MAX);
            let mut connection =
                Connection::new(stream, client, listener, self.core.now, &self.core.config);
            connection.trusted_proxy = self
                .core
                .forwarding
                .as_ref()
                .is_some_and(|forwarding| forwarding.trusts_peer(client));
            if self.core.debug {
                let message = format!("connection from {} opened", client_text(&connection));
                self.core.log_debug(py, &message);
            }
            let key = self.connections.insert(connection);
            metrics::count(metrics::Counter::ConnectionsAccepted, 1);
            if self.tls.is_some() {
                // The handshake counts as the start of a request: the header
                // timeout applies from accept.
                if let Some(connection) = self.connections.get_mut(key) {
                    connection.deadline = Some(self.core.now + self.core.config.header_timeout);
                }
            }
            // A connection accepted now may carry a request sent after a file
            // changed, later than this batch's inotify events: read them first.
            if !self.core.static_files.is_empty() {
                self.core.static_files.handle_file_events();
            }
            // The listener has TCP_DEFER_ACCEPT, so the request is usually here
            // already: serve it now, and register with epoll only a connection
            // that stays open (a `Connection: close` exchange never needs to).
            self.drive_connection(py, key);
            let Some(connection) = self.connections.get_mut(key) else {
                continue;
            };
            let token = Token(key + FIRST_CONNECTION);
            if self
                .poll
                .registry()
                .register(
                    &mut connection.stream,
                    token,
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                self.close_connection(key);
            }
        }
    }

    /// The connection idle the longest: keep-alive, nothing unread,
    /// nothing unsent (its keep-alive deadline is the earliest).
    fn longest_idle_connection(&self) -> Option<usize> {
        self.connections
            .iter()
            .filter(|(_, connection)| {
                matches!(connection.state.read(), ReadState::Idle)
                    && connection.state.write() == WriteState::Ready
                    && !connection.has_pending_output()
                    && connection.stream.unread_bytes() == 0
            })
            .filter_map(|(key, connection)| Some((connection.deadline?, key)))
            .min()
            .map(|(_, key)| key)
    }

    /// At the connection cap, makes room for a newcomer as nginx does: the
    /// longest-idle keep-alive connection is closed, so a crowd of idle
    /// clients cannot lock new ones out. Logged at warning level, at most
    /// once per interval.
    fn evict_longest_idle(&mut self, py: Python<'_>) {
        let Some(key) = self.longest_idle_connection() else {
            return;
        };
        self.close_connection(key);
        if self.core.now >= self.next_eviction_warning {
            self.next_eviction_warning = self.core.now + EVICTION_WARNING_INTERVAL;
            let message = format!(
                "{} connections open, the --max-connections limit: closing the longest-idle \
                 keep-alive connections to admit new ones (logged at most every {} s)",
                self.connections.len() + 1,
                EVICTION_WARNING_INTERVAL.as_secs()
            );
            self.core.log_warning(py, &message);
        }
    }

    /// Handshakes refused at the cap are logged, at most once per interval
    /// (the count covers every refusal since the last line).
    fn report_refused_handshakes(&mut self, py: Python<'_>) {
        let Some((_, gate)) = &self.tls else {
            return;
        };
        if self.core.now < self.next_handshake_warning {
            return;
        }
        let refused = gate.take_refused();
        if refused == 0 {
            return;
        }
        self.next_handshake_warning = self.core.now + EVICTION_WARNING_INTERVAL;
        let message = format!(
            "{refused} TLS handshakes refused: too many in progress at once, the \
             --ssl-max-handshakes limit (logged at most every {} s)",
            EVICTION_WARNING_INTERVAL.as_secs()
        );
        self.core.log_warning(py, &message);
    }

    /// Closes connections whose deadline passed; a client that stalled in
    /// the middle of a request gets a 408 first.
    pub(crate) fn sweep_deadlines(&mut self, py: Python<'_>) {
        let now = self.core.now;
        self.next_sweep = now + Duration::from_secs(1);
        self.core.static_files.rewatch_lost_mounts();
        self.report_refused_handshakes(py);
        // Paused at the cap because nothing was idle: a connection that has
        // gone idle since can make room now (checked here, once a second,
        // to keep the scan off the busy path).
        if self.accept_paused && self.longest_idle_connection().is_some() {
            self.accept_paused = false;
            self.accept_connections(py);
        }
        // Requests parked on a cache fill that is overdue go to the handler.
        let router = self.core.router.clone_ref(py);
        let released = router
            .bind(py)
            .borrow()
            .response_cache
            .borrow_mut()
            .release_overdue_fills(now);
        self.core.wake(released);
        self.drop_overdue_refreshes(py);
        let mut expired = Vec::new();
        let mut woken = Vec::new();
        // Refused (408) mid-request: logged once the scan is over.
        let mut timed_out = Vec::new();
        // PROXY headers not complete in time: refused once the scan is over.
        let mut late_proxy_headers = Vec::new();
        // HTTP/2 streams to reset and log once the scan is over.
        let mut stalled_streams: Vec<(usize, u32)> = Vec::new();
        let mut stalled_ids = Vec::new();
        self.core.date.refresh(SystemTime::now());
        let date_line = self.core.date.header_line();
        for (key, connection) in self.connections.iter_mut() {
            if let Some(write_deadline) = connection.sink.write_deadline {
                // Output is pending: only the send timeout applies, in every
                // state (a slow download is not an idle connection).
                if now >= write_deadline {
                    expired.push(key);
                }
                continue;
            }
            if connection.awaiting_proxy_header {
                // Its bytes wait unread in the socket (peeked): not an idle
                // connection with a request to serve, as below.
                if connection.deadline.is_some_and(|deadline| now >= deadline) {
                    late_proxy_headers.push(key);
                }
                continue;
            }
            if let Protocol::WebSocket(session) = &mut connection.protocol {
                match self.core.sweep_websocket(py, session, now) {
                    crate::ws::SweepAction::Close => {
                        expired.push(key);
                        continue;
                    }
                    crate::ws::SweepAction::Drive => woken.push(key),
                    crate::ws::SweepAction::Nothing => {}
                }
                // The accept deadline (set until the app answers the handshake).
                if connection.deadline.is_some_and(|deadline| now >= deadline) {
                    expired.push(key);
                }
                continue;
            }
            if let Protocol::Http2(session) = &mut connection.protocol {
                // A stream whose peer never opens its window: reset after
                // the send timeout, as a stalled socket would be closed
                // (after the scan, where it is logged).
                let before = stalled_streams.len();
                session.find_stalled_streams(now, self.core.config.send_timeout, &mut stalled_ids);
                // WebSocket streams (RFC 8441): pings, and their deadlines.
                let ping = self
                    .core
                    .http2_sweep_websockets(py, session, now, &mut stalled_ids);
                stalled_streams.extend(stalled_ids.drain(..).map(|id| (key, id)));
                if stalled_streams.len() > before || ping {
                    woken.push(key);
                }
                if connection.deadline.is_some_and(|deadline| now >= deadline) {
                    if !session.shutdown_requested {
                        // Idle past --keep-alive-timeout (or the drain's
                        // grace): GOAWAY, then close once it is written
                        // (the drive lingers and sets its own deadline).
                        if session.streams.is_empty() {
                            session.close_idle();
                        } else {
                            session.shut_down();
                        }
                        connection.deadline = Some(now + crate::options::LINGER_TIMEOUT);
                        woken.push(key);
                    } else if session.streams.is_empty() {
                        expired.push(key);
                    } else {
                        // Streams still finish; the drain's own timeout
                        // bounds them.
                        connection.deadline = None;
                    }
                }
                let body_overdue = session
                    .body_deadline
                    .is_some_and(|deadline| now >= deadline);
                if body_overdue && woken.last() != Some(&key) {
                    // A stream's request body is overdue: the drive ends
                    // that stream (`--body-timeout`), the others go on.
                    woken.push(key);
                }
                continue;
            }
            if connection.deadline.is_none_or(|deadline| now < deadline) {
                release_idle_buffers(&mut self.core.output_total, connection);
                continue;
            }
            match connection.state.read() {
                ReadState::Head | ReadState::Body(_) => {
                    // A client that stalled in the middle of a request gets a
                    // 408 and a lingering close, as any refusal: the drive
                    // writes it, shuts the write side and discards what still
                    // comes for a bounded time. Closing at once would answer
                    // the client's next byte (a slowloris drips on) with an
                    // RST, which can cost it the 408.
                    rush_proto::encode::write_request_timeout(
                        &mut connection.sink.output,
                        date_line,
                    );
                    metrics::refused(408);
                    connection.state.refused();
                    connection.deadline = Some(now + crate::options::LINGER_TIMEOUT);
                    // Logged with the peer's address (see `refuse`).
                    connection.request.origin = None;
                    timed_out.push((key, "408 the request did not arrive in time"));
                    woken.push(key);
                    continue;
                }
                // An idle connection whose next request just arrived is
                // served, not closed under it.
                ReadState::Idle if connection.stream.unread_bytes() > 0 => {
                    woken.push(key);
                    continue;
                }
                _ => {}
            }
            expired.push(key);
        }
        for (key, id) in stalled_streams {
            if let Some(connection) = self.connections.get_mut(key) {
                self.core.http2_stream_cut(py, connection, id);
                if let Protocol::Http2(session) = &mut connection.protocol {
                    session.conn.reset(id, rush_h2::Reason::CANCEL);
                }
            }
        }
        for key in late_proxy_headers {
            if let Some(connection) = self.connections.get(key) {
                self.core.refuse_proxy_header(
                    py,
                    connection,
                    "PROXY protocol: no complete header within --header-timeout",
                );
            }
            expired.push(key);
        }
        for (key, what) in timed_out {
            if let Some(connection) = self.connections.get(key) {
                self.core.log_refusal(py, connection, what);
            }
        }
        self.core.report_unlogged_refusals(py);
        for key in expired {
            if self.core.debug {
                if let Some(connection) = self.connections.get(key) {
                    let message = format!(
                        "connection from {} timed out ({})",
                        client_text(connection),
                        timeout_name(connection)
                    );
                    self.core.log_debug(py, &message);
                }
            }
            self.close_connection(key);
        }
        // Driven by the loop's next pass, not from here: in asyncio mode the
        // sweep runs inside a task (`tick`), where no handler may start.
        self.drive_soon.extend(woken);
    }
}

/// Which timeout ended a connection, for the debug log.
fn timeout_name(connection: &Connection) -> &'static str {
    if connection.sink.write_deadline.is_some() {
        return "--send-timeout: the client stopped reading";
    }
    match connection.state.read() {
        ReadState::Head => "--header-timeout",
        ReadState::Body(_) => "--body-timeout",
        ReadState::Idle => "--keep-alive-timeout",
        _ => "a timeout",
    }
}

/// Gives back the buffers of a connection idle between requests (found by
/// the once-a-second sweep). A keep-alive connection keeps its input and
/// output buffers' capacity from request to request, which saves two
/// allocations per request while it is busy; once it is found idle, the
/// memory goes back, so thousands of idle keep-alive connections hold only
/// their `Connection` (issue 25: RSS per idle connection). One busy between
/// two requests at the sweep pays two allocations once a second.
fn release_idle_buffers(output_total: &mut usize, connection: &mut Connection) {
    let idle = matches!(connection.protocol, Protocol::Http1)
        && matches!(connection.state.read(), ReadState::Idle)
        && connection.state.write() == WriteState::Ready
        && connection.input.is_empty()
        && connection.sink.output.is_empty()
        && connection.sink.body.is_none();
    if !idle {
        return;
    }
    if connection.input.capacity() != 0 {
        connection.input = Vec::new();
    }
    if connection.sink.output.capacity() != 0 {
        connection.sink.output = Vec::new();
        // The worker's output budget counted this capacity (see
        // `Core::account_output`).
        *output_total -= connection.sink.accounted;
        connection.sink.accounted = 0;
    }
}
