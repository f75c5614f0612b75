//! The memmap files a sender keeps for receivers that never say they mapped
//! them.
//!
//! torch maps a file when it unpickles the message and tells the sender
//! nothing, so a sender cannot know when a file it sent may go. It keeps the
//! file's [`FileLease`] (a path and an identity: no fd, no mapping, not the
//! storage it was copied from) for the unfetched lifetime, and at most
//! [`RetentionLimits`] of them: when a bound is hit the oldest lease goes,
//! and its file is removed once no segment of this process maps it. A
//! receiver that maps a file after that gets `FileNotFoundError`, as torch's
//! own `file_system` strategy gives once its sender has dropped a segment.
//!
//! Leases expire on time even while nothing is sent: one thread per context,
//! started with the first lease, sleeps until the oldest deadline. It needs
//! no waking for later leases, whose deadlines come after the one it waits
//! for, only when the first lease arrives in an empty queue. It is not the
//! release thread's work: that one batches network round trips to other
//! processes' sharers with its own wake-up rules, and exists only in
//! contexts that receive inline fds.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tensorshare_strategies::file_descriptor::FileIdentity;
use tensorshare_strategies::memmap::FileLease;

use super::aging::AgingMap;
use super::lock;

/// How many sent files a context keeps by default.
pub(crate) const DEFAULT_MAX_FILES: usize = 4096;

/// How many bytes of sent files a context keeps by default.
pub(crate) const DEFAULT_MAX_BYTES: usize = 1 << 30;

/// The bounds on what a sender keeps: the newest lease is always kept, so
/// that the file of the message just sent exists when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RetentionLimits {
    pub(crate) lifetime: Duration,
    pub(crate) max_files: usize,
    pub(crate) max_bytes: usize,
}

/// The leases of sent files, oldest first, and the thread that expires
/// them.
#[derive(Debug)]
pub(crate) struct SentFiles {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    held: Mutex<Held>,
    wake: Condvar,
}

#[derive(Debug)]
struct Held {
    leases: AgingMap<FileIdentity, Arc<FileLease>>,
    /// The sum of the held files' sizes.
    bytes: usize,
    limits: RetentionLimits,
    closing: bool,
}

impl Held {
    /// Takes out the leases past their deadline at `now` or over the
    /// bounds, oldest first; they are to be dropped outside the lock
    /// (dropping one may unlink its file).
    fn take_expired(&mut self, now: Instant, evicted: &mut Vec<Arc<FileLease>>) {
        loop {
            let expired = self
                .leases
                .oldest()
                .is_some_and(|since| since + self.limits.lifetime <= now);
            let over = self.leases.len() > 1
                && (self.leases.len() > self.limits.max_files
                    || self.bytes > self.limits.max_bytes);
            if !expired && !over {
                return;
            }
            let Some((_, lease)) = self.leases.pop_oldest() else {
                return;
            };
            self.bytes -= lease.len();
            evicted.push(lease);
        }
    }
}

impl SentFiles {
    pub(crate) fn new(limits: RetentionLimits) -> Self {
        Self {
            shared: Arc::new(Shared {
                held: Mutex::new(Held {
                    leases: AgingMap::default(),
                    bytes: 0,
                    limits,
                    closing: false,
                }),
                wake: Condvar::new(),
            }),
            thread: Mutex::new(None),
        }
    }

    pub(crate) fn limits(&self) -> RetentionLimits {
        lock(&self.shared.held).limits
    }

    /// Applies new bounds now, and to the deadlines of leases already held.
    pub(crate) fn set_limits(&self, limits: RetentionLimits) {
        let mut evicted = Vec::new();
        let mut held = lock(&self.shared.held);
        held.limits = limits;
        held.take_expired(Instant::now(), &mut evicted);
        drop(held);
        // A shorter lifetime moves the deadline the thread waits for.
        self.shared.wake.notify_one();
        drop(evicted);
    }

    /// Keeps `lease` for the lifetime, as the newest; a file sent again is
    /// kept from its latest send.
    pub(crate) fn hold(&self, lease: Arc<FileLease>) {
        let now = Instant::now();
        let mut evicted = Vec::new();
        let mut held = lock(&self.shared.held);
        let was_empty = held.leases.len() == 0;
        held.bytes += lease.len();
        if let Some(replaced) = held.leases.insert(lease.identity(), lease, now) {
            held.bytes -= replaced.len();
            evicted.push(replaced);
        }
        held.take_expired(now, &mut evicted);
        drop(held);
        drop(evicted);
        // The thread is needed once there is something to expire; a spawn
        // that failed is tried again the next time the queue fills.
        if was_empty {
            self.shared.wake.notify_one();
            self.start_thread();
        }
    }

    /// How many files are held now, and their bytes.
    pub(crate) fn held(&self) -> (usize, usize) {
        let mut evicted = Vec::new();
        let mut held = lock(&self.shared.held);
        held.take_expired(Instant::now(), &mut evicted);
        let counts = (held.leases.len(), held.bytes);
        drop(held);
        drop(evicted);
        counts
    }

    /// Lets go of every lease now.
    pub(crate) fn clear(&self) {
        let mut held = lock(&self.shared.held);
        let leases = std::mem::take(&mut held.leases);
        held.bytes = 0;
        drop(held);
        drop(leases);
    }

