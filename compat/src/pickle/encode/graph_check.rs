//! Checks run over the whole graph before a byte is written, so that a bad
//! arena fails fast with the node at fault rather than half-way through.

use super::EncodeError;
use crate::pickle::{Construction, Node, NodeId, Pickle};

/// Which outgoing edges of a node a walk follows.
#[derive(Clone, Copy, PartialEq)]
enum Edges {
    /// Every reference.
    All,
    /// Only the references saved before the node can be memoized.
    BeforeMemo,
}

/// Checks that every node reachable from `root` references nodes of this
/// arena, and that no cycle runs only through nodes that can enter the memo
/// only after their children are saved (tuples, frozensets, call arguments,
/// persistent ids, and sets below protocol 4): Python cannot build such a
/// cycle, and CPython's pickler would recurse forever on it.
///
/// Iterative: a graph of any depth is checked in constant stack space.
pub(super) fn check_graph(pickle: &Pickle, root: NodeId, protocol: u8) -> Result<(), EncodeError> {
    if root.index() < pickle.len() && children_come_first(pickle) {
        return Ok(());
    }
    let node = |id: NodeId, parent: Option<NodeId>| {
        pickle.get(id).ok_or(EncodeError::InvalidNodeId {
            id,
            parent,
            len: pickle.len(),
        })
    };
    node(root, None)?;

    // Pass 1: reachability, validating every reference once.
    let mut reachable = vec![false; pickle.len()];
    reachable[root.index()] = true;
    let mut reached = vec![root];
    let mut pending = vec![root];
    while let Some(id) = pending.pop() {
        let mut result = Ok(());
        for_each_child(node(id, None)?, protocol, Edges::All, |child| {
            if result.is_ok() {
                match node(child, Some(id)) {
                    Ok(_) if !reachable[child.index()] => {
                        reachable[child.index()] = true;
                        reached.push(child);
                        pending.push(child);
                    }
                    Ok(_) => {}
                    Err(e) => result = Err(e),
                }
            }
        });
        result?;
    }

    // Pass 2: depth-first search for a cycle through before-memo edges only.
    // The children still to visit of every node on the path share one
    // stack; each path entry remembers where its own begin.
    #[derive(Clone, Copy, PartialEq)]
    enum Color {
        Unvisited,
        OnPath,
        Done,
    }
    let mut color = vec![Color::Unvisited; pickle.len()];
    let mut path: Vec<(NodeId, usize)> = Vec::new();
    let mut children: Vec<NodeId> = Vec::new();
    let enter = |id: NodeId, path: &mut Vec<(NodeId, usize)>, children: &mut Vec<NodeId>| {
        path.push((id, children.len()));
        if let Some(node) = pickle.get(id) {
            for_each_child(node, protocol, Edges::BeforeMemo, |child| {
                children.push(child)
            });
        }
    };
    for start in reached {
        if color[start.index()] != Color::Unvisited {
            continue;
        }
        color[start.index()] = Color::OnPath;
        enter(start, &mut path, &mut children);
        while let Some(&(id, first_child)) = path.last() {
            let next = if children.len() > first_child {
                children.pop()
            } else {
                None
            };
            match next {
                Some(child) => match color[child.index()] {
                    Color::Unvisited => {
                        color[child.index()] = Color::OnPath;
                        enter(child, &mut path, &mut children);
                    }
                    Color::OnPath => {
                        return Err(EncodeError::UnencodableCycle { node: child });
                    }
                    Color::Done => {}
                },
                None => {
                    color[id.index()] = Color::Done;
                    path.pop();
                }
            }
        }
    }
    Ok(())
}

/// Whether every node references only nodes pushed before it, as arenas
/// built bottom-up (by reducers) are: then every reference is in the arena
/// and no cycle exists, and one pass without allocating proves it.
fn children_come_first(pickle: &Pickle) -> bool {
    pickle.iter().all(|(id, node)| {
        let mut earlier = true;
        for_each_child(node, 0, Edges::All, |child| earlier &= child < id);
        earlier
    })
}

/// Calls `visit` on each child of `node` along the chosen edges.
fn for_each_child(node: &Node, protocol: u8, edges: Edges, mut visit: impl FnMut(NodeId)) {
    let all = edges == Edges::All;
    match node {
        Node::None
        | Node::Bool(_)
        | Node::Int(_)
        | Node::BigInt(_)
        | Node::Float(_)
        | Node::Str(_)
        | Node::Bytes(_)
        | Node::ByteArray(_)
        | Node::Global(_) => {}
        Node::Tuple(items) | Node::FrozenSet(items) => items.iter().copied().for_each(visit),
        Node::Set(items) => {
            if all || protocol < 4 {
                items.iter().copied().for_each(visit);
            }
        }
        Node::List(items) => {
            if all {
                items.iter().copied().for_each(visit);
            }
        }
        Node::Dict(pairs) => {
            if all {
                pairs.iter().for_each(|&(k, v)| {
                    visit(k);
                    visit(v);
                });
            }
        }
        Node::PersistentId(pid) => visit(*pid),
        Node::Object(object) => {
            visit(object.callable);
            match &object.construction {
                Construction::Reduce { args } | Construction::NewObj { args } => visit(*args),
                Construction::NewObjEx { args, kwargs } => {
                    visit(*args);
                    visit(*kwargs);
                }
            }
            if all {
                object.list_items.iter().copied().for_each(&mut visit);
                object.dict_items.iter().for_each(|&(k, v)| {
                    visit(k);
                    visit(v);
                });
                if let Some(state) = object.state {
                    visit(state);
                }
            }
        }
    }
}
