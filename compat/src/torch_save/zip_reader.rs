//! The zip torch.save format: `<dir>/data.pkl` holds the object, with
//! storages as `('storage', class, key, location, numel)` persistent ids, and
//! `<dir>/data/<key>` each storage's bytes. `<dir>` is `archive` for a
//! buffer and the file's stem for a path (and other names in older torch),
//! so the reader takes the one top-level directory holding `data.pkl`.

use std::collections::BTreeMap;
use std::io::{Cursor, Read};

use zip::result::ZipError;
use zip::{CompressionMethod, ZipArchive};

use super::persistent_id::{PidLayout, collect_storage_pids};
use super::{
    ReadOptions, StorageRecord, StreamPart, TorchSaveArchive, TorchSaveError, TorchSaveFormat,
    WithStorageClasses, ZIP_METADATA_ENTRIES, confine_storage_classes, pickle_error,
};
use crate::pickle::{GlobalFilter, SharedBytes, decode};

/// Storage records that start at a multiple of this, stored uncompressed,
/// are read in place by [`read_zip_shared`]: every dtype's elements are
/// then aligned (torch aligns them to 64 bytes since 2.1, and to 64 before
/// that in practice).
const IN_PLACE_ALIGNMENT: u64 = 16;

/// Reads a zip-format torch.save file.
///
/// `globals` decides which globals `data.pkl` may name; the storage classes
/// of persistent ids are allowed on top, in persistent ids only. Only the
/// records the pickle references are read. A record longer than its storage
/// is cut to the storage's length, as torch does.
///
/// # Errors
///
/// - [`TorchSaveError::Zip`] if the container does not parse,
///   [`TorchSaveError::TooManyEntries`] and
///   [`TorchSaveError::DuplicateEntry`] for hostile central directories,
///   [`TorchSaveError::NoDataPickle`] or
///   [`TorchSaveError::AmbiguousArchiveRoot`] if no single directory holds
///   `data.pkl`;
/// - [`TorchSaveError::BigEndian`] or [`TorchSaveError::UnknownByteOrder`]
///   from the `byteorder` record (an absent one means little-endian);
/// - [`TorchSaveError::Pickle`] or [`TorchSaveError::Truncated`] for a
///   `data.pkl` that does not decode, [`TorchSaveError::PersistentId`] for a
///   persistent id that is not a storage;
/// - [`TorchSaveError::MissingRecord`] or [`TorchSaveError::ShortRecord`]
///   naming a storage record that is absent or too short,
///   [`TorchSaveError::ZipRecord`] for one that does not read (CRC, method);
/// - [`TorchSaveError::TooManyRecords`] or [`TorchSaveError::SizeLimit`]
///   past the `options` limits.
pub fn read_zip(
    bytes: &[u8],
    globals: &dyn GlobalFilter,
    options: &ReadOptions,
) -> Result<TorchSaveArchive, TorchSaveError> {
    read_zip_from(bytes, None, globals, options)
}

/// Reads a zip-format torch.save file as [`read_zip`] does, from a shared
/// buffer (a mapped file): each storage record stored uncompressed at an
/// aligned offset, as torch writes them, is a slice of `input` rather than
/// a copy; a compressed or unaligned one is copied, on its own. What
/// [`ReadOptions::max_total_bytes`] bounds is then the bytes copied: the
/// records left in place take no memory beyond `input`'s.
///
/// The stored records' CRCs are not checked (that would read every byte of
/// the file up front, which reading in place is there to avoid), as
/// `torch.load(mmap=True)` does not check them either.
///
/// # Errors
///
/// As [`read_zip`].
pub fn read_zip_shared(
    input: &SharedBytes,
    globals: &dyn GlobalFilter,
    options: &ReadOptions,
) -> Result<TorchSaveArchive, TorchSaveError> {
    read_zip_from(input, Some(input), globals, options)
}

