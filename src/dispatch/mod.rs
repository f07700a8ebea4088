//! Dispatch: what the interfaces share, and the dispatcher's surface to a
//! protocol driver.
//!
//! How it works: [`Core`] holds what every request of the worker needs (the
//! router, static files, the app settings, the date, loggers); the helpers
//! here (the access log, a handler's result rendered, the 500 page) write
//! through the response-writer seam (`crate::exchange`). Each interface
//! has its own home above this module: the native App's routing, which
//! runs first for every request (`crate::app`), WSGI (`crate::wsgi`) and
//! ASGI (`crate::asgi`). Each path ends in an [`Outcome`] that the
//! protocol turns into its connection's next state. A protocol driver
//! tells a request in flight what happens through `events.rs`; a handler
//! that is still running (a suspended coroutine, a pool thread) is
//! `Outcome::Pending`, finished later through `resume.rs` (called by
//! `crate::server::Server::complete`); `cached.rs` answers from and fills
//! the response cache for every interface and protocol, and `refresh.rs`
//! runs the detached refreshes of stale answers.

pub(crate) mod cached;
mod events;
pub(crate) mod incoming;
pub(crate) mod refresh;
mod resume;

use std::time::Instant;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use rush_proto::{DateCache, HeaderSpan, RequestHead};

use crate::access_log::{AccessEntry, AccessFormat};
use crate::asgi::objects::AsgiSettings;
use crate::coroutine::{self, send_none, CoroutineStart, Step};
use crate::exchange::{ResponseWriter, StreamKey};
use crate::forwarding::Forwarding;
use crate::inflight::AwaitingResponse;
use crate::liveness::Liveness;
use crate::log_limit::LogLimit;
use crate::options::LoopConfig;
use crate::request::Request;
use crate::request_context::RequestContexts;
use crate::response::{render_result, write_status_page, ResponseContext};
use crate::router::{Handler, Router};
use crate::static_files::StaticFiles;
use crate::wsgi::environ::WsgiSettings;

