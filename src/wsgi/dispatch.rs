//! WSGI, the loop's half: build `environ`, call the app on the loop thread
//! or hand it to the `--threads` pool, and frame what it returns through
//! the response-writer seam (`crate::exchange`). The objects the app sees
//! are the other half, `objects.rs`.
//!
//! A body that is a list or tuple is sent whole (its length is known, its
//! Content-Length checked). Any other iterable is streamed: the response
//! enters the `Streaming` write state and [`Core::pump_wsgi`] pulls chunks while
//! the client keeps up, pausing at the high-water mark and resuming when
//! the socket drains, so memory stays flat for any body size. The
//! iterable's `close()` is called when the body ends or the client leaves.

use pyo3::prelude::*;

use rush_proto::encode::{BodyEncoder, EncodeError, FramingHeader, FramingPlan};

use super::environ::build_environ;
use super::objects::{call_wsgi, WsgiResponse};
use super::render::render_collected;
use crate::body::RequestBody;
use crate::cache::CacheFill;
use crate::dispatch::incoming::IncomingRequest;
use crate::dispatch::{keep_or_close, AppInterface, Core, Outcome, RequestLine};
use crate::exchange::{BodyLength, ResponseHead, ResponseWriter};
use crate::http_write::ResponseContext;
use crate::inflight::{
    AwaitingResponse, BodySource, InFlight, PoolChannel, StreamEnd, Taken, WsgiStream,
};

