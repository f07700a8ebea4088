//! ws-load: the WebSocket load generator of the benchmark suite's `websocket` group.
//!
//! ```text
//! ws-load --url ws://127.0.0.1:PORT/echo --mode echo --connections 100 --size 20 --duration 10 --warmup 2
//! ws-load --url ws://127.0.0.1:PORT/broadcast --mode broadcast --connections 16 --size 20 --duration 10
//! ```
//!
//! One thread, one epoll loop over every connection (tungstenite over non-blocking sockets; the
//! handshakes are done first, blocking): no thread switch per message, so the one core the suite
//! pins it to goes to reading, checking and writing.
//!
//! * **echo**: each connection sends a binary message of `--size` bytes and waits for its echo,
//!   again and again. Every echo is compared byte for byte with what was sent (the payload carries
//!   the connection's number and the message's sequence number, so a stale or misrouted echo is
//!   wrong too).
//! * **broadcast**: all `--connections` join the endpoint's group; connection 0 also sends. Each
//!   message the sender sends must reach every member (the sender's own copy included), in order,
//!   with the right bytes. At most `--window` messages are on their way to some member. Before the warm-up, the sender sends probes until every member has received one (the
//!   server may add a member to its group after the handshake is answered); from then on a gap in
//!   a member's sequence is a missed delivery. "messages" counts deliveries (messages x members).
//!
//! The warm-up runs the same load uncounted, then `--duration` seconds are counted. A report is
//! printed as one JSON object on stdout: messages, messages per second, latency percentiles (echo:
//! the round trip; broadcast: from the send until the last member has the message) and the
//! errors. Any error (wrong bytes, missed deliveries, a closed connection, a timeout) makes
//! `messages_per_second` null and the exit status 1: a throughput is never reported for answers
//! that were wrong. Bounded: a message unanswered (or a broadcast without progress) for
//! `--timeout` seconds is a timeout and ends that connection (the run), and no more than
//! `--max-messages` messages (broadcasts) are counted.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use tungstenite::protocol::WebSocket;
use tungstenite::{Bytes, Error, Message};

const RING: usize = 4096;
const BUCKETS: usize = 2048;

#[derive(Clone)]
struct Options {
    url: String,
    address: String,
    broadcast: bool,
    connections: usize,
    size: usize,
    duration: Duration,
    warmup: Duration,
    window: u64,
    timeout: Duration,
    max_messages: u64,
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "{problem}\nusage: ws-load --url ws://HOST:PORT/PATH [--mode echo|broadcast] [--connections N] \
         [--size BYTES] [--duration S] [--warmup S] [--window N] [--timeout S] [--max-messages N]"
    );
    std::process::exit(2)
}

fn seconds(value: &str, flag: &str) -> Duration {
    let parsed: f64 = value
        .parse()
        .unwrap_or_else(|_| usage(&format!("{flag} takes seconds")));
    if !(0.0..=3600.0).contains(&parsed) {
        usage(&format!("{flag} must be between 0 and 3600 seconds"));
    }
    Duration::from_secs_f64(parsed)
}

fn number(value: &str, flag: &str) -> u64 {
    value
        .parse()
        .unwrap_or_else(|_| usage(&format!("{flag} takes a number")))
}

