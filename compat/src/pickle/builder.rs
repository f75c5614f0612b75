//! [`PickleBuilder`]: a pickle arena under construction, with the shapes
//! torch's reducers write: what tensorshare's reducers write into, and a
//! hand-made pickle's start (a test's, a fuzz target's).

use std::borrow::Cow;

use super::{Construction, Global, Node, NodeId, Object, Pickle};

/// A pickle arena under construction, with helpers for the shapes torch's
/// reducers produce.
///
/// # Examples
///
/// `torch.Size((2, 3))` as torch pickles it, `torch.Size` called on a tuple:
///
/// ```
/// use tensorshare_compat::pickle::{EncodeOptions, Limits, Node, PickleBuilder, decode, encode};
///
/// let mut out = PickleBuilder::default();
/// let size = out.global("torch", "Size");
/// let (two, three) = (out.int(2), out.int(3));
/// let dims = out.tuple(vec![two, three]);
/// let call = out.call(size, vec![dims]);
/// let bytes = encode(&out.finish(call), &EncodeOptions::new())?;
///
/// let only_size = |module: &str, name: &str| (module, name) == ("torch", "Size");
/// let back = decode(&bytes, &only_size, &Limits::default())?.pickle;
/// let Some(Node::Object(object)) = back.root_node() else { panic!("not a call") };
/// assert!(matches!(back.get(object.callable), Some(Node::Global(g)) if g.name == "Size"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Default)]
pub struct PickleBuilder {
    pickle: Pickle,
}

impl PickleBuilder {
    /// An empty pickle with room for `nodes` nodes.
    pub fn with_capacity(nodes: usize) -> Self {
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
