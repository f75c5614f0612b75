//! Messages a receiver refuses, and the check that it refused them for the
//! reason the test meant.

use std::fmt::Debug;

use tensorshare::model::{Custom, Global};
use tensorshare::registry::Reduction;
use tensorshare::{Error, Registry, Value};

/// A registry that pickles a `u8` as a call of `__main__.Unknown`, a
/// global no default registry allows, and a value it pickles so.
pub fn unknown_global() -> (Registry, Value) {
    let mut registry = Registry::default();
    registry.register_reducer::<u8>(|n| Reduction::Call {
        callee: Global::new("__main__", "Unknown"),
        args: vec![Value::Int(i64::from(*n))],
    });
    let value = Value::Custom(Custom::new(Global::new("__main__", "Unknown"), 1u8));
    (registry, value)
}

/// The error of a receive that must have been refused with `reason` in
/// its message.
pub fn expect_refused<T: Debug>(received: Result<T, Error>, reason: &str) -> Error {
    let error = received.expect_err(reason);
    assert!(
        error.to_string().contains(reason),
        "refused for another reason than {reason:?}: {error}"
    );
    error
}
