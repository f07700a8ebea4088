//! Name resolution off the loop thread.
//!
//! `getaddrinfo` blocks, and a blocked loop stalls every connection of the
//! worker, so lookups run on a few threads of their own (offload.rs). The
//! loop sends a job (connection key, a serial number, host); a thread
//! resolves it and wakes the loop with the answer. The loop matches
//! answers to connections by key and serial, so an answer for a connection
//! that closed meanwhile (its key reused) is dropped.
//!
//! A blocked `getaddrinfo` cannot be cancelled; the loop's deadline answers
//! the client (504) and the late answer is dropped. Answers are cached for
//! [`CACHE_TTL`] (getaddrinfo does not tell the record's TTL, so a short
//! fixed one stands in), at most [`CACHE_ENTRIES`] names.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::offload::Offload;

/// Resolver threads per worker: enough that one slow name does not hold up
/// the others.
const THREADS: usize = 4;
/// How long an answer is reused.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(30);
/// Most names cached; the cache is emptied when it fills (simple, and rare).
const CACHE_ENTRIES: usize = 4096;

/// A finished lookup: for which connection, and the addresses (or the error text).
pub(crate) struct Answer {
    pub(crate) key: usize,
    pub(crate) serial: u64,
    pub(crate) host: String,
    pub(crate) result: Result<Vec<IpAddr>, String>,
}

struct Job {
    key: usize,
    serial: u64,
    host: String,
}

pub(crate) struct Resolver {
    lookups: Offload<Job, Answer>,
    cache: HashMap<String, (Vec<IpAddr>, Instant)>,
}

impl Resolver {
    /// Starts the threads; each answer wakes the loop through `waker`.
    pub(crate) fn start(waker: Arc<mio::Waker>) -> std::io::Result<Resolver> {
        Ok(Resolver {
            lookups: Offload::start("rush-dns", THREADS, waker, resolve)?,
            cache: HashMap::new(),
        })
    }

    /// The cached addresses of `host`, if fresh. An IP literal is its own answer.
    pub(crate) fn cached(&mut self, host: &str, now: Instant) -> Option<Vec<IpAddr>> {
        if let Ok(address) = host.parse::<IpAddr>() {
            return Some(vec![address]);
        }
        match self.cache.get(host) {
            Some((addresses, expires)) if now < *expires => Some(addresses.clone()),
            _ => None,
        }
    }

    /// Asks a thread to resolve `host` for connection `key`.
    pub(crate) fn submit(&self, key: usize, serial: u64, host: &str) {
        self.lookups.submit(Job {
            key,
            serial,
            host: host.to_owned(),
        });
    }

    /// Takes the finished answers, caching the successful ones.
    pub(crate) fn take_answers(&mut self, now: Instant) -> Vec<Answer> {
        let answers = self.lookups.take_results();
        for answer in &answers {
            if let Ok(addresses) = &answer.result {
                if self.cache.len() >= CACHE_ENTRIES {
                    self.cache.clear();
                }
                self.cache
                    .insert(answer.host.clone(), (addresses.clone(), now + CACHE_TTL));
            }
        }
        answers
    }
}

/// One lookup, on a resolver thread.
fn resolve(job: Job) -> Answer {
    // Port 0: only the addresses matter; the caller adds its port.
    let result = (job.host.as_str(), 0)
        .to_socket_addrs()
        .map(|addresses| {
            addresses
                .map(|address: SocketAddr| address.ip())
                .collect::<Vec<_>>()
        })
        .map_err(|error| error.to_string())
        .and_then(|addresses| {
            if addresses.is_empty() {
                Err("no addresses".to_owned())
            } else {
                Ok(addresses)
            }
        });
    Answer {
        key: job.key,
        serial: job.serial,
        host: job.host,
        result,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_arrive_through_the_waker_and_are_cached() {
        let mut poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(7)).unwrap());
        let mut resolver = Resolver::start(waker).unwrap();
        let now = Instant::now();
        assert_eq!(
            resolver.cached("127.0.0.1", now),
            Some(vec!["127.0.0.1".parse().unwrap()])
        );
        assert_eq!(resolver.cached("localhost", now), None);
        resolver.submit(3, 42, "localhost");
        resolver.submit(4, 43, "no-such-host.invalid");
        let mut answers = Vec::new();
        let mut events = mio::Events::with_capacity(4);
        while answers.len() < 2 {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            assert!(!events.is_empty(), "no answer within 10 s");
            answers.extend(resolver.take_answers(now));
        }
        answers.sort_by_key(|answer| answer.key);
        assert_eq!((answers[0].key, answers[0].serial), (3, 42));
        assert!(answers[0]
            .result
            .as_ref()
            .unwrap()
            .iter()
            .any(IpAddr::is_loopback));
        assert!(answers[1].result.is_err());
        // Answered names are cached for the TTL, failures are not.
        assert!(resolver.cached("localhost", now).is_some());
        assert!(resolver.cached("localhost", now + CACHE_TTL).is_none());
        assert!(resolver.cached("no-such-host.invalid", now).is_none());
    }
}
