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
use std::hash::{BuildHasher, Hasher, RandomState};
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

/// Who an upstream socket's events are for.
#[derive(Clone, Copy, Default)]
enum User {
    /// No open upstream socket has this descriptor (or one closed since).
    #[default]
    Nobody,
    /// The client connection with this slab key.
    Connection(usize),
    /// Idle in the pool; `signalled`: an event came for it since.
    Pooled { signalled: bool },
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
            self.users.resize(fd + 1, User::Nobody);
        }
        self.users[fd] = user;
    }

    /// A new upstream socket, registered under its own token, now used by
    /// connection `key`.
    pub(crate) fn adopt(&mut self, stream: &TcpStream, key: usize) {
        self.set_user(stream, User::Connection(key));
    }

    /// The connection an event on upstream socket `fd` is for. An event on a
    /// pooled socket is written down (see the module docs) and is for nobody.
    pub(crate) fn user_of(&mut self, fd: usize) -> Option<usize> {
        match self.users.get_mut(fd)? {
            User::Connection(key) => Some(*key),
            User::Pooled { signalled } => {
                *signalled = true;
                None
            }
            User::Nobody => None,
        }
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
                *user = User::Pooled { signalled: !quiet };
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
            let signalled = matches!(
                self.users.get(stream.as_raw_fd() as usize),
                Some(User::Pooled { signalled: true })
            );
            if !(check || signalled) || is_alive(&stream) {
                self.set_user(&stream, User::Connection(key));
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
/// put) with a multiply-and-fold of the few words a `SocketAddr` writes,
/// keyed at random per worker, instead of SipHash (450 instructions a
/// request). SipHash's guarantee against chosen collisions matters little
/// here: the pool holds at most [`TOTAL`] sockets, so the worst a client
/// choosing targets can do is make a lookup compare that many keys.
#[derive(Clone)]
struct AddressHasher {
    key: u64,
}

impl Default for AddressHasher {
    fn default() -> Self {
        AddressHasher {
            key: RandomState::new().hash_one(0u64) | 1,
        }
    }
}

impl BuildHasher for AddressHasher {
    type Hasher = FoldHasher;

    fn build_hasher(&self) -> FoldHasher {
        FoldHasher { state: self.key }
    }
}

struct FoldHasher {
    state: u64,
}

impl FoldHasher {
    fn mix(&mut self, word: u64) {
        // The 128-bit product folded to 64 bits: every input bit reaches
        // every output bit within two rounds.
        let product = u128::from(self.state ^ word) * 0x9e37_79b9_7f4a_7c15;
        self.state = (product as u64) ^ ((product >> 64) as u64);
    }
}

impl Hasher for FoldHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(word));
        }
    }

    fn write_u16(&mut self, value: u16) {
        self.mix(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.mix(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.mix(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.mix(value as u64);
    }

    fn finish(&self) -> u64 {
        let product = u128::from(self.state) * 0x9e37_79b9_7f4a_7c15;
        (product as u64) ^ ((product >> 64) as u64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_hash_apart_and_alike() {
        let hasher = AddressHasher::default();
        let address = |text: &str| text.parse::<SocketAddr>().unwrap();
        let same = hasher.hash_one(address("127.0.0.1:80"));
        assert_eq!(same, hasher.hash_one(address("127.0.0.1:80")));
        let others = [
            "127.0.0.1:81",
            "127.0.0.2:80",
            "[::1]:80",
            "[::ffff:127.0.0.1]:80",
        ];
        for other in others {
            assert_ne!(same, hasher.hash_one(address(other)), "{other}");
        }
    }
}
