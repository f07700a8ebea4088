//! Turning a connection's buffered input into requests: heads parsed by
//! rush-proto, bodies received whole (in memory or spooled) or streamed to a
//! running ASGI app, each complete request dispatched in order.

use std::io;

use pyo3::prelude::*;
use rush_proto::encode::CONTINUE_100;
use rush_proto::{
    parse_request_head, BodyFraming, ChunkedDecoder, HeadStatus, Limits, ProtoError, RequestHead,
    Version,
};

use super::{BodyProgress, Connection, PendingBody, Phase};
use crate::body::{BodyBuffer, RequestBody};
use crate::dispatch::{AsgiBody, Core};

impl Core {
    /// Turns buffered input into responses until it runs out, a response
    /// closes the connection, an async handler suspends, or output is over
    /// the high-water mark.
    pub(crate) fn process_input(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        key: usize,
    ) {
        let input = std::mem::take(&mut connection.input);
        let mut offset = 0;
        while offset < input.len() && connection.can_process() && self.may_produce(connection) {
            let available = &input[offset..];
            if let Phase::ReadingBody(pending) = &mut connection.phase {
                match continue_body(pending, available, &mut self.body_scratch) {
                    Ok((consumed, false)) => {
                        offset += consumed;
                        break;
                    }
                    Ok((consumed, true)) => {
                        offset += consumed;
                        let Phase::ReadingBody(pending) =
                            std::mem::replace(&mut connection.phase, Phase::Idle)
                        else {
                            unreachable!("phase checked above");
                        };
                        let outcome = self.dispatch(
                            py,
                            connection,
                            key,
                            &pending.head_bytes,
                            &pending.head,
                            pending.body.as_request_body(),
                        );
                        self.after_outcome(connection, outcome);
                    }
                    Err(error) => {
                        self.refuse_body(py, connection, error);
                        offset = input.len();
                    }
                }
                continue;
            }
            match parse_request_head(available, &self.config.limits, &mut self.header_scratch) {
                Ok(HeadStatus::Partial) => {
                    if let Phase::Idle = connection.phase {
                        connection.phase = Phase::ReadingHead;
                        connection.deadline = self.now + self.config.header_timeout;
                    }
                    break;
                }
                Err(error) => {
                    self.refuse(connection, &error);
                    offset = input.len();
                }
                Ok(HeadStatus::Complete(head)) => {
                    let head_end = head.head_len;
                    let head_bytes = &available[..head_end];
                    match start_body(&head, &available[head_end..], &self.config.limits) {
                        Err(error) => {
                            self.refuse_body(py, connection, error);
                            offset = input.len();
                        }
                        Ok(BodyStart::Complete { body, consumed }) => {
                            offset += head_end + consumed;
                            let outcome = self.dispatch(
                                py,
                                connection,
                                key,
                                head_bytes,
                                &head,
                                RequestBody::Bytes(body),
                            );
                            self.after_outcome(connection, outcome);
                        }
                        Ok(BodyStart::Decoded { body, consumed }) => {
                            offset += head_end + consumed;
                            let outcome = self.dispatch(
                                py,
                                connection,
                                key,
                                head_bytes,
                                &head,
                                RequestBody::Bytes(&body),
                            );
                            self.after_outcome(connection, outcome);
                        }
                        Ok(BodyStart::Incomplete {
                            body: BodyBuffer::Memory(initial),
                            progress,
                            consumed,
                        }) if self.streams_body_to_asgi(head.path.of(head_bytes)) => {
                            // An ASGI app starts now and receives the body as it comes.
                            if head.expect_continue
                                && consumed == 0
                                && head.version == Version::Http11
                            {
                                connection.output.extend_from_slice(CONTINUE_100);
                            }
                            offset += head_end + consumed;
                            let keep_alive = head.keep_alive && !self.draining;
                            let body = AsgiBody::Streaming { initial, progress };
                            let outcome = self.dispatch_asgi(
                                py, connection, key, head_bytes, &head, body, keep_alive,
                            );
                            self.after_outcome(connection, outcome);
                            connection.deadline = self.now + self.config.body_timeout;
                        }
                        Ok(BodyStart::Incomplete {
                            body,
                            progress,
                            consumed,
                        }) => {
                            if head.expect_continue
                                && consumed == 0
                                && head.version == Version::Http11
                            {
                                connection.output.extend_from_slice(CONTINUE_100);
                            }
                            offset += head_end + consumed;
                            connection.phase = Phase::ReadingBody(Box::new(PendingBody {
                                head_bytes: head_bytes.to_vec(),
                                head,
                                body,
                                framing: progress,
                            }));
                            connection.deadline = self.now + self.config.body_timeout;
                        }
                    }
                }
            }
        }
        let mut input = input;
        if offset >= input.len() {
            input.clear();
            if input.capacity() > 64 * 1024 {
                input = Vec::new();
            }
        } else {
            input.drain(..offset);
        }
        if matches!(connection.phase, Phase::Closing { .. } | Phase::Lingering) {
            input.clear();
        }
        connection.input = input;
    }

