//! h3-load: the HTTP/3 load generator of the benchmark suite's `http3` group (Debian's h2load
//! speaks no HTTP/3).
//!
//! ```text
//! h3-load --ca cert.pem -c 100 -m 10 -D 10 https://127.0.0.1:PORT/              # load
//! h3-load --ca cert.pem -c 1 -m 1 -n 200 --expect-length 1048576 https://127.0.0.1:PORT/f
//! h3-load --ca cert.pem --check 3 https://127.0.0.1:PORT/                       # answers, as JSON
//! h3-load --ca cert.pem --handshakes -c 16 -D 10 https://127.0.0.1:PORT/        # new connection each
//! h3-load --ca cert.pem --handshakes --rate 1000 -c 64 -D 10 https://127.0.0.1:PORT/
//! h3-load --ca cert.pem --idle 1000 https://127.0.0.1:PORT/                     # driven over stdin
//! ```
//!
//! quinn (QUIC, rustls with ring) and hyperium's h3 (HTTP/3, QPACK) through h3-quinn, on one tokio
//! current-thread runtime: the one core the suite pins it to does all of the client's work, as
//! h2load's `-t1` does.
//!
//! * **load** (the default): `-c` connections, each with its own UDP socket (h2load has a TCP
//!   socket per connection, and a server with several SO_REUSEPORT workers sees several flows),
//!   each with `-m` requests in flight, for `-D` seconds or until `-n` requests are done, after
//!   `--warm-up` seconds that are not counted. Only requests that end inside the counted window
//!   count; the latency of each is from sending its HEADERS to the end of its body.
//! * **--handshakes**: every request on a new QUIC connection (handshake, HTTP/3 SETTINGS, one
//!   GET, CONNECTION_CLOSE). Closed loop with `-c` at a time, or with `--rate R` an open loop
//!   starting R connections a second (at most `-c` at a time: a start that finds `-c` still
//!   busy is counted as `late`, not queued). A *normal client* runs beside the flood: every
//!   `--probe-interval` milliseconds (or as soon as its previous request ended, if later) a new
//!   connection and one GET, as a browser arriving then would; its latency (handshake included)
//!   is reported apart, as `probe`. A wrong answer or a failed handshake of it refuses the run;
//!   a timeout, or a request still unanswered at the end, is a latency sample of the time it
//!   waited (a lower bound), so a server that makes newcomers wait shows in the percentiles.
//! * **--check N**: one connection, N requests (the first alone, then the others together, on
//!   streams of their own), each answer printed as a JSON line (status, headers, body in hex)
//!   for the suite to judge; nothing is timed.
//! * **--idle N**: the line protocol of benches/h2idle.py: `--warm` connections, each after one
//!   request, then `warm`; a line on stdin; N more the same way, then `ready N`; stdin's end; then
//!   whether the server kept every connection (none closed, and each answers one more GET: a QUIC
//!   server that forgot a connection silently shows only when asked), and a JSON line `{"ok",
//!   "connections", "errors"}`. No keep-alive is sent: the connections are idle on the wire.
//!
//! Every answer is judged: a status other than `--expect-status` (any 2xx without it), a body of
//! another length than `--expect-length`, a reset stream, a closed connection, a timeout
//! (`--timeout` seconds for any one request or handshake) or a failed connect each count, and any
//! of them makes the report `"valid": false` and the exit status 1: a rate is never reported for
//! wrong answers. The report is one JSON object on stdout.
//!
//! The certificate: the server's chain is verified against `--ca` with webpki; a certificate that
//! webpki refuses is still accepted if it is byte for byte one of the certificates in that file
//! (the suite's is self-signed with `CA:TRUE`, which webpki refuses as a server's own). Either way
//! rustls checks the server's handshake signature with that certificate's key.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::AsyncBufReadExt;
use tokio::task::{spawn_local, JoinSet, LocalSet};

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

const MAX_DURATION_S: f64 = 3600.0;
const MAX_CONNECTIONS: usize = 20_000;
const MAX_STREAMS: usize = 1000;
const IDLE_CHECKS_AT_ONCE: usize = 16;

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Load,
    Handshakes,
    Check(usize),
    Idle(usize),
}

