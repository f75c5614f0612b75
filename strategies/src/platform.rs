//! The platform layer: the OS mechanisms the strategies and the services
//! are built from. It knows nothing of either.
//!
//! - [`fd_passing`]: `sendmsg`/`recvmsg` with `SCM_RIGHTS`, compatible with
//!   CPython's `multiprocessing.reduction.sendfds` and `recvfds`.
//! - [`private_dir`]: private socket directories and the names `gc` knows
//!   them by.
//! - [`process`]: whether a process is gone, and what `/proc` says of one.
//! - [`mapped_file`]: read-only mappings of whole files (checkpoints),
//!   guarded against the file shrinking while mapped.
//! - [`open_watch`]: how often the files of a directory were opened and
//!   let go of again, by any process (inotify).
//! - The private `mapping` module: shared mappings of a file (on memmap2),
//!   with `populate` having their pages allocated up front and
//!   `fault_guard` turning faults on pages a truncation took into zeros.
//! - The private `lease`, `owner` and `map_count` modules: whether a file
//!   is open anywhere, whose a file or process is, how many mappings this
//!   process holds.
//! - The private `unique_name`, `segment_name` and `memmap_file_name`
//!   modules: the names of the objects this crate creates, each carrying
//!   the pid of its creator; `memmap_marks`, the extended attributes a
//!   `memmap` file carries for its sharers and for `gc`.

#[cfg(feature = "dlpack")]
pub mod dlpack;
pub(crate) mod fault_guard;
pub mod fd_passing;
pub(crate) mod lease;
pub(crate) mod map_count;
pub mod mapped_file;
pub(crate) mod mapping;
pub(crate) mod memmap_file_name;
pub(crate) mod memmap_marks;
pub mod open_watch;
pub(crate) mod owner;
pub(crate) mod populate;
pub mod private_dir;
pub mod process;
#[cfg(feature = "tokio")]
pub mod readiness;
pub(crate) mod segment_name;
pub(crate) mod unique_name;

use nix::errno::Errno;

/// The errno an I/O error carries; `UnknownErrno` for one that carries none.
pub(crate) fn errno_of(error: &std::io::Error) -> Errno {
    error
        .raw_os_error()
        .map_or(Errno::UnknownErrno, Errno::from_raw)
}
