//! From an upgrade request to a WebSocket session.
//!
//! `http1/input.rs` asks [`Core::websocket_target`] about every request that
//! `is_upgrade_request`: an ASGI app takes WebSocket on every path no static
//! mount serves; a rush `App` on the paths of its `@app.websocket` routes
//! (their handler objects have a `websocket_session` method). Anything else
//! stays an ordinary HTTP request (a 404, or the 426 a WebSocket route
//! gives a plain GET). [`Core::upgrade_websocket`] then validates the
//! handshake (400/426 and close on failure), negotiates permessage-deflate,
//! switches the connection's protocol and starts the app, whose first step
//! runs inline like any ASGI app's. The 101 is written only when the app
//! accepts (`channel.rs`).

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use rush_proto::ws::handshake::{extension_offers, protocol_offers, write_rejection, AcceptKey};
use rush_proto::ws::{validate_handshake, DeflateConfig};
use rush_proto::{HeaderSpan, RequestHead};

use super::channel::{WebSocket, WebSocketSetup};
use super::WsSession;
use crate::asgi::objects::{address_object, build_scope, ScopePeer};
use crate::conn::{Connection, Protocol};
use crate::coroutine::CoroutineStart;
use crate::dispatch::incoming::IncomingRequest;
use crate::dispatch::{AppInterface, Core};
use crate::exchange::StreamKey;
use crate::forwarding::RequestOrigin;
use crate::metrics;
use crate::request::decode_path;
use crate::request_context::in_context;
use crate::router::RouteDecision;

/// Whether the handshake's `Origin` is one of `allowed` (lowercase; empty
/// allows any). Without an `Origin`, or with two, it is not: the list is
/// there to name who may connect, as the websockets library does.
pub(crate) fn origin_allowed(
    allowed: &[Vec<u8>],
    head_bytes: &[u8],
    headers: &[HeaderSpan],
) -> bool {
    if allowed.is_empty() {
        return true;
    }
    let mut origins = headers
        .iter()
        .filter(|header| header.name.of(head_bytes).eq_ignore_ascii_case(b"origin"))
        .map(|header| header.value.of(head_bytes).trim_ascii());
    match (origins.next(), origins.next()) {
        (Some(origin), None) => allowed
            .iter()
            .any(|allowed| allowed.eq_ignore_ascii_case(origin)),
        _ => false,
    }
}

/// What a WebSocket's channel is made from, whichever protocol carried the
/// handshake (an HTTP/1.1 upgrade or an HTTP/2 extended CONNECT).
pub(crate) struct ChannelOpening<'a> {
    /// The connection the WebSocket runs on.
    pub key: usize,
    /// `Sec-WebSocket-Accept`'s value; HTTP/2 has none (RFC 8441).
    pub accept_key: Option<AcceptKey>,
    pub high_water: usize,
    pub request: (&'a [u8], &'a RequestHead, &'a [HeaderSpan]),
}

/// A WebSocket's new channel, its session's request id and the offered
/// subprotocols (for the ASGI scope).
pub(crate) struct NewChannel {
    pub channel: Py<WebSocket>,
    pub session: u64,
    pub subprotocols: Vec<String>,
}

/// How a WebSocket's app is called: the request and its origin, the
/// offered subprotocols, and the stream its completions name.
pub(crate) struct WsAppCall<'a> {
    pub request: (&'a [u8], &'a RequestHead, Option<&'a RequestOrigin>),
    pub subprotocols: &'a [String],
    pub key: StreamKey,
}

/// Who takes a WebSocket on a path.
pub(crate) enum WsTarget {
    /// The ASGI app, with a `websocket` scope.
    Asgi,
    /// A rush `App` route: `endpoint.websocket_session(ws, params)`.
    Native {
        endpoint: Py<PyAny>,
        params: Option<Py<PyDict>>,
    },
}

