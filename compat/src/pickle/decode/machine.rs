//! The VM's state: input cursor, stack, marks, memo and the arena with the
//! depth of every node. The opcodes themselves are in `ops`.

use super::error::{DecodeError, DecodeErrorCode};
use super::frame::Unframer;
use super::memo::Memo;
use super::ops::Flow;
use super::start;
use super::{Decoded, GlobalFilter, Limits};
use crate::pickle::{
    ByteChunks, FRAME_SIZE_TARGET, Global, Node, NodeId, Pickle, SharedBytes, python2_names,
};

/// Nodes CPython keeps as singletons: one arena node each, created on
/// first use, so that a pickle of a million `None`s costs no arena space.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Singletons {
    pub(super) none: Option<NodeId>,
    pub(super) true_: Option<NodeId>,
    pub(super) false_: Option<NodeId>,
    pub(super) empty_tuple: Option<NodeId>,
}

/// The pickle machine for one pickle.
pub(super) struct Machine<'a> {
    input: &'a [u8],
    /// The buffer `input` is all of, when the caller shares it: large
    /// `bytes` payloads are then slices of it rather than copies.
    shared_input: Option<&'a SharedBytes>,
    /// Next byte to read; never beyond `input.len()`.
    pos: usize,
    /// Where the opcode being executed starts: the offset of its errors.
    op_start: usize,
    /// The current frame, which every read is checked against.
    frames: Unframer,
    filter: &'a dyn GlobalFilter,
    limits: Limits,
    pickle: Pickle,
    /// Nesting depth of each node, by node index.
    depths: Vec<u32>,
    stack: Vec<NodeId>,
    /// Stack lengths at each pending `MARK`; the last is the fence below
    /// which no opcode may pop, as in `_pickle.c`.
    marks: Vec<usize>,
    memo: Memo,
    pub(super) singletons: Singletons,
    /// The protocol the last `PROTO` named, 0 before any: below 3, globals
    /// carry Python 2 names.
    pub(super) protocol: u8,
}

impl<'a> Machine<'a> {
    pub(super) fn new(input: &'a [u8], filter: &'a dyn GlobalFilter, limits: &Limits) -> Self {
        let max_nodes = limits.max_nodes.min(u32::MAX as usize);
        // Torch's messages take about nine bytes a node: room for that
        // saves growing the arena several times per message, and the cap
        // keeps a large input from reserving for nodes it may not have.
        let nodes = (input.len() / 8).clamp(8, 1024).min(max_nodes);
        Self {
            input,
            shared_input: None,
            pos: 0,
            op_start: 0,
            frames: Unframer::default(),
            filter,
            limits: Limits {
                max_nodes,
                ..*limits
            },
            pickle: Pickle::with_capacity(nodes),
            depths: Vec::with_capacity(nodes),
            stack: Vec::with_capacity(16),
            marks: Vec::new(),
            // Torch's messages memoize nearly every node.
            memo: Memo::with_capacity(nodes),
            singletons: Singletons::default(),
            protocol: 0,
        }
    }

    /// A machine whose large `bytes` payloads share `input`'s buffer.
    pub(super) fn sharing(
        input: &'a SharedBytes,
        filter: &'a dyn GlobalFilter,
        limits: &Limits,
    ) -> Self {
        Self {
            shared_input: Some(input),
            ..Self::new(input, filter, limits)
        }
    }

    /// Runs opcodes until `STOP`.
    pub(super) fn run(mut self) -> Result<Decoded, DecodeError> {
        match self.execute() {
            Ok(root) => {
                self.pickle.set_root(root);
                Ok(Decoded {
                    pickle: self.pickle,
                    consumed: self.pos,
                })
            }
            Err(err) => Err(start::explain(self.input, err)),
        }
    }

    /// Runs opcodes until `STOP`, and returns what it pops.
    fn execute(&mut self) -> Result<NodeId, DecodeError> {
        loop {
            // An opcode byte is never checked against the frame: one byte
            // read where the frame has bytes left fits it, and where it has
            // none the next read with an argument leaves the frame.
            self.op_start = self.pos;
            let Some(&opcode) = self.input.get(self.pos) else {
                return Err(DecodeError {
                    offset: self.input.len(),
                    code: DecodeErrorCode::Truncated,
                });
            };
            self.pos += 1;
            if let Flow::Stop(root) = self.step(opcode)? {
                return Ok(root);
            }
        }
    }

    /// An error at the current opcode.
    pub(super) fn error(&self, code: DecodeErrorCode) -> DecodeError {
        DecodeError {
            offset: self.op_start,
            code,
        }
    }

    // Reading the input.

