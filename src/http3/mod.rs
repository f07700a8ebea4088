//! HTTP/3 over QUIC (`--http3`): the worker's UDP sockets, the router that
//! hands each datagram to its connection, and the timer QUIC needs.
//!
//! How it works:
//! * Beside each TCP listener the worker binds a UDP socket of its own to the
//!   same address, with SO_REUSEPORT. The kernel picks the socket of a
//!   datagram by hashing its addresses, so the packets of one client's
//!   connection keep reaching the worker that accepted it. A client whose
//!   address changes (NAT rebinding, a phone moving networks) hashes anew
//!   and may reach another worker, which knows none of its connection ids:
//!   that worker answers with a stateless reset, valid because every worker
//!   of one server derives its reset keys from the same secret
//!   ([`Http3Settings`]), and the client starts over on a new connection.
//!   nginx does the same without its eBPF routing (`quic_bpf`), which rush
//!   does not have yet; with one worker nothing is lost.
//! * quinn-udp reads and writes the sockets: segmentation offload both ways
//!   (GSO `UDP_SEGMENT`, GRO `UDP_GRO`) where the kernel has it, ECN, and the
//!   address each datagram was sent to.
//! * `rush_h3::H3Router` (quinn-proto's endpoint) admits new connections,
//!   sends Retry under a handshake flood and answers what belongs to no
//!   connection. Each connection it admits becomes an ordinary entry of the
//!   worker's connection slab: its transport is `Stream::Quic` (no socket of
//!   its own), its protocol the same multiplexed session HTTP/2 has, with an
//!   HTTP/3 engine (`crate::http2::engine`). So every interface, limit,
//!   timeout, log line and metric of HTTP/2 holds for it unchanged.
//! * After a connection is driven, the worker syncs it with the router
//!   and sends what it has (`AppServer::quic_after`); its next deadline
//!   (loss detection, acknowledgements, idle) goes into a timer set, and
//!   one timerfd in the worker's epoll set fires at the earliest, so the
//!   timers run whether the worker's own loop or asyncio waits on epoll.

use std::collections::{BTreeSet, HashMap};
use std::io::{self, IoSliceMut};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use pyo3::prelude::*;
use quinn_udp::{RecvMeta, UdpSockRef, UdpSocketState};
use rush_h3::{ConnId, H3Router, H3Settings};

/// `--http3`'s settings, shared by the workers of one server.
#[pyclass(module = "rush._rush", frozen)]
pub struct Http3Settings {
    /// The key material every worker derives its stateless-reset and Retry
    /// keys from (random per server start), so a worker can end a
    /// connection another worker holds (see the module).
    pub(crate) secret: [u8; 32],
}

#[pymethods]
impl Http3Settings {
    #[new]
    fn new(secret: Vec<u8>) -> PyResult<Self> {
        let secret = <[u8; 32]>::try_from(secret.as_slice()).map_err(|_| {
            pyo3::exceptions::PyValueError::new_err("the HTTP/3 secret is 32 bytes")
        })?;
        Ok(Http3Settings { secret })
    }
}

/// The tokens of the worker's UDP sockets (`QUIC_SOCKETS + i`) and its
/// QUIC timer: below the listeners' range, far above any connection's.
const QUIC_SOCKETS: usize = 1 << 38;
pub(crate) const QUIC_TIMER: Token = Token((1 << 38) - 1);

/// The socket index an event's token names, if it names one.
pub(crate) fn socket_index(token: Token) -> Option<usize> {
    (QUIC_SOCKETS..QUIC_SOCKETS + 1024)
        .contains(&token.0)
        .then(|| token.0 - QUIC_SOCKETS)
}

/// Datagram bytes one socket gives per turn before the others (and the
/// TCP connections) have theirs; the rest waits for the next turn, as a
/// TCP connection's input does (`crate::next_turn`).
pub(crate) const DATAGRAM_BUDGET_PER_TURN: usize = 512 * 1024;

