//! WSGI (PEP 3333) in the native loop: the app called on the loop thread
//! (or on a pool thread with `--threads`) with the `environ` of
//! `super::environ`, its response framed by the server.
//!
//! How it works:
//! * [`call_wsgi`] calls the app with a native `start_response`, collects
//!   the body (a list is joined directly; any other iterable is iterated;
//!   `close()` is always called) and returns a [`WsgiResponse`]. It holds
//!   the GIL but touches no loop state, so it runs unchanged on a pool
//!   thread.
//! * The loop renders a [`WsgiResponse`] like any handler result. The app's
//!   `Content-Length` must match the body it produced; otherwise the
//!   response becomes a logged 500 instead of a malformed one.
//! * A `wsgi.file_wrapper` body whose file has a real descriptor goes out
//!   with sendfile.

use std::fs::File;
use std::os::fd::{FromRawFd, OwnedFd};

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyIterator, PyList, PyString, PyTuple};
use rush_proto::response::{is_valid_header_name, is_valid_header_value};

use rush_proto::encode::{connection_has_close, is_final_status};

thread_local! {
    /// A `start_response` no one held on to after its request, for the
    /// next request on this thread (one allocation and release fewer).
    static SPARE_START_RESPONSE: std::cell::Cell<Option<Py<StartResponse>>> =
        const { std::cell::Cell::new(None) };
}

/// `wsgi.file_wrapper`: marks a file-like body that the server may send
/// with sendfile. Iterating it reads blocks, for any other consumer.
#[pyclass(module = "rush._rush")]
pub struct FileWrapper {
    file: Py<PyAny>,
    block_size: usize,
}

#[pymethods]
impl FileWrapper {
    #[new]
    #[pyo3(signature = (file, block_size=8192))]
    fn new(file: Py<PyAny>, block_size: usize) -> Self {
        FileWrapper { file, block_size }
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        let block = self
            .file
            .bind(py)
            .call_method1("read", (self.block_size,))?;
        if block.is_truthy()? {
            Ok(Some(block.unbind()))
        } else {
            Ok(None)
        }
    }

    fn close(&self, py: Python<'_>) -> PyResult<()> {
        if self.file.bind(py).hasattr("close")? {
            self.file.bind(py).call_method0("close")?;
        }
        Ok(())
    }
}

/// The `start_response` callable given to the app.
#[pyclass(module = "rush._rush")]
pub struct StartResponse {
    status: Option<u16>,
    /// Names, and values encoded as latin-1 (PEP 3333).
    headers: ResponseHeaders,
    /// Bytes passed to the legacy `write()` callable.
    written: Vec<u8>,
    /// The head is on its way to the client (a streamed body): from now on
    /// PEP 3333 wants `start_response(..., exc_info)` to re-raise.
    head_sent: bool,
}

#[pymethods]
impl StartResponse {
    #[pyo3(signature = (status, headers, exc_info=None))]
    fn __call__(
        mut slf: PyRefMut<'_, Self>,
        status: &str,
        headers: &Bound<'_, PyAny>,
        exc_info: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<WsgiWrite>> {
        let py = slf.py();
        let has_exc_info = exc_info.is_some_and(|info| !info.is_none());
        if let (true, Some(info)) = (slf.head_sent, exc_info) {
            if has_exc_info {
                // Too late to replace the response: re-raise the app's error, which
                // ends the stream (the client sees a cut connection, not a bogus body).
                return Err(PyErr::from_value(info.get_item(1)?));
            }
        }
        if slf.status.is_some() && !has_exc_info {
            return Err(PyRuntimeError::new_err(
                "start_response called a second time without exc_info",
            ));
        }
        // Nothing is sent before call_wsgi returns, so until then an error
        // response may replace the first one (PEP 3333's exc_info case).
        let code = parse_status_line(status).ok_or_else(|| {
            PyValueError::new_err(format!(
                "invalid WSGI status {status:?}: PEP 3333 wants 'NNN reason', NNN from 200 to 599"
            ))
        })?;
        let mut encoded = ResponseHeaders::default();
        if let Ok(list) = headers.cast::<PyList>() {
            encoded.fields.reserve_exact(list.len());
            // Room for the usual fields, so the buffer is not grown per field.
            encoded.bytes.reserve(64 * list.len());
            for item in list.iter() {
                encoded.push_checked(&item)?;
            }
        } else if headers.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(
                "start_response's headers must be a list of (name, value) tuples, not a str",
            ));
        } else {
            for item in headers.try_iter()? {
                encoded.push_checked(&item?)?;
            }
        }
        slf.status = Some(code);
        slf.headers = encoded;
        let owner: Py<StartResponse> = slf.into();
        Py::new(py, WsgiWrite { owner })
    }
}

