//! Writers for both torch.save formats, in the layout torch 2.15 writes.
//!
//! The caller builds the object pickle, standing each storage in with the
//! persistent id [`push_storage_pid`] returns, and hands the storages'
//! bytes to [`write_zip`] or [`write_legacy`]:
//!
//! - zip: `archive/data.pkl` (protocol 2), `archive/.format_version`
//!   (`1`), `archive/.storage_alignment` (`64`), `archive/byteorder`
//!   (`little`), `archive/data/<key>` (stored, aligned to 64 bytes),
//!   `archive/version` (`3\n`) and `archive/.data/serialization_id`; the
//!   persistent ids are `('storage', class, key, 'cpu', numel)`;
//! - legacy: the magic number, 1001, the `sys_info` dict, the object with
//!   `('storage', class, key, 'cpu', numel, None)` persistent ids, the key
//!   list, then per key an 8-byte little-endian element count and the bytes.
//!
//! The storage class is the dtype's legacy class (`torch.FloatStorage`,
//! counting elements). For dtypes without one and for untyped storages, a
//! zip names `torch.storage.UntypedStorage` (counting bytes), as torch
//! does; a legacy stream names the legacy class of the same element size
//! (`torch.ShortStorage` for `uint16`, `torch.ByteStorage` for untyped
//! storages), because torch 2.15 cannot load `UntypedStorage` from a legacy
//! stream (not even what its own `pickle.dumps` writes for a `uint16`
//! tensor). Tensors of those dtypes name their dtype through
//! `torch._utils._rebuild_tensor_v3`.
//!
//! # Examples
//!
//! ```
//! use tensorshare_compat::pickle::{Global, Node, Pickle};
//! use tensorshare_compat::torch_save::{self, ReadOptions, SavedStorage, TorchSaveFormat};
//! use tensorshare_compat::DType;
//!
//! let data = 1.5f32.to_le_bytes().repeat(4);
//! let storage = SavedStorage::new("0", Some(DType::Float32), &data);
//! let mut object = Pickle::new();
//! let pid = torch_save::push_storage_pid(&mut object, TorchSaveFormat::Zip, &storage).unwrap();
//! object.set_root(pid);
//! let file = torch_save::write_to_vec(TorchSaveFormat::Zip, &object, &[storage]).unwrap();
//!
//! let archive = torch_save::read(&file, &|_: &str, _: &str| false, &ReadOptions::default()).unwrap();
//! assert_eq!(archive.records["0"].data, data);
//! ```

use std::collections::HashSet;
use std::io::{Cursor, Seek, Write};

use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

use super::TorchSaveFormat;
use super::legacy::{MAGIC_NUMBER, PROTOCOL_VERSION};
use crate::dtype::DType;
use crate::pickle::{
    ByteChunks, EncodeError, EncodeOptions, Global, Node, NodeId, Pickle, SharedBytes, encode,
    encode_into,
};

/// The pickle protocol `torch.save` writes by default.
pub const TORCH_SAVE_PICKLE_PROTOCOL: u8 = 2;

/// The directory the zip writer puts every record under, as torch does for
/// a buffer.
pub const ZIP_ARCHIVE_DIR: &str = "archive";

/// The zip format version torch 2.15 writes in `version`.
const ZIP_FORMAT_VERSION: &[u8] = b"3\n";

/// The alignment of storage records, as torch writes it in
/// `.storage_alignment`.
const STORAGE_ALIGNMENT: u16 = 64;

/// One storage to write: its key and the bytes its persistent id covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedStorage<'a> {
    /// The key the persistent id names it by (torch writes `0`, `1`, ...).
    pub key: &'a str,
    /// The dtype its persistent id's class names; `None` for an untyped
    /// storage. Dtypes without a legacy storage class are written as
    /// `torch.storage.UntypedStorage`.
    pub dtype: Option<DType>,
    /// The little-endian bytes.
    bytes: StorageBytes<'a>,
}

