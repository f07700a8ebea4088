//! The state of one WebSocket connection, as data (the h11 idea).
//!
//! The closing handshake (RFC 6455 7) has three states:
//!
//! ```text
//!            we send close                 their close arrives
//!   Open ───────────────────▶ CloseSent ───────────────────────▶ Closed
//!     │  their close arrives: we echo it at once                  ▲
//!     ├───────────────────────────────────────────────────────────┤
//!     │  their data breaks the protocol: we send the error's close│
//!     └───────────────────────────────────────────────────────────┘
//!      (and the transport dropping, in any state, also ends in Closed)
//! ```
//!
//! [`ConnectionState::next`] is the whole policy as a pure function from
//! (state, event) to (state, action), tested as a table. [`Connection`]
//! applies it: it decodes received bytes, answers pings with pongs and
//! close frames with the echo of their code, refuses to send after close,
//! and reports to the application exactly one [`Disconnect`], whichever
//! way the connection ends. The loop moves bytes in and out and closes the
//! socket once the state is `Closed` and the output is flushed (the server
//! closes the TCP connection first, RFC 6455 7.1.1).

use super::close::{ABNORMAL, NO_STATUS};
use super::decoder::{ControlPayload, Incoming, MessageDecoder};
use super::deflate::DeflateParams;
use super::frame::{FrameError, MessageEncoder, PreparedMessage};
use super::{MessageKind, Role, WsError};

/// Where the closing handshake stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionState {
    /// Messages flow both ways.
    Open,
    /// We sent a close frame and wait for the peer's; what else arrives is
    /// dropped, and nothing but the peer's close is answered.
    CloseSent,
    /// Both close frames were exchanged, or the connection failed or dropped:
    /// flush the output and close the socket.
    Closed,
}

/// What happened, as [`ConnectionState::next`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A data message arrived.
    ReceivedMessage,
    /// A ping arrived.
    ReceivedPing,
    /// A pong arrived.
    ReceivedPong,
    /// A close frame arrived.
    ReceivedClose,
    /// The received bytes broke the protocol.
    ReceivedError,
    /// The application sends a message or a ping.
    AppSends,
    /// The application closes the connection.
    AppCloses,
    /// The transport closed or failed (read EOF, reset, timeout).
    TransportClosed,
}

/// What to do about an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Hand the message (or pong) to the application.
    Deliver,
    /// Answer with a pong carrying the ping's payload.
    Pong,
    /// Send a close frame echoing the peer's code (an empty one if it had
    /// none) and report the disconnect with the peer's code.
    EchoCloseAndDisconnect,
    /// Report the disconnect with the peer's code (our close was already sent).
    Disconnect,
    /// Send a close frame with the error's code and report the disconnect.
    FailAndDisconnect,
    /// Send the application's close frame.
    SendClose,
    /// Write the application's frame.
    Send,
    /// Refuse the application's request: the connection is closing or closed.
    Refuse,
    /// Report the disconnect as abnormal (1006), if not reported yet.
    DisconnectAbnormally,
    /// Nothing (data after our close, or anything after Closed).
    Ignore,
}

impl ConnectionState {
    /// The policy: the next state and the action for `event` in `self`.
    pub fn next(self, event: Event) -> (ConnectionState, Action) {
        use Action::*;
        use ConnectionState::*;
        match (self, event) {
            (Open, Event::ReceivedMessage | Event::ReceivedPong) => (Open, Deliver),
            (Open, Event::ReceivedPing) => (Open, Pong),
            (Open, Event::ReceivedClose) => (Closed, EchoCloseAndDisconnect),
            (Open, Event::ReceivedError) => (Closed, FailAndDisconnect),
            (Open, Event::AppSends) => (Open, Send),
            (Open, Event::AppCloses) => (CloseSent, SendClose),
            // After our close, only the peer's close matters (RFC 6455
            // 5.5.1: no data frames after a close; pings need no answer).
            (CloseSent, Event::ReceivedMessage | Event::ReceivedPing | Event::ReceivedPong) => {
                (CloseSent, Ignore)
            }
            (CloseSent, Event::ReceivedClose) => (Closed, Disconnect),
            // A close frame is already out; failing again would send a second one.
            (CloseSent, Event::ReceivedError) => (Closed, DisconnectAbnormally),
            (CloseSent | Closed, Event::AppSends | Event::AppCloses) => (self, Refuse),
            (_, Event::TransportClosed) => (Closed, DisconnectAbnormally),
            (Closed, _) => (Closed, Ignore),
        }
    }
}

