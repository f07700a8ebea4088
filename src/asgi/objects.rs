//! ASGI 3 (HTTP) in the native loop: scope, `receive` and `send` in Rust.
//!
//! How it works:
//! * [`build_scope`] makes the `http` scope dict natively.
//! * `receive` and `send` are native callables whose awaitables are already
//!   complete ([`Ready`](super::awaitables::Ready)): awaiting them never suspends. So an app that
//!   awaits nothing else finishes in the loop's first `coroutine.send(None)`
//!   with no asyncio involvement, and its buffered response is framed with a
//!   `Content-Length`.
//! * An app that does suspend (I/O, sleeps, thread offloading) continues as
//!   an asyncio task. From then on, every `send` is flushed as it happens:
//!   the [`AsgiSend`](super::send::AsgiSend) object calls its `notify` hook, which asks the loop
//!   (through asyncio's `call_soon`, never re-entrantly) to write what was
//!   sent: chunked, or raw under the app's own Content-Length.
//! * Backpressure: once the response has 1 MiB unsent, `send` returns a
//!   pending future instead, resolved by the loop when the output drains
//!   (`Core::pace_request`, through `AsgiExchange::pace`), or failed with `ConnectionResetError`
//!   when the client is gone.
//! * The request body is handed over in `http.request` messages: whole when
//!   it had arrived with the head, or as it arrives (the app starts at the
//!   head, and the loop feeds `receive` through [`AsgiReceive::push_body`]).
//!   After it, `receive` waits until the response is complete or the client
//!   left, then says `http.disconnect`.
//! * A `receive()` that has to wait returns an awaitable of its own
//!   ([`ReceiveWait`]), as uvicorn's coroutine does: callers that wait at
//!   the same time (a disconnect listener and an `is_disconnected()` check)
//!   are independent, and one cancelled mid-wait loses no message.

use std::borrow::Cow;
use std::net::SocketAddr;

use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use rush_proto::{RequestHead, Version};

use super::awaitables::{ready, settle};
use super::send::{AsgiSend, SendState};
use crate::body::OwnedBody;
use crate::forwarding::{scheme_of, RequestOrigin};
use crate::listen_address::ListenAddress;
use crate::request::{decode_path, header_fields};

/// `(host, port)` as ASGI spells an address, or None (Unix sockets).
pub fn address_object(py: Python<'_>, address: Option<SocketAddr>) -> PyResult<Py<PyAny>> {
    Ok(match address {
        Some(address) => (address.ip().to_string(), address.port())
            .into_pyobject(py)?
            .into_any()
            .unbind(),
        None => py.None(),
    })
}

/// A listener as the scope's `server`: `(host, port)`, `(path, None)` for a
/// Unix socket (the ASGI spec's form, and uvicorn's), None if unknown.
fn server_object(py: Python<'_>, address: Option<&ListenAddress>) -> PyResult<Py<PyAny>> {
    match address {
        Some(ListenAddress::Tcp(address)) => address_object(py, Some(*address)),
        Some(ListenAddress::Unix(Some(path))) => Ok((path.to_string_lossy(), py.None())
            .into_pyobject(py)?
            .into_any()
            .unbind()),
        Some(ListenAddress::Unix(None)) | None => Ok(py.None()),
    }
}

/// Per-worker ASGI settings.
pub struct AsgiSettings {
    pub app: Py<PyAny>,
    /// The lifespan `state` dict; each scope gets a shallow copy.
    pub state: Option<Py<PyDict>>,
    /// Every key of an `http` scope, in order, with the values that are
    /// the same for every request (see [`build_scope`]).
    scope_template: Py<PyDict>,
    /// `--root-path` without its trailing slashes: put back in front of a
    /// path that arrives without it (see [`scope_path`]).
    root_path: String,
    /// The scope's `server` for each listener, in `--bind` order (the
    /// first one's is in the template).
    servers: Vec<Py<PyAny>>,
}

