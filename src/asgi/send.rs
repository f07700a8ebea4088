//! The ASGI `send` callable: validates the app's response messages
//! (`http.response.start`, `.body`, `.trailers`, `.early_hint`,
//! `.pathsend`) and collects them for the loop to write (`dispatch.rs`).
//! Once the app has suspended, each message is flushed as it comes: the
//! `notify` hook asks the loop, through asyncio's `call_soon`, to write it;
//! past the connection's high-water mark, `send()` returns a future the
//! loop resolves when the output drains (backpressure).

use std::path::PathBuf;

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyMemoryView, PyString, PyTuple};
use rush_proto::encode::is_final_status;
use rush_proto::fields::trim_whitespace as trim;
use rush_proto::response::{is_valid_header_name, is_valid_header_value};

use pyo3::sync::PyOnceLock;

use super::awaitables::{ready, settle};
use crate::options::OUTPUT_HIGH_WATER;

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
#[pyclass(module = "rush._rush", freelist = 32)]
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
    /// Body bytes `send()` takes before it waits for the loop to write
    /// them: the response's own high-water mark (an HTTP/2 stream's is a
    /// quarter of a connection's), a fair share while the worker is over
    /// its output budget. The app runs on between the loop's passes, so
    /// this, not the loop's pacing, bounds what one response can hold.
    pub high_water: usize,
    /// The future a waiting `send()` returned: resolved when the output
    /// drains, or failed when the client is gone.
    drain_waiter: Option<Py<PyAny>>,
    /// The file the app asked to send as the body (`http.response.pathsend`),
    /// made absolute against the worker's working directory.
    pub pathsend: Option<PathBuf>,
    /// The scope's `headers` list: a file sent for `pathsend` honours the
    /// request's conditional and range fields.
    pub request_headers: Option<Py<PyAny>>,
    /// The scope offered `http.response.trailers` (HTTP/2): elsewhere a
    /// start's `"trailers": True` is ignored, as uvicorn ignores it.
    pub trailers_offered: bool,
    /// The request is a GET or HEAD: only those get a conditional (304) or
    /// range answer from a `pathsend` file (RFC 9110 13.1.2, 14.2).
    pub get_or_head: bool,
    /// The app's start said `"trailers": True` (and the scope offered
    /// them): its trailer fields follow
    /// the body (`http.response.trailers`), collected here until the last.
    pub trailers_announced: bool,
    /// The app's start said `"trailers": True` where the scope did not
    /// offer them: the response ends with its body, and the app's
    /// `http.response.trailers` messages are taken and dropped.
    trailers_dropped: bool,
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
            high_water: OUTPUT_HIGH_WATER,
            drain_waiter: None,
            pathsend: None,
            request_headers,
            trailers_offered: false,
            get_or_head: true,
            trailers_announced: false,
            trailers_dropped: false,
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
        let Some(headers) = self.request_headers.as_ref().filter(|_| self.get_or_head) else {
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

impl AsgiSend {
    /// `send(message)`: validates one message and takes what it carries.
    fn send_message(&mut self, py: Python<'_>, message: &Bound<'_, PyDict>) -> PyResult<Py<PyAny>> {
        if self.disconnected {
            return Err(pyo3::exceptions::PyConnectionResetError::new_err(
                "the client disconnected",
            ));
        }
        let message = MessageFields::read(message);
        let kind = message
            .get(Field::Type)
            .ok_or_else(|| PyValueError::new_err("ASGI message without 'type'"))?;
        let kind = kind.cast::<PyString>()?.to_str()?;
        match (kind, self.state) {
            ("http.response.start", SendState::AwaitingStart) => {
                let status: u16 = message
                    .get(Field::Status)
                    .ok_or_else(|| PyValueError::new_err("http.response.start without status"))?
                    .extract()?;
                if !is_final_status(status) {
                    return Err(PyValueError::new_err(format!(
                        "http.response.start status {status} is not a final status (200-599)"
                    )));
                }
                let mut headers = Vec::new();
                if let Some(fields) = message.get(Field::Headers) {
                    let list = fields.cast::<PyList>().ok();
                    headers.reserve(list.map_or(0, |list| list.len()));
                    let mut take = |field: Bound<'_, PyAny>| -> PyResult<()> {
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
                        Ok(())
                    };
                    match list {
                        // The usual list is read by index, without an iterator
                        // object or a copy of its items.
                        Some(list) => list.iter().try_for_each(&mut take)?,
                        None => fields.try_iter()?.try_for_each(|field| take(field?))?,
                    }
                }
                // Where the scope did not offer trailers the key means
                // nothing (uvicorn ignores it): waiting for trailers that can
                // never be sent would turn the response into a 500.
                let trailers = match message.get(Field::Trailers) {
                    Some(flag) => flag.is_truthy()?,
                    None => false,
                };
                self.trailers_announced = trailers && self.trailers_offered;
                self.trailers_dropped = trailers && !self.trailers_offered;
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
                // A `None` body is an empty one, as uvicorn reads it.
                if let Some(body) = message.get(Field::Body).filter(|body| !body.is_none()) {
                    with_bytes_like(body, "http.response.body's body", |bytes| {
                        self.pending_body.extend_from_slice(bytes)
                    })?;
                }
                let more_body = match message.get(Field::MoreBody) {
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
                if let Some(fields) = message.get(Field::Headers) {
                    for field in fields.try_iter()? {
                        let (name, value) = header_pair(&field?)?;
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
                let more = match message.get(Field::MoreTrailers) {
                    Some(flag) => flag.is_truthy()?,
                    None => false,
                };
                if !more {
                    self.state = SendState::Complete;
                }
            }
            ("http.response.trailers", SendState::Complete) if self.trailers_dropped => {}
            ("http.response.trailers", _) => {
                return Err(PyRuntimeError::new_err(if self.trailers_announced {
                    "http.response.trailers sent before the end of the body or after the response was complete"
                } else {
                    "http.response.trailers sent without \"trailers\": True in http.response.start"
                }));
            }
            ("http.response.early_hint", SendState::AwaitingStart | SendState::SendingBody) => {
                let links = message.get(Field::Links).ok_or_else(|| {
                    PyValueError::new_err("http.response.early_hint without links")
                })?;
                let mut values = Vec::new();
                for link in links.try_iter()? {
                    // Trimmed as header values are (`header_pair`).
                    let link =
                        with_bytes_like(&link?, "an early hint link", |link| trim(link).to_vec())?;
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
                let path: PathBuf = message
                    .get(Field::Path)
                    .ok_or_else(|| PyValueError::new_err("http.response.pathsend without path"))?
                    .extract()?;
                self.pathsend = Some(openable_file(path)?);
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
        // Past the mark, not at it: an answer of one part as large as the
        // mark completes without a wait (and the task a wait costs).
        if (self.paused || self.pending_body.len() > self.high_water)
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

/// The message keys `send()` reads.
#[derive(Clone, Copy)]
enum Field {
    Type,
    Status,
    Headers,
    Trailers,
    Body,
    MoreBody,
    MoreTrailers,
    Links,
    Path,
}

const FIELD_NAMES: [&str; 9] = [
    "type",
    "status",
    "headers",
    "trailers",
    "body",
    "more_body",
    "more_trailers",
    "links",
    "path",
];

static INTERNED_FIELD_NAMES: PyOnceLock<[Py<PyString>; 9]> = PyOnceLock::new();

/// A message's values for the keys `send()` reads, found in one pass over
/// the dict: a lookup per key cost ~120 instructions, and a response is
/// two messages of two or three keys each. Keys written as literals in the
/// app are the interned strings, so an identity check settles most; any
/// other `str` key is compared by its text, as a lookup would.
struct MessageFields<'py> {
    values: [Option<Bound<'py, PyAny>>; 9],
}

impl<'py> MessageFields<'py> {
    fn read(message: &Bound<'py, PyDict>) -> MessageFields<'py> {
        let py = message.py();
        let interned = INTERNED_FIELD_NAMES.get_or_init(py, || {
            FIELD_NAMES.map(|name| PyString::intern(py, name).unbind())
        });
        let mut values: [Option<Bound<'py, PyAny>>; 9] = Default::default();
        for (key, value) in message.iter() {
            let index = interned.iter().position(|name| key.is(name)).or_else(|| {
                let text = key.cast::<PyString>().ok()?.to_str().ok()?;
                FIELD_NAMES.iter().position(|name| *name == text)
            });
            if let Some(index) = index {
                values[index] = Some(value);
            }
        }
        MessageFields { values }
    }

    fn get(&self, field: Field) -> Option<&Bound<'py, PyAny>> {
        self.values[field as usize].as_ref()
    }
}

/// The `send` callable an app gets: a builtin function bound to its
/// request's [`AsgiSend`], called with the vectorcall convention
/// (`METH_FASTCALL`): Python hands it the message directly. Calling the
/// `AsgiSend` object itself went through `tp_call`, which packs the
/// argument into a new tuple that PyO3 then unpacks (about 300
/// instructions a call, two calls a response).
pub(crate) fn send_callable<'py>(send: &Bound<'py, AsgiSend>) -> PyResult<Bound<'py, PyAny>> {
    let py = send.py();
    let definition = SEND_DEFINITION.get_or_init(py, || {
        MethodDefinition(pyo3::ffi::PyMethodDef {
            ml_name: c"send".as_ptr(),
            ml_meth: pyo3::ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: send_entry,
            },
            ml_flags: pyo3::ffi::METH_FASTCALL | pyo3::ffi::METH_KEYWORDS,
            ml_doc: c"send(message): the ASGI send callable of one request.".as_ptr(),
        })
    });
    // SAFETY: the GIL is held; the definition is a static that lives as
    // long as the process, and `send` a live object the function keeps a
    // reference to. A new reference or NULL with an exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyCFunction_NewEx(
                std::ptr::from_ref(&definition.0).cast_mut(),
                send.as_ptr(),
                std::ptr::null_mut(),
            ),
        )
    }
}

/// A `PyMethodDef` for a static: its pointers are to static C strings and
/// a function, never written, so sharing it between threads is sound.
struct MethodDefinition(pyo3::ffi::PyMethodDef);

// SAFETY: see the type's comment: nothing in it is ever mutated.
unsafe impl Sync for MethodDefinition {}
// SAFETY: as for Sync: it points only at statics, which outlive any thread.
unsafe impl Send for MethodDefinition {}

static SEND_DEFINITION: PyOnceLock<MethodDefinition> = PyOnceLock::new();

/// What CPython calls for `send(message)` (or `send(message=...)`):
/// `slf` is the bound `AsgiSend`, `args` the positional arguments and then
/// the values of the keywords named in `kwnames`.
unsafe extern "C" fn send_entry(
    slf: *mut pyo3::ffi::PyObject,
    args: *const *mut pyo3::ffi::PyObject,
    nargs: pyo3::ffi::Py_ssize_t,
    kwnames: *mut pyo3::ffi::PyObject,
) -> *mut pyo3::ffi::PyObject {
    // SAFETY: CPython calls a METH_FASTCALL function with the GIL held,
    // `slf` the object it was bound to (an `AsgiSend`, see
    // `send_callable`), `args` holding `nargs` positional values followed
    // by one value per name in `kwnames` (a tuple of str, or NULL).
    let py = unsafe { Python::assume_attached() };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: as above.
        let keywords = unsafe { Borrowed::from_ptr_or_opt(py, kwnames) };
        let keywords = keywords.map_or(Ok(0), |names| names.len())?;
        let only_argument = match (nargs, keywords) {
            (1, 0) => true,
            (0, 1) => {
                // SAFETY: kwnames is a tuple of one str (see above).
                let name = unsafe { Borrowed::from_ptr(py, kwnames) }.get_item(0)?;
                name.cast::<PyString>()?.to_str()? == "message"
            }
            _ => false,
        };
        if !only_argument {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "send() takes one argument, the message",
            ));
        }
        // SAFETY: as above; there is exactly one value in `args`.
        let (send, message) = unsafe {
            (
                Borrowed::from_ptr(py, slf).cast_unchecked::<AsgiSend>(),
                Borrowed::from_ptr(py, *args),
            )
        };
        let message = message.cast::<PyDict>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err(format!(
                "an ASGI message is a dict, not {}",
                message
                    .get_type()
                    .name()
                    .map_or_else(|_| "that".to_owned(), |name| name.to_string())
            ))
        })?;
        send.try_borrow_mut()?.send_message(py, &message)
    }));
    match result {
        Ok(Ok(value)) => value.into_ptr(),
        Ok(Err(error)) => {
            error.restore(py);
            std::ptr::null_mut()
        }
        Err(_) => {
            pyo3::panic::PanicException::new_err("rush's ASGI send() panicked").restore(py);
            std::ptr::null_mut()
        }
    }
}

