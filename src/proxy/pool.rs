//! Keep-alive connections to origins, per worker, and who uses each
//! upstream socket.
//!
//! After a forwarded exchange whose response the origin framed (length or
//! chunked) and did not end with `Connection: close`, the upstream socket
//! waits here, keyed by the exact address it is connected to, for the next
//! request to that address.
//!
//! An upstream socket's epoll token names the socket itself (its file
//! descriptor, `conn::upstream_token`), not the client connection using
//! it, and [`OriginPool`] keeps, per descriptor, who that is: a client
//! connection, or the pool. So a pooled socket stays registered with epoll
//! as it is, and changes hands with no syscall: taking it only writes down
//! its new user (an `epoll_ctl` per request before). An event on a pooled
//! socket can only mean the origin closed it or sent bytes nobody asked
//! for: it is written down, and such a socket is checked with a
//! non-blocking peek when taken (EOF or stray bytes: not reused). Sockets
//! no event came for are taken without the peek, except for a request with
//! a body, which cannot be sent again on a fresh connection if the origin
//! closed this one at the last moment (a bodiless one can: `Retry`), so it
//! is worth the peek's narrower window. Sockets idle longer than
//! [`IDLE_TIMEOUT`] are closed by the sweep (closing removes them from
//! epoll).

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::net::TcpStream;

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

/// Who an upstream socket's events are for, in 4 bytes: the table has a
/// slot per descriptor the worker has open, and an idle tunnel's memory
/// counts (benches/README.md).
#[derive(Clone, Copy, PartialEq, Eq)]
struct User(u32);

impl User {
    /// No open upstream socket has this descriptor (or one closed since).
    const NOBODY: User = User(0);
    /// Idle in the pool, no event since it was put there.
    const POOLED: User = User(u32::MAX);
    /// Idle in the pool, and an event came for it.
    const POOLED_SIGNALLED: User = User(u32::MAX - 1);

    /// The client connection with this slab key (keys stay far below
    /// 2^32: a worker holds `--max-connections` at most).
    fn connection(key: usize) -> User {
        let value = u32::try_from(key + 1).expect("a proxy connection key below 2^32");
        assert!(
            value < Self::POOLED_SIGNALLED.0,
            "a proxy connection key below 2^32 - 2"
        );
        User(value)
    }

    fn key(self) -> Option<usize> {
        match self {
            User::NOBODY | User::POOLED | User::POOLED_SIGNALLED => None,
            User(value) => Some(value as usize - 1),
        }
    }
}

#[derive(Default)]
pub(crate) struct OriginPool {
    /// Per address: the socket, and since when it is idle.
    idle: HashMap<SocketAddr, Vec<(TcpStream, Instant)>, AddressHasher>,
    count: usize,
    /// Per upstream socket, indexed by its file descriptor.
    users: Vec<User>,
}

impl OriginPool {
    fn set_user(&mut self, stream: &TcpStream, user: User) {
        let fd = stream.as_raw_fd() as usize;
        if fd >= self.users.len() {
            self.users.resize(fd + 1, User::NOBODY);
        }
        self.users[fd] = user;
    }

    /// A new upstream socket, registered under its own token, now used by
    /// connection `key`.
    pub(crate) fn adopt(&mut self, stream: &TcpStream, key: usize) {
        self.set_user(stream, User::connection(key));
    }

    /// The connection an event on upstream socket `fd` is for. An event on a
    /// pooled socket is written down (see the module docs) and is for nobody.
    pub(crate) fn user_of(&mut self, fd: usize) -> Option<usize> {
        let user = self.users.get_mut(fd)?;
        if *user == User::POOLED {
            *user = User::POOLED_SIGNALLED;
        }
        user.key()
    }

    /// Keeps `stream` for reuse (it stays registered with epoll); drops it
    /// when full. `quiet`: no event came for it since its last read (one
    /// that came while it was in use, a FIN right after the response, say,
    /// raises no second one now that it is pooled).
    pub(crate) fn put(
        &mut self,
        address: SocketAddr,
        stream: TcpStream,
        now: Instant,
        quiet: bool,
    ) {
        if self.count >= TOTAL {
            return;
        }
        let streams = self.idle.entry(address).or_default();
        if streams.len() < PER_ORIGIN {
            let fd = stream.as_raw_fd() as usize;
            streams.push((stream, now));
            self.count += 1;
            if let Some(user) = self.users.get_mut(fd) {
                *user = if quiet {
                    User::POOLED
                } else {
                    User::POOLED_SIGNALLED
                };
            }
        }
    }

    /// A live idle connection to `address`, most recently used first, now
    /// used by connection `key`. `check`: peek at it even if no event came
    /// for it (a request that could not be sent again).
    pub(crate) fn take(
        &mut self,
        address: SocketAddr,
        key: usize,
        check: bool,
    ) -> Option<TcpStream> {
        let streams = self.idle.get_mut(&address)?;
        while let Some((stream, _)) = streams.pop() {
            self.count -= 1;
            let signalled =
                self.users.get(stream.as_raw_fd() as usize) == Some(&User::POOLED_SIGNALLED);
            if !(check || signalled) || is_alive(&stream) {
                self.set_user(&stream, User::connection(key));
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

/// Hashes the pool's addresses (twice a forwarded request: a take and a
/// put) with foldhash, keyed at random per process, instead of SipHash (450
/// instructions a request). SipHash's guarantee against chosen collisions
/// matters little here: the pool holds at most [`TOTAL`] sockets, so the
/// worst a client choosing targets can do is make a lookup compare that
/// many keys.
type AddressHasher = foldhash::fast::RandomState;

/// An idle connection is alive if reading would block: no EOF, no stray bytes.
fn is_alive(stream: &TcpStream) -> bool {
    let mut byte = [MaybeUninit::<u8>::uninit(); 1];
    matches!(
        socket2::SockRef::from(stream).peek(&mut byte),
        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connected pair on loopback: the pool's side (non-blocking) and the origin's.
    fn connected() -> (SocketAddr, TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let ours = std::net::TcpStream::connect(address).unwrap();
        ours.set_nonblocking(true).unwrap();
        let (theirs, _) = listener.accept().unwrap();
        (address, TcpStream::from_std(ours), theirs)
    }

    #[test]
    fn events_go_to_the_user_and_mark_a_pooled_socket_for_a_check() {
        let mut pool = OriginPool::default();
        let now = Instant::now();
        let (address, stream, origin) = connected();
        let fd = stream.as_raw_fd() as usize;
        pool.adopt(&stream, 7);
        assert_eq!(pool.user_of(fd), Some(7));
        pool.put(address, stream, now, true);
        // Quiet and unsignalled: taken as it is, by its new user.
        let stream = pool.take(address, 3, false).expect("pooled");
        assert_eq!(pool.user_of(fd), Some(3));
        pool.put(address, stream, now, true);
        // The origin closes it; the event is for nobody, but written down...
        drop(origin);
        assert_eq!(pool.user_of(fd), None);
        // ...so the take peeks, sees the EOF and does not hand it out.
        assert!(pool.take(address, 3, false).is_none());
    }
}
