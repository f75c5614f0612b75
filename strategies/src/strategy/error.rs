//! Errors of the segment operations: one enum per operation, each keeping the
//! errno and saying what to do.
//!
//! As everywhere in tensorshare, a message includes its cause and `source()`
//! returns `None`, so that a chain printer shows each cause once; the errno
//! and any wrapped error stay reachable as fields.

use nix::errno::Errno;
use nix::sys::stat::FileStat;

use crate::UnixUser;
use crate::platform::map_count::{MapCount, at_the_cap};
use crate::platform::owner::OtherUsers;
use crate::services::shm_manager::ManagerError;

/// The largest segment any strategy accepts: the largest slice Rust allows,
/// which is also the largest `off_t` on 64-bit Linux.
pub const MAX_SEGMENT_BYTES: usize = isize::MAX as usize;

/// A limit of this process or of the system that allocating or importing
/// a segment ran into: written once here, for [`AllocateError::Exhausted`]
/// and [`ImportError::Exhausted`], each of which says what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exhausted {
    /// The process (`EMFILE`) or the system (`ENFILE`) ran out of file
    /// descriptors.
    FileDescriptors(Errno),
    /// The process holds as many mappings as the system allows
    /// (`vm.max_map_count`).
    Mappings(MapCount),
    /// Memory, shared memory space or address space ran out (`ENOMEM`,
    /// `ENOSPC`).
    Memory(Errno),
}

impl Exhausted {
    /// The limit `errno` says ran out, if it says one did: an `ENOMEM`
    /// while this process holds as many mappings as allowed is the mapping
    /// cap, not memory.
    pub(crate) fn from_errno(errno: Errno) -> Option<Self> {
        match errno {
            Errno::EMFILE | Errno::ENFILE => Some(Exhausted::FileDescriptors(errno)),
            Errno::ENOMEM => {
                Some(at_the_cap().map_or(Exhausted::Memory(errno), Exhausted::Mappings))
            }
            Errno::ENOSPC => Some(Exhausted::Memory(errno)),
            _ => None,
        }
    }
}

/// What to do about `limit` when allocating.
fn allocate_advice(limit: &Exhausted) -> String {
    match limit {
        Exhausted::FileDescriptors(errno) => format!(
            "too many open files: raise `ulimit -n` or use the file_system strategy ({errno})"
        ),
        Exhausted::Mappings(count) => format!(
            "this process holds {} mappings, the most the system allows (vm.max_map_count = \
             {}): drop storages no longer needed, or raise the limit (sysctl -w \
             vm.max_map_count=N)",
            count.mappings, count.limit
        ),
        Exhausted::Memory(errno) => format!(
            "out of memory ({errno}): free memory, enlarge /dev/shm, or share smaller tensors"
        ),
    }
}

/// What importing a `nbytes` segment ran into, and what to do.
fn import_message(nbytes: usize, limit: &Exhausted) -> String {
    match limit {
        Exhausted::FileDescriptors(errno) => format!(
            "cannot import a {nbytes}-byte segment: too many open files: raise `ulimit -n` or \
             use the file_system strategy ({errno})"
        ),
        Exhausted::Mappings(count) => format!(
            "this process holds {} mappings, the most the system allows (vm.max_map_count = \
             {}), and a received {nbytes}-byte segment needs one more: drop received storages \
             no longer needed, or raise the limit (sysctl -w vm.max_map_count=N)",
            count.mappings, count.limit
        ),
        Exhausted::Memory(errno) => format!(
            "cannot import a {nbytes}-byte segment: out of memory ({errno}): free memory or \
             share smaller tensors"
        ),
    }
}

