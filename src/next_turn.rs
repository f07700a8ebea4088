//! Fairness between the connections of one worker: a connection that used
//! up its share of a turn of the loop (`READ_BUDGET_PER_TURN` bytes read)
//! stops, and is driven again on the next turn, after every other
//! connection with work had its own.
//!
//! The loop's epoll set is edge-triggered, so a connection that stops
//! reading while its socket (or its TLS session) still holds input would
//! never be reported again. [`NextTurn`] keeps such connections and wakes
//! the loop through an eventfd (`mio::Waker`) in the same epoll set, so the
//! next wait returns at once, whether the worker runs its own loop or
//! asyncio drives it (asyncio sees the epoll fd readable).

/// Connections to drive again on the next turn of the loop.
pub(crate) struct NextTurn {
    keys: Vec<usize>,
    waker: Option<mio::Waker>,
    /// The waker was woken for the keys held now.
    woken: bool,
}

impl NextTurn {
    pub(crate) fn new(waker: Option<mio::Waker>) -> NextTurn {
        NextTurn {
            keys: Vec::new(),
            waker,
            woken: false,
        }
    }

    /// Connection `key` has more to do than one turn allows.
    pub(crate) fn push(&mut self, key: usize) {
        if !self.keys.contains(&key) {
            self.keys.push(key);
        }
        if !self.woken {
            if let Some(waker) = &self.waker {
                // An eventfd write: it fails only if the counter is full,
                // and then a wake-up is pending anyway.
                let _ = waker.wake();
            }
            self.woken = true;
        }
    }

    /// The connections pushed since the last call (taken at the start of a
    /// turn: those pushed during it wait for the next one).
    pub(crate) fn take(&mut self) -> Vec<usize> {
        self.woken = false;
        std::mem::take(&mut self.keys)
    }
}
