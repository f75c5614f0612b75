//! Readers and writers for `torch.save` files: the zip format torch writes by default and
//! the legacy stream (`_use_new_zipfile_serialization=False`, and the payload
//! of `torch.storage._load_from_bytes` inside plain pickles).
//!
//! Both formats pickle the saved object with every storage replaced by a
//! persistent id, `('storage', <class>, key, location, numel[, view])`, and
//! keep the storage bytes beside the pickle under that key. A reader returns
//! the decoded object pickle, untouched, and the storage records by key; the
//! caller rebuilds tensors from the pickle, resolving each
//! [`Node::PersistentId`] through [`TorchSaveArchive::storage`].
//!
//! The storage class says how `numel` counts: a legacy typed class such as
//! `torch.FloatStorage` counts elements of its dtype; dtypes without one
//! (`uint16`, `uint32`, `uint64`, `complex32`, the float8 and float4 types)
//! are written by torch 2.x as `torch.storage.UntypedStorage`, counting
//! bytes, with the dtype as the last argument of
//! `torch._utils._rebuild_tensor_v3`.
//!
//! # Examples
//!
//! ```no_run
//! use tensorshare_compat::torch_save::{self, ReadOptions};
//!
//! let bytes = std::fs::read("model.pt").unwrap();
//! // Only what the object pickle may name; storage classes are added.
//! let globals = |module: &str, name: &str| {
//!     matches!((module, name), ("torch._utils", "_rebuild_tensor_v2") | ("collections", "OrderedDict"))
//! };
//! let archive = torch_save::read(&bytes, &globals, &ReadOptions::default()).unwrap();
//! for (key, record) in &archive.records {
//!     println!("{key}: {} x {:?}, {} bytes", record.numel, record.dtype, record.data.len());
//! }
//! ```

mod error;
mod legacy;
mod persistent_id;
mod writer;
mod zip_reader;

use std::collections::{BTreeMap, HashSet};

pub use error::{StreamPart, TorchSaveError};
pub use legacy::read_legacy;
pub use persistent_id::{
    PersistentIdError, StoragePid, StorageView, is_storage_class_global, parse_storage_pid,
};
pub use writer::{
    SavedStorage, TORCH_SAVE_PICKLE_PROTOCOL, WriteError, ZIP_ARCHIVE_DIR, legacy_stream_chunks,
    push_storage_pid, write_legacy, write_legacy_each, write_to_vec, write_zip, write_zip_each,
};
pub use zip_reader::{read_zip, read_zip_shared};

use crate::dtype::DType;
use crate::pickle::{
    DecodeError, DecodeErrorCode, Global, GlobalFilter, Limits, Node, NodeId, Pickle, SharedBytes,
};

/// Which of torch.save's two formats a file is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TorchSaveFormat {
    /// A zip archive of `<dir>/data.pkl` and `<dir>/data/<key>` records
    /// (torch >= 1.6 default).
    Zip,
    /// A stream of pickles followed by raw storage bytes.
    Legacy,
}

/// One storage's bytes, with what its persistent id says about them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRecord {
    /// The key the persistent ids name it by.
    pub key: String,
    /// The storage class global, e.g. `torch.FloatStorage`.
    pub storage_class: Global,
    /// The dtype of the elements; `None` for `UntypedStorage`, whose
    /// elements are bytes (the tensor's dtype is then the last argument of
    /// `torch._utils._rebuild_tensor_v3`).
    pub dtype: Option<DType>,
    /// The device the storage was saved from, e.g. `cpu`.
    pub location: String,
    /// Elements of [`dtype`](Self::dtype) (bytes for `UntypedStorage`).
    pub numel: u64,
    /// The little-endian bytes: exactly `numel × element_size()` of them.
    /// Read by [`read_shared`] from a legacy stream, a slice of its buffer.
    pub data: SharedBytes,
}

impl StorageRecord {
    /// Bytes per element: the dtype's size, or 1 for `UntypedStorage`.
    pub fn element_size(&self) -> usize {
        self.dtype.map_or(1, DType::element_size)
    }

    fn from_pid(pid: StoragePid, data: SharedBytes) -> Self {
        Self {
            key: pid.key,
            storage_class: pid.storage_class,
            dtype: pid.dtype,
            location: pid.location,
            numel: pid.numel,
            data,
        }
    }
}

