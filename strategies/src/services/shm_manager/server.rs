//! The manager: libshm's server side, with the fixes its clients cannot see.

mod private_dir;
mod registrations;
mod serve_loop;
mod session;

#[cfg(test)]
mod pipeline_tests;
#[cfg(test)]
mod tests;

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{ManagerError, ManagerHandle, daemon};
use crate::platform::errno_of;
use crate::platform::private_dir::MANAGER_SOCKET_NAME;
use crate::platform::segment_name::SegmentName;
use private_dir::create_private_dir;
use serve_loop::ServeState;

pub(super) use serve_loop::poll_timeout;

#[cfg(doc)]
use super::AllocInfo;

/// How long the manager waits with no client before exiting, and how long
/// a segment whose last registrant vanished is kept for another process to
/// register it: torch's `SHUTDOWN_TIMEOUT`.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a manager with no client left keeps a segment that a message
/// on its way to a receiver still counts: as long as a sender keeps an
/// unfetched fd or a sent `memmap` file for its receivers by default.
pub const DEFAULT_IN_FLIGHT_WAIT: Duration = Duration::from_secs(300);

/// Sets, in seconds, the in-flight wait of the managers a process starts,
/// which inherit it (`0`: a segment no client is left to read goes at the
/// idle timeout). For a machine where receivers are often killed with
/// messages unread, and for tests that kill them.
pub const IN_FLIGHT_WAIT_ENV: &str = "TENSORSHARE_SHM_IN_FLIGHT_WAIT";

/// The in-flight wait [`IN_FLIGHT_WAIT_ENV`] sets: `None` when it is unset,
/// and an error naming it when [`parse_in_flight_wait`] refuses it.
pub fn in_flight_wait_from_env() -> Result<Option<Duration>, String> {
    let Some(value) = std::env::var_os(IN_FLIGHT_WAIT_ENV) else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    parse_in_flight_wait(&text)
        .map(Some)
        .map_err(|why| format!("{IN_FLIGHT_WAIT_ENV}: {why}"))
}

/// An in-flight wait written in seconds, from 0 to a day.
pub fn parse_in_flight_wait(text: &str) -> Result<Duration, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|secs| (0.0..=86_400.0).contains(secs))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a number of seconds from 0 to 86400"))
}

/// The most names a manager tracks at once; a client registering more is
/// disconnected. A training job sharing a million live segments has run out
/// of mappings long before.
pub const MAX_REGISTERED_NAMES: usize = 1 << 20;

/// A shared-memory manager listening on its socket, ready to
/// [`serve`](Self::serve).
///
/// It speaks libshm's protocol, so torch processes register with it as with
/// `torch_shm_manager`: each client sends an [`AllocInfo`]; a registration
/// is answered `OK`, a deallocation is not. Beyond torch's manager:
///
/// - a message may arrive in pieces; a client whose bytes do not decode is
///   disconnected and logged on stderr, and the others are served on (torch's
///   manager dies);
/// - it tracks which clients registered each name: when the last of them
///   disconnects without freeing it, the name is unlinked after the grace
///   period (the idle timeout) unless someone registers it again, so a
///   long-lived manager does not keep dead processes' segments until it
///   exits. A name whose header still counts more than the registrants that
///   vanished (a message naming it not yet opened by its receiver) is kept
///   instead, while any client is connected, as torch's manager keeps every
///   name: a sender that exits or is killed loses none of the messages it
///   sent;
/// - running out of fds while accepting pauses accepting instead of
///   spinning;
/// - names reach `shm_unlink` only after parsing as a [`SegmentName`], and
///   only when the object belongs to the manager's own user (checked with
///   `fstat` on the opened object; root too): another user's segment is
///   left in place and logged;
/// - it never unlinks a segment some process still has open or mapped (a
///   write lease on it tells, which the kernel grants only when no other
///   open file refers to it): after a manager died and its clients took
///   over with managers of their own, a holder may be registered with
///   another manager than this one, and torch aborts a process whose
///   segment was unlinked under it. An orphan still held is looked at
///   again after each grace period. An idle manager does not exit while a
///   name it is left to unlink is still held: such a holder may be dying
///   without counting down (torch aborts a process whose manager vanished
///   under a registration), and once it is gone nobody else would unlink
///   the name. Only a manager stopped through its shutdown fd leaves held
///   names in place ([`ManagerReport::left_held`]).
///
/// Dropping it removes the socket, and the private directory it made.
///
/// # Examples
///
/// ```no_run
/// use tensorshare_strategies::services::shm_manager::{ManagerServer, ServeOptions};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = ManagerServer::bind_in_private_dir()?;
/// println!("{}", server.handle());
/// let report = server.serve(ServeOptions::default())?;
/// eprintln!("unlinked {} segments", report.unlinked.len());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct ManagerServer {
    listener: UnixListener,
    handle: ManagerHandle,
    /// `(st_dev, st_ino)` of the socket file, so that only our own socket
    /// is removed.
    socket_file: Option<(u64, u64)>,
    private_dir: Option<PathBuf>,
}

