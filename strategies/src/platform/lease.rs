//! Asking the kernel whether a file is open anywhere: a write lease, which
//! it grants only when no other open file refers to the file.
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
use nix::libc::{self, c_int};

/// `F_SETSIG` of `asm-generic/fcntl.h`, which the libc crate does not export
/// for glibc: 10 on every architecture Rust targets (only parisc differs).
const F_SETSIG: c_int = 10;

/// What asking the kernel whether a file is open anywhere gave.
pub(crate) enum Probe {
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
pub(crate) struct ExclusiveHold {
    file: OwnedFd,
}

impl ExclusiveHold {
    /// Whether the lease is still whole: `F_GETLEASE` reports the type a
    /// lease is being broken to while a break is pending.
    pub(crate) fn unbroken(&self) -> bool {
        lease_fcntl(self.file.as_fd(), LeaseCommand::Get) == Ok(libc::F_WRLCK)
    }
}

/// Takes a write lease on `file`, a regular file of this user opened
/// read-only and without blocking, which the kernel grants only when no
/// other open file refers to it: no other fd, mapping or fd in flight, in
/// any process.
pub(crate) fn lease_exclusively(file: OwnedFd) -> Probe {
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
