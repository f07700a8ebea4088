//! HTTP/3 exchanges between rush-h3's endpoint and `h3`'s client over
//! quinn-proto, in memory (tests/support).

mod support;

use std::collections::HashMap;

use bytes::Bytes;
use rush_h3::{Code, ConnId, Event, HeaderMap, HeaderValue};
use support::{get, request, settings, Net};

/// Answers every request with "hello h3" once its body ended.
fn hello(net: &mut Net) {
    for (ch, e) in net.take_events() {
        let stream = match e {
            Event::Request {
                stream,
                end_stream: true,
                ..
            }
            | Event::RequestEnd { stream, .. } => stream,
            _ => continue,
        };
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("text/plain"));
        net.server.send_response(ch, stream, 200, h, false).unwrap();
        net.server
            .send_data(ch, stream, Bytes::from_static(b"hello h3"), true)
            .unwrap();
    }
}

#[test]
fn get_is_answered() {
    let mut net = Net::new(settings());
    let (client, _closed) = net.h3_client();
    let answer = request(&mut net, &client, get("/hello?x=1"), vec![], None);
    let mut heads = Vec::new();
    net.run_until(|net| {
        for (_, e) in &net.events {
            if let Event::Request {
                head, end_stream, ..
            } = e
            {
                heads.push((head.clone(), *end_stream));
            }
        }
        hello(net);
        answer.borrow().is_some()
    });
    let a = answer.borrow().clone().unwrap();
    assert_eq!(a.error, None);
    assert_eq!(a.status, 200);
    assert_eq!(a.body, b"hello h3");
    assert_eq!(heads.len(), 1);
    let (head, end_stream) = &heads[0];
    assert_eq!(head.method, http::Method::GET);
    assert_eq!(head.scheme(), Some("https"));
    assert_eq!(head.authority(), Some("localhost"));
    assert_eq!(head.path(), "/hello?x=1");
    assert!(end_stream, "a GET without body says so in its head");
}

#[test]
fn post_body_is_echoed_as_the_application_releases_it() {
    let window = 64 * 1024;
    let mut net = Net::new(rush_h3::H3Settings {
        stream_receive_window: window,
        ..settings()
    });
    let (client, _closed) = net.h3_client();
    let body: Vec<u8> = (0..300 * 1024).map(|i| (i % 251) as u8).collect();
    let pieces: Vec<Bytes> = body.chunks(30 * 1024).map(Bytes::copy_from_slice).collect();
    let req = http::Request::post("https://localhost/echo")
        .body(())
        .unwrap();
    let answer = request(&mut net, &client, req, pieces, None);

    // Phase 1: the application reads nothing back. The server must hold at
    // most about one stream window of the body.
    let mut received: Vec<u8> = Vec::new();
    let target: std::cell::Cell<Option<(ConnId, u64)>> = std::cell::Cell::new(None);
    let collect = |net: &mut Net, received: &mut Vec<u8>| {
        for (ch, e) in net.take_events() {
            match e {
                Event::Request { stream, .. } => target.set(Some((ch, stream))),
                Event::Data { data, .. } => received.extend_from_slice(&data),
                Event::RequestEnd { stream, .. } => {
                    let echo = Bytes::from(received.clone());
                    net.server
                        .send_response(ch, stream, 200, HeaderMap::new(), false)
                        .unwrap();
                    net.server.send_data(ch, stream, echo, true).unwrap();
                }
                _ => {}
            }
        }
    };
    for _ in 0..1000 {
        net.turn();
        collect(&mut net, &mut received);
        if !net.turn() {
            break;
        }
    }
    net.settle();
    collect(&mut net, &mut received);
    let held = received.len();
    assert!(held > 0, "some of the body arrived");
    assert!(
        held <= window as usize + 2048,
        "{held} bytes delivered with nothing released (window {window})"
    );
    assert!(held < body.len());

    // Phase 2: release as the application consumes; the body completes.
    let (ch, stream) = target.get().unwrap();
    let mut released = 0;
    net.run_until(|net| {
        collect(net, &mut received);
        if received.len() > released {
            net.server.release(ch, stream, received.len() - released);
            released = received.len();
        }
        answer.borrow().is_some()
    });
    let a = answer.borrow().clone().unwrap();
    assert_eq!(a.error, None);
    assert_eq!(a.status, 200);
    assert_eq!(a.body.len(), body.len());
    assert!(a.body == body, "the echo is the body");
}

