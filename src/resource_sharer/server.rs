//! The serving side: [`ResourceSharer`], its threads' shared state, and
//! shutdown.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::Shutdown;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::options::SharerOptions;
use super::registration::{DupFdId, Registration};
use super::serve::{accept_loop, worker_loop};
use super::stats::{Counters, SharerStats};
use crate::connection::{ConnectionError, PrivateTempDir};

/// How long shutdown waits for a thread before leaving it behind.
const JOIN_GRACE: Duration = Duration::from_secs(2);

/// Why a sharer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharerError {
    /// The private directory for the socket could not be made.
    #[error(
        "could not create a private directory for the resource sharer's socket: {cause}; \
         point TMPDIR at a writable directory"
    )]
    TempDir {
        /// What creating it failed with.
        cause: ConnectionError,
    },
    /// The socket could not be bound.
    #[error("could not listen on {}: {cause}{}", .path.display(), fd_hint(.cause))]
    Bind {
        /// The socket path.
        path: PathBuf,
        /// What `bind` failed with.
        cause: io::Error,
    },
    /// A serving thread could not be started.
    #[error(
        "could not start the resource sharer's threads: {cause}; the process may be at its \
         thread limit (ulimit -u)"
    )]
    Spawn {
        /// What spawning failed with.
        cause: io::Error,
    },
}

impl SharerError {
    /// The OS error behind this one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            SharerError::TempDir { cause } => cause.io_error(),
            SharerError::Bind { cause, .. } | SharerError::Spawn { cause } => Some(cause),
        }
    }
}

/// Why an fd could not be registered. The fd has been closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// The sharer was shut down.
    #[error("the resource sharer has shut down: start a new one to share more fds")]
    ShutDown,
    /// Every positive 64-bit key has been used.
    #[error("the resource sharer has used every key: start a new one")]
    KeysExhausted,
}

fn fd_hint(error: &io::Error) -> &'static str {
    if crate::connection::is_fd_exhaustion(error) {
        ": too many open files; raise `ulimit -n` or use the file_system strategy"
    } else {
        ""
    }
}

/// Registered fds, keyed as CPython's `_ResourceSharer._cache`.
#[derive(Default)]
pub(crate) struct Table {
    fds: HashMap<i64, OwnedFd>,
    last_key: i64,
    closed: bool,
}

/// State the serving threads share with the [`ResourceSharer`].
pub(crate) struct Shared {
    pub(crate) authkey: Vec<u8>,
    pub(crate) options: SharerOptions,
    pub(crate) stopping: AtomicBool,
    pub(crate) counters: Counters,
    /// Where the accept thread hands connections to workers; `None` once
    /// shutting down, so that workers see the channel close.
    pub(crate) queue: Mutex<Option<SyncSender<UnixStream>>>,
    /// The connection each worker is serving, to cut it short at shutdown.
    pub(crate) in_flight: Vec<Mutex<Option<Arc<UnixStream>>>>,
    table: Mutex<Table>,
    /// What became of keys, until their owner collects it.
    reports: Mutex<KeyReports>,
}

/// What became of registered keys since their owner last asked: fetched
/// through the sharer (by a receiver that will never report them
/// unmapped), or reported unmapped by a tensorshare receiver.
#[derive(Debug, Default)]
pub(crate) struct KeyReports {
    pub(crate) fetched: Vec<i64>,
    pub(crate) unmapped: Vec<i64>,
}

/// The most keys of each kind kept for collection: a sender that never
/// collects them, or a client that reports too many, costs at most this
/// much memory. An unmapped key dropped here only means memory not reused;
/// a fetched one, a memfd kept until the pool gives up on it.
const MAX_REPORTS_KEPT: usize = 16 * 1024;

impl Shared {
    /// Removes `key`'s fd: the one serving of a key, or its withdrawal.
    pub(crate) fn take(&self, key: i64) -> Option<OwnedFd> {
        lock(&self.table).fds.remove(&key)
    }

    /// Notes that a receiver fetched `key`.
    pub(crate) fn note_fetched(&self, key: i64) {
        let mut reports = lock(&self.reports);
        if reports.fetched.len() < MAX_REPORTS_KEPT {
            reports.fetched.push(key);
        }
    }

    /// Keeps those of `keys` that were ever registered here for their
    /// owner to collect, closing any still registered: the receiver had
    /// the fd, and its release may be served after this on another worker.
    /// Returns how many were kept, and how many of those it closed.
    pub(crate) fn note_unmapped(&self, keys: &[i64]) -> (usize, usize) {
        let mut closed = Vec::new();
        let known: Vec<i64> = {
            let mut table = lock(&self.table);
            let last_key = table.last_key;
            keys.iter()
                .copied()
                .filter(|key| (1..=last_key).contains(key))
                .inspect(|key| closed.extend(table.fds.remove(key)))
                .collect()
        };
        let closed = closed.len();
        let unmapped = &mut lock(&self.reports).unmapped;
        let room = MAX_REPORTS_KEPT.saturating_sub(unmapped.len());
        let kept = known.len().min(room);
        unmapped.extend(known.into_iter().take(kept));
        (kept, closed)
    }
}

