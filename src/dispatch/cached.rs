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
use pyo3::types::PyBytes;
use rush_proto::{Method, RequestHead};

use super::{keep_or_close, Core, Outcome, RequestLine};
use crate::cache::{self, CacheFill, CachePolicy, Lookup, Stored};
use crate::exchange::ResponseWriter;
use crate::http_write::{finish_head, finish_stored_head, OutgoingBody, ResponseContext};
use crate::metrics;
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
    pub(crate) fn look_up_cached<W: ResponseWriter>(
        &self,
        py: Python<'_>,
        connection: &mut W,
        connection_key: usize,
        router: &Router,
        policy: &Arc<CachePolicy>,
        head_bytes: &[u8],
        head: &RequestHead,
        context: &ResponseContext<'_>,
    ) -> CacheLookup {
        if !matches!(head.method, Method::Get | Method::Head) || !connection.caches() {
            return CacheLookup::Handler(None);
        }
        // The head's fields are split once; the key, the credentials check,
        // the validators and the variants all read this list.
        let fields: Vec<(&[u8], &[u8])> = header_fields(head_bytes).collect();
        if !cache::request_may_use_cache(policy, fields.iter().copied()) {
            return CacheLookup::Handler(None);
        }
        // One pass for the fields the cache itself reads.
        let (mut range, mut if_none_match, mut if_modified_since) = (false, None, false);
        for &(name, value) in &fields {
            if name.eq_ignore_ascii_case(b"range") {
                range = true;
            } else if name.eq_ignore_ascii_case(b"if-none-match") {
                if_none_match = Some(value);
            } else if name.eq_ignore_ascii_case(b"if-modified-since") {
                if_modified_since = true;
            }
        }
        // A part is not the resource: a Range request goes to the app, whose
        // 206 is never stored (neither is its answer to If-Modified-Since
        // alone: the cache keeps no date to compare).
        if range || (if_modified_since && if_none_match.is_none()) {
            return CacheLookup::Handler(None);
        }
        let conditional = if_none_match.is_some() || if_modified_since;
        let origin = connection.origin();
        let request = cache::RequestIdentity {
            https: origin
                .and_then(|origin| origin.https)
                .unwrap_or_else(|| connection.tls().is_some()),
            host: origin
                .and_then(|origin| origin.host.as_deref())
                .map(str::as_bytes)
                .or_else(|| head.host.map(|host| host.of(head_bytes)))
                .unwrap_or(b""),
            path: head.path.of(head_bytes),
            raw_query: head.query.map(|query| query.of(head_bytes)).unwrap_or(b""),
        };
        let mut key = cache::key(policy, &request, fields.iter().copied());
        // A conditional request does not fill: the app may answer it 304,
        // which is no answer for the others.
        let may_fill = !context.head_only && !conditional;
        let lookup = router.response_cache.borrow_mut().look_up(
            policy,
            &mut key,
            &fields,
            may_fill,
            connection_key,
            self.now,
        );
        let fill = || CacheFill {
            policy: policy.clone(),
            key,
            http10: context.http10,
            request_head: head_bytes[..head.head_len.min(head_bytes.len())].into(),
        };
        let hit = matches!(lookup, Lookup::Hit(_) | Lookup::Stale(_));
        metrics::count(
            if hit {
                metrics::Counter::CacheHits
            } else {
                metrics::Counter::CacheMisses
            },
            1,
        );
        match lookup {
            Lookup::Hit(stored) | Lookup::Stale(stored) => {
                let status = self.write_stored(connection, &stored, if_none_match, context, true);
                let line = RequestLine::Raw(head_bytes, head);
                self.access_log(py, connection, &line, status, stored.body.len());
                CacheLookup::Answered(keep_or_close(context.keep_alive))
            }
            Lookup::Wait if self.may_park => CacheLookup::Parked,
            // Not replayable (its body was consumed as it arrived): the
            // handler answers it, uncached.
            Lookup::Wait => CacheLookup::Handler(None),
            Lookup::Pass if !may_fill => CacheLookup::Handler(None),
            Lookup::Fill | Lookup::Refresh(_) | Lookup::Pass => {
                let fill = fill();
                match router.shared_level(policy.route) {
                    Some(level) => {
                        match self
                            .answer_from_shared_level(py, connection, router, level, &fill, context)
                        {
                            Some(status) => {
                                let line = RequestLine::Raw(head_bytes, head);
                                self.access_log(py, connection, &line, status, 0);
                                CacheLookup::Answered(keep_or_close(context.keep_alive))
                            }
                            None => CacheLookup::Handler(Some(fill)),
                        }
                    }
                    _ => CacheLookup::Handler(Some(fill)),
                }
            }
        }
    }

    /// Asks the route's shared second level for a miss's key; an answer
    /// found there is stored here too and written. Returns its status.
    fn answer_from_shared_level<W: ResponseWriter>(
        &self,
        py: Python<'_>,
        connection: &mut W,
        router: &Router,
        level: &Py<PyAny>,
        fill: &CacheFill,
        context: &ResponseContext<'_>,
    ) -> Option<u16> {
        let found = level
            .bind(py)
            .call_method1(pyo3::intern!(py, "get"), (fill.key.shared_name(),));
        let found = match found {
            Ok(found) if found.is_none() => return None,
            Ok(found) => found,
            Err(error) => {
                self.log_error(py, "the shared cache level failed", Some(error));
                return None;
            }
        };
        let bytes = found.cast::<PyBytes>().ok()?;
        // Only answers that do not vary are shared (the shared name is the
        // primary key): one that varies, from another build, is no hit.
        if memchr::memmem::find(bytes.as_bytes(), b"\nVary:").is_some()
            || memchr::memmem::find(bytes.as_bytes(), b"\nvary:").is_some()
        {
            return None;
        }
        let fields: Vec<(&[u8], &[u8])> = header_fields(&fill.request_head).collect();
        let done = router.response_cache.borrow_mut().complete_fill(
            &fill.policy,
            &fill.key,
            Some(bytes.as_bytes()),
            &fields,
            self.now,
        );
        self.woken.borrow_mut().extend(done.waiters);
        let stored = done.stored?;
        Some(self.write_stored(connection, &stored, None, context, true))
    }

    /// Puts an answer a handler just gave into the route's shared second
    /// level, for `ttl_seconds`.
    fn share_answer(
        &self,
        py: Python<'_>,
        level: &Py<PyAny>,
        fill: &CacheFill,
        rendered: &[u8],
        ttl_seconds: f64,
    ) {
        let bytes = PyBytes::new(py, rendered);
        let result = level.bind(py).call_method1(
            pyo3::intern!(py, "set"),
            (fill.key.shared_name(), bytes, ttl_seconds),
        );
        if let Err(error) = result {
            self.log_error(py, "the shared cache level failed", Some(error));
        }
    }

    /// Writes a stored answer (a 304 when the request's `If-None-Match`
    /// names its `ETag`), with its `Age` when `from_cache`; returns the
    /// status sent.
    fn write_stored<W: ResponseWriter>(
        &self,
        connection: &mut W,
        stored: &Rc<Stored>,
        if_none_match: Option<&[u8]>,
        context: &ResponseContext<'_>,
        from_cache: bool,
    ) -> u16 {
        let out = connection.output();
        let not_modified = !stored.not_modified_head.is_empty()
            && if_none_match.is_some_and(|candidates| etag_list_matches(candidates, &stored.etag));
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
                connection.set_body(Some(OutgoingBody::Shared {
                    data: stored.body.clone(),
                    offset: 0,
                    end: stored.body.len(),
                }));
            }
        }
        stored.status
    }

    /// The handler of a cache fill answered (`answer` says where its whole
    /// response is). Stores it if it may be, wakes the requests parked on
    /// its key, and answers with the stale entry instead when a refresh
    /// failed and its answer has not left yet. `outcome` is what the
    /// response did to the connection.
    pub(crate) fn complete_cache_fill<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
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
                if !connection.has_body() && start <= connection.output().len() =>
            {
                Some(start)
            }
            _ => None,
        };
        let rendered = match answer {
            FillAnswer::Recorded(bytes) => Some(bytes),
            _ => start.map(|start| &connection.output()[start..]),
        };
        let router = self.router.bind(py).borrow();
        let fields: Vec<(&[u8], &[u8])> = header_fields(&fill.request_head).collect();
        let done = router.response_cache.borrow_mut().complete_fill(
            &fill.policy,
            &fill.key,
            rendered,
            &fields,
            self.now,
        );
        if let (Some(level), Some(stored), Some(rendered)) = (
            router.shared_level(fill.policy.route),
            done.stored.as_ref().filter(|stored| stored.vary.is_empty()),
            rendered,
        ) {
            let ttl = stored.expires.saturating_duration_since(self.now);
            self.share_answer(py, level, &fill, rendered, ttl.as_secs_f64());
        }
        drop(router);
        self.woken.borrow_mut().extend(done.waiters);
        // The stale answer instead of a failed refresh; or the stored answer
        // instead of the handler's own bytes when it gained an `ETag`, so the
        // first answer already carries the validator the later ones do.
        let instead = match (done.answer_instead, done.stored) {
            (Some(stale), _) => Some((stale, true)),
            (None, Some(stored)) if stored.etag_added => Some((stored, false)),
            _ => None,
        };
        if let (Some((answer, from_cache)), Some(start)) = (instead, start) {
            connection.output().truncate(start);
            let context = ResponseContext {
                date_line: self.date.header_line(),
                head_only: false,
                keep_alive: matches!(outcome, Outcome::KeepAlive),
                http10: fill.http10,
                request_head: &[],
                allow: None,
            };
            self.write_stored(connection, &answer, None, &context, from_cache);
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
