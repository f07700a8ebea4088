//! A TLS transport: a TCP socket with a rustls `ServerConnection` between
//! it and the connection's buffers.
//!
//! rustls is sans-IO: `read_tls` takes records from the socket,
//! `process_new_packets` decrypts them (and advances the handshake),
//! `reader()` yields plaintext; `writer()` takes plaintext and `write_tls`
//! puts records on the socket. This type turns that into the plain
//! `Read`/`Write` the HTTP/1.1 driver already uses, non-blocking:
//! * a read returns plaintext, or WouldBlock once the socket has nothing
//!   more; handshake records rustls wants to send are flushed as they
//!   appear, so the handshake needs no state of its own in the loop;
//! * a write hands plaintext to rustls (bounded by its buffer limit) and
//!   flushes records as far as the socket takes them; what is left is
//!   reported by [`TlsStream::wants_write`], which the connection counts as
//!   pending output, so the loop waits for writability as for any output.
//! * Handshakes in progress are counted per worker ([`HandshakeGate`]);
//!   past a cap a newcomer is closed at once, so a flood of handshakes
//!   (each costs the loop real CPU) cannot starve established connections.
//!   A handshake counts from its first byte, not from accept: a socket that
//!   never sends anything costs no CPU, and counting it let a few hundred
//!   silent sockets lock every new client out. Silent sockets are bounded
//!   by the header timeout and by the connection cap's eviction instead.
//! * A first byte that is not a TLS handshake record but an ASCII letter is
//!   plain HTTP sent to the TLS port: it gets a plain-text 400 saying so
//!   (rather than a TLS alert the client cannot read, or a hang), and the
//!   connection closes as after any refusal: the driver shuts the write
//!   side and lingers, reading (now the raw socket:
//!   [`TlsStream::refused_plain_http`]) and discarding what the client
//!   still sends, bounded by the linger limits. Closing at once with bytes
//!   unread, or arriving later, would send an RST that can cost the client
//!   the hint.

use std::cell::{Cell, OnceCell};
use std::io::{self, Read, Write};
use std::rc::Rc;

use mio::net::TcpStream;
use rustls::ServerConnection;

/// The most plaintext rustls holds unsent per connection; a writer that
/// meets it gets WouldBlock, as from a full socket.
const PLAINTEXT_LIMIT: usize = 256 * 1024;

/// What a client that spoke plain HTTP to the TLS port reads.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: 44\r\nConnection: close\r\n\r\nThis port speaks HTTPS: use an https:// URL\n";

/// The session as an app sees it (ASGI's `tls` extension, WSGI's `SSL_*`).
pub struct TlsInfo {
    /// 0x0304 for TLS 1.3, 0x0303 for TLS 1.2.
    pub version_code: u16,
    pub version_name: &'static str,
    pub cipher_code: u16,
    pub cipher_name: &'static str,
    /// The client's verified certificate chain (leaf first), PEM.
    pub client_chain_pem: Vec<String>,
}

/// The worker's count of TLS handshakes in progress and its cap; shared by
/// the connections (each holds a slot while its handshake runs) and the
/// loop, which logs the refusals the gate counted.
pub struct HandshakeGate {
    in_progress: Cell<usize>,
    max: usize,
    refused: Cell<u64>,
}

impl HandshakeGate {
    pub fn new(max: usize) -> HandshakeGate {
        HandshakeGate {
            in_progress: Cell::new(0),
            max: max.max(1),
            refused: Cell::new(0),
        }
    }

    /// Handshakes refused at the cap since the last call (taken: the caller
    /// reports them).
    pub fn take_refused(&self) -> u64 {
        self.refused.replace(0)
    }

    /// A slot for a handshake that begins, or `None` at the cap (counted).
    fn begin(self: &Rc<Self>) -> Option<Rc<HandshakeGate>> {
        if self.in_progress.get() >= self.max {
            self.refused.set(self.refused.get() + 1);
            return None;
        }
        self.in_progress.set(self.in_progress.get() + 1);
        Some(self.clone())
    }

    fn end(&self) {
        self.in_progress
            .set(self.in_progress.get().saturating_sub(1));
    }
}

/// A TLS server session over a TCP socket.
pub struct TlsStream {
    pub socket: TcpStream,
    session: ServerConnection,
    /// The first byte was looked at (plain HTTP is refused with a hint).
    checked_first_byte: bool,
    /// The client spoke plain HTTP and got the hint: reads now take raw
    /// bytes from the socket, for the driver to discard while it lingers.
    plain_http_refused: bool,
    /// The worker's gate, asked for a slot when the first byte arrives.
    gate: Rc<HandshakeGate>,
    /// While the handshake runs: its slot in the gate, given back when it
    /// completes or the connection goes.
    handshake_slot: Option<Rc<HandshakeGate>>,
    /// What the app sees of the session, made at the first request (a
    /// session does not change after its handshake; the client's chain in
    /// PEM is not encoded again for every request).
    info: OnceCell<TlsInfo>,
    /// The last read from the socket returned less than rustls asked for:
    /// the socket had nothing more at that moment, so the drive may wait
    /// for epoll's next edge instead of reading on to EAGAIN (one recv per
    /// request saved, as on a plaintext connection).
    socket_drained: bool,
}

