//! Becoming a daemon: one fork, a new session, standard streams on
//! `/dev/null`.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for one call, `fork`, made only after
//! `/proc/self/task` showed a single thread. With one thread there is no
//! lock another thread could hold at the fork and no state a missing thread
//! would leave half-changed, so the child may go on running ordinary Rust
//! code, as the parent would.
#![allow(unsafe_code)]

use std::io::Write;

use nix::fcntl::{OFlag, open};
use nix::sys::stat::Mode;
use nix::unistd::{ForkResult, chdir, dup2_stderr, dup2_stdin, dup2_stdout, fork, setsid};

use super::ManagerError;

/// How many threads this process runs, from `/proc/self/task`; 0 when that
/// cannot be read.
pub(super) fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |entries| entries.count())
}

/// Forks; the calling process exits with status 0 at once, and the child
/// returns, in a new session with no controlling terminal (so no terminal
/// sends it SIGINT or SIGHUP), with `/` as its working directory and with
/// `/dev/null` as its stdin, stdout and stderr (so it holds no pipe of
/// whoever started it open). Like `daemon(3)`, with one fork: the launcher
/// reaps the exiting parent.
///
/// Fds other than 0, 1 and 2 are inherited as they are: the caller's own
/// are close-on-exec or meant to be kept.
///
/// # Errors
///
/// [`ManagerError::NotSingleThreaded`] when the process runs (or may run)
/// more than one thread, [`ManagerError::Daemonize`] when opening
/// `/dev/null`, `fork`, `setsid`, `chdir` or `dup2` fails. Before the fork
/// the error is the caller's; after it, the child's, and the parent has
/// already exited with status 0.
pub(super) fn become_daemon() -> Result<(), ManagerError> {
    let threads = thread_count();
    if threads != 1 {
        return Err(ManagerError::NotSingleThreaded { threads });
    }
    let failed = |operation| move |errno| ManagerError::Daemonize { operation, errno };
    let dev_null = open("/dev/null", OFlag::O_RDWR | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(failed("opening /dev/null"))?;
    // Whatever is buffered goes out once, from the parent.
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: `thread_count` just listed exactly one thread in
    // /proc/self/task, and nothing since has started another, so the child
    // is a complete copy of a single-threaded process (see the module's
    // `# Safety`).
    match unsafe { fork() }.map_err(failed("fork"))? {
        // `exit` runs no destructor, so the server this process holds is
        // not dropped: the child owns the socket now and cleans it up. The
        // standard streams were flushed before the fork.
        ForkResult::Parent { .. } => std::process::exit(0),
        ForkResult::Child => {}
    }
    setsid().map_err(failed("setsid"))?;
    chdir("/").map_err(failed("chdir /"))?;
    dup2_stdin(&dev_null).map_err(failed("dup2 onto stdin"))?;
    dup2_stdout(&dev_null).map_err(failed("dup2 onto stdout"))?;
    dup2_stderr(&dev_null).map_err(failed("dup2 onto stderr"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threaded_process_refuses_to_fork() {
        // The test harness runs tests on threads, and this one adds another.
        let keep = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(1)));
        let err = become_daemon().unwrap_err();
        assert!(
            matches!(err, ManagerError::NotSingleThreaded { threads } if threads >= 2),
            "{err}"
        );
        keep.join().unwrap();
    }
}
