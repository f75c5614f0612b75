//! A guard that turns `SIGBUS` from a shared object shrunk under a mapping
//! into pages of zeros.
//!
//! A named `file_system` segment, or an fd of a tmpfs object that refuses
//! seals (every fd PyTorch sends), can be truncated by any process that holds
//! it, after this process checked its size and mapped it. Touching a page of
//! the mapping past the object's new end then raises `SIGBUS`, whose default
//! action kills the process. Mappings of such objects register their address
//! range here ([`GuardedRange`]). A process-wide `SIGBUS` handler, installed
//! on the first registration, catches a fault inside a registered range, maps
//! a private page of zeros over the faulting page (`MAP_FIXED`), marks the
//! range [truncated](GuardedRange::was_truncated) and returns: the access is
//! retried and succeeds. The lost bytes read as zeros; writes to them stay in
//! this process.
//!
//! Any other `SIGBUS` goes where it would have gone without this module:
//!
//! - to the handler installed before ours, called as `sa_sigaction` or
//!   `sa_handler` according to its `SA_SIGINFO` (it runs with this handler's
//!   signal mask, not its own `sa_mask`). Rust's standard library installs
//!   one in every Rust program (stack overflow detection), which puts back
//!   `SIG_DFL` for any fault not on a guard page;
//! - when that was `SIG_DFL`, it is put back and the fault repeats as the
//!   handler returns, so the process ends with the same signal, fault
//!   address and core dump; a `SIGBUS` sent with `kill` is raised again;
//! - when that was `SIG_IGN`, a `SIGBUS` sent with `kill` is ignored; for a
//!   fault, `SIG_IGN` is put back and the kernel, which cannot ignore a
//!   repeated fault, ends the process.
//!
//! # The registry
//!
//! The handler must find the range of a faulting address without a lock or
//! an allocation. Ranges live in slots of chunks that are allocated on
//! registration (outside the handler), published through atomic pointers and
//! never freed; chunk `k` holds `64 << k` slots, so a few chunks serve any
//! number of live mappings. A slot holds the range's start and end and a
//! truncated flag, all atomics, and a state word (a generation and a tag:
//! free, being written, active) that the handler reads on both sides of the
//! range, as a sequence lock, so it never matches a range torn between two
//! registrations. Registration claims a free slot, starting at a hint (the
//! slot freed last, or the one after the slot claimed last) and skipping full
//! chunks by a per-chunk count, so it costs a few atomic operations.
//!
//! A range is published before its mapping is handed out, and unpublished
//! before it is unmapped ([`crate::platform::mapping`]), so the handler never patches
//! memory that a later, unrelated mapping reuses.
//!
//! # Limits
//!
//! - Only user-space accesses fault. A system call given a pointer into lost
//!   pages (`write(2)` from a truncated segment) fails with `EFAULT` instead,
//!   and replaces nothing.
//! - A `SIGBUS` handler installed later by other code that does not pass
//!   faults on to the handler before it turns the guard off.
//! - When the page of zeros cannot be mapped (`vm.max_map_count` reached),
//!   the fault goes on to the previous disposition, as if unguarded.
//! - Shared memory that runs out when a page of an object with holes is
//!   first touched raises the same fault as truncation; that page is
//!   replaced and the range marked truncated too.
//!
//! # Safety
//!
//! This module opts in to `unsafe` for four things:
//!
//! - Installing the handler with `sigaction`: the handler only loads and
//!   stores atomics in memory that is never freed, and calls `mmap`,
//!   `sigaction` and `raise`, which POSIX lists as async-signal-safe; it
//!   saves and restores `errno`. It allocates nothing and takes no lock.
//! - Reading the chunks through their raw pointers: a pointer is published
//!   (release) only after the chunk is fully built, and chunks are leaked, so
//!   a non-null pointer loaded with acquire stays valid for the process's
//!   life.
//! - Mapping a page of zeros with `MAP_FIXED` over a page of a registered
//!   range: [`GuardedRange::register`]'s contract makes every registered
//!   range a live mapping owned by its registrant, unregistered before it is
//!   unmapped, and a thread can fault on the range only while it borrows the
//!   mapping, which is then not unmapped. The bytes change from unreadable to
//!   zero, a change of shared bytes like any write by another process, which
//!   the crate's contract on shared segments (the `Segment` trait's docs)
//!   already allows for; every bit pattern is a valid `u8`.
//! - Calling the previous handler: it is the function the kernel would have
//!   called with the same arguments, had this module not been installed.
#![allow(unsafe_code)]

