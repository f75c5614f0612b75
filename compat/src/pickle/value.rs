//! The decoded form of a pickle: an arena of nodes addressed by [`NodeId`].
//!
//! An arena rather than a tree of boxes because pickles share and mutate
//! objects through the memo: one node referenced twice must stay one node (so
//! that one storage used twice is rebuilt once), containers are filled after
//! they are referenced (`EMPTY_LIST`, `MEMOIZE`, ..., `APPENDS`), and a
//! hostile pickle can build cycles. Dropping an arena never recurses.

use std::borrow::Cow;

use super::ByteChunks;

/// Index of a node in a [`Pickle`] arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(u32);

impl NodeId {
    /// The position of this node in its arena.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A `module.name` reference, as `GLOBAL` or `STACK_GLOBAL` name it.
///
/// Names known when the program is written are borrowed, not copied, so a
/// table of allowed globals hands out copies of its entries for free.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Global {
    /// The module, e.g. `torch._utils`.
    pub module: Cow<'static, str>,
    /// The qualified name within the module, e.g. `_rebuild_tensor_v2`.
    pub name: Cow<'static, str>,
}

impl Global {
    /// A global from its module and qualified name: `&'static str`s are
    /// borrowed, `String`s moved in.
    pub fn new(module: impl Into<Cow<'static, str>>, name: impl Into<Cow<'static, str>>) -> Self {
        Self {
            module: module.into(),
            name: name.into(),
        }
    }

    /// A global naming `module.name`, copying names that do not live long
    /// enough to be borrowed.
    pub fn copied(module: &str, name: &str) -> Self {
        Self::new(module.to_owned(), name.to_owned())
    }
}

impl std::fmt::Display for Global {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.module, self.name)
    }
}

/// How an [`Object`] was constructed.
#[derive(Clone, Debug, PartialEq)]
pub enum Construction {
    /// `REDUCE`: `callable(*args)`; `args` is a tuple node.
    Reduce {
        /// The argument tuple.
        args: NodeId,
    },
    /// `NEWOBJ`: `cls.__new__(cls, *args)`; `args` is a tuple node.
    NewObj {
        /// The argument tuple.
        args: NodeId,
    },
    /// `NEWOBJ_EX`: `cls.__new__(cls, *args, **kwargs)`.
    NewObjEx {
        /// The argument tuple.
        args: NodeId,
        /// The keyword-argument dict.
        kwargs: NodeId,
    },
}

/// A call the pickle asks for, recorded and never made.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    /// What is called: usually a [`Node::Global`], but any node (e.g. the
    /// result of `getattr(cls, 'from_file')`).
    pub callable: NodeId,
    /// Which opcode built it, with its arguments.
    pub construction: Construction,
    /// The argument of `BUILD` (`__setstate__`), if any.
    pub state: Option<NodeId>,
    /// Items added by `APPEND`/`APPENDS` to this object.
    pub list_items: Vec<NodeId>,
    /// Items added by `SETITEM`/`SETITEMS` to this object (e.g. an
    /// `OrderedDict` built by `REDUCE` and then filled).
    pub dict_items: Vec<(NodeId, NodeId)>,
}

/// One value in a decoded pickle.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An int that fits in 64 bits.
    Int(i64),
    /// A larger int: little-endian two's complement, as `LONG1`/`LONG4` carry it.
    BigInt(Vec<u8>),
    /// A float.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `bytes`: large ones share the decoded message's buffer.
    Bytes(ByteChunks),
    /// A `bytearray`: large ones share the decoded message's buffer, as
    /// [`Node::Bytes`] do.
    ByteArray(ByteChunks),
    /// A `tuple`.
    Tuple(Vec<NodeId>),
    /// A `list`.
    List(Vec<NodeId>),
    /// A `dict`, in insertion order (duplicate keys are kept as sent; the
    /// consumer decides).
    Dict(Vec<(NodeId, NodeId)>),
    /// A `set`.
    Set(Vec<NodeId>),
    /// A `frozenset`.
    FrozenSet(Vec<NodeId>),
    /// An allowlisted global, unresolved.
    Global(Global),
    /// `PERSID`/`BINPERSID`: a reference whose meaning the container format
    /// defines (torch.save storages); the node is the persistent id.
    PersistentId(NodeId),
    /// A recorded call: boxed, so that the far more numerous atoms and
    /// containers of a checkpoint's pickle take less room each.
    Object(Box<Object>),
}

