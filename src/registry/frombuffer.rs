//! Rebuilding the `bytes` strategy's storage form, which stock torch (2.0
//! and later) rebuilds with one copy of the payload:
//!
//! ```text
//! torch.Tensor.untyped_storage(
//!     functools.partial(torch.frombuffer, dtype=torch.uint8)(bytearray(payload)))
//! ```
//!
//! `pickle.loads` copies a protocol 5 `BYTEARRAY8` payload once, from the
//! message into a new `bytearray`; `torch.frombuffer` makes a `uint8` tensor
//! over that `bytearray` without copying, and `untyped_storage` is its
//! storage, writable, which the message's `rebuild_typed_storage` and
//! `rebuild_tensor` then view. `torch.frombuffer` takes its dtype only as a
//! keyword, which a `REDUCE` cannot pass: `functools.partial` carries it, in
//! the state `pickle` gives a partial (`(func, args, kwargs, dict)`).
//!
//! Each of the three globals is allowed for exactly that use:
//! `functools.partial` only of `torch.frombuffer` with `dtype=torch.uint8`
//! and nothing else, its result only called with one non-empty
//! `bytearray`, and `torch.Tensor.untyped_storage` only of the tensor such a
//! call made. Anything else is a rebuild error naming the global.

use tensorshare_compat::pickle::Global;

use super::call::StorageKey;
use super::{Call, RebuildError, Registry};
use crate::DType;
use crate::model::SharedBytes;
use crate::model::{CallKind, Callable, Storage, Tensor, TensorView, Value};

/// The class that carries `torch.frombuffer`'s keyword argument.
pub(crate) const PARTIAL: (&str, &str) = ("functools", "partial");
/// The function that makes a tensor over a buffer without copying it.
pub(crate) const FROMBUFFER: (&str, &str) = ("torch", "frombuffer");
/// The method that gives that tensor's storage, named through its class
/// (protocol 4 and up resolve dotted names).
pub(crate) const UNTYPED_STORAGE: (&str, &str) = ("torch", "Tensor.untyped_storage");
/// The one keyword argument the partial carries.
pub(crate) const DTYPE_KEYWORD: &str = "dtype";

const ONLY_PARTIAL: &str = "only functools.partial(torch.frombuffer, dtype=torch.uint8) is allowed";

/// Allows the three globals of the form, each for exactly its use.
pub(super) fn register(registry: &mut Registry) {
    registry.register_constant(
        FROMBUFFER.0,
        FROMBUFFER.1,
        Value::Global(Global::new(FROMBUFFER.0, FROMBUFFER.1)),
    );
    registry.register_rebuilder(PARTIAL.0, PARTIAL.1, partial_frombuffer);
    registry.register_rebuilder(UNTYPED_STORAGE.0, UNTYPED_STORAGE.1, untyped_storage);
}

fn is_frombuffer(value: &Value) -> bool {
    matches!(value, Value::Global(g) if g.module == FROMBUFFER.0 && g.name == FROMBUFFER.1)
}

fn has_items(call: &Call<'_>) -> bool {
    !call.kwargs.is_empty() || !call.list_items.is_empty() || !call.dict_items.is_empty()
}