/// Where a saved storage's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StorageBytes<'a> {
    Borrowed(&'a [u8]),
    /// In a shared buffer: the chunked legacy stream refers to it instead
    /// of copying it.
    Shared(&'a SharedBytes),
}

impl<'a> SavedStorage<'a> {
    /// A storage named `key` holding `data` as elements of `dtype`.
    pub fn new(key: &'a str, dtype: Option<DType>, data: &'a [u8]) -> Self {
        Self {
            key,
            dtype,
            bytes: StorageBytes::Borrowed(data),
        }
    }

    /// A storage whose bytes are in a shared buffer, which
    /// [`legacy_stream_chunks`] writes without copying.
    pub fn shared(key: &'a str, dtype: Option<DType>, data: &'a SharedBytes) -> Self {
        Self {
            key,
            dtype,
            bytes: StorageBytes::Shared(data),
        }
    }

    /// The little-endian bytes.
    fn data(&self) -> &'a [u8] {
        match self.bytes {
            StorageBytes::Borrowed(data) => data,
            StorageBytes::Shared(data) => data,
        }
    }

    /// The dtype the persistent id's class names in `format`: the
    /// storage's own dtype when it has a legacy class; otherwise `None`
    /// (`UntypedStorage`) in a zip and, in a legacy stream, the legacy
    /// dtype of the same element size (`ByteStorage` for untyped storages),
    /// since torch cannot load `UntypedStorage` from a legacy stream.
    pub fn class_dtype(&self, format: TorchSaveFormat) -> Option<DType> {
        if let Some(dtype) = self.dtype.filter(|d| d.legacy_storage_class().is_some()) {
            return Some(dtype);
        }
        match format {
            TorchSaveFormat::Zip => None,
            TorchSaveFormat::Legacy => Some(match self.dtype.map_or(1, DType::element_size) {
                2 => DType::Int16,
                4 => DType::Int32,
                8 => DType::Int64,
                16 => DType::Complex128,
                _ => DType::UInt8,
            }),
        }
    }

    /// The storage class global of its persistent id in `format`.
    pub fn storage_class(&self, format: TorchSaveFormat) -> Global {
        match self
            .class_dtype(format)
            .and_then(DType::legacy_storage_class)
        {
            Some(class) => Global::new("torch", class),
            None => Global::new("torch.storage", "UntypedStorage"),
        }
    }

    /// Elements of the class dtype in `format` (bytes for `UntypedStorage`).
    ///
    /// # Errors
    ///
    /// [`WriteError::RaggedStorage`] if the bytes are not a whole number of
    /// elements.
    pub fn numel(&self, format: TorchSaveFormat) -> Result<u64, WriteError> {
        let size = self.class_dtype(format).map_or(1, DType::element_size);
        if !self.data().len().is_multiple_of(size) {
            return Err(WriteError::RaggedStorage {
                key: self.key.to_owned(),
                nbytes: self.data().len(),
                element_size: size,
            });
        }
        Ok((self.data().len() / size) as u64)
    }
}

/// Why a torch.save file could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// A storage's bytes are not a whole number of elements of its class.
    #[error(
        "storage '{key}' holds {nbytes} bytes, not a whole number of {element_size}-byte elements: \
         save it as an untyped storage"
    )]
    RaggedStorage {
        /// The storage key.
        key: String,
        /// Its length in bytes.
        nbytes: usize,
        /// The element size of its class.
        element_size: usize,
    },
    /// Two storages share a key.
    #[error("two storages share the key '{key}': give each storage its own key")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// A key would make an unsafe or unreadable record name.
    #[error("storage key '{key}' is empty or holds '/', '\\\\' or NUL: use keys such as 0, 1, 2")]
    InvalidKey {
        /// The key.
        key: String,
    },
    /// The object pickle does not encode.
    #[error("the object pickle does not encode: {0}")]
    Encode(EncodeError),
    /// The zip container could not be written.
    #[error("writing the zip archive failed: {detail}")]
    Zip {
        /// What the zip writer said.
        detail: String,
    },
    /// The output could not be written.
    #[error("writing the torch.save stream failed: {0}")]
    Io(std::io::Error),
}