#[test]
fn hundred_concurrent_streams() {
    let mut net = Net::new(settings());
    let (client, _closed) = net.h3_client();
    let answers: Vec<_> = (0..100)
        .map(|i| request(&mut net, &client, get(&format!("/{i}")), vec![], None))
        .collect();
    // Answer nothing until all hundred are open at once.
    let mut waiting: Vec<(ConnId, u64, String)> = Vec::new();
    let mut most_open = 0;
    net.run_until(|net| {
        for (ch, e) in net.take_events() {
            if let Event::Request { stream, head, .. } = e {
                waiting.push((ch, stream, head.path().to_string()));
            }
        }
        if let Some((ch, _, _)) = waiting.first() {
            most_open = most_open.max(net.server.open_streams(*ch));
        }
        if waiting.len() == 100 {
            for (ch, stream, path) in waiting.drain(..) {
                net.server
                    .send_response(ch, stream, 200, HeaderMap::new(), false)
                    .unwrap();
                net.server
                    .send_data(ch, stream, Bytes::from(path), true)
                    .unwrap();
            }
        }
        answers.iter().all(|a| a.borrow().is_some())
    });
    assert_eq!(most_open, 100);
    for (i, a) in answers.iter().enumerate() {
        let a = a.borrow().clone().unwrap();
        assert_eq!(a.error, None);
        assert_eq!(a.status, 200);
        assert_eq!(a.body, format!("/{i}").as_bytes());
    }
}

#[test]
fn stream_reset_by_the_client_is_reported() {
    let mut net = Net::new(settings());
    let (client, _closed) = net.h3_client();
    let cancelled = support::slot::<()>();
    let (c, done) = (client.clone(), cancelled.clone());
    net.tasks.spawn(async move {
        let mut send = std::future::poll_fn(|_| match c.borrow().clone() {
            Some(s) => std::task::Poll::Ready(s),
            None => std::task::Poll::Pending,
        })
        .await;
        let req = http::Request::post("https://localhost/upload")
            .body(())
            .unwrap();
        let mut stream = send.send_request(req).await.unwrap();
        stream
            .send_data(Bytes::from_static(b"part of a body"))
            .await
            .unwrap();
        // Wait until the server saw the body (the test sets the slot).
        std::future::poll_fn(|_| {
            if done.borrow().is_some() {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await;
        stream.stop_stream(Code::H3_REQUEST_CANCELLED);
        stream.stop_sending(Code::H3_REQUEST_CANCELLED);
        // Keep the stream alive until the test ends.
        std::future::pending::<()>().await;
    });
    let mut seen: Vec<&'static str> = Vec::new();
    let mut reset_code = None;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            match e {
                Event::Request { .. } => seen.push("request"),
                Event::Data { .. } => {
                    seen.push("data");
                    *cancelled.borrow_mut() = Some(());
                }
                Event::Reset { code, .. } => {
                    seen.push("reset");
                    reset_code = code;
                }
                _ => seen.push("other"),
            }
        }
        seen.contains(&"reset")
    });
    assert_eq!(seen, ["request", "data", "reset"]);
    assert_eq!(reset_code, Some(Code::H3_REQUEST_CANCELLED.value()));
}

#[test]
fn trailers_both_ways() {
    let mut net = Net::new(settings());
    let (client, _closed) = net.h3_client();
    let mut t = HeaderMap::new();
    t.insert("x-checksum", HeaderValue::from_static("abc123"));
    let req = http::Request::post("https://localhost/t").body(()).unwrap();
    let answer = request(
        &mut net,
        &client,
        req,
        vec![Bytes::from_static(b"body")],
        Some(t),
    );
    let mut request_trailers = None;
    net.run_until(|net| {
        for (ch, e) in net.take_events() {
            if let Event::RequestEnd { stream, trailers } = e {
                request_trailers = trailers;
                net.server
                    .send_response(ch, stream, 200, HeaderMap::new(), false)
                    .unwrap();
                net.server
                    .send_data(ch, stream, Bytes::from_static(b"ok"), false)
                    .unwrap();
                let mut t = HeaderMap::new();
                t.insert("grpc-status", HeaderValue::from_static("0"));
                net.server.send_trailers(ch, stream, t).unwrap();
            }
        }
        answer.borrow().is_some()
    });
    let request_trailers = request_trailers.expect("request trailers");
    assert_eq!(request_trailers["x-checksum"], "abc123");
    let a = answer.borrow().clone().unwrap();
    assert_eq!(a.error, None);
    assert_eq!(a.body, b"ok");
    assert_eq!(a.trailers.expect("response trailers")["grpc-status"], "0");
}

