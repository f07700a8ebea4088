//! A minimal blocking h2c (prior knowledge) server over rush-h2, for
//! conformance tools such as h2spec, not for use: a thread per connection,
//! blocking reads with a short timeout, every request answered `200 hello`
//! once its body ended (the body released as it arrives).
//!
//!     cargo run --release -p rush-h2 --example h2c_server -- 127.0.0.1:8088
//!     h2spec -h 127.0.0.1 -p 8088
//!
//! It shows the loop a server runs around `H2Connection`: events, commands,
//! output written, input read while `wants_read`, the end on `is_done`
//! with a lingering close. Against it, h2spec 2 passes 145 of 145 cases and
//! 146 of 146 with `--strict` (docs/architecture.md, "HTTP/2").

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use rush_h2::{Bytes, Event, H2Connection, H2Settings};

fn respond(conn: &mut H2Connection, stream: u32) {
    let head = [(&b"content-type"[..], &b"text/plain"[..])];
    if conn.send_response(stream, 200, head, false).is_ok() {
        let _ = conn.send_data(stream, Bytes::from_static(b"hello"), true);
    }
}

/// Closes as a server should after its last frame (a GOAWAY, say): shut the
/// write side, then read and discard for a moment, so the peer reads what
/// was sent instead of a reset caused by bytes it sent meanwhile.
fn linger(mut sock: TcpStream) {
    let _ = sock.shutdown(std::net::Shutdown::Write);
    let mut sink = [0u8; 4096];
    for _ in 0..50 {
        match sock.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn serve(mut sock: TcpStream) {
    let _ = sock.set_read_timeout(Some(Duration::from_millis(20)));
    let _ = sock.set_nodelay(true);
    let mut conn = H2Connection::new(H2Settings::default());
    let mut buf = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    let mut eof = false;
    loop {
        while let Some(event) = conn.poll_event() {
            match event {
                Event::Request {
                    stream,
                    end_stream: true,
                    ..
                } => respond(&mut conn, stream),
                Event::Data { stream, data } => conn.release(stream, data.len()),
                Event::RequestEnd { stream, .. } => respond(&mut conn, stream),
                _ => {}
            }
        }
        conn.take_output(&mut out);
        if !out.is_empty() {
            if sock.write_all(&out).is_err() {
                return;
            }
            out.clear();
            continue;
        }
        if conn.is_done() || eof {
            linger(sock);
            return;
        }
        if !conn.wants_read() {
            continue;
        }
        match sock.read(&mut buf) {
            Ok(0) => {
                eof = true;
                conn.feed_eof();
            }
            Ok(n) => conn.feed(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
    }
}

fn main() {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8088".to_owned());
    let listener = TcpListener::bind(&addr).expect("bind");
    eprintln!("h2c_server on {addr}");
    for sock in listener.incoming().flatten() {
        std::thread::spawn(move || serve(sock));
    }
}
