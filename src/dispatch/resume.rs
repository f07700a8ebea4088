//! Requests that go on after the loop's pass: a suspended ASGI app that
//! sends more, a handler (coroutine or pool thread) that finishes later.
//! The server finds the connection by key and request id; these turn the
//! Python results into response bytes and an outcome.

use pyo3::prelude::*;

use super::{Core, Outcome, RequestLine};
use crate::asgi::dispatch::AsgiWrite;
use crate::exchange::ResponseWriter;
use crate::inflight::{AsgiExchange, InFlight};
use crate::wsgi::objects::WsgiResponse;

impl Core {
    /// Writes what a suspended ASGI app has sent since. `Some` once its
    /// response is complete: the app may still run (background work), and
    /// a later exception of it is logged with this request.
    pub(crate) fn asgi_progress<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        request_id: u64,
    ) -> Option<Outcome> {
        let Some(InFlight::Handler(awaiting)) = connection.request_ref() else {
            return None;
        };
        if awaiting.request_id != request_id {
            return None;
        }
        let exchange = awaiting.asgi.as_ref()?;
        let exchange = AsgiExchange {
            send: exchange.send.clone_ref(py),
            receive: exchange.receive.clone_ref(py),
        };
        let write = AsgiWrite {
            keep_alive: awaiting.keep_alive,
            head_only: awaiting.head_only,
            http10: awaiting.http10,
            app_finished: false,
        };
        let request_line = awaiting.request_line.clone();
        let outcome = self.write_asgi(
            py,
            connection,
            &exchange,
            write,
            &RequestLine::Owned(&request_line),
        )?;
        self.detached_requests.insert(request_id, request_line);
        if let Some(InFlight::Handler(awaiting)) = connection.request() {
            let fill = awaiting.cache_fill.take();
            self.complete_cache_fill(py, connection, fill, None, &outcome);
        }
        Some(outcome)
    }

    /// A handler that ran off the loop finished: `task` is its asyncio task
    /// or pool future. Answers from its result (a WSGI body a pool thread
    /// goes on producing starts streaming).
    pub(crate) fn handler_finished<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        task: &Bound<'_, PyAny>,
    ) -> Outcome {
        let Some(InFlight::Handler(mut awaiting)) = connection.request().take() else {
            unreachable!("the server checked the request in flight");
        };
        let result = task.call_method0(pyo3::intern!(py, "result"));
        let line = RequestLine::Owned(&awaiting.request_line);
        let fill = awaiting.cache_fill.take();
        if let Some(exchange) = &awaiting.asgi {
            let outcome = self.complete_asgi(py, connection, &awaiting, exchange, &line, result);
            self.complete_cache_fill(py, connection, fill, None, &outcome);
            return outcome;
        }
        if let Ok(value) = &result {
            if let Ok(response) = value.cast::<WsgiResponse>() {
                let mut response = response.borrow_mut();
                if response.channel.is_some() {
                    let outcome =
                        self.start_wsgi_stream(py, connection, &awaiting, &line, &mut response);
                    // A streamed body is not stored (its recording is not
                    // complete).
                    self.complete_cache_fill(py, connection, fill, None, &outcome);
                    return outcome;
                }
            }
        }
        let request_head = &awaiting.request_head;
        let start = connection.response_mark();
        let outcome = self.finish(py, connection, &awaiting, request_head, &line, result);
        self.complete_cache_fill(py, connection, fill, Some(start), &outcome);
        outcome
    }
}
