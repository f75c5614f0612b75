//! The opcodes that name globals and record calls: `GLOBAL`,
//! `STACK_GLOBAL`, `INST`, `OBJ`, `REDUCE`, `NEWOBJ`, `NEWOBJ_EX` and the
//! persistent ids.

use super::error::{DecodeError, DecodeErrorCode as Code};
use super::machine::Machine;
use crate::pickle::opcodes::*;
use crate::pickle::{Construction, Node, NodeId, Object};

impl Machine<'_> {
    /// Executes one of the opcodes this module covers and pushes what it
    /// builds.
    pub(super) fn call_op(&mut self, opcode: u8) -> Result<(), DecodeError> {
        let id = match opcode {
            GLOBAL => {
                let module = self.take_line()?;
                let name = self.take_line()?;
                let (module, name) = (self.utf8_str(module)?, self.utf8_str(name)?);
                self.global(module, name)?
            }
            STACK_GLOBAL => {
                let [module, name] = self.pop_n::<2>()?;
                let global = match (self.node(module), self.node(name)) {
                    (Node::Str(module), Node::Str(name)) => self.admit(module, name)?,
                    (Node::Str(_), _) => {
                        return Err(self.wrong_type("STACK_GLOBAL", "a str", name));
                    }
                    _ => return Err(self.wrong_type("STACK_GLOBAL", "a str", module)),
                };
                self.add(Node::Global(global), 0)?
            }
            INST => {
                let items = self.pop_mark()?;
                let module = self.take_line()?;
                let name = self.take_line()?;
                let (module, name) = (
                    self.ascii_str("INST", module)?,
                    self.ascii_str("INST", name)?,
                );
                let callable = self.global(module, name)?;
                let args = self.tuple(items)?;
                self.object(callable, Construction::Reduce { args })?
            }
            OBJ => {
                let items = self.pop_mark()?;
                let Some((&callable, args)) = items.split_first() else {
                    return Err(self.error(Code::StackUnderflow));
                };
                let args = self.tuple(args.to_vec())?;
                self.object(callable, Construction::Reduce { args })?
            }
            REDUCE => {
                let [callable, args] = self.pop_n::<2>()?;
                self.expect_tuple("REDUCE", args)?;
                self.object(callable, Construction::Reduce { args })?
            }
            NEWOBJ => {
                let [class, args] = self.pop_n::<2>()?;
                self.expect_tuple("NEWOBJ", args)?;
                self.object(class, Construction::NewObj { args })?
            }
            NEWOBJ_EX => {
                let [class, args, kwargs] = self.pop_n::<3>()?;
                self.expect_tuple("NEWOBJ_EX", args)?;
                if !matches!(self.node(kwargs), Node::Dict(_)) {
                    return Err(self.wrong_type(
                        "NEWOBJ_EX",
                        "a dict of keyword arguments",
                        kwargs,
                    ));
                }
                self.object(class, Construction::NewObjEx { args, kwargs })?
            }
            PERSID => {
                let line = self.take_line()?;
                let pid = Node::Str(self.ascii("PERSID", line)?);
                let pid = self.add(pid, 0)?;
                self.add(Node::PersistentId(pid), self.depth_holding([pid]))?
            }
            _ => {
                let pid = self.pop()?;
                self.add(Node::PersistentId(pid), self.depth_holding([pid]))?
            }
        };
        self.push(id)
    }

    /// A recorded call.
    fn object(
        &mut self,
        callable: NodeId,
        construction: Construction,
    ) -> Result<NodeId, DecodeError> {
        let object = Node::Object(Box::new(Object {
            callable,
            construction,
            state: None,
            list_items: Vec::new(),
            dict_items: Vec::new(),
        }));
        // Nothing is added to the object yet: its children are its call's.
        let depth = self.depth_holding(object.children());
        self.add(object, depth)
    }

    fn expect_tuple(&self, opcode: &'static str, id: NodeId) -> Result<(), DecodeError> {
        match self.node(id) {
            Node::Tuple(_) => Ok(()),
            _ => Err(self.wrong_type(opcode, "a tuple of arguments", id)),
        }
    }

    pub(super) fn wrong_type(
        &self,
        opcode: &'static str,
        expected: &'static str,
        id: NodeId,
    ) -> DecodeError {
        self.error(Code::WrongType {
            opcode,
            expected,
            found: self.node(id).kind_name(),
        })
    }
}