/// What every request of one worker needs besides its connection.
pub(crate) struct Core {
    pub(crate) router: Py<Router>,
    pub(crate) static_files: StaticFiles,
    pub(crate) config: LoopConfig,
    pub(crate) date: DateCache,
    pub(crate) now: Instant,
    pub(crate) read_buffer: Vec<u8>,
    pub(crate) header_scratch: Vec<HeaderSpan>,
    /// Decoded chunked-body bytes on their way to a `BodyBuffer`.
    pub(crate) body_scratch: Vec<u8>,
    pub(crate) error_logger: Py<PyAny>,
    pub(crate) access_logger: Option<Py<PyAny>>,
    pub(crate) async_scheduler: Option<coroutine::Runner>,
    /// The context each request starts from (see [`RequestContexts`]).
    pub(crate) contexts: RequestContexts,
    /// Runs `call_wsgi(app, environ)` on a thread pool (`--threads`):
    /// called as `scheduler(app, environ, key, request_id)`.
    pub(crate) blocking_scheduler: Option<Py<PyAny>>,
    /// The app behind the router, chosen once at start-up.
    pub(crate) app: AppInterface,
    /// `notifier(key, request_id)` returns the callable an ASGI `send` calls
    /// after each message once the app has suspended.
    pub(crate) asgi_notifier: Option<Py<PyAny>>,
    /// The id given to the next request that continues off the loop.
    pub(crate) next_request_id: u64,
    /// Request lines of ASGI apps still running after their response was
    /// complete (background work), by request id: a late exception is
    /// logged with the request it belongs to.
    pub(crate) detached_requests: std::collections::HashMap<u64, String>,
    pub(crate) draining: bool,
    /// The worker began its `--max-requests` (see `liveness.rs`): the loop
    /// stops accepting and asks for its successor.
    pub(crate) request_limit_reached: bool,
    /// While a request is answered: complete bytes of later pipelined
    /// requests are already buffered on its connection (a draining worker
    /// answers those too before it closes).
    pub(crate) pipelined_after: bool,
    /// Unsent output summed over the worker's connections (as of each
    /// connection's last drive).
    pub(crate) output_total: usize,
    /// Connections that used their share of this turn of the loop and go
    /// on in the next (see `crate::next_turn`).
    pub(crate) next_turn: crate::next_turn::NextTurn,
    /// While a request is answered: it can be dispatched again as it is
    /// (whole in its HTTP/1.1 connection's input, or an HTTP/2 stream with
    /// no body), so it may be parked to wait for a cache fill.
    pub(crate) may_park: bool,
    /// Parked requests that may go on now (their cache fill completed):
    /// the server dispatches them again after the current event.
    /// (A `RefCell`: the cache lookup, which holds `&self`, may wake some.)
    pub(crate) woken: std::cell::RefCell<Vec<StreamKey>>,
    /// Refreshes of stale cache answers that lookups asked for, started by
    /// the server after the current event (`refresh.rs`).
    pub(crate) refresh_jobs: std::cell::RefCell<Vec<refresh::RefreshJob>>,
    /// The page this worker shares with its supervisor (`--timeout`,
    /// `--max-requests`), if it has one: each request is counted there.
    pub(crate) liveness: Option<Py<Liveness>>,
    /// `--proxy-headers` rules; `None` when off.
    pub(crate) forwarding: Option<Forwarding>,
    /// `--access-log-format`; `None`: the classic `client - "line" status size`.
    pub(crate) access_format: Option<AccessFormat>,
    /// `--log-format json`: the access logger also gets the line's fields.
    pub(crate) access_fields: bool,
    /// Refused requests are logged (the log level shows warnings).
    pub(crate) log_refusals: bool,
    pub(crate) refusal_limit: LogLimit,
    /// `--log-level debug`: connections opening, closing and timing out.
    pub(crate) debug: bool,
    /// WebSocket connections with something for the loop (`crate::ws::channel`).
    pub(crate) ws_flush: std::sync::Arc<crate::ws::flush::FlushQueue>,
}
/// How requests that no native route answers reach the app: a closed set
/// of three, chosen once when the worker starts. (An enum rather than a
/// trait object: the three are known, each lives in its own module, and
/// the choice is made in one `match` in `app/dispatch.rs`.)
pub(crate) enum AppInterface {
    /// A rush `App`: its routes are the router's; anything else is a 404.
    Native,
    /// A WSGI app (`crate::wsgi`), on the loop thread or the `--threads` pool.
    Wsgi(WsgiSettings),
    /// An ASGI app (`crate::asgi`), on the worker's asyncio loop.
    Asgi(AsgiSettings),
}

/// What became of a dispatched request.
pub(crate) enum Outcome {
    /// Answered; the connection may serve the next request.
    KeepAlive,
    /// Answered; close after writing.
    Close,
    /// An async handler is still running.
    Pending,
    /// Not answered: the request waits for a cache fill (`cached.rs`) and
    /// is dispatched again when woken (HTTP/1.1: it stays unconsumed in
    /// the input; HTTP/2: its stream keeps its head).
    Parked,
}
impl Core {
    /// Whether the answer being written must close its connection because
    /// the worker drains: yes, unless later requests the client already
    /// pipelined are waiting in the buffer (they are answered first, the
    /// last of them with `Connection: close`; closing after the first would
    /// leave the client to retry the rest).
    pub(crate) fn closes_for_drain(&self) -> bool {
        self.draining && !self.pipelined_after
    }

