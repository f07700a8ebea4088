//! The response sink of a connection: the bytes and the body segment owed
//! to the client, written into the transport as the kernel takes them.
//!
//! It owns the output buffer, the outgoing body (shared memory or a file
//! sent with `sendfile`), the high- and low-water marks every producer
//! checks (the HTTP/1.1 parser stops turning requests into responses, a
//! streamed WSGI body pauses, an ASGI `send()` waits), and the send
//! deadline, which moves only when the client takes bytes. Backpressure
//! for every interface is decided here.

use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::transport::Stream;
use crate::http_write::OutgoingBody;
use crate::metrics;
use crate::options::{OUTPUT_FAIR_SHARE, OUTPUT_HIGH_WATER, OUTPUT_LOW_WATER};

/// How much of a file is read and encrypted at a time over TLS.
const TLS_FILE_PIECE: usize = 64 * 1024;

thread_local! {
    /// The worker's buffer for a file piece on its way into TLS (one loop
    /// thread per worker, and the piece is encrypted before the call ends).
    static TLS_FILE_SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// What a connection owes its client, and how fast the client takes it.
#[derive(Default)]
pub struct ResponseSink {
    /// Response bytes not written yet.
    pub output: Vec<u8>,
    /// A large body (file or shared memory) that follows `output` on the
    /// wire. While it is pending, no further request is processed, so
    /// responses keep their order.
    pub body: Option<OutgoingBody>,
    /// Bytes written to the socket so far: a change means write progress.
    written: u64,
    /// While output is pending: when the connection is dropped unless the
    /// client reads some of it first (the send timeout, in every state,
    /// also while a handler runs).
    pub write_deadline: Option<Instant>,
    /// `written` when `write_deadline` was last set.
    written_at_deadline: u64,
    /// Bytes of `output`'s capacity counted in the worker's output budget.
    pub accounted: usize,
    /// How the body of the response being written is framed (set by the
    /// writer's `send_head`, `crate::http1::writer`).
    pub framing: BodyFraming,
}

/// How the HTTP/1.1 writer frames the body parts of the current response.
#[derive(Default, Clone, Copy)]
pub struct BodyFraming {
    /// Each part goes out as a chunk, and the end as the last chunk.
    pub chunked: bool,
    /// No body goes out (a HEAD request, a bodyless status).
    pub discard: bool,
}

impl ResponseSink {
    /// Whether anything is still to be written.
    pub fn has_pending(&self) -> bool {
        !self.output.is_empty() || self.body.is_some()
    }

    /// At or over the high-water mark: producers stop.
    pub fn is_full(&self) -> bool {
        self.output.len() >= OUTPUT_HIGH_WATER
    }

    /// Under the low-water mark: a paused producer may go on.
    pub fn has_room(&self) -> bool {
        self.output.len() < OUTPUT_LOW_WATER
    }

    /// Renews the send deadline after a write attempt: it moves only when
    /// the client took some bytes since it was last set, so an app that
    /// keeps sending to a client that never reads is still cut off.
    /// `transport_pending`: the transport still holds bytes of ours (TLS
    /// records the socket has not taken).
    pub fn track_progress(
        &mut self,
        now: Instant,
        send_timeout: Duration,
        transport_pending: bool,
    ) {
        if !self.has_pending() && !transport_pending {
            self.write_deadline = None;
        } else if self.write_deadline.is_none() || self.written != self.written_at_deadline {
            self.write_deadline = Some(now + send_timeout);
            self.written_at_deadline = self.written;
        }
    }
}

impl ResponseSink {
    /// Writes as much as the kernel takes into `stream`. `Ok` with output
    /// left means the socket is full: wait for writability.
    pub fn write_to(&mut self, stream: &mut Stream) -> io::Result<()> {
        let mut written = 0;
        while written < self.output.len() {
            match stream.write(&self.output[written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(count) => {
                    written += count;
                    self.written += count as u64;
                    metrics::count(metrics::Counter::BytesOut, count as u64);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(error),
            }
        }
        if written == self.output.len() {
            self.output.clear();
            // A large response must not pin its buffer for the connection's
            // lifetime (the worker's output budget counts what is held).
            if self.output.capacity() > OUTPUT_FAIR_SHARE {
                self.output = Vec::new();
            }
        } else {
            self.output.drain(..written);
            return Ok(());
        }
        self.write_body(stream)
    }

    /// Sends the pending body until done or the socket is full.
    fn write_body(&mut self, stream: &mut Stream) -> io::Result<()> {
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
                    match stream.write(&data[*offset..(*end).min(*offset + CHUNK)]) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(count) => {
                            *offset += count;
                            self.written += count as u64;
                            metrics::count(metrics::Counter::BytesOut, count as u64);
                            count
                        }
                        Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                        Err(error) => Err(error).or_else(would_block)?,
                    }
                }
                Some(OutgoingBody::File { file, offset, end }) if stream.is_tls() => {
                    if *offset >= *end {
                        self.body = None;
                        return Ok(());
                    }
                    // No sendfile through TLS: the file is read in pieces
                    // and encrypted (rustls bounds what it holds). The piece
                    // buffer is the worker's one scratch buffer: a fresh
                    // zeroed 64 KiB per piece cost an allocation and a memset.
                    let wanted = ((*end - *offset) as usize).min(TLS_FILE_PIECE);
                    let written = TLS_FILE_SCRATCH.with_borrow_mut(|piece| {
                        piece.resize(TLS_FILE_PIECE, 0);
                        let read = std::os::unix::fs::FileExt::read_at(
                            &**file,
                            &mut piece[..wanted],
                            *offset,
                        )?;
                        if read == 0 {
                            return Err(io::ErrorKind::UnexpectedEof.into());
                        }
                        stream.write(&piece[..read])
                    });
                    match written {
                        Ok(count) => {
                            *offset += count as u64;
                            self.written += count as u64;
                            metrics::count(metrics::Counter::BytesOut, count as u64);
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
                    // call (the socket is owned by `stream`, the file by
                    // `file`), and `file_offset` is a live local the kernel
                    // updates; sendfile does not touch the file's own position,
                    // so responses sharing one cached fd do not interfere.
                    let result = unsafe {
                        libc::sendfile(
                            stream.as_raw_fd(),
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
                        metrics::count(metrics::Counter::BytesOut, result as u64);
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