impl AsgiSettings {
    pub fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        root_path: String,
        state: Option<Py<PyDict>>,
        servers: &[Option<ListenAddress>],
    ) -> PyResult<Self> {
        let servers = servers
            .iter()
            .map(|address| server_object(py, address.as_ref()))
            .collect::<PyResult<Vec<_>>>()?;
        let asgi_version = PyDict::new(py);
        asgi_version.set_item("version", "3.0")?;
        asgi_version.set_item("spec_version", "2.3")?;
        // The order is the scope's key order; `None` marks the values each
        // request sets. `state` is a fresh copy per request, so it is last.
        let template = PyDict::new(py);
        template.set_item(pyo3::intern!(py, "type"), pyo3::intern!(py, "http"))?;
        template.set_item(pyo3::intern!(py, "asgi"), asgi_version)?;
        template.set_item(pyo3::intern!(py, "http_version"), pyo3::intern!(py, "1.1"))?;
        template.set_item(pyo3::intern!(py, "method"), py.None())?;
        template.set_item(pyo3::intern!(py, "scheme"), pyo3::intern!(py, "http"))?;
        template.set_item(pyo3::intern!(py, "path"), py.None())?;
        template.set_item(pyo3::intern!(py, "raw_path"), py.None())?;
        template.set_item(pyo3::intern!(py, "query_string"), py.None())?;
        template.set_item(pyo3::intern!(py, "root_path"), &root_path)?;
        let root_path = root_path.trim_end_matches('/').to_owned();
        template.set_item(pyo3::intern!(py, "headers"), py.None())?;
        template.set_item(pyo3::intern!(py, "client"), py.None())?;
        match servers.first() {
            Some(server) => template.set_item(pyo3::intern!(py, "server"), server)?,
            None => template.set_item(pyo3::intern!(py, "server"), py.None())?,
        }
        if state.is_some() {
            template.set_item(pyo3::intern!(py, "state"), py.None())?;
        }
        Ok(AsgiSettings {
            app,
            state,
            scope_template: template.unbind(),
            root_path,
            servers,
        })
    }
}

/// Where a request came from, as a scope tells it.
pub struct ScopePeer<'a> {
    /// The connection's peer address as its Python object (made once per
    /// connection).
    pub client: &'a Py<PyAny>,
    /// What a trusted proxy said of the client, scheme and host.
    pub origin: Option<&'a RequestOrigin>,
    /// The listener it came through: its `server` entry (0: the template's).
    pub listener: usize,
}

/// Builds the `http` connection scope for one request.
///
/// How: a copy of the worker's template (one C call that clones the key
/// table, already sized for every key, so no insertion ever resizes it),
/// then the request's own values set over the placeholders. Building it
/// key by key cost about a fifth of a raw ASGI hello's CPU.
///
/// Returns the scope and its `headers` list (which `send` keeps for
/// `http.response.pathsend`: handed over here, it need not be looked up).
pub fn build_scope<'py>(
    py: Python<'py>,
    settings: &AsgiSettings,
    head_bytes: &[u8],
    head: &RequestHead,
    peer: ScopePeer<'_>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyList>)> {
    let ScopePeer {
        client,
        origin,
        listener,
    } = peer;
    let scope = settings.scope_template.bind(py).copy()?;
    if listener != 0 {
        if let Some(server) = settings.servers.get(listener) {
            scope.set_item(pyo3::intern!(py, "server"), server)?;
        }
    }
    match head.version {
        Version::Http11 => {}
        Version::Http10 => {
            scope.set_item(pyo3::intern!(py, "http_version"), pyo3::intern!(py, "1.0"))?
        }
        Version::Http2 => {
            scope.set_item(pyo3::intern!(py, "http_version"), pyo3::intern!(py, "2"))?
        }
        Version::Http3 => {
            scope.set_item(pyo3::intern!(py, "http_version"), pyo3::intern!(py, "3"))?
        }
    }
    scope.set_item(
        pyo3::intern!(py, "method"),
        method_object(py, head.method_span.of(head_bytes)),
    )?;
    if scheme_of(origin) == "https" {
        scope.set_item(pyo3::intern!(py, "scheme"), pyo3::intern!(py, "https"))?;
    }
    let forwarded_host = origin.and_then(|origin| origin.host.as_deref());
    let (path, raw_path) = scope_path(&settings.root_path, head.path.of(head_bytes));
    scope.set_item(pyo3::intern!(py, "path"), path.as_ref())?;
    scope.set_item(pyo3::intern!(py, "raw_path"), PyBytes::new(py, &raw_path))?;
    let query = head.query.map(|query| query.of(head_bytes)).unwrap_or(b"");
    scope.set_item(pyo3::intern!(py, "query_string"), PyBytes::new(py, query))?;
    let mut fields = Vec::with_capacity(16);
    let mut lowered = Vec::with_capacity(64);
    for (name, value) in header_fields(head_bytes) {
        lowered.clear();
        lowered.extend(name.iter().map(u8::to_ascii_lowercase));
        // The proxy's host replaces the one it was sent (`--forwarded-host`).
        let value = match forwarded_host {
            Some(host) if lowered == b"host" => host.as_bytes(),
            _ => value,
        };
        fields.push(PyTuple::new(
            py,
            [PyBytes::new(py, &lowered), PyBytes::new(py, value)],
        )?);
    }
    let headers = PyList::new(py, fields)?;
    scope.set_item(pyo3::intern!(py, "headers"), &headers)?;
    match origin
        .map(|origin| origin.client_tuple(py))
        .transpose()?
        .flatten()
    {
        Some(forwarded) => scope.set_item(pyo3::intern!(py, "client"), forwarded)?,
        None => scope.set_item(pyo3::intern!(py, "client"), client.bind(py))?,
    }
    if let Some(state) = &settings.state {
        scope.set_item(pyo3::intern!(py, "state"), state.bind(py).copy()?)?;
    }
    Ok((scope, headers))
}

