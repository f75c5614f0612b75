//! Shared-memory mechanisms for tensorshare.
//!
//! This crate holds every OS call and every line of `unsafe` code of the
//! project. It knows nothing of pickles or tensors: it moves bytes between
//! processes.
//!
//! - [`SharingStrategy`]: allocate a zero-filled writable segment, export a
//!   handle that can travel to another process, open such a handle there
//!   and tell which object it names, map it (through a mapping kept
//!   dormant from an earlier segment of that object, where the strategy
//!   keeps one) or join it to the segment of that object held already.
//!   One module per implementation: [`file_descriptor`] (memfd, the fd travels
//!   by `SCM_RIGHTS`), [`file_system`] (a named segment with torch's
//!   reference count; the name travels), [`bytes`] (the bytes themselves
//!   travel) and [`memmap`] (a file on disk that both sides map; its path
//!   travels).
//! - [`services::shm_manager`]: the daemon that unlinks `file_system`
//!   segments whose holders crashed, speaking torch's libshm protocol;
//!   [`services::orphans`] finds segments left in `/dev/shm` by processes
//!   that are gone; [`platform::process::has_exited`] tells whether a peer
//!   process is gone.
//! - [`Segment`] and [`WritableSegment`]: memory mapped or held in this
//!   process, type-erased so the runtime can keep `Arc<dyn Segment>`.
//! - [`platform::fd_passing`]: `sendmsg`/`recvmsg` with `SCM_RIGHTS`,
//!   compatible with CPython's `multiprocessing.reduction.sendfds` and
//!   `recvfds`.
//! - [`bytes::heap`]: the `bytes` strategy's buffers; large ones are
//!   mappings kept in a bounded process-wide pool, so they are not faulted
//!   in anew for every message.
//!
//! # Example
//!
//! ```
//! use tensorshare_strategies::file_descriptor::FileDescriptorStrategy;
//! use tensorshare_strategies::{Segment, SharingStrategy, WritableSegment};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let strategy = FileDescriptorStrategy;
//! let mut segment = strategy.allocate(5)?;
//! segment.as_bytes_mut().copy_from_slice(b"hello");
//!
//! // The handle is what travels to the other process: here a duplicated fd.
//! let handle = strategy.export(&segment)?;
//! let received = strategy.import(handle, 5)?;
//! assert_eq!(received.as_bytes(), b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! # Layers
//!
//! The crate is cut in three layers, each a folder, each importing only the
//! layers below it:
//!
//! - [`platform`]: OS mechanism that knows nothing of strategies or
//!   services: mappings (on memmap2), the fault guard, populating pages,
//!   fd passing, leases, `/proc` and process helpers, owner checks, private
//!   socket directories and the names of the objects the crate creates.
//! - [`services`]: what reclaims what processes leave behind: the
//!   shared-memory manager (libshm's protocol, daemon and client) and the
//!   scans behind `gc`. They use the platform, and no strategy.
//! - The strategies, re-exported here: [`SharingStrategy`], the segment
//!   traits and errors, and one module per implementation. They use both
//!   layers below: a `file_system` segment is registered with a manager, and
//!   the `memmap` strategy reclaims its directory by `gc`'s rules.
//!
//! # Safety
//!
//! `unsafe` is denied at the crate root. Modules that need it opt in with
//! `#![allow(unsafe_code)]` and say in their own `# Safety` section what they
//! rely on:
//!
//! - The platform's `mapping` module maps files with memmap2 and builds
//!   slices over them; [`file_descriptor`], [`file_system`] and [`memmap`]
//!   call it after checking the file's size. Memory shared with other
//!   processes is outside what Rust's memory model describes; the
//!   [`Segment`] docs state the contract, as memmap2 does for file mappings.
//!   Before a fresh memfd mapping is handed out, the platform's `populate`
//!   has memmap2 advise `MADV_POPULATE_WRITE` over it, on several threads for
//!   large ones, which faults pages in as writes would and changes no byte.
//! - The platform's `fault_guard` module installs a process-wide `SIGBUS`
//!   handler, once, the first time a file that cannot be sealed against
//!   shrinking is mapped (a `file_system` segment, a tmpfs fd such as
//!   PyTorch sends). Another process holding such a file may truncate it
//!   while it is mapped here; touching a lost page would then kill this
//!   process. The handler maps a private page of zeros over a faulting page
//!   that lies in a registered mapping and returns, so the access reads
//!   zeros ([`FdSegment::was_truncated`](file_descriptor::FdSegment::was_truncated),
//!   [`FileSystemSegment::was_truncated`](file_system::FileSystemSegment::was_truncated)
//!   tell); any other `SIGBUS` goes to the handler or default action that was
//!   there before. It is sound because the handler only loads and stores
//!   atomics in memory that is never freed and calls async-signal-safe
//!   functions (`mmap`, `sigaction`, `raise`), and because a mapping is
//!   registered before it is handed out and unregistered before it is
//!   unmapped, so the page it replaces belongs to a live mapping of ours
//!   whose bytes other processes could have changed anyway. This stays
//!   hand-written: memmap2 cannot map over a range with `MAP_FIXED`.
//! - [`platform::mapped_file`] maps checkpoint files read-only with
//!   memmap2, registers each mapping with the fault guard (a file truncated
//!   while mapped reads zeros and says so instead of killing the process),
//!   and advises `MADV_DONTNEED` over ranges a reader is done with, which
//!   for a read-only shared file mapping only drops pages the next read
//!   brings back unchanged; [`bytes::file_window`] keeps storages there.
//! - [`bytes::heap`] keeps the anonymous mappings (memmap2's) of large
//!   buffers in a pool for reuse. The pool owns each mapping by value, so a
//!   range is never handed to two buffers; the `MADV_FREE` advice it gives
//!   pooled mappings may turn their bytes into zeros, so a buffer built from
//!   one writes every byte it exposes before handing it out.
//! - The platform's `lease` module calls `fcntl(2)` with the lease
//!   commands, which nix does not wrap, passing an fd borrowed for the call
//!   and an integer; [`services::orphans`] and the manager ask it whether a
//!   segment is open anywhere before they unlink it.
//! - `platform::dlpack` (feature `dlpack`) builds and frees the C structs
//!   of DLPack 1.x, whose deleters other libraries call, and reads the
//!   ones they lend; its own `# Safety` section says how.
//! - `platform::readiness` (feature `tokio`) registers a socket with tokio's
//!   reactor, which tokio makes `unsafe` because it watches a descriptor by
//!   number: what it registers is a duplicate that the registration alone
//!   owns, so the number stays open on the same socket until it drops.
//! - [`services::shm_manager`]'s private `daemon` module calls `fork` to
//!   start the manager, only after `/proc/self/task` showed the process runs
//!   a single thread, so the child is a complete copy that may run ordinary
//!   Rust code.
//! - [`services::shm_manager`]'s private `self_exec` module places a
//!   function pointer in `.init_array`, so that a program started again as
//!   its own manager serves before `main` (and never returns to it), and
//!   removes the marker variable from the environment there, after
//!   `/proc/self/task` showed one thread.
#![deny(unsafe_code)]

