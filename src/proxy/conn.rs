//! One proxy client connection and the phases it goes through.
//!
//! A connection is the client socket, at most one upstream socket, and a
//! [`Phase`]:
//!
//! ```text
//! Idle ──head──> Resolving ──answer──> Connecting ──connected──> Tunnel (CONNECT)
//!   ^ └─(bcrypt credentials not cached)─> Authorizing ─verdict─┘ (the head is decided again)
//!   ^                 └──(cached / pooled)──────────────────────> Forward (http://)
//!   └──────────── exchange finished, client keeps alive ───────────┘
//! any refusal or failure ──> Closing (an error response is flushed, then close)
//! ```
//!
//! Every decision about a request (its target, the head for the origin,
//! the access rules) is a pure function (`rush_proto::proxy`, `policy.rs`);
//! this module asks them and moves the connection on; the upstream side
//! (connecting, the tunnel, the forwarded exchange) is in `upstream.rs`.
//! [`Worker::drive`]
//! repeats the current phase's step until nothing moves, which is what
//! edge-triggered epoll needs: every socket is read or written until it
//! says EAGAIN, or until a buffer bound pauses it and the other side's
//! progress resumes it.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Instant;

use mio::net::TcpStream;
use mio::Token;
use pyo3::prelude::*;
use rush_proto::proxy::{
    is_forwarding_loop, proxy_target, write_forward_head, ParsedHead, ProxyTarget,
};
use rush_proto::{parse_proxy_request_head, HeadStatus, ProtoError, RequestHead};

use super::auth::CredentialDigest;
use super::forward::Exchange;
use super::input_hint::{read_if_readable, InputHint};
use super::policy::{AuthCheck, Refusal};
use super::relay::Direction;
use super::Worker;

/// Whether a connection survives a drive.
#[derive(PartialEq, Eq)]
pub(crate) enum Disposition {
    Open,
    Close,
}

/// What a connection waits for.
pub(crate) enum Phase {
    /// The next request head (the first, or the next on a keep-alive connection).
    Idle,
    /// The verdict on the head's credentials from the password threads
    /// (`auth.rs`); the head stays in `input` and is decided again then.
    Authorizing,
    /// The resolver's answer for `Pending`'s host.
    Resolving(Pending),
    /// A non-blocking connect to the origin.
    Connecting(Pending),
    /// A CONNECT tunnel.
    Tunnel(Box<Tunnel>),
    /// A forwarded request.
    Forward(Box<Exchange>),
    /// Flushing a final answer; closed once written.
    Closing,
}

impl Phase {
    /// Bytes each way for the access log: (client to origin, origin to client).
    pub(crate) fn bytes(&self) -> (u64, u64) {
        match self {
            Phase::Tunnel(tunnel) => (tunnel.up.bytes, tunnel.down.bytes),
            Phase::Forward(exchange) => (exchange.up_bytes, exchange.down_bytes),
            _ => (0, 0),
        }
    }
}

/// A request whose origin connection is not ready yet.
pub(crate) struct Pending {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) exchange: Option<Box<Exchange>>,
}

/// A tunnel: bytes the client sent after its CONNECT head (written to the
/// origin first, with `write`), then a splice relay each way.
pub(crate) struct Tunnel {
    pub(crate) early: Vec<u8>,
    pub(crate) up: Direction,
    pub(crate) down: Direction,
}

/// What the access log line of the current request says (kept only
/// while access logging is on: otherwise nothing is formatted).
pub(crate) struct Record {
    pub(crate) start: Instant,
    pub(crate) request: String,
    pub(crate) status: u16,
    /// Bytes each way, saved when the phase that counted them ends early.
    pub(crate) up: u64,
    pub(crate) down: u64,
}

/// The upstream socket and the address it goes to (the pool's key).
pub(crate) struct Upstream {
    pub(crate) stream: TcpStream,
    pub(crate) address: SocketAddr,
    pub(crate) reused: bool,
    /// What epoll said about its input (see [`read_if_readable`]). Nothing
    /// when the socket is put in place: registering a new socket with epoll
    /// reports bytes already there, and a pooled one holds none (`pool.rs`),
    /// so the first read waits for an event instead of meeting EAGAIN right
    /// after the request went out.
    pub(crate) input: InputHint,
}

