//! The ASGI `websocket.*` messages an app sends (spec 2.4), applied to its
//! [`WebSocket`]: accept, send, close, and the `websocket.http.response`
//! denial extension. Kept apart from `channel.rs`, which owns the state.

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyString};
use rush_proto::ws::{close, MessageKind};

use super::channel::{disconnect_error, Phase, WebSocket};
use crate::asgi::ready;

/// Applies one message of the app's `send(message)`.
pub(super) fn send(
    ws: &mut WebSocket,
    py: Python<'_>,
    message: &Bound<'_, PyDict>,
) -> PyResult<Py<PyAny>> {
    let kind = message
        .get_item(pyo3::intern!(py, "type"))?
        .ok_or_else(|| PyValueError::new_err("ASGI message without 'type'"))?;
    let kind = kind.cast::<PyString>()?.to_str()?;
    match kind {
        "websocket.send" => {
            if let Some(text) = message.get_item(pyo3::intern!(py, "text"))? {
                if !text.is_none() {
                    let text = text.cast::<PyString>()?.to_str()?.to_owned();
                    return ws.send_message(py, MessageKind::Text, text.as_bytes());
                }
            }
            match message.get_item(pyo3::intern!(py, "bytes"))? {
                Some(data) if !data.is_none() => {
                    let data = data.cast::<PyBytes>()?;
                    ws.send_message(py, MessageKind::Binary, data.as_bytes())
                }
                _ => Err(PyValueError::new_err(
                    "websocket.send needs 'text' or 'bytes'",
                )),
            }
        }
        "websocket.accept" => {
            let subprotocol: Option<String> = match message.get_item("subprotocol")? {
                Some(value) if !value.is_none() => Some(value.extract()?),
                _ => None,
            };
            ws.accept_with(py, subprotocol.as_deref(), &headers_of(message)?)?;
            Ok(ready(py, py.None())?.into_any())
        }
        "websocket.close" => {
            let code: Option<u16> = match message.get_item("code")? {
                Some(value) if !value.is_none() => Some(value.extract()?),
                _ => Some(close::NORMAL),
            };
            let reason: String = match message.get_item("reason")? {
                Some(value) if !value.is_none() => value.extract()?,
                _ => String::new(),
            };
            ws.close_with(py, code, &reason)?;
            Ok(ready(py, py.None())?.into_any())
        }
        "websocket.http.response.start" if matches!(ws.phase, Phase::Connecting) => {
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
            ws.phase = Phase::Responding {
                status,
                headers: headers_of(message)?,
                body: Vec::new(),
            };
            Ok(ready(py, py.None())?.into_any())
        }
        "websocket.http.response.body" if matches!(ws.phase, Phase::Responding { .. }) => {
            let more = match message.get_item("more_body")? {
                Some(flag) => flag.is_truthy()?,
                None => false,
            };
            if let Phase::Responding { body, .. } = &mut ws.phase {
                if let Some(data) = message.get_item("body")? {
                    body.extend_from_slice(data.cast::<PyBytes>()?.as_bytes());
                }
            }
            if !more {
                if let Phase::Responding {
                    status,
                    headers,
                    body,
                } = std::mem::replace(&mut ws.phase, Phase::Finished)
                {
                    ws.deny(py, status, headers, body)?;
                }
            }
            Ok(ready(py, py.None())?.into_any())
        }
        _ if ws.gone => Err(disconnect_error(py, close::ABNORMAL, "")),
        other => Err(PyRuntimeError::new_err(format!(
            "unexpected ASGI message {other:?} on a WebSocket in this state"
        ))),
    }
}

fn headers_of(message: &Bound<'_, PyDict>) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut headers = Vec::new();
    if let Some(fields) = message.get_item("headers")? {
        for field in fields.try_iter()? {
            headers.push(field?.extract()?);
        }
    }
    Ok(headers)
}
