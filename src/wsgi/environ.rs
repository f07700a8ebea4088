//! The WSGI `environ` (PEP 3333), built in Rust for each request.
//!
//! How it works: a per-worker dict of the constant keys is copied (one C
//! call, sized for them) and the request's own keys are set over it. What
//! repeats from request to request is made once: the `HTTP_*` keys of the
//! header names seen (interned), the last value of each as a string, the
//! usual methods, and one shared `wsgi.input` for requests without a body.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::IntoRawFd;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString};
use rush_proto::{BodyFraming, RequestHead, Version};

use super::input::EmptyInput;
use super::objects::FileWrapper;
use crate::body::{RequestBody, SpoolHold};
use crate::exchange::Peer;
use crate::listen_address::ListenAddress;
use crate::request::header_fields;

static BYTES_IO: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static EMPTY_INPUT: PyOnceLock<Py<EmptyInput>> = PyOnceLock::new();
static STDERR: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// What stays the same for every request of a worker.
pub struct WsgiSettings {
    pub app: Py<PyAny>,
    /// `SCRIPT_NAME`: the path prefix the app is mounted under.
    pub root_path: String,
    /// A dict of the constant keys, copied per request.
    base_environ: Py<PyDict>,
    /// SERVER_NAME and SERVER_PORT for each listener, in `--bind` order
    /// (the first one's are in the base); `None` for a Unix socket, whose
    /// requests take them from their Host header.
    servers: Vec<Option<(Py<PyString>, Py<PyString>)>>,
    /// Header name as sent -> its interned `HTTP_*` key and last value, so
    /// the usual headers cost one hash lookup instead of new strings per
    /// request.
    header_keys: RefCell<HashMap<Vec<u8>, HeaderKey>>,
}

/// Most distinct header names whose `HTTP_*` keys are remembered (a client
/// sending random names must not grow memory).
const HEADER_KEY_CACHE_LIMIT: usize = 512;

/// Longest header value remembered as a string (so the cache holds at most
/// `HEADER_KEY_CACHE_LIMIT` times this many bytes).
const HEADER_VALUE_CACHE_LIMIT: usize = 256;

/// A header name's `HTTP_*` key, and the value it had last as a string.
/// Clients send the same Host, User-Agent and Accept on every request, and
/// a `str` never changes, so one string serves every request that sends
/// the same bytes (a comparison instead of a decode, a new object and its
/// release).
struct HeaderKey {
    key: Py<PyString>,
    last_value: Option<(Vec<u8>, Py<PyString>)>,
}

impl HeaderKey {
    fn new(py: Python<'_>, name: &[u8]) -> HeaderKey {
        let mut text = String::with_capacity(name.len() + 5);
        text.push_str("HTTP_");
        for &byte in name {
            text.push(if byte == b'-' {
                '_'
            } else {
                byte.to_ascii_uppercase() as char
            });
        }
        HeaderKey {
            key: PyString::intern(py, &text).unbind(),
            last_value: None,
        }
    }

    /// `value` as a latin-1 string: the last one if the bytes are the same.
    fn value<'py>(&mut self, py: Python<'py>, value: &[u8]) -> PyResult<Bound<'py, PyString>> {
        if let Some((bytes, string)) = &self.last_value {
            if bytes.as_slice() == value {
                return Ok(string.bind(py).clone());
            }
        }
        let string = latin1(py, value)?;
        if value.len() <= HEADER_VALUE_CACHE_LIMIT {
            match &mut self.last_value {
                Some((bytes, last)) => {
                    bytes.clear();
                    bytes.extend_from_slice(value);
                    *last = string.clone().unbind();
                }
                None => self.last_value = Some((value.to_vec(), string.clone().unbind())),
            }
        }
        Ok(string)
    }
}