pub(crate) struct ProxyConn {
    pub(crate) client: TcpStream,
    pub(crate) peer: SocketAddr,
    /// Client bytes not consumed yet (a partial head, body bytes, pipelined requests).
    pub(crate) input: Vec<u8>,
    /// Bytes owed to the client.
    pub(crate) output: Vec<u8>,
    pub(crate) upstream: Option<Upstream>,
    pub(crate) phase: Phase,
    /// When the current phase's timer runs out (checked by the sweep).
    pub(crate) deadline: Instant,
    /// Tells a resolver answer for this connection from one for an earlier
    /// user of the same slab key.
    pub(crate) serial: u64,
    pub(crate) client_eof: bool,
    /// What epoll said about the client's input (see [`read_if_readable`]).
    pub(crate) client_input: InputHint,
    pub(crate) record: Option<Record>,
    /// The password threads' verdict on the current head's credentials,
    /// until that head is decided.
    pub(crate) auth_verdict: Option<(CredentialDigest, bool)>,
}

/// What the access rules say about a request head.
enum Decision {
    Allow,
    Refuse(Refusal),
    /// Its credentials are being checked off the loop.
    AwaitVerdict,
}

/// The end of a step: the connection must close now.
pub(crate) struct Close;

pub(crate) type Step = Result<bool, Close>;

pub(crate) fn client_token(key: usize) -> Token {
    Token(super::FIRST_CONNECTION + 2 * key)
}

/// An upstream socket's token names the socket (its descriptor), not its
/// user, so a pooled socket changes hands without an `epoll_ctl` (`pool.rs`).
pub(crate) fn upstream_token(stream: &TcpStream) -> Token {
    Token(super::FIRST_CONNECTION + 2 * stream.as_raw_fd() as usize + 1)
}

impl ProxyConn {
    pub(crate) fn new(client: TcpStream, peer: SocketAddr, serial: u64, deadline: Instant) -> Self {
        ProxyConn {
            client,
            peer,
            input: Vec::new(),
            output: Vec::new(),
            upstream: None,
            phase: Phase::Idle,
            deadline,
            serial,
            client_eof: false,
            client_input: InputHint::waiting(),
            record: None,
            auth_verdict: None,
        }
    }

    /// Idle between requests with nothing buffered: safe to close at shutdown.
    pub(crate) fn is_idle(&self) -> bool {
        matches!(self.phase, Phase::Idle) && self.input.is_empty() && self.output.is_empty()
    }

