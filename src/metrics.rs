//! Counters for `--metrics`: what every worker counts, in memory the
//! supervisor reads, rendered as Prometheus text.
//!
//! How it works:
//! * The supervisor makes a [`MetricsTable`] before it forks: an anonymous
//!   `MAP_SHARED` mapping with one block of counters per worker slot. A
//!   worker, after the fork, picks its slot's block ([`MetricsTable::use_slot`]);
//!   from then on the loop counts into it through [`count`] and friends,
//!   which cost one relaxed atomic add each and nothing at all (a null
//!   check) when metrics are off.
//! * A worker that replaces another on the same slot (a respawn, a reload)
//!   goes on adding to the same block, so counters never go back; two
//!   workers may overlap on a slot during a reload, hence atomic adds.
//! * The supervisor renders the sum over all slots ([`MetricsTable::render`])
//!   and adds what only it knows (worker restarts by cause).
//! * `connections_open` is accepted minus closed: a worker that is killed
//!   never counts the connections the kernel closed for it, so after a
//!   crash it overstates (the rest are exact).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Upper bounds (seconds) of the request duration histogram's buckets.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Per status class: the buckets, then the count, then the sum in µs.
const PER_CLASS: usize = BUCKETS.len() + 2;
/// 1xx to 5xx, then `none`: requests cut off before any response head
/// went out (the client reset its stream or left), `-` in the access log.
const CLASSES: usize = 6;

/// Statuses a refused request gets (the protocol's answers to bad input).
const REFUSALS: [u16; 7] = [400, 408, 413, 414, 431, 501, 505];

/// Single counters, after the histogram and the refusals.
#[derive(Clone, Copy)]
pub enum Counter {
    ConnectionsAccepted,
    ConnectionsClosed,
    BytesIn,
    BytesOut,
    StaticHits,
    StaticMisses,
    CacheHits,
    CacheMisses,
    RequestsHttp1,
    RequestsHttp2,
    /// Connections closed for their PROXY header (`--proxy-protocol`).
    ProxyHeaderRefused,
    RequestsHttp3,
}

const COUNTERS: usize = 12;

/// The protocol a request came over, for `rush_requests_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireProtocol {
    /// HTTP/1.0 or HTTP/1.1.
    Http1,
    /// HTTP/2 (over TLS or cleartext).
    Http2,
    /// HTTP/3 (over QUIC).
    Http3,
}
const FIRST_REFUSAL: usize = CLASSES * PER_CLASS;
const FIRST_COUNTER: usize = FIRST_REFUSAL + REFUSALS.len() + 1;
/// u64 counters per worker slot.
const SLOT_LEN: usize = FIRST_COUNTER + COUNTERS;

/// This worker's block, or null when metrics are off.
static BLOCK: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());

fn block() -> Option<&'static [AtomicU64]> {
    let pointer = BLOCK.load(Ordering::Relaxed);
    if pointer.is_null() {
        return None;
    }
    // SAFETY: a non-null pointer was stored by `use_slot` from a mapping
    // that is never unmapped, and points at SLOT_LEN counters.
    Some(unsafe { std::slice::from_raw_parts(pointer, SLOT_LEN) })
}

fn add(index: usize, value: u64) {
    if let Some(block) = block() {
        block[index].fetch_add(value, Ordering::Relaxed);
    }
}

/// Counts `value` for `counter`.
pub fn count(counter: Counter, value: u64) {
    add(FIRST_COUNTER + counter as usize, value);
}

/// Whether metrics are on (to skip work that only feeds them).
pub fn enabled() -> bool {
    !BLOCK.load(Ordering::Relaxed).is_null()
}

