//! The legacy torch.save stream: five pickles, then the storages' bytes.
//!
//! 1. the magic number `0x1950a86a20f9469cfc6c`,
//! 2. the protocol version, 1001,
//! 3. a `sys_info` dict (`protocol_version`, `little_endian`, `type_sizes`),
//! 4. the object, storages replaced by `('storage', class, key, location,
//!    numel, view_metadata)` persistent ids,
//! 5. the list of storage keys,
//!
//! then, for each key in that list's order, its element count as 8
//! little-endian bytes and `count × element size` raw bytes, the element size
//! coming from the storage class in the key's persistent id. Bytes after the
//! last storage are ignored, as torch ignores them.

use std::collections::BTreeMap;

use super::persistent_id::{PidLayout, collect_storage_pids, int_of, string_of};
use super::{
    ReadOptions, StorageRecord, StreamPart, TorchSaveArchive, TorchSaveError, TorchSaveFormat,
    WithStorageClasses, confine_storage_classes, detect_format, no_globals, pickle_error,
};
use crate::pickle::{
    DecodeError, DecodeErrorCode, GlobalFilter, Limits, Node, Pickle, SharedBytes, decode,
};

/// torch's `MAGIC_NUMBER`.
pub(super) const MAGIC_NUMBER: i128 = 0x1950_a86a_20f9_469c_fc6c;
/// torch's `PROTOCOL_VERSION` for the legacy stream.
pub(super) const PROTOCOL_VERSION: i64 = 1001;

/// Reads a legacy torch.save stream.
///
/// `globals` decides which globals the object pickle may name; the storage
/// classes of persistent ids are allowed on top, in persistent ids only.
/// Storages saved as `UntypedStorage` (which torch 2.x writes for dtypes
/// without a legacy class, and cannot load back itself) are read as bytes.
///
/// # Errors
///
/// - [`TorchSaveError::TarFormat`] for torch < 0.4's tar format;
/// - [`TorchSaveError::NotTorchSave`] if the stream does not start with the
///   magic number, [`TorchSaveError::UnsupportedProtocolVersion`] if the
///   version is not 1001, [`TorchSaveError::BigEndian`] if `sys_info` says
///   big-endian;
/// - [`TorchSaveError::Truncated`] naming the part and offset where the
///   input ends early, [`TorchSaveError::Pickle`] for a pickle that does not
///   decode (including a global `globals` refuses);
/// - the key-list and storage errors ([`TorchSaveError::MissingStorageData`],
///   [`TorchSaveError::StorageCountMismatch`], ...) for a stream whose parts
///   disagree, and [`TorchSaveError::TooManyRecords`] or
///   [`TorchSaveError::SizeLimit`] past the `options` limits.
pub fn read_legacy(
    bytes: &[u8],
    globals: &dyn GlobalFilter,
    options: &ReadOptions,
) -> Result<TorchSaveArchive, TorchSaveError> {
    read_legacy_from(bytes, None, globals, options)
}