// By hand rather than `#[from]`, which would also make the wrapped error
// the `source()`: the messages above already include it (see the crate
// docs on errors).
impl From<EncodeError> for WriteError {
    fn from(error: EncodeError) -> Self {
        WriteError::Encode(error)
    }
}

impl From<std::io::Error> for WriteError {
    fn from(error: std::io::Error) -> Self {
        WriteError::Io(error)
    }
}

impl From<zip::result::ZipError> for WriteError {
    fn from(error: zip::result::ZipError) -> Self {
        match error {
            zip::result::ZipError::Io(io) => WriteError::Io(io),
            other => WriteError::Zip {
                detail: other.to_string(),
            },
        }
    }
}

/// Pushes the persistent id torch writes for `storage` in `format` and
/// returns the [`Node::PersistentId`] node that stands for the storage.
///
/// # Errors
///
/// [`WriteError::RaggedStorage`] if the storage's bytes are not a whole
/// number of elements.
pub fn push_storage_pid(
    pickle: &mut Pickle,
    format: TorchSaveFormat,
    storage: &SavedStorage<'_>,
) -> Result<NodeId, WriteError> {
    let numel = i64::try_from(storage.numel(format)?).unwrap_or(i64::MAX);
    let mut items = vec![
        pickle.push(Node::Str("storage".to_owned())),
        pickle.push(Node::Global(storage.storage_class(format))),
        pickle.push(Node::Str(storage.key.to_owned())),
        pickle.push(Node::Str("cpu".to_owned())),
        pickle.push(Node::Int(numel)),
    ];
    if format == TorchSaveFormat::Legacy {
        // The view metadata slot, always `None` since torch 1.0.
        items.push(pickle.push(Node::None));
    }
    let tuple = pickle.push(Node::Tuple(items));
    Ok(pickle.push(Node::PersistentId(tuple)))
}