impl WsgiSettings {
    pub fn new(
        py: Python<'_>,
        app: Py<PyAny>,
        root_path: String,
        multithread: bool,
        multiprocess: bool,
        servers: &[Option<ListenAddress>],
    ) -> PyResult<WsgiSettings> {
        let base = PyDict::new(py);
        base.set_item("wsgi.version", (1, 0))?;
        base.set_item("wsgi.url_scheme", "http")?;
        base.set_item(
            "wsgi.errors",
            STDERR.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(py.import("sys")?.getattr("stderr")?.unbind())
            })?,
        )?;
        base.set_item("wsgi.multithread", multithread)?;
        base.set_item("wsgi.multiprocess", multiprocess)?;
        base.set_item("wsgi.run_once", false)?;
        base.set_item("wsgi.input_terminated", true)?;
        base.set_item("wsgi.file_wrapper", py.get_type::<FileWrapper>())?;
        base.set_item("SCRIPT_NAME", &root_path)?;
        // Each TCP listener's address as strings; a Unix socket has none.
        let servers: Vec<_> = servers
            .iter()
            .map(|address| match address {
                Some(ListenAddress::Tcp(address)) => Some((
                    PyString::new(py, &address.ip().to_string()).unbind(),
                    PyString::new(py, &address.port().to_string()).unbind(),
                )),
                _ => None,
            })
            .collect();
        if let Some(Some((name, port))) = servers.first() {
            base.set_item("SERVER_NAME", name.bind(py))?;
            base.set_item("SERVER_PORT", port.bind(py))?;
        }
        base.set_item(
            "SERVER_SOFTWARE",
            concat!("rush/", env!("CARGO_PKG_VERSION")),
        )?;
        Ok(WsgiSettings {
            app,
            root_path,
            base_environ: base.unbind(),
            servers,
            header_keys: RefCell::new(HashMap::new()),
        })
    }
}

/// Latin-1 decoding: each byte one character, as PEP 3333 wants for
/// "bytes-as-str" values (PATH_INFO, header values).
fn latin1<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Bound<'py, PyString>> {
    // CPython's own Latin-1 decoder: one pass that finds the widest byte,
    // then a copy (through UTF-8 it cost twice as much, ASCII or not).
    // SAFETY: the GIL is held and the pointer and length describe `bytes`;
    // the result is a new reference, or NULL with an exception set.
    unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            pyo3::ffi::PyUnicode_DecodeLatin1(
                bytes.as_ptr().cast(),
                bytes.len() as pyo3::ffi::Py_ssize_t,
                std::ptr::null(),
            ),
        )
        .map(|text| text.cast_into_unchecked())
    }
}

/// The method as a `str`: the usual ones are interned, made once.
fn method_string<'py>(py: Python<'py>, method: &[u8]) -> Bound<'py, PyString> {
    match method {
        b"GET" => pyo3::intern!(py, "GET").clone(),
        b"POST" => pyo3::intern!(py, "POST").clone(),
        b"HEAD" => pyo3::intern!(py, "HEAD").clone(),
        b"PUT" => pyo3::intern!(py, "PUT").clone(),
        b"DELETE" => pyo3::intern!(py, "DELETE").clone(),
        b"PATCH" => pyo3::intern!(py, "PATCH").clone(),
        b"OPTIONS" => pyo3::intern!(py, "OPTIONS").clone(),
        // A method is a token (checked by the parser): ASCII.
        other => PyString::new(py, std::str::from_utf8(other).unwrap_or("GET")),
    }
}

/// `dict.setdefault(key, value)`: the value now under `key`, which is
/// `value` itself unless the key was there already.
fn set_default<'py>(
    dict: &Bound<'py, PyDict>,
    key: &Bound<'py, PyString>,
    value: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the GIL is held and all three are live objects; the result is
    // a borrowed reference (owned by the dict), or NULL with an exception.
    unsafe {
        let present = pyo3::ffi::PyDict_SetDefault(dict.as_ptr(), key.as_ptr(), value.as_ptr());
        Bound::from_borrowed_ptr_or_err(dict.py(), present)
    }
}

