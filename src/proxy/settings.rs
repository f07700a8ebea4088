//! The proxy's settings, one Python class per concern (as the app
//! server's, `crate::server` settings.rs): its limits, its timeouts and who
//! may go where, gathered in [`ProxySettings`], which makes the `Server`
//! given it a proxy worker. python/rush/proxy_worker.py builds them from
//! `ProxyConfig`, where their defaults live (the constructors have none).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use rush_proto::Limits;

use super::policy::{self, Credential, Policy};
use super::ProxyConfig;
use crate::options::seconds;

/// Sizes and counts (`--max-connections`, `--max-request-line`,
/// `--max-head-size`, `--max-headers`).
#[pyclass(module = "rush._rush", frozen)]
pub struct ProxyLimitSettings {
    max_connections: usize,
    max_request_line: usize,
    max_head_size: usize,
    max_headers: usize,
}

#[pymethods]
impl ProxyLimitSettings {
    #[new]
    #[pyo3(signature = (*, max_connections, max_request_line, max_head_size, max_headers))]
    fn new(
        max_connections: usize,
        max_request_line: usize,
        max_head_size: usize,
        max_headers: usize,
    ) -> Self {
        ProxyLimitSettings {
            max_connections,
            max_request_line,
            max_head_size,
            max_headers,
        }
    }
}

/// How long each step may take, in seconds (`--header-timeout` ... `--dns-timeout`).
#[pyclass(module = "rush._rush", frozen)]
pub struct ProxyTimeoutSettings {
    header_timeout: f64,
    keep_alive_timeout: f64,
    upstream_timeout: f64,
    tunnel_idle_timeout: f64,
    send_timeout: f64,
    dns_timeout: f64,
}

#[pymethods]
impl ProxyTimeoutSettings {
    #[new]
    #[pyo3(signature = (
        *, header_timeout, keep_alive_timeout, upstream_timeout,
        tunnel_idle_timeout, send_timeout, dns_timeout,
    ))]
    fn new(
        header_timeout: f64,
        keep_alive_timeout: f64,
        upstream_timeout: f64,
        tunnel_idle_timeout: f64,
        send_timeout: f64,
        dns_timeout: f64,
    ) -> Self {
        ProxyTimeoutSettings {
            header_timeout,
            keep_alive_timeout,
            upstream_timeout,
            tunnel_idle_timeout,
            send_timeout,
            dns_timeout,
        }
    }
}

/// Who may use the proxy and where to (`--allow-connect-port`,
/// `--allow-port`, `--allow-private`, `--allow-client`, `--auth`, the
/// lines of `--auth-file`).
#[pyclass(module = "rush._rush", frozen)]
pub struct ProxyAccessSettings {
    allow_connect_ports: Vec<u16>,
    allow_ports: Vec<u16>,
    allow_private: bool,
    allow_clients: Vec<String>,
    auth: Vec<String>,
    htpasswd: Vec<String>,
}

#[pymethods]
impl ProxyAccessSettings {
    #[new]
    #[pyo3(signature = (*, allow_connect_ports, allow_ports, allow_private, allow_clients, auth, htpasswd))]
    fn new(
        allow_connect_ports: Vec<u16>,
        allow_ports: Vec<u16>,
        allow_private: bool,
        allow_clients: Vec<String>,
        auth: Vec<String>,
        htpasswd: Vec<String>,
    ) -> Self {
        ProxyAccessSettings {
            allow_connect_ports,
            allow_ports,
            allow_private,
            allow_clients,
            auth,
            htpasswd,
        }
    }
}

/// The proxy's options, built in Python and handed to the server, which
/// then is a proxy worker and turns them into its `ProxyLoop`.
#[pyclass(module = "rush._rush")]
pub struct ProxySettings {
    /// Taken by the one server these settings build.
    pub(super) settings: Option<Settings>,
}

pub(super) struct Settings {
    pub(super) config: ProxyConfig,
    pub(super) policy: Policy,
    pub(super) hook: Option<Py<PyAny>>,
    pub(super) via: Vec<u8>,
}

#[pymethods]
impl ProxySettings {
    /// Checks every value now (a bad credential or network is a
    /// `ValueError` here, before the worker serves).
    #[new]
    #[pyo3(signature = (*, limits, timeouts, access, policy_hook=None, via_name))]
    fn new(
        limits: &Bound<'_, ProxyLimitSettings>,
        timeouts: &Bound<'_, ProxyTimeoutSettings>,
        access: &Bound<'_, ProxyAccessSettings>,
        policy_hook: Option<Py<PyAny>>,
        via_name: String,
    ) -> PyResult<Self> {
        let (limits, timeouts, access) = (limits.get(), timeouts.get(), access.get());
        let mut credentials = Vec::new();
        for text in &access.auth {
            credentials.push(Credential::plain(text).map_err(PyValueError::new_err)?);
        }
        for line in &access.htpasswd {
            credentials.push(Credential::htpasswd(line).map_err(PyValueError::new_err)?);
        }
        let mut clients = Vec::new();
        for text in &access.allow_clients {
            let net = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| {
                    PyValueError::new_err(format!(
                        "--allow-client takes a CIDR such as 10.0.0.0/8 (got {text:?})"
                    ))
                })?;
            clients.push(net);
        }
        let config = ProxyConfig {
            limits: Limits {
                max_request_line: limits.max_request_line,
                max_head_size: limits.max_head_size,
                max_headers: limits.max_headers,
                // Bodies stream through in bounded buffers; their size is the origin's business.
                max_body_size: u64::MAX,
                ..Limits::default()
            },
            max_connections: limits.max_connections.max(1),
            header_timeout: seconds("header_timeout", timeouts.header_timeout)?,
            keep_alive_timeout: seconds("keep_alive_timeout", timeouts.keep_alive_timeout)?,
            upstream_timeout: seconds("upstream_timeout", timeouts.upstream_timeout)?,
            tunnel_idle_timeout: seconds("tunnel_idle_timeout", timeouts.tunnel_idle_timeout)?,
            send_timeout: seconds("send_timeout", timeouts.send_timeout)?,
            dns_timeout: seconds("dns_timeout", timeouts.dns_timeout)?,
        };
        Ok(ProxySettings {
            settings: Some(Settings {
                config,
                policy: Policy {
                    connect_ports: access.allow_connect_ports.clone(),
                    forward_ports: access.allow_ports.clone(),
                    allow_private: access.allow_private,
                    clients,
                    stand_in_hash: policy::stand_in_hash(&credentials),
                    credentials,
                },
                hook: policy_hook,
                via: via_value(&via_name),
            }),
        })
    }
}

/// `1.1 NAME (rush)`, NAME reduced to the characters a host name has (it
/// comes from the machine's host name, and goes into every forwarded head).
fn via_value(name: &str) -> Vec<u8> {
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
        .take(64)
        .collect();
    let name = if name.is_empty() { "rush" } else { &name };
    format!("1.1 {name} (rush)").into_bytes()
}
