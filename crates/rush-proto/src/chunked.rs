//! A resumable decoder for `Transfer-Encoding: chunked` request bodies.
//!
//! The decoder is a small state machine fed whatever bytes have arrived; it
//! consumes as much as it can, appends decoded data to the caller's vector,
//! and remembers where it stopped, so a body split at any offset decodes the
//! same. Chunk extensions and trailer fields are parsed for framing and then
//! ignored (their sizes are bounded).

use crate::{Limits, ProtoError};

/// What one call to [`ChunkedDecoder::decode`] achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkedProgress {
    /// How many input bytes were consumed; the caller drops them from its buffer.
    pub consumed: usize,
    /// The last chunk and the trailer section have been read: the body is complete,
    /// and any input after `consumed` belongs to the next request.
    pub done: bool,
}

/// Decodes one chunked body. Create one per request.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    // The implementation chooses its state; it must be resumable at any byte.
}

impl ChunkedDecoder {
    /// A decoder that refuses bodies whose decoded size exceeds `limits.max_body_size` (413),
    /// chunk-size lines longer than `limits.max_chunk_line` (400) and trailer
    /// sections over `limits.max_trailer_size` (431).
    pub fn new(limits: &Limits) -> ChunkedDecoder {
        let _ = limits;
        todo!()
    }

    /// Consumes bytes from `input`, appending decoded body data to `body`.
    ///
    /// Errors (400 unless said otherwise): a chunk size that is not hex or overflows
    /// u64, a missing CRLF after chunk data, bare CR or bare LF in a chunk-size line or
    /// trailer line, body over the limit (413), trailers too large (431).
    pub fn decode(&mut self, input: &[u8], body: &mut Vec<u8>) -> Result<ChunkedProgress, ProtoError> {
        let _ = (input, body);
        todo!()
    }

    /// Total decoded bytes so far.
    pub fn decoded_len(&self) -> u64 {
        todo!()
    }
}
