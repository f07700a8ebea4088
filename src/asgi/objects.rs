//! ASGI 3 (HTTP) in the native loop: scope, `receive` and `send` in Rust.
//!
//! How it works:
//! * [`build_scope`] makes the `http` scope dict natively.
//! * `receive` and `send` are native callables whose awaitables are already
//!   complete ([`Ready`]): awaiting them never suspends. So an app that
//!   awaits nothing else finishes in the loop's first `coroutine.send(None)`
//!   with no asyncio involvement, and its buffered response is framed with a
//!   `Content-Length`.
//! * An app that does suspend (I/O, sleeps, thread offloading) continues as
//!   an asyncio task. From then on, every `send` is flushed as it happens:
//!   the [`AsgiSend`] object calls its `notify` hook, which asks the loop
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

use std::net::SocketAddr;

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use pyo3::Borrowed;
use rush_proto::encode::is_final_status;
use rush_proto::response::{is_valid_header_name, is_valid_header_value};
use rush_proto::{RequestHead, Version};

use crate::body::OwnedBody;
use crate::forwarding::{scheme_of, RequestOrigin};
use crate::options::OUTPUT_HIGH_WATER;
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

/// An awaitable that is already complete: `await Ready(v)` is `v`, at once.
///
/// Awaiting one costs no exception where CPython allows: the type's
/// `am_send` slot (see [`install_fast_await`]) hands the value back as a
/// return, which `await` on Python 3.11 takes without the `StopIteration`
/// that `__next__` must otherwise raise (creating it cost about as much as
/// the rest of a `send()`). A `Ready` for `None` is one shared object
/// whose `__next__` ends without raising at all, on every version.
#[pyclass(module = "rush._rush")]
pub struct Ready {
    value: Option<Py<PyAny>>,
}

#[pymethods]
impl Ready {
    fn __await__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self) -> PyResult<Option<Py<PyAny>>> {
        match self.value.take() {
            Some(value) => Err(PyStopIteration::new_err((value,))),
            // Ending with no exception set is "returned None" to `await`.
            None => Ok(None),
        }
    }
}

static READY_NONE: PyOnceLock<Py<Ready>> = PyOnceLock::new();

pub(crate) fn ready(py: Python<'_>, value: Py<PyAny>) -> PyResult<Py<Ready>> {
    if value.is_none(py) {
        // Nothing to hand over: every such awaitable can be the same one.
        let shared = READY_NONE.get_or_try_init(py, || Py::new(py, Ready { value: None }))?;
        return Ok(shared.clone_ref(py));
    }
    Py::new(py, Ready { value: Some(value) })
}

/// Gives the [`Ready`] type native `am_await` and `am_send` slots (called
/// once, when the module is made). `am_await` returns the object itself
/// without a trip through PyO3's method wrapper; `am_send` returns the
/// value as `PYGEN_RETURN`, which `PyIter_Send` (the `await` of Python
/// 3.11) passes on without an exception. Later versions' `await` calls
/// `__next__` instead, which still works the same way, only slower.
pub(crate) fn install_fast_await(py: Python<'_>) -> PyResult<()> {
    let ready_type = py.get_type::<Ready>();
    let type_object = ready_type.as_type_ptr();
    // SAFETY: the GIL is held and `type_object` is the live heap type PyO3
    // made for `Ready`; its `tp_as_async` (set because `Ready` defines
    // `__await__`) points into that type object, which lives as long as the
    // module. Both functions keep the slots' contracts (see below).
    unsafe {
        let slots = (*type_object).tp_as_async;
        if slots.is_null() {
            return Ok(());
        }
        (*slots).am_await = Some(ready_await);
        (*slots).am_send = Some(ready_send);
        pyo3::ffi::PyType_Modified(type_object);
    }
    Ok(())
}

/// `Ready.__await__`: the object itself (a new reference).
unsafe extern "C" fn ready_await(ready: *mut pyo3::ffi::PyObject) -> *mut pyo3::ffi::PyObject {
    // SAFETY: CPython calls the slot with the GIL held and a live object.
    unsafe { pyo3::ffi::Py_IncRef(ready) };
    ready
}