/// The scope's `path` and `raw_path` for a request path: the path that
/// came, or, under a `--root-path` that it does not start with, that root
/// path and then the path. A proxy that mounts the app under a prefix and
/// strips it (FastAPI's "behind a proxy" set-up) sends `/items`; the app
/// must still see `/api/items` with `root_path` `/api`, or the URLs it
/// builds from the request (`request.url`, Starlette's trailing-slash
/// redirects) lose the prefix. uvicorn prepends it always, also to a path
/// that already has it (`/api/items` becomes `/api/api/items`); rush, like
/// the WSGI side's `SCRIPT_NAME` split, takes a path that starts with the
/// root path (at a `/` or its end) as already whole.
fn scope_path<'a>(root_path: &str, raw_path: &'a [u8]) -> (Cow<'a, str>, Cow<'a, [u8]>) {
    let path = decode_path(raw_path);
    let whole = match path.strip_prefix(root_path) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    };
    if root_path.is_empty() || whole {
        return (path, Cow::Borrowed(raw_path));
    }
    let mut raw = Vec::with_capacity(root_path.len() + raw_path.len());
    raw.extend_from_slice(root_path.as_bytes());
    raw.extend_from_slice(raw_path);
    (Cow::Owned(format!("{root_path}{path}")), Cow::Owned(raw))
}

/// The scope's `method`: the usual ones are shared interned strings, so
/// they cost no allocation.
fn method_object<'py>(py: Python<'py>, method: &[u8]) -> Bound<'py, PyString> {
    let shared = match method {
        b"GET" => pyo3::intern!(py, "GET"),
        b"POST" => pyo3::intern!(py, "POST"),
        b"HEAD" => pyo3::intern!(py, "HEAD"),
        b"PUT" => pyo3::intern!(py, "PUT"),
        b"DELETE" => pyo3::intern!(py, "DELETE"),
        b"PATCH" => pyo3::intern!(py, "PATCH"),
        b"OPTIONS" => pyo3::intern!(py, "OPTIONS"),
        other => return PyString::new(py, std::str::from_utf8(other).unwrap_or("GET")),
    };
    shared.clone()
}

/// Largest body piece handed over in one `http.request` message.
const RECEIVE_CHUNK: usize = 64 * 1024;

