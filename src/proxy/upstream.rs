//! The upstream side of a proxy connection: from the resolver's answer to
//! a connected origin, then the tunnel's relay or the forwarded exchange,
//! and the access log line when a request ends.
//!
//! The address check happens here, on the resolved IP, and the connection
//! goes to exactly that IP (a second lookup cannot redirect it: no DNS
//! rebinding gap). Connects are non-blocking: `connect` returns at once
//! (EINPROGRESS), and the socket's first writability, checked with
//! `SO_ERROR` and `getpeername`, tells whether it succeeded.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};

use mio::net::TcpStream;
use mio::Interest;

use super::conn::{upstream_token, Close, Pending, Phase, ProxyConn, Step, Tunnel, Upstream};
use super::forward::{Io, Outcome};
use super::input_hint::InputHint;
use super::policy::Refusal;
use super::relay::Direction;
use super::Worker;

impl Worker {
    /// The resolver answered for this connection.
    pub(crate) fn resolved(
        &mut self,
        conn: &mut ProxyConn,
        key: usize,
        result: Result<Vec<IpAddr>, String>,
    ) -> Step {
        let Phase::Resolving(pending) = std::mem::replace(&mut conn.phase, Phase::Idle) else {
            return Ok(false);
        };
        match result {
            Ok(addresses) => self.connect(conn, key, pending, &addresses),
            Err(_) => self.fail(conn, 502, "the target's name does not resolve"),
        }
    }

    /// Connects to the first allowed address (or takes a pooled connection to it).
    pub(crate) fn connect(
        &mut self,
        conn: &mut ProxyConn,
        key: usize,
        mut pending: Pending,
        addresses: &[IpAddr],
    ) -> Step {
        let Some(&ip) = addresses.iter().find(|&&ip| self.policy.allows_address(ip)) else {
            return self.fail(conn, 403, Refusal::Private.message());
        };
        // The check above was on this exact address, and the connection goes
        // to it: no second lookup can send it elsewhere (DNS rebinding).
        let address = SocketAddr::new(ip, pending.port);
        conn.deadline = self.now + self.config.upstream_timeout;
        if let Some(exchange) = pending.exchange.take() {
            // Pooled sockets stay registered under their own token: taking
            // one is no syscall (pool.rs), and no peek unless an event came
            // for it or the request could not be sent again.
            let check = !exchange.can_replay();
            if let Some(stream) = self.origins.take(address, key, check) {
                conn.upstream = Some(Upstream {
                    stream,
                    address,
                    reused: true,
                    input: InputHint::default(),
                });
                conn.phase = Phase::Forward(exchange);
                return Ok(true);
            }
            pending.exchange = Some(exchange);
        }
        self.connect_fresh(conn, key, pending, address)
    }

    pub(crate) fn step_connecting(&mut self, conn: &mut ProxyConn) -> Step {
        let Some(upstream) = &conn.upstream else {
            return Err(Close);
        };
        match upstream.stream.take_error() {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => {
                return self.fail(conn, 502, "the target refused the connection")
            }
        }
        match upstream.stream.peer_addr() {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotConnected => return Ok(false),
            Err(_) => return self.fail(conn, 502, "the target refused the connection"),
        }
        let Phase::Connecting(pending) = std::mem::replace(&mut conn.phase, Phase::Idle) else {
            unreachable!("step_connecting runs in the Connecting phase");
        };
        match pending.exchange {
            Some(exchange) => conn.phase = Phase::Forward(exchange),
            None => {
                if let Some(record) = &mut conn.record {
                    record.status = 200;
                }
                conn.output
                    .extend_from_slice(b"HTTP/1.1 200 Connection established\r\n\r\n");
                conn.phase = Phase::Tunnel(Box::new(Tunnel {
                    early: std::mem::take(&mut conn.input),
                    up: Direction::default(),
                    down: Direction::default(),
                }));
                conn.deadline = self.now + self.config.tunnel_idle_timeout;
            }
        }
        Ok(true)
    }

