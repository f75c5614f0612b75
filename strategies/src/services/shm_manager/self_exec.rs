//! The manager daemon run from the program's own executable, so that
//! `file_system` needs nothing beyond this crate: no `tensorshare` command.
//!
//! The launcher executes `/proc/self/exe` (the image this process runs,
//! even when its file was deleted or replaced since it started) with a
//! marker in the environment: the identity (`st_dev`, `st_ino`) of the pipe
//! it gave the child as stdout. A constructor this module places in
//! `.init_array` runs in every program that links the crate, before `main`:
//! it reads the variable and returns at once when it is absent, which is
//! all it ever does in a program not started as a manager. When it is
//! present it removes it, and, only if stdout really is that pipe, becomes
//! the manager as `tensorshare manager --daemon` does (prints its socket
//! path on the pipe, forks into its own session, serves) and exits without
//! returning, so nothing of the program's `main` runs in the manager.
//!
//! The pipe's identity is what makes the marker one that no one sets by
//! mistake: a variable copied into another environment names a pipe that
//! is no longer that program's stdout, and the program runs as usual.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for two things:
//!
//! - The constructor is a function pointer in a `#[used]` static placed in
//!   the `.init_array` section, which the dynamic loader (or the C runtime
//!   of a static executable) calls before `main`, on the thread that will
//!   run `main`, with `argc, argv, envp`: arguments an `extern "C" fn()`
//!   ignores under the C calling convention, as C constructors declared
//!   `void f(void)` do. It never unwinds (an `extern "C"` function aborts on
//!   a panic).
//! - `std::env::remove_var`, which is unsafe because another thread may
//!   read the environment at the same time; it is called only after
//!   `/proc/self/task` showed this process runs one thread.
#![allow(unsafe_code)]

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::stat::{FileStat, SFlag, fstat, stat};

use super::daemon::thread_count;
use super::{ManagerError, ManagerServer, ServeOptions, in_flight_wait_from_env};

/// The environment variable that tells a program started by
/// [`command`] to run as the manager: the `st_dev:st_ino` of the pipe on
/// its stdout.
pub(super) const MARKER_ENV: &str = "TENSORSHARE_SHM_MANAGER_PIPE";

/// The executable a manager started by this process runs: the image this
/// process runs, whatever became of its file.
const THIS_PROGRAM: &str = "/proc/self/exe";

/// Called before `main` in every program that links this crate: see the
/// module docs. The static is `#[used]`, and rustc keeps the `#[used]`
/// statics of every crate a program links, so it is not dropped from a
/// program that calls nothing of this module (the embedder example shows
/// it, run from a binary of its own).
#[used]
// SAFETY: `.init_array` holds pointers to functions the loader calls with
// `argc, argv, envp` before `main`; `run_manager_if_marked` is an
// `extern "C" fn` that ignores them and never unwinds (module `# Safety`).
#[unsafe(link_section = ".init_array")]
static RUN_MANAGER_IF_MARKED: extern "C" fn() = run_manager_if_marked;

extern "C" fn run_manager_if_marked() {
    let Some(marker) = std::env::var_os(MARKER_ENV) else {
        return;
    };
    let launched = stdout_is_pipe(&marker);
    let threads = thread_count();
    if threads == 1 {
        // SAFETY: `/proc/self/task` just showed one thread, so nothing
        // reads the environment concurrently (module `# Safety`).
        unsafe { std::env::remove_var(MARKER_ENV) };
    }
    if !launched {
        return;
    }
    if threads != 1 {
        // Another constructor started a thread: no manager can fork from
        // here. The launcher reads why; the program's `main` is not run.
        report_line(&format!(
            "ERROR: {}",
            ManagerError::NotSingleThreaded { threads }
        ));
        std::process::exit(1);
    }
    std::process::exit(serve_as_daemon());
}

/// Whether stdout is the pipe `marker` names.
fn stdout_is_pipe(marker: &OsStr) -> bool {
    let Ok(stdout) = fstat(std::io::stdout().as_fd()) else {
        return false;
    };
    SFlag::from_bits_truncate(stdout.st_mode).contains(SFlag::S_IFIFO)
        && marker.as_bytes() == pipe_marker(&stdout).as_bytes()
}

/// The marker naming the pipe `pipe` is the `fstat` of.
fn pipe_marker(pipe: &FileStat) -> String {
    format!("{}:{}", pipe.st_dev, pipe.st_ino)
}

