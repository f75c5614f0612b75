//! The reducer/rebuilder registry: what each allowlisted global means.
//!
//! A pickle names globals (`torch._utils._rebuild_tensor_v2`,
//! `torch.float32`, ...). The decoder refuses any global that is not
//! registered here; the rebuilder then evaluates the decoded graph, calling
//! the Rust function registered for each `(module, qualname)` where Python
//! would have called the real one.
//!
//! # Examples
//!
//! Registering a rebuilder for a type of your own:
//!
//! ```
//! use tensorshare::registry::{Call, RebuildError, Registry};
//! use tensorshare::Value;
//!
//! let mut registry = Registry::default();
//! // `mylib.Point(x, y)` rebuilds into a (x, y) tuple.
//! registry.register_rebuilder("mylib", "Point", |call: Call<'_>| {
//!     let [x, y] = call.args else {
//!         return Err(call.wrong_arguments("2 arguments (x, y)"));
//!     };
//!     Ok(Value::Tuple(vec![x.clone(), y.clone()].into()))
//! });
//! // pickle.dumps(mylib.Point(1, 2), protocol=2) for a Point whose
//! // __reduce__ returns (Point, (1, 2)):
//! let bytes = b"\x80\x02cmylib\nPoint\nq\x00K\x01K\x02\x86q\x01Rq\x02.";
//! let value = registry.loads(bytes)?;
//! assert!(matches!(value, Value::Tuple(ref items) if items.len() == 2));
//! # Ok::<(), tensorshare::Error>(())
//! ```

pub(crate) mod attach;
pub(crate) mod audit;
mod builtins;
pub(crate) mod call;
mod error;
pub(crate) mod frombuffer;
pub(crate) mod memmap;
pub(crate) mod rebuild;
mod reducers;
pub(crate) mod saved;
pub(crate) mod strategy_handle;
mod torch;

pub(crate) use attach::dup_fd_ids;
pub(crate) use torch::{DUP_FD, REDUCTIONS};

use rustc_hash::FxHashMap;
use std::any::Any;
use std::borrow::Cow;

use tensorshare_compat::pickle::{self, Global};

use crate::model::{Custom, Value};

pub use crate::model::{CallKind, Callable};
pub use call::{Call, Rebuilder};
pub use error::{LoadError, RebuildError, RefusedGlobal};
pub use reducers::Reduction;
pub(crate) use reducers::TypeReducers;
// The decoder's side of loading, from the format crate: its error, its caps,
// the decoded pickle a registry rebuilds and the allowlist check it serves.
pub use tensorshare_compat::pickle::{DecodeError, GlobalFilter, Limits, Pickle};

/// What a registered global evaluates to when a pickle names it.
#[derive(Clone, Debug)]
enum Binding {
    /// A value, such as `torch.float32` or the class `torch.Tensor`.
    Constant(Value),
    /// A function or class the pickle calls.
    Callable(Callable),
}

/// The allowed names of one module, each with its binding and the whole
/// global, kept so that admitting a peer's name hands out a copy of it
/// (free for `'static` names) rather than building one.
type NamesInModule = FxHashMap<Cow<'static, str>, (Global, Binding)>;

/// Settings for decoding and rebuilding.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// Caps on the pickle decoder (depth, nodes, memo, stack).
    pub limits: Limits,
    /// Cap on the bytes of one embedded `torch.save` archive.
    pub max_archive_bytes: u64,
    /// What a global outside the allowlist does: refuse the pickle (the
    /// default) or become an inert [`Value::Opaque`] node.
    pub unknown_globals: UnknownGlobals,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_archive_bytes: 64 << 30,
            unknown_globals: UnknownGlobals::Refuse,
        }
    }
}

impl LoadOptions {
    /// These options with `unknown_globals` replaced.
    #[must_use]
    pub fn with_unknown_globals(self, unknown_globals: UnknownGlobals) -> Self {
        Self {
            unknown_globals,
            ..self
        }
    }
}

/// What rebuilding does with a global the registry does not allow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UnknownGlobals {
    /// Refuse the pickle, naming every global outside the allowlist it
    /// holds.
    #[default]
    Refuse,
    /// Describe instead of refusing: each unknown global, each call of one,
    /// and each call an allowlisted rebuilder refuses becomes a
    /// [`Value::Opaque`] node holding what the pickle asked for. Nothing is
    /// called either way. For looking inside untrusted files (`inspect
    /// --opaque`); a rebuilt graph with opaque nodes is not plain data and
    /// cannot be sent on.
    Opaque,
}

