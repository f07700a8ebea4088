//! The per-request paths must not allocate once the caller's buffers are
//! warm: this test binary counts the allocations of the current thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::{Duration, UNIX_EPOCH};

use rush_proto::{
    parse_request_head, response, ChunkedDecoder, DateCache, HeadStatus, Limits, ProtoError,
};

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

struct CountingAllocator;

fn count_allocation() {
    // `try_with`: never panic inside the allocator, even during thread teardown.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged, so System's guarantees carry over; counting touches
// only a const-initialised thread-local Cell, which never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_allocation();
        // SAFETY: same contract as our caller's (layout has non-zero size).
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: `pointer` was allocated by System with `layout`, through us.
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_allocation();
        // SAFETY: `pointer`/`layout` come from System through us; same contract.
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

fn allocations_during(work: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    work();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn parsing_heads_does_not_allocate() {
    let limits = Limits::default();
    let mut headers = Vec::with_capacity(limits.max_headers);
    let heads: [&[u8]; 5] = [
        b"GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n",
        b"POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello",
        b"GET http://[::1]:8080/a?b HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.0\r\n\r\n",
    ];
    let refused: [&[u8]; 7] = [
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        b"GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\nX: 1\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
    ];
    let count = allocations_during(|| {
        for _ in 0..100 {
            for head in heads {
                let outcome = parse_request_head(head, &limits, &mut headers);
                assert!(matches!(outcome, Ok(HeadStatus::Complete(_))));
            }
            for head in refused {
                assert!(parse_request_head(head, &limits, &mut headers).is_err());
            }
            assert_eq!(
                parse_request_head(b"GET / HTTP/1.1\r\nHo", &limits, &mut headers),
                Ok(HeadStatus::Partial)
            );
        }
    });
    assert_eq!(count, 0);
}

#[test]
fn decoding_chunked_bodies_does_not_allocate() {
    let limits = Limits::default();
    let input = b"5;ext=1\r\nhello\r\n6 ; q = \"a\\\"b\"\r\n world\r\n0\r\nChecksum: x\r\n\r\n";
    let mut body = Vec::with_capacity(64);
    let count = allocations_during(|| {
        for _ in 0..100 {
            body.clear();
            let mut decoder = ChunkedDecoder::new(&limits);
            for piece in input.chunks(7) {
                decoder.decode(piece, &mut body).unwrap();
            }
            assert_eq!(body, b"hello world");
        }
    });
    assert_eq!(count, 0);
}

#[test]
fn writing_responses_does_not_allocate() {
    let mut date = DateCache::new(UNIX_EPOCH + Duration::from_secs(784_111_777));
    let mut out = Vec::with_capacity(4096);
    let count = allocations_during(|| {
        for _ in 0..100 {
            out.clear();
            date.refresh(UNIX_EPOCH + Duration::from_millis(784_111_777_500));
            response::write_status_line(&mut out, 200);
            response::write_status_line(&mut out, 599);
            response::write_header(&mut out, b"Content-Type", b"text/plain").unwrap();
            response::write_content_length(&mut out, 12);
            out.extend_from_slice(date.header_line());
            response::write_error_response(&mut out, &ProtoError::UriTooLong, date.header_line());
        }
    });
    assert_eq!(count, 0);
}

#[test]
fn websocket_steady_state_does_not_allocate() {
    use rush_proto::ws::handshake::{accept_key, write_accept_response};
    use rush_proto::ws::{
        is_upgrade_request, validate_handshake, Connection, DeflateParams, MessageEncoder,
        MessageKind, Received, Role,
    };

    let limits = Limits::default();
    let mut headers = Vec::with_capacity(limits.max_headers);
    let upgrade = b"GET /chat HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
        Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let mut out = Vec::with_capacity(1 << 16);
    let count = allocations_during(|| {
        for _ in 0..100 {
            out.clear();
            let Ok(HeadStatus::Complete(head)) = parse_request_head(upgrade, &limits, &mut headers)
            else {
                panic!("not parsed")
            };
            assert!(is_upgrade_request(upgrade, &headers));
            let handshake = validate_handshake(&head, upgrade, &headers).unwrap();
            assert_eq!(handshake.accept, accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="));
            write_accept_response(&mut out, &handshake.accept, Some(b"chat"), None, &[]).unwrap();
        }
    });
    assert_eq!(count, 0, "handshake");

    let params = DeflateParams {
        server_no_context_takeover: false,
        client_no_context_takeover: false,
        server_max_window_bits: 12,
        client_max_window_bits: 12,
        level: 6,
    };
    for deflate in [None, Some(&params)] {
        // What a client sends: a text message, a ping, a binary message.
        let mut client = MessageEncoder::new(Role::Client, deflate);
        client.set_mask_key([1, 2, 3, 4]);
        let mut input = Vec::new();
        for _ in 0..200 {
            client.message(
                &mut input,
                MessageKind::Text,
                "hello κόσμε".repeat(20).as_bytes(),
            );
            client.ping(&mut input, b"ping").unwrap();
            client.message(&mut input, MessageKind::Binary, &[7; 3000]);
        }
        let mut server = Connection::new(Role::Server, 1 << 20, deflate);
        let mut message = Vec::with_capacity(1 << 16);
        let mut offset = 0;
        // Warm up the buffers (and the compressor's) with the first round.
        let mut round = |server: &mut Connection, message: &mut Vec<u8>, out: &mut Vec<u8>| {
            for _ in 0..2 {
                loop {
                    let (consumed, received) = server.receive(&input[offset..], message, out);
                    offset += consumed;
                    if let Some(Received::Message(kind)) = received {
                        server.send(out, kind, message).unwrap();
                        message.clear();
                        break;
                    }
                }
            }
        };
        out.clear();
        round(&mut server, &mut message, &mut out);
        let count = allocations_during(|| {
            for _ in 0..100 {
                out.clear();
                round(&mut server, &mut message, &mut out);
            }
        });
        assert_eq!(count, 0, "messages, deflate: {}", deflate.is_some());
    }
}

#[test]
fn reading_forwarding_headers_does_not_allocate() {
    use rush_proto::forwarded::{resolve, ForwardingRules, ProxyHeaders, TrustedProxies};
    let fields: [(&[u8], &[u8]); 3] = [
        (b"Host", b"example.com"),
        (b"Accept", b"*/*"),
        (b"X-Forwarded-Foo", b"bar"),
    ];
    let forwarded: [(&[u8], &[u8]); 3] = [
        (b"Host", b"example.com"),
        (b"X-Forwarded-For", b"203.0.113.7, 10.0.0.2"),
        (b"X-Forwarded-Proto", b"https"),
    ];
    for headers in [ProxyHeaders::XForwarded, ProxyHeaders::Forwarded] {
        let rules = ForwardingRules {
            headers,
            trusted: TrustedProxies::parse("127.0.0.1,10.0.0.0/8").unwrap(),
            host: true,
        };
        // Requests without the family: nothing at all, in either mode.
        let count = allocations_during(|| assert!(resolve(&rules, fields.into_iter()).is_none()));
        assert_eq!(count, 0, "{headers:?}");
    }
    // X-Forwarded-For with addresses is read without allocating either.
    let rules = ForwardingRules {
        headers: ProxyHeaders::XForwarded,
        trusted: TrustedProxies::parse("10.0.0.0/8").unwrap(),
        host: false,
    };
    let count = allocations_during(|| {
        let origin = resolve(&rules, forwarded.into_iter()).unwrap();
        assert!(origin.client.is_some() && origin.scheme.is_some());
    });
    assert_eq!(count, 0);
}