/// Datagrams in one GSO send. The kernel takes up to 64 segments but no more
/// than 64 KiB in one send, and quinn-udp drops a send refused for its size
/// (EMSGSIZE) as if it were lost: 64 datagrams of 1,200 bytes are 75 KiB,
/// so every full batch was lost and sent again (one in 16 sends failed in a
/// 1 MiB download). quinn's own loop sends at most 10 (its
/// `MAX_TRANSMIT_SEGMENTS`, "benchmarks have shown that numbers around 10
/// are a good compromise"), which stays under 64 KiB at any MTU QUIC uses.
const MAX_GSO_SEGMENTS: usize = 10;

/// The receive buffer: room for one GRO batch of full-size datagrams.
const RECEIVE_BUFFER: usize = 64 * 1024;

/// One UDP socket beside a TCP listener.
pub(crate) struct QuicSocket {
    socket: UdpSocket,
    state: UdpSocketState,
}

impl QuicSocket {
    /// A UDP socket bound to `address` with SO_REUSEPORT (each worker binds
    /// its own: see the module).
    fn bind(address: SocketAddr) -> io::Result<QuicSocket> {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket = Socket::new(
            Domain::for_address(address),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        if address.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_reuse_address(true)?;
        socket.set_reuse_port(true)?;
        socket.bind(&address.into())?;
        socket.set_nonblocking(true)?;
        let socket: UdpSocket = socket.into();
        let state = UdpSocketState::new(UdpSockRef::from(&socket))?;
        Ok(QuicSocket { socket, state })
    }

    /// The most datagrams one send may carry (1 without GSO): what the
    /// kernel takes, at most `MAX_GSO_SEGMENTS`.
    fn max_segments(&self) -> usize {
        self.state.max_gso_segments().min(MAX_GSO_SEGMENTS)
    }

    fn send(&self, transmit: &rush_h3::Transmit, contents: &[u8]) -> io::Result<()> {
        let transmit = quinn_udp::Transmit {
            destination: transmit.destination,
            ecn: transmit
                .ecn
                .and_then(|ecn| quinn_udp::EcnCodepoint::from_bits(ecn as u8)),
            contents,
            segment_size: transmit.segment_size,
            src_ip: transmit.src_ip,
        };
        self.state.send(UdpSockRef::from(&self.socket), &transmit)
    }
}

/// One datagram read: where it came from and what it carried.
pub(crate) struct Datagram {
    pub(crate) remote: SocketAddr,
    pub(crate) local_ip: Option<std::net::IpAddr>,
    pub(crate) ecn: Option<rush_h3::quinn_proto::EcnCodepoint>,
    pub(crate) range: std::ops::Range<usize>,
}

/// The worker's UDP side (see the module).
pub(crate) struct QuicSide {
    pub(crate) sockets: Vec<QuicSocket>,
    /// The TCP listener each socket stands beside (its index in `--bind`
    /// order: what `ResponseWriter::listener` names).
    pub(crate) listeners: Vec<u16>,
    pub(crate) router: H3Router,
    /// Connections by router handle, and the handle of each slab key.
    pub(crate) keys: HashMap<ConnId, usize>,
    pub(crate) handles: HashMap<usize, (ConnId, usize)>,
    /// Each connection's next QUIC deadline.
    pub(crate) deadlines: Deadlines,
    timer: OwnedFd,
    /// The deadline the timerfd is armed for.
    armed: Option<Instant>,
    pub(crate) receive: Vec<u8>,
    pub(crate) transmit: Vec<u8>,
    /// `Alt-Svc` for TCP responses: `h3=":PORT"; ma=86400`, one entry per port.
    pub(crate) alt_svc: String,
}

impl QuicSide {
    /// UDP sockets beside the TCP listeners at `addresses`, and a router
    /// with the certificates of `tls`.
    pub(crate) fn new(
        addresses: &[(SocketAddr, u16)],
        tls: Arc<rustls::ServerConfig>,
        mut settings: H3Settings,
    ) -> io::Result<QuicSide> {
        let mut sockets = Vec::with_capacity(addresses.len());
        let mut ports: Vec<u16> = Vec::new();
        for &(address, _) in addresses {
            sockets.push(QuicSocket::bind(address).map_err(|error| {
                io::Error::new(
                    error.kind(),
                    format!("--http3: cannot bind UDP {address}: {error}"),
                )
            })?);
            if !ports.contains(&address.port()) {
                ports.push(address.port());
            }
        }
        // What every socket can do: GSO batches of a connection's packets
        // (quinn builds them only when told it may), and path MTU
        // discovery where no socket fragments.
        settings.max_gso_segments = sockets
            .iter()
            .map(QuicSocket::max_segments)
            .min()
            .unwrap_or(1);
        settings.path_mtu_discovery = !sockets.iter().any(|socket| socket.state.may_fragment());
        let router = H3Router::new(tls, settings).map_err(io::Error::other)?;
        // SAFETY: timerfd_create takes no pointer; a negative result is
        // checked before the descriptor is owned.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nothing else owns.
        let timer = unsafe { OwnedFd::from_raw_fd(fd) };
        let alt_svc = ports
            .iter()
            .map(|port| format!("h3=\":{port}\"; ma=86400"))
            .collect::<Vec<_>>()
            .join(", ");
        Ok(QuicSide {
            sockets,
            listeners: addresses.iter().map(|&(_, listener)| listener).collect(),
            router,
            keys: HashMap::new(),
            handles: HashMap::new(),
            deadlines: Deadlines::default(),
            timer,
            armed: None,
            receive: vec![0; RECEIVE_BUFFER],
            transmit: Vec::with_capacity(RECEIVE_BUFFER),
            alt_svc,
        })
    }