/// Locks `mutex`, carrying on if a thread panicked while holding it: every
/// critical section leaves the data consistent.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Threads {
    /// The listening socket as a stream, to wake `accept` with `shutdown(2)`.
    listener_waker: UnixStream,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// A `multiprocessing.resource_sharer`-compatible server: hands registered
/// fds, once each, to processes that present the authkey.
///
/// It listens on a socket in a fresh private directory (mode 0700,
/// `$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`, named as CPython names
/// its own) and serves on background threads. Dropping the
/// last `Arc` (the owner's and every [`Registration`]'s) shuts it down, as
/// does [`ResourceSharer::shutdown`]: the threads stop, the socket and
/// directory are removed, and every fd still registered is closed.
pub struct ResourceSharer {
    shared: Arc<Shared>,
    address: String,
    socket_path: PathBuf,
    dir: PrivateTempDir,
    threads: Mutex<Option<Threads>>,
}

impl ResourceSharer {
    /// Starts a sharer with [`SharerOptions::default`]; clients must present
    /// `authkey` (in CPython, `multiprocessing.current_process().authkey`).
    ///
    /// # Errors
    ///
    /// As [`ResourceSharer::start_with`].
    pub fn start(authkey: &[u8]) -> Result<Arc<Self>, SharerError> {
        Self::start_with(authkey, SharerOptions::default())
    }

    /// Starts a sharer with `options`.
    ///
    /// # Errors
    ///
    /// [`SharerError::TempDir`] when no private directory can be made,
    /// [`SharerError::Bind`] when the socket cannot be bound,
    /// [`SharerError::Spawn`] when a thread cannot be started. Nothing is
    /// left behind on error.
    pub fn start_with(authkey: &[u8], options: SharerOptions) -> Result<Arc<Self>, SharerError> {
        // Dropping `dir` on an early return removes it and what is inside.
        let dir = PrivateTempDir::create().map_err(|cause| SharerError::TempDir { cause })?;
        let socket_path = dir
            .unique_address()
            .map_err(|cause| SharerError::TempDir { cause })?
            .as_path()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let listener = match UnixListener::bind(&socket_path) {
            Ok(listener) => listener,
            Err(cause) => {
                return Err(SharerError::Bind {
                    path: socket_path,
                    cause,
                });
            }
        };
        let listener_waker = match listener.try_clone() {
            Ok(clone) => UnixStream::from(OwnedFd::from(clone)),
            Err(cause) => {
                return Err(SharerError::Bind {
                    path: socket_path,
                    cause,
                });
            }
        };
        let (sender, receiver) = std::sync::mpsc::sync_channel(options.workers());
        let shared = Arc::new(Shared {
            authkey: authkey.to_vec(),
            options,
            stopping: AtomicBool::new(false),
            counters: Counters::default(),
            queue: Mutex::new(Some(sender)),
            in_flight: (0..options.workers()).map(|_| Mutex::new(None)).collect(),
            table: Mutex::new(Table::default()),
            reports: Mutex::new(KeyReports::default()),
        });
        // From here on, dropping `sharer` on error undoes everything.
        let sharer = Arc::new(Self {
            shared: Arc::clone(&shared),
            address: socket_path.to_string_lossy().into_owned(),
            socket_path: socket_path.clone(),
            dir,
            threads: Mutex::new(None),
        });
        *lock(&sharer.threads) = Some(Threads {
            listener_waker,
            acceptor: None,
            workers: Vec::with_capacity(options.workers()),
        });
        let receiver: Arc<Mutex<Receiver<UnixStream>>> = Arc::new(Mutex::new(receiver));
        for slot in 0..options.workers() {
            let shared = Arc::clone(&shared);
            let receiver = Arc::clone(&receiver);
            let worker = thread::Builder::new()
                .name("resource-sharer-worker".into())
                .spawn(move || worker_loop(&shared, &receiver, slot))
                .map_err(|cause| SharerError::Spawn { cause })?;
            if let Some(threads) = lock(&sharer.threads).as_mut() {
                threads.workers.push(worker);
            }
        }
        let acceptor = thread::Builder::new()
            .name("resource-sharer".into())
            .spawn(move || accept_loop(&shared, &listener))
            .map_err(|cause| SharerError::Spawn { cause })?;
        if let Some(threads) = lock(&sharer.threads).as_mut() {
            threads.acceptor = Some(acceptor);
        }
        Ok(sharer)
    }