use std::fmt;
use std::num::NonZeroUsize;
use std::ptr::{NonNull, null_mut};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering, fence};

use nix::errno::Errno;
use nix::libc;
use nix::sys::mman::{MapFlags, ProtFlags, mmap_anonymous};
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, raise, sigaction};
use nix::unistd::{SysconfVar, sysconf};

/// Slots in the first chunk; chunk `k` holds `FIRST_CHUNK_SLOTS << k`.
const FIRST_CHUNK_SLOTS: usize = 64;

/// How many chunks there can be: together they hold over a billion slots,
/// far more mappings than `vm.max_map_count` allows a process.
const MAX_CHUNKS: usize = 24;

/// The chunks allocated so far, in order; null from the first one not yet
/// allocated on. Never freed.
static CHUNKS: [AtomicPtr<Chunk>; MAX_CHUNKS] = [const { AtomicPtr::new(null_mut()) }; MAX_CHUNKS];

/// The index of a slot likely free: the one released last, or the one
/// after the one claimed last.
static FREE_SLOT_HINT: AtomicUsize = AtomicUsize::new(0);

/// The page size, set before the handler is installed.
static PAGE_SIZE: AtomicUsize = AtomicUsize::new(0);

/// The `SIGBUS` action that was in place before ours.
static PREVIOUS_ACTION: OnceLock<SigAction> = OnceLock::new();

/// Whether the handler is installed, or why it could not be.
static INSTALLED: OnceLock<Result<(), Errno>> = OnceLock::new();

/// The low bits of a slot's state: what the slot holds.
const TAG_MASK: usize = 0b11;
/// The slot holds nothing and can be claimed.
const TAG_FREE: usize = 0;
/// A registration claimed the slot and is writing its range.
const TAG_WRITING: usize = 1;
/// The slot's range is registered: the handler matches faults against it.
const TAG_ACTIVE: usize = 2;
/// What a claim adds to the state's generation (the bits above the tag).
const GENERATION_STEP: usize = TAG_MASK + 1;

/// One registered address range, or none.
struct Slot {
    /// A generation, bumped on every claim, above a tag (`TAG_*`).
    state: AtomicUsize,
    /// First address of the range, page aligned.
    start: AtomicUsize,
    /// One past the range's last address, rounded up to a page.
    end: AtomicUsize,
    /// Whether the handler replaced a page of the range.
    truncated: AtomicBool,
}

impl Slot {
    fn new() -> Self {
        Slot {
            state: AtomicUsize::new(TAG_FREE),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            truncated: AtomicBool::new(false),
        }
    }

