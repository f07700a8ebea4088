//! `rush.Request`: what a handler receives, built lazily.
//!
//! Creating Python objects is the expensive part of calling a handler, and
//! most handlers read two or three fields. So a `Request` holds a copy of the
//! raw head bytes and the offsets the parser found; `path`, `query` and
//! `headers` become Python objects only when first asked for, and are cached.

use std::net::SocketAddr;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};
use rush_proto::{Span, Version};

use crate::body::OwnedBody;
use crate::forwarding::{scheme_of, RequestOrigin};
// The fields of a validated head, for every interface (rush-proto, sans-IO).
pub use rush_proto::fields::{header_fields, trim_whitespace};

static HEADERS_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static QUERY_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static JSON_LOADS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The parts of a request the loop hands to [`Request::new`].
pub struct RequestParts<'a> {
    pub head: &'a [u8],
    pub method: Span,
    pub target: Span,
    pub path: Span,
    pub query: Option<Span>,
    pub version: Version,
    pub body: OwnedBody,
    pub client: Option<SocketAddr>,
    /// What a trusted proxy reported (`crate::forwarding`), if anything.
    pub origin: Option<Box<RequestOrigin>>,
    /// The request came over TLS (the scheme unless a proxy says otherwise).
    pub tls: bool,
}

#[pyclass(module = "rush", name = "Request", frozen)]
pub struct Request {
    head: Box<[u8]>,
    method_span: Span,
    target_span: Span,
    path_span: Span,
    query_span: Option<Span>,
    version: Version,
    body: OwnedBody,
    /// The body as Python bytes, made on first access (a spooled body is
    /// read from its file only then).
    body_bytes: PyOnceLock<Py<PyBytes>>,
    client: Option<SocketAddr>,
    origin: Option<Box<RequestOrigin>>,
    tls: bool,
    path: PyOnceLock<Py<PyString>>,
    query: PyOnceLock<Py<PyAny>>,
    headers: PyOnceLock<Py<PyAny>>,
}

impl Request {
    pub fn new(parts: RequestParts<'_>) -> Request {
        Request {
            head: parts.head.into(),
            method_span: parts.method,
            target_span: parts.target,
            path_span: parts.path,
            query_span: parts.query,
            version: parts.version,
            body: parts.body,
            body_bytes: PyOnceLock::new(),
            client: parts.client,
            origin: parts.origin,
            tls: parts.tls,
            path: PyOnceLock::new(),
            query: PyOnceLock::new(),
            headers: PyOnceLock::new(),
        }
    }

    fn method_bytes(&self) -> &[u8] {
        self.method_span.of(&self.head)
    }
}

/// Imports `module.attribute` once per process.
fn cached_attribute<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    module: &str,
    attribute: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    Ok(cell
        .get_or_try_init(py, || {
            py.import(module)?
                .getattr(attribute)
                .map(|value| value.unbind())
        })?
        .bind(py))
}

/// Percent-decodes a path; invalid UTF-8 after decoding is replaced, as
/// browsers and other servers do.
pub fn decode_path(raw: &[u8]) -> std::borrow::Cow<'_, str> {
    if raw.is_empty() {
        // An absolute-form target without a path (`http://host`) means `/`.
        return std::borrow::Cow::Borrowed("/");
    }
    if !raw.contains(&b'%') {
        if let Ok(text) = std::str::from_utf8(raw) {
            return std::borrow::Cow::Borrowed(text);
        }
    }
    percent_encoding::percent_decode(raw).decode_utf8_lossy()
}