impl Core {
    /// Whether an upgrade request for this path goes to a WebSocket handler.
    pub(crate) fn websocket_target(
        &self,
        py: Python<'_>,
        head_bytes: &[u8],
        head: &RequestHead,
    ) -> Option<WsTarget> {
        let raw_path = head.path.of(head_bytes);
        match &self.app {
            AppInterface::Asgi(_) => self
                .static_files
                .find_mount(raw_path)
                .is_none()
                .then_some(WsTarget::Asgi),
            AppInterface::Native => {
                let path = decode_path(raw_path);
                let router = self.router.bind(py).borrow();
                let RouteDecision::Handler { handler, params } = router.route(b"GET", &path) else {
                    return None;
                };
                let endpoint = handler.callable.bind(py);
                if !endpoint
                    .hasattr(pyo3::intern!(py, "websocket_session"))
                    .unwrap_or(false)
                {
                    return None;
                }
                let params = (!params.is_empty()).then(|| {
                    let dict = PyDict::new(py);
                    for (name, value) in params.iter() {
                        let _ = dict.set_item(name, value);
                    }
                    dict.unbind()
                });
                Some(WsTarget::Native {
                    endpoint: endpoint.clone().unbind(),
                    params,
                })
            }
            AppInterface::Wsgi(_) => None,
        }
    }

    /// Validates the handshake and starts the app (see the module docs).
    pub(crate) fn upgrade_websocket(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        request: IncomingRequest<'_>,
        headers: &[HeaderSpan],
        target: WsTarget,
    ) {
        let IncomingRequest {
            key,
            head_bytes,
            head,
            ..
        } = request;
        let key = key.connection;
        connection.state.request_dispatched();
        if self.draining {
            // The worker is going away: a WebSocket started now would only be
            // closed again (the client retries, and lands on another worker).
            super::write_denial(
                &mut connection.sink.output,
                503,
                &[(b"Retry-After".to_vec(), b"1".to_vec())],
                b"",
                self.date.header_line(),
            );
            connection.state.refused();
            return;
        }
        let handshake = match validate_handshake(head, head_bytes, headers) {
            Ok(handshake) => handshake,
            Err(error) => {
                metrics::refused(error.status());
                write_rejection(&mut connection.sink.output, &error, self.date.header_line());
                connection.state.refused();
                return;
            }
        };
        if !origin_allowed(&self.config.ws_allowed_origins, head_bytes, headers) {
            // Cross-site WebSocket hijacking: a page elsewhere opens a
            // socket with the user's cookies. Refused before the app runs.
            metrics::refused(403);
            super::write_denial(
                &mut connection.sink.output,
                403,
                &[],
                b"this Origin may not open a WebSocket here (--ws-allowed-origins)\n",
                self.date.header_line(),
            );
            connection.state.refused();
            return;
        }
        let opening = ChannelOpening {
            key,
            accept_key: Some(handshake.accept),
            high_water: crate::options::OUTPUT_HIGH_WATER,
            request: (head_bytes, head, headers),
        };
        let Some(made) = self.websocket_channel(py, opening, &target) else {
            let date = self.date.header_line();
            super::write_denial(&mut connection.sink.output, 500, &[], b"", date);
            connection.state.refused();
            return;
        };
        connection.state.handler_pending(None);
        // The app has until the body timeout to accept (the sweep enforces it).
        connection.deadline = Some(self.now + self.config.body_timeout);
        let line = request.line().text().into_owned();
        let mut session = WsSession::new(made.channel, made.session, line, self.now);
        let origin = connection.request.origin.clone();
        let call = WsAppCall {
            request: (head_bytes, head, origin.as_deref()),
            subprotocols: &made.subprotocols,
            key: StreamKey::single(key),
        };
        self.start_websocket_app(py, connection, target, &mut session, call);
        connection.protocol = Protocol::WebSocket(Box::new(session));
    }

    /// Makes the app's channel for a handshake that passed its checks, under
    /// a new request id: permessage-deflate negotiated and the offered
    /// subprotocols read from the request as configured; a rush `App`
    /// route's channel keeps the whole head. None (logged) when it cannot be
    /// made: the caller answers 500.
    pub(crate) fn websocket_channel(
        &mut self,
        py: Python<'_>,
        opening: ChannelOpening<'_>,
        target: &WsTarget,
    ) -> Option<NewChannel> {
        let (head_bytes, head, headers) = opening.request;
        self.next_request_id += 1;
        let session = self.next_request_id;
        let native = matches!(target, WsTarget::Native { .. });
        let ws_config = self.config.ws;
        let deflate = if ws_config.per_message_deflate {
            DeflateConfig::default().negotiate(extension_offers(head_bytes, headers))
        } else {
            None
        };
        let subprotocols: Vec<String> = protocol_offers(head_bytes, headers)
            .map(|offer| String::from_utf8_lossy(offer).into_owned())
            .collect();
        let channel = Py::new(
            py,
            WebSocket::new(WebSocketSetup {
                key: opening.key,
                session,
                flush: self.ws_flush.clone(),
                accept_key: opening.accept_key,
                high_water: opening.high_water,
                deflate,
                max_size: ws_config.max_size,
                max_queue: ws_config.max_queue,
                subprotocols: subprotocols.clone(),
                path: decode_path(head.path.of(head_bytes)).into_owned(),
                query: head
                    .query
                    .map(|query| query.of(head_bytes).to_vec())
                    .unwrap_or_default(),
                head: native.then(|| head_bytes.to_vec()),
            }),
        );
        match channel {
            Ok(channel) => Some(NewChannel {
                channel,
                session,
                subprotocols,
            }),
            Err(error) => {
                self.log_error(py, "cannot start a WebSocket", Some(error));
                None
            }
        }
    }

