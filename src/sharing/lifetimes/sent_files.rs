//! The memmap files a sender keeps for receivers that never say they mapped
//! them.
//!
//! torch maps a file when it unpickles the message and tells the sender
//! nothing, so a sender cannot know when a file it sent may go. It keeps the
//! file's [`FileLease`] (a path and an identity: no fd, no mapping, not the
//! storage it was copied from) for the unfetched lifetime, and at most
//! [`RetentionLimits`] of them: when a bound is hit the oldest lease goes,
//! and its file is removed once no segment of this process maps it. A
//! torch receiver that maps a file after that gets a file of zeros made in
//! its place (`from_file` opens with `O_CREAT`); a tensorshare receiver
//! refuses it. When the context ends, files not yet opened by every
//! receiver are left on disk for them instead (`leave_unopened_sent_files`).
//!
//! A lease whose file went only to processes its sender could name goes
//! within [`RECIPIENT_CHECK`] of the last of them exiting
//! ([`FileLease::recipients`]): nobody is left to open the file.
//!
//! Leases expire on time even while nothing is sent ([`Expiring`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tensorshare_strategies::file_descriptor::FileIdentity;
use tensorshare_strategies::memmap::FileLease;
use tensorshare_strategies::platform::process::ExitSweep;

use crate::sharing::pools::AgingMap;
use crate::sync::expiry::{Expiring, ExpiringQueue};

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

/// How often the leases of files sent to processes named are looked at, for
/// those whose every recipient has exited.
const RECIPIENT_CHECK: Duration = Duration::from_secs(1);

/// The leases of sent files, oldest first, expired on time.
#[derive(Debug)]
pub(crate) struct SentFiles(Expiring<Held>);

#[derive(Debug)]
struct Held {
    leases: AgingMap<FileIdentity, Arc<FileLease>>,
    /// The sum of the held files' sizes.
    bytes: usize,
    limits: RetentionLimits,
    /// When the leases are next looked at for exited recipients.
    exits: ExitSweep,
}

impl ExpiringQueue for Held {
    type Expired = Arc<FileLease>;

    /// Takes out the leases past their deadline at `now` or over the
    /// bounds, oldest first, and those whose every recipient has exited
    /// (dropping one may unlink its file).
    fn take_expired(&mut self, now: Instant, evicted: &mut Vec<Arc<FileLease>>) {
        while let Some((_, lease)) = self.leases.pop_oldest_if(|since, len| {
            let expired = since + self.limits.lifetime <= now;
            let over =
                len > 1 && (len > self.limits.max_files || self.bytes > self.limits.max_bytes);
            expired || over
        }) {
            self.bytes -= lease.len();
            evicted.push(lease);
        }
        // Each pid asked once a look, however many files went to it; a
        // look at most once a sweep, not on every send.
        if self.leases.is_empty() {
            return;
        }
        let Some(mut exited) = self.exits.look(now) else {
            return;
        };
        for (_, lease) in self
            .leases
            .remove_where(|lease| lease.recipients().all_exited_by(&mut exited))
        {
            self.bytes -= lease.len();
            evicted.push(lease);
        }
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        let expiry = self
            .leases
            .oldest()
            .map(|since| since + self.limits.lifetime);
        // Held leases are looked at for exited recipients once a sweep.
        let check = (!self.leases.is_empty()).then(|| self.exits.next_due());
        expiry.into_iter().chain(check).min()
    }
}

impl SentFiles {
    pub(crate) fn new(limits: RetentionLimits) -> Self {
        let held = Held {
            leases: AgingMap::default(),
            bytes: 0,
            limits,
            exits: ExitSweep::new(RECIPIENT_CHECK),
        };
        Self(Expiring::new(held, "tensorshare-sent-files"))
    }

    /// Changes the bounds with `change`, now, and for the deadlines of
    /// leases already held.
    pub(crate) fn update_limits(&self, change: impl FnOnce(&mut RetentionLimits)) {
        self.0.update(|held| change(&mut held.limits));
    }

    /// Keeps `lease` for the lifetime, as the newest; a file sent again is
    /// kept from its latest send.
    pub(crate) fn hold(&self, lease: Arc<FileLease>) {
        let replaced = self.0.update(|held| {
            held.bytes += lease.len();
            let replaced = held.leases.insert(lease.identity(), lease, Instant::now());
            if let Some(replaced) = &replaced {
                held.bytes -= replaced.len();
            }
            replaced
        });
        drop(replaced);
    }

    /// The bounds leases are kept within.
    pub(crate) fn limits(&self) -> RetentionLimits {
        self.0.update(|held| held.limits)
    }

    /// How long a lease is kept after its file's latest send.
    pub(crate) fn lifetime(&self) -> Duration {
        self.0.update(|held| held.limits.lifetime)
    }

    /// How many files are held now, and their bytes.
    pub(crate) fn held(&self) -> (usize, usize) {
        self.0.update(|held| (held.leases.len(), held.bytes))
    }

    /// The leases held now whose files a recipient may still open: all but
    /// those whose every recipient has exited.
    pub(crate) fn awaited_leases(&self) -> Vec<Arc<FileLease>> {
        self.0.update(|held| {
            held.leases
                .values()
                .filter(|lease| !lease.recipients().all_exited())
                .cloned()
                .collect()
        })
    }

    /// Lets go of every lease now.
    pub(crate) fn clear(&self) {
        let leases = self.0.update(|held| {
            held.bytes = 0;
            std::mem::take(&mut held.leases)
        });
        drop(leases);
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::thread;

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
        assert_eq!(sent.0.read(|held| held.leases.len()), 0);
    }
}