/// The socket as rustls reads it, noting whether a read came back short.
struct NoteShortRead<'a> {
    socket: &'a mut TcpStream,
    short: bool,
}

impl Read for NoteShortRead<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        let count = self.socket.read(buffer)?;
        self.short = count < buffer.len();
        Ok(count)
    }
}

/// The socket as rustls writes records to it. rustls hands its records
/// over as a vector of buffers even when there is one, and `writev` costs
/// the kernel more than `send` (50 to 70 ns a call on the bench machine,
/// benches/profiles/send_vs_writev.c: the file-layer checks a socket send
/// skips). A response is one record, so the usual case is one buffer: it
/// goes out with `send`, as a plaintext response does; several records
/// still go out in one `writev`.
struct RecordSink<'a>(&'a TcpStream);

impl Write for RecordSink<'_> {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        // std's TCP write is send(MSG_NOSIGNAL).
        (&*self.0).write(buffer)
    }

    fn write_vectored(&mut self, buffers: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match buffers {
            [one] => self.write(one),
            _ => (&*self.0).write_vectored(buffers),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TlsStream {
    /// The handshake takes a slot in `gate` once its first byte arrives,
    /// and holds it until it completes.
    pub fn new(
        socket: TcpStream,
        mut session: ServerConnection,
        gate: &Rc<HandshakeGate>,
    ) -> TlsStream {
        session.set_buffer_limit(Some(PLAINTEXT_LIMIT));
        TlsStream {
            socket,
            session,
            checked_first_byte: false,
            plain_http_refused: false,
            gate: gate.clone(),
            handshake_slot: None,
            info: OnceCell::new(),
            socket_drained: false,
        }
    }

    fn release_handshake_slot(&mut self) {
        if let Some(slot) = self.handshake_slot.take() {
            slot.end();
        }
    }

    /// Whether ALPN chose `h2` (known once the handshake is done, which
    /// it is when application bytes arrive).
    pub fn negotiated_h2(&self) -> bool {
        self.session.alpn_protocol() == Some(b"h2")
    }

    /// What the app may learn about the session (asked once a request has
    /// arrived, so after the handshake).
    pub fn info(&self) -> &TlsInfo {
        self.info.get_or_init(|| self.describe_session())
    }

    fn describe_session(&self) -> TlsInfo {
        use base64::Engine as _;
        let version = self.session.protocol_version();
        let suite = self
            .session
            .negotiated_cipher_suite()
            .map(|suite| suite.suite());
        let client_chain_pem = self
            .session
            .peer_certificates()
            .unwrap_or_default()
            .iter()
            .map(|certificate| {
                let body = base64::engine::general_purpose::STANDARD.encode(certificate.as_ref());
                let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
                for line in body.as_bytes().chunks(64) {
                    pem.push_str(std::str::from_utf8(line).unwrap_or_default());
                    pem.push('\n');
                }
                pem.push_str("-----END CERTIFICATE-----\n");
                pem
            })
            .collect();
        TlsInfo {
            version_code: version.map(u16::from).unwrap_or(0),
            version_name: match version {
                Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                _ => "",
            },
            cipher_code: suite.map(u16::from).unwrap_or(0),
            cipher_name: suite
                .and_then(|suite| openssl_cipher_name(u16::from(suite)).or(suite.as_str()))
                .unwrap_or(""),
            client_chain_pem,
        }
    }

    /// The client spoke plain HTTP and was answered with the hint (the
    /// read that found out failed): close as after a refusal, lingering.
    pub fn refused_plain_http(&self) -> bool {
        self.plain_http_refused
    }

    /// Encrypted bytes are waiting for the socket.
    pub fn wants_write(&self) -> bool {
        self.session.wants_write()
    }

    /// Whether a read that came back short of the caller's buffer may
    /// still find input without a new epoll event: only if the socket's
    /// last read filled what rustls asked for. (A short read has handed out
    /// all the plaintext rustls held, since its reader fills the buffer
    /// across records; a record split across reads completes with bytes
    /// that arrive later, which epoll reports.)
    pub fn may_have_input(&self) -> bool {
        !self.socket_drained
    }

    /// Puts as many pending records on the socket as it takes.
    pub fn flush_records(&mut self) -> io::Result<()> {
        while self.session.wants_write() {
            match self.session.write_tls(&mut RecordSink(&self.socket)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Before the first record: plain HTTP gets a plain answer and an error
    /// (the connection closes); anything else begins a handshake, which
    /// needs a slot in the gate (or the connection closes).
    fn check_first_byte(&mut self) -> io::Result<()> {
        let mut first = [0u8; 1];
        // SAFETY: peeks at most one byte into a live local buffer of that
        // length; the socket is open for `self`'s lifetime.
        let peeked = unsafe {
            libc::recv(
                std::os::fd::AsRawFd::as_raw_fd(&self.socket),
                first.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK,
            )
        };
        if peeked < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::WouldBlock {
                // Nothing yet: the next readiness event looks again. Going on
                // to read_tls would race: bytes that arrive between this
                // peek and that read would reach rustls unlooked at, and a
                // plain-HTTP client would get a TLS alert, not the hint
                // (seen, under load, in test_tls.py's plain-HTTP test).
                return Err(error);
            }
        }
        if peeked < 1 {
            // EOF, or an error: read_tls below reports it.
            return Ok(());
        }
        self.checked_first_byte = true;
        if first[0].is_ascii_alphabetic() {
            // A fresh socket's buffer takes these few bytes whole.
            let _ = self.socket.write(PLAIN_HTTP_ANSWER);
            // The driver closes the way it closes after any refusal (see
            // the module documentation): the error tells it to.
            self.plain_http_refused = true;
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "plain HTTP on the TLS port",
            ));
        }
        match self.gate.begin() {
            Some(slot) => {
                self.handshake_slot = Some(slot);
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "too many TLS handshakes in progress",
            )),
        }
    }
}

impl Read for TlsStream {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        if self.plain_http_refused {
            // Lingering after the hint: raw bytes, to be discarded.
            return self.socket.read(buffer);
        }
        loop {
            match self.session.reader().read(buffer) {
                Ok(count) => return Ok(count),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                // The peer closed without close_notify: the end of its data.
                Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(0),
                Err(error) => return Err(error),
            }
            if !self.checked_first_byte {
                self.check_first_byte()?;
            }
            let mut socket = NoteShortRead {
                socket: &mut self.socket,
                short: false,
            };
            let read = self.session.read_tls(&mut socket);
            self.socket_drained = socket.short;
            match read {
                Ok(0) => return Ok(0),
                Ok(_) => {}
                Err(error) => {
                    self.socket_drained = false;
                    return Err(error);
                }
            }
            if let Err(error) = self.session.process_new_packets() {
                // The alert rustls queued tells the client why.
                let _ = self.flush_records();
                return Err(io::Error::new(io::ErrorKind::InvalidData, error));
            }
            if self.handshake_slot.is_some() && !self.session.is_handshaking() {
                self.release_handshake_slot();
            }
            // Handshake messages (or a key update) to answer right away.
            self.flush_records()?;
        }
    }
}

