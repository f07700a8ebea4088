//! The transport under a connection: the socket, and writing the
//! connection's output (bytes, then a shared-memory or file body) into it.
//! Plain TCP and Unix sockets today; TLS slots in here as another transport.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::{AsRawFd, RawFd};

use mio::event::Source;
use mio::net::{TcpStream, UnixStream};
use mio::{Interest, Registry, Token};

use super::Connection;
use crate::http_write::OutgoingBody;

/// A TCP or Unix stream socket.
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    pub fn shutdown_write(&self) {
        // Failing here only means the peer is already gone.
        let _ = match self {
            Stream::Tcp(stream) => stream.shutdown(Shutdown::Write),
            Stream::Unix(stream) => stream.shutdown(Shutdown::Write),
        };
    }
}

impl AsRawFd for Stream {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.read(buffer),
            Stream::Unix(stream) => stream.read(buffer),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(stream) => stream.write(buffer),
            Stream::Unix(stream) => stream.write(buffer),
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
        }
    }

    fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
        match self {
            Stream::Tcp(stream) => stream.deregister(registry),
            Stream::Unix(stream) => stream.deregister(registry),
        }
    }
}

impl Connection {
    /// Writes as much output as the kernel takes. `Ok` with output left means
    /// the socket is full: wait for writability.
    pub(crate) fn write_output(&mut self) -> io::Result<()> {
        let mut written = 0;
        while written < self.output.len() {
            match self.stream.write(&self.output[written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(count) => {
                    written += count;
                    self.written += count as u64;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        }
        if written == self.output.len() {
            self.output.clear();
            // A large response must not pin its buffer for the connection's lifetime.
            if self.output.capacity() > 256 * 1024 {
                self.output = Vec::new();
            }
        } else {
            self.output.drain(..written);
            return Ok(());
        }
        self.write_body()
    }

    /// Sends the pending body until done or the socket is full.
    fn write_body(&mut self) -> io::Result<()> {
        // Large chunks keep syscalls few; the kernel takes what fits.
        const CHUNK: usize = 4 * 1024 * 1024;
        loop {
            let sent = match &mut self.body {
                None => return Ok(()),
                Some(OutgoingBody::Shared { data, offset, end }) => {
                    if *offset >= *end {
                        self.body = None;
                        return Ok(());
                    }
                    match self
                        .stream
                        .write(&data[*offset..(*end).min(*offset + CHUNK)])
                    {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(count) => {
                            *offset += count;
                            self.written += count as u64;
                            count
                        }
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                        Err(error) => Err(error).or_else(would_block)?,
                    }
                }
                Some(OutgoingBody::File { file, offset, end }) => {
                    if *offset >= *end {
                        self.body = None;
                        return Ok(());
                    }
                    let count = (*end - *offset).min(CHUNK as u64) as usize;
                    let mut file_offset = *offset as libc::off_t;
                    // SAFETY: both descriptors are open for the duration of the
                    // call (the socket is owned by `self.stream`, the file by
                    // `file`), and `file_offset` is a live local the kernel
                    // updates; sendfile does not touch the file's own position,
                    // so responses sharing one cached fd do not interfere.
                    let result = unsafe {
                        libc::sendfile(
                            self.stream.as_raw_fd(),
                            file.as_raw_fd(),
                            &mut file_offset,
                            count,
                        )
                    };
                    if result < 0 {
                        let error = io::Error::last_os_error();
                        if error.kind() == io::ErrorKind::Interrupted {
                            // A signal arrived before anything was sent: retry.
                            continue;
                        }
                        Err(error).or_else(would_block)?
                    } else if result == 0 {
                        // The file shrank under us: the promised length cannot be sent.
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    } else {
                        *offset = file_offset as u64;
                        self.written += result as u64;
                        result as usize
                    }
                }
            };
            if sent == 0 {
                return Ok(());
            }
        }
    }
}

/// Maps EAGAIN to "sent nothing for now"; other errors stay errors
/// (EINTR is retried by the callers, never taken for a full socket).
fn would_block(error: io::Error) -> io::Result<usize> {
    match error.kind() {
        io::ErrorKind::WouldBlock => Ok(0),
        _ => Err(error),
    }
}
