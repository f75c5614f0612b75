//! The client side of libshm's protocol: one connection per manager, open
//! while anything registered through it is in use.

mod linger;
mod link;
mod registered_names;
mod replacement;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::net::Shutdown;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use super::{ManagerError, ManagerHandle};
use crate::platform::segment_name::SegmentName;
use link::Link;
use registered_names::RegisteredNames;
pub use replacement::settle_own_manager;

/// The environment variable naming the socket of a running manager that
/// [`own_manager`] uses instead of starting one.
pub const MANAGER_ENV: &str = "TENSORSHARE_SHM_MANAGER";

/// How long [`ManagerConnection::register`] waits for `OK`, and a send or a
/// connect waits for room in the manager's queues. libshm waits 1 s per
/// read; a manager serving many clients on a loaded machine deserves more.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to a shared-memory manager.
///
/// The manager takes the connection's life as the life of the process that
/// opened it: while it is open, the segments registered through it are left
/// alone; once it closes, the manager unlinks those it was the last
/// registrant of. Keep it open as long as the process uses any of them:
/// every segment holds the connection it was registered through, and
/// [`connect`] hands out the one live connection per manager.
///
/// The connection to this process's own manager ([`own_manager`]) outlives
/// that manager: when it dies (killed, out of memory), a thread watching
/// the socket sees it close, connects to a new own manager (started as the
/// first was) and registers there every segment the dead one would have
/// unlinked at its exit: those this process holds, and those it freed that
/// still exist. From then on it talks to the new manager, and messages
/// that carry its segments name the new one ([`handle`](Self::handle)).
/// The dead manager's socket directory is removed. A connection to another
/// process's manager is not replaced: its segments are that process's to
/// re-register, and this one could not tell its holders apart.
///
/// Methods take `&self`: a mutex orders the messages of concurrent callers.
#[derive(Debug)]
pub struct ManagerConnection {
    state: Mutex<State>,
    /// Whether a dead manager is replaced by a new own manager.
    own: bool,
}

/// The link to the manager, and the names registered through it.
#[derive(Debug)]
struct State {
    link: Link,
    names: RegisteredNames,
}

impl ManagerConnection {
    /// Opens a connection of its own to the manager at `handle`, shared with
    /// nobody.
    ///
    /// Dropping it closes it, which the manager reads as this process having
    /// exited: segments registered only through it are unlinked after the
    /// manager's grace period. Most callers want [`connect`] instead.
    ///
    /// # Errors
    ///
    /// [`ManagerError::Connect`] when nothing listens at `handle` (or its
    /// backlog stays full for [`REPLY_TIMEOUT`]),
    /// [`ManagerError::ForeignManager`] when the listening process runs as
    /// another user than this process's effective one, root included.
    pub fn open(handle: &ManagerHandle) -> Result<Self, ManagerError> {
        Ok(Self::with_link(Link::open(handle)?, false))
    }

    fn with_link(link: Link, own: bool) -> Self {
        ManagerConnection {
            state: Mutex::new(State {
                link,
                names: RegisteredNames::default(),
            }),
            own,
        }
    }

    /// The manager this connection talks to now: for this process's own
    /// manager, the one that took over when an earlier one died.
    pub fn handle(&self) -> ManagerHandle {
        self.lock().link.handle.clone()
    }

    /// Whether an earlier failure (the manager exited, answered garbage, or
    /// a message went out in part) left the connection unusable. The
    /// connection to this process's own manager is so only until a new
    /// manager takes over.
    pub fn is_broken(&self) -> bool {
        self.lock().link.broken.is_some()
    }

    /// Whether this connection talks to the manager at `handle` and is not
    /// [broken](Self::is_broken): what a segment registered through it
    /// needs to stay registered where a message names it.
    pub fn serves(&self, handle: &ManagerHandle) -> bool {
        let state = self.lock();
        state.link.broken.is_none() && state.link.handle == *handle
    }