fn read_zip_from(
    bytes: &[u8],
    shared: Option<&SharedBytes>,
    globals: &dyn GlobalFilter,
    options: &ReadOptions,
) -> Result<TorchSaveArchive, TorchSaveError> {
    let mut archive = ZipArchive::new(Cursor::new(bytes)).map_err(|e| TorchSaveError::Zip {
        detail: e.to_string(),
    })?;
    let limit = options.max_records.saturating_add(ZIP_METADATA_ENTRIES);
    if archive.len() > limit {
        return Err(TorchSaveError::TooManyEntries {
            found: archive.len(),
            limit,
        });
    }
    // The zip crate keeps the last of several entries with one name, while
    // torch's reader takes the first: refuse the ambiguity.
    if central_directory_entries(bytes) != Some(archive.len() as u64) {
        return Err(TorchSaveError::DuplicateEntry);
    }
    let prefix = archive_root(&archive)?;
    let mut budget = Budget {
        used: 0,
        limit: options.max_total_bytes,
    };

    let byteorder_name = format!("{prefix}/byteorder");
    if let Some(byteorder) = read_record(&mut archive, &byteorder_name, None, &mut budget)? {
        let part = StreamPart::Record {
            name: byteorder_name,
        };
        match &*byteorder {
            b"little" => {}
            b"big" => return Err(TorchSaveError::BigEndian { part }),
            other => {
                let found = String::from_utf8_lossy(other).chars().take(64).collect();
                return Err(TorchSaveError::UnknownByteOrder { part, found });
            }
        }
    }

    let pickle_name = format!("{prefix}/data.pkl");
    let pickle_part = StreamPart::Record {
        name: pickle_name.clone(),
    };
    let pickle_bytes = read_record(&mut archive, &pickle_name, shared, &mut budget)?
        .ok_or(TorchSaveError::NoDataPickle)?;
    let object = decode(&pickle_bytes, &WithStorageClasses(globals), &options.limits)
        .map_err(|error| pickle_error(pickle_part.clone(), 0, pickle_bytes.len(), error))?
        .pickle;
    confine_storage_classes(&object, globals, &pickle_part)?;

    let pids = collect_storage_pids(&object, PidLayout::Zip, &pickle_part)?;
    if pids.len() > options.max_records {
        return Err(TorchSaveError::TooManyRecords {
            found: pids.len(),
            limit: options.max_records,
        });
    }
    let mut records = BTreeMap::new();
    for (key, pid) in pids {
        let name = format!("{prefix}/data/{key}");
        let expected = pid
            .nbytes()
            .ok_or_else(|| TorchSaveError::StorageTooLarge { key: key.clone() })?;
        let data = read_record(&mut archive, &name, shared, &mut budget)?
            .ok_or_else(|| TorchSaveError::MissingRecord { name: name.clone() })?;
        let found = data.len() as u64;
        if found < expected {
            return Err(TorchSaveError::ShortRecord {
                name,
                expected,
                found,
            });
        }
        // `expected <= found`, a length in memory.
        let data = data
            .slice(0..usize::try_from(expected).unwrap_or(usize::MAX))
            .unwrap_or_default();
        records.insert(key, StorageRecord::from_pid(pid, data));
    }

    Ok(TorchSaveArchive {
        format: TorchSaveFormat::Zip,
        object,
        records,
        sys_info: None,
    })
}

/// The one top-level directory holding `data.pkl`.
fn archive_root(archive: &ZipArchive<Cursor<&[u8]>>) -> Result<String, TorchSaveError> {
    let mut dirs: Vec<String> = archive
        .file_names()
        .filter_map(|name| name.strip_suffix("/data.pkl"))
        .filter(|dir| !dir.is_empty() && !dir.contains('/'))
        .map(str::to_owned)
        .collect();
    dirs.sort();
    dirs.dedup();
    match dirs.len() {
        0 => Err(TorchSaveError::NoDataPickle),
        1 => Ok(dirs.remove(0)),
        _ => Err(TorchSaveError::AmbiguousArchiveRoot { dirs }),
    }
}

