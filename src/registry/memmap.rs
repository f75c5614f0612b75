//! Rebuilding the `memmap` strategy's form, which stock torch rebuilds by
//! itself:
//!
//! ```text
//! builtins.getattr(torch._C.StorageBase, 'from_file')(path, True, nbytes)
//! ```
//!
//! is what `pickle` writes for `torch.UntypedStorage.from_file(path,
//! shared=True, nbytes=nbytes)`. `builtins.getattr` is allowed for exactly
//! that call, and the file is attached by the sharing layer, which accepts
//! it only from its own memmap directory.

use std::path::PathBuf;

use tensorshare_compat::pickle::Global;

use super::call::StorageKey;
use super::{Call, RebuildError, Registry};
use crate::model::{CallKind, Callable, MemmapRef, Residence, Value};

/// The module and name of the function a memmap message calls, as `pickle`
/// writes `torch.UntypedStorage.from_file` (protocol 3 and up).
pub(crate) const GETATTR: (&str, &str) = ("builtins", "getattr");
/// The class whose `from_file` the message looks up, as `pickle` names it.
pub(crate) const STORAGE_BASE: (&str, &str) = ("torch._C", "StorageBase");
/// The attribute looked up.
pub(crate) const FROM_FILE: &str = "from_file";

/// Allows `builtins.getattr` (which the decoder also reads from protocol 2's
/// `__builtin__.getattr`) for
/// exactly one call: `getattr(cls, 'from_file')` with `cls` one of
/// `torch._C.StorageBase`, `torch.storage.UntypedStorage` or
/// `torch.UntypedStorage`; the result may only be called as
/// `(path: str, True, nbytes: int)`. Anything else is a rebuild error naming
/// `builtins.getattr` or `torch._C.StorageBase.from_file`.
pub(super) fn register(registry: &mut Registry) {
    registry.register_constant(
        STORAGE_BASE.0,
        STORAGE_BASE.1,
        Value::Global(Global::new(STORAGE_BASE.0, STORAGE_BASE.1)),
    );
    registry.register_rebuilder(GETATTR.0, GETATTR.1, getattr_from_file);
}

/// `getattr(torch._C.StorageBase, 'from_file')`, and nothing else.
fn getattr_from_file(call: Call<'_>) -> Result<Value, RebuildError> {
    let only = "only getattr(torch._C.StorageBase, 'from_file') is allowed";
    if call.kind != CallKind::Reduce || call.state.is_some() || has_items(&call) {
        return Err(call.invalid(only));
    }
    let [Value::Global(class), Value::Str(attribute)] = call.args else {
        return Err(call.invalid(only));
    };
    let storage_class = matches!(
        (&*class.module, &*class.name),
        ("torch._C", "StorageBase") | ("torch.storage" | "torch", "UntypedStorage")
    );
    if !storage_class || &**attribute != FROM_FILE {
        return Err(call.invalid(format!("{only}, not getattr({class}, {attribute:?})")));
    }
    Ok(Value::Callable(Callable::new(
        Global::new(STORAGE_BASE.0, "StorageBase.from_file"),
        from_file,
    )))
}

fn has_items(call: &Call<'_>) -> bool {
    !call.kwargs.is_empty() || !call.list_items.is_empty() || !call.dict_items.is_empty()
}

/// `StorageBase.from_file(path, True, nbytes)`: a shared file mapping.
fn from_file(call: Call<'_>) -> Result<Value, RebuildError> {
    let expected = "(path: str, True, nbytes: int): a shared mapping of a file";
    if call.kind != CallKind::Reduce || call.state.is_some() || has_items(&call) {
        return Err(call.wrong_arguments(expected));
    }
    let [Value::Str(path), Value::Bool(true), Value::Int(nbytes)] = call.args else {
        return Err(call.wrong_arguments(expected));
    };
    let nbytes =
        usize::try_from(*nbytes).map_err(|_| call.invalid(format!("negative nbytes {nbytes}")))?;
    let remote = Residence::Memmap(MemmapRef {
        path: PathBuf::from(&**path),
    });
    let key = || Some(StorageKey::File(path.to_string()));
    Ok(Value::Storage(call.named_storage(remote, nbytes, key)))
}
