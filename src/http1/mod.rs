//! HTTP/1.1 on a connection: the protocol the loop speaks today.
//!
//! How it works: [`Core::drive`](crate::dispatch::Core) (`drive.rs`)
//! processes buffered input, writes, and reads until the socket would
//! block, moving the connection's [`ConnState`](crate::conn::ConnState)
//! through its events; `input.rs` turns buffered bytes into requests (heads
//! parsed by rush-proto, bodies collected or flowing to a running app) and
//! hands each, in order, to the dispatchers. Another protocol on a live
//! connection (a WebSocket session, a CONNECT relay) is another module
//! beside this one, chosen by the connection's state after an upgrade.

mod accounting;
mod drive;
mod input;
mod writer;
