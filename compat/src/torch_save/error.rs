//! What can go wrong reading a torch.save file, and where.

use std::fmt;

use super::persistent_id::PersistentIdError;
use crate::pickle::{DecodeError, Global};

/// The part of a torch.save file an error is about.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamPart {
    /// The legacy stream's first pickle: torch's magic number.
    MagicNumber,
    /// The legacy stream's second pickle: the protocol version (1001).
    ProtocolVersion,
    /// The legacy stream's third pickle: the `sys_info` dict.
    SysInfo,
    /// The legacy stream's object pickle.
    Object,
    /// The legacy stream's pickled list of storage keys.
    StorageKeys,
    /// The 8-byte element count before a legacy storage's data.
    StorageCount {
        /// The storage key.
        key: String,
    },
    /// A legacy storage's raw bytes.
    StorageData {
        /// The storage key.
        key: String,
    },
    /// A zip record, by its full name (e.g. `archive/data/0`).
    Record {
        /// The record name.
        name: String,
    },
}

impl fmt::Display for StreamPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamPart::MagicNumber => f.write_str("the magic-number pickle"),
            StreamPart::ProtocolVersion => f.write_str("the protocol-version pickle"),
            StreamPart::SysInfo => f.write_str("the sys_info pickle"),
            StreamPart::Object => f.write_str("the object pickle"),
            StreamPart::StorageKeys => f.write_str("the storage-key list pickle"),
            StreamPart::StorageCount { key } => write!(f, "the element count of storage {key:?}"),
            StreamPart::StorageData { key } => write!(f, "the data of storage {key:?}"),
            StreamPart::Record { name } => write!(f, "record {name:?}"),
        }
    }
}