/// A decoded torch.save file.
#[derive(Clone, Debug, PartialEq)]
pub struct TorchSaveArchive {
    /// The format it was read from.
    pub format: TorchSaveFormat,
    /// The saved object, with storages as [`Node::PersistentId`] nodes.
    pub object: Pickle,
    /// Every storage the object references, by key.
    pub records: BTreeMap<String, StorageRecord>,
    /// The legacy stream's `sys_info` dict (`protocol_version`,
    /// `little_endian`, `type_sizes`); `None` for zip files.
    pub sys_info: Option<Pickle>,
}

/// The bytes one persistent id refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRef<'a> {
    /// The parsed persistent id.
    pub pid: StoragePid,
    /// The record of the root storage.
    pub record: &'a StorageRecord,
    /// The bytes the persistent id covers: the whole record, or the view.
    pub bytes: &'a [u8],
}

impl TorchSaveArchive {
    /// The storage a persistent id in [`object`](Self::object) refers to.
    ///
    /// `pid` is the [`Node::PersistentId`] node or the tuple it holds. For a
    /// legacy view, [`StorageRef::bytes`] is the viewed slice, counted in
    /// elements of the persistent id's storage class as torch counts it.
    ///
    /// # Errors
    ///
    /// [`TorchSaveError::PersistentId`] if `pid` is not a storage persistent
    /// id, [`TorchSaveError::UnknownStorage`] if no record has its key, and
    /// [`TorchSaveError::ViewOutOfBounds`] if its view is not inside the
    /// record.
    pub fn storage(&self, pid: NodeId) -> Result<StorageRef<'_>, TorchSaveError> {
        let pid =
            parse_storage_pid(&self.object, pid).map_err(|cause| TorchSaveError::PersistentId {
                part: StreamPart::Object,
                cause,
            })?;
        let record = self
            .records
            .get(&pid.key)
            .ok_or_else(|| TorchSaveError::UnknownStorage {
                key: pid.key.clone(),
            })?;
        let bytes = match &pid.view {
            None => &record.data,
            Some(view) => {
                let size = pid.element_size() as u64;
                let start = view.offset.checked_mul(size);
                let end = view
                    .offset
                    .checked_add(view.numel)
                    .and_then(|end| end.checked_mul(size));
                let range = start
                    .zip(end)
                    .and_then(|(s, e)| Some(usize::try_from(s).ok()?..usize::try_from(e).ok()?));
                range
                    .and_then(|range| record.data.get(range))
                    .ok_or_else(|| TorchSaveError::ViewOutOfBounds {
                        key: pid.key.clone(),
                        view_key: view.key.clone(),
                        offset: view.offset,
                        numel: view.numel,
                        storage_numel: record.numel,
                    })?
            }
        };
        Ok(StorageRef { pid, record, bytes })
    }
}

/// Limits a reader applies on top of the pickle decoder's.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Limits for each pickle in the file.
    pub limits: Limits,
    /// The most bytes of pickles and storage data read in total (for a zip,
    /// after decompression). Default: 16 GiB.
    pub max_total_bytes: u64,
    /// The most storages; a zip may hold this many entries plus
    /// [`ZIP_METADATA_ENTRIES`] more. Default: 2^20.
    pub max_records: usize,
}

/// Entries a torch.save zip holds besides its storages (`data.pkl`,
/// `version`, `byteorder`, `.data/serialization_id`, ...), with room for
/// what later torch versions add.
pub const ZIP_METADATA_ENTRIES: usize = 64;

impl Default for ReadOptions {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_total_bytes: 16 << 30,
            max_records: 1 << 20,
        }
    }
}

/// Tells the format of a torch.save file from its first bytes.
///
/// A zip archive starts with `PK\x03\x04`; anything else is taken for a
/// legacy stream (whose reader then checks the magic number).
///
/// # Errors
///
/// [`TorchSaveError::TarFormat`] for a tar archive (torch < 0.4).
pub fn detect_format(bytes: &[u8]) -> Result<TorchSaveFormat, TorchSaveError> {
    if bytes.starts_with(b"PK\x03\x04") {
        Ok(TorchSaveFormat::Zip)
    } else if legacy::looks_like_tar(bytes) {
        Err(TorchSaveError::TarFormat)
    } else {
        Ok(TorchSaveFormat::Legacy)
    }
}