/// How the connection ended, for the application: reported exactly once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disconnect {
    /// The peer's close code; 1005 if its close frame had none; 1006 if the
    /// connection dropped without one; the code we sent (1002, 1007, 1009)
    /// when we failed the connection for the peer's error.
    pub code: u16,
    /// The peer's close reason (or the error's description), possibly empty.
    pub reason: ControlPayload,
    /// The peer's error, when we failed the connection.
    pub error: Option<WsError>,
}

/// The application's frame cannot be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// A close frame was already sent or the connection is closed.
    Closed,
    /// The frame itself is invalid (control payload too long, bad close code).
    Invalid(FrameError),
}

impl std::fmt::Display for SendError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Closed => formatter.write_str("the WebSocket connection is closed"),
            SendError::Invalid(error) => error.fmt(formatter),
        }
    }
}

impl std::error::Error for SendError {}

/// What [`Connection::receive`] got out of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A whole message; its payload was appended to the caller's vector.
    Message(MessageKind),
    /// A pong (for the loop's ping timeout).
    Pong(ControlPayload),
    /// The connection ended; flush the output and close the socket.
    Disconnect(Disconnect),
}

/// One WebSocket connection: decoder, encoder and closing handshake.
#[derive(Debug)]
pub struct Connection {
    state: ConnectionState,
    decoder: MessageDecoder,
    encoder: MessageEncoder,
    disconnect_reported: bool,
}

impl Connection {
    /// A connection for `role` with the given message limit and, if
    /// negotiated, permessage-deflate.
    pub fn new(role: Role, max_message_size: usize, deflate: Option<&DeflateParams>) -> Connection {
        Connection {
            state: ConnectionState::Open,
            decoder: MessageDecoder::new(role, max_message_size, deflate),
            encoder: MessageEncoder::new(role, deflate),
            disconnect_reported: false,
        }
    }

    /// The current state.
    pub fn state(&self) -> ConnectionState {
        self.state
    }

    /// The encoder, to set fragmentation or (for clients) the masking key.
    pub fn encoder_mut(&mut self) -> &mut MessageEncoder {
        &mut self.encoder
    }

    fn apply(&mut self, event: Event) -> Action {
        let (state, action) = self.state.next(event);
        self.state = state;
        action
    }

    fn report(&mut self, disconnect: Disconnect) -> Option<Received> {
        if self.disconnect_reported {
            return None;
        }
        self.disconnect_reported = true;
        Some(Received::Disconnect(disconnect))
    }

