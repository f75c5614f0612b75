//! Things a sender keeps for a while (unfetched fd registrations, leases of
//! sent `memmap` files, pooled segments), let go on time even while
//! nothing is sent.
//!
//! An [`Expiring`] queue is touched under its lock by whoever sends, which
//! expires what fell due; and by one thread, started once the queue first
//! holds something, that sleeps until the earliest deadline or until it is
//! woken (an earlier deadline, the context's end), so an idle queue costs
//! no wake-ups. What expires is dropped outside the lock: dropping it may
//! close an fd, unlink a file or take another lock.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Instant;

use super::lock;

/// A queue whose entries fall due.
pub(crate) trait ExpiringQueue: Send + 'static {
    /// What leaves the queue, dropped outside its lock.
    type Expired: Send;

    /// Moves what is due at `now`, or over the queue's bounds, to `expired`.
    fn take_expired(&mut self, now: Instant, expired: &mut Vec<Self::Expired>);

    /// When the next entry falls due; `None` for an empty queue.
    fn next_deadline(&mut self) -> Option<Instant>;
}

/// A queue and the thread that expires its entries on time.
#[derive(Debug)]
pub(crate) struct Expiring<Q> {
    shared: Arc<Shared<Q>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_name: &'static str,
}

#[derive(Debug)]
struct Shared<Q> {
    state: Mutex<State<Q>>,
    wake: Condvar,
}

#[derive(Debug)]
struct State<Q> {
    queue: Q,
    closing: bool,
}

impl<Q: ExpiringQueue> Expiring<Q> {
    /// `queue`, expired by a thread named `thread_name` once it holds
    /// something.
    pub(crate) fn new(queue: Q, thread_name: &'static str) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    queue,
                    closing: false,
                }),
                wake: Condvar::new(),
            }),
            thread: Mutex::new(None),
            thread_name,
        }
    }

    /// Runs `change` on the queue, expires what is then due, and drops the
    /// expired entries and `change`'s result's leftovers after the lock is
    /// released; wakes the thread when the next deadline came earlier.
    pub(crate) fn update<R>(&self, change: impl FnOnce(&mut Q) -> R) -> R {
        let mut expired = Vec::new();
        let (result, wake) = {
            let mut state = lock(&self.shared.state);
            let before = state.queue.next_deadline();
            let result = change(&mut state.queue);
            state.queue.take_expired(Instant::now(), &mut expired);
            let after = state.queue.next_deadline();
            let earlier = match (before, after) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(before), Some(after)) => after < before,
            };
            (result, earlier)
        };
        drop(expired);
        if wake {
            self.shared.wake.notify_one();
            self.start_thread();
        }
        result
    }

    /// Reads the queue under its lock, expiring nothing: tests see what
    /// the thread left.
    #[cfg(test)]
    pub(crate) fn read<R>(&self, look: impl FnOnce(&Q) -> R) -> R {
        look(&lock(&self.shared.state).queue)
    }

    /// Starts the thread unless it runs. Without it (the spawn failed),
    /// entries still expire on the next update, so they live longer while
    /// idle but within the queue's bounds; a later update tries again.
    fn start_thread(&self) {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        *thread = thread::Builder::new()
            .name(self.thread_name.into())
            .spawn(move || shared.run())
            .ok();
    }
}

impl<Q> Drop for Expiring<Q> {
    fn drop(&mut self) {
        lock(&self.shared.state).closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = lock(&self.thread).take() {
            // The thread only waits and drops expired entries: it ends at
            // once. A panic in it was reported by the panic hook.
            let _ = thread.join();
        }
    }
}

impl<Q: ExpiringQueue> Shared<Q> {
    fn run(&self) {
        let mut state = lock(&self.state);
        while !state.closing {
            let mut expired = Vec::new();
            state.queue.take_expired(Instant::now(), &mut expired);
            if !expired.is_empty() {
                drop(state);
                drop(expired);
                state = lock(&self.state);
                continue;
            }
            state = match state.queue.next_deadline() {
                None => self
                    .wake
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => wait_until(&self.wake, state, deadline),
            };
        }
    }
}

fn wait_until<'a, T>(
    wake: &Condvar,
    guard: MutexGuard<'a, T>,
    deadline: Instant,
) -> MutexGuard<'a, T> {
    let timeout = deadline.saturating_duration_since(Instant::now());
    wake.wait_timeout(guard, timeout)
        .unwrap_or_else(PoisonError::into_inner)
        .0
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// Deadlines in order; each expired one counts itself when dropped.
    struct Deadlines(VecDeque<(Instant, Counted)>);

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl ExpiringQueue for Deadlines {
        type Expired = Counted;

        fn take_expired(&mut self, now: Instant, expired: &mut Vec<Counted>) {
            while self.0.front().is_some_and(|(deadline, _)| *deadline <= now) {
                expired.extend(self.0.pop_front().map(|(_, counted)| counted));
            }
        }

        fn next_deadline(&mut self) -> Option<Instant> {
            self.0.front().map(|(deadline, _)| *deadline)
        }
    }

    /// Polls `count` until it is `expected`, for at most `limit`.
    fn count_reaches(count: &AtomicUsize, expected: usize, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while count.load(Ordering::SeqCst) != expected {
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(5));
        }
        true
    }

    #[test]
    fn entries_expire_on_time_while_nothing_touches_the_queue() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let queue = Expiring::new(Deadlines(VecDeque::new()), "expiry-test");
        let now = Instant::now();
        let later = now + Duration::from_secs(5);
        queue.update(|q| q.0.push_back((later, Counted(dropped.clone()))));
        // An earlier deadline wakes the thread sleeping until `later`.
        queue.update(|q| {
            q.0.push_front((now + Duration::from_millis(20), Counted(dropped.clone())));
        });
        assert!(count_reaches(&dropped, 1, Duration::from_secs(4)));
        assert!(Instant::now() < later, "the earlier deadline woke it");
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
        assert!(count_reaches(&dropped, 2, Duration::from_secs(15)));
        assert!(Instant::now() >= later, "not before its deadline");
        assert_eq!(queue.read(|q| q.0.len()), 0);
    }

    #[test]
    fn dropping_the_queue_ends_its_thread_and_its_entries() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let queue = Expiring::new(Deadlines(VecDeque::new()), "expiry-test");
        let later = Instant::now() + Duration::from_secs(3600);
        queue.update(|q| q.0.push_back((later, Counted(dropped.clone()))));
        let started = Instant::now();
        drop(queue);
        // Far sooner than the entry's hour: the thread was not waiting it out.
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(dropped.load(Ordering::SeqCst), 1);
    }
}
