//! Checks run over the whole graph before a byte is written, so that a bad
//! arena fails fast with the node at fault rather than half-way through.

use super::EncodeError;
use crate::pickle::{Children, Node, NodeId, Pickle};

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
        for child in edges(node(id, None)?, protocol, Edges::All) {
            node(child, Some(id))?;
            if !reachable[child.index()] {
                reachable[child.index()] = true;
                reached.push(child);
                pending.push(child);
            }
        }
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
            children.extend(edges(node, protocol, Edges::BeforeMemo));
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
    pickle
        .iter()
        .all(|(id, node)| node.children().all(|child| child < id))
}

/// The children of `node` along the chosen edges.
fn edges(node: &Node, protocol: u8, edges: Edges) -> Children<'_> {
    match (edges, node) {
        (Edges::All, _) => node.children(),
        // Filled after the container is memoized.
        (Edges::BeforeMemo, Node::List(_) | Node::Dict(_)) => Children::default(),
        (Edges::BeforeMemo, Node::Set(_)) if protocol >= 4 => Children::default(),
        // Its items, state and list and dict items come after the call.
        (Edges::BeforeMemo, Node::Object(object)) => object.call_parts(),
        (Edges::BeforeMemo, _) => node.children(),
    }
}
