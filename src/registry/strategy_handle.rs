//! Rebuilding the form of a storage in the memory of a strategy torch has
//! no form for:
//!
//! ```text
//! tensorshare.rebuild_storage(strategy: str, handle, nbytes: int)
//! ```
//!
//! One form for every such strategy, so that adding one adds nothing here:
//! `strategy` is the strategy's name, and `handle` is whatever its form in
//! the sharing layer wrote to find its memory by, which that form reads
//! back when it attaches the storage (a tuple of ints, say). A strategy
//! torch knows sends its own form instead (`rebuild_storage_fd`, ...), and
//! refuses a handle in this one. Stock torch cannot rebuild it: no module
//! `tensorshare` exists on its side.

use std::str::FromStr;

use tensorshare_strategies::StrategyKind;

use super::{Call, RebuildError, Registry};
use crate::model::{HandleRef, Residence, Value};

/// The function the form calls.
pub(crate) const REBUILD_STORAGE: (&str, &str) = ("tensorshare", "rebuild_storage");

/// Allows `tensorshare.rebuild_storage`, called as `(strategy: str,
/// handle, nbytes: int)`.
pub(super) fn register(registry: &mut Registry) {
    registry.register_rebuilder(REBUILD_STORAGE.0, REBUILD_STORAGE.1, rebuild_storage);
}

/// `rebuild_storage(strategy, handle, nbytes)`: the storage attached by
/// the strategy's form, or described when nothing is attached.
fn rebuild_storage(call: Call<'_>) -> Result<Value, RebuildError> {
    let [Value::Str(name), handle, Value::Int(nbytes)] = call.reduce_args()? else {
        return Err(call.wrong_arguments("(strategy: str, handle, nbytes: int)"));
    };
    let strategy = StrategyKind::from_str(name).map_err(|error| call.invalid(error.to_string()))?;
    let nbytes =
        usize::try_from(*nbytes).map_err(|_| call.invalid(format!("negative nbytes {nbytes}")))?;
    let remote = Residence::Handle(HandleRef {
        strategy,
        handle: handle.clone(),
    });
    Ok(Value::Storage(call.named_storage(remote, nbytes, || None)))
}
