//! How the embedder's own Rust types pickle: the other direction of a
//! rebuilder, registered beside it.
//!
//! A value of a Rust type travels as a [`Value::Custom`]; the reducer
//! registered for its type says what Python's `__reduce__` would: call a
//! class or function with arguments (a `collections.namedtuple`, a
//! function that builds the object), or make an instance and set its
//! attributes (a dataclass or plain class, as `pickle` writes it with
//! `NEWOBJ` and `BUILD`). The Python side needs the class; nothing else is
//! executed there that it did not define.

use std::any::{Any, TypeId};
use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use tensorshare_compat::pickle::Global;

use crate::model::Value;

/// What a value of a Rust type pickles as.
#[derive(Clone, Debug)]
pub enum Reduction {
    /// `callee(*args)` (`REDUCE`): a `collections.namedtuple` built from its
    /// fields, or any function returning the object.
    Call {
        /// The class or function called.
        callee: Global,
        /// Its positional arguments.
        args: Vec<Value>,
    },
    /// `class.__new__(class)`, then its attributes set from `state`, a dict
    /// of attribute names (`NEWOBJ` and `BUILD`): a dataclass or a plain
    /// class instance, as `pickle` writes one.
    Object {
        /// The class.
        class: Global,
        /// The attributes: a dict keyed by their names.
        state: Value,
    },
}

/// A registered reducer, type-erased: `None` when the value is not of its
/// type, which cannot happen as the table is keyed by type.
type ErasedReducer = dyn Fn(&(dyn Any + Send + Sync)) -> Option<Reduction> + Send + Sync;

/// The reducers registered, by the Rust type they reduce.
#[derive(Clone, Default)]
pub(crate) struct TypeReducers(FxHashMap<TypeId, Arc<ErasedReducer>>);

impl TypeReducers {
    pub(crate) fn insert<T: Any + Send + Sync>(
        &mut self,
        reduce: impl Fn(&T) -> Reduction + Send + Sync + 'static,
    ) {
        let erased = move |value: &(dyn Any + Send + Sync)| value.downcast_ref::<T>().map(&reduce);
        self.0.insert(TypeId::of::<T>(), Arc::new(erased));
    }

    /// What `value` pickles as, if a reducer for its type is registered.
    pub(crate) fn reduce(&self, value: &(dyn Any + Send + Sync)) -> Option<Reduction> {
        self.0.get(&value.type_id())?(value)
    }
}

impl fmt::Debug for TypeReducers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TypeReducers({} types)", self.0.len())
    }
}