    /// Runs a coroutine's first step in `context`, the request's own (see
    /// [`coroutine::start`]).
    pub(crate) fn start_coroutine<'py>(
        &self,
        py: Python<'py>,
        context: &Bound<'py, PyAny>,
        coroutine: &Bound<'py, PyAny>,
        key: StreamKey,
        request_id: u64,
    ) -> PyResult<CoroutineStart<'py>> {
        // Completions name the stream (its key as a token) and the request
        // id, which the stream's request must still carry.
        let hold = matches!(self.app, AppInterface::Asgi(_));
        coroutine::start(
            py,
            self.async_scheduler.as_ref(),
            context,
            coroutine,
            (key.token(), request_id),
            hold,
        )
    }

    /// Logs the exception of a task that finished after its response was
    /// complete or its connection gone.
    pub(crate) fn log_late_failure(
        &mut self,
        py: Python<'_>,
        request_id: u64,
        task: &Bound<'_, PyAny>,
    ) {
        let line = self.detached_requests.remove(&request_id);
        let line = line.as_deref();
        let cancelled = task
            .call_method0(pyo3::intern!(py, "cancelled"))
            .and_then(|cancelled| cancelled.is_truthy())
            .unwrap_or(false);
        if cancelled {
            return;
        }
        if let Ok(exception) = task.call_method0(pyo3::intern!(py, "exception")) {
            // The ConnectionResetError our own send() raises once the client
            // is gone, left uncaught by an app whose client left: that is
            // the client's doing, not an error of the app (hostile resets
            // alone would flood the log with tracebacks).
            let client_reset = line.is_none()
                && exception.is_instance_of::<pyo3::exceptions::PyConnectionResetError>();
            if !exception.is_none() && !client_reset {
                let error = PyErr::from_value(exception);
                let message = match line {
                    Some(line) => {
                        format!("Exception in ASGI app for {line} after its response was complete")
                    }
                    None => "Exception in an app whose client had left".to_owned(),
                };
                self.log_error(py, &message, Some(error));
            }
        }
    }

    /// A native 500 for an error that was already logged.
    pub(crate) fn write_internal_error<W: ResponseWriter>(
        &self,
        connection: &mut W,
        awaiting: &AwaitingResponse,
    ) -> Outcome {
        let keep_alive = awaiting.keep_alive && !self.closes_for_drain();
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: awaiting.head_only,
            keep_alive,
            http10: awaiting.http10,
            request_head: &[],
            allow: None,
        };
        write_status_page(connection, 500, std::iter::empty(), &context, false);
        keep_or_close(keep_alive)
    }

    /// Answers a request from its handler's `result`: rendered, or the 500
    /// page when it raised or cannot be rendered; logged.
    pub(crate) fn finish<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        awaiting: &AwaitingResponse,
        request_head: &[u8],
        line: &RequestLine<'_>,
        result: PyResult<Bound<'_, PyAny>>,
    ) -> Outcome {
        let default_status = awaiting.default_status;
        self.finish_with(
            py,
            connection,
            awaiting,
            request_head,
            line,
            |context, connection| {
                result.and_then(|value| {
                    render_result(py, &value, default_status, context, connection)
                })
            },
        )
    }

    /// [`Core::finish`] for an answer that is not a Python value (a WSGI
    /// app's collected response): `render` writes it, or fails as a 500.
    pub(crate) fn finish_with<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        awaiting: &AwaitingResponse,
        request_head: &[u8],
        line: &RequestLine<'_>,
        render: impl FnOnce(&ResponseContext<'_>, &mut W) -> PyResult<crate::http_write::Rendered>,
    ) -> Outcome {
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: awaiting.head_only,
            // A drain that began while the handler ran closes after its response.
            keep_alive: awaiting.keep_alive && !self.closes_for_drain(),
            http10: awaiting.http10,
            request_head,
            allow: awaiting.allow.as_deref(),
        };
        let mark = connection.response_mark();
        let rendered = render(&context, connection);
        let (status, length, close) = match rendered {
            Ok(rendered) => {
                connection.set_body(rendered.body);
                (rendered.status, rendered.body_length, rendered.close)
            }
            Err(error) => {
                connection.retract(mark);
                self.log_error(
                    py,
                    &format!("Exception in handler for {}", line.text()),
                    Some(error),
                );
                match self.render_error_page(py, awaiting, &context, connection) {
                    Some(rendered) => {
                        connection.set_body(rendered.body);
                        (rendered.status, rendered.body_length, rendered.close)
                    }
                    None => {
                        let length =
                            write_status_page(connection, 500, std::iter::empty(), &context, false);
                        (500, length, false)
                    }
                }
            }
        };
        self.access_log(py, connection, line, status, length);
        keep_or_close(awaiting.keep_alive && !close && !self.closes_for_drain())
    }

    /// The app's 500 page for a request whose handler raised, if it has one
    /// and it answers at once; `None` means the native 500.
    pub(crate) fn render_error_page<W: ResponseWriter>(
        &self,
        py: Python<'_>,
        awaiting: &AwaitingResponse,
        context: &ResponseContext<'_>,
        writer: &mut W,
    ) -> Option<crate::http_write::Rendered> {
        let request = awaiting.request.as_ref()?;
        let router = self.router.bind(py).borrow();
        let handler = router.error_handler(500)?;
        let callable = handler.callable.bind(py);
        // In a request context of its own, like any handler.
        let value = self.contexts.run(py, || {
            let value = callable.call1((request.bind(py),))?;
            if !handler.is_async {
                return Ok(value);
            }
            // A 500 page that awaits something is not worth a second
            // suspension; it must answer in its first step.
            match send_none(py, &value)? {
                Step::Returned(value) => Ok(value),
                Step::Yielded(_) => {
                    let _ = value.call_method0(pyo3::intern!(py, "close"));
                    Err(pyo3::exceptions::PyRuntimeError::new_err(
                        "an async 500 handler must not suspend",
                    ))
                }
            }
        });
        let mark = writer.response_mark();
        match value.and_then(|value| render_result(py, &value, 500, context, writer)) {
            Ok(rendered) => Some(rendered),
            Err(error) => {
                writer.retract(mark);
                self.log_error(py, "the app's 500 handler failed too", Some(error));
                None
            }
        }
    }

    /// One access-log line, if the access log is on.
    pub(crate) fn access_log<W: ResponseWriter>(
        &self,
        py: Python<'_>,
        connection: &W,
        line: &RequestLine<'_>,
        status: u16,
        length: usize,
    ) {
        self.access_log_status(py, connection, line, Some(status), length);
    }

    /// One access-log line and count, with `status` `None` for a request
    /// cut off before any response head went out (shown as `-`).
    pub(crate) fn access_log_status<W: ResponseWriter>(
        &self,
        py: Python<'_>,
        connection: &W,
        line: &RequestLine<'_>,
        status: Option<u16>,
        length: usize,
    ) {
        if crate::metrics::enabled() {
            crate::metrics::response(
                status,
                connection.started().elapsed(),
                connection.protocol(),
            );
        }
        let Some(logger) = &self.access_logger else {
            return;
        };
        let request_line = line.text();
        let duration = std::time::Instant::now().saturating_duration_since(connection.started());
        let text = match &self.access_format {
            // gunicorn's `%(h)s` (and the JSON field) is the address alone.
            Some(format) => format.render(&AccessEntry {
                client: &client_host(connection),
                request_line: &request_line,
                status,
                length,
                duration,
                headers: connection.log_headers(),
            }),
            None => match status {
                Some(status) => format!(
                    "{} - \"{request_line}\" {status} {length}",
                    client_text(connection)
                ),
                None => format!(
                    "{} - \"{request_line}\" - {length}",
                    client_text(connection)
                ),
            },
        };
        let result = if self.access_fields {
            // The fields for a structured (JSON) log, beside the line.
            let fields = (
                client_host(connection),
                request_line.as_ref(),
                status,
                length,
                duration.as_micros() as u64,
            );
            logger.call1(py, (text, fields))
        } else {
            logger.call1(py, (text,))
        };
        if let Err(error) = result {
            error.print(py);
        }
    }

    /// Logs a refused request at warning level, at most
    /// `LogLimit::PER_SECOND` lines a second (the rest are counted).
    pub(crate) fn log_refusal<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &W,
        what: &str,
    ) {
        if !self.log_refusals {
            return;
        }
        let Some(suppressed) = self.refusal_limit.admit(self.now) else {
            return;
        };
        let mut message = format!("refused a request from {}: {what}", client_text(connection));
        if suppressed > 0 {
            message.push_str(&format!(
                " ({suppressed} more refused since the last line, not logged)"
            ));
        }
        self.log_warning(py, &message);
    }

    /// From the once-a-second sweep: says how many refused requests were
    /// not logged in a second that is over, if no later line has said it.
    pub(crate) fn report_unlogged_refusals(&mut self, py: Python<'_>) {
        if let Some(count) = self.refusal_limit.overdue_count(self.now) {
            let message = format!(
                "{count} more refused since the last line, not logged (at most {} lines a second)",
                LogLimit::PER_SECOND
            );
            self.log_warning(py, &format!("refused requests: {message}"));
        }
    }

    /// Logs at debug level (only called when `debug` is on).
    pub(crate) fn log_debug(&self, py: Python<'_>, message: &str) {
        if let Err(logging_error) = self.error_logger.call1(py, (message, py.None(), "debug")) {
            logging_error.print(py);
        }
    }

    /// Logs at info level: an ordinary event of the worker's life.
    pub(crate) fn log_info(&self, py: Python<'_>, message: &str) {
        if let Err(logging_error) = self.error_logger.call1(py, (message, py.None(), "info")) {
            logging_error.print(py);
        }
    }

    /// Logs at warning level: something the operator should see that is
    /// not a failure (a limit reached, say).
    pub(crate) fn log_warning(&self, py: Python<'_>, message: &str) {
        if let Err(logging_error) = self.error_logger.call1(py, (message, py.None(), "warning")) {
            logging_error.print(py);
        }
    }

    pub(crate) fn log_error(&self, py: Python<'_>, message: &str, error: Option<PyErr>) {
        let exception = error.map(|error| error.into_value(py).into_any());
        if let Err(logging_error) = self.error_logger.call1(py, (message, exception)) {
            // The logger itself failed: say so on stderr rather than nowhere.
            logging_error.print(py);
        }
    }
}
pub(crate) fn keep_or_close(keep_alive: bool) -> Outcome {
    if keep_alive {
        Outcome::KeepAlive
    } else {
        Outcome::Close
    }
}

