//! The app's side of one WebSocket connection: the `WebSocket` object.
//!
//! One native object serves both interfaces: an ASGI app gets its bound
//! methods `asgi_receive` and `asgi_send` as `receive` and `send`; a rush
//! `App` handler gets the object itself (`accept`, `send`, `receive`,
//! `close`, `async for`). It owns the protocol state (`ws::Connection`),
//! so what the app sends is framed here, at once, into `out`; the loop
//! moves `out` into the connection's sink when it drives the connection.
//!
//! How the two sides meet, never re-entrantly:
//! * app → loop: every call that leaves something for the loop (frames in
//!   `out`, an accept, a denial) puts the connection on the worker's
//!   [`FlushQueue`]. Only the first entry of a batch calls Python (the
//!   notifier schedules `Server.flush_websockets` with `call_soon`), so a
//!   broadcast to 1,000 members costs one Python call, not 1,000.
//! * loop → app: received messages wait in `queue` (bounded by
//!   `--ws-max-queue`: the loop stops reading while it is full) or resolve
//!   the future a waiting `receive()` returned.
//! * Backpressure: `send()` returns a pending future while the bytes not
//!   yet written (here and in the sink, or in the HTTP/2 stream's queue)
//!   are over the high-water mark; the loop resolves it once they drained
//!   below the low-water mark.
//! * Over HTTP/2 (RFC 8441, `crate::http2::websocket`) the object is the
//!   same but for the handshake's answer: no key and no 101, `accept` leaves
//!   the fields of a `200` in `h2_accept` for the stream to send, and the
//!   frames in `out` go out as the stream's DATA.
//! * The end is reported exactly once: a disconnect (the peer's code, 1005
//!   without one, 1006 on a drop) is queued behind the messages, and after
//!   that the connection is `gone`: sending raises `ConnectionResetError`
//!   (an `OSError`, as ASGI asks; rush's `WebSocketDisconnect` derives from it).

use std::collections::VecDeque;
use std::sync::Arc;