struct Options {
    uri: http::Uri,
    address: SocketAddr,
    server_name: String,
    ca: PathBuf,
    mode: Mode,
    connections: usize,
    streams: usize,
    duration: Duration,
    requests: Option<u64>,
    warmup: Duration,
    timeout: Duration,
    rate: Option<f64>,
    probe_interval: Duration,
    warm: usize,
    expect_status: Option<u16>,
    expect_length: Option<u64>,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

fn usage(problem: &str) -> ! {
    eprintln!(
        "h3-load: {problem}\nusage: h3-load --ca FILE [-c N] [-m N] [-D SECONDS | -n N] [--warm-up SECONDS] \
         [--timeout SECONDS] [--expect-status CODE] [--expect-length BYTES] [-H 'name: value'] \
         [--server-name NAME] [--check N | --handshakes [--rate R] [--probe-interval MS] | --idle N [--warm N]] \
         https://HOST:PORT/PATH"
    );
    std::process::exit(2)
}

fn seconds(value: &str, flag: &str) -> Duration {
    let (number, scale) = if let Some(ms) = value.strip_suffix("ms") {
        (ms, 0.001)
    } else {
        (value.strip_suffix('s').unwrap_or(value), 1.0)
    };
    let parsed: f64 = number
        .parse()
        .unwrap_or_else(|_| usage(&format!("{flag} takes seconds (10, 10s or 500ms)")));
    let parsed = parsed * scale;
    if !(0.0..=MAX_DURATION_S).contains(&parsed) {
        usage(&format!(
            "{flag} must be between 0 and {MAX_DURATION_S} seconds"
        ));
    }
    Duration::from_secs_f64(parsed)
}

fn count(value: &str, flag: &str, max: u64) -> u64 {
    match value.parse::<u64>() {
        Ok(parsed) if (1..=max).contains(&parsed) => parsed,
        _ => usage(&format!("{flag} takes a number from 1 to {max}")),
    }
}

fn header(value: &str) -> (http::HeaderName, http::HeaderValue) {
    let (name, content) = value
        .split_once(':')
        .unwrap_or_else(|| usage("-H takes 'name: value'"));
    let name = http::HeaderName::from_bytes(name.trim().as_bytes())
        .unwrap_or_else(|_| usage(&format!("not a header name: {name:?}")));
    let content = http::HeaderValue::from_str(content.trim())
        .unwrap_or_else(|_| usage(&format!("not a header value: {content:?}")));
    (name, content)
}

fn options() -> Options {
    let mut url = None;
    let mut server_name = None;
    let mut ca = None;
    let mut mode = Mode::Load;
    let mut connections = 1usize;
    let mut streams = 1usize;
    let mut duration = Duration::from_secs(10);
    let mut requests = None;
    let mut warmup = Duration::ZERO;
    let mut timeout = Duration::from_secs(5);
    let mut rate = None;
    let mut probe_interval = Duration::from_millis(20);
    let mut warm = 10usize;
    let mut expect_status = None;
    let mut expect_length = None;
    let mut headers = Vec::new();
    let mut arguments = std::env::args().skip(1);
    while let Some(flag) = arguments.next() {
        if flag == "--handshakes" {
            mode = Mode::Handshakes;
            continue;
        }
        if !flag.starts_with('-') {
            url = Some(flag);
            continue;
        }
        let value = arguments
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--ca" => ca = Some(PathBuf::from(value)),
            "--server-name" => server_name = Some(value),
            "-c" => connections = count(&value, &flag, MAX_CONNECTIONS as u64) as usize,
            "-m" => streams = count(&value, &flag, MAX_STREAMS as u64) as usize,
            "-D" => duration = seconds(&value, &flag),
            "-n" => requests = Some(count(&value, &flag, 1_000_000_000)),
            "--warm-up" => warmup = seconds(&value, &flag),
            "--timeout" => timeout = seconds(&value, &flag),
            "--rate" => {
                rate = Some(count(&value, &flag, 1_000_000) as f64);
            }
            "--probe-interval" => {
                probe_interval = Duration::from_millis(count(&value, &flag, 60_000));
            }
            "--check" => mode = Mode::Check(count(&value, &flag, 100) as usize),
            "--idle" => mode = Mode::Idle(count(&value, &flag, MAX_CONNECTIONS as u64) as usize),
            "--warm" => warm = count(&value, &flag, 10_000) as usize,
            "--expect-status" => expect_status = Some(count(&value, &flag, 999) as u16),
            "--expect-length" => {
                expect_length = Some(
                    value
                        .parse()
                        .unwrap_or_else(|_| usage("--expect-length takes bytes")),
                )
            }
            "-H" => headers.push(header(&value)),
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    let url = url.unwrap_or_else(|| usage("no URL"));
    let uri: http::Uri = url
        .parse()
        .unwrap_or_else(|_| usage(&format!("not a URL: {url}")));
    if uri.scheme_str() != Some("https") {
        usage("the URL must be https:// (HTTP/3 is always encrypted)");
    }
    let host = uri.host().unwrap_or_else(|| usage("the URL has no host"));
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(443);
    let address = (host.as_str(), port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut addresses| addresses.next())
        .unwrap_or_else(|| usage(&format!("cannot resolve {host}")));
    Options {
        uri,
        address,
        server_name: server_name.unwrap_or(host),
        ca: ca.unwrap_or_else(|| usage("--ca is required (the file of the certificate to trust)")),
        mode,
        connections,
        streams,
        duration,
        requests,
        warmup,
        timeout,
        rate,
        probe_interval,
        warm,
        expect_status,
        expect_length,
        headers,
    }
}

/// webpki against the CA file, or else the very certificate pinned (see the module's comment).
#[derive(Debug)]
struct TrustCaFile {
    webpki: Option<Arc<WebPkiServerVerifier>>,
    pinned: Vec<CertificateDer<'static>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for TrustCaFile {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match &self.webpki {
            Some(webpki) => {
                match webpki.verify_server_cert(
                    end_entity,
                    intermediates,
                    server_name,
                    ocsp_response,
                    now,
                ) {
                    Ok(verified) => return Ok(verified),
                    Err(error) => error,
                }
            }
            None => rustls::Error::General("no usable trust anchor in the CA file".into()),
        };
        if self
            .pinned
            .iter()
            .any(|pinned| pinned.as_ref() == end_entity.as_ref())
        {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(refused)
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn client_config(options: &Options) -> Result<quinn::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let pinned: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&options.ca)
        .map_err(|error| format!("cannot read {}: {error}", options.ca.display()))?
        .collect::<Result<_, _>>()
        .map_err(|error| format!("bad PEM in {}: {error}", options.ca.display()))?;
    if pinned.is_empty() {
        return Err(format!("no certificate in {}", options.ca.display()));
    }
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(pinned.iter().cloned());
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .ok();
    let verifier = Arc::new(TrustCaFile {
        webpki,
        pinned,
        provider: provider.clone(),
    });
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|error| error.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|error| error.to_string())?;
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    // The server's idle timeout governs (the idle mode holds connections for a while); the client
    // sends no keep-alive, so an idle connection is idle on the wire.
    transport.max_idle_timeout(Some(
        Duration::from_secs(300)
            .try_into()
            .expect("300 s is a valid idle timeout"),
    ));
    config.transport_config(Arc::new(transport));
    Ok(config)
}

