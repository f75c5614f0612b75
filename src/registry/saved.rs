//! `torch.save` archives rebuilt through the registry: the payload of
//! `torch.storage._load_from_bytes` inside plain pickles (what
//! `pickle.dumps(tensor)` writes), and the object of whole `.pt` files
//! ([`torch_save::load`](crate::torch_save::load)).

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tensorshare_compat::pickle::{Global, SharedBytes};
use tensorshare_compat::torch_save::{
    self, ReadOptions, StorageRecord, TorchSaveArchive, TorchSaveFormat,
};
use tensorshare_strategies::Segment;
use tensorshare_strategies::bytes::file_window::FileWindow;
use tensorshare_strategies::platform::mapped_file::MappedFile;

use super::attach::NamedStorage;
use super::rebuild::{PersistentLoad, Walker};
use super::{Call, LoadError, RebuildError, Registry};
use crate::DType;
use crate::model::{Storage, Value};

/// How `registry` reads archives.
pub(crate) fn read_options(registry: &Registry) -> ReadOptions {
    ReadOptions {
        limits: registry.options().limits,
        max_total_bytes: registry.options().max_archive_bytes,
        ..ReadOptions::default()
    }
}

/// Rebuilds the object of `archive`, itself inside `archive_depth` others.
/// Records that lie in `mapped` (the file the archive was read from) stay
/// there: their storages are windows of the mapping. Shared storages the
/// object names are listed in `named`, when it is part of a received
/// message, to be attached with the message's own.
pub(crate) fn rebuild_archive(
    archive: TorchSaveArchive,
    registry: &Registry,
    archive_depth: usize,
    mapped: Option<&Arc<MappedFile>>,
    named: Option<&RefCell<Vec<NamedStorage>>>,
) -> Result<(TorchSaveFormat, Value), LoadError> {
    let TorchSaveArchive {
        format,
        object,
        records,
        ..
    } = archive;
    let storages = ArchiveStorages {
        records: RefCell::new(records),
        loaded: RefCell::new(HashMap::new()),
        mapped,
    };
    let value = Walker::new(registry, &object, Some(&storages))
        .in_archive(archive_depth + 1)
        .naming_into(named)
        .run()?;
    Ok((format, value))
}

/// `torch.storage._load_from_bytes(b)`: a storage pickled as an embedded
/// `torch.save` stream (what plain `pickle.dumps(tensor)` produces).
pub(super) fn load_from_bytes(call: Call<'_>) -> Result<Value, RebuildError> {
    let [Value::Bytes(payload)] = call.reduce_args()? else {
        return Err(call.wrong_arguments("(bytes,)"));
    };
    if call.archive_depth > 0 {
        return Err(call.invalid(
            "an embedded torch.save archive inside another one; torch never writes that",
        ));
    }
    // Read from the message's own buffer: each storage's bytes are copied
    // once, from the message into the storage.
    let (_, value) = torch_save::read_shared(payload, call.registry, &read_options(call.registry))
        .map_err(LoadError::from)
        .and_then(|archive| {
            rebuild_archive(archive, call.registry, call.archive_depth, None, call.named)
        })
        .map_err(|source| RebuildError::Archive {
            callee: call.callee.clone(),
            cause: Box::new(source),
        })?;
    match value {
        Value::Storage(_) | Value::TypedStorage(..) => Ok(value),
        other => Err(call.invalid(format!(
            "payload holds a {}, not a storage",
            other.type_name()
        ))),
    }
}

/// Resolves `('storage', cls, key, location, numel, ...)` persistent ids to
/// the archive's records, one [`Storage`] per key so views share it. A
/// record's bytes move into its storage, uncopied, the first time its key
/// is loaded.
///
/// Every location reads as CPU bytes, as `torch.load(map_location="cpu")`
/// reads it: most checkpoints were saved from a GPU, and the file holds the
/// bytes whatever device they came from. The storage keeps the location for
/// display ([`Storage::saved_location`]).
struct ArchiveStorages<'a> {
    records: RefCell<BTreeMap<String, StorageRecord>>,
    loaded: RefCell<HashMap<String, Storage>>,
    mapped: Option<&'a Arc<MappedFile>>,
}

/// `data` as a window of `mapped`, when it lies there; `None` for bytes
/// elsewhere (a decompressed record), which are copied. A record at any
/// address stays in place, a legacy stream's too: only a typed view of its
/// elements needs them aligned, and copies them then
/// ([`FileWindow::aligned_bytes`]).
fn window_of(data: &SharedBytes, mapped: &Arc<MappedFile>) -> Option<Arc<dyn Segment>> {
    if data.is_empty() {
        return None;
    }
    let window = FileWindow::new(Arc::clone(mapped), range_in(data, mapped)?)?;
    Some(Arc::new(window))
}

/// Where `data` lies in `mapped`, when it lies there.
fn range_in(data: &SharedBytes, mapped: &MappedFile) -> Option<std::ops::Range<usize>> {
    let start = (data.as_ptr() as usize).checked_sub(mapped.as_bytes().as_ptr() as usize)?;
    let end = start.checked_add(data.len())?;
    (end <= mapped.len()).then_some(start..end)
}

impl PersistentLoad for ArchiveStorages<'_> {
    fn load(&self, pid: &Value) -> Result<Value, RebuildError> {
        let invalid = |message: String| RebuildError::Invalid {
            callee: Global::new("torch.serialization", "persistent_load"),
            message,
        };
        let Some(
            [
                Value::Str(tag),
                cls,
                Value::Str(key),
                Value::Str(location),
                _numel,
                ..,
            ],
        ) = pid.as_sequence()
        else {
            return Err(invalid(
                "persistent id is not ('storage', cls, key, location, numel)".into(),
            ));
        };
        if &**tag != "storage" {
            return Err(invalid(format!("unknown persistent id kind '{tag}'")));
        }
        let mut records = self.records.borrow_mut();
        let record = records
            .get_mut(&**key)
            .ok_or_else(|| invalid(format!("storage '{key}' has no record in the archive")))?;
        let mut loaded = self.loaded.borrow_mut();
        let storage = match loaded.get(&**key) {
            Some(storage) => storage.clone(),
            None => {
                let data = std::mem::take(&mut record.data);
                let nbytes = data.len();
                let storage = match self.mapped.and_then(|mapped| window_of(&data, mapped)) {
                    Some(window) => Storage::from_saved_segment(window, location.clone()),
                    None => Storage::from_saved_bytes(data, location.clone()).map_err(|error| {
                        invalid(format!("storage '{key}' of {nbytes} bytes: {error}"))
                    })?,
                };
                loaded.insert(key.to_string(), storage.clone());
                storage
            }
        };
        drop(loaded);
        let dtype = match cls {
            Value::Global(class) if class.name == "UntypedStorage" => None,
            Value::Global(class) => Some(
                DType::from_legacy_storage_class(&class.name).ok_or_else(|| {
                    invalid(format!(
                        "storage '{key}' has class {class}, which is not a storage class"
                    ))
                })?,
            ),
            other => return Err(invalid(format!("storage class is a {}", other.type_name()))),
        };
        Ok(match dtype.or(record.dtype) {
            Some(dtype) => Value::TypedStorage(storage, dtype),
            None => Value::Storage(storage),
        })
    }
}
