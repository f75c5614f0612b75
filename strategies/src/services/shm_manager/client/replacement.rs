//! Standing in for this process's own manager when it dies: noticing it,
//! starting or finding the next one, and removing what the dead one left.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Weak};
use std::time::Duration;

use nix::errno::Errno;
use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::link::{Link, Replies};
use super::{MANAGER_ENV, ManagerConnection, State, handle_from_env};
use crate::platform::private_dir::{SocketDirKind, SocketDirName};
use crate::services::orphans::{SocketDirScanOptions, scan_socket_dirs};
use crate::services::shm_manager::{ManagerError, ManagerHandle, launch};

/// How long the watching thread waits between looks when nothing happens:
/// it ends within this long of its connection going, should the wake-up
/// its `Drop` sends not arrive.
const WATCH_NAP: Duration = Duration::from_secs(5);

/// How long the watching thread waits before trying again when no manager
/// could take over.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// `POLLRDHUP`, which nix does not name: the peer shut down or closed its
/// end.
const POLLRDHUP: PollFlags = PollFlags::from_bits_retain(libc::POLLRDHUP);

/// A link to a new own manager: the one [`MANAGER_ENV`] names if it
/// answers (a supervisor may have started it again there), else a daemon
/// started for the purpose.
pub(super) fn open_own_link() -> Result<Link, ManagerError> {
    if let Some(value) = std::env::var_os(MANAGER_ENV).filter(|v| !v.is_empty())
        && let Ok(link) = Link::open(&handle_from_env(&value)?)
    {
        return Ok(link);
    }
    launch_link()
}

/// Starts a manager daemon and connects to it.
pub(super) fn launch_link() -> Result<Link, ManagerError> {
    let launched = launch::DaemonLaunch::spawn(&launch::ManagerProgram::find()?)?;
    // Connect before reaping: the daemon's idle clock runs from its start.
    let link = Link::open(launched.handle());
    launched.reap()?;
    link
}

/// Removes the private directory of the manager at `handle`, which has
/// gone: a killed manager leaves `tensorshare-shm-XXXXXX/manager.sock`
/// behind. Only a manager directory of tensorshare's, this user's, holding
/// nothing but its socket, on which nothing listens, is removed (the rules
/// of [`scan_socket_dirs`]); torch's and anything else are left alone.
pub(super) fn remove_socket_dir(handle: &ManagerHandle) {
    let Some(dir) = handle.path().parent() else {
        return;
    };
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()))
    else {
        return;
    };
    let Ok(name) = SocketDirName::parse(name) else {
        return;
    };
    if name.kind() != SocketDirKind::ShmManager {
        return;
    }
    let options = SocketDirScanOptions::new()
        .parent(parent)
        .min_age(Duration::ZERO)
        .only([name]);
    // Best effort: what is left, `tensorshare gc` removes.
    if let Ok(scan) = scan_socket_dirs(&options) {
        scan.remove_orphans();
    }
}

/// Hands this process's segments over to a live own manager before it
/// exits: waits for a replacement of a dead manager under way, and makes
/// one if the manager is found dead, or dying, and nothing noticed yet.
/// A manager of this crate's is asked whether it runs on a new session: a
/// manager killed a moment ago may still hold its sockets open.
///
/// A manager that died is replaced by a thread that watches it; a process
/// exiting meanwhile would leave the names that only a manager can unlink
/// (those other processes still map, and may die holding) to nobody, and
/// the dead manager's socket directory in place. Call it from a process
/// that stops in order (a server on SIGTERM), once it has stopped sending;
/// a process that never made a `file_system` segment has nothing to do.
///
/// # Errors
///
/// [`ManagerError::NoReplacement`] when the manager died and no other
/// could be started: the names are left to `tensorshare gc`.
///
/// # Examples
///
/// ```no_run
/// use tensorshare_strategies::file_system::FileSystemStrategy;
/// use tensorshare_strategies::services::shm_manager;
/// use tensorshare_strategies::SharingStrategy;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let segment = FileSystemStrategy::default().allocate(4096)?;
/// // ... send it; on shutdown:
/// shm_manager::settle_own_manager()?;
/// # drop(segment);
/// # Ok(())
/// # }
/// ```
pub fn settle_own_manager() -> Result<(), ManagerError> {
    match super::current_own_manager() {
        Some(own) => own.settle(),
        None => Ok(()),
    }
}

impl ManagerConnection {
    /// For this process's own manager: waits for a replacement under way,
    /// and makes one now if the manager is found dead, so that a live
    /// manager knows every name it registered.
    pub(super) fn settle(&self) -> Result<(), ManagerError> {
        let mut state = self.lock();
        if !self.own {
            return Ok(());
        }
        if state.link.broken.is_none() && !serves(&state.link) {
            state.link.fail_closed();
        }
        self.revive(&mut state)
    }

    /// Marks the link to this process's own manager broken if the manager
    /// hung up, so that the next use replaces it, without waiting for the
    /// watching thread to notice.
    pub(super) fn notice_hang_up(&self, state: &mut State) {
        if self.own && state.link.broken.is_none() && hung_up(&state.link.stream, Duration::ZERO) {
            state.link.fail_closed();
        }
    }
}

/// Whether the manager behind `link` still serves. A manager killed a
/// moment ago may not have closed its sockets yet (the dying process has
/// to be scheduled first), so a manager of this crate's is asked on a new
/// session, which only a running one answers; for another, its socket not
/// hanging up is all there is to go by.
fn serves(link: &Link) -> bool {
    if link.replies != Replies::Unanswered {
        return !hung_up(&link.stream, Duration::ZERO);
    }
    Link::open(&link.handle).is_ok_and(|mut fresh| fresh.probe().is_ok())
}

/// Starts the thread that watches `connection`'s socket and replaces its
/// manager when it hangs up. Without it (the spawn failed), the next
/// registration or free replaces it.
pub(super) fn watch(connection: &Arc<ManagerConnection>) {
    let connection = Arc::downgrade(connection);
    let _ = std::thread::Builder::new()
        .name("tensorshare-shm-watch".into())
        .spawn(move || watch_loop(&connection));
}

fn watch_loop(connection: &Weak<ManagerConnection>) {
    loop {
        let Some(stream) = connection.upgrade().map(|c| c.current_stream()) else {
            return;
        };
        if !hung_up(&stream, WATCH_NAP) {
            continue;
        }
        let Some(connection) = connection.upgrade() else {
            return;
        };
        if connection.replace_if_current(&stream).is_err() {
            drop(connection);
            std::thread::sleep(RETRY_PAUSE);
        }
    }
}

/// Whether the peer of `stream` closed it, waiting at most `nap`. Replies
/// waiting to be read do not wake it: only `POLLRDHUP` is asked for
/// (errors and hang-ups are always reported).
fn hung_up(stream: &UnixStream, nap: Duration) -> bool {
    let mut fds = [PollFd::new(stream.as_fd(), POLLRDHUP)];
    let nap = PollTimeout::try_from(nap).unwrap_or(PollTimeout::MAX);
    match poll(&mut fds, nap) {
        Ok(0) | Err(Errno::EINTR) => false,
        // Only a hang-up or an error can have woken it (nix cannot show
        // `POLLRDHUP` among the events it returns).
        Ok(_) => true,
        Err(_) => {
            // Out of memory for poll's table: look again later.
            std::thread::sleep(RETRY_PAUSE);
            false
        }
    }
}
