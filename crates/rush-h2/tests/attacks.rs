//! The HTTP/2 attack family against rush-h2, from a raw peer that ignores
//! every limit: each is stopped by GOAWAY or RST_STREAM as RFC 9113 says,
//! with no panic and bounded memory.

mod common;

use bytes::Bytes;
use common::*;
use rush_h2::{Event, H2Settings, Reason};

fn started() -> Raw {
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    raw.feed(&input);
    raw
}

fn goaway_code(raw: &Raw) -> u32 {
    raw.goaway().expect("a GOAWAY").error_code()
}

const ENHANCE_YOUR_CALM: u32 = 0xb;
const PROTOCOL_ERROR: u32 = 0x1;
const REFUSED_STREAM: u32 = 0x7;

/// CVE-2023-44487, all in one read: h2's limit on streams reset before
/// they were accepted closes the connection.
#[test]
fn rapid_reset_in_one_read_gets_goaway() {
    let mut raw = started();
    let mut flood = Vec::new();
    for i in 0..1000u32 {
        let id = 1 + 2 * i;
        flood.extend(get_headers(id, true));
        flood.extend(frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
    }
    raw.feed(&flood);
    assert_eq!(goaway_code(&raw), ENHANCE_YOUR_CALM);
    assert!(raw.closed());
    assert!(
        raw.requests() <= 100,
        "{} requests reached the application",
        raw.requests()
    );
    assert!(raw.server.is_done());
}

/// The same with every frame in its own read: the requests are accepted
/// (the application sees them) before their reset, which h2 does not count;
/// rush-h2's peer-reset budget closes the connection.
#[test]
fn rapid_reset_one_frame_per_read_gets_goaway() {
    let mut raw = started();
    for i in 0..1000u32 {
        let id = 1 + 2 * i;
        raw.feed(&get_headers(id, true));
        raw.feed(&frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
        if raw.closed() {
            break;
        }
    }
    assert_eq!(goaway_code(&raw), ENHANCE_YOUR_CALM);
    let limit = H2Settings::default().max_peer_reset_streams;
    assert!(raw.requests() <= limit + 2, "{}", raw.requests());
}

/// Fewer streams than h2's pending-accept limit, opened and reset in one
/// read, past rush-h2's own budget: GOAWAY goes out without further input.
#[test]
fn rapid_reset_past_the_budget_in_one_read_gets_goaway() {
    let mut raw = Raw::new(H2Settings {
        max_peer_reset_streams: 4,
        ..H2Settings::default()
    });
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    for i in 0..8u32 {
        input.extend(get_headers(2 * i + 1, true));
        input.extend(frame(RST_STREAM, 0, 2 * i + 1, &8u32.to_be_bytes()));
    }
    raw.feed(&input);
    assert_eq!(goaway_code(&raw), ENHANCE_YOUR_CALM);
    assert!(raw.closed());
    assert!(raw.server.is_done());
}

/// A browser that cancels some streams among completed ones is not stopped.
#[test]
fn cancels_among_completed_responses_are_fine() {
    let mut raw = started();
    for i in 0..1000u32 {
        let id = 1 + 2 * i;
        raw.feed(&get_headers(id, true));
        if i % 2 == 0 {
            raw.feed(&frame(RST_STREAM, 0, id, &8u32.to_be_bytes()));
        } else {
            raw.server.send_response(id, 200, [], true).unwrap();
            raw.settle();
        }
    }
    assert!(raw.goaway().is_none());
    assert_eq!(raw.requests(), 1000);
}

/// CVE-2024-27316 family: one header block that never ends.
#[test]
fn continuation_flood_gets_goaway() {
    let mut raw = started();
    raw.feed(&frame(HEADERS, 0, 1, &[0x82, 0x86, 0x84]));
    let mut sent = 0;
    for _ in 0..100_000 {
        // Each fragment adds a literal field: x-a: aaaa...
        let mut frag = vec![0x00];
        frag.extend(hpack_str(b"x-a"));
        frag.extend(hpack_str(&[b'a'; 100]));
        raw.feed(&frame(CONTINUATION, 0, 1, &frag));
        sent += 1;
        if raw.closed() {
            break;
        }
    }
    assert!(raw.closed(), "still open after {sent} CONTINUATION frames");
    assert!(sent < 2000, "{sent} frames");
    let code = goaway_code(&raw);
    assert!(
        code == ENHANCE_YOUR_CALM || code == PROTOCOL_ERROR,
        "{code}"
    );
    assert_eq!(raw.requests(), 0);
}

/// Empty CONTINUATION frames carry nothing to count against the header
/// list size; their number is limited.
#[test]
fn empty_continuation_flood_gets_goaway() {
    let mut raw = started();
    raw.feed(&frame(HEADERS, 0, 1, &[0x82, 0x86, 0x84]));
    let mut sent = 0;
    while !raw.closed() && sent < 100_000 {
        raw.feed(&frame(CONTINUATION, 0, 1, &[]));
        sent += 1;
    }
    assert!(raw.closed() && sent < 10_000, "{sent}");
    assert_eq!(goaway_code(&raw), ENHANCE_YOUR_CALM);
}

/// An HPACK bomb: one 4000-byte field put in the dynamic table, then
/// referenced by one-byte indexes until the list is far past the limit.
#[test]
fn hpack_bomb_is_refused() {
    let mut raw = started();
    let mut block = vec![0x82, 0x86, 0x84];
    // Literal with incremental indexing, new name: x-bomb: (4000 bytes),
    // length 4000 as a 7-bit prefix integer: 127, then 4000-127 = 3873.
    block.push(0x40);
    block.extend(hpack_str(b"x-bomb"));
    block.push(0x7f);
    let mut rest = 4000 - 127;
    while rest >= 128 {
        block.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    block.push(rest as u8);
    block.extend(std::iter::repeat_n(b'b', 4000));
    // Dynamic index 62 (the entry just added), 1000 times: 4 MB decoded.
    block.extend(std::iter::repeat_n(0x80 | 62, 1000));
    raw.feed(&frame(HEADERS, END_HEADERS | END_STREAM, 1, &block));
    assert_eq!(raw.requests(), 0, "{:?}", raw.events);
    let frames = raw.frames();
    let refused = frames
        .iter()
        .any(|f| f.ty == GOAWAY || (f.ty == RST_STREAM && f.stream == 1))
        || frames.iter().any(|f| f.ty == HEADERS && f.stream == 1); // a 431
    assert!(refused, "{frames:?}");
}

/// A block just past the header list size gets 431 or a reset, not GOAWAY,
/// and the connection goes on.
#[test]
fn header_list_over_the_limit_refuses_the_stream_only() {
    let mut raw = started();
    let mut block = get_block();
    for i in 0..400 {
        block.push(0x00);
        block.extend(hpack_str(format!("x-field-{i:04}").as_bytes()));
        block.extend(hpack_str(&[b'v'; 60]));
    }
    // 400 x (12 + 60 + 32) = 41600 > 32 KiB in about 30 KB of HPACK, split
    // below max_frame_size.
    let (a, b) = block.split_at(12000);
    let (b, c) = b.split_at(12000);
    raw.feed(&frame(HEADERS, END_STREAM, 1, a));
    raw.feed(&frame(CONTINUATION, 0, 1, b));
    raw.feed(&frame(CONTINUATION, END_HEADERS, 1, c));
    assert_eq!(raw.requests(), 0);
    let frames = raw.frames();
    assert!(
        frames
            .iter()
            .any(|f| f.stream == 1 && (f.ty == HEADERS || f.ty == RST_STREAM)),
        "{frames:?}"
    );
    assert!(raw.goaway().is_none());
    raw.feed(&get_headers(3, true));
    assert_eq!(raw.requests(), 1);
}

/// CVE-2019-9515 / 9512: SETTINGS and PING floods from a peer that never
/// reads: the answers fill the output bound, then the server stops reading
/// (wants_read false) instead of buffering answers without end.
#[test]
fn settings_and_ping_floods_from_a_peer_that_never_reads_are_bounded() {
    for flood_frame in [frame(SETTINGS, 0, 0, &[]), frame(PING, 0, 0, b"abcdefgh")] {
        let settings = H2Settings::default();
        let mut raw = started();
        let mut fed = 0usize;
        // The server loop: feed while it wants to read, never take output.
        for _ in 0..1_000_000 {
            if !raw.server.wants_read() {
                break;
            }
            raw.server.feed(&flood_frame);
            fed += flood_frame.len();
        }
        assert!(!raw.server.wants_read(), "still reading after {fed} bytes");
        assert!(
            fed < settings.max_output_buffer * 4 + settings.max_input_buffer + 4096,
            "{fed}"
        );
        // Once the peer reads, the server reads again.
        raw.settle();
        assert!(raw.server.has_output() || raw.server.wants_read());
        for _ in 0..1000 {
            if raw.server.wants_read() {
                break;
            }
            raw.settle();
        }
        assert!(raw.server.wants_read());
        while raw.server.has_output() {
            raw.settle();
        }
        assert!(raw.goaway().is_none());
        eprintln!("fed {fed} bytes before the server stopped reading");
    }
}

/// Floods of frames that carry nothing, from a peer that reads every
/// answer (so the output bound never stops the reading): each ends with
/// GOAWAY(ENHANCE_YOUR_CALM) once the bytes received pass 8 times the
/// useful ones plus the allowance (nginx's rule), never before the
/// allowance.
#[test]
fn control_frame_floods_from_a_peer_that_reads_get_goaway() {
    let floods: [(&str, Vec<u8>); 4] = [
        ("PING", frame(PING, 0, 0, b"abcdefgh")),
        ("SETTINGS", frame(SETTINGS, 0, 0, &[])),
        (
            "WINDOW_UPDATE",
            frame(WINDOW_UPDATE, 0, 0, &1u32.to_be_bytes()),
        ),
        // PRIORITY on an idle stream: legal, and answered by nothing.
        ("PRIORITY", frame(2, 0, 101, &[0, 0, 0, 0, 16])),
    ];
    let allowance = rush_h2::FloodLimit::default();
    for (name, flood_frame) in floods {
        let mut raw = started();
        let mut fed = 0u64;
        let batch: Vec<u8> = flood_frame.repeat(1000);
        while !raw.closed() && fed < 64 * 1024 * 1024 {
            raw.output.clear(); // the peer read everything
            raw.feed(&batch);
            fed += batch.len() as u64;
        }
        assert!(raw.closed(), "{name}: still open after {fed} bytes");
        let floor = allowance.allowance * allowance.ratio;
        assert!(fed >= floor, "{name}: closed after only {fed} bytes");
        assert!(
            fed < floor + 2 * batch.len() as u64 + 1024,
            "{name}: {fed} bytes"
        );
        let goaway = raw.goaway().expect("a GOAWAY");
        assert_eq!(goaway.error_code(), ENHANCE_YOUR_CALM, "{name}");
    }
}

/// A client that uploads and downloads for real may send many control
/// frames along: its useful bytes pay for them.
#[test]
fn control_frames_among_real_traffic_are_not_a_flood() {
    let mut raw = started();
    let mut block = get_block();
    block[0] = 0x83; // POST
    raw.feed(&frame(HEADERS, END_HEADERS, 1, &block));
    let chunk = vec![b'x'; 16 * 1024];
    let mut pings = Vec::new();
    for _ in 0..100 {
        pings.extend(frame(PING, 0, 0, b"abcdefgh"));
    }
    for _ in 0..64 {
        raw.feed(&frame(DATA, 0, 1, &chunk));
        raw.feed(&pings);
        raw.output.clear();
        // The application takes the data, so the window stays open.
        let taken: usize = raw
            .events
            .drain(..)
            .map(|event| match event {
                Event::Data { data, .. } => data.len(),
                _ => 0,
            })
            .sum();
        raw.server.release(1, taken);
    }
    assert!(!raw.closed(), "{:?}", raw.events);
    assert!(raw.goaway().is_none());
}

/// A server that takes events slowly (its output over budget) never sees
/// the requests whose streams were reset, or whose connection closed,
/// while they waited: no application starts for a client that is gone.
#[test]
fn requests_reset_or_closed_before_they_were_taken_are_never_delivered() {
    let mut raw = started();
    // Three requests arrive; the server takes none of them yet.
    for id in [1, 3, 5] {
        raw.server.feed(&get_headers(id, true));
    }
    raw.server
        .feed(&frame(RST_STREAM, 0, 3, &8u32.to_be_bytes()));
    let mut delivered = Vec::new();
    while let Some(event) = raw.server.poll_event() {
        delivered.push(event);
    }
    let requests: Vec<u32> = delivered
        .iter()
        .filter_map(|event| match event {
            Event::Request { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(requests, [1, 5], "{delivered:?}");
    assert!(
        !delivered
            .iter()
            .any(|event| matches!(event, Event::Reset { stream: 3, .. })),
        "{delivered:?}"
    );
    // Two more wait when the peer goes away: neither is delivered.
    for id in [7, 9] {
        raw.server.feed(&get_headers(id, true));
    }
    raw.server.feed_eof();
    let mut after = Vec::new();
    while let Some(event) = raw.server.poll_event() {
        after.push(event);
    }
    assert!(
        !after
            .iter()
            .any(|event| matches!(event, Event::Request { .. })),
        "{after:?}"
    );
    assert!(after
        .iter()
        .any(|event| matches!(event, Event::Closed { .. })));
    // The streams the server did take are reset for it.
    for id in [1, 5] {
        assert!(
            after
                .iter()
                .any(|event| matches!(event, Event::Reset { stream, .. } if *stream == id)),
            "{after:?}"
        );
    }
}

/// While the server holds requests back (its output over its share), new
/// requests past a few waiting are refused with REFUSED_STREAM, safe to
/// retry; those that arrived before it held them all wait; once it takes
/// requests again, new streams are accepted as before.
#[test]
fn requests_past_the_waiting_limit_are_refused_while_held() {
    let mut raw = started();
    let limit = H2Settings::default().max_waiting_requests;
    // Twenty arrive together before the server holds them back (all wait),
    // twenty more while it does (with twenty waiting, all are refused), then
    // four more on a connection where only a few wait.
    let mut input = Vec::new();
    for i in 0..20u32 {
        input.extend(get_headers(2 * i + 1, true));
    }
    raw.server.feed(&input);
    raw.server.hold_requests(true);
    input.clear();
    for i in 20..40u32 {
        input.extend(get_headers(2 * i + 1, true));
    }
    raw.server.feed(&input);
    raw.server.take_output(&mut raw.output);
    let refused: Vec<u32> = raw
        .frames()
        .iter()
        .filter(|f| f.ty == RST_STREAM && f.error_code() == REFUSED_STREAM)
        .map(|f| f.stream)
        .collect();
    assert_eq!(refused, (20..40).map(|i| 2 * i + 1).collect::<Vec<u32>>());
    raw.server.hold_requests(false);
    raw.settle();
    assert_eq!(raw.requests(), 20);
    // Taken: none waits now. Held again, a few more may wait, no more.
    raw.server.hold_requests(true);
    input.clear();
    for i in 50..(50 + limit as u32 + 4) {
        input.extend(get_headers(2 * i + 1, true));
    }
    raw.output.clear();
    raw.server.feed(&input);
    raw.server.take_output(&mut raw.output);
    let refused = raw
        .frames()
        .iter()
        .filter(|f| f.ty == RST_STREAM && f.error_code() == REFUSED_STREAM)
        .count();
    assert_eq!(refused, 4);
    raw.server.hold_requests(false);
    raw.settle();
    assert_eq!(raw.requests(), 20 + limit);
    assert!(raw.goaway().is_none());
}

/// CVE-2019-9518: empty DATA frames cost work and carry nothing.
#[test]
fn empty_data_flood_gets_goaway() {
    let mut raw = started();
    let mut block = get_block();
    block[0] = 0x83; // POST
    raw.feed(&frame(HEADERS, END_HEADERS, 1, &block));
    let mut sent = 0;
    while !raw.closed() && sent < 100_000 {
        raw.feed(&frame(DATA, 0, 1, &[]));
        sent += 1;
    }
    assert!(raw.closed() && sent < 1000, "{sent}");
    assert_eq!(goaway_code(&raw), ENHANCE_YOUR_CALM);
}

/// Streams past SETTINGS_MAX_CONCURRENT_STREAMS are refused one by one
/// (RST_STREAM REFUSED_STREAM); the application never sees them.
#[test]
fn too_many_concurrent_streams_are_refused() {
    let mut raw = started();
    let max = H2Settings::default().max_concurrent_streams;
    let mut flood = Vec::new();
    for i in 0..max + 10 {
        flood.extend(get_headers(1 + 2 * i, false));
    }
    raw.feed(&flood);
    assert_eq!(raw.requests(), max as usize);
    let refused: Vec<Frame> = raw
        .frames()
        .into_iter()
        .filter(|f| f.ty == RST_STREAM)
        .collect();
    assert_eq!(refused.len(), 10);
    assert!(refused.iter().all(|f| f.error_code() == REFUSED_STREAM));
    assert_eq!(raw.server.open_streams(), max as usize);
}

/// CVE-2019-9517: a peer that never opens its window. Response data stays
/// queued in rush-h2 (where the server sees it and stops the application),
/// not in h2 nor in the output.
#[test]
fn a_peer_that_never_opens_its_window_gets_no_data() {
    let mut raw = Raw::new(H2Settings::default());
    let mut input = client_start_with(&[(0x4, 0)]); // INITIAL_WINDOW_SIZE 0
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    input.extend(get_headers(1, true));
    raw.feed(&input);
    raw.server.send_response(1, 200, [], false).unwrap();
    raw.server
        .send_data(1, Bytes::from(vec![0u8; 1 << 20]), true)
        .unwrap();
    raw.settle();
    assert!(!raw.frames().iter().any(|f| f.ty == DATA));
    assert_eq!(raw.server.pending_send(1), 1 << 20);
    assert!(raw.output.len() < 1024);
    // Opening the window by 100 bytes lets exactly 100 out.
    raw.feed(&frame(WINDOW_UPDATE, 0, 1, &100u32.to_be_bytes()));
    let data: usize = raw
        .frames()
        .iter()
        .filter(|f| f.ty == DATA)
        .map(|f| f.payload.len())
        .sum();
    assert_eq!(data, 100);
    assert_eq!(raw.server.pending_send(1), (1 << 20) - 100);
    // The server's send timeout gives up on it.
    raw.server.reset(1, Reason::CANCEL);
    raw.settle();
    assert!(raw
        .frames()
        .iter()
        .any(|f| f.ty == RST_STREAM && f.stream == 1));
    assert_eq!(raw.server.pending_send(1), 0);
}

/// A request body larger than the windows, from a peer that ignores them:
/// a flow-control error, never a buffer past the window.
#[test]
fn data_past_the_window_is_a_flow_control_error() {
    let settings = H2Settings {
        initial_stream_window: 65_535,
        initial_connection_window: 65_535,
        ..H2Settings::default()
    };
    let mut raw = Raw::new(settings);
    let mut input = client_start();
    input.extend(frame(SETTINGS, ACK, 0, &[]));
    let mut block = get_block();
    block[0] = 0x83;
    input.extend(frame(HEADERS, END_HEADERS, 1, &block));
    raw.feed(&input);
    let chunk = vec![b'x'; 16_384];
    for _ in 0..8 {
        raw.feed(&frame(DATA, 0, 1, &chunk));
    }
    let received: usize = raw
        .events
        .iter()
        .map(|e| match e {
            Event::Data { data, .. } => data.len(),
            _ => 0,
        })
        .sum();
    assert!(received <= 65_535);
    let flow_error = raw
        .frames()
        .iter()
        .any(|f| (f.ty == GOAWAY || f.ty == RST_STREAM) && f.error_code() == 0x3);
    assert!(flow_error, "{:?}", raw.frames());
}

/// Garbage instead of a preface: the connection ends, with no panic.
#[test]
fn a_bad_preface_ends_the_connection() {
    let mut raw = Raw::new(H2Settings::default());
    raw.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(raw.closed());
    assert!(raw.server.is_done() || raw.server.has_output());
}

/// A client's PUSH_PROMISE (which clients must never send) on a stream the
/// application reset. h2 0.4.20 answers with RST_STREAM again and goes on,
/// where RFC 9113 asks for a connection error (PROTOCOL_ERROR): an upstream
/// flaw, harmless. In debug builds h2's own `debug_assert_eq!` in
/// `handle_poll2_result` (proto/connection.rs) panics on this path instead;
/// release builds, rush's included, compile it out. Found by the h2_frames
/// fuzz target.
#[test]
#[cfg_attr(debug_assertions, should_panic(expected = "left: User"))]
fn push_promise_from_the_client_on_a_stream_the_application_reset() {
    let mut raw = started();
    let mut block = get_block();
    block[0] = 0x83; // POST
    raw.feed(&frame(HEADERS, END_HEADERS, 1, &block));
    raw.server.reset(1, Reason::INTERNAL_ERROR);
    raw.settle();
    raw.feed(&frame(DATA, END_STREAM, 1, b"more"));
    raw.feed(&frame(5, END_HEADERS, 1, b"\x00\x00\x00\x02\x82"));
    let resets = raw
        .frames()
        .iter()
        .filter(|f| f.ty == RST_STREAM && f.stream == 1)
        .count();
    assert!(resets >= 1);
    assert!(!raw.closed() || raw.goaway().is_some());
}