    pub(crate) fn register(&mut self, registry: &Registry) -> io::Result<()> {
        for (index, socket) in self.sockets.iter().enumerate() {
            registry.register(
                &mut SourceFd(&socket.socket.as_raw_fd()),
                Token(QUIC_SOCKETS + index),
                Interest::READABLE,
            )?;
        }
        registry.register(
            &mut SourceFd(&self.timer.as_raw_fd()),
            QUIC_TIMER,
            Interest::READABLE,
        )
    }

    /// Reads one batch from socket `index` into the receive buffer:
    /// `Ok(None)` when it has nothing (EAGAIN). GRO batches are split at
    /// their stride into single datagrams.
    pub(crate) fn receive(
        &mut self,
        index: usize,
        datagrams: &mut Vec<Datagram>,
    ) -> io::Result<Option<usize>> {
        datagrams.clear();
        let Some(socket) = self.sockets.get(index) else {
            return Ok(None);
        };
        let mut meta = [RecvMeta::default()];
        let mut buffers = [IoSliceMut::new(&mut self.receive)];
        let count =
            match socket
                .state
                .recv(UdpSockRef::from(&socket.socket), &mut buffers, &mut meta)
            {
                Ok(count) => count,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(error) => return Err(error),
            };
        let mut total = 0;
        for meta in &meta[..count] {
            let stride = meta.stride.max(1);
            let mut start = 0;
            while start < meta.len {
                let end = (start + stride).min(meta.len);
                datagrams.push(Datagram {
                    remote: meta.addr,
                    local_ip: meta.dst_ip,
                    ecn: meta
                        .ecn
                        .and_then(|ecn| rush_h3::quinn_proto::EcnCodepoint::from_bits(ecn as u8)),
                    range: start..end,
                });
                start = end;
            }
            total += meta.len;
        }
        Ok(Some(total))
    }

    /// Sends the router's own datagrams (Retry, refusals, stateless
    /// resets) from socket `index`.
    pub(crate) fn send_router_datagrams(&mut self, index: usize) {
        let Some(socket) = self.sockets.get(index) else {
            return;
        };
        while let Some(transmit) = self.router.poll_transmit(&mut self.transmit) {
            let _ = socket.send(&transmit, &self.transmit[..transmit.size]);
        }
    }

    /// Sends what `conn` has to send (GSO batches where the socket takes
    /// them) from its socket.
    pub(crate) fn send_connection(
        &mut self,
        socket: usize,
        conn: &mut rush_h3::H3Conn,
        now: Instant,
    ) {
        let Some(socket) = self.sockets.get(socket) else {
            return;
        };
        let segments = socket.max_segments();
        while let Some(transmit) = conn.poll_transmit(now, &mut self.transmit, segments) {
            // A full send buffer drops the datagram; QUIC's loss recovery
            // sends it again, as it would after a loss on the path.
            let _ = socket.send(&transmit, &self.transmit[..transmit.size]);
        }
    }

