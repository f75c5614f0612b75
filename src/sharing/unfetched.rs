//! The fds a sender registered that no receiver has fetched yet, kept
//! within a count and closed once their unfetched lifetime has passed.
//!
//! Registrations expire on a timer, also while nothing is sent: one thread
//! per context, started with its first registration, that wakes at the
//! oldest deadline (at least once a second) and ends within a second of the
//! context going.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;
use std::time::{Duration, Instant};

use super::lock;
use crate::resource_sharer::Registration;

/// The longest the expiry thread sleeps before it checks that its context
/// still lives.
const MAX_NAP: Duration = Duration::from_secs(1);

/// Registrations in send order, each with the time after which it closes.
type Queue = VecDeque<(Instant, Registration)>;

/// Fds handed to the resource sharer and not yet fetched, oldest first.
#[derive(Debug, Default)]
pub(crate) struct UnfetchedFds {
    queue: Arc<Mutex<Queue>>,
    timer: OnceLock<()>,
}

impl UnfetchedFds {
    /// Keeps `registration` until `deadline`, within `max` registrations:
    /// past it, the oldest goes first, its fd closed.
    pub(crate) fn keep(&self, registration: Registration, deadline: Instant, max: usize) {
        // Dropped after the lock: each closes an fd and takes the
        // sharer's table lock.
        let mut expired = Vec::new();
        {
            let mut queue = lock(&self.queue);
            prune(&mut queue, Instant::now());
            // Within the fd budget, the oldest expires first: dropping its
            // registration withdraws and closes its fd.
            while queue.len() >= max {
                expired.extend(queue.pop_front());
            }
            queue.push_back((deadline, registration));
        }
        drop(expired);
        self.timer
            .get_or_init(|| start_timer(Arc::downgrade(&self.queue)));
    }

    /// Closes every fd still waiting.
    pub(crate) fn clear(&self) {
        lock(&self.queue).clear();
    }

    /// How many registered fds are still waiting to be fetched.
    pub(crate) fn pending(&self) -> usize {
        let mut queue = lock(&self.queue);
        queue.retain(|(_, registration)| registration.is_pending());
        queue.len()
    }
}

/// Drops the expired and fetched registrations at the front. Deadlines
/// grow in push order, and receivers fetch in about send order: this is
/// O(1) per send. A fetched entry behind a pending one holds no fd, only
/// its key.
fn prune(queue: &mut Queue, now: Instant) {
    while queue
        .front()
        .is_some_and(|(deadline, registration)| *deadline <= now || !registration.is_pending())
    {
        queue.pop_front();
    }
}

/// Starts the thread that expires registrations while nothing is sent.
/// Without it (the spawn failed), they still expire on the next send.
fn start_timer(queue: Weak<Mutex<Queue>>) {
    let _ = thread::Builder::new()
        .name("tensorshare-unfetched".into())
        .spawn(move || {
            while let Some(queue) = queue.upgrade() {
                let nap = {
                    let mut queue = lock(&queue);
                    let now = Instant::now();
                    prune(&mut queue, now);
                    queue
                        .front()
                        .map_or(MAX_NAP, |(deadline, _)| {
                            deadline.saturating_duration_since(now)
                        })
                        .min(MAX_NAP)
                };
                drop(queue);
                thread::sleep(nap.max(Duration::from_millis(10)));
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource_sharer::ResourceSharer;
    use tensorshare_strategies::SharingStrategy;
    use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;

    fn registration(sharer: &Arc<ResourceSharer>) -> Registration {
        let segment = FileDescriptorStrategy.allocate(16).expect("segment");
        let fd = FileDescriptorStrategy.export(&segment).expect("fd");
        sharer.register(fd).expect("register")
    }

    #[test]
    fn registrations_expire_while_nothing_is_sent() {
        let sharer = ResourceSharer::start(b"unfetched timer test").expect("sharer");
        let unfetched = UnfetchedFds::default();
        let soon = Instant::now() + Duration::from_millis(50);
        unfetched.keep(registration(&sharer), soon, 8);
        assert_eq!(unfetched.pending(), 1);
        thread::sleep(Duration::from_millis(1500));
        assert_eq!(lock(&unfetched.queue).len(), 0);
    }

    #[test]
    fn the_oldest_goes_first_past_the_count() {
        let sharer = ResourceSharer::start(b"unfetched count test").expect("sharer");
        let unfetched = UnfetchedFds::default();
        let later = Instant::now() + Duration::from_secs(60);
        let first = registration(&sharer);
        let first_key = first.id().key;
        unfetched.keep(first, later, 2);
        unfetched.keep(registration(&sharer), later, 2);
        unfetched.keep(registration(&sharer), later, 2);
        assert_eq!(unfetched.pending(), 2);
        assert!(!sharer.is_registered(first_key));
    }
}
