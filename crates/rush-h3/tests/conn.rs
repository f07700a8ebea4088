//! The commands of one connection ([`rush_h3::H3Conn`]) that mirror
//! rush-h2's: informational heads, per-stream send accounting, stopping a
//! request body, holding requests back, abrupt shutdown. In memory
//! (tests/support), through `H3Endpoint::command` (tests/support/endpoint.rs).

mod support;

use std::cell::Cell;
use std::collections::HashMap;
use std::future::poll_fn;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Buf, Bytes};
use rush_h3::quinn_proto::{ConnectionError, Dir, StreamId, TransportConfig, VarInt};
use rush_h3::{Code, ConnId, Event, H3Error, H3Settings};
use support::{get, raw_get, request, settings, slot, Client, Net, Slot};

/// Waits for the connection's request sender.
async fn sender(client: &Client) -> h3::client::SendRequest<rush_h3::quic::QuicConnection, Bytes> {
    poll_fn(|_| match client.borrow().clone() {
        Some(s) => Poll::Ready(s),
        None => Poll::Pending,
    })
    .await
}

fn response(status: u16, fields: &[(&'static str, &'static str)]) -> http::Response<()> {
    let mut b = http::Response::builder().status(status);
    for (name, value) in fields {
        b = b.header(*name, *value);
    }
    b.body(()).unwrap()
}

/// The first request event among the server's events so far.
fn first_request(net: &mut Net) -> Option<(ConnId, u64, String)> {
    net.take_events().into_iter().find_map(|(ch, e)| match e {
        Event::Request { stream, head, .. } => Some((ch, stream, head.path().to_string())),
        _ => None,
    })
}

#[test]
fn an_informational_103_goes_before_the_final_head() {
    let mut net = Net::new(settings());
    let (client, _closed) = net.h3_client();
    type Heads = Vec<(u16, http::HeaderMap)>;
    let seen: Slot<Result<(Heads, Vec<u8>), String>> = slot();
    let (c, out) = (client.clone(), seen.clone());
    net.tasks.spawn(async move {
        let mut send = sender(&c).await;
        let result = async {
            let mut stream = send
                .send_request(get("/"))
                .await
                .map_err(|e| e.to_string())?;
            stream.finish().await.map_err(|e| e.to_string())?;
            // `h3`'s client takes each HEADERS frame as a response head.
            let mut heads = Vec::new();
            for _ in 0..2 {
                let r = stream.recv_response().await.map_err(|e| e.to_string())?;
                heads.push((r.status().as_u16(), r.headers().clone()));
            }
            let mut body = Vec::new();
            while let Some(mut chunk) = stream.recv_data().await.map_err(|e| e.to_string())? {
                body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
            }
            Ok((heads, body))
        }
        .await;
        *out.borrow_mut() = Some(result);
    });
    let mut answered = false;
    net.run_until(|net| {
        if !answered {
            if let Some((ch, stream, _)) = first_request(net) {
                answered = true;
                net.server
                    .command(ch, |c| {
                        let early = response(103, &[("link", "</a.css>; rel=preload")]);
                        c.send_response(stream, early, false)?;
                        // HTTP/3 has no 101 (RFC 9114 section 4.5).
                        let switching = c.send_response(stream, response(101, &[]), false);
                        assert_eq!(switching, Err(H3Error::BadStatus));
                        let fields = [
                            ("connection", "close"),
                            ("keep-alive", "timeout=5"),
                            ("proxy-connection", "close"),
                            ("transfer-encoding", "chunked"),
                            ("upgrade", "h2c"),
                            ("te", "trailers"),
                            ("x-kept", "yes"),
                            ("x-padded", " \tvalue "),
                        ];
                        c.send_response(stream, response(200, &fields), false)?;
                        let late = c.send_response(stream, response(103, &[]), false);
                        assert_eq!(late, Err(H3Error::HeadAlreadySent));
                        c.send_data(stream, Bytes::from_static(b"body"), true)
                    })
                    .unwrap();
            }
        }
        seen.borrow().is_some()
    });
    let (heads, body) = seen.borrow_mut().take().unwrap().unwrap();
    assert_eq!(heads[0].0, 103);
    assert_eq!(heads[0].1["link"], "</a.css>; rel=preload");
    assert_eq!(heads[1].0, 200);
    assert_eq!(heads[1].1["x-kept"], "yes");
    assert_eq!(heads[1].1["x-padded"], "value");
    for name in [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "upgrade",
        "te",
    ] {
        assert!(!heads[1].1.contains_key(name), "{name} was sent");
    }
    assert_eq!(body, b"body");
}

