//! [`SharerOptions`]: how a sharer serves, and [`SharerSocket`]: where it
//! listens.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use tensorshare_compat::connection::Dialect;

/// How a [`ResourceSharer`](super::ResourceSharer) serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharerOptions {
    connection_timeout: Duration,
    workers: usize,
    dialect: Dialect,
    socket: SharerSocket,
}

impl SharerOptions {
    /// Ten seconds per connection, four workers, the CPython >= 3.12
    /// challenge (which every CPython client answers), a socket in the
    /// abstract namespace ([`SharerSocket::Abstract`]).
    pub fn new() -> Self {
        Self {
            connection_timeout: Duration::from_secs(10),
            workers: 4,
            dialect: Dialect::Modern,
            socket: SharerSocket::Abstract,
        }
    }

    /// Sets how long one connection may take from accept to the fd being
    /// sent; a client slower than that is disconnected and counted in
    /// [`SharerStats::timed_out`](super::SharerStats::timed_out). Zero is raised to one millisecond.
    #[must_use]
    #[cfg(test)] // the unit tests use it
    pub fn with_connection_timeout(mut self, timeout: Duration) -> Self {
        self.connection_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets how many connections are served at once (at least 1): so many
    /// stalled clients can delay the others by up to the connection timeout.
    #[must_use]
    #[cfg(test)] // the unit tests use it
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Sets where the sharer listens ([`SharerSocket`]).
    #[must_use]
    pub fn with_socket(mut self, socket: SharerSocket) -> Self {
        self.socket = socket;
        self
    }

    /// The time limit per connection.
    pub fn connection_timeout(&self) -> Duration {
        self.connection_timeout
    }

    /// How many connections are served at once.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The challenge the sharer sends.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Where the sharer listens.
    pub fn socket(&self) -> &SharerSocket {
        &self.socket
    }
}

impl Default for SharerOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// The environment variable that moves a process's resource sharer from the
/// abstract namespace to a socket file in a private directory made in the
/// directory it names ([`SharerSocket::from_env`]).
pub const SHARER_DIR_ENV: &str = "TENSORSHARE_SHARER_DIR";

/// Where a process's resource sharer listens.
///
/// The default is a fresh name in Linux's abstract socket namespace,
/// `tensorshare-sharer-<pid>-XXXXXXXXXXXXXXXX` (16 random characters): the
/// name vanishes with the last fd of the socket, so a process killed by
/// SIGKILL leaves nothing on disk, which a socket file in `$TMPDIR` does
/// (torch's sharer leaves `pymp-*/listener-*` behind). CPython's `Client`
/// connects to such an address; a `DupFd` carries it as `bytes`, as
/// CPython's own listener reports an abstract address.
///
/// An abstract name is visible to every process in the same network
/// namespace (`/proc/net/unix` lists it), so its randomness is not what
/// keeps others out: the sharer refuses connections from processes of other
/// users (root excepted), as the mode-0700 directory of a socket file does,
/// and then asks for the authkey.
///
/// [`SharerSocket::PathIn`] listens on a socket file instead, for peers the
/// abstract namespace does not reach: abstract names are per network
/// namespace, so a receiver in another one (a container with its own
/// network, `unshare -n`, a sandbox) that shares a directory with the
/// sender can reach only a path there. The file lives in a fresh mode-0700
/// directory `tensorshare-sharer-<pid>-XXXXXXXX` made in the directory
/// given, removed at shutdown; one left by a killed process is removed by
/// `tensorshare gc`, which tells it from other programs' by its name.
///
/// # Examples
///
/// A context whose receivers share a directory with it but not its
/// network namespace:
///
/// ```
/// use tensorshare::resource_sharer::SharerSocket;
/// use tensorshare::{Authkey, SharingContext, StrategyKind, Tensor, Value};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let shared_dir = tempfile::tempdir()?;
/// let sharing = SharingContext::new(Authkey::random()?)
///     .with_strategy(StrategyKind::FileDescriptor)
///     .with_sharer_socket(SharerSocket::PathIn(shared_dir.path().into()));
/// // The sharer starts with the first storage sent by file_descriptor.
/// let tensor = Tensor::from_slice(&sharing, &[1.0f32, 2.0], &[2])?;
/// let _pickle = sharing.dumps(&Value::Tensor(tensor))?;
/// let made: Vec<_> = std::fs::read_dir(shared_dir.path())?.collect::<Result<_, _>>()?;
/// assert_eq!(made.len(), 1);
/// assert!(made[0].file_name().to_string_lossy().starts_with("tensorshare-sharer-"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum SharerSocket {
    /// A fresh name in the abstract namespace: nothing on disk.
    #[default]
    Abstract,
    /// A socket file in a fresh private directory made in this one.
    PathIn(PathBuf),
}

impl SharerSocket {
    /// [`SharerSocket::PathIn`] the directory named by
    /// `TENSORSHARE_SHARER_DIR` ([`SHARER_DIR_ENV`]) when it is set and not
    /// empty, [`SharerSocket::Abstract`] otherwise. This is what a
    /// [`SharingContext`](crate::SharingContext) uses unless told otherwise.
    ///
    /// # Errors
    ///
    /// The variable's value, when it is not an absolute UTF-8 path (socket
    /// paths travel in pickles as `str`).
    pub fn from_env() -> Result<Self, OsString> {
        match std::env::var_os(SHARER_DIR_ENV) {
            None => Ok(Self::Abstract),
            Some(value) if value.is_empty() => Ok(Self::Abstract),
            Some(value) => {
                let path = PathBuf::from(&value);
                if path.is_absolute() && path.to_str().is_some() {
                    Ok(Self::PathIn(path))
                } else {
                    Err(value)
                }
            }
        }
    }
}