    /// Registers `fd` to be handed out once, and returns the guard that
    /// names it.
    ///
    /// The fd stays registered until a receiver fetches it (the sharer then
    /// closes it after sending, as CPython does), the [`Registration`] is
    /// dropped or withdrawn (closing it unfetched), or the sharer shuts down.
    /// Callable from any thread.
    ///
    /// # Errors
    ///
    /// [`RegisterError::ShutDown`] after [`ResourceSharer::shutdown`]; the fd
    /// is closed.
    pub fn register(self: &Arc<Self>, fd: OwnedFd) -> Result<Registration, RegisterError> {
        let key = {
            let mut table = lock(&self.shared.table);
            if table.closed {
                return Err(RegisterError::ShutDown);
            }
            let key = table
                .last_key
                .checked_add(1)
                .ok_or(RegisterError::KeysExhausted)?;
            table.last_key = key;
            table.fds.insert(key, fd);
            key
        };
        let id = DupFdId {
            address: self.address.clone(),
            key,
        };
        Ok(Registration::new(Arc::clone(self), id))
    }

    /// The socket address as bytes, as [`fetch_fd`](super::fetch_fd) takes it.
    pub fn address(&self) -> &[u8] {
        self.address.as_bytes()
    }

    /// The socket address as the `str` that goes into a `DupFd`'s `_id`.
    pub fn address_str(&self) -> &str {
        &self.address
    }

    /// The socket's filesystem path.
    pub fn socket_path(&self) -> &Path {
        &self.socket_path
    }

    /// The options the sharer was started with.
    pub fn options(&self) -> SharerOptions {
        self.shared.options
    }

    /// Counts of what the sharer has served and refused so far.
    pub fn stats(&self) -> SharerStats {
        self.shared
            .counters
            .snapshot(lock(&self.shared.table).fds.len())
    }

    /// Stops serving: closes every registered fd, cuts off connections in
    /// progress, stops the threads and removes the socket and its directory.
    /// Later [`ResourceSharer::register`] calls fail. Idempotent; dropping
    /// the last `Arc` does the same.
    ///
    /// Threads that have not stopped within two seconds in all are left to
    /// finish on their own rather than blocking the caller; that takes an `accept` that
    /// neither `shutdown(2)` nor a connection can wake, which Linux does not
    /// do.
    pub fn shutdown(&self) {
        let Some(threads) = lock(&self.threads).take() else {
            return;
        };
        // One grace period for all the threads together.
        let deadline = Instant::now() + JOIN_GRACE;
        let shared = &self.shared;
        shared.stopping.store(true, Ordering::SeqCst);
        {
            let mut table = lock(&shared.table);
            table.closed = true;
            table.fds.clear();
        }
        drop(lock(&shared.queue).take());
        // Cut off connections in progress first: with every worker stalled,
        // the accept thread may be waiting to queue one more.
        for slot in &shared.in_flight {
            if let Some(stream) = lock(slot).as_ref() {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
        // Linux wakes a blocked `accept` with EINVAL on `shutdown(2)` of the
        // listening socket; the connection is there for kernels that do not.
        let _ = threads.listener_waker.shutdown(Shutdown::Both);
        if let Some(acceptor) = threads.acceptor {
            if !acceptor.is_finished() {
                let _ = UnixStream::connect(&self.socket_path);
            }
            join_within(acceptor, deadline);
        }
        for worker in threads.workers {
            join_within(worker, deadline);
        }
        drop(threads.listener_waker);
        // Failures leave only an empty directory or a dead socket file in
        // our private temp dir; there is no one to report them to in Drop.
        let _ = std::fs::remove_file(&self.socket_path);
        let _ = std::fs::remove_dir(self.dir.path());
    }

    /// Withdraws `key`: the fd if it was still registered.
    pub(crate) fn withdraw(&self, key: i64) -> Option<OwnedFd> {
        self.shared.take(key)
    }

    pub(crate) fn is_registered(&self, key: i64) -> bool {
        lock(&self.shared.table).fds.contains_key(&key)
    }

    /// What became of keys since the last call.
    pub(crate) fn take_reports(&self) -> KeyReports {
        std::mem::take(&mut *lock(&self.shared.reports))
    }
}

/// Joins `handle` if it finishes by `deadline`; otherwise leaves it running.
pub(crate) fn join_within(handle: JoinHandle<()>, deadline: Instant) {
    while !handle.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(1));
    }
    if handle.is_finished() {
        // A panic in the thread has already been reported by the panic
        // hook; the caller, shutting down, has nothing to add.
        let _ = handle.join();
    }
}

impl Drop for ResourceSharer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl fmt::Debug for ResourceSharer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The authkey is left out on purpose.
        f.debug_struct("ResourceSharer")
            .field("address", &self.address)
            .field("options", &self.shared.options)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
