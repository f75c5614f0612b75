//! Rebuilders for torch's globals: `torch.multiprocessing.reductions`,
//! `torch._utils`, `torch.storage`, dtypes, `torch.Size` and the storage
//! classes, in the forms torch 1.13 to 2.15 write.

use std::sync::Arc;

use tensorshare_compat::pickle::Global;

use super::call::StorageKey;
use super::{Call, CallKind, RebuildError, Registry};
use crate::model::Custom;
use crate::model::{CudaRef, DupFdRef, Residence, SegmentRef};
use crate::model::{Storage, TensorView};
use crate::{DType, Tensor, Value};

/// The module of torch's sharing reducers and rebuilders.
pub(crate) const REDUCTIONS: &str = "torch.multiprocessing.reductions";
const UTILS: &str = "torch._utils";
/// The module and name of `multiprocessing.resource_sharer.DupFd`.
pub(crate) const DUP_FD: (&str, &str) = ("multiprocessing.resource_sharer", "DupFd");

pub(super) fn register(registry: &mut Registry) {
    for dtype in DType::ALL {
        registry.register_constant("torch", dtype.name(), Value::DType(dtype));
        if let Some(class) = dtype.legacy_storage_class() {
            registry.register_constant("torch", class, Value::Global(Global::new("torch", class)));
        }
    }
    for (module, name) in [
        ("torch", "Tensor"),
        ("torch._tensor", "Tensor"),
        ("torch.nn.parameter", "Parameter"),
        ("torch", "UntypedStorage"),
        ("torch.storage", "UntypedStorage"),
        ("torch.storage", "TypedStorage"),
        ("torch", "TypedStorage"),
    ] {
        registry.register_constant(module, name, Value::Global(Global::new(module, name)));
    }
    registry.register_rebuilder("torch", "Size", size);

    registry.register_rebuilder(REDUCTIONS, "rebuild_tensor", rebuild_tensor);
    registry.register_rebuilder(REDUCTIONS, "rebuild_typed_storage", rebuild_typed_storage);
    registry.register_rebuilder(
        REDUCTIONS,
        "rebuild_typed_storage_child",
        rebuild_typed_storage_child,
    );
    registry.register_rebuilder(REDUCTIONS, "rebuild_storage_fd", rebuild_storage_fd);
    registry.register_rebuilder(
        REDUCTIONS,
        "rebuild_storage_filename",
        rebuild_storage_filename,
    );
    registry.register_rebuilder(REDUCTIONS, "rebuild_storage_empty", rebuild_storage_empty);
    registry.register_rebuilder(REDUCTIONS, "rebuild_cuda_tensor", rebuild_cuda_tensor);
    registry.register_rebuilder(DUP_FD.0, DUP_FD.1, dup_fd);

    registry.register_rebuilder(UTILS, "_rebuild_tensor", rebuild_tensor_v1);
    registry.register_rebuilder(UTILS, "_rebuild_tensor_v2", rebuild_tensor_v2);
    registry.register_rebuilder(UTILS, "_rebuild_tensor_v3", rebuild_tensor_v3);
    registry.register_rebuilder(UTILS, "_rebuild_parameter", rebuild_parameter);
    registry.register_rebuilder(UTILS, "_rebuild_parameter_with_state", rebuild_parameter);
    registry.register_rebuilder(
        "torch.storage",
        "_load_from_bytes",
        super::saved::load_from_bytes,
    );
}

/// `torch.Size((2, 3))`.
fn size(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [Value::Tuple(dims)] | [Value::List(dims)] => {
            Ok(Value::Size(ints(&call, dims, "sizes")?.into()))
        }
        [] => Ok(Value::Size(Arc::new([]))),
        _ => Err(call.wrong_arguments("one tuple of ints")),
    }
}

/// `rebuild_tensor(cls, storage, (storage_offset, size, stride, requires_grad))`.
fn rebuild_tensor(call: Call<'_>) -> Result<Value, RebuildError> {
    let [cls, storage, Value::Tuple(metadata)] = call.reduce_args()? else {
        return Err(call.wrong_arguments("(cls, storage, (offset, size, stride, requires_grad))"));
    };
    let [offset, sizes, strides, requires_grad] = &metadata[..] else {
        return Err(call.wrong_arguments("metadata (offset, size, stride, requires_grad)"));
    };
    let parameter = match cls {
        Value::Global(g) if g.module == "torch.nn.parameter" && g.name == "Parameter" => true,
        Value::Global(g) if g.name == "Tensor" => false,
        _ => return Err(call.invalid("cls must be torch.Tensor or torch.nn.parameter.Parameter")),
    };
    let (storage, dtype) = typed_storage(&call, storage, None)?;
    let view = TensorView {
        dtype,
        storage_offset: int(&call, offset, "storage_offset")?,
        sizes: shape(&call, sizes, "size")?,
        strides: shape(&call, strides, "stride")?,
        requires_grad: boolean(&call, requires_grad, "requires_grad")?,
        parameter,
    };
    tensor(&call, storage, view)
}