impl Core {
    /// Runs the WSGI app for a request, on this thread or on the pool.
    pub(crate) fn dispatch_wsgi<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        request: IncomingRequest<'_>,
        body: RequestBody<'_>,
        fill: Option<CacheFill>,
    ) -> Outcome {
        let start = connection.response_mark();
        let mut fill = fill;
        let outcome = self.run_wsgi(py, connection, request, body, &mut fill);
        // Handed to the pool with the fill (it completes there), or
        // streamed (not stored: the recording is not complete).
        let rewrite_from = (!matches!(outcome, Outcome::Pending)).then_some(start);
        self.complete_cache_fill(py, connection, fill, rewrite_from, &outcome);
        outcome
    }

    /// Calls the WSGI app; a request handed to the pool takes `fill` along
    /// (its completion stores the answer).
    fn run_wsgi<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        request: IncomingRequest<'_>,
        body: RequestBody<'_>,
        fill: &mut Option<CacheFill>,
    ) -> Outcome {
        let (key, head_bytes, head, keep_alive) = request.parts();
        let mut awaiting = AwaitingResponse::new(head, keep_alive, 200);
        let line = request.line();
        let mut peer = connection.peer();
        let AppInterface::Wsgi(settings) = &self.app else {
            unreachable!("dispatch_wsgi is called only with a WSGI app");
        };
        let app = settings.app.clone_ref(py);
        let tls = peer.tls;
        let proxy = peer.proxy;
        let origin = peer.origin;
        let environ =
            build_environ(py, settings, head_bytes, head, body, &mut peer).and_then(|environ| {
                if let Some(proxy) = proxy {
                    environ
                        .set_item(pyo3::intern!(py, "rush.proxy_protocol"), proxy.to_dict(py)?)?;
                }
                if let Some(tls) = tls {
                    // A proxy's word on the scheme wins; else the transport's.
                    if origin.is_none_or(|origin| origin.https.is_none()) {
                        environ.set_item(
                            pyo3::intern!(py, "wsgi.url_scheme"),
                            pyo3::intern!(py, "https"),
                        )?;
                        environ.set_item(pyo3::intern!(py, "HTTPS"), pyo3::intern!(py, "on"))?;
                    }
                    crate::tls::add_wsgi_variables(&environ, tls)?;
                }
                Ok(environ)
            });
        let environ = match environ {
            Ok(environ) => environ,
            Err(error) => {
                return self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
            }
        };
        self.next_request_id += 1;
        awaiting.request_id = self.next_request_id;
        // An answer that fills the cache is collected whole (a Flask body is
        // an iterable with close(), which would otherwise stream and so
        // could not be stored); every other body streams.
        let stream = fill.is_none();
        if let Some(scheduler) = &self.blocking_scheduler {
            return match scheduler
                .call1(py, (app, environ, key.token(), awaiting.request_id, stream))
            {
                Ok(_) => {
                    awaiting.request_line = line.text().into_owned();
                    awaiting.request_head = head_bytes.to_vec();
                    awaiting.cache_fill = fill.take();
                    connection.response_pending(false);
                    *connection.request() = Some(InFlight::Handler(Box::new(awaiting)));
                    Outcome::Pending
                }
                Err(error) => self.finish(py, connection, &awaiting, head_bytes, &line, Err(error)),
            };
        }
        match call_wsgi(py, app.bind(py), &environ, stream) {
            Ok(mut response) if response.stream.is_some() => {
                self.start_wsgi_stream(py, connection, &awaiting, &line, &mut response)
            }
            // Rendered from the Rust value: no Python object to make and drop.
            Ok(mut response) => self.finish_with(
                py,
                connection,
                &awaiting,
                head_bytes,
                &line,
                |context, writer| render_collected(py, &mut response, context, writer),
            ),
            Err(error) => self.finish(py, connection, &awaiting, head_bytes, &line, Err(error)),
        }
    }

    /// Writes the head of a streamed WSGI response and starts pumping its
    /// body. The framing is the app's Content-Length, else chunked (or, for
    /// an HTTP/1.0 client, the end of the connection).
    pub(crate) fn start_wsgi_stream<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        awaiting: &AwaitingResponse,
        line: &RequestLine<'_>,
        response: &mut WsgiResponse,
    ) -> Outcome {
        let body = match (response.stream.take(), response.channel.take()) {
            (Some(iterator), _) => BodySource::Iterator(iterator),
            (None, Some(channel)) => BodySource::Pool(PoolChannel(channel)),
            (None, None) => unreachable!("called for a streamed response"),
        };
        let encoder = BodyEncoder::choose(FramingPlan {
            status: response.status,
            head_request: awaiting.head_only,
            declared_length: response.declared_length,
            known_length: None,
            http10: awaiting.http10,
        });
        let keep_alive = awaiting.keep_alive
            && !self.closes_for_drain()
            && !response.requests_close()
            && !encoder.closes_connection();
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: awaiting.head_only,
            keep_alive,
            http10: awaiting.http10,
            request_head: &[],
            allow: None,
        };
        let length = match encoder.framing_header() {
            FramingHeader::ContentLength(length) => BodyLength::Known(length),
            FramingHeader::Chunked => BodyLength::Streamed,
            FramingHeader::Omitted if encoder.closes_connection() => BodyLength::UntilClose,
            FramingHeader::Omitted => BodyLength::Empty,
        };
        let head = ResponseHead {
            status: response.status,
            length,
            close: !keep_alive,
            context,
        };
        let fields = response.headers.iter();
        connection.send_head(&head, fields);
        let mut stream = Box::new(WsgiStream {
            body,
            encoder,
            status: response.status,
            keep_alive,
            request_line: line.text().into_owned(),
            request_id: awaiting.request_id,
            unflushed: false,
        });
        // What the app passed to write(), and a generator's first chunk.
        let first = response.body.bytes(py);
        match stream.encoder.admit(first.len() as u64) {
            Ok(true) => connection.send_body(first),
            Ok(false) => {}
            Err(error) => {
                connection.abort_body();
                return self.end_wsgi_stream(py, connection, *stream, StreamEnd::Misframed(error));
            }
        }
        stream.unflushed = !first.is_empty();
        connection.streaming_started();
        *connection.request() = Some(InFlight::Stream(stream));
        self.pump_wsgi(py, connection).unwrap_or(Outcome::Pending)
    }

    /// Moves a streamed WSGI body on: takes chunks from the app's iterable
    /// while the connection's unsent output is under the high-water mark,
    /// writing each to the socket before asking for the next (the app may
    /// block producing it: what it made so far must not wait with it).
    /// `None`: paused until the client reads; `Some`: the response is over.
    pub(crate) fn pump_wsgi<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
    ) -> Option<Outcome> {
        loop {
            let Some(InFlight::Stream(stream)) = connection.request() else {
                return None;
            };
            if stream.unflushed {
                stream.unflushed = false;
                if connection
                    .flush(self.now, self.config.send_timeout)
                    .is_err()
                {
                    let Some(InFlight::Stream(stream)) = connection.request().take() else {
                        unreachable!("checked above");
                    };
                    return Some(self.end_wsgi_stream(
                        py,
                        connection,
                        *stream,
                        StreamEnd::ClientLeft,
                    ));
                }
            }
            if connection.is_full() {
                return None;
            }
            let Some(InFlight::Stream(stream)) = connection.request() else {
                return None;
            };
            // Take what the app made, then hand it to the writer: the
            // stream's framing check (its encoder) decides whether it goes.
            let end = match &stream.body {
                BodySource::Iterator(iterator) => match iterator.next_chunk(py) {
                    Ok(Some(chunk)) => match stream.encoder.admit(chunk.as_bytes().len() as u64) {
                        Ok(send) => {
                            stream.unflushed = true;
                            if send {
                                connection.send_body(chunk.as_bytes());
                            }
                            continue;
                        }
                        Err(error) => StreamEnd::Misframed(error),
                    },
                    Ok(None) => finish_stream(connection),
                    Err(error) => StreamEnd::Raised(error),
                },
                BodySource::Pool(channel) => match channel.take(py) {
                    // Nothing new: the pool thread tells the loop when there is.
                    Ok(Taken::Chunks(chunks)) if chunks.is_empty() => return None,
                    Ok(Taken::Chunks(chunks)) => match send_all(&chunks, connection) {
                        // Written by the drive loop: the pool thread is not
                        // waiting on this thread, so nothing is held back.
                        Ok(()) => return None,
                        Err(error) => StreamEnd::Misframed(error),
                    },
                    Ok(Taken::Last(chunks)) => match send_all(&chunks, connection) {
                        Ok(()) => finish_stream(connection),
                        Err(error) => StreamEnd::Misframed(error),
                    },
                    Err(error) => StreamEnd::Raised(error),
                },
            };
            if !matches!(end, StreamEnd::Complete) {
                connection.abort_body();
            }
            if let StreamEnd::Raised(error) = end {
                let request_line = match connection.request() {
                    Some(InFlight::Stream(stream)) => stream.request_line.clone(),
                    _ => unreachable!("checked above"),
                };
                let message =
                    format!("Exception in WSGI app for {request_line} while streaming its body");
                self.log_error(py, &message, Some(error));
                let Some(InFlight::Stream(stream)) = connection.request().take() else {
                    unreachable!("checked above");
                };
                return Some(self.end_wsgi_stream(py, connection, *stream, StreamEnd::AppRaised));
            }
            let Some(InFlight::Stream(stream)) = connection.request().take() else {
                unreachable!("checked above");
            };
            return Some(self.end_wsgi_stream(py, connection, *stream, end));
        }
    }

    /// Closes the app's iterable and logs the request. A body that broke
    /// off (the app raised, sent more or less than its Content-Length, or
    /// the client left) was never completed on the wire: the connection
    /// closes so the client cannot take it for a whole response.
    fn end_wsgi_stream<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        mut stream: WsgiStream,
        end: StreamEnd,
    ) -> Outcome {
        if let BodySource::Iterator(iterator) = &mut stream.body {
            if let Err(error) = iterator.close(py) {
                self.log_error(py, "the WSGI body's close() raised", Some(error));
            }
        }
        if let StreamEnd::Misframed(error) = &end {
            let message = format!(
                "the WSGI app's body for {} does not match its framing ({error}); closing the connection",
                stream.request_line
            );
            self.log_error(py, &message, None);
        }
        let line = RequestLine::Owned(&stream.request_line);
        self.access_log(
            py,
            connection,
            &line,
            stream.status,
            stream.encoder.written() as usize,
        );
        let complete = matches!(end, StreamEnd::Complete);
        keep_or_close(complete && stream.keep_alive && !self.closes_for_drain())
    }
}

/// Ends a streamed body whose last chunk went out: complete if it matches
/// its framing (the writer then ends it in the protocol's way).
fn finish_stream<W: ResponseWriter>(connection: &mut W) -> StreamEnd {
    let Some(InFlight::Stream(stream)) = connection.request() else {
        unreachable!("called while a body streams");
    };
    match stream.encoder.admit_end() {
        Ok(()) => {
            connection.end_body(std::iter::empty());
            StreamEnd::Complete
        }
        Err(error) => StreamEnd::Misframed(error),
    }
}

/// Sends the chunks a pool thread queued, each checked against the
/// stream's framing first.
fn send_all<W: ResponseWriter>(chunks: &[Vec<u8>], connection: &mut W) -> Result<(), EncodeError> {
    for chunk in chunks {
        let Some(InFlight::Stream(stream)) = connection.request() else {
            unreachable!("called while a body streams");
        };
        if stream.encoder.admit(chunk.len() as u64)? {
            connection.send_body(chunk);
        }
    }
    Ok(())
}