/// [`read_legacy`], with each record a slice of `shared` (which `bytes` is
/// all of) instead of a copy when it is given.
pub(super) fn read_legacy_from(
    bytes: &[u8],
    shared: Option<&SharedBytes>,
    globals: &dyn GlobalFilter,
    options: &ReadOptions,
) -> Result<TorchSaveArchive, TorchSaveError> {
    if looks_like_tar(bytes) {
        return Err(TorchSaveError::TarFormat);
    }
    let limits = &options.limits;
    let mut stream = Stream { bytes, pos: 0 };

    let magic = stream
        .pickle(StreamPart::MagicNumber, &no_globals, limits)
        .map_err(|e| match e {
            TorchSaveError::Pickle { cause, .. } => TorchSaveError::NotTorchSave {
                reason: no_magic_pickle(bytes, &cause),
            },
            other => other,
        })?;
    if root_int(&magic) != Some(MAGIC_NUMBER) {
        return Err(TorchSaveError::NotTorchSave {
            reason: "the first pickle is not torch's magic number".to_owned(),
        });
    }

    let version = stream.pickle(StreamPart::ProtocolVersion, &no_globals, limits)?;
    if root_int(&version) != Some(i128::from(PROTOCOL_VERSION)) {
        return Err(TorchSaveError::UnsupportedProtocolVersion {
            found: describe_root(&version),
        });
    }

    let sys_info = stream.pickle(StreamPart::SysInfo, &no_globals, limits)?;
    if says_big_endian(&sys_info) {
        return Err(TorchSaveError::BigEndian {
            part: StreamPart::SysInfo,
        });
    }

    let object = stream.pickle(StreamPart::Object, &WithStorageClasses(globals), limits)?;
    confine_storage_classes(&object, globals, &StreamPart::Object)?;

    let keys = stream.pickle(StreamPart::StorageKeys, &no_globals, limits)?;
    let keys = storage_keys(&keys)?;
    if keys.len() > options.max_records {
        return Err(TorchSaveError::TooManyRecords {
            found: keys.len(),
            limit: options.max_records,
        });
    }

    let mut pids = collect_storage_pids(&object, PidLayout::Legacy, &StreamPart::Object)?;
    let mut records = BTreeMap::new();
    let mut total: u64 = 0;
    for key in keys {
        if records.contains_key(&key) {
            return Err(TorchSaveError::DuplicateStorageKey { key });
        }
        let Some(pid) = pids.remove(&key) else {
            return Err(TorchSaveError::UnreferencedStorageKey { key });
        };
        let expected_nbytes = pid
            .nbytes()
            .ok_or_else(|| TorchSaveError::StorageTooLarge { key: key.clone() })?;
        let count_offset = stream.pos;
        let count = stream.take(8, StreamPart::StorageCount { key: key.clone() })?;
        let count = <[u8; 8]>::try_from(count)
            .map(u64::from_le_bytes)
            .unwrap_or(u64::MAX);
        let element_size = pid.element_size();
        if count.checked_mul(element_size as u64) != Some(expected_nbytes) {
            return Err(TorchSaveError::StorageCountMismatch {
                key,
                offset: count_offset,
                count,
                element_size,
                expected_nbytes,
            });
        }
        let part = StreamPart::StorageData { key: key.clone() };
        total = total.saturating_add(expected_nbytes);
        if total > options.max_total_bytes {
            return Err(TorchSaveError::SizeLimit {
                part,
                needed: expected_nbytes,
                limit: options.max_total_bytes,
            });
        }
        // A length past usize cannot be in memory: the input ends first.
        let nbytes = usize::try_from(expected_nbytes).unwrap_or(usize::MAX);
        let start = stream.pos;
        let taken = stream.take(nbytes, part)?;
        let data = shared
            .and_then(|shared| shared.slice(start..start + taken.len()))
            .unwrap_or_else(|| SharedBytes::from(taken));
        records.insert(key, StorageRecord::from_pid(pid, data));
    }
    if let Some(key) = pids.into_keys().next() {
        return Err(TorchSaveError::MissingStorageData { key });
    }

    Ok(TorchSaveArchive {
        format: TorchSaveFormat::Legacy,
        object,
        records,
        sys_info: Some(sys_info),
    })
}

/// Why `bytes` is no legacy stream, its first pickle having failed with
/// `cause`. Input that is no pickle at all is described here, not by the
/// decoder's explanation, which is written for a pickle received ("check
/// what was sent") and would say again what "not a torch.save file" says.
fn no_magic_pickle(bytes: &[u8], cause: &DecodeError) -> String {
    // Only a caller of `read_legacy` itself can get here with a zip.
    if matches!(detect_format(bytes), Ok(TorchSaveFormat::Zip)) {
        return "it is a zip archive, not a legacy stream: read it with read_zip, or with read, \
                which tells the two formats apart"
            .to_owned();
    }
    let head = match &cause.code {
        DecodeErrorCode::NotAPickle { head, .. } => head.as_slice(),
        _ => &[],
    };
    match head.first() {
        Some(first) => format!(
            "it starts with byte 0x{first:02x} (b\"{}\"), which no pickle starts with",
            head.escape_ascii()
        ),
        None => format!("its first pickle does not decode ({cause})"),
    }
}