use pyo3::exceptions::{PyConnectionResetError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use rush_proto::ws::handshake::{accept_fields, write_accept_response, AcceptKey};
use rush_proto::ws::{self, DeflateParams, MessageKind, Role, SendError};

use super::flush::FlushQueue;
use crate::asgi::awaitables::{ready, settle};
use crate::asgi::websocket::{read_app_message, AppMessage};

/// Where the handshake stands.
pub enum Phase {
    /// Upgrade requested; the app has not answered yet.
    Connecting,
    /// The app is sending an HTTP response instead (`websocket.http.response`).
    Responding {
        status: u16,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        body: Vec<u8>,
    },
    /// The loop is to answer with this HTTP response and close (403 for a
    /// close before accept, 500 for an app that failed, or the app's own).
    Denied {
        status: u16,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        body: Vec<u8>,
    },
    /// Accepted: frames flow (the closing handshake is `proto`'s business).
    Open,
    /// The denial was written; nothing more happens.
    Finished,
}

/// An HTTP response that answers a WebSocket handshake instead of accepting it.
pub struct Denial {
    pub status: u16,
    pub headers: Vec<(Vec<u8>, Vec<u8>)>,
    pub body: Vec<u8>,
}

/// What the loop received for the app.
enum Incoming {
    Message(Py<PyAny>),
    Disconnect { code: u16, reason: String },
}

/// Which call is waiting, so a message is shaped for it.
#[derive(Clone, Copy)]
enum Waiting {
    Asgi,
    Receive,
    Iterate,
}

/// The app's handle on one WebSocket connection (see the module docs).
#[pyclass(module = "rush._rush", name = "WebSocket")]
pub struct WebSocket {
    pub phase: Phase,
    pub proto: Option<ws::Connection>,
    /// Frames (or the 101 head) the loop has not moved to the sink yet.
    pub out: Vec<u8>,
    /// Over HTTP/2: the fields of the `200` that accepts, once `accept`
    /// was called and until the stream sent it.
    pub h2_accept: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Unsent bytes in the sink (or the HTTP/2 stream's queue), as of the
    /// loop's last drive.
    pub sink_pending: usize,
    /// The loop stopped reading because `queue` was full.
    pub read_paused: bool,
    /// Already on the flush queue.
    pub flush_requested: bool,
    /// The transport is closed or the closing handshake is over.
    pub gone: bool,
    key: usize,
    session: u64,
    flush: Arc<FlushQueue>,
    /// The `Sec-WebSocket-Accept` of an HTTP/1.1 handshake; `None` over
    /// HTTP/2, which has none.
    accept_key: Option<AcceptKey>,
    /// Unsent bytes past which `send()` waits: the connection's high-water
    /// mark, or an HTTP/2 stream's.
    high_water: usize,
    deflate: Option<DeflateParams>,
    max_size: usize,
    max_queue: usize,
    queue: VecDeque<Incoming>,
    /// `websocket.connect` is still to be handed to an ASGI app.
    connect_pending: bool,
    disconnect_queued: bool,
    disconnect_delivered: bool,
    /// The code and reason of the disconnect, once known.
    ended: Option<(u16, String)>,
    receive_waiter: Option<(Py<PyAny>, Waiting)>,
    drain_waiter: Option<Py<PyAny>>,
    /// The subprotocols the client offered, in its order.
    #[pyo3(get)]
    subprotocols: Vec<String>,
    /// The request path (percent-decoded).
    #[pyo3(get)]
    path: String,
    /// The query string (without `?`), for `query_string`.
    query: Vec<u8>,
    /// A copy of the request head, for `headers` (kept for rush App
    /// handlers only: an ASGI app has its scope).
    head: Option<Vec<u8>>,
}

/// What a `WebSocket` is made from (see `upgrade.rs`).
pub struct WebSocketSetup {
    pub key: usize,
    pub session: u64,
    pub flush: Arc<FlushQueue>,
    pub accept_key: Option<AcceptKey>,
    pub high_water: usize,
    pub deflate: Option<DeflateParams>,
    pub max_size: usize,
    pub max_queue: usize,
    pub subprotocols: Vec<String>,
    pub path: String,
    pub query: Vec<u8>,
    pub head: Option<Vec<u8>>,
}

impl WebSocket {
    pub fn new(setup: WebSocketSetup) -> WebSocket {
        WebSocket {
            phase: Phase::Connecting,
            proto: None,
            out: Vec::new(),
            h2_accept: None,
            sink_pending: 0,
            read_paused: false,
            flush_requested: false,
            gone: false,
            key: setup.key,
            session: setup.session,
            flush: setup.flush,
            accept_key: setup.accept_key,
            high_water: setup.high_water,
            deflate: setup.deflate,
            max_size: setup.max_size,
            max_queue: setup.max_queue.max(1),
            queue: VecDeque::new(),
            connect_pending: true,
            disconnect_queued: false,
            disconnect_delivered: false,
            ended: None,
            receive_waiter: None,
            drain_waiter: None,
            subprotocols: setup.subprotocols,
            path: setup.path,
            query: setup.query,
            head: setup.head,
        }
    }

    /// Asks the loop to drive this connection soon.
    pub fn request_flush(&mut self, py: Python<'_>) -> PyResult<()> {
        if !self.flush_requested {
            self.flush_requested = true;
            self.flush.push(py, self.key, self.session)?;
        }
        Ok(())
    }

    /// The transport is going: what it brought may all be queued, since
    /// there is no more reading to hold back (bounded by what was received:
    /// an HTTP/2 stream's window).
    pub fn unbound_queue(&mut self) {
        self.max_queue = usize::MAX;
    }

    /// Whether the loop must stop reading: the app has `--ws-max-queue`
    /// messages it has not taken.
    pub fn queue_full(&self) -> bool {
        self.queue.len() >= self.max_queue
    }

    /// A message arrived (the loop made the str or bytes object).
    pub fn deliver_message(&mut self, py: Python<'_>, message: Py<PyAny>) {
        self.push(py, Incoming::Message(message));
    }

    /// The connection ended; reported once, after the messages before it.
    pub fn deliver_disconnect(&mut self, py: Python<'_>, code: u16, reason: &str) {
        self.gone = true;
        if self.disconnect_queued {
            return;
        }
        self.disconnect_queued = true;
        self.ended = Some((code, reason.to_owned()));
        self.push(
            py,
            Incoming::Disconnect {
                code,
                reason: reason.to_owned(),
            },
        );
        self.fail_drain_waiter(py);
    }

    /// The transport is closed (or the connection dropped): a disconnect
    /// with 1006 unless one was reported, and no more sending.
    pub fn transport_gone(&mut self, py: Python<'_>) {
        let code = match &mut self.proto {
            Some(proto) => proto.transport_closed().map(|disconnect| disconnect.code),
            None => Some(ws::close::ABNORMAL),
        };
        match code {
            Some(code) => self.deliver_disconnect(py, code, ""),
            None => {
                self.gone = true;
                self.fail_drain_waiter(py);
            }
        }
    }

    fn push(&mut self, py: Python<'_>, incoming: Incoming) {
        if let Some((future, waiting)) = self.receive_waiter.take() {
            if self.queue.is_empty() {
                let outcome = self.shape(py, incoming, waiting);
                settle(py, future.bind(py), |future| match outcome {
                    Ok(value) => future.call_method1("set_result", (value,)),
                    Err(error) => future.call_method1("set_exception", (error.into_value(py),)),
                });
                return;
            }
            self.receive_waiter = Some((future, waiting));
        }
        self.queue.push_back(incoming);
    }

    /// A received item as the waiting call returns it.
    fn shape(
        &mut self,
        py: Python<'_>,
        incoming: Incoming,
        waiting: Waiting,
    ) -> PyResult<Py<PyAny>> {
        match incoming {
            Incoming::Message(message) => match waiting {
                Waiting::Asgi => {
                    let dict = PyDict::new(py);
                    dict.set_item(
                        pyo3::intern!(py, "type"),
                        pyo3::intern!(py, "websocket.receive"),
                    )?;
                    let field = if message.bind(py).is_instance_of::<PyString>() {
                        pyo3::intern!(py, "text")
                    } else {
                        pyo3::intern!(py, "bytes")
                    };
                    dict.set_item(field, message)?;
                    Ok(dict.into_any().unbind())
                }
                Waiting::Receive | Waiting::Iterate => Ok(message),
            },
            Incoming::Disconnect { code, reason } => {
                self.disconnect_delivered = true;
                match waiting {
                    Waiting::Asgi => {
                        let dict = PyDict::new(py);
                        dict.set_item(
                            pyo3::intern!(py, "type"),
                            pyo3::intern!(py, "websocket.disconnect"),
                        )?;
                        dict.set_item(pyo3::intern!(py, "code"), code)?;
                        dict.set_item(pyo3::intern!(py, "reason"), reason)?;
                        Ok(dict.into_any().unbind())
                    }
                    Waiting::Receive => Err(disconnect_error(py, code, &reason)),
                    Waiting::Iterate => Err(pyo3::exceptions::PyStopAsyncIteration::new_err(())),
                }
            }
        }
    }

    /// The next item for a `receive()`: at once if one is queued, else a future.
    fn next(&mut self, py: Python<'_>, waiting: Waiting) -> PyResult<Py<PyAny>> {
        if let Some(incoming) = self.queue.pop_front() {
            if self.read_paused && self.queue.len() < self.max_queue {
                // The loop stopped reading for this queue: it may go on.
                self.read_paused = false;
                self.request_flush(py)?;
            }
            let value = self.shape(py, incoming, waiting)?;
            return Ok(ready(py, value)?.into_any());
        }
        if self.disconnect_delivered {
            return match waiting {
                Waiting::Asgi => Err(PyConnectionResetError::new_err(
                    "the WebSocket is closed (its websocket.disconnect was delivered)",
                )),
                Waiting::Receive => {
                    let (code, reason) = self
                        .ended
                        .clone()
                        .unwrap_or((ws::close::ABNORMAL, String::new()));
                    Err(disconnect_error(py, code, &reason))
                }
                Waiting::Iterate => Err(pyo3::exceptions::PyStopAsyncIteration::new_err(())),
            };
        }
        if self.receive_waiter.is_some() {
            return Err(PyRuntimeError::new_err(
                "another receive() is already waiting on this WebSocket",
            ));
        }
        let future = create_future(py)?;
        self.receive_waiter = Some((future.clone_ref(py), waiting));
        Ok(future)
    }

    /// Writes the 101 and opens the connection.
    pub(super) fn accept_with(
        &mut self,
        py: Python<'_>,
        subprotocol: Option<&str>,
        headers: &[(Vec<u8>, Vec<u8>)],
    ) -> PyResult<()> {
        if !matches!(self.phase, Phase::Connecting) {
            return Err(PyRuntimeError::new_err(
                "the WebSocket handshake was already answered (accept sent twice, or after close)",
            ));
        }
        let extra: Vec<(&[u8], &[u8])> = headers
            .iter()
            .map(|(name, value)| (name.as_slice(), value.as_slice()))
            .collect();
        let subprotocol = subprotocol.map(str::as_bytes);
        let written = match &self.accept_key {
            Some(key) => write_accept_response(
                &mut self.out,
                key,
                subprotocol,
                self.deflate.as_ref(),
                &extra,
            ),
            None => accept_fields(subprotocol, self.deflate.as_ref(), &extra)
                .map(|fields| self.h2_accept = Some(fields)),
        };
        written.map_err(|error| {
            PyValueError::new_err(format!("cannot accept the WebSocket: {error}"))
        })?;
        self.proto = Some(ws::Connection::new(
            Role::Server,
            self.max_size,
            self.deflate.as_ref(),
        ));
        self.phase = Phase::Open;
        self.request_flush(py)
    }

    /// Frames a message; then paces the sender.
    pub(super) fn send_message(
        &mut self,
        py: Python<'_>,
        kind: MessageKind,
        payload: &[u8],
    ) -> PyResult<Py<PyAny>> {
        if self.gone {
            return Err(disconnect_error(py, ws::close::ABNORMAL, ""));
        }
        let Some(proto) = &mut self.proto else {
            return Err(PyRuntimeError::new_err(
                "the WebSocket must be accepted before sending",
            ));
        };
        proto
            .send(&mut self.out, kind, payload)
            .map_err(|_| disconnect_error(py, ws::close::NORMAL, "closed by the app"))?;
        self.request_flush(py)?;
        self.pace(py)
    }

    /// Sets the mark `send()` waits at (an HTTP/2 stream's is lowered to
    /// the fair share while the worker is over its output budget).
    pub fn set_high_water(&mut self, mark: usize) {
        self.high_water = mark;
    }

    /// Ready at once, or a future resolved when the output drained.
    pub fn pace(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.out.len() + self.sink_pending < self.high_water {
            return Ok(ready(py, py.None())?.into_any());
        }
        let future = create_future(py)?;
        self.drain_waiter = Some(future.clone_ref(py));
        Ok(future)
    }

    /// The loop's sink drained below the low-water mark.
    pub fn resume_sender(&mut self, py: Python<'_>) {
        if let Some(future) = self.drain_waiter.take() {
            settle(py, future.bind(py), |future| {
                future.call_method1("set_result", (py.None(),))
            });
        }
    }

    fn fail_drain_waiter(&mut self, py: Python<'_>) {
        if let Some(future) = self.drain_waiter.take() {
            let error = disconnect_error(py, ws::close::ABNORMAL, "");
            settle(py, future.bind(py), |future| {
                future.call_method1("set_exception", (error.into_value(py),))
            });
        }
    }

    /// Starts the closing handshake (or, before accept, denies with 403).
    /// Closing what is already closing or gone does nothing.
    pub fn close_with(&mut self, py: Python<'_>, code: Option<u16>, reason: &str) -> PyResult<()> {
        match &self.phase {
            Phase::Connecting => self.deny(py, 403, Vec::new(), Vec::new()),
            Phase::Open if !self.gone => {
                let proto = self.proto.as_mut().expect("open means accepted");
                match proto.close(&mut self.out, code, reason) {
                    Ok(()) => self.request_flush(py),
                    Err(SendError::Closed) => Ok(()),
                    Err(SendError::Invalid(error)) => Err(PyValueError::new_err(format!(
                        "invalid WebSocket close: {error}"
                    ))),
                }
            }
            _ => Ok(()),
        }
    }

    /// Answers the handshake with an HTTP response instead, and closes.
    pub fn deny(
        &mut self,
        py: Python<'_>,
        status: u16,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
        body: Vec<u8>,
    ) -> PyResult<()> {
        self.phase = Phase::Denied {
            status,
            headers,
            body,
        };
        self.request_flush(py)
    }

    /// The HTTP answer the app chose instead of the handshake, once: the
    /// phase moves on to `Finished`, so the loop writes it a single time.
    pub fn take_denial(&mut self) -> Option<Denial> {
        if !matches!(self.phase, Phase::Denied { .. }) {
            return None;
        }
        match std::mem::replace(&mut self.phase, Phase::Finished) {
            Phase::Denied {
                status,
                headers,
                body,
            } => Some(Denial {
                status,
                headers,
                body,
            }),
            _ => unreachable!("matched above"),
        }
    }

    /// Sends a ping (the loop's keepalive); false when it cannot be sent.
    pub fn ping(&mut self, py: Python<'_>) -> bool {
        let Some(proto) = &mut self.proto else {
            return false;
        };
        proto.ping(&mut self.out, b"rush").is_ok() && self.request_flush(py).is_ok()
    }
}

fn create_future(py: Python<'_>) -> PyResult<Py<PyAny>> {
    Ok(py
        .import("asyncio")?
        .call_method0("get_running_loop")?
        .call_method0("create_future")?
        .unbind())
}

/// `rush.websocket.WebSocketDisconnect(code, reason)`, a
/// `ConnectionResetError`; a plain `ConnectionResetError` if it cannot be made.
pub(super) fn disconnect_error(py: Python<'_>, code: u16, reason: &str) -> PyErr {
    let made = py
        .import("rush.websocket")
        .and_then(|module| module.getattr("WebSocketDisconnect"))
        .and_then(|class| class.call1((code, reason)));
    match made {
        Ok(error) => PyErr::from_value(error),
        Err(_) => PyConnectionResetError::new_err(format!("the WebSocket closed with {code}")),
    }
}

#[pymethods]
impl WebSocket {
    /// ASGI `receive()`: `websocket.connect`, then `websocket.receive`
    /// messages, then one `websocket.disconnect`.
    fn asgi_receive(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        if self.connect_pending {
            self.connect_pending = false;
            let dict = PyDict::new(py);
            dict.set_item("type", "websocket.connect")?;
            return Ok(ready(py, dict.into_any().unbind())?.into_any());
        }
        self.next(py, Waiting::Asgi)
    }

    /// ASGI `send(message)`: the message read by `asgi/websocket.rs`, applied to
    /// this session in its phase.
    fn asgi_send(&mut self, py: Python<'_>, message: &Bound<'_, PyDict>) -> PyResult<Py<PyAny>> {
        match read_app_message(py, message)? {
            AppMessage::Send(kind, data) => return self.send_message(py, kind, &data),
            AppMessage::Accept {
                subprotocol,
                headers,
            } => self.accept_with(py, subprotocol.as_deref(), &headers)?,
            AppMessage::Close { code, reason } => self.close_with(py, code, &reason)?,
            AppMessage::DenyStart { status, headers }
                if matches!(self.phase, Phase::Connecting) =>
            {
                self.phase = Phase::Responding {
                    status,
                    headers,
                    body: Vec::new(),
                };
            }
            AppMessage::DenyBody {
                body: more_bytes,
                more,
            } if matches!(self.phase, Phase::Responding { .. }) => {
                if let Phase::Responding { body, .. } = &mut self.phase {
                    body.extend_from_slice(&more_bytes);
                }
                if !more {
                    if let Phase::Responding {
                        status,
                        headers,
                        body,
                    } = std::mem::replace(&mut self.phase, Phase::Finished)
                    {
                        self.deny(py, status, headers, body)?;
                    }
                }
            }
            _ if self.gone => return Err(disconnect_error(py, ws::close::ABNORMAL, "")),
            unexpected => {
                let kind = match unexpected {
                    AppMessage::Unknown(kind) => kind,
                    AppMessage::DenyStart { .. } => "websocket.http.response.start".to_owned(),
                    _ => "websocket.http.response.body".to_owned(),
                };
                return Err(PyRuntimeError::new_err(format!(
                    "unexpected ASGI message {kind:?} on a WebSocket in this state"
                )));
            }
        }
        Ok(ready(py, py.None())?.into_any())
    }

    /// Accepts the connection, choosing `subprotocol` (one the client offered).
    #[pyo3(signature = (subprotocol=None, headers=None))]
    fn accept(
        &mut self,
        py: Python<'_>,
        subprotocol: Option<&str>,
        headers: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    ) -> PyResult<Py<PyAny>> {
        self.accept_with(py, subprotocol, &headers.unwrap_or_default())?;
        Ok(ready(py, py.None())?.into_any())
    }

    /// Sends a text (str) or binary (bytes) message; waits while the client
    /// reads slower than the app sends.
    fn send(&mut self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(text) = message.cast::<PyString>() {
            let text = text.to_str()?.to_owned();
            self.send_message(py, MessageKind::Text, text.as_bytes())
        } else if let Ok(data) = message.cast::<PyBytes>() {
            self.send_message(py, MessageKind::Binary, data.as_bytes())
        } else {
            Err(pyo3::exceptions::PyTypeError::new_err(
                "a WebSocket message is str or bytes",
            ))
        }
    }

    /// The next message (str or bytes); raises `WebSocketDisconnect` once
    /// the connection is over.
    fn receive(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.next(py, Waiting::Receive)
    }

    /// Closes the connection (before `accept`: answers 403).
    #[pyo3(signature = (code=1000, reason=""))]
    fn close(&mut self, py: Python<'_>, code: u16, reason: &str) -> PyResult<Py<PyAny>> {
        self.close_with(py, Some(code), reason)?;
        Ok(ready(py, py.None())?.into_any())
    }

    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __anext__(&mut self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        self.next(py, Waiting::Iterate)
    }

    /// The query string of the request (without `?`), still percent-encoded.
    #[getter]
    fn query_string(&self) -> String {
        String::from_utf8_lossy(&self.query).into_owned()
    }

    /// The request's header fields as `(name, value)` pairs, names as sent.
    #[getter]
    fn headers(&self) -> Vec<(String, String)> {
        self.head
            .as_deref()
            .map(|head| {
                crate::request::header_fields(head)
                    .map(|(name, value)| {
                        (
                            String::from_utf8_lossy(name).into_owned(),
                            String::from_utf8_lossy(value).into_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The close code the connection ended with (None while it is open).
    #[getter]
    fn close_code(&self) -> Option<u16> {
        self.ended.as_ref().map(|(code, _)| *code)
    }

    /// Whether the connection is over (peer closed, dropped, or closed by us and answered).
    #[getter]
    fn closed(&self) -> bool {
        self.gone
    }
}