    /// Takes the slot if it is free; the caller then owns it until
    /// [`release`](Self::release).
    fn try_claim(&self) -> bool {
        let state = self.state.load(Ordering::Relaxed);
        if state & TAG_MASK != TAG_FREE {
            return false;
        }
        let claimed = (state & !TAG_MASK).wrapping_add(GENERATION_STEP) | TAG_WRITING;
        if self
            .state
            .compare_exchange(state, claimed, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // The writer's half of the sequence lock: a handler that reads a
        // range written after this fence also sees the state changed.
        fence(Ordering::Release);
        true
    }

    /// Writes the range of a claimed slot and makes it visible to the
    /// handler.
    fn publish(&self, start: usize, end: usize) {
        self.start.store(start, Ordering::Relaxed);
        self.end.store(end, Ordering::Relaxed);
        self.truncated.store(false, Ordering::Relaxed);
        let state = self.state.load(Ordering::Relaxed);
        self.state
            .store((state & !TAG_MASK) | TAG_ACTIVE, Ordering::Release);
    }

    /// Frees a claimed slot: the handler no longer matches its range.
    fn release(&self) {
        let state = self.state.load(Ordering::Relaxed);
        self.state
            .store((state & !TAG_MASK) | TAG_FREE, Ordering::Release);
    }

    /// Whether `address` lies in the slot's active range. Async-signal-safe.
    fn covers(&self, address: usize) -> bool {
        let before = self.state.load(Ordering::Acquire);
        if before & TAG_MASK != TAG_ACTIVE {
            return false;
        }
        let start = self.start.load(Ordering::Relaxed);
        let end = self.end.load(Ordering::Relaxed);
        // The reader's half of the sequence lock: if `start` or `end` came
        // from a later registration, `after` differs from `before`.
        fence(Ordering::Acquire);
        let after = self.state.load(Ordering::Relaxed);
        before == after && start <= address && address < end
    }
}

/// A block of slots, leaked once published.
struct Chunk {
    /// How many of `slots` are claimed; lets a registration skip full chunks.
    claimed: AtomicUsize,
    slots: Box<[Slot]>,
}

/// The chunk `index` if it is allocated. Async-signal-safe.
fn chunk(index: usize) -> Option<&'static Chunk> {
    let pointer = CHUNKS.get(index)?.load(Ordering::Acquire);
    // SAFETY: a non-null pointer in `CHUNKS` was stored by `grow` with
    // release ordering after `Box::into_raw` of a fully built chunk, and is
    // never freed or replaced; the acquire load sees that chunk built.
    unsafe { pointer.as_ref() }
}

/// The global index of slot `offset` of chunk `chunk_index`.
fn slot_index(chunk_index: usize, offset: usize) -> usize {
    FIRST_CHUNK_SLOTS * ((1 << chunk_index) - 1) + offset
}

/// The chunk and offset of the slot with global index `index`.
fn locate(index: usize) -> (usize, usize) {
    let quotient = index / FIRST_CHUNK_SLOTS + 1;
    let chunk_index = (usize::BITS - 1 - quotient.leading_zeros()) as usize;
    (chunk_index, index - slot_index(chunk_index, 0))
}

/// Allocates chunk `chunk_index` unless another thread already did.
fn grow(chunk_index: usize) {
    let Some(entry) = CHUNKS.get(chunk_index) else {
        return;
    };
    if !entry.load(Ordering::Acquire).is_null() {
        return;
    }
    let slots = (0..FIRST_CHUNK_SLOTS << chunk_index)
        .map(|_| Slot::new())
        .collect();
    let chunk = Box::into_raw(Box::new(Chunk {
        claimed: AtomicUsize::new(0),
        slots,
    }));
    if entry
        .compare_exchange(null_mut(), chunk, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        // SAFETY: the exchange failed, so `chunk` was never published: this
        // thread holds the only pointer to the box it came from.
        drop(unsafe { Box::from_raw(chunk) });
    }
}

