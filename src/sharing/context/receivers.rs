//! What a [`SharingContext`] keeps for the processes it sends to, and
//! takes from those it receives from: its resource sharer, the fds
//! registered for receivers that have not fetched them, the fds received
//! storages keep, the limits on each, and the wait for receivers that a
//! producer makes before it exits.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tensorshare_strategies::file_descriptor::FdBudget;

use super::SharingContext;
use crate::Error;
use crate::resource_sharer::{
    KeyReports, Registration, ResourceSharer, SharerError, SharerOptions, SharerSocket,
    SharerStats, fetch_fd,
};
use crate::sharing::lifetimes::UnfetchedFds;
use crate::sync::lock;

/// The context's side of the fd hand-off, one per context whatever its
/// handles: this process's resource sharer and the fds waiting in it.
#[derive(Debug)]
pub(super) struct Receivers {
    sharer: OnceLock<Arc<ResourceSharer>>,
    /// Where the resource sharer listens; `None` for what
    /// `TENSORSHARE_SHARER_DIR` says ([`SharerSocket::from_env`]).
    sharer_socket: Mutex<Option<SharerSocket>>,
    /// Fds handed to the resource sharer and not yet fetched, with the time
    /// after which they are closed unfetched.
    unfetched: UnfetchedFds,
    /// How many peers that failed the resource sharer's handshake have
    /// been reported, so each failure is reported once.
    reported_auth_failures: AtomicU64,
}

impl Receivers {
    /// No sharer yet; fds wait for their receivers at most `lifetime`, at
    /// most `max_unfetched` of them.
    pub(super) fn new(lifetime: Duration, max_unfetched: usize) -> Self {
        Self {
            sharer: OnceLock::new(),
            sharer_socket: Mutex::new(None),
            unfetched: UnfetchedFds::new(lifetime, max_unfetched),
            reported_auth_failures: AtomicU64::new(0),
        }
    }

    /// Closes every fd no receiver fetched and removes the sharer's
    /// socket.
    pub(super) fn shutdown(&self) {
        self.unfetched.clear();
        if let Some(sharer) = self.sharer.get() {
            sharer.shutdown();
        }
    }
}

impl SharingContext {
    /// Waits at most `timeout` for a peer's resource sharer.
    pub fn with_fetch_timeout(mut self, timeout: Duration) -> Self {
        self.settings.fetch_timeout = timeout;
        self
    }

    /// Closes fds that no receiver fetched within `lifetime` (default 5
    /// minutes), and lets go of sent `memmap` files as long after their
    /// last send (see [`with_max_held_memmap_files`](Self::with_max_held_memmap_files)).
    ///
    /// The fds' lifetime is the context's, for every handle: they wait in
    /// its one resource sharer. The files' is this handle's and its later
    /// clones', as its `memmap` directory is.
    pub fn with_unfetched_lifetime(self, lifetime: Duration) -> Self {
        self.state.receivers.unfetched.set_lifetime(lifetime);
        self.memmap()
            .sent_files
            .update_limits(|limits| limits.lifetime = lifetime);
        self
    }

    /// Keeps at most `count` fds registered for receivers that have not
    /// fetched them yet (default: a quarter of the soft `RLIMIT_NOFILE`).
    ///
    /// When a send would register one more, the oldest unfetched fd expires
    /// early, as it would at the end of its
    /// [unfetched lifetime](Self::with_unfetched_lifetime): its fd closes and
    /// a receiver that fetches it later gets an error. A producer streaming
    /// to a slow consumer thus never runs out of fds; raise `count` (and
    /// `ulimit -n`) if receivers fall further behind than that. `0` counts
    /// as 1.
    ///
    /// The count is the context's, for every handle: they share one
    /// resource sharer.
    pub fn with_max_unfetched_fds(self, count: usize) -> Self {
        self.state.receivers.unfetched.set_max(count);
        self
    }

    /// Keeps at most `count` fds of received `file_descriptor` storages
    /// open (default: an eighth of the soft `RLIMIT_NOFILE`, at least 16).
    ///
    /// A received storage is read and written through its mapping; its fd
    /// only lets this process send the same memory on without a copy.
    /// Storages received while `count` of them keep their fds keep only
    /// their mappings, so a receiver holds any number of storages whatever
    /// its fd limit (each mapping still counts against `vm.max_map_count`).
    /// Sending such a storage on copies it once into a fresh segment, which
    /// every later send reuses while the storage lives; the copy no longer
    /// shares memory with the storage's sender.
    ///
    /// Set on a clone, the budget is that handle's own.
    pub fn with_max_received_fds(mut self, count: usize) -> Self {
        self.held.received_fds = FdBudget::new(count);
        self
    }