/// What to tell the user for an errno of a failed create, map or dup.
fn hint(errno: &Errno) -> &'static str {
    match errno {
        Errno::EMFILE | Errno::ENFILE => {
            "too many open files: raise `ulimit -n` or use the file_system strategy"
        }
        Errno::ENOMEM => {
            "out of memory or out of mappings: free memory, raise vm.max_map_count, or share fewer \
             or smaller tensors"
        }
        Errno::ENOSPC => "no space left for shared memory: enlarge /dev/shm or free memory",
        Errno::EFBIG | Errno::EINVAL => {
            "the size is beyond what this system maps: split the tensor"
        }
        Errno::EACCES => "permission denied: the file is not open for reading and writing",
        Errno::EPERM => "not permitted here (seccomp or sandbox): use the bytes strategy",
        Errno::ENOSYS => "this kernel has no memfd_create or shm_open: use the bytes strategy",
        _ => "if shared memory is unavailable on this system, use the bytes strategy",
    }
}

/// `bytes` in B, KiB, MiB, GiB or TiB, one decimal: `23.5 GiB`.
///
/// # Examples
///
/// ```
/// assert_eq!(tensorshare_strategies::human_bytes(512), "512 B");
/// assert_eq!(tensorshare_strategies::human_bytes(3 << 29), "1.5 GiB");
/// ```
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Why [`SharingStrategy::allocate`](crate::SharingStrategy::allocate) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AllocateError {
    /// `nbytes` exceeds [`MAX_SEGMENT_BYTES`].
    #[error(
        "cannot allocate {nbytes} bytes: a segment holds at most {max} bytes; split the tensor",
        max = MAX_SEGMENT_BYTES
    )]
    TooLarge {
        /// The size asked for.
        nbytes: usize,
    },
    /// A limit of this process or of the system ran out: file
    /// descriptors, mappings or memory.
    #[error("cannot allocate a {nbytes}-byte segment: {}", allocate_advice(limit))]
    Exhausted {
        /// The size asked for.
        nbytes: usize,
        /// Which limit.
        limit: Exhausted,
    },
    /// Neither `memfd_create` nor `shm_open` made an object.
    #[error("cannot create a shared memory object ({errno}): {}", hint(.errno))]
    CreateObject {
        /// What the last attempt failed with.
        errno: Errno,
    },
    /// `ftruncate` refused the size.
    #[error("cannot size a shared memory object to {nbytes} bytes ({errno}): {}", hint(.errno))]
    Resize {
        /// The size asked for.
        nbytes: usize,
        /// What `ftruncate` failed with.
        errno: Errno,
    },
    /// `mmap` failed.
    #[error("cannot map a {nbytes}-byte segment ({errno}): {}", hint(.errno))]
    Map {
        /// The size asked for.
        nbytes: usize,
        /// What `mmap` failed with.
        errno: Errno,
    },
    /// The shared-memory filesystem is too full (or too small) for the
    /// segment; found before any page was touched, so nothing faults later.
    #[error(
        "cannot allocate a {nbytes}-byte segment: {mount} ({size} in all, {available} free) cannot \
         hold it: free segments (`tensorshare gc`), enlarge it (`mount -o remount,size=<bigger> \
         {mount}`), or share smaller tensors",
        size = human_bytes(*.size),
        available = human_bytes(*.available)
    )]
    SharedMemoryFull {
        /// The size asked for.
        nbytes: usize,
        /// The filesystem that is full, e.g. `/dev/shm`.
        mount: String,
        /// Its total size in bytes.
        size: u64,
        /// Its free bytes when the allocation failed.
        available: u64,
    },
    /// The shared-memory manager that cleans up after crashed processes could
    /// not be started or reached, or refused the segment.
    #[error("cannot allocate a file_system segment: {0}")]
    Manager(ManagerError),
    /// The `memmap` strategy could not create its file.
    #[error(
        "cannot create a memmap file in {dir} ({errno}): choose a writable directory on a local \
         filesystem with space left"
    )]
    CreateFile {
        /// The directory the file was to be created in.
        dir: String,
        /// What `open(O_CREAT | O_EXCL)` or `fstat` failed with.
        errno: Errno,
    },
}