fn options() -> Options {
    let mut options = Options {
        url: String::new(),
        address: String::new(),
        broadcast: false,
        connections: 100,
        size: 20,
        duration: Duration::from_secs(10),
        warmup: Duration::from_secs(2),
        window: 8,
        timeout: Duration::from_secs(5),
        max_messages: 1_000_000_000,
    };
    let mut arguments = std::env::args().skip(1);
    while let Some(flag) = arguments.next() {
        let value = arguments
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--url" => options.url = value,
            "--mode" => {
                options.broadcast = match value.as_str() {
                    "echo" => false,
                    "broadcast" => true,
                    _ => usage("--mode is echo or broadcast"),
                }
            }
            "--connections" => options.connections = number(&value, &flag) as usize,
            "--size" => options.size = number(&value, &flag) as usize,
            "--duration" => options.duration = seconds(&value, &flag),
            "--warmup" => options.warmup = seconds(&value, &flag),
            "--window" => options.window = number(&value, &flag),
            "--timeout" => options.timeout = seconds(&value, &flag),
            "--max-messages" => options.max_messages = number(&value, &flag),
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    let rest = options
        .url
        .strip_prefix("ws://")
        .unwrap_or_else(|| usage("--url must start with ws://"));
    options.address = rest.split('/').next().unwrap_or_default().to_string();
    if !(1..=20_000).contains(&options.connections) {
        usage("--connections must be between 1 and 20000");
    }
    if !(12..=16 * 1024 * 1024).contains(&options.size) {
        usage("--size must be between 12 bytes (the sequence and connection numbers) and 16 MiB");
    }
    if !(1..RING as u64 / 2).contains(&options.window) {
        usage("--window must be between 1 and 2047");
    }
    options
}

/// The payload of message `sequence` of connection `connection`: the sequence number (8 bytes,
/// little-endian), the connection number (4 bytes), then bytes that depend on both.
fn fill(buffer: &mut [u8], connection: u32, sequence: u64) {
    buffer[..8].copy_from_slice(&sequence.to_le_bytes());
    buffer[8..12].copy_from_slice(&connection.to_le_bytes());
    let seed = (sequence as u32).wrapping_mul(2_654_435_761) ^ connection;
    for (index, byte) in buffer[12..].iter_mut().enumerate() {
        *byte = (seed.wrapping_add(index as u32 * 31) % 251) as u8;
    }
}

fn same_bytes(received: &[u8], expected: &[u8]) -> bool {
    received == expected
}

/// Latency histogram in microseconds: exact below 128 µs, then 64 buckets per power of two.
struct Histogram {
    counts: Vec<u64>,
    max_us: u64,
}

impl Histogram {
    fn new() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            max_us: 0,
        }
    }

    fn index(value: u64) -> usize {
        if value < 128 {
            return value as usize;
        }
        let exponent = 63 - value.leading_zeros() as u64;
        let sub = (value >> (exponent - 6)) & 63;
        ((128 + (exponent - 7) * 64 + sub) as usize).min(BUCKETS - 1)
    }

    fn lower_bound(index: usize) -> u64 {
        if index < 128 {
            return index as u64;
        }
        let exponent = (index as u64 - 128) / 64 + 7;
        let sub = (index as u64 - 128) % 64;
        (64 + sub) << (exponent - 6)
    }

    fn record(&mut self, elapsed: Duration) {
        let value = elapsed.as_micros() as u64;
        self.counts[Self::index(value)] += 1;
        self.max_us = self.max_us.max(value);
    }

    fn percentile_ms(&self, fraction: f64) -> f64 {
        let total: u64 = self.counts.iter().sum();
        if total == 0 {
            return 0.0;
        }
        let rank = ((fraction * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Self::lower_bound(index) as f64 / 1000.0;
            }
        }
        self.max_us as f64 / 1000.0
    }
}

#[derive(Default)]
struct Errors {
    connect: u64,
    wrong: u64,
    missed: u64,
    closed: u64,
    read: u64,
    write: u64,
    timeout: u64,
}

impl Errors {
    fn total(&self) -> u64 {
        self.connect
            + self.wrong
            + self.missed
            + self.closed
            + self.read
            + self.write
            + self.timeout
    }
}

type Socket = WebSocket<TcpStream>;

