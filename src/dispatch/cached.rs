//! The response cache on the dispatch path (the rules are in src/cache/).
//!
//! Before a cached route's handler is called, [`Core::look_up_cached`]
//! answers from the cache (a hit, a stale answer, a 304), parks the request
//! (another request of its key is being answered: single flight), or lets
//! the handler run with a [`CacheFill`] to complete. Once that handler's
//! response is written, [`Core::complete_cache_fill`] stores it, wakes the
//! parked requests of its key and, when a refresh failed, sends the stale
//! answer instead.
//!
//! A parked request stays unconsumed in its connection's input: waking it
//! means processing that input again, which now finds the stored answer (or
//! goes to the handler when it could not be stored).

use std::rc::Rc;
use std::sync::Arc;

use pyo3::prelude::*;
use rush_proto::{Method, RequestHead};

use super::{keep_or_close, Core, Outcome, RequestLine};
use crate::cache::{self, CacheFill, CachePolicy, Lookup, Stored};
use crate::conn::Connection;
use crate::http_write::{finish_head, finish_stored_head, OutgoingBody, ResponseContext};
use crate::request::header_fields;
use crate::router::Router;
use crate::static_files::etag_list_matches;

/// Bodies up to this size are copied into the output with the head (one
/// write, pipelined answers together); larger ones are sent from the
/// shared stored bytes.
const COPY_LIMIT: usize = 16 * 1024;

/// What the cache said about a request.
pub(crate) enum CacheLookup {
    /// Answered from the cache.
    Answered(Outcome),
    /// Waits, unconsumed, for another request's answer of the same key.
    Parked,
    /// Call the handler; then complete the fill, if there is one.
    Handler(Option<CacheFill>),
}

