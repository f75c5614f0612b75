//! Starting a manager daemon and reading the socket path it prints, as
//! libshm starts `torch_shm_manager`: this program run again as the manager
//! (see `self_exec`), or `tensorshare manager --daemon`.

use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, poll};
use nix::sys::stat::fstat;
use nix::unistd::pipe2;

use super::server::poll_timeout;
use super::{ManagerError, ManagerHandle, self_exec};
use crate::platform::errno_of;

/// The environment variable naming a `tensorshare` executable to run the
/// manager daemon instead of this program.
pub const EXE_ENV: &str = "TENSORSHARE_EXE";

/// How long a starting manager has to print its socket path and fork into
/// the background.
pub const LAUNCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest first line accepted from a manager: a socket path, or an
/// error message.
const MAX_FIRST_LINE: usize = 4096;

/// The executable's file name.
const EXE_NAME: &str = "tensorshare";

/// Finds a `tensorshare` executable to run manager daemons: what this
/// process starts when [`EXE_ENV`] is set, or when this crate is not linked
/// into the program's executable (a shared library loaded by another
/// program); otherwise the program runs its managers itself.
///
/// In order: [`EXE_ENV`] (`TENSORSHARE_EXE`) when set; this process's own
/// executable when its file name is `tensorshare`; a `tensorshare` in the
/// directory of this process's executable or in that directory's parent
/// (which covers cargo's `target/debug/deps` test binaries); a `tensorshare`
/// on `PATH`.
///
/// # Errors
///
/// [`ManagerError::InvalidEnvironment`] when `TENSORSHARE_EXE` names no
/// executable file; [`ManagerError::NoExecutable`], which says what to do,
/// when nothing is found.
pub fn manager_executable() -> Result<PathBuf, ManagerError> {
    if let Some(exe) = std::env::var_os(EXE_ENV).filter(|v| !v.is_empty()) {
        let exe = PathBuf::from(exe);
        if is_executable_file(&exe) {
            return Ok(exe);
        }
        return Err(ManagerError::InvalidEnvironment {
            variable: EXE_ENV,
            reason: format!("{} is not an executable file", exe.display()),
        });
    }
    let current = std::env::current_exe().ok();
    let mut searched = Vec::new();
    if let Some(current) = &current {
        if current.file_name().is_some_and(|n| n == EXE_NAME) {
            return Ok(current.clone());
        }
        let dir = current.parent();
        for dir in [dir, dir.and_then(Path::parent)].into_iter().flatten() {
            let candidate = dir.join(EXE_NAME);
            if is_executable_file(&candidate) {
                return Ok(candidate);
            }
            searched.push(dir.display().to_string());
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(EXE_NAME);
        if dir.is_absolute() && is_executable_file(&candidate) {
            return Ok(candidate);
        }
    }
    searched.push("PATH".to_owned());
    Err(ManagerError::NoExecutable {
        searched: format!("${EXE_ENV} is unset; looked in {}", searched.join(", ")),
    })
}

fn is_executable_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What runs the manager daemons this process starts.
#[derive(Debug)]
pub(super) enum ManagerProgram {
    /// This program's own executable, whose constructor becomes the
    /// manager before `main`.
    ThisProgram,
    /// `EXE manager --daemon`.
    Tensorshare(PathBuf),
}

impl ManagerProgram {
    /// [`EXE_ENV`] when set; else this program when it can run a manager;
    /// else a `tensorshare` found as [`manager_executable`] says.
    pub(super) fn find() -> Result<Self, ManagerError> {
        let overridden = std::env::var_os(EXE_ENV).is_some_and(|v| !v.is_empty());
        if !overridden && self_exec::runs_managers() {
            return Ok(Self::ThisProgram);
        }
        manager_executable().map(Self::Tensorshare)
    }

    /// How errors name it.
    fn shown(&self) -> String {
        match self {
            Self::ThisProgram => match std::env::current_exe() {
                Ok(exe) => format!("{} (this program)", exe.display()),
                Err(_) => "this program".to_owned(),
            },
            Self::Tensorshare(exe) => exe.display().to_string(),
        }
    }
}

/// Starts `exe manager --daemon`, waits for the socket path it prints and
/// for the launching process to exit (the daemon forks away from it), and
/// returns the handle.
///
/// The daemon runs in its own session, with no controlling terminal and its
/// standard streams on `/dev/null`; it exits once it has had no client for
/// its idle timeout (2 s), unlinking what was registered with it (later,
/// if some process still maps a name it is to unlink). Connect to
/// it at once: see [`own_manager`](super::own_manager), which does.
///
/// # Errors
///
/// [`ManagerError::Spawn`] when `exe` cannot be run;
/// [`ManagerError::LaunchFailed`] when the manager reported an error;
/// [`ManagerError::LaunchBroken`] when it printed no socket path within
/// [`LAUNCH_TIMEOUT`], exited without one, or did not fork into the
/// background.
pub fn launch_daemon(exe: &Path) -> Result<ManagerHandle, ManagerError> {
    let launched = DaemonLaunch::spawn(&ManagerProgram::Tensorshare(exe.to_owned()))?;
    let handle = launched.handle().clone();
    launched.reap()?;
    Ok(handle)
}

/// A started daemon whose launching process is still to be reaped.
#[derive(Debug)]
pub(super) struct DaemonLaunch {
    shown: String,
    child: Child,
    handle: ManagerHandle,
    deadline: Instant,
}

impl DaemonLaunch {
    /// Starts the daemon and reads its first line.
    ///
    /// `std::process::Command` starts it, with `posix_spawn` or with only
    /// async-signal-safe calls between `fork` and `exec`, so a process
    /// running many threads may call this.
    pub(super) fn spawn(program: &ManagerProgram) -> Result<Self, ManagerError> {
        let shown = program.shown();
        let broken = |problem: String| ManagerError::LaunchBroken {
            exe: shown.clone(),
            problem,
        };
        let spawn_failed = |errno| ManagerError::Spawn {
            exe: shown.clone(),
            errno,
        };
        let (reader, writer) = pipe2(OFlag::O_CLOEXEC).map_err(spawn_failed)?;
        let mut command = match program {
            ManagerProgram::ThisProgram => {
                self_exec::command(&fstat(writer.as_fd()).map_err(spawn_failed)?)
            }
            ManagerProgram::Tensorshare(exe) => {
                let mut command = Command::new(exe);
                command.args(["manager", "--daemon"]);
                command
            }
        };
        command
            .stdin(Stdio::null())
            .stdout(writer)
            .stderr(Stdio::null())
            // Out of the launcher's process group, so that a Ctrl-C meant
            // for the launcher does not reach the daemon before its setsid.
            .process_group(0);
        let spawned = command.spawn();
        // The command holds the pipe's write end: closed here, so that the
        // pipe ends when the child exits.
        drop(command);
        let mut child = spawned.map_err(|err| spawn_failed(errno_of(&err)))?;
        let deadline = Instant::now() + LAUNCH_TIMEOUT;
        let line = read_first_line(File::from(reader), deadline);
        let line = match line {
            Ok(line) => line,
            Err(problem) => {
                kill_and_reap(&mut child);
                return Err(broken(problem));
            }
        };
        if line.is_empty() {
            let status = match wait_or_kill(&mut child, deadline) {
                Some(Ok(status)) => status.to_string(),
                _ => "still running".to_owned(),
            };
            return Err(broken(format!("it printed no socket path ({status})")));
        }
        if let Some(message) = line.strip_prefix(b"ERROR: ") {
            let _ = wait_or_kill(&mut child, deadline);
            return Err(ManagerError::LaunchFailed {
                exe: shown,
                message: String::from_utf8_lossy(message).into_owned(),
            });
        }
        match ManagerHandle::from_bytes(&line) {
            Ok(handle) => Ok(DaemonLaunch {
                shown,
                child,
                handle,
                deadline,
            }),
            Err(err) => {
                let _ = wait_or_kill(&mut child, deadline);
                Err(broken(format!(
                    "its first line is not a socket path: {err}"
                )))
            }
        }
    }

    /// The socket path the daemon printed.
    pub(super) fn handle(&self) -> &ManagerHandle {
        &self.handle
    }

    /// Waits for the launching process, which exits with status 0 as soon as
    /// the daemon has forked away from it, and leaves no zombie.
    pub(super) fn reap(mut self) -> Result<(), ManagerError> {
        let problem = match wait_or_kill(&mut self.child, self.deadline) {
            Some(Ok(status)) if status.success() => return Ok(()),
            Some(Ok(status)) => format!("it exited with {status} after printing its socket path"),
            Some(Err(errno)) => format!("waiting for it failed ({errno})"),
            None => format!(
                "it printed its socket path but stayed in the foreground for {}s (an old \
                 tensorshare without --daemon?)",
                LAUNCH_TIMEOUT.as_secs()
            ),
        };
        Err(ManagerError::LaunchBroken {
            exe: self.shown,
            problem,
        })
    }
}

/// The child's exit status once it exits before `deadline`; `None` when it
/// was still running then, and was killed and reaped.
fn wait_or_kill(
    child: &mut Child,
    deadline: Instant,
) -> Option<Result<std::process::ExitStatus, Errno>> {
    let mut pause = Duration::from_millis(1);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(Ok(status)),
            Ok(None) => {}
            Err(err) => return Some(Err(errno_of(&err))),
        }
        if Instant::now() >= deadline {
            kill_and_reap(child);
            return None;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// Kills the child and reaps it; it may have exited already, and either
/// way nothing is left to do about a failure.
fn kill_and_reap(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Reads up to the first newline (excluded), or to end of file, before
/// `deadline`. Bytes after the newline are left unread.
fn read_first_line(mut stdout: File, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return Err(format!(
                "it printed no socket path within {}s",
                LAUNCH_TIMEOUT.as_secs()
            ));
        }
        let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, poll_timeout(deadline - now)) {
            Ok(0) | Err(Errno::EINTR) => continue,
            Ok(_) => {}
            Err(errno) => return Err(format!("polling its stdout failed ({errno})")),
        }
        // One byte at a time: the line is short, and nothing after it is
        // taken from the pipe.
        match stdout.read(&mut byte) {
            Ok(0) => return Ok(line),
            Ok(_) if byte[0] == b'\n' => return Ok(line),
            Ok(_) if line.len() >= MAX_FIRST_LINE => {
                return Err(format!(
                    "its first line is longer than {MAX_FIRST_LINE} bytes"
                ));
            }
            Ok(_) => line.push(byte[0]),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(format!("reading its stdout failed ({})", errno_of(&err))),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A shell script standing in for `tensorshare`.
    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("fake-tensorshare");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn an_error_line_is_carried_to_the_caller() {
        let dir = tempfile::tempdir().unwrap();
        let exe = script(dir.path(), "echo 'ERROR: no space left'; exit 1");
        let err = launch_daemon(&exe).unwrap_err();
        assert!(
            matches!(&err, ManagerError::LaunchFailed { message, .. } if message == "no space left"),
            "{err}"
        );
    }

    #[test]
    fn a_manager_that_prints_nothing_is_reported_with_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let exe = script(dir.path(), "exit 2");
        let err = launch_daemon(&exe).unwrap_err();
        let message = err.to_string();
        assert!(message.contains("printed no socket path"), "{message}");
        assert!(message.contains("exit status: 2"), "{message}");
    }

    #[test]
    fn a_launcher_that_fails_after_printing_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let exe = script(dir.path(), "echo /tmp/x/manager.sock; exit 3");
        let err = launch_daemon(&exe).unwrap_err();
        assert!(err.to_string().contains("exit status: 3"), "{err}");
    }

    #[test]
    fn a_relative_first_line_is_not_a_handle() {
        let dir = tempfile::tempdir().unwrap();
        let exe = script(dir.path(), "echo manager.sock");
        let err = launch_daemon(&exe).unwrap_err();
        assert!(err.to_string().contains("not a socket path"), "{err}");
    }

    /// The manager a test binary starts is the test binary run again,
    /// serving from before its `main` (were the test harness run instead,
    /// its first line would be no socket path): it forks into the
    /// background, serves, and exits once its last client has gone.
    #[test]
    fn this_program_runs_its_own_manager_as_a_daemon() {
        let launched = DaemonLaunch::spawn(&ManagerProgram::ThisProgram).unwrap();
        let handle = launched.handle().clone();
        let client = std::os::unix::net::UnixStream::connect(handle.path()).unwrap();
        launched.reap().unwrap();
        drop(client);
        let deadline = Instant::now() + Duration::from_secs(30);
        while handle.path().exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!handle.path().exists(), "the idle manager kept its socket");
    }

    #[test]
    fn a_missing_executable_is_a_spawn_error() {
        let err = launch_daemon(Path::new("/nonexistent/tensorshare")).unwrap_err();
        assert!(
            matches!(
                err,
                ManagerError::Spawn {
                    errno: Errno::ENOENT,
                    ..
                }
            ),
            "{err}"
        );
    }
}
