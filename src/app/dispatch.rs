//! The entry of every request, and the native App's dispatch: routes,
//! redirects, static mounts, 404/405, cached routes, and calling a handler
//! (sync, or async with its first step inline); what no route claims goes
//! on to the WSGI or ASGI app. Written through the response-writer seam
//! (`crate::exchange`).

use pyo3::prelude::*;
use pyo3::types::PyDict;
use rush_proto::{Method, Version};

use crate::body::RequestBody;
use crate::coroutine::CoroutineStart;
use crate::dispatch::cached::CacheLookup;
use crate::dispatch::incoming::IncomingRequest;
use crate::dispatch::{call_handler, keep_or_close, AppInterface, Core, Outcome};
use crate::exchange::{BodyLength, ResponseHead, ResponseWriter};
use crate::inflight::{AwaitingResponse, InFlight};
use crate::request::{decode_path, header_fields, Request, RequestParts};
use crate::response::{write_status_page, ResponseContext};
use crate::router::RouteDecision;
use crate::static_files::{ConditionalHeaders, MountRequest};

use crate::asgi::dispatch::AsgiBody;

impl Core {
    /// Routes one complete request and answers it (or starts its async handler).
    pub(crate) fn dispatch<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        request: IncomingRequest<'_>,
        body: RequestBody<'_>,
    ) -> Outcome {
        let IncomingRequest {
            head_bytes, head, ..
        } = request;
        if let Some(liveness) = &self.liveness {
            if liveness.get().request_started(head_bytes) {
                // --max-requests: this response already says `Connection:
                // close`, and the loop stops accepting after this batch.
                self.draining = true;
                self.request_limit_reached = true;
            }
        }
        let keep_alive = request.keep_alive && !self.closes_for_drain();
        let request = IncomingRequest {
            keep_alive,
            ..request
        };
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: head.method == Method::Head,
            keep_alive,
            http10: head.version == Version::Http10,
            request_head: head_bytes,
            allow: None,
        };
        let method = head.method_span.of(head_bytes);
        let path = decode_path(head.path.of(head_bytes));
        let router = self.router.clone_ref(py);
        let router = router.bind(py).borrow();
        let decision = router.route(method, &path);
        let mut params: Option<Bound<'_, PyDict>> = None;
        let mut cache_fill = None;
        let mut allow_for_handler: Option<Vec<u8>> = None;
        let (handler, default_status) = match decision {
            RouteDecision::Redirect(redirect) => {
                let redirect_head = ResponseHead {
                    status: redirect.status,
                    length: BodyLength::Known(0),
                    close: false,
                    context,
                };
                let location = (&b"Location"[..], redirect.location.as_slice());
                connection.send_head(&redirect_head, std::iter::once(location));
                connection.end_body(std::iter::empty());
                self.access_log(py, connection, &request.line(), redirect.status, 0);
                return keep_or_close(keep_alive);
            }
            RouteDecision::NotFound
                if !self.static_files.is_empty() && {
                    let raw_path = head.path.of(head_bytes);
                    self.static_files.find_mount(raw_path).is_some()
                } =>
            {
                let raw_path = head.path.of(head_bytes);
                let (mount, rest) = self
                    .static_files
                    .find_mount(raw_path)
                    .expect("mount found by the guard");
                // Only GET and HEAD reach a file here (the mount answers 405).
                let conditional = ConditionalHeaders::from_fields(header_fields(head_bytes))
                    .for_method(head.method_span.of(head_bytes));
                let mark = connection.response_mark();
                let mount_request = MountRequest {
                    rest,
                    raw_path,
                    query: head.query.map(|query| query.of(head_bytes)),
                    is_get_or_head: matches!(head.method, Method::Get | Method::Head),
                    conditional: &conditional,
                };
                let outcome = self
                    .static_files
                    .respond(mount, mount_request, &context, connection);
                match router.error_handler(404) {
                    // The app's own 404 page wins over the native one.
                    Some(handler) if outcome.status == 404 => {
                        connection.retract(mark);
                        (handler, 404)
                    }
                    _ => {
                        connection.set_body(outcome.body);
                        let length = outcome.body_length as usize;
                        self.access_log(py, connection, &request.line(), outcome.status, length);
                        return keep_or_close(keep_alive);
                    }
                }
            }
            RouteDecision::NotFound if !matches!(self.app, AppInterface::Native) => {
                let mut fill = None;
                if let Some(policy) = router.cached_path(&path) {
                    match self.look_up_cached(py, connection, request, &router, policy, &context) {
                        CacheLookup::Answered(outcome) => return outcome,
                        CacheLookup::Parked => return Outcome::Parked,
                        CacheLookup::Handler(handler_fill) => fill = handler_fill,
                    }
                }
                drop(router);
                return if matches!(self.app, AppInterface::Asgi(_)) {
                    let body = AsgiBody::Complete(body);
                    self.dispatch_asgi(py, connection, request, body, fill)
                } else {
                    self.dispatch_wsgi(py, connection, request, body, fill)
                };
            }
            RouteDecision::NotFound => match router.error_handler(404) {
                Some(handler) => (handler, 404),
                None => {
                    let length =
                        write_status_page(connection, 404, std::iter::empty(), &context, false);
                    self.access_log(py, connection, &request.line(), 404, length);
                    return keep_or_close(keep_alive);
                }
            },
            RouteDecision::MethodNotAllowed { allow } => match router.error_handler(405) {
                Some(handler) => {
                    allow_for_handler = Some(allow.to_vec());
                    (handler, 405)
                }
                None => {
                    let allow_header = std::iter::once((&b"Allow"[..], allow));
                    let length = write_status_page(connection, 405, allow_header, &context, false);
                    self.access_log(py, connection, &request.line(), 405, length);
                    return keep_or_close(keep_alive);
                }
            },
            RouteDecision::Handler {
                handler,
                params: matched,
            } => {
                if let Some(policy) = &handler.cache {
                    match self.look_up_cached(py, connection, request, &router, policy, &context) {
                        CacheLookup::Answered(outcome) => return outcome,
                        CacheLookup::Parked => return Outcome::Parked,
                        CacheLookup::Handler(fill) => cache_fill = fill,
                    }
                }
                if !matched.is_empty() {
                    let dict = PyDict::new(py);
                    for (name, value) in matched.iter() {
                        if dict.set_item(name, value).is_err() {
                            break;
                        }
                    }
                    params = Some(dict);
                }
                (handler, 200)
            }
        };
        let native_request = body.to_owned_body().map_err(PyErr::from).and_then(|body| {
            Bound::new(
                py,
                Request::new(RequestParts {
                    head: head_bytes,
                    method: head.method_span,
                    target: head.target,
                    path: head.path,
                    query: head.query,
                    version: head.version,
                    body,
                    client: connection.client(),
                    origin: connection.origin().cloned().map(Box::new),
                    tls: connection.tls().is_some(),
                }),
            )
        });
        let mut awaiting = AwaitingResponse::new(head, keep_alive, default_status);
        awaiting.allow = allow_for_handler;
        if router.error_handler(500).is_some() {
            // Kept for the app's 500 handler, should this one raise.
            awaiting.request = native_request
                .as_ref()
                .ok()
                .map(|request| request.clone().unbind());
        }
        let line = request.line();
        let result = native_request.and_then(|native_request| {
            call_handler(
                py,
                &self.contexts,
                handler,
                &native_request,
                params.as_ref(),
            )
        });
        let start = connection.response_mark();
        let outcome = match result {
            Err(error) => self.finish(py, connection, &awaiting, head_bytes, &line, Err(error)),
            Ok(coroutine) if handler.is_async => {
                self.next_request_id += 1;
                awaiting.request_id = self.next_request_id;
                let started = self.contexts.fresh(py).and_then(|context| {
                    self.start_coroutine(py, &context, &coroutine, request.key, awaiting.request_id)
                });
                match started {
                    Ok(CoroutineStart::Finished(result)) => {
                        self.finish(py, connection, &awaiting, head_bytes, &line, Ok(result))
                    }
                    Ok(CoroutineStart::Continuing) => {
                        awaiting.request_line = line.text().into_owned();
                        awaiting.request_head = head_bytes.to_vec();
                        awaiting.cache_fill = cache_fill;
                        connection.response_pending(false);
                        *connection.request() = Some(InFlight::Handler(Box::new(awaiting)));
                        return Outcome::Pending;
                    }
                    Err(error) => {
                        self.finish(py, connection, &awaiting, head_bytes, &line, Err(error))
                    }
                }
            }
            Ok(value) => self.finish(py, connection, &awaiting, head_bytes, &line, Ok(value)),
        };
        self.complete_cache_fill(py, connection, cache_fill, Some(start), &outcome);
        outcome
    }
}