    /// Tells the manager this process uses `name`, and waits up to
    /// [`REPLY_TIMEOUT`] for its `OK`; with this crate's manager, only the
    /// first registration on a connection waits
    /// ([`pipelines_registrations`](Self::pipelines_registrations)).
    ///
    /// Once this returns, the manager unlinks `name` when this process's
    /// connection closes (it exited or was killed) and nobody else
    /// registered it, or when the manager itself exits: a registration that
    /// is not answered is in the manager's queue, which it reads to the end
    /// before it takes the connection for closed.
    ///
    /// # Errors
    ///
    /// [`ManagerError::ReplyTimeout`] when no `OK` came in time (the
    /// connection stays usable: a late `OK` is consumed by the next call);
    /// [`ManagerError::Send`], [`ManagerError::Closed`],
    /// [`ManagerError::Receive`] or [`ManagerError::UnexpectedReply`] when the
    /// manager is gone or is not a manager, after which the connection is
    /// broken and every call returns [`ManagerError::Broken`];
    /// [`ManagerError::NoReplacement`] when this process's own manager went
    /// and no new one could be started.
    pub fn register(&self, name: &SegmentName) -> Result<(), ManagerError> {
        let mut state = self.lock();
        self.revive(&mut state)?;
        state.names.registered(name);
        match state.link.register(name) {
            Err(error) if self.own && link::manager_gone(&error) => {
                // A new manager now knows every name registered, this one
                // among them.
                self.replace(&mut state)
            }
            registered => registered,
        }
    }

    /// Whether registrations through this connection are sent without
    /// waiting for a reply: the manager answered the first one saying it is
    /// this crate's. `false` before the first registration, and always with
    /// torch's `torch_shm_manager`, which is answered as libshm expects.
    ///
    /// A libshm manager writes each `OK` with a blocking `send` and dies of
    /// `SIGPIPE` when a client exits with replies unread, so the first
    /// registration asks with a message that manager ignores (a free of a
    /// name no segment has), and only this crate's manager answers it.
    pub fn pipelines_registrations(&self) -> bool {
        self.lock().link.replies == link::Replies::Unanswered
    }

    /// Tells the manager this process no longer uses `name`; the manager
    /// does not answer.
    ///
    /// Meant for `Drop`: failures are ignored, since a manager that is gone
    /// has nothing left to be told. A manager drops the name once the
    /// object is unlinked, so unlink the segment (when this process is the
    /// one to) before calling this, as libshm does.
    pub fn unregister(&self, name: &SegmentName) {
        self.free(name, false);
    }

    /// Tells the manager at once that this process no longer uses `name`,
    /// whose object outlives this hold: a receiver maps it, or a message
    /// naming it is still to be opened.
    ///
    /// [`unregister`](Self::unregister) holds a free back until the next
    /// message, and one held back when the process exits never arrives:
    /// the manager then takes the name for one whose holder died without
    /// counting down, and a count still in the header for a message in
    /// flight (see the manager's orphans). Sent now, the manager knows this
    /// process gave its count back.
    pub fn unregister_in_use(&self, name: &SegmentName) {
        self.free(name, true);
    }

    fn free(&self, name: &SegmentName, at_once: bool) {
        // Its holder lets go of this connection next: if that was the last
        // hold, the connection lingers, then closes.
        linger::released();
        let mut state = self.lock();
        state.names.freed(name);
        // The object may outlive this process's hold (a receiver still maps
        // it), and then only a manager unlinks it. If this process's own
        // manager died, it is replaced now, not at the next registration,
        // which a process on its way out never makes.
        self.notice_hang_up(&mut state);
        if self.revive(&mut state).is_err() {
            return;
        }
        // Ignored, as documented; a failure that desynchronised the stream
        // has marked the connection broken, and a new own manager has been
        // told of `name` if its object still exists.
        if let Err(error) = state.link.free(name)
            && self.own
            && link::manager_gone(&error)
            && self.replace(&mut state).is_ok()
        {
            let _ = state.link.free(name);
        }
        if at_once {
            let _ = state.link.flush_frees();
        }
    }

    /// Tells the manager that a message naming `name` is on its way to
    /// process `receiver`, so that it lets the segment go once `receiver`
    /// has exited without reading it (see the manager's in-flight
    /// notices). Only this crate's manager is told; a failure is ignored,
    /// as the manager then keeps the segment for its in-flight wait, as
    /// for a receiver it was not told of.
    pub fn in_flight(&self, name: &SegmentName, receiver: u32) {
        let mut state = self.lock();
        // Kept for a manager that takes over, even when this one is gone.
        state.names.sent_to(name, receiver);
        if state.link.broken.is_none() {
            let _ = state.link.in_flight(name, receiver);
        }
    }