/// A response's header fields as the app gave them: names, and values
/// as latin-1 bytes, kept in one buffer (two allocations for the list
/// instead of two for every field).
#[derive(Default)]
pub struct ResponseHeaders {
    bytes: Vec<u8>,
    /// Where each field's name and value end in `bytes`.
    fields: Vec<(usize, usize)>,
}

impl ResponseHeaders {
    /// The fields in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0;
        self.fields.iter().map(move |&(name_end, value_end)| {
            let field = (
                &self.bytes[start..name_end],
                &self.bytes[name_end..value_end],
            );
            start = value_end;
            field
        })
    }

    /// Adds one `(name, value)` of `start_response`, checked: PEP 3333
    /// wants `str` for both, the value holding latin-1 code points only.
    /// The characters are read in place (an ASCII or latin-1 `str` stores
    /// one byte a character).
    fn push_checked(&mut self, item: &Bound<'_, PyAny>) -> PyResult<()> {
        let pair = item.cast::<PyTuple>().map_err(|_| {
            PyTypeError::new_err("start_response's headers must be (name, value) tuples")
        })?;
        if pair.len() != 2 {
            return Err(PyTypeError::new_err(
                "start_response's headers must be (name, value) tuples",
            ));
        }
        let name = pair.get_borrowed_item(0)?;
        let value = pair.get_borrowed_item(1)?;
        let (Ok(name), Ok(value)) = (name.cast::<PyString>(), value.cast::<PyString>()) else {
            return Err(PyTypeError::new_err(
                "start_response's header names and values must be str",
            ));
        };
        let name_text = name.to_str()?;
        // SAFETY: the GIL is held and `value` outlives the borrowed data; a
        // `str` whose storage is wider than one byte a character holds a code
        // point above 255 (CPython stores each string in its narrowest form).
        let latin1 = match unsafe { value.data() }? {
            pyo3::types::string::PyStringData::Ucs1(bytes) => Some(bytes),
            _ => None,
        };
        match latin1 {
            Some(bytes)
                if is_valid_header_name(name_text.as_bytes()) && is_valid_header_value(bytes) =>
            {
                self.bytes.extend_from_slice(name_text.as_bytes());
                let name_end = self.bytes.len();
                self.bytes.extend_from_slice(bytes);
                self.fields.push((name_end, self.bytes.len()));
                Ok(())
            }
            _ => Err(PyValueError::new_err(format!(
                "invalid response header {name_text:?}: {:?} (values must be latin-1 without control characters)",
                value.to_string_lossy()
            ))),
        }
    }

    /// The first value of `name` (compared without regard to case).
    fn get(&self, name: &str) -> Option<&[u8]> {
        self.iter()
            .find(|(field, _)| field.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(_, value)| value)
    }
}

/// The code of a WSGI status line, `"NNN reason"` as PEP 3333 has it:
/// three digits of a final status (200-599), one space, and a reason of
/// printable characters (which may be empty; the server sends its own).
fn parse_status_line(status: &str) -> Option<u16> {
    let (digits, reason) = (status.get(..3)?, status.get(3..)?);
    let reason = reason.strip_prefix(' ')?;
    if !digits.bytes().all(|byte| byte.is_ascii_digit())
        || reason.chars().any(|character| character.is_control())
    {
        return None;
    }
    let code: u16 = digits.parse().ok()?;
    is_final_status(code).then_some(code)
}

