//! The client side of libshm's protocol: one connection per manager, open
//! while anything registered through it is in use.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, MsgFlags, SockFlag, SockType, UnixAddr, connect as connect_socket, getsockopt,
    send, socket, sockopt::PeerCredentials,
};

use super::alloc_info::{ALLOC_INFO_SIZE, AllocInfo};
use super::{ManagerError, ManagerHandle, launch};
use crate::UnixUser;
use crate::error::errno_of;
use crate::file_system::SegmentName;
use crate::owner::is_own_uid;

/// The environment variable naming the socket of a running manager that
/// [`own_manager`] uses instead of starting one.
pub const MANAGER_ENV: &str = "TENSORSHARE_SHM_MANAGER";

/// How long [`ManagerConnection::register`] waits for `OK`, and a send or a
/// connect waits for room in the manager's queues. libshm waits 1 s per
/// read; a manager serving many clients on a loaded machine deserves more.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// How long to pause between attempts while a manager's backlog is full.
const CONNECT_RETRY: Duration = Duration::from_millis(10);

/// A connection to a shared-memory manager.
///
/// The manager takes the connection's life as the life of the process that
/// opened it: while it is open, the segments registered through it are left
/// alone; once it closes, the manager unlinks those it was the last
/// registrant of. Keep it open as long as the process uses any of them:
/// every segment holds the connection it was registered through, and
/// [`connect`] hands out the one live connection per manager.
///
/// Methods take `&self`: a mutex orders the messages of concurrent callers.
#[derive(Debug)]
pub struct ManagerConnection {
    handle: ManagerHandle,
    link: Mutex<Link>,
}

/// The socket and what is still expected on it.
#[derive(Debug)]
struct Link {
    stream: UnixStream,
    /// Bytes of `OK` replies the manager still owes: two per registration,
    /// including those whose caller stopped waiting.
    owed: usize,
    /// Whether the next reply byte is the `K` of an `OK`.
    mid_reply: bool,
    /// Why the connection can no longer be used, once it cannot.
    broken: Option<String>,
    /// How long a registration waits for its `OK`.
    reply_timeout: Duration,
    /// The receive timeout set on the socket: `reply_timeout` from
    /// [`ManagerConnection::open`] on, so that a registration's first read
    /// needs no `setsockopt`; only a read waiting out a remainder changes it.
    read_timeout: Duration,
}