/// A UDP socket's buffers, each way: a 1 MiB body arrives in bursts of up to the stream window
/// (quinn's default, 1.25 MB), more than Linux's default 208 KiB receive buffer holds, and a
/// datagram the client's socket drops would cost the server a loss it did not cause. Capped by
/// `net.core.rmem_max` and `wmem_max` (4 MiB on the suite's machine).
const SOCKET_BUFFER: libc::c_int = 4 << 20;

fn endpoint(config: &quinn::ClientConfig, server: SocketAddr) -> Result<quinn::Endpoint, String> {
    let local: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()
    .expect("a literal address");
    let socket =
        std::net::UdpSocket::bind(local).map_err(|error| format!("UDP socket: {error}"))?;
    for option in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        // SAFETY: setsockopt on a socket this function owns, with a pointer to a live c_int and its size.
        let status = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                option,
                (&SOCKET_BUFFER as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if status != 0 {
            return Err(format!(
                "UDP socket buffer: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    let mut endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        socket,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(|error| format!("UDP socket: {error}"))?;
    endpoint.set_default_client_config(config.clone());
    Ok(endpoint)
}

/// One HTTP/3 connection: its QUIC connection (for closing, and asking whether it was closed)
/// and the handle that opens request streams. The h3 driver runs as a task of its own until the
/// connection ends; an end that neither the client asked for nor came after `Shared::stopping`
/// counts as a `closed` error.
struct Connection {
    quic: quinn::Connection,
    send: SendRequest,
    closed_by_us: Rc<Cell<bool>>,
}

impl Connection {
    fn close(&self) {
        self.closed_by_us.set(true);
        self.quic.close(0u32.into(), b"done");
    }
}

async fn connect(
    endpoint: &quinn::Endpoint,
    shared: &Rc<Shared>,
) -> Result<Connection, &'static str> {
    let options = &shared.options;
    let connecting = endpoint
        .connect(options.address, &options.server_name)
        .map_err(|_| "connect")?;
    let quic = match tokio::time::timeout(options.timeout, connecting).await {
        Err(_) => return Err("timeout"),
        Ok(Err(_)) => return Err("handshake"),
        Ok(Ok(quic)) => quic,
    };
    let alpn = quic
        .handshake_data()
        .and_then(|data| data.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|data| data.protocol);
    if alpn.as_deref() != Some(&b"h3"[..]) {
        quic.close(0u32.into(), b"no h3");
        return Err("alpn");
    }
    let (mut driver, send) = match tokio::time::timeout(
        options.timeout,
        h3::client::new(h3_quinn::Connection::new(quic.clone())),
    )
    .await
    {
        Err(_) => return Err("timeout"),
        Ok(Err(_)) => return Err("h3-setup"),
        Ok(Ok(pair)) => pair,
    };
    let (watcher, closed_by_us) = (shared.clone(), Rc::new(Cell::new(false)));
    let ours = closed_by_us.clone();
    spawn_local(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
        if !ours.get() && !watcher.stopping.get() {
            watcher
                .stats
                .borrow_mut()
                .error("closed", watcher.counting());
        }
    });
    Ok(Connection {
        quic,
        send,
        closed_by_us,
    })
}

/// A response as read: status, headers (only kept when asked) and body (its length, or the bytes).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    length: u64,
    body: Vec<u8>,
}

async fn request(
    send: &mut SendRequest,
    options: &Options,
    keep: bool,
) -> Result<Answer, &'static str> {
    let mut builder = http::Request::get(options.uri.clone());
    for (name, value) in &options.headers {
        builder = builder.header(name, value);
    }
    let request = builder.body(()).map_err(|_| "request")?;
    let mut stream = send.send_request(request).await.map_err(|_| "stream")?;
    stream.finish().await.map_err(|_| "stream")?;
    let response = stream.recv_response().await.map_err(|_| "stream")?;
    let mut answer = Answer {
        status: response.status().as_u16(),
        headers: Vec::new(),
        length: 0,
        body: Vec::new(),
    };
    if keep {
        for (name, value) in response.headers() {
            answer.headers.push((
                name.to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            ));
        }
    }
    while let Some(mut chunk) = stream.recv_data().await.map_err(|_| "stream")? {
        answer.length += chunk.remaining() as u64;
        if keep {
            while chunk.has_remaining() {
                let part = chunk.chunk();
                answer.body.extend_from_slice(part);
                let taken = part.len();
                chunk.advance(taken);
            }
        }
    }
    Ok(answer)
}

