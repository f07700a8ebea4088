//! Whether a proxy socket may have input, from what epoll said since it
//! was last read dry, so the relay reads a socket only when a read can find
//! something (one fewer `recv` per socket per request than reading on to
//! EAGAIN).

use std::io::{self, Read};

use mio::net::TcpStream;

/// What epoll has said about a socket's input since it was last read dry.
#[derive(Clone, Copy, Default)]
pub(crate) struct InputHint {
    /// A read may find something.
    may_have_bytes: bool,
    /// The peer's end (FIN) or an error was signalled: read on to see it,
    /// however short a read comes back.
    ended: bool,
}

impl InputHint {
    /// A socket whose input may be waiting (an accepted client: with
    /// TCP_DEFER_ACCEPT the request is usually there already).
    pub(crate) fn waiting() -> InputHint {
        InputHint {
            may_have_bytes: true,
            ended: false,
        }
    }

    /// Nothing was signalled since the socket was last read dry.
    pub(crate) fn is_quiet(&self) -> bool {
        !self.may_have_bytes && !self.ended
    }

    /// An epoll event: `readable` (bytes), `ended` (the peer's FIN, a
    /// reset, an error).
    pub(crate) fn on_event(&mut self, readable: bool, ended: bool) {
        if readable || ended {
            self.may_have_bytes = true;
        }
        if ended {
            self.ended = true;
        }
    }
}

/// Reads `stream` unless it is known to be empty: a read that came back
/// short of the buffer, or met EAGAIN, drained the socket at that moment,
/// and bytes that arrive later raise an edge-triggered event, which sets the
/// hint again (`ProxyLoop::handle`). Saves the read that would only meet
/// EAGAIN, twice per forwarded request (once on each socket). A FIN or reset
/// that arrived with the last bytes raises no later event, so once one is
/// signalled, reads go on until they see it.
pub(crate) fn read_if_readable(
    stream: &mut TcpStream,
    hint: &mut InputHint,
    buffer: &mut [u8],
) -> io::Result<usize> {
    if !hint.may_have_bytes {
        return Err(io::ErrorKind::WouldBlock.into());
    }
    loop {
        match stream.read(buffer) {
            Ok(count) => {
                // 0 is the end of the stream: reads go on seeing it.
                if count != 0 && count < buffer.len() && !hint.ended {
                    hint.may_have_bytes = false;
                }
                return Ok(count);
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                if error.kind() == io::ErrorKind::WouldBlock {
                    hint.may_have_bytes = false;
                }
                return Err(error);
            }
        }
    }
}
