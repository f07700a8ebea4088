//! What an idle HTTP/3 connection holds on the server (issue 35 asks for at
//! most 64 KiB): this test binary counts the live heap bytes of its thread,
//! serves one request on each of several connections, lets them go idle,
//! drops the client side, and divides what the server endpoint kept by the
//! number of connections.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use rush_h3::quinn_proto::{Endpoint, EndpointConfig};
use support::{get, request, settings, Net, Tasks};

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // Never panic in the allocator, even while the thread ends.
    let _ = LIVE.try_with(|live| live.set(live.get() + delta));
}

struct Counting;

// SAFETY: each method hands its arguments unchanged to the system
// allocator, whose contract is the caller's; the bookkeeping only touches a
// thread-local Cell initialised as a constant, which allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `ptr` came from System with this layout, through `alloc`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: as for `dealloc`; the new size is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

const CONNECTIONS: usize = 20;
/// Issue 35's target for an idle connection.
const TARGET: isize = 64 * 1024;

#[test]
fn an_idle_connection_holds_at_most_64_kib_on_the_server() {
    let mut net = Net::new(settings());
    let before = live();
    let clients: Vec<_> = (0..CONNECTIONS).map(|_| net.h3_client().0).collect();
    let answers: Vec<_> = clients
        .iter()
        .map(|c| request(&mut net, c, get("/"), vec![], None))
        .collect();
    net.run_until(|net| {
        net.answer_requests(b"hello");
        answers.iter().all(|a| a.borrow().is_some())
    });
    net.settle();
    assert_eq!(net.server.connections(), CONNECTIONS);
    // Only the server side stays.
    drop(answers);
    drop(clients);
    net.tasks = Tasks::default();
    net.clients.clear();
    net.client = Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
    net.events = Vec::new();
    net.sent_to.clear();
    net.received_from.clear();
    let per_connection = (live() - before) / CONNECTIONS as isize;
    println!("an idle HTTP/3 connection holds {per_connection} bytes on the server");
    assert!(
        per_connection <= TARGET,
        "{per_connection} bytes per idle connection"
    );
}