async fn timed_request(send: &mut SendRequest, options: &Options) -> Result<Answer, &'static str> {
    match tokio::time::timeout(options.timeout, request(send, options, false)).await {
        Ok(result) => result,
        Err(_) => Err("timeout"),
    }
}

/// What a run counted: only what ended inside the counted window (`Shared::counting`).
#[derive(Default)]
struct Stats {
    ok: u64,
    wrong_status: u64,
    statuses: BTreeMap<u16, u64>,
    wrong_length: u64,
    errors: BTreeMap<&'static str, u64>,
    bytes: u64,
    latencies_us: Vec<u32>,
    late: u64,
    probe_ok: u64,
    probe_failed: u64,
    probe_timeouts: u64,
    probe_unfinished: u64,
    probe_latencies_us: Vec<u32>,
}

impl Stats {
    fn error(&mut self, kind: &'static str, counted: bool) {
        if counted {
            *self.errors.entry(kind).or_default() += 1;
        }
    }
}

struct Shared {
    options: Options,
    stats: RefCell<Stats>,
    /// When the counted window starts and ends (its end is the deadline of a `-D` run).
    window: (Instant, Instant),
    /// Requests still to start in a `-n` run, and those started but not yet ended.
    remaining: Cell<Option<u64>>,
    outstanding: Cell<u64>,
    /// Set when the counted window is over: nothing new starts, and closes are expected.
    stopping: Cell<bool>,
    /// When the last counted request of a `-n` run ended.
    last_done: Cell<Option<Instant>>,
    /// When the normal client's request in flight started (the handshakes mode).
    probe_started: Cell<Option<Instant>>,
    /// The load mode's connections, for quinn's counts of what was lost on the way.
    load_connections: RefCell<Vec<quinn::Connection>>,
    done: tokio::sync::Notify,
}

impl Shared {
    /// `window`: when counting starts and ends; `stopping` from the start for the modes that
    /// count nothing (check, idle), where a connection's end is judged otherwise.
    fn new(options: Options, window: (Instant, Instant), stopping: bool) -> Rc<Shared> {
        Rc::new(Shared {
            remaining: Cell::new(options.requests),
            outstanding: Cell::new(0),
            options,
            stats: RefCell::new(Stats::default()),
            window,
            stopping: Cell::new(stopping),
            last_done: Cell::new(None),
            probe_started: Cell::new(None),
            load_connections: RefCell::new(Vec::new()),
            done: tokio::sync::Notify::new(),
        })
    }

    fn counting(&self) -> bool {
        let now = Instant::now();
        now >= self.window.0 && now <= self.window.1 && !self.stopping.get()
    }

    /// Another request may start: when it starts, and whether it took one of a `-n` run's
    /// tickets (they are taken once the counted window has begun); None when none may.
    fn begin(&self) -> Option<Start> {
        if self.stopping.get() {
            return None;
        }
        let at = Instant::now();
        match self.remaining.get() {
            Some(left) if at >= self.window.0 => {
                if left == 0 {
                    return None;
                }
                self.remaining.set(Some(left - 1));
                self.outstanding.set(self.outstanding.get() + 1);
                Some(Start { at, ticket: true })
            }
            _ => Some(Start { at, ticket: false }),
        }
    }

    /// Counts one finished request; returns whether it was right.
    fn record(&self, start: Start, outcome: &Result<Answer, &'static str>) -> bool {
        let ended = Instant::now();
        let in_window = if self.remaining.get().is_some() {
            start.ticket
        } else {
            start.at >= self.window.0
        };
        let counted = in_window && ended <= self.window.1 && !self.stopping.get();
        let right = match outcome {
            Ok(answer) => self.right(answer),
            Err(_) => false,
        };
        if counted {
            let mut stats = self.stats.borrow_mut();
            match outcome {
                Err(kind) => stats.error(kind, true),
                Ok(answer) => {
                    stats.bytes += answer.length;
                    *stats.statuses.entry(answer.status).or_default() += 1;
                    if !self.status_right(answer.status) {
                        stats.wrong_status += 1;
                    } else if !right {
                        stats.wrong_length += 1;
                    } else {
                        stats.ok += 1;
                    }
                    stats.latencies_us.push(micros(ended - start.at));
                }
            }
        }
        if start.ticket {
            self.outstanding.set(self.outstanding.get() - 1);
            if self.remaining.get() == Some(0) && self.outstanding.get() == 0 {
                self.last_done.set(Some(ended));
                self.done.notify_one();
            }
        }
        right
    }

