//! Whether a process known by its pid has exited.
//!
//! A process that was SIGKILLed closes its fds while it exits, before it
//! becomes a zombie: a peer that sees its socket close may look while it is
//! still on its way out. The kernel marks every thread that has begun to
//! exit (`PF_EXITING`, in the flags of `/proc/<pid>/stat`) before it closes
//! any file, so a process whose last fd for a socket has closed shows as
//! exiting, a zombie, or gone.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

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
/// use tensorshare_strategies::platform::process::has_exited;
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
    if !exists(pid) {
        return true;
    }
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        // Gone since `kill`, or hidden from this process: ask again.
        return !exists(pid);
    };
    stat_says_exiting(&stat)
}

/// The processes something was sent to, as far as its sender could name
/// them: what a segment or a file is kept for, until every one has exited.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::platform::process::Recipients;
///
/// let mut recipients = Recipients::default();
/// assert!(!recipients.all_exited(), "none named: nothing is known");
/// let mut child = std::process::Command::new("true").spawn()?;
/// child.wait()?;
/// recipients.add(Some(child.id()));
/// assert!(recipients.all_exited());
/// recipients.add(Some(std::process::id()));
/// assert!(!recipients.all_exited());
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recipients {
    pids: Vec<u32>,
    /// Sent to a process that could not be named, or to more than
    /// [`Recipients::MAX`]: who may still read it is not known.
    unknown: bool,
}

impl Recipients {
    /// The most processes kept; past it, the recipients are unknown.
    pub const MAX: usize = 64;

    /// Adds the process `pid` (`None`: one that could not be named).
    pub fn add(&mut self, pid: Option<u32>) {
        match pid {
            Some(pid) if self.pids.contains(&pid) => {}
            Some(pid) if self.pids.len() < Self::MAX => self.pids.push(pid),
            _ => self.unknown = true,
        }
    }

    /// Whether it went to processes that were all named.
    pub fn is_known(&self) -> bool {
        !self.unknown && !self.pids.is_empty()
    }

    /// Whether every process it went to has exited or is exiting
    /// ([`has_exited`]): `false` when they are not all known.
    pub fn all_exited(&self) -> bool {
        self.all_exited_by(has_exited)
    }

    /// [`all_exited`](Self::all_exited), asking `exited` of each pid: for a
    /// caller that asks once per pid for many sets.
    pub fn all_exited_by(&self, mut exited: impl FnMut(u32) -> bool) -> bool {
        self.is_known() && self.pids.iter().all(|&pid| exited(pid))
    }

    /// The processes named.
    pub fn pids(&self) -> &[u32] {
        &self.pids
    }
}

/// Looks at whether processes have exited at most once per period, each
/// pid asked once a look: what a sender's queues and pools do to let go of
/// what only exited processes could still claim, off the path of each send.
#[derive(Debug, Clone, Copy)]
pub struct ExitSweep {
    every: Duration,
    last: Option<Instant>,
}

impl ExitSweep {
    /// A sweep that looks at most once per `every`.
    pub const fn new(every: Duration) -> Self {
        Self { every, last: None }
    }

    /// At `now`, when a look is due: [`has_exited`], memoized for this look.
    pub fn look(&mut self, now: Instant) -> Option<impl FnMut(u32) -> bool + use<>> {
        if self
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.every)
        {
            return None;
        }
        self.last = Some(now);
        let mut asked = HashMap::new();
        Some(move |pid| *asked.entry(pid).or_insert_with(|| has_exited(pid)))
    }

    /// When the next look is due.
    pub fn next_due(&self) -> Instant {
        self.last
            .map_or_else(Instant::now, |last| last + self.every)
    }
}

/// The [`Recipients`] of one segment or file, noted by any thread as it is
/// sent.
#[derive(Debug, Default)]
pub struct SentTo(Mutex<Recipients>);

impl SentTo {
    /// Notes that it was sent to process `pid`.
    pub fn add(&self, pid: u32) {
        self.lock().add(Some(pid));
    }

    /// Whether it was sent, and every process it was sent to has exited
    /// ([`Recipients::all_exited`]).
    pub fn all_exited(&self) -> bool {
        self.lock().all_exited()
    }

    /// [`all_exited`](Self::all_exited), asking `exited` of each pid.
    pub fn all_exited_by(&self, exited: impl FnMut(u32) -> bool) -> bool {
        self.lock().all_exited_by(exited)
    }

    /// The processes it was sent to, as now.
    pub fn recipients(&self) -> Recipients {
        self.lock().clone()
    }

    /// A list of pids stays one whatever a thread that panicked left.
    fn lock(&self) -> MutexGuard<'_, Recipients> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a `/proc/<pid>/stat` line shows a zombie, a dead task or one
/// with `PF_EXITING` set.
fn stat_says_exiting(stat: &[u8]) -> bool {
    ProcStat::parse(stat).is_some_and(|stat| {
        matches!(stat.state, Some(b'Z' | b'X' | b'x')) || stat.has_flag(PF_EXITING)
    })
}

/// Whether a process with this pid exists, by `kill(pid, 0)`: only `ESRCH`
/// says it does not; `EPERM` says it does, another user's. A pid recycled
/// by another process exists, and so does one beyond `pid_t`.
pub(crate) fn exists(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return true;
    };
    !matches!(kill(Pid::from_raw(pid), None), Err(Errno::ESRCH))
}

/// The fields of `/proc/<pid>/stat` this crate reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// The state letter (`R`, `S`, `Z`, ...), when the field is one byte.
    state: Option<u8>,
    /// The task's `PF_*` flags; `None` when the field does not parse.
    flags: Option<u64>,
}

impl ProcStat {
    /// Reads `/proc/<pid>/stat`; `None` when it cannot be read or parsed.
    pub(crate) fn of(pid: u32) -> Option<Self> {
        Self::parse(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
    }

    /// Parses a `/proc/<pid>/stat` line: `pid (comm) state ppid pgrp
    /// session tty_nr tpgid flags ...`; comm may hold spaces and
    /// parentheses, so fields are counted from the last `)`.
    fn parse(stat: &[u8]) -> Option<Self> {
        let after_comm = stat
            .iter()
            .rposition(|b| *b == b')')
            .and_then(|end| stat.get(end + 1..))?;
        let mut fields = after_comm
            .split(|b| b.is_ascii_whitespace())
            .filter(|field| !field.is_empty());
        let state = match fields.next() {
            Some(&[state]) => Some(state),
            _ => None,
        };
        let flags = fields
            .nth(5)
            .and_then(|flags| std::str::from_utf8(flags).ok())
            .and_then(|flags| flags.parse::<u64>().ok());
        Some(Self { state, flags })
    }

    /// Whether its flags include `flag`; unknown counts as no.
    pub(crate) fn has_flag(&self, flag: u64) -> bool {
        self.flags.is_some_and(|flags| flags & flag != 0)
    }
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