/// The legacy `write(data)` callable `start_response` returns.
#[pyclass(module = "rush._rush")]
pub struct WsgiWrite {
    owner: Py<StartResponse>,
}

#[pymethods]
impl WsgiWrite {
    fn __call__(&self, py: Python<'_>, data: &Bound<'_, PyBytes>) {
        self.owner
            .bind(py)
            .borrow_mut()
            .written
            .extend_from_slice(data.as_bytes());
    }
}

/// A finished WSGI response, ready for the loop to frame and send.
#[pyclass(module = "rush._rush")]
pub struct WsgiResponse {
    /// The status code; the reason phrase sent is the standard one for it.
    pub status: u16,
    /// Names, and values as latin-1 bytes.
    pub headers: ResponseHeaders,
    pub body: CollectedBody,
    /// A file body (from `wsgi.file_wrapper`) to send with sendfile: (file, offset, length).
    pub file: Option<(File, u64, u64)>,
    /// The app's declared Content-Length, if any.
    pub declared_length: Option<u64>,
    /// A body to stream: the app's iterable (not a list or tuple), iterated
    /// by the loop chunk by chunk as the client takes them. `body` then
    /// holds only what the app passed to `write()`.
    pub stream: Option<BodyIterator>,
    /// A body streamed from a `--threads` pool thread instead: the
    /// `rush.threads.BodyChannel` its chunks come through.
    pub channel: Option<Py<PyAny>>,
}

#[pymethods]
impl WsgiResponse {
    /// Takes the body iterator out, for a pool thread to iterate (None when
    /// the body is not streamed).
    fn take_body(&mut self) -> Option<WsgiBody> {
        self.stream.take().map(|body| WsgiBody { body })
    }

    /// Says that the body comes through `channel` (a `BodyChannel`).
    fn attach_channel(&mut self, channel: Py<PyAny>) {
        self.channel = Some(channel);
    }
}

/// A streamed WSGI body iterated by a pool thread (`--threads`).
#[pyclass(module = "rush._rush")]
pub struct WsgiBody {
    body: BodyIterator,
}

#[pymethods]
impl WsgiBody {
    /// The next chunk, or None at the end; raises what the app raises.
    fn next_chunk<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        self.body.next_chunk(py)
    }

    /// Calls the app's `close()` (once).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        self.body.close(py)
    }
}

/// The iterator over a WSGI body, and the object whose `close()` PEP 3333
/// requires once the server is done with it (the client gone included).
pub struct BodyIterator {
    iterator: Py<PyIterator>,
    result: Option<Py<PyAny>>,
}

impl BodyIterator {
    /// The next chunk: `Ok(None)` at the end; a chunk that is not bytes is an error.
    pub fn next_chunk<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let Some(item) = self.iterator.bind(py).clone().next() else {
            return Ok(None);
        };
        let chunk = item?.cast_into::<PyBytes>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err("WSGI body chunks must be bytes")
        })?;
        Ok(Some(chunk))
    }

    /// Calls the iterable's `close()` (once; later calls do nothing).
    pub fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        match self.result.take() {
            Some(result) => close_result(result.bind(py)),
            None => Ok(()),
        }
    }
}

impl Drop for BodyIterator {
    /// A stream abandoned (the client left, the worker drains) still gets
    /// its `close()`, as PEP 3333 requires.
    fn drop(&mut self) {
        if let Some(result) = self.result.take() {
            Python::attach(|py| {
                if let Err(error) = close_result(result.bind(py)) {
                    error.print(py);
                }
            });
        }
    }
}

/// PEP 3333: `close()` must be called whether iteration succeeded or not.
/// (A list or tuple has none; asking would raise and format an error.)
fn close_result(result: &Bound<'_, PyAny>) -> PyResult<()> {
    let py = result.py();
    let plain_sequence =
        result.is_exact_instance_of::<PyList>() || result.is_exact_instance_of::<PyTuple>();
    if !plain_sequence && result.hasattr(pyo3::intern!(py, "close"))? {
        result.call_method0(pyo3::intern!(py, "close"))?;
    }
    Ok(())
}