/// Sends a GET and reads the head, then the body only once `go` is set;
/// puts the body's length in the returned slot.
fn lazy_reader(net: &mut Net, client: &Client, path: &str, go: Rc<Cell<bool>>) -> Slot<usize> {
    let done: Slot<usize> = slot();
    let (c, out, req) = (client.clone(), done.clone(), get(path));
    net.tasks.spawn(async move {
        let mut send = sender(&c).await;
        let mut stream = send.send_request(req).await.unwrap();
        stream.finish().await.unwrap();
        stream.recv_response().await.unwrap();
        poll_fn(|_| {
            if go.get() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        let mut n = 0;
        while let Some(chunk) = stream.recv_data().await.unwrap() {
            n += chunk.remaining();
        }
        *out.borrow_mut() = Some(n);
    });
    done
}

#[test]
fn pending_send_and_sent_are_counted_per_stream() {
    let mut net = Net::new(settings());
    // The client reads nothing until told: each stream stalls at its
    // 16 KiB window.
    let window = 16 * 1024;
    let mut transport = TransportConfig::default();
    transport.stream_receive_window(VarInt::from_u32(window));
    net.client_config.transport_config(Arc::new(transport));
    let (client, _closed) = net.h3_client();
    let (go_a, go_b) = (Rc::new(Cell::new(false)), Rc::new(Cell::new(false)));
    let a = lazy_reader(&mut net, &client, "/a", go_a.clone());
    let b = lazy_reader(&mut net, &client, "/b", go_b.clone());
    let mut streams: HashMap<String, (ConnId, u64)> = HashMap::new();
    net.run_until(|net| {
        for (ch, e) in net.take_events() {
            let Event::Request { stream, head, .. } = e else {
                continue;
            };
            let path = head.path().to_string();
            // /a: 100 KiB in chunks of 25 KiB; /b: 30 KiB in chunks of 10.
            let (chunk, count) = if path == "/a" { (25, 4) } else { (10, 3) };
            net.server
                .command(ch, |c| {
                    c.send_response(stream, response(200, &[]), false)?;
                    for i in 0..count {
                        let data = Bytes::from(vec![b'x'; chunk * 1024]);
                        c.send_data(stream, data, i == count - 1)?;
                    }
                    Ok(())
                })
                .unwrap();
            streams.insert(path, (ch, stream));
        }
        streams.len() == 2
    });
    net.settle();
    let (ch, sa) = streams["/a"];
    let sb = streams["/b"].1;
    let conn = |net: &Net| {
        let c = net.server.conn(ch).unwrap();
        (
            c.sent(sa),
            c.pending_send(sa),
            c.sent(sb),
            c.pending_send(sb),
        )
    };
    let stalled = conn(&net);
    // Each stream went exactly as far as its window (HTTP/3 frames count
    // against it); a chunk counts as pending until QUIC took all of it.
    assert_eq!(
        stalled,
        (window as u64, 100 * 1024, window as u64, 20 * 1024)
    );
    assert_eq!(
        net.server.conn(ch).unwrap().pending_send_total(),
        120 * 1024
    );

    // The client reads /a: it completes, /b's counts stand still.
    go_a.set(true);
    net.run_until(|_| a.borrow().is_some());
    assert_eq!(a.borrow().unwrap(), 100 * 1024);
    let c = net.server.conn(ch).unwrap();
    assert_eq!(c.pending_send(sa), 0);
    assert_eq!((c.sent(sb), c.pending_send(sb)), (window as u64, 20 * 1024));
    assert_eq!(c.pending_send_total(), 20 * 1024);
    go_b.set(true);
    net.run_until(|_| b.borrow().is_some());
    assert_eq!(b.borrow().unwrap(), 30 * 1024);
}

#[test]
fn stop_request_body_stops_the_client_and_the_response_goes_on() {
    let window = 64 * 1024;
    let mut net = Net::new(H3Settings {
        stream_receive_window: window,
        ..settings()
    });
    let (client, _closed) = net.h3_client();
    let body_len = 600 * 1024;
    // The client sends its body while the server answers; it reads the
    // answer once it can send no more.
    let seen: Slot<(Option<String>, u16, Vec<u8>)> = slot();
    let (c, out) = (client.clone(), seen.clone());
    net.tasks.spawn(async move {
        let mut send = sender(&c).await;
        let req = http::Request::post("https://localhost/upload")
            .body(())
            .unwrap();
        let stream = send.send_request(req).await.unwrap();
        let (mut tx, mut rx) = stream.split();
        let mut send_error = None;
        for _ in 0..body_len / (30 * 1024) {
            if let Err(e) = tx.send_data(Bytes::from(vec![7u8; 30 * 1024])).await {
                send_error = Some(e.to_string());
                break;
            }
        }
        let resp = rx.recv_response().await.unwrap();
        let mut answer = Vec::new();
        while let Some(mut chunk) = rx.recv_data().await.unwrap() {
            answer.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
        }
        *out.borrow_mut() = Some((send_error, resp.status().as_u16(), answer));
    });
    let mut target = None;
    let mut data_after_stop = 0;
    net.run_until(|net| {
        let stopped_before = target.is_some();
        for (ch, e) in net.take_events() {
            match e {
                Event::Request { stream, .. } => {
                    target = Some((ch, stream));
                    net.server
                        .command(ch, |c| {
                            assert!(c.request_body_open(stream));
                            c.stop_request_body(stream);
                            assert!(!c.request_body_open(stream));
                            c.send_response(stream, response(200, &[]), false)?;
                            c.send_data(stream, Bytes::from_static(b"early"), true)
                        })
                        .unwrap();
                }
                // Data of the same batch as the head came before the stop.
                Event::Data { .. } if stopped_before => data_after_stop += 1,
                _ => {}
            }
        }
        seen.borrow().is_some()
    });
    let (send_error, status, answer) = seen.borrow_mut().take().unwrap();
    assert_eq!((status, answer.as_slice()), (200, &b"early"[..]));
    let send_error = send_error.expect("the client was stopped");
    assert!(send_error.contains("H3_NO_ERROR"), "{send_error}");
    assert_eq!(data_after_stop, 0);
    // The client sent about a window of its body, not all of it.
    let received = net.received_from[&net.client_addr];
    assert!(
        received < (body_len / 2) as u64,
        "{received} bytes received"
    );
    let (ch, _) = target.unwrap();
    net.run_until(|net| net.server.open_streams(ch) == 0);
}

#[test]
fn held_requests_past_the_waiting_ones_are_rejected() {
    let mut net = Net::new(H3Settings {
        max_waiting_requests: 2,
        ..settings()
    });
    let (client, _closed) = net.h3_client();
    let first = request(&mut net, &client, get("/first"), vec![], None);
    let mut ch = None;
    net.run_until(|net| {
        ch = ch.take().or_else(|| first_request(net));
        ch.is_some()
    });
    let (ch, stream, _) = ch.unwrap();
    net.server
        .command(ch, |c| {
            c.send_response(stream, response(204, &[]), true)?;
            c.hold_requests(true);
            Ok(())
        })
        .unwrap();
    net.run_until(|_| first.borrow().is_some());

    // The server takes no events while it holds requests.
    net.hold_events = true;
    let answers: Vec<_> = (0..5)
        .map(|i| request(&mut net, &client, get(&format!("/{i}")), vec![], None))
        .collect();
    let refused = |answers: &[Slot<support::Answer>]| {
        answers
            .iter()
            .filter(|a| a.borrow().as_ref().is_some_and(|a| a.error.is_some()))
            .count()
    };
    net.run_until(|_| refused(&answers) == 3);
    net.settle();
    for a in answers.iter().filter_map(|a| a.borrow().clone()) {
        let error = a.error.unwrap();
        assert!(error.contains("H3_REQUEST_REJECTED"), "{error}");
    }
    // Two waited; they are served once the server takes them.
    net.hold_events = false;
    net.settle();
    let waiting: Vec<(ConnId, u64)> = net
        .take_events()
        .into_iter()
        .filter_map(|(ch, e)| match e {
            Event::Request { stream, .. } => Some((ch, stream)),
            _ => None,
        })
        .collect();
    assert_eq!(waiting.len(), 2);
    net.server
        .command(ch, |c| {
            c.hold_requests(false);
            for (_, stream) in &waiting {
                c.send_response(*stream, response(204, &[]), true)?;
            }
            Ok(())
        })
        .unwrap();
    net.run_until(|_| answers.iter().all(|a| a.borrow().is_some()));
    let served = answers
        .iter()
        .filter(|a| a.borrow().as_ref().unwrap().status == 204)
        .count();
    assert_eq!(served, 2);
    // No longer held: a new request is taken.
    let again = request(&mut net, &client, get("/again"), vec![], None);
    net.answer_requests(b"ok");
    net.run_until(|net| {
        net.answer_requests(b"ok");
        again.borrow().is_some()
    });
    assert_eq!(again.borrow().as_ref().unwrap().status, 200);
}

/// A QUIC variable-length integer at the start of `b`, and its length.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let len = 1 << (b.first()? >> 6);
    let bytes = b.get(..len)?;
    let mut v = u64::from(bytes[0] & 0x3f);
    for byte in &bytes[1..] {
        v = (v << 8) | u64::from(*byte);
    }
    Some((v, len))
}

/// The id of the GOAWAY frame among `control` stream bytes (stream type,
/// then frames), if one arrived whole.
fn goaway(control: &[u8]) -> Option<u64> {
    let (kind, mut at) = varint(control)?;
    assert_eq!(kind, 0, "not the control stream");
    while at < control.len() {
        let (frame, n) = varint(&control[at..])?;
        let (len, m) = varint(&control[at + n..])?;
        let payload = control.get(at + n + m..at + n + m + len as usize)?;
        if frame == 0x07 {
            return varint(payload).map(|(id, _)| id);
        }
        at += n + m + len as usize;
    }
    None
}

/// Delivers the server's datagrams one at a time, the client reading its
/// control stream after each while its connection still stands: the id of
/// the GOAWAY that arrived before the connection closed, if one did.
fn goaway_before_close(net: &mut Net, quic: &rush_h3::quic::QuicConnection) -> Option<u64> {
    let mut uni: HashMap<StreamId, Vec<u8>> = HashMap::new();
    let mut buf = Vec::new();
    for _ in 0..100 {
        let t = net.server.poll_transmit(net.now, &mut buf)?;
        let data = buf[..t.size].to_vec();
        net.deliver_to_client(&data);
        let mut q = quic.0.borrow_mut();
        if q.lost.is_some() {
            return None;
        }
        while let Some(id) = q.conn.streams().accept(Dir::Uni) {
            uni.insert(id, Vec::new());
        }
        for (id, bytes) in uni.iter_mut() {
            let mut recv = q.conn.recv_stream(*id);
            if let Ok(mut chunks) = recv.read(true) {
                while let Ok(Some(chunk)) = chunks.next(usize::MAX) {
                    bytes.extend_from_slice(&chunk.bytes);
                }
                let _ = chunks.finalize();
            }
            if varint(bytes).is_some_and(|(kind, _)| kind == 0) {
                if let Some(id) = goaway(bytes) {
                    return Some(id);
                }
            }
        }
    }
    None
}

#[test]
fn abrupt_shutdown_sends_goaway_then_closes_with_its_code() {
    let mut net = Net::new(settings());
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    {
        let mut q = quic.0.borrow_mut();
        let id = q.conn.streams().open(Dir::Bi).unwrap();
        let mut s = q.conn.send_stream(id);
        s.write(&raw_get()).unwrap();
        s.finish().unwrap();
    }
    let mut admitted = None;
    net.run_until(|net| {
        admitted = admitted.take().or_else(|| first_request(net));
        admitted.is_some()
    });
    let (ch, stream, _) = admitted.unwrap();
    net.server
        .command(ch, |c| {
            c.abrupt_shutdown(Code::H3_INTERNAL_ERROR);
            assert!(c.is_closed());
            // Commands are refused: the stream is gone.
            let late = c.send_response(stream, response(200, &[]), true);
            assert_eq!(late, Err(H3Error::UnknownStream));
            Ok(())
        })
        .unwrap();

    let goaway_before_close = goaway_before_close(&mut net, &quic);
    // One request was accepted (stream 0): GOAWAY names stream 4.
    assert_eq!(goaway_before_close, Some(4));
    net.run_until(|_| quic.lost().is_some());
    match quic.lost() {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(
                close.error_code.into_inner(),
                Code::H3_INTERNAL_ERROR.value()
            )
        }
        other => panic!("client: {other:?}"),
    }
    net.run_until(|net| net.server.connections() == 0);
    let events: Vec<Event> = net.take_events().into_iter().map(|(_, e)| e).collect();
    let code = Some(Code::H3_INTERNAL_ERROR.value());
    assert!(
        events.iter().any(
            |e| matches!(e, Event::Reset { stream: s, code: c } if *s == stream && *c == code)
        ),
        "{events:?}"
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::Closed { code: c, .. } if *c == code)),
        "{events:?}"
    );
}

#[test]
fn a_graceful_shutdown_of_an_idle_connection_sends_goaway_before_closing() {
    let mut net = Net::new(settings());
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    net.settle();
    assert_eq!(net.server.connections(), 1);
    let ch = net.server.conn_ids().next().unwrap();
    net.server.graceful_shutdown(ch);
    // No request was accepted: GOAWAY names stream 0, and the client reads
    // it before the CONNECTION_CLOSE (H3_NO_ERROR) that follows at once.
    assert_eq!(goaway_before_close(&mut net, &quic), Some(0));
    net.run_until(|_| quic.lost().is_some());
    match quic.lost() {
        Some(ConnectionError::ApplicationClosed(close)) => {
            assert_eq!(close.error_code.into_inner(), Code::H3_NO_ERROR.value())
        }
        other => panic!("client: {other:?}"),
    }
    net.run_until(|net| net.server.connections() == 0);
    let closed: Vec<_> = net
        .take_events()
        .into_iter()
        .filter(|(_, e)| matches!(e, Event::Closed { .. }))
        .collect();
    assert!(
        matches!(
            closed[..],
            [(
                _,
                Event::Closed {
                    code: None,
                    error: None
                }
            )]
        ),
        "{closed:?}"
    );
}
