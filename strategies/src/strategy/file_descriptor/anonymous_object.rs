//! Anonymous shared memory objects: a memfd, or an unlinked POSIX shared
//! memory object where `memfd_create` is unavailable.

use std::os::fd::{BorrowedFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};
use nix::sys::mman::{shm_open, shm_unlink};
use nix::sys::stat::Mode;

use crate::platform::unique_name::unique_name_part;

/// How many random names to try before giving up on `shm_open`.
const SHM_NAME_ATTEMPTS: usize = 16;

/// Creates an empty anonymous shared memory object, close-on-exec.
///
/// Tries `memfd_create(MFD_CLOEXEC | MFD_ALLOW_SEALING)` first; when the
/// kernel lacks it (`ENOSYS`) or a sandbox forbids it (`EPERM`), falls back to
/// `shm_open(O_CREAT | O_EXCL)` under a random name, unlinked at once so that
/// nothing is left in /dev/shm whatever happens to this process.
pub(super) fn create() -> Result<OwnedFd, Errno> {
    match create_memfd() {
        Err(Errno::ENOSYS | Errno::EPERM) => create_unlinked_shm(),
        other => other,
    }
}

/// Creates a sealable memfd.
pub(super) fn create_memfd() -> Result<OwnedFd, Errno> {
    // The name shows in /proc/<pid>/fd and /proc/<pid>/maps as
    // "/memfd:tensorshare (deleted)", which tells an operator who holds it.
    memfd_create(
        "tensorshare",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )
}

/// Creates a POSIX shared memory object under a fresh random name and
/// unlinks the name, leaving only the fd.
pub(super) fn create_unlinked_shm() -> Result<OwnedFd, Errno> {
    let mut last = Errno::EEXIST;
    for _ in 0..SHM_NAME_ATTEMPTS {
        let name = random_shm_name();
        // glibc's shm_open adds O_CLOEXEC itself.
        match shm_open(
            name.as_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_RDWR,
            Mode::S_IRUSR | Mode::S_IWUSR,
        ) {
            Ok(fd) => {
                shm_unlink(name.as_str())?;
                return Ok(fd);
            }
            Err(Errno::EEXIST) => last = Errno::EEXIST,
            Err(errno) => return Err(errno),
        }
    }
    Err(last)
}

/// `/tensorshare_<pid>_<random>_<counter>`.
fn random_shm_name() -> String {
    format!("/tensorshare_{}", unique_name_part())
}

/// Forbids the object from shrinking or growing, where the kernel allows;
/// returns whether it cannot shrink now.
///
/// A receiver maps the object after checking its size; if the object could
/// shrink later, touching the lost pages would raise `SIGBUS`. Sealing is
/// best effort: a tmpfs object from `shm_open` (ours in the fallback, and
/// every fd PyTorch 2.x sends, checked with torch 2.15) starts sealed with
/// `F_SEAL_SEAL` and refuses new seals (`EPERM`), as does a memfd made
/// without `MFD_ALLOW_SEALING`; a file that is not shared memory answers
/// `EINVAL`. All are legitimate, so failures are not errors: when the seal
/// cannot be added, the object's existing seals say whether it can shrink,
/// and a mapping of one that can is registered with the fault guard
/// ([`crate::platform::fault_guard`]) instead.
pub(super) fn seal_size(fd: BorrowedFd<'_>) -> bool {
    let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
    if fcntl(fd, FcntlArg::F_ADD_SEALS(seals)).is_ok() {
        return true;
    }
    fcntl(fd, FcntlArg::F_GET_SEALS)
        .is_ok_and(|current| current & SealFlag::F_SEAL_SHRINK.bits() != 0)
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;
    use nix::unistd::ftruncate;

    #[test]
    fn memfd_is_sealed_against_resizing_after_ftruncate() {
        let fd = create_memfd().expect("memfd_create");
        ftruncate(&fd, 8192).expect("ftruncate before sealing");
        assert!(seal_size(fd.as_fd()));
        // Sealing again keeps the object sealed.
        assert!(seal_size(fd.as_fd()));
        let seals = fcntl(&fd, FcntlArg::F_GET_SEALS).expect("F_GET_SEALS");
        let expected = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_GROW;
        assert_eq!(seals & expected.bits(), expected.bits());
        assert_eq!(ftruncate(&fd, 4096), Err(Errno::EPERM));
        assert_eq!(ftruncate(&fd, 16384), Err(Errno::EPERM));
    }

    #[test]
    fn seals_already_in_place_are_read_back() {
        // Sealed against shrinking, then against new seals: adding fails,
        // but the object cannot shrink.
        let fd = create_memfd().expect("memfd_create");
        ftruncate(&fd, 4096).expect("ftruncate");
        let seals = SealFlag::F_SEAL_SHRINK | SealFlag::F_SEAL_SEAL;
        fcntl(&fd, FcntlArg::F_ADD_SEALS(seals)).expect("F_ADD_SEALS");
        assert!(seal_size(fd.as_fd()));
        // A memfd made without MFD_ALLOW_SEALING can shrink.
        let unsealable = memfd_create("tensorshare-test", MFdFlags::MFD_CLOEXEC).expect("memfd");
        assert!(!seal_size(unsealable.as_fd()));
    }

    #[test]
    fn shm_fallback_leaves_no_name_behind() {
        let fd = create_unlinked_shm().expect("shm_open");
        ftruncate(&fd, 4096).expect("ftruncate");
        // Sealing an shm object is refused and must not be an error.
        assert!(!seal_size(fd.as_fd()));
        let prefix = format!("tensorshare_{}_", std::process::id());
        if let Ok(entries) = std::fs::read_dir("/dev/shm") {
            for entry in entries.flatten() {
                let name = entry.file_name();
                assert!(
                    !name.to_string_lossy().starts_with(&prefix),
                    "{name:?} left in /dev/shm"
                );
            }
        }
    }

    #[test]
    fn shm_names_differ() {
        assert_ne!(random_shm_name(), random_shm_name());
    }
}