pub mod platform;
pub mod services;
mod strategy;

// The strategy layer is the crate's face: the trait, each strategy's
// module, their kinds and errors.
pub use strategy::*;

/// The errno an OS failure carried; errors of this crate keep it.
pub use nix::errno::Errno;
pub use platform::map_count::MapCount;
pub use platform::owner::UnixUser;

/// Allocates a zero-filled writable segment of `nbytes` with the strategy
/// named by `kind`.
///
/// This is the type-erased door for callers that pick a strategy at run time
/// by name. Write into the segment with
/// [`as_bytes_mut`](WritableSegment::as_bytes_mut), then freeze it with
/// [`into_shared`](WritableSegment::into_shared).
///
/// # Errors
///
/// Whatever the strategy's [`SharingStrategy::allocate`] reports.
/// `file_system` segments are registered with this process's own manager,
/// started on first use; `memmap` files go to the default directory
/// ([`MemmapStrategy::default`](memmap::MemmapStrategy::default)).
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::{allocate_writable, StrategyKind};
///
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let mut segment = allocate_writable("bytes".parse()?, 3)?;
/// segment.as_bytes_mut().copy_from_slice(&[1, 2, 3]);
/// let frozen = segment.into_shared();
/// assert_eq!(frozen.as_bytes(), &[1, 2, 3]);
/// assert_eq!(frozen.kind(), StrategyKind::Bytes);
/// # Ok(())
/// # }
/// ```
pub fn allocate_writable(
    kind: StrategyKind,
    nbytes: usize,
) -> Result<Box<dyn WritableSegment>, AllocateError> {
    struct Allocate(usize);
    impl StrategyVisitor for Allocate {
        type Output = Result<Box<dyn WritableSegment>, AllocateError>;
        fn visit<S: SharingStrategy + Default + 'static>(self) -> Self::Output {
            Ok(Box::new(S::default().allocate(self.0)?))
        }
    }
    kind.visit(Allocate(nbytes))
}