impl AllocateError {
    /// Whether memory ran out, for the tests that make it.
    #[cfg(test)]
    pub(crate) fn is_out_of_memory(&self) -> bool {
        matches!(
            self,
            AllocateError::Exhausted {
                limit: Exhausted::Memory(_),
                ..
            }
        )
    }

    /// Sorts an errno from creating, sizing or mapping into the variant a
    /// caller can act on, `other` when none fits.
    pub(crate) fn from_errno(nbytes: usize, errno: Errno, other: fn(usize, Errno) -> Self) -> Self {
        match Exhausted::from_errno(errno) {
            Some(limit) => AllocateError::Exhausted { nbytes, limit },
            None => other(nbytes, errno),
        }
    }

    /// Sorts an errno from creating a shared memory object.
    pub(crate) fn create_object(nbytes: usize, errno: Errno) -> Self {
        Self::from_errno(nbytes, errno, |_, errno| AllocateError::CreateObject {
            errno,
        })
    }

    /// Sorts an errno from sizing (`ftruncate`) or reserving (`fallocate`)
    /// an object.
    pub(crate) fn resize(nbytes: usize, errno: Errno) -> Self {
        Self::from_errno(nbytes, errno, |nbytes, errno| AllocateError::Resize {
            nbytes,
            errno,
        })
    }

    /// Sorts an errno from mapping an object.
    pub(crate) fn map(nbytes: usize, errno: Errno) -> Self {
        Self::from_errno(nbytes, errno, |nbytes, errno| AllocateError::Map {
            nbytes,
            errno,
        })
    }
}

/// Why [`SharingStrategy::export`](crate::SharingStrategy::export) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// Duplicating the fd hit the process's (`EMFILE`) or system's (`ENFILE`) limit.
    #[error(
        "cannot export the segment: too many open files: raise `ulimit -n` or use the \
         file_system strategy ({errno})"
    )]
    TooManyOpenFiles {
        /// `EMFILE` or `ENFILE`.
        errno: Errno,
    },
    /// The copy of the bytes could not be allocated.
    #[error(
        "cannot copy a {nbytes}-byte segment for export: out of memory; free memory or use a \
         strategy that shares memory (file_descriptor, file_system)"
    )]
    OutOfMemory {
        /// The segment's size.
        nbytes: usize,
    },
    /// Duplicating the fd failed for another reason.
    #[error("cannot duplicate the segment's file descriptor ({errno}): {}", hint(.errno))]
    Duplicate {
        /// What `fcntl(F_DUPFD_CLOEXEC)` failed with.
        errno: Errno,
    },
    /// The received segment closed its fd to stay within the process's fd
    /// budget; only its mapping is left.
    #[error(
        "cannot export the segment: it closed its file descriptor to stay within this \
         process's budget of received fds; send a copy of it (the runtime does so by itself)"
    )]
    FdReleased,
    /// A received `memmap` file could not be marked as sent on, which its
    /// creator must see before it reuses the file.
    #[error(
        "cannot send on the received memmap file: marking it sent on (an extended attribute) \
         failed ({errno}); free space on its filesystem, or send a copy"
    )]
    MarkSentOn {
        /// What `lsetxattr` failed with.
        errno: Errno,
    },
}

impl ExportError {
    /// Sorts an errno from duplicating an fd.
    pub(crate) fn from_dup_errno(errno: Errno) -> Self {
        match errno {
            Errno::EMFILE | Errno::ENFILE => ExportError::TooManyOpenFiles { errno },
            _ => ExportError::Duplicate { errno },
        }
    }
}

