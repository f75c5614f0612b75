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
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tensorshare_strategies::platform::private_dir::{SHARER_PREFIX, create_sharer_dir_in};

use super::options::{SharerOptions, SharerSocket};
use super::registration::{DupFdId, Registration};
use super::serve::{PeerUids, accept_loop, worker_loop};
use super::stats::{Counters, SharerStats};
use crate::connection::{Address, ConnectionError, PrivateTempDir, RegisteredFds};
use crate::sync::lock;

/// How long shutdown waits for a thread before leaving it behind.
const JOIN_GRACE: Duration = Duration::from_secs(2);

/// Why a sharer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SharerError {
    /// The private directory for a socket file
    /// ([`SharerSocket::PathIn`](super::SharerSocket::PathIn)) could not be
    /// made, or the socket path would not fit.
    #[error(
        "could not create a private directory for the resource sharer's socket in {}: {cause}; \
         point TENSORSHARE_SHARER_DIR at a writable directory with a short path, or unset it \
         to listen in the abstract namespace",
        .dir.display()
    )]
    TempDir {
        /// Where the directory was to be made.
        dir: PathBuf,
        /// What creating it failed with.
        cause: ConnectionError,
    },
    /// `TENSORSHARE_SHARER_DIR` is set to something other than an absolute
    /// UTF-8 path.
    #[error(
        "TENSORSHARE_SHARER_DIR={value:?} is not an absolute UTF-8 path: set it to the directory \
         the resource sharer's socket should go in, or unset it to listen in the abstract \
         namespace"
    )]
    SocketDirSetting {
        /// The variable's value, lossily decoded.
        value: String,
    },
    /// The socket could not be bound.
    #[error("could not listen on {address}: {cause}{}", fd_hint(.cause))]
    Bind {
        /// The socket address, as shown: a path, or `@name`.
        address: String,
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
    pub(crate) fn io_error(&self) -> Option<&io::Error> {
        match self {
            SharerError::TempDir { cause, .. } => cause.io_error(),
            SharerError::SocketDirSetting { .. } => None,
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
    /// Whose connections are served.
    pub(crate) peer_uids: PeerUids,
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

struct Threads {
    /// The listening socket as a stream, to wake `accept` with `shutdown(2)`.
    listener_waker: UnixStream,
    acceptor: Option<JoinHandle<()>>,
    workers: Vec<JoinHandle<()>>,
}

/// A `multiprocessing.resource_sharer`-compatible server: hands registered
/// fds, once each, to processes of this user that present the authkey.
///
/// It listens on a fresh name in Linux's abstract socket namespace
/// (`tensorshare-sharer-<pid>-XXXXXXXXXXXXXXXX`), which vanishes with the
/// process however it ends, or on a socket file in a private directory when
/// [`SharerSocket::PathIn`] says so; [`SharerSocket`] says why one would.
/// It serves on background threads. Dropping the last `Arc` (the owner's
/// and every [`Registration`]'s) shuts it down, as does
/// [`ResourceSharer::shutdown`]: the threads stop, a socket file and its
/// directory are removed, and every fd still registered is closed.
pub struct ResourceSharer {
    shared: Arc<Shared>,
    address: Address,
    /// `address` as a `DupFd` carries it: the path, or NUL and the abstract
    /// name.
    address_text: String,
    /// The private directory of a socket file.
    dir: Option<PrivateTempDir>,
    threads: Mutex<Option<Threads>>,
}

/// Binds a fresh abstract name, [`Address::unique_abstract`]'s
/// `tensorshare-sharer-<pid>-` and random characters, which gc's
/// [`SHARER_PREFIX`] recognizes.
fn bind_abstract() -> Result<(UnixListener, Address), SharerError> {
    Address::listen_unique_abstract("sharer").map_err(|error| match error {
        ConnectionError::Bind { address, cause } => SharerError::Bind {
            address: address.to_string(),
            cause,
        },
        other => SharerError::Bind {
            address: format!("@{SHARER_PREFIX}..."),
            cause: io::Error::other(other.to_string()),
        },
    })
}

/// Binds `listener-XXXXXXXX` in a fresh private directory
/// `tensorshare-sharer-<pid>-XXXXXXXX` in `parent`.
fn bind_in(parent: &Path) -> Result<(UnixListener, Address, PrivateTempDir), SharerError> {
    let temp_dir_error = |cause| SharerError::TempDir {
        dir: parent.to_path_buf(),
        cause,
    };
    if parent.to_str().is_none() {
        return Err(temp_dir_error(ConnectionError::InvalidAddress {
            address: parent.to_string_lossy().into_owned(),
            reason: "socket paths travel in pickles as str, and this one is not UTF-8".into(),
        }));
    }
    let path = create_sharer_dir_in(parent).map_err(|e| {
        temp_dir_error(ConnectionError::io(
            "creating a private socket directory",
            e,
        ))
    })?;
    // Dropping `dir` on an early return removes it and what is inside.
    let dir = PrivateTempDir::adopt(path);
    let address = dir.unique_address().map_err(temp_dir_error)?;
    match address.listen() {
        Ok(listener) => Ok((listener, address, dir)),
        Err(cause) => Err(SharerError::Bind {
            address: address.to_string(),
            cause,
        }),
    }
}

impl ResourceSharer {
    /// Starts a sharer with [`SharerOptions::default`]; clients must present
    /// `authkey` (in CPython, `multiprocessing.current_process().authkey`).
    ///
    /// # Errors
    ///
    /// As [`ResourceSharer::start_with`].
    #[cfg(test)] // the unit tests use it
    pub fn start(authkey: &[u8]) -> Result<Arc<Self>, SharerError> {
        Self::start_with(authkey, SharerOptions::default())
    }

    /// Starts a sharer with `options`.
    ///
    /// # Errors
    ///
    /// [`SharerError::TempDir`] when the private directory for a socket
    /// file cannot be made, [`SharerError::Bind`] when the socket cannot be
    /// bound, [`SharerError::Spawn`] when a thread cannot be started.
    /// Nothing is left behind on error.
    pub fn start_with(authkey: &[u8], options: SharerOptions) -> Result<Arc<Self>, SharerError> {
        let (listener, address, dir) = match options.socket() {
            SharerSocket::PathIn(parent) => {
                let (listener, address, dir) = bind_in(parent)?;
                (listener, address, Some(dir))
            }
            SharerSocket::Abstract => {
                let (listener, address) = bind_abstract()?;
                (listener, address, None)
            }
        };
        let address_text = String::from_utf8_lossy(&address.to_bytes()).into_owned();
        let listener_waker = match listener.try_clone() {
            Ok(clone) => UnixStream::from(OwnedFd::from(clone)),
            Err(cause) => {
                return Err(SharerError::Bind {
                    address: address.to_string(),
                    cause,
                });
            }
        };
        let workers = options.workers();
        let (sender, receiver) = std::sync::mpsc::sync_channel(workers);
        let shared = Arc::new(Shared {
            authkey: authkey.to_vec(),
            options,
            peer_uids: PeerUids::this_user(),
            stopping: AtomicBool::new(false),
            counters: Counters::default(),
            queue: Mutex::new(Some(sender)),
            in_flight: (0..workers).map(|_| Mutex::new(None)).collect(),
            table: Mutex::new(Table::default()),
            reports: Mutex::new(KeyReports::default()),
        });
        // From here on, dropping `sharer` on error undoes everything.
        let sharer = Arc::new(Self {
            shared: Arc::clone(&shared),
            address,
            address_text,
            dir,
            threads: Mutex::new(None),
        });
        *lock(&sharer.threads) = Some(Threads {
            listener_waker,
            acceptor: None,
            workers: Vec::with_capacity(workers),
        });
        let receiver: Arc<Mutex<Receiver<UnixStream>>> = Arc::new(Mutex::new(receiver));
        for slot in 0..workers {
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
            address: self.address_text.clone(),
            key,
        };
        Ok(Registration::new(Arc::clone(self), id))
    }

    /// The socket address as bytes, as [`fetch_fd`](super::fetch_fd) takes it
    /// and as a `DupFd`'s `_id` carries it: NUL and the name for an abstract
    /// address (pickled as `bytes`, as CPython reports one), or the path
    /// (pickled as `str`).
    #[cfg(test)] // the unit tests use it
    pub fn address(&self) -> &[u8] {
        self.address_text.as_bytes()
    }

    /// [`ResourceSharer::address`] as text, with its leading NUL when
    /// abstract: what [`DupFdId::address`] holds.
    #[cfg(test)] // the unit tests use it
    pub fn address_str(&self) -> &str {
        &self.address_text
    }

    /// The socket address.
    #[cfg(test)] // the unit tests use it
    pub fn socket_address(&self) -> &Address {
        &self.address
    }

    /// The socket file's path, when it listens on one
    /// ([`SharerSocket::PathIn`]); `None` in the abstract namespace.
    #[cfg(test)] // the unit tests use it
    pub fn socket_path(&self) -> Option<&Path> {
        self.address.as_path()
    }

    /// Counts of what the sharer has served and refused so far.
    pub fn stats(&self) -> SharerStats {
        self.shared
            .counters
            .snapshot(lock(&self.shared.table).fds.len())
    }

    /// Stops serving: closes every registered fd, cuts off connections in
    /// progress, stops the threads and removes a socket file and its
    /// directory.
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
            if !acceptor.is_finished()
                && let Ok(socket_address) = self.address.to_socket_addr()
            {
                let _ = UnixStream::connect_addr(&socket_address);
            }
            join_within(acceptor, deadline);
        }
        for worker in threads.workers {
            join_within(worker, deadline);
        }
        drop(threads.listener_waker);
        // Failures leave only an empty directory or a dead socket file in
        // our private temp dir, which `tensorshare gc` removes; there is no
        // one to report them to in Drop. An abstract name is gone already.
        if let (Some(path), Some(dir)) = (self.address.as_path(), &self.dir) {
            let _ = std::fs::remove_file(path);
            let _ = std::fs::remove_dir(dir.path());
        }
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

/// What a connection withdraws, once its peer has died, of the fds
/// registered for the messages it carried.
impl RegisteredFds for ResourceSharer {
    fn retain_registered(&self, keys: &mut Vec<i64>) {
        let table = lock(&self.shared.table);
        keys.retain(|key| table.fds.contains_key(key));
    }

    /// Closes the fds after the table's lock is released.
    fn withdraw_all(&self, keys: &[i64]) -> usize {
        let withdrawn: Vec<OwnedFd> = {
            let mut table = lock(&self.shared.table);
            keys.iter()
                .filter_map(|key| table.fds.remove(key))
                .collect()
        };
        withdrawn.len()
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
            .field("address", &self.address.to_string())
            .field("options", &self.shared.options)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
