//! The fds a sender registered that no receiver has fetched yet, kept
//! within a count and closed once their unfetched lifetime has passed,
//! also while nothing is sent ([`Expiring`]), or within
//! [`RECIPIENT_CHECK`] of the exit of the process they were sent to: nobody
//! else has the message that names them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use tensorshare_strategies::platform::process::ExitSweep;

use crate::resource_sharer::Registration;
use crate::sync::expiry::{Expiring, ExpiringQueue};

/// How often the registrations made for a process named are looked at, for
/// those whose process has exited.
const RECIPIENT_CHECK: Duration = Duration::from_secs(1);

/// Fds handed to the resource sharer and not yet fetched, oldest first.
#[derive(Debug)]
pub(crate) struct UnfetchedFds(Expiring<Pending>);

/// Registrations in send order, each with the time after which it closes.
#[derive(Debug)]
struct Pending {
    queue: VecDeque<(Instant, Registration)>,
    /// The process each registration went to, by key, when the
    /// connection could name it.
    recipients: HashMap<i64, u32>,
    /// When the recipients are next looked at.
    exits: ExitSweep,
    lifetime: Duration,
    /// The most registrations still waiting for their receivers: past it,
    /// the oldest goes first.
    max: usize,
}

impl UnfetchedFds {
    /// Keeps each registration for `lifetime`, at most `max` of them.
    pub(crate) fn new(lifetime: Duration, max: usize) -> Self {
        let pending = Pending {
            queue: VecDeque::new(),
            recipients: HashMap::new(),
            exits: ExitSweep::new(RECIPIENT_CHECK),
            lifetime,
            max: max.max(1),
        };
        Self(Expiring::new(pending, "tensorshare-unfetched"))
    }

    /// Sets how long registrations made from now on wait.
    pub(crate) fn set_lifetime(&self, lifetime: Duration) {
        self.0.update(|pending| pending.lifetime = lifetime);
    }

    /// Sets the most registrations kept waiting (at least 1).
    pub(crate) fn set_max(&self, max: usize) {
        self.0.update(|pending| pending.max = max.max(1));
    }

    /// Keeps `registration`, made for a message to process `recipient`
    /// (when the connection can name it), until its lifetime passes or
    /// `recipient` exits, within the count: past it, the oldest goes first,
    /// its fd closed.
    pub(crate) fn keep(&self, registration: Registration, recipient: Option<u32>) {
        self.0.update(|pending| {
            let deadline = Instant::now() + pending.lifetime;
            if let Some(pid) = recipient {
                pending.recipients.insert(registration.id().key, pid);
            }
            pending.queue.push_back((deadline, registration));
        });
    }

    /// Closes every fd still waiting.
    pub(crate) fn clear(&self) {
        let cleared = self.0.update(|pending| {
            pending.recipients.clear();
            std::mem::take(&mut pending.queue)
        });
        drop(cleared);
    }

    /// How many registered fds are still waiting to be fetched.
    pub(crate) fn pending(&self) -> usize {
        self.0.update(|pending| {
            pending
                .queue
                .iter()
                .filter(|(_, registration)| registration.is_pending())
                .count()
        })
    }
}

impl ExpiringQueue for Pending {
    type Expired = Registration;

    /// Takes the expired and fetched registrations at the front, which is
    /// O(1) per send: deadlines grow in push order and receivers fetch in
    /// about send order. Over the count, fetched ones behind a waiting one
    /// go first (they hold no fd, only a key), then the oldest waiting.
    ///
    /// Registrations whose process has exited go wherever they are in the
    /// queue, looked for at most once every [`RECIPIENT_CHECK`] (not on
    /// every send), each process asked once a look.
    fn take_expired(&mut self, now: Instant, expired: &mut Vec<Registration>) {
        let before = expired.len();
        self.take_due(now, expired);
        if !self.recipients.is_empty()
            && let Some(mut exited) = self.exits.look(now)
        {
            let recipients = &self.recipients;
            let mut orphaned = |registration: &Registration| {
                recipients
                    .get(&registration.id().key)
                    .is_some_and(|&pid| exited(pid))
            };
            let (gone, waiting): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.queue)
                .into_iter()
                .partition(|(_, registration)| orphaned(registration));
            expired.extend(gone.into_iter().map(|(_, registration)| registration));
            self.queue = waiting;
        }
        for registration in &expired[before..] {
            self.recipients.remove(&registration.id().key);
        }
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        let expiry = self.queue.front().map(|(deadline, _)| *deadline);
        let check = (!self.recipients.is_empty()).then(|| self.exits.next_due());
        expiry.into_iter().chain(check).min()
    }
}

impl Pending {
    /// Takes the expired and fetched registrations at the front, and over
    /// the count the fetched ones behind a waiting one, then the oldest.
    fn take_due(&mut self, now: Instant, expired: &mut Vec<Registration>) {
        let done = |(deadline, registration): &(Instant, Registration)| {
            *deadline <= now || !registration.is_pending()
        };
        while self.queue.front().is_some_and(done) {
            expired.extend(self.queue.pop_front().map(|(_, registration)| registration));
        }
        if self.queue.len() <= self.max {
            return;
        }
        let (gone, waiting): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|entry| done(entry));
        expired.extend(gone.into_iter().map(|(_, registration)| registration));
        self.queue = waiting;
        while self.queue.len() > self.max {
            expired.extend(self.queue.pop_front().map(|(_, registration)| registration));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::thread;

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
        let lifetime = Duration::from_secs(1);
        let unfetched = UnfetchedFds::new(lifetime, 8);
        let kept = Instant::now();
        unfetched.keep(registration(&sharer), None);
        assert!(unfetched.pending() == 1 || kept.elapsed() >= lifetime);
        let deadline = kept + Duration::from_secs(15);
        while unfetched.0.read(|pending| pending.queue.len()) > 0 {
            assert!(Instant::now() < deadline, "the registration never expired");
            thread::sleep(Duration::from_millis(10));
        }
        assert!(kept.elapsed() >= lifetime, "expired before its lifetime");
    }

    #[test]
    fn the_oldest_goes_first_past_the_count() {
        let sharer = ResourceSharer::start(b"unfetched count test").expect("sharer");
        let unfetched = UnfetchedFds::new(Duration::from_secs(60), 2);
        let first = registration(&sharer);
        let first_key = first.id().key;
        unfetched.keep(first, None);
        unfetched.keep(registration(&sharer), None);
        unfetched.keep(registration(&sharer), None);
        assert_eq!(unfetched.pending(), 2);
        assert!(!sharer.is_registered(first_key));
    }

    #[test]
    fn fetched_registrations_do_not_count_against_the_waiting_ones() {
        let sharer = ResourceSharer::start(b"unfetched budget test").expect("sharer");
        let unfetched = UnfetchedFds::new(Duration::from_secs(60), 2);
        let waiting = registration(&sharer);
        let waiting_key = waiting.id().key;
        unfetched.keep(waiting, None);
        let fetched = registration(&sharer);
        let fetched_key = fetched.id().key;
        unfetched.keep(fetched, None);
        // As a receiver's fetch does: the fd leaves the sharer's table.
        drop(sharer.withdraw(fetched_key));
        unfetched.keep(registration(&sharer), None);
        assert!(
            sharer.is_registered(waiting_key),
            "the waiting fd was closed early"
        );
        assert_eq!(unfetched.pending(), 2);
    }
}