/// `am_send` for `Ready`: the value, returned (a new reference in
/// `result`); `None` once it was taken.
unsafe extern "C" fn ready_send(
    ready: *mut pyo3::ffi::PyObject,
    _sent: *mut pyo3::ffi::PyObject,
    result: *mut *mut pyo3::ffi::PyObject,
) -> pyo3::ffi::PySendResult {
    // SAFETY: CPython calls the slot with the GIL held, `ready` a live
    // object of the type the slot belongs to (a `Ready`), and `result` a
    // valid place for the new reference.
    unsafe {
        let py = Python::assume_attached();
        let ready = Borrowed::from_ptr(py, ready).cast_unchecked::<Ready>();
        // A `Ready` is borrowed only here and in `__next__`, never across
        // Python code, so the borrow cannot fail; if it did, None is safe.
        let value = ready
            .try_borrow_mut()
            .ok()
            .and_then(|mut ready| ready.value.take())
            .unwrap_or_else(|| py.None());
        *result = value.into_ptr();
    }
    pyo3::ffi::PySendResult::PYGEN_RETURN
}

/// Per-worker ASGI settings.
pub struct AsgiSettings {
    pub app: Py<PyAny>,
    /// The lifespan `state` dict; each scope gets a shallow copy.
    pub state: Option<Py<PyDict>>,
    /// Every key of an `http` scope, in order, with the values that are
    /// the same for every request (see [`build_scope`]).
    scope_template: Py<PyDict>,
}

impl AsgiSettings {
    pub fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        root_path: String,
        state: Option<Py<PyDict>>,
        server: Option<SocketAddr>,
    ) -> PyResult<Self> {
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
        template.set_item(pyo3::intern!(py, "headers"), py.None())?;
        template.set_item(pyo3::intern!(py, "client"), py.None())?;
        template.set_item(pyo3::intern!(py, "server"), address_object(py, server)?)?;
        if state.is_some() {
            template.set_item(pyo3::intern!(py, "state"), py.None())?;
        }
        Ok(AsgiSettings {
            app,
            state,
            scope_template: template.unbind(),
        })
    }
}