/// An error reading a torch.save file.
///
/// Every variant names the part of the file (a [`StreamPart`], record or
/// storage key) and, where it applies, the byte offset.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TorchSaveError {
    /// A tar archive: the torch.save format of torch < 0.4.
    #[error(
        "file is a tar-format torch.save from torch < 0.4, which is not supported: \
         load it with torch and re-save it with a newer torch"
    )]
    TarFormat,
    /// Neither a zip archive nor a legacy stream.
    #[error(
        "not a torch.save file: {reason}; torch.save files are zip archives or legacy \
         streams that start with torch's magic-number pickle"
    )]
    NotTorchSave {
        /// What was found instead.
        reason: String,
    },
    /// A legacy stream with a protocol version other than 1001.
    #[error(
        "legacy torch.save protocol version {found} is not supported (torch writes 1001): \
         re-save the file with torch"
    )]
    UnsupportedProtocolVersion {
        /// The version found, as text.
        found: String,
    },
    /// The input ends before the part named is complete.
    #[error(
        "truncated: the input ends at byte {offset}, inside {part}; the file is incomplete \
         (an interrupted copy or download?): get a complete copy"
    )]
    Truncated {
        /// The part being read when the input ran out.
        part: StreamPart,
        /// The input length: where it ends.
        offset: usize,
    },
    /// A pickle in the file does not decode.
    #[error("{part} does not decode at byte {}: {}", start.saturating_add(cause.offset), cause.code)]
    Pickle {
        /// The pickle.
        part: StreamPart,
        /// Where the pickle starts: in the file for a legacy stream, in the
        /// record (so 0) for a zip; the message counts from the same origin.
        start: usize,
        /// The decoder's error, whose offset counts from `start`.
        cause: DecodeError,
    },
    /// The data is big-endian.
    #[error(
        "{part} says the data is big-endian, which is not supported: load the file with \
         torch on a little-endian machine and re-save it"
    )]
    BigEndian {
        /// Where the byte order is declared.
        part: StreamPart,
    },
    /// A zip `byteorder` record holds neither `little` nor `big`.
    #[error("{part} holds {found:?}, not \"little\" or \"big\": the archive is damaged")]
    UnknownByteOrder {
        /// The record.
        part: StreamPart,
        /// What it holds (lossily as text).
        found: String,
    },
    /// The zip container itself does not parse.
    #[error("not a readable zip archive: {detail}; the file is damaged or not a torch.save zip")]
    Zip {
        /// The zip reader's message.
        detail: String,
    },
    /// A zip record cannot be read (bad header, CRC mismatch, encryption,
    /// unsupported compression).
    #[error("{part} cannot be read: {detail}; the archive is damaged")]
    ZipRecord {
        /// The record.
        part: StreamPart,
        /// The zip reader's message.
        detail: String,
    },
    /// The zip archive has more entries than the options allow.
    #[error(
        "the zip archive holds {found} entries, more than the limit of {limit}: if the file \
         is trusted, raise ReadOptions::max_records"
    )]
    TooManyEntries {
        /// Entries in the central directory.
        found: usize,
        /// The limit applied.
        limit: usize,
    },
    /// Two zip entries share a name.
    #[error(
        "the zip archive names a record more than once, which torch.save never does: \
         refusing the ambiguous archive"
    )]
    DuplicateEntry,
    /// No `<dir>/data.pkl` in the zip.
    #[error(
        "the zip archive has no <dir>/data.pkl record: it is not a torch.save file \
         (a torch.jit.save archive needs torch.jit.load)"
    )]
    NoDataPickle,
    /// `data.pkl` under more than one top-level directory.
    #[error(
        "the zip archive holds data.pkl under several top-level directories ({dirs:?}): \
         refusing the ambiguous archive"
    )]
    AmbiguousArchiveRoot {
        /// The directories found.
        dirs: Vec<String>,
    },
    /// A storage record the object pickle references is not in the zip.
    #[error(
        "record {name:?} is missing from the archive, but the pickle references it: the \
         file is damaged or was not written completely; save it again"
    )]
    MissingRecord {
        /// The full record name, e.g. `archive/data/3`.
        name: String,
    },
    /// A storage record is shorter than its storage.
    #[error(
        "record {name:?} holds {found} bytes, but its storage needs {expected}: the file \
         is damaged; save it again"
    )]
    ShortRecord {
        /// The full record name.
        name: String,
        /// numel × element size from the persistent id.
        expected: u64,
        /// The record's length.
        found: u64,
    },
    /// Reading would pass the total byte limit.
    #[error(
        "{part} needs {needed} more bytes, past the limit of {limit} bytes in total: if the \
         file is trusted, raise ReadOptions::max_total_bytes"
    )]
    SizeLimit {
        /// The part being read.
        part: StreamPart,
        /// Its size.
        needed: u64,
        /// The limit applied.
        limit: u64,
    },
    /// More storages than the options allow.
    #[error(
        "the file holds {found} storages, more than the limit of {limit}: if the file is \
         trusted, raise ReadOptions::max_records"
    )]
    TooManyRecords {
        /// Storages found.
        found: usize,
        /// The limit applied.
        limit: usize,
    },
    /// A persistent id is not a valid storage reference.
    #[error("{part} holds an invalid persistent id: {cause}")]
    PersistentId {
        /// The pickle holding it.
        part: StreamPart,
        /// What is wrong.
        cause: PersistentIdError,
    },
    /// A storage's byte length overflows 64 bits.
    #[error("storage {key:?} claims more than 2^64 bytes: the file is damaged")]
    StorageTooLarge {
        /// The storage key.
        key: String,
    },
    /// A legacy view reaches past its storage.
    #[error(
        "view {view_key:?} of storage {key:?} covers elements {offset}..+{numel}, past the \
         storage's {storage_numel}: the file is damaged"
    )]
    ViewOutOfBounds {
        /// The root storage key.
        key: String,
        /// The view key.
        view_key: String,
        /// First element of the view.
        offset: u64,
        /// Elements in the view.
        numel: u64,
        /// Elements in the root storage.
        storage_numel: u64,
    },
    /// One key is referenced with two byte lengths.
    #[error(
        "storage {key:?} is referenced as {first_nbytes} bytes and as {second_nbytes} bytes: \
         one record cannot be both; the file is damaged"
    )]
    ConflictingStorage {
        /// The storage key.
        key: String,
        /// Bytes per the first reference.
        first_nbytes: u64,
        /// Bytes per a later reference.
        second_nbytes: u64,
    },
    /// The legacy key list is not a list of strings.
    #[error("the storage-key list is not a list of strings ({detail}): the file is damaged")]
    InvalidStorageKeys {
        /// What is wrong.
        detail: String,
    },
    /// A key appears twice in the legacy key list.
    #[error("storage {key:?} appears twice in the storage-key list: the file is damaged")]
    DuplicateStorageKey {
        /// The storage key.
        key: String,
    },
    /// A key in the legacy key list is not referenced by the object pickle.
    #[error(
        "storage {key:?} is in the storage-key list but no persistent id names it: the file \
         is damaged"
    )]
    UnreferencedStorageKey {
        /// The storage key.
        key: String,
    },
    /// A storage the object pickle references has no data in the legacy
    /// stream.
    #[error(
        "storage {key:?} is referenced by the object pickle but is not in the storage-key \
         list, so the stream holds no data for it: the file is damaged"
    )]
    MissingStorageData {
        /// The storage key.
        key: String,
    },
    /// A legacy storage's element count disagrees with its persistent id.
    #[error(
        "storage {key:?}: the stream gives {count} elements of {element_size} bytes at byte \
         {offset}, but the persistent id says {expected_nbytes} bytes: the file is damaged"
    )]
    StorageCountMismatch {
        /// The storage key.
        key: String,
        /// Where the count is.
        offset: usize,
        /// The count in the stream.
        count: u64,
        /// Bytes per element from the storage class.
        element_size: usize,
        /// numel × element size from the persistent id.
        expected_nbytes: u64,
    },
    /// A storage class global appears outside a storage persistent id.
    #[error(
        "{part} uses {global} outside a storage persistent id; storage classes are \
         allowed only there"
    )]
    StorageClassOutsidePersistentId {
        /// The pickle.
        part: StreamPart,
        /// The storage class.
        global: Global,
    },
    /// [`TorchSaveArchive::storage`](super::TorchSaveArchive::storage) was
    /// asked about a key the archive has no record for.
    #[error("no storage record for key {key:?}")]
    UnknownStorage {
        /// The storage key.
        key: String,
    },
}