impl Write for TlsStream {
    fn write(&mut self, buffer: &[u8]) -> io::Result<usize> {
        let mut accepted = self.session.writer().write(buffer)?;
        if accepted == 0 && !buffer.is_empty() {
            // rustls's plaintext buffer is full: make room, then try again.
            self.flush_records()?;
            accepted = self.session.writer().write(buffer)?;
            if accepted == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        self.flush_records()?;
        Ok(accepted)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_records()
    }
}

impl Drop for TlsStream {
    fn drop(&mut self) {
        self.release_handshake_slot();
    }
}

/// The OpenSSL name of a cipher suite (by its IANA code), as mod_ssl's
/// `SSL_CIPHER` spells it and apps parse it; rustls's own names differ
/// (`TLS13_AES_256_GCM_SHA384` is OpenSSL's `TLS_AES_256_GCM_SHA384`).
/// These are the suites rustls offers; `None` for any other.
pub fn openssl_cipher_name(code: u16) -> Option<&'static str> {
    Some(match code {
        0x1301 => "TLS_AES_128_GCM_SHA256",
        0x1302 => "TLS_AES_256_GCM_SHA384",
        0x1303 => "TLS_CHACHA20_POLY1305_SHA256",
        0xc02b => "ECDHE-ECDSA-AES128-GCM-SHA256",
        0xc02c => "ECDHE-ECDSA-AES256-GCM-SHA384",
        0xcca9 => "ECDHE-ECDSA-CHACHA20-POLY1305",
        0xc02f => "ECDHE-RSA-AES128-GCM-SHA256",
        0xc030 => "ECDHE-RSA-AES256-GCM-SHA384",
        0xcca8 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::openssl_cipher_name;

    #[test]
    fn every_suite_rustls_offers_has_its_openssl_name() {
        let provider = rustls::crypto::ring::default_provider();
        for suite in provider.cipher_suites {
            let code = u16::from(suite.suite());
            assert!(
                openssl_cipher_name(code).is_some(),
                "{:?} has no OpenSSL name",
                suite.suite()
            );
        }
        assert_eq!(openssl_cipher_name(0x1302), Some("TLS_AES_256_GCM_SHA384"));
    }
}
