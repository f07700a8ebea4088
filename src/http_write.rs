//! Writing HTTP/1.1 response heads and small complete responses into a
//! connection's output buffer: the pieces every kind of response shares
//! (the native App's, WSGI's, static files', the native error pages).
//! Framing decisions (which statuses have a body, chunked or length) come
//! from `rush_proto::encode`.

use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;

/// A response body sent after the head, without copying it into the output buffer.
pub enum OutgoingBody {
    Shared {
        data: Arc<[u8]>,
        offset: usize,
        end: usize,
    },
    File {
        file: Rc<File>,
        offset: u64,
        end: u64,
    },
}

/// The content type of rush's own text answers.
pub const TEXT_PLAIN: &[u8] = b"text/plain; charset=utf-8";

/// How the response to one request must be framed.
#[derive(Clone, Copy)]
pub struct ResponseContext<'a> {
    /// A whole `Date: ...\r\n` line, after the server's fixed fields if
    /// any (`rush_proto::DateCache::with_fields`).
    pub date_line: &'a [u8],
    /// HEAD: send the headers (with the body's length) but not the body.
    pub head_only: bool,
    /// Whether the connection stays open after this response.
    pub keep_alive: bool,
    /// HTTP/1.0 clients need an explicit `Connection: keep-alive`.
    pub http10: bool,
    /// The request's head bytes (for `Response.file`'s conditional and range
    /// handling); empty when not available.
    pub request_head: &'a [u8],
    /// An `Allow` value every response to this request must carry (a 405
    /// answered by an app's error handler).
    pub allow: Option<&'a [u8]>,
}

/// What [`render_result`] did, for the access log and the connection.
pub struct Rendered {
    pub status: u16,
    pub body_length: usize,
    /// A body to send after the head without copying (`Response.file`).
    pub body: Option<OutgoingBody>,
    /// The app asked for `Connection: close`.
    pub close: bool,
}

/// The header fields the server adds unless the app set them itself: an
/// app's own `Date` or `Allow` is sent once, not beside the server's.
#[derive(Default, Clone, Copy)]
pub struct AppFields {
    pub date: bool,
    pub allow: bool,
    pub server: bool,
}

impl AppFields {
    /// Writes one app header line and notes the fields the server owns.
    pub fn write(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        self.date |= name.eq_ignore_ascii_case(b"date");
        self.allow |= name.eq_ignore_ascii_case(b"allow");
        self.server |= name.eq_ignore_ascii_case(b"server");
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
}

/// [`finish_head`] after the app's own header lines (`app`: which of the
/// server's fields it already set).
pub fn finish_head_after(
    out: &mut Vec<u8>,
    context: &ResponseContext<'_>,
    close: bool,
    app: AppFields,
) {
    if let Some(allow) = context.allow.filter(|_| !app.allow) {
        out.extend_from_slice(b"Allow: ");
        out.extend_from_slice(allow);
        out.extend_from_slice(b"\r\n");
    }
    // The server's fields (`--server-header`, `--header`, Date) ride on
    // the date line; an app's own Server or Date replaces the server's.
    out.extend_from_slice(rush_proto::server_fields_without(
        context.date_line,
        app.server,
        app.date,
    ));
    if close || !context.keep_alive {
        out.extend_from_slice(b"Connection: close\r\n\r\n");
    } else if context.http10 {
        out.extend_from_slice(b"Connection: keep-alive\r\n\r\n");
    } else {
        out.extend_from_slice(b"\r\n");
    }
}
