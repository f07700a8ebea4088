//! ws-load: the WebSocket load generator of the benchmark suite's `websocket` group.
//!
//! ```text
//! ws-load --url ws://127.0.0.1:PORT/echo --mode echo --connections 100 --size 20 --duration 10 --warmup 2
//! ws-load --url ws://127.0.0.1:PORT/broadcast --mode broadcast --connections 16 --size 20 --duration 10
//! ```
//!
//! One blocking thread per connection (tungstenite, no async runtime: a thread waiting in `read`
//! costs nothing, and the suite pins the whole process to one core).
//!
//! * **echo**: each connection sends a binary message of `--size` bytes and waits for its echo,
//!   again and again. Every echo is compared byte for byte with what was sent (the payload carries
//!   the connection's number and the message's sequence number, so a stale or misrouted echo is
//!   wrong too).
//! * **broadcast**: all `--connections` join the endpoint's group; connection 0 also sends. Each
//!   message the sender sends must reach every member (the sender's own copy included), in order,
//!   with the right bytes. The sender keeps at most `--window` messages not yet received by every
//!   member. Before the warm-up, the sender sends probes until every member has received one (the
//!   server may add a member to its group after the handshake is answered); from then on a gap in
//!   a member's sequence is a missed delivery. "messages" counts deliveries (messages x members).
//!
//! The warm-up runs the same load uncounted, then `--duration` seconds are counted. A report is
//! printed as one JSON object on stdout: messages, messages per second, latency percentiles (echo:
//! the round trip; broadcast: from the send until the last member has the message) and the
//! errors. Any error (wrong bytes, missed deliveries, a closed connection, a timeout) makes
//! `messages_per_second` null and the exit status 1: a throughput is never reported for answers
//! that were wrong. Bounded: every read and write times out after `--timeout` seconds, and each
//! connection stops after `--max-messages` / connections messages.

use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use tungstenite::protocol::WebSocket;
use tungstenite::{Error, Message};

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

    fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.max_us = self.max_us.max(other.max_us);
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
    fn add(&mut self, other: &Errors) {
        self.connect += other.connect;
        self.wrong += other.wrong;
        self.missed += other.missed;
        self.closed += other.closed;
        self.read += other.read;
        self.write += other.write;
        self.timeout += other.timeout;
    }

    fn total(&self) -> u64 {
        self.connect
            + self.wrong
            + self.missed
            + self.closed
            + self.read
            + self.write
            + self.timeout
    }

    fn count_read(&mut self, error: &Error) {
        match error {
            Error::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                self.timeout += 1
            }
            Error::ConnectionClosed | Error::AlreadyClosed => self.closed += 1,
            _ => self.read += 1,
        }
    }
}

struct Outcome {
    histogram: Histogram,
    errors: Errors,
    messages: u64,
    bytes: u64,
}

impl Outcome {
    fn new() -> Self {
        Outcome {
            histogram: Histogram::new(),
            errors: Errors::default(),
            messages: 0,
            bytes: 0,
        }
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
    stream
        .set_write_timeout(Some(options.timeout))
        .map_err(|error| error.to_string())?;
    let (socket, _) = tungstenite::client(options.url.as_str(), stream)
        .map_err(|error| format!("handshake: {error}"))?;
    Ok(socket)
}

/// The next data message, skipping pings and pongs (tungstenite answers pings itself).
fn next_data(socket: &mut Socket) -> Result<Message, Error> {
    loop {
        match socket.read()? {
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => continue,
            message => return Ok(message),
        }
    }
}

/// Sends a close frame and waits (briefly) for the server's, so the server sees a clean close.
fn close(mut socket: Socket) {
    let _ = socket
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(500)));
    if socket.close(None).is_ok() {
        while socket.read().is_ok() {}
    }
}

struct Clock {
    warm_end: Instant,
    end: Instant,
}