    /// The next `len` bytes; `Truncated` before any allocation when fewer
    /// remain.
    pub(super) fn take(&mut self, len: u64) -> Result<&'a [u8], DecodeError> {
        self.frames
            .read(self.pos, len)
            .map_err(|code| self.error(code))?;
        let input = self.input;
        let remaining = input.get(self.pos..).unwrap_or_default();
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|len| remaining.get(..len))
            .ok_or_else(|| self.error(DecodeErrorCode::Truncated))?;
        self.pos += bytes.len();
        Ok(bytes)
    }

    /// The next `len` bytes as a `bytes` payload: a slice of the shared
    /// input from [`FRAME_SIZE_TARGET`] bytes on, the size from which
    /// CPython writes payloads outside frames, so that a storage is always
    /// shared; else a copy, so that a short name never pins a message.
    pub(super) fn take_bytes(&mut self, len: u64) -> Result<ByteChunks, DecodeError> {
        let start = self.pos;
        let bytes = self.take(len)?;
        let shared = self
            .shared_input
            .filter(|_| bytes.len() >= FRAME_SIZE_TARGET)
            .and_then(|input| input.slice(start..start + bytes.len()));
        Ok(match shared {
            Some(slice) => ByteChunks::from(slice),
            None => ByteChunks::from(bytes),
        })
    }

    /// The next `N` bytes as an array.
    pub(super) fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N as u64)?;
        bytes
            .try_into()
            .map_err(|_| self.error(DecodeErrorCode::Truncated))
    }

    /// The next byte.
    pub(super) fn take_u8(&mut self) -> Result<u8, DecodeError> {
        let [byte] = self.take_array()?;
        Ok(byte)
    }

    /// Starts a frame of the next `len` bytes, which must all be there.
    pub(super) fn start_frame(&mut self, len: u64) -> Result<(), DecodeError> {
        let left = self.input.len().saturating_sub(self.pos);
        self.frames
            .start(self.pos, len, left)
            .map_err(|code| self.error(code))
    }

    /// The next line, without its newline.
    pub(super) fn take_line(&mut self) -> Result<&'a [u8], DecodeError> {
        let input = self.input;
        let remaining = input.get(self.pos..).unwrap_or_default();
        let end = remaining.iter().position(|&byte| byte == b'\n');
        self.frames
            .read_line(self.pos, end.map(|end| end + 1))
            .map_err(|code| self.error(code))?;
        let end = end.ok_or_else(|| self.error(DecodeErrorCode::Truncated))?;
        let line = remaining.get(..end).unwrap_or_default();
        self.pos += end + 1;
        Ok(line)
    }

    // The stack.

    /// The lowest stack position an opcode may pop: the last `MARK`'s.
    fn fence(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    pub(super) fn push(&mut self, id: NodeId) -> Result<(), DecodeError> {
        if self.stack.len() >= self.limits.max_stack {
            return Err(self.error(DecodeErrorCode::StackTooLarge {
                limit: self.limits.max_stack,
            }));
        }
        self.stack.push(id);
        Ok(())
    }

    pub(super) fn pop(&mut self) -> Result<NodeId, DecodeError> {
        if self.stack.len() <= self.fence() {
            return Err(self.error(DecodeErrorCode::StackUnderflow));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.error(DecodeErrorCode::StackUnderflow))
    }

    /// The top of the stack, left in place.
    pub(super) fn top(&self) -> Result<NodeId, DecodeError> {
        if self.stack.len() <= self.fence() {
            return Err(self.error(DecodeErrorCode::StackUnderflow));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.error(DecodeErrorCode::StackUnderflow))
    }

    /// The top `N` values, oldest first, popped.
    pub(super) fn pop_n<const N: usize>(&mut self) -> Result<[NodeId; N], DecodeError> {
        let start = self
            .stack
            .len()
            .checked_sub(N)
            .filter(|&start| start >= self.fence());
        let items = start
            .and_then(|start| self.stack.get(start..))
            .and_then(|top| <[NodeId; N]>::try_from(top).ok())
            .ok_or_else(|| self.error(DecodeErrorCode::StackUnderflow))?;
        self.stack.truncate(self.stack.len() - N);
        Ok(items)
    }

    pub(super) fn push_mark(&mut self) -> Result<(), DecodeError> {
        if self.marks.len() >= self.limits.max_stack {
            return Err(self.error(DecodeErrorCode::StackTooLarge {
                limit: self.limits.max_stack,
            }));
        }
        self.marks.push(self.stack.len());
        Ok(())
    }

    /// Everything pushed since the last `MARK`, oldest first, and the mark.
    pub(super) fn pop_mark(&mut self) -> Result<Vec<NodeId>, DecodeError> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.error(DecodeErrorCode::MarkMissing))?;
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    /// `POP`: the top value, or the last `MARK` when nothing was pushed
    /// since it (as `_pickle.c` does).
    pub(super) fn pop_value_or_mark(&mut self) -> Result<(), DecodeError> {
        if self.marks.last() == Some(&self.stack.len()) {
            self.marks.pop();
        } else {
            self.pop()?;
        }
        Ok(())
    }

    // The memo.

    pub(super) fn memo_get(&self, key: u64) -> Result<NodeId, DecodeError> {
        self.memo
            .get(key)
            .ok_or_else(|| self.error(DecodeErrorCode::MemoMissing(key)))
    }

    /// Stores the top of the stack under `key`.
    pub(super) fn memo_put(&mut self, key: u64) -> Result<(), DecodeError> {
        let id = self.top()?;
        if self.memo.len() >= self.limits.max_memo && !self.memo.contains(key) {
            return Err(self.error(DecodeErrorCode::TooManyMemoEntries {
                limit: self.limits.max_memo,
            }));
        }
        self.memo.insert(key, id);
        Ok(())
    }

    /// `MEMOIZE`'s key: the memo's size, as in `memo[len(memo)] = top`.
    pub(super) fn memo_len(&self) -> u64 {
        self.memo.len() as u64
    }

    // The arena.

    pub(super) fn node(&self, id: NodeId) -> &Node {
        self.pickle.node(id)
    }

    pub(super) fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.pickle.node_mut(id)
    }

    pub(super) fn depth(&self, id: NodeId) -> u32 {
        self.depths.get(id.index()).copied().unwrap_or(0)
    }

    /// The depth of a container holding `children`.
    pub(super) fn depth_holding(&self, children: impl IntoIterator<Item = NodeId>) -> u32 {
        let deepest = children
            .into_iter()
            .map(|id| self.depth(id))
            .max()
            .unwrap_or(0);
        deepest.saturating_add(1)
    }

    /// Refuses a depth beyond the limit.
    pub(super) fn check_depth(&self, depth: u32) -> Result<(), DecodeError> {
        if usize::try_from(depth).unwrap_or(usize::MAX) > self.limits.max_depth {
            return Err(self.error(DecodeErrorCode::NestingTooDeep {
                limit: self.limits.max_depth,
            }));
        }
        Ok(())
    }

    /// Raises `id`'s depth to `depth` (after filling it), within the limit.
    pub(super) fn raise_depth(&mut self, id: NodeId, depth: u32) -> Result<(), DecodeError> {
        self.check_depth(depth)?;
        if let Some(slot) = self.depths.get_mut(id.index()) {
            *slot = (*slot).max(depth);
        }
        Ok(())
    }

    /// Adds a node of the given depth to the arena.
    pub(super) fn add(&mut self, node: Node, depth: u32) -> Result<NodeId, DecodeError> {
        self.check_depth(depth)?;
        if self.pickle.len() >= self.limits.max_nodes {
            return Err(self.error(DecodeErrorCode::TooManyNodes {
                limit: self.limits.max_nodes,
            }));
        }
        let id = self.pickle.push(node);
        self.depths.push(depth);
        Ok(id)
    }

    /// Adds a node and pushes it.
    pub(super) fn push_new(&mut self, node: Node, depth: u32) -> Result<(), DecodeError> {
        let id = self.add(node, depth)?;
        self.push(id)
    }

    /// The global `module.name`, if the filter allows it. Below protocol 3
    /// the filter sees the Python 3 name, as `Unpickler.find_class` imports
    /// it under `fix_imports`; from protocol 3 on, a Python 2 name stays as
    /// sent, a module Python 3 does not have. Below protocol 4 a dotted
    /// name is refused, as CPython's `find_class` fails to look it up.
    pub(super) fn admit(&self, module: &str, name: &str) -> Result<Global, DecodeError> {
        let (module, name) = if self.protocol < 3 {
            python2_names::python3_name(module, name)
        } else {
            (module, name)
        };
        if self.protocol < 4 && name.contains('.') {
            return Err(self.error(DecodeErrorCode::DottedNameBelowProtocol4 {
                module: module.to_owned(),
                name: name.to_owned(),
                protocol: self.protocol,
            }));
        }
        self.filter
            .admit_at(module, name, self.op_start)
            .ok_or_else(|| {
                self.error(DecodeErrorCode::DisallowedGlobal {
                    module: module.to_owned(),
                    name: name.to_owned(),
                })
            })
    }

    /// A [`Node::Global`] for `module.name`, if the filter allows it.
    pub(super) fn global(&mut self, module: &str, name: &str) -> Result<NodeId, DecodeError> {
        let global = self.admit(module, name)?;
        self.add(Node::Global(global), 0)
    }
}