/// Builds the `http` connection scope for one request.
///
/// How: a copy of the worker's template (one C call that clones the key
/// table, already sized for every key, so no insertion ever resizes it),
/// then the request's own values set over the placeholders. Building it
/// key by key cost about a fifth of a raw ASGI hello's CPU.
pub fn build_scope<'py>(
    py: Python<'py>,
    settings: &AsgiSettings,
    head_bytes: &[u8],
    head: &RequestHead,
    client: &Py<PyAny>,
    origin: Option<&RequestOrigin>,
) -> PyResult<Bound<'py, PyDict>> {
    let scope = settings.scope_template.bind(py).copy()?;
    match head.version {
        Version::Http11 => {}
        Version::Http10 => {
            scope.set_item(pyo3::intern!(py, "http_version"), pyo3::intern!(py, "1.0"))?
        }
        Version::Http2 => {
            scope.set_item(pyo3::intern!(py, "http_version"), pyo3::intern!(py, "2"))?
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
    let raw_path = head.path.of(head_bytes);
    scope.set_item(pyo3::intern!(py, "path"), decode_path(raw_path).as_ref())?;
    scope.set_item(pyo3::intern!(py, "raw_path"), PyBytes::new(py, raw_path))?;
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
    scope.set_item(pyo3::intern!(py, "headers"), PyList::new(py, fields)?)?;
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
    Ok(scope)
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
#[pyclass(module = "rush._rush")]
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

/// Where the app's response stands.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SendState {
    AwaitingStart,
    SendingBody,
    /// The body is over and the app said (`"trailers": True` in its
    /// start) that `http.response.trailers` messages end the response.
    SendingTrailers,
    Complete,
}

/// The `send` callable: validates and collects the app's response messages.
#[pyclass(module = "rush._rush")]
pub struct AsgiSend {
    pub state: SendState,
    pub status: u16,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The app's Content-Length, if it declared one.
    pub declared_length: Option<u64>,
    /// Body bytes sent by the app and not yet written by the loop.
    pub pending_body: Vec<u8>,
    /// Whether the loop already wrote the response head.
    pub head_written: bool,
    /// Body bytes the loop has written so far.
    pub body_written: u64,
    /// Framing chosen when the head was written (the writer frames the
    /// body itself; these decide the connection's fate at the end).
    pub framing_close: bool,
    pub bodyless: bool,
    /// Set once the app has suspended: called after each message so the
    /// loop flushes it (it schedules the flush, it does not run it inline).
    pub notify: Option<Py<PyAny>>,
    /// The client is gone: sending raises (ASGI: an OSError subclass).
    pub disconnected: bool,
    /// The connection's unsent output is over its high-water mark: the
    /// next `send()` waits (the loop sets and clears this).
    pub paused: bool,
    /// The future a waiting `send()` returned: resolved when the output
    /// drains, or failed when the client is gone.
    drain_waiter: Option<Py<PyAny>>,
    /// The file the app asked to send as the body (`http.response.pathsend`).
    pub pathsend: Option<String>,
    /// The scope's `headers` list: a file sent for `pathsend` honours the
    /// request's conditional and range fields.
    pub request_headers: Option<Py<PyAny>>,
    /// The app's start said `"trailers": True`: its trailer fields follow
    /// the body (`http.response.trailers`), collected here until the last.
    pub trailers_announced: bool,
    pub trailers: Vec<(Vec<u8>, Vec<u8>)>,
    /// The scope offered `http.response.early_hint` (not to HTTP/1.0).
    pub early_hints_offered: bool,
    /// `Link` values of `http.response.early_hint` messages not yet sent
    /// (they go out before the head, or not at all).
    pub early_hints: Vec<Vec<u8>>,
}

impl AsgiSend {
    pub fn new(request_headers: Option<Py<PyAny>>) -> AsgiSend {
        AsgiSend {
            state: SendState::AwaitingStart,
            status: 0,
            headers: Vec::new(),
            declared_length: None,
            pending_body: Vec::new(),
            head_written: false,
            body_written: 0,
            framing_close: false,
            bodyless: false,
            notify: None,
            disconnected: false,
            paused: false,
            drain_waiter: None,
            pathsend: None,
            request_headers,
            trailers_announced: false,
            trailers: Vec::new(),
            early_hints_offered: false,
            early_hints: Vec::new(),
        }
    }

    /// The request's header fields that decide a conditional or range
    /// answer (names lowercased, as in the scope).
    pub fn conditional_fields(&self, py: Python<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
        const NAMES: [&[u8]; 4] = [
            b"if-none-match",
            b"if-modified-since",
            b"range",
            b"if-range",
        ];
        let Some(headers) = &self.request_headers else {
            return Vec::new();
        };
        let Ok(fields) = headers.bind(py).try_iter() else {
            return Vec::new();
        };
        fields
            .filter_map(|field| field.ok()?.extract::<(Vec<u8>, Vec<u8>)>().ok())
            .filter(|(name, _)| NAMES.iter().any(|wanted| name.eq_ignore_ascii_case(wanted)))
            .collect()
    }

    /// The value of the app's response header `name`, if it sent one.
    pub fn app_header(&self, name: &[u8]) -> Option<&str> {
        self.headers
            .iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name))
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
    }
}

