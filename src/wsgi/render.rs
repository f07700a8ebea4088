//! A WSGI app's collected response (a list or tuple body, a
//! `wsgi.file_wrapper` file) handed to the response writer as values: the
//! head with its length checked against the app's `Content-Length`, then
//! the body in hand or the file that follows it.

use std::rc::Rc;

use pyo3::prelude::*;
use rush_proto::encode::status_has_no_body;

use super::objects::WsgiResponse;
use crate::exchange::{BodyLength, ResponseHead, ResponseWriter};
use crate::http_write::{OutgoingBody, Rendered, ResponseContext};

/// Frames a WSGI app's collected response through the writer. A declared
/// Content-Length that disagrees with the body is an app error (a 500),
/// never a malformed response.
pub(crate) fn render_collected<W: ResponseWriter>(
    py: Python<'_>,
    response: &mut WsgiResponse,
    context: &ResponseContext<'_>,
    writer: &mut W,
) -> PyResult<Rendered> {
    let file = response.file.take();
    let actual_length = match &file {
        Some((_, _, length)) => *length,
        None => response.body.bytes(py).len() as u64,
    };
    let length = match response.declared_length {
        // A HEAD response may declare the GET body's length without a body.
        Some(declared) if context.head_only => declared,
        Some(declared) if declared != actual_length => {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "the WSGI app declared Content-Length {declared} but produced {actual_length} bytes"
            )));
        }
        _ => actual_length,
    };
    let close = response.requests_close();
    let bodyless = status_has_no_body(response.status);
    let head = ResponseHead {
        status: response.status,
        length: if bodyless {
            BodyLength::Empty
        } else {
            BodyLength::Known(length)
        },
        close,
        context: *context,
    };
    let fields = response.headers.iter();
    writer.send_head(&head, fields);
    let mut body = None;
    if !context.head_only && !bodyless {
        match file {
            // A file follows the head as a body value (sendfile in HTTP/1.1).
            Some((file, offset, length)) => {
                body = Some(OutgoingBody::File {
                    file: Rc::new(file),
                    offset,
                    end: offset + length,
                });
            }
            None => writer.send_body(response.body.bytes(py)),
        }
    }
    writer.end_body(std::iter::empty());
    Ok(Rendered {
        status: response.status,
        body_length: length as usize,
        body,
        close,
    })
}