/// `rebuild_typed_storage(untyped_storage, dtype)`.
fn rebuild_typed_storage(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [Value::Storage(storage), Value::DType(dtype)] => {
            Ok(Value::TypedStorage(storage.clone(), *dtype))
        }
        _ => Err(call.wrong_arguments("(UntypedStorage, dtype)")),
    }
}

/// `rebuild_typed_storage_child(untyped_storage, storage_type)`: a legacy class.
fn rebuild_typed_storage_child(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [Value::Storage(storage), Value::Global(class)] => {
            let dtype = legacy_class_dtype(&call, class)?;
            Ok(Value::TypedStorage(storage.clone(), dtype))
        }
        _ => Err(call.wrong_arguments("(UntypedStorage, legacy storage class)")),
    }
}

/// `DupFd()` with state `{'_id': (address, key)}`.
fn dup_fd(call: Call<'_>) -> Result<Value, RebuildError> {
    if call.kind != CallKind::NewObj || !call.args.is_empty() {
        return Err(call.invalid("expected DupFd.__new__(DupFd) with no arguments"));
    }
    let Some(Value::Dict(state)) = call.state else {
        return Err(call.invalid("expected the state {'_id': (address, key)}"));
    };
    let id = match &state[..] {
        [(Value::Str(k), id)] if &**k == "_id" => id,
        _ => return Err(call.invalid("state must be exactly {'_id': (address, key)}")),
    };
    let Some([address, key]) = id.as_sequence() else {
        return Err(call.invalid("_id must be (address, key)"));
    };
    let address = match address {
        Value::Str(path) => path.as_bytes().to_vec(),
        Value::Bytes(abstract_name) => abstract_name.to_vec(),
        _ => return Err(call.invalid("address must be a str path or bytes abstract name")),
    };
    let key = int(&call, key, "key")?;
    Ok(Value::Custom(Custom {
        global: call.callee.clone(),
        value: Arc::new(DupFdRef { address, key }),
    }))
}

/// `rebuild_storage_fd(cls, DupFd, size)`.
fn rebuild_storage_fd(call: Call<'_>) -> Result<Value, RebuildError> {
    let [cls, Value::Custom(df), size] = call.reduce_args()? else {
        return Err(call.wrong_arguments("(cls, DupFd, size)"));
    };
    let Some(dup_fd) = df.value.downcast_ref::<DupFdRef>() else {
        return Err(call.invalid("second argument must be a multiprocessing.resource_sharer.DupFd"));
    };
    let size = int(&call, size, "size")?;
    // The class and size are checked before anything is fetched, and a
    // legacy class counts elements whether or not the fd is attached.
    storage_of_class(&call, cls, size, |nbytes| {
        let remote = Residence::FileDescriptor(dup_fd.clone());
        Ok(call.named_storage(remote, nbytes, || None))
    })
}

/// `rebuild_storage_filename(cls, manager_handle, handle, size[, dtype])`.
fn rebuild_storage_filename(call: Call<'_>) -> Result<Value, RebuildError> {
    let (cls, manager, name, size, dtype) = match call.reduce_args()? {
        [cls, Value::Bytes(m), Value::Bytes(n), size] => (cls, m, n, size, None),
        [cls, Value::Bytes(m), Value::Bytes(n), size, Value::DType(d)] => {
            (cls, m, n, size, Some(*d))
        }
        _ => {
            return Err(
                call.wrong_arguments("(cls, manager_handle: bytes, handle: bytes, size[, dtype])")
            );
        }
    };
    let segment = SegmentRef {
        manager_handle: manager.to_vec(),
        name: name.to_vec(),
    };
    let size = int(&call, size, "size")?;
    // Every call takes back the count its sender added for it.
    let make = |nbytes| {
        let remote = Residence::FileSystem(segment.clone());
        let key = || Some(StorageKey::Segment(name.to_vec()));
        Ok(call.named_storage(remote, nbytes, key))
    };
    match dtype {
        // With a dtype, torch 2.x counts elements and wraps a TypedStorage.
        Some(dtype) => {
            let nbytes = element_bytes(&call, size, dtype)?;
            Ok(Value::TypedStorage(make(nbytes)?, dtype))
        }
        None => storage_of_class(&call, cls, size, make),
    }
}

