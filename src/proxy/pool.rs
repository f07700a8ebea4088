//! Keep-alive connections to origins, per worker.
//!
//! After a forwarded exchange whose response the origin framed (length or
//! chunked) and did not end with `Connection: close`, the upstream socket
//! waits here, keyed by the exact address it is connected to, for the next
//! request to that address. Idle sockets stay registered with epoll under
//! the token of the connection that used them last (taking one moves it to
//! the new user's token with one `epoll_ctl`, instead of a deregistration
//! on the way in and a registration on the way out; an event on a pooled
//! socket, the origin closing it, at worst wakes its former user for
//! nothing). One taken out is checked first with a non-blocking peek (EOF
//! or unexpected bytes mean the origin gave up on it), and sockets idle
//! longer than [`IDLE_TIMEOUT`] are closed by the sweep (closing removes
//! them from epoll).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::Token;

/// How long an idle origin connection is kept.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most idle connections kept per origin address. As many as the clients
/// that typically use one origin at once: with 32, 100 keep-alive clients of
/// one origin opened a new origin connection for 28% of their requests
/// (the answers that came back together found the pool full, so their
/// sockets were closed, and the next requests connected again), a socket,
/// a handshake and six syscalls each.
const PER_ORIGIN: usize = 256;
/// Most idle connections kept in all.
const TOTAL: usize = 1024;

#[derive(Default)]
pub(crate) struct OriginPool {
    /// Per address: the socket, since when it is idle, and the epoll token
    /// it is still registered under.
    idle: HashMap<SocketAddr, Vec<(TcpStream, Instant, Token)>>,
    count: usize,
}

impl OriginPool {
    /// Keeps `stream`, registered with epoll under `token`, for reuse;
    /// drops it when full.
    pub(crate) fn put(
        &mut self,
        address: SocketAddr,
        stream: TcpStream,
        now: Instant,
        token: Token,
    ) {
        if self.count >= TOTAL {
            return;
        }
        let streams = self.idle.entry(address).or_default();
        if streams.len() < PER_ORIGIN {
            streams.push((stream, now, token));
            self.count += 1;
        }
    }

    /// A live idle connection to `address`, most recently used first, with
    /// the epoll token it is registered under.
    pub(crate) fn take(&mut self, address: SocketAddr) -> Option<(TcpStream, Token)> {
        let streams = self.idle.get_mut(&address)?;
        while let Some((stream, _, token)) = streams.pop() {
            self.count -= 1;
            if is_alive(&stream) {
                return Some((stream, token));
            }
        }
        None
    }

    /// Closes connections idle too long.
    pub(crate) fn sweep(&mut self, now: Instant) {
        let mut count = 0;
        self.idle.retain(|_, streams| {
            streams.retain(|(_, since, _)| now.duration_since(*since) < IDLE_TIMEOUT);
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
