//! ASGI 3, the whole interface in one place:
//!
//! * `objects.rs`, what the app sees over HTTP: the `http` scope and the
//!   native `receive` and `send` callables (and their awaitables).
//! * `dispatch.rs`, what the loop does with them: starts the app for a
//!   routed request (its first step inline), writes each message it sends
//!   through the response-writer seam (`crate::exchange`), and finishes it
//!   when it completes.
//! * `websocket.rs`, the `websocket.*` messages an app sends, read into
//!   an `AppMessage` that the WebSocket protocol (`crate::ws`) applies.

pub(crate) mod dispatch;
pub(crate) mod objects;
pub(crate) mod websocket;

// The names the binding (`lib.rs`) and the server's constructor use.
pub(crate) use objects::{AsgiReceive, AsgiSend, AsgiSettings, Ready, ReceiveWait};
