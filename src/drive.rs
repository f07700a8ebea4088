//! Driving one connection under its protocol: the one place where the
//! protocol of a connection is matched.
//!
//! A connection's protocol is chosen once, when it is accepted or on its
//! first bytes (HTTP/1.1 or HTTP/2, `crate::http2::Core::pick_protocol`),
//! and changes at most once more, after an upgrade (a WebSocket
//! session): it is `conn::Protocol`, and this `match` picks the driver
//! that serves it. A driver that switched the protocol mid-drive returns
//! `Disposition::Upgraded`, and the connection is driven on at once under
//! the new one, so no driver calls another.
//!
//! After a drive, a request whose producer waits on the response's water
//! marks (an ASGI `send()`, see `InFlight::needs_pacing`) is paced; every
//! other connection skips that, and the worker's output budget is brought
//! up to date.

use pyo3::prelude::*;

use crate::conn::{Connection, Disposition, Protocol};
use crate::dispatch::Core;
use crate::inflight::InFlight;

impl Core {
    /// Drives `connection` (slab key `key`) until it would block, closes,
    /// or waits for its app. Never returns `Disposition::Upgraded`.
    pub(crate) fn drive_protocol(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) -> Disposition {
        let disposition = loop {
            let disposition = match connection.protocol {
                Protocol::Http1 => self.drive(py, connection, key),
                Protocol::WebSocket(_) => self.drive_websocket(py, connection, key),
                Protocol::Http2(_) => self.drive_http2(py, connection, key),
            };
            if disposition != Disposition::Upgraded {
                break disposition;
            }
        };
        if disposition == Disposition::Open
            && connection
                .request
                .in_flight
                .as_ref()
                .is_some_and(InFlight::needs_pacing)
        {
            self.pace_request(py, connection);
        }
        self.account_output(connection);
        disposition
    }
}
