//! Waiting for receivers: what a producer checks before it exits.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::SharingContext;
use crate::Error;
use crate::resource_sharer::SharerStats;

impl SharingContext {
    /// What this process's resource sharer has done: fds fetched by
    /// receivers (`served`) and given back by tensorshare receivers that got
    /// them attached to the message (`released`). `None` before the first
    /// storage is sent.
    pub fn sharer_stats(&self) -> Option<SharerStats> {
        self.state.sharer.get().map(|sharer| sharer.stats())
    }

    /// How many shared fds are waiting for their receivers.
    pub fn unfetched_shares(&self) -> usize {
        self.state.unfetched.pending()
    }

    /// Waits until the receivers have taken every storage this context
    /// sent, for at most `timeout`: what a producer calls before it exits.
    ///
    /// - `file_descriptor`: each fd fetched from this process's resource
    ///   sharer, or given back by a tensorshare receiver that got it with
    ///   the message. A receiver that fetches from a process that is gone
    ///   fails (`FileNotFoundError` in torch), so this is the wait that
    ///   matters.
    /// - `memmap`: each file opened by as many receivers as messages named
    ///   it, as the kernel's open events tell (inotify on the directory).
    ///   Where they cannot tell (no inotify instance left, events dropped)
    ///   the file is not waited for. Either way a sent file not yet opened
    ///   is left on disk when the context ends, for its receiver to find
    ///   ([`FileLease::leave_for_receivers`](tensorshare_strategies::memmap::FileLease::leave_for_receivers)).
    /// - `file_system`: nothing to wait for; a segment outlives its sender,
    ///   exited or killed, while a message or a receiver counts it: the
    ///   shared-memory manager keeps a segment whose message is still to be
    ///   opened while any of its clients (the receiver among them, once it
    ///   opened any segment of this process) is connected, and for 5
    ///   minutes after the last one left, for a receiver that had not
    ///   opened any yet
    ///   ([`DEFAULT_IN_FLIGHT_WAIT`](tensorshare_strategies::services::shm_manager::DEFAULT_IN_FLIGHT_WAIT)).
    /// - `bytes`: nothing; the message carries its storages.
    ///
    /// # Errors
    ///
    /// [`Error::PeerAuthkey`] as soon as a receiver failed to
    /// authenticate to this process's resource sharer (it will never
    /// fetch), and [`Error::Unfetched`] when storages are still
    /// waiting after `timeout`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tensorshare::{Authkey, SharingContext};
    ///
    /// let sharing = SharingContext::new(Authkey::new(b"secret".to_vec()));
    /// // Nothing was sent: nothing to wait for.
    /// sharing.wait_until_fetched(Duration::from_secs(1))?;
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn wait_until_fetched(&self, timeout: Duration) -> Result<(), Error> {
        let start = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(failures) = self.new_auth_failures() {
                return Err(Error::PeerAuthkey {
                    failures,
                    connection: None,
                });
            }
            let pending =
                self.state.unfetched.pending() + self.settings.memmap.unopened_sent_files();
            if pending == 0 {
                return Ok(());
            }
            let waited = start.elapsed();
            if waited >= timeout {
                return Err(Error::Unfetched { pending, waited });
            }
            std::thread::sleep(pause.min(timeout - waited));
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// How many peers have failed the resource sharer's handshake, when
    /// some did since the last report: such a peer holds another authkey
    /// and can fetch none of the storages sent to it.
    pub(crate) fn new_auth_failures(&self) -> Option<u64> {
        let failures = self.sharer_stats()?.wrong_authkey;
        let reported = self
            .state
            .reported_auth_failures
            .fetch_max(failures, Ordering::Relaxed);
        (failures > reported).then_some(failures)
    }
}
