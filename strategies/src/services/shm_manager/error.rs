//! What can go wrong talking to, starting or running a manager.

use std::time::Duration;

use nix::errno::Errno;

use crate::platform::owner::UnixUser;

/// What to tell the user when connecting to a manager failed with `errno`.
fn connect_hint(errno: &Errno) -> &'static str {
    match errno {
        Errno::ENOENT | Errno::ECONNREFUSED => {
            "no manager listens there: a manager exits once its last client has been gone for \
             its idle timeout (2 s by default) or was killed; the process that shared the \
             storage must stay connected to its manager while the message is in flight"
        }
        Errno::EACCES | Errno::EPERM => {
            "permission denied: the manager belongs to another user; share between processes of \
             one user"
        }
        Errno::EMFILE | Errno::ENFILE => "too many open files: raise `ulimit -n`",
        Errno::EAGAIN => "the manager's backlog is full: it is overloaded or stopped; retry",
        _ => "check that the manager is running (`tensorshare manager` prints its socket path)",
    }
}

/// What to tell the user when binding a manager's socket failed with `errno`.
fn bind_hint(errno: &Errno) -> &'static str {
    match errno {
        Errno::EADDRINUSE => {
            "the path is in use: another manager listens there or a stale socket file remains; \
             remove it or choose another --socket"
        }
        Errno::ENOENT => "the directory does not exist: create it or choose another --socket",
        Errno::EACCES | Errno::EPERM | Errno::EROFS => {
            "the directory is not writable here: choose another --socket"
        }
        Errno::EMFILE | Errno::ENFILE => "too many open files: raise `ulimit -n`",
        _ => "choose another --socket, or leave it out for a fresh private directory",
    }
}

