//! Hostile peers, in memory (tests/support): a flood of Initial packets from
//! spoofed addresses, malformed HTTP/3, too many connections.

mod support;

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use rush_h3::quinn_proto::{ConnectionError, Dir, Endpoint, EndpointConfig};
use rush_h3::{Code, Event, H3Settings, HeaderMap};
use support::{get, raw_get, request, settings, Net};

/// A QUIC v1 Retry packet: long header, type 3 (RFC 9000 section 17.2.5).
fn is_retry(datagram: &[u8]) -> bool {
    datagram[0] & 0x80 != 0 && (datagram[0] >> 4) & 0x3 == 3 && datagram[1..5] == [0, 0, 0, 1]
}

/// The first datagram of a real client's handshake: an Initial padded to
/// 1200 bytes with a ClientHello.
fn client_initial(net: &Net) -> Vec<u8> {
    let mut client = Endpoint::new(Arc::new(EndpointConfig::default()), None, false, None);
    let (_, mut conn) = client
        .connect(
            net.now,
            net.client_config.clone(),
            net.server_addr,
            "localhost",
        )
        .unwrap();
    let mut buf = Vec::new();
    let t = conn.poll_transmit(net.now, 1, &mut buf).unwrap();
    buf.truncate(t.size);
    buf
}

#[test]
fn initial_flood_gets_retries_and_no_address_gets_more_than_three_times_its_bytes() {
    // A certificate of about 6 KB makes the server's first flight larger
    // than three Initials, so the anti-amplification limit has to bind.
    let mut net = Net::with_certificate(
        H3Settings {
            retry_above_unvalidated: 4,
            ..settings()
        },
        150,
    );
    let spoofed: Vec<SocketAddr> = (0..40)
        .map(|i| SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 9, 0, i + 1)), 40000))
        .collect();
    let mut retried: HashSet<SocketAddr> = HashSet::new();
    let collect = |net: &mut Net, retried: &mut HashSet<SocketAddr>| {
        let mut buf = Vec::new();
        while let Some(t) = net.server.poll_transmit(net.now, &mut buf) {
            *net.sent_to.entry(t.destination).or_default() += t.size as u64;
            if is_retry(&buf[..t.size]) {
                retried.insert(t.destination);
            }
        }
    };
    for from in &spoofed {
        let initial = client_initial(&net);
        net.deliver_to_server(*from, &initial);
        collect(&mut net, &mut retried);
    }
    // The spoofed clients never answer: run the server's timers (its
    // retransmissions of the flight) until it gives the handshakes up.
    for _ in 0..1000 {
        if !net.advance() {
            break;
        }
        collect(&mut net, &mut retried);
    }
    assert_eq!(net.server.stats().accepted, 4);
    assert_eq!(net.server.stats().retries, 36);
    assert_eq!(retried.len(), 36);
    assert!(spoofed[..4].iter().all(|a| !retried.contains(a)));
    for from in &spoofed {
        let received = net.received_from[from];
        let sent = net.sent_to.get(from).copied().unwrap_or(0);
        assert!(
            sent <= 3 * received,
            "{from}: sent {sent} bytes for {received} received"
        );
    }
    // The limit bound: the accepted handshakes stopped near three times
    // what they got, short of their whole flight.
    for from in &spoofed[..4] {
        let (received, sent) = (net.received_from[from], net.sent_to[from]);
        assert!(sent > 2 * received, "{from}: sent only {sent}");
    }
    assert_eq!(net.server.connections(), 0, "abandoned handshakes are gone");

    // A real client is served during a flood: it is sent a Retry and comes
    // back with the token. Its whole flight exceeds three Initials.
    let mut flood = Net::with_certificate(
        H3Settings {
            retry_above_unvalidated: 4,
            ..settings()
        },
        150,
    );
    for from in &spoofed[..10] {
        let initial = client_initial(&flood);
        flood.deliver_to_server(*from, &initial);
    }
    let mut ignored = HashSet::new();
    collect(&mut flood, &mut ignored);
    let (client, _closed) = flood.h3_client();
    let answer = request(&mut flood, &client, get("/"), vec![], None);
    flood.run_until(|net| {
        for (ch, e) in net.take_events() {
            if let Event::Request { stream, .. } = e {
                net.server
                    .send_response(ch, stream, 204, HeaderMap::new(), true)
                    .unwrap();
            }
        }
        answer.borrow().is_some()
    });
    let a = answer.borrow().clone().unwrap();
    assert_eq!((a.error, a.status), (None, 204));
    assert_eq!(flood.server.stats().retries, 7, "the real client too");
    let real = flood.sent_to[&flood.client_addr];
    assert!(real > 3 * 1200, "the server's flight is {real} bytes");
}