fn echo_connection(id: u32, socket: Option<Socket>, options: &Options, clock: &Clock) -> Outcome {
    let mut outcome = Outcome::new();
    let Some(mut socket) = socket else {
        outcome.errors.connect += 1;
        return outcome;
    };
    let limit = (options.max_messages / options.connections as u64).max(1);
    let mut payload = vec![0u8; options.size];
    let mut sequence: u64 = 0;
    loop {
        let started = Instant::now();
        if started >= clock.end || outcome.messages >= limit {
            break;
        }
        let counted = started >= clock.warm_end;
        sequence += 1;
        fill(&mut payload, id, sequence);
        if socket.send(Message::binary(payload.clone())).is_err() {
            outcome.errors.write += 1;
            return outcome;
        }
        match next_data(&mut socket) {
            Ok(Message::Binary(data)) if same_bytes(&data, &payload) => {
                if counted {
                    outcome.histogram.record(started.elapsed());
                    outcome.messages += 1;
                    outcome.bytes += data.len() as u64;
                }
            }
            Ok(Message::Close(_)) => {
                outcome.errors.closed += 1;
                return outcome;
            }
            Ok(_) => outcome.errors.wrong += 1,
            Err(error) => {
                outcome.errors.count_read(&error);
                return outcome;
            }
        }
    }
    close(socket);
    outcome
}

/// What the broadcast's members and sender share.
struct Fanout {
    members: u32,
    /// Per ring slot: how many members have received that sequence number.
    received: Vec<AtomicU32>,
    /// Per ring slot: when the sender sent it (µs since `origin`).
    sent_at: Vec<AtomicU64>,
    origin: Instant,
    /// Every sequence number up to this one has reached every member.
    completed: AtomicU64,
    /// The first sequence number every member must receive (u64::MAX while probing).
    start: AtomicU64,
    /// Members that have received at least one message.
    joined: AtomicUsize,
    /// The last sequence number sent; members stop once they have it (u64::MAX while sending).
    last: AtomicU64,
    /// First and last sequence numbers of the counted window.
    first_counted: AtomicU64,
    last_counted: AtomicU64,
    /// When the first counted message was sent (µs since `origin`).
    counted_since: AtomicU64,
    failed: AtomicBool,
    sender: thread::Thread,
}

/// One member's receipt of `sequence`; returns whether it should stop.
fn deliver(
    fanout: &Fanout,
    data: &[u8],
    expected: &mut [u8],
    last_seen: &mut u64,
    outcome: &mut Outcome,
) -> bool {
    if data.len() != expected.len() || data.len() < 12 {
        outcome.errors.wrong += 1;
        return false;
    }
    let sequence = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
    fill(expected, 0, sequence);
    if !same_bytes(data, expected) || sequence <= *last_seen {
        outcome.errors.wrong += 1;
        return false;
    }
    let start = fanout.start.load(Ordering::SeqCst);
    if *last_seen == 0 {
        fanout.joined.fetch_add(1, Ordering::SeqCst);
    }
    if sequence >= start {
        if sequence != *last_seen + 1 {
            outcome.errors.missed += sequence - *last_seen - 1;
        }
        let slot = sequence as usize % RING;
        if fanout.received[slot].fetch_add(1, Ordering::SeqCst) + 1 == fanout.members {
            // The last member to get it: the broadcast is complete.
            fanout.received[slot].store(0, Ordering::SeqCst);
            let first = fanout.first_counted.load(Ordering::SeqCst);
            if sequence >= first && sequence <= fanout.last_counted.load(Ordering::SeqCst) {
                let sent = fanout.sent_at[slot].load(Ordering::SeqCst);
                let now = fanout.origin.elapsed().as_micros() as u64;
                outcome
                    .histogram
                    .record(Duration::from_micros(now.saturating_sub(sent)));
            }
            fanout.completed.store(sequence, Ordering::SeqCst);
            fanout.sender.unpark();
        }
        let first = fanout.first_counted.load(Ordering::SeqCst);
        if sequence >= first && sequence <= fanout.last_counted.load(Ordering::SeqCst) {
            outcome.messages += 1;
            outcome.bytes += data.len() as u64;
        }
    }
    *last_seen = sequence;
    sequence >= fanout.last.load(Ordering::SeqCst)
}

fn member(mut socket: Socket, fanout: &Fanout, size: usize) -> Outcome {
    let mut outcome = Outcome::new();
    let mut expected = vec![0u8; size];
    let mut last_seen = 0;
    loop {
        if fanout.failed.load(Ordering::SeqCst) {
            break;
        }
        match next_data(&mut socket) {
            Ok(Message::Binary(data)) => {
                if deliver(fanout, &data, &mut expected, &mut last_seen, &mut outcome) {
                    break;
                }
            }
            Ok(Message::Close(_)) => {
                outcome.errors.closed += 1;
                break;
            }
            Ok(_) => outcome.errors.wrong += 1,
            Err(error) => {
                outcome.errors.count_read(&error);
                break;
            }
        }
    }
    if outcome.errors.total() > 0 {
        fanout.failed.store(true, Ordering::SeqCst);
        fanout.sender.unpark();
    }
    close(socket);
    outcome
}

