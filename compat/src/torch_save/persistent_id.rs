//! The `('storage', class, key, location, numel[, view])` persistent ids that
//! torch.save pickles carry in place of storages.

use std::collections::BTreeMap;

use super::{StreamPart, TorchSaveError};
use crate::dtype::DType;
use crate::pickle::{Global, Node, NodeId, Pickle};

/// Whether `module.name` is a storage class that torch.save writes into a
/// storage persistent id.
///
/// These are `torch.<Type>Storage` (legacy typed classes, also under
/// `torch.cuda` as torch 1.x wrote them for CUDA tensors) and the untyped
/// class under its past and present names (`torch.storage.UntypedStorage`,
/// torch 1.12's `torch._UntypedStorage`).
///
/// # Examples
///
/// ```
/// use tensorshare_compat::torch_save::is_storage_class_global;
///
/// assert!(is_storage_class_global("torch", "FloatStorage"));
/// assert!(is_storage_class_global("torch.storage", "UntypedStorage"));
/// assert!(!is_storage_class_global("os", "system"));
/// ```
pub fn is_storage_class_global(module: &str, name: &str) -> bool {
    let typed = || DType::from_legacy_storage_class(name).is_some();
    let untyped = || matches!(name, "UntypedStorage" | "_UntypedStorage");
    match module {
        "torch" => typed() || untyped(),
        "torch.cuda" => typed(),
        "torch.storage" => untyped(),
        _ => false,
    }
}

/// What a storage class global says about its elements: `Ok(Some(dtype))`
/// for a typed class, `Ok(None)` for the untyped (byte) class, `Err(())`
/// for a class this crate cannot represent.
fn storage_class_dtype(class: &Global) -> Result<Option<DType>, ()> {
    if !is_storage_class_global(&class.module, &class.name) {
        return Err(());
    }
    if matches!(&*class.name, "UntypedStorage" | "_UntypedStorage") {
        return Ok(None);
    }
    DType::from_legacy_storage_class(&class.name)
        .map(Some)
        .ok_or(())
}

/// A view into a storage, as torch < 1.0 pickled it in legacy files:
/// `(view_key, offset, size)`, counted in elements of the root storage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageView {
    /// The key this view is known by (views are not in the key list).
    pub key: String,
    /// The first element of the view within the root storage.
    pub offset: u64,
    /// How many elements the view holds.
    pub numel: u64,
}

/// A validated storage persistent id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoragePid {
    /// The storage class global, e.g. `torch.FloatStorage` or
    /// `torch.storage.UntypedStorage`.
    pub storage_class: Global,
    /// The dtype of the elements; `None` for the untyped class, whose
    /// elements are bytes (the tensor's dtype is then the last argument of
    /// `torch._utils._rebuild_tensor_v3`).
    pub dtype: Option<DType>,
    /// The key naming the storage's data: `data/<key>` in a zip, an entry of
    /// the key list in a legacy stream.
    pub key: String,
    /// The device the storage was saved from, e.g. `cpu` or `cuda:0`.
    pub location: String,
    /// The storage length in elements of [`dtype`](Self::dtype) (in bytes for
    /// the untyped class).
    pub numel: u64,
    /// The view the persistent id names, if any (legacy files only).
    pub view: Option<StorageView>,
}

impl StoragePid {
    /// Bytes per element: the dtype's size, or 1 for the untyped class.
    pub fn element_size(&self) -> usize {
        self.dtype.map_or(1, DType::element_size)
    }

    /// The storage length in bytes, or `None` if it overflows `u64`.
    pub fn nbytes(&self) -> Option<u64> {
        self.numel.checked_mul(self.element_size() as u64)
    }
}

