//! [`PickleBuilder`]: a pickle arena under construction, which every
//! reducer writes into.

use std::borrow::Cow;

use tensorshare_compat::pickle::{Construction, Global, Node, NodeId, Object, Pickle};

/// A pickle arena under construction, with helpers for the shapes torch's
/// reducers produce.
#[derive(Debug, Default)]
pub struct PickleBuilder {
    pickle: Pickle,
}

impl PickleBuilder {
    /// An empty pickle with room for `nodes` nodes.
    pub(crate) fn with_capacity(nodes: usize) -> Self {
        PickleBuilder {
            pickle: Pickle::with_capacity(nodes),
        }
    }

    /// Adds a node.
    pub fn push(&mut self, node: Node) -> NodeId {
        self.pickle.push(node)
    }

    /// Adds a reference to `module.name`.
    pub fn global(
        &mut self,
        module: impl Into<Cow<'static, str>>,
        name: impl Into<Cow<'static, str>>,
    ) -> NodeId {
        self.push(Node::Global(Global::new(module, name)))
    }

    /// Adds a tuple of `items`.
    pub fn tuple(&mut self, items: Vec<NodeId>) -> NodeId {
        self.push(Node::Tuple(items))
    }

    /// Adds an int.
    pub fn int(&mut self, value: usize) -> NodeId {
        self.push(Node::Int(i64::try_from(value).unwrap_or(i64::MAX)))
    }

    /// Adds `callable(*args)` (`REDUCE`).
    pub fn call(&mut self, callable: NodeId, args: Vec<NodeId>) -> NodeId {
        let args = self.tuple(args);
        self.push(Node::Object(Box::new(Object {
            callable,
            construction: Construction::Reduce { args },
            state: None,
            list_items: Vec::new(),
            dict_items: Vec::new(),
        })))
    }

    /// Adds `cls.__new__(cls)` followed by `BUILD` with `state` (`NEWOBJ`).
    pub fn new_object_with_state(&mut self, class: NodeId, state: NodeId) -> NodeId {
        let args = self.tuple(Vec::new());
        self.push(Node::Object(Box::new(Object {
            callable: class,
            construction: Construction::NewObj { args },
            state: Some(state),
            list_items: Vec::new(),
            dict_items: Vec::new(),
        })))
    }

    /// The pickle built so far, e.g. to add nodes a helper of the format
    /// crate builds.
    pub fn pickle_mut(&mut self) -> &mut Pickle {
        &mut self.pickle
    }

    /// Finishes with `root` as the result.
    pub fn finish(mut self, root: NodeId) -> Pickle {
        self.pickle.set_root(root);
        self.pickle
    }
}