fn connect(options: &Options) -> Result<Socket, String> {
    let stream = TcpStream::connect(&options.address).map_err(|error| error.to_string())?;
    stream
        .set_nodelay(true)
        .map_err(|error| error.to_string())?;
    stream
        .set_read_timeout(Some(options.timeout))
        .map_err(|error| error.to_string())?;
    let (socket, _) = tungstenite::client(options.url.as_str(), stream)
        .map_err(|error| format!("handshake: {error}"))?;
    // From here on the event loop drives it: reads and writes return WouldBlock instead of waiting.
    socket
        .get_ref()
        .set_nonblocking(true)
        .map_err(|error| error.to_string())?;
    Ok(socket)
}

fn would_block(error: &Error) -> bool {
    matches!(error, Error::Io(io) if io.kind() == ErrorKind::WouldBlock)
}

/// epoll over the connections' sockets (level-triggered; a connection's index is its token).
struct Poller {
    fd: i32,
    events: Vec<libc::epoll_event>,
}

impl Poller {
    fn new(capacity: usize) -> Self {
        // SAFETY: epoll_create1 has no memory arguments; a negative result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            eprintln!("ws-load: epoll_create1 failed");
            std::process::exit(2);
        }
        Poller {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(16)],
        }
    }

    fn control(&self, operation: i32, socket: &Socket, token: usize, writable: bool) {
        let mut event = libc::epoll_event {
            events: (libc::EPOLLIN | if writable { libc::EPOLLOUT } else { 0 }) as u32,
            u64: token as u64,
        };
        // SAFETY: the descriptor is an open socket owned by `socket`; `event` outlives the call.
        unsafe { libc::epoll_ctl(self.fd, operation, socket.get_ref().as_raw_fd(), &mut event) };
    }

    /// The tokens of the ready connections, waiting at most `timeout`.
    fn wait(&mut self, timeout: Duration) -> Vec<(usize, bool)> {
        // SAFETY: `events` is a valid buffer of `len` entries for the kernel to fill.
        let count = unsafe {
            libc::epoll_wait(
                self.fd,
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                timeout.as_millis().min(1000) as i32,
            )
        };
        (0..count.max(0) as usize)
            .map(|index| {
                let event = self.events[index];
                (
                    event.u64 as usize,
                    event.events & libc::EPOLLOUT as u32 != 0,
                )
            })
            .collect()
    }
}

/// One connection of the event loop.
struct Connection {
    socket: Socket,
    alive: bool,
    /// Output tungstenite could not write yet (EPOLLOUT is asked for until it is flushed).
    flushing: bool,
    /// Echo: the message in flight (sequence number and when it was sent), if any.
    in_flight: Option<(u64, Instant)>,
    sequence: u64,
    /// Broadcast: the last sequence number this member received.
    last_seen: u64,
}

struct Load {
    options: Options,
    poller: Poller,
    connections: Vec<Connection>,
    histogram: Histogram,
    errors: Errors,
    messages: u64,
    bytes: u64,
    payload: Vec<u8>,
    expected: Vec<u8>,
}

impl Load {
    fn send(&mut self, token: usize, connection_id: u32, sequence: u64) -> bool {
        fill(&mut self.payload, connection_id, sequence);
        let connection = &mut self.connections[token];
        match connection
            .socket
            .send(Message::binary(self.payload.clone()))
        {
            Ok(()) => true,
            Err(error) if would_block(&error) => {
                // Queued in tungstenite's buffer: flushed when the socket is writable.
                if !connection.flushing {
                    connection.flushing = true;
                    self.poller
                        .control(libc::EPOLL_CTL_MOD, &connection.socket, token, true);
                }
                true
            }
            Err(_) => {
                self.errors.write += 1;
                self.kill(token);
                false
            }
        }
    }

    fn flush(&mut self, token: usize) {
        let connection = &mut self.connections[token];
        match connection.socket.flush() {
            Ok(()) => {
                connection.flushing = false;
                self.poller
                    .control(libc::EPOLL_CTL_MOD, &connection.socket, token, false);
            }
            Err(error) if would_block(&error) => {}
            Err(_) => {
                self.errors.write += 1;
                self.kill(token);
            }
        }
    }