/// `rebuild_storage_empty(cls)`.
fn rebuild_storage_empty(call: Call<'_>) -> Result<Value, RebuildError> {
    let [cls] = call.reduce_args()? else {
        return Err(call.wrong_arguments("(cls,)"));
    };
    storage_of_class(&call, cls, 0, |_| Ok(Storage::from_vec(Vec::new())))
}

/// The 15 arguments of `rebuild_cuda_tensor`, decoded into a tensor whose
/// storage stays on the GPU.
fn rebuild_cuda_tensor(call: Call<'_>) -> Result<Value, RebuildError> {
    let [
        cls,
        sizes,
        strides,
        offset,
        _storage_cls,
        Value::DType(dtype),
        device,
        handle,
        storage_size_bytes,
        storage_offset_bytes,
        requires_grad,
        ref_counter_handle,
        ref_counter_offset,
        event_handle,
        event_sync_required,
    ] = call.reduce_args()?
    else {
        return Err(call.wrong_arguments("the 15 arguments of rebuild_cuda_tensor"));
    };
    let bytes = |v: &Value, what: &str| match v {
        Value::Bytes(b) => Ok(b.to_vec()),
        _ => Err(call.invalid(format!("{what} must be bytes"))),
    };
    let cuda = CudaRef {
        device: int(&call, device, "storage_device")?,
        handle: bytes(handle, "storage_handle")?,
        storage_offset_bytes: int(&call, storage_offset_bytes, "storage_offset_bytes")?,
        ref_counter_handle: bytes(ref_counter_handle, "ref_counter_handle")?,
        ref_counter_offset: int(&call, ref_counter_offset, "ref_counter_offset")?,
        event_handle: match event_handle {
            Value::None => None,
            other => Some(bytes(other, "event_handle")?),
        },
        event_sync_required: boolean(&call, event_sync_required, "event_sync_required")?,
    };
    let nbytes = usize::try_from(int(&call, storage_size_bytes, "storage_size_bytes")?)
        .map_err(|_| call.invalid("negative storage_size_bytes"))?;
    let parameter = matches!(cls, Value::Global(g) if g.name == "Parameter");
    let view = TensorView {
        dtype: *dtype,
        storage_offset: int(&call, offset, "tensor_offset")?,
        sizes: shape(&call, sizes, "tensor_size")?,
        strides: shape(&call, strides, "tensor_stride")?,
        requires_grad: boolean(&call, requires_grad, "requires_grad")?,
        parameter,
    };
    tensor(&call, Storage::remote(Residence::Cuda(cuda), nbytes), view)
}

/// `_rebuild_tensor(storage, storage_offset, size, stride)` (torch < 1.0 era files).
fn rebuild_tensor_v1(call: Call<'_>) -> Result<Value, RebuildError> {
    let [storage, offset, sizes, strides] = call.reduce_args()? else {
        return Err(call.wrong_arguments("(storage, storage_offset, size, stride)"));
    };
    rebuild_plain_tensor(
        &call,
        storage,
        offset,
        sizes,
        strides,
        &Value::Bool(false),
        None,
    )
}

/// `_rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])`.
fn rebuild_tensor_v2(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [storage, offset, sizes, strides, requires_grad, _hooks]
        | [storage, offset, sizes, strides, requires_grad, _hooks, _] => {
            rebuild_plain_tensor(&call, storage, offset, sizes, strides, requires_grad, None)
        }
        _ => Err(call.wrong_arguments(
            "(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])",
        )),
    }
}

/// `_rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])`.
fn rebuild_tensor_v3(call: Call<'_>) -> Result<Value, RebuildError> {
    match call.reduce_args()? {
        [storage, offset, sizes, strides, requires_grad, _hooks, Value::DType(dtype)]
        | [storage, offset, sizes, strides, requires_grad, _hooks, Value::DType(dtype), _] => {
            rebuild_plain_tensor(&call, storage, offset, sizes, strides, requires_grad, Some(*dtype))
        }
        _ => Err(call.wrong_arguments(
            "(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype[, metadata])",
        )),
    }
}

fn rebuild_plain_tensor(
    call: &Call<'_>,
    storage: &Value,
    offset: &Value,
    sizes: &Value,
    strides: &Value,
    requires_grad: &Value,
    dtype: Option<DType>,
) -> Result<Value, RebuildError> {
    let (storage, dtype) = typed_storage(call, storage, dtype)?;
    let view = TensorView {
        dtype,
        storage_offset: int(call, offset, "storage_offset")?,
        sizes: shape(call, sizes, "size")?,
        strides: shape(call, strides, "stride")?,
        requires_grad: boolean(call, requires_grad, "requires_grad")?,
        parameter: false,
    };
    tensor(call, storage, view)
}