#[pymethods]
impl AsgiSend {
    fn __call__(&mut self, py: Python<'_>, message: &Bound<'_, PyDict>) -> PyResult<Py<PyAny>> {
        if self.disconnected {
            return Err(pyo3::exceptions::PyConnectionResetError::new_err(
                "the client disconnected",
            ));
        }
        let kind = message
            .get_item(pyo3::intern!(py, "type"))?
            .ok_or_else(|| PyValueError::new_err("ASGI message without 'type'"))?;
        let kind = kind.cast::<PyString>()?.to_str()?;
        match (kind, self.state) {
            ("http.response.start", SendState::AwaitingStart) => {
                let status: u16 = message
                    .get_item(pyo3::intern!(py, "status"))?
                    .ok_or_else(|| PyValueError::new_err("http.response.start without status"))?
                    .extract()?;
                if !is_final_status(status) {
                    return Err(PyValueError::new_err(format!(
                        "http.response.start status {status} is not a final status (200-599)"
                    )));
                }
                let mut headers = Vec::new();
                if let Some(fields) = message.get_item(pyo3::intern!(py, "headers"))? {
                    let fields: Vec<Bound<'_, PyAny>> = match fields.cast::<PyList>() {
                        // The usual list is read by index, without an iterator object.
                        Ok(list) => list.iter().collect(),
                        Err(_) => fields.try_iter()?.collect::<PyResult<_>>()?,
                    };
                    headers.reserve(fields.len());
                    for field in fields {
                        let (name, value) = header_pair(&field)?;
                        if !is_valid_header_name(&name) || !is_valid_header_value(&value) {
                            return Err(PyValueError::new_err(format!(
                                "invalid response header {:?}: {:?}",
                                String::from_utf8_lossy(&name),
                                String::from_utf8_lossy(&value)
                            )));
                        }
                        if name.eq_ignore_ascii_case(b"content-length") {
                            let length = std::str::from_utf8(&value)
                                .ok()
                                .and_then(|text| text.trim().parse::<u64>().ok())
                                .ok_or_else(|| PyValueError::new_err("invalid Content-Length"))?;
                            self.declared_length = Some(length);
                        }
                        headers.push((name, value));
                    }
                }
                self.trailers_announced = match message.get_item(pyo3::intern!(py, "trailers"))? {
                    Some(flag) => flag.is_truthy()?,
                    None => false,
                };
                self.status = status;
                self.headers = headers;
                self.state = SendState::SendingBody;
            }
            ("http.response.start", _) => {
                return Err(PyRuntimeError::new_err(
                    "http.response.start sent twice (the response has already started)",
                ));
            }
            ("http.response.body", SendState::SendingBody) => {
                if let Some(body) = message.get_item(pyo3::intern!(py, "body"))? {
                    self.pending_body
                        .extend_from_slice(body.cast::<PyBytes>()?.as_bytes());
                }
                let more_body = match message.get_item(pyo3::intern!(py, "more_body"))? {
                    Some(flag) => flag.is_truthy()?,
                    None => false,
                };
                if let Some(declared) = self.declared_length {
                    let total = self.body_written + self.pending_body.len() as u64;
                    if total > declared {
                        return Err(PyRuntimeError::new_err(format!(
                            "the ASGI app sent more body than its Content-Length ({declared})"
                        )));
                    }
                }
                if !more_body {
                    self.state = if self.trailers_announced {
                        SendState::SendingTrailers
                    } else {
                        SendState::Complete
                    };
                }
            }
            ("http.response.trailers", SendState::SendingTrailers) => {
                if let Some(fields) = message.get_item(pyo3::intern!(py, "headers"))? {
                    for field in fields.try_iter()? {
                        let (name, value): (Vec<u8>, Vec<u8>) = field?.extract()?;
                        if !is_valid_header_name(&name) || !is_valid_header_value(&value) {
                            return Err(PyValueError::new_err(format!(
                                "invalid response trailer {:?}: {:?}",
                                String::from_utf8_lossy(&name),
                                String::from_utf8_lossy(&value)
                            )));
                        }
                        self.trailers.push((name, value));
                    }
                }
                let more = match message.get_item(pyo3::intern!(py, "more_trailers"))? {
                    Some(flag) => flag.is_truthy()?,
                    None => false,
                };
                if !more {
                    self.state = SendState::Complete;
                }
            }
            ("http.response.trailers", _) => {
                return Err(PyRuntimeError::new_err(if self.trailers_announced {
                    "http.response.trailers sent before the end of the body or after the response was complete"
                } else {
                    "http.response.trailers sent without \"trailers\": True in http.response.start"
                }));
            }
            ("http.response.early_hint", SendState::AwaitingStart | SendState::SendingBody) => {
                let links = message
                    .get_item(pyo3::intern!(py, "links"))?
                    .ok_or_else(|| {
                        PyValueError::new_err("http.response.early_hint without links")
                    })?;
                let mut values = Vec::new();
                for link in links.try_iter()? {
                    let link: Vec<u8> = link?.extract()?;
                    if !is_valid_header_value(&link) {
                        return Err(PyValueError::new_err(format!(
                            "invalid early hint link {:?}",
                            String::from_utf8_lossy(&link)
                        )));
                    }
                    values.push(link);
                }
                // Once the head went out an interim response is too late,
                // and a client that cannot take one (HTTP/1.0) gets none.
                if self.early_hints_offered && !self.head_written {
                    self.early_hints.extend(values);
                }
            }
            ("http.response.early_hint", _) => {}
            ("http.response.pathsend", SendState::SendingBody) => {
                if self.body_written > 0 || !self.pending_body.is_empty() {
                    return Err(PyRuntimeError::new_err(
                        "http.response.pathsend sent after part of the body",
                    ));
                }
                let path: String = message
                    .get_item(pyo3::intern!(py, "path"))?
                    .ok_or_else(|| PyValueError::new_err("http.response.pathsend without path"))?
                    .extract()?;
                if !std::path::Path::new(&path).is_absolute() {
                    return Err(PyValueError::new_err(format!(
                        "http.response.pathsend needs an absolute path, not {path:?}"
                    )));
                }
                self.pathsend = Some(path);
                self.state = SendState::Complete;
            }
            ("http.response.pathsend", SendState::AwaitingStart) => {
                return Err(PyRuntimeError::new_err(
                    "http.response.pathsend sent before http.response.start",
                ));
            }
            ("http.response.pathsend", SendState::Complete | SendState::SendingTrailers) => {
                return Err(PyRuntimeError::new_err(
                    "http.response.pathsend sent after the response was complete",
                ));
            }
            ("http.response.body", SendState::AwaitingStart) => {
                return Err(PyRuntimeError::new_err(
                    "http.response.body sent before http.response.start",
                ));
            }
            ("http.response.body", SendState::Complete | SendState::SendingTrailers) => {
                return Err(PyRuntimeError::new_err(
                    "http.response.body sent after the response was complete",
                ));
            }
            (other, _) => {
                return Err(PyValueError::new_err(format!(
                    "unexpected ASGI message type {other:?} for an http scope"
                )));
            }
        }
        if let Some(notify) = &self.notify {
            notify.call0(py)?;
        }
        if (self.paused || self.pending_body.len() >= OUTPUT_HIGH_WATER)
            && self.state != SendState::Complete
        {
            // Backpressure: the client reads slower than the app sends. The
            // message is taken; the app waits until the loop has written
            // enough of it (or the client is gone, and it raises).
            let future = py
                .import("asyncio")?
                .call_method0("get_running_loop")?
                .call_method0("create_future")?
                .unbind();
            self.drain_waiter = Some(future.clone_ref(py));
            self.paused = true;
            return Ok(future);
        }
        Ok(ready(py, py.None())?.into_any())
    }
}

