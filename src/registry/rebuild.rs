//! Evaluating a decoded pickle: each node once, calls through the registry.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use tensorshare_compat::pickle::{Construction, Node, NodeId, Object, Pickle};

use super::attach::NamedStorage;
use super::call::{Call, StorageKey};
use super::{RebuildError, RefusedGlobal, Registry};
use crate::model::{CallKind, Callable, Opaque, OpaqueCall, Storage, Value};

/// Resolves persistent ids (`torch.save` storages) while rebuilding an archive.
pub(crate) trait PersistentLoad {
    fn load(&self, pid: &Value) -> Result<Value, RebuildError>;
}

/// Evaluates a decoded pickle depth first, each shared node once.
pub(crate) struct Walker<'a> {
    registry: &'a Registry,
    pickle: &'a Pickle,
    persistent: Option<&'a dyn PersistentLoad>,
    archive_depth: usize,
    /// By node index: whether more than one edge points at the node, and
    /// whether it is being evaluated.
    marks: Vec<NodeMarks>,
    /// Values of shared nodes, so identity (one tensor twice, two views of
    /// one storage) survives the rebuild.
    cache: FxHashMap<NodeId, Value>,
    max_depth: usize,
    storages: RefCell<HashMap<StorageKey, Storage>>,
    /// Where the storages a received message names are listed.
    named: Option<&'a RefCell<Vec<NamedStorage>>>,
    /// The arguments of the calls being rebuilt, innermost last.
    arguments: Vec<Value>,
}

impl<'a> Walker<'a> {
    pub(crate) fn new(
        registry: &'a Registry,
        pickle: &'a Pickle,
        persistent: Option<&'a dyn PersistentLoad>,
    ) -> Self {
        Self {
            registry,
            pickle,
            persistent,
            archive_depth: 0,
            marks: marks(pickle),
            cache: FxHashMap::default(),
            max_depth: registry.options().limits.max_depth,
            storages: RefCell::new(HashMap::new()),
            named: None,
            arguments: Vec::new(),
        }
    }

    /// Lists the shared storages the pickle names in `named`, when it is
    /// a received message, to be attached after the rebuild; without a
    /// list they are only described.
    pub(crate) fn naming_into(mut self, named: Option<&'a RefCell<Vec<NamedStorage>>>) -> Self {
        self.named = named;
        self
    }

    pub(crate) fn in_archive(mut self, archive_depth: usize) -> Self {
        self.archive_depth = archive_depth;
        self
    }

    pub(crate) fn run(mut self) -> Result<Value, RebuildError> {
        match self.pickle.root() {
            Some(root) => self.eval(root, 0),
            None => Ok(Value::None),
        }
    }

    fn eval(&mut self, id: NodeId, depth: usize) -> Result<Value, RebuildError> {
        if depth > self.max_depth {
            return Err(RebuildError::TooDeep(self.max_depth));
        }
        // Ids come from the decoder's arena, so every one has a slot; `get`
        // keeps a malformed id an error rather than a panic.
        let Some(marks) = self.marks.get_mut(id.index()) else {
            return Err(RebuildError::Cycle);
        };
        let cached = marks.cached;
        if cached && let Some(value) = self.cache.get(&id) {
            return Ok(value.clone());
        }
        if std::mem::replace(&mut marks.busy, true) {
            return Err(RebuildError::Cycle);
        }
        let value = self.eval_uncached(id, depth);
        if let Some(marks) = self.marks.get_mut(id.index()) {
            marks.busy = false;
        }
        let value = value?;
        if cached {
            self.cache.insert(id, value.clone());
        }
        Ok(value)
    }

    fn eval_all<C>(&mut self, ids: &[NodeId], depth: usize) -> Result<C, RebuildError>
    where
        C: FromIterator<Value>,
    {
        ids.iter().map(|&id| self.eval(id, depth + 1)).collect()
    }

    fn eval_pairs<C>(&mut self, pairs: &[(NodeId, NodeId)], depth: usize) -> Result<C, RebuildError>
    where
        C: FromIterator<(Value, Value)>,
    {
        pairs
            .iter()
            .map(|&(k, v)| Ok((self.eval(k, depth + 1)?, self.eval(v, depth + 1)?)))
            .collect()
    }

