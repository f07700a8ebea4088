//! The app server: the worker kind that answers HTTP/1.1 and WebSocket
//! connections with the app (a rush `App`, WSGI or ASGI), built from
//! [`AppServerSettings`]. Its loop is `event_loop.rs`, the work that
//! finishes off the loop's own pass `completion.rs`.

use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant, SystemTime};

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll};
use pyo3::prelude::*;
use rush_proto::forwarded::TrustedProxies;
use rush_proto::{DateCache, Limits};
use slab::Slab;

use super::listener::Listener;
use super::settings::{AppServerSettings, LogSettings};
use super::Worker;
use crate::access_log::AccessFormat;
use crate::asgi::AsgiSettings;
use crate::conn::Connection;
use crate::dispatch::{AppInterface, Core};
use crate::forwarding::Forwarding;
use crate::listen_address::ListenAddress;
use crate::liveness::Liveness;
use crate::log_limit::LogLimit;
use crate::options::{seconds, LoopConfig, WsConfig, OUTPUT_HIGH_WATER, READ_CHUNK};
use crate::static_files::StaticFiles;
use crate::wsgi::WsgiSettings;

/// The app server's tokens besides the listeners' and `listener::WAKEUP`:
/// a static file changed, a pool thread finished work.
pub(crate) const FILE_EVENTS: mio::Token = mio::Token(2);
pub(crate) const COMPLETIONS: mio::Token = mio::Token(3);
/// A connection that used its share of a turn wants the next
/// (`crate::next_turn`).
pub(crate) const NEXT_TURN: mio::Token = mio::Token(4);
/// Connection `k`'s token is `FIRST_CONNECTION + k`.
pub(crate) const FIRST_CONNECTION: usize = 5;

/// One worker's app server: its sockets, its connections and the `Core`
/// that answers their requests.
pub(crate) struct AppServer {
    pub(super) poll: Poll,
    pub(super) events: Events,
    /// The listening sockets, in `--bind` order; emptied when draining starts.
    pub(super) listeners: Vec<Listener>,
    /// Set when the listeners speak TLS: every accepted TCP connection gets
    /// a session from it, and its handshake a slot in the gate (the cap on
    /// handshakes in progress, see `conn/tls_stream.rs`).
    pub(super) tls: Option<(
        std::sync::Arc<rustls::ServerConfig>,
        std::rc::Rc<crate::conn::HandshakeGate>,
    )>,
    /// When handshakes refused at the cap may next be logged.
    pub(super) next_handshake_warning: Instant,
    pub(super) connections: Slab<Connection>,
    pub(super) core: Core,
    pub(super) accept_paused: bool,
    /// Connections the sweep found with work to do (a request arrived on an
    /// idle one), driven by the loop's next pass rather than by the sweep.
    pub(super) drive_soon: Vec<usize>,
    /// After an accept error: when to try again.
    pub(super) accept_retry_at: Option<Instant>,
    /// When closing idle connections at the cap may be logged again.
    pub(super) next_eviction_warning: Instant,
    pub(super) drain_deadline: Option<Instant>,
    pub(super) next_sweep: Instant,
    /// Pool threads signal finished work here; `completion_drain()` returns
    /// `(key, request_id, future)` tuples to complete.
    pub(super) completion_source: Option<(RawFd, Py<PyAny>)>,
    /// Detached cache refreshes still running (an async handler, a pool
    /// thread), by their number (`crate::dispatch::refresh`).
    pub(super) refreshes: std::collections::HashMap<u32, crate::dispatch::refresh::DetachedRefresh>,
    /// The number of the last refresh started.
    pub(super) next_refresh: u32,
    /// `--http3`: the UDP sockets, the QUIC router and timers
    /// (`crate::http3`); `None` without it.
    pub(super) quic: Option<crate::http3::QuicSide>,
}

