//! The names of the four sharing strategies.

use std::fmt;
use std::str::FromStr;

/// Which mechanism moves a storage's bytes to another process.
///
/// The names are the ones `torch.multiprocessing.set_sharing_strategy` uses,
/// plus `bytes` and `memmap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StrategyKind {
    /// An anonymous shared memory file whose fd travels by `SCM_RIGHTS`.
    FileDescriptor,
    /// A named POSIX shared memory segment with a reference count header.
    FileSystem,
    /// The bytes themselves travel inside the message.
    Bytes,
    /// A file on disk that both sides map.
    Memmap,
}

impl StrategyKind {
    /// Every strategy, in a stable order.
    pub const ALL: [StrategyKind; 4] = [
        StrategyKind::FileDescriptor,
        StrategyKind::FileSystem,
        StrategyKind::Bytes,
        StrategyKind::Memmap,
    ];

    /// The strategy's name: `file_descriptor`, `file_system`, `bytes` or `memmap`.
    pub const fn name(self) -> &'static str {
        match self {
            StrategyKind::FileDescriptor => "file_descriptor",
            StrategyKind::FileSystem => "file_system",
            StrategyKind::Bytes => "bytes",
            StrategyKind::Memmap => "memmap",
        }
    }

    /// Whether both processes see the same memory, so that writes on one side
    /// show on the other; `false` for `bytes`, which sends a copy.
    pub const fn shares_memory(self) -> bool {
        !matches!(self, StrategyKind::Bytes)
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A strategy name that is none of the four known ones.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown sharing strategy {name:?}: use one of file_descriptor, file_system, bytes, memmap"
)]
pub struct UnknownStrategyError {
    /// The name as given, cut to 64 characters.
    pub name: String,
}

impl FromStr for StrategyKind {
    type Err = UnknownStrategyError;

    /// Parses a strategy name exactly as [`StrategyKind::name`] spells it.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        StrategyKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| UnknownStrategyError {
                name: name.chars().take(64).collect(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for kind in StrategyKind::ALL {
            assert_eq!(kind.name().parse::<StrategyKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.name());
        }
    }

    #[test]
    fn unknown_name_lists_the_known_ones() {
        let err = "File_Descriptor".parse::<StrategyKind>().unwrap_err();
        assert!(
            err.to_string()
                .contains("file_descriptor, file_system, bytes, memmap")
        );
        let long = "x".repeat(10_000);
        assert_eq!(long.parse::<StrategyKind>().unwrap_err().name.len(), 64);
    }
}