/// Claims a free slot, allocating a chunk when all are taken; `None` when
/// every chunk is allocated and full.
fn claim() -> Option<(&'static Chunk, usize, &'static Slot)> {
    loop {
        let allocated = (0..MAX_CHUNKS)
            .take_while(|&index| chunk(index).is_some())
            .count();
        let (hint_chunk, hint_offset) = locate(FREE_SLOT_HINT.load(Ordering::Relaxed));
        let first = if hint_chunk < allocated {
            hint_chunk
        } else {
            0
        };
        for chunk_index in (first..allocated).chain(0..first) {
            let Some(chunk) = chunk(chunk_index) else {
                continue;
            };
            let len = chunk.slots.len();
            if chunk.claimed.load(Ordering::Relaxed) >= len {
                continue;
            }
            let from = if chunk_index == hint_chunk {
                hint_offset
            } else {
                0
            };
            for offset in (from..len).chain(0..from) {
                let Some(slot) = chunk.slots.get(offset) else {
                    continue;
                };
                if slot.try_claim() {
                    chunk.claimed.fetch_add(1, Ordering::Relaxed);
                    let index = slot_index(chunk_index, offset);
                    FREE_SLOT_HINT.store(index + 1, Ordering::Relaxed);
                    return Some((chunk, index, slot));
                }
            }
        }
        if allocated == MAX_CHUNKS {
            return None;
        }
        grow(allocated);
    }
}

/// The slot whose active range holds `address`. Async-signal-safe.
fn find(address: usize) -> Option<&'static Slot> {
    (0..MAX_CHUNKS)
        .map_while(chunk)
        .flat_map(|chunk| chunk.slots.iter())
        .find(|slot| slot.covers(address))
}

/// Installs the handler, once per process.
fn install() -> Result<(), Errno> {
    *INSTALLED.get_or_init(|| {
        let page_size = sysconf(SysconfVar::PAGE_SIZE)?
            .and_then(|size| usize::try_from(size).ok())
            .filter(|size| size.is_power_of_two())
            .ok_or(Errno::EINVAL)?;
        PAGE_SIZE.store(page_size, Ordering::Relaxed);
        let action = SigAction::new(
            SigHandler::SigAction(on_sigbus),
            SaFlags::SA_SIGINFO | SaFlags::SA_ONSTACK | SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        // SAFETY: `on_sigbus` is async-signal-safe (see the module's Safety
        // section). The previous action it returns is the kernel's record of
        // a handler some code installed, called only as the kernel would.
        let previous = unsafe { sigaction(Signal::SIGBUS, &action) }?;
        // Set once: `INSTALLED` runs this closure once per process.
        let _ = PREVIOUS_ACTION.set(previous);
        Ok(())
    })
}

/// A registered address range: while it lives, a `SIGBUS` from a lost
/// page of the range reads zeros instead of killing the process. Dropping
/// it unregisters the range.
pub(crate) struct GuardedRange {
    chunk: &'static Chunk,
    index: usize,
    slot: &'static Slot,
}

impl GuardedRange {
    /// Registers the `len` bytes at `start`, installing the handler first
    /// if this is the process's first registration.
    ///
    /// # Safety
    ///
    /// - `start..start + len` is a live mapping owned by the caller, with
    ///   `start` page aligned, as `mmap` returns it.
    /// - The caller drops the returned guard before unmapping the range.
    ///
    /// # Errors
    ///
    /// `ENOMEM` when a billion ranges are registered already, or the errno
    /// of `sigaction` or `sysconf` if the handler cannot be installed.
    pub(crate) unsafe fn register(start: NonNull<u8>, len: NonZeroUsize) -> Result<Self, Errno> {
        install()?;
        let page_size = PAGE_SIZE.load(Ordering::Relaxed);
        let start = start.addr().get();
        let end = start
            .checked_add(len.get())
            .and_then(|end| end.checked_next_multiple_of(page_size))
            .ok_or(Errno::EINVAL)?;
        let (chunk, index, slot) = claim().ok_or(Errno::ENOMEM)?;
        slot.publish(start, end);
        Ok(GuardedRange { chunk, index, slot })
    }

    /// Whether the handler replaced a page of the range: part of the object
    /// was lost, and reads as zeros here.
    pub(crate) fn was_truncated(&self) -> bool {
        self.slot.truncated.load(Ordering::Acquire)
    }
}

impl Drop for GuardedRange {
    fn drop(&mut self) {
        self.slot.release();
        self.chunk.claimed.fetch_sub(1, Ordering::Relaxed);
        FREE_SLOT_HINT.store(self.index, Ordering::Relaxed);
    }
}

impl fmt::Debug for GuardedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedRange")
            .field("start", &self.slot.start.load(Ordering::Relaxed))
            .field("end", &self.slot.end.load(Ordering::Relaxed))
            .field("truncated", &self.was_truncated())
            .finish()
    }
}