/// A response: its status (`None`: no head went out), how long the
/// request took and the protocol it came over.
pub fn response(status: Option<u16>, took: Duration, protocol: WireProtocol) {
    let Some(block) = block() else {
        return;
    };
    let counter = match protocol {
        WireProtocol::Http1 => Counter::RequestsHttp1,
        WireProtocol::Http2 => Counter::RequestsHttp2,
        WireProtocol::Http3 => Counter::RequestsHttp3,
    };
    block[FIRST_COUNTER + counter as usize].fetch_add(1, Ordering::Relaxed);
    let class = match status {
        Some(status) => usize::from(status / 100).clamp(1, CLASSES - 1) - 1,
        None => CLASSES - 1,
    };
    let base = class * PER_CLASS;
    let seconds = took.as_secs_f64();
    if let Some(bucket) = BUCKETS.iter().position(|&bound| seconds <= bound) {
        block[base + bucket].fetch_add(1, Ordering::Relaxed);
    }
    block[base + BUCKETS.len()].fetch_add(1, Ordering::Relaxed);
    let micros = took.as_micros().min(u128::from(u64::MAX)) as u64;
    block[base + BUCKETS.len() + 1].fetch_add(micros, Ordering::Relaxed);
}

/// A request refused by the protocol (or a stalled one timed out).
pub fn refused(status: u16) {
    let index = REFUSALS
        .iter()
        .position(|&refusal| refusal == status)
        .unwrap_or(REFUSALS.len());
    add(FIRST_REFUSAL + index, 1);
}

/// The counters of every worker slot, in shared memory (see the module).
#[pyclass(module = "rush._rush", frozen)]
pub struct MetricsTable {
    table: &'static [AtomicU64],
    slots: usize,
}

#[pymethods]
impl MetricsTable {
    /// Maps a table for `slots` worker slots (before forking).
    #[new]
    fn new(slots: usize) -> PyResult<Self> {
        if slots == 0 || slots > 4096 {
            return Err(PyValueError::new_err("metrics slots must be 1 to 4096"));
        }
        let length = slots * SLOT_LEN * std::mem::size_of::<AtomicU64>();
        let address = crate::shared_memory::map_shared(length)?;
        // SAFETY: `length` bytes, page-aligned, zero-filled (a valid
        // AtomicU64 is any bit pattern), never unmapped (the table lives as
        // long as the process), written by every process only atomically.
        let table =
            unsafe { std::slice::from_raw_parts(address.cast::<AtomicU64>(), slots * SLOT_LEN) };
        Ok(MetricsTable { table, slots })
    }

    /// In a worker: count into slot `slot`'s block from now on.
    fn use_slot(&self, slot: usize) -> PyResult<()> {
        if slot >= self.slots {
            return Err(PyValueError::new_err(format!(
                "no metrics slot {slot} (the table has {})",
                self.slots
            )));
        }
        let start = &self.table[slot * SLOT_LEN];
        BLOCK.store(std::ptr::from_ref(start).cast_mut(), Ordering::Relaxed);
        Ok(())
    }

    /// The sum over all slots, as Prometheus text exposition.
    fn render(&self) -> String {
        let mut sum = vec![0u64; SLOT_LEN];
        for slot in self.table.chunks(SLOT_LEN) {
            for (total, counter) in sum.iter_mut().zip(slot) {
                *total += counter.load(Ordering::Relaxed);
            }
        }
        render(&sum)
    }
}