impl AppServer {
    /// The app server on `listeners` (already registered with `poll`).
    pub(super) fn new(
        py: Python<'_>,
        poll: Poll,
        listeners: Vec<Listener>,
        settings: &AppServerSettings,
        logging: &LogSettings,
    ) -> PyResult<AppServer> {
        let app_settings = settings.app.get();
        let limits = settings.limits.get();
        let timeouts = settings.timeouts.get();
        let headers = settings.headers.get();
        let websocket = settings.websocket.get();
        let optional = |name: &str, value: f64| {
            crate::options::seconds_or_zero(name, value)
                .map(|duration| (!duration.is_zero()).then_some(duration))
        };
        let ws = WsConfig {
            max_size: websocket.max_size.max(1),
            max_queue: websocket.max_queue.max(1),
            ping_interval: optional("ws_ping_interval", websocket.ping_interval)?,
            ping_timeout: optional("ws_ping_timeout", websocket.ping_timeout)?,
            per_message_deflate: websocket.per_message_deflate,
        };
        let tls = settings.tls.as_ref().map(|tls| {
            let gate = crate::conn::HandshakeGate::new(limits.tls_max_handshakes);
            // ALPN offers what `--http` serves (the shared config offers
            // `http/1.1`; HTTP/1.1 keeps it as it is).
            let mut config = tls.get().config.clone();
            if settings.http != crate::options::HttpMode::Http1 {
                let mut own = (*config).clone();
                own.alpn_protocols = settings.http.alpn();
                config = std::sync::Arc::new(own);
            }
            (config, std::rc::Rc::new(gate))
        });
        let access_format = logging
            .access_log_format
            .as_deref()
            .map(AccessFormat::parse)
            .transpose()
            .map_err(pyo3::exceptions::PyValueError::new_err)?;
        let forwarding_settings = headers.forwarding.get();
        let forwarding = Forwarding::new(
            &forwarding_settings.proxy_headers,
            &forwarding_settings.forwarded_allow_ips,
            forwarding_settings.forwarded_host,
        )
        .map_err(pyo3::exceptions::PyValueError::new_err)?;
        // `--proxy-protocol` believes the peers proxy headers are believed
        // from, even with `--no-proxy-headers`.
        let proxy_protocol = forwarding_settings
            .proxy_protocol
            .then(|| TrustedProxies::parse(&forwarding_settings.forwarded_allow_ips))
            .transpose()
            .map_err(|problem| {
                pyo3::exceptions::PyValueError::new_err(format!("forwarded_allow_ips: {problem}"))
            })?;
        let mut extra_lines = header_lines(&headers.extra_headers)?;
        let quic = match (&settings.http3, &settings.tls) {
            (None, _) => None,
            (Some(_), None) => return Err(pyo3::exceptions::PyValueError::new_err(
                "--http3 needs TLS (--ssl-certfile and --ssl-keyfile): QUIC is always encrypted",
            )),
            (Some(http3), Some(tls)) => {
                let quic = quic_side(&listeners, http3.get(), tls.get(), limits.max_connections)?;
                // Browsers learn of HTTP/3 from TCP answers (RFC 9114
                // section 3.1.1); HTTP/3 answers carry it too, as nginx's
                // usual `add_header Alt-Svc` does.
                extra_lines.extend_from_slice(format!("Alt-Svc: {}\r\n", quic.alt_svc).as_bytes());
                Some(quic)
            }
        };
        crate::body::set_spool_budget(limits.max_spool_size);
        let config = LoopConfig {
            limits: Limits {
                max_request_line: limits.max_request_line,
                max_head_size: limits.max_head_size,
                max_headers: limits.max_headers,
                max_body_size: limits.max_body_size,
                ..Limits::default()
            },
            max_connections: limits.max_connections.max(1),
            keep_alive_timeout: seconds("keep_alive_timeout", timeouts.keep_alive_timeout)?,
            header_timeout: seconds("header_timeout", timeouts.header_timeout)?,
            body_timeout: seconds("body_timeout", timeouts.body_timeout)?,
            send_timeout: seconds("send_timeout", timeouts.send_timeout)?,
            output_budget: limits.max_worker_output.max(OUTPUT_HIGH_WATER),
            ws,
            ws_allowed_origins: websocket
                .allowed_origins
                .iter()
                .map(|origin| origin.trim().to_ascii_lowercase().into_bytes())
                .collect(),
            http: settings.http,
            proxy_protocol,
        };
        // What WSGI's SERVER_NAME/SERVER_PORT and ASGI's scope["server"] name:
        // the listener each connection came through.
        let server_addresses: Vec<Option<ListenAddress>> =
            listeners.iter().map(Listener::address).collect();
        let root_path = app_settings.root_path.clone();
        let app = match (&app_settings.wsgi_app, &app_settings.asgi_app) {
            (Some(_), Some(_)) => {
                return Err(pyo3::exceptions::PyValueError::new_err(
                    "a worker serves a WSGI app or an ASGI app, not both",
                ))
            }
            (Some(app), None) => AppInterface::Wsgi(WsgiSettings::new(
                py,
                app.clone_ref(py),
                root_path,
                app_settings.wsgi_multithread,
                app_settings.wsgi_multiprocess,
                &server_addresses,
            )?),
            (None, Some(app)) => AppInterface::Asgi(AsgiSettings::new(
                py,
                app.clone_ref(py),
                root_path,
                app_settings
                    .asgi_state
                    .as_ref()
                    .map(|state| state.clone_ref(py)),
                &server_addresses,
            )?),
            (None, None) => AppInterface::Native,
        };
        let router = app_settings.router.clone_ref(py);
        let error_logger = logging.error_logger.clone_ref(py);
        let mut warnings = Vec::new();
        let static_files = StaticFiles::new(router.bind(py).borrow().static_mounts(), |warning| {
            warnings.push(warning)
        });
        for warning in warnings {
            error_logger.call1(py, (warning, py.None()))?;
        }
        if let Some(fd) = static_files.event_fd() {
            poll.registry()
                .register(&mut SourceFd(&fd), FILE_EVENTS, Interest::READABLE)?;
        }
        let next_turn_waker = mio::Waker::new(poll.registry(), NEXT_TURN)?;
        let mut quic = quic;
        if let Some(quic) = quic.as_mut() {
            quic.register(poll.registry())?;
        }
        let now = Instant::now();
        Ok(AppServer {
            poll,
            events: Events::with_capacity(1024),
            listeners,
            tls,
            connections: Slab::with_capacity(1024),
            core: Core {
                router,
                static_files,
                config,
                date: DateCache::with_fields(
                    SystemTime::now(),
                    headers.server_header,
                    &extra_lines,
                    headers.date_header,
                ),
                forwarding,
                access_format,
                access_fields: logging.access_log_fields,
                log_refusals: logging.log_refusals,
                refusal_limit: LogLimit::new(now),
                debug: logging.debug,
                now,
                read_buffer: vec![0; READ_CHUNK],
                header_scratch: Vec::with_capacity(32),
                body_scratch: Vec::new(),
                error_logger,
                access_logger: logging
                    .access_logger
                    .as_ref()
                    .map(|logger| logger.clone_ref(py)),
                async_scheduler: None,
                contexts: crate::request_context::RequestContexts::capture(py)?,
                blocking_scheduler: None,
                app,
                asgi_notifier: None,
                next_request_id: 0,
                detached_requests: std::collections::HashMap::new(),
                draining: false,
                request_limit_reached: false,
                pipelined_after: false,
                output_total: 0,
                next_turn: crate::next_turn::NextTurn::new(Some(next_turn_waker)),
                may_park: false,
                woken: Default::default(),
                refresh_jobs: Default::default(),
                liveness: None,
                ws_flush: Default::default(),
            },
            accept_paused: false,
            drive_soon: Vec::new(),
            accept_retry_at: None,
            next_eviction_warning: now,
            next_handshake_warning: now,
            drain_deadline: None,
            next_sweep: now + Duration::from_secs(1),
            completion_source: None,
            refreshes: std::collections::HashMap::new(),
            next_refresh: 0,
            quic,
        })
    }

