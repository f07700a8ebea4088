//! A worker's cached answers and the fills in progress: what a lookup
//! decides and what a finished handler leaves behind.
//!
//! How it works:
//! * Entries live in a quick_cache store weighed by their bytes (S3-FIFO
//!   eviction), so any number of distinct keys costs at most the bound.
//!   An entry is an answer or a *pass* (hit-for-miss): a key whose last
//!   answer could not be stored goes to the handler without waiting for
//!   other requests of the same key, for a while.
//! * A miss starts a *fill*: the request goes to the handler, and other
//!   requests for the same key that arrive while it runs wait for it
//!   (single flight) instead of calling the handler too. They are woken
//!   when the fill completes and look up again: a hit, or, when the answer
//!   could not be stored, a pass. A fill not completed within the policy's
//!   lock timeout (a hung handler, a client that left) releases its
//!   waiters to the handler, as nginx's `proxy_cache_lock_timeout` does.
//! * An expired answer still inside its `stale` window is served to every
//!   request at once; the first of them also starts one refresh of the
//!   entry (a fill that no request waits for: the dispatcher runs it
//!   detached from every client, src/dispatch/refresh.rs). When the
//!   refresh fails (a 5xx, an exception, a timeout), the stale answer stays
//!   and is served until its window ends (`stale-if-error`).
//! * Every answer carries the invalidation generation of its entry
//!   (`generations.rs`); an answer from an older generation is absent.
//! * An answer whose `Vary` names request fields is stored as a variant,
//!   as Varnish and nginx do: its primary key holds a [`Slot::Varies`]
//!   marker with the field names, and the answer sits under the primary key
//!   plus the request's values of those fields (key.rs, `push_variant`).
//!   A lookup that finds the marker adds the request's own values and looks
//!   again. At most [`MAX_VARIANTS`] variants are stored per primary key.
//!
//! Waiters are opaque numbers (the dispatcher's `StreamKey` tokens: a
//! connection and its stream, an HTTP/1.1 request or an HTTP/2 stream);
//! this module never touches connections.

use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quick_cache::{DefaultHashBuilder, Lifecycle, Weighter};

use super::generations;
use super::key::{push_variant, CacheKey};
use super::stored::{cacheable, Recording, Stored};
use super::CachePolicy;

/// How long at most a key whose answer could not be stored skips single
/// flight (Varnish's hit-for-miss; its default is 120 s too).
const PASS_TIME: Duration = Duration::from_secs(120);

/// The most variants (answers for other values of the fields a `Vary`
/// names) stored under one primary key; past it, new variants are not
/// stored. A bound of its own, so that one URL answered per `User-Agent`
/// cannot take the whole cache from the others.
pub const MAX_VARIANTS: u16 = 32;

/// The request's header fields, as split once by the dispatcher.
pub type Fields<'h> = &'h [(&'h [u8], &'h [u8])];

/// What the store holds for a key.
#[derive(Clone)]
enum Slot {
    Answer(Rc<Stored>),
    /// Hit-for-miss: call the handler without waiting for other requests.
    Pass {
        until: Instant,
        generation: u64,
    },
    /// Under a primary key: its answers vary on these fields (lowercase,
    /// sorted); each variant is under its own key. `variants` counts the
    /// variants stored since the marker was.
    Varies {
        names: Rc<[Box<[u8]>]>,
        variants: Rc<std::cell::Cell<u16>>,
    },
}

/// A fill in progress: the handler runs for one request of the key.
struct Fill {
    /// After this, waiting requests stop waiting.
    lock_until: Instant,
    /// Requests that wait for this fill.
    waiters: Vec<u64>,
    /// The entry's generation when the fill started.
    generation: u64,
}

/// What the cache says about a request.
pub enum Lookup {
    /// A fresh answer.
    Hit(Rc<Stored>),
    /// An expired answer inside its stale window, while a refresh of it
    /// runs.
    Stale(Rc<Stored>),
    /// An expired answer inside its stale window, to be served at once: a
    /// refresh of it is due (a fill was started; the caller runs it
    /// detached from this request and completes it).
    Refresh(Rc<Stored>),
    /// A miss: this request's answer fills the entry; others wait for it.
    Fill,
    /// A miss that waits for another request's fill (the request was
    /// added to its waiters).
    Wait,
    /// Call the handler without single flight; store its answer if it may
    /// be (hit-for-miss, or a fill past its lock timeout).
    Pass,
}

