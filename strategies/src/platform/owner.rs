//! Whose a file is: the check every object a peer names passes before this
//! process maps it, counts it or removes it.
//!
//! A peer names a `file_system` segment, a `memmap` file or a segment a
//! manager client registers in a namespace every user of the machine shares
//! (`/dev/shm`, a directory). Such an object is opened and `fstat`ed through
//! its fd, never looked up by name a second time, and accepted only when
//! this process's effective user owns it. Root is no exception: it can open
//! anything, so the check is explicit; another user's object is not its to
//! map, count or remove on a peer's say-so.

use std::fmt;

use nix::sys::stat::FileStat;
use nix::unistd::{Uid, User, geteuid};

/// A user as messages show it: the uid and, when the user database names
/// it, the name.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::UnixUser;
///
/// let root = UnixUser::of(0);
/// assert_eq!(root.uid, 0);
/// assert!(root.to_string().starts_with("uid 0"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixUser {
    /// The numeric user id.
    pub uid: u32,
    /// The login name, when `getpwuid_r` knows the uid.
    pub name: Option<Box<str>>,
}

impl UnixUser {
    /// The user with `uid`, named from the user database (`/etc/passwd` or
    /// whatever NSS is configured with) when it knows the uid.
    pub fn of(uid: u32) -> Self {
        let name = User::from_uid(Uid::from_raw(uid))
            .ok()
            .flatten()
            .map(|user| user.name.into_boxed_str());
        Self { uid, name }
    }

    /// This process's effective user.
    pub fn effective() -> Self {
        Self::of(geteuid().as_raw())
    }
}

impl fmt::Display for UnixUser {
    /// `uid 65534 (nobody)`, or `uid 1234` when the uid has no name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "uid {} ({name})", self.uid),
            None => write!(f, "uid {}", self.uid),
        }
    }
}

/// An object a peer named that belongs to another user than this
/// process's effective one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OtherUsers {
    /// Who owns it.
    pub(crate) owner: UnixUser,
    /// Who this process runs as.
    pub(crate) this: UnixUser,
}

/// Whether this process's effective user owns the file `stat` describes:
/// `stat` comes from `fstat` on the fd that will be mapped, so the answer
/// is about that very file, whatever the name names by now.
///
/// # Errors
///
/// [`OtherUsers`] naming the owner and this process's user otherwise,
/// root included.
pub(crate) fn check_own_user(stat: &FileStat) -> Result<(), OtherUsers> {
    let this = geteuid().as_raw();
    if stat.st_uid == this {
        return Ok(());
    }
    Err(OtherUsers {
        owner: UnixUser::of(stat.st_uid),
        this: UnixUser::of(this),
    })
}

/// Whether `uid` is this process's effective user.
pub(crate) fn is_own_uid(uid: u32) -> bool {
    uid == geteuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_shows_its_uid_and_its_name_when_known() {
        let named = UnixUser {
            uid: 65534,
            name: Some("nobody".into()),
        };
        assert_eq!(named.to_string(), "uid 65534 (nobody)");
        let unnamed = UnixUser {
            uid: 4_000_000_000,
            name: None,
        };
        assert_eq!(unnamed.to_string(), "uid 4000000000");
        assert_eq!(UnixUser::of(4_000_000_000).name, None);
    }

    #[test]
    fn own_files_pass_and_others_name_their_owner() {
        let file = tempfile::tempfile().expect("a scratch file");
        let mut stat = nix::sys::stat::fstat(&file).expect("fstat");
        assert_eq!(check_own_user(&stat), Ok(()));
        stat.st_uid = geteuid().as_raw().wrapping_add(1);
        let err = check_own_user(&stat).expect_err("another uid");
        assert_eq!(err.owner.uid, stat.st_uid);
        assert_eq!(err.this, UnixUser::effective());
    }
}
