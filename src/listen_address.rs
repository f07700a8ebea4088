//! Where a listener listens: what WSGI (`SERVER_NAME`, `SERVER_PORT`) and
//! ASGI (`server`) tell the app of the listener a connection came through.
//! Its own module because both interfaces and the server need it and
//! depend on nothing else of rush's.

use std::net::SocketAddr;
use std::path::PathBuf;

/// A listener's address.
#[derive(Clone, Debug)]
pub(crate) enum ListenAddress {
    Tcp(SocketAddr),
    /// A Unix socket, by its path (`None`: unnamed or abstract).
    Unix(Option<PathBuf>),
}
