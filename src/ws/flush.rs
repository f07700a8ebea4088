//! The worker's list of WebSocket connections with work for the loop.
//!
//! A `WebSocket` (`channel.rs`) that leaves something for the loop (frames,
//! an accept, a denial, room in a full queue) adds its connection here. The
//! first entry of a batch calls the notifier, which schedules
//! `Server.flush_websockets` with asyncio's `call_soon`; later entries only
//! append. So the loop is never entered from inside an app's call, and a
//! broadcast to many connections costs one Python call, not one each.

use std::sync::Mutex;

use pyo3::prelude::*;

/// Connections with something for the loop, shared by every `WebSocket`
/// of a worker and its `Server`.
#[derive(Default)]
pub struct FlushQueue {
    pending: Mutex<Vec<(usize, u64)>>,
    /// Called once per batch (when the list was empty): schedules
    /// `Server.flush_websockets` on the asyncio loop.
    pub notify: Mutex<Option<Py<PyAny>>>,
}

impl FlushQueue {
    pub(super) fn push(&self, py: Python<'_>, key: usize, session: u64) -> PyResult<()> {
        let first = {
            let mut pending = self
                .pending
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            pending.push((key, session));
            pending.len() == 1
        };
        if first {
            let notify = self
                .notify
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .as_ref()
                .map(|notify| notify.clone_ref(py));
            if let Some(notify) = notify {
                notify.call0(py)?;
            }
        }
        Ok(())
    }

    /// Everything queued so far.
    pub fn take(&self) -> Vec<(usize, u64)> {
        std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()),
        )
    }
}