/// The sender: probes until every member has joined, then sends while the window allows,
/// reading its own copy of each message (it is a member too).
fn sender(mut socket: Socket, fanout: &Fanout, options: &Options) -> Outcome {
    let mut outcome = Outcome::new();
    let mut payload = vec![0u8; options.size];
    let mut last_seen = 0;
    let mut sequence = 0u64;
    let members = fanout.members as usize;
    let probing_until = Instant::now() + options.timeout;
    let mut send_one = |socket: &mut Socket, sequence: u64, outcome: &mut Outcome| -> bool {
        fill(&mut payload, 0, sequence);
        let slot = sequence as usize % RING;
        fanout.sent_at[slot].store(fanout.origin.elapsed().as_micros() as u64, Ordering::SeqCst);
        if socket.send(Message::binary(payload.clone())).is_err() {
            outcome.errors.write += 1;
            return false;
        }
        true
    };
    let mut expected = vec![0u8; options.size];
    // Probing: one message at a time, until every member has received one.
    let mut own_copy = |socket: &mut Socket, last_seen: &mut u64, outcome: &mut Outcome| -> bool {
        match next_data(socket) {
            Ok(Message::Binary(data)) => {
                deliver(fanout, &data, &mut expected, last_seen, outcome);
                outcome.errors.total() == 0
            }
            Ok(Message::Close(_)) => {
                outcome.errors.closed += 1;
                false
            }
            Ok(_) => {
                outcome.errors.wrong += 1;
                false
            }
            Err(error) => {
                outcome.errors.count_read(&error);
                false
            }
        }
    };
    let mut healthy = true;
    while fanout.joined.load(Ordering::SeqCst) < members {
        if Instant::now() >= probing_until || fanout.failed.load(Ordering::SeqCst) {
            outcome.errors.missed += (members - fanout.joined.load(Ordering::SeqCst)) as u64;
            healthy = false;
            break;
        }
        sequence += 1;
        if !send_one(&mut socket, sequence, &mut outcome)
            || !own_copy(&mut socket, &mut last_seen, &mut outcome)
        {
            healthy = false;
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    // Probes may still be on their way to members that joined late: they end before `start`.
    fanout.start.store(sequence + 1, Ordering::SeqCst);
    fanout.completed.store(sequence, Ordering::SeqCst);
    // The warm-up and the counted window start once every member has joined.
    let warm_end = Instant::now() + options.warmup;
    let end = warm_end + options.duration;
    let limit = (options.max_messages / members as u64).max(1);
    while healthy {
        let now = Instant::now();
        let first = fanout.first_counted.load(Ordering::SeqCst);
        if now >= end || (first != u64::MAX && sequence + 1 - first >= limit) {
            break;
        }
        if now >= warm_end && fanout.first_counted.load(Ordering::SeqCst) == u64::MAX {
            fanout
                .counted_since
                .store(fanout.origin.elapsed().as_micros() as u64, Ordering::SeqCst);
            fanout.first_counted.store(sequence + 1, Ordering::SeqCst);
        }
        // The window: wait while `window` messages have not reached every member.
        while sequence - fanout.completed.load(Ordering::SeqCst) >= options.window {
            if fanout.failed.load(Ordering::SeqCst) {
                healthy = false;
                break;
            }
            if Instant::now() >= end + options.timeout {
                outcome.errors.timeout += 1;
                healthy = false;
                break;
            }
            thread::park_timeout(Duration::from_millis(5));
        }
        if !healthy {
            break;
        }
        sequence += 1;
        if fanout.first_counted.load(Ordering::SeqCst) != u64::MAX {
            fanout.last_counted.store(sequence, Ordering::SeqCst);
        }
        if !send_one(&mut socket, sequence, &mut outcome)
            || !own_copy(&mut socket, &mut last_seen, &mut outcome)
        {
            healthy = false;
        }
    }
    // One more message, not counted, that tells the members to stop once they have it (they
    // cannot tell the last counted one from another while it is on its way); the sender waits
    // until every member has it.
    if healthy {
        sequence += 1;
        fanout.last.store(sequence, Ordering::SeqCst);
        healthy = send_one(&mut socket, sequence, &mut outcome)
            && own_copy(&mut socket, &mut last_seen, &mut outcome);
    }
    let deadline = Instant::now() + options.timeout;
    while healthy && fanout.completed.load(Ordering::SeqCst) < sequence {
        if fanout.failed.load(Ordering::SeqCst) || Instant::now() >= deadline {
            outcome.errors.missed += 1;
            fanout.failed.store(true, Ordering::SeqCst);
            break;
        }
        thread::park_timeout(Duration::from_millis(5));
    }
    if !healthy {
        fanout.failed.store(true, Ordering::SeqCst);
    }
    close(socket);
    outcome
}

fn open_all(options: &Options) -> (Vec<Option<Socket>>, Vec<String>) {
    let mut sockets = Vec::with_capacity(options.connections);
    let mut problems = Vec::new();
    for _ in 0..options.connections {
        match connect(options) {
            Ok(socket) => sockets.push(Some(socket)),
            Err(problem) => {
                if problems.len() < 3 {
                    problems.push(problem);
                }
                sockets.push(None);
            }
        }
    }
    (sockets, problems)
}

fn spawn<F: FnOnce() -> Outcome + Send + 'static>(body: F) -> thread::JoinHandle<Outcome> {
    thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(body)
        .expect("a thread per connection")
}

fn main() {
    let options = options();
    let (sockets, problems) = open_all(&options);
    for problem in &problems {
        eprintln!("ws-load: connect: {problem}");
    }
    let mut total = Outcome::new();
    let window_start;
    let window_end;
    if !options.broadcast {
        let barrier = Arc::new(Barrier::new(options.connections + 1));
        let clock = Arc::new(std::sync::OnceLock::<Clock>::new());
        let handles: Vec<_> = sockets
            .into_iter()
            .enumerate()
            .map(|(id, socket)| {
                let (barrier, clock, options) = (barrier.clone(), clock.clone(), options.clone());
                spawn(move || {
                    barrier.wait();
                    echo_connection(id as u32, socket, &options, clock.get().expect("set"))
                })
            })
            .collect();
        let now = Instant::now();
        let _ = clock.set(Clock {
            warm_end: now + options.warmup,
            end: now + options.warmup + options.duration,
        });
        barrier.wait();
        for handle in handles {
            let outcome = handle.join().unwrap_or_else(|_| Outcome::new());
            total.histogram.merge(&outcome.histogram);
            total.errors.add(&outcome.errors);
            total.messages += outcome.messages;
            total.bytes += outcome.bytes;
        }
        window_start = now + options.warmup;
        window_end = Instant::now().min(window_start + options.duration);
    } else {
        let fanout = Arc::new(Fanout {
            members: options.connections as u32,
            received: (0..RING).map(|_| AtomicU32::new(0)).collect(),
            sent_at: (0..RING).map(|_| AtomicU64::new(0)).collect(),
            origin: Instant::now(),
            completed: AtomicU64::new(0),
            start: AtomicU64::new(u64::MAX),
            joined: AtomicUsize::new(0),
            last: AtomicU64::new(u64::MAX),
            first_counted: AtomicU64::new(u64::MAX),
            last_counted: AtomicU64::new(0),
            counted_since: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            sender: thread::current(),
        });
        let mut sockets = sockets.into_iter();
        let first = sockets.next().flatten();
        let mut handles = Vec::new();
        for socket in sockets {
            match socket {
                Some(socket) => {
                    let (fanout, size) = (fanout.clone(), options.size);
                    handles.push(spawn(move || member(socket, &fanout, size)));
                }
                None => total.errors.connect += 1,
            }
        }
        match first {
            Some(socket) if total.errors.connect == 0 => {
                let outcome = sender(socket, &fanout, &options);
                total.histogram.merge(&outcome.histogram);
                total.errors.add(&outcome.errors);
                total.messages += outcome.messages;
                total.bytes += outcome.bytes;
            }
            _ => {
                total.errors.connect += 1;
                fanout.failed.store(true, Ordering::SeqCst);
            }
        }
        let finished = Instant::now();
        for handle in handles {
            let outcome = handle.join().unwrap_or_else(|_| Outcome::new());
            total.histogram.merge(&outcome.histogram);
            total.errors.add(&outcome.errors);
            total.messages += outcome.messages;
            total.bytes += outcome.bytes;
        }
        // The counted window: from the first counted send until the last reached every member.
        let since = fanout.counted_since.load(Ordering::SeqCst);
        window_start = fanout.origin + Duration::from_micros(since);
        window_end = finished;
    }
    report(
        &options,
        &total,
        window_end.saturating_duration_since(window_start),
    );
}

fn report(options: &Options, total: &Outcome, window: Duration) {
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