/// The `receive` callable: the body in `http.request` messages of at most
/// [`RECEIVE_CHUNK`] bytes, then `http.disconnect` after the response is
/// complete.
#[pyclass(module = "rush._rush", freelist = 32)]
pub struct AsgiReceive {
    body: OwnedBody,
    /// Body bytes handed over so far; `None` before the first message.
    delivered: Option<u64>,
    /// A body still arriving (the app started before it was complete).
    stream: Option<BodyStream>,
    /// The wake-up futures of the `receive()` calls waiting now, one each
    /// (see [`ReceiveWait`]): all are resolved when anything changes.
    waiters: Vec<Py<PyAny>>,
    finished: bool,
    /// The client left (rather than the response being complete).
    pub client_left: bool,
    /// The request's `send`: once the app has sent its whole response,
    /// `receive()` says `http.disconnect`, even before the loop wrote it.
    pub send: Option<Py<AsgiSend>>,
    /// Called (from the app's side) when the app drained a queue the loop
    /// had stopped filling, so the loop reads on. Schedules; never re-enters.
    pub notify: Option<Py<PyAny>>,
}

/// Body pieces that arrived and were not handed to the app yet.
struct BodyStream {
    queued: std::collections::VecDeque<Vec<u8>>,
    queued_bytes: usize,
    /// The whole body has arrived.
    complete: bool,
    /// The message with `more_body: False` was handed over.
    final_sent: bool,
    /// The loop stopped reading because the queue was full.
    paused: bool,
}

/// The loop stops reading a streamed body while this much waits for the app.
pub const STREAM_BACKLOG_LIMIT: usize = 1024 * 1024;

impl AsgiReceive {
    pub fn new(body: OwnedBody) -> AsgiReceive {
        AsgiReceive {
            body,
            delivered: None,
            stream: None,
            waiters: Vec::new(),
            finished: false,
            client_left: false,
            send: None,
            notify: None,
        }
    }

    /// A receive for a body still arriving; `initial` is what came with the head.
    pub fn streaming(initial: Vec<u8>) -> AsgiReceive {
        let mut receive = AsgiReceive::new(OwnedBody::Bytes(Box::new([])));
        let queued_bytes = initial.len();
        let mut queued = std::collections::VecDeque::new();
        if !initial.is_empty() {
            queued.push_back(initial);
        }
        receive.stream = Some(BodyStream {
            queued,
            queued_bytes,
            complete: false,
            final_sent: false,
            paused: false,
        });
        receive
    }

    /// More of a streamed body arrived (`complete`: it was the end).
    pub fn push_body(&mut self, py: Python<'_>, data: &[u8], complete: bool) -> PyResult<()> {
        let Some(stream) = &mut self.stream else {
            return Ok(());
        };
        if !data.is_empty() {
            stream.queued_bytes += data.len();
            stream.queued.push_back(data.to_vec());
        }
        stream.complete |= complete;
        self.wake_waiters(py);
        Ok(())
    }

    /// Whether the loop may read more of a streamed body now; when it may
    /// not, the app's next `receive()` asks it to resume.
    pub fn wants_more(&mut self) -> bool {
        match &mut self.stream {
            Some(stream) if stream.queued_bytes >= STREAM_BACKLOG_LIMIT => {
                stream.paused = true;
                false
            }
            _ => true,
        }
    }

    /// The response is complete, or the client left: any pending or later
    /// `receive()` sees `http.disconnect`.
    pub fn finish(&mut self, py: Python<'_>) {
        self.finished = true;
        self.wake_waiters(py);
    }

    /// The client closed the connection while the app runs: as [`finish`],
    /// and the app returning with its response unfinished is no fault.
    ///
    /// [`finish`]: AsgiReceive::finish
    pub fn client_gone(&mut self, py: Python<'_>) {
        self.client_left = true;
        self.finish(py);
    }

    /// Wakes every waiting `receive()`: each looks at the state again when it
    /// resumes, so one whose task was cancelled meanwhile takes nothing.
    fn wake_waiters(&mut self, py: Python<'_>) {
        for future in self.waiters.drain(..) {
            settle(py, future.bind(py), |future| {
                future.call_method1(pyo3::intern!(py, "set_result"), (py.None(),))
            });
        }
    }

