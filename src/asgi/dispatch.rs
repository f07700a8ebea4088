//! ASGI, the loop's half: start the app with its scope, run its first step
//! inline, and write what it sends (framed by the server) as it sends it,
//! through the response-writer seam (`crate::exchange`). The objects the
//! app sees (scope, `receive`, `send`) are `objects.rs`.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rush_proto::encode::{connection_has_close, is_framing_header, status_has_no_body};
use rush_proto::{Method, Version};

use super::objects::{address_object, build_scope, AsgiReceive, ScopePeer};
use super::send::{send_callable, AsgiSend, SendState};
use crate::body::RequestBody;
use crate::cache::CacheFill;
use crate::coroutine::CoroutineStart;
use crate::dispatch::incoming::IncomingRequest;
use crate::dispatch::{keep_or_close, AppInterface, Core, Outcome, RequestLine};
use crate::exchange::{BodyLength, ResponseHead, ResponseWriter};
use crate::http_write::ResponseContext;
use crate::inflight::{AsgiExchange, AwaitingResponse, InFlight};
use crate::options::OUTPUT_FAIR_SHARE;
use crate::request_context::in_context;
use crate::static_files::{load_app_file, serve_file, ConditionalHeaders, FileAnswer};

impl Core {
    /// Hands body bytes that arrived for a running ASGI app to its
    /// `receive()` (see [`Core::request_body`]).
    pub(crate) fn push_asgi_body(
        &self,
        py: Python<'_>,
        exchange: &AsgiExchange,
        chunk: &[u8],
        done: bool,
    ) {
        if let Ok(mut receive) = exchange.receive.bind(py).try_borrow_mut() {
            if let Err(error) = receive.push_body(py, chunk, done) {
                self.log_error(
                    py,
                    "cannot hand a request body to the ASGI app",
                    Some(error),
                );
            }
        }
    }