    /// Writes the output until done or EAGAIN; returns whether bytes moved.
    pub(crate) fn flush(&mut self) -> Step {
        let mut progress = false;
        while !self.output.is_empty() {
            match self.client.write(&self.output) {
                Ok(written) => {
                    self.output.drain(..written);
                    progress = true;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(Close),
            }
        }
        Ok(progress)
    }

    /// Reads client bytes into `input`; returns whether anything arrived (or EOF).
    fn read_client(&mut self, scratch: &mut [u8]) -> Step {
        if self.client_eof {
            return Ok(false);
        }
        match read_if_readable(&mut self.client, &mut self.client_input, scratch) {
            Ok(0) => {
                self.client_eof = true;
                Ok(true)
            }
            Ok(read) => {
                self.input.extend_from_slice(&scratch[..read]);
                Ok(true)
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(_) => Err(Close),
        }
    }
}

/// A short plain-text answer from the proxy itself, after which the connection closes.
pub(crate) fn write_error(output: &mut Vec<u8>, status: u16, message: &str) {
    let reason = rush_proto::response::reason_phrase(status);
    let body = format!("{status} {reason}: {message}\n");
    let authenticate = if status == 407 {
        "Proxy-Authenticate: Basic realm=\"rush proxy\"\r\n"
    } else {
        ""
    };
    output.extend_from_slice(
        format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
             {authenticate}Connection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

impl Worker {
    /// Moves the connection on as far as it goes now.
    pub(crate) fn drive(
        &mut self,
        py: Python<'_>,
        conn: &mut ProxyConn,
        key: usize,
    ) -> Disposition {
        loop {
            let step = match conn.phase {
                Phase::Idle => self.step_idle(py, conn, key),
                Phase::Resolving(_) | Phase::Authorizing => Ok(false),
                Phase::Connecting(_) => self.step_connecting(conn),
                Phase::Tunnel(_) => self.step_tunnel(conn),
                Phase::Forward(_) => self.step_forward(conn, key),
                Phase::Closing => match conn.flush() {
                    Ok(_) if conn.output.is_empty() => Err(Close),
                    other => other,
                },
            };
            match step {
                Ok(true) => {}
                Ok(false) => return Disposition::Open,
                Err(Close) => {
                    self.log_record(conn);
                    return Disposition::Close;
                }
            }
        }
    }

    /// Ends the current request with an error answer from the proxy.
    pub(crate) fn fail(&mut self, conn: &mut ProxyConn, status: u16, message: &str) -> Step {
        let (up, down) = conn.phase.bytes();
        if let Some(record) = &mut conn.record {
            record.status = status;
            record.up = up;
            record.down = down;
        }
        conn.upstream = None;
        write_error(&mut conn.output, status, message);
        conn.phase = Phase::Closing;
        conn.deadline = self.now + self.config.send_timeout;
        Ok(true)
    }

    fn step_idle(&mut self, py: Python<'_>, conn: &mut ProxyConn, key: usize) -> Step {
        // Answers go out in order: the next request waits for the last answer.
        let flushed = conn.flush()?;
        if !conn.output.is_empty() {
            // A slow reader of the last answer has the send timeout, renewed by progress.
            if flushed {
                conn.deadline = self.now + self.config.send_timeout;
            }
            return Ok(flushed);
        }
        if flushed {
            conn.deadline = self.now + self.config.keep_alive_timeout;
        }
        if !conn.input.is_empty() {
            match parse_proxy_request_head(&conn.input, &self.config.limits, &mut self.headers) {
                Ok(HeadStatus::Complete(head)) => return self.start_request(py, conn, key, head),
                Ok(HeadStatus::Partial) => {}
                Err(error) => {
                    // Not even a request line to log: the record says "-".
                    if self.log_access {
                        conn.record = Some(Record {
                            start: self.now,
                            request: "-".into(),
                            status: 0,
                            up: 0,
                            down: 0,
                        });
                    }
                    return self.refuse(conn, &error);
                }
            }
        }
        let was_empty = conn.input.is_empty();
        let read = conn.read_client(&mut self.scratch)?;
        if conn.client_eof && (conn.input.is_empty() || !read) {
            return Err(Close);
        }
        // Draining: an idle client is let go, but only once nothing it sent
        // is left unread (a request that just arrived is answered, with
        // `Connection: close`, instead of failed).
        if self.draining && conn.input.is_empty() {
            return Err(Close);
        }
        if read && was_empty && !conn.input.is_empty() {
            // The first bytes of a head: the header timeout starts.
            conn.deadline = self.now + self.config.header_timeout;
        }
        Ok(read)
    }

    /// A request the parser or the target check refused: its status, a one-line reason, closed.
    fn refuse(&mut self, conn: &mut ProxyConn, error: &ProtoError) -> Step {
        let message = match error {
            ProtoError::BadRequest(message) | ProtoError::NotImplemented(message) => message,
            _ => "the request head was refused",
        };
        self.fail(conn, error.status(), message)
    }

    /// A complete head: decide, then resolve (or refuse).
    fn start_request(
        &mut self,
        py: Python<'_>,
        conn: &mut ProxyConn,
        key: usize,
        head: RequestHead,
    ) -> Step {
        let buffer = &conn.input;
        // The record is for the access log only: without one, no line to format.
        if self.log_access {
            let request = format!(
                "{} {}",
                String::from_utf8_lossy(head.method_span.of(buffer)),
                String::from_utf8_lossy(head.target.of(buffer))
            );
            conn.record = Some(Record {
                start: self.now,
                request,
                status: 0,
                up: 0,
                down: 0,
            });
        }
        let (host, port, forward) = match proxy_target(buffer, &head) {
            Ok(ProxyTarget::Tunnel { host, port }) => (host, port, None),
            Ok(ProxyTarget::Forward {
                host,
                port,
                authority,
                origin_form,
            }) => (host, port, Some((authority, origin_form))),
            Err(error) => return self.refuse(conn, &error),
        };
        let tunnel = forward.is_none();
        match self.check_policy(py, conn, key, &host, port, tunnel) {
            Decision::Allow => {}
            Decision::Refuse(refusal) => {
                return self.fail(conn, refusal.status(), refusal.message())
            }
            Decision::AwaitVerdict => {
                conn.phase = Phase::Authorizing;
                conn.deadline = self.now + self.config.header_timeout;
                return Ok(false);
            }
        }
        self.count_request(&conn.input[..head.head_len]);
        let buffer = &conn.input;
        let exchange = match forward {
            None => None,
            Some((authority, origin_form)) => {
                let mut out = Vec::with_capacity(head.head_len + 64);
                let request = ParsedHead {
                    buffer,
                    head: &head,
                    headers: &self.headers,
                };
                write_forward_head(
                    &mut out,
                    request,
                    authority.as_bytes(),
                    &origin_form,
                    &self.via,
                );
                let keep_alive = head.keep_alive && !self.draining && !conn.client_eof;
                Some(Box::new(Exchange::new(
                    head.method,
                    out,
                    head.framing,
                    &self.config.limits,
                    keep_alive,
                    head.version == rush_proto::Version::Http10,
                )))
            }
        };
        conn.input.drain(..head.head_len);
        conn.serial = self.next_serial();
        let pending = Pending {
            host,
            port,
            exchange,
        };
        conn.deadline = self.now + self.config.dns_timeout;
        // An IP literal is its own answer (without the resolver's Vec).
        if let Ok(ip) = pending.host.parse::<IpAddr>() {
            return self.connect(conn, key, pending, &[ip]);
        }
        match self.resolver.cached(&pending.host, self.now) {
            Some(addresses) => self.connect(conn, key, pending, &addresses),
            None => {
                self.resolver.submit(key, conn.serial, &pending.host);
                conn.phase = Phase::Resolving(pending);
                Ok(false)
            }
        }
    }

    /// The access rules, in the order squid applies them.
    fn check_policy(
        &mut self,
        py: Python<'_>,
        conn: &mut ProxyConn,
        key: usize,
        host: &str,
        port: u16,
        tunnel: bool,
    ) -> Decision {
        if !self.policy.allows_client(conn.peer.ip()) {
            return Decision::Refuse(Refusal::Client);
        }
        let buffer = &conn.input;
        if is_forwarding_loop(buffer, &self.headers, &self.via) {
            return Decision::Refuse(Refusal::Loop);
        }
        let authorization = self
            .headers
            .iter()
            .find(|header| {
                header
                    .name
                    .of(buffer)
                    .eq_ignore_ascii_case(b"proxy-authorization")
            })
            .map(|header| header.value.of(buffer));
        // A verdict is for the head it was asked for only.
        let verdict = conn.auth_verdict.take();
        match self.policy.check_credentials(authorization) {
            AuthCheck::Allowed => {}
            AuthCheck::Refused => return Decision::Refuse(Refusal::Auth),
            AuthCheck::Verify(check) => {
                let known = verdict.filter(|(digest, _)| *digest == check.digest);
                match known {
                    Some((_, true)) => {}
                    Some((_, false)) => return Decision::Refuse(Refusal::Auth),
                    None if self.verifier.is_verified(&check.digest, self.now) => {}
                    None if !self.verifier.has_room() => {
                        return Decision::Refuse(Refusal::AuthBusy)
                    }
                    None => {
                        conn.serial = self.next_serial();
                        self.verifier.submit(key, conn.serial, check);
                        return Decision::AwaitVerdict;
                    }
                }
            }
        }
        if tunnel && !self.policy.allows_connect_port(port) {
            return Decision::Refuse(Refusal::Port);
        }
        if !tunnel && !self.policy.allows_forward_port(port) {
            return Decision::Refuse(Refusal::ForwardPort);
        }
        let buffer = &conn.input;
        let Some(hook) = self.hook.as_ref() else {
            return Decision::Allow;
        };
        let headers: Vec<(String, String)> = self
            .headers
            .iter()
            .map(|header| {
                (
                    String::from_utf8_lossy(header.name.of(buffer)).into_owned(),
                    String::from_utf8_lossy(header.value.of(buffer)).into_owned(),
                )
            })
            .collect();
        let client = (conn.peer.ip().to_string(), conn.peer.port());
        match hook
            .call1(py, (client, host, port, headers))
            .and_then(|answer| answer.is_truthy(py))
        {
            Ok(true) => Decision::Allow,
            Ok(false) => Decision::Refuse(Refusal::Hook),
            Err(error) => {
                // A failing policy refuses: a proxy must fail closed.
                self.log_error(
                    py,
                    "the proxy policy hook raised; refusing the request",
                    Some(error),
                );
                Decision::Refuse(Refusal::Hook)
            }
        }
    }
}
