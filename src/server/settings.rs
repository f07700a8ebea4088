//! The settings a worker's [`Server`](super::Server) is built from, one
//! Python class per concern, instead of one constructor with forty
//! parameters.
//!
//! Python builds them from its `Config` (python/rush/worker.py,
//! `app_server_settings` and `log_settings`), and the stub
//! (python/rush/_rush.pyi) declares them; tests/test_stub.py checks the two
//! against each other. The constructors take no defaults for anything
//! `Config` has a default for: a default lives in one place, `Config`
//! (`None` below means "absent", not a default value).
//!
//! The classes only hold what Python passed. Turning the values into the
//! loop's own types (durations, parsed formats, the forwarding rules) is
//! left to `Server::new`, so every bad value is still refused by the
//! constructor Python calls, with the same message as before.
//!
//! What a worker serves is one of two things, picked by the object given
//! to `Server` (see `server::kind`): [`AppServerSettings`] for the app
//! server, `ProxySettings` (`crate::proxy`) for `rush proxy`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::options::HttpMode;
use crate::router::Router;
use crate::tls::TlsSettings;

/// Sizes and counts a connection and the worker are held to
/// (`--max-request-line` ... `--ssl-max-handshakes`).
#[pyclass(module = "rush._rush", frozen)]
pub struct LimitSettings {
    pub(crate) max_request_line: usize,
    pub(crate) max_head_size: usize,
    pub(crate) max_headers: usize,
    pub(crate) max_body_size: u64,
    pub(crate) max_spool_size: u64,
    pub(crate) max_connections: usize,
    pub(crate) max_worker_output: usize,
    pub(crate) tls_max_handshakes: usize,
}

#[pymethods]
impl LimitSettings {
    #[new]
    #[pyo3(signature = (
        *, max_request_line, max_head_size, max_headers, max_body_size,
        max_spool_size, max_connections, max_worker_output, tls_max_handshakes,
    ))]
    // The settings object itself: keyword-only from Python, one per flag.
    #[allow(clippy::too_many_arguments)]
    fn new(
        max_request_line: usize,
        max_head_size: usize,
        max_headers: usize,
        max_body_size: u64,
        max_spool_size: u64,
        max_connections: usize,
        max_worker_output: usize,
        tls_max_handshakes: usize,
    ) -> Self {
        LimitSettings {
            max_request_line,
            max_head_size,
            max_headers,
            max_body_size,
            max_spool_size,
            max_connections,
            max_worker_output,
            tls_max_handshakes,
        }
    }
}

/// How long a connection may take over each part of an exchange
/// (`--keep-alive-timeout`, `--header-timeout`, `--body-timeout`,
/// `--send-timeout`), in seconds.
#[pyclass(module = "rush._rush", frozen)]
pub struct TimeoutSettings {
    pub(crate) keep_alive_timeout: f64,
    pub(crate) header_timeout: f64,
    pub(crate) body_timeout: f64,
    pub(crate) send_timeout: f64,
}

#[pymethods]
impl TimeoutSettings {
    #[new]
    #[pyo3(signature = (*, keep_alive_timeout, header_timeout, body_timeout, send_timeout))]
    fn new(
        keep_alive_timeout: f64,
        header_timeout: f64,
        body_timeout: f64,
        send_timeout: f64,
    ) -> Self {
        TimeoutSettings {
            keep_alive_timeout,
            header_timeout,
            body_timeout,
            send_timeout,
        }
    }
}

/// Which peers are believed about the client: the forwarding rules
/// (`--proxy-headers`, `--forwarded-allow-ips`, `--forwarded-host`) and
/// whether every connection starts with a PROXY protocol header
/// (`--proxy-protocol`), taken from the same trusted peers.
#[pyclass(module = "rush._rush", frozen)]
pub struct ForwardingSettings {
    pub(crate) proxy_headers: String,
    pub(crate) forwarded_allow_ips: String,
    pub(crate) forwarded_host: bool,
    pub(crate) proxy_protocol: bool,
}

#[pymethods]
impl ForwardingSettings {
    #[new]
    #[pyo3(signature = (*, proxy_headers, forwarded_allow_ips, forwarded_host, proxy_protocol))]
    fn new(
        proxy_headers: String,
        forwarded_allow_ips: String,
        forwarded_host: bool,
        proxy_protocol: bool,
    ) -> Self {
        ForwardingSettings {
            proxy_headers,
            forwarded_allow_ips,
            forwarded_host,
            proxy_protocol,
        }
    }
}

/// What response heads say and which request heads are believed: the
/// `Server`/`Date`/`--header` fields, and the forwarding rules
/// ([`ForwardingSettings`]).
#[pyclass(module = "rush._rush", frozen)]
pub struct HeaderSettings {
    pub(crate) forwarding: Py<ForwardingSettings>,
    pub(crate) server_header: bool,
    pub(crate) date_header: bool,
    pub(crate) extra_headers: Vec<(String, String)>,
}

#[pymethods]
impl HeaderSettings {
    #[new]
    #[pyo3(signature = (*, forwarding, server_header, date_header, extra_headers))]
    fn new(
        forwarding: Py<ForwardingSettings>,
        server_header: bool,
        date_header: bool,
        extra_headers: Vec<(String, String)>,
    ) -> Self {
        HeaderSettings {
            forwarding,
            server_header,
            date_header,
            extra_headers,
        }
    }
}