/// Builds the `environ` dict for one request.
pub fn build_environ<'py>(
    py: Python<'py>,
    settings: &WsgiSettings,
    head_bytes: &[u8],
    head: &RequestHead,
    body: RequestBody<'_>,
    peer: &mut Peer<'_>,
) -> PyResult<Bound<'py, PyDict>> {
    let origin = peer.origin;
    let remote = peer.objects.remote_strings(py, peer.client);
    let environ = settings.base_environ.bind(py).copy()?;
    environ.set_item(
        pyo3::intern!(py, "REQUEST_METHOD"),
        method_string(py, head.method_span.of(head_bytes)),
    )?;
    // PATH_INFO is the decoded path as latin-1 "bytes in a str", minus SCRIPT_NAME.
    let raw_path = head.path.of(head_bytes);
    let decoded: Cow<'_, [u8]> = if raw_path.contains(&b'%') {
        Cow::Owned(percent_encoding::percent_decode(raw_path).collect())
    } else {
        Cow::Borrowed(raw_path)
    };
    let mut path_info: &[u8] = &decoded;
    if !settings.root_path.is_empty() {
        if let Some(rest) = path_info.strip_prefix(settings.root_path.as_bytes()) {
            if rest.is_empty() || rest.starts_with(b"/") {
                path_info = rest;
            }
        }
    }
    environ.set_item(pyo3::intern!(py, "PATH_INFO"), latin1(py, path_info)?)?;
    let query = head.query.map(|query| query.of(head_bytes)).unwrap_or(b"");
    environ.set_item(pyo3::intern!(py, "QUERY_STRING"), latin1(py, query)?)?;
    environ.set_item(
        pyo3::intern!(py, "SERVER_PROTOCOL"),
        match head.version {
            Version::Http10 => pyo3::intern!(py, "HTTP/1.0"),
            Version::Http11 => pyo3::intern!(py, "HTTP/1.1"),
            Version::Http2 => pyo3::intern!(py, "HTTP/2"),
            Version::Http3 => pyo3::intern!(py, "HTTP/3"),
        },
    )?;
    if let Some((address, port)) = origin.and_then(|origin| origin.client.as_ref()) {
        environ.set_item(pyo3::intern!(py, "REMOTE_ADDR"), address)?;
        environ.set_item(pyo3::intern!(py, "REMOTE_PORT"), port.to_string())?;
    } else if let Some((address, port)) = remote {
        environ.set_item(pyo3::intern!(py, "REMOTE_ADDR"), address.bind(py))?;
        environ.set_item(pyo3::intern!(py, "REMOTE_PORT"), port.bind(py))?;
    }
    if origin.and_then(|origin| origin.https) == Some(true) {
        environ.set_item(
            pyo3::intern!(py, "wsgi.url_scheme"),
            pyo3::intern!(py, "https"),
        )?;
    }
    let mut header_keys = settings.header_keys.borrow_mut();
    for (name, value) in header_fields(head_bytes) {
        if name.eq_ignore_ascii_case(b"content-type") {
            environ.set_item(pyo3::intern!(py, "CONTENT_TYPE"), latin1(py, value)?)?;
            continue;
        }
        if name.eq_ignore_ascii_case(b"content-length") {
            environ.set_item(pyo3::intern!(py, "CONTENT_LENGTH"), latin1(py, value)?)?;
            continue;
        }
        // `X_Forwarded_For` and `X-Forwarded-For` would map to the same key;
        // like gunicorn and nginx, drop names with underscores so one cannot
        // spoof the other.
        if name.contains(&b'_') {
            continue;
        }
        let (key, value) = match header_keys.get_mut(name) {
            Some(entry) => (entry.key.bind(py).clone(), entry.value(py, value)?),
            None => {
                let mut entry = HeaderKey::new(py, name);
                let pair = (entry.key.bind(py).clone(), entry.value(py, value)?);
                if header_keys.len() < HEADER_KEY_CACHE_LIMIT {
                    header_keys.insert(name.to_vec(), entry);
                }
                pair
            }
        };
        // One lookup that inserts the value unless the key is there already
        // (the dict grows only then: a repeated field may bring the same
        // string object as the first, so identity would not tell).
        let size = environ.len();
        let present = set_default(&environ, &key, &value)?;
        if environ.len() == size {
            // Repeated fields are joined with commas (RFC 9110 5.3).
            let joined = format!("{},{}", present.extract::<String>()?, value.to_str()?);
            environ.set_item(&key, joined)?;
        }
    }
    if let Some(host) = origin.and_then(|origin| origin.host.as_ref()) {
        // After the fields: the proxy's host replaces the one it was sent.
        environ.set_item(pyo3::intern!(py, "HTTP_HOST"), host)?;
    }
    match settings.servers.get(peer.listener) {
        // The base has the first listener's.
        Some(Some(_)) if peer.listener == 0 => {}
        Some(Some((name, port))) => {
            environ.set_item(pyo3::intern!(py, "SERVER_NAME"), name.bind(py))?;
            environ.set_item(pyo3::intern!(py, "SERVER_PORT"), port.bind(py))?;
        }
        _ => server_from_host(py, &environ)?,
    }
    let input = match body {
        // Most requests have no body: they share one reader of nothing.
        RequestBody::Bytes([]) => EMPTY_INPUT
            .get_or_try_init(py, || Py::new(py, EmptyInput))?
            .bind(py)
            .clone()
            .into_any(),
        RequestBody::Bytes(bytes) => BYTES_IO
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(py.import("io")?.getattr("BytesIO")?.unbind())
            })?
            .bind(py)
            .call1((PyBytes::new(py, bytes),))?,
        // A spooled body: the app reads the temporary file itself, from the start.
        RequestBody::File { file, hold, .. } => {
            let descriptor = file.try_clone()?.into_raw_fd();
            let input = py.import("io")?.call_method1("open", (descriptor, "rb"))?;
            input.call_method1("seek", (0,))?;
            // The file counts against the spool budget for as long as the
            // app keeps its input (a pool thread outlives the loop's buffer).
            let keeper = Py::new(
                py,
                SpoolKeeper {
                    _hold: Arc::clone(hold),
                },
            )?;
            py.import("weakref")?
                .call_method1("finalize", (&input, keeper.getattr(py, "release")?))?;
            input
        }
    };
    environ.set_item(pyo3::intern!(py, "wsgi.input"), input)?;
    if head.framing == BodyFraming::Chunked {
        // The chunked body was read (and decoded) whole before the app was
        // called: give its length as CONTENT_LENGTH, as waitress does, for
        // the many apps (Django among them) that read exactly that many
        // bytes and would otherwise see an empty body.
        let length = match body {
            RequestBody::Bytes(bytes) => bytes.len() as u64,
            RequestBody::File { length, .. } => length,
        };
        environ.set_item(pyo3::intern!(py, "CONTENT_LENGTH"), length.to_string())?;
    }
    Ok(environ)
}