/// Why [`SharingStrategy::import`](crate::SharingStrategy::import) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// `nbytes` exceeds [`MAX_SEGMENT_BYTES`].
    #[error(
        "cannot import {nbytes} bytes: a segment holds at most {max} bytes; the message is corrupt",
        max = MAX_SEGMENT_BYTES
    )]
    TooLarge {
        /// The size the message announced.
        nbytes: usize,
    },
    /// The shared object is smaller than the storage the message announced;
    /// mapping it would fault on the missing pages.
    #[error(
        "the shared object holds {available} bytes but the message announces {nbytes}: the \
         sender truncated it or the message does not belong to this handle; reject the message"
    )]
    HandleTooSmall {
        /// The size the message announced.
        nbytes: usize,
        /// The size of the object behind the handle.
        available: u64,
    },
    /// The handle is not something this strategy shares.
    #[error("invalid handle: {reason}")]
    InvalidHandle {
        /// What is wrong with it.
        reason: String,
    },
    /// The named segment does not exist (any more).
    #[error(
        "shared-memory segment {name} does not exist: its sender freed it or exited (with its \
         manager) before this process opened it; keep the sender's tensors alive until they are \
         received"
    )]
    SegmentMissing {
        /// The segment's name.
        name: String,
    },
    /// The `memmap` file a message names does not exist (any more).
    #[error(
        "memmap file {path} does not exist: its sender removed it or exited before this process \
         opened it; keep the sender's tensors alive until they are received"
    )]
    FileMissing {
        /// The file's path.
        path: String,
    },
    /// The `memmap` file a message names could not be opened.
    #[error(
        "cannot open memmap file {path} for reading and writing ({errno}): the sender must \
         create it readable and writable by this process's user"
    )]
    OpenFile {
        /// The file's path.
        path: String,
        /// What `open` failed with.
        errno: Errno,
    },
    /// The segment or file a message names belongs to another user than
    /// this process's effective one. Nothing was mapped, counted or removed.
    #[error(
        "{object} belongs to {owner}, but this process runs as {this}: only segments and files of \
         this process's own user are imported, whatever its privileges; share between processes \
         of one user, and reject this message"
    )]
    OtherUsersObject {
        /// What the message names: `shared-memory segment /torch_...` or
        /// `memmap file "/tmp/..."`.
        object: String,
        /// Who owns it.
        owner: UnixUser,
        /// Who this process runs as.
        this: UnixUser,
    },
    /// The segment could not be registered with the manager named in the
    /// message, which would leave it without cleanup if this process died.
    #[error("cannot register segment {name} with its shared-memory manager: {cause}")]
    Manager {
        /// The segment's name.
        name: String,
        /// What the manager connection reported.
        cause: ManagerError,
    },
    /// `fstat` on the received fd failed.
    #[error("cannot inspect the received file descriptor ({errno}): {}", hint(.errno))]
    Stat {
        /// What `fstat` failed with.
        errno: Errno,
    },
    /// A limit of this process or of the system ran out: file
    /// descriptors, mappings or memory.
    #[error("{}", import_message(*nbytes, limit))]
    Exhausted {
        /// The size the message announced.
        nbytes: usize,
        /// Which limit.
        limit: Exhausted,
    },
    /// `mmap` failed.
    #[error("cannot map a received {nbytes}-byte segment ({errno}): {}", hint(.errno))]
    Map {
        /// The size the message announced.
        nbytes: usize,
        /// What `mmap` failed with.
        errno: Errno,
    },
}

impl ImportError {
    /// The error for `object`, which [`crate::platform::owner::check_own_user`] found
    /// to be another user's.
    pub(crate) fn other_users(object: String, other: OtherUsers) -> Self {
        ImportError::OtherUsersObject {
            object,
            owner: other.owner,
            this: other.this,
        }
    }

    /// Sorts an errno from mapping a received object.
    pub(crate) fn from_map_errno(nbytes: usize, errno: Errno) -> Self {
        match Exhausted::from_errno(errno) {
            Some(limit) => ImportError::Exhausted { nbytes, limit },
            None => ImportError::Map { nbytes, errno },
        }
    }
}

