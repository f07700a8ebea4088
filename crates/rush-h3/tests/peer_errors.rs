//! A client's protocol mistakes, in memory (tests/support): each is a
//! connection error `h3` detects, and the client must see `h3`'s code in
//! the CONNECTION_CLOSE (RFC 9114 section 8), never H3_NO_ERROR. The
//! client is raw quinn-proto streams written by hand, as no HTTP/3 client
//! makes these mistakes.

mod support;

use rush_h3::quic::QuicConnection;
use rush_h3::quinn_proto::{ConnectionError, Dir};
use rush_h3::{Code, Event};
use support::{raw_get, settings, Net};

/// What a client writes wrong on a connection just established.
type Mistake = fn(&QuicConnection);

/// A control stream's type (0x00) and an empty SETTINGS frame.
const CONTROL_WITH_SETTINGS: [u8; 3] = [0x00, 0x04, 0x00];

/// Opens a unidirectional stream carrying `bytes`, left open (a control
/// stream that ends is itself an error).
fn open_uni(quic: &QuicConnection, bytes: &[u8]) {
    let mut q = quic.0.borrow_mut();
    let id = q
        .conn
        .streams()
        .open(Dir::Uni)
        .expect("the server's stream limit leaves room for another unidirectional stream");
    q.conn.send_stream(id).write(bytes).unwrap();
}

/// Connects, lets `mistake` write on the client's streams once the
/// handshake is done, and runs until both sides saw the connection end:
/// the code of the CONNECTION_CLOSE the client received, and the code the
/// server's `Closed` event gave.
fn close_codes(mistake: impl FnOnce(&QuicConnection)) -> (u64, Option<u64>) {
    let mut net = Net::new(settings());
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    mistake(&quic);
    let mut closed = None;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            match e {
                Event::Closed { code, .. } => closed = Some(code),
                Event::Request { .. } => panic!("a request reached the application"),
                _ => {}
            }
        }
        closed.is_some() && quic.lost().is_some()
    });
    let client_saw = match quic.lost().unwrap() {
        ConnectionError::ApplicationClosed(c) => c.error_code.into_inner(),
        other => panic!("client saw {other:?}"),
    };
    (client_saw, closed.unwrap())
}

#[test]
fn a_second_control_stream_is_h3_stream_creation_error() {
    // As aioquic does: the control stream and both QPACK streams first,
    // so the second control stream is the client's fourth unidirectional
    // stream, which the server's stream limit must leave room for.
    let code = Code::H3_STREAM_CREATION_ERROR.value();
    let seen = close_codes(|quic| {
        open_uni(quic, &CONTROL_WITH_SETTINGS);
        open_uni(quic, &[0x02]);
        open_uni(quic, &[0x03]);
        open_uni(quic, &CONTROL_WITH_SETTINGS);
    });
    assert_eq!(seen, (code, Some(code)));
}

#[test]
fn each_connection_error_reaches_the_client_with_its_code() {
    let frame_unexpected = Code::H3_FRAME_UNEXPECTED.value();
    let cases: [(&str, u64, Mistake); 6] = [
        ("DATA on the control stream", frame_unexpected, |quic| {
            open_uni(quic, &[0x00, 0x04, 0x00, 0x00, 0x00])
        }),
        (
            "a control stream not starting with SETTINGS",
            Code::H3_MISSING_SETTINGS.value(),
            |quic| open_uni(quic, &[0x00, 0x07, 0x01, 0x00]),
        ),
        (
            "an HTTP/2 setting (SETTINGS_ENABLE_PUSH)",
            Code::H3_SETTINGS_ERROR.value(),
            |quic| open_uni(quic, &[0x00, 0x04, 0x02, 0x02, 0x00]),
        ),
        (
            "the control stream ended",
            Code::H3_CLOSED_CRITICAL_STREAM.value(),
            |quic| {
                let mut q = quic.0.borrow_mut();
                let id = q.conn.streams().open(Dir::Uni).unwrap();
                let mut s = q.conn.send_stream(id);
                s.write(&CONTROL_WITH_SETTINGS).unwrap();
                s.finish().unwrap();
            },
        ),
        (
            "a second QPACK encoder stream",
            Code::H3_STREAM_CREATION_ERROR.value(),
            |quic| {
                open_uni(quic, &[0x02]);
                open_uni(quic, &[0x02]);
            },
        ),
        (
            "DATA before HEADERS on a request stream",
            frame_unexpected,
            |quic| {
                let mut q = quic.0.borrow_mut();
                let id = q.conn.streams().open(Dir::Bi).unwrap();
                let mut s = q.conn.send_stream(id);
                let mut bytes = vec![0x00, 0x05];
                bytes.extend_from_slice(b"hello");
                bytes.extend_from_slice(&raw_get());
                s.write(&bytes).unwrap();
                s.finish().unwrap();
            },
        ),
    ];
    for (case, code, mistake) in cases {
        assert_eq!(close_codes(mistake), (code, Some(code)), "{case}");
    }
}

#[test]
fn streams_of_reserved_types_are_no_error_and_give_their_room_back() {
    // RFC 9114 section 6.2.3: a reserved stream type (0x1f * N + 0x21) is
    // no error; `h3` stops reading it, and QUIC gives the client the
    // stream's room back, however many it opens one after another.
    let mut net = Net::new(settings());
    let quic = net.connect();
    net.run_until(|_| quic.is_connected());
    open_uni(&quic, &CONTROL_WITH_SETTINGS);
    let room = settings().max_concurrent_uni_streams as usize;
    for _ in 0..3 * room {
        {
            let mut q = quic.0.borrow_mut();
            let id = q.conn.streams().open(Dir::Uni);
            let id = id.expect("the room of the streams before came back");
            let mut s = q.conn.send_stream(id);
            s.write(&[0x21, 0x04, 0x00]).unwrap();
            s.finish().unwrap();
        }
        net.settle();
    }
    assert!(quic.lost().is_none(), "{:?}", quic.lost());
    let id = {
        let mut q = quic.0.borrow_mut();
        let id = q.conn.streams().open(Dir::Bi).unwrap();
        let mut s = q.conn.send_stream(id);
        s.write(&raw_get()).unwrap();
        s.finish().unwrap();
        id
    };
    let mut served = false;
    net.run_until(|net| {
        for (_, e) in net.take_events() {
            served |= matches!(e, Event::Request { stream, .. } if stream == u64::from(id));
        }
        served
    });
}
