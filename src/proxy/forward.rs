//! One forwarded request/response exchange (absolute-form requests).
//!
//! The head for the origin is prepared by `rush_proto::proxy` before the
//! exchange starts. Here the bytes flow: the request body from the client's
//! input to the origin, framed exactly as the client framed it (the length
//! counted down, or the chunked body checked by rush-proto's decoder and
//! passed on verbatim, so the origin sees the same message boundaries the
//! proxy saw); the response head parsed strictly and rewritten for the
//! client; the response body passed on as framed. Each buffer is bounded by
//! [`HIGH_WATER`]: a side stops being read while the other side has not
//! taken what is already buffered.
//!
//! An exchange only moves bytes; the connection code (`conn.rs`) decides
//! what to do with its outcome (reuse the origin connection, answer 502,
//! close, take the next pipelined request).

use std::io::{self, Write};

use mio::net::TcpStream;
use rush_proto::proxy::{
    parse_response_head, write_client_response_head, ParsedHead, ResponseFraming, ResponseStatus,
};
use rush_proto::{BodyFraming, ChunkedDecoder, HeaderSpan, Limits, Method};

use super::input_hint::{read_if_readable, InputHint};

/// Most bytes buffered in each direction before reading that side pauses.
pub(crate) const HIGH_WATER: usize = 256 * 1024;
/// Largest response head accepted from an origin (larger: 502).
const MAX_RESPONSE_HEAD: usize = 64 * 1024;

enum RequestBody {
    Done,
    Length(u64),
    Chunked(ChunkedDecoder),
}

enum ResponseBody {
    Head,
    Length(u64),
    Chunked(ChunkedDecoder),
    UntilClose,
    Done,
}

/// What a step of the exchange came to.
pub(crate) enum Outcome {
    /// Bytes moved (true) or nothing could (false): wait for the next event.
    Progress(bool),
    /// The response is complete (and the request was sent).
    Finished { reuse_origin: bool },
    /// The origin failed before the client got a response head: answer this status.
    Failed(u16, &'static str),
    /// The origin closed a reused connection before answering: try again on a new one.
    Retry,
    /// A failure after the response head went out, or the client left: close.
    Abort,
}

/// The sockets and buffers an exchange works on, lent by the connection.
pub(crate) struct Io<'a> {
    pub(crate) client: &'a mut TcpStream,
    pub(crate) upstream: &'a mut TcpStream,
    pub(crate) input: &'a mut Vec<u8>,
    pub(crate) output: &'a mut Vec<u8>,
    pub(crate) client_eof: &'a mut bool,
    /// What epoll said about either socket's input (`read_if_readable`).
    pub(crate) client_input: &'a mut InputHint,
    pub(crate) upstream_input: &'a mut InputHint,
    pub(crate) scratch: &'a mut [u8],
    pub(crate) headers: &'a mut Vec<HeaderSpan>,
    /// The `Via` value the proxy adds.
    pub(crate) via: &'a [u8],
}

pub(crate) struct Exchange {
    method: Method,
    /// Bytes for the origin; those before `sent` are written already.
    to_origin: Vec<u8>,
    /// How much of `to_origin` is written, while it is kept whole for a
    /// replay (otherwise written bytes are dropped and this stays 0).
    sent: usize,
    /// A request without a body, on a reused origin connection that turns
    /// out closed (the race every keep-alive pool has), is sent again on a
    /// new one: its head stays whole in `to_origin` until then.
    replayable: bool,
    request: RequestBody,
    response: ResponseBody,
    /// Response bytes before the end of the head.
    from_origin: Vec<u8>,
    body_scratch: Vec<u8>,
    /// The response head went to the client (no error response possible after it).
    pub(crate) head_sent: bool,
    pub(crate) status: u16,
    origin_keep_alive: bool,
    /// The origin sent anything at all.
    origin_spoke: bool,
    /// The client connection stays open after this exchange.
    pub(crate) client_keep_alive: bool,
    /// The client speaks HTTP/1.0: a chunked response reaches it decoded,
    /// ended by closing the connection.
    client_http10: bool,
    dechunk: bool,
    /// Bytes sent to the origin, and to the client.
    pub(crate) up_bytes: u64,
    pub(crate) down_bytes: u64,
}

impl Exchange {
    pub(crate) fn new(
        method: Method,
        head: Vec<u8>,
        framing: BodyFraming,
        limits: &Limits,
        client_keep_alive: bool,
        client_http10: bool,
    ) -> Exchange {
        let request = match framing {
            BodyFraming::Empty | BodyFraming::ContentLength(0) => RequestBody::Done,
            BodyFraming::ContentLength(length) => RequestBody::Length(length),
            BodyFraming::Chunked => RequestBody::Chunked(ChunkedDecoder::new(limits)),
        };
        Exchange {
            method,
            replayable: matches!(request, RequestBody::Done),
            to_origin: head,
            sent: 0,
            request,
            response: ResponseBody::Head,
            from_origin: Vec::new(),
            body_scratch: Vec::new(),
            head_sent: false,
            status: 0,
            origin_keep_alive: false,
            origin_spoke: false,
            client_keep_alive,
            client_http10,
            dechunk: false,
            up_bytes: 0,
            down_bytes: 0,
        }
    }

