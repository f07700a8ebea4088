//! Encoding responses: status lines, validated header fields, canned errors.
//!
//! The server builds responses straight into its output buffer with these
//! functions. Header names and values that come from applications are
//! validated here, so no CR, LF or NUL from an app can split a response on
//! the wire.

use crate::ProtoError;

/// The reason phrase for a status code (`"OK"`, `"Not Found"`, ...); `""` for unknown codes.
pub fn reason_phrase(status: u16) -> &'static str {
    let _ = status;
    todo!()
}

/// Appends `HTTP/1.1 <status> <reason>\r\n` to `out`.
pub fn write_status_line(out: &mut Vec<u8>, status: u16) {
    let _ = (out, status);
    todo!()
}

/// Whether `name` is a valid field-name token (RFC 9110 5.1): non-empty, tchar only.
pub fn is_valid_header_name(name: &[u8]) -> bool {
    let _ = name;
    todo!()
}

/// Whether `value` may be sent as a field value: no CR, LF, NUL or other control
/// characters except HTAB.
pub fn is_valid_header_value(value: &[u8]) -> bool {
    let _ = value;
    todo!()
}

/// Appends `name: value\r\n` to `out` after validating both; on an invalid
/// name or value nothing is appended and `Err` is returned.
pub fn write_header(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> Result<(), ProtoError> {
    let _ = (out, name, value);
    todo!()
}

/// Appends `Content-Length: <length>\r\n`.
pub fn write_content_length(out: &mut Vec<u8>, length: u64) {
    let _ = (out, length);
    todo!()
}

/// Appends a complete response for a refused request: status line,
/// `Content-Type: text/plain; charset=utf-8`, `Content-Length`, `Connection: close`,
/// the given `date_line` (a whole `Date: ...\r\n` line from [`crate::DateCache`]),
/// and a body of the status code, reason phrase and `error.message()`.
pub fn write_error_response(out: &mut Vec<u8>, error: &ProtoError, date_line: &[u8]) {
    let _ = (out, error, date_line);
    todo!()
}