pub(crate) fn client_text<W: ResponseWriter>(connection: &W) -> String {
    if let Some((host, _)) = connection.origin().and_then(|o| o.client.as_ref()) {
        return host.clone();
    }
    match connection.client() {
        Some(address) => address.to_string(),
        None => "unix".to_owned(),
    }
}

/// The client's address without the port (the reported one, if a trusted
/// proxy reported one); `unix` on a Unix socket.
pub(crate) fn client_host<W: ResponseWriter>(connection: &W) -> String {
    if let Some((host, _)) = connection.origin().and_then(|o| o.client.as_ref()) {
        return host.clone();
    }
    match connection.client() {
        Some(address) => address.ip().to_string(),
        None => "unix".to_owned(),
    }
}

/// `METHOD target HTTP/x.y` of a request, formatted only when a log needs it.
pub(crate) enum RequestLine<'a> {
    Raw(&'a [u8], &'a RequestHead),
    Owned(&'a str),
}

impl RequestLine<'_> {
    pub(crate) fn text(&self) -> std::borrow::Cow<'_, str> {
        match self {
            RequestLine::Raw(head_bytes, head) => request_line(head_bytes, head).into(),
            RequestLine::Owned(text) => (*text).into(),
        }
    }
}

pub(crate) fn request_line(head_bytes: &[u8], head: &RequestHead) -> String {
    // Pushed into one allocation of the right size: `format!` cost ~1.5k
    // instructions, paid by every streamed or suspended response.
    let method = String::from_utf8_lossy(head.method_span.of(head_bytes));
    let target = String::from_utf8_lossy(head.target.of(head_bytes));
    let version = head.version.as_str();
    let mut line = String::with_capacity(method.len() + target.len() + version.len() + 7);
    line.push_str(&method);
    line.push(' ');
    line.push_str(&target);
    line.push_str(" HTTP/");
    line.push_str(version);
    line
}

/// Calls a handler with the request and its path parameters as keywords:
/// a plain handler runs in a fresh request context; an async one only
/// makes its coroutine here, which starts in its own (`start_coroutine`).
pub(crate) fn call_handler<'py>(
    py: Python<'py>,
    contexts: &RequestContexts,
    handler: &Handler,
    request: &Bound<'py, Request>,
    params: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let callable = handler.callable.bind(py);
    let call = || match params {
        None => callable.call1((request,)),
        Some(params) => callable.call(PyTuple::new(py, [request])?, Some(params)),
    };
    if handler.is_async {
        call()
    } else {
        contexts.run(py, call)
    }
}