/// Why talking to, starting or running a shared-memory manager failed.
///
/// It keeps the errno of OS failures and plain strings otherwise, so it is
/// `Clone + Eq` and other errors can carry it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManagerError {
    /// A manager handle (a socket path from a pickle, the environment or the
    /// command line) is not one a manager can listen on.
    #[error(
        "{shown:?} is not a shared-memory manager handle: {reason}; a handle is the absolute \
         socket path a manager printed"
    )]
    InvalidHandle {
        /// The handle as received, lossily decoded and cut to 120 characters.
        shown: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// An environment variable this module reads holds something unusable.
    #[error("${variable} is set but unusable: {reason}; fix it or unset it")]
    InvalidEnvironment {
        /// The variable's name.
        variable: &'static str,
        /// What is wrong with its value.
        reason: String,
    },
    /// `connect` to the manager's socket failed.
    #[error("cannot connect to the shared-memory manager at {handle} ({errno}): {}", connect_hint(.errno))]
    Connect {
        /// The manager's socket path.
        handle: String,
        /// What `connect` failed with.
        errno: Errno,
    },
    /// The process listening on the socket runs as another user than this
    /// process's effective one (root is no exception).
    #[error(
        "the socket {handle} is served by {owner}, but this process runs as {this}: a manager \
         handle must name a manager of this process's own user; reject the message that named it"
    )]
    ForeignManager {
        /// The socket path.
        handle: String,
        /// The user of the process listening on it.
        owner: UnixUser,
        /// Who this process runs as.
        this: UnixUser,
    },
    /// Sending a message to the manager failed.
    #[error(
        "cannot send to the shared-memory manager at {handle} ({errno}): {}",
        if matches!(.errno, Errno::EPIPE | Errno::ECONNRESET) {
            "the manager has exited or was killed; segments registered with it are no longer \
             protected"
        } else {
            "the connection is unusable"
        }
    )]
    Send {
        /// The manager's socket path.
        handle: String,
        /// What `send` failed with.
        errno: Errno,
    },
    /// Reading the manager's reply failed.
    #[error("cannot read the reply of the shared-memory manager at {handle} ({errno})")]
    Receive {
        /// The manager's socket path.
        handle: String,
        /// What `recv` failed with.
        errno: Errno,
    },
    /// The manager closed the connection.
    #[error(
        "the shared-memory manager at {handle} closed the connection: it has exited or was \
         killed; segments registered with it are no longer protected"
    )]
    Closed {
        /// The manager's socket path.
        handle: String,
    },
    /// The manager did not confirm a registration in time.
    #[error(
        "the shared-memory manager at {handle} did not confirm a registration within {waited:?}: \
         it is stopped or overloaded; retry, or restart the manager"
    )]
    ReplyTimeout {
        /// The manager's socket path.
        handle: String,
        /// How long this call waited.
        waited: Duration,
    },
    /// The manager answered something other than libshm's `OK`.
    #[error(
        "the shared-memory manager at {handle} answered {reply:?} instead of \"OK\": the socket is \
         not served by a libshm-compatible manager"
    )]
    UnexpectedReply {
        /// The unexpected bytes, lossily decoded.
        reply: String,
        /// The manager's socket path.
        handle: String,
    },
    /// An earlier failure left this connection unusable.
    #[error(
        "the connection to the shared-memory manager at {handle} failed earlier ({cause}); the \
         next `connect` opens a new one"
    )]
    Broken {
        /// The manager's socket path.
        handle: String,
        /// The earlier failure, as text.
        cause: String,
    },
    /// This process's own manager went away, and no manager could be
    /// found or started to take over its segments.
    #[error(
        "the shared-memory manager at {dead} has gone, and none could take over its segments:          {cause}"
    )]
    NoReplacement {
        /// The socket path of the manager that went.
        dead: String,
        /// Why connecting to or starting another failed.
        cause: Box<ManagerError>,
    },
    /// The program cannot run the manager daemon itself (this crate is in
    /// a shared library, not in its executable), and no `tensorshare`
    /// executable to run it was found.
    #[error(
        "cannot start a shared-memory manager: this crate is not linked into the program's \
         executable, which could run it, and no `tensorshare` executable was found \
         ({searched}): install tensorshare on PATH, or set TENSORSHARE_EXE to its path, or run \
         `tensorshare manager` yourself and set TENSORSHARE_SHM_MANAGER to the socket path it \
         prints"
    )]
    NoExecutable {
        /// Where this process looked.
        searched: String,
    },
    /// The manager executable could not be started.
    #[error(
        "cannot start the shared-memory manager `{exe} manager --daemon` ({errno}): check the \
         path, or set TENSORSHARE_EXE to a working tensorshare"
    )]
    Spawn {
        /// The executable.
        exe: String,
        /// What `posix_spawn`/`execve` failed with.
        errno: Errno,
    },
    /// The manager reported an error instead of its socket path.
    #[error("the shared-memory manager `{exe}` failed to start: {message}")]
    LaunchFailed {
        /// The executable.
        exe: String,
        /// The message after `ERROR: ` on its first line.
        message: String,
    },
    /// The manager did not start as a daemon should.
    #[error(
        "the shared-memory manager `{exe} manager --daemon` did not start: {problem}; run it by \
         hand to see why, or set TENSORSHARE_EXE to a working tensorshare"
    )]
    LaunchBroken {
        /// The executable.
        exe: String,
        /// What it did instead.
        problem: String,
    },
    /// Binding or listening on the manager's socket failed.
    #[error("cannot listen on {path} ({errno}): {}", bind_hint(.errno))]
    Bind {
        /// The socket path.
        path: String,
        /// What `bind`, `listen` or `stat` failed with.
        errno: Errno,
    },
    /// No private directory for the socket could be made.
    #[error(
        "cannot create a private directory for the manager's socket in {parent} ({errno}): set \
         TMPDIR to a writable directory, or pass --socket"
    )]
    CreateDir {
        /// The directory it was to be made in.
        parent: String,
        /// What `mkdir` failed with.
        errno: Errno,
    },
    /// The serving loop hit an OS failure it cannot continue after.
    #[error(
        "the shared-memory manager stopped: {operation} failed ({errno}); it unlinked every \
         segment registered with it"
    )]
    Serve {
        /// The call that failed.
        operation: &'static str,
        /// Its errno.
        errno: Errno,
    },
    /// Forking requires a single-threaded process.
    #[error(
        "cannot become a daemon: this process runs {threads} threads and fork would copy only \
         one; daemonize before starting threads, or run `tensorshare manager --daemon`"
    )]
    NotSingleThreaded {
        /// How many threads `/proc/self/task` lists (0 when it cannot be read).
        threads: usize,
    },
    /// A step of becoming a daemon failed.
    #[error("cannot become a daemon: {operation} failed ({errno})")]
    Daemonize {
        /// The call that failed.
        operation: &'static str,
        /// Its errno.
        errno: Errno,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_manager_says_why_and_what_to_do() {
        let err = ManagerError::Connect {
            handle: "/tmp/torch-shm-dir-abc/manager.sock".into(),
            errno: Errno::ENOENT,
        };
        let message = err.to_string();
        assert!(message.contains("ENOENT"), "{message}");
        assert!(message.contains("stay connected"), "{message}");
    }

    #[test]
    fn no_executable_names_all_three_ways_out() {
        let message = ManagerError::NoExecutable {
            searched: "PATH".into(),
        }
        .to_string();
        for needle in ["on PATH", "TENSORSHARE_EXE", "TENSORSHARE_SHM_MANAGER"] {
            assert!(message.contains(needle), "{message}");
        }
    }
}