/// Writes a torch.save file of `format` into a new buffer.
///
/// # Errors
///
/// As [`write_zip`] and [`write_legacy`].
pub fn write_to_vec(
    format: TorchSaveFormat,
    object: &Pickle,
    storages: &[SavedStorage<'_>],
) -> Result<Vec<u8>, WriteError> {
    match format {
        TorchSaveFormat::Zip => {
            let mut out = Cursor::new(Vec::new());
            write_zip(&mut out, object, storages)?;
            Ok(out.into_inner())
        }
        TorchSaveFormat::Legacy => {
            let mut out = Vec::new();
            write_legacy(&mut out, object, storages)?;
            Ok(out)
        }
    }
}

/// Writes the zip format: `object` as `archive/data.pkl`, each storage as
/// `archive/data/<key>`, and the metadata records torch 2.15 writes.
///
/// `object` must name the storages through [`push_storage_pid`] with
/// [`TorchSaveFormat::Zip`].
///
/// # Errors
///
/// [`WriteError::DuplicateKey`], [`WriteError::InvalidKey`],
/// [`WriteError::RaggedStorage`] for bad storages, [`WriteError::Encode`]
/// for an object that does not pickle, [`WriteError::Zip`] or
/// [`WriteError::Io`] from the output.
pub fn write_zip<W: Write + Seek>(
    out: W,
    object: &Pickle,
    storages: &[SavedStorage<'_>],
) -> Result<(), WriteError> {
    write_zip_each(out, object, storages, &mut |_| {})
}

/// Writes the zip format as [`write_zip`] does, calling `written(i)` once
/// the bytes of `storages[i]` are written: a caller streaming storages out
/// of a mapped file gives their pages back there.
///
/// # Errors
///
/// As [`write_zip`].
pub fn write_zip_each<W: Write + Seek>(
    out: W,
    object: &Pickle,
    storages: &[SavedStorage<'_>],
    written: &mut dyn FnMut(usize),
) -> Result<(), WriteError> {
    check_storages(storages, TorchSaveFormat::Zip)?;
    let pickle = encode(object, &save_options())?;
    let stored = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
    let mut zip = ZipWriter::new(out);
    let record = |zip: &mut ZipWriter<W>, name: &str, bytes: &[u8], aligned: bool| {
        let options = stored.large_file(bytes.len() as u64 >= u64::from(u32::MAX));
        let options = if aligned {
            options.with_alignment(STORAGE_ALIGNMENT)
        } else {
            options
        };
        zip.start_file(format!("{ZIP_ARCHIVE_DIR}/{name}"), options)?;
        zip.write_all(bytes)?;
        Ok::<(), WriteError>(())
    };
    record(&mut zip, "data.pkl", &pickle, false)?;
    record(&mut zip, ".format_version", b"1", false)?;
    record(
        &mut zip,
        ".storage_alignment",
        STORAGE_ALIGNMENT.to_string().as_bytes(),
        false,
    )?;
    record(&mut zip, "byteorder", b"little", false)?;
    for (index, storage) in storages.iter().enumerate() {
        record(
            &mut zip,
            &format!("data/{}", storage.key),
            storage.data(),
            true,
        )?;
        written(index);
    }
    record(&mut zip, "version", ZIP_FORMAT_VERSION, false)?;
    record(
        &mut zip,
        ".data/serialization_id",
        serialization_id().as_bytes(),
        false,
    )?;
    zip.finish()?;
    Ok(())
}

/// Writes the legacy stream: magic number, protocol 1001, `sys_info`, the
/// object, the key list, then each storage's element count and bytes.
///
/// `object` must name the storages through [`push_storage_pid`] with
/// [`TorchSaveFormat::Legacy`]. This is also the payload of
/// `torch.storage._load_from_bytes`.
///
/// # Errors
///
/// [`WriteError::DuplicateKey`], [`WriteError::InvalidKey`],
/// [`WriteError::RaggedStorage`] for bad storages, [`WriteError::Encode`]
/// for an object that does not pickle, [`WriteError::Io`] from the output.
pub fn write_legacy<W: Write>(
    out: W,
    object: &Pickle,
    storages: &[SavedStorage<'_>],
) -> Result<(), WriteError> {
    write_legacy_each(out, object, storages, &mut |_| {})
}

/// Writes the legacy stream as [`write_legacy`] does, calling `written(i)`
/// once the bytes of `storages[i]` are written.
///
/// # Errors
///
/// As [`write_legacy`].
pub fn write_legacy_each<W: Write>(
    mut out: W,
    object: &Pickle,
    storages: &[SavedStorage<'_>],
    written: &mut dyn FnMut(usize),
) -> Result<(), WriteError> {
    out.write_all(&legacy_head(object, storages)?)?;
    for (index, storage) in storages.iter().enumerate() {
        out.write_all(&storage.numel(TorchSaveFormat::Legacy)?.to_le_bytes())?;
        out.write_all(storage.data())?;
        written(index);
    }
    Ok(())
}

/// The stream [`write_legacy`] writes, as chunks to pickle as one `bytes`
/// (a `torch.storage._load_from_bytes` payload) without copying: the bytes
/// of each storage made with [`SavedStorage::shared`] are a chunk of their
/// own; everything else is copied into the chunks between them.
///
/// # Errors
///
/// As [`write_legacy`].
pub fn legacy_stream_chunks(
    object: &Pickle,
    storages: &[SavedStorage<'_>],
) -> Result<ByteChunks, WriteError> {
    let mut chunks = Vec::with_capacity(2 * storages.len() + 1);
    let mut pending = legacy_head(object, storages)?;
    for storage in storages {
        pending.extend_from_slice(&storage.numel(TorchSaveFormat::Legacy)?.to_le_bytes());
        match storage.bytes {
            StorageBytes::Shared(shared) => {
                chunks.push(SharedBytes::from(std::mem::take(&mut pending)));
                chunks.push(shared.clone());
            }
            StorageBytes::Borrowed(data) => pending.extend_from_slice(data),
        }
    }
    if !pending.is_empty() {
        chunks.push(SharedBytes::from(pending));
    }
    Ok(ByteChunks::from_chunks(chunks))
}

/// The legacy stream up to the first storage's element count: magic
/// number, protocol 1001, `sys_info`, the object and the key list.
fn legacy_head(object: &Pickle, storages: &[SavedStorage<'_>]) -> Result<Vec<u8>, WriteError> {
    check_storages(storages, TorchSaveFormat::Legacy)?;
    let mut keys = Pickle::new();
    let items = storages
        .iter()
        .map(|s| keys.push(Node::Str(s.key.to_owned())))
        .collect();
    let list = keys.push(Node::List(items));
    keys.set_root(list);
    let version = single(Node::Int(PROTOCOL_VERSION));
    let options = save_options();
    let mut head = Vec::new();
    for part in [&magic_number(), &version, &sys_info(), object, &keys] {
        encode_into(part, &options, &mut head)?;
    }
    Ok(head)
}

fn check_storages(
    storages: &[SavedStorage<'_>],
    format: TorchSaveFormat,
) -> Result<(), WriteError> {
    let mut keys = HashSet::new();
    for storage in storages {
        let key = storage.key;
        if key.is_empty() || key.contains(['/', '\\', '\0']) {
            return Err(WriteError::InvalidKey {
                key: key.to_owned(),
            });
        }
        if !keys.insert(key) {
            return Err(WriteError::DuplicateKey {
                key: key.to_owned(),
            });
        }
        storage.numel(format)?;
    }
    Ok(())
}

/// The options `torch.save` pickles with.
fn save_options() -> EncodeOptions {
    EncodeOptions::new().with_protocol(TORCH_SAVE_PICKLE_PROTOCOL)
}

fn single(node: Node) -> Pickle {
    let mut pickle = Pickle::new();
    let root = pickle.push(node);
    pickle.set_root(root);
    pickle
}

/// torch's `MAGIC_NUMBER` in the 10 little-endian bytes `LONG1` writes.
fn magic_number() -> Pickle {
    let mut bytes = MAGIC_NUMBER.to_le_bytes().to_vec();
    bytes.truncate(10);
    single(Node::BigInt(bytes))
}

/// `{'protocol_version': 1001, 'little_endian': True, 'type_sizes':
/// {'short': 2, 'int': 4, 'long': 4}}`, as torch writes it on Linux.
fn sys_info() -> Pickle {
    let mut pickle = Pickle::new();
    let str_int = |pickle: &mut Pickle, key: &str, value: i64| {
        (
            pickle.push(Node::Str(key.to_owned())),
            pickle.push(Node::Int(value)),
        )
    };
    let sizes = vec![
        str_int(&mut pickle, "short", 2),
        str_int(&mut pickle, "int", 4),
        str_int(&mut pickle, "long", 4),
    ];
    let version = str_int(&mut pickle, "protocol_version", PROTOCOL_VERSION);
    let little = (
        pickle.push(Node::Str("little_endian".to_owned())),
        pickle.push(Node::Bool(true)),
    );
    let sizes_key = pickle.push(Node::Str("type_sizes".to_owned()));
    let sizes = pickle.push(Node::Dict(sizes));
    let root = pickle.push(Node::Dict(vec![version, little, (sizes_key, sizes)]));
    pickle.set_root(root);
    pickle
}

/// 40 random decimal digits, as torch writes `.data/serialization_id`; a
/// fixed id if the system has no random source (torch only compares ids).
fn serialization_id() -> String {
    let mut random = [0u8; 40];
    if getrandom::fill(&mut random).is_err() {
        random = [0; 40];
    }
    random.iter().map(|b| char::from(b'0' + b % 10)).collect()
}