/// Bytes read so far against the caller's limit.
struct Budget {
    used: u64,
    limit: u64,
}

impl Budget {
    fn charge(&mut self, name: &str, size: u64) -> Result<(), TorchSaveError> {
        match self.used.checked_add(size) {
            Some(used) if used <= self.limit => {
                self.used = used;
                Ok(())
            }
            _ => Err(TorchSaveError::SizeLimit {
                part: StreamPart::Record {
                    name: name.to_owned(),
                },
                needed: size,
                limit: self.limit,
            }),
        }
    }
}

/// A whole record, or `None` if the archive has no record of that name:
/// a slice of `shared` when it is stored uncompressed at an aligned
/// offset, else read out.
///
/// The declared size of a record read out is charged to the budget before
/// anything is decompressed, and no more than it is read, so a record
/// claiming little and inflating to much is an error, not an allocation.
fn read_record(
    archive: &mut ZipArchive<Cursor<&[u8]>>,
    name: &str,
    shared: Option<&SharedBytes>,
    budget: &mut Budget,
) -> Result<Option<SharedBytes>, TorchSaveError> {
    let record_error = |detail: String| TorchSaveError::ZipRecord {
        part: StreamPart::Record {
            name: name.to_owned(),
        },
        detail,
    };
    let file = match archive.by_name(name) {
        Ok(file) => file,
        Err(ZipError::FileNotFound) => return Ok(None),
        Err(error) => return Err(record_error(error.to_string())),
    };
    let declared = file.size();
    let in_place = file
        .data_start()
        .filter(|start| start % IN_PLACE_ALIGNMENT == 0)
        .filter(|_| {
            file.compression() == CompressionMethod::Stored && file.compressed_size() == declared
        });
    if let (Some(shared), Some(start)) = (shared, in_place) {
        let range = usize::try_from(start)
            .ok()
            .and_then(|start| Some(start..start.checked_add(usize::try_from(declared).ok()?)?));
        return range
            .and_then(|range| shared.slice(range))
            .map(Some)
            .ok_or_else(|| {
                record_error(format!(
                    "its {declared} bytes at offset {start} run past the end of the file"
                ))
            });
    }
    budget.charge(name, declared)?;
    // Reading one byte past the declared size both catches a record that
    // inflates beyond it and lets the reader reach the end and check the CRC.
    let mut data = Vec::new();
    file.take(declared.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|error| record_error(error.to_string()))?;
    if data.len() as u64 != declared {
        return Err(record_error(format!(
            "it holds {} bytes but its header declares {declared}",
            data.len()
        )));
    }
    Ok(Some(data.into()))
}

/// The entry count the end-of-central-directory record declares (from the
/// zip64 record when the classic one says 0xffff), or `None` when the
/// records cannot be found.
fn central_directory_entries(bytes: &[u8]) -> Option<u64> {
    const EOCD: &[u8] = b"PK\x05\x06";
    const ZIP64_LOCATOR: &[u8] = b"PK\x06\x07";
    const ZIP64_EOCD: &[u8] = b"PK\x06\x06";
    // The record is 22 bytes plus a comment of at most 65535 bytes.
    let search_from = bytes.len().saturating_sub(22 + 0xffff);
    let eocd = search_from
        + bytes
            .get(search_from..)?
            .windows(4)
            .rposition(|w| w == EOCD)?;
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let entries = u16_at(eocd + 10)?;
    if entries != 0xffff {
        return Some(u64::from(entries));
    }
    let locator = eocd.checked_sub(20)?;
    if bytes.get(locator..locator + 4)? != ZIP64_LOCATOR {
        return None;
    }
    let record = usize::try_from(u64_at(locator + 8)?).ok()?;
    if bytes.get(record..record.checked_add(4)?)? != ZIP64_EOCD {
        return None;
    }
    u64_at(record + 32)
}
