//! Writing values as `torch.save` files (zip or legacy) that stock torch
//! loads with `torch.load(path, weights_only=True)`.
//!
//! Tensors are written as torch.save writes them:
//! `torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
//! requires_grad, OrderedDict())`, or `_rebuild_tensor_v3(..., dtype)` for
//! dtypes without a legacy storage class; Parameters wrap that in
//! `torch._utils._rebuild_parameter(tensor, requires_grad, OrderedDict())`.
//! Each storage is written once, however many tensors view it, so aliasing
//! survives the round trip.

use std::io::{self, Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustc_hash::FxHashMap;

use tensorshare_compat::pickle::{Node, NodeId, SharedBytes};
use tensorshare_compat::torch_save::{self, SavedStorage, TorchSaveFormat};
use tensorshare_strategies::bytes::file_window::FileWindow;

use crate::DType;
use crate::model::{Storage, Tensor, Value};
use crate::reduce::{LeafReducer, ReduceError, reduce_with};
use crate::registry::TypeReducers;
use tensorshare_compat::pickle::PickleBuilder;

/// Writes `value` as a `torch.save` file of `format`.
///
/// Every storage's bytes must be at hand: storages shared by another
/// process must be attached first (rebuild the value through a
/// [`SharingContext`](crate::SharingContext)).
///
/// # Errors
///
/// [`ReduceError::BytesElsewhere`] for a storage whose bytes are not at
/// hand, [`ReduceError::MixedDtypes`] for a storage viewed as two different
/// dtypes (torch refuses to save that too), another [`ReduceError`] for
/// values with no torch.save form; [`ReduceError::TorchSaveWrite`] when the
/// file cannot be written. [`torch_save::to_bytes`](crate::torch_save::to_bytes)
/// is this for embedders, with an example.
pub fn save_torch(value: &Value, format: TorchSaveFormat) -> Result<Vec<u8>, ReduceError> {
    let mut out = std::io::Cursor::new(Vec::new());
    write_torch(value, format, &mut out)?;
    Ok(out.into_inner())
}

/// Writes `value` as a `torch.save` file of `format` to `out`, storage by
/// storage from where each one's bytes are: nothing is built whole. The
/// pages of a storage read from a mapped file are given back once it is
/// written, so writing a mapped checkpoint out takes memory for the pickle
/// alone. Returns the storages written, in file order.
///
/// # Errors
///
/// As [`save_torch`].
pub(crate) fn write_torch<W: Write + Seek>(
    value: &Value,
    format: TorchSaveFormat,
    out: W,
) -> Result<Vec<Storage>, ReduceError> {
    let mut leaves = SaveLeaves::new(StorageForm::PersistentId(format));
    let mut builder = PickleBuilder::default();
    // torch.save files hold torch's types and plain values: the
    // embedder's own types are for messages to peers that know them.
    let root = reduce_with(value, &mut leaves, &TypeReducers::default(), &mut builder)?;
    let object = builder.finish(root);
    let saved: Vec<SavedStorage<'_>> = leaves
        .storages
        .iter()
        .map(|entry| SavedStorage::shared(&entry.key, entry.dtype, &entry.data))
        .collect();
    let mut release = |index: usize| {
        if let Some(window) = leaves.storages[index].storage.local_segment::<FileWindow>() {
            window.release_pages();
        }
    };
    match format {
        TorchSaveFormat::Zip => torch_save::write_zip_each(out, &object, &saved, &mut release)?,
        TorchSaveFormat::Legacy => {
            torch_save::write_legacy_each(out, &object, &saved, &mut release)?;
        }
    }
    Ok(leaves
        .storages
        .iter()
        .map(|entry| entry.storage.clone())
        .collect())
}

/// Refuses a storage written with the class of `written` viewed as
/// `viewed` (`None`: untyped), when the two classes differ.
fn same_class(written: Option<DType>, viewed: Option<DType>) -> Result<(), ReduceError> {
    let viewed = viewed.filter(|d| d.legacy_storage_class().is_some());
    if written == viewed {
        return Ok(());
    }
    let name = |d: Option<DType>| d.map_or("untyped", DType::name);
    Err(ReduceError::MixedDtypes {
        first: name(written),
        second: name(viewed),
    })
}

fn unreachable_data(storage: &Storage) -> ReduceError {
    ReduceError::BytesElsewhere {
        kind: storage.kind().name(),
        nbytes: storage.nbytes(),
    }
}

/// One storage written into the file.
struct SavedEntry {
    /// The storage.
    storage: Storage,
    /// Its bytes, which keep the storage alive.
    data: SharedBytes,
    /// The record key its persistent id names (`0`, `1`, ... as torch).
    key: String,
    /// The dtype it is first viewed as (`None`: untyped).
    dtype: Option<DType>,
    /// The dtype its persistent id's class names (`None`: untyped).
    class_dtype: Option<DType>,
    /// The persistent id node.
    pid: NodeId,
}

/// How a storage stands in the object pickle.
#[derive(Clone, Copy, Debug)]
pub(crate) enum StorageForm {
    /// A persistent id naming a record of a `torch.save` file.
    PersistentId(TorchSaveFormat),
}

/// The `torch.save` (and plain pickle) form of tensors and storages.
pub(crate) struct SaveLeaves {
    form: StorageForm,
    storages: Vec<SavedEntry>,
    by_identity: FxHashMap<usize, usize>,
}

impl SaveLeaves {
    pub(crate) fn new(form: StorageForm) -> Self {
        Self {
            form,
            storages: Vec::new(),
            by_identity: FxHashMap::default(),
        }
    }

    /// The persistent id standing for `storage` viewed as `dtype` (`None`:
    /// untyped), and the dtype its class names; dtypes without a legacy
    /// class are saved untyped.
    ///
    /// A storage is written once, as the dtype it is first seen as: the
    /// caller decides whether a view of another dtype can name it
    /// ([`same_class`]).
    fn pid(
        &mut self,
        storage: &Storage,
        dtype: Option<DType>,
        out: &mut PickleBuilder,
    ) -> Result<(NodeId, Option<DType>), ReduceError> {
        let class_dtype = dtype.filter(|d| d.legacy_storage_class().is_some());
        if let Some(&index) = self.by_identity.get(&storage.identity()) {
            let entry = &self.storages[index];
            return Ok((entry.pid, entry.class_dtype));
        }
        // Shared, so that a `_load_from_bytes` payload refers to the bytes
        // instead of copying them into the pickle.
        let data = storage
            .shared_bytes()
            .ok_or_else(|| unreachable_data(storage))?;
        let key = self.storages.len().to_string();
        let saved = SavedStorage::shared(&key, dtype, &data);
        let pid = match self.form {
            StorageForm::PersistentId(format) => {
                torch_save::push_storage_pid(out.pickle_mut(), format, &saved)?
            }
        };
        self.by_identity
            .insert(storage.identity(), self.storages.len());
        self.storages.push(SavedEntry {
            storage: storage.clone(),
            data,
            key,
            dtype,
            class_dtype,
            pid,
        });
        Ok((pid, class_dtype))
    }

    fn ordered_dict(out: &mut PickleBuilder) -> NodeId {
        let class = out.global("collections", "OrderedDict");
        out.call(class, Vec::new())
    }

    /// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
    /// OrderedDict())`, or `_v3` with the dtype appended when the storage's
    /// class does not name the tensor's dtype: a dtype without a legacy
    /// class, or a storage written as another view's dtype.
    fn plain_tensor(
        &mut self,
        t: &Tensor,
        requires_grad: bool,
        out: &mut PickleBuilder,
    ) -> Result<NodeId, ReduceError> {
        let dtype = t.dtype();
        let (pid, class_dtype) = self.pid(t.storage(), Some(dtype), out)?;
        // In a file a storage viewed as two dtypes is refused, as torch.save
        // refuses it. In a `_load_from_bytes` payload (a message) the views
        // of a dtype other than the storage's name their own with `_v3`, so
        // that a batch in one storage arrives as one.
        if matches!(self.form, StorageForm::PersistentId(_)) {
            same_class(class_dtype, Some(dtype))?;
        }
        let legacy = dtype.legacy_storage_class().is_some() && class_dtype == Some(dtype);
        let rebuild = out.global(
            "torch._utils",
            if legacy {
                "_rebuild_tensor_v2"
            } else {
                "_rebuild_tensor_v3"
            },
        );
        let offset = out.int(t.storage_offset());
        let sizes: Vec<NodeId> = t.sizes().iter().map(|&s| out.int(s)).collect();
        let sizes = out.tuple(sizes);
        let strides: Vec<NodeId> = t.strides().iter().map(|&s| out.int(s)).collect();
        let strides = out.tuple(strides);
        let requires_grad = out.push(Node::Bool(requires_grad));
        let hooks = Self::ordered_dict(out);
        let mut args = vec![pid, offset, sizes, strides, requires_grad, hooks];
        if !legacy {
            args.push(out.global("torch", dtype.name()));
        }
        Ok(out.call(rebuild, args))
    }
}

impl LeafReducer for SaveLeaves {
    type Error = ReduceError;

    fn tensor(&mut self, t: &Tensor, out: &mut PickleBuilder) -> Result<NodeId, ReduceError> {
        if !t.is_parameter() {
            return self.plain_tensor(t, t.requires_grad(), out);
        }
        // torch saves the data of a Parameter as a tensor that does not
        // require grad, and the flag on the Parameter.
        let data = self.plain_tensor(t, false, out)?;
        let rebuild = out.global("torch._utils", "_rebuild_parameter");
        let requires_grad = out.push(Node::Bool(t.requires_grad()));
        let hooks = Self::ordered_dict(out);
        Ok(out.call(rebuild, vec![data, requires_grad, hooks]))
    }

    fn storage(&mut self, s: &Storage, out: &mut PickleBuilder) -> Result<NodeId, ReduceError> {
        let (pid, class_dtype) = self.pid(s, None, out)?;
        same_class(class_dtype, None)?;
        Ok(pid)
    }

    fn typed_storage(
        &mut self,
        s: &Storage,
        dtype: DType,
        out: &mut PickleBuilder,
    ) -> Result<NodeId, ReduceError> {
        let (pid, class_dtype) = self.pid(s, Some(dtype), out)?;
        same_class(class_dtype, Some(dtype))?;
        Ok(pid)
    }
}

/// A file to write the new contents of `path` into, beside it and named
/// `.tensorshare-XXXXXX<suffix>`, with the permissions
/// [`File::create`](std::fs::File::create) gives (0666 less the umask;
/// tempfile's default is 0600). Persisted over `path` once whole, it
/// replaces an existing file at once, never truncating it under a process
/// that maps it; dropped, it is removed.
pub(crate) fn partial_file_beside(
    path: &Path,
    suffix: &str,
) -> io::Result<tempfile::NamedTempFile> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    tempfile::Builder::new()
        .prefix(".tensorshare-")
        .suffix(suffix)
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)
}

/// Whether any of `storages` was read from a mapped file that shrank
/// since: its lost bytes read as zeros, and what was written of it is not
/// the file's.
pub(crate) fn any_source_changed<'a>(storages: impl IntoIterator<Item = &'a Storage>) -> bool {
    storages.into_iter().any(|storage| {
        storage
            .local_segment::<FileWindow>()
            .is_some_and(FileWindow::was_truncated)
    })
}