/// The table of allowlisted globals and what they rebuild into.
///
/// [`Registry::default`] knows every global torch's `torch.multiprocessing`
/// reductions, plain pickles and `torch.save` use for CPU tensors, and the
/// builtin containers. [`Registry::empty`] knows nothing: every global is
/// refused until registered.
#[derive(Clone, Debug)]
pub struct Registry {
    /// Module, then qualified name, to the global and what it means; two
    /// levels so that a peer's names are looked up as they are, without
    /// building a key. A fixed table looked up with a peer's names, never
    /// filled by them: a fast hash is safe.
    bindings: FxHashMap<Cow<'static, str>, NamesInModule>,
    options: LoadOptions,
    /// How the embedder's own types pickle.
    reducers: TypeReducers,
}

impl Default for Registry {
    fn default() -> Self {
        let mut registry = Self::empty();
        builtins::register(&mut registry);
        torch::register(&mut registry);
        memmap::register(&mut registry);
        frombuffer::register(&mut registry);
        strategy_handle::register(&mut registry);
        registry
    }
}

impl Registry {
    /// A registry that allows no global at all.
    pub fn empty() -> Self {
        Self {
            bindings: FxHashMap::default(),
            options: LoadOptions::default(),
            reducers: TypeReducers::default(),
        }
    }

    /// Replaces the decode and rebuild settings.
    pub fn with_options(mut self, options: LoadOptions) -> Self {
        self.options = options;
        self
    }

    /// The decode and rebuild settings.
    pub fn options(&self) -> &LoadOptions {
        &self.options
    }

    /// Whether globals outside the allowlist become opaque nodes rather
    /// than a refusal ([`UnknownGlobals::Opaque`]).
    pub(crate) fn admits_unknown(&self) -> bool {
        self.options.unknown_globals == UnknownGlobals::Opaque
    }

    /// Allows `module.name` and makes calls to it run `rebuilder`.
    ///
    /// A later registration for the same global replaces the earlier one, so
    /// users can override the built-in rebuilders.
    pub fn register_rebuilder(
        &mut self,
        module: impl Into<Cow<'static, str>>,
        name: impl Into<Cow<'static, str>>,
        rebuilder: impl Rebuilder + 'static,
    ) -> &mut Self {
        let global = Global::new(module, name);
        let callable = Callable::new(global.clone(), rebuilder);
        self.bind(global, Binding::Callable(callable))
    }

    /// Makes values of the Rust type `T` ([`Value::Custom`]) pickle as
    /// `reduce` says, when sent or saved with this registry.
    ///
    /// A later registration for the same type replaces the earlier one.
    pub fn register_reducer<T: Any + Send + Sync>(
        &mut self,
        reduce: impl Fn(&T) -> Reduction + Send + Sync + 'static,
    ) -> &mut Self {
        self.reducers.insert(reduce);
        self
    }

    /// Registers a Rust type `T` for a Python class `module.name` both
    /// ways: values of `T` pickle as `reduce` says, and a pickle naming the
    /// class rebuilds through `rebuild` into a [`Value::Custom`] holding a
    /// `T` ([`Custom::downcast_ref`](crate::model::Custom::downcast_ref) reads it).
    ///
    /// # Examples
    ///
    /// A Python `Point = collections.namedtuple("Point", "x y")` defined in
    /// the peer's `__main__`:
    ///
    /// ```
    /// use tensorshare::{Registry, Value};
    /// use tensorshare::model::{Custom, Global};
    /// use tensorshare::registry::Reduction;
    ///
    /// #[derive(Debug, PartialEq)]
    /// struct Point { x: i64, y: i64 }
    ///
    /// let mut registry = Registry::default();
    /// registry.register_type(
    ///     "__main__",
    ///     "Point",
    ///     |p: &Point| Reduction::Call {
    ///         callee: Global::new("__main__", "Point"),
    ///         args: vec![Value::Int(p.x), Value::Int(p.y)],
    ///     },
    ///     |call| match call.args {
    ///         [Value::Int(x), Value::Int(y)] => Ok(Point { x: *x, y: *y }),
    ///         _ => Err(call.wrong_arguments("(x: int, y: int)")),
    ///     },
    /// );
    /// // The pickle Python writes for Point(1, 2), with protocol 2:
    /// let pickle = b"\x80\x02c__main__\nPoint\nK\x01K\x02\x86\x81.";
    /// let value = registry.loads(pickle)?;
    /// let Value::Custom(point) = &value else { panic!("{value:?}") };
    /// assert_eq!(point.downcast_ref::<Point>(), Some(&Point { x: 1, y: 2 }));
    /// # Ok::<(), tensorshare::Error>(())
    /// ```
    pub fn register_type<T: Any + Send + Sync>(
        &mut self,
        module: impl Into<Cow<'static, str>>,
        name: impl Into<Cow<'static, str>>,
        reduce: impl Fn(&T) -> Reduction + Send + Sync + 'static,
        rebuild: impl Fn(Call<'_>) -> Result<T, RebuildError> + Send + Sync + 'static,
    ) -> &mut Self {
        let global = Global::new(module, name);
        let class = global.clone();
        let rebuilder = move |call: Call<'_>| {
            let value = rebuild(call)?;
            Ok(Value::Custom(Custom::new(class.clone(), value)))
        };
        self.reducers.insert(reduce);
        let callable = Callable::new(global.clone(), rebuilder);
        self.bind(global, Binding::Callable(callable))
    }

