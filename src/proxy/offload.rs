//! Blocking work off the loop thread: a few threads, a job channel, and a
//! queue of results that wakes the loop.
//!
//! The proxy loop must never block, yet some of its work does: a name
//! lookup (`getaddrinfo`, resolver.rs) or a bcrypt check (auth.rs). Each
//! such kind of work gets an [`Offload`]: the loop sends a job over a
//! channel; one of the threads takes it, runs the work, pushes the result on
//! a shared queue and wakes the loop through a `mio::Waker` (an eventfd in
//! the loop's epoll set); the loop takes the results on its next pass. The
//! jobs carry whatever the loop needs to match a result to its connection.
//!
//! The threads start when the proxy loop is built, which happens in the
//! worker after fork (a forked child inherits only the forking thread).
//! Dropping an `Offload` closes the channel: each thread ends after its
//! current job. They are not joined (a lookup may block for a long time),
//! and they own nothing the loop needs.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;

/// Threads that run `work` on jobs of type `J`, giving results of type `R`.
pub(crate) struct Offload<J, R> {
    jobs: Option<Sender<J>>,
    results: Arc<Mutex<Vec<R>>>,
}

impl<J: Send + 'static, R: Send + 'static> Offload<J, R> {
    /// Starts `threads` threads named `name-N`; each result wakes the loop
    /// through `waker`.
    pub(crate) fn start(
        name: &str,
        threads: usize,
        waker: Arc<mio::Waker>,
        work: fn(J) -> R,
    ) -> std::io::Result<Offload<J, R>> {
        let (jobs, receiver) = channel::<J>();
        let receiver = Arc::new(Mutex::new(receiver));
        let results = Arc::new(Mutex::new(Vec::new()));
        for index in 0..threads {
            let receiver = Arc::clone(&receiver);
            let results = Arc::clone(&results);
            let waker = Arc::clone(&waker);
            thread::Builder::new()
                .name(format!("{name}-{index}"))
                .spawn(move || run_jobs(&receiver, &results, &waker, work))?;
        }
        Ok(Offload {
            jobs: Some(jobs),
            results,
        })
    }

    /// Hands `job` to a thread; false when the threads are gone.
    pub(crate) fn submit(&self, job: J) -> bool {
        self.jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok())
    }

    /// The results finished since the last call.
    pub(crate) fn take_results(&self) -> Vec<R> {
        std::mem::take(&mut *self.results.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl<J, R> Drop for Offload<J, R> {
    fn drop(&mut self) {
        self.jobs = None;
    }
}

fn run_jobs<J, R>(
    receiver: &Mutex<Receiver<J>>,
    results: &Mutex<Vec<R>>,
    waker: &mio::Waker,
    work: fn(J) -> R,
) {
    loop {
        let job = {
            let Ok(receiver) = receiver.lock() else {
                return;
            };
            match receiver.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        };
        let result = work(job);
        if let Ok(mut results) = results.lock() {
            results.push(result);
        }
        let _ = waker.wake();
    }
}