    /// Replaces a broken link to this process's own manager; another
    /// process's manager's broken link stays broken.
    fn revive(&self, state: &mut State) -> Result<(), ManagerError> {
        if state.link.broken.is_none() {
            return Ok(());
        }
        if !self.own {
            return state.link.check_usable();
        }
        self.replace(state)
    }

    /// Connects to a new own manager, registers there every name the dead
    /// one would have unlinked, and removes the dead one's socket
    /// directory.
    fn replace(&self, state: &mut State) -> Result<(), ManagerError> {
        let dead = state.link.handle.clone();
        let no_replacement = |cause| ManagerError::NoReplacement {
            dead: dead.to_string(),
            cause: Box::new(cause),
        };
        let mut link = replacement::open_own_link().map_err(no_replacement)?;
        for (name, receivers) in state.names.replay() {
            link.register(&name).map_err(no_replacement)?;
            for receiver in receivers {
                link.in_flight(&name, receiver).map_err(no_replacement)?;
            }
        }
        state.link = link;
        replacement::remove_socket_dir(&dead);
        Ok(())
    }

    /// Replaces the link if it is still `watched`, whose manager hung up.
    fn replace_if_current(&self, watched: &Arc<UnixStream>) -> Result<(), ManagerError> {
        let mut state = self.lock();
        if !Arc::ptr_eq(&state.link.stream, watched) {
            return Ok(());
        }
        state.link.fail_closed();
        self.replace(&mut state)
    }