/// One `(name, value)` of a message's headers (`http.response.start`,
/// `.trailers`, `websocket.accept`, `websocket.http.response.start`). The
/// usual tuple (or list) of two `bytes` is read directly (a generic
/// extraction cost twice as much); otherwise any iterable of exactly two
/// bytes-like items,
/// as uvicorn and hypercorn take it (the ASGI spec itself writes a header
/// as a two-item list). The value loses its leading and trailing spaces and
/// tabs: HTTP/2 forbids them (RFC 9113 8.2.1, a client drops the whole
/// response), HTTP/1.1 recipients strip them anyway (RFC 9112 5.1), and
/// hypercorn's h2 strips them too.
pub(crate) fn header_pair(field: &Bound<'_, PyAny>) -> PyResult<(Vec<u8>, Vec<u8>)> {
    let items = if let Ok(pair) = field.cast::<PyTuple>() {
        (pair.len() == 2).then(|| (pair.get_item(0), pair.get_item(1)))
    } else if let Ok(pair) = field.cast::<PyList>() {
        (pair.len() == 2).then(|| (pair.get_item(0), pair.get_item(1)))
    } else {
        None
    };
    if let Some((Ok(name), Ok(value))) = items {
        if let (Ok(name), Ok(value)) = (name.cast::<PyBytes>(), value.cast::<PyBytes>()) {
            return Ok((name.as_bytes().to_vec(), trim(value.as_bytes()).to_vec()));
        }
    }
    let not_a_pair = || {
        PyTypeError::new_err(format!(
            "a header is a (name, value) pair of bytes, not {}",
            field
                .repr()
                .map_or_else(|_| "that".to_owned(), |text| text.to_string())
        ))
    };
    // At most three items are taken, so an endless iterator cannot hang it.
    let mut items = field.try_iter().map_err(|_| not_a_pair())?;
    let (Some(name), Some(value), None) = (items.next(), items.next(), items.next()) else {
        return Err(not_a_pair());
    };
    let name = with_bytes_like(&name?, "a header name", <[u8]>::to_vec)?;
    let value = with_bytes_like(&value?, "a header value", |value| trim(value).to_vec())?;
    Ok((name, value))
}

