//! The response cache on the dispatch path (the rules are in src/cache/).
//!
//! Before a cached route's handler is called, [`Core::look_up_cached`]
//! answers from the cache (a hit, a stale answer, a 304) through the
//! request's response writer, whatever its protocol; parks the request
//! (another request of its key is being answered: single flight); or lets
//! the handler run with a [`CacheFill`] to complete, the writer recording
//! its answer as values. Once that handler's response is written,
//! [`Core::complete_cache_fill`] stores the recording, and wakes the parked
//! requests of its key.
//!
//! A parked request is named by its `StreamKey`: an HTTP/1.1 request
//! stays unconsumed in its connection's input and waking it means
//! processing that input again; an HTTP/2 stream keeps its head in its
//! request unit and is dispatched again (`crate::http2`). Either finds the
//! stored answer then (or goes to the handler when it could not be stored).
//!
//! An answer found past its TTL but within `stale=` is served at once, and
//! the request queues one refresh of the entry that runs detached from
//! every client (`refresh.rs`).

use std::rc::Rc;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use rush_proto::Method;

use super::incoming::IncomingRequest;
use super::refresh::RefreshJob;
use super::{Core, Outcome};
use crate::cache::{self, CacheFill, CachePolicy, Lookup, Recording, Stored};
use crate::exchange::{ResponseWriter, StreamKey};
use crate::http_write::ResponseContext;
use crate::metrics;
use crate::request::header_fields;
use crate::router::Router;
use crate::static_files::etag_list_matches;

