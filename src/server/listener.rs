//! The listening sockets a worker accepts from, whatever it serves: each
//! `--bind` (and every socket systemd passed) is one [`Listener`], adopted
//! from a descriptor the Python side keeps.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use mio::net::{TcpListener, UnixListener};
use mio::{Interest, Token};
use pyo3::prelude::*;

use crate::listen_address::ListenAddress;

/// The wake-up fd's token: a signal arrived (both kinds of worker).
pub(crate) const WAKEUP: Token = Token(1);
/// Most connections one worker accepts per listener event. Every worker
/// sharing the listening socket wakes for it; one that accepted until
/// EAGAIN would take the whole queue and leave the others idle.
pub(crate) const ACCEPT_BATCH: usize = 16;
/// How long accepting pauses after an error such as EMFILE.
pub(crate) const ACCEPT_RETRY: Duration = Duration::from_millis(100);
/// Most accept batches a draining worker takes from its backlog.
pub(crate) const BACKLOG_DRAIN_BATCHES: usize = 64;

/// The listening sockets' tokens: listener `i` has `LISTENER_TOKENS + i`,
/// far above the app server's connection tokens and below the proxy's
/// (`crate::proxy::PROXY_TOKENS`).
const LISTENER_TOKENS: usize = 1 << 39;

pub(crate) fn listener_token(index: usize) -> Token {
    Token(LISTENER_TOKENS + index)
}

/// The index of the listener an event's token names, if it names one.
pub(crate) fn listener_index(token: Token) -> Option<usize> {
    (LISTENER_TOKENS..crate::proxy::PROXY_TOKENS)
        .contains(&token.0)
        .then(|| token.0 - LISTENER_TOKENS)
}

/// A listening socket a worker accepts from.
pub(crate) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Our own non-blocking descriptor for the listening socket `fd` (which
    /// the caller keeps), as TCP or, with `unix`, as a Unix socket.
    pub(crate) fn adopt(fd: RawFd, unix: bool) -> PyResult<Listener> {
        let owned = adopt_listening_socket(fd)?;
        Ok(if unix {
            let listener = std::os::unix::net::UnixListener::from(owned);
            listener.set_nonblocking(true)?;
            Listener::Unix(UnixListener::from_std(listener))
        } else {
            let listener = std::net::TcpListener::from(owned);
            listener.set_nonblocking(true)?;
            Listener::Tcp(TcpListener::from_std(listener))
        })
    }

    /// Where it listens (`None` if the kernel will not say).
    pub(crate) fn address(&self) -> Option<ListenAddress> {
        match self {
            Listener::Tcp(socket) => socket.local_addr().ok().map(ListenAddress::Tcp),
            Listener::Unix(socket) => socket
                .local_addr()
                .ok()
                .map(|address| ListenAddress::Unix(address.as_pathname().map(PathBuf::from))),
        }
    }

    /// Registers (or, with `again`, re-arms) the socket for readability under `token`.
    pub(crate) fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
        again: bool,
    ) -> std::io::Result<()> {
        match (self, again) {
            (Listener::Tcp(socket), false) => registry.register(socket, token, Interest::READABLE),
            (Listener::Tcp(socket), true) => registry.reregister(socket, token, Interest::READABLE),
            (Listener::Unix(socket), false) => registry.register(socket, token, Interest::READABLE),
            (Listener::Unix(socket), true) => {
                registry.reregister(socket, token, Interest::READABLE)
            }
        }
    }

    pub(crate) fn deregister(&mut self, registry: &mio::Registry) {
        let _ = match self {
            Listener::Tcp(socket) => registry.deregister(socket),
            Listener::Unix(socket) => registry.deregister(socket),
        };
    }
}

/// A descriptor of our own for the listening socket `fd`, which the caller
/// keeps. A number that is not an open listening socket is a `ValueError`,
/// never undefined behaviour: the fd is duplicated with `fcntl`, which
/// checks it, before anything treats it as a socket.
pub(crate) fn adopt_listening_socket(fd: RawFd) -> PyResult<OwnedFd> {
    let invalid = |why: &str| {
        pyo3::exceptions::PyValueError::new_err(format!(
            "listener_fd {fd} is not a listening socket: {why}"
        ))
    };
    if fd < 0 {
        return Err(invalid("negative"));
    }
    // SAFETY: F_DUPFD_CLOEXEC reads no memory of ours; on a number that is
    // not an open descriptor it fails with EBADF and changes nothing.
    let duplicate = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if duplicate < 0 {
        return Err(invalid(&std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: `duplicate` is a fresh descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(duplicate) };
    let mut listening: libc::c_int = 0;
    let mut length = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `owned` is open; `listening` and `length` are live locals of
    // the sizes passed. On a non-socket this fails with ENOTSOCK.
    let result = unsafe {
        libc::getsockopt(
            owned.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ACCEPTCONN,
            (&mut listening as *mut libc::c_int).cast(),
            &mut length,
        )
    };
    if result != 0 {
        return Err(invalid(&std::io::Error::last_os_error().to_string()));
    }
    if listening == 0 {
        return Err(invalid("listen() was not called on it"));
    }
    Ok(owned)
}
