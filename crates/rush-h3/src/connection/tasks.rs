//! The async tasks `h3`'s server API needs, run by the connection's tiny
//! executor (see the parent module): one owns `h3`'s connection and accepts
//! request streams, one per new stream reads its head, one per answered
//! stream writes its response from the stream's command queue.

use super::*;

pub(super) fn reset_event(id: u64, e: &StreamError) -> Event {
    let code = match e {
        StreamError::RemoteTerminate { code, .. } => Some(code.value()),
        StreamError::StreamError { code, .. } => Some(code.value()),
        _ => None,
    };
    Event::Reset { stream: id, code }
}

/// Owns `h3`'s connection: sends SETTINGS, accepts request streams (a
/// task each to read the head), and sends GOAWAY when asked.
pub(super) async fn accept_task(
    quic: QuicConnection,
    shared: Rc<RefCell<Shared>>,
    settings: H3Settings,
) {
    let mut conn = match h3::server::builder()
        .max_field_section_size(settings.max_field_section_size)
        .build::<_, Bytes>(quic)
        .await
    {
        Ok(conn) => conn,
        Err(e) => {
            shared.borrow_mut().ended = Some(e.to_string());
            return;
        }
    };
    enum Next<T> {
        Shutdown,
        Accepted(T),
    }
    loop {
        let next = {
            let mut accept = std::pin::pin!(conn.accept());
            poll_fn(|cx| {
                let sh = shared.borrow();
                if sh.shutdown_requested && sh.goaway_id.is_none() {
                    return Poll::Ready(Next::Shutdown);
                }
                drop(sh);
                accept.as_mut().poll(cx).map(Next::Accepted)
            })
            .await
        };
        match next {
            Next::Shutdown => {
                // Client request streams are accepted in order (0, 4, 8...),
                // so after n of them h3 announces 4n: every accepted stream
                // is below it and will be answered.
                let accepted = shared.borrow().accepted;
                shared.borrow_mut().goaway_id = Some(accepted * 4);
                if let Err(e) = conn.shutdown(1).await {
                    shared.borrow_mut().ended = Some(e.to_string());
                    return;
                }
            }
            Next::Accepted(Ok(Some(resolver))) => {
                let mut sh = shared.borrow_mut();
                sh.accepted += 1;
                sh.resolving += 1;
                sh.spawned
                    .push(Box::pin(resolve_task(resolver, shared.clone())));
            }
            Next::Accepted(Ok(None)) => return,
            Next::Accepted(Err(e)) => {
                shared.borrow_mut().ended = Some(e.to_string());
                return;
            }
        }
    }
}

async fn resolve_task(
    resolver: h3::server::RequestResolver<QuicConnection, Bytes>,
    shared: Rc<RefCell<Shared>>,
) {
    let result = resolver.resolve_request().await;
    let mut sh = shared.borrow_mut();
    sh.resolving -= 1;
    match result {
        Ok((request, stream)) => {
            let id = stream.id().into_inner();
            let (parts, ()) = request.into_parts();
            let (send, recv) = stream.split();
            sh.resolved.push_back(Resolved {
                id,
                head: RequestHead {
                    method: parts.method,
                    uri: parts.uri,
                    headers: parts.headers,
                },
                send,
                recv,
            });
        }
        // h3 reset the stream (or closed the connection) itself.
        Err(_) => sh.resolve_failed += 1,
    }
}

/// Writes one response from its command queue, as quinn's windows allow.
pub(super) async fn writer_task(
    mut send: RequestStream<SendHalf, Bytes>,
    queue: Rc<RefCell<SendQueue>>,
) {
    loop {
        let command = poll_fn(|_| {
            let mut q = queue.borrow_mut();
            if q.failed.is_some() {
                return Poll::Ready(None);
            }
            match q.commands.pop_front() {
                Some(c) => Poll::Ready(Some(c)),
                None => Poll::Pending,
            }
        })
        .await;
        let Some(command) = command else {
            return;
        };
        let result = match command {
            Command::Head(resp) => send.send_response(resp).await,
            Command::Data(data) => {
                let n = data.len();
                let r = send.send_data(data).await;
                queue.borrow_mut().bytes -= n;
                r
            }
            Command::Trailers(t) => send.send_trailers(t).await,
            Command::Finish => {
                let r = send.finish().await;
                if r.is_ok() {
                    queue.borrow_mut().done = true;
                    return;
                }
                r
            }
        };
        if let Err(e) = result {
            let code = match e {
                StreamError::RemoteTerminate { code, .. } => Some(code.value()),
                _ => None,
            };
            let mut q = queue.borrow_mut();
            if q.failed.is_none() {
                q.failed = Some(code);
            }
            q.commands.clear();
            return;
        }
    }
}
