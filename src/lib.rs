//! `rush._rush`: the native core of rush, a Python extension module.
//!
//! It owns the sockets: each worker process runs one [`server::Server`]
//! loop (epoll through mio) that accepts, reads, parses (with the sans-IO
//! `rush-proto` crate), routes ([`router::Router`]), calls Python handlers
//! on the loop thread, and writes. The module is private; the public API is
//! the `rush` Python package that wraps it.

mod asgi;
mod body;
mod connection;
mod request;
mod response;
mod router;
mod server;
mod static_files;
mod wsgi;

use pyo3::prelude::*;

#[pymodule]
fn _rush(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<router::Router>()?;
    module.add_class::<server::Server>()?;
    module.add_class::<server::StopHandle>()?;
    module.add_class::<request::Request>()?;
    module.add_class::<response::Response>()?;
    module.add_class::<wsgi::FileWrapper>()?;
    module.add_class::<asgi::Ready>()?;
    module.add_class::<asgi::AsgiSend>()?;
    module.add_class::<asgi::AsgiReceive>()?;
    module.add_class::<wsgi::WsgiResponse>()?;
    module.add_function(wrap_pyfunction!(wsgi::call_wsgi, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
