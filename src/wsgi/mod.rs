//! WSGI (PEP 3333), the whole interface in one place, in two halves and a helper:
//!
//! * `environ.rs` builds what the app is called with; `objects.rs` is
//!   the rest of what it sees: `start_response`, `wsgi.file_wrapper`, the
//!   body iterator, and `call_wsgi`, which calls the app and collects its
//!   answer. Neither touches loop state, so a `--threads` pool thread runs
//!   `call_wsgi` too.
//! * `dispatch.rs`, what the loop does with it: builds `environ` for a
//!   routed request, calls the app here or hands it to the pool, and
//!   writes the answer through the response-writer seam
//!   (`crate::exchange`), streaming a body that is not a list under the
//!   seam's water marks.
//! * `input.rs`: the one `wsgi.input` every request without a body shares.

mod dispatch;
pub(crate) mod environ;
pub(crate) mod input;
pub(crate) mod objects;
pub(crate) mod render;

// The names the binding (`lib.rs`) and the server's constructor use.
pub(crate) use environ::WsgiSettings;
pub(crate) use objects::{call_wsgi, FileWrapper, WsgiBody, WsgiResponse};
