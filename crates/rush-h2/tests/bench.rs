//! The microbenchmark behind the library decision (docs/architecture.md,
//! "HTTP/2"): hello requests from an in-memory `h2` client through
//! `H2Connection`, timing only the server side (feed, events, the response
//! commands, taking output). Ignored by default; run it once, optimised:
//!
//!     nice -n 10 cargo test --release -p rush-h2 --test bench -- --ignored --nocapture
//!
//! For scale it also times rush-proto's HTTP/1.1 head parse of a similar
//! request (rush's HTTP/1.1 path adds the response encoding and the socket).

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use rush_h2::io::Buffers;
use rush_h2::{Event, H2Connection, H2Settings};

const HELLO: &[u8] = b"Hello, world!";

struct Timed {
    server: H2Connection,
    bufs: Rc<RefCell<Buffers>>,
    time: Duration,
    answered: usize,
}

impl Timed {
    /// Client bytes to the server, the "application" answers every request
    /// at once, server bytes to the client. True if anything moved.
    fn step(&mut self) -> bool {
        let input = std::mem::take(&mut self.bufs.borrow_mut().output);
        let start = Instant::now();
        self.server.feed(&input);
        while let Some(e) = self.server.poll_event() {
            if let Event::Request { stream, .. } = e {
                self.server
                    .send_response(
                        stream,
                        200,
                        [
                            (&b"content-type"[..], &b"text/plain"[..]),
                            (&b"content-length"[..], &b"13"[..]),
                        ],
                        false,
                    )
                    .unwrap();
                self.server
                    .send_data(stream, Bytes::from_static(HELLO), true)
                    .unwrap();
                self.answered += 1;
            }
        }
        let mut out = Vec::new();
        self.server.take_output(&mut out);
        self.time += start.elapsed();
        let moved = !input.is_empty() || !out.is_empty();
        self.bufs.borrow_mut().input.extend_from_slice(&out);
        moved
    }
}

fn run(concurrency: usize, total: usize) -> (f64, f64) {
    let pair = Pair::new(H2Settings::default());
    let Pair {
        server,
        client_bufs,
        mut client,
        mut client_conn,
        ..
    } = pair;
    let mut t = Timed {
        server,
        bufs: client_bufs,
        time: Duration::ZERO,
        answered: 0,
    };
    let wall = Instant::now();
    let mut done = 0;
    while done < total {
        let mut futs = Vec::with_capacity(concurrency);
        for _ in 0..concurrency {
            let req = http::Request::get("http://example.com/hello")
                .body(())
                .unwrap();
            futs.push(client.send_request(req, true).unwrap().0);
        }
        let mut pending = futs.len();
        let mut bodies: Vec<Option<h2::RecvStream>> = (0..futs.len()).map(|_| None).collect();
        while pending > 0 {
            let _ = poll_once(&mut client_conn);
            t.step();
            let _ = poll_once(&mut client_conn);
            for (i, fut) in futs.iter_mut().enumerate() {
                if bodies[i].is_none() {
                    if let Poll::Ready(r) = poll_once(fut) {
                        bodies[i] = Some(r.unwrap().into_body());
                    }
                }
            }
            for body in bodies.iter_mut().flatten() {
                while let Poll::Ready(Some(Ok(chunk))) = body.poll_data(&mut cx()) {
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
            }
            pending = bodies
                .iter()
                .filter(|b| !b.as_ref().is_some_and(|b| b.is_end_stream()))
                .count();
        }
        done += concurrency;
    }
    assert_eq!(t.answered, done);
    let server_us = t.time.as_secs_f64() * 1e6 / done as f64;
    let wall_us = wall.elapsed().as_secs_f64() * 1e6 / done as f64;
    (server_us, wall_us)
}

/// Server-side MB/s of `count` downloads of `size` bytes, one at a time.
fn download(size: usize, count: usize) -> f64 {
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(16 << 20)
        .initial_connection_window_size(16 << 20);
    let pair = Pair::with_client(H2Settings::default(), builder);
    let Pair {
        mut server,
        client_bufs,
        mut client,
        mut client_conn,
        ..
    } = pair;
    let body = Bytes::from(vec![b'z'; size]);
    let mut time = Duration::ZERO;
    for _ in 0..count {
        let req = http::Request::get("http://example.com/big")
            .body(())
            .unwrap();
        let (mut fut, _) = client.send_request(req, true).unwrap();
        let mut got = 0;
        let mut resp_body: Option<h2::RecvStream> = None;
        for _ in 0..100_000 {
            let _ = poll_once(&mut client_conn);
            let input = std::mem::take(&mut client_bufs.borrow_mut().output);
            let start = Instant::now();
            server.feed(&input);
            while let Some(e) = server.poll_event() {
                if let Event::Request { stream, .. } = e {
                    server.send_response(stream, 200, [], false).unwrap();
                    server.send_data(stream, body.clone(), true).unwrap();
                }
            }
            let mut out = Vec::new();
            server.take_output(&mut out);
            time += start.elapsed();
            client_bufs.borrow_mut().input.extend_from_slice(&out);
            let _ = poll_once(&mut client_conn);
            if resp_body.is_none() {
                if let Poll::Ready(r) = poll_once(&mut fut) {
                    resp_body = Some(r.unwrap().into_body());
                }
            }
            if let Some(b) = resp_body.as_mut() {
                while let Poll::Ready(Some(Ok(chunk))) = b.poll_data(&mut cx()) {
                    got += chunk.len();
                    let _ = b.flow_control().release_capacity(chunk.len());
                }
                if got == size && b.is_end_stream() {
                    break;
                }
            }
        }
        assert_eq!(got, size);
    }
    (size * count) as f64 / time.as_secs_f64() / 1e6
}

#[test]
#[ignore]
fn hello_server_side_cost() {
    // Warm up, then measure.
    run(1, 2000);
    // The machine is shared: report the best of five runs and the median,
    // the best being the least disturbed by other work.
    for (concurrency, total) in [(1, 20_000), (10, 50_000), (100, 50_000)] {
        let mut runs: Vec<(f64, f64)> = (0..5).map(|_| run(concurrency, total)).collect();
        runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (best, wall) = runs[0];
        let median = runs[2].0;
        println!(
            "h2 hello, {concurrency:>3} concurrent streams: {best:.2} us/request server side \
             (median {median:.2}; {wall:.2} us with the h2 client)"
        );
    }

    // A 1 MiB response on one stream, the client reading as it arrives
    // (its windows opened to 16 MiB, as browsers and h2load do).
    let mut best = f64::MAX;
    for _ in 0..5 {
        best = best.min(download(1 << 20, 20));
    }
    println!("h2 1 MiB download: {best:.0} MB/s server side (best of 5)");

    let request =
        b"GET /hello HTTP/1.1\r\nHost: example.com\r\nUser-Agent: h2load\r\nAccept: */*\r\n\r\n";
    let limits = rush_proto::Limits::default();
    let mut headers = Vec::new();
    let n = 1_000_000;
    let start = Instant::now();
    for _ in 0..n {
        headers.clear();
        let r =
            rush_proto::parse_request_head(std::hint::black_box(request), &limits, &mut headers);
        std::hint::black_box(r.unwrap());
    }
    let us = start.elapsed().as_secs_f64() * 1e6 / n as f64;
    println!("HTTP/1.1 head parse (rush-proto), for scale: {us:.2} us/request");
}
