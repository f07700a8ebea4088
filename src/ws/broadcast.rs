//! `rush.Broadcast`: a group of WebSocket connections that a message is
//! framed for once and written to all, with no Python call per receiver.
//!
//! `send(message)` builds one `PreparedMessage` (the frames, made once) and
//! appends it to each member's pending output; members with
//! permessage-deflate compress the payload with their own context, as the
//! protocol requires. Each member is put on the worker's flush queue, and
//! only the first entry of a batch calls Python (to schedule the flush).
//! A member whose connection is over is dropped from the group. A member
//! whose unsent output is over [`SLOW_MEMBER_LIMIT`] (it stopped reading)
//! is closed with 1008 rather than let its backlog grow without bound.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};
use rush_proto::ws::{close, MessageKind, PreparedMessage};

use super::channel::{Phase, WebSocket};
use crate::asgi::awaitables::ready;
use crate::options::OUTPUT_HIGH_WATER;

/// Unsent bytes a member may hold before a broadcast closes it.
pub const SLOW_MEMBER_LIMIT: usize = 16 * OUTPUT_HIGH_WATER;

/// A set of WebSocket connections to broadcast to.
#[pyclass(module = "rush._rush")]
#[derive(Default)]
pub struct Broadcast {
    members: Vec<Py<WebSocket>>,
}

#[pymethods]
impl Broadcast {
    #[new]
    fn new() -> Self {
        Broadcast::default()
    }

    /// Adds a connection (once; adding it again does nothing).
    fn add(&mut self, py: Python<'_>, websocket: Py<WebSocket>) {
        if !self.members.iter().any(|member| member.is(&websocket)) {
            self.members.push(websocket);
        }
        let _ = py;
    }

    /// Removes a connection if it is a member.
    fn discard(&mut self, websocket: Py<WebSocket>) {
        self.members.retain(|member| !member.is(&websocket));
    }

    fn __len__(&self) -> usize {
        self.members.len()
    }

    /// Sends `message` (str or bytes) to every open member; returns how many
    /// it was queued for. Awaitable (it never waits: a member that cannot
    /// keep up is closed instead of slowing the others).
    fn send(&mut self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let prepared = if let Ok(text) = message.cast::<PyString>() {
            PreparedMessage::new(MessageKind::Text, text.to_str()?.as_bytes(), None)
        } else if let Ok(data) = message.cast::<PyBytes>() {
            PreparedMessage::new(MessageKind::Binary, data.as_bytes(), None)
        } else {
            return Err(pyo3::exceptions::PyTypeError::new_err(
                "a WebSocket message is str or bytes",
            ));
        };
        let mut sent = 0usize;
        let mut first_error = None;
        self.members.retain(|member| {
            let Ok(mut ws) = member.bind(py).try_borrow_mut() else {
                return true;
            };
            if ws.gone {
                return false;
            }
            if !matches!(ws.phase, Phase::Open) {
                return true;
            }
            let WebSocket { proto, out, .. } = &mut *ws;
            let Some(proto) = proto.as_mut() else {
                return true;
            };
            if proto.send_prepared(out, &prepared).is_err() {
                // Closing: it takes no more messages.
                return false;
            }
            sent += 1;
            if ws.out.len() + ws.sink_pending > SLOW_MEMBER_LIMIT {
                let _ = ws.close_with(py, Some(close::POLICY_VIOLATION), "too slow to keep up");
            }
            if let Err(error) = ws.request_flush(py) {
                first_error.get_or_insert(error);
            }
            true
        });
        if let Some(error) = first_error {
            return Err(error);
        }
        Ok(ready(py, sent.into_pyobject(py)?.into_any().unbind())?.into_any())
    }
}
