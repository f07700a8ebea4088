//! Memory shared with the processes forked after it is made: anonymous
//! `MAP_SHARED` mappings. It is how the supervisor and its workers share
//! counters without messages: the response cache's invalidation
//! generations, the metrics table, each worker's liveness page and the TLS
//! session-ticket keys. Each user lays its own atomics over the bytes.

use std::io;

/// Maps `length` zero-filled, page-aligned bytes that every process forked
/// after this call shares. The mapping is the caller's: each user here
/// keeps it for the life of the process (or unmaps it itself).
pub fn map_shared(length: usize) -> io::Result<*mut libc::c_void> {
    // SAFETY: an anonymous mapping takes no file descriptor and no address
    // hint, so it cannot alias memory of ours; the result is checked for
    // MAP_FAILED before anyone uses it.
    let address = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            length,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if address == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(address)
}