    fn eval_uncached(&mut self, id: NodeId, depth: usize) -> Result<Value, RebuildError> {
        let pickle = self.pickle;
        let Some(node) = pickle.get(id) else {
            return Err(RebuildError::MissingNode);
        };
        Ok(match node {
            Node::None => Value::None,
            Node::Bool(b) => Value::Bool(*b),
            Node::Int(i) => Value::Int(*i),
            Node::BigInt(bytes) => Value::BigInt(bytes.as_slice().into()),
            Node::Float(f) => Value::Float(*f),
            Node::Str(s) => Value::Str(s.as_str().into()),
            Node::Bytes(b) => Value::Bytes(b.clone().into_shared()),
            Node::ByteArray(b) => Value::ByteArray(b.clone().into_shared()),
            Node::Tuple(items) => Value::Tuple(self.eval_all(items, depth)?),
            Node::List(items) => Value::List(self.eval_all(items, depth)?),
            Node::Set(items) => Value::Set(self.eval_all(items, depth)?),
            Node::FrozenSet(items) => Value::FrozenSet(self.eval_all(items, depth)?),
            Node::Dict(pairs) => Value::Dict(self.eval_pairs(pairs, depth)?),
            Node::Global(global) => match self.registry.resolve(global) {
                Some(value) => value,
                None if self.registry.admits_unknown() => {
                    Value::Opaque(Arc::new(Opaque::Global(global.clone())))
                }
                None => {
                    return Err(RebuildError::NotAllowed(vec![RefusedGlobal {
                        global: global.clone(),
                        offset: None,
                    }]));
                }
            },
            Node::PersistentId(pid) => {
                let pid = self.eval(*pid, depth + 1)?;
                let loader = self
                    .persistent
                    .ok_or(RebuildError::UnexpectedPersistentId)?;
                loader.load(&pid)?
            }
            Node::Object(object) => self.eval_object(object, depth)?,
        })
    }

    fn eval_object(&mut self, object: &Object, depth: usize) -> Result<Value, RebuildError> {
        let callable = match self.eval(object.callable, depth + 1)? {
            Value::Callable(callable) => callable,
            other if self.registry.admits_unknown() => {
                return self.opaque_call(other, object, None, depth);
            }
            other => return Err(RebuildError::NotCallable(other.type_name())),
        };
        let (kind, args, kwargs) = match &object.construction {
            Construction::Reduce { args } => (CallKind::Reduce, *args, None),
            Construction::NewObj { args } => (CallKind::NewObj, *args, None),
            Construction::NewObjEx { args, kwargs } => (CallKind::NewObjEx, *args, Some(*kwargs)),
        };
        let base = self.arguments.len();
        let pushed = self.push_arguments(args, depth, &callable);
        let result = pushed.and_then(|()| self.call(&callable, kind, kwargs, object, base, depth));
        self.arguments.truncate(base);
        match result {
            // A refusal is part of the picture an opaque rebuild draws; a
            // graph too deep or cyclic is not.
            Err(refused)
                if self.registry.admits_unknown()
                    && !matches!(refused, RebuildError::TooDeep(_) | RebuildError::Cycle) =>
            {
                let callee = Value::Callable(callable);
                self.opaque_call(callee, object, Some(refused.to_string()), depth)
            }
            result => result,
        }
    }