/// One `(name, value)` of `http.response.start`'s headers. The usual
/// tuple of two `bytes` is read directly (a generic extraction cost twice
/// as much); anything else goes through PyO3's, which accepts what it
/// always did and raises as it always did.
fn header_pair(field: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, Vec<u8>)> {
    if let Ok(pair) = field.cast::<PyTuple>() {
        if pair.len() == 2 {
            if let (Ok(name), Ok(value)) = (pair.get_item(0), pair.get_item(1)) {
                if let (Ok(name), Ok(value)) = (name.cast::<PyBytes>(), value.cast::<PyBytes>()) {
                    return Ok((name.as_bytes().to_vec(), value.as_bytes().to_vec()));
                }
            }
        }
    }
    field.extract()
}

impl AsgiSend {
    /// Whether a `send()` is waiting for the output to drain.
    pub fn is_waiting(&self) -> bool {
        self.drain_waiter.is_some()
    }

    /// The output drained below the low-water mark: a waiting `send()` returns.
    pub fn resume(&mut self, py: Python<'_>) {
        self.paused = false;
        if let Some(future) = self.drain_waiter.take() {
            settle(py, future.bind(py), |future| {
                future.call_method1("set_result", (py.None(),))
            });
        }
    }

    /// The client is gone: every later `send()` raises, and a waiting one
    /// raises now (`ConnectionResetError`, an `OSError` as ASGI asks).
    pub fn disconnect(&mut self, py: Python<'_>) {
        self.disconnected = true;
        if let Some(future) = self.drain_waiter.take() {
            settle(py, future.bind(py), |future| {
                let error =
                    pyo3::exceptions::PyConnectionResetError::new_err("the client disconnected");
                future.call_method1("set_exception", (error.into_value(py),))
            });
        }
    }
}

/// Resolves an asyncio future unless it is already done (cancelled by its
/// task, say). Errors are ignored: the future belongs to a task that is gone.
pub(crate) fn settle<'py>(
    py: Python<'py>,
    future: &Bound<'py, PyAny>,
    resolve: impl FnOnce(&Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>>,
) {
    let done = future
        .call_method0(pyo3::intern!(py, "done"))
        .and_then(|done| done.is_truthy())
        .unwrap_or(true);
    if !done {
        let _ = resolve(future);
    }
}