fn render(sum: &[u64]) -> String {
    let mut text = String::with_capacity(4096);
    let out = &mut text;
    let _ = writeln!(out, "# HELP rush_request_duration_seconds Time from a request's dispatch to its response, by status class.");
    let _ = writeln!(out, "# TYPE rush_request_duration_seconds histogram");
    for class in 0..CLASSES {
        let base = class * PER_CLASS;
        let label = if class == CLASSES - 1 {
            "none".to_owned()
        } else {
            format!("{}xx", class + 1)
        };
        let mut cumulative = 0;
        for (bucket, bound) in BUCKETS.iter().enumerate() {
            cumulative += sum[base + bucket];
            let _ = writeln!(
                out,
                "rush_request_duration_seconds_bucket{{status=\"{label}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let total = sum[base + BUCKETS.len()];
        let micros = sum[base + BUCKETS.len() + 1];
        let _ = writeln!(
            out,
            "rush_request_duration_seconds_bucket{{status=\"{label}\",le=\"+Inf\"}} {total}"
        );
        let _ = writeln!(
            out,
            "rush_request_duration_seconds_sum{{status=\"{label}\"}} {}",
            micros as f64 / 1e6
        );
        let _ = writeln!(
            out,
            "rush_request_duration_seconds_count{{status=\"{label}\"}} {total}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP rush_requests_refused_total Requests refused before reaching the app, by status."
    );
    let _ = writeln!(out, "# TYPE rush_requests_refused_total counter");
    for (index, status) in REFUSALS.iter().enumerate() {
        let _ = writeln!(
            out,
            "rush_requests_refused_total{{status=\"{status}\"}} {}",
            sum[FIRST_REFUSAL + index]
        );
    }
    let _ = writeln!(
        out,
        "rush_requests_refused_total{{status=\"other\"}} {}",
        sum[FIRST_REFUSAL + REFUSALS.len()]
    );
    let counter = |which: Counter| sum[FIRST_COUNTER + which as usize];
    let _ = writeln!(
        out,
        "# HELP rush_requests_total Requests answered (not refused), by the protocol they came over."
    );
    let _ = writeln!(out, "# TYPE rush_requests_total counter");
    for (label, which) in [
        ("http/1.1", Counter::RequestsHttp1),
        ("h2", Counter::RequestsHttp2),
        ("h3", Counter::RequestsHttp3),
    ] {
        let _ = writeln!(
            out,
            "rush_requests_total{{protocol=\"{label}\"}} {}",
            counter(which)
        );
    }
    let accepted = counter(Counter::ConnectionsAccepted);
    let closed = counter(Counter::ConnectionsClosed);
    let rows: [(&str, &str, &str, u64); 8] = [
        (
            "rush_connections_accepted_total",
            "counter",
            "Connections accepted.",
            accepted,
        ),
        (
            "rush_connections_open",
            "gauge",
            "Connections open (accepted minus closed).",
            accepted.saturating_sub(closed),
        ),
        (
            "rush_received_bytes_total",
            "counter",
            "Bytes read from clients.",
            counter(Counter::BytesIn),
        ),
        (
            "rush_sent_bytes_total",
            "counter",
            "Bytes written to clients.",
            counter(Counter::BytesOut),
        ),
        (
            "rush_proxy_protocol_refused_total",
            "counter",
            "Connections closed for their PROXY protocol header: an untrusted peer, a malformed, missing or late header.",
            counter(Counter::ProxyHeaderRefused),
        ),
        (
            "rush_static_hits_total",
            "counter",
            "Static file lookups answered from the worker's memory.",
            counter(Counter::StaticHits),
        ),
        (
            "rush_static_misses_total",
            "counter",
            "Static file lookups that went to the file system.",
            counter(Counter::StaticMisses),
        ),
        (
            "rush_cache_hits_total",
            "counter",
            "Requests answered by the response cache (fresh or stale).",
            counter(Counter::CacheHits),
        ),
    ];
    for (name, kind, help, value) in rows {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP rush_cache_misses_total Cached-route requests the response cache could not answer.\n# TYPE rush_cache_misses_total counter\nrush_cache_misses_total {}",
        counter(Counter::CacheMisses)
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rendering_sums_and_accumulates_buckets() {
        let mut sum = vec![0u64; SLOT_LEN];
        // Two 2xx: one within 1 ms, one within 1 s.
        sum[PER_CLASS + 1] = 1;
        sum[PER_CLASS + 10] = 1;
        sum[PER_CLASS + BUCKETS.len()] = 2;
        sum[PER_CLASS + BUCKETS.len() + 1] = 600_500;
        sum[FIRST_REFUSAL + 1] = 3;
        sum[FIRST_COUNTER + Counter::ConnectionsAccepted as usize] = 5;
        sum[FIRST_COUNTER + Counter::ConnectionsClosed as usize] = 4;
        let text = render(&sum);
        assert!(
            text.contains("rush_request_duration_seconds_bucket{status=\"2xx\",le=\"0.0005\"} 0\n")
        );
        assert!(
            text.contains("rush_request_duration_seconds_bucket{status=\"2xx\",le=\"0.001\"} 1\n")
        );
        assert!(text.contains("rush_request_duration_seconds_bucket{status=\"2xx\",le=\"1\"} 2\n"));
        assert!(text.contains("rush_request_duration_seconds_count{status=\"2xx\"} 2\n"));
        assert!(text.contains("rush_request_duration_seconds_sum{status=\"2xx\"} 0.6005\n"));
        assert!(text.contains("rush_requests_refused_total{status=\"408\"} 3\n"));
        assert!(text.contains("rush_connections_open 1\n"));
    }
}
