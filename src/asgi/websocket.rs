//! The ASGI `websocket.*` messages an app sends (spec 2.4), read into an
//! [`AppMessage`]: accept, send, close, and the `websocket.http.response`
//! denial extension. Only the translation from the app's dict lives here;
//! `channel.rs`, which owns the session's state, applies the message (so
//! this module needs nothing of it).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rush_proto::ws::{close, MessageKind};

use super::send::{header_pair, with_bytes_like};

/// One message of the app's `send(message)`, read.
pub(crate) enum AppMessage {
    /// `websocket.send`, text or bytes.
    Send(MessageKind, Vec<u8>),
    /// `websocket.accept`.
    Accept {
        subprotocol: Option<String>,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// `websocket.close` (the code defaults to 1000).
    Close { code: Option<u16>, reason: String },
    /// `websocket.http.response.start` (the denial extension), its status
    /// already checked.
    DenyStart {
        status: u16,
        headers: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// `websocket.http.response.body`.
    DenyBody { body: Vec<u8>, more: bool },
    /// A type this module does not know: the channel says whether that is
    /// an error in its state.
    Unknown(String),
}

/// Reads one message of the app's `send(message)`.
pub(crate) fn read_app_message(
    py: Python<'_>,
    message: &Bound<'_, PyDict>,
) -> PyResult<AppMessage> {
    let kind = message
        .get_item(pyo3::intern!(py, "type"))?
        .ok_or_else(|| PyValueError::new_err("ASGI message without 'type'"))?;
    let kind = kind.cast::<PyString>()?.to_str()?;
    Ok(match kind {
        "websocket.send" => {
            // `bytes` first when both are given, as uvicorn and hypercorn
            // read it (the spec asks for exactly one).
            if let Some(data) = message.get_item(pyo3::intern!(py, "bytes"))? {
                if !data.is_none() {
                    let data = with_bytes_like(&data, "websocket.send's bytes", <[u8]>::to_vec)?;
                    return Ok(AppMessage::Send(MessageKind::Binary, data));
                }
            }
            match message.get_item(pyo3::intern!(py, "text"))? {
                Some(text) if !text.is_none() => {
                    let text = text.cast::<PyString>()?.to_str()?;
                    AppMessage::Send(MessageKind::Text, text.as_bytes().to_vec())
                }
                _ => {
                    return Err(PyValueError::new_err(
                        "websocket.send needs 'text' or 'bytes'",
                    ))
                }
            }
        }
        "websocket.accept" => AppMessage::Accept {
            subprotocol: match message.get_item("subprotocol")? {
                Some(value) if !value.is_none() => Some(value.extract()?),
                _ => None,
            },
            headers: headers_of(message)?,
        },
        "websocket.close" => AppMessage::Close {
            code: match message.get_item("code")? {
                Some(value) if !value.is_none() => Some(value.extract()?),
                _ => Some(close::NORMAL),
            },
            reason: match message.get_item("reason")? {
                Some(value) if !value.is_none() => value.extract()?,
                _ => String::new(),
            },
        },
        "websocket.http.response.start" => {
            let status: u16 = message
                .get_item("status")?
                .ok_or_else(|| {
                    PyValueError::new_err("websocket.http.response.start without status")
                })?
                .extract()?;
            if !(100..=599).contains(&status) || status == 101 {
                return Err(PyValueError::new_err(format!(
                    "websocket.http.response.start status {status} cannot deny a WebSocket"
                )));
            }
            AppMessage::DenyStart {
                status,
                headers: headers_of(message)?,
            }
        }
        "websocket.http.response.body" => AppMessage::DenyBody {
            body: match message.get_item("body")? {
                Some(data) => {
                    with_bytes_like(&data, "websocket.http.response.body's body", <[u8]>::to_vec)?
                }
                None => Vec::new(),
            },
            more: match message.get_item("more_body")? {
                Some(flag) => flag.is_truthy()?,
                None => false,
            },
        },
        other => AppMessage::Unknown(other.to_owned()),
    })
}

fn headers_of(message: &Bound<'_, PyDict>) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut headers = Vec::new();
    if let Some(fields) = message.get_item("headers")? {
        for field in fields.try_iter()? {
            headers.push(header_pair(&field?)?);
        }
    }
    Ok(headers)
}
