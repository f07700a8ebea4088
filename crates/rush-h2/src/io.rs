//! The in-memory socket `h2` reads and writes: two buffers and no I/O.
//!
//! `h2` drives a connection through tokio's `AsyncRead` and `AsyncWrite`.
//! [`MemoryIo`] implements both over a buffer the server loop fills (the
//! bytes it read from the socket) and a buffer it drains (the bytes to write
//! to the socket). A read with nothing buffered is `Pending` (or end of
//! stream once the peer closed), a write past the output bound is `Pending`
//! too, so `h2` stops where a socket would block. Nobody is woken: the
//! owner ([`crate::H2Connection`]) polls again after every feed and drain.
//!
//! The buffers sit behind an `Rc<RefCell<..>>` shared by the connection and
//! the handle given to `h2`, one connection per worker thread, as in rush's
//! loop; nothing here is `Send`.

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Buffers emptied with more capacity than this are freed rather than kept:
/// an idle connection should hold little (`h2` alone keeps 28 KiB).
pub const KEEP_CAPACITY: usize = 16 * 1024;

/// The two buffers between the server loop and `h2`.
#[derive(Debug, Default)]
pub struct Buffers {
    /// Bytes read from the socket, not yet consumed by `h2`.
    pub input: Vec<u8>,
    /// How far `h2` consumed `input` (compacted when it catches up).
    pub input_pos: usize,
    /// The peer closed its side: reads past `input` are end of stream.
    pub eof: bool,
    /// Bytes `h2` wrote, for the server loop to send.
    pub output: Vec<u8>,
    /// Writes are `Pending` while `output` holds this many bytes or more.
    pub output_limit: usize,
    /// Set when a write was refused: the owner must poll again after a drain.
    pub write_blocked: bool,
}

impl Buffers {
    /// Input bytes not yet consumed by `h2`.
    pub fn input_len(&self) -> usize {
        self.input.len() - self.input_pos
    }
}

/// The `AsyncRead + AsyncWrite` handle `h2` owns.
#[derive(Debug, Clone)]
pub struct MemoryIo(pub Rc<RefCell<Buffers>>);

impl AsyncRead for MemoryIo {
    fn poll_read(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut b = self.0.borrow_mut();
        let available = b.input_len();
        if available == 0 {
            // End of stream is a read of zero bytes; otherwise wait for a feed.
            return if b.eof {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            };
        }
        let n = available.min(buf.remaining());
        let start = b.input_pos;
        buf.put_slice(&b.input[start..start + n]);
        b.input_pos += n;
        if b.input_pos == b.input.len() {
            b.input_pos = 0;
            if b.input.capacity() > KEEP_CAPACITY {
                // One large read must not stay allocated on an idle connection.
                b.input = Vec::new();
            } else {
                b.input.clear();
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for MemoryIo {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut b = self.0.borrow_mut();
        let room = b.output_limit.saturating_sub(b.output.len());
        if room == 0 {
            b.write_blocked = true;
            return Poll::Pending;
        }
        let n = room.min(data.len());
        b.output.extend_from_slice(&data[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