    fn start_thread(&self) {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        // Without the thread, leases still expire on the next send or
        // count: files live longer while idle, but within the bounds.
        *thread = thread::Builder::new()
            .name("tensorshare-sent-files".into())
            .spawn(move || shared.run())
            .ok();
    }
}

impl Drop for SentFiles {
    fn drop(&mut self) {
        lock(&self.shared.held).closing = true;
        self.shared.wake.notify_one();
        self.clear();
        if let Some(thread) = lock(&self.thread).take() {
            // The thread only waits on the condvar and drops leases: it
            // ends at once. A panic in it was reported by the panic hook.
            let _ = thread.join();
        }
    }
}

impl Shared {
    fn run(&self) {
        let mut held = lock(&self.held);
        loop {
            if held.closing {
                return;
            }
            let now = Instant::now();
            let mut evicted = Vec::new();
            held.take_expired(now, &mut evicted);
            if !evicted.is_empty() {
                drop(held);
                drop(evicted);
                held = lock(&self.held);
                continue;
            }
            let lifetime = held.limits.lifetime;
            let next = held
                .leases
                .oldest()
                .map(|since| (since + lifetime).saturating_duration_since(now));
            held = wait(&self.wake, held, next);
        }
    }
}

/// Waits for a wake-up, at most `timeout` if one is given.
fn wait<'a>(
    wake: &Condvar,
    held: MutexGuard<'a, Held>,
    timeout: Option<Duration>,
) -> MutexGuard<'a, Held> {
    match timeout {
        None => wake.wait(held).unwrap_or_else(PoisonError::into_inner),
        Some(timeout) => {
            wake.wait_timeout(held, timeout)
                .unwrap_or_else(PoisonError::into_inner)
                .0
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use tensorshare_strategies::SharingStrategy;
    use tensorshare_strategies::memmap::MemmapStrategy;

    use super::*;

    fn limits(lifetime: Duration, max_files: usize, max_bytes: usize) -> RetentionLimits {
        RetentionLimits {
            lifetime,
            max_files,
            max_bytes,
        }
    }

    /// Sends a file of `nbytes`: holds its lease, drops its segment.
    fn send(strategy: &MemmapStrategy, sent: &SentFiles, nbytes: usize) -> PathBuf {
        let segment = strategy.allocate(nbytes).expect("allocate");
        sent.hold(Arc::clone(segment.lease().expect("a lease")));
        segment.path().to_path_buf()
    }

    #[test]
    fn the_oldest_files_go_first_when_a_bound_is_hit() {
        let dir = tempfile::tempdir().unwrap();
        let strategy = MemmapStrategy::in_dir(dir.path()).unwrap();
        let hour = Duration::from_secs(3600);

        let sent = SentFiles::new(limits(hour, 3, usize::MAX));
        let paths: Vec<_> = (0..5).map(|_| send(&strategy, &sent, 10)).collect();
        let exist: Vec<bool> = paths.iter().map(|path| path.exists()).collect();
        assert_eq!(exist, [false, false, true, true, true]);
        assert_eq!(sent.held(), (3, 30));

        let sent = SentFiles::new(limits(hour, usize::MAX, 22));
        let paths: Vec<_> = [10, 10, 10, 4].map(|n| send(&strategy, &sent, n)).to_vec();
        let exist: Vec<bool> = paths.iter().map(|path| path.exists()).collect();
        assert_eq!(exist, [false, false, true, true]);
        assert_eq!(sent.held(), (2, 14));

        // The newest file is kept whatever its size.
        let big = send(&strategy, &sent, 100);
        assert!(big.exists());
        assert_eq!(sent.held(), (1, 100));
        drop(sent);
        assert!(!big.exists(), "the context's end lets go of every lease");
    }

    #[test]
    fn a_file_sent_again_counts_once_from_its_latest_send() {
        let dir = tempfile::tempdir().unwrap();
        let strategy = MemmapStrategy::in_dir(dir.path()).unwrap();
        let sent = SentFiles::new(limits(Duration::from_secs(3600), 2, usize::MAX));
        let first = strategy.allocate(8).unwrap();
        sent.hold(Arc::clone(first.lease().unwrap()));
        let second = send(&strategy, &sent, 8);
        sent.hold(Arc::clone(first.lease().unwrap()));
        let path = first.path().to_path_buf();
        drop(first);
        assert_eq!(sent.held(), (2, 16));
        let third = send(&strategy, &sent, 8);
        assert!(!second.exists(), "the older send goes first");
        assert!(path.exists() && third.exists());
    }

    #[test]
    fn idle_leases_expire_by_the_timer() {
        let dir = tempfile::tempdir().unwrap();
        let strategy = MemmapStrategy::in_dir(dir.path()).unwrap();
        let lifetime = Duration::from_millis(200);
        let sent = SentFiles::new(limits(lifetime, usize::MAX, usize::MAX));
        let paths = [send(&strategy, &sent, 8), send(&strategy, &sent, 8)];
        assert!(paths.iter().all(|path| path.exists()));
        // Nothing is sent or counted from here on: only the thread can
        // remove them.
        let deadline = Instant::now() + lifetime + Duration::from_secs(10);
        while paths.iter().any(|path| path.exists()) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        assert!(
            paths.iter().all(|path| !path.exists()),
            "expired while idle"
        );
        assert_eq!(lock(&sent.shared.held).leases.len(), 0);
    }
}
