//! HTTP/1.1 on a connection: the protocol the loop speaks today.
//!
//! How it works: [`Core::drive`](crate::dispatch::Core) (`drive.rs`)
//! processes buffered input, writes, and reads until the socket would
//! block, moving the connection's [`ConnState`](crate::conn::ConnState)
//! through its events; `input.rs` turns buffered bytes into requests (heads
//! parsed by rush-proto, bodies collected or flowing to a running app) and
//! hands each, in order, to the dispatcher (`crate::app` routes it), with
//! the connection as the request's response writer (`writer.rs`, this
//! protocol's side of `crate::exchange`). What happens to a request in
//! flight (room to write, body bytes, the client gone) goes to the
//! dispatcher's request events (`crate::dispatch::events`): this module
//! names no interface. `accounting.rs` keeps the connection's output
//! budget and notes a request's start. Another protocol on a live
//! connection (a WebSocket session; HTTP/2 next) is another module beside
//! this one; `crate::drive` picks it.

mod accounting;
mod drive;
mod input;
mod writer;
