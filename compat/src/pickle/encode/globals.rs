//! Globals (classes and functions) and the name strings they are made of.

use super::{EncodeError, Encoder, MemoKey, Task};
use crate::pickle::opcodes::{GLOBAL, REDUCE, STACK_GLOBAL};
use crate::pickle::python2_names;

impl<'a> Encoder<'a> {
    /// Saves a global that has no node (a class CPython reduces to).
    pub(super) fn save_temp_global(
        &mut self,
        module: &'a str,
        name: &'a str,
    ) -> Result<(), EncodeError> {
        self.out.opcode_boundary();
        self.save_global(module, name)
    }

    /// `save_global`: a class or function, written once and fetched after.
    pub(super) fn save_global(
        &mut self,
        module: &'a str,
        name: &'a str,
    ) -> Result<(), EncodeError> {
        let key = MemoKey::Global(module, name);
        if let Some(index) = self.memo_index(key) {
            self.memo_get(index);
            return Ok(());
        }
        if self.protocol >= 4 {
            self.save_temp_str(module, true)?;
            self.save_temp_str(name, true)?;
            self.out.write(&[STACK_GLOBAL]);
            return self.memo_put(Some(key));
        }
        if let Some((parent, last)) = name.rsplit_once('.') {
            // `GLOBAL` names only top-level objects: reach a nested one with
            // `getattr(parent, last)`, as CPython does.
            self.save_temp_global("builtins", "getattr")?;
            self.tasks.extend([
                Task::MemoPut(key),
                Task::Op(REDUCE),
                Task::EndTempTuple { len: 2 },
                Task::TempStr(last),
                Task::Global {
                    module,
                    name: parent,
                },
            ]);
            return Ok(());
        }
        self.write_global_opcode(module, name)?;
        self.memo_put(Some(key))
    }

    /// Writes `GLOBAL module\nname\n`, renamed for Python 2 if asked.
    pub(super) fn write_global_opcode(
        &mut self,
        module: &'a str,
        name: &'a str,
    ) -> Result<(), EncodeError> {
        let (module_out, name_out) = if self.fix_imports {
            python2_names::python2_name(module, name)
        } else {
            (module, name)
        };
        let refuse = |reason| EncodeError::UnencodableGlobal {
            module: module.to_owned(),
            name: name.to_owned(),
            protocol: self.protocol,
            reason,
        };
        if module_out.contains('\n') || name_out.contains('\n') {
            return Err(refuse(
                "GLOBAL is line-based, so names cannot hold a newline; use protocol 4",
            ));
        }
        if self.protocol < 3 && !(module_out.is_ascii() && name_out.is_ascii()) {
            return Err(refuse(
                "protocol 2 writes names in ASCII; use protocol 3 or higher",
            ));
        }
        let mut line = Vec::with_capacity(module_out.len() + name_out.len() + 3);
        line.push(GLOBAL);
        line.extend_from_slice(module_out.as_bytes());
        line.push(b'\n');
        line.extend_from_slice(name_out.as_bytes());
        line.push(b'\n');
        self.out.write(&line);
        Ok(())
    }

    /// Saves a string with no node of its own: a name, or `'latin1'`.
    /// `interned` strings are one object per content, as CPython interns
    /// identifiers; one-character Latin-1 strings always are.
    pub(super) fn save_temp_str(
        &mut self,
        text: &'a str,
        interned: bool,
    ) -> Result<(), EncodeError> {
        self.out.opcode_boundary();
        let mut chars = text.chars();
        let key = match (chars.next(), chars.next()) {
            (Some(c), None) if u32::from(c) < 0x100 => Some(MemoKey::Latin1Char(c as u8)),
            _ if interned || text.is_empty() => Some(MemoKey::InternedStr(text)),
            _ => None,
        };
        self.save_str_with_key(text, key)
    }

    /// Fetches the string from the memo under `key`, or writes and
    /// memoizes it.
    pub(super) fn save_str_with_key(
        &mut self,
        text: &str,
        key: Option<MemoKey<'a>>,
    ) -> Result<(), EncodeError> {
        if let Some(index) = key.and_then(|key| self.memo_index(key)) {
            self.memo_get(index);
            return Ok(());
        }
        self.write_str(text)?;
        self.memo_put(key)
    }
}