    fn kill(&mut self, token: usize) {
        let connection = &mut self.connections[token];
        if connection.alive {
            connection.alive = false;
            self.poller
                .control(libc::EPOLL_CTL_DEL, &connection.socket, token, false);
        }
    }

    /// The next data message of a connection, None when it has none yet (or died: then counted).
    fn receive(&mut self, token: usize) -> Option<Bytes> {
        loop {
            let connection = &mut self.connections[token];
            if !connection.alive {
                return None;
            }
            match connection.socket.read() {
                Ok(Message::Binary(data)) => return Some(data),
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                Ok(Message::Close(_)) => {
                    self.errors.closed += 1;
                    self.kill(token);
                    return None;
                }
                Ok(Message::Text(_)) => {
                    self.errors.wrong += 1;
                    continue;
                }
                Err(error) if would_block(&error) => return None,
                Err(Error::ConnectionClosed | Error::AlreadyClosed) => {
                    self.errors.closed += 1;
                    self.kill(token);
                    return None;
                }
                Err(_) => {
                    self.errors.read += 1;
                    self.kill(token);
                    return None;
                }
            }
        }
    }

    /// Sends every live connection a close frame and waits, one second at most in all, for the
    /// servers' close frames, so servers see clean closes (not resets) without the end of a run
    /// waiting on each connection in turn.
    fn close_all(&mut self) {
        let mut open = 0;
        for token in 0..self.connections.len() {
            if !self.connections[token].alive {
                continue;
            }
            match self.connections[token].socket.close(None) {
                Ok(()) => open += 1,
                Err(error) if would_block(&error) => {
                    open += 1;
                    self.connections[token].flushing = true;
                    self.poller.control(
                        libc::EPOLL_CTL_MOD,
                        &self.connections[token].socket,
                        token,
                        true,
                    );
                }
                Err(_) => self.kill(token),
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while open > 0 && Instant::now() < deadline {
            for (token, writable) in self.poller.wait(Duration::from_millis(50)) {
                let connection = &mut self.connections[token];
                if !connection.alive {
                    continue;
                }
                if writable {
                    let _ = connection.socket.flush();
                }
                loop {
                    match connection.socket.read() {
                        Ok(_) => continue,
                        Err(error) if would_block(&error) => break,
                        Err(_) => {
                            open -= 1;
                            self.kill(token);
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Echo: every connection keeps one message in flight; returns the counted window.
fn run_echo(load: &mut Load) -> Duration {
    let started = Instant::now();
    let warm_end = started + load.options.warmup;
    let end = warm_end + load.options.duration;
    let limit = load.options.max_messages;
    let mut last_scan = started;
    for token in 0..load.connections.len() {
        load.connections[token].sequence = 1;
        load.connections[token].in_flight = Some((1, Instant::now()));
        load.send(token, token as u32, 1);
    }
    loop {
        let now = Instant::now();
        for (token, writable) in load.poller.wait(Duration::from_millis(100)) {
            if writable {
                load.flush(token);
            }
            // One message in flight, so one answer: no second read just to hear EAGAIN (a
            // level-triggered epoll reports the socket again if anything else arrived).
            if let Some(data) = load.receive(token) {
                let Some((sequence, sent)) = load.connections[token].in_flight.take() else {
                    load.errors.wrong += 1;
                    continue;
                };
                fill(&mut load.expected, token as u32, sequence);
                if !same_bytes(&data, &load.expected) {
                    load.errors.wrong += 1;
                }
                let received = Instant::now();
                if sent >= warm_end && sent < end {
                    load.histogram.record(received - sent);
                    load.messages += 1;
                    load.bytes += data.len() as u64;
                }
                if received < end && load.messages < limit {
                    let next = sequence + 1;
                    load.connections[token].sequence = next;
                    load.connections[token].in_flight = Some((next, Instant::now()));
                    load.send(token, token as u32, next);
                }
            }
        }
        // Every 100 ms: a message unanswered for --timeout is a timeout (its connection stops),
        // and the loop ends once no message is in flight (none is sent after the end).
        if now.duration_since(last_scan) < Duration::from_millis(100) {
            continue;
        }
        last_scan = now;
        let mut outstanding = 0;
        for token in 0..load.connections.len() {
            if let Some((_, sent)) = load.connections[token].in_flight {
                if !load.connections[token].alive {
                    continue;
                }
                if now.duration_since(sent) > load.options.timeout {
                    load.errors.timeout += 1;
                    load.connections[token].in_flight = None;
                    load.kill(token);
                } else {
                    outstanding += 1;
                }
            }
        }
        if outstanding == 0 {
            break;
        }
    }
    Instant::now().min(end).saturating_duration_since(warm_end)
}

/// Broadcast: connection 0 sends, every connection (0 included) must receive every message.
fn run_broadcast(load: &mut Load) -> Duration {
    let members = load.connections.len() as u32;
    let window = load.options.window;
    let mut received = vec![0u32; RING];
    let mut sent_at = vec![Instant::now(); RING];
    let mut sequence = 0u64;
    let mut completed = 0u64;
    // Probing: one message every 20 ms until every member has received one.
    let mut joined = 0usize;
    let mut start = u64::MAX;
    let probing_until = Instant::now() + load.options.timeout;
    let mut next_probe = Instant::now();
    let mut counted_from = u64::MAX;
    let mut counted_to = 0u64;
    let mut window_start = Instant::now();
    let mut warm_end = Instant::now();
    let mut end = Instant::now();
    let mut last_progress = Instant::now();
    let mut sending = true;
    loop {
        let now = Instant::now();
        if start == u64::MAX {
            if joined == load.connections.len() {
                start = sequence + 1;
                completed = sequence;
                warm_end = now + load.options.warmup;
                end = warm_end + load.options.duration;
            } else if now >= probing_until {
                load.errors.missed += (load.connections.len() - joined) as u64;
                break;
            } else if now >= next_probe {
                sequence += 1;
                next_probe = now + Duration::from_millis(20);
                if !load.send(0, 0, sequence) {
                    break;
                }
            }
        }
        if start != u64::MAX && sending {
            if now >= end || counted_to.saturating_sub(counted_from) >= load.options.max_messages {
                sending = false;
            }
            while sending && sequence - completed < window && load.connections[0].alive {
                sequence += 1;
                let slot = sequence as usize % RING;
                sent_at[slot] = Instant::now();
                received[slot] = 0;
                if sent_at[slot] >= warm_end {
                    if counted_from == u64::MAX {
                        counted_from = sequence;
                        window_start = sent_at[slot];
                    }
                    counted_to = sequence;
                }
                if !load.send(0, 0, sequence) {
                    sending = false;
                }
            }
        }
        if start != u64::MAX && !sending && completed >= sequence {
            break;
        }
        if load.connections.iter().any(|connection| !connection.alive)
            || now.duration_since(last_progress) > load.options.timeout
        {
            if now.duration_since(last_progress) > load.options.timeout {
                load.errors.timeout += 1;
            }
            break;
        }
        for (token, writable) in load.poller.wait(Duration::from_millis(20)) {
            if writable {
                load.flush(token);
            }
            while let Some(data) = load.receive(token) {
                last_progress = Instant::now();
                if data.len() != load.expected.len() {
                    load.errors.wrong += 1;
                    continue;
                }
                let seen = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
                fill(&mut load.expected, 0, seen);
                let last_seen = load.connections[token].last_seen;
                if !same_bytes(&data, &load.expected) || seen <= last_seen || seen > sequence {
                    load.errors.wrong += 1;
                    continue;
                }
                if last_seen == 0 {
                    joined += 1;
                }
                load.connections[token].last_seen = seen;
                if seen < start {
                    continue; // a probe: members may have joined after it was sent
                }
                let due = (last_seen + 1).max(start);
                if seen != due {
                    load.errors.missed += seen - due;
                }
                if seen >= counted_from && seen <= counted_to {
                    load.messages += 1;
                    load.bytes += data.len() as u64;
                }
                let slot = seen as usize % RING;
                received[slot] += 1;
                if received[slot] == members {
                    // In order: a member has every earlier message before this one.
                    completed = seen;
                    if seen >= counted_from && seen <= counted_to {
                        load.histogram.record(last_progress - sent_at[slot]);
                    }
                }
            }
        }
    }
    if counted_from == u64::MAX {
        return Duration::ZERO;
    }
    Instant::now().saturating_duration_since(window_start)
}

fn main() {
    let options = options();
    let mut errors = Errors::default();
    let mut connections = Vec::with_capacity(options.connections);
    for _ in 0..options.connections {
        match connect(&options) {
            Ok(socket) => connections.push(Connection {
                socket,
                alive: true,
                flushing: false,
                in_flight: None,
                sequence: 0,
                last_seen: 0,
            }),
            Err(problem) => {
                if errors.connect < 3 {
                    eprintln!("ws-load: connect: {problem}");
                }
                errors.connect += 1;
            }
        }
    }
    let poller = Poller::new(options.connections);
    for (token, connection) in connections.iter().enumerate() {
        poller.control(libc::EPOLL_CTL_ADD, &connection.socket, token, false);
    }
    let mut load = Load {
        payload: vec![0u8; options.size],
        expected: vec![0u8; options.size],
        options: options.clone(),
        poller,
        connections,
        histogram: Histogram::new(),
        errors,
        messages: 0,
        bytes: 0,
    };
    let window = if load.errors.connect > 0 {
        Duration::ZERO
    } else if options.broadcast {
        run_broadcast(&mut load)
    } else {
        run_echo(&mut load)
    };
    load.close_all();
    report(&options, &load, window);
}

fn report(options: &Options, total: &Load, window: Duration) {
    let seconds = window.as_secs_f64();
    let ok = total.errors.total() == 0 && total.messages > 0;
    let rate = if ok && seconds > 0.0 {
        format!("{:.2}", total.messages as f64 / seconds)
    } else {
        "null".to_string()
    };
    let errors = &total.errors;
    let histogram = &total.histogram;
    println!(
        "{{\"mode\": \"{}\", \"url\": \"{}\", \"connections\": {}, \"size\": {}, \"ok\": {}, \
         \"messages\": {}, \"bytes\": {}, \"duration_s\": {:.4}, \"messages_per_second\": {}, \
         \"latency_ms\": {{\"p50\": {:.3}, \"p75\": {:.3}, \"p90\": {:.3}, \"p99\": {:.3}, \"max\": {:.3}}}, \
         \"errors\": {{\"connect\": {}, \"wrong\": {}, \"missed\": {}, \"closed\": {}, \"read\": {}, \
         \"write\": {}, \"timeout\": {}}}}}",
        if options.broadcast { "broadcast" } else { "echo" },
        options.url.replace('"', ""),
        options.connections,
        options.size,
        ok,
        total.messages,
        total.bytes,
        seconds,
        rate,
        histogram.percentile_ms(0.50),
        histogram.percentile_ms(0.75),
        histogram.percentile_ms(0.90),
        histogram.percentile_ms(0.99),
        histogram.max_us as f64 / 1000.0,
        errors.connect,
        errors.wrong,
        errors.missed,
        errors.closed,
        errors.read,
        errors.write,
        errors.timeout,
    );
    if !ok {
        eprintln!(
            "ws-load: {} errors (connect {}, wrong {}, missed {}, closed {}, read {}, write {}, timeout {}) \
             over {} counted messages: no throughput reported",
            errors.total(),
            errors.connect,
            errors.wrong,
            errors.missed,
            errors.closed,
            errors.read,
            errors.write,
            errors.timeout,
            total.messages
        );
        std::process::exit(1);
    }
}