/// `_rebuild_parameter(data, requires_grad, backward_hooks)` and
/// `_rebuild_parameter_with_state(data, requires_grad, backward_hooks, state)`.
fn rebuild_parameter(call: Call<'_>) -> Result<Value, RebuildError> {
    let (data, requires_grad) = match call.reduce_args()? {
        [Value::Tensor(data), requires_grad, _hooks] => (data, requires_grad),
        [Value::Tensor(data), requires_grad, _hooks, _state] => (data, requires_grad),
        _ => return Err(call.wrong_arguments("(tensor, requires_grad, backward_hooks[, state])")),
    };
    let mut view = data.view();
    view.requires_grad = boolean(&call, requires_grad, "requires_grad")?;
    view.parameter = true;
    tensor(&call, data.storage().clone(), view)
}

fn tensor(call: &Call<'_>, storage: Storage, view: TensorView) -> Result<Value, RebuildError> {
    Tensor::new(storage, view)
        .map(Value::Tensor)
        .map_err(|source| RebuildError::View {
            callee: call.callee.clone(),
            cause: source,
        })
}

/// A storage argument and its dtype: typed storages carry one, untyped ones
/// need it from elsewhere (`_rebuild_tensor_v3`).
fn typed_storage(
    call: &Call<'_>,
    value: &Value,
    dtype: Option<DType>,
) -> Result<(Storage, DType), RebuildError> {
    match (value, dtype) {
        (Value::TypedStorage(storage, own), explicit) => {
            Ok((storage.clone(), explicit.unwrap_or(*own)))
        }
        (Value::Storage(storage), Some(dtype)) => Ok((storage.clone(), dtype)),
        (Value::Storage(_), None) => Err(call.invalid("untyped storage without a dtype")),
        (other, _) => Err(call.invalid(format!("expected a storage, got {}", other.type_name()))),
    }
}

/// Builds the storage a rebuilder returns for `cls`: `UntypedStorage` counts
/// bytes; legacy typed classes (torch 1.x) count elements and return a typed
/// storage.
fn storage_of_class(
    call: &Call<'_>,
    cls: &Value,
    size: i64,
    make: impl FnOnce(usize) -> Result<Storage, RebuildError>,
) -> Result<Value, RebuildError> {
    let Value::Global(class) = cls else {
        return Err(call.invalid(format!(
            "cls must be a storage class, got {}",
            cls.type_name()
        )));
    };
    if class.name == "UntypedStorage" {
        let nbytes =
            usize::try_from(size).map_err(|_| call.invalid(format!("negative size {size}")))?;
        return Ok(Value::Storage(make(nbytes)?));
    }
    let dtype = legacy_class_dtype(call, class)?;
    Ok(Value::TypedStorage(
        make(element_bytes(call, size, dtype)?)?,
        dtype,
    ))
}

fn legacy_class_dtype(call: &Call<'_>, class: &Global) -> Result<DType, RebuildError> {
    DType::from_legacy_storage_class(&class.name)
        .filter(|_| class.module == "torch")
        .ok_or_else(|| call.invalid(format!("{class} is not a storage class")))
}

fn element_bytes(call: &Call<'_>, count: i64, dtype: DType) -> Result<usize, RebuildError> {
    usize::try_from(count)
        .ok()
        .and_then(|n| n.checked_mul(dtype.element_size()))
        .ok_or_else(|| call.invalid(format!("invalid element count {count}")))
}

fn int(call: &Call<'_>, value: &Value, what: &str) -> Result<i64, RebuildError> {
    match value {
        Value::Int(i) => Ok(*i),
        other => Err(call.invalid(format!("{what} must be an int, got {}", other.type_name()))),
    }
}

fn boolean(call: &Call<'_>, value: &Value, what: &str) -> Result<bool, RebuildError> {
    match value {
        Value::Bool(b) => Ok(*b),
        other => Err(call.invalid(format!("{what} must be a bool, got {}", other.type_name()))),
    }
}

fn ints(call: &Call<'_>, values: &[Value], what: &str) -> Result<Vec<i64>, RebuildError> {
    values.iter().map(|v| int(call, v, what)).collect()
}

fn shape(call: &Call<'_>, value: &Value, what: &str) -> Result<Vec<i64>, RebuildError> {
    match value {
        Value::Size(dims) => Ok(dims.to_vec()),
        Value::Tuple(items) | Value::List(items) => ints(call, items, what),
        other => Err(call.invalid(format!(
            "{what} must be a tuple of ints, got {}",
            other.type_name()
        ))),
    }
}
