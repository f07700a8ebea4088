//! `rush.Response` and the encoding of whatever a handler returns.
//!
//! A handler may return `str` (text/plain), `bytes` (application/octet-stream),
//! a `dict` or `list` (JSON) or a `Response`. [`render_result`] turns any of
//! them into response bytes appended to the connection's output buffer, with
//! the framing headers the server owns (`Content-Length`, `Date`,
//! `Connection`). Header names and values from the app are validated when the
//! `Response` is built, so nothing an app returns can split a response.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use rush_proto::encode::{connection_has_close, is_final_status};
use rush_proto::response::{is_valid_header_name, is_valid_header_value};

pub(crate) use crate::exchange::write_status_page;
use crate::exchange::{ResponseWriter, WholeResponse};
pub use crate::http_write::ResponseContext;
use crate::http_write::{Rendered, TEXT_PLAIN};
use crate::static_files::{load_single_file, serve_file, ConditionalHeaders, FileAnswer};
use crate::wsgi::objects::WsgiResponse;
use crate::wsgi::render::render_collected;

const OCTET_STREAM: &[u8] = b"application/octet-stream";
const APPLICATION_JSON: &[u8] = b"application/json";

static JSON_DUMPS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

#[pyclass(module = "rush", name = "Response", subclass)]
pub struct Response {
    status: u16,
    body: Py<PyBytes>,
    /// Validated header fields, in order, without framing headers.
    headers: Vec<(String, String)>,
    content_type: Option<String>,
    close: bool,
    /// Set by `Response.file`: the body is this file, sent natively.
    file: Option<std::path::PathBuf>,
}

/// A response's status must be final (200-599): a 1xx is not an answer,
/// and numbers past 599 (or 0) are not HTTP.
fn check_status(status: u16) -> PyResult<()> {
    if is_final_status(status) {
        Ok(())
    } else {
        Err(PyValueError::new_err(format!(
            "invalid status {status}: a response's status is 200-599"
        )))
    }
}

/// `attachment; filename=...` with an RFC 6266 `filename*` for non-ASCII names.
fn content_disposition(filename: &str) -> String {
    let plain = filename
        .bytes()
        .all(|byte| (0x20..0x7f).contains(&byte) && byte != b'"' && byte != b'\\');
    if plain {
        return format!("attachment; filename=\"{filename}\"");
    }
    let fallback: String = filename
        .chars()
        .map(|character| {
            if character.is_ascii() && !character.is_ascii_control() && !"\"\\".contains(character)
            {
                character
            } else {
                '_'
            }
        })
        .collect();
    let encoded =
        percent_encoding::utf8_percent_encode(filename, percent_encoding::NON_ALPHANUMERIC);
    format!("attachment; filename=\"{fallback}\"; filename*=UTF-8''{encoded}")
}

#[pymethods]
impl Response {
    #[new]
    #[pyo3(signature = (body=None, status=200, headers=None, content_type=None))]
    fn new(
        py: Python<'_>,
        body: Option<&Bound<'_, PyAny>>,
        status: u16,
        headers: Option<&Bound<'_, PyAny>>,
        content_type: Option<String>,
    ) -> PyResult<Self> {
        check_status(status)?;
        let mut content_type = content_type;
        let body = match body {
            None => PyBytes::new(py, b"").unbind(),
            Some(value) => {
                if let Ok(text) = value.cast::<PyString>() {
                    content_type.get_or_insert_with(|| "text/plain; charset=utf-8".into());
                    PyBytes::new(py, text.to_str()?.as_bytes()).unbind()
                } else if let Ok(bytes) = value.cast::<PyBytes>() {
                    bytes.clone().unbind()
                } else if let Ok(bytes) = value.extract::<Vec<u8>>() {
                    PyBytes::new(py, &bytes).unbind()
                } else {
                    return Err(PyTypeError::new_err("Response body must be str or bytes"));
                }
            }
        };
        let mut fields = Vec::new();
        let mut close = false;
        if let Some(headers) = headers {
            let pairs: Vec<(String, String)> = if let Ok(mapping) = headers.cast::<PyDict>() {
                mapping.extract::<Vec<(String, String)>>().or_else(|_| {
                    mapping
                        .items()
                        .iter()
                        .map(|item| item.extract::<(String, String)>())
                        .collect()
                })?
            } else {
                headers.extract()?
            };
            for (name, value) in pairs {
                if !is_valid_header_name(name.as_bytes())
                    || !is_valid_header_value(value.as_bytes())
                {
                    return Err(PyValueError::new_err(format!(
                        "invalid header field {name:?}: {value:?}"
                    )));
                }
                if name.eq_ignore_ascii_case("content-type") {
                    content_type = Some(value);
                } else if name.eq_ignore_ascii_case("content-length")
                    || name.eq_ignore_ascii_case("transfer-encoding")
                {
                    // The server frames every response itself.
                    continue;
                } else if name.eq_ignore_ascii_case("connection") {
                    close |= connection_has_close(value.as_bytes());
                } else {
                    fields.push((name, value));
                }
            }
        }
        if let Some(kind) = &content_type {
            if !is_valid_header_value(kind.as_bytes()) {
                return Err(PyValueError::new_err("invalid content_type"));
            }
        }
        Ok(Response {
            status,
            body,
            headers: fields,
            content_type,
            close,
            file: None,
        })
    }

