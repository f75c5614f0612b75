//! Names of the files the `memmap` strategy creates: they say which
//! process made each, and whether it is to be kept.

use std::fmt;

use crate::platform::unique_name::{InvalidUniquePart, parse_unique_part, unique_name_part};

/// What every file the strategy creates is named with.
pub const FILE_PREFIX: &str = "tensorshare_";
/// What comes after [`FILE_PREFIX`] in a file its creator keeps.
const KEPT: &str = "kept_";
/// The extension of the files the strategy creates.
pub const FILE_SUFFIX: &str = ".mmap";
/// The longest name [`MemmapFileName::parse`] accepts: the prefix, three
/// 20-digit numbers, two `_` and the suffix.
const MAX_LEN: usize = FILE_PREFIX.len() + 3 * 20 + 2 + FILE_SUFFIX.len();

/// The name of a `memmap` file its creator removes when done with it:
/// `tensorshare_<pid>_<random>_<counter>.mmap`.
///
/// The pid is the creator's. A creator that was killed removes nothing, and
/// since no receiver says when it is done with a file, such a file is
/// reclaimed once its creator is gone and no process maps it (the orphan
/// rules `tensorshare gc` follows). A file created to be kept (the `memmap`
/// strategy's `keep_files`) is named `tensorshare_kept_<pid>_<random>_<counter>.mmap`, which this
/// type does not parse: nothing reclaims it.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::memmap::MemmapFileName;
///
/// let name = MemmapFileName::parse("tensorshare_4242_9876543210_7.mmap")?;
/// assert_eq!(name.creator_pid(), 4242);
/// assert!(MemmapFileName::parse("tensorshare_kept_4242_9876543210_7.mmap").is_err());
/// assert!(MemmapFileName::parse("../tensorshare_1_2_3.mmap").is_err());
/// # Ok::<(), tensorshare_strategies::memmap::InvalidMemmapFileName>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemmapFileName {
    name: String,
    creator_pid: u32,
}

/// A name that is not that of a `memmap` file its creator removes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{shown:?} is not a memmap file name of the form tensorshare_<pid>_<random>_<counter>.mmap: \
     {reason}"
)]
pub struct InvalidMemmapFileName {
    /// The name as given, cut to 80 characters.
    pub shown: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl MemmapFileName {
    /// Checks that `name` is the file name of a `memmap` file its creator
    /// removes.
    ///
    /// # Errors
    ///
    /// [`InvalidMemmapFileName`] for anything else: another prefix or
    /// extension (a kept file's among them), fields that are not three
    /// decimal numbers, a pid of 0 or above `i32::MAX`, or a name too long
    /// to be one of these.
    pub fn parse(name: &str) -> Result<Self, InvalidMemmapFileName> {
        let invalid = |reason| InvalidMemmapFileName {
            shown: name.chars().take(80).collect(),
            reason,
        };
        if name.len() > MAX_LEN {
            return Err(invalid("it is too long"));
        }
        let Some(numbers) = name
            .strip_prefix(FILE_PREFIX)
            .and_then(|rest| rest.strip_suffix(FILE_SUFFIX))
        else {
            return Err(invalid(
                "it does not start with tensorshare_ and end with .mmap",
            ));
        };
        let creator_pid = parse_unique_part(numbers.as_bytes(), 3..=3).map_err(|err| {
            invalid(match err {
                InvalidUniquePart::Fields => "it does not have three decimal fields",
                InvalidUniquePart::Pid => "the pid field is not a process id",
            })
        })?;
        Ok(Self {
            name: name.to_owned(),
            creator_pid,
        })
    }

    /// A fresh name for a file this process creates and removes: this
    /// process's pid, 64 random bits and a per-process counter.
    pub fn fresh() -> Self {
        Self {
            name: format!("{FILE_PREFIX}{}{FILE_SUFFIX}", unique_name_part()),
            creator_pid: std::process::id(),
        }
    }

    /// A fresh name for a file this process creates and keeps:
    /// `tensorshare_kept_<pid>_<random>_<counter>.mmap`.
    pub fn fresh_kept() -> String {
        format!("{FILE_PREFIX}{KEPT}{}{FILE_SUFFIX}", unique_name_part())
    }

    /// The file's name in its directory.
    pub fn file_name(&self) -> &str {
        &self.name
    }

    /// The pid of the process that created the file, from its name.
    pub fn creator_pid(&self) -> u32 {
        self.creator_pid
    }
}

impl fmt::Display for MemmapFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl fmt::Debug for MemmapFileName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemmapFileName({:?})", self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_parse_and_kept_ones_do_not() {
        let fresh = MemmapFileName::fresh();
        assert_eq!(MemmapFileName::parse(fresh.file_name()), Ok(fresh.clone()));
        assert_eq!(fresh.creator_pid(), std::process::id());
        assert!(MemmapFileName::parse(&MemmapFileName::fresh_kept()).is_err());
    }

    #[test]
    fn other_names_are_refused() {
        for name in [
            "tensorshare_1_2.mmap",
            "tensorshare_1_2_3_4.mmap",
            "tensorshare_0_2_3.mmap",
            "tensorshare_4294967295_2_3.mmap",
            "tensorshare_1_2_3.mmap.tmp",
            "tensorshare_1_x_3.mmap",
            "tensorshare_1__3.mmap",
            "torch_1_2_3",
            "tensorshare_1_2_3/..mmap",
        ] {
            assert!(MemmapFileName::parse(name).is_err(), "{name}");
        }
    }
}