#[test]
fn malformed_frame_is_a_connection_error() {
    let mut net = Net::new(settings());
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    {
        let mut q = quic.0.borrow_mut();
        let id = q.conn.streams().open(Dir::Bi).unwrap();
        // A HEADERS frame announcing 10 bytes, of which the stream carries
        // 2 before it ends: RFC 9114 section 7.1 makes it H3_FRAME_ERROR.
        let mut s = q.conn.send_stream(id);
        s.write(&[0x01, 0x0a, 0x00, 0x00]).unwrap();
        s.finish().unwrap();
    }
    let mut closed = None;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            match e {
                Event::Closed { code, .. } => closed = Some(code),
                Event::Request { .. } => panic!("a malformed request reached the application"),
                _ => {}
            }
        }
        closed.is_some() && quic.lost().is_some()
    });
    let frame_error = Code::H3_FRAME_ERROR.value();
    assert_eq!(closed, Some(Some(frame_error)));
    match quic.lost().unwrap() {
        ConnectionError::ApplicationClosed(c) => {
            assert_eq!(c.error_code.into_inner(), frame_error)
        }
        other => panic!("client saw {other:?}"),
    }
}

#[test]
fn connections_past_the_bound_are_refused() {
    let mut net = Net::new(H3Settings {
        max_connections: 2,
        ..settings()
    });
    let quics: Vec<_> = (0..3).map(|_| net.connect()).collect();
    net.run_until(|_| quics.iter().all(|q| q.is_connected() || q.lost().is_some()));
    let outcomes: HashMap<bool, usize> = quics.iter().fold(HashMap::new(), |mut m, q| {
        *m.entry(q.is_connected()).or_default() += 1;
        m
    });
    assert_eq!(outcomes.get(&true), Some(&2));
    let refused = quics.iter().find(|q| !q.is_connected()).unwrap();
    let reason = refused.lost().unwrap().to_string();
    assert!(reason.contains("refused"), "{reason}");
    assert_eq!(net.server.stats().refused, 1);
}

#[test]
fn requests_past_the_goaway_are_refused() {
    let mut net = Net::new(settings());
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    // A client that ignores GOAWAY: raw streams, no h3 client.
    let send_get = |quic: &rush_h3::quic::QuicConnection| {
        let mut q = quic.0.borrow_mut();
        let id = q.conn.streams().open(Dir::Bi).unwrap();
        let mut s = q.conn.send_stream(id);
        s.write(&raw_get()).unwrap();
        s.finish().unwrap();
        id
    };
    let first = send_get(&quic);
    let mut admitted = Vec::new();
    net.run_until(|net| {
        for (ch, e) in net.take_events() {
            if let Event::Request { stream, .. } = e {
                admitted.push((ch, stream));
            }
        }
        !admitted.is_empty()
    });
    let (ch, stream) = admitted[0];
    assert_eq!(stream, u64::from(first));
    net.server.graceful_shutdown(ch);
    net.settle();
    // Stream 4 is at the GOAWAY's id (4): not to be processed.
    let late = send_get(&quic);
    net.settle();
    let late_events: Vec<_> = net.take_events();
    assert!(
        late_events
            .iter()
            .all(|(_, e)| !matches!(e, Event::Request { .. })),
        "{late_events:?}"
    );
    let reset = {
        let mut q = quic.0.borrow_mut();
        let mut recv = q.conn.recv_stream(late);
        let mut chunks = recv.read(true).unwrap();
        let r = chunks.next(usize::MAX);
        let _ = chunks.finalize();
        r
    };
    match reset {
        Err(rush_h3::quinn_proto::ReadError::Reset(code)) => {
            assert_eq!(code.into_inner(), Code::H3_REQUEST_REJECTED.value())
        }
        other => panic!("late stream: {other:?}"),
    }
    // The admitted request still completes, then the connection closes.
    net.server
        .send_response(ch, stream, 204, HeaderMap::new(), true)
        .unwrap();
    net.run_until(|net| net.server.connections() == 0);
}

