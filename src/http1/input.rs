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

use crate::body::{BodyBuffer, RequestBody, SpoolError};
use crate::conn::{BodyProgress, Connection, PendingBody, ReadState};
use crate::dispatch::incoming::IncomingRequest;
use crate::dispatch::{Core, Outcome};
use crate::exchange::StreamKey;

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
        // HTTP/1.1 answers one request at a time: its stream is the only one.
        let stream = StreamKey::single(key);
        let input = std::mem::take(&mut connection.input);
        let mut offset = 0;
        while offset < input.len() && connection.can_process() && self.may_produce(connection) {
            let available = &input[offset..];
            if let ReadState::Body(pending) = connection.state.read_mut() {
                match continue_body(pending, available, &mut self.body_scratch) {
                    Ok((consumed, false)) => {
                        offset += consumed;
                        break;
                    }
                    Ok((consumed, true)) => {
                        offset += consumed;
                        let Some(pending) = connection.state.body_complete() else {
                            unreachable!("state checked above");
                        };
                        self.pipelined_after = offset < input.len();
                        self.begin_request(connection, &pending.head_bytes);
                        let request =
                            IncomingRequest::new(stream, &pending.head_bytes, &pending.head);
                        let body = pending.body.as_request_body();
                        let outcome = self.dispatch(py, connection, request, body);
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
                    // A pipelined head that began after the last response.
                    if let Some(timer) = connection.state.bytes_arrived() {
                        connection.start_timer(Some(timer), self.now, &self.config);
                    }
                    break;
                }
                Err(error) => {
                    self.refuse(py, connection, &error);
                    offset = input.len();
                }
                Ok(HeadStatus::Complete(head)) => {
                    let head_end = head.head_len;
                    let head_bytes = &available[..head_end];
                    if rush_proto::ws::is_upgrade_request(head_bytes, &self.header_scratch) {
                        if let Some(target) = self.websocket_target(py, head_bytes, &head) {
                            // The forwarded client and scheme, the access log's clock.
                            self.begin_request(connection, head_bytes);
                            let headers = std::mem::take(&mut self.header_scratch);
                            let request = IncomingRequest::new(stream, head_bytes, &head);
                            self.upgrade_websocket(py, connection, request, &headers, target);
                            self.header_scratch = headers;
                            // Bytes after the head are frames (or, after a
                            // refusal, dropped with the connection).
                            offset += head_end;
                            break;
                        }
                    }
                    let flows = self.takes_body_as_it_comes(head.path.of(head_bytes));
                    match start_body(&head, &available[head_end..], &self.config.limits, flows) {
                        Err(error) => {
                            self.refuse_body(py, connection, error);
                            offset = input.len();
                        }
                        Ok(BodyStart::Complete { body, consumed }) => {
                            let next = offset + head_end + consumed;
                            let more = next < input.len();
                            let request = IncomingRequest::new(stream, head_bytes, &head);
                            if self.dispatch_whole(py, connection, request, body, more) {
                                // Parked: the request stays in the input.
                                break;
                            }
                            offset = next;
                        }
                        Ok(BodyStart::Decoded { body, consumed }) => {
                            let next = offset + head_end + consumed;
                            let more = next < input.len();
                            let request = IncomingRequest::new(stream, head_bytes, &head);
                            if self.dispatch_whole(py, connection, request, &body, more) {
                                break;
                            }
                            offset = next;
                        }
                        Ok(BodyStart::Flowing {
                            initial,
                            progress,
                            consumed,
                        }) => {
                            // The app starts now and receives the body as it comes.
                            if head.expect_continue
                                && consumed == 0
                                && head.version == Version::Http11
                            {
                                connection.sink.output.extend_from_slice(CONTINUE_100);
                            }
                            offset += head_end + consumed;
                            let keep_alive = head.keep_alive && !self.closes_for_drain();
                            connection.state.request_dispatched_with_body(progress);
                            self.begin_request(connection, head_bytes);
                            let request = IncomingRequest {
                                keep_alive,
                                ..IncomingRequest::new(stream, head_bytes, &head)
                            };
                            let outcome =
                                self.dispatch_body_flowing(py, connection, request, initial);
                            self.after_outcome(connection, outcome);
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
                                connection.sink.output.extend_from_slice(CONTINUE_100);
                            }
                            offset += head_end + consumed;
                            let timer = connection.state.body_started(Box::new(PendingBody {
                                head_bytes: head_bytes.to_vec(),
                                head,
                                body,
                                framing: progress,
                            }));
                            connection.start_timer(Some(timer), self.now, &self.config);
                        }
                    }
                }
            }
        }
        self.pipelined_after = false;
        let mut input = input;
        if offset >= input.len() {
            input.clear();
            if input.capacity() > 64 * 1024 {
                input = Vec::new();
            }
        } else {
            input.drain(..offset);
        }
        if connection.state.closes().is_some() {
            input.clear();
        }
        connection.input = input;
    }

    /// Answers a request whose whole body is in hand; `pipelined_after`:
    /// complete bytes of later requests follow it in the buffer. Returns
    /// whether the request was parked (left unconsumed, see
    /// `dispatch/cached.rs`) instead.
    fn dispatch_whole(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        request: IncomingRequest<'_>,
        body: &[u8],
        pipelined_after: bool,
    ) -> bool {
        self.pipelined_after = pipelined_after;
        self.may_park = true;
        connection.state.request_dispatched();
        self.begin_request(connection, request.head_bytes);
        let outcome = self.dispatch(py, connection, request, RequestBody::Bytes(body));
        self.may_park = false;
        let parked = matches!(outcome, Outcome::Parked);
        self.after_outcome(connection, outcome);
        parked
    }
}
/// Why a body could not be received.
pub(crate) enum BodyError {
    /// The client broke the protocol (or a limit): refuse with its status.
    Protocol(ProtoError),
    /// The server could not store it (spooling to disk failed): a 500.
    Storage(io::Error),
    /// The worker's spool budget is taken by other bodies: 503, retry later.
    Busy,
}

impl From<SpoolError> for BodyError {
    fn from(error: SpoolError) -> Self {
        match error {
            SpoolError::Full => BodyError::Busy,
            SpoolError::TooLarge => BodyError::Protocol(ProtoError::PayloadTooLarge),
            SpoolError::Io(error) => BodyError::Storage(error),
        }
    }
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
    /// More is to come for an app that takes it as it comes (`flows`):
    /// `initial` is what came with the head, held by no spool.
    Flowing {
        initial: Vec<u8>,
        progress: BodyProgress,
        consumed: usize,
    },
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
    flows: bool,
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
            } else if flows {
                Ok(BodyStart::Flowing {
                    initial: available.to_vec(),
                    progress: BodyProgress::Remaining(length - available.len() as u64),
                    consumed: available.len(),
                })
            } else {
                let mut body = BodyBuffer::new(Some(length))?;
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
            } else if flows {
                Ok(BodyStart::Flowing {
                    initial: decoded,
                    progress: BodyProgress::Chunked(Box::new(decoder)),
                    consumed: progress.consumed,
                })
            } else {
                let mut body = BodyBuffer::new(None)?;
                body.append(&decoded)?;
                Ok(BodyStart::Incomplete {
                    body,
                    progress: BodyProgress::Chunked(Box::new(decoder)),
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