    /// How the embedder's types pickle, for the reducers.
    pub(crate) fn reducers(&self) -> &TypeReducers {
        &self.reducers
    }

    /// Allows `module.name` and makes it evaluate to `value` (for classes
    /// passed as arguments and constants such as dtypes).
    pub fn register_constant(
        &mut self,
        module: impl Into<Cow<'static, str>>,
        name: impl Into<Cow<'static, str>>,
        value: Value,
    ) -> &mut Self {
        self.bind(Global::new(module, name), Binding::Constant(value))
    }

    fn bind(&mut self, global: Global, binding: Binding) -> &mut Self {
        self.bindings
            .entry(global.module.clone())
            .or_default()
            .insert(global.name.clone(), (global, binding));
        self
    }

    /// Refuses `module.name` from now on.
    pub fn unregister(&mut self, module: &str, name: &str) -> &mut Self {
        if let Some(names) = self.bindings.get_mut(module) {
            names.remove(name);
            if names.is_empty() {
                self.bindings.remove(module);
            }
        }
        self
    }

    /// Every allowed global, sorted.
    pub fn globals(&self) -> Vec<&Global> {
        let mut globals: Vec<_> = self
            .bindings
            .values()
            .flat_map(|names| names.values().map(|(global, _)| global))
            .collect();
        globals.sort();
        globals
    }

    fn entry(&self, module: &str, name: &str) -> Option<&(Global, Binding)> {
        self.bindings.get(module)?.get(name)
    }

    /// What `global` evaluates to, if it is registered.
    pub(crate) fn resolve(&self, global: &Global) -> Option<Value> {
        self.entry(&global.module, &global.name)
            .map(|(_, binding)| match binding {
                Binding::Constant(value) => value.clone(),
                Binding::Callable(callable) => Value::Callable(callable.clone()),
            })
    }

    /// Decodes one pickle and rebuilds it, executing nothing that is not a
    /// registered rebuilder.
    ///
    /// # Errors
    ///
    /// [`LoadError::Decode`] for a malformed pickle; [`LoadError::Rebuild`] naming
    /// every global outside the allowlist (unless the options make them
    /// [`UnknownGlobals::Opaque`]), or when a rebuilder refuses its
    /// arguments.
    pub fn loads(&self, bytes: &[u8]) -> Result<Value, LoadError> {
        let audit = audit::GlobalAudit::new(self);
        let decoded = pickle::decode_all(bytes, &audit, &self.options.limits)?;
        audit.finish()?;
        Ok(self.rebuild(&decoded.pickle)?)
    }

    /// Rebuilds a decoded pickle.
    ///
    /// # Errors
    ///
    /// A [`RebuildError`] naming the global whose rebuilder refused, or the
    /// structure that cannot be rebuilt (cycles, excessive depth).
    pub fn rebuild(&self, pickle: &Pickle) -> Result<Value, RebuildError> {
        rebuild::Walker::new(self, pickle, None).run()
    }
}

/// As a filter, a registry refuses the first global outside its allowlist,
/// so a hostile message stops early; under [`UnknownGlobals::Opaque`] it
/// admits every name, for the walker to keep inert.
impl GlobalFilter for Registry {
    fn allows(&self, module: &str, name: &str) -> bool {
        self.entry(module, name).is_some() || self.admits_unknown()
    }

    fn admit(&self, module: &str, name: &str) -> Option<Global> {
        match self.entry(module, name) {
            Some((global, _)) => Some(global.clone()),
            None => self.admits_unknown().then(|| Global::copied(module, name)),
        }
    }
}
