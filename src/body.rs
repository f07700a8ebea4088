//! Request bodies: in memory while small, spooled to an anonymous file beyond.
//!
//! A body is collected before the app runs (within `--max-body-size`). Up
//! to [`SPOOL_THRESHOLD`] it stays in memory; past that it moves to an
//! unnamed temporary file (`O_TMPFILE` where available, via the tempfile
//! crate), so a large upload never sits whole in the server's memory. The
//! app then reads it from the file: `Request.body` on demand, WSGI's
//! `wsgi.input` as the file itself, ASGI's `receive()` in pieces.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

/// Bodies larger than this are spooled to a temporary file.
pub const SPOOL_THRESHOLD: usize = 1024 * 1024;

/// A body being received.
pub enum BodyBuffer {
    Memory(Vec<u8>),
    Spooled { file: File, length: u64 },
}

impl BodyBuffer {
    /// An empty buffer; `expected` (a Content-Length) sizes the first allocation.
    pub fn new(expected: Option<u64>) -> BodyBuffer {
        let capacity = expected.unwrap_or(0).min(SPOOL_THRESHOLD as u64) as usize;
        BodyBuffer::Memory(Vec::with_capacity(capacity))
    }

    pub fn append(&mut self, data: &[u8]) -> io::Result<()> {
        match self {
            BodyBuffer::Memory(bytes) if bytes.len() + data.len() <= SPOOL_THRESHOLD => {
                bytes.extend_from_slice(data);
                Ok(())
            }
            BodyBuffer::Memory(bytes) => {
                let mut file = tempfile::tempfile()?;
                file.write_all(bytes)?;
                file.write_all(data)?;
                let length = (bytes.len() + data.len()) as u64;
                *self = BodyBuffer::Spooled { file, length };
                Ok(())
            }
            BodyBuffer::Spooled { file, length } => {
                file.write_all(data)?;
                *length += data.len() as u64;
                Ok(())
            }
        }
    }

    pub fn as_request_body(&self) -> RequestBody<'_> {
        match self {
            BodyBuffer::Memory(bytes) => RequestBody::Bytes(bytes),
            BodyBuffer::Spooled { file, length } => RequestBody::File {
                file,
                length: *length,
            },
        }
    }
}

/// A complete request body, as handed to an app.
#[derive(Clone, Copy)]
pub enum RequestBody<'a> {
    Bytes(&'a [u8]),
    File { file: &'a File, length: u64 },
}

impl RequestBody<'_> {
    pub fn to_owned_body(self) -> io::Result<OwnedBody> {
        Ok(match self {
            RequestBody::Bytes(bytes) => OwnedBody::Bytes(bytes.into()),
            RequestBody::File { file, length } => OwnedBody::File {
                file: file.try_clone()?,
                length,
            },
        })
    }
}

/// A body owned by a request object that outlives the loop's buffers.
pub enum OwnedBody {
    Bytes(Box<[u8]>),
    /// Read with positioned reads, so clones of the descriptor never race on an offset.
    File {
        file: File,
        length: u64,
    },
}

impl OwnedBody {
    pub fn len(&self) -> u64 {
        match self {
            OwnedBody::Bytes(bytes) => bytes.len() as u64,
            OwnedBody::File { length, .. } => *length,
        }
    }

    /// Up to `limit` bytes starting at `offset`.
    pub fn read_at(&self, offset: u64, limit: usize) -> io::Result<Vec<u8>> {
        match self {
            OwnedBody::Bytes(bytes) => {
                let start = (offset as usize).min(bytes.len());
                let end = start.saturating_add(limit).min(bytes.len());
                Ok(bytes[start..end].to_vec())
            }
            OwnedBody::File { file, length } => {
                let wanted = (length.saturating_sub(offset)).min(limit as u64) as usize;
                let mut buffer = vec![0; wanted];
                file.read_exact_at(&mut buffer, offset)?;
                Ok(buffer)
            }
        }
    }

    /// The whole body.
    pub fn read_all(&self) -> io::Result<Vec<u8>> {
        self.read_at(0, self.len() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_bodies_stay_in_memory_and_large_ones_spool() {
        let mut body = BodyBuffer::new(Some(10));
        body.append(b"hello").unwrap();
        assert!(matches!(body, BodyBuffer::Memory(_)));
        let big = vec![7u8; SPOOL_THRESHOLD];
        body.append(&big).unwrap();
        assert!(matches!(body, BodyBuffer::Spooled { .. }));
        body.append(b"tail").unwrap();
        let owned = body.as_request_body().to_owned_body().unwrap();
        assert_eq!(owned.len(), (5 + SPOOL_THRESHOLD + 4) as u64);
        let all = owned.read_all().unwrap();
        assert_eq!(&all[..5], b"hello");
        assert_eq!(&all[all.len() - 4..], b"tail");
        assert_eq!(owned.read_at(3, 4).unwrap(), vec![b'l', b'o', 7, 7]);
    }
}
