//! A measurement, not a test (ignored; run it with
//! `cargo test --profile quick -p rush-h3 --test bench -- --ignored --nocapture`):
//! GET requests answered over one in-memory HTTP/3 connection, in waves of
//! 100 concurrent streams, with `h3`'s client in the same thread. It prints
//! requests per second for the whole loop and for the server endpoint's
//! calls alone (datagrams in and out, and the commands), and asserts only that every answer was right.

mod support;

use std::time::Instant;

use bytes::Bytes;
use rush_h3::{Event, HeaderMap, HeaderValue};
use support::{get, request, settings, Net};

const WAVES: usize = 50;
const PER_WAVE: usize = 100;

#[test]
#[ignore]
fn requests_per_second_in_memory() {
    let mut net = Net::new(settings());
    let (client, _closed) = net.h3_client();
    // Warm up: the handshake and one exchange.
    let first = request(&mut net, &client, get("/"), vec![], None);
    let answer_all = |net: &mut Net| {
        let start = Instant::now();
        for (ch, e) in net.take_events() {
            if let Event::Request { stream, .. } = e {
                let mut h = HeaderMap::new();
                h.insert("content-type", HeaderValue::from_static("text/plain"));
                net.server.send_response(ch, stream, 200, h, false).unwrap();
                net.server
                    .send_data(ch, stream, Bytes::from_static(b"Hello, world!"), true)
                    .unwrap();
            }
        }
        // The commands run the server's HTTP/3 layer: its time too.
        net.server_time += start.elapsed();
    };
    net.run_until(|net| {
        answer_all(net);
        first.borrow().is_some()
    });
    net.server_time = std::time::Duration::ZERO;
    let start = Instant::now();
    for _ in 0..WAVES {
        let answers: Vec<_> = (0..PER_WAVE)
            .map(|_| request(&mut net, &client, get("/"), vec![], None))
            .collect();
        net.run_until(|net| {
            answer_all(net);
            answers.iter().all(|a| a.borrow().is_some())
        });
        for a in answers {
            let a = a.borrow().clone().unwrap();
            assert_eq!((a.status, a.body.as_slice()), (200, &b"Hello, world!"[..]));
        }
    }
    let total = (WAVES * PER_WAVE) as f64;
    let elapsed = start.elapsed().as_secs_f64();
    let server = net.server_time.as_secs_f64();
    println!(
        "{} requests: {:.0} req/s for client and server in one thread; \
         server endpoint calls {:.1} us/request ({:.0} req/s)",
        total,
        total / elapsed,
        server * 1e6 / total,
        total / server
    );
}