    /// Arms the timerfd for the earliest deadline, unless it is armed for
    /// that or earlier already: a timer that fires early finds nothing due
    /// and is armed again, which costs less than a `timerfd_settime` each
    /// time a connection's deadline moves later (each acknowledgement).
    pub(crate) fn arm_timer(&mut self, now: Instant) {
        let Some(next) = self.deadlines.earliest() else {
            return;
        };
        if self.armed.is_some_and(|armed| armed <= next) {
            return;
        }
        self.armed = Some(next);
        // At least a nanosecond: zero would disarm the timer.
        let value = next
            .saturating_duration_since(now)
            .max(std::time::Duration::from_nanos(1));
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: value.as_secs() as libc::time_t,
                tv_nsec: value.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: the timer descriptor is owned by `self`; `spec` is a live
        // local the call only reads, and the old value is not asked for.
        unsafe {
            libc::timerfd_settime(self.timer.as_raw_fd(), 0, &spec, std::ptr::null_mut());
        }
    }

    /// Reads the timerfd's expiry count, so epoll reports it again only
    /// when it fires again.
    pub(crate) fn clear_timer(&mut self) {
        self.armed = None;
        let mut expirations = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a live local buffer of 8 bytes
        // from the descriptor `self` owns (non-blocking: EAGAIN is fine).
        unsafe {
            libc::read(
                self.timer.as_raw_fd(),
                expirations.as_mut_ptr().cast(),
                expirations.len(),
            );
        }
    }

    /// Forgets connection `key`, closed by the worker before QUIC drained
    /// it (a drained one is taken off the maps by `AppServer::quic_after`).
    pub(crate) fn forget(&mut self, key: usize) {
        self.deadlines.set(key, None);
        if let Some((handle, _)) = self.handles.remove(&key) {
            self.keys.remove(&handle);
            self.router.forget(handle);
        }
    }
}

/// The connections' next QUIC deadlines, earliest first.
#[derive(Default)]
pub(crate) struct Deadlines {
    ordered: BTreeSet<(Instant, usize)>,
    of: HashMap<usize, Instant>,
}

impl Deadlines {
    /// Sets connection `key`'s next deadline (none: it has no timer).
    pub(crate) fn set(&mut self, key: usize, deadline: Option<Instant>) {
        let old = self.of.get(&key).copied();
        if old == deadline {
            return;
        }
        if let Some(old) = old {
            self.ordered.remove(&(old, key));
            self.of.remove(&key);
        }
        if let Some(deadline) = deadline {
            self.ordered.insert((deadline, key));
            self.of.insert(key, deadline);
        }
    }

    pub(crate) fn earliest(&self) -> Option<Instant> {
        self.ordered.first().map(|&(deadline, _)| deadline)
    }

    /// The connections whose deadline is at or before `now`, taken off.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<usize> {
        let mut due = Vec::new();
        while let Some(&(deadline, key)) = self.ordered.first() {
            if deadline > now {
                break;
            }
            self.ordered.pop_first();
            self.of.remove(&key);
            due.push(key);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn deadlines_come_due_in_order_and_a_moved_one_only_once() {
        let start = Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let mut deadlines = Deadlines::default();
        deadlines.set(1, Some(at(30)));
        deadlines.set(2, Some(at(10)));
        deadlines.set(3, Some(at(20)));
        // Moved later: its old place is gone.
        deadlines.set(2, Some(at(40)));
        deadlines.set(3, None);
        assert_eq!(deadlines.earliest(), Some(at(30)));
        assert_eq!(deadlines.due(at(35)), vec![1]);
        assert_eq!(deadlines.due(at(35)), Vec::<usize>::new());
        assert_eq!(deadlines.due(at(40)), vec![2]);
        assert_eq!(deadlines.earliest(), None);
    }
}
