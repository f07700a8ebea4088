//! Password checks off the loop thread, and the credentials they verified.
//!
//! A bcrypt check costs tens of milliseconds of CPU by design; run on the
//! loop, every request with credentials stalled every connection of the
//! worker, and a few junk requests a second stalled it for good. So the
//! loop looks a request's credentials up in a short-lived cache of those
//! verified before (squid's `credentialsttl`), and only on a miss sends a
//! job to a small pool of threads (offload.rs). A thread verifies and wakes
//! the loop through the proxy's `mio::Waker` (the one the resolver uses);
//! the loop matches verdicts to connections by key and serial, as it does
//! resolver answers.
//!
//! Checks in flight are capped per worker ([`MAX_IN_FLIGHT`]): past it a
//! request is refused at once with 503 rather than queued, because the pool
//! cannot keep up with a flood (50 junk requests a second outpace two
//! threads), so a queue would only grow, and every user not in the cache
//! would wait behind all of it. A 503 costs nothing and says "retry";
//! users already verified are answered from the cache meanwhile.
//!
//! Only successes are cached, keyed by the SHA-256 of the user and password
//! (never the password itself), for [`CACHE_TTL`], at most
//! [`CACHE_ENTRIES`] entries.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::offload::Offload;

/// Verifying threads per worker: a worker's loop is one core's work, and a
/// second thread keeps one slow check from holding up the next.
const THREADS: usize = 2;
/// Most checks queued or running per worker; past it, 503.
pub(crate) const MAX_IN_FLIGHT: usize = 8;
/// How long verified credentials are taken without a new check.
pub(crate) const CACHE_TTL: Duration = Duration::from_secs(60);
/// Most credentials cached; the cache is emptied when it fills (simple,
/// and only a crowd of distinct valid users would fill it).
const CACHE_ENTRIES: usize = 4096;

/// What identifies one user-and-password pair (its SHA-256).
pub(crate) type CredentialDigest = [u8; 32];

/// A check to run: `password` against the bcrypt `hash`.
pub(crate) struct Check {
    pub(crate) digest: CredentialDigest,
    pub(crate) password: Vec<u8>,
    pub(crate) hash: String,
    /// Against the stand-in hash (an unknown user): costs the same, never
    /// passes.
    pub(crate) stand_in: bool,
}

/// A finished check, for the connection that asked.
pub(crate) struct Verdict {
    pub(crate) key: usize,
    pub(crate) serial: u64,
    pub(crate) digest: CredentialDigest,
    pub(crate) valid: bool,
}

struct Job {
    key: usize,
    serial: u64,
    check: Check,
}

pub(crate) struct Verifier {
    checks: Offload<Job, Verdict>,
    in_flight: usize,
    verified: HashMap<CredentialDigest, Instant>,
}

impl Verifier {
    /// Starts the threads (in the worker, after fork); each verdict wakes
    /// the loop through `waker`.
    pub(crate) fn start(waker: Arc<mio::Waker>) -> std::io::Result<Verifier> {
        Ok(Verifier {
            checks: Offload::start("rush-auth", THREADS, waker, verify)?,
            in_flight: 0,
            verified: HashMap::new(),
        })
    }

    /// Whether these credentials were verified less than [`CACHE_TTL`] ago.
    pub(crate) fn is_verified(&self, digest: &CredentialDigest, now: Instant) -> bool {
        self.verified
            .get(digest)
            .is_some_and(|expires| now < *expires)
    }

    /// Whether another check may start now.
    pub(crate) fn has_room(&self) -> bool {
        self.in_flight < MAX_IN_FLIGHT
    }

    /// Hands `check` to a thread, for connection `key`.
    pub(crate) fn submit(&mut self, key: usize, serial: u64, check: Check) {
        if self.checks.submit(Job { key, serial, check }) {
            self.in_flight += 1;
        }
    }

    /// Takes the finished checks, caching the credentials found valid.
    pub(crate) fn take_verdicts(&mut self, now: Instant) -> Vec<Verdict> {
        let verdicts = self.checks.take_results();
        self.in_flight = self.in_flight.saturating_sub(verdicts.len());
        for verdict in verdicts.iter().filter(|verdict| verdict.valid) {
            if self.verified.len() >= CACHE_ENTRIES {
                self.verified.clear();
            }
            self.verified.insert(verdict.digest, now + CACHE_TTL);
        }
        verdicts
    }
}

/// One check, on a verifying thread.
fn verify(job: Job) -> Verdict {
    let matches = bcrypt::verify(&job.check.password, &job.check.hash).unwrap_or(false);
    Verdict {
        key: job.key,
        serial: job.serial,
        digest: job.check.digest,
        valid: matches && !job.check.stand_in,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(password: &str, hash: &str, digest: u8) -> Check {
        Check {
            digest: [digest; 32],
            password: password.as_bytes().to_vec(),
            hash: hash.to_owned(),
            stand_in: false,
        }
    }

    #[test]
    fn verdicts_arrive_through_the_waker_and_only_valid_ones_are_cached() {
        let mut poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(7)).unwrap());
        let mut verifier = Verifier::start(waker).unwrap();
        let hash = bcrypt::hash("right", 4).unwrap();
        verifier.submit(3, 42, check("right", &hash, 1));
        verifier.submit(4, 43, check("wrong", &hash, 2));
        assert_eq!(verifier.in_flight, 2);
        let now = Instant::now();
        let mut verdicts = Vec::new();
        let mut events = mio::Events::with_capacity(4);
        while verdicts.len() < 2 {
            poll.poll(&mut events, Some(Duration::from_secs(10)))
                .unwrap();
            assert!(!events.is_empty(), "no verdict within 10 s");
            verdicts.extend(verifier.take_verdicts(now));
        }
        verdicts.sort_by_key(|verdict| verdict.key);
        assert_eq!(
            (verdicts[0].key, verdicts[0].serial, verdicts[0].valid),
            (3, 42, true)
        );
        assert_eq!(
            (verdicts[1].key, verdicts[1].serial, verdicts[1].valid),
            (4, 43, false)
        );
        assert_eq!(verifier.in_flight, 0);
        assert!(verifier.is_verified(&[1; 32], now));
        assert!(!verifier.is_verified(&[1; 32], now + CACHE_TTL));
        assert!(!verifier.is_verified(&[2; 32], now));
    }

    #[test]
    fn checks_in_flight_are_capped() {
        let poll = mio::Poll::new().unwrap();
        let waker = Arc::new(mio::Waker::new(poll.registry(), mio::Token(7)).unwrap());
        let mut verifier = Verifier::start(waker).unwrap();
        let hash = bcrypt::hash("right", 4).unwrap();
        for key in 0..MAX_IN_FLIGHT {
            assert!(verifier.has_room());
            verifier.submit(key, 0, check("wrong", &hash, 0));
        }
        assert!(!verifier.has_room());
    }
}