/// What a completed fill leaves for the caller to do.
pub struct FillDone {
    /// Requests to wake: they look the key up again.
    pub waiters: Vec<u64>,
    /// The answer was not stored and a stale one stays (a failed refresh).
    pub kept_stale: bool,
    /// The answer as stored, if it was.
    pub stored: Option<Rc<Stored>>,
}

/// Weighs an entry by the bytes it holds.
#[derive(Clone)]
struct ByBytes;

impl Weighter<Vec<u8>, Slot> for ByBytes {
    fn weight(&self, key: &Vec<u8>, slot: &Slot) -> u64 {
        let held = match slot {
            Slot::Answer(stored) => stored.weight(),
            Slot::Pass { .. } => 0,
            Slot::Varies { names, .. } => names.iter().map(|name| name.len()).sum(),
        };
        (key.len() + held + 96) as u64
    }
}

/// Counts the entries the bound pushed out.
#[derive(Clone, Default)]
struct CountEvictions;

impl Lifecycle<Vec<u8>, Slot> for CountEvictions {
    type RequestState = u64;

    fn on_evict(&self, evicted: &mut u64, _key: Vec<u8>, _slot: Slot) {
        *evicted += 1;
    }
}

type Store = quick_cache::unsync::Cache<Vec<u8>, Slot, ByBytes, DefaultHashBuilder, CountEvictions>;

/// Counters of a worker's cache, for `app.cache.stats()`: written by the
/// loop thread only, readable from any thread (a WSGI app's pool threads).
#[derive(Default, Debug)]
pub struct CacheCounters {
    pub hits: AtomicU64,
    pub stale_hits: AtomicU64,
    pub misses: AtomicU64,
    /// Requests that waited for another request's fill.
    pub coalesced: AtomicU64,
    pub evictions: AtomicU64,
    /// Gauges, updated after each change: entries, their bytes, fills in
    /// progress.
    pub entries: AtomicU64,
    pub bytes: AtomicU64,
    pub fills: AtomicU64,
}

impl CacheCounters {
    /// Every counter by name.
    pub fn snapshot(&self) -> [(&'static str, u64); 8] {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        [
            ("hits", read(&self.hits)),
            ("stale_hits", read(&self.stale_hits)),
            ("misses", read(&self.misses)),
            ("coalesced", read(&self.coalesced)),
            ("evictions", read(&self.evictions)),
            ("entries", read(&self.entries)),
            ("bytes", read(&self.bytes)),
            ("fills", read(&self.fills)),
        ]
    }
}

/// Adds to a counter only this thread writes (no locked instruction).
fn add(counter: &AtomicU64, count: u64) {
    counter.store(counter.load(Ordering::Relaxed) + count, Ordering::Relaxed);
}

/// A worker's cached answers, bounded by bytes, and its fills in progress.
pub struct ResponseCache {
    entries: Store,
    fills: HashMap<Vec<u8>, Fill>,
    pub counters: Arc<CacheCounters>,
}

impl ResponseCache {
    /// A cache bounded to `max_bytes` that counts into `counters`.
    pub fn new(max_bytes: u64, counters: Arc<CacheCounters>) -> ResponseCache {
        ResponseCache {
            entries: Store::with(
                1024,
                max_bytes.max(1),
                ByBytes,
                DefaultHashBuilder::default(),
                CountEvictions,
            ),
            fills: HashMap::new(),
            counters,
        }
    }