/// SERVER_NAME and SERVER_PORT of a request that came over a Unix socket,
/// which has no address to give: its Host header's (gunicorn's choice, and
/// PEP 3333's way of rebuilding the URL), the port the scheme's default
/// when the header names none; `localhost` without a Host header.
fn server_from_host(py: Python<'_>, environ: &Bound<'_, PyDict>) -> PyResult<()> {
    let https = match environ.get_item(pyo3::intern!(py, "wsgi.url_scheme"))? {
        Some(scheme) => scheme.extract::<&str>()? == "https",
        None => false,
    };
    let host = environ.get_item(pyo3::intern!(py, "HTTP_HOST"))?;
    let host = match &host {
        Some(host) => host.extract::<&str>()?,
        None => "localhost",
    };
    let (name, port) = split_host(host);
    let port = port.unwrap_or(if https { "443" } else { "80" });
    environ.set_item(pyo3::intern!(py, "SERVER_NAME"), name)?;
    environ.set_item(pyo3::intern!(py, "SERVER_PORT"), port)?;
    Ok(())
}

/// `host[:port]` (an IPv6 literal keeps its brackets) into the two.
fn split_host(host: &str) -> (&str, Option<&str>) {
    let after_name = match host.rfind(']') {
        Some(end) => end + 1,
        None => 0,
    };
    match host[after_name..].rfind(':') {
        Some(colon) => {
            let colon = after_name + colon;
            let port = &host[colon + 1..];
            if !port.is_empty() && port.bytes().all(|byte| byte.is_ascii_digit()) {
                (&host[..colon], Some(port))
            } else {
                (host, None)
            }
        }
        None => (host, None),
    }
}

#[cfg(test)]
mod tests {
    use super::split_host;

    #[test]
    fn host_and_port_are_split_where_a_port_is() {
        assert_eq!(
            split_host("example.com:8000"),
            ("example.com", Some("8000"))
        );
        assert_eq!(split_host("example.com"), ("example.com", None));
        assert_eq!(split_host("[::1]:8443"), ("[::1]", Some("8443")));
        assert_eq!(split_host("[::1]"), ("[::1]", None));
        assert_eq!(split_host("example.com:"), ("example.com:", None));
        assert_eq!(split_host("a:b"), ("a:b", None));
    }
}

/// A spooled body's share of the spool budget, kept alive by a
/// `weakref.finalize` on its `wsgi.input`: the finalizer holds `release`
/// (and so this object) until the input is collected, calls it, then lets
/// it go, and the share with it.
#[pyclass(module = "rush._rush", frozen)]
struct SpoolKeeper {
    _hold: Arc<SpoolHold>,
}

#[pymethods]
impl SpoolKeeper {
    /// Nothing to do: dropping this object after the call gives the share back.
    fn release(&self) {}
}