/// `functools.partial(torch.frombuffer)` with the state
/// `(torch.frombuffer, (), {'dtype': torch.uint8}, None)`, and nothing else.
fn partial_frombuffer(call: Call<'_>) -> Result<Value, RebuildError> {
    if call.kind != CallKind::Reduce || has_items(&call) {
        return Err(call.invalid(ONLY_PARTIAL));
    }
    let [function] = call.args else {
        return Err(call.invalid(format!(
            "{ONLY_PARTIAL}: expected 1 argument, got {}",
            call.args.len()
        )));
    };
    if !is_frombuffer(function) {
        return Err(call.invalid(format!(
            "{ONLY_PARTIAL}, not a partial of {}",
            describe(function)
        )));
    }
    let Some(Value::Tuple(state)) = call.state else {
        return Err(call.invalid(format!(
            "{ONLY_PARTIAL}: expected the state (torch.frombuffer, (), {{'dtype': torch.uint8}}, None)"
        )));
    };
    let keywords_right = |kwargs: &[(Value, Value)]| matches!(kwargs, [(Value::Str(key), Value::DType(DType::UInt8))] if &**key == DTYPE_KEYWORD);
    match &state[..] {
        [
            function,
            Value::Tuple(args),
            Value::Dict(kwargs),
            Value::None,
        ] if is_frombuffer(function) && args.is_empty() && keywords_right(kwargs) => {
            Ok(Value::Callable(Callable::new(
                Global::new(FROMBUFFER.0, "frombuffer(dtype=torch.uint8)"),
                frombuffer_uint8,
            )))
        }
        _ => Err(call.invalid(format!(
            "{ONLY_PARTIAL}: its state must be (torch.frombuffer, (), {{'dtype': torch.uint8}}, \
             None), got {}",
            Value::Tuple(state.clone()).type_name()
        ))),
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Global(g) => g.to_string(),
        Value::Callable(c) => c.name().to_string(),
        other => format!("a {}", other.type_name()),
    }
}

/// `torch.frombuffer(bytearray, dtype=torch.uint8)`: a `uint8` tensor over
/// the buffer's bytes, which become its storage; one `bytearray` named
/// twice is one storage, as in torch.
fn frombuffer_uint8(call: Call<'_>) -> Result<Value, RebuildError> {
    let [Value::ByteArray(bytes)] = call.reduce_args()? else {
        return Err(call.wrong_arguments("(bytearray,): one storage's bytes"));
    };
    if bytes.is_empty() {
        return Err(call.invalid(
            "an empty bytearray, which torch.frombuffer refuses; an empty storage is \
             rebuild_storage_empty(torch.storage.UntypedStorage)",
        ));
    }
    let storage = buffer_storage(&call, bytes)?;
    let nbytes = i64::try_from(bytes.len())
        .map_err(|_| call.invalid(format!("a bytearray of {} bytes", bytes.len())))?;
    let view = TensorView {
        dtype: DType::UInt8,
        storage_offset: 0,
        sizes: vec![nbytes],
        strides: vec![1],
        requires_grad: false,
        parameter: false,
    };
    let tensor = Tensor::new(storage.clone(), view).map_err(|cause| RebuildError::View {
        callee: call.callee.clone(),
        cause,
    })?;
    call.storages
        .borrow_mut()
        .insert(StorageKey::BufferTensor(tensor.identity()), storage);
    Ok(Value::Tensor(tensor))
}

/// The storage of `bytes` in this message: made once, with one copy out of
/// the message at most (none when the storage is most of a large message,
/// which it then keeps).
fn buffer_storage(call: &Call<'_>, bytes: &SharedBytes) -> Result<Storage, RebuildError> {
    let key = StorageKey::Buffer {
        address: bytes.as_ptr() as usize,
        len: bytes.len(),
    };
    if let Some(storage) = call.storages.borrow().get(&key) {
        return Ok(storage.clone());
    }
    let storage = Storage::from_shared_bytes(bytes.clone()).map_err(|error| {
        call.invalid(format!(
            "cannot hold a storage of {} bytes: {error}",
            bytes.len()
        ))
    })?;
    call.storages.borrow_mut().insert(key, storage.clone());
    Ok(storage)
}

/// `torch.Tensor.untyped_storage(t)`, for `t` made by the partial above in
/// this message, and nothing else.
fn untyped_storage(call: Call<'_>) -> Result<Value, RebuildError> {
    let expected = "(the tensor functools.partial(torch.frombuffer, dtype=torch.uint8) made,)";
    let [Value::Tensor(tensor)] = call.reduce_args()? else {
        return Err(call.wrong_arguments(expected));
    };
    let made_from_buffer = call
        .storages
        .borrow()
        .get(&StorageKey::BufferTensor(tensor.identity()))
        .is_some_and(|storage| storage.same_as(tensor.storage()));
    if !made_from_buffer {
        return Err(call.invalid(format!(
            "only the storage of a tensor torch.frombuffer made in this message is taken, \
             expected {expected}"
        )));
    }
    Ok(Value::Storage(tensor.storage().clone()))
}