    /// Decides what request `waiter` gets for `key`.
    /// `Fill` and `Refresh` oblige the caller to [`complete_fill`] later.
    ///
    /// [`complete_fill`]: ResponseCache::complete_fill
    /// Sets `key.generation`, and makes `key` the variant's key when the
    /// primary key's answers vary (`fields` are the request's). A request
    /// that may not fill (HEAD: it has no body to store) gets `Pass` where
    /// another would fill.
    pub fn look_up(
        &mut self,
        policy: &CachePolicy,
        key: &mut CacheKey,
        fields: Fields<'_>,
        may_fill: bool,
        waiter: u64,
        now: Instant,
    ) -> Lookup {
        let generation = generations::of_entry(policy.route, key.entry());
        key.generation = generation;
        key.reset_to_primary();
        // One probe for most keys; a second, under the variant's key, only
        // where the primary key holds a `Vary` marker.
        let slot = match self.entries.get(&key.bytes) {
            Some(Slot::Varies { names, .. }) => {
                let names = names.clone();
                push_variant(&mut key.bytes, &names, fields.iter().copied());
                self.entries.get(&key.bytes).cloned()
            }
            other => other.cloned(),
        };
        // A fresh hit needs nothing else (not even the fills' map).
        if let Some(Slot::Answer(stored)) = &slot {
            if stored.generation == generation && now < stored.expires {
                add(&self.counters.hits, 1);
                return Lookup::Hit(stored.clone());
            }
        }
        let filling = !self.fills.is_empty()
            && self
                .fills
                .get(&key.bytes)
                .is_some_and(|fill| now < fill.lock_until);
        match &slot {
            Some(Slot::Answer(stored))
                if stored.generation == generation && now < stored.stale_until =>
            {
                let stored = stored.clone();
                if filling {
                    add(&self.counters.stale_hits, 1);
                    return Lookup::Stale(stored);
                }
                // Served stale at once all the same; the refresh is a GET
                // of its own, so even a HEAD or conditional request may
                // start it.
                add(&self.counters.stale_hits, 1);
                self.start_fill(key, policy, generation, now);
                return Lookup::Refresh(stored);
            }
            Some(Slot::Pass {
                until,
                generation: pass_generation,
            }) if *pass_generation == generation && now < *until => {
                add(&self.counters.misses, 1);
                return Lookup::Pass;
            }
            _ => {}
        }
        add(&self.counters.misses, 1);
        if filling {
            add(&self.counters.coalesced, 1);
            if let Some(fill) = self.fills.get_mut(&key.bytes) {
                fill.waiters.push(waiter);
            }
            return Lookup::Wait;
        }
        if !may_fill {
            return Lookup::Pass;
        }
        self.start_fill(key, policy, generation, now);
        Lookup::Fill
    }

    fn start_fill(&mut self, key: &CacheKey, policy: &CachePolicy, generation: u64, now: Instant) {
        let lock_until = now + policy.lock_timeout;
        // A fill past its lock timeout that was never completed (its client
        // left) is taken over; its waiters wait for this one.
        let fill = self.fills.entry(key.bytes.clone()).or_insert(Fill {
            lock_until,
            waiters: Vec::new(),
            generation,
        });
        fill.lock_until = lock_until;
        fill.generation = generation;
        self.update_gauges();
    }

    /// The handler of a `Fill`, `Refresh` or `Pass` answered: `recorded` is
    /// its whole answer as recorded (`None` when there is none that can be
    /// stored: a file or streamed body, an exception), `fields` the header
    /// fields of the request it
    /// answered (what its `Vary` names are read from). The answer is stored
    /// under the generation of the lookup: an invalidation while the
    /// handler ran makes it out of date.
    pub fn complete_fill(
        &mut self,
        policy: &CachePolicy,
        key: &CacheKey,
        recorded: Option<&Recording>,
        fields: Fields<'_>,
        now: Instant,
    ) -> FillDone {
        let generation = key.generation;
        let waiters = self
            .fills
            .remove(&key.bytes)
            .map(|fill| fill.waiters)
            .unwrap_or_default();
        let stored = recorded.and_then(|recorded| cacheable(policy, recorded, now, generation));
        if let Some(stored) = stored {
            let stored = Rc::new(stored);
            let kept = self.store_answer(key.primary(), &stored, fields);
            return FillDone {
                waiters,
                kept_stale: false,
                stored: kept.then_some(stored),
            };
        }
        // Not stored. A failed refresh keeps the stale answer serving; any
        // other answer makes the key a pass for a while.
        let failed = recorded.is_none_or(|recorded| recorded.status >= 500);
        if let Some(Slot::Answer(stale)) = self.entries.peek(&key.bytes) {
            if failed && stale.generation == generation && now < stale.stale_until {
                self.update_gauges();
                return FillDone {
                    waiters,
                    kept_stale: true,
                    stored: None,
                };
            }
        }
        let until = now + policy.ttl.min(PASS_TIME);
        self.insert(key.bytes.clone(), Slot::Pass { until, generation });
        FillDone {
            waiters,
            kept_stale: false,
            stored: None,
        }
    }