    pub(crate) fn step_tunnel(&mut self, conn: &mut ProxyConn) -> Step {
        let Phase::Tunnel(tunnel) = &mut conn.phase else {
            return Err(Close);
        };
        let upstream = &mut conn.upstream.as_mut().ok_or(Close)?.stream;
        let mut progress = false;
        // The 200 goes out before any origin byte; early client bytes go in before spliced ones.
        while !conn.output.is_empty() {
            match conn.client.write(&conn.output) {
                Ok(written) => {
                    conn.output.drain(..written);
                    progress = true;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Close),
            }
        }
        while !tunnel.early.is_empty() {
            match upstream.write(&tunnel.early) {
                Ok(written) => {
                    tunnel.early.drain(..written);
                    tunnel.up.bytes += written as u64;
                    progress = true;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Close),
            }
        }
        // An idle tunnel holds no buffer: once the head's bytes and the 200 are gone, free them.
        if tunnel.early.is_empty() && tunnel.early.capacity() > 0 {
            tunnel.early = Vec::new();
        }
        if conn.output.is_empty() && conn.output.capacity() > 0 {
            conn.output = Vec::new();
        }
        if tunnel.early.is_empty() && !tunnel.up.finished {
            progress |= tunnel
                .up
                .pump(&conn.client, upstream, &mut self.pipes)
                .map_err(|_| Close)?;
        }
        if conn.output.is_empty() && !tunnel.down.finished {
            progress |= tunnel
                .down
                .pump(upstream, &conn.client, &mut self.pipes)
                .map_err(|_| Close)?;
        }
        if progress {
            conn.deadline = self.now + self.config.tunnel_idle_timeout;
        }
        if tunnel.up.finished && tunnel.down.finished {
            return Err(Close);
        }
        Ok(progress)
    }

    pub(crate) fn step_forward(&mut self, conn: &mut ProxyConn, key: usize) -> Step {
        let Phase::Forward(exchange) = &mut conn.phase else {
            return Err(Close);
        };
        let upstream = conn.upstream.as_mut().ok_or(Close)?;
        let mut io = Io {
            client: &mut conn.client,
            upstream: &mut upstream.stream,
            input: &mut conn.input,
            output: &mut conn.output,
            client_eof: &mut conn.client_eof,
            client_input: &mut conn.client_input,
            upstream_input: &mut upstream.input,
            scratch: &mut self.scratch,
            headers: &mut self.headers,
            via: &self.via,
        };
        let outcome = exchange.step(&mut io);
        if let Some(record) = &mut conn.record {
            record.status = exchange.status;
        }
        match outcome {
            Outcome::Progress(progress) => {
                if progress {
                    conn.deadline = self.now + self.config.upstream_timeout;
                }
                Ok(progress)
            }
            Outcome::Finished { reuse_origin } => {
                let keep_alive = exchange.client_keep_alive && !self.draining;
                if let Some(upstream) = conn.upstream.take() {
                    if reuse_origin {
                        let quiet = upstream.input.is_quiet();
                        self.origins
                            .put(upstream.address, upstream.stream, self.now, quiet);
                    }
                }
                self.log_record(conn);
                if keep_alive {
                    conn.phase = Phase::Idle;
                    conn.deadline = self.now
                        + if conn.output.is_empty() {
                            self.config.keep_alive_timeout
                        } else {
                            self.config.send_timeout
                        };
                } else {
                    conn.phase = Phase::Closing;
                    conn.deadline = self.now + self.config.send_timeout;
                }
                Ok(true)
            }
            Outcome::Retry if upstream.reused => {
                exchange.restart();
                let address = upstream.address;
                conn.upstream = None;
                let Phase::Forward(exchange) = std::mem::replace(&mut conn.phase, Phase::Idle)
                else {
                    unreachable!()
                };
                let pending = Pending {
                    host: String::new(),
                    port: address.port(),
                    exchange: Some(exchange),
                };
                // Not from the pool this time: a fresh connection.
                self.connect_fresh(conn, key, pending, address)
            }
            Outcome::Retry => self.fail(
                conn,
                502,
                "the origin closed the connection without answering",
            ),
            Outcome::Failed(status, message) => self.fail(conn, status, message),
            Outcome::Abort => Err(Close),
        }
    }

    fn connect_fresh(
        &mut self,
        conn: &mut ProxyConn,
        key: usize,
        pending: Pending,
        address: SocketAddr,
    ) -> Step {
        let mut stream = match TcpStream::connect(address) {
            Ok(stream) => stream,
            Err(_) => return self.fail(conn, 502, "cannot connect to the target"),
        };
        let _ = stream.set_nodelay(true);
        let token = upstream_token(&stream);
        if self
            .registry
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            return self.fail(conn, 502, "cannot connect to the target");
        }
        self.origins.adopt(&stream, key);
        conn.upstream = Some(Upstream {
            stream,
            address,
            reused: false,
            input: InputHint::default(),
        });
        conn.phase = Phase::Connecting(pending);
        Ok(true)
    }

    /// Queues the access log line of the current request, if any: the
    /// bytes each way come from the tunnel or exchange still in `phase`.
    pub(crate) fn log_record(&mut self, conn: &mut ProxyConn) {
        let Some(record) = conn.record.take() else {
            return;
        };
        if !self.log_access {
            return;
        }
        let (up, down) = conn.phase.bytes();
        let milliseconds = self.now.saturating_duration_since(record.start).as_millis();
        self.log_lines.push(format!(
            "{} \"{}\" {} {} {} {}ms",
            conn.peer.ip(),
            record.request,
            record.status,
            up.max(record.up),
            down.max(record.down),
            milliseconds
        ));
    }
}
