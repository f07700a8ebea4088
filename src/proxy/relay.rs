//! The CONNECT tunnel's byte relay: splice(2) through a pipe, both ways.
//!
//! Each direction moves bytes socket → pipe → socket with `splice`, so they
//! never enter user space. A pipe exists only while bytes are in flight:
//! an empty pipe goes back to a small per-worker pool ([`PipePool`]), so an
//! idle tunnel holds two sockets and no pipe or buffer.
//!
//! A direction pumps until the kernel says EAGAIN on the side it waits
//! for, which keeps edge-triggered epoll correct: any later readiness on
//! either socket raises a new event. When the source reports EOF and the
//! pipe is empty, the FIN is passed on (`shutdown(SHUT_WR)` on the
//! destination) and the other direction keeps flowing (half-close). Any
//! other error ends the tunnel: the caller closes both sockets.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Bytes asked of one splice call: the default pipe capacity.
const SPLICE_CHUNK: usize = 64 * 1024;
/// Empty pipes kept for reuse per worker.
const POOL_SIZE: usize = 64;

/// A pipe: its read and write ends.
pub(crate) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a live array of two c_ints, which pipe2 fills with
        // two new descriptors on success (and leaves alone on failure).
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, so both are open descriptors owned by nobody else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok(Pipe { read, write })
    }
}

/// Empty pipes for reuse: a tunnel takes one when bytes arrive and gives it
/// back when it is empty again.
#[derive(Default)]
pub(crate) struct PipePool {
    pipes: Vec<Pipe>,
}

impl PipePool {
    fn take(&mut self) -> io::Result<Pipe> {
        match self.pipes.pop() {
            Some(pipe) => Ok(pipe),
            None => Pipe::new(),
        }
    }

    fn give(&mut self, pipe: Pipe) {
        if self.pipes.len() < POOL_SIZE {
            self.pipes.push(pipe);
        }
    }
}

/// One direction of a tunnel.
#[derive(Default)]
pub(crate) struct Direction {
    pipe: Option<Pipe>,
    /// Bytes in the pipe, not yet spliced out.
    in_pipe: usize,
    /// The source sent FIN.
    source_done: bool,
    /// The FIN was passed on to the destination.
    pub(crate) finished: bool,
    /// Bytes delivered to the destination.
    pub(crate) bytes: u64,
}

/// `splice(from, to, length)`, non-blocking; Ok(0) means EOF on `from`.
fn splice(from: RawFd, to: RawFd, length: usize) -> io::Result<usize> {
    loop {
        // SAFETY: both descriptors are open for the duration of the call
        // (owned by the tunnel's sockets and pipe); null offsets mean "the
        // file position", as splice requires for sockets and pipes.
        let moved = unsafe {
            libc::splice(
                from,
                std::ptr::null_mut(),
                to,
                std::ptr::null_mut(),
                length,
                libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
            )
        };
        if moved >= 0 {
            return Ok(moved as usize);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

fn shutdown_write(fd: RawFd) {
    // SAFETY: `fd` is an open socket; shutdown touches no memory of ours.
    // Failing only means the peer is gone, which the next splice reports.
    unsafe {
        libc::shutdown(fd, libc::SHUT_WR);
    }
}

impl Direction {
    /// Moves what it can from `source` to `destination`. Returns whether
    /// any byte moved (or the FIN was passed on); an error ends the tunnel.
    pub(crate) fn pump(
        &mut self,
        source: &impl AsRawFd,
        destination: &impl AsRawFd,
        pool: &mut PipePool,
    ) -> io::Result<bool> {
        let mut progress = false;
        loop {
            if self.in_pipe > 0 {
                let pipe = self.pipe.as_ref().expect("bytes in the pipe imply a pipe");
                match splice(pipe.read.as_raw_fd(), destination.as_raw_fd(), self.in_pipe) {
                    Ok(moved) => {
                        self.in_pipe -= moved;
                        self.bytes += moved as u64;
                        progress = true;
                    }
                    // The destination is full: its EPOLLOUT resumes us.
                    Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(progress),
                    Err(error) => return Err(error),
                }
                if self.in_pipe > 0 {
                    continue;
                }
            }
            if let Some(pipe) = self.pipe.take() {
                pool.give(pipe);
            }
            if self.source_done {
                if !self.finished {
                    shutdown_write(destination.as_raw_fd());
                    self.finished = true;
                    progress = true;
                }
                return Ok(progress);
            }
            let pipe = self.pipe.insert(pool.take()?);
            match splice(source.as_raw_fd(), pipe.write.as_raw_fd(), SPLICE_CHUNK) {
                Ok(0) => self.source_done = true,
                Ok(moved) => {
                    self.in_pipe = moved;
                    progress = true;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    if let Some(pipe) = self.pipe.take() {
                        pool.give(pipe);
                    }
                    return Ok(progress);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Whether the direction is idle with nothing buffered (for the idle-memory claim).
    #[cfg(test)]
    pub(crate) fn holds_pipe(&self) -> bool {
        self.pipe.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    #[test]
    fn relays_bytes_then_passes_the_fin_on() {
        let (mut client, source) = UnixStream::pair().unwrap();
        let (destination, mut origin) = UnixStream::pair().unwrap();
        source.set_nonblocking(true).unwrap();
        destination.set_nonblocking(true).unwrap();
        let mut pool = PipePool::default();
        let mut direction = Direction::default();
        assert!(!direction.pump(&source, &destination, &mut pool).unwrap());
        client.write_all(b"hello").unwrap();
        assert!(direction.pump(&source, &destination, &mut pool).unwrap());
        assert!(!direction.holds_pipe());
        let mut got = [0u8; 5];
        origin.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello");
        client.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(direction.pump(&source, &destination, &mut pool).unwrap());
        assert!(direction.finished);
        assert_eq!(direction.bytes, 5);
        let mut rest = Vec::new();
        origin.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        // The other direction still works after the half-close.
        origin.write_all(b"back").unwrap();
        let mut reverse = Direction::default();
        assert!(reverse.pump(&destination, &source, &mut pool).unwrap());
        let mut got = [0u8; 4];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"back");
    }

    #[test]
    fn a_full_destination_keeps_bytes_in_the_pipe() {
        let (mut client, source) = UnixStream::pair().unwrap();
        let (destination, mut origin) = UnixStream::pair().unwrap();
        source.set_nonblocking(true).unwrap();
        destination.set_nonblocking(true).unwrap();
        client.set_nonblocking(true).unwrap();
        let mut pool = PipePool::default();
        let mut direction = Direction::default();
        let chunk = vec![7u8; 64 * 1024];
        let mut sent = 0usize;
        // Fill everything: the destination socket, the pipe, the source socket.
        for _ in 0..64 {
            if let Ok(written) = client.write(&chunk) {
                sent += written;
            }
            direction.pump(&source, &destination, &mut pool).unwrap();
        }
        drop(client);
        let mut received = 0usize;
        origin.set_nonblocking(true).unwrap();
        let mut buffer = vec![0u8; 64 * 1024];
        while !direction.finished {
            loop {
                match origin.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(read) => received += read,
                    Err(_) => break,
                }
            }
            direction.pump(&source, &destination, &mut pool).unwrap();
        }
        loop {
            match origin.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(read) => received += read,
            }
        }
        assert_eq!(received, sent);
        assert_eq!(direction.bytes as usize, sent);
    }
}
