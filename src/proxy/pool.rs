//! Keep-alive connections to origins, per worker.
//!
//! After a forwarded exchange whose response the origin framed (length or
//! chunked) and did not end with `Connection: close`, the upstream socket
//! waits here, keyed by the exact address it is connected to, for the next
//! request to that address. Idle sockets are not registered with epoll; one
//! taken out is checked first with a non-blocking peek (EOF or unexpected
//! bytes mean the origin gave up on it), and sockets idle longer than
//! [`IDLE_TIMEOUT`] are closed by the sweep.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

/// How long an idle origin connection is kept.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most idle connections kept per origin address.
const PER_ORIGIN: usize = 32;
/// Most idle connections kept in all.
const TOTAL: usize = 1024;

#[derive(Default)]
pub(crate) struct OriginPool {
    idle: HashMap<SocketAddr, Vec<(TcpStream, Instant)>>,
    count: usize,
}

impl OriginPool {
    /// Keeps `stream` (deregistered by the caller) for reuse; drops it when full.
    pub(crate) fn put(&mut self, address: SocketAddr, stream: TcpStream, now: Instant) {
        if self.count >= TOTAL {
            return;
        }
        let streams = self.idle.entry(address).or_default();
        if streams.len() < PER_ORIGIN {
            streams.push((stream, now));
            self.count += 1;
        }
    }

    /// A live idle connection to `address`, most recently used first.
    pub(crate) fn take(&mut self, address: SocketAddr) -> Option<TcpStream> {
        let streams = self.idle.get_mut(&address)?;
        while let Some((stream, _)) = streams.pop() {
            self.count -= 1;
            if is_alive(&stream) {
                return Some(stream);
            }
        }
        None
    }

    /// Closes connections idle too long.
    pub(crate) fn sweep(&mut self, now: Instant) {
        let mut count = 0;
        self.idle.retain(|_, streams| {
            streams.retain(|(_, since)| now.duration_since(*since) < IDLE_TIMEOUT);
            count += streams.len();
            !streams.is_empty()
        });
        self.count = count;
    }
}

/// An idle connection is alive if reading would block: no EOF, no stray bytes.
fn is_alive(stream: &TcpStream) -> bool {
    let mut byte = [MaybeUninit::<u8>::uninit(); 1];
    matches!(
        socket2::SockRef::from(stream).peek(&mut byte),
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock
    )
}