/// Why a persistent id is not a valid storage reference.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PersistentIdError {
    /// The node id is not in the pickle's arena.
    #[error("node {0} is not in the pickle")]
    NodeOutOfRange(usize),
    /// The persistent id is not a tuple.
    #[error("the persistent id is not a tuple")]
    NotATuple,
    /// The tuple does not start with `'storage'`.
    #[error("the persistent id is a {typename:?} reference, not a 'storage' one")]
    NotStorage {
        /// The first field, as found (`?` if it is not a string).
        typename: String,
    },
    /// The tuple has the wrong number of fields for the format.
    #[error("the storage persistent id has {found} fields, expected {expected}")]
    WrongLength {
        /// Fields found.
        found: usize,
        /// What the format requires: "5 (zip)", "6 (legacy)" or "5 or 6".
        expected: &'static str,
    },
    /// The class field is not a global.
    #[error("the storage class field is not a global")]
    ClassNotGlobal,
    /// The class is not a storage class torch.save writes.
    #[error(
        "unsupported storage class {class}: only torch's typed storage classes and UntypedStorage are read"
    )]
    UnsupportedStorageClass {
        /// The class named.
        class: Global,
    },
    /// A field that must be a string is not one.
    #[error("the storage {field} is not a string")]
    NotAString {
        /// Which field: `key`, `location` or `view key`.
        field: &'static str,
    },
    /// A field that must be a non-negative integer is not one.
    #[error("the storage {field} is not a non-negative integer that fits in 64 bits")]
    NotACount {
        /// Which field: `numel`, `view offset` or `view size`.
        field: &'static str,
    },
    /// The view field is neither `None` nor a 3-tuple.
    #[error("the view metadata is neither None nor a (key, offset, size) tuple")]
    InvalidView,
}

/// Which persistent-id layout a reader expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PidLayout {
    /// `('storage', class, key, location, numel)`.
    Zip,
    /// `('storage', class, key, location, numel, view_metadata)`.
    Legacy,
    /// Either.
    Any,
}

/// Parses a storage persistent id.
///
/// `pid` is either the [`Node::PersistentId`] node or the tuple it holds.
/// Accepts both layouts: five fields as the zip format writes them, six as
/// the legacy format does (the sixth being `None` or a [`StorageView`]).
/// Keys and locations may be `str` or ASCII `bytes` (Python 2 files).
///
/// # Errors
///
/// A [`PersistentIdError`] naming the first field that is not what torch
/// writes, including storage classes this crate has no dtype for.
pub fn parse_storage_pid(pickle: &Pickle, pid: NodeId) -> Result<StoragePid, PersistentIdError> {
    parse_with_layout(pickle, pid, PidLayout::Any)?.ok_or(PersistentIdError::NotStorage {
        typename: "module".to_owned(),
    })
}

/// Parses a persistent id; `Ok(None)` for a legacy `('module', ...)` id,
/// which names a class rather than a storage.
pub(crate) fn parse_with_layout(
    pickle: &Pickle,
    pid: NodeId,
    layout: PidLayout,
) -> Result<Option<StoragePid>, PersistentIdError> {
    let mut node = node_at(pickle, pid)?;
    if let Node::PersistentId(inner) = node {
        node = node_at(pickle, *inner)?;
    }
    let Node::Tuple(fields) = node else {
        return Err(PersistentIdError::NotATuple);
    };
    let typename = match fields.first() {
        Some(&id) => string_of(pickle, id),
        None => None,
    };
    match typename.as_deref() {
        Some("storage") => {}
        Some("module") if layout == PidLayout::Legacy => return Ok(None),
        other => {
            return Err(PersistentIdError::NotStorage {
                typename: other.unwrap_or("?").to_owned(),
            });
        }
    }
    let (class, key, location, numel, view) = match (layout, fields.as_slice()) {
        (PidLayout::Zip | PidLayout::Any, &[_, class, key, location, numel]) => {
            (class, key, location, numel, None)
        }
        (PidLayout::Legacy | PidLayout::Any, &[_, class, key, location, numel, view]) => {
            (class, key, location, numel, Some(view))
        }
        _ => {
            let expected = match layout {
                PidLayout::Zip => "5 (zip format)",
                PidLayout::Legacy => "6 (legacy format)",
                PidLayout::Any => "5 or 6",
            };
            return Err(PersistentIdError::WrongLength {
                found: fields.len(),
                expected,
            });
        }
    };
    let Node::Global(class) = node_at(pickle, class)? else {
        return Err(PersistentIdError::ClassNotGlobal);
    };
    let dtype =
        storage_class_dtype(class).map_err(|()| PersistentIdError::UnsupportedStorageClass {
            class: class.clone(),
        })?;
    let key = string_of(pickle, key).ok_or(PersistentIdError::NotAString { field: "key" })?;
    let location =
        string_of(pickle, location).ok_or(PersistentIdError::NotAString { field: "location" })?;
    let numel = count_of(pickle, numel).ok_or(PersistentIdError::NotACount { field: "numel" })?;
    let view = match view {
        None => None,
        Some(view) => parse_view(pickle, view)?,
    };
    Ok(Some(StoragePid {
        storage_class: class.clone(),
        dtype,
        key,
        location,
        numel,
        view,
    }))
}