    /// Runs the ASGI app for a request: first step inline, the rest (if it
    /// suspends) as an asyncio task.
    pub(crate) fn dispatch_asgi<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        request: IncomingRequest<'_>,
        body: AsgiBody<'_>,
        fill: Option<CacheFill>,
    ) -> Outcome {
        let start = connection.response_mark();
        let outcome = self.run_asgi(py, connection, request, body);
        if !matches!(outcome, Outcome::Pending) {
            // Answered within this call.
            self.complete_cache_fill(py, connection, fill, Some(start), &outcome);
        } else if let Some(fill) = fill {
            // Sent in parts from now on: the writer records them into the
            // request unit; the fill completes with the response.
            if let Some(InFlight::Handler(awaiting)) = connection.request() {
                awaiting.cache_fill = Some(fill);
            } else {
                self.complete_cache_fill(py, connection, Some(fill), None, &outcome);
            }
        }
        outcome
    }

    /// Starts the ASGI app for a request (see `dispatch_asgi`).
    fn run_asgi<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        request: IncomingRequest<'_>,
        body: AsgiBody<'_>,
    ) -> Outcome {
        let (key, head_bytes, head, keep_alive) = request.parts();
        let mut awaiting = AwaitingResponse::new(head, keep_alive, 200);
        let line = request.line();
        let (receive, body_flowing) = match body {
            AsgiBody::Complete(body) => (body.to_owned_body().map(AsgiReceive::new), false),
            AsgiBody::Streaming { initial } => (Ok(AsgiReceive::streaming(initial)), true),
        };
        let receive = match receive {
            Ok(receive) => receive,
            Err(error) => {
                return self.finish(
                    py,
                    connection,
                    &awaiting,
                    head_bytes,
                    &line,
                    Err(error.into()),
                )
            }
        };
        if connection.peer_objects().address.is_none() {
            match address_object(py, connection.client()) {
                Ok(client) => connection.peer_objects().address = Some(client),
                Err(error) => {
                    return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
                }
            }
        }
        let AppInterface::Asgi(settings) = &self.app else {
            unreachable!("dispatch_asgi is called only with an ASGI app");
        };
        let app = settings.app.clone_ref(py);
        // What the app's `send()` takes before it waits: the response's own
        // high-water mark, or, while the worker is over its output budget,
        // a fair share (a connection holding little may still start a
        // response then, and this bounds what it starts). An answer of one
        // part that fits completes without waiting either way.
        let producer_high_water = if self.output_total > self.config.output_budget {
            OUTPUT_FAIR_SHARE.min(connection.high_water())
        } else {
            connection.high_water()
        };
        let peer = connection.peer();
        let client = peer.objects.address.as_ref().expect("set just above");
        let origin = peer.origin;
        let tls = peer.tls;
        let proxy = peer.proxy;
        let listener = peer.listener;
        // The request's context: the app is called in it (a plain callable
        // that returns a coroutine runs code here), and its coroutine runs in it.
        let context = match self.contexts.fresh(py) {
            Ok(context) => context,
            Err(error) => {
                return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
            }
        };
        let scope_peer = ScopePeer {
            client,
            origin,
            listener,
        };
        let started =
            build_scope(py, settings, head_bytes, head, scope_peer).and_then(|(scope, headers)| {
                // The extensions rush implements for http (and tls, below):
                // trailers where the protocol carries them (HTTP/2, as
                // hypercorn offers them; sent only if the request said
                // `TE: trailers`), Early Hints to any client that reads an
                // interim response (not HTTP/1.0).
                let extensions = PyDict::new(py);
                extensions
                    .set_item(pyo3::intern!(py, "http.response.pathsend"), PyDict::new(py))?;
                if matches!(head.version, Version::Http2 | Version::Http3) {
                    extensions
                        .set_item(pyo3::intern!(py, "http.response.trailers"), PyDict::new(py))?;
                }
                let early_hints = head.version != Version::Http10;
                if early_hints {
                    extensions.set_item(
                        pyo3::intern!(py, "http.response.early_hint"),
                        PyDict::new(py),
                    )?;
                }
                if let Some(proxy) = proxy {
                    extensions.set_item(pyo3::intern!(py, "proxy_protocol"), proxy.to_dict(py)?)?;
                }
                scope.set_item(pyo3::intern!(py, "extensions"), extensions)?;
                let request_headers = Some(headers.into_any().unbind());
                if let Some(tls) = &tls {
                    // A proxy's word on the scheme wins; else the transport's.
                    if origin.is_none_or(|origin| origin.https.is_none()) {
                        scope.set_item(pyo3::intern!(py, "scheme"), pyo3::intern!(py, "https"))?;
                    }
                    crate::tls::add_asgi_extension(py, &scope, tls)?;
                }
                let receive = Py::new(py, receive)?;
                let mut send = AsgiSend::new(request_headers);
                send.early_hints_offered = early_hints;
                send.high_water = producer_high_water;
                send.trailers_offered = matches!(head.version, Version::Http2 | Version::Http3);
                send.get_or_head = matches!(head.method, Method::Get | Method::Head);
                let send = Py::new(py, send)?;
                receive.bind(py).borrow_mut().send = Some(send.clone_ref(py));
                let send_function = send_callable(send.bind(py))?;
                let arguments = (scope, receive.clone_ref(py), send_function);
                let coroutine = in_context(py, &context, || app.bind(py).call1(arguments))?;
                Ok((coroutine, AsgiExchange { send, receive }))
            });
        let (coroutine, exchange) = match started {
            Ok(started) => started,
            Err(error) => {
                return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
            }
        };
        let write = AsgiWrite {
            keep_alive,
            head_only: awaiting.head_only,
            http10: awaiting.http10,
            app_finished: false,
        };
        self.next_request_id += 1;
        awaiting.request_id = self.next_request_id;
        // An app that answers before its body has fully arrived leaves the
        // connection mid-body: it closes after the response.
        let unread_body = |outcome: Outcome| match outcome {
            Outcome::KeepAlive if body_flowing => Outcome::Close,
            other => other,
        };
        match self.start_coroutine(py, &context, &coroutine, key, awaiting.request_id) {
            Ok(CoroutineStart::Finished(_)) => unread_body(self.complete_asgi(
                py,
                connection,
                &awaiting,
                &exchange,
                &line,
                Ok(py.None().into_bound(py)),
            )),
            Err(error) => unread_body(self.complete_asgi(
                py,
                connection,
                &awaiting,
                &exchange,
                &line,
                Err(error),
            )),
            Ok(CoroutineStart::Continuing) => {
                // The app goes on as a task: from now on each send() is flushed,
                // and a drained body queue lets the loop read on.
                if let Some(notifier) = &self.asgi_notifier {
                    match notifier.call1(py, (key.token(), awaiting.request_id)) {
                        Ok(notify) => {
                            exchange.receive.bind(py).borrow_mut().notify =
                                Some(notify.clone_ref(py));
                            exchange.send.bind(py).borrow_mut().notify = Some(notify);
                        }
                        Err(error) => {
                            self.log_error(py, "cannot stream an ASGI response", Some(error))
                        }
                    }
                }
                // Whatever was sent before the first suspension goes out now.
                if let Some(outcome) = self.write_asgi(py, connection, &exchange, write, &line) {
                    return unread_body(outcome);
                }
                awaiting.request_line = line.text().into_owned();
                awaiting.asgi = Some(exchange);
                connection.response_pending(body_flowing);
                *connection.request() = Some(InFlight::Handler(Box::new(awaiting)));
                Outcome::Pending
            }
        }
    }

    /// Runs a coroutine's first step inline, as the runner's spare asyncio
    /// task (see python/rush/coroutines.py), in a fresh context copy. A
    /// coroutine that suspends is handed to `runner.adopt(...)` and goes on
    /// as that task. Without a runner (no asyncio loop), a coroutine that
    /// finishes at once is still fine; one that would suspend is an error.
    pub(crate) fn complete_asgi<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        awaiting: &AwaitingResponse,
        exchange: &AsgiExchange,
        line: &RequestLine<'_>,
        result: PyResult<Bound<'_, PyAny>>,
    ) -> Outcome {
        let (head_written, complete) = {
            let send = exchange.send.bind(py).borrow();
            (send.head_written, send.state == SendState::Complete)
        };
        let write = AsgiWrite {
            keep_alive: awaiting.keep_alive,
            head_only: awaiting.head_only,
            http10: awaiting.http10,
            app_finished: true,
        };
        if let Err(error) = result {
            self.log_error(
                py,
                &format!("Exception in ASGI app for {}", line.text()),
                Some(error),
            );
            if complete {
                // The app sent its whole response (an error page, say) and then
                // raised, for the server to log: the client gets that response.
                return self
                    .write_asgi(py, connection, exchange, write, line)
                    .unwrap_or(Outcome::Close);
            }
            exchange.receive.bind(py).borrow_mut().finish(py);
            if !head_written {
                return self.write_internal_error(connection, awaiting);
            }
            // Part of the response is on the wire: all we can do is close.
            return Outcome::Close;
        }
        match self.write_asgi(py, connection, exchange, write, line) {
            Some(outcome) => outcome,
            None => Outcome::Close,
        }
    }

    /// Writes what the app has sent so far. Returns the outcome once the
    /// response is complete (or can never be), `None` while it goes on.
    pub(crate) fn write_asgi<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        exchange: &AsgiExchange,
        write: AsgiWrite,
        line: &RequestLine<'_>,
    ) -> Option<Outcome> {
        let send = exchange.send.bind(py);
        let mut send = send.borrow_mut();
        if send.pathsend.is_some() {
            if !send.head_written {
                drop(send);
                return Some(self.write_pathsend(py, connection, exchange, write, line));
            }
            // The head went out before the app asked for the file (it
            // suspended in between): the file follows as ordinary body.
            let path = send.pathsend.take().unwrap_or_default();
            match std::fs::read(&path) {
                Ok(contents) => send.pending_body = contents,
                Err(error) => {
                    drop(send);
                    let message = format!(
                        "http.response.pathsend: cannot read {}: {error}",
                        path.display()
                    );
                    self.log_error(py, &message, None);
                    exchange.receive.bind(py).borrow_mut().finish(py);
                    return Some(Outcome::Close);
                }
            }
        }
        if !send.head_written && !send.early_hints.is_empty() {
            let links = std::mem::take(&mut send.early_hints);
            connection.send_early_hints(links.iter().map(Vec::as_slice));
        }
        // Trailers go out only where the protocol and the request take them
        // (see `ResponseWriter::accepts_trailers`); elsewhere they are
        // dropped and the response ends as if none had been announced.
        let with_trailers = send.trailers_announced && connection.accepts_trailers();
        if !send.head_written {
            let unfinished = send.state != SendState::Complete;
            if send.state == SendState::AwaitingStart && !write.app_finished {
                return None;
            }
            if unfinished && write.app_finished {
                let client_left = send.disconnected
                    || exchange
                        .receive
                        .bind(py)
                        .try_borrow()
                        .is_ok_and(|receive| receive.client_left);
                if client_left {
                    // The client left before any head (a long poll given
                    // up): no 500 for nobody. Logged with `-`, as a stream
                    // the client reset before its head is over HTTP/2.
                    drop(send);
                    exchange.receive.bind(py).borrow_mut().finish(py);
                    self.access_log_status(py, connection, line, None, 0);
                    return Some(Outcome::Close);
                }
                // Nothing is on the wire yet: the app's incomplete response
                // becomes a 500 (a complete one is sent as the app made it).
                let message = if send.state == SendState::AwaitingStart {
                    "the ASGI app returned without sending a response"
                } else {
                    "the ASGI app returned before finishing its response"
                };
                drop(send);
                let error = pyo3::exceptions::PyRuntimeError::new_err(message);
                return Some(self.asgi_error_page(py, connection, exchange, write, line, error));
            }
            let bodyless = status_has_no_body(send.status);
            let complete = send.state == SendState::Complete;
            let framing = if bodyless {
                AsgiFraming::NoBody
            } else if with_trailers {
                // The trailers end the stream, not the body's last byte.
                AsgiFraming::Chunked
            } else if let Some(length) = send.declared_length {
                AsgiFraming::Length(length)
            } else if complete {
                AsgiFraming::Length(send.pending_body.len() as u64)
            } else if !write.http10 {
                AsgiFraming::Chunked
            } else {
                AsgiFraming::UntilClose
            };
            let app_close = send.headers.iter().any(|(name, value)| {
                name.eq_ignore_ascii_case(b"connection") && connection_has_close(value)
            });
            let close = app_close || framing == AsgiFraming::UntilClose;
            let context = ResponseContext {
                date_line: self.date.header_line(),
                head_only: write.head_only,
                keep_alive: write.keep_alive && !close && !self.closes_for_drain(),
                http10: write.http10,
                request_head: &[],
                allow: None,
            };
            let head = ResponseHead {
                status: send.status,
                length: match framing {
                    AsgiFraming::NoBody => BodyLength::Empty,
                    AsgiFraming::Length(length) => BodyLength::Known(length),
                    AsgiFraming::Chunked => BodyLength::Streamed,
                    AsgiFraming::UntilClose => BodyLength::UntilClose,
                },
                close,
                context,
            };
            let fields = send
                .headers
                .iter()
                .map(|(name, value)| (name.as_slice(), value.as_slice()));
            connection.send_head(&head, fields);
            send.head_written = true;
            send.framing_close = close;
            send.bodyless = bodyless;
        }
        let pending = std::mem::take(&mut send.pending_body);
        send.body_written += pending.len() as u64;
        connection.send_body(&pending);
        let complete = send.state == SendState::Complete;
        if !complete && !write.app_finished {
            return None;
        }
        // The response is over: complete, or cut short by the app returning.
        // A cut-short response is never made to look complete: no final
        // chunk, and the connection closes.
        if complete && with_trailers {
            let trailers = send
                .trailers
                .iter()
                .map(|(name, value)| (name.as_slice(), value.as_slice()));
            connection.end_body(trailers);
        } else if complete {
            connection.end_body(std::iter::empty());
        } else {
            connection.abort_body();
        }
        let short = send.declared_length.is_some_and(|declared| {
            !write.head_only && !send.bodyless && send.body_written < declared
        });
        let close = send.framing_close || short || !complete || !write.keep_alive;
        let status = send.status;
        let length = send.body_written;
        let client_left = send.disconnected;
        drop(send);
        let mut receive = exchange.receive.bind(py).borrow_mut();
        let client_left = client_left || receive.client_left;
        receive.finish(py);
        drop(receive);
        if !complete && client_left {
            // A client leaving a stream (an SSE feed, say) is normal, and the
            // app stopping then is what it should do: not an error.
            self.log_debug(
                py,
                &format!(
                    "the client left during the response to {}; the ASGI app stopped",
                    line.text()
                ),
            );
        } else if !complete {
            self.log_error(
                py,
                &format!(
                    "the ASGI app for {} returned before finishing its response; closing the connection",
                    line.text()
                ),
                None,
            );
        } else if short {
            self.log_error(
                py,
                &format!(
                    "the ASGI app for {} sent less body than its Content-Length; closing the connection",
                    line.text()
                ),
                None,
            );
        }
        self.access_log(py, connection, line, status, length as usize);
        Some(keep_or_close(!close))
    }
}
impl Core {
    /// Answers with a 500 for an ASGI response that cannot be sent (nothing
    /// of it is on the wire yet): `error` is logged with the request.
    fn asgi_error_page<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        exchange: &AsgiExchange,
        write: AsgiWrite,
        line: &RequestLine<'_>,
        error: PyErr,
    ) -> Outcome {
        exchange.receive.bind(py).borrow_mut().finish(py);
        let awaiting = AwaitingResponse {
            request_id: 0,
            head_only: write.head_only,
            keep_alive: write.keep_alive,
            http10: write.http10,
            default_status: 500,
            request_line: String::new(),
            request_head: Vec::new(),
            asgi: None,
            allow: None,
            request: None,
            cache_fill: None,
        };
        self.finish(py, connection, &awaiting, &[], line, Err(error))
    }

    /// `http.response.pathsend`: the file goes out natively (`sendfile`),
    /// under the app's status and headers. A 200 is answered as `--static`
    /// answers (`crate::static_files::serve_file`): conditional requests
    /// judged by the app's own `ETag` and `Last-Modified`, a single byte
    /// range, HEAD. A file that cannot be opened is a 500.
    fn write_pathsend<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        exchange: &AsgiExchange,
        write: AsgiWrite,
        line: &RequestLine<'_>,
    ) -> Outcome {
        let mut send = exchange.send.bind(py).borrow_mut();
        let path = send.pathsend.take().unwrap_or_default();
        // The body is a file: the writer does not record it, and the
        // response is not cached.
        let loaded = load_app_file(
            &path,
            send.app_header(b"content-type"),
            send.app_header(b"etag"),
            send.app_header(b"last-modified"),
        );
        let file = match loaded {
            Ok(file) => file,
            Err(error) => {
                drop(send);
                let error = pyo3::exceptions::PyRuntimeError::new_err(format!(
                    "http.response.pathsend: cannot send {}: {error}",
                    path.display()
                ));
                return self.asgi_error_page(py, connection, exchange, write, line, error);
            }
        };
        let app_close = send.headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case(b"connection") && connection_has_close(value)
        });
        // The app's own fields, but those the file answer writes itself.
        let mut extra_lines = Vec::new();
        for (name, value) in &send.headers {
            let owned_by_file = [
                &b"content-type"[..],
                b"etag",
                b"last-modified",
                b"accept-ranges",
                b"date",
                b"server",
            ]
            .iter()
            .any(|owned| name.eq_ignore_ascii_case(owned));
            if !owned_by_file && !is_framing_header(name) {
                extra_lines.extend_from_slice(name);
                extra_lines.extend_from_slice(b": ");
                extra_lines.extend_from_slice(value);
                extra_lines.extend_from_slice(b"\r\n");
            }
        }
        let fields = send.conditional_fields(py);
        let status = send.status;
        drop(send);
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: write.head_only,
            keep_alive: write.keep_alive && !app_close && !self.closes_for_drain(),
            http10: write.http10,
            request_head: &[],
            allow: None,
        };
        let conditional = if status == 200 {
            ConditionalHeaders::from_fields(
                fields
                    .iter()
                    .map(|(name, value)| (name.as_slice(), value.as_slice())),
            )
        } else {
            // Another status (an error page from a file, say) is sent whole.
            ConditionalHeaders::default()
        };
        let answer = FileAnswer {
            file: &file,
            cache_control: None,
            extra_lines: &extra_lines,
            status: (status != 200).then_some(status),
        };
        let outcome = serve_file(answer, &conditional, &context, connection);
        connection.set_body(outcome.body);
        exchange.receive.bind(py).borrow_mut().finish(py);
        self.access_log(
            py,
            connection,
            line,
            outcome.status,
            outcome.body_length as usize,
        );
        keep_or_close(context.keep_alive)
    }
}

/// The body an ASGI app gets: complete, or still arriving (the rest comes
/// through the dispatcher's `request_body`).
pub(crate) enum AsgiBody<'a> {
    Complete(RequestBody<'a>),
    Streaming { initial: Vec<u8> },
}

/// How an ASGI response body is delimited on the wire.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum AsgiFraming {
    NoBody,
    Length(u64),
    Chunked,
    /// HTTP/1.0 without a known length: the body ends when the connection does.
    UntilClose,
}

/// The request facts `write_asgi` needs.
#[derive(Clone, Copy)]
pub(crate) struct AsgiWrite {
    pub(crate) keep_alive: bool,
    pub(crate) head_only: bool,
    pub(crate) http10: bool,
    /// The app returned: whatever is unsent now ends the response.
    pub(crate) app_finished: bool,
}
