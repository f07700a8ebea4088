//! The transport under a connection: a TCP or Unix socket, or TLS over TCP
//! (`tls.rs`). The HTTP/1.1 driver reads and writes it through `Read` and
//! `Write` whichever it is; what only TLS has (records waiting for the
//! socket, no `sendfile`) is asked through the methods here.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use super::tls_stream::TlsStream;

/// A TCP or Unix stream socket, or TLS over TCP.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<TlsStream>),
}

impl Stream {
    /// Whether the client speaks TLS to us (the scheme is https).
    pub fn is_tls(&self) -> bool {
        matches!(self, Stream::Tls(_))
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
        };
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
            Stream::Tls(tls) => tls.socket.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buffer),
            Stream::Unix(stream) => stream.read(buffer),
            Stream::Tls(tls) => tls.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buffer),
            Stream::Unix(stream) => stream.write(buffer),
            Stream::Tls(tls) => tls.write(buffer),
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
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.deregister(registry),
            Stream::Unix(stream) => stream.deregister(registry),
            Stream::Tls(tls) => tls.socket.deregister(registry),
        }
    }
}