    fn status_right(&self, status: u16) -> bool {
        match self.options.expect_status {
            Some(expected) => status == expected,
            None => (200..300).contains(&status),
        }
    }

    fn right(&self, answer: &Answer) -> bool {
        self.status_right(answer.status)
            && self
                .options
                .expect_length
                .is_none_or(|length| length == answer.length)
    }
}

#[derive(Clone, Copy)]
struct Start {
    at: Instant,
    ticket: bool,
}

fn micros(elapsed: Duration) -> u32 {
    elapsed.as_micros().min(u32::MAX as u128) as u32
}

/// The load mode's connection: `-m` request loops on it until the window ends.
async fn load_connection(shared: Rc<Shared>, config: quinn::ClientConfig) {
    let endpoint = match endpoint(&config, shared.options.address) {
        Ok(endpoint) => endpoint,
        Err(_) => {
            shared.stats.borrow_mut().error("socket", true);
            return;
        }
    };
    let connection = match connect(&endpoint, &shared).await {
        Ok(connection) => connection,
        Err(kind) => {
            shared.stats.borrow_mut().error(kind, true);
            return;
        }
    };
    shared
        .load_connections
        .borrow_mut()
        .push(connection.quic.clone());
    let mut loops = JoinSet::new();
    for _ in 0..shared.options.streams {
        let mut send = connection.send.clone();
        let shared = shared.clone();
        loops.spawn_local(async move {
            while let Some(start) = shared.begin() {
                let outcome = timed_request(&mut send, &shared.options).await;
                shared.record(start, &outcome);
                if outcome.is_err() {
                    break; // a reset or a timeout: the connection is not to be trusted further
                }
            }
        });
    }
    while loops.join_next().await.is_some() {}
    connection.close();
    drop(connection);
    endpoint.wait_idle().await;
}

/// One connection for one request (the handshakes mode), counted as a request, or as the probe's
/// when `start` is None.
async fn one_shot(shared: &Rc<Shared>, endpoint: &quinn::Endpoint, start: Option<Start>) {
    let started = Instant::now();
    let outcome = match connect(endpoint, shared).await {
        Ok(mut connection) => {
            let answer = timed_request(&mut connection.send, &shared.options).await;
            connection.close();
            answer
        }
        Err(kind) => Err(kind),
    };
    let Some(start) = start else {
        shared.probe_started.set(None);
        let ended = Instant::now();
        if started >= shared.window.0 && ended <= shared.window.1 && !shared.stopping.get() {
            let mut stats = shared.stats.borrow_mut();
            match &outcome {
                Ok(answer) if shared.right(answer) => {
                    stats.probe_ok += 1;
                    stats.probe_latencies_us.push(micros(ended - started));
                }
                // A normal client that waited in vain waited at least this long: its wait is a
                // sample (a lower bound), not a refusal of the row.
                Err("timeout") => {
                    stats.probe_timeouts += 1;
                    stats.probe_latencies_us.push(micros(ended - started));
                }
                _ => stats.probe_failed += 1,
            }
        }
        return;
    };
    shared.record(start, &outcome);
}

async fn handshake_slot(shared: Rc<Shared>, config: quinn::ClientConfig) {
    let Ok(endpoint) = endpoint(&config, shared.options.address) else {
        shared.stats.borrow_mut().error("socket", true);
        return;
    };
    while let Some(start) = shared.begin() {
        one_shot(&shared, &endpoint, Some(start)).await;
    }
    endpoint.wait_idle().await;
}

/// The open loop of `--rate`: a start every 1/R seconds, on `-c` endpoints in turn, at most `-c`
/// connections busy at once.
async fn handshake_rate(shared: Rc<Shared>, config: quinn::ClientConfig, rate: f64) {
    let mut endpoints = Vec::new();
    for _ in 0..shared.options.connections {
        match endpoint(&config, shared.options.address) {
            Ok(endpoint) => endpoints.push(endpoint),
            Err(_) => {
                shared.stats.borrow_mut().error("socket", true);
                return;
            }
        }
    }
    let busy = Rc::new(Cell::new(0usize));
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut next = 0usize;
    loop {
        ticks.tick().await;
        if shared.stopping.get() || Instant::now() >= shared.window.1 {
            break;
        }
        if busy.get() >= endpoints.len() {
            if shared.counting() {
                shared.stats.borrow_mut().late += 1;
            }
            continue;
        }
        let Some(start) = shared.begin() else { break };
        busy.set(busy.get() + 1);
        let (shared, busy, endpoint) = (shared.clone(), busy.clone(), endpoints[next].clone());
        next = (next + 1) % endpoints.len();
        spawn_local(async move {
            one_shot(&shared, &endpoint, Some(start)).await;
            busy.set(busy.get() - 1);
        });
    }
    for endpoint in endpoints {
        endpoint.wait_idle().await;
    }
}

