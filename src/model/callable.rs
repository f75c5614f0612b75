//! Values a pickle calls: what an allowlisted function or class rebuilds
//! into when it is named, and how the pickle asked to call it.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use tensorshare_compat::pickle::Global;

/// Something a pickle can call: a registered rebuilder, or a value that a
/// rebuilder returned as callable (such as a bound method).
///
/// Made by the registry ([`Callable::new`]), which alone knows how to run
/// it: the model holds the function without knowing its signature, so that
/// values sit below the registry that rebuilds them.
#[derive(Clone)]
pub struct Callable {
    name: Global,
    function: Arc<dyn Any + Send + Sync>,
}

impl Callable {
    /// `name` bound to `function`, whose type only its maker knows.
    pub(crate) fn erased(name: Global, function: Arc<dyn Any + Send + Sync>) -> Self {
        Self { name, function }
    }

    /// The global this callable answers to.
    pub fn name(&self) -> &Global {
        &self.name
    }

    /// The function, for its maker to recover.
    pub(crate) fn function(&self) -> &(dyn Any + Send + Sync) {
        &*self.function
    }
}

impl fmt::Debug for Callable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Callable({})", self.name)
    }
}

/// How a pickle asked for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallKind {
    /// `REDUCE`: `f(*args)`.
    Reduce,
    /// `NEWOBJ`: `cls.__new__(cls, *args)`.
    NewObj,
    /// `NEWOBJ_EX`: `cls.__new__(cls, *args, **kwargs)`.
    NewObjEx,
}
