//! The response cache on the dispatch path: a fresh cached answer is
//! written without calling the handler; a miss's rendered answer is stored
//! after the handler ran (see src/cache.rs for the rules).

use std::rc::Rc;

use pyo3::prelude::*;
use rush_proto::{Method, RequestHead};

use super::{keep_or_close, Core, Outcome, RequestLine};
use crate::cache::{self, CachePolicy};
use crate::conn::Connection;
use crate::http_write::{finish_head, OutgoingBody, ResponseContext};
use crate::inflight::AwaitingResponse;
use crate::request::header_fields;
use crate::router::Router;

/// Bodies up to this size are copied into the output with the head (one
/// write, pipelined answers together); larger ones are sent from the
/// shared stored bytes.
const COPY_LIMIT: usize = 16 * 1024;

/// What the cache said about a request.
pub(crate) enum CacheLookup {
    /// Answered from the cache.
    Answered(Outcome),
    /// Not there: the handler's answer is to be stored under this key.
    Miss(Vec<u8>),
    /// This request does not use the cache (credentials, a method other
    /// than GET or HEAD).
    Bypass,
}

impl Core {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn look_up_cached(
        &self,
        py: Python<'_>,
        connection: &mut Connection,
        router: &Router,
        policy: &CachePolicy,
        head_bytes: &[u8],
        head: &RequestHead,
        context: &ResponseContext<'_>,
    ) -> CacheLookup {
        if !matches!(head.method, Method::Get | Method::Head)
            || !cache::request_may_use_cache(header_fields(head_bytes))
        {
            return CacheLookup::Bypass;
        }
        let query = head.query.map(|query| query.of(head_bytes)).unwrap_or(b"");
        let fields: Vec<(&[u8], &[u8])> = header_fields(head_bytes).collect();
        let key = cache::key(policy, query, fields.iter().copied());
        let Some(stored) = router.response_cache.borrow_mut().fresh(&key, self.now) else {
            return CacheLookup::Miss(key);
        };
        let out = &mut connection.sink.output;
        out.extend_from_slice(&stored.head);
        let age = self
            .now
            .saturating_duration_since(stored.stored_at)
            .as_secs();
        out.extend_from_slice(b"Age: ");
        out.extend_from_slice(itoa::Buffer::new().format(age).as_bytes());
        out.extend_from_slice(b"\r\n");
        finish_head(out, context, false);
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
        let line = RequestLine::Raw(head_bytes, head);
        self.access_log(py, connection, &line, stored.status, stored.body.len());
        CacheLookup::Answered(keep_or_close(context.keep_alive))
    }

    /// Stores the answer a handler just rendered (from `start` in the
    /// output) under the key of its cache miss. A HEAD answer has no body
    /// to store, and a file body is not kept.
    pub(crate) fn store_cached(
        &self,
        connection: &Connection,
        router: &Router,
        miss: Option<(Rc<CachePolicy>, Vec<u8>)>,
        start: usize,
        awaiting: &AwaitingResponse,
    ) {
        let Some((policy, key)) = miss else {
            return;
        };
        if awaiting.head_only || connection.sink.body.is_some() {
            return;
        }
        router.response_cache.borrow_mut().store(
            &policy,
            key,
            &connection.sink.output[start..],
            self.now,
        );
    }
}