    /// Starts the app on `session`'s channel, in a fresh context of its own
    /// (the app is called in it and its coroutine runs in it); an app whose
    /// first step already finished is done with at once.
    pub(crate) fn start_websocket_app(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        target: WsTarget,
        session: &mut WsSession,
        call: WsAppCall<'_>,
    ) {
        let channel = session.channel.clone_ref(py);
        let started = self.contexts.fresh(py).and_then(|context| {
            let coroutine = in_context(py, &context, || match target {
                WsTarget::Asgi => self.asgi_websocket_call(
                    py,
                    connection,
                    call.request,
                    &channel,
                    call.subprotocols,
                ),
                WsTarget::Native { endpoint, params } => endpoint.bind(py).call_method1(
                    pyo3::intern!(py, "websocket_session"),
                    (channel.clone_ref(py), params),
                ),
            })?;
            self.start_coroutine(py, &context, &coroutine, call.key, session.id)
        });
        match started {
            Ok(CoroutineStart::Continuing) => {}
            Ok(CoroutineStart::Finished(value)) => {
                self.websocket_app_finished(py, session, Ok(value))
            }
            Err(error) => self.websocket_app_finished(py, session, Err(error)),
        }
    }

    /// Calls the ASGI app with a `websocket` scope for the request
    /// `(head_bytes, head, origin)`: an HTTP/1.1 upgrade, or an HTTP/2
    /// extended CONNECT written as its head (`crate::http2::websocket`).
    pub(crate) fn asgi_websocket_call<'py>(
        &self,
        py: Python<'py>,
        connection: &mut Connection,
        (head_bytes, head, origin): (&[u8], &RequestHead, Option<&RequestOrigin>),
        channel: &Py<WebSocket>,
        subprotocols: &[String],
    ) -> PyResult<Bound<'py, PyAny>> {
        let AppInterface::Asgi(settings) = &self.app else {
            unreachable!("an ASGI target comes with an ASGI app");
        };
        if connection.peer_objects.address.is_none() {
            connection.peer_objects.address = Some(address_object(py, connection.client)?);
        }
        let client = connection.peer_objects.address.as_ref().expect("set above");
        let listener = usize::from(connection.listener);
        let peer = ScopePeer {
            client,
            origin,
            listener,
        };
        let (scope, _) = build_scope(py, settings, head_bytes, head, peer)?;
        scope.set_item(pyo3::intern!(py, "type"), pyo3::intern!(py, "websocket"))?;
        // A trusted proxy's word on the scheme wins; else the transport's.
        let secure = origin
            .and_then(|origin| origin.https)
            .unwrap_or_else(|| connection.stream.is_tls());
        let scheme = if secure { "wss" } else { "ws" };
        scope.set_item(pyo3::intern!(py, "scheme"), scheme)?;
        scope.del_item(pyo3::intern!(py, "method"))?;
        let version = PyDict::new(py);
        version.set_item("version", "3.0")?;
        version.set_item("spec_version", "2.4")?;
        scope.set_item(pyo3::intern!(py, "asgi"), version)?;
        scope.set_item("subprotocols", PyList::new(py, subprotocols)?)?;
        let extensions = PyDict::new(py);
        extensions.set_item("websocket.http.response", PyDict::new(py))?;
        if let Some(proxy) = &connection.proxy_info {
            extensions.set_item("proxy_protocol", proxy.to_dict(py)?)?;
        }
        scope.set_item("extensions", extensions)?;
        if let Some(tls) = connection.stream.tls() {
            crate::tls::add_asgi_extension(py, &scope, tls.info())?;
        }
        let channel = channel.bind(py);
        settings.app.bind(py).call1((
            scope,
            channel.getattr(pyo3::intern!(py, "asgi_receive"))?,
            channel.getattr(pyo3::intern!(py, "asgi_send"))?,
        ))
    }
}
