//! One method per opcode family: what each opcode pops, builds and pushes.

use super::error::{DecodeError, DecodeErrorCode as Code};
use super::machine::{Machine, Singletons};
use super::number::{self, Int, IntOpcodeValue};
use super::text;
use crate::pickle::opcodes::*;
use crate::pickle::{Node, NodeId};

/// What the machine does after an opcode.
pub(super) enum Flow {
    /// Read the next opcode.
    Continue,
    /// `STOP`: the pickle's value.
    Stop(NodeId),
}

impl Machine<'_> {
    /// Executes one opcode whose byte was just read.
    pub(super) fn step(&mut self, opcode: u8) -> Result<Flow, DecodeError> {
        match opcode {
            STOP => return Ok(Flow::Stop(self.pop()?)),
            PROTO => {
                let protocol = self.take_u8()?;
                if protocol > HIGHEST_PROTOCOL {
                    return Err(self.error(Code::UnsupportedProtocol(protocol)));
                }
                self.protocol = protocol;
            }
            FRAME => {
                let len = u64::from_le_bytes(self.take_array()?);
                self.start_frame(len)?;
            }
            MARK => self.push_mark()?,
            POP => self.pop_value_or_mark()?,
            POP_MARK => drop(self.pop_mark()?),
            DUP => {
                let top = self.top()?;
                self.push(top)?;
            }
            PUT | BINPUT | LONG_BINPUT | MEMOIZE | GET | BINGET | LONG_BINGET => {
                self.memo_op(opcode)?
            }
            NONE | NEWTRUE | NEWFALSE | INT | BININT | BININT1 | BININT2 | LONG | LONG1 | LONG4
            | FLOAT | BINFLOAT => self.number_op(opcode)?,
            STRING | BINSTRING | SHORT_BINSTRING | UNICODE | BINUNICODE | SHORT_BINUNICODE
            | BINUNICODE8 | BINBYTES | SHORT_BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                self.text_op(opcode)?
            }
            TUPLE | EMPTY_TUPLE | TUPLE1 | TUPLE2 | TUPLE3 | LIST | EMPTY_LIST | DICT
            | EMPTY_DICT | EMPTY_SET | FROZENSET => self.container_op(opcode)?,
            APPEND | APPENDS | SETITEM | SETITEMS | ADDITEMS | BUILD => self.mutation_op(opcode)?,
            GLOBAL | STACK_GLOBAL | INST | OBJ | REDUCE | NEWOBJ | NEWOBJ_EX | PERSID
            | BINPERSID => self.call_op(opcode)?,
            EXT1 => return Err(self.error(Code::Unsupported { opcode: "EXT1" })),
            EXT2 => return Err(self.error(Code::Unsupported { opcode: "EXT2" })),
            EXT4 => return Err(self.error(Code::Unsupported { opcode: "EXT4" })),
            NEXT_BUFFER => {
                return Err(self.error(Code::Unsupported {
                    opcode: "NEXT_BUFFER",
                }));
            }
            READONLY_BUFFER => {
                return Err(self.error(Code::Unsupported {
                    opcode: "READONLY_BUFFER",
                }));
            }
            _ => return Err(self.error(Code::UnknownOpcode(opcode))),
        }
        Ok(Flow::Continue)
    }

    fn memo_op(&mut self, opcode: u8) -> Result<(), DecodeError> {
        match opcode {
            PUT => {
                let key = self.text_memo_key()?;
                self.memo_put(key)
            }
            BINPUT => {
                let key = self.take_u8()?;
                self.memo_put(key.into())
            }
            LONG_BINPUT => {
                let key = u32::from_le_bytes(self.take_array()?);
                self.memo_put(key.into())
            }
            MEMOIZE => self.memo_put(self.memo_len()),
            _ => {
                let key = match opcode {
                    GET => self.text_memo_key()?,
                    BINGET => self.take_u8()?.into(),
                    _ => u32::from_le_bytes(self.take_array()?).into(),
                };
                let id = self.memo_get(key)?;
                self.push(id)
            }
        }
    }

    fn text_memo_key(&mut self) -> Result<u64, DecodeError> {
        let line = self.take_line()?;
        number::parse_memo_key(line).map_err(|message| self.error(Code::InvalidLiteral(message)))
    }

    fn number_op(&mut self, opcode: u8) -> Result<(), DecodeError> {
        let node = match opcode {
            NONE => return self.push_singleton(|s| &mut s.none, Node::None),
            NEWTRUE => return self.push_singleton(|s| &mut s.true_, Node::Bool(true)),
            NEWFALSE => return self.push_singleton(|s| &mut s.false_, Node::Bool(false)),
            INT => {
                let line = self.take_line()?;
                match number::parse_int_opcode(line) {
                    Ok(IntOpcodeValue::Bool(true)) => {
                        return self.push_singleton(|s| &mut s.true_, Node::Bool(true));
                    }
                    Ok(IntOpcodeValue::Bool(false)) => {
                        return self.push_singleton(|s| &mut s.false_, Node::Bool(false));
                    }
                    Ok(IntOpcodeValue::Int(value)) => int_node(value),
                    Err(message) => return Err(self.error(Code::InvalidLiteral(message))),
                }
            }
            BININT => Node::Int(i32::from_le_bytes(self.take_array()?).into()),
            BININT1 => Node::Int(self.take_u8()?.into()),
            BININT2 => Node::Int(u16::from_le_bytes(self.take_array()?).into()),
            LONG => {
                let line = self.take_line()?;
                let value = number::parse_long_opcode(line)
                    .map_err(|message| self.error(Code::InvalidLiteral(message)))?;
                int_node(value)
            }
            LONG1 => {
                let len = self.take_u8()?;
                int_node(number::int_from_le_twos_complement(self.take(len.into())?))
            }
            LONG4 => {
                let len = self.signed_length("LONG4")?;
                int_node(number::int_from_le_twos_complement(self.take(len)?))
            }
            FLOAT => {
                let line = self.take_line()?;
                let value = number::parse_float(line)
                    .map_err(|message| self.error(Code::InvalidLiteral(message)))?;
                Node::Float(value)
            }
            _ => Node::Float(f64::from_be_bytes(self.take_array()?)),
        };
        self.push_new(node, 0)
    }

    fn text_op(&mut self, opcode: u8) -> Result<(), DecodeError> {
        let node = match opcode {
            STRING => {
                let line = self.take_line()?;
                let bytes = text::unquote_string_literal(line)
                    .map_err(|message| self.error(Code::InvalidLiteral(message)))?;
                Node::Str(self.ascii("STRING", &bytes)?)
            }
            BINSTRING => {
                let len = self.signed_length("BINSTRING")?;
                let bytes = self.take(len)?;
                Node::Str(self.ascii("BINSTRING", bytes)?)
            }
            SHORT_BINSTRING => {
                let len = self.take_u8()?;
                let bytes = self.take(len.into())?;
                Node::Str(self.ascii("SHORT_BINSTRING", bytes)?)
            }
            UNICODE => {
                let line = self.take_line()?;
                Node::Str(text::decode_raw_unicode_escape(line).map_err(|code| self.error(code))?)
            }
            BINUNICODE | SHORT_BINUNICODE | BINUNICODE8 => {
                let len = self.length(opcode)?;
                let bytes = self.take(len)?;
                Node::Str(self.utf8(bytes)?)
            }
            BYTEARRAY8 => {
                let len = self.length(opcode)?;
                Node::ByteArray(self.take_bytes(len)?)
            }
            _ => {
                let len = self.length(opcode)?;
                Node::Bytes(self.take_bytes(len)?)
            }
        };
        self.push_new(node, 0)
    }

    /// The unsigned length field of a string opcode, by its width.
    fn length(&mut self, opcode: u8) -> Result<u64, DecodeError> {
        Ok(match opcode {
            SHORT_BINUNICODE | SHORT_BINBYTES => self.take_u8()?.into(),
            BINUNICODE | BINBYTES => u32::from_le_bytes(self.take_array()?).into(),
            _ => u64::from_le_bytes(self.take_array()?),
        })
    }

    /// The signed 4-byte length of `BINSTRING` and `LONG4`.
    fn signed_length(&mut self, opcode: &'static str) -> Result<u64, DecodeError> {
        let len = i32::from_le_bytes(self.take_array()?);
        u64::try_from(len).map_err(|_| {
            self.error(Code::InvalidLiteral(format!(
                "{opcode} has a negative byte count ({len})"
            )))
        })
    }

    fn container_op(&mut self, opcode: u8) -> Result<(), DecodeError> {
        let id = match opcode {
            EMPTY_TUPLE => self.tuple(Vec::new())?,
            TUPLE => {
                let items = self.pop_mark()?;
                self.tuple(items)?
            }
            TUPLE1 => self
                .pop_n::<1>()
                .and_then(|items| self.tuple(items.to_vec()))?,
            TUPLE2 => self
                .pop_n::<2>()
                .and_then(|items| self.tuple(items.to_vec()))?,
            TUPLE3 => self
                .pop_n::<3>()
                .and_then(|items| self.tuple(items.to_vec()))?,
            EMPTY_LIST => self.add(Node::List(Vec::new()), 1)?,
            EMPTY_DICT => self.add(Node::Dict(Vec::new()), 1)?,
            EMPTY_SET => self.add(Node::Set(Vec::new()), 1)?,
            LIST | FROZENSET => {
                let items = self.pop_mark()?;
                let depth = self.depth_holding(items.iter().copied());
                let node = if opcode == LIST {
                    Node::List(items)
                } else {
                    Node::FrozenSet(items)
                };
                self.add(node, depth)?
            }
            _ => {
                let items = self.pop_mark()?;
                let pairs = self.pairs("DICT", &items)?;
                let depth = self.depth_holding(items);
                self.add(Node::Dict(pairs), depth)?
            }
        };
        self.push(id)
    }

    /// A tuple of `items`; the empty tuple is a singleton, as in CPython.
    pub(super) fn tuple(&mut self, items: Vec<NodeId>) -> Result<NodeId, DecodeError> {
        if items.is_empty() {
            return self.singleton(|s| &mut s.empty_tuple, Node::Tuple(Vec::new()), 1);
        }
        let depth = self.depth_holding(items.iter().copied());
        self.add(Node::Tuple(items), depth)
    }

    /// `items` as key-value pairs.
    fn pairs(
        &self,
        opcode: &'static str,
        items: &[NodeId],
    ) -> Result<Vec<(NodeId, NodeId)>, DecodeError> {
        let chunks = items.chunks_exact(2);
        if !chunks.remainder().is_empty() {
            return Err(self.error(Code::OddItemCount { opcode }));
        }
        Ok(chunks
            .filter_map(|pair| match pair {
                &[key, value] => Some((key, value)),
                _ => None,
            })
            .collect())
    }

    fn mutation_op(&mut self, opcode: u8) -> Result<(), DecodeError> {
        match opcode {
            APPEND => {
                let item = self.pop()?;
                self.fill(opcode, &[item])
            }
            SETITEM => {
                let pair = self.pop_n::<2>()?;
                self.fill(opcode, &pair)
            }
            BUILD => {
                let state = self.pop()?;
                let target = self.top()?;
                self.build(target, state)
            }
            _ => {
                let items = self.pop_mark()?;
                self.fill(opcode, &items)
            }
        }
    }

    /// `APPEND(S)`, `SETITEM(S)`, `ADDITEMS`: adds `items` to the container
    /// on top of the stack.
    fn fill(&mut self, opcode: u8, items: &[NodeId]) -> Result<(), DecodeError> {
        let target = self.top()?;
        if items.is_empty() {
            // `_pickle.c` returns before looking at the target.
            return Ok(());
        }
        let (name, kind) = match opcode {
            APPEND => ("APPEND", Filled::List),
            APPENDS => ("APPENDS", Filled::List),
            SETITEM => ("SETITEM", Filled::Dict),
            SETITEMS => ("SETITEMS", Filled::Dict),
            _ => ("ADDITEMS", Filled::Set),
        };
        let fits = matches!(
            (kind, self.node(target)),
            (Filled::List, Node::List(_) | Node::Object(_))
                | (Filled::Dict, Node::Dict(_) | Node::Object(_))
                | (Filled::Set, Node::Set(_))
        );
        if !fits {
            return Err(self.wrong_type(name, kind.expected(), target));
        }
        let pairs = if kind == Filled::Dict {
            self.pairs(name, items)?
        } else {
            Vec::new()
        };
        let depth = self
            .depth(target)
            .max(self.depth_holding(items.iter().copied()));
        self.raise_depth(target, depth)?;
        match (kind, self.node_mut(target)) {
            (Filled::Dict, Node::Dict(dict)) => dict.extend(pairs),
            (Filled::Dict, Node::Object(object)) => object.dict_items.extend(pairs),
            (_, Node::List(list) | Node::Set(list)) => list.extend_from_slice(items),
            (_, Node::Object(object)) => object.list_items.extend_from_slice(items),
            _ => {}
        }
        Ok(())
    }

    /// `BUILD`: records `state` as the `__setstate__` argument of `target`.
    fn build(&mut self, target: NodeId, state: NodeId) -> Result<(), DecodeError> {
        match self.node(target) {
            Node::Object(object) if object.state.is_none() => {}
            Node::Object(_) => return Err(self.error(Code::StateAlreadySet)),
            _ => return Err(self.wrong_type("BUILD", "an object", target)),
        }
        let depth = self.depth(target).max(self.depth_holding([state]));
        self.raise_depth(target, depth)?;
        if let Node::Object(object) = self.node_mut(target) {
            object.state = Some(state);
        }
        Ok(())
    }

    pub(super) fn utf8(&self, bytes: &[u8]) -> Result<String, DecodeError> {
        self.utf8_str(bytes).map(str::to_owned)
    }

    pub(super) fn utf8_str<'b>(&self, bytes: &'b [u8]) -> Result<&'b str, DecodeError> {
        std::str::from_utf8(bytes).map_err(|_| self.error(Code::InvalidUtf8))
    }

    pub(super) fn ascii(&self, opcode: &'static str, bytes: &[u8]) -> Result<String, DecodeError> {
        self.ascii_str(opcode, bytes).map(str::to_owned)
    }

    pub(super) fn ascii_str<'b>(
        &self,
        opcode: &'static str,
        bytes: &'b [u8],
    ) -> Result<&'b str, DecodeError> {
        if !bytes.is_ascii() {
            return Err(self.error(Code::NotAscii { opcode }));
        }
        self.utf8_str(bytes)
    }

    /// The node in `slot`, created on first use.
    fn singleton(
        &mut self,
        slot: fn(&mut Singletons) -> &mut Option<NodeId>,
        node: Node,
        depth: u32,
    ) -> Result<NodeId, DecodeError> {
        if let Some(id) = *slot(&mut self.singletons) {
            return Ok(id);
        }
        let id = self.add(node, depth)?;
        *slot(&mut self.singletons) = Some(id);
        Ok(id)
    }

    fn push_singleton(
        &mut self,
        slot: fn(&mut Singletons) -> &mut Option<NodeId>,
        node: Node,
    ) -> Result<(), DecodeError> {
        let id = self.singleton(slot, node, 0)?;
        self.push(id)
    }
}

/// What `fill` adds items to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Filled {
    List,
    Dict,
    Set,
}

impl Filled {
    fn expected(self) -> &'static str {
        match self {
            Filled::List => "a list",
            Filled::Dict => "a dict",
            Filled::Set => "a set",
        }
    }
}

fn int_node(value: Int) -> Node {
    match value {
        Int::Small(value) => Node::Int(value),
        Int::Big(bytes) => Node::BigInt(bytes),
    }
}
