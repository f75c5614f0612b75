//! Giving keys back to the senders whose fds arrived attached to their
//! messages, in batches, off the receiving thread.
//!
//! Each batch costs a connection and a handshake with the sender's sharer,
//! so keys gather for [`BATCH_WINDOW`] first: a stream of small tensors
//! gives back hundreds per connection, and a sender's copies never outlive
//! their receipt by much more than the window. A sender that has gone has
//! nothing left to give back; failures are dropped.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::lock;
use crate::resource_sharer::{join_within, release_fds};

/// How long keys gather before a batch goes out.
const BATCH_WINDOW: Duration = Duration::from_millis(2);

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
struct Pending {
    by_address: HashMap<Vec<u8>, Vec<i64>>,
    closing: bool,
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

    /// Queues `keys` for the sharer at `address`.
    pub(crate) fn release(&self, address: Vec<u8>, keys: Vec<i64>) {
        if keys.is_empty() {
            return;
        }
        lock(&self.shared.pending)
            .by_address
            .entry(address)
            .or_default()
            .extend(keys);
        self.shared.wake.notify_one();
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
            join_within(thread, std::time::Instant::now() + DRAIN_GRACE);
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
            while pending.by_address.is_empty() && !pending.closing {
                pending = self
                    .wake
                    .wait(pending)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            if pending.by_address.is_empty() {
                return;
            }
            if !pending.closing {
                drop(pending);
                thread::sleep(BATCH_WINDOW);
                pending = lock(&self.pending);
            }
            let batch = std::mem::take(&mut pending.by_address);
            drop(pending);
            for (address, keys) in batch {
                let _ = release_fds(&address, &keys, &self.authkey, RELEASE_TIMEOUT);
            }
        }
    }
}