    /// A response whose body is the file at `path`, sent natively (sendfile),
    /// with `ETag`/`Last-Modified`, 304s and byte ranges like static files.
    /// `filename` makes it a download (`Content-Disposition: attachment`).
    #[staticmethod]
    #[pyo3(signature = (path, filename=None, content_type=None, headers=None))]
    fn file(
        py: Python<'_>,
        path: std::path::PathBuf,
        filename: Option<String>,
        content_type: Option<String>,
        headers: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Response> {
        if !path.is_file() {
            return Err(pyo3::exceptions::PyFileNotFoundError::new_err(format!(
                "no such file: {}",
                path.display()
            )));
        }
        let mut response = Response::new(py, None, 200, headers, content_type)?;
        if let Some(filename) = filename {
            response
                .headers
                .push(("Content-Disposition".into(), content_disposition(&filename)));
        }
        response.file = Some(path);
        Ok(response)
    }

    /// The status code: a final one, 200 to 599.
    #[getter]
    fn status(&self) -> u16 {
        self.status
    }

    #[setter]
    fn set_status(&mut self, status: u16) -> PyResult<()> {
        check_status(status)?;
        self.status = status;
        Ok(())
    }

    #[getter]
    fn body(&self, py: Python<'_>) -> Py<PyBytes> {
        self.body.clone_ref(py)
    }

    #[getter]
    fn headers(&self) -> Vec<(String, String)> {
        self.headers.clone()
    }

    #[getter]
    fn content_type(&self) -> Option<String> {
        self.content_type.clone()
    }

    fn __repr__(&self) -> String {
        format!("<Response {}>", self.status)
    }
}

/// Appends the response for a handler's return value `result`. On a value
/// the server cannot send, nothing is appended and the error says why.
pub(crate) fn render_result<W: ResponseWriter>(
    py: Python<'_>,
    result: &Bound<'_, PyAny>,
    default_status: u16,
    context: &ResponseContext<'_>,
    writer: &mut W,
) -> PyResult<Rendered> {
    let status = default_status;
    let no_headers = std::iter::empty();
    let whole = |content_type, body| WholeResponse {
        status,
        content_type,
        body,
        close: false,
        context,
    };
    if let Ok(text) = result.cast::<PyString>() {
        let body = text.to_str()?.as_bytes();
        writer.send_whole(&whole(TEXT_PLAIN, body), no_headers);
        return Ok(rendered(status, body.len(), false));
    }
    if let Ok(bytes) = result.cast::<PyBytes>() {
        let body = bytes.as_bytes();
        writer.send_whole(&whole(OCTET_STREAM, body), no_headers);
        return Ok(rendered(status, body.len(), false));
    }
    if let Ok(response) = result.cast::<Response>() {
        let response = response.borrow();
        if let Some(path) = &response.file {
            return render_file(&response, path, context, writer);
        }
        let body = response.body.bind(py).as_bytes();
        let content_type = response
            .content_type
            .as_deref()
            .map(str::as_bytes)
            .unwrap_or(OCTET_STREAM);
        let headers = response
            .headers
            .iter()
            .map(|(name, value)| (name.as_bytes(), value.as_bytes()));
        let whole = WholeResponse {
            status: response.status,
            content_type,
            body,
            close: response.close,
            context,
        };
        writer.send_whole(&whole, headers);
        return Ok(rendered(response.status, body.len(), response.close));
    }
    if let Ok(wsgi) = result.cast::<WsgiResponse>() {
        return render_collected(py, &mut wsgi.borrow_mut(), context, writer);
    }
    if result.is_instance_of::<PyDict>() || result.is_instance_of::<PyList>() {
        let dumps = JSON_DUMPS
            .get_or_try_init(py, || -> PyResult<Py<PyAny>> {
                Ok(py.import("rush._json")?.getattr("dumps")?.unbind())
            })?
            .bind(py);
        let encoded = dumps.call1((result,))?;
        let body = encoded.cast::<PyBytes>()?.as_bytes();
        writer.send_whole(&whole(APPLICATION_JSON, body), no_headers);
        return Ok(rendered(status, body.len(), false));
    }
    if result.is_instance_of::<PyTuple>() {
        return Err(PyTypeError::new_err(
            "handlers return str, bytes, dict, list or rush.Response; for a status, return Response(body, status=...)",
        ));
    }
    Err(PyTypeError::new_err(format!(
        "handler returned {}, expected str, bytes, dict, list or rush.Response",
        result.get_type().name()?
    )))
}

fn rendered(status: u16, body_length: usize, close: bool) -> Rendered {
    Rendered {
        status,
        body_length,
        body: None,
        close,
    }
}

fn render_file<W: ResponseWriter>(
    response: &Response,
    path: &std::path::Path,
    context: &ResponseContext<'_>,
    writer: &mut W,
) -> PyResult<Rendered> {
    let file = load_single_file(path, response.content_type.as_deref())?;
    let mut extra_lines = Vec::new();
    for (name, value) in &response.headers {
        extra_lines.extend_from_slice(name.as_bytes());
        extra_lines.extend_from_slice(b": ");
        extra_lines.extend_from_slice(value.as_bytes());
        extra_lines.extend_from_slice(b"\r\n");
    }
    let fields = crate::request::header_fields(context.request_head);
    // The head's first token, past any empty lines the parser allowed.
    let head = context.request_head;
    let start = head
        .iter()
        .position(|&byte| !matches!(byte, b'\r' | b'\n'))
        .unwrap_or(head.len());
    let method = head[start..]
        .split(|&byte| byte == b' ')
        .next()
        .unwrap_or_default();
    let conditional = ConditionalHeaders::from_fields(fields).for_method(method);
    let answer = FileAnswer {
        file: &file,
        cache_control: None,
        extra_lines: &extra_lines,
        status: None,
    };
    let outcome = serve_file(answer, &conditional, context, writer);
    Ok(Rendered {
        status: outcome.status,
        body_length: outcome.body_length as usize,
        body: outcome.body,
        close: response.close,
    })
}
