//! Giving keys back to the senders whose fds arrived attached to their
//! messages, and telling them when those storages are unmapped here, in
//! batches, off the receiving thread.
//!
//! Each batch costs a connection and a handshake with the sender's sharer,
//! so keys gather for up to [`BATCH_WINDOW`], or until [`BATCH_KEYS`] of
//! them wait: a stream of small tensors gives back hundreds per connection,
//! and a sender's copies never outlive their receipt by much more than the
//! window nor number more than a batch. A sender that has gone has nothing
//! left to give back; failures are dropped.
//!
//! Queueing a key is on every receive's path, so it wakes the thread only
//! when the thread waits for what this key completes: not once per key.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::resource_sharer::{join_within, release_fds, report_unmapped};
use crate::sync::lock;

/// How long keys gather before a batch goes out.
const BATCH_WINDOW: Duration = Duration::from_millis(10);

/// How many waiting keys send a batch before the window ends.
const BATCH_KEYS: usize = 256;

/// How long one batch may take before it is abandoned; the sender's
/// unfetched-fd deadline closes what it could not give back.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long dropping the context waits for the last batch.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The keys waiting to be given back, and the thread that gives them.
#[derive(Debug)]
pub(crate) struct Releases {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    authkey: Vec<u8>,
    pending: Mutex<Pending>,
    wake: Condvar,
}

#[derive(Debug, Default)]
struct Batch {
    /// Keys whose fds arrived, by the sharer that registered them.
    released: HashMap<Vec<u8>, Vec<i64>>,
    /// Keys whose storages are no longer mapped here, likewise.
    unmapped: HashMap<Vec<u8>, Vec<i64>>,
}

#[derive(Debug)]
struct Pending {
    batch: Batch,
    /// Keys in `batch`.
    count: usize,
    /// The count at which the thread wants waking: 1 while it waits for
    /// work, [`BATCH_KEYS`] while it gathers, never while it sends.
    wake_at: usize,
    closing: bool,
}

impl Default for Pending {
    fn default() -> Self {
        Self {
            batch: Batch::default(),
            count: 0,
            wake_at: 1,
            closing: false,
        }
    }
}

impl Releases {
    pub(crate) fn new(authkey: &[u8]) -> Self {
        Self {
            shared: Arc::new(Shared {
                authkey: authkey.to_vec(),
                pending: Mutex::new(Pending::default()),
                wake: Condvar::new(),
            }),
            thread: Mutex::new(None),
        }
    }

    /// Queues `keys` for the sharer at `address`: their fds arrived.
    pub(crate) fn release(&self, address: Vec<u8>, keys: Vec<i64>) {
        self.queue(address, keys, |batch| &mut batch.released);
    }

    /// Queues `keys` for the sharer at `address`: the storage they came
    /// under is no longer mapped here.
    pub(crate) fn unmapped(&self, address: Vec<u8>, keys: Vec<i64>) {
        self.queue(address, keys, |batch| &mut batch.unmapped);
    }

    fn queue(
        &self,
        address: Vec<u8>,
        keys: Vec<i64>,
        list: impl FnOnce(&mut Batch) -> &mut HashMap<Vec<u8>, Vec<i64>>,
    ) {
        if keys.is_empty() {
            return;
        }
        let mut pending = lock(&self.shared.pending);
        let before = pending.count;
        pending.count += keys.len();
        let wake = before < pending.wake_at && pending.count >= pending.wake_at;
        list(&mut pending.batch)
            .entry(address)
            .or_default()
            .extend(keys);
        drop(pending);
        if wake {
            self.shared.wake.notify_one();
        }
        self.start_thread();
    }

    fn start_thread(&self) {
        let mut thread = lock(&self.thread);
        if thread.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        // Without the thread the keys wait for the sender's deadline; that
        // holds memory longer but loses nothing.
        *thread = thread::Builder::new()
            .name("tensorshare-release".into())
            .spawn(move || shared.run())
            .ok();
    }

    /// Sends what is queued now and stops the thread, waiting for it a
    /// little.
    fn drain(&self) {
        lock(&self.shared.pending).closing = true;
        self.shared.wake.notify_one();
        if let Some(thread) = lock(&self.thread).take() {
            join_within(thread, Instant::now() + DRAIN_GRACE);
        }
    }
}

impl Drop for Releases {
    fn drop(&mut self) {
        self.drain();
    }
}

impl Shared {
    fn run(&self) {
        loop {
            let mut pending = lock(&self.pending);
            pending.wake_at = 1;
            while pending.count == 0 && !pending.closing {
                pending = self.wait(pending, None);
            }
            if pending.count == 0 {
                return;
            }
            let deadline = Instant::now() + BATCH_WINDOW;
            pending.wake_at = BATCH_KEYS;
            while pending.count < BATCH_KEYS && !pending.closing {
                let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                    break;
                };
                pending = self.wait(pending, Some(left));
            }
            pending.wake_at = usize::MAX;
            pending.count = 0;
            let batch = std::mem::take(&mut pending.batch);
            drop(pending);
            for (address, keys) in batch.released {
                let _ = release_fds(&address, &keys, &self.authkey, RELEASE_TIMEOUT);
            }
            for (address, keys) in batch.unmapped {
                let _ = report_unmapped(&address, &keys, &self.authkey, RELEASE_TIMEOUT);
            }
        }
    }

    /// Waits for a wake-up, at most `timeout` if one is given.
    fn wait<'a>(
        &self,
        pending: MutexGuard<'a, Pending>,
        timeout: Option<Duration>,
    ) -> MutexGuard<'a, Pending> {
        match timeout {
            None => self
                .wake
                .wait(pending)
                .unwrap_or_else(PoisonError::into_inner),
            Some(timeout) => {
                let (pending, _) = self
                    .wake
                    .wait_timeout(pending, timeout)
                    .unwrap_or_else(PoisonError::into_inner);
                pending
            }
        }
    }
}