/// Calls a WSGI app and returns its response. With `stream`, a body that
/// is neither a list nor a tuple is left to iterate later (the loop
/// streams it); without, it is collected here. Runs on the loop thread or
/// a pool thread (it needs only the GIL).
#[pyfunction]
#[pyo3(signature = (app, environ, stream=false))]
pub fn call_wsgi(
    py: Python<'_>,
    app: &Bound<'_, PyAny>,
    environ: &Bound<'_, PyDict>,
    stream: bool,
) -> PyResult<WsgiResponse> {
    let start_response = match SPARE_START_RESPONSE.take() {
        Some(spare) => spare.into_bound(py),
        None => Bound::new(
            py,
            StartResponse {
                status: None,
                headers: ResponseHeaders::default(),
                written: Vec::new(),
                head_sent: false,
            },
        )?,
    };
    let response = run_app(py, app, environ, stream, &start_response);
    // Kept for this thread's next request when nothing else holds it: the
    // app kept neither it nor its write(), and no streamed body is left
    // that might call it. Otherwise the next request gets a new one.
    let streamed = response
        .as_ref()
        .map_or(true, |response| response.stream.is_some());
    // SAFETY: the GIL is held and the object is alive (we hold it).
    let holders = unsafe { pyo3::ffi::Py_REFCNT(start_response.as_ptr()) };
    if !streamed && holders == 1 {
        let mut start = start_response.borrow_mut();
        start.status = None;
        start.headers = ResponseHeaders::default();
        start.written.clear();
        start.head_sent = false;
        drop(start);
        SPARE_START_RESPONSE.set(Some(start_response.unbind()));
    }
    response
}

/// [`call_wsgi`] with its `start_response`.
fn run_app(
    py: Python<'_>,
    app: &Bound<'_, PyAny>,
    environ: &Bound<'_, PyDict>,
    stream: bool,
    start_response: &Bound<'_, StartResponse>,
) -> PyResult<WsgiResponse> {
    let result = app.call1((environ, start_response))?;
    let mut file = None;
    let mut iterator = None;
    let plain_sequence =
        result.is_exact_instance_of::<PyList>() || result.is_exact_instance_of::<PyTuple>();
    let collected = if let Ok(wrapper) = result.cast::<FileWrapper>() {
        match sendfile_source(py, &wrapper.borrow()) {
            Some(source) => {
                file = Some(source);
                Ok(CollectedBody::default())
            }
            None => collect_body(&result),
        }
    } else if stream && !plain_sequence {
        match result.try_iter() {
            Ok(iter) => {
                iterator = Some(BodyIterator {
                    iterator: iter.unbind(),
                    result: Some(result.clone().unbind()),
                });
                Ok(CollectedBody::default())
            }
            Err(error) => Err(error),
        }
    } else {
        collect_body(&result)
    };
    let closed = match iterator {
        Some(_) => Ok(()),
        None => close_result(&result),
    };
    let mut body = collected?;
    closed?;
    let status = start_response.borrow().status;
    let Some(status) = status else {
        // A generator app calls start_response only once iterated: take
        // its first chunk now, so the status is known before anything is sent.
        // No borrow of start_response may be held here: the app calls it.
        if let Some(stream) = &iterator {
            if let Some(first) = stream.next_chunk(py)? {
                body.append(py, first.as_bytes());
            }
            let status = start_response.borrow().status;
            if let Some(status) = status {
                let mut start = start_response.borrow_mut();
                return finish_response(py, &mut start, status, body, file, iterator);
            }
        }
        return Err(PyRuntimeError::new_err(
            "the WSGI app returned without calling start_response",
        ));
    };
    let mut start = start_response.borrow_mut();
    finish_response(py, &mut start, status, body, file, iterator)
}