/// The WebSocket options (`--ws-*`). A ping interval or timeout of 0 turns it off.
#[pyclass(module = "rush._rush", frozen)]
pub struct WebSocketSettings {
    pub(crate) max_size: usize,
    pub(crate) max_queue: usize,
    pub(crate) ping_interval: f64,
    pub(crate) ping_timeout: f64,
    pub(crate) per_message_deflate: bool,
    pub(crate) allowed_origins: Vec<String>,
}

#[pymethods]
impl WebSocketSettings {
    #[new]
    #[pyo3(signature = (
        *, max_size, max_queue, ping_interval, ping_timeout, per_message_deflate, allowed_origins,
    ))]
    fn new(
        max_size: usize,
        max_queue: usize,
        ping_interval: f64,
        ping_timeout: f64,
        per_message_deflate: bool,
        allowed_origins: Vec<String>,
    ) -> Self {
        WebSocketSettings {
            max_size,
            max_queue,
            ping_interval,
            ping_timeout,
            per_message_deflate,
            allowed_origins,
        }
    }
}

/// Where log lines go and which are written: both kinds of worker use it.
/// `error_logger(message, exception)` takes every error, warning, info and
/// debug line; `access_logger`, when set, one line per request.
#[pyclass(module = "rush._rush", frozen)]
pub struct LogSettings {
    pub(crate) error_logger: Py<PyAny>,
    pub(crate) access_logger: Option<Py<PyAny>>,
    pub(crate) access_log_format: Option<String>,
    pub(crate) access_log_fields: bool,
    pub(crate) log_refusals: bool,
    pub(crate) debug: bool,
}

#[pymethods]
impl LogSettings {
    #[new]
    #[pyo3(signature = (
        error_logger, *, access_logger=None, access_log_format=None,
        access_log_fields, log_refusals, debug,
    ))]
    fn new(
        error_logger: Py<PyAny>,
        access_logger: Option<Py<PyAny>>,
        access_log_format: Option<String>,
        access_log_fields: bool,
        log_refusals: bool,
        debug: bool,
    ) -> Self {
        LogSettings {
            error_logger,
            access_logger,
            access_log_format,
            access_log_fields,
            log_refusals,
            debug,
        }
    }
}

/// The app and the interface it speaks: a rush `App` (its routes are the
/// router's), or a WSGI or an ASGI app behind a router that holds only the
/// `--static` mounts and `--cache` paths.
#[pyclass(module = "rush._rush", frozen)]
pub struct AppSettings {
    pub(crate) router: Py<Router>,
    pub(crate) wsgi_app: Option<Py<PyAny>>,
    pub(crate) asgi_app: Option<Py<PyAny>>,
    pub(crate) asgi_state: Option<Py<PyDict>>,
    pub(crate) root_path: String,
    pub(crate) wsgi_multithread: bool,
    pub(crate) wsgi_multiprocess: bool,
}

#[pymethods]
impl AppSettings {
    #[new]
    #[pyo3(signature = (
        router, *, wsgi_app=None, asgi_app=None, asgi_state=None,
        root_path, wsgi_multithread, wsgi_multiprocess,
    ))]
    fn new(
        router: Py<Router>,
        wsgi_app: Option<Py<PyAny>>,
        asgi_app: Option<Py<PyAny>>,
        asgi_state: Option<Py<PyDict>>,
        root_path: String,
        wsgi_multithread: bool,
        wsgi_multiprocess: bool,
    ) -> Self {
        // Both apps at once is refused by `Server`, as before.
        AppSettings {
            router,
            wsgi_app,
            asgi_app,
            asgi_state,
            root_path,
            wsgi_multithread,
            wsgi_multiprocess,
        }
    }
}

/// Everything the app server is built from besides its sockets and its
/// logs (`LogSettings`): given to `Server` in place of `ProxySettings`, it
/// makes the worker an app server.
#[pyclass(module = "rush._rush", frozen)]
pub struct AppServerSettings {
    pub(crate) app: Py<AppSettings>,
    pub(crate) limits: Py<LimitSettings>,
    pub(crate) timeouts: Py<TimeoutSettings>,
    pub(crate) headers: Py<HeaderSettings>,
    pub(crate) websocket: Py<WebSocketSettings>,
    pub(crate) tls: Option<Py<TlsSettings>>,
    /// `--http`: which HTTP versions the connections speak.
    pub(crate) http: HttpMode,
    /// `--http3`: HTTP/3 over QUIC beside each TCP listener.
    pub(crate) http3: Option<Py<crate::http3::Http3Settings>>,
}

#[pymethods]
impl AppServerSettings {
    #[new]
    #[pyo3(signature = (app, *, limits, timeouts, headers, websocket, tls=None, http=None, http3=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        app: Py<AppSettings>,
        limits: Py<LimitSettings>,
        timeouts: Py<TimeoutSettings>,
        headers: Py<HeaderSettings>,
        websocket: Py<WebSocketSettings>,
        tls: Option<Py<TlsSettings>>,
        http: Option<&str>,
        http3: Option<Py<crate::http3::Http3Settings>>,
    ) -> PyResult<Self> {
        Ok(AppServerSettings {
            app,
            limits,
            timeouts,
            headers,
            websocket,
            tls,
            http: HttpMode::parse(http)?,
            http3,
        })
    }
}