impl Object {
    /// The nodes the call itself is made of: the callable, the argument
    /// tuple and, for `NEWOBJ_EX`, the keyword-argument dict. A pickle saves
    /// them before the object exists, so before it can enter the memo; what
    /// `APPENDS`, `SETITEMS` and `BUILD` add later is not among them.
    pub fn call_parts(&self) -> Children<'_> {
        let (args, kwargs) = match self.construction {
            Construction::Reduce { args } | Construction::NewObj { args } => (args, None),
            Construction::NewObjEx { args, kwargs } => (args, Some(kwargs)),
        };
        Children {
            lead: [Some(self.callable), Some(args), kwargs],
            ..Children::default()
        }
    }
}

impl Node {
    /// The nodes this one references, in the order a pickle saves them:
    /// a container's items (a dict's key before its value), a persistent
    /// id's node, an object's [call parts](Object::call_parts) followed by
    /// its list items, its dict items (key before value) and, last, its
    /// `BUILD` state. Atoms and globals have none.
    ///
    /// It allocates nothing, and does not look into the children: a walk
    /// over a whole graph keeps its own stack, as the arena may hold cycles
    /// and any depth.
    ///
    /// # Examples
    ///
    /// ```
    /// use tensorshare_compat::pickle::{Node, Pickle};
    ///
    /// let mut pickle = Pickle::new();
    /// let key = pickle.push(Node::Str("k".into()));
    /// let value = pickle.push(Node::Int(1));
    /// let dict = pickle.push(Node::Dict(vec![(key, value)]));
    /// let list = pickle.push(Node::List(vec![dict, key]));
    /// let children = |id| pickle.get(id).map(|node| node.children().collect::<Vec<_>>());
    /// assert_eq!(children(dict), Some(vec![key, value]));
    /// assert_eq!(children(list), Some(vec![dict, key]));
    /// assert_eq!(children(value), Some(vec![]));
    /// ```
    pub fn children(&self) -> Children<'_> {
        match self {
            Node::None
            | Node::Bool(_)
            | Node::Int(_)
            | Node::BigInt(_)
            | Node::Float(_)
            | Node::Str(_)
            | Node::Bytes(_)
            | Node::ByteArray(_)
            | Node::Global(_) => Children::default(),
            Node::Tuple(items) | Node::List(items) | Node::Set(items) | Node::FrozenSet(items) => {
                Children {
                    items: items.iter(),
                    ..Children::default()
                }
            }
            Node::Dict(pairs) => Children {
                pairs: pairs.iter(),
                ..Children::default()
            },
            Node::PersistentId(pid) => Children {
                lead: [Some(*pid), None, None],
                ..Children::default()
            },
            Node::Object(object) => Children {
                items: object.list_items.iter(),
                pairs: object.dict_items.iter(),
                state: object.state,
                ..object.call_parts()
            },
        }
    }

    /// What the node is, as error messages name it ("a tuple", "bytes").
    pub fn kind_name(&self) -> &'static str {
        match self {
            Node::None => "None",
            Node::Bool(_) => "a bool",
            Node::Int(_) | Node::BigInt(_) => "an int",
            Node::Float(_) => "a float",
            Node::Str(_) => "a str",
            Node::Bytes(_) => "bytes",
            Node::ByteArray(_) => "a bytearray",
            Node::Tuple(_) => "a tuple",
            Node::List(_) => "a list",
            Node::Dict(_) => "a dict",
            Node::Set(_) => "a set",
            Node::FrozenSet(_) => "a frozenset",
            Node::Global(_) => "a global",
            Node::PersistentId(_) => "a persistent id",
            Node::Object(_) => "an object",
        }
    }
}

/// A decoded (or to-be-encoded) pickle: an arena and the root node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Pickle {
    nodes: Vec<Node>,
    root: Option<NodeId>,
}

impl Pickle {
    /// An empty arena with no root.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty arena with room for `nodes` nodes.
    pub fn with_capacity(nodes: usize) -> Self {
        Self {
            nodes: Vec::with_capacity(nodes),
            root: None,
        }
    }