    /// Decodes `input`, answering pings and close frames into `out`, until
    /// the input is used up or there is something for the application.
    /// Returns the bytes consumed and that thing. Message payloads are
    /// appended to `message`, which must hold nothing else: clear it after
    /// taking each delivered message (see [`MessageDecoder::decode`]).
    ///
    /// Once `Closed`, input is consumed and ignored.
    pub fn receive(
        &mut self,
        input: &[u8],
        message: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> (usize, Option<Received>) {
        let mut consumed = 0;
        while self.state != ConnectionState::Closed {
            let progress = match self.decoder.decode(&input[consumed..], message) {
                Ok(progress) => progress,
                Err(error) => {
                    let received = match self.apply(Event::ReceivedError) {
                        Action::FailAndDisconnect => {
                            self.encoder
                                .close(out, Some(error.close_code()), error.message())
                                .expect("error texts are short enough to be close reasons");
                            self.report(Disconnect {
                                code: error.close_code(),
                                reason: ControlPayload::new(error.message().as_bytes()),
                                error: Some(error),
                            })
                        }
                        _ => self.report(abnormal()),
                    };
                    return (input.len(), received);
                }
            };
            consumed += progress.consumed;
            let Some(incoming) = progress.incoming else {
                return (consumed, None);
            };
            let event = match incoming {
                Incoming::Message(_) => Event::ReceivedMessage,
                Incoming::Ping(_) => Event::ReceivedPing,
                Incoming::Pong(_) => Event::ReceivedPong,
                Incoming::Close { .. } => Event::ReceivedClose,
            };
            let received = match (self.apply(event), incoming) {
                (Action::Deliver, Incoming::Message(kind)) => Some(Received::Message(kind)),
                (Action::Deliver, Incoming::Pong(payload)) => Some(Received::Pong(payload)),
                (Action::Pong, Incoming::Ping(payload)) => {
                    self.encoder
                        .pong(out, payload.as_bytes())
                        .expect("a received ping payload fits a pong");
                    None
                }
                (Action::EchoCloseAndDisconnect, Incoming::Close { code, reason }) => {
                    self.encoder
                        .close(out, code, "")
                        .expect("a received close code may be echoed");
                    self.report(peer_disconnect(code, reason))
                }
                (Action::Disconnect, Incoming::Close { code, reason }) => {
                    self.report(peer_disconnect(code, reason))
                }
                (Action::Ignore, Incoming::Message(_)) => {
                    // Data after our close is dropped, not delivered
                    // (including fragments that arrived before it).
                    message.clear();
                    None
                }
                _ => None,
            };
            if received.is_some() {
                return (consumed, received);
            }
        }
        (input.len(), None)
    }

    /// Appends a data message. Refused once a close frame was sent.
    pub fn send(
        &mut self,
        out: &mut Vec<u8>,
        kind: MessageKind,
        payload: &[u8],
    ) -> Result<(), SendError> {
        match self.apply(Event::AppSends) {
            Action::Send => {
                self.encoder.message(out, kind, payload);
                Ok(())
            }
            _ => Err(SendError::Closed),
        }
    }

    /// Appends a message framed once for many connections: its frames as
    /// they are, or, with permessage-deflate, the payload compressed with
    /// this connection's context. Refused once a close frame was sent.
    pub fn send_prepared(
        &mut self,
        out: &mut Vec<u8>,
        message: &PreparedMessage,
    ) -> Result<(), SendError> {
        match self.apply(Event::AppSends) {
            Action::Send if self.encoder.compresses() => {
                self.encoder.message(out, message.kind(), message.payload());
                Ok(())
            }
            Action::Send => {
                out.extend_from_slice(message.frames());
                Ok(())
            }
            _ => Err(SendError::Closed),
        }
    }

    /// Appends a ping (at most 125 bytes). Refused once a close frame was sent.
    pub fn ping(&mut self, out: &mut Vec<u8>, payload: &[u8]) -> Result<(), SendError> {
        match self.state.next(Event::AppSends).1 {
            Action::Send => self.encoder.ping(out, payload).map_err(SendError::Invalid),
            _ => Err(SendError::Closed),
        }
    }

    /// Starts the closing handshake: appends a close frame (`None`: no
    /// code, for an application that gave none) and waits for the peer's.
    /// Refused if one was already sent; nothing changes on an invalid frame.
    pub fn close(
        &mut self,
        out: &mut Vec<u8>,
        code: Option<u16>,
        reason: &str,
    ) -> Result<(), SendError> {
        match self.state.next(Event::AppCloses) {
            (state, Action::SendClose) => {
                self.encoder
                    .close(out, code, reason)
                    .map_err(SendError::Invalid)?;
                self.state = state;
                Ok(())
            }
            _ => Err(SendError::Closed),
        }
    }

    /// The transport closed (EOF, error, close timeout): returns the
    /// disconnect (1006) unless one was already reported.
    pub fn transport_closed(&mut self) -> Option<Disconnect> {
        self.apply(Event::TransportClosed);
        match self.report(abnormal()) {
            Some(Received::Disconnect(disconnect)) => Some(disconnect),
            _ => None,
        }
    }
}

fn abnormal() -> Disconnect {
    Disconnect {
        code: ABNORMAL,
        reason: ControlPayload::EMPTY,
        error: None,
    }
}

fn peer_disconnect(code: Option<u16>, reason: ControlPayload) -> Disconnect {
    Disconnect {
        code: code.unwrap_or(NO_STATUS),
        reason,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::super::frame::apply_mask;
    use super::*;
    use Action::*;
    use ConnectionState::*;

    #[test]
    fn the_policy_as_a_table() {
        let table = [
            (Open, Event::ReceivedMessage, Open, Deliver),
            (Open, Event::ReceivedPing, Open, Pong),
            (Open, Event::ReceivedPong, Open, Deliver),
            (Open, Event::ReceivedClose, Closed, EchoCloseAndDisconnect),
            (Open, Event::ReceivedError, Closed, FailAndDisconnect),
            (Open, Event::AppSends, Open, Send),
            (Open, Event::AppCloses, CloseSent, SendClose),
            (Open, Event::TransportClosed, Closed, DisconnectAbnormally),
            (CloseSent, Event::ReceivedMessage, CloseSent, Ignore),
            (CloseSent, Event::ReceivedPing, CloseSent, Ignore),
            (CloseSent, Event::ReceivedPong, CloseSent, Ignore),
            (CloseSent, Event::ReceivedClose, Closed, Disconnect),
            (
                CloseSent,
                Event::ReceivedError,
                Closed,
                DisconnectAbnormally,
            ),
            (CloseSent, Event::AppSends, CloseSent, Refuse),
            (CloseSent, Event::AppCloses, CloseSent, Refuse),
            (
                CloseSent,
                Event::TransportClosed,
                Closed,
                DisconnectAbnormally,
            ),
            (Closed, Event::ReceivedMessage, Closed, Ignore),
            (Closed, Event::ReceivedPing, Closed, Ignore),
            (Closed, Event::ReceivedPong, Closed, Ignore),
            (Closed, Event::ReceivedClose, Closed, Ignore),
            (Closed, Event::ReceivedError, Closed, Ignore),
            (Closed, Event::AppSends, Closed, Refuse),
            (Closed, Event::AppCloses, Closed, Refuse),
            (Closed, Event::TransportClosed, Closed, DisconnectAbnormally),
        ];
        for (state, event, next_state, action) in table {
            assert_eq!(
                state.next(event),
                (next_state, action),
                "{state:?} {event:?}"
            );
        }
    }

    fn masked(first: u8, payload: &[u8]) -> Vec<u8> {
        let key = [1, 2, 3, 4];
        let mut frame = vec![first, 0x80 | payload.len() as u8];
        frame.extend_from_slice(&key);
        let start = frame.len();
        frame.extend_from_slice(payload);
        apply_mask(&mut frame[start..], key, 0);
        frame
    }

    fn server() -> Connection {
        Connection::new(Role::Server, 1024, None)
    }

    #[test]
    fn pings_are_answered_and_messages_delivered_in_one_call() {
        let mut connection = server();
        let input = [masked(0x89, b"abc"), masked(0x81, b"hi")].concat();
        let (mut message, mut out) = (Vec::new(), Vec::new());
        let (consumed, received) = connection.receive(&input, &mut message, &mut out);
        assert_eq!(consumed, input.len());
        assert_eq!(received, Some(Received::Message(MessageKind::Text)));
        assert_eq!(message, b"hi");
        assert_eq!(out, b"\x8a\x03abc");
    }

    #[test]
    fn a_peer_close_is_echoed_and_reported_once() {
        let mut connection = server();
        let (mut message, mut out) = (Vec::new(), Vec::new());
        let input = [masked(0x88, b"\x0f\xa0bye"), masked(0x81, b"late")].concat();
        let (_, received) = connection.receive(&input, &mut message, &mut out);
        let Some(Received::Disconnect(disconnect)) = received else {
            panic!("{received:?}")
        };
        assert_eq!((disconnect.code, disconnect.reason.as_str()), (4000, "bye"));
        assert_eq!(out, b"\x88\x02\x0f\xa0");
        assert_eq!(connection.state(), Closed);
        // Nothing more: no second report, no sending, input ignored.
        assert_eq!(connection.transport_closed(), None);
        assert_eq!(
            connection.send(&mut out, MessageKind::Text, b"x"),
            Err(SendError::Closed)
        );
        assert_eq!(
            connection.receive(b"junk", &mut message, &mut out),
            (4, None)
        );
        assert!(message.is_empty());

        // An empty close is echoed empty and reported as 1005.
        let mut connection = server();
        let mut out = Vec::new();
        let (_, received) = connection.receive(&masked(0x88, b""), &mut message, &mut out);
        assert!(matches!(
            received,
            Some(Received::Disconnect(super::Disconnect { code: 1005, .. }))
        ));
        assert_eq!(out, b"\x88\x00");
    }

    #[test]
    fn a_server_close_waits_for_the_peer_and_drops_data_meanwhile() {
        let mut connection = server();
        let (mut message, mut out) = (Vec::new(), Vec::new());
        connection.close(&mut out, Some(1001), "shutdown").unwrap();
        assert_eq!(out, b"\x88\x0a\x03\xe9shutdown");
        assert_eq!(connection.state(), CloseSent);
        assert_eq!(
            connection.close(&mut out, Some(1000), ""),
            Err(SendError::Closed)
        );
        assert_eq!(connection.ping(&mut out, b""), Err(SendError::Closed));
        out.clear();
        let input = [
            masked(0x81, b"late"),
            masked(0x89, b"p"),
            masked(0x88, b"\x03\xe8"),
        ]
        .concat();
        let (consumed, received) = connection.receive(&input, &mut message, &mut out);
        assert_eq!(consumed, input.len());
        assert!(matches!(
            received,
            Some(Received::Disconnect(super::Disconnect { code: 1000, .. }))
        ));
        assert!(message.is_empty(), "data after our close is not delivered");
        assert!(out.is_empty(), "no pong and no second close");
        assert_eq!(connection.state(), Closed);
    }

    #[test]
    fn a_message_finished_after_our_close_is_dropped_whole() {
        let mut connection = server();
        let (mut message, mut out) = (Vec::new(), Vec::new());
        assert_eq!(
            connection.receive(&masked(0x01, b"first"), &mut message, &mut out),
            (11, None)
        );
        connection.close(&mut out, Some(1000), "").unwrap();
        let (_, received) = connection.receive(&masked(0x80, b"second"), &mut message, &mut out);
        assert_eq!(received, None);
        assert!(message.is_empty(), "{message:?}");
    }

    #[test]
    fn protocol_errors_send_their_close_code() {
        let mut connection = server();
        let (mut message, mut out) = (Vec::new(), Vec::new());
        let (_, received) = connection.receive(b"\x81\x02hi", &mut message, &mut out);
        let Some(Received::Disconnect(disconnect)) = received else {
            panic!("{received:?}")
        };
        assert_eq!(disconnect.code, 1002);
        assert!(disconnect.error.is_some());
        assert_eq!(&out[..4], b"\x88\x1e\x03\xea");
        assert_eq!(&out[4..], b"unmasked frame from a client");
        assert_eq!(connection.state(), Closed);

        let mut connection = server();
        out.clear();
        let (_, received) = connection.receive(&masked(0x81, b"\xff"), &mut message, &mut out);
        assert!(matches!(
            received,
            Some(Received::Disconnect(super::Disconnect { code: 1007, .. }))
        ));
        assert_eq!(&out[2..4], b"\x03\xef");
    }

    #[test]
    fn prepared_messages_are_framed_once_or_compressed_per_connection() {
        let prepared = PreparedMessage::new(MessageKind::Text, b"to everyone", None);
        assert_eq!(prepared.frames(), b"\x81\x0bto everyone");
        let mut plain = server();
        let mut out = Vec::new();
        plain.send_prepared(&mut out, &prepared).unwrap();
        assert_eq!(out, prepared.frames());

        let params = DeflateParams {
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            server_max_window_bits: 12,
            client_max_window_bits: 12,
            level: 6,
        };
        let mut compressed = Connection::new(Role::Server, 1024, Some(&params));
        let mut out = Vec::new();
        compressed.send_prepared(&mut out, &prepared).unwrap();
        assert_eq!(out[0], 0xC1, "compressed with RSV1");
        let mut client = MessageDecoder::new(Role::Client, 1024, Some(&params));
        let mut message = Vec::new();
        let progress = client.decode(&out, &mut message).unwrap();
        assert_eq!(
            progress.incoming,
            Some(Incoming::Message(MessageKind::Text))
        );
        assert_eq!(message, b"to everyone");

        plain.close(&mut out, None, "").unwrap();
        assert_eq!(
            plain.send_prepared(&mut out, &prepared),
            Err(SendError::Closed)
        );
    }

    #[test]
    fn a_drop_is_reported_as_1006_once() {
        let mut connection = server();
        let disconnect = connection.transport_closed().unwrap();
        assert_eq!(disconnect.code, 1006);
        assert_eq!(connection.transport_closed(), None);
        let mut connection = server();
        let mut out = Vec::new();
        connection.close(&mut out, Some(1000), "").unwrap();
        assert_eq!(connection.transport_closed().map(|d| d.code), Some(1006));
    }
}
