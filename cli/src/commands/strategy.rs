//! `--strategy NAME`: a sharing strategy as the command line takes it, by
//! the name `torch.multiprocessing` gives it, with each strategy's own
//! summary as its help.

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use tensorshare::StrategyKind;

/// Parses `--strategy NAME` into the library's [`StrategyKind`], offering
/// every strategy it has.
pub fn strategy_parser() -> impl TypedValueParser<Value = StrategyKind> {
    let names = StrategyKind::ALL.map(|kind| PossibleValue::new(kind.name()).help(kind.summary()));
    PossibleValuesParser::new(names).try_map(|name| name.parse::<StrategyKind>())
}
