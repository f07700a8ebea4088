//! rush-h2 against a real HTTP/2 client (the `h2` crate's), over memory:
//! requests and responses, bodies past the windows both ways, many streams,
//! trailers, Early Hints, resets by the peer, graceful shutdown, and the
//! client's bytes fed split at every offset.

mod common;

use std::task::Poll;

use bytes::Bytes;
use common::*;
use h2::client::ResponseFuture;
use h2::{Reason, RecvStream, SendStream};
use rush_h2::{Event, H2Connection, H2Settings};

fn request(
    pair: &mut Pair,
    method: &str,
    path: &str,
    end: bool,
) -> (ResponseFuture, SendStream<Bytes>) {
    let req = http::Request::builder()
        .method(method)
        .uri(format!("http://example.com{path}"))
        .header("x-test", "1")
        .body(())
        .unwrap();
    pair.client.send_request(req, end).expect("send_request")
}

fn response(fut: &mut ResponseFuture) -> http::Response<RecvStream> {
    match poll_once(fut) {
        Poll::Ready(r) => r.expect("response"),
        Poll::Pending => panic!("no response yet"),
    }
}

/// Reads what arrived of a response body, releasing it (the client's
/// windows open again as it reads).
fn read_body(body: &mut RecvStream, into: &mut Vec<u8>) -> bool {
    loop {
        match body.poll_data(&mut cx()) {
            Poll::Ready(Some(Ok(chunk))) => {
                into.extend_from_slice(&chunk);
                body.flow_control().release_capacity(chunk.len()).unwrap();
            }
            Poll::Ready(Some(Err(e))) => panic!("body error {e}"),
            Poll::Ready(None) => return true,
            Poll::Pending => return false,
        }
    }
}