impl ManagerServer {
    /// Listens on `path`, made absolute against the working directory.
    ///
    /// # Errors
    ///
    /// [`ManagerError::InvalidHandle`] when the path is too long for a
    /// socket, [`ManagerError::Bind`] when binding fails (`EADDRINUSE` when
    /// something is already there: it is never removed).
    pub fn bind(path: impl AsRef<Path>) -> Result<Self, ManagerError> {
        let path = path.as_ref();
        let path = std::path::absolute(path).map_err(|err| ManagerError::Bind {
            path: path.display().to_string(),
            errno: errno_of(&err),
        })?;
        Self::bind_handle(ManagerHandle::from_path(&path)?)
    }

    /// Listens on `manager.sock` in a fresh directory of mode 0700 named
    /// `tensorshare-shm-XXXXXX`, made in `$TMPDIR` (or `/tmp` when that is
    /// unset, relative, or too deep for a socket path).
    ///
    /// # Errors
    ///
    /// [`ManagerError::CreateDir`] when no directory can be made,
    /// [`ManagerError::Bind`] when binding fails.
    pub fn bind_in_private_dir() -> Result<Self, ManagerError> {
        let dir = create_private_dir()?;
        match Self::bind_handle(ManagerHandle::from_path(dir.join(MANAGER_SOCKET_NAME))?) {
            Ok(mut server) => {
                server.private_dir = Some(dir);
                Ok(server)
            }
            Err(err) => {
                let _ = std::fs::remove_dir(&dir);
                Err(err)
            }
        }
    }

    fn bind_handle(handle: ManagerHandle) -> Result<Self, ManagerError> {
        let bind_error = |err: std::io::Error| ManagerError::Bind {
            path: handle.to_string(),
            errno: errno_of(&err),
        };
        let listener = UnixListener::bind(handle.path()).map_err(bind_error)?;
        let socket_file = std::fs::symlink_metadata(handle.path())
            .ok()
            .map(|m| (m.dev(), m.ino()));
        let server = ManagerServer {
            listener,
            handle: handle.clone(),
            socket_file,
            private_dir: None,
        };
        server.listener.set_nonblocking(true).map_err(bind_error)?;
        Ok(server)
    }

    /// The handle clients connect to: the socket's path.
    pub fn handle(&self) -> &ManagerHandle {
        &self.handle
    }

    /// Forks into the background like `daemon(3)`: this process exits with
    /// status 0 at once, and the server is returned in the child, which runs
    /// in a new session (no terminal sends it SIGINT or SIGHUP) with its
    /// standard streams on `/dev/null`. Print the handle before calling
    /// this: the launcher reads it from the pipe this closes.
    ///
    /// # Errors
    ///
    /// [`ManagerError::NotSingleThreaded`] when the process runs more than
    /// one thread (fork would copy only the calling one), or
    /// [`ManagerError::Daemonize`]. The socket is removed on error.
    pub fn daemonize(self) -> Result<Self, ManagerError> {
        daemon::become_daemon()?;
        Ok(self)
    }