    /// Adds a node and returns its id.
    ///
    /// # Panics
    ///
    /// Panics if the arena already holds `u32::MAX` nodes; the decoder caps
    /// node counts far below that, so only a program building one by hand
    /// can get there.
    pub fn push(&mut self, node: Node) -> NodeId {
        let id = u32::try_from(self.nodes.len()).expect("pickle arena exceeds u32::MAX nodes");
        self.nodes.push(node);
        NodeId(id)
    }

    /// A node the decoder made, by an id it made: always in the arena.
    /// Everyone else holds ids that may come from another arena and reads
    /// through [`Pickle::get`].
    pub(crate) fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// A node the decoder made, mutably (to fill containers after creation).
    pub(crate) fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id.index()]
    }

    /// The node with this id, or `None` when it is not in this arena.
    pub fn get(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.index())
    }

    /// The node with this id, mutably (to fill containers after creation),
    /// or `None` when it is not in this arena.
    pub fn get_mut(&mut self, id: NodeId) -> Option<&mut Node> {
        self.nodes.get_mut(id.index())
    }

    /// The root: what `pickle.loads` would return; `None` until one is set
    /// (a decoded pickle always has one).
    pub fn root(&self) -> Option<NodeId> {
        self.root
    }

    /// The root's node, if there is a root in this arena.
    pub fn root_node(&self) -> Option<&Node> {
        self.get(self.root?)
    }

    /// Sets the root.
    pub fn set_root(&mut self, id: NodeId) {
        self.root = Some(id);
    }

    /// How many nodes the arena holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the arena holds no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Every node with its id, in creation order.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (NodeId(i as u32), n))
    }
}

/// The nodes one node references; see [`Node::children`] and
/// [`Object::call_parts`].
#[derive(Clone, Debug, Default)]
pub struct Children<'a> {
    /// What comes first: a call's callable, args and kwargs, or a
    /// persistent id's node; `None` where there is nothing.
    lead: [Option<NodeId>; 3],
    /// How many of `lead` were handed out.
    led: usize,
    /// A container's items, or an object's list items.
    items: std::slice::Iter<'a, NodeId>,
    /// A dict's pairs, or an object's dict items.
    pairs: std::slice::Iter<'a, (NodeId, NodeId)>,
    /// The value of the pair whose key came last.
    value: Option<NodeId>,
    /// An object's state, which comes last.
    state: Option<NodeId>,
}

impl Iterator for Children<'_> {
    type Item = NodeId;

    fn next(&mut self) -> Option<NodeId> {
        while let Some(lead) = self.lead.get(self.led) {
            self.led += 1;
            if lead.is_some() {
                return *lead;
            }
        }
        if let Some(&item) = self.items.next() {
            return Some(item);
        }
        if let Some(value) = self.value.take() {
            return Some(value);
        }
        if let Some(&(key, value)) = self.pairs.next() {
            self.value = Some(value);
            return Some(key);
        }
        self.state.take()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let lead = self.lead.iter().skip(self.led).flatten().count();
        let len = lead
            + self.items.len()
            + usize::from(self.value.is_some())
            + 2 * self.pairs.len()
            + usize::from(self.state.is_some());
        (len, Some(len))
    }
}

impl ExactSizeIterator for Children<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_objects_children_come_in_the_order_a_pickle_saves_them() {
        let mut pickle = Pickle::new();
        let mut next = || pickle.push(Node::None);
        let [callable, args, kwargs, item, key, value, state] = std::array::from_fn(|_| next());
        let object = Object {
            callable,
            construction: Construction::NewObjEx { args, kwargs },
            state: Some(state),
            list_items: vec![item],
            dict_items: vec![(key, value)],
        };
        assert_eq!(
            object.call_parts().collect::<Vec<_>>(),
            [callable, args, kwargs]
        );
        let node = Node::Object(Box::new(object));
        let children = node.children();
        assert_eq!(children.len(), 7);
        assert_eq!(
            children.collect::<Vec<_>>(),
            [callable, args, kwargs, item, key, value, state]
        );
        let reduce = Node::Object(Box::new(Object {
            callable,
            construction: Construction::Reduce { args },
            state: None,
            list_items: Vec::new(),
            dict_items: Vec::new(),
        }));
        assert_eq!(reduce.children().collect::<Vec<_>>(), [callable, args]);
        assert_eq!(
            Node::PersistentId(key).children().collect::<Vec<_>>(),
            [key]
        );
        assert_eq!(Node::Global(Global::new("m", "n")).children().len(), 0);
    }
}