#[test]
fn a_frame_announcing_more_than_the_head_limit_ends_its_stream() {
    let mut net = Net::new(settings());
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    let id = quic.0.borrow_mut().conn.streams().open(Dir::Bi).unwrap();
    // HEADERS announcing 10 MiB (an 8-byte varint length), then its
    // "payload" for as long as the server takes it, up to 4 MiB.
    let head = vec![0x01, 0xc0, 0, 0, 0, 0, 0xa0, 0, 0];
    let filler = vec![0x41u8; 16 * 1024];
    let mut written = 0usize;
    let mut stopped = None;
    let mut pending = head;
    for _ in 0..10_000 {
        {
            let mut q = quic.0.borrow_mut();
            let mut s = q.conn.send_stream(id);
            loop {
                if pending.is_empty() {
                    pending = filler.clone();
                }
                match s.write(&pending) {
                    Ok(n) => {
                        written += n;
                        pending.drain(..n);
                    }
                    Err(rush_h3::quinn_proto::WriteError::Stopped(code)) => {
                        stopped = Some(code.into_inner());
                        break;
                    }
                    Err(_) => break,
                }
                if written >= 4 * 1024 * 1024 {
                    break;
                }
            }
        }
        if stopped.is_some() || written >= 4 * 1024 * 1024 {
            break;
        }
        net.settle();
        if quic.0.borrow_mut().conn.send_stream(id).stopped() != Ok(None) {
            let code = quic.0.borrow_mut().conn.send_stream(id).stopped();
            stopped = code.ok().flatten().map(|c| c.into_inner());
            break;
        }
    }
    let excessive = Code::H3_EXCESSIVE_LOAD.value();
    assert_eq!(stopped, Some(excessive), "after {written} bytes");
    let bound =
        settings().max_field_section_size as usize + settings().stream_receive_window as usize;
    assert!(written <= bound + 16 * 1024, "{written} bytes taken");
    let events = net.take_events();
    assert!(
        events
            .iter()
            .all(|(_, e)| !matches!(e, Event::Request { .. })),
        "{events:?}"
    );
    // The connection goes on: a good request on a new stream is served.
    let next = quic.0.borrow_mut().conn.streams().open(Dir::Bi).unwrap();
    {
        let mut q = quic.0.borrow_mut();
        let mut s = q.conn.send_stream(next);
        s.write(&raw_get()).unwrap();
        s.finish().unwrap();
    }
    let mut served = false;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            if let Event::Request { stream, .. } = e {
                served |= stream == u64::from(next);
            }
        }
        served
    });
}

#[test]
fn a_head_over_the_limit_is_answered_431_and_the_stream_ends() {
    let mut net = Net::new(H3Settings {
        max_field_section_size: 1024,
        ..settings()
    });
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    // 100 copies of a static-table field: 100 bytes encoded, about 6 KB
    // decoded (name, value and 32 bytes each, RFC 9114 section 4.2.2).
    let mut block = raw_get()[2..].to_vec();
    block.extend(std::iter::repeat_n(0xc0 | 31, 100)); // accept-encoding: gzip, deflate, br
    let mut frame = vec![0x01, 0x40 | (block.len() >> 8) as u8, block.len() as u8];
    frame.extend_from_slice(&block);
    let id = {
        let mut q = quic.0.borrow_mut();
        let id = q.conn.streams().open(Dir::Bi).unwrap();
        let mut s = q.conn.send_stream(id);
        s.write(&frame).unwrap();
        s.finish().unwrap();
        id
    };
    let mut response = Vec::new();
    let mut ended = false;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            assert!(!matches!(e, Event::Request { .. }), "{e:?}");
        }
        let mut q = quic.0.borrow_mut();
        let mut recv = q.conn.recv_stream(id);
        if let Ok(mut chunks) = recv.read(true) {
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(c)) => response.extend_from_slice(&c.bytes),
                    Ok(None) => {
                        ended = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            let _ = chunks.finalize();
        }
        ended
    });
    assert_eq!(response[0], 0x01, "a HEADERS frame");
    // "431" Huffman-coded (RFC 7541 appendix B: '4' 011010, '3' 011001,
    // '1' 00001, padded with ones): 0x69 0x90 0xff, after a field line with
    // a static name reference (:status) and a Huffman length of 3 (0x83).
    assert!(
        response.windows(4).any(|w| w == [0x83, 0x69, 0x90, 0xff]),
        "{response:?}"
    );
}