async fn probe(shared: Rc<Shared>, config: quinn::ClientConfig) {
    let Ok(endpoint) = endpoint(&config, shared.options.address) else {
        shared.stats.borrow_mut().probe_failed += 1;
        return;
    };
    let mut ticks = tokio::time::interval(shared.options.probe_interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !shared.stopping.get() && Instant::now() < shared.window.1 {
        ticks.tick().await;
        shared.probe_started.set(Some(Instant::now()));
        one_shot(&shared, &endpoint, None).await;
    }
}

fn percentiles(samples: &mut [u32]) -> String {
    if samples.is_empty() {
        return "{}".into();
    }
    samples.sort_unstable();
    let at = |percent: u64| {
        // The nearest rank: the ceiling of percent% of the count.
        let rank = (percent * samples.len() as u64).div_ceil(100).max(1) as usize;
        samples[rank - 1] as f64 / 1000.0
    };
    format!(
        "{{\"p50\": {:.3}, \"p75\": {:.3}, \"p90\": {:.3}, \"p99\": {:.3}, \"max\": {:.3}}}",
        at(50),
        at(75),
        at(90),
        at(99),
        *samples.last().expect("not empty") as f64 / 1000.0
    )
}

fn counts_json<K: std::fmt::Display>(counts: &BTreeMap<K, u64>) -> String {
    let fields: Vec<String> = counts
        .iter()
        .map(|(key, value)| format!("\"{key}\": {value}"))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

/// quinn's counts over the load mode's connections, warm-up included: the client's own packets
/// sent and declared lost, its congestion events, the datagrams it received, and the largest
/// smoothed round trip at the end. When neither side's core is busy and a rate is low, the round
/// trip says whether the answers waited on the path (pacing, queues) rather than on work.
fn quic_counts(connections: &[quinn::Connection]) -> String {
    if connections.is_empty() {
        return String::new();
    }
    let (mut sent, mut lost, mut congestion_events, mut received, mut rtt) =
        (0u64, 0u64, 0u64, 0u64, Duration::ZERO);
    for connection in connections {
        let stats = connection.stats();
        sent += stats.path.sent_packets;
        lost += stats.path.lost_packets;
        congestion_events += stats.path.congestion_events;
        received += stats.udp_rx.datagrams;
        rtt = rtt.max(stats.path.rtt);
    }
    format!(
        ", \"quic\": {{\"sent_packets\": {sent}, \"lost_packets\": {lost}, \"congestion_events\": \
         {congestion_events}, \"received_datagrams\": {received}, \"max_rtt_ms\": {:.3}}}",
        rtt.as_secs_f64() * 1000.0
    )
}

/// Prints the report; returns whether it is valid (every answer right, at least one).
fn report(shared: &Shared, window: Duration) -> bool {
    let mut stats = shared.stats.borrow_mut();
    let options = &shared.options;
    let errors: u64 = stats.errors.values().sum();
    let done = stats.ok + stats.wrong_status + stats.wrong_length;
    let handshakes = options.mode == Mode::Handshakes;
    let valid = stats.ok > 0 && done == stats.ok && errors == 0 && stats.probe_failed == 0;
    let seconds = window.as_secs_f64();
    let rate = if valid && seconds > 0.0 {
        format!("{:.1}", stats.ok as f64 / seconds)
    } else {
        "null".into()
    };
    let latency = percentiles(&mut stats.latencies_us);
    let quic = quic_counts(&shared.load_connections.borrow());
    let probe = if handshakes {
        let probe_latency = percentiles(&mut stats.probe_latencies_us);
        format!(
            ", \"handshakes\": {}, \"late\": {}, \"probe\": {{\"requests\": {}, \"failed\": {}, \"timeouts\": {}, \
             \"unfinished\": {}, \"latency_ms\": {probe_latency}}}",
            stats.ok,
            stats.late,
            stats.probe_ok,
            stats.probe_failed,
            stats.probe_timeouts,
            stats.probe_unfinished
        )
    } else {
        String::new()
    };
    println!(
        "{{\"mode\": \"{}\", \"valid\": {valid}, \"connections\": {}, \"streams\": {}, \"duration_s\": {seconds:.3}, \
         \"requests\": {done}, \"ok\": {}, \"wrong_status\": {}, \"wrong_length\": {}, \"statuses\": {}, \
         \"errors\": {}, \"error_total\": {errors}, \"bytes\": {}, \"requests_per_second\": {rate}, \
         \"latency_ms\": {latency}{quic}{probe}}}",
        if handshakes { "handshakes" } else { "load" },
        options.connections,
        if handshakes { 1 } else { options.streams },
        stats.ok,
        stats.wrong_status,
        stats.wrong_length,
        counts_json(&stats.statuses),
        counts_json(&stats.errors),
        stats.bytes,
    );
    if !valid {
        eprintln!(
            "h3-load: not valid: {} right of {done} answers ({} wrong status, {} wrong length), errors {}, \
             {} failed probes",
            stats.ok,
            stats.wrong_status,
            stats.wrong_length,
            counts_json(&stats.errors),
            stats.probe_failed
        );
    }
    valid
}

async fn run_timed(options: Options, config: quinn::ClientConfig) -> bool {
    let counted_from = Instant::now() + options.warmup;
    // A `-n` run ends when its requests are done; its deadline is only a bound.
    let deadline = if options.requests.is_some() {
        counted_from + Duration::from_secs_f64(MAX_DURATION_S)
    } else {
        counted_from + options.duration
    };
    let shared = Shared::new(options, (counted_from, deadline), false);
    let mut tasks = JoinSet::new();
    match (shared.options.mode, shared.options.rate) {
        (Mode::Handshakes, Some(rate)) => {
            tasks.spawn_local(handshake_rate(shared.clone(), config.clone(), rate));
        }
        (Mode::Handshakes, None) => {
            for _ in 0..shared.options.connections {
                tasks.spawn_local(handshake_slot(shared.clone(), config.clone()));
            }
        }
        _ => {
            for _ in 0..shared.options.connections {
                tasks.spawn_local(load_connection(shared.clone(), config.clone()));
            }
        }
    }
    if shared.options.mode == Mode::Handshakes {
        tasks.spawn_local(probe(shared.clone(), config.clone()));
    }
    let everything_ended = async { while tasks.join_next().await.is_some() {} };
    tokio::select! {
        _ = tokio::time::sleep_until(deadline.into()) => {}
        _ = shared.done.notified() => {}
        _ = everything_ended => {}
    }
    let ended = shared
        .last_done
        .get()
        .unwrap_or_else(|| Instant::now().min(deadline));
    shared.stopping.set(true);
    if let Some(started) = shared
        .probe_started
        .get()
        .filter(|started| *started >= counted_from)
    {
        // The normal client's request still in flight has waited this long at least.
        let mut stats = shared.stats.borrow_mut();
        stats.probe_unfinished += 1;
        stats
            .probe_latencies_us
            .push(micros(Instant::now() - started));
    }
    let window = ended.saturating_duration_since(counted_from);
    let valid = report(&shared, window);
    // Let the connections close (CONNECTION_CLOSE sent) for a moment, without waiting for them.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    valid
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn json_string(text: &str) -> String {
    let mut quoted = String::from("\"");
    for character in text.chars() {
        match character {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            control if (control as u32) < 0x20 => {
                quoted.push_str(&format!("\\u{:04x}", control as u32))
            }
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

fn answer_json(answer: &Answer) -> String {
    let headers: Vec<String> = answer
        .headers
        .iter()
        .map(|(name, value)| format!("[{}, {}]", json_string(name), json_string(value)))
        .collect();
    format!(
        "{{\"status\": {}, \"headers\": [{}], \"length\": {}, \"body_hex\": \"{}\"}}",
        answer.status,
        headers.join(", "),
        answer.length,
        hex(&answer.body)
    )
}

async fn ask(mut send: SendRequest, shared: Rc<Shared>) -> Result<Answer, &'static str> {
    match tokio::time::timeout(
        shared.options.timeout,
        request(&mut send, &shared.options, true),
    )
    .await
    {
        Ok(result) => result,
        Err(_) => Err("timeout"),
    }
}

/// `--check N`: N answers on one connection, printed for the suite to judge.
async fn run_check(options: Options, config: quinn::ClientConfig, requests: usize) -> bool {
    let now = Instant::now();
    let shared = Shared::new(options, (now, now), true);
    let endpoint = match endpoint(&config, shared.options.address) {
        Ok(endpoint) => endpoint,
        Err(problem) => {
            println!("{{\"error\": {}}}", json_string(&problem));
            return false;
        }
    };
    let connection = match connect(&endpoint, &shared).await {
        Ok(connection) => connection,
        Err(kind) => {
            println!("{{\"error\": \"{kind}\"}}");
            return false;
        }
    };
    // The first request opens the way (SETTINGS exchanged, QPACK state settled); the others then
    // share the connection, as streams in flight together.
    let mut answers = vec![ask(connection.send.clone(), shared.clone()).await];
    let mut others = JoinSet::new();
    for index in 1..requests {
        let (send, shared) = (connection.send.clone(), shared.clone());
        others.spawn_local(async move { (index, ask(send, shared).await) });
    }
    let mut rest: Vec<(usize, Result<Answer, &'static str>)> = Vec::new();
    while let Some(joined) = others.join_next().await {
        rest.push(joined.expect("a check request does not panic"));
    }
    rest.sort_by_key(|(index, _)| *index);
    answers.extend(rest.into_iter().map(|(_, answer)| answer));
    let mut all = true;
    for answer in &answers {
        match answer {
            Ok(answer) => println!("{}", answer_json(answer)),
            Err(kind) => {
                all = false;
                println!("{{\"error\": \"{kind}\"}}");
            }
        }
    }
    connection.close();
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    all
}

/// Opens `count` connections on `endpoint`, each after one right answer, into `held`.
async fn open_idle(
    shared: &Rc<Shared>,
    endpoint: &quinn::Endpoint,
    count: usize,
    held: &mut Vec<Connection>,
) -> Result<(), String> {
    for _ in 0..count {
        let mut connection = connect(endpoint, shared)
            .await
            .map_err(|kind| format!("connect: {kind}"))?;
        let answer = timed_request(&mut connection.send, &shared.options)
            .await
            .map_err(|kind| format!("GET: {kind}"))?;
        if !shared.right(&answer) {
            return Err(format!(
                "GET: status {}, {} body bytes",
                answer.status, answer.length
            ));
        }
        held.push(connection);
    }
    Ok(())
}

/// How many of `held` the server closed, and how many more did not answer one more GET right (a
/// QUIC server that forgot a connection without a CONNECTION_CLOSE shows only when asked). The
/// GETs go `IDLE_CHECKS_AT_ONCE` at a time: a thousand at once would measure the server's burst
/// capacity, not whether it kept its connections.
async fn still_kept(shared: &Rc<Shared>, held: &[Connection]) -> (usize, usize) {
    let closed = held
        .iter()
        .filter(|connection| connection.quic.close_reason().is_some())
        .count();
    let mut unanswered = 0;
    for batch in held.chunks(IDLE_CHECKS_AT_ONCE) {
        let mut asks = JoinSet::new();
        for connection in batch
            .iter()
            .filter(|connection| connection.quic.close_reason().is_none())
        {
            let (mut send, shared) = (connection.send.clone(), shared.clone());
            asks.spawn_local(async move {
                matches!(timed_request(&mut send, &shared.options).await, Ok(answer) if shared.right(&answer))
            });
        }
        while let Some(answered) = asks.join_next().await {
            if !matches!(answered, Ok(true)) {
                unanswered += 1;
            }
        }
    }
    (closed, unanswered)
}

/// `--idle N`: benches/h2idle.py's line protocol over HTTP/3 (see the module's comment).
async fn run_idle(options: Options, config: quinn::ClientConfig, idle: usize) -> bool {
    // Nothing is counted: a close before the end shows in `close_reason` below.
    let now = Instant::now();
    let shared = Shared::new(options, (now, now), true);
    let mut errors: Vec<String> = Vec::new();
    let mut held = Vec::new();
    let mut opened = 0usize;
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    // One UDP socket for every held connection: the server's memory per connection does not
    // depend on the client's sockets, and a thousand sockets would only cost the client.
    match endpoint(&config, shared.options.address) {
        Err(problem) => errors.push(problem),
        Ok(endpoint) => {
            let warm = shared.options.warm;
            match open_idle(&shared, &endpoint, warm, &mut held).await {
                Err(problem) => errors.push(problem),
                Ok(()) => {
                    println!("warm");
                    let _ = stdin.next_line().await;
                    match open_idle(&shared, &endpoint, idle, &mut held).await {
                        Err(problem) => errors.push(problem),
                        Ok(()) => {
                            opened = idle;
                            println!("ready {opened}");
                            while let Ok(Some(_)) = stdin.next_line().await {}
                            let (closed, unanswered) = still_kept(&shared, &held).await;
                            if closed > 0 {
                                errors.push(format!(
                                    "the server closed {closed} of {} idle connections while they were held",
                                    held.len()
                                ));
                            }
                            if unanswered > 0 {
                                errors.push(format!(
                                    "{unanswered} of {} idle connections did not answer a GET after the hold",
                                    held.len()
                                ));
                            }
                        }
                    }
                }
            }
            for connection in &held {
                connection.close();
            }
            held.clear();
            let _ = tokio::time::timeout(Duration::from_secs(2), endpoint.wait_idle()).await;
        }
    }
    let ok = errors.is_empty() && opened == idle;
    let listed: Vec<String> = errors.iter().map(|error| json_string(error)).collect();
    println!(
        "{{\"ok\": {ok}, \"connections\": {opened}, \"errors\": [{}]}}",
        listed.join(", ")
    );
    ok
}

fn main() {
    let options = options();
    let config = client_config(&options).unwrap_or_else(|problem| usage(&problem));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let local = LocalSet::new();
    let ok = local.block_on(&runtime, async move {
        match options.mode {
            Mode::Check(requests) => run_check(options, config, requests).await,
            Mode::Idle(idle) => run_idle(options, config, idle).await,
            Mode::Load | Mode::Handshakes => run_timed(options, config).await,
        }
    });
    std::process::exit(if ok { 0 } else { 1 });
}
