//! Names of `file_system` segments, as torch makes them and as every input
//! that names one is checked.

use std::fmt;
use std::path::PathBuf;

use crate::platform::unique_name::{InvalidUniquePart, parse_unique_part, unique_name_part};

/// Where Linux keeps POSIX shared-memory objects: `shm_open` names resolve
/// here (glibc and musl open `/dev/shm/<name>`).
pub(crate) const SHM_DIR: &str = "/dev/shm";

/// The longest name a segment may have: libshm's `AllocInfo` holds 60 bytes
/// including the terminating NUL.
pub const MAX_SEGMENT_NAME_LEN: usize = 59;

/// The prefix torch's `NewProcessWideShmHandle` gives every name, after the
/// leading `/`.
const PREFIX: &str = "torch_";

/// A shared-memory segment name of torch's form: `/torch_<pid>_<random>_<counter>`.
///
/// Every name that arrives from another process (a pickle, a manager client)
/// is parsed into this type before it reaches `shm_open` or `shm_unlink`, so
/// a hostile peer cannot name a path (`/`, `..`), an object of another
/// program, or a string libshm cannot carry. Torch 1.x and 2.x names both
/// parse: `torch_` followed by two or three `_`-separated decimal numbers,
/// the first being the creator's pid.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::file_system::SegmentName;
///
/// let name = SegmentName::parse(b"/torch_21409_1626284410_1")?;
/// assert_eq!(name.creator_pid(), 21409);
/// assert_eq!(name.file_name(), "torch_21409_1626284410_1");
///
/// assert!(SegmentName::parse(b"/torch_1_2/../../etc/passwd").is_err());
/// assert!(SegmentName::parse(b"/dev/shm/torch_1_2_3").is_err());
/// # Ok::<(), tensorshare_strategies::file_system::InvalidSegmentName>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SegmentName {
    /// With the leading `/`, as `shm_open` takes it.
    name: String,
    creator_pid: u32,
}

/// A name that is not a segment name of torch's form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{shown:?} is not a shared-memory segment name of the form /torch_<pid>_<random>_<counter>: \
     {reason}; the sender is not sharing a file_system storage"
)]
pub struct InvalidSegmentName {
    /// The name as received, lossily decoded and cut to 80 characters.
    pub shown: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl SegmentName {
    /// Checks that `bytes` is a segment name of torch's form.
    ///
    /// # Errors
    ///
    /// [`InvalidSegmentName`] for anything else: no leading `/`, another
    /// `/`, a byte outside `[0-9A-Za-z_]`, another prefix, a field that is
    /// not a decimal number, or more than [`MAX_SEGMENT_NAME_LEN`] bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, InvalidSegmentName> {
        let invalid = |reason| InvalidSegmentName {
            shown: String::from_utf8_lossy(bytes).chars().take(80).collect(),
            reason,
        };
        if bytes.len() > MAX_SEGMENT_NAME_LEN {
            return Err(invalid("longer than 59 bytes"));
        }
        let Some(rest) = bytes.strip_prefix(b"/") else {
            return Err(invalid("it does not start with /"));
        };
        if rest.contains(&b'/') {
            return Err(invalid("it names a path"));
        }
        if !rest.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
            return Err(invalid("it has bytes other than letters, digits and _"));
        }
        let Some(numbers) = rest.strip_prefix(PREFIX.as_bytes()) else {
            return Err(invalid("it does not start with /torch_"));
        };
        let creator_pid = parse_unique_part(numbers, 2..=3).map_err(|err| {
            invalid(match err {
                InvalidUniquePart::Fields => "it does not have two or three decimal fields",
                InvalidUniquePart::Pid => "the pid field is not a process id",
            })
        })?;
        // ASCII only, checked above.
        let name = String::from_utf8_lossy(bytes).into_owned();
        Ok(Self { name, creator_pid })
    }

    /// A fresh name for a segment this process creates, in torch's form:
    /// this process's pid, 64 random bits, and a per-process counter.
    ///
    /// The random part keeps another user's process from guessing the name
    /// of a segment before it is opened; `O_EXCL` on creation and mode 0600
    /// do the rest.
    pub fn fresh() -> Self {
        Self {
            name: format!("/{PREFIX}{}", unique_name_part()),
            creator_pid: std::process::id(),
        }
    }

    /// The name as `shm_open` takes it, with its leading `/`.
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// The name as it appears in `/dev/shm`, without the leading `/`.
    pub fn file_name(&self) -> &str {
        self.name.strip_prefix('/').unwrap_or(&self.name)
    }

    /// The pid of the process that created the segment, from its name.
    pub fn creator_pid(&self) -> u32 {
        self.creator_pid
    }

    /// The path `shm_open` resolves the name to, in [`SHM_DIR`].
    pub(crate) fn shm_path(&self) -> PathBuf {
        [SHM_DIR, self.file_name()].iter().collect()
    }
}

impl fmt::Display for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for SegmentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SegmentName({:?})", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_parse_and_differ() {
        let a = SegmentName::fresh();
        let b = SegmentName::fresh();
        assert_ne!(a, b);
        assert_eq!(SegmentName::parse(a.as_str().as_bytes()), Ok(a.clone()));
        assert_eq!(a.creator_pid(), std::process::id());
        assert!(a.as_str().len() <= MAX_SEGMENT_NAME_LEN);
    }

    #[test]
    fn torch_names_of_both_eras_parse() {
        for name in ["/torch_15807_1185784508_62", "/torch_15807_1185784508"] {
            assert!(SegmentName::parse(name.as_bytes()).is_ok(), "{name}");
        }
    }

    #[test]
    fn hostile_names_are_refused() {
        for name in [
            &b""[..],
            b"/",
            b"torch_1_2_3",
            b"/torch_1_2_3/",
            b"/../torch_1_2_3",
            b"/torch_1_2_..",
            b"/dev/shm/torch_1_2_3",
            b"/torch_1",
            b"/torch_1_2_3_4",
            b"/torch__2_3",
            b"/torch_0_2_3",
            b"/torch_99999999999_2_3",
            b"/torch_1_2_3\0",
            b"/tensorshare_1_2_3",
            b"/torch_1_2_x",
            b"/torch_1_22222222222222222222222222222222222222222222222222222",
        ] {
            assert!(
                SegmentName::parse(name).is_err(),
                "{:?} was accepted",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn the_error_shows_the_name_and_what_to_do() {
        let err = SegmentName::parse(b"/etc/passwd").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("/etc/passwd"), "{message}");
        assert!(message.contains("it names a path"), "{message}");
    }
}
