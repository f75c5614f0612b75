//! The kinds of sharing strategies, made from the list in `strategy.rs`.

use std::fmt;
use std::str::FromStr;

use super::StrategyKind;
use crate::SharingStrategy;

/// Defines the strategies from the list in `strategy.rs`: a module per
/// strategy, [`StrategyKind`] with a variant each, their names, and
/// [`StrategyKind::visit`], which picks the implementation by its kind.
macro_rules! strategies {
    ($(
        $(#[cfg($cfg:meta)])?
        $(#[doc = $doc:literal])+
        $kind:ident = $name:literal in $module:ident::$strategy:ident,
    )*) => {
        $($(#[cfg($cfg)])? pub mod $module;)*

        /// Which mechanism moves a storage's bytes to another process.
        ///
        /// The names are the ones `torch.multiprocessing.set_sharing_strategy`
        /// uses, plus `bytes` and `memmap`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum StrategyKind {
            $($(#[cfg($cfg)])? $(#[doc = $doc])+ $kind,)*
        }

        impl StrategyKind {
            /// Every strategy, in a stable order.
            pub const ALL: [StrategyKind; [$($(#[cfg($cfg)])? stringify!($kind),)*].len()] =
                [$($(#[cfg($cfg)])? StrategyKind::$kind,)*];

            /// The strategy's name: `file_descriptor`, `file_system`, `bytes`
            /// or `memmap`.
            pub const fn name(self) -> &'static str {
                match self {
                    $($(#[cfg($cfg)])? StrategyKind::$kind => $name,)*
                }
            }

            /// What the strategy does, in a line: its documentation, as the
            /// command line's help shows it.
            pub fn summary(self) -> String {
                let doc = match self {
                    $($(#[cfg($cfg)])? StrategyKind::$kind => concat!($($doc, " "),+),)*
                };
                doc.split_whitespace().collect::<Vec<_>>().join(" ")
            }

            /// Does `visitor`'s work with the strategy of this kind, made
            /// with its default configuration: the one place a strategy's
            /// type is picked by its kind.
            ///
            /// # Examples
            ///
            /// ```
            /// use tensorshare_strategies::{SharingStrategy, StrategyKind, StrategyVisitor};
            ///
            /// struct Kind;
            /// impl StrategyVisitor for Kind {
            ///     type Output = StrategyKind;
            ///     fn visit<S: SharingStrategy + Default + 'static>(self) -> StrategyKind {
            ///         S::default().kind()
            ///     }
            /// }
            /// for kind in StrategyKind::ALL {
            ///     assert_eq!(kind.visit(Kind), kind);
            /// }
            /// ```
            pub fn visit<V: StrategyVisitor>(self, visitor: V) -> V::Output {
                match self {
                    $($(#[cfg($cfg)])? StrategyKind::$kind => visitor.visit::<$module::$strategy>(),)*
                }
            }
        }
    };
}

/// Work done with a strategy whose type is picked at run time by its
/// [kind](StrategyKind::visit).
pub trait StrategyVisitor {
    /// What the work gives.
    type Output;

    /// Does the work with strategy `S`.
    fn visit<S: SharingStrategy + Default + 'static>(self) -> Self::Output;
}

impl StrategyKind {
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
#[error("unknown sharing strategy {name:?}: use one of {}", known_names())]
pub struct UnknownStrategyError {
    /// The name as given, cut to 64 characters.
    pub name: String,
}

/// Every strategy's name, as a list for a message.
fn known_names() -> String {
    let names: Vec<&str> = StrategyKind::ALL.iter().map(|kind| kind.name()).collect();
    names.join(", ")
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
    fn a_summary_is_the_kinds_documentation_on_one_line() {
        assert_eq!(
            StrategyKind::Memmap.summary(),
            "A file in the memmap directory that both sides map: zero-copy."
        );
        assert_eq!(
            StrategyKind::FileSystem.summary(),
            "A named segment in `/dev/shm` with torch's reference count, registered with a \
             shared-memory manager: zero-copy, no fd per storage."
        );
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
