//! The transport under a connection: a TCP or Unix socket, TLS over TCP
//! (`tls.rs`), or a QUIC connection. The HTTP/1.1 driver reads and writes it
//! through `Read` and `Write` whichever it is; what only TLS has (records
//! waiting for the socket, no `sendfile`) is asked through the methods here.
//!
//! A QUIC connection has no socket of its own: its datagrams go through the
//! worker's UDP socket (`crate::http3`), and its streams through its
//! session's engine. Its `Stream` only says that it is encrypted (the scheme
//! is https) and what the app may learn of its TLS; reads would block,
//! writes take nothing, and it is never registered with epoll.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use super::tls_stream::{TlsInfo, TlsStream};

/// A TCP or Unix stream socket, TLS over TCP, or a QUIC connection.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream>),
    Quic(Box<TlsInfo>),
}

impl Stream {
    /// Whether the client speaks TLS to us (the scheme is https).
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_) | Stream::Quic(_))
    }

    /// What the app may learn of the TLS session (TCP's or QUIC's).
    pub fn tls_info(&self) -> Option<&TlsInfo> {
        match self {
            Stream::Tls(tls) => Some(tls.info()),
            Stream::Quic(info) => Some(info),
            _ => None,
        }
    }

    /// The TLS session, if the client speaks TLS.
    pub fn tls(&self) -> Option<&TlsStream> {
        match self {
            Stream::Tls(tls) => Some(tls),
            _ => None,
        }
    }

    /// Encrypted bytes wait for the socket (output still pending).
    pub fn wants_write(&self) -> bool {
        match self {
            Stream::Tls(tls) => tls.wants_write(),
            _ => false,
        }
    }

    /// Puts pending TLS records on the socket, as far as it takes them.
    pub fn flush_records(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(tls) => tls.flush_records(),
            _ => Ok(()),
        }
    }

    /// Bytes received and not read yet (FIONREAD): a client that has sent
    /// something must not have its connection closed as idle.
    pub fn unread_bytes(&self) -> usize {
        if let Stream::Quic(_) = self {
            return 0;
        }
        let mut count: libc::c_int = 0;
        // SAFETY: the socket is open for `self`'s lifetime; FIONREAD writes
        // one c_int into `count`, a live local.
        let result = unsafe { libc::ioctl(self.as_raw_fd(), libc::FIONREAD, &mut count) };
        if result == 0 {
            count.max(0) as usize
        } else {
            0
        }
    }

    pub fn shutdown_write(&self) {
        // Failing here only means the peer is already gone.
        let _ = match self {
            Stream::Tcp(stream) => stream.shutdown(Shutdown::Write),
            Stream::Unix(stream) => stream.shutdown(Shutdown::Write),
            Stream::Tls(tls) => tls.socket.shutdown(Shutdown::Write),
            Stream::Quic(_) => Ok(()),
        };
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
            Stream::Tls(tls) => tls.socket.as_raw_fd(),
            // No descriptor of its own (see the module).
            Stream::Quic(_) => -1,
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buffer),
            Stream::Unix(stream) => stream.read(buffer),
            Stream::Tls(tls) => tls.read(buffer),
            Stream::Quic(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buffer),
            Stream::Unix(stream) => stream.write(buffer),
            Stream::Tls(tls) => tls.write(buffer),
            Stream::Quic(_) => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Source for Stream {
    fn register(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.register(registry, token, interests),
            Stream::Unix(stream) => stream.register(registry, token, interests),
            Stream::Tls(tls) => tls.socket.register(registry, token, interests),
            Stream::Quic(_) => Ok(()),
        }
    }

    fn reregister(
        &mut self,
        registry: &Registry,
        token: Token,
        interests: Interest,
    ) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.reregister(registry, token, interests),
            Stream::Unix(stream) => stream.reregister(registry, token, interests),
            Stream::Tls(tls) => tls.socket.reregister(registry, token, interests),
            Stream::Quic(_) => Ok(()),
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.deregister(registry),
            Stream::Unix(stream) => stream.deregister(registry),
            Stream::Tls(tls) => tls.socket.deregister(registry),
            Stream::Quic(_) => Ok(()),
        }
    }
}
