//! Whether a process known by its pid has exited.
//!
//! A process that was SIGKILLed closes its fds while it exits, before it
//! becomes a zombie: a peer that sees its socket close may look while it is
//! still on its way out. The kernel marks every thread that has begun to
//! exit (`PF_EXITING`, in the flags of `/proc/<pid>/stat`) before it closes
//! any file, so a process whose last fd for a socket has closed shows as
//! exiting, a zombie, or gone.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// `PF_EXITING` in `include/linux/sched.h`: the thread is in `do_exit`.
const PF_EXITING: u64 = 0x4;

/// Whether the process `pid` has exited or is exiting: no such process, a
/// zombie, or one whose threads have begun to exit.
///
/// A process this one cannot see into (another user's under `hidepid`, a
/// `/proc` that cannot be read) counts as running: callers act on an exit,
/// and must not on a guess. A pid recycled by another process also counts
/// as running.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::process::has_exited;
///
/// assert!(!has_exited(std::process::id()));
/// let mut child = std::process::Command::new("true").spawn()?;
/// child.wait()?;
/// assert!(has_exited(child.id()));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn has_exited(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    if raw <= 0 {
        return false;
    }
    // EPERM: another user's process, which exists.
    if kill(Pid::from_raw(raw), None) == Err(Errno::ESRCH) {
        return true;
    }
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        // Gone since `kill`, or hidden from this process: ask again.
        return kill(Pid::from_raw(raw), None) == Err(Errno::ESRCH);
    };
    stat_says_exiting(&stat)
}

/// Whether a `/proc/<pid>/stat` line shows a zombie, a dead task or one
/// with `PF_EXITING` set.
fn stat_says_exiting(stat: &[u8]) -> bool {
    // `pid (comm) state ppid pgrp session tty_nr tpgid flags ...`; comm may
    // hold spaces and parentheses, so count from the last `)`.
    let Some(after_comm) = stat
        .iter()
        .rposition(|b| *b == b')')
        .and_then(|end| stat.get(end + 1..))
    else {
        return false;
    };
    let mut fields = after_comm
        .split(|b| b.is_ascii_whitespace())
        .filter(|field| !field.is_empty());
    let state = fields.next();
    if matches!(state, Some(b"Z" | b"X" | b"x")) {
        return true;
    }
    fields
        .nth(5)
        .and_then(|flags| std::str::from_utf8(flags).ok())
        .and_then(|flags| flags.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_zombie_and_exiting_tasks_are_told_apart() {
        let running = b"42 (a (b) c) S 1 42 42 0 -1 4194560 0 0";
        assert!(!stat_says_exiting(running));
        assert!(stat_says_exiting(b"42 (x) Z 1 42 42 0 -1 4194560 0 0"));
        // 4194564 = 4194560 | PF_EXITING
        assert!(stat_says_exiting(b"42 (x) R 1 42 42 0 -1 4194564 0 0"));
        assert!(!stat_says_exiting(b"garbage"));
    }

    #[test]
    fn this_process_runs_and_a_reaped_child_has_exited() {
        assert!(!has_exited(std::process::id()));
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("run true");
        let pid = child.id();
        child.wait().expect("reap");
        assert!(has_exited(pid));
        assert!(!has_exited(0));
    }

    #[test]
    fn an_unreaped_child_has_exited() {
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("run true");
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !has_exited(pid) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(has_exited(pid), "a zombie counts as exited");
        child.wait().expect("reap");
    }
}