    /// The message a `receive()` gets now, or `None` if it must wait.
    fn take_message<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let response_sent = self.send.as_ref().is_some_and(|send| {
            send.bind(py)
                .try_borrow()
                .is_ok_and(|send| send.state == SendState::Complete)
        });
        if self.finished || response_sent {
            // After the response (or the client) is gone, even a body not
            // read yet is not handed over: ASGI, and uvicorn, say disconnect.
            return Ok(Some(disconnect_message(py)?.into_any()));
        }
        if self.stream.is_some() {
            return self.next_body_message(py);
        }
        let delivered = self.delivered.unwrap_or(0);
        if self.delivered.is_none() || delivered < self.body.len() {
            let piece = self.body.read_at(delivered, RECEIVE_CHUNK)?;
            let delivered = delivered + piece.len() as u64;
            self.delivered = Some(delivered);
            let message = PyDict::new(py);
            message.set_item(pyo3::intern!(py, "type"), pyo3::intern!(py, "http.request"))?;
            message.set_item(pyo3::intern!(py, "body"), PyBytes::new(py, &piece))?;
            message.set_item(pyo3::intern!(py, "more_body"), delivered < self.body.len())?;
            return Ok(Some(message.into_any()));
        }
        // Nothing more arrives until the response is done or the client leaves.
        Ok(None)
    }

    /// The next `http.request` message of a streamed body, if one is ready.
    fn next_body_message<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(stream) = &mut self.stream else {
            return Ok(None);
        };
        if stream.final_sent {
            return Ok(None);
        }
        let piece = match stream.queued.pop_front() {
            Some(piece) => piece,
            None if stream.complete => Vec::new(),
            None => return Ok(None),
        };
        stream.queued_bytes -= piece.len();
        let more_body = !(stream.complete && stream.queued.is_empty());
        stream.final_sent = !more_body;
        let resume = stream.paused && stream.queued_bytes < STREAM_BACKLOG_LIMIT;
        if resume {
            stream.paused = false;
        }
        let message = PyDict::new(py);
        message.set_item(pyo3::intern!(py, "type"), pyo3::intern!(py, "http.request"))?;
        message.set_item(pyo3::intern!(py, "body"), PyBytes::new(py, &piece))?;
        message.set_item(pyo3::intern!(py, "more_body"), more_body)?;
        if resume {
            if let Some(notify) = &self.notify {
                notify.call0(py)?;
            }
        }
        Ok(Some(message.into_any()))
    }
}

fn disconnect_message(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let message = PyDict::new(py);
    message.set_item("type", "http.disconnect")?;
    Ok(message)
}

#[pymethods]
impl AsgiReceive {
    fn __call__(slf: Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        if let Some(message) = slf.borrow_mut().take_message(py)? {
            return Ok(ready(py, message.unbind())?.into_any());
        }
        Ok(Py::new(
            py,
            ReceiveWait {
                receive: slf.unbind(),
            },
        )?
        .into_any())
    }
}

/// What a `receive()` that has to wait returns: its own awaitable, so that
/// concurrent callers (Starlette's `is_disconnected()` beside its disconnect
/// listener) never share a future, and cancelling one leaves the others be.
///
/// It takes its message only when its task resumes: until then it waits on a
/// fresh wake-up future of its own, registered with the [`AsgiReceive`]. A
/// caller cancelled while waiting has taken nothing, so no message is lost.
#[pyclass(module = "rush._rush")]
pub struct ReceiveWait {
    receive: Py<AsgiReceive>,
}

#[pymethods]
impl ReceiveWait {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let mut receive = self.receive.bind(py).borrow_mut();
        if let Some(message) = receive.take_message(py)? {
            return Err(PyStopIteration::new_err((message.unbind(),)));
        }
        let future = py
            .import(pyo3::intern!(py, "asyncio"))?
            .call_method0(pyo3::intern!(py, "get_running_loop"))?
            .call_method0(pyo3::intern!(py, "create_future"))?;
        // What `Future.__await__` sets before yielding: the task then waits
        // for this future and resumes us when it is done.
        future.setattr(pyo3::intern!(py, "_asyncio_future_blocking"), true)?;
        // Futures of callers cancelled meanwhile are done: drop them here.
        receive.waiters.retain(|waiter| {
            waiter
                .bind(py)
                .call_method0(pyo3::intern!(py, "done"))
                .and_then(|done| done.is_truthy())
                .is_ok_and(|done| !done)
        });
        receive.waiters.push(future.clone().unbind());
        Ok(future.unbind())
    }
}