/// The input and how far it has been read.
struct Stream<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Stream<'a> {
    /// Decodes the next pickle, stopping after its `STOP`.
    fn pickle(
        &mut self,
        part: StreamPart,
        globals: &dyn GlobalFilter,
        limits: &Limits,
    ) -> Result<Pickle, TorchSaveError> {
        let rest = self.bytes.get(self.pos..).unwrap_or_default();
        if rest.is_empty() {
            return Err(TorchSaveError::Truncated {
                part,
                offset: self.bytes.len(),
            });
        }
        match decode(rest, globals, limits) {
            Ok(decoded) => {
                self.pos = self.pos.saturating_add(decoded.consumed.min(rest.len()));
                Ok(decoded.pickle)
            }
            Err(error) => Err(pickle_error(part, self.pos, rest.len(), error)),
        }
    }

    /// The next `n` raw bytes.
    fn take(&mut self, n: usize, part: StreamPart) -> Result<&'a [u8], TorchSaveError> {
        let bytes = self.bytes;
        let taken = self
            .pos
            .checked_add(n)
            .and_then(|end| Some((bytes.get(self.pos..end)?, end)));
        let (taken, end) = taken.ok_or(TorchSaveError::Truncated {
            part,
            offset: self.bytes.len(),
        })?;
        self.pos = end;
        Ok(taken)
    }
}

fn root_int(pickle: &Pickle) -> Option<i128> {
    pickle.root_node().and_then(int_of)
}

fn describe_root(pickle: &Pickle) -> String {
    match pickle.root_node() {
        Some(node) => match int_of(node) {
            Some(value) => value.to_string(),
            None => format!("(not an int: {})", node.kind_name()),
        },
        None => "(nothing)".to_owned(),
    }
}

/// Whether `sys_info['little_endian']` is false. torch does not look, but
/// reading big-endian bytes as little-endian would give wrong values.
fn says_big_endian(sys_info: &Pickle) -> bool {
    let Some(Node::Dict(pairs)) = sys_info.root_node() else {
        return false;
    };
    pairs.iter().any(|&(key, value)| {
        string_of(sys_info, key).as_deref() == Some("little_endian")
            && matches!(sys_info.get(value), Some(Node::Bool(false) | Node::Int(0)))
    })
}

fn storage_keys(keys: &Pickle) -> Result<Vec<String>, TorchSaveError> {
    let invalid = |detail: String| TorchSaveError::InvalidStorageKeys { detail };
    let root = keys.root_node();
    let items = match root {
        Some(Node::List(items) | Node::Tuple(items)) => items,
        Some(other) => return Err(invalid(format!("found {}", other.kind_name()))),
        None => return Err(invalid("found nothing".to_owned())),
    };
    items
        .iter()
        .enumerate()
        .map(|(index, &item)| {
            string_of(keys, item).ok_or_else(|| {
                let kind = keys.get(item).map_or("nothing", Node::kind_name);
                invalid(format!("item {index} is {kind}"))
            })
        })
        .collect()
}

/// Whether `bytes` starts with a tar header, as Python's `tarfile` (which
/// torch tries first) would accept it: the `ustar` magic, or a header whose
/// checksum field matches its bytes (pre-POSIX tar).
pub(crate) fn looks_like_tar(bytes: &[u8]) -> bool {
    let Some(header) = bytes.get(..512) else {
        return false;
    };
    if header.get(257..262) == Some(b"ustar".as_slice()) {
        return true;
    }
    let Some(field) = header.get(148..156) else {
        return false;
    };
    let digits: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|&b| b == b' ')
        .take_while(|b| (b'0'..=b'7').contains(b))
        .collect();
    if digits.is_empty() {
        return false;
    }
    let stored = digits
        .iter()
        .fold(0u64, |acc, &d| (acc << 3) | u64::from(d - b'0'));
    let field_range = 148..156;
    let mut unsigned: u64 = 0;
    let mut signed: i64 = 0;
    for (index, &byte) in header.iter().enumerate() {
        let byte = if field_range.contains(&index) {
            b' '
        } else {
            byte
        };
        unsigned += u64::from(byte);
        signed += i64::from(byte as i8);
    }
    stored == unsigned || i64::try_from(stored).is_ok_and(|s| s == signed)
}