    /// How many fds received storages keep open now (see
    /// [`with_max_received_fds`](Self::with_max_received_fds)).
    pub fn received_fds_held(&self) -> usize {
        self.held.received_fds.held()
    }

    /// Whether [`Connection::send`](crate::Connection::send) attaches each
    /// shared storage's fd to the message itself (default: yes).
    ///
    /// A tensorshare receiver then maps the storage at once, instead of
    /// connecting to this process's resource sharer for each one; it gives
    /// the keys back in batches so that the sharer closes its copies. The
    /// bytes on the wire do not change and every storage is still
    /// registered with the resource sharer: a Python receiver never sees the
    /// attached fds (its kernel closes them) and fetches as always.
    pub fn with_inline_fds(mut self, inline: bool) -> Self {
        self.settings.inline_fds = inline;
        self
    }

    /// Sets where this context's resource sharer listens, instead of what
    /// `TENSORSHARE_SHARER_DIR` says ([`SharerSocket::from_env`]: the
    /// abstract namespace when it is unset). Takes effect when the sharer
    /// starts, with the first storage sent by `file_descriptor`, for every
    /// handle of the context.
    pub fn with_sharer_socket(self, socket: SharerSocket) -> Self {
        *lock(&self.state.receivers.sharer_socket) = Some(socket);
        self
    }

    /// The fds received storages keep open, within the
    /// [budget](Self::with_max_received_fds).
    pub(super) fn received_fd_budget(&self) -> &FdBudget {
        &self.held.received_fds
    }

    /// This process's resource sharer, started on first use.
    pub(crate) fn resource_sharer(&self) -> Result<&Arc<ResourceSharer>, Error> {
        if let Some(sharer) = self.state.receivers.sharer.get() {
            return Ok(sharer);
        }
        let socket = match lock(&self.state.receivers.sharer_socket).clone() {
            Some(socket) => socket,
            None => SharerSocket::from_env().map_err(|value| SharerError::SocketDirSetting {
                value: value.to_string_lossy().into_owned(),
            })?,
        };
        let options = SharerOptions::new().with_socket(socket);
        let started = ResourceSharer::start_with(self.state.authkey.as_bytes(), options)?;
        Ok(self.state.receivers.sharer.get_or_init(|| started))
    }

    /// The fd a peer's resource sharer at `address` holds under `key`,
    /// fetched with this context's authkey within its
    /// [fetch timeout](Self::with_fetch_timeout).
    pub(super) fn fetch_fd(&self, address: &[u8], key: i64) -> Result<OwnedFd, Error> {
        let fd = fetch_fd(
            address,
            key,
            self.state.authkey.as_bytes(),
            self.settings.fetch_timeout,
        )?;
        Ok(fd)
    }

    /// What receivers reported to this process's resource sharer since
    /// the last look: the memfds they no longer map. Nothing before the
    /// sharer starts.
    pub(super) fn take_sharer_reports(&self) -> Option<KeyReports> {
        Some(self.state.receivers.sharer.get()?.take_reports())
    }

    /// Keeps `registration` for a message to process `recipient` (when the
    /// connection can name it) until its fd is fetched, its deadline
    /// passes, `recipient` exits, or newer ones push it out of the
    /// [budget](Self::with_max_unfetched_fds).
    pub(crate) fn keep_registration(&self, registration: Registration, recipient: Option<u32>) {
        self.state.receivers.unfetched.keep(registration, recipient);
    }

    /// What this process's resource sharer has done: fds fetched by
    /// receivers (`served`) and given back by tensorshare receivers that got
    /// them attached to the message (`released`). `None` before the first
    /// storage is sent.
    pub fn sharer_stats(&self) -> Option<SharerStats> {
        self.state
            .receivers
            .sharer
            .get()
            .map(|sharer| sharer.stats())
    }

    /// How many shared fds are waiting for their receivers.
    pub fn unfetched_shares(&self) -> usize {
        self.state.receivers.unfetched.pending()
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
                self.state.receivers.unfetched.pending() + self.memmap().unopened_sent_files();
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
            .receivers
            .reported_auth_failures
            .fetch_max(failures, Ordering::Relaxed);
        (failures > reported).then_some(failures)
    }
}