    /// `object`'s call recorded, not made: what `UnknownGlobals::Opaque`
    /// gives for a callee outside the allowlist, or one that refused.
    fn opaque_call(
        &mut self,
        callee: Value,
        object: &Object,
        refused: Option<String>,
        depth: usize,
    ) -> Result<Value, RebuildError> {
        let (kind, args, kwargs) = match object.construction {
            Construction::Reduce { args } => (CallKind::Reduce, args, None),
            Construction::NewObj { args } => (CallKind::NewObj, args, None),
            Construction::NewObjEx { args, kwargs } => (CallKind::NewObjEx, args, Some(kwargs)),
        };
        let args = match self.eval(args, depth + 1)? {
            Value::Tuple(items) => items.to_vec(),
            other => vec![other],
        };
        let kwargs = match kwargs.map(|id| self.eval(id, depth + 1)).transpose()? {
            None => Vec::new(),
            Some(Value::Dict(pairs)) => pairs.to_vec(),
            Some(other) => vec![(Value::Str("**".into()), other)],
        };
        let state = object.state.map(|s| self.eval(s, depth + 1)).transpose()?;
        Ok(Value::Opaque(Arc::new(Opaque::Call(OpaqueCall {
            callee,
            kind,
            args,
            kwargs,
            state,
            list_items: self.eval_all(&object.list_items, depth)?,
            dict_items: self.eval_pairs(&object.dict_items, depth)?,
            refused,
        }))))
    }

    /// Pushes the items of the argument tuple `args` onto
    /// [`arguments`](Self::arguments): each call's arguments are a slice of
    /// one vector rather than a tuple of their own.
    fn push_arguments(
        &mut self,
        args: NodeId,
        depth: usize,
        callable: &Callable,
    ) -> Result<(), RebuildError> {
        let pickle = self.pickle;
        let unshared = self
            .marks
            .get(args.index())
            .is_some_and(|marks| !marks.cached);
        if let (Some(Node::Tuple(items)), true) = (pickle.get(args), unshared) {
            for &item in items {
                let value = self.eval(item, depth + 2)?;
                self.arguments.push(value);
            }
            return Ok(());
        }
        match self.eval(args, depth + 1)? {
            Value::Tuple(items) => {
                self.arguments.extend(items.iter().cloned());
                Ok(())
            }
            other => Err(RebuildError::Invalid {
                callee: callable.name().clone(),
                message: format!("arguments must be a tuple, got {}", other.type_name()),
            }),
        }
    }

    /// Calls `callable` with the arguments pushed from `base` on.
    fn call(
        &mut self,
        callable: &Callable,
        kind: CallKind,
        kwargs: Option<NodeId>,
        object: &Object,
        base: usize,
        depth: usize,
    ) -> Result<Value, RebuildError> {
        // Most calls have no keyword arguments: an empty slice then, not an
        // allocation per call.
        let kwargs = match kwargs {
            None => None,
            Some(id) => match self.eval(id, depth + 1)? {
                Value::Dict(pairs) => Some(pairs),
                other => {
                    return Err(RebuildError::Invalid {
                        callee: callable.name().clone(),
                        message: format!(
                            "keyword arguments must be a dict, got {}",
                            other.type_name()
                        ),
                    });
                }
            },
        };
        let state = object.state.map(|s| self.eval(s, depth + 1)).transpose()?;
        let list_items: Vec<Value> = self.eval_all(&object.list_items, depth)?;
        let dict_items: Vec<(Value, Value)> = self.eval_pairs(&object.dict_items, depth)?;
        callable.call(Call {
            callee: callable.name(),
            kind,
            args: self.arguments.get(base..).unwrap_or_default(),
            kwargs: kwargs.as_deref().unwrap_or_default(),
            state: state.as_ref(),
            list_items: &list_items,
            dict_items: &dict_items,
            registry: self.registry,
            archive_depth: self.archive_depth,
            storages: &self.storages,
            named: self.named,
        })
    }
}

/// What the walker knows of one node.
#[derive(Clone, Copy, Default)]
struct NodeMarks {
    /// An edge points at the node.
    seen: bool,
    /// Its value goes in the cache and comes from it: more than one edge
    /// points at the node.
    cached: bool,
    /// The node is being evaluated: meeting it again is a cycle.
    busy: bool,
}

/// By node index: which nodes more than one edge points at.
fn marks(pickle: &Pickle) -> Vec<NodeMarks> {
    let mut marks = vec![NodeMarks::default(); pickle.len()];
    let mut visit = |id: NodeId| {
        if let Some(marks) = marks.get_mut(id.index()) {
            marks.cached |= std::mem::replace(&mut marks.seen, true);
        }
    };
    for (_, node) in pickle.iter() {
        node.children().for_each(&mut visit);
    }
    marks
}