/// The process's `SIGBUS` handler.
extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    let saved_errno = Errno::last_raw();
    // SAFETY: the kernel passes a valid `siginfo_t` to an `SA_SIGINFO`
    // handler; it is read only here, within the handler's call.
    let info_fields = unsafe { info.as_ref() };
    let code = info_fields.map(|fields| fields.si_code);
    let replaced = match info_fields {
        Some(fields) if fields.si_code == libc::BUS_ADRERR => {
            // SAFETY: for a fault (`BUS_ADRERR`) the kernel fills `si_addr`
            // with the faulting address.
            let address = unsafe { fields.si_addr() }.addr();
            replace_lost_page(address)
        }
        _ => false,
    };
    if !replaced {
        pass_on(signal, info, context, code);
    }
    Errno::set_raw(saved_errno);
}

/// Maps a page of zeros over the page of `address` if a registered range
/// holds it, and marks the range truncated. Async-signal-safe.
fn replace_lost_page(address: usize) -> bool {
    let Some(slot) = find(address) else {
        return false;
    };
    let page_size = PAGE_SIZE.load(Ordering::Relaxed);
    let (Some(page), Some(len)) = (
        NonZeroUsize::new(address & !(page_size - 1)),
        NonZeroUsize::new(page_size),
    ) else {
        return false;
    };
    // SAFETY: the page lies in a registered range, which is a live mapping
    // that its owner unmaps only after unregistering it, and the faulting
    // thread is borrowing it now (see the module's Safety section);
    // replacing it changes its bytes to zeros and nothing else.
    let mapped = unsafe {
        mmap_anonymous(
            Some(page),
            len,
            ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
            MapFlags::MAP_PRIVATE | MapFlags::MAP_FIXED,
        )
    };
    if mapped.is_err() {
        return false;
    }
    slot.truncated.store(true, Ordering::Release);
    true
}

/// Does with a `SIGBUS` this module does not handle what the process
/// would have done without it. Async-signal-safe.
fn pass_on(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
    code: Option<libc::c_int>,
) {
    // A fault the kernel raises again when the access is retried, as
    // opposed to a signal sent with `kill` or an asynchronous report.
    let repeats = matches!(
        code,
        Some(libc::BUS_ADRALN | libc::BUS_ADRERR | libc::BUS_OBJERR | libc::BUS_MCEERR_AR)
    );
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // Only in the instant between installing the handler and recording the
    // previous action, before any range is registered: act as the default.
    let previous = PREVIOUS_ACTION.get().copied().unwrap_or(default);
    let restore = |action: &SigAction| {
        // SAFETY: puts back an action the kernel held before ours, or the
        // default; `sigaction` is async-signal-safe. Nothing can be done
        // about a failure here.
        let _ = unsafe { sigaction(Signal::SIGBUS, action) };
    };
    match previous.handler() {
        SigHandler::SigDfl => {
            restore(&previous);
            if !repeats {
                // Blocked while this handler runs: delivered, with the
                // default action, as it returns.
                let _ = raise(Signal::SIGBUS);
            }
        }
        SigHandler::SigIgn => {
            // An ignored fault is still fatal: the kernel forces the
            // default action when the access repeats.
            if repeats {
                restore(&previous);
            }
        }
        SigHandler::Handler(handler) => {
            if previous.flags().contains(SaFlags::SA_RESETHAND) {
                restore(&default);
            }
            handler(signal);
        }
        SigHandler::SigAction(handler) => {
            if previous.flags().contains(SaFlags::SA_RESETHAND) {
                restore(&default);
            }
            handler(signal, info, context);
        }
    }
}

#[cfg(test)]
mod tests;
