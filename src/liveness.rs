//! What a worker tells its supervisor without a message: when its loop last
//! came back, how many requests it began, and the request line of the last
//! one (`--timeout`, `--max-requests`).
//!
//! How it works: the supervisor makes a [`Liveness`] page for each worker
//! just before it forks it: an anonymous `MAP_SHARED` mapping, so parent
//! and child see the same physical page (src/cache/generations.rs uses the
//! same trick for the cache's counters). The worker hands the page to its
//! `Server`, whose loop stores the `CLOCK_MONOTONIC` time at every pass
//! (one vDSO clock read and one store: no syscall, no lock), and
//! [`Core::dispatch`](crate::dispatch) counts each request and copies its
//! request line. The supervisor reads the page from its own loop: a
//! heartbeat older than `--timeout` means the worker's loop is stuck (a
//! handler in a blocking call), and the request count drives
//! `--max-requests`.
//!
//! `--max-requests` is the worker's own business too: the supervisor
//! writes the worker's limit (with its jitter) and its own pid into the
//! page before the fork, and the request that reaches the limit tells the
//! worker's loop to stop accepting at once (`Server::stop_at_request_limit`),
//! which then signals the supervisor (SIGUSR2) to start the successor now
//! rather than at its next half-second checkup.
//!
//! Only the worker writes; the supervisor only reads. Every field is an
//! atomic, the request line too (packed into words), and the line is
//! guarded by a sequence counter (a seqlock), so a read never sees half of
//! one line and half of another.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use pyo3::prelude::*;

/// The longest request line kept (longer ones are cut).
const LINE_WORDS: usize = 64;
const LINE_MAX: usize = LINE_WORDS * 8;

/// The layout of the shared page.
#[repr(C)]
struct Shared {
    /// `CLOCK_MONOTONIC` nanoseconds of the loop's last pass; 0 until the first.
    heartbeat_ns: AtomicU64,
    /// Requests the worker began.
    requests: AtomicU64,
    /// `--max-requests` plus this worker's jitter; 0: none. Written by the
    /// supervisor before the fork.
    request_limit: AtomicU64,
    /// The supervisor's pid, told when the limit is reached.
    supervisor_pid: AtomicU64,
    /// 1 once the supervisor retires the worker to replace it (a reload, a
    /// recycle), written before its SIGTERM: WebSockets are then closed
    /// with 1012 (service restart) instead of 1001 (going away).
    restarting: AtomicU64,
    /// Odd while the line is being written.
    sequence: AtomicU64,
    line_length: AtomicU64,
    line: [AtomicU64; LINE_WORDS],
}

/// One worker's liveness page, shared between the supervisor and the worker
/// it is made for (see the module documentation).
#[pyclass(module = "rush._rush", frozen)]
pub struct Liveness {
    shared: *const Shared,
}

// SAFETY: the pointer targets a mapping that lives as long as this object
// (unmapped only in Drop), and every access to it goes through atomics,
// which any thread may use.
unsafe impl Send for Liveness {}
// SAFETY: as for Send: shared access is only ever through atomics.
unsafe impl Sync for Liveness {}

/// `CLOCK_MONOTONIC` in nanoseconds: the clock Python's `time.monotonic`
/// reads, the same in every process of the machine.
pub(crate) fn monotonic_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a live local of the type clock_gettime writes;
    // CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

impl Liveness {
    /// Maps a zero-filled shared page (no Python involved, so unit tests
    /// can make one too).
    fn map() -> std::io::Result<Self> {
        let length = std::mem::size_of::<Shared>();
        let address = crate::shared_memory::map_shared(length)?;
        // The kernel zero-fills the page (page-aligned, so aligned for
        // AtomicU64): every field starts at 0, a valid AtomicU64.
        Ok(Liveness {
            shared: address.cast::<Shared>(),
        })
    }

    fn shared(&self) -> &Shared {
        // SAFETY: `shared` points to a live, aligned, zero-initialised
        // mapping of at least size_of::<Shared>() bytes (see `new`), unmapped
        // only when `self` is dropped.
        unsafe { &*self.shared }
    }

    /// The loop came back: called once per pass.
    pub(crate) fn beat(&self) {
        self.shared()
            .heartbeat_ns
            .store(monotonic_ns(), Ordering::Relaxed);
    }