    /// Registers `fd` (made readable by pool threads when work finishes) and
    /// `drain()`, which returns the finished `(key, request_id, future)` tuples.
    pub(super) fn set_completion_source(&mut self, fd: RawFd, drain: Py<PyAny>) -> PyResult<()> {
        self.poll
            .registry()
            .register(&mut SourceFd(&fd), COMPLETIONS, Interest::READABLE)?;
        self.completion_source = Some((fd, drain));
        Ok(())
    }
}

impl Worker for AppServer {
    fn run_once(&mut self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<()> {
        AppServer::run_once(self, py, timeout)
    }

    fn tick(&mut self, py: Python<'_>) {
        self.core.now = Instant::now();
        self.sweep_deadlines(py);
        self.resume_accepting(py);
    }

    fn start_drain(&mut self, py: Python<'_>, graceful_timeout: Duration) {
        AppServer::start_drain(self, py, graceful_timeout);
    }

    fn drain_started(&self) -> bool {
        self.drain_deadline.is_some()
    }

    fn drain_finished(&self) -> bool {
        AppServer::drain_finished(self)
    }

    fn close_all(&mut self) {
        AppServer::close_all(self);
    }

    fn wants_early_wake(&self) -> bool {
        self.drain_deadline.is_some() || self.accept_retry_at.is_some()
    }

    fn open_connections(&self) -> usize {
        self.connections.len()
    }

    fn fileno(&self) -> RawFd {
        self.poll.as_raw_fd()
    }

    fn liveness(&self) -> Option<&Py<Liveness>> {
        self.core.liveness.as_ref()
    }

    fn set_liveness(&mut self, liveness: Py<Liveness>) {
        liveness.get().beat();
        self.core.liveness = Some(liveness);
    }

    fn release_current_task(&mut self, py: Python<'_>) {
        if let Some(runner) = &self.core.async_scheduler {
            runner.release(py);
        }
    }

    fn recover(&mut self, py: Python<'_>, key: Option<usize>) {
        let message = match key {
            Some(_) => "internal error while serving a connection; closing it",
            None => "internal error in the worker's loop; serving on",
        };
        self.core.log_error(py, message, None);
        if let Some(key) = key {
            self.close_connection(key);
        }
    }

    fn app(&mut self) -> Option<&mut AppServer> {
        Some(self)
    }
}

/// The UDP side of `--http3`: a socket beside each TCP listener, registered
/// later with the worker's poll.
fn quic_side(
    listeners: &[Listener],
    http3: &crate::http3::Http3Settings,
    tls: &crate::tls::TlsSettings,
    max_connections: usize,
) -> PyResult<crate::http3::QuicSide> {
    let addresses: Vec<(std::net::SocketAddr, u16)> = listeners
        .iter()
        .enumerate()
        .filter_map(|(index, listener)| match listener {
            Listener::Tcp(socket) => socket
                .local_addr()
                .ok()
                .map(|address| (address, u16::try_from(index).unwrap_or(u16::MAX))),
            Listener::Unix(_) => None,
        })
        .collect();
    if addresses.is_empty() {
        return Err(pyo3::exceptions::PyValueError::new_err(
            "--http3 needs a TCP --bind: QUIC has no Unix-socket form",
        ));
    }
    let settings = rush_h3::H3Settings {
        max_connections: max_connections.max(1),
        // The server paces each stream on its own water marks and the
        // worker's output budget, as for HTTP/2 (`http2::writer`).
        max_pending_send: usize::MAX,
        secret: Some(rush_h3::EndpointSecret(http3.secret)),
        ..rush_h3::H3Settings::default()
    };
    Ok(crate::http3::QuicSide::new(
        &addresses,
        tls.config.clone(),
        settings,
    )?)
}

/// `--header NAME:VALUE` pairs as header lines, each checked as a field
/// name and value (nothing else can be smuggled into every response head).
fn header_lines(headers: &[(String, String)]) -> PyResult<Vec<u8>> {
    let mut lines = Vec::new();
    for (name, value) in headers {
        let value = value.trim();
        if !rush_proto::response::is_valid_header_name(name.as_bytes())
            || !rush_proto::response::is_valid_header_value(value.as_bytes())
        {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "not a valid response header: {name:?}: {value:?}"
            )));
        }
        lines.extend_from_slice(name.as_bytes());
        lines.extend_from_slice(b": ");
        lines.extend_from_slice(value.as_bytes());
        lines.extend_from_slice(b"\r\n");
    }
    Ok(lines)
}