/// Hands `take` the bytes of a `bytes`, `bytearray` or byte `memoryview`
/// (Starlette passes a `memoryview` body through unchanged; uvicorn and
/// hypercorn send all three). `str` and anything else are refused, as
/// neither reference sends them.
pub(crate) fn with_bytes_like<R>(
    value: &Bound<'_, PyAny>,
    what: &str,
    take: impl FnOnce(&[u8]) -> R,
) -> PyResult<R> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(take(bytes.as_bytes()));
    }
    if let Ok(array) = value.cast::<PyByteArray>() {
        return Ok(take(&array.to_vec()));
    }
    if value.cast::<PyMemoryView>().is_ok() {
        // A view of wider items (`array("H")`) or of another shape is sent
        // as its bytes, as hypercorn sends it (uvicorn frames such a body
        // by its item count, which breaks the response).
        return match PyBuffer::<u8>::get(value) {
            Ok(buffer) => Ok(take(&buffer.to_vec(value.py())?)),
            Err(_) => {
                let bytes = value.call_method0(pyo3::intern!(value.py(), "tobytes"))?;
                Ok(take(bytes.cast::<PyBytes>()?.as_bytes()))
            }
        };
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be bytes, bytearray or memoryview, not {}",
        value
            .get_type()
            .name()
            .map_or_else(|_| "that".to_owned(), |name| name.to_string())
    )))
}

/// The file of an `http.response.pathsend`, made absolute against the
/// worker's working directory (Starlette's `FileResponse("static/a.pdf")`
/// passes the path as the app wrote it; a plain read under uvicorn, and
/// granian, resolve it so). It must open as a regular file now: if it
/// cannot, the app gets the `OSError` from its `send()` (as a read of its
/// own would raise it), before any byte of the response head is written.
fn openable_file(path: PathBuf) -> PyResult<PathBuf> {
    let path = std::path::absolute(&path)?;
    let named = |error: std::io::Error| {
        std::io::Error::new(
            error.kind(),
            format!(
                "http.response.pathsend: cannot send {}: {error}",
                path.display()
            ),
        )
    };
    let file = std::fs::File::open(&path).map_err(named)?;
    if !file.metadata().map_err(named)?.is_file() {
        return Err(pyo3::exceptions::PyIsADirectoryError::new_err(format!(
            "http.response.pathsend: {} is not a regular file",
            path.display()
        )));
    }
    Ok(path)
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