/// Puts the `write()` bytes first and reads the declared length.
fn finish_response(
    py: Python<'_>,
    start: &mut StartResponse,
    status: u16,
    mut body: CollectedBody,
    file: Option<(File, u64, u64)>,
    stream: Option<BodyIterator>,
) -> PyResult<WsgiResponse> {
    // A streamed body goes on running app code after the head is sent.
    start.head_sent = stream.is_some();
    if !start.written.is_empty() {
        let mut written = std::mem::take(&mut start.written);
        written.extend_from_slice(body.bytes(py));
        body = CollectedBody::Joined(written);
    }
    let declared_length = start
        .headers
        .get("content-length")
        .map(|value| {
            std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.trim().parse::<u64>().ok())
                .ok_or(())
        })
        .transpose()
        .map_err(|_| PyValueError::new_err("invalid Content-Length from the WSGI app"))?;
    Ok(WsgiResponse {
        status,
        headers: std::mem::take(&mut start.headers),
        body,
        file,
        declared_length,
        stream,
        channel: None,
    })
}

/// A WSGI body collected in hand: the app's one `bytes` as it is (the
/// usual `return [body]`, sent without a copy), or its chunks joined.
pub enum CollectedBody {
    Joined(Vec<u8>),
    Single(Py<PyBytes>),
}

impl Default for CollectedBody {
    fn default() -> Self {
        CollectedBody::Joined(Vec::new())
    }
}

impl CollectedBody {
    pub fn bytes<'a>(&'a self, py: Python<'_>) -> &'a [u8] {
        match self {
            CollectedBody::Joined(bytes) => bytes,
            CollectedBody::Single(bytes) => bytes.as_bytes(py),
        }
    }

    /// Adds `more` after what is there (copying a single `bytes` first).
    fn append(&mut self, py: Python<'_>, more: &[u8]) {
        if let CollectedBody::Single(bytes) = self {
            *self = CollectedBody::Joined(bytes.as_bytes(py).to_vec());
        }
        if let CollectedBody::Joined(joined) = self {
            joined.extend_from_slice(more);
        }
    }
}

/// The body chunks of a WSGI result, joined.
fn collect_body(result: &Bound<'_, PyAny>) -> PyResult<CollectedBody> {
    let mut body = Vec::new();
    if let Ok(list) = result.cast::<PyList>() {
        if list.len() == 1 {
            let only = list.get_item(0)?;
            return Ok(CollectedBody::Single(only.cast_into::<PyBytes>()?.unbind()));
        }
        for item in list.iter() {
            body.extend_from_slice(item.cast::<PyBytes>()?.as_bytes());
        }
        return Ok(CollectedBody::Joined(body));
    }
    if let Ok(tuple) = result.cast::<PyTuple>() {
        for item in tuple.iter() {
            body.extend_from_slice(item.cast::<PyBytes>()?.as_bytes());
        }
        return Ok(CollectedBody::Joined(body));
    }
    for item in result.try_iter()? {
        let item = item?;
        let chunk = item.cast::<PyBytes>().map_err(|_| {
            pyo3::exceptions::PyTypeError::new_err("WSGI body chunks must be bytes")
        })?;
        body.extend_from_slice(chunk.as_bytes());
    }
    Ok(CollectedBody::Joined(body))
}

/// A file wrapper whose file has a descriptor: send the rest of the file
/// from its current position.
fn sendfile_source(py: Python<'_>, wrapper: &FileWrapper) -> Option<(File, u64, u64)> {
    let file = wrapper.file.bind(py);
    let fd: i32 = file.call_method0("fileno").ok()?.extract().ok()?;
    let position: u64 = file.call_method0("tell").ok()?.extract().ok()?;
    // Our own descriptor, so the app closing its file object cannot pull it
    // away while the body is still being sent.
    // SAFETY: `fd` is open (the app's file object owns it and is alive here);
    // dup gives a new descriptor that we own exclusively.
    let duplicate = unsafe { libc::dup(fd) };
    if duplicate < 0 {
        return None;
    }
    // SAFETY: `duplicate` is a fresh descriptor returned by dup, owned by nobody else.
    let owned = unsafe { OwnedFd::from_raw_fd(duplicate) };
    let file = File::from(owned);
    let length = file.metadata().ok()?.len().saturating_sub(position);
    Some((file, position, length))
}

impl WsgiResponse {
    /// Whether the app's headers ask to close the connection.
    pub fn requests_close(&self) -> bool {
        self.headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case(b"connection") && connection_has_close(value)
        })
    }
}
