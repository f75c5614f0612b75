//! The soft limit on open files, raised as torch's docs advise for
//! `file_descriptor` sharing.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises this process's soft fd limit to the hard one; peers started
/// from here inherit it. Returns the soft limit now in force.
pub fn raise_fd_limit() -> u64 {
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 1024;
    };
    if soft < hard && setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok() {
        return hard;
    }
    soft
}