    /// A request begins: counts it and keeps its request line (the first
    /// line of `head`, without its CRLF). True when this request reaches
    /// the worker's request limit (only the one that reaches it).
    pub(crate) fn request_started(&self, head: &[u8]) -> bool {
        let shared = self.shared();
        let end = memchr::memchr(b'\n', head).unwrap_or(head.len());
        let line = head[..end].strip_suffix(b"\r").unwrap_or(&head[..end]);
        let line = &line[..line.len().min(LINE_MAX)];
        // Only this worker writes: a plain load and store, no locked add.
        let requests = shared.requests.load(Ordering::Relaxed);
        shared.requests.store(requests + 1, Ordering::Relaxed);
        let sequence = shared.sequence.load(Ordering::Relaxed);
        shared.sequence.store(sequence + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (index, chunk) in line.chunks(8).enumerate() {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            shared.line[index].store(u64::from_ne_bytes(word), Ordering::Relaxed);
        }
        shared
            .line_length
            .store(line.len() as u64, Ordering::Relaxed);
        shared.sequence.store(sequence + 2, Ordering::Release);
        requests + 1 == shared.request_limit.load(Ordering::Relaxed)
    }

    /// Whether the supervisor is replacing this worker (see `restarting`).
    pub(crate) fn is_restarting(&self) -> bool {
        self.shared().restarting.load(Ordering::Relaxed) != 0
    }

    /// Asks the supervisor to start this worker's successor now (SIGUSR2),
    /// if it is still this process's parent (a reaped supervisor's pid may
    /// be someone else's).
    pub(crate) fn ask_for_successor(&self) {
        let supervisor = self.shared().supervisor_pid.load(Ordering::Relaxed) as libc::pid_t;
        // SAFETY: getppid and kill take plain integers and touch no memory.
        unsafe {
            if supervisor > 1 && libc::getppid() == supervisor {
                libc::kill(supervisor, libc::SIGUSR2);
            }
        }
    }
}

#[pymethods]
impl Liveness {
    /// Maps a new page (the supervisor calls this before it forks the worker).
    #[new]
    fn new() -> PyResult<Self> {
        Ok(Liveness::map()?)
    }

    /// Seconds since the worker's loop last came back; None before its first pass.
    fn heartbeat_age(&self) -> Option<f64> {
        let beat = self.shared().heartbeat_ns.load(Ordering::Relaxed);
        if beat == 0 {
            return None;
        }
        Some(monotonic_ns().saturating_sub(beat) as f64 / 1e9)
    }

    /// Sets the worker's request limit (0: none) and who to tell when it is
    /// reached; the supervisor calls this before it forks the worker.
    fn set_request_limit(&self, limit: u64, supervisor_pid: u64) {
        let shared = self.shared();
        shared.request_limit.store(limit, Ordering::Relaxed);
        shared
            .supervisor_pid
            .store(supervisor_pid, Ordering::Relaxed);
    }

    /// The supervisor replaces this worker (a reload or a recycle): called
    /// before it sends SIGTERM, so the worker's drain says "restart".
    fn mark_restart(&self) {
        self.shared().restarting.store(1, Ordering::Relaxed);
    }

    /// Requests the worker began.
    #[getter]
    fn requests(&self) -> u64 {
        self.shared().requests.load(Ordering::Relaxed)
    }

    /// The request line of the last request the worker began ("" before any).
    #[getter]
    fn request_line(&self) -> String {
        let shared = self.shared();
        // A worker stuck in a handler writes nothing: the first try reads
        // a settled line. A few more cover a worker that is still serving.
        for _ in 0..100 {
            let before = shared.sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let length = (shared.line_length.load(Ordering::Relaxed) as usize).min(LINE_MAX);
            let mut bytes = Vec::with_capacity(LINE_MAX);
            for word in &shared.line[..length.div_ceil(8)] {
                bytes.extend_from_slice(&word.load(Ordering::Relaxed).to_ne_bytes());
            }
            bytes.truncate(length);
            fence(Ordering::Acquire);
            if shared.sequence.load(Ordering::Relaxed) == before {
                return String::from_utf8_lossy(&bytes).into_owned();
            }
        }
        String::new()
    }
}

impl Drop for Liveness {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, of that length, unmapped once:
        // nothing else refers to it once its only owner is dropped.
        unsafe {
            libc::munmap(
                self.shared as *mut libc::c_void,
                std::mem::size_of::<Shared>(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_request_that_reaches_the_limit_says_so() {
        let page = Liveness::map().unwrap();
        page.set_request_limit(3, 0);
        let reached: Vec<bool> = (0..5)
            .map(|_| page.request_started(b"GET / HTTP/1.1\r\n"))
            .collect();
        assert_eq!(reached, [false, false, true, false, false]);
    }

    #[test]
    fn a_request_line_is_read_back_whole_and_cut_at_the_limit() {
        let page = Liveness::map().unwrap();
        assert_eq!(page.request_line(), "");
        assert_eq!(page.heartbeat_age(), None);
        page.request_started(b"GET /slow?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(page.request_line(), "GET /slow?x=1 HTTP/1.1");
        assert_eq!(page.requests(), 1);
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(2000));
        page.request_started(long.as_bytes());
        assert_eq!(page.request_line().len(), LINE_MAX);
        assert_eq!(page.requests(), 2);
        // No limit set: never reached.
        assert!(!page.request_started(b"GET / HTTP/1.1\r\n"));
        page.beat();
        assert!(page.heartbeat_age().unwrap() < 60.0);
    }
}
