//! `rush._rush`: the native core of rush, a Python extension module.
//!
//! It owns the sockets: each worker process runs one [`server::Server`]
//! loop (epoll through mio) that accepts, reads, parses (with the sans-IO
//! `rush-proto` crate), routes ([`router::Router`]), calls Python handlers
//! on the loop thread, and writes. The module is private; the public API is
//! the `rush` Python package that wraps it.

#![warn(clippy::undocumented_unsafe_blocks)]

mod access_log;
mod app;
mod asgi;
mod body;
mod cache;
mod conn;
mod coroutine;
mod dispatch;
mod drive;
mod exchange;
mod forwarding;
mod http1;
mod http2;
mod http3;
mod http_write;
mod inflight;
mod listen_address;
mod liveness;
mod log_limit;
mod metrics;
mod next_turn;
mod options;
mod proxy;
mod proxy_protocol;
mod request;
mod request_context;
mod response;
mod router;
mod server;
mod shared_memory;
mod static_files;
mod tls;
mod tls_tickets;
mod watch;
mod ws;
mod wsgi;

use pyo3::prelude::*;

/// Makes the kernel send `signal` to this process when its parent dies,
/// and raises if the parent (`expected_parent`) is already gone. Workers
/// call it right after fork, so a supervisor killed with SIGKILL cannot
/// leave orphaned workers serving on.
#[pyfunction]
fn exit_with_parent(signal: i32, expected_parent: i32) -> PyResult<()> {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes a plain signal number and
    // touches no memory of ours; getppid has no preconditions.
    let (result, parent) = unsafe {
        (
            libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0),
            libc::getppid(),
        )
    };
    if result != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    if parent != expected_parent {
        return Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the supervisor exited before this worker started",
        ));
    }
    Ok(())
}

/// Maps the response cache's invalidation counters in memory that workers
/// forked afterwards share, so `app.cache.invalidate()` in one worker
/// reaches all of them (src/cache/generations.rs). The supervisor calls it
/// before it forks.
#[pyfunction]
fn share_cache_generations() {
    cache::share_generations();
}

/// Raises ValueError if `format` is not a valid `--access-log-format`
/// (checked before any worker is forked).
#[pyfunction]
fn check_access_log_format(format: &str) -> PyResult<()> {
    access_log::AccessFormat::parse(format)
        .map(drop)
        .map_err(pyo3::exceptions::PyValueError::new_err)
}

#[pymodule]
fn _rush(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<router::Router>()?;
    module.add_class::<router::CacheHandle>()?;
    module.add_class::<metrics::MetricsTable>()?;
    module.add_class::<tls::TlsSettings>()?;
    module.add_class::<tls_tickets::TicketKeys>()?;
    module.add_class::<server::Server>()?;
    module.add_class::<server::StopHandle>()?;
    module.add_class::<server::AppServerSettings>()?;
    module.add_class::<http3::Http3Settings>()?;
    module.add_class::<server::AppSettings>()?;
    module.add_class::<server::LimitSettings>()?;
    module.add_class::<server::TimeoutSettings>()?;
    module.add_class::<server::ForwardingSettings>()?;
    module.add_class::<server::HeaderSettings>()?;
    module.add_class::<server::WebSocketSettings>()?;
    module.add_class::<server::LogSettings>()?;
    module.add_class::<proxy::ProxySettings>()?;
    module.add_class::<proxy::ProxyLimitSettings>()?;
    module.add_class::<proxy::ProxyTimeoutSettings>()?;
    module.add_class::<proxy::ProxyAccessSettings>()?;
    module.add_class::<request::Request>()?;
    module.add_class::<response::Response>()?;
    module.add_class::<wsgi::FileWrapper>()?;
    module.add_class::<asgi::Ready>()?;
    asgi::awaitables::install_fast_await(module.py())?;
    module.add_class::<asgi::AsgiSend>()?;
    module.add_class::<asgi::AsgiReceive>()?;
    module.add_class::<asgi::ReceiveWait>()?;
    module.add_class::<ws::channel::WebSocket>()?;
    module.add_class::<ws::broadcast::Broadcast>()?;
    module.add_class::<wsgi::WsgiResponse>()?;
    module.add_class::<wsgi::WsgiBody>()?;
    module.add_class::<liveness::Liveness>()?;
    module.add_class::<watch::FileWatcher>()?;
    module.add_function(wrap_pyfunction!(wsgi::call_wsgi, module)?)?;
    module.add_function(wrap_pyfunction!(exit_with_parent, module)?)?;
    module.add_function(wrap_pyfunction!(share_cache_generations, module)?)?;
    module.add_function(wrap_pyfunction!(check_access_log_format, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