/// Checks, before mapping, that the file `stat` describes holds `nbytes`
/// after its first `offset` bytes (a header), so no mapped page lies past
/// its end.
///
/// # Errors
///
/// [`ImportError::HandleTooSmall`] with the bytes the file holds after
/// `offset`.
pub(crate) fn check_covers(stat: &FileStat, offset: u64, nbytes: usize) -> Result<(), ImportError> {
    let available = u64::try_from(stat.st_size)
        .unwrap_or(0)
        .saturating_sub(offset);
    if available < nbytes as u64 {
        return Err(ImportError::HandleTooSmall { nbytes, available });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_exhaustion_says_what_to_do() {
        let err = AllocateError::from_errno(8, Errno::EMFILE, |nbytes, errno| AllocateError::Map {
            nbytes,
            errno,
        });
        assert!(matches!(
            err,
            AllocateError::Exhausted {
                nbytes: 8,
                limit: Exhausted::FileDescriptors(Errno::EMFILE)
            }
        ));
        let message = err.to_string();
        assert!(message.contains("too many open files: raise `ulimit -n` or use the file_system"));
        assert!(message.contains("EMFILE"), "{message}");
    }

    /// The texts users saw when each operation had three variants of its
    /// own, word for word.
    #[test]
    fn each_limit_reads_as_it_did_for_allocating_and_importing() {
        let count = MapCount {
            mappings: 65_530,
            limit: 65_530,
        };
        let cases = [
            (
                AllocateError::Exhausted {
                    nbytes: 8,
                    limit: Exhausted::FileDescriptors(Errno::EMFILE),
                }
                .to_string(),
                "cannot allocate a 8-byte segment: too many open files: raise `ulimit -n` or \
                 use the file_system strategy (EMFILE: Too many open files)",
            ),
            (
                AllocateError::Exhausted {
                    nbytes: 8,
                    limit: Exhausted::Mappings(count),
                }
                .to_string(),
                "cannot allocate a 8-byte segment: this process holds 65530 mappings, the most \
                 the system allows (vm.max_map_count = 65530): drop storages no longer needed, \
                 or raise the limit (sysctl -w vm.max_map_count=N)",
            ),
            (
                AllocateError::Exhausted {
                    nbytes: 8,
                    limit: Exhausted::Memory(Errno::ENOSPC),
                }
                .to_string(),
                "cannot allocate a 8-byte segment: out of memory (ENOSPC: No space left on \
                 device): free memory, enlarge /dev/shm, or share smaller tensors",
            ),
            (
                ImportError::Exhausted {
                    nbytes: 8,
                    limit: Exhausted::FileDescriptors(Errno::ENFILE),
                }
                .to_string(),
                "cannot import a 8-byte segment: too many open files: raise `ulimit -n` or use \
                 the file_system strategy (ENFILE: File table overflow)",
            ),
            (
                ImportError::Exhausted {
                    nbytes: 8,
                    limit: Exhausted::Mappings(count),
                }
                .to_string(),
                "this process holds 65530 mappings, the most the system allows \
                 (vm.max_map_count = 65530), and a received 8-byte segment needs one more: drop \
                 received storages no longer needed, or raise the limit (sysctl -w \
                 vm.max_map_count=N)",
            ),
            (
                ImportError::Exhausted {
                    nbytes: 8,
                    limit: Exhausted::Memory(Errno::ENOMEM),
                }
                .to_string(),
                "cannot import a 8-byte segment: out of memory (ENOMEM: Out of memory): \
                 free memory or share smaller tensors",
            ),
        ];
        for (said, expected) in cases {
            assert_eq!(said, expected);
        }
    }

    #[test]
    fn map_failures_keep_the_errno() {
        let err = ImportError::from_map_errno(4096, Errno::EACCES);
        assert_eq!(
            err,
            ImportError::Map {
                nbytes: 4096,
                errno: Errno::EACCES
            }
        );
        assert!(err.to_string().contains("not open for reading and writing"));
    }
}
