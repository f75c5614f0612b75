//! Objects built by a call (`REDUCE`, `NEWOBJ`, `NEWOBJ_EX`), and the
//! `__reduce__` forms CPython writes for values a protocol has no opcode for.

use super::batch::{BatchStyle, Items};
use super::{EncodeError, Encoder, MemoKey, Task};
use crate::pickle::opcodes::{
    APPEND, APPENDS, BUILD, EMPTY_LIST, EMPTY_TUPLE, NEWOBJ, NEWOBJ_EX, POP, REDUCE, SETITEM,
    SETITEMS, TUPLE1, TUPLE2,
};
use crate::pickle::{Construction, Node, NodeId, Object};

impl<'a> Encoder<'a> {
    /// `save_reduce` for an [`Object`]: the callable, the arguments and the
    /// call opcode now; memo, items and state once those are written.
    pub(super) fn save_object(
        &mut self,
        object: &'a Object,
        id: NodeId,
    ) -> Result<(), EncodeError> {
        let malformed = |what| EncodeError::MalformedObject { node: id, what };
        let is_tuple = |args: NodeId| matches!(self.pickle.get(args), Some(Node::Tuple(_)));
        self.tasks.push(Task::EndReduce {
            id,
            object: Some(object),
        });
        match object.construction {
            Construction::Reduce { args } => {
                if !is_tuple(args) {
                    return Err(malformed("the arguments of REDUCE must be a tuple node"));
                }
                self.tasks.extend([Task::Op(REDUCE), Task::Save(args)]);
            }
            Construction::NewObj { args } => {
                if !is_tuple(args) {
                    return Err(malformed("the arguments of NEWOBJ must be a tuple node"));
                }
                self.tasks.extend([Task::Op(NEWOBJ), Task::Save(args)]);
            }
            Construction::NewObjEx { args, kwargs } => {
                if self.protocol < 4 {
                    return Err(EncodeError::ProtocolTooLow {
                        what: "an object built by NEWOBJ_EX (keyword arguments to __new__)",
                        protocol: self.protocol,
                        required: 4,
                    });
                }
                if !is_tuple(args) {
                    return Err(malformed("the arguments of NEWOBJ_EX must be a tuple node"));
                }
                if !matches!(self.pickle.get(kwargs), Some(Node::Dict(_))) {
                    return Err(malformed(
                        "the keyword arguments of NEWOBJ_EX must be a dict node",
                    ));
                }
                self.tasks
                    .extend([Task::Op(NEWOBJ_EX), Task::Save(kwargs), Task::Save(args)]);
            }
        }
        self.tasks.push(Task::Save(object.callable));
        Ok(())
    }

    /// Finishes `save_reduce` once the call opcode is written.
    pub(super) fn end_reduce(
        &mut self,
        id: NodeId,
        object: Option<&'a Object>,
    ) -> Result<(), EncodeError> {
        if let Some(index) = self.memo_index(MemoKey::Node(id)) {
            // Saved while its arguments were (a cycle through a list or
            // dict): that copy carries the items and state.
            self.out.write(&[POP]);
            self.memo_get(index);
            return Ok(());
        }
        self.memo_put(Some(MemoKey::Node(id)))?;
        if let Some(object) = object {
            if let Some(state) = object.state {
                self.tasks.extend([Task::Op(BUILD), Task::Save(state)]);
            }
            let pairs = Items::Pairs(&object.dict_items);
            self.push_batches(pairs, BatchStyle::Iterator, SETITEM, SETITEMS);
            let values = Items::Values(&object.list_items);
            self.push_batches(values, BatchStyle::Iterator, APPEND, APPENDS);
        }
        Ok(())
    }

    /// `set` and `frozenset` below protocol 4: `set([items])` by `REDUCE`.
    pub(super) fn save_set_reduce(
        &mut self,
        class: &'static str,
        items: &'a [NodeId],
        id: NodeId,
    ) -> Result<(), EncodeError> {
        self.save_temp_global("builtins", class)?;
        // The argument tuple, then the list in it.
        self.out.opcode_boundary();
        self.out.opcode_boundary();
        self.out.write(&[EMPTY_LIST]);
        self.memo_put(None)?;
        self.tasks.extend([
            Task::EndReduce { id, object: None },
            Task::Op(REDUCE),
            Task::EndTempTuple { len: 1 },
        ]);
        self.push_batches(Items::Values(items), BatchStyle::ExactList, APPEND, APPENDS);
        Ok(())
    }

    /// `bytes` in protocol 2, which has no opcode for it: CPython writes
    /// `_codecs.encode(text, 'latin1')`, which Python 2 reads as a `str`.
    pub(super) fn save_bytes_protocol2(
        &mut self,
        bytes: &[u8],
        key: Option<MemoKey<'a>>,
    ) -> Result<(), EncodeError> {
        if bytes.is_empty() {
            self.save_temp_global("builtins", "bytes")?;
            self.out.opcode_boundary();
            self.out.write(&[EMPTY_TUPLE]);
        } else {
            self.save_temp_global("_codecs", "encode")?;
            self.out.opcode_boundary();
            let text: String = bytes.iter().map(|&b| char::from(b)).collect();
            self.out.opcode_boundary();
            match bytes {
                [byte] => self.save_str_with_key(&text, Some(MemoKey::Latin1Char(*byte)))?,
                _ => self.save_str_with_key(&text, None)?,
            }
            self.save_temp_str("latin1", true)?;
            self.out.write(&[TUPLE2]);
            self.memo_put(None)?;
        }
        self.out.write(&[REDUCE]);
        self.memo_put(key)
    }

    /// `bytearray` below protocol 5: `bytearray(bytes)` by `REDUCE`.
    pub(super) fn save_bytearray_reduce(
        &mut self,
        bytes: &[u8],
        id: NodeId,
    ) -> Result<(), EncodeError> {
        self.save_temp_global("builtins", "bytearray")?;
        self.out.opcode_boundary();
        if bytes.is_empty() {
            self.out.write(&[EMPTY_TUPLE]);
        } else {
            self.out.opcode_boundary();
            let key = match bytes {
                [byte] => Some(MemoKey::SingleByte(*byte)),
                _ => None,
            };
            match key.and_then(|key| self.memo_index(key)) {
                Some(index) => self.memo_get(index),
                None if self.protocol < 3 => self.save_bytes_protocol2(bytes, key)?,
                None => {
                    self.write_bytes(bytes)?;
                    self.memo_put(key)?;
                }
            }
            self.out.write(&[TUPLE1]);
            self.memo_put(None)?;
        }
        self.out.write(&[REDUCE]);
        self.memo_put(Some(MemoKey::Node(id)))
    }
}