fn request_streams(events: &[Event]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Request { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect()
}

#[test]
fn get_gets_a_response() {
    let mut pair = Pair::new(H2Settings::default());
    let (mut fut, _) = request(&mut pair, "GET", "/hello?x=1", true);
    pair.pump();
    let events = pair.take_events();
    let [Event::Request {
        stream,
        head,
        end_stream,
    }] = &events[..]
    else {
        panic!("{events:?}")
    };
    assert_eq!((*stream, *end_stream), (1, true));
    assert_eq!(head.method, http::Method::GET);
    assert_eq!(head.scheme(), Some("http"));
    assert_eq!(head.authority(), Some("example.com"));
    assert_eq!(head.path(), "/hello?x=1");
    assert_eq!(head.headers["x-test"], "1");
    pair.server
        .send_response(
            1,
            200,
            [
                (&b"content-type"[..], &b"text/plain"[..]),
                (b"connection", b"close"),
                (b"X-Mixed-Case", b"1"), // HTTP/2 names are lowercase on the wire
            ],
            false,
        )
        .unwrap();
    pair.server
        .send_data(1, Bytes::from_static(b"hello"), true)
        .unwrap();
    pair.pump();
    let resp = response(&mut fut);
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/plain");
    assert!(resp.headers().get("connection").is_none());
    assert_eq!(resp.headers()["x-mixed-case"], "1");
    let mut body = Vec::new();
    assert!(read_body(&mut resp.into_body(), &mut body));
    assert_eq!(body, b"hello");
    assert_eq!(pair.server.open_streams(), 0);
}

#[test]
fn early_hints_precede_the_final_response() {
    let mut pair = Pair::new(H2Settings::default());
    let (mut fut, _) = request(&mut pair, "GET", "/", true);
    pair.pump();
    pair.server
        .send_response(
            1,
            103,
            [(&b"link"[..], &b"</a.css>; rel=preload"[..])],
            false,
        )
        .unwrap();
    pair.server
        .send_response(
            1,
            103,
            [(&b"link"[..], &b"</b.js>; rel=preload"[..])],
            false,
        )
        .unwrap();
    pair.server.send_response(1, 204, [], true).unwrap();
    pair.pump();
    assert_eq!(response(&mut fut).status(), 204);
    assert!(matches!(
        pair.server.send_response(1, 200, [], true),
        Err(rush_h2::H2Error::UnknownStream(1))
    ));
}

#[test]
fn a_large_body_flows_both_ways_under_flow_control() {
    let settings = H2Settings::default();
    let window = settings.initial_stream_window as usize;
    let mut pair = Pair::new(settings);
    let size = 3 * 1024 * 1024 + 17;
    let (mut fut, mut upload) = request(&mut pair, "POST", "/upload", false);
    let payload: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    let mut sent = 0;
    let mut received = Vec::new();
    let mut released_any = false;
    // The client sends as its capacity allows; the server's "application"
    // first consumes nothing (the peer must stop at the stream window),
    // then releases everything it receives.
    for round in 0..10_000 {
        if sent < size {
            upload.reserve_capacity(size - sent);
            let cap = upload.capacity();
            if cap > 0 {
                let n = cap.min(size - sent);
                upload
                    .send_data(
                        Bytes::copy_from_slice(&payload[sent..sent + n]),
                        sent + n == size,
                    )
                    .unwrap();
                sent += n;
            }
        }
        pair.pump();
        let mut ended = false;
        for e in pair.take_events() {
            match e {
                Event::Request { end_stream, .. } => assert!(!end_stream),
                Event::Data { stream, data } => {
                    received.extend_from_slice(&data);
                    if released_any {
                        pair.server.release(stream, data.len());
                    }
                }
                Event::RequestEnd { trailers, .. } => {
                    assert!(trailers.is_none());
                    ended = true;
                }
                other => panic!("{other:?}"),
            }
        }
        if !released_any && round > 20 {
            assert!(
                received.len() <= window,
                "peer sent {} past the window",
                received.len()
            );
            assert!(received.len() >= window / 2);
            pair.server.release(1, received.len());
            released_any = true;
        }
        if ended {
            break;
        }
    }
    assert_eq!(received.len(), size);
    assert!(received == payload);

    // The response: 3 MiB against the client's default 64 KiB windows.
    pair.server.send_response(1, 200, [], false).unwrap();
    pair.server
        .send_data(1, Bytes::from(payload.clone()), true)
        .unwrap();
    assert_eq!(pair.server.pending_send(1), size);
    pair.pump();
    let resp = response(&mut fut);
    let mut body = resp.into_body();
    let mut got = Vec::new();
    let mut pending_seen = Vec::new();
    for _ in 0..10_000 {
        pending_seen.push(pair.server.pending_send(1));
        if read_body(&mut body, &mut got) {
            break;
        }
        pair.pump();
    }
    assert_eq!(got.len(), size);
    assert!(got == payload);
    // Data left the queue only as the client read: it was never all sent at once.
    assert!(
        pending_seen[1] > size - 256 * 1024,
        "{:?}",
        &pending_seen[..4]
    );
}

#[test]
fn send_ready_reports_a_drained_queue() {
    let mut pair = Pair::new(H2Settings::default());
    let (mut fut, _) = request(&mut pair, "GET", "/", true);
    pair.pump();
    pair.take_events();
    pair.server.send_response(1, 200, [], false).unwrap();
    pair.server
        .send_data(1, Bytes::from(vec![b'x'; 200_000]), false)
        .unwrap();
    pair.pump();
    assert!(pair.server.pending_send(1) > 0);
    assert!(!pair
        .take_events()
        .iter()
        .any(|e| matches!(e, Event::SendReady { .. })));
    let mut body = response(&mut fut).into_body();
    let mut got = Vec::new();
    let mut ready = false;
    for _ in 0..1000 {
        read_body(&mut body, &mut got);
        pair.pump();
        if pair
            .take_events()
            .iter()
            .any(|e| matches!(e, Event::SendReady { stream: 1 }))
        {
            ready = true;
            break;
        }
    }
    assert!(ready);
    assert_eq!(pair.server.pending_send(1), 0);
    pair.server
        .send_data(1, Bytes::from_static(b"end"), true)
        .unwrap();
    pair.pump();
    while !read_body(&mut body, &mut got) {
        pair.pump();
    }
    assert_eq!(got.len(), 200_003);
}

#[test]
fn a_hundred_concurrent_streams() {
    let mut pair = Pair::new(H2Settings::default());
    let mut futs: Vec<_> = (0..100)
        .map(|i| request(&mut pair, "GET", &format!("/{i}"), true).0)
        .collect();
    pair.pump();
    let events = pair.take_events();
    let streams = request_streams(&events);
    assert_eq!(streams.len(), 100);
    for (i, &s) in streams.iter().enumerate() {
        let body = format!("reply {i}");
        pair.server.send_response(s, 200, [], false).unwrap();
        pair.server.send_data(s, Bytes::from(body), true).unwrap();
    }
    pair.pump();
    for (i, fut) in futs.iter_mut().enumerate() {
        let mut body = Vec::new();
        assert!(read_body(&mut response(fut).into_body(), &mut body));
        assert_eq!(body, format!("reply {i}").as_bytes());
    }
    assert_eq!(pair.server.open_streams(), 0);
}

#[test]
fn trailers_both_ways() {
    let mut pair = Pair::new(H2Settings::default());
    let (mut fut, mut upload) = request(&mut pair, "POST", "/grpc", false);
    upload
        .send_data(Bytes::from_static(b"\0\0\0\0\x01A"), false)
        .unwrap();
    let mut t = http::HeaderMap::new();
    t.insert("x-checksum", "abc".parse().unwrap());
    upload.send_trailers(t).unwrap();
    pair.pump();
    let events = pair.take_events();
    assert!(
        matches!(&events[1], Event::Data { data, .. } if &data[..] == b"\0\0\0\0\x01A"),
        "{events:?}"
    );
    match &events[2] {
        Event::RequestEnd {
            stream: 1,
            trailers: Some(t),
        } => assert_eq!(t["x-checksum"], "abc"),
        other => panic!("{other:?}"),
    }
    pair.server
        .send_response(
            1,
            200,
            [(&b"content-type"[..], &b"application/grpc"[..])],
            false,
        )
        .unwrap();
    pair.server
        .send_data(1, Bytes::from_static(b"\0\0\0\0\x01B"), false)
        .unwrap();
    pair.server
        .send_trailers(1, [(&b"grpc-status"[..], &b"0"[..])])
        .unwrap();
    pair.pump();
    let mut body = response(&mut fut).into_body();
    let mut got = Vec::new();
    assert!(read_body(&mut body, &mut got));
    assert_eq!(got, b"\0\0\0\0\x01B");
    match poll_once(&mut std::future::poll_fn(|cx| body.poll_trailers(cx))) {
        Poll::Ready(Ok(Some(t))) => assert_eq!(t["grpc-status"], "0"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reset_by_the_peer_is_an_event() {
    let mut pair = Pair::new(H2Settings::default());
    let (_fut, mut upload) = request(&mut pair, "POST", "/slow", false);
    pair.pump();
    pair.take_events();
    upload.send_reset(Reason::CANCEL);
    pair.pump();
    let events = pair.take_events();
    assert!(
        matches!(&events[..], [Event::Reset { stream: 1, reason }] if *reason == Reason::CANCEL),
        "{events:?}"
    );
    assert_eq!(pair.server.open_streams(), 0);
    assert!(pair.server.send_response(1, 200, [], true).is_err());

    // And while the response streams (request complete, response not).
    let (_fut, _) = request(&mut pair, "GET", "/stream", true);
    pair.pump();
    pair.take_events();
    pair.server.send_response(3, 200, [], false).unwrap();
    pair.server
        .send_data(3, Bytes::from_static(b"part"), false)
        .unwrap();
    pair.pump();
    drop(_fut); // dropping the response future and stream resets it
    pair.pump();
    let events = pair.take_events();
    assert!(
        matches!(
            &events[..],
            [
                Event::SendReady { stream: 3 },
                Event::Reset { stream: 3, .. }
            ]
        ),
        "{events:?}"
    );
}

#[test]
fn graceful_shutdown_finishes_the_streams_in_flight() {
    let mut pair = Pair::new(H2Settings::default());
    let (mut fut, _) = request(&mut pair, "GET", "/", true);
    pair.pump();
    pair.take_events();
    pair.server.graceful_shutdown();
    pair.pump();
    assert!(!pair.server.is_done());
    pair.server.send_response(1, 200, [], false).unwrap();
    pair.server
        .send_data(1, Bytes::from_static(b"bye"), true)
        .unwrap();
    pair.pump();
    let mut body = Vec::new();
    assert!(read_body(&mut response(&mut fut).into_body(), &mut body));
    assert_eq!(body, b"bye");
    let events = pair.take_events();
    assert!(
        matches!(
            &events[..],
            [Event::Closed {
                reason: None,
                error: None
            }]
        ),
        "{events:?}"
    );
    assert!(pair.server.is_done());
}

#[test]
fn graceful_shutdown_sends_goaway_with_the_last_stream_id() {
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    input.extend(get_headers(1, true));
    raw.feed(&input);
    raw.server.graceful_shutdown();
    raw.settle();
    // The first GOAWAY announces the maximum id, then a PING round trip.
    let frames = raw.frames();
    let ping = frames.iter().find(|f| f.ty == PING).expect("ping").clone();
    raw.feed(&frame(PING, ACK, 0, &ping.payload));
    let goaways: Vec<Frame> = raw
        .frames()
        .into_iter()
        .filter(|f| f.ty == GOAWAY)
        .collect();
    let last = goaways.last().unwrap();
    assert_eq!(u32::from_be_bytes(last.payload[..4].try_into().unwrap()), 1);
    assert_eq!(last.error_code(), 0);
    // A stream opened after it is ignored; stream 1 still completes.
    raw.feed(&get_headers(3, true));
    assert_eq!(raw.requests(), 1);
    raw.server.send_response(1, 200, [], true).unwrap();
    raw.settle();
    assert!(raw.closed());
    assert!(raw.server.is_done());
}

/// One client exchange, hand-encoded (a header block split over HEADERS and
/// CONTINUATION, plain and padded DATA, trailers, a PING, a second stream),
/// fed to fresh servers split at every offset and byte by byte: the same
/// events every time. Events are compared per stream (their order across
/// streams depends on where the input was cut), data joined.
#[test]
fn input_split_at_every_offset_gives_the_same_events() {
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    block.push(0x04); // literal without indexing, name :path
    block.extend(hpack_str(b"/split?q=1"));
    block.push(0x01); // literal without indexing, name :authority
    block.extend(hpack_str(b"example.com"));
    let (a, b) = block.split_at(3);
    input.extend(frame(HEADERS, 0, 1, a));
    input.extend(frame(CONTINUATION, END_HEADERS, 1, b));
    input.extend(frame(DATA, 0, 1, b"hello, "));
    let mut padded = vec![3u8];
    padded.extend_from_slice(b"world");
    padded.extend_from_slice(&[0, 0, 0]);
    input.extend(frame(DATA, 0x8, 1, &padded));
    let mut trailer = vec![0x00];
    trailer.extend(hpack_str(b"x-t"));
    trailer.extend(hpack_str(b"v"));
    input.extend(frame(HEADERS, END_HEADERS | END_STREAM, 1, &trailer));
    input.extend(frame(PING, 0, 0, b"12345678"));
    input.extend(get_headers(3, true));

    let expected = vec![
        "request 1 POST /split?q=1 body",
        "data 1 hello, world",
        "end 1 x-t=v",
        "request 3 GET / end",
    ];
    let mut raw = Raw::new(H2Settings::default());
    raw.feed(&input);
    assert_eq!(per_stream(&raw.events), expected);
    for cut in 0..=input.len() {
        let mut raw = Raw::new(H2Settings::default());
        raw.feed(&input[..cut]);
        raw.feed(&input[cut..]);
        assert_eq!(per_stream(&raw.events), expected, "cut at {cut}");
        assert!(raw.frames().iter().any(|f| f.ty == PING && f.flags == ACK));
    }
    let mut raw = Raw::new(H2Settings::default());
    for b in &input {
        raw.feed(std::slice::from_ref(b));
    }
    assert_eq!(per_stream(&raw.events), expected);
}

fn summarize(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            Event::Request {
                stream,
                head,
                end_stream,
            } => format!(
                "request {stream} {} {} {}",
                head.method,
                head.path(),
                if *end_stream { "end" } else { "body" }
            ),
            Event::Data { stream, data } => {
                format!("data {stream} {}", String::from_utf8_lossy(data))
            }
            Event::RequestEnd { stream, trailers } => {
                let t: Vec<String> = trailers
                    .iter()
                    .flat_map(|t| {
                        t.iter()
                            .map(|(k, v)| format!("{k}={}", v.to_str().unwrap()))
                    })
                    .collect();
                format!("end {stream} {}", t.join(","))
            }
            other => format!("{other:?}"),
        })
        .collect()
}

/// The events in stream order (stable), consecutive data of a stream joined.
fn per_stream(events: &[Event]) -> Vec<String> {
    let mut keyed: Vec<(u32, String)> = events
        .iter()
        .zip(summarize(events))
        .map(|(e, line)| {
            let stream = match e {
                Event::Request { stream, .. }
                | Event::Data { stream, .. }
                | Event::RequestEnd { stream, .. }
                | Event::Reset { stream, .. }
                | Event::SendReady { stream } => *stream,
                Event::Closed { .. } => u32::MAX,
            };
            (stream, line)
        })
        .collect();
    keyed.sort_by_key(|(s, _)| *s);
    let mut out: Vec<String> = Vec::new();
    for (_, line) in keyed {
        if let (Some(prev), Some(rest)) = (out.last_mut(), line.strip_prefix("data ")) {
            if let Some(prev_rest) = prev.strip_prefix("data ") {
                let (ps, _) = prev_rest.split_once(' ').unwrap();
                let (s, d) = rest.split_once(' ').unwrap();
                if ps == s {
                    prev.push_str(d);
                    continue;
                }
            }
        }
        out.push(line);
    }
    out
}

#[test]
fn connection_ends_cleanly_when_the_peer_closes() {
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    raw.feed(&input);
    raw.server.feed_eof();
    raw.settle();
    assert!(raw.closed(), "{:?}", raw.events);
    assert!(raw.server.is_done());
    let _ = H2Connection::new(H2Settings::default());
}

/// Request bodies the application has not consumed count against the
/// connection window even after they ended, so several streams cannot
/// together make the server hold more than that window.
#[test]
fn unconsumed_bodies_hold_the_connection_window() {
    let settings = H2Settings::default();
    let conn_window = settings.initial_connection_window as usize;
    let mut pair = Pair::new(settings);
    let size = 1024 * 1024;
    let mut uploads = Vec::new();
    for i in 0..4 {
        let (fut, up) = request(&mut pair, "POST", &format!("/{i}"), false);
        uploads.push((fut, up, 0usize));
    }
    let mut received = 0;
    let mut ended = 0;
    let pump_uploads =
        |pair: &mut Pair, uploads: &mut Vec<(ResponseFuture, SendStream<Bytes>, usize)>| {
            for (_, up, sent) in uploads.iter_mut() {
                if *sent < size {
                    up.reserve_capacity(size - *sent);
                    let n = up.capacity().min(size - *sent);
                    if n > 0 {
                        up.send_data(Bytes::from(vec![b'u'; n]), *sent + n == size)
                            .unwrap();
                        *sent += n;
                    }
                }
            }
            pair.pump();
        };
    for _ in 0..200 {
        pump_uploads(&mut pair, &mut uploads);
        for e in pair.take_events() {
            match e {
                Event::Data { data, .. } => received += data.len(),
                Event::RequestEnd { .. } => ended += 1,
                _ => {}
            }
        }
    }
    assert!(
        received <= conn_window,
        "{received} bytes held, window {conn_window}"
    );
    assert!(ended < 4);
    // The application consumes everything: all four uploads complete.
    for stream in [1, 3, 5, 7] {
        pair.server.release(stream, usize::MAX);
    }
    let mut delivered = 0;
    for _ in 0..1000 {
        pump_uploads(&mut pair, &mut uploads);
        for e in pair.take_events() {
            match e {
                Event::Data { stream, data } => {
                    delivered += data.len();
                    pair.server.release(stream, data.len());
                }
                Event::RequestEnd { .. } => ended += 1,
                _ => {}
            }
        }
        if ended == 4 {
            break;
        }
    }
    assert_eq!(ended, 4);
    assert_eq!(received + delivered, 4 * size);
}

/// 103 goes out as its own HEADERS frame (without END_STREAM) before the
/// final head, as RFC 9113 section 8.1 frames interim responses.
#[test]
fn early_hints_are_headers_frames_before_the_final_head() {
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    input.extend(get_headers(1, true));
    raw.feed(&input);
    raw.server
        .send_response(
            1,
            103,
            [(&b"link"[..], &b"</a.css>; rel=preload"[..])],
            false,
        )
        .unwrap();
    raw.server.send_response(1, 200, [], false).unwrap();
    raw.server
        .send_data(1, Bytes::from_static(b"x"), true)
        .unwrap();
    raw.settle();
    let on_stream: Vec<(u8, u8)> = raw
        .frames()
        .iter()
        .filter(|f| f.stream == 1)
        .map(|f| (f.ty, f.flags))
        .collect();
    assert_eq!(
        on_stream,
        vec![
            (HEADERS, END_HEADERS),
            (HEADERS, END_HEADERS),
            (DATA, END_STREAM)
        ]
    );
    // The first block names :status with a literal value (103 is not in the
    // static table), the second is the indexed :status 200 (0x88).
    let blocks: Vec<Vec<u8>> = raw
        .frames()
        .into_iter()
        .filter(|f| f.ty == HEADERS)
        .map(|f| f.payload)
        .collect();
    assert_eq!(blocks[0][0], 0x48, "{:?}", blocks[0]);
    assert_eq!(blocks[1][0], 0x88, "{:?}", blocks[1]);
}

/// A complete response while the request body is still arriving: `reset`
/// stops the body (RST_STREAM goes out) and the stream is forgotten.
#[test]
fn reset_after_the_response_stops_an_unwanted_body() {
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    let mut block = get_block();
    block[0] = 0x83; // POST
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    input.extend(frame(DATA, 0, 1, b"partial"));
    raw.feed(&input);
    raw.server.send_response(1, 413, [], true).unwrap();
    raw.settle();
    assert_eq!(raw.server.open_streams(), 1);
    raw.server.reset(1, h2::Reason::NO_ERROR);
    raw.settle();
    assert_eq!(raw.server.open_streams(), 0);
    let rst: Vec<Frame> = raw
        .frames()
        .into_iter()
        .filter(|f| f.ty == RST_STREAM)
        .collect();
    assert_eq!(rst.len(), 1, "{:?}", raw.frames());
    assert_eq!(rst[0].stream, 1);
    // Later data on it is ignored, not a connection error.
    raw.feed(&frame(DATA, END_STREAM, 1, b"rest"));
    assert!(raw.goaway().is_none());
}

/// A request body that stalls: `stop_request_body` before the answer lets
/// the answer go out whole (HEADERS, DATA), then RST_STREAM(NO_ERROR) ends
/// the half the client never finished, and the connection goes on.
#[test]
fn a_stopped_request_body_is_reset_with_no_error_after_the_response() {
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    let mut block = get_block();
    block[0] = 0x83; // POST
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    raw.feed(&input);
    raw.output.clear();
    raw.server.stop_request_body(1);
    raw.server.send_response(1, 408, [], false).unwrap();
    raw.server
        .send_data(1, bytes::Bytes::from_static(b"late"), true)
        .unwrap();
    raw.settle();
    assert_eq!(raw.server.open_streams(), 0);
    let frames = raw.frames();
    let kinds: Vec<(u8, u32)> = frames.iter().map(|f| (f.ty, f.stream)).collect();
    assert_eq!(
        kinds,
        [(HEADERS, 1), (DATA, 1), (RST_STREAM, 1)],
        "{frames:?}"
    );
    assert_eq!(frames[2].error_code(), 0, "RST_STREAM(NO_ERROR)");
    raw.feed(&frame(DATA, END_STREAM, 1, b"rest"));
    raw.feed(&get_headers(3, true));
    raw.settle();
    assert!(raw.goaway().is_none());
    assert!(raw
        .events
        .iter()
        .any(|event| matches!(event, Event::Request { stream: 3, .. })));
}

/// RFC 8441 extended CONNECT (WebSocket over HTTP/2), when enabled: the
/// request carries `:protocol`, and the stream then carries data both ways.
#[test]
fn extended_connect_when_enabled() {
    let settings = H2Settings {
        enable_connect_protocol: true,
        ..H2Settings::default()
    };
    let mut pair = Pair::new(settings);
    assert!(pair.client.is_extended_connect_protocol_enabled());
    let mut req = http::Request::builder()
        .method("CONNECT")
        .uri("https://example.com/chat")
        .header("sec-websocket-version", "13")
        .body(())
        .unwrap();
    req.extensions_mut()
        .insert(h2::ext::Protocol::from_static("websocket"));
    let (mut fut, mut tunnel) = pair.client.send_request(req, false).unwrap();
    pair.pump();
    let events = pair.take_events();
    let [Event::Request {
        stream,
        head,
        end_stream: false,
    }] = &events[..]
    else {
        panic!("{events:?}")
    };
    assert_eq!(head.method, http::Method::CONNECT);
    assert_eq!(head.protocol.as_deref(), Some("websocket"));
    assert_eq!(head.path(), "/chat");
    assert_eq!(head.scheme(), Some("https"));
    let stream = *stream;
    pair.server.send_response(stream, 200, [], false).unwrap();
    tunnel
        .send_data(Bytes::from_static(b"\x81\x02hi"), false)
        .unwrap();
    pair.pump();
    assert_eq!(response(&mut fut).status(), 200);
    let events = pair.take_events();
    assert!(
        matches!(&events[..], [Event::Data { data, .. }] if &data[..] == b"\x81\x02hi"),
        "{events:?}"
    );
}

#[test]
fn extended_connect_is_off_by_default() {
    let pair = Pair::new(H2Settings::default());
    assert!(!pair.client.is_extended_connect_protocol_enabled());
}

/// A head built ahead (`ResponseHead::new`, refusing fields HTTP/2 cannot
/// carry at once) goes out only when sent: until then nothing of it is on
/// the wire, so an application may still drop it and answer otherwise.
/// `request_body_open` follows the request body until it ends or is stopped.
#[test]
fn a_head_built_ahead_goes_out_only_when_sent() {
    assert!(rush_h2::ResponseHead::new(200, [(&b"bad name"[..], &b"x"[..])]).is_err());
    assert!(rush_h2::ResponseHead::new(1000, []).is_err());
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    let mut block = get_block();
    block[0] = 0x83; // POST
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    raw.feed(&input);
    raw.output.clear();
    assert!(raw.server.request_body_open(1));
    let dropped = rush_h2::ResponseHead::new(404, [(&b"x-page"[..], &b"first"[..])]).unwrap();
    assert_eq!(dropped.status(), 404);
    drop(dropped);
    raw.settle();
    assert!(raw.frames().is_empty(), "{:?}", raw.frames());
    let head = rush_h2::ResponseHead::new(200, [(&b"x-page"[..], &b"second"[..])]).unwrap();
    raw.server.send_head(1, head, true).unwrap();
    raw.feed(&frame(DATA, END_STREAM, 1, b"body"));
    assert!(!raw.server.request_body_open(1));
    raw.settle();
    let kinds: Vec<(u8, u32)> = raw.frames().iter().map(|f| (f.ty, f.stream)).collect();
    assert_eq!(kinds, [(HEADERS, 1)]);
}