impl Core {
    /// Looks a request of a cached route up (see the module's comment).
    /// `connection_key` names the connection should it be parked.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn look_up_cached(
        &self,
        py: Python<'_>,
        connection: &mut Connection,
        connection_key: usize,
        router: &Router,
        policy: &Arc<CachePolicy>,
        head_bytes: &[u8],
        head: &RequestHead,
        context: &ResponseContext<'_>,
    ) -> CacheLookup {
        if !matches!(head.method, Method::Get | Method::Head)
            || !cache::request_may_use_cache(policy, header_fields(head_bytes))
        {
            return CacheLookup::Handler(None);
        }
        let query = head.query.map(|query| query.of(head_bytes)).unwrap_or(b"");
        let fields: Vec<(&[u8], &[u8])> = header_fields(head_bytes).collect();
        let mut key = cache::key(policy, query, fields.iter().copied());
        let lookup = router.response_cache.borrow_mut().look_up(
            policy,
            &mut key,
            !context.head_only,
            connection_key,
            self.now,
        );
        let fill = || CacheFill {
            policy: policy.clone(),
            key,
            http10: context.http10,
        };
        match lookup {
            Lookup::Hit(stored) | Lookup::Stale(stored) => {
                let status = self.write_stored(connection, &stored, head_bytes, context, true);
                let line = RequestLine::Raw(head_bytes, head);
                self.access_log(py, connection, &line, status, stored.body.len());
                CacheLookup::Answered(keep_or_close(context.keep_alive))
            }
            Lookup::Wait if self.may_park => CacheLookup::Parked,
            // Not replayable (its body was consumed as it arrived): the
            // handler answers it, uncached.
            Lookup::Wait => CacheLookup::Handler(None),
            Lookup::Pass if context.head_only => CacheLookup::Handler(None),
            Lookup::Fill | Lookup::Refresh(_) | Lookup::Pass => CacheLookup::Handler(Some(fill())),
        }
    }

    /// Writes a stored answer (a 304 when the request's `If-None-Match`
    /// names its `ETag`), with its `Age` when `from_cache`; returns the
    /// status sent.
    fn write_stored(
        &self,
        connection: &mut Connection,
        stored: &Rc<Stored>,
        head_bytes: &[u8],
        context: &ResponseContext<'_>,
        from_cache: bool,
    ) -> u16 {
        let out = &mut connection.sink.output;
        let not_modified = !stored.not_modified_head.is_empty()
            && header_fields(head_bytes).any(|(name, value)| {
                name.eq_ignore_ascii_case(b"if-none-match")
                    && etag_list_matches(value, &stored.etag)
            });
        out.extend_from_slice(if not_modified {
            &stored.not_modified_head
        } else {
            &stored.head
        });
        if from_cache {
            let age = self
                .now
                .saturating_duration_since(stored.stored_at)
                .as_secs();
            out.extend_from_slice(b"Age: ");
            out.extend_from_slice(itoa::Buffer::new().format(age).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
        if not_modified {
            // A 304 head is built from a few stored fields only.
            finish_head(out, context, false);
        } else {
            finish_stored_head(out, context);
        }
        if not_modified {
            return 304;
        }
        if !context.head_only {
            if stored.body.len() <= COPY_LIMIT {
                out.extend_from_slice(&stored.body);
            } else {
                connection.sink.body = Some(OutgoingBody::Shared {
                    data: stored.body.clone(),
                    offset: 0,
                    end: stored.body.len(),
                });
            }
        }
        stored.status
    }

    /// The handler of a cache fill answered (`answer` says where its whole
    /// response is). Stores it if it may be, wakes the requests parked on
    /// its key, and answers with the stale entry instead when a refresh
    /// failed and its answer has not left yet. `outcome` is what the
    /// response did to the connection.
    pub(crate) fn complete_cache_fill(
        &mut self,
        py: Python<'_>,
        connection: &mut Connection,
        fill: Option<CacheFill>,
        answer: FillAnswer<'_>,
        outcome: &Outcome,
    ) {
        let Some(fill) = fill else {
            return;
        };
        // A file body is not kept.
        let start = match answer {
            FillAnswer::InOutput(start)
                if connection.sink.body.is_none() && start <= connection.sink.output.len() =>
            {
                Some(start)
            }
            _ => None,
        };
        let rendered = match answer {
            FillAnswer::Recorded(bytes) => Some(bytes),
            _ => start.map(|start| &connection.sink.output[start..]),
        };
        let router = self.router.bind(py).borrow();
        let done = router.response_cache.borrow_mut().complete_fill(
            &fill.policy,
            &fill.key,
            rendered,
            self.now,
        );
        drop(router);
        self.woken.extend(done.waiters);
        // The stale answer instead of a failed refresh; or the stored answer
        // instead of the handler's own bytes when it gained an `ETag`, so the
        // first answer already carries the validator the later ones do.
        let instead = match (done.answer_instead, done.stored) {
            (Some(stale), _) => Some((stale, true)),
            (None, Some(stored)) if stored.etag_added => Some((stored, false)),
            _ => None,
        };
        if let (Some((answer, from_cache)), Some(start)) = (instead, start) {
            connection.sink.output.truncate(start);
            let context = ResponseContext {
                date_line: self.date.header_line(),
                head_only: false,
                keep_alive: matches!(outcome, Outcome::KeepAlive),
                http10: fill.http10,
                request_head: &[],
                allow: None,
            };
            self.write_stored(connection, &answer, &[], &context, from_cache);
        }
    }
}

/// The most of a response sent in parts that is recorded to fill a cache
/// entry; a larger one is not stored.
pub(crate) const RECORD_LIMIT: usize = 16 * 1024 * 1024;

/// Where the whole response of a cache fill's handler is.
pub(crate) enum FillAnswer<'a> {
    /// In the connection's output, from this offset (nothing of it sent).
    InOutput(usize),
    /// Copied as it was written (a response sent in parts).
    Recorded(&'a [u8]),
    /// Not kept (a streamed body, or one too large to record).
    NotStorable,
}
