//! `--strategy NAME`: the four sharing strategies as the command line
//! names and describes them. The library's [`StrategyKind`] knows nothing
//! of clap; this enum maps onto it.

use clap::ValueEnum;
use tensorshare::StrategyKind;

/// A sharing strategy, by the name `torch.multiprocessing` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StrategyName {
    /// A memfd per storage, whose fd the receiver fetches by SCM_RIGHTS
    /// (torch's default): zero-copy
    #[value(name = "file_descriptor")]
    FileDescriptor,
    /// A named segment in /dev/shm with torch's reference count, registered
    /// with a shared-memory manager: zero-copy, no fd per storage
    #[value(name = "file_system")]
    FileSystem,
    /// The bytes travel inside the message, as plain `pickle.dumps(tensor)`
    /// writes them: a copy
    #[value(name = "bytes")]
    Bytes,
    /// A file in the memmap directory that both sides map: zero-copy
    #[value(name = "memmap")]
    Memmap,
}

impl From<StrategyName> for StrategyKind {
    fn from(name: StrategyName) -> Self {
        match name {
            StrategyName::FileDescriptor => StrategyKind::FileDescriptor,
            StrategyName::FileSystem => StrategyKind::FileSystem,
            StrategyName::Bytes => StrategyKind::Bytes,
            StrategyName::Memmap => StrategyKind::Memmap,
        }
    }
}

impl From<StrategyKind> for StrategyName {
    /// Every kind has a name here: a strategy added to the library fails to
    /// compile until the command line knows it.
    fn from(kind: StrategyKind) -> Self {
        match kind {
            StrategyKind::FileDescriptor => StrategyName::FileDescriptor,
            StrategyKind::FileSystem => StrategyName::FileSystem,
            StrategyKind::Bytes => StrategyName::Bytes,
            StrategyKind::Memmap => StrategyName::Memmap,
        }
    }
}
