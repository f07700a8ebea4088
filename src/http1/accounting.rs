//! What an HTTP/1.1 connection counts and notes around its requests: its
//! output against the worker's budget (the parser produces no more while
//! the worker holds too much unsent output; HTTP/2 connections are counted
//! and held back the same way, `may_produce_streams`), and what a request's later
//! steps need from its head (its start, its origin behind a trusted proxy,
//! the header values the access log shows), kept on the connection for the
//! response writer to report.

use crate::conn::Connection;
use crate::dispatch::Core;
use crate::options::{H2_CONNECTION_SHARE, OUTPUT_FAIR_SHARE};
use crate::request::header_fields;

impl Core {
    /// Brings the worker's output total up to date with `connection`.
    /// What counts is the output buffer's capacity, the memory it holds:
    /// a buffer grows by doubling, so counting unsent bytes let a worker
    /// hold twice its budget (300 clients that never read took 203 MiB
    /// with the 64 MiB default).
    /// An HTTP/2 connection's stream queues count too (responses waiting
    /// for the peer's windows hold memory just the same).
    pub(crate) fn account_output(&mut self, connection: &mut Connection) {
        let held = connection.sink.output.capacity() + connection.protocol.queued_output();
        self.output_total = self.output_total - connection.sink.accounted + held;
        connection.sink.accounted = held;
    }

    /// Takes a closed connection's output off the worker's total.
    pub(crate) fn unaccount_output(&mut self, connection: &Connection) {
        self.output_total -= connection.sink.accounted;
    }

    /// Whether `connection` may turn more input into responses: under its
    /// own high-water mark, and, once the worker's output is over budget,
    /// only if it holds little output itself (the connections holding the
    /// most wait until their clients read).
    ///
    /// The total includes what this connection produced since it was last
    /// accounted: checked against the total as of the drive's start, each
    /// connection could fill its 1 MiB before the budget was seen spent.
    pub(crate) fn may_produce(&self, connection: &Connection) -> bool {
        let total = self.output_total - connection.sink.accounted
            + connection.sink.output.capacity()
            + connection.protocol.queued_output();
        !connection.sink.is_full()
            && (total <= self.config.output_budget
                || connection.sink.output.len() < OUTPUT_FAIR_SHARE)
    }

    /// HTTP/2's `may_produce`, asked before each event of a connection
    /// (each may start a request, whose app may produce a response's
    /// worth before it waits): a connection takes new events while it
    /// holds less than its share (`H2_CONNECTION_SHARE`: the memory of its
    /// output buffer and its streams' queues), and, once the
    /// worker's output is over budget, only while it holds little; the
    /// others keep their events queued (in `H2Connection`, bounded by the
    /// concurrent-stream limit) until their clients read.
    ///
    /// The total is taken live, as `may_produce` takes it: one read may
    /// bring a hundred HEADERS, and checked against the total as of the
    /// drive's start, all hundred would start.
    pub(crate) fn may_produce_streams(&self, connection: &Connection) -> bool {
        let held = connection.sink.output.capacity() + connection.protocol.queued_output();
        let total = self.output_total - connection.sink.accounted + held;
        held < H2_CONNECTION_SHARE
            && (total <= self.config.output_budget || held < OUTPUT_FAIR_SHARE)
    }

    /// Notes what every later step of a request's answer needs from its
    /// head: when it started, and its origin when a trusted proxy sent it.
    pub(crate) fn begin_request(&self, connection: &mut Connection, head_bytes: &[u8]) {
        // The loop pass's time is enough for the access log; --metrics'
        // histogram reads the clock (pipelined requests share a pass).
        connection.request.started = if crate::metrics::enabled() {
            std::time::Instant::now()
        } else {
            self.now
        };
        connection.request.origin = match &self.forwarding {
            Some(forwarding) if connection.trusted_proxy => forwarding.read(head_bytes),
            _ => None,
        };
        if let Some(format) = &self.access_format {
            if self.access_logger.is_some() && format.needs_headers() {
                connection.request.log_headers = format.header_values(header_fields(head_bytes));
            }
        }
    }
}