#[test]
fn graceful_shutdown_completes_the_stream_in_flight() {
    let mut net = Net::new(settings());
    let (client, closed) = net.h3_client();
    let answer = request(&mut net, &client, get("/slow"), vec![], None);
    // The request arrives; the server starts shutting down before answering.
    let mut pending: Option<(ConnId, u64)> = None;
    net.run_until(|net| {
        for (ch, e) in net.take_events() {
            if let Event::Request { stream, .. } = e {
                pending = Some((ch, stream));
            }
        }
        pending.is_some()
    });
    let (ch, stream) = pending.unwrap();
    net.server.graceful_shutdown(ch);
    net.settle();
    // A request after the GOAWAY is not served.
    let late = request(&mut net, &client, get("/late"), vec![], None);
    net.settle();
    let late_requests = net
        .take_events()
        .into_iter()
        .filter(|(_, e)| matches!(e, Event::Request { .. }))
        .count();
    assert_eq!(late_requests, 0, "no request is admitted after GOAWAY");
    assert!(answer.borrow().is_none());
    net.server
        .send_response(ch, stream, 200, HeaderMap::new(), false)
        .unwrap();
    net.server
        .send_data(ch, stream, Bytes::from_static(b"finished"), true)
        .unwrap();
    let mut server_closed = None;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            if let Event::Closed { code, error } = e {
                server_closed = Some((code, error));
            }
        }
        server_closed.is_some() && net.server.connections() == 0
    });
    let a = answer.borrow().clone().unwrap();
    assert_eq!(a.error, None);
    assert_eq!(a.body, b"finished");
    assert_eq!(server_closed, Some((None, None)), "a clean close");
    let l = late.borrow().clone().unwrap();
    assert!(l.error.is_some(), "the late request failed: {l:?}");
    let closed = closed.borrow().clone().unwrap();
    assert!(closed.contains("H3_NO_ERROR"), "client saw {closed}");
}

#[test]
fn idle_connection_is_closed_by_the_timeout() {
    let mut net = Net::new(settings());
    let (client, _closed) = net.h3_client();
    let answer = request(&mut net, &client, get("/"), vec![], None);
    net.run_until(|net| {
        hello(net);
        answer.borrow().is_some()
    });
    let start = net.now;
    let mut closed = None;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            if let Event::Closed { error, .. } = e {
                closed = Some((error, net.now));
            }
        }
        closed.is_some() && net.server.connections() == 0
    });
    let (error, at) = closed.unwrap();
    assert!(
        error.as_deref().unwrap_or("").contains("timed out"),
        "the close names the idle timeout: {error:?}"
    );
    let idle = at - start;
    assert!(
        idle >= settings().idle_timeout,
        "closed after {idle:?} of idleness"
    );
}

#[test]
fn many_requests_over_several_connections() {
    let mut net = Net::new(settings());
    let clients: Vec<_> = (0..3).map(|_| net.h3_client().0).collect();
    let mut answers = HashMap::new();
    for (c, client) in clients.iter().enumerate() {
        for i in 0..20 {
            let a = request(&mut net, client, get(&format!("/{c}/{i}")), vec![], None);
            answers.insert((c, i), a);
        }
    }
    net.run_until(|net| {
        hello(net);
        answers.values().all(|a| a.borrow().is_some())
    });
    for a in answers.values() {
        let a = a.borrow().clone().unwrap();
        assert_eq!((a.status, a.body.as_slice()), (200, &b"hello h3"[..]));
    }
    assert_eq!(net.server.stats().accepted, 3);
}

#[test]
fn large_response_is_paced_by_send_ready() {
    let bound = 256 * 1024;
    let mut net = Net::new(rush_h3::H3Settings {
        max_pending_send: bound,
        ..settings()
    });
    let (client, _closed) = net.h3_client();
    let answer = request(&mut net, &client, get("/big"), vec![], None);
    let total = 4 * 1024 * 1024;
    let chunk = Bytes::from(vec![7u8; 64 * 1024]);
    let mut sent = 0;
    let mut refused = 0;
    let mut ready_events = 0;
    let mut most_pending = 0;
    let mut fill = |net: &mut Net, ch: ConnId, stream: u64, sent: &mut usize| {
        while *sent < total {
            let end = *sent + chunk.len() == total;
            match net.server.send_data(ch, stream, chunk.clone(), end) {
                Ok(()) => *sent += chunk.len(),
                Err(rush_h3::H3Error::OutputFull) => {
                    refused += 1;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
            most_pending = most_pending.max(net.server.pending_send(ch));
        }
    };
    net.run_until(|net| {
        for (ch, e) in net.take_events() {
            match e {
                Event::Request { stream, .. } => {
                    net.server
                        .send_response(ch, stream, 200, HeaderMap::new(), false)
                        .unwrap();
                    fill(net, ch, stream, &mut sent);
                }
                Event::SendReady { stream } => {
                    ready_events += 1;
                    fill(net, ch, stream, &mut sent);
                }
                _ => {}
            }
        }
        answer.borrow().is_some()
    });
    let a = answer.borrow().clone().unwrap();
    assert_eq!(a.error, None);
    assert_eq!(a.body.len(), total);
    assert!(refused > 0, "the bound was reached");
    assert!(ready_events > 0);
    assert!(most_pending <= bound, "{most_pending} queued");
}