use super::keep_or_close;

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
    /// `request.key` names the request should it be parked.
    pub(crate) fn look_up_cached<W: ResponseWriter>(
        &self,
        py: Python<'_>,
        connection: &mut W,
        request: IncomingRequest<'_>,
        router: &Router,
        policy: &Arc<CachePolicy>,
        context: &ResponseContext<'_>,
    ) -> CacheLookup {
        let IncomingRequest {
            key: stream,
            head_bytes,
            head,
            ..
        } = request;
        let line = request.line();
        if let Some(fill) = connection.detached_fill() {
            // A detached refresh: its lookup was made by the request that
            // found the stale answer. Another machine may have refreshed
            // the shared level already.
            if let Some(level) = router.shared_level(fill.policy.route) {
                if self
                    .answer_from_shared_level(py, connection, router, level, &fill, context)
                    .is_some()
                {
                    return CacheLookup::Answered(keep_or_close(context.keep_alive));
                }
            }
            *connection.recording() = Some(Box::new(Recording::for_fill(fill.policy.clone())));
            return CacheLookup::Handler(Some(fill));
        }
        if !matches!(head.method, Method::Get | Method::Head) {
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
        let https = origin
            .and_then(|origin| origin.https)
            .unwrap_or_else(|| connection.tls().is_some());
        let request = cache::RequestIdentity {
            https,
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
            stream.token(),
            self.now,
        );
        let hit = matches!(
            lookup,
            Lookup::Hit(_) | Lookup::Stale(_) | Lookup::Refresh(_)
        );
        metrics::count(
            if hit {
                metrics::Counter::CacheHits
            } else {
                metrics::Counter::CacheMisses
            },
            1,
        );
        let refresh = matches!(lookup, Lookup::Refresh(_));
        match lookup {
            Lookup::Hit(stored) | Lookup::Stale(stored) | Lookup::Refresh(stored) => {
                let status = self.write_stored(connection, &stored, if_none_match, context, true);
                self.access_log(py, connection, &line, status, stored.body.len());
                if refresh {
                    let fill = CacheFill {
                        policy: policy.clone(),
                        key,
                        http10: false,
                        request_head: head_bytes[..head.head_len.min(head_bytes.len())].into(),
                        refresh: true,
                    };
                    let job = RefreshJob::new(fill, head_bytes, head, connection, https);
                    self.refresh_jobs.borrow_mut().push(job);
                }
                CacheLookup::Answered(keep_or_close(context.keep_alive))
            }
            Lookup::Wait if self.may_park => CacheLookup::Parked,
            // Not replayable (its body was consumed as it arrived): the
            // handler answers it, uncached.
            Lookup::Wait => CacheLookup::Handler(None),
            Lookup::Pass if !may_fill => CacheLookup::Handler(None),
            Lookup::Fill | Lookup::Pass => {
                let fill = CacheFill {
                    policy: policy.clone(),
                    key,
                    http10: context.http10,
                    request_head: head_bytes[..head.head_len.min(head_bytes.len())].into(),
                    refresh: false,
                };
                if let Some(level) = router.shared_level(policy.route) {
                    let found = self
                        .answer_from_shared_level(py, connection, router, level, &fill, context);
                    if let Some(status) = found {
                        self.access_log(py, connection, &line, status, 0);
                        return CacheLookup::Answered(keep_or_close(context.keep_alive));
                    }
                }
                // The writer records the handler's answer from here on.
                *connection.recording() = Some(Box::new(Recording::for_fill(policy.clone())));
                CacheLookup::Handler(Some(fill))
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
        let recorded = Recording::from_http1(bytes.as_bytes());
        let fields: Vec<(&[u8], &[u8])> = header_fields(&fill.request_head).collect();
        let done = router.response_cache.borrow_mut().complete_fill(
            &fill.policy,
            &fill.key,
            recorded.as_ref(),
            &fields,
            self.now,
        );
        self.wake(done.waiters);
        let stored = done.stored?;
        Some(self.write_stored(connection, &stored, None, context, true))
    }

    /// Wakes the parked requests a completed fill names (by token).
    pub(crate) fn wake(&self, waiters: Vec<u64>) {
        let mut woken = self.woken.borrow_mut();
        woken.extend(waiters.into_iter().map(StreamKey::from_token));
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
        let not_modified = !stored.not_modified_fields.is_empty()
            && if_none_match.is_some_and(|candidates| etag_list_matches(candidates, &stored.etag));
        let age = from_cache.then(|| {
            self.now
                .saturating_duration_since(stored.stored_at)
                .as_secs()
        });
        connection.send_stored(stored, not_modified, age, context);
        if not_modified {
            304
        } else {
            stored.status
        }
    }

    /// The handler of a cache fill answered, its answer recorded by the
    /// writer. Stores it if it may be and wakes the requests parked on its
    /// key. `rewrite_from` is where the response began when it was
    /// answered within the dispatch: when the cache added an `ETag`, the
    /// stored answer replaces the handler's own bytes there if the writer
    /// can still take them back, so the first answer already carries the
    /// validator the later ones do. `outcome` is what the response did to
    /// the connection.
    pub(crate) fn complete_cache_fill<W: ResponseWriter>(
        &mut self,
        py: Python<'_>,
        connection: &mut W,
        fill: Option<CacheFill>,
        rewrite_from: Option<usize>,
        outcome: &Outcome,
    ) {
        let Some(fill) = fill else {
            return;
        };
        let recorded = connection
            .recording()
            .take()
            .and_then(|recording| recording.finished());
        let router = self.router.bind(py).borrow();
        let fields: Vec<(&[u8], &[u8])> = header_fields(&fill.request_head).collect();
        let done = router.response_cache.borrow_mut().complete_fill(
            &fill.policy,
            &fill.key,
            recorded.as_ref(),
            &fields,
            self.now,
        );
        if let (Some(level), Some(stored)) = (
            router.shared_level(fill.policy.route),
            done.stored.as_ref().filter(|stored| stored.vary.is_empty()),
        ) {
            let ttl = stored.expires.saturating_duration_since(self.now);
            self.share_answer(py, level, &fill, &stored.to_http1(), ttl.as_secs_f64());
        }
        drop(router);
        self.wake(done.waiters);
        if fill.refresh && done.stored.is_none() {
            let why = match &recorded {
                Some(recorded) => format!("status {}", recorded.status),
                None => "no answer that can be stored".to_owned(),
            };
            let kept = if done.kept_stale {
                "the stale answer stays"
            } else {
                "nothing stored"
            };
            self.log_warning(py, &format!("a cache refresh failed ({why}): {kept}"));
        }
        let Some(stored) = done.stored.filter(|stored| stored.etag_added) else {
            return;
        };
        let Some(start) = rewrite_from.filter(|&start| connection.retractable(start)) else {
            return;
        };
        connection.retract(start);
        let context = ResponseContext {
            date_line: self.date.header_line(),
            head_only: false,
            keep_alive: matches!(outcome, Outcome::KeepAlive),
            http10: fill.http10,
            request_head: &[],
            allow: None,
        };
        self.write_stored(connection, &stored, None, &context, false);
    }
}