fn parse_view(pickle: &Pickle, view: NodeId) -> Result<Option<StorageView>, PersistentIdError> {
    match node_at(pickle, view)? {
        Node::None => Ok(None),
        Node::Tuple(fields) => {
            let &[key, offset, numel] = fields.as_slice() else {
                return Err(PersistentIdError::InvalidView);
            };
            Ok(Some(StorageView {
                key: string_of(pickle, key)
                    .ok_or(PersistentIdError::NotAString { field: "view key" })?,
                offset: count_of(pickle, offset).ok_or(PersistentIdError::NotACount {
                    field: "view offset",
                })?,
                numel: count_of(pickle, numel)
                    .ok_or(PersistentIdError::NotACount { field: "view size" })?,
            }))
        }
        _ => Err(PersistentIdError::InvalidView),
    }
}

fn node_at(pickle: &Pickle, id: NodeId) -> Result<&Node, PersistentIdError> {
    pickle
        .get(id)
        .ok_or(PersistentIdError::NodeOutOfRange(id.index()))
}

/// A `str`, or `bytes` holding UTF-8 (what Python 2 `str` fields become).
pub(crate) fn string_of(pickle: &Pickle, id: NodeId) -> Option<String> {
    match pickle.get(id)? {
        Node::Str(s) => Some(s.clone()),
        Node::Bytes(b) => String::from_utf8(b.to_vec()).ok(),
        _ => None,
    }
}

/// An int node as `i128`, for `Int` and for `BigInt`s up to 16 bytes.
pub(crate) fn int_of(node: &Node) -> Option<i128> {
    match node {
        Node::Int(v) => Some(i128::from(*v)),
        Node::BigInt(le) if le.is_empty() => Some(0),
        Node::BigInt(le) if le.len() <= 16 => {
            let negative = le.last().is_some_and(|b| b & 0x80 != 0);
            let mut wide = [if negative { 0xff } else { 0 }; 16];
            wide.get_mut(..le.len())?.copy_from_slice(le);
            Some(i128::from_le_bytes(wide))
        }
        _ => None,
    }
}

fn count_of(pickle: &Pickle, id: NodeId) -> Option<u64> {
    int_of(pickle.get(id)?).and_then(|v| u64::try_from(v).ok())
}

/// Every storage persistent id in `pickle`, one per key (the first seen, in
/// pickle order, as torch keeps it), with the problems torch would trip on
/// turned into errors.
pub(crate) fn collect_storage_pids(
    pickle: &Pickle,
    layout: PidLayout,
    part: &StreamPart,
) -> Result<BTreeMap<String, StoragePid>, TorchSaveError> {
    let mut pids: BTreeMap<String, StoragePid> = BTreeMap::new();
    for (id, node) in pickle.iter() {
        if !matches!(node, Node::PersistentId(_)) {
            continue;
        }
        let Some(pid) = parse_with_layout(pickle, id, layout).map_err(|cause| {
            TorchSaveError::PersistentId {
                part: part.clone(),
                cause,
            }
        })?
        else {
            continue;
        };
        let nbytes = pid
            .nbytes()
            .ok_or_else(|| TorchSaveError::StorageTooLarge {
                key: pid.key.clone(),
            })?;
        if let Some(view) = &pid.view {
            let end = view.offset.checked_add(view.numel);
            if end.is_none_or(|end| end > pid.numel) {
                return Err(TorchSaveError::ViewOutOfBounds {
                    key: pid.key.clone(),
                    view_key: view.key.clone(),
                    offset: view.offset,
                    numel: view.numel,
                    storage_numel: pid.numel,
                });
            }
        }
        match pids.get(&pid.key) {
            None => {
                pids.insert(pid.key.clone(), pid);
            }
            Some(first) => {
                // torch reinterprets a storage under another class when the
                // byte lengths agree; when they do not, no one record can
                // serve both references.
                let first_nbytes = first.nbytes().unwrap_or(u64::MAX);
                if first_nbytes != nbytes {
                    return Err(TorchSaveError::ConflictingStorage {
                        key: pid.key,
                        first_nbytes,
                        second_nbytes: nbytes,
                    });
                }
            }
        }
    }
    Ok(pids)
}