    /// Whether the request can be sent again on a new origin connection
    /// (it has no body): see [`Outcome::Retry`].
    pub(crate) fn can_replay(&self) -> bool {
        self.replayable
    }

    /// Starts over on a new origin connection (after [`Outcome::Retry`]), once.
    pub(crate) fn restart(&mut self) {
        if self.replayable {
            self.replayable = false;
            self.sent = 0;
            self.up_bytes = 0;
        }
    }

    /// Request bytes not written to the origin yet.
    fn unsent(&self) -> usize {
        self.to_origin.len() - self.sent
    }

    /// Moves what can move now.
    pub(crate) fn step(&mut self, io: &mut Io<'_>) -> Outcome {
        match self.try_step(io) {
            Ok(outcome) => outcome,
            Err(_) if !self.head_sent && !self.origin_spoke => {
                Outcome::Failed(502, "the origin connection failed")
            }
            Err(_) => Outcome::Abort,
        }
    }

    fn try_step(&mut self, io: &mut Io<'_>) -> io::Result<Outcome> {
        let mut progress = match self.take_request_body(io.input) {
            Ok(progress) => progress,
            Err(_) if self.head_sent => return Ok(Outcome::Abort),
            Err(_) => return Ok(Outcome::Failed(400, "malformed chunked request body")),
        };
        while self.unsent() > 0 {
            match io.upstream.write(&self.to_origin[self.sent..]) {
                Ok(written) => {
                    if self.replayable {
                        self.sent += written;
                    } else {
                        self.to_origin.drain(..written);
                    }
                    self.up_bytes += written as u64;
                    progress = true;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        if !matches!(self.request, RequestBody::Done)
            && !*io.client_eof
            && io.input.len() < HIGH_WATER
            && self.unsent() < HIGH_WATER
        {
            match read_if_readable(io.client, io.client_input, io.scratch) {
                Ok(0) => {
                    // The client left in the middle of its request body.
                    *io.client_eof = true;
                    return Ok(Outcome::Abort);
                }
                Ok(read) => {
                    io.input.extend_from_slice(&io.scratch[..read]);
                    progress = true;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return Ok(Outcome::Abort),
            }
        }
        if !matches!(self.response, ResponseBody::Done) && io.output.len() < HIGH_WATER {
            match read_if_readable(io.upstream, io.upstream_input, io.scratch) {
                Ok(0) => return Ok(self.origin_closed()),
                Ok(read) => {
                    self.origin_spoke = true;
                    progress = true;
                    // Lent out of `io` for the call, which needs the rest of `io`.
                    let scratch = std::mem::take(&mut io.scratch);
                    let outcome = self.response_bytes(&scratch[..read], io);
                    io.scratch = scratch;
                    if let Some(failed) = outcome? {
                        return Ok(failed);
                    }
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
                Err(error) => return Err(error),
            }
        }
        while !io.output.is_empty() {
            match io.client.write(io.output) {
                Ok(written) => {
                    io.output.drain(..written);
                    self.down_bytes += written as u64;
                    progress = true;
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Ok(Outcome::Abort),
            }
        }
        if matches!(self.response, ResponseBody::Done) {
            let request_sent = matches!(self.request, RequestBody::Done) && self.unsent() == 0;
            if !request_sent {
                // The origin answered before taking the whole body (a 413, say):
                // the rest of the body cannot be told from a next request.
                self.client_keep_alive = false;
            }
            return Ok(Outcome::Finished {
                reuse_origin: request_sent && self.origin_keep_alive,
            });
        }
        Ok(Outcome::Progress(progress))
    }

    /// Moves request body bytes from the client's input to the origin's buffer.
    fn take_request_body(&mut self, input: &mut Vec<u8>) -> io::Result<bool> {
        if input.is_empty() || self.to_origin.len() >= HIGH_WATER {
            return Ok(false);
        }
        let room = HIGH_WATER - self.to_origin.len();
        let taken = match &mut self.request {
            RequestBody::Done => return Ok(false),
            RequestBody::Length(remaining) => {
                let taken = (*remaining).min(input.len().min(room) as u64) as usize;
                *remaining -= taken as u64;
                if *remaining == 0 {
                    self.request = RequestBody::Done;
                }
                taken
            }
            RequestBody::Chunked(decoder) => {
                let window = &input[..input.len().min(room)];
                self.body_scratch.clear();
                let progress = decoder
                    .decode(window, &mut self.body_scratch)
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad chunked body"))?;
                if progress.done {
                    self.request = RequestBody::Done;
                }
                progress.consumed
            }
        };
        self.to_origin.extend(input.drain(..taken));
        Ok(taken > 0)
    }

    fn origin_closed(&mut self) -> Outcome {
        match self.response {
            ResponseBody::UntilClose => {
                self.response = ResponseBody::Done;
                self.client_keep_alive = false;
                Outcome::Finished {
                    reuse_origin: false,
                }
            }
            ResponseBody::Head if !self.origin_spoke && self.replayable => Outcome::Retry,
            ResponseBody::Head if !self.origin_spoke => {
                Outcome::Failed(502, "the origin closed the connection without answering")
            }
            ResponseBody::Head => Outcome::Failed(502, "the origin sent an incomplete response"),
            _ => Outcome::Abort,
        }
    }

    /// Handles bytes from the origin; `Some` ends the exchange.
    fn response_bytes(&mut self, bytes: &[u8], io: &mut Io<'_>) -> io::Result<Option<Outcome>> {
        if !matches!(self.response, ResponseBody::Head) {
            self.body_bytes(bytes, io.output)?;
            return Ok(None);
        }
        // A head usually comes whole in one read: it is parsed where it was
        // read, and only a partial head is kept (in `from_origin`).
        let mut buffered = std::mem::take(&mut self.from_origin);
        let buffer = if buffered.is_empty() {
            bytes
        } else {
            buffered.extend_from_slice(bytes);
            &buffered[..]
        };
        let mut offset = 0;
        while matches!(self.response, ResponseBody::Head) {
            match self.response_head(&buffer[offset..], io) {
                Ok(Some(length)) => offset += length,
                Ok(None) => {
                    self.from_origin = buffer[offset..].to_vec();
                    return Ok(None);
                }
                Err(failed) => return Ok(Some(failed)),
            }
        }
        self.body_bytes(&buffer[offset..], io.output)?;
        Ok(None)
    }

    /// Parses a response head at the start of `buffer` and passes it on:
    /// its length, or nothing if it is not complete yet. A final (not 1xx)
    /// head moves the exchange on to the body.
    fn response_head(&mut self, buffer: &[u8], io: &mut Io<'_>) -> Result<Option<usize>, Outcome> {
        let head = match parse_response_head(buffer, self.method, MAX_RESPONSE_HEAD, io.headers) {
            Ok(ResponseStatus::Partial) => return Ok(None),
            Ok(ResponseStatus::Complete(head)) => head,
            Err(_) => return Err(Outcome::Failed(502, "the origin sent a malformed response")),
        };
        let interim = (100..200).contains(&head.status);
        if !interim && head.framing == ResponseFraming::UntilClose {
            // The end of this body is the origin's FIN: the client's
            // connection must end with it.
            self.client_keep_alive = false;
        }
        self.dechunk = !interim && self.client_http10 && head.framing == ResponseFraming::Chunked;
        if self.dechunk {
            self.client_keep_alive = false;
        }
        let response = ParsedHead {
            buffer,
            head: &head,
            headers: io.headers,
        };
        write_client_response_head(
            io.output,
            response,
            !interim && !self.client_keep_alive,
            self.dechunk,
            io.via,
        );
        if interim {
            // 100 Continue and friends: passed on, the final response follows.
            return Ok(Some(head.head_len));
        }
        self.head_sent = true;
        self.status = head.status;
        self.origin_keep_alive = head.keep_alive;
        self.response = match head.framing {
            ResponseFraming::Empty | ResponseFraming::Length(0) => ResponseBody::Done,
            ResponseFraming::Length(length) => ResponseBody::Length(length),
            ResponseFraming::Chunked => {
                ResponseBody::Chunked(ChunkedDecoder::for_response(&Limits {
                    max_body_size: u64::MAX,
                    ..Limits::default()
                }))
            }
            ResponseFraming::UntilClose => ResponseBody::UntilClose,
        };
        Ok(Some(head.head_len))
    }

    /// Passes response body bytes on as framed; bytes past the end mean the
    /// origin connection is not fit for reuse.
    fn body_bytes(&mut self, bytes: &[u8], output: &mut Vec<u8>) -> io::Result<()> {
        let used = match &mut self.response {
            ResponseBody::Head => unreachable!("body bytes come after the head"),
            ResponseBody::Done => 0,
            ResponseBody::UntilClose => bytes.len(),
            ResponseBody::Length(remaining) => {
                let used = (*remaining).min(bytes.len() as u64) as usize;
                *remaining -= used as u64;
                if *remaining == 0 {
                    self.response = ResponseBody::Done;
                }
                used
            }
            ResponseBody::Chunked(decoder) => {
                self.body_scratch.clear();
                let progress = decoder.decode(bytes, &mut self.body_scratch).map_err(|_| {
                    io::Error::new(io::ErrorKind::InvalidData, "bad chunked response")
                })?;
                if progress.done {
                    self.response = ResponseBody::Done;
                }
                progress.consumed
            }
        };
        if self.dechunk {
            output.extend_from_slice(&self.body_scratch);
        } else {
            output.extend_from_slice(&bytes[..used]);
        }
        if used < bytes.len() {
            self.origin_keep_alive = false;
        }
        Ok(())
    }
}