/// Runs the manager as `tensorshare manager --daemon` does, and returns the
/// exit status; the launching process has exited with 0 by then.
fn serve_as_daemon() -> i32 {
    // Before the socket path is printed, as the command's signal handlers:
    // a SIGTERM, SIGINT or SIGHUP then stops the manager as when idle,
    // unlinking what is registered. Blocked signals and the signalfd
    // survive the fork into the background.
    let shutdown = shutdown_signals();
    let server = match ManagerServer::bind_in_private_dir() {
        Ok(server) => server,
        Err(error) => {
            report_line(&format!("ERROR: {error}"));
            return 1;
        }
    };
    if !report_line(&server.handle().to_string()) {
        return 1;
    }
    // The name `ps` and `top` show, as for a manager the command started.
    let _ = nix::sys::prctl::set_name(c"tensorshare");
    let server = match server.daemonize() {
        Ok(server) => server,
        // The launcher has read the socket path and sees this as a launcher
        // that exited with an error status.
        Err(_) => return 1,
    };
    let mut options = ServeOptions::default();
    // The daemon's stderr is the program's: a bad value is said there, once.
    match in_flight_wait_from_env() {
        Ok(Some(wait)) => options = options.with_in_flight_wait(wait),
        Ok(None) => {}
        Err(why) => eprintln!("tensorshare manager: ignoring {why}"),
    }
    if let Some(shutdown) = shutdown {
        options = options.with_shutdown(shutdown);
    }
    match server.serve(options) {
        Ok(_) => 0,
        Err(_) => 1,
    }
}

/// A signalfd that polls readable on SIGTERM, SIGINT or SIGHUP, which are
/// blocked; `None`, and the signals left as they were, when that fails.
fn shutdown_signals() -> Option<SignalFd> {
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        signals.add(signal);
    }
    signals.thread_block().ok()?;
    match SignalFd::with_flags(&signals, SfdFlags::SFD_CLOEXEC) {
        Ok(fd) => Some(fd),
        Err(_) => {
            let _ = signals.thread_unblock();
            None
        }
    }
}

/// Writes `line` and a newline to stdout, the launcher's pipe; false when
/// that fails.
fn report_line(line: &str) -> bool {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| stdout.flush())
        .is_ok()
}

/// Whether this module's constructor is in the program's executable, so
/// that running it again starts a manager: not when this crate was loaded
/// as a shared library, into a Python interpreter for one.
pub(super) fn runs_managers() -> bool {
    // The address of the constructor, to find the file it was loaded from.
    let constructor = run_manager_if_marked as extern "C" fn() as usize;
    let (Ok(maps), Ok(exe)) = (
        std::fs::read_to_string("/proc/self/maps"),
        stat(Path::new(THIS_PROGRAM)),
    ) else {
        return false;
    };
    maps.lines()
        .find_map(|line| mapping_of(line, constructor))
        .is_some_and(|(device, inode)| {
            inode == exe.st_ino
                && device
                    == (
                        nix::sys::stat::major(exe.st_dev),
                        nix::sys::stat::minor(exe.st_dev),
                    )
        })
}

/// The device (major, minor) and inode of the file mapped by the
/// `/proc/self/maps` line `line`, when its range holds `address`.
fn mapping_of(line: &str, address: usize) -> Option<((u64, u64), u64)> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let range = usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?;
    if !range.contains(&address) {
        return None;
    }
    let _permissions = fields.next()?;
    let _offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let device = (
        u64::from_str_radix(major, 16).ok()?,
        u64::from_str_radix(minor, 16).ok()?,
    );
    let inode = fields.next()?.parse().ok()?;
    Some((device, inode))
}

/// The command that starts this program again as a manager daemon writing
/// to `pipe`, which the caller makes the child's stdout; `pipe` is the
/// `fstat` of it.
pub(super) fn command(pipe: &FileStat) -> Command {
    let mut command = Command::new(THIS_PROGRAM);
    // What `ps` shows, as for `tensorshare manager --daemon`; the program
    // reads no argument before its constructor has taken over.
    command
        .arg0("tensorshare")
        .args(["manager", "--daemon"])
        .env(MARKER_ENV, pipe_marker(pipe));
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maps_line_gives_the_device_and_inode_of_an_address_inside_it() {
        let line = "5581d000-5581f000 r-xp 00002000 fd:01 1234567    /usr/bin/x (deleted)";
        assert_eq!(mapping_of(line, 0x5581_d000), Some(((0xfd, 1), 1_234_567)));
        assert_eq!(mapping_of(line, 0x5581_f000), None);
        assert_eq!(mapping_of("garbage", 0), None);
    }

    #[test]
    fn a_test_binary_runs_managers_itself() {
        assert!(runs_managers());
    }

    #[test]
    fn a_marker_naming_another_pipe_is_not_this_stdout() {
        assert!(!stdout_is_pipe(OsStr::new("1:2")));
    }

    /// A marker that names no pipe on stdout leaves the program to run as
    /// usual: this test binary lists its tests.
    #[test]
    fn a_program_with_a_stray_marker_runs_its_main() {
        let output = Command::new(std::env::current_exe().expect("this test binary"))
            .arg("--list")
            .env(MARKER_ENV, "1:2")
            .output()
            .expect("running this test binary");
        let listed = String::from_utf8_lossy(&output.stdout);
        assert!(
            listed.contains("a_program_with_a_stray_marker_runs_its_main: test"),
            "{listed}"
        );
    }
}
