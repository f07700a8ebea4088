//! The native rush `App`, and the entry of every request: `dispatch.rs`
//! routes a request (redirects, static mounts, 404 and 405, the response
//! cache) and calls a native handler (sync, or async with its first step
//! inline); whatever no route claims it passes on to the WSGI
//! (`crate::wsgi`) or ASGI (`crate::asgi`) app the worker serves.

mod dispatch;
