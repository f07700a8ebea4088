//! Request bodies: in memory while small, spooled to an anonymous file beyond.
//!
//! A body is collected before the app runs (within `--max-body-size`). Up
//! to [`SPOOL_THRESHOLD`] it stays in memory; past that it moves to an
//! unnamed temporary file (`O_TMPFILE` where available, via the tempfile
//! crate), so a large upload never sits whole in the server's memory. The
//! app then reads it from the file: `Request.body` on demand, WSGI's
//! `wsgi.input` as the file itself, ASGI's `receive()` in pieces.
//!
//! What a worker holds this way is bounded by its spool budget
//! (`--max-spool-size`): every collected body reserves its bytes (its whole
//! Content-Length at once, a chunked body as it is decoded) and gives them
//! back when its buffer is dropped. A body that does not fit beside the
//! others is refused with 503 and Retry-After ([`SpoolError::Full`]); one
//! larger than the whole budget could never fit and is refused with 413
//! ([`SpoolError::TooLarge`]). Memory is bounded apart: past
//! [`MEMORY_BUDGET`] summed over a worker's in-memory bodies, new bytes go
//! to a file at once rather than wait for [`SPOOL_THRESHOLD`].
//!
//! The reservation is a [`SpoolHold`] shared with whatever reads the body
//! after the loop lets its buffer go (a WSGI pool thread's `wsgi.input`, a
//! rush `Request`, an ASGI static mount's `receive()`), so a file counts
//! until the last reader of it is gone.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Bodies larger than this are spooled to a temporary file.
pub const SPOOL_THRESHOLD: usize = 1024 * 1024;

/// In-memory collected bodies a worker holds at most, summed; beyond it
/// bodies go to disk from their first byte.
pub const MEMORY_BUDGET: u64 = 64 * 1024 * 1024;

/// The worker's spool budget in bytes (`--max-spool-size`); a worker is
/// one process, so a process-wide count is the worker's.
static BUDGET: AtomicU64 = AtomicU64::new(u64::MAX);
/// Bytes reserved by the bodies being collected or held now.
static RESERVED: AtomicU64 = AtomicU64::new(0);
/// Bytes of those held in memory.
static IN_MEMORY: AtomicU64 = AtomicU64::new(0);

/// Sets the worker's spool budget (`--max-spool-size`; 0: none).
pub fn set_spool_budget(bytes: u64) {
    let budget = if bytes == 0 { u64::MAX } else { bytes };
    BUDGET.store(budget, Ordering::Relaxed);
}

/// Why a body could not be stored.
#[derive(Debug)]
pub enum SpoolError {
    /// It does not fit beside the bodies the worker holds now: 503, retry later.
    Full,
    /// It is larger than the whole spool budget: 413.
    TooLarge,
    /// The temporary file could not be written: 500.
    Io(io::Error),
}

impl From<io::Error> for SpoolError {
    fn from(error: io::Error) -> Self {
        SpoolError::Io(error)
    }
}

/// Takes `bytes` more from the worker's budget, all or nothing, for a body
/// that then reserves `total`.
fn reserve(bytes: u64, total: u64) -> Result<(), SpoolError> {
    let budget = BUDGET.load(Ordering::Relaxed);
    if total > budget {
        return Err(SpoolError::TooLarge);
    }
    RESERVED
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            held.checked_add(bytes).filter(|total| *total <= budget)
        })
        .map(|_| ())
        .map_err(|_| SpoolError::Full)
}

/// A body's share of the worker's spool budget, given back when the last
/// holder drops it.
#[derive(Default)]
pub struct SpoolHold(AtomicU64);

impl Drop for SpoolHold {
    fn drop(&mut self) {
        RESERVED.fetch_sub(*self.0.get_mut(), Ordering::AcqRel);
    }
}

enum Storage {
    Memory(Vec<u8>),
    Spooled { file: File, length: u64 },
}

/// A body being received, with its share of the worker's spool budget.
pub struct BodyBuffer {
    storage: Storage,
    /// Bytes this body took from the budget (at least what it stores);
    /// only this buffer adds to it.
    hold: Arc<SpoolHold>,
    /// Bytes of `storage` counted in [`IN_MEMORY`].
    in_memory: u64,
}

