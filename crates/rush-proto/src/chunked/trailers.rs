//! The trailer fields a request must not carry (RFC 9110 section 6.5.1),
//! and the check the chunked decoder makes against them once a trailer
//! field's name is read.

/// Fields a trailer must not carry (lowercase), by RFC 9110 section 6.5.1's
/// categories: message framing, routing, request modifiers (controls and
/// conditionals), authentication, response control data, and how to
/// process the content; plus the connection-specific fields, which mean
/// nothing after the body.
pub const FORBIDDEN_TRAILER_FIELDS: &[&str] = &[
    // Framing.
    "content-length",
    "transfer-encoding",
    "trailer",
    // Routing.
    "host",
    // Request modifiers: controls.
    "cache-control",
    "expect",
    "max-forwards",
    "pragma",
    "range",
    "te",
    // Request modifiers: conditionals.
    "if-match",
    "if-none-match",
    "if-modified-since",
    "if-unmodified-since",
    "if-range",
    // Authentication.
    "authorization",
    "proxy-authorization",
    "www-authenticate",
    "proxy-authenticate",
    "authentication-info",
    "proxy-authentication-info",
    "cookie",
    "set-cookie",
    // Response control data.
    "age",
    "date",
    "expires",
    "location",
    "retry-after",
    "vary",
    "warning",
    // How to process the content.
    "content-encoding",
    "content-type",
    "content-range",
    "content-location",
    "content-language",
    // Connection-specific.
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
];

/// The longest name in [`FORBIDDEN_TRAILER_FIELDS`] ("proxy-authentication-info").
pub(super) const LONGEST_FORBIDDEN_NAME: usize = 25;

/// Whether `name` (lowercase) may not be a trailer field.
pub(super) fn is_forbidden(name: &[u8]) -> bool {
    FORBIDDEN_TRAILER_FIELDS
        .iter()
        .any(|forbidden| forbidden.as_bytes() == name)
}