    /// Serves clients until none has been connected for the idle timeout,
    /// no name it is to unlink is still held by some process and none is
    /// within its in-flight wait ([`ServeOptions::with_in_flight_wait`]), or the
    /// shutdown fd polls readable; then unlinks every name still
    /// registered, removes the socket (and private directory), and reports.
    ///
    /// # Errors
    ///
    /// [`ManagerError::Serve`] when `poll` fails for a reason other than a
    /// signal or a transient shortage; everything registered is unlinked
    /// first, as on a normal exit.
    pub fn serve(self, options: ServeOptions) -> Result<ManagerReport, ManagerError> {
        let mut state = ServeState::new(options.idle_timeout, options.in_flight_wait);
        let stopped = state.run(&self.listener, options.shutdown.as_ref());
        state.unlink_all();
        drop(self);
        let stop = stopped?;
        Ok(ManagerReport {
            stop,
            ..state.report
        })
    }
}

impl Drop for ManagerServer {
    fn drop(&mut self) {
        // Only the socket this server bound: if someone replaced the file,
        // it is theirs. Failures leave a file in a temp directory; nothing
        // to do about them here.
        let ours = std::fs::symlink_metadata(self.handle.path())
            .is_ok_and(|m| Some((m.dev(), m.ino())) == self.socket_file);
        if ours {
            let _ = std::fs::remove_file(self.handle.path());
        }
        if let Some(dir) = &self.private_dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// How [`ManagerServer::serve`] runs.
#[derive(Debug)]
pub struct ServeOptions {
    idle_timeout: Duration,
    in_flight_wait: Duration,
    shutdown: Option<OwnedFd>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            in_flight_wait: DEFAULT_IN_FLIGHT_WAIT,
            shutdown: None,
        }
    }
}

impl ServeOptions {
    /// How long to go on with no client before exiting, and how long a name
    /// whose last registrant disconnected is kept for someone to register it
    /// again. Default [`DEFAULT_IDLE_TIMEOUT`], torch's 2 s.
    pub fn with_idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// How long, once no client is connected, to keep a segment whose
    /// header still counts a message nobody has opened: its sender let go
    /// of it (exited, or was killed), and its receiver, not yet a client,
    /// may still open it. Default [`DEFAULT_IN_FLIGHT_WAIT`]. While any
    /// client is connected such a segment is kept regardless; after the
    /// wait it is unlinked like any other, and the manager exits.
    pub fn with_in_flight_wait(mut self, wait: Duration) -> Self {
        self.in_flight_wait = wait;
        self
    }

    /// Stops serving (as when idle) once `fd` polls readable or hung up: the
    /// read end of a pipe or socket pair a signal handler writes to.
    pub fn with_shutdown(mut self, fd: impl Into<OwnedFd>) -> Self {
        self.shutdown = Some(fd.into());
        self
    }

    /// The idle timeout and grace period.
    pub fn idle_timeout(&self) -> Duration {
        self.idle_timeout
    }
}

/// Why [`ManagerServer::serve`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StopReason {
    /// No client was connected for the idle timeout.
    Idle,
    /// The shutdown fd polled readable.
    Shutdown,
}

/// What a manager did while it served.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ManagerReport {
    /// Why it stopped.
    pub stop: StopReason,
    /// Connections accepted.
    pub clients: u64,
    /// Clients disconnected for sending bytes that are not an `AllocInfo`
    /// (or for registering more than [`MAX_REGISTERED_NAMES`]).
    pub rejected_clients: u64,
    /// Registrations answered `OK`.
    pub registrations: u64,
    /// Every segment it unlinked: those whose registrants all disconnected,
    /// and those still registered when it stopped.
    pub unlinked: Vec<SegmentName>,
    /// Segments it was due to unlink but left in place because another
    /// user owns them: a client may register any name a message showed
    /// it, and this manager removes only its own user's objects.
    pub left_to_other_users: Vec<SegmentName>,
    /// Segments still registered when it was stopped through its shutdown
    /// fd that it left in place because some process still had them open
    /// or mapped: a holder registered with another manager, after this one
    /// took over from a manager that died. (An idle manager waits for such
    /// holders instead.) Their holders unlink them as their counts reach
    /// zero; `tensorshare gc` reclaims those whose holders die first.
    pub left_held: Vec<SegmentName>,
}