impl Link {
    /// Marks the connection broken by `error`, and returns it.
    fn fail(&mut self, error: ManagerError) -> ManagerError {
        self.broken = Some(error.to_string());
        error
    }
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
        let stream = connect_stream(handle)?;
        let peer = getsockopt(&stream, PeerCredentials).map_err(|errno| ManagerError::Connect {
            handle: handle.to_string(),
            errno,
        })?;
        // Root included: a handle comes from a peer, and another user's
        // manager would be told, and could act on, this user's segments.
        if !is_own_uid(peer.uid()) {
            return Err(ManagerError::ForeignManager {
                handle: handle.to_string(),
                owner: UnixUser::of(peer.uid()),
                this: UnixUser::effective(),
            });
        }
        let timeouts = stream
            .set_write_timeout(Some(REPLY_TIMEOUT))
            .and_then(|()| stream.set_read_timeout(Some(REPLY_TIMEOUT)));
        if let Err(err) = timeouts {
            return Err(ManagerError::Connect {
                handle: handle.to_string(),
                errno: errno_of(&err),
            });
        }
        Ok(ManagerConnection {
            handle: handle.clone(),
            link: Mutex::new(Link {
                stream,
                owed: 0,
                mid_reply: false,
                broken: None,
                reply_timeout: REPLY_TIMEOUT,
                read_timeout: REPLY_TIMEOUT,
            }),
        })
    }

    /// The manager this connection talks to.
    pub fn handle(&self) -> &ManagerHandle {
        &self.handle
    }

    /// Whether an earlier failure (the manager exited, answered garbage, or
    /// a message went out in part) left the connection unusable.
    pub fn is_broken(&self) -> bool {
        self.lock().broken.is_some()
    }

    /// Tells the manager this process uses `name`, and waits up to
    /// [`REPLY_TIMEOUT`] for its `OK`.
    ///
    /// After `OK`, the manager unlinks `name` when this process's connection
    /// closes (it exited or was killed) and nobody else registered it, or
    /// when the manager itself exits.
    ///
    /// # Errors
    ///
    /// [`ManagerError::ReplyTimeout`] when no `OK` came in time (the
    /// connection stays usable: a late `OK` is consumed by the next call);
    /// [`ManagerError::Send`], [`ManagerError::Closed`],
    /// [`ManagerError::Receive`] or [`ManagerError::UnexpectedReply`] when the
    /// manager is gone or is not a manager, after which the connection is
    /// broken and every call returns [`ManagerError::Broken`].
    pub fn register(&self, name: &SegmentName) -> Result<(), ManagerError> {
        let mut link = self.lock();
        self.check_usable(&link)?;
        let message = AllocInfo::register(name.clone()).encode();
        self.send_message(&mut link, &message)?;
        link.owed += 2;
        let started = Instant::now();
        let deadline = started + link.reply_timeout;
        let mut reply = [0u8; 64];
        let mut first_read = true;
        while link.owed > 0 {
            let now = Instant::now();
            if now >= deadline {
                return Err(ManagerError::ReplyTimeout {
                    handle: self.handle.to_string(),
                    waited: now - started,
                });
            }
            // The first read waits the whole timeout, the later ones what is
            // left of it. Never ZERO: std refuses it; the deadline check
            // above keeps the remainder positive.
            let wait = if first_read {
                link.reply_timeout
            } else {
                deadline - now
            };
            first_read = false;
            if wait != link.read_timeout && link.stream.set_read_timeout(Some(wait)).is_ok() {
                link.read_timeout = wait;
            }
            let want = link.owed.min(reply.len());
            match link.stream.read(&mut reply[..want]) {
                Ok(0) => {
                    return Err(link.fail(ManagerError::Closed {
                        handle: self.handle.to_string(),
                    }));
                }
                Ok(n) => {
                    for &byte in &reply[..n] {
                        let expected = if link.mid_reply { b'K' } else { b'O' };
                        if byte != expected {
                            let error = ManagerError::UnexpectedReply {
                                reply: String::from_utf8_lossy(&reply[..n]).into_owned(),
                                handle: self.handle.to_string(),
                            };
                            return Err(link.fail(error));
                        }
                        link.mid_reply = !link.mid_reply;
                        link.owed -= 1;
                    }
                }
                Err(err)
                    if matches!(
                        err.kind(),
                        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                    ) => {}
                Err(err) => {
                    let error = ManagerError::Receive {
                        handle: self.handle.to_string(),
                        errno: errno_of(&err),
                    };
                    return Err(link.fail(error));
                }
            }
        }
        Ok(())
    }

    /// Tells the manager this process no longer uses `name`; the manager
    /// does not answer.
    ///
    /// Meant for `Drop`: failures are ignored, since a manager that is gone
    /// has nothing left to be told. A manager drops the name once the
    /// object is unlinked, so unlink the segment (when this process is the
    /// one to) before calling this, as libshm does.
    pub fn unregister(&self, name: &SegmentName) {
        let mut link = self.lock();
        if link.broken.is_some() {
            return;
        }
        let message = AllocInfo::free(name.clone()).encode();
        // Ignored, as documented; a failure that desynchronised the stream
        // has marked the connection broken.
        let _ = self.send_message(&mut link, &message);
    }

    fn lock(&self) -> MutexGuard<'_, Link> {
        // The link's state is consistent between statements, so a panic of
        // another caller leaves nothing half-done.
        self.link.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_usable(&self, link: &Link) -> Result<(), ManagerError> {
        match &link.broken {
            Some(cause) => Err(ManagerError::Broken {
                handle: self.handle.to_string(),
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Sends a whole message. `MSG_NOSIGNAL`: a manager that is gone is an
    /// error here, never a `SIGPIPE` that kills the process.
    fn send_message(
        &self,
        link: &mut Link,
        message: &[u8; ALLOC_INFO_SIZE],
    ) -> Result<(), ManagerError> {
        let mut sent = 0;
        while sent < message.len() {
            match send(
                link.stream.as_raw_fd(),
                &message[sent..],
                MsgFlags::MSG_NOSIGNAL,
            ) {
                Ok(n) => sent += n,
                Err(Errno::EINTR) => {}
                Err(errno) => {
                    let error = ManagerError::Send {
                        handle: self.handle.to_string(),
                        errno,
                    };
                    // Nothing went out on a timeout: the stream is still in
                    // step and the next message may pass.
                    if sent == 0 && errno == Errno::EAGAIN {
                        return Err(error);
                    }
                    return Err(link.fail(error));
                }
            }
        }
        Ok(())
    }
}

/// Connects to `handle`, retrying while the manager's backlog is full
/// (`EAGAIN`) for up to [`REPLY_TIMEOUT`]: a blocking connect would wait
/// without bound on a manager that stopped accepting.
fn connect_stream(handle: &ManagerHandle) -> Result<UnixStream, ManagerError> {
    let error = |errno| ManagerError::Connect {
        handle: handle.to_string(),
        errno,
    };
    let address = UnixAddr::new(handle.path()).map_err(error)?;
    let deadline = Instant::now() + REPLY_TIMEOUT;
    loop {
        let fd = socket(
            AddressFamily::Unix,
            SockType::Stream,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            None,
        )
        .map_err(error)?;
        match connect_socket(fd.as_raw_fd(), &address) {
            Ok(()) => {
                let stream = UnixStream::from(fd);
                stream
                    .set_nonblocking(false)
                    .map_err(|err| error(errno_of(&err)))?;
                return Ok(stream);
            }
            Err(Errno::EAGAIN | Errno::EINTR) if Instant::now() < deadline => {
                std::thread::sleep(CONNECT_RETRY);
            }
            Err(errno) => return Err(error(errno)),
        }
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
/// exits, a connection closes once nothing registered through it is left,
/// so a long-running server does not keep every peer's manager (and an fd
/// for each) alive. A connection found broken is replaced by a new one.
///
/// # Errors
///
/// As [`ManagerConnection::open`].
///
/// # Examples
///
/// ```no_run
/// use tensorshare_strategies::file_system::SegmentName;
/// use tensorshare_strategies::shm_manager::{self, ManagerHandle};
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
    let mut connections = CONNECTIONS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(existing) = connections
        .get(handle)
        .and_then(Weak::upgrade)
        .filter(|c| !c.is_broken())
    {
        return Ok(existing);
    }
    let fresh = Arc::new(ManagerConnection::open(handle)?);
    // A broken predecessor stays alive, and open, while anyone holds it.
    connections.insert(handle.clone(), Arc::downgrade(&fresh));
    connections.retain(|_, connection| connection.strong_count() > 0);
    Ok(fresh)
}

/// This process's own manager, for the segments it creates: started once on
/// first use and then kept, like libshm's first manager.
///
/// When [`MANAGER_ENV`] (`TENSORSHARE_SHM_MANAGER`) names a socket path, that
/// manager is used. Otherwise `tensorshare manager --daemon` is started (see
/// [`manager_executable`](super::manager_executable) for where the
/// executable is looked for): a separate process that outlives this one,
/// so that segments are unlinked even if this process is killed. Concurrent
/// first calls start one manager. When the manager's connection breaks (it
/// was killed), the next call starts a new one.
///
/// # Errors
///
/// [`ManagerError::InvalidEnvironment`] for an unusable
/// `TENSORSHARE_SHM_MANAGER`; [`ManagerError::NoExecutable`],
/// [`ManagerError::Spawn`], [`ManagerError::LaunchFailed`] or
/// [`ManagerError::LaunchBroken`] when the daemon cannot be started; those of
/// [`connect`].
pub fn own_manager() -> Result<Arc<ManagerConnection>, ManagerError> {
    let mut own = OWN_MANAGER.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(existing) = own.as_ref().filter(|c| !c.is_broken()) {
        return Ok(Arc::clone(existing));
    }
    let connection = match std::env::var_os(MANAGER_ENV).filter(|v| !v.is_empty()) {
        Some(value) => {
            let handle = handle_from_env(&value)?;
            connect(&handle)?
        }
        None => {
            let exe = launch::manager_executable()?;
            let launched = launch::DaemonLaunch::spawn(&exe)?;
            // Connect before reaping: the daemon's idle clock runs from its
            // start.
            let connected = connect(launched.handle());
            launched.reap()?;
            connected?
        }
    };
    *own = Some(Arc::clone(&connection));
    Ok(connection)
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
