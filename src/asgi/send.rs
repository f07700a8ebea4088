//! The ASGI `send` callable: validates the app's response messages
//! (`http.response.start`, `.body`, `.trailers`, `.early_hint`,
//! `.pathsend`) and collects them for the loop to write (`dispatch.rs`).
//! Once the app has suspended, each message is flushed as it comes: the
//! `notify` hook asks the loop, through asyncio's `call_soon`, to write it;
//! past the connection's high-water mark, `send()` returns a future the
//! loop resolves when the output drains (backpressure).

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use rush_proto::encode::is_final_status;
use rush_proto::response::{is_valid_header_name, is_valid_header_value};

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