#[pymethods]
impl Request {
    /// The method token, e.g. `"GET"`.
    #[getter]
    fn method<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        match self.method_bytes() {
            b"GET" => pyo3::intern!(py, "GET").clone(),
            b"POST" => pyo3::intern!(py, "POST").clone(),
            b"HEAD" => pyo3::intern!(py, "HEAD").clone(),
            b"PUT" => pyo3::intern!(py, "PUT").clone(),
            b"DELETE" => pyo3::intern!(py, "DELETE").clone(),
            other => PyString::new(py, &String::from_utf8_lossy(other)),
        }
    }

    /// The percent-decoded path, without the query string.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        self.path
            .get_or_init(py, || {
                PyString::new(py, &decode_path(self.path_span.of(&self.head))).unbind()
            })
            .bind(py)
            .clone()
    }

    /// The path exactly as sent, still percent-encoded.
    #[getter]
    fn raw_path<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.path_span.of(&self.head))
    }

    /// The request target exactly as sent (path and query).
    #[getter]
    fn target<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.target_span.of(&self.head))
    }

    /// The raw query string (after `?`), as bytes.
    #[getter]
    fn query_string<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let raw = self
            .query_span
            .map(|span| span.of(&self.head))
            .unwrap_or(b"");
        PyBytes::new(py, raw)
    }

    /// The parsed query: a `rush.QueryParams` multi-valued mapping.
    #[getter]
    fn query<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self.query.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            let pairs = PyList::empty(py);
            if let Some(span) = self.query_span {
                for (name, value) in form_urlencoded::parse(span.of(&self.head)) {
                    pairs.append(PyTuple::new(py, [name.as_ref(), value.as_ref()])?)?;
                }
            }
            let class = cached_attribute(py, &QUERY_CLASS, "rush.datastructures", "QueryParams")?;
            Ok(class.call1((pairs,))?.unbind())
        })?;
        Ok(value.bind(py).clone())
    }

    /// The header fields: a case-insensitive `rush.Headers` multi-valued mapping.
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let value = self
            .headers
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                let pairs = PyList::empty(py);
                for (name, value) in header_fields(&self.head) {
                    // Field values are bytes on the wire; latin-1 maps each byte to
                    // one character, so nothing is lost (as WSGI does).
                    let value: String = value.iter().map(|&byte| byte as char).collect();
                    pairs.append(PyTuple::new(
                        py,
                        [String::from_utf8_lossy(name).into_owned(), value],
                    )?)?;
                }
                let class = cached_attribute(py, &HEADERS_CLASS, "rush.datastructures", "Headers")?;
                Ok(class.call1((pairs,))?.unbind())
            })?;
        Ok(value.bind(py).clone())
    }

    /// The whole request body.
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = self
            .body_bytes
            .get_or_try_init(py, || -> PyResult<Py<PyBytes>> {
                Ok(match &self.body {
                    OwnedBody::Bytes(bytes) => PyBytes::new(py, bytes).unbind(),
                    spooled => PyBytes::new(py, &spooled.read_all()?).unbind(),
                })
            })?;
        Ok(bytes.bind(py).clone())
    }

    /// The body parsed as JSON.
    fn json<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let loads = cached_attribute(py, &JSON_LOADS, "json", "loads")?;
        loads.call1((self.body(py)?,))
    }

    /// `(host, port)` of the client: the peer, or the client a trusted
    /// proxy reported (port 0 when it gave none); `None` on a Unix socket.
    #[getter]
    fn client(&self) -> Option<(String, u16)> {
        if let Some(client) = self.origin.as_ref().and_then(|o| o.client.clone()) {
            return Some(client);
        }
        self.client
            .map(|address| (address.ip().to_string(), address.port()))
    }

    /// `"http"` or `"https"`: how the client reached the server (or the
    /// first proxy, as a trusted proxy reports it).
    #[getter]
    fn scheme(&self) -> &'static str {
        // A trusted proxy's word on the scheme wins; else the transport's
        // (as for the ASGI scope and the WSGI environ).
        match self.origin.as_deref().and_then(|origin| origin.https) {
            None if self.tls => "https",
            _ => scheme_of(self.origin.as_deref()),
        }
    }

    /// The host the client asked for: the Host field, or what a trusted
    /// proxy reported with `--forwarded-host`; `None` without either.
    #[getter]
    fn host(&self) -> Option<String> {
        if let Some(host) = self.origin.as_ref().and_then(|o| o.host.clone()) {
            return Some(host);
        }
        header_fields(&self.head)
            .find(|(name, _)| name.eq_ignore_ascii_case(b"host"))
            .map(|(_, value)| String::from_utf8_lossy(value).into_owned())
    }

    /// `"1.0"`, `"1.1"` or `"2"`, as ASGI spells it.
    #[getter]
    fn http_version(&self) -> &'static str {
        self.version.as_str()
    }

    fn __repr__(&self) -> String {
        format!(
            "<Request {} {}>",
            String::from_utf8_lossy(self.method_bytes()),
            String::from_utf8_lossy(self.target_span.of(&self.head))
        )
    }
}