    /// The socket of the current link, for the watching thread.
    fn current_stream(&self) -> Arc<UnixStream> {
        Arc::clone(&self.lock().link.stream)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements, so a panic of
        // another caller leaves nothing half-done.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ManagerConnection {
    fn drop(&mut self) {
        let mut state = self.lock();
        // Frees held back go first, so that the manager sees this
        // connection's names as if each free had gone out at once: a freed
        // name still in use elsewhere is not unlinked with the names this
        // connection still held. Nothing more to do about a manager that
        // is gone.
        let _ = state.link.flush_frees();
        // The watching thread holds the socket too: shutting it down tells
        // the manager at once, and wakes the thread to end.
        let _ = state.link.stream.shutdown(Shutdown::Both);
    }
}

/// Every connection [`connect`] made, by manager.
static CONNECTIONS: LazyLock<Mutex<HashMap<ManagerHandle, Weak<ManagerConnection>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// This process's own manager, once started.
static OWN_MANAGER: Mutex<Option<Arc<ManagerConnection>>> = Mutex::new(None);

/// The process-wide connection to the manager at `handle`: one while anyone
/// holds it, made anew when nobody does.
///
/// The manager takes the connection's liveness as this process's liveness,
/// so it must not close while any segment registered through it is in use:
/// hold the returned `Arc` as long as that (segments do). Unlike libshm,
/// which keeps a connection to every manager it ever met until the process
/// exits, a connection closes about a second after nothing registered
/// through it is left (kept that long so that a stream of short-lived
/// segments does not reconnect for each), so a long-running server does
/// not keep every peer's manager (and an fd for each) alive. A connection found broken is replaced by a new one;
/// this process's own manager is found under every handle it had.
///
/// # Errors
///
/// As [`ManagerConnection::open`].
///
/// # Examples
///
/// ```no_run
/// use tensorshare_strategies::file_system::SegmentName;
/// use tensorshare_strategies::services::shm_manager::{self, ManagerHandle};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The handle a torch pickle carried in `rebuild_storage_filename`:
/// let handle = ManagerHandle::from_bytes(b"/tmp/torch-shm-dir-gHmPMp/manager.sock")?;
/// let manager = shm_manager::connect(&handle)?;
/// let name = SegmentName::parse(b"/torch_21409_1626284410_1")?;
/// manager.register(&name)?;
/// // ... use the segment, then once done with it:
/// manager.unregister(&name);
/// # Ok(())
/// # }
/// ```
pub fn connect(handle: &ManagerHandle) -> Result<Arc<ManagerConnection>, ManagerError> {
    // Messages name this process's own manager as it was when they were
    // sent: one that took over since is the same connection.
    if let Some(own) = current_own_manager().filter(|own| own.handle() == *handle) {
        return Ok(own);
    }
    let mut connections = CONNECTIONS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(existing) = connections
        .get(handle)
        .and_then(Weak::upgrade)
        .filter(|c| c.own || !c.is_broken())
    {
        drop(connections);
        linger::keep(&existing);
        return Ok(existing);
    }
    let fresh = Arc::new(ManagerConnection::open(handle)?);
    // A broken predecessor stays alive, and open, while anyone holds it.
    connections.insert(handle.clone(), Arc::downgrade(&fresh));
    connections.retain(|_, connection| connection.strong_count() > 0);
    drop(connections);
    linger::keep(&fresh);
    Ok(fresh)
}

/// This process's own manager, for the segments it creates: started once on
/// first use and then kept, like libshm's first manager.
///
/// When [`MANAGER_ENV`] (`TENSORSHARE_SHM_MANAGER`) names a socket path, that
/// manager is used. Otherwise a manager daemon is started: a separate
/// process that outlives this one, so that segments are unlinked even if
/// this process is killed. It is this program's own executable run again,
/// which this crate turns into the manager before its `main` runs, so
/// nothing beyond the crate is needed; or `tensorshare manager --daemon`
/// when [`EXE_ENV`](super::EXE_ENV) (`TENSORSHARE_EXE`) names a
/// `tensorshare`, or when this crate is in a shared library rather than
/// in the program's executable (see
/// [`manager_executable`](super::manager_executable)). Concurrent first
/// calls start one manager. When that manager dies, the connection takes
/// over a new one, as the [`ManagerConnection`] docs say.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::services::shm_manager::own_manager;
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // This doctest's own binary, run again as a daemon.
/// let manager = own_manager()?;
/// assert!(manager.handle().path().exists());
/// # Ok(())
/// # }
/// ```
///
/// # Errors
///
/// [`ManagerError::InvalidEnvironment`] for an unusable
/// `TENSORSHARE_SHM_MANAGER`; [`ManagerError::NoExecutable`],
/// [`ManagerError::Spawn`], [`ManagerError::LaunchFailed`] or
/// [`ManagerError::LaunchBroken`] when the daemon cannot be started; those of
/// [`connect`]; [`ManagerError::NoReplacement`] when the manager died and no
/// other could be started.
pub fn own_manager() -> Result<Arc<ManagerConnection>, ManagerError> {
    let mut own = OWN_MANAGER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(existing) = own.as_ref() {
        if existing.own {
            existing.revive(&mut existing.lock())?;
            return Ok(Arc::clone(existing));
        }
        if !existing.is_broken() {
            return Ok(Arc::clone(existing));
        }
    }
    let link = match std::env::var_os(MANAGER_ENV).filter(|v| !v.is_empty()) {
        Some(value) => Link::open(&handle_from_env(&value)?)?,
        None => replacement::launch_link()?,
    };
    let handle = link.handle.clone();
    let connection = Arc::new(ManagerConnection::with_link(link, true));
    replacement::watch(&connection);
    CONNECTIONS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(handle, Arc::downgrade(&connection));
    *own = Some(Arc::clone(&connection));
    Ok(connection)
}

/// This process's own manager, if it has one yet.
fn current_own_manager() -> Option<Arc<ManagerConnection>> {
    OWN_MANAGER
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Makes `connection` this process's own manager from now on, instead of
/// the one [`own_manager`] would find or start: for a program that runs a
/// manager for a group of processes (`tensorshare manager`) and hands each
/// its connection. Segments created before keep the manager they were
/// registered with.
pub fn set_own_manager(connection: Arc<ManagerConnection>) {
    *OWN_MANAGER.lock().unwrap_or_else(PoisonError::into_inner) = Some(connection);
}

fn handle_from_env(value: &OsStr) -> Result<ManagerHandle, ManagerError> {
    ManagerHandle::from_bytes(value.as_bytes()).map_err(|err| ManagerError::InvalidEnvironment {
        variable: MANAGER_ENV,
        reason: err.to_string(),
    })
}

#[cfg(test)]
mod tests;