/// Reads a torch.save file of either format.
///
/// `globals` decides which globals the object pickle may name; the storage
/// classes of persistent ids ([`is_storage_class_global`]) are allowed on
/// top, in persistent ids only.
///
/// # Errors
///
/// Whatever [`read_zip`] or [`read_legacy`] return, and
/// [`TorchSaveError::TarFormat`] for torch < 0.4's tar format.
pub fn read(
    bytes: &[u8],
    globals: &dyn GlobalFilter,
    options: &ReadOptions,
) -> Result<TorchSaveArchive, TorchSaveError> {
    match detect_format(bytes)? {
        TorchSaveFormat::Zip => read_zip(bytes, globals, options),
        TorchSaveFormat::Legacy => read_legacy(bytes, globals, options),
    }
}

/// Reads a torch.save file of either format, as [`read`] does, from a
/// shared buffer (a message, a mapped file): the storage records of a
/// legacy stream, and the stored aligned records of a zip
/// ([`read_zip_shared`]), are then slices of it rather than copies (what a `torch.storage._load_from_bytes` payload
/// in a message needs: its bytes are copied once, into the storage).
///
/// # Errors
///
/// As [`read`].
pub fn read_shared(
    input: &SharedBytes,
    globals: &dyn GlobalFilter,
    options: &ReadOptions,
) -> Result<TorchSaveArchive, TorchSaveError> {
    match detect_format(input)? {
        TorchSaveFormat::Zip => read_zip_shared(input, globals, options),
        TorchSaveFormat::Legacy => legacy::read_legacy_from(input, Some(input), globals, options),
    }
}

/// The caller's filter plus the storage classes.
struct WithStorageClasses<'a>(&'a dyn GlobalFilter);

impl GlobalFilter for WithStorageClasses<'_> {
    fn allows(&self, module: &str, name: &str) -> bool {
        is_storage_class_global(module, name) || self.0.allows(module, name)
    }

    fn admit(&self, module: &str, name: &str) -> Option<Global> {
        self.admit_at(module, name, 0)
    }

    fn admit_at(&self, module: &str, name: &str, offset: usize) -> Option<Global> {
        self.0
            .admit_at(module, name, offset)
            .or_else(|| is_storage_class_global(module, name).then(|| Global::copied(module, name)))
    }
}

/// A filter that allows no global: for the pickles that hold plain data.
fn no_globals(_module: &str, _name: &str) -> bool {
    false
}

/// Refuses storage-class globals the caller did not allow anywhere but in
/// the class field of a persistent id, where the reader admitted them.
fn confine_storage_classes(
    pickle: &Pickle,
    caller: &dyn GlobalFilter,
    part: &StreamPart,
) -> Result<(), TorchSaveError> {
    let admitted: HashSet<NodeId> = pickle
        .iter()
        .filter_map(|(id, node)| match node {
            Node::Global(g) if !caller.allows(&g.module, &g.name) => Some(id),
            _ => None,
        })
        .collect();
    if admitted.is_empty() {
        return Ok(());
    }
    let pid_tuples: HashSet<NodeId> = pickle
        .iter()
        .filter_map(|(_, node)| match node {
            Node::PersistentId(tuple) => Some(*tuple),
            _ => None,
        })
        .collect();
    let refuse = |id: NodeId| -> Result<(), TorchSaveError> {
        match pickle.get(id) {
            Some(Node::Global(global)) if admitted.contains(&id) => {
                Err(TorchSaveError::StorageClassOutsidePersistentId {
                    part: part.clone(),
                    global: global.clone(),
                })
            }
            _ => Ok(()),
        }
    };
    if let Some(root) = pickle.root() {
        refuse(root)?;
    }
    for (id, node) in pickle.iter() {
        // The class field of a persistent id's tuple, where the reader
        // admitted the storage classes.
        let in_pid = matches!(node, Node::Tuple(_)) && pid_tuples.contains(&id);
        for (position, child) in node.children().enumerate() {
            if !(in_pid && position == 1) {
                refuse(child)?;
            }
        }
    }
    Ok(())
}

/// Turns a decoder error for the pickle at `start` (`len` bytes available)
/// into the reader's error: a stream that ends early is
/// [`TorchSaveError::Truncated`] at the end of the input.
fn pickle_error(part: StreamPart, start: usize, len: usize, error: DecodeError) -> TorchSaveError {
    if error.code == DecodeErrorCode::Truncated {
        TorchSaveError::Truncated {
            part,
            offset: start.saturating_add(len),
        }
    } else {
        TorchSaveError::Pickle {
            part,
            start,
            cause: error,
        }
    }
}
