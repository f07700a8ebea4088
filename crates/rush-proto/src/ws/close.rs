//! Close codes and close frame payloads (RFC 6455 5.5.1 and 7.4).
//!
//! A close frame's payload is empty, or a 2-byte big-endian status code
//! followed by a UTF-8 reason. Which codes may travel on the wire follows
//! RFC 6455 7.4.1 and the IANA "WebSocket Close Code Number Registry":
//! 1000-1003 and 1007-1011 are defined for use in frames (1012-1014 were
//! registered later for restart, try-again-later and bad-gateway and are
//! sent by servers, so they are accepted too); 3000-3999 are registered for
//! libraries and frameworks, 4000-4999 are private. 1004 is reserved,
//! 1005, 1006 and 1015 are placeholders that must never be sent, and
//! everything below 1000 or from 5000 up is undefined.

use super::utf8::Utf8Validator;
use super::WsError;

/// 1000: the purpose of the connection was fulfilled.
pub const NORMAL: u16 = 1000;
/// 1001: the endpoint is going away (server shutdown, page left).
pub const GOING_AWAY: u16 = 1001;
/// 1002: the peer broke the protocol.
pub const PROTOCOL_ERROR: u16 = 1002;
/// 1003: a data type the endpoint cannot accept (text where binary was expected, say).
pub const UNSUPPORTED_DATA: u16 = 1003;
/// 1005: no code was present in the close frame. Reported to applications, never sent.
pub const NO_STATUS: u16 = 1005;
/// 1006: the connection dropped without a close frame. Reported to applications, never sent.
pub const ABNORMAL: u16 = 1006;
/// 1007: message data was inconsistent with its type (invalid UTF-8 in text).
pub const INVALID_PAYLOAD: u16 = 1007;
/// 1008: a message violated the endpoint's policy.
pub const POLICY_VIOLATION: u16 = 1008;
/// 1009: a message was too big to process.
pub const MESSAGE_TOO_BIG: u16 = 1009;
/// 1010: (client only) an extension the client needs was not negotiated.
pub const MANDATORY_EXTENSION: u16 = 1010;
/// 1011: the server met an unexpected condition (the application failed).
pub const INTERNAL_ERROR: u16 = 1011;
/// 1012: the service is restarting.
pub const SERVICE_RESTART: u16 = 1012;

/// Whether `code` may appear in a close frame on the wire (received or sent).
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// Longest close reason: a control payload is at most 125 bytes, and the code takes 2.
pub const MAX_CLOSE_REASON: usize = 123;

/// Checks a received close payload: returns the code (`None` for an empty
/// payload) or the error to fail the connection with.
///
/// A 1-byte payload and a code that may not be sent are protocol errors
/// (1002); a reason that is not UTF-8 is invalid data (1007).
pub(crate) fn parse_close_payload(payload: &[u8]) -> Result<Option<u16>, WsError> {
    match payload {
        [] => Ok(None),
        [_] => Err(WsError::Protocol("close frame payload of 1 byte")),
        [high, low, reason @ ..] => {
            let code = u16::from_be_bytes([*high, *low]);
            if !is_valid_close_code(code) {
                return Err(WsError::Protocol("invalid close code"));
            }
            let mut validator = Utf8Validator::default();
            validator
                .feed(reason)
                .and_then(|()| validator.finish())
                .map_err(|_| WsError::InvalidPayload("close reason is not UTF-8"))?;
            Ok(Some(code))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_validity_of_every_code() {
        for code in 0..=u16::MAX {
            let expected = (1000..=1003).contains(&code)
                || (1007..=1014).contains(&code)
                || (3000..=4999).contains(&code);
            assert_eq!(is_valid_close_code(code), expected, "{code}");
        }
        for never in [0, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
            assert!(!is_valid_close_code(never), "{never}");
        }
    }

    #[test]
    fn payload_rules() {
        assert_eq!(parse_close_payload(b""), Ok(None));
        assert_eq!(
            parse_close_payload(b"\x03"),
            Err(WsError::Protocol("close frame payload of 1 byte"))
        );
        assert_eq!(parse_close_payload(b"\x03\xe8"), Ok(Some(1000)));
        assert_eq!(parse_close_payload(b"\x0f\xa0bye"), Ok(Some(4000)));
        assert_eq!(
            parse_close_payload(b"\x03\xed"),
            Err(WsError::Protocol("invalid close code"))
        );
        assert_eq!(
            parse_close_payload(b"\x03\xe8\xce"),
            Err(WsError::InvalidPayload("close reason is not UTF-8"))
        );
    }
}
