//! One call a pickle asks for, as a rebuilder sees it: its arguments
//! already rebuilt, and what the message's rebuild shares between its
//! calls (its storages by shared object, the storages to attach after).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use tensorshare_compat::pickle::Global;

use super::attach::NamedStorage;
use super::{RebuildError, Registry};
use crate::model::{CallKind, Callable, Residence, Storage, Value};

/// What identifies a shared storage across references in one message, as
/// torch's receiving side dedupes them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum StorageKey {
    /// A `file_system` segment, by name (torch's `storage_from_cache(cls, handle)`).
    Segment(Vec<u8>),
    /// A `memmap` file, by path.
    File(String),
    /// A `bytes` storage made by `torch.frombuffer` over a `bytearray`, by
    /// where its bytes lie: one `bytearray` is one storage.
    Buffer {
        /// The address of its first byte.
        address: usize,
        /// Its length.
        len: usize,
    },
    /// The tensor `torch.frombuffer` made over such a storage, by its
    /// identity: only its storage is taken by `untyped_storage`.
    BufferTensor(usize),
}

/// One call a pickle asks for, with its arguments already rebuilt.
///
/// In a received message, the storages that another process shares (by
/// fd, segment or file) are attached once the whole message is rebuilt: a
/// rebuilder sees such a storage described by its handle
/// ([`Storage::residence`], no [`bytes`](Storage::bytes) yet), and the
/// value it returns holds it attached, as every other reference to it
/// does.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// The global being called.
    pub callee: &'a Global,
    /// Which opcode asked for the call.
    pub kind: CallKind,
    /// Positional arguments.
    pub args: &'a [Value],
    /// Keyword arguments (`NEWOBJ_EX` only).
    pub kwargs: &'a [(Value, Value)],
    /// The `BUILD` state applied after the call, if any.
    pub state: Option<&'a Value>,
    /// Items appended to the result (`APPENDS`).
    pub list_items: &'a [Value],
    /// Items set on the result (`SETITEMS`).
    pub dict_items: &'a [(Value, Value)],
    /// The registry doing the rebuild, for rebuilders that decode nested
    /// payloads.
    pub registry: &'a Registry,
    /// How many embedded archives enclose this call.
    pub(crate) archive_depth: usize,
    /// Storages already rebuilt in this message, so two references to one
    /// shared object give one [`Storage`].
    pub(crate) storages: &'a RefCell<HashMap<StorageKey, Storage>>,
    /// Where a received message's storages are listed, to be attached
    /// after the rebuild; `None` when only describing a pickle (`inspect`).
    pub(crate) named: Option<&'a RefCell<Vec<NamedStorage>>>,
}

impl Call<'_> {
    /// The storage already rebuilt under `key` in this message, or a new one.
    pub(crate) fn shared_storage(
        &self,
        key: StorageKey,
        make: impl FnOnce() -> Storage,
    ) -> Storage {
        self.storages
            .borrow_mut()
            .entry(key)
            .or_insert_with(make)
            .clone()
    }

    /// An error saying the arguments were not what `expected` describes.
    pub fn wrong_arguments(&self, expected: &str) -> RebuildError {
        let got: Vec<&str> = self.args.iter().map(Value::type_name).collect();
        RebuildError::WrongArguments {
            callee: self.callee.clone(),
            expected: expected.to_owned(),
            got: format!("({})", got.join(", ")),
        }
    }

    /// An error about this call with a specific message.
    pub fn invalid(&self, message: impl Into<String>) -> RebuildError {
        RebuildError::Invalid {
            callee: self.callee.clone(),
            message: message.into(),
        }
    }

    /// The storage of `nbytes` that `remote`, a handle read from a
    /// received message, names: listed to be attached after the rebuild,
    /// one per call (each call takes back what its sender added for it,
    /// and the context's caches make repeats one storage). When only
    /// describing, one per key `key` gives in the message, as torch's
    /// receiver finds a storage it has by handle.
    pub(crate) fn named_storage(
        &self,
        remote: Residence,
        nbytes: usize,
        key: impl FnOnce() -> Option<StorageKey>,
    ) -> Storage {
        let Some(named) = self.named else {
            return match key() {
                Some(key) => self.shared_storage(key, || Storage::remote(remote, nbytes)),
                None => Storage::remote(remote, nbytes),
            };
        };
        let storage = Storage::remote(remote, nbytes);
        named.borrow_mut().push(NamedStorage {
            callee: self.callee.clone(),
            storage: storage.clone(),
        });
        storage
    }

    /// The positional arguments of a plain `REDUCE` call, refusing `BUILD`
    /// state and appended items that a function result cannot take.
    ///
    /// # Errors
    ///
    /// [`RebuildError::Invalid`] when the pickle did more than call.
    pub fn reduce_args(&self) -> Result<&[Value], RebuildError> {
        if self.kind != CallKind::Reduce {
            return Err(self.invalid("expected a plain call (REDUCE), got NEWOBJ"));
        }
        if self.state.is_some() || !self.list_items.is_empty() || !self.dict_items.is_empty() {
            return Err(self.invalid("unexpected state or items set on the result"));
        }
        Ok(self.args)
    }
}

/// A function that rebuilds one global's calls.
///
/// Implemented for every `Fn(Call<'_>) -> Result<Value, RebuildError>`.
pub trait Rebuilder: Send + Sync {
    /// Rebuilds the value of `call`.
    ///
    /// # Errors
    ///
    /// A [`RebuildError`] when the arguments are not acceptable.
    fn rebuild(&self, call: Call<'_>) -> Result<Value, RebuildError>;
}

impl<F> Rebuilder for F
where
    F: Fn(Call<'_>) -> Result<Value, RebuildError> + Send + Sync,
{
    fn rebuild(&self, call: Call<'_>) -> Result<Value, RebuildError> {
        self(call)
    }
}

/// A rebuilder as the model holds it inside a [`Callable`].
struct RegisteredFunction(Box<dyn Rebuilder>);

impl Callable {
    /// A callable named `name` that runs `function`.
    pub fn new(name: Global, function: impl Rebuilder + 'static) -> Self {
        Callable::erased(name, Arc::new(RegisteredFunction(Box::new(function))))
    }

    /// Runs the function with `call`; every callable is made by
    /// [`Callable::new`], so the function is always a rebuilder.
    pub(crate) fn call(&self, call: Call<'_>) -> Result<Value, RebuildError> {
        match self.function().downcast_ref::<RegisteredFunction>() {
            Some(RegisteredFunction(function)) => function.rebuild(call),
            None => Err(RebuildError::NotCallable("callable of another kind")),
        }
    }
}
