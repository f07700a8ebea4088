//! Invalidation that reaches every worker: generation counters in memory
//! shared by all the worker processes of one server.
//!
//! How it works: the supervisor calls [`share`] before it forks, which maps
//! a small table of counters (`MAP_SHARED | MAP_ANONYMOUS`); every forked
//! worker inherits the same physical pages. Slot 0 counts `clear()` calls,
//! a block of slots counts invalidations per route, and the rest count
//! invalidations per entry (a route plus named query values), each route or
//! entry hashed to its slot. An answer is stored with the sum of its three
//! counters ([`of_entry`]); invalidating bumps one counter, so the sum of
//! every answer it covers changes, in every worker, and a lookup treats an
//! answer with an old sum as absent. Two routes or entries that share a
//! slot invalidate each other too: only extra misses, never a stale hit.
//! No locks and no messages: a lookup reads three atomics.
//!
//! The table is made on first use if [`share`] was not called (a server
//! run without the supervisor): then it serves that process alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Counters in the table: 1 for clear, then routes, then entries.
const SLOTS: usize = 4096;
const FIRST_ENTRY_SLOT: usize = 1024;

static TABLE: OnceLock<&'static [AtomicU64]> = OnceLock::new();

/// Makes the table now (idempotent), so that workers forked after this
/// share it; the supervisor calls it before it forks.
pub fn share() {
    table();
}

/// The table, mapped shared on first use: a process forked after that sees
/// the same counters. Should the mapping fail, a private table still serves
/// this worker (invalidation then stays within it).
fn table() -> &'static [AtomicU64] {
    TABLE.get_or_init(|| {
        map_shared().unwrap_or_else(|| {
            let private: Vec<AtomicU64> = (0..SLOTS).map(|_| AtomicU64::new(0)).collect();
            Box::leak(private.into_boxed_slice())
        })
    })
}

fn map_shared() -> Option<&'static [AtomicU64]> {
    let length = SLOTS * std::mem::size_of::<AtomicU64>();
    let address = crate::shared_memory::map_shared(length).ok()?;
    // SAFETY: the mapping is `length` bytes, page-aligned (so aligned for
    // AtomicU64), zero-filled by the kernel (any bit pattern is a valid
    // AtomicU64), and never unmapped, so a 'static slice over it stays
    // valid. Other processes write it only through atomics, as this one does.
    Some(unsafe { std::slice::from_raw_parts(address.cast::<AtomicU64>(), SLOTS) })
}

fn route_slot(route: u32) -> usize {
    1 + route as usize % (FIRST_ENTRY_SLOT - 1)
}

fn entry_slot(entry: &[u8]) -> usize {
    FIRST_ENTRY_SLOT + xxhash_rust::xxh3::xxh3_64(entry) as usize % (SLOTS - FIRST_ENTRY_SLOT)
}

/// The generation an answer of `route` for `entry` is stored with and
/// checked against.
pub fn of_entry(route: u32, entry: &[u8]) -> u64 {
    let table = table();
    let load = |slot: usize| table[slot].load(Ordering::Acquire);
    load(0)
        .wrapping_add(load(route_slot(route)))
        .wrapping_add(load(entry_slot(entry)))
}

/// Every cached answer, in every worker, is now out of date.
pub fn bump_all() {
    table()[0].fetch_add(1, Ordering::AcqRel);
}

/// Every cached answer of `route`, in every worker, is now out of date.
pub fn bump_route(route: u32) {
    table()[route_slot(route)].fetch_add(1, Ordering::AcqRel);
}

/// The answers of one entry (`CacheKey::entry`), in every worker, are now
/// out of date.
pub fn bump_entry(entry: &[u8]) {
    table()[entry_slot(entry)].fetch_add(1, Ordering::AcqRel);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bump_changes_the_generations_it_covers() {
        let entry = b"\x07\0\0\0qx86";
        let start = of_entry(7, entry);
        bump_entry(entry);
        let after_entry = of_entry(7, entry);
        assert_ne!(start, after_entry);
        bump_route(7);
        let after_route = of_entry(7, entry);
        assert_ne!(after_entry, after_route);
        bump_all();
        assert_ne!(after_route, of_entry(7, entry));
    }

    #[test]
    fn the_shared_table_is_seen_by_a_forked_child() {
        share();
        let before = of_entry(3, b"child");
        // SAFETY: the child only bumps an atomic and exits with _exit, no
        // allocation or locks (the test harness's threads are not used).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            bump_route(3);
            // SAFETY: leaves the child at once, without unwinding or atexit.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above; `status` is a live local.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_ne!(before, of_entry(3, b"child"), "the child's bump is seen");
    }
}
