//! ASGI 3, the whole interface in one place:
//!
//! * `awaitables.rs`, the awaitables both callables return ([`Ready`],
//!   complete at once) and `settle` for asyncio futures.
//! * `objects.rs`, what the app sees over HTTP: the `http` scope and the
//!   native `receive` callable (and the awaitables of both callables).
//! * `send.rs`, the native `send` callable: the response messages an app
//!   sends, validated and collected for the loop.
//! * `dispatch.rs`, what the loop does with them: starts the app for a
//!   routed request (its first step inline), writes each message it sends
//!   through the response-writer seam (`crate::exchange`), and finishes it
//!   when it completes.
//! * `websocket.rs`, the `websocket.*` messages an app sends, read into
//!   an `AppMessage` that the WebSocket protocol (`crate::ws`) applies.

pub(crate) mod awaitables;
pub(crate) mod dispatch;
pub(crate) mod objects;
pub(crate) mod send;
pub(crate) mod websocket;

// The names the binding (`lib.rs`) and the server's constructor use.
pub(crate) use awaitables::Ready;
pub(crate) use objects::{AsgiReceive, AsgiSettings, ReceiveWait};
pub(crate) use send::AsgiSend;