    /// Stores an answer under its primary key, or, when it varies, as the
    /// variant of the request's values (under the marker of the fields it
    /// varies on). Returns false when the variant bound left it out.
    fn store_answer(&mut self, primary: &[u8], stored: &Rc<Stored>, fields: Fields<'_>) -> bool {
        if stored.vary.is_empty() {
            self.insert(primary.to_vec(), Slot::Answer(stored.clone()));
            return true;
        }
        let marker = match self.entries.peek(primary) {
            Some(Slot::Varies { names, variants }) if names[..] == stored.vary[..] => {
                Some((names.clone(), variants.clone()))
            }
            _ => None,
        };
        let (names, variants) = match marker {
            Some(marker) => marker,
            None => {
                let names: Rc<[Box<[u8]>]> = stored.vary.iter().cloned().collect();
                let variants = Rc::new(std::cell::Cell::new(0));
                let slot = Slot::Varies {
                    names: names.clone(),
                    variants: variants.clone(),
                };
                self.insert(primary.to_vec(), slot);
                (names, variants)
            }
        };
        let mut variant = primary.to_vec();
        push_variant(&mut variant, &names, fields.iter().copied());
        if self.entries.peek(&variant).is_none() {
            if variants.get() >= MAX_VARIANTS {
                return false;
            }
            variants.set(variants.get() + 1);
        }
        self.insert(variant, Slot::Answer(stored.clone()));
        true
    }

    fn insert(&mut self, key: Vec<u8>, slot: Slot) {
        let mut evicted = 0;
        self.entries.insert_with_lifecycle(key, slot, &mut evicted);
        add(&self.counters.evictions, evicted);
        self.update_gauges();
    }

    fn update_gauges(&self) {
        let counters = &self.counters;
        counters
            .entries
            .store(self.entries.len() as u64, Ordering::Relaxed);
        counters
            .bytes
            .store(self.entries.weight(), Ordering::Relaxed);
        counters
            .fills
            .store(self.fills.len() as u64, Ordering::Relaxed);
    }

    /// Releases the waiters of fills past their lock timeout (to the
    /// handler: the key becomes a pass unless an answer is there); returns
    /// the requests to wake. Called from the loop's periodic sweep.
    pub fn release_overdue_fills(&mut self, now: Instant) -> Vec<u64> {
        let mut woken = Vec::new();
        let overdue: Vec<Vec<u8>> = self
            .fills
            .iter()
            .filter(|(_, fill)| fill.lock_until <= now)
            .map(|(key, _)| key.clone())
            .collect();
        for key in overdue {
            let Some(fill) = self.fills.remove(&key) else {
                continue;
            };
            if fill.waiters.is_empty() {
                continue;
            }
            woken.extend(fill.waiters);
            if !matches!(self.entries.peek(&key), Some(Slot::Answer(_))) {
                let slot = Slot::Pass {
                    until: now + PASS_TIME,
                    generation: fill.generation,
                };
                let mut evicted = 0;
                self.entries.insert_with_lifecycle(key, slot, &mut evicted);
                add(&self.counters.evictions, evicted);
            }
        }
        self.update_gauges();
        woken
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn weight(&self) -> u64 {
        self.entries.weight()
    }

    /// Fills in progress (for tests and stats).
    pub fn fills(&self) -> usize {
        self.fills.len()
    }
}