    /// Sets the connection's phase from what became of a request.
    pub(crate) fn streams_body_to_asgi(&self, raw_path: &[u8]) -> bool {
        self.asgi.is_some() && self.static_files.find_mount(raw_path).is_none()
    }

    /// Hands body bytes that arrived for a running ASGI app to its
    /// `receive()`. `Err` means the body was malformed (logged): close.
    pub(crate) fn feed_body_stream(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
    ) -> Result<(), ()> {
        let Connection { phase, input, .. } = connection;
        let Phase::AwaitingHandler(awaiting) = phase else {
            return Ok(());
        };
        let Some(progress) = &mut awaiting.body_stream else {
            return Ok(());
        };
        let scratch = &mut self.body_scratch;
        scratch.clear();
        let (consumed, done) = match progress {
            BodyProgress::Remaining(remaining) => {
                let take = (*remaining).min(input.len() as u64) as usize;
                scratch.extend_from_slice(&input[..take]);
                *remaining -= take as u64;
                (take, *remaining == 0)
            }
            BodyProgress::Chunked(decoder) => match decoder.decode(input, scratch) {
                Ok(progress) => (progress.consumed, progress.done),
                Err(error) => {
                    let message = format!("malformed request body while an ASGI app ran: {error}");
                    self.log_error(py, &message, None);
                    return Err(());
                }
            },
        };
        input.drain(..consumed);
        if done {
            awaiting.body_stream = None;
        }
        if let Some(exchange) = &awaiting.asgi {
            if let Ok(mut receive) = exchange.receive.bind(py).try_borrow_mut() {
                if let Err(error) = receive.push_body(py, &self.body_scratch, done) {
                    self.log_error(
                        py,
                        "cannot hand a request body to the ASGI app",
                        Some(error),
                    );
                }
            }
        }
        Ok(())
    }
}
/// Why a body could not be received.
pub(crate) enum BodyError {
    /// The client broke the protocol (or a limit): refuse with its status.
    Protocol(ProtoError),
    /// The server could not store it (spooling to disk failed): a 500.
    Storage(io::Error),
}

impl From<ProtoError> for BodyError {
    fn from(error: ProtoError) -> Self {
        BodyError::Protocol(error)
    }
}

impl From<io::Error> for BodyError {
    fn from(error: io::Error) -> Self {
        BodyError::Storage(error)
    }
}

/// How a body begins right after its head.
pub(crate) enum BodyStart<'a> {
    /// The whole body is in the buffer (for Content-Length, a slice of it).
    Complete { body: &'a [u8], consumed: usize },
    /// A chunked body that was complete in the buffer, decoded.
    Decoded { body: Vec<u8>, consumed: usize },
    /// More is to come; `body` holds what was received so far.
    Incomplete {
        body: BodyBuffer,
        progress: BodyProgress,
        consumed: usize,
    },
}

pub(crate) fn start_body<'a>(
    head: &RequestHead,
    available: &'a [u8],
    limits: &Limits,
) -> Result<BodyStart<'a>, BodyError> {
    match head.framing {
        BodyFraming::Empty => Ok(BodyStart::Complete {
            body: &[],
            consumed: 0,
        }),
        BodyFraming::ContentLength(length) => {
            let length_usize = length as usize;
            if available.len() >= length_usize {
                Ok(BodyStart::Complete {
                    body: &available[..length_usize],
                    consumed: length_usize,
                })
            } else {
                let mut body = BodyBuffer::new(Some(length));
                body.append(available)?;
                Ok(BodyStart::Incomplete {
                    body,
                    progress: BodyProgress::Remaining(length - available.len() as u64),
                    consumed: available.len(),
                })
            }
        }
        BodyFraming::Chunked => {
            let mut decoder = ChunkedDecoder::new(limits);
            let mut decoded = Vec::new();
            let progress = decoder.decode(available, &mut decoded)?;
            if progress.done {
                Ok(BodyStart::Decoded {
                    body: decoded,
                    consumed: progress.consumed,
                })
            } else {
                let mut body = BodyBuffer::new(None);
                body.append(&decoded)?;
                Ok(BodyStart::Incomplete {
                    body,
                    progress: BodyProgress::Chunked(decoder),
                    consumed: progress.consumed,
                })
            }
        }
    }
}

/// Feeds newly arrived bytes to a body in progress; `true` once it is complete.
pub(crate) fn continue_body(
    pending: &mut PendingBody,
    available: &[u8],
    scratch: &mut Vec<u8>,
) -> Result<(usize, bool), BodyError> {
    match &mut pending.framing {
        BodyProgress::Remaining(remaining) => {
            let take = (*remaining).min(available.len() as u64) as usize;
            pending.body.append(&available[..take])?;
            *remaining -= take as u64;
            Ok((take, *remaining == 0))
        }
        BodyProgress::Chunked(decoder) => {
            scratch.clear();
            let progress = decoder.decode(available, scratch)?;
            pending.body.append(scratch)?;
            Ok((progress.consumed, progress.done))
        }
    }
}
