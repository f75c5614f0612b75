//! Asking the kernel whether a file is open anywhere: a write lease.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for one thing: `fcntl(2)` with the
//! lease commands (`F_SETSIG`, `F_SETLEASE`, `F_GETLEASE`), which nix does
//! not wrap. Each call passes an fd borrowed for the call and an integer,
//! and the kernel reads or writes no memory of this process.
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::libc::{self, c_int};
use nix::sys::stat::{Mode, fstat};

use super::listing::{Entry, FileKey};
use crate::mapping::is_regular_file;

/// `F_SETSIG` of `asm-generic/fcntl.h`, which the libc crate does not export
/// for glibc: 10 on every architecture Rust targets (only parisc differs).
const F_SETSIG: c_int = 10;

/// What asking the kernel whether a file is open anywhere gave.
pub(super) enum Probe {
    /// Nothing else has it open. When asked to, the write lease is kept
    /// until the hold is dropped.
    Exclusive(Option<ExclusiveHold>),
    /// Another open file refers to it, or another process holds a lease.
    InUse,
    /// Another file took the name.
    Replaced,
    /// The name is gone.
    Gone,
    /// The kernel could not be asked: opening the file or taking the lease
    /// failed with this.
    Unavailable(Errno),
}

/// A segment opened with a write lease on it: until it is dropped, no other
/// process can open the file without the kernel first breaking the lease.
/// Closing the fd gives the lease back.
#[derive(Debug)]
pub(super) struct ExclusiveHold {
    file: OwnedFd,
}

impl ExclusiveHold {
    /// Whether the lease is still whole: `F_GETLEASE` reports the type a
    /// lease is being broken to while a break is pending.
    pub(super) fn unbroken(&self) -> bool {
        lease_fcntl(self.file.as_fd(), LeaseCommand::Get) == Ok(libc::F_WRLCK)
    }
}

/// Opens `entry` and takes a write lease on it, which the kernel grants only
/// when no other open file refers to it.
pub(super) fn hold_exclusively(dir: &OwnedFd, entry: &Entry) -> Probe {
    let file = match openat(
        dir,
        entry.name.file_name(),
        // O_NONBLOCK: fail instead of waiting on another holder's lease.
        OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(file) => file,
        Err(Errno::ENOENT) => return Probe::Gone,
        // A symlink took the name.
        Err(Errno::ELOOP) => return Probe::Replaced,
        // Another process holds a lease on it.
        Err(Errno::EAGAIN) => return Probe::InUse,
        Err(errno) => return Probe::Unavailable(errno),
    };
    match fstat(&file) {
        Ok(stat)
            if is_regular_file(&stat)
                && FileKey::new(stat.st_dev, stat.st_ino) == entry.file
                && stat.st_uid == entry.owner_uid => {}
        Ok(_) => return Probe::Replaced,
        Err(errno) => return Probe::Unavailable(errno),
    }
    // The kernel signals a lease break to the holder, SIGIO unless told
    // otherwise, whose default action would end this process; SIGURG is
    // ignored unless handled.
    if let Err(errno) = lease_fcntl(file.as_fd(), LeaseCommand::SetSignal(libc::SIGURG)) {
        return Probe::Unavailable(errno);
    }
    match lease_fcntl(file.as_fd(), LeaseCommand::Set(libc::F_WRLCK)) {
        Ok(_) => Probe::Exclusive(Some(ExclusiveHold { file })),
        Err(Errno::EAGAIN | Errno::EBUSY) => Probe::InUse,
        Err(errno) => Probe::Unavailable(errno),
    }
}

/// The `fcntl(2)` lease commands, the only ones [`lease_fcntl`] issues.
#[derive(Debug, Clone, Copy)]
enum LeaseCommand {
    /// `F_SETSIG`: the signal that announces a lease break.
    SetSignal(c_int),
    /// `F_SETLEASE` with `F_RDLCK`, `F_WRLCK` or `F_UNLCK`.
    Set(c_int),
    /// `F_GETLEASE`.
    Get,
}

fn lease_fcntl(fd: BorrowedFd<'_>, command: LeaseCommand) -> Result<c_int, Errno> {
    let (cmd, arg) = match command {
        LeaseCommand::SetSignal(signal) => (F_SETSIG, signal),
        LeaseCommand::Set(lease) => (libc::F_SETLEASE, lease),
        LeaseCommand::Get => (libc::F_GETLEASE, 0),
    };
    // SAFETY: `fd` is open for the whole call (it is borrowed), and these
    // three commands take an integer argument and read or write no memory
    // of this process.
    let result = unsafe { libc::fcntl(fd.as_raw_fd(), cmd, arg) };
    Errno::result(result)
}
