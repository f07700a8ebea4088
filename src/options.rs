//! The bounds a worker's loop runs under: sizes, timeouts and budgets,
//! fixed for the life of the worker.
//!
//! Every duration reaches the loop through [`seconds`], which refuses what
//! `Duration` and `Instant` arithmetic cannot hold (NaN, infinity, zero,
//! more than a day): the Python `Config` checks the same bounds first, so a
//! bad value is a start-up error, never a panic in a running worker.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::PyResult;
use rush_proto::Limits;

/// Bytes read per `read` call.
pub(crate) const READ_CHUNK: usize = 64 * 1024;
/// Stop turning input into responses (and make an app's `send()` wait)
/// while a connection has this much output unsent.
pub(crate) const OUTPUT_HIGH_WATER: usize = 1024 * 1024;
/// Below this much unsent output, a paused sender may go on: half the high
/// water, so a sender does not wake for every packet the kernel takes.
pub(crate) const OUTPUT_LOW_WATER: usize = OUTPUT_HIGH_WATER / 2;
/// An HTTP/2 connection takes no new stream while it holds this much output
/// (its buffer and its streams' queues): four HTTP/1.1 connections' worth,
/// as its streams are many connections' requests at once (a page's images
/// on a slow link). The worker's budget bounds the sum, not this.
pub(crate) const H2_CONNECTION_SHARE: usize = 4 * OUTPUT_HIGH_WATER;
/// Once the worker's output budget is spent, a connection holding more
/// unsent output than this stops turning requests into responses.
pub(crate) const OUTPUT_FAIR_SHARE: usize = 64 * 1024;
/// Bytes one connection may read in one turn of the loop before the other
/// connections get theirs (`crate::next_turn`): four reads' worth, so an
/// upload at full speed costs a turn per 256 KiB, and a peer that floods
/// control frames cannot hold the worker.
pub(crate) const READ_BUDGET_PER_TURN: usize = 4 * READ_CHUNK;
/// Frames an HTTP/2 connection may bring per turn of the loop, beside its
/// bytes: 256 KiB of SETTINGS frames are 29,000 frames, each applied and
/// answered; a browser or a load generator sends a few dozen per read.
pub(crate) const FRAMES_PER_TURN: u64 = 1024;
/// How long to discard input after refusing a request, before closing.
pub(crate) const LINGER_TIMEOUT: Duration = Duration::from_secs(2);
/// Most bytes discarded while lingering.
pub(crate) const LINGER_MAX_BYTES: usize = 1024 * 1024;
/// The longest timeout accepted: a day. Longer ones are almost certainly a
/// unit mistake, and every `Instant + timeout` stays far from overflow.
pub(crate) const MAX_TIMEOUT_SECONDS: f64 = 86_400.0;

/// Bounds and timeouts of one worker's loop.
pub(crate) struct LoopConfig {
    pub(crate) limits: Limits,
    pub(crate) max_connections: usize,
    pub(crate) keep_alive_timeout: Duration,
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) send_timeout: Duration,
    /// Unsent output summed over every connection of the worker: past it,
    /// the connections holding the most output stop reading requests.
    pub(crate) output_budget: usize,
    /// The WebSocket options (`--ws-*`).
    pub(crate) ws: WsConfig,
    /// `--ws-allowed-origins`, lowercased: a handshake whose `Origin` is not
    /// one of them is refused (403) before the app is called. Empty: any.
    pub(crate) ws_allowed_origins: Vec<Vec<u8>>,
    /// `--http`: which HTTP versions connections speak.
    pub(crate) http: HttpMode,
    /// `--proxy-protocol`: the peers a connection's PROXY header is taken
    /// from (Unix-socket peers too); `None`: off.
    pub(crate) proxy_protocol: Option<rush_proto::forwarded::TrustedProxies>,
}

/// `--http 1|2|auto`: the HTTP versions an app server speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HttpMode {
    /// HTTP/1.1 only (ALPN offers `http/1.1`; an h2c preface is refused
    /// as a malformed HTTP/1.1 request).
    Http1,
    /// HTTP/2 only: every connection is HTTP/2 (ALPN offers `h2`).
    Http2,
    /// Both: the h2c preface on a cleartext connection's first bytes, or
    /// ALPN `h2` (preferred to `http/1.1`) over TLS, picks HTTP/2.
    Auto,
}

impl HttpMode {
    /// The mode `--http` names; `None` (not given) is `auto`, the default.
    pub(crate) fn parse(value: Option<&str>) -> PyResult<HttpMode> {
        match value {
            Some("1") => Ok(HttpMode::Http1),
            Some("2") => Ok(HttpMode::Http2),
            None | Some("auto") => Ok(HttpMode::Auto),
            Some(other) => Err(PyValueError::new_err(format!(
                "--http takes 1, 2 or auto (got {other:?})"
            ))),
        }
    }

    /// The ALPN protocols a TLS listener offers, in preference order.
    pub(crate) fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            HttpMode::Http1 => vec![b"http/1.1".to_vec()],
            HttpMode::Http2 => vec![b"h2".to_vec()],
            HttpMode::Auto => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        }
    }
}

/// A timeout in seconds as a `Duration`, or a `ValueError` naming `name`.
pub(crate) fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    checked_seconds(name, value, false).map_err(PyValueError::new_err)
}

/// Like [`seconds`], but 0 is allowed (a graceful timeout of 0 stops at once).
pub(crate) fn seconds_or_zero(name: &str, value: f64) -> PyResult<Duration> {
    checked_seconds(name, value, true).map_err(PyValueError::new_err)
}

fn checked_seconds(name: &str, value: f64, zero_allowed: bool) -> Result<Duration, String> {
    if zero_allowed && value == 0.0 {
        return Ok(Duration::ZERO);
    }
    if value.is_finite() && value > 0.0 && value <= MAX_TIMEOUT_SECONDS {
        Ok(Duration::from_secs_f64(value))
    } else {
        Err(format!(
            "{name} must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECONDS} (got {value})"
        ))
    }
}

/// The WebSocket options (`--ws-*`).
#[derive(Clone, Copy)]
pub(crate) struct WsConfig {
    pub(crate) max_size: usize,
    pub(crate) max_queue: usize,
    pub(crate) ping_interval: Option<Duration>,
    pub(crate) ping_timeout: Option<Duration>,
    pub(crate) per_message_deflate: bool,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            max_size: rush_proto::ws::DEFAULT_MAX_MESSAGE_SIZE,
            max_queue: 32,
            ping_interval: Some(Duration::from_secs(20)),
            ping_timeout: Some(Duration::from_secs(20)),
            per_message_deflate: true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_that_duration_arithmetic_cannot_hold_are_refused() {
        for bad in [
            f64::NAN,
            f64::INFINITY,
            -1.0,
            0.0,
            1e19,
            MAX_TIMEOUT_SECONDS + 1.0,
        ] {
            assert!(
                checked_seconds("keep_alive_timeout", bad, false).is_err(),
                "{bad}"
            );
        }
        assert_eq!(
            checked_seconds("x", 0.5, false),
            Ok(Duration::from_millis(500))
        );
        assert_eq!(checked_seconds("x", 0.0, true), Ok(Duration::ZERO));
        assert!(checked_seconds("x", f64::INFINITY, true).is_err());
    }
}