impl BodyBuffer {
    /// An empty buffer; `expected` (a Content-Length) is reserved whole, so
    /// an upload that cannot fit is refused before its first byte is read.
    pub fn new(expected: Option<u64>) -> Result<BodyBuffer, SpoolError> {
        let reserved = expected.unwrap_or(0);
        reserve(reserved, reserved)?;
        let capacity = reserved.min(SPOOL_THRESHOLD as u64) as usize;
        Ok(BodyBuffer {
            storage: Storage::Memory(Vec::with_capacity(capacity)),
            hold: Arc::new(SpoolHold(AtomicU64::new(reserved))),
            in_memory: 0,
        })
    }

    fn len(&self) -> u64 {
        match &self.storage {
            Storage::Memory(bytes) => bytes.len() as u64,
            Storage::Spooled { length, .. } => *length,
        }
    }

    pub fn append(&mut self, data: &[u8]) -> Result<(), SpoolError> {
        let total = self.len() + data.len() as u64;
        let reserved = self.hold.0.load(Ordering::Acquire);
        if total > reserved {
            reserve(total - reserved, total)?;
            self.hold.0.store(total, Ordering::Release);
        }
        match &mut self.storage {
            Storage::Memory(bytes)
                if total <= SPOOL_THRESHOLD as u64
                    && IN_MEMORY.load(Ordering::Relaxed) + data.len() as u64 <= MEMORY_BUDGET =>
            {
                bytes.extend_from_slice(data);
                IN_MEMORY.fetch_add(data.len() as u64, Ordering::Relaxed);
                self.in_memory += data.len() as u64;
                Ok(())
            }
            Storage::Memory(bytes) => {
                let mut file = tempfile::tempfile()?;
                file.write_all(bytes)?;
                file.write_all(data)?;
                IN_MEMORY.fetch_sub(self.in_memory, Ordering::Relaxed);
                self.in_memory = 0;
                self.storage = Storage::Spooled {
                    file,
                    length: total,
                };
                Ok(())
            }
            Storage::Spooled { file, length } => {
                file.write_all(data)?;
                *length = total;
                Ok(())
            }
        }
    }

    pub fn as_request_body(&self) -> RequestBody<'_> {
        match &self.storage {
            Storage::Memory(bytes) => RequestBody::Bytes(bytes),
            Storage::Spooled { file, length } => RequestBody::File {
                file,
                length: *length,
                hold: &self.hold,
            },
        }
    }
}

impl Drop for BodyBuffer {
    fn drop(&mut self) {
        IN_MEMORY.fetch_sub(self.in_memory, Ordering::Relaxed);
    }
}

/// A complete request body, as handed to an app.
#[derive(Clone, Copy)]
pub enum RequestBody<'a> {
    Bytes(&'a [u8]),
    File {
        file: &'a File,
        length: u64,
        /// Kept by whoever reads the file after the loop's buffer is gone.
        hold: &'a Arc<SpoolHold>,
    },
}

impl RequestBody<'_> {
    pub fn to_owned_body(self) -> io::Result<OwnedBody> {
        Ok(match self {
            RequestBody::Bytes(bytes) => OwnedBody::Bytes(bytes.into()),
            RequestBody::File { file, length, hold } => OwnedBody::File {
                file: file.try_clone()?,
                length,
                _hold: Arc::clone(hold),
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
        _hold: Arc<SpoolHold>,
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
            OwnedBody::File { file, length, .. } => {
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
        let mut body = BodyBuffer::new(Some(10)).unwrap();
        body.append(b"hello").unwrap();
        assert!(matches!(body.storage, Storage::Memory(_)));
        let big = vec![7u8; SPOOL_THRESHOLD];
        body.append(&big).unwrap();
        assert!(matches!(body.storage, Storage::Spooled { .. }));
        body.append(b"tail").unwrap();
        let owned = body.as_request_body().to_owned_body().unwrap();
        assert_eq!(owned.len(), (5 + SPOOL_THRESHOLD + 4) as u64);
        let all = owned.read_all().unwrap();
        assert_eq!(&all[..5], b"hello");
        assert_eq!(&all[all.len() - 4..], b"tail");
        assert_eq!(owned.read_at(3, 4).unwrap(), vec![b'l', b'o', 7, 7]);
    }
}
