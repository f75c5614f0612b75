//! `torch.save` files by path, reader and writer: [`load`] and [`save`]
//! beside [`safetensors::load`] and [`safetensors::save`].
//!
//! A file is read through a read-only mapping: the zip directory and the
//! object pickle are parsed from it, and each storage stored uncompressed
//! (every zip torch writes, and every legacy stream) stays where the file
//! holds it, as `torch.load(mmap=True)` leaves a zip's; a compressed one is
//! copied out on its own. A legacy stream holds its storages at any address:
//! written out or read with [`Tensor::to_vec`](crate::Tensor::to_vec) they
//! are used in place, and viewed as a slice of elements
//! ([`Tensor::as_slice`](crate::Tensor::as_slice)) each is copied once to an
//! aligned address. The mapping lives as long as the last storage over it. A file truncated while mapped reads zeros
//! where it lost bytes instead of ending the process, and [`load`] then
//! fails with [`FileError::Changed`] rather than return them.
//!
//! A file is written storage by storage from where each storage's bytes are,
//! beside its path and renamed over it: nothing is built whole, an existing
//! file is replaced whole, and one a reader has mapped is never truncated
//! under it.
//!
//! # Examples
//!
//! ```
//! use tensorshare::{Dict, StrategyKind, Tensor, Value, torch_save};
//!
//! # fn main() -> Result<(), tensorshare::Error> {
//! let path = std::env::temp_dir().join(format!("model-{}.pt", std::process::id()));
//! let weight = Tensor::from_slice(&StrategyKind::Bytes, &[1.0f32, 2.0, 3.0], &[3])?;
//! torch_save::save(&Dict::new().with("weight", weight).into(), &path)?;
//!
//! let loaded = torch_save::load(&path)?;
//! let weight = loaded.get("weight").and_then(Value::as_tensor).expect("a tensor");
//! assert_eq!(weight.as_slice::<f32>()?, [1.0, 2.0, 3.0]);
//! # std::fs::remove_file(&path).ok();
//! # Ok(())
//! # }
//! ```
#![cfg_attr(
    feature = "safetensors",
    doc = "
[`safetensors::load`]: crate::safetensors::load
[`safetensors::save`]: crate::safetensors::save"
)]
#![cfg_attr(
    not(feature = "safetensors"),
    doc = "
[`safetensors::load`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/fn.load.html
[`safetensors::save`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/fn.save.html"
)]

use std::io::{BufWriter, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tensorshare_compat::pickle::SharedBytes;
use tensorshare_compat::torch_save;
use tensorshare_strategies::platform::mapped_file::{MappedFile, MappedOrStream};

use crate::error::Error;
use crate::model::Value;
use crate::registry::Registry;
use crate::registry::audit::GlobalAudit;
use crate::registry::saved::{read_options, rebuild_archive};
use crate::save::{any_source_changed, partial_file_beside, write_torch};

pub use crate::archive::FileError;
pub use tensorshare_compat::torch_save::TorchSaveError;
pub use tensorshare_compat::torch_save::TorchSaveFormat;

/// Reads the `torch.save` file (zip or legacy) at `path` with the default
/// [`Registry`], through a mapping of the file.
///
/// # Errors
///
/// As [`load_with`].
pub fn load(path: impl AsRef<Path>) -> Result<Value, Error> {
    load_with(path, &Registry::default()).map(|(_, value)| value)
}

/// Reads the `torch.save` file at `path` with `registry`, through a mapping
/// of the file, and says which format it is in. A path that cannot be
/// mapped (a pipe, `/dev/stdin`) is read as a stream ([`read`]).
///
/// Storages saved on any device (`cuda:0`, `mps`, ...) read as CPU
/// storages, as `torch.load(map_location="cpu")` reads them.
///
/// # Errors
///
/// [`FileError::Read`] when the file cannot be opened or read,
/// [`FileError::Changed`] when it shrank while it was read, each naming the
/// file; else [`Error::InFile`] naming it, whose cause is
/// [`Error::TorchSave`] for a malformed archive, [`Error::Decode`] or
/// [`Error::Rebuild`] for its pickle, the latter naming the globals outside
/// the allowlist and where the pickle names each.
pub fn load_with(
    path: impl AsRef<Path>,
    registry: &Registry,
) -> Result<(TorchSaveFormat, Value), Error> {
    let path = path.as_ref();
    let read_error = |cause| FileError::Read {
        path: path.to_owned(),
        cause,
    };
    let mapped = match MappedFile::open_or_stream(path).map_err(read_error)? {
        MappedOrStream::Mapped(mapped) => Arc::new(mapped),
        MappedOrStream::Stream(file) => {
            return read_with(file, registry).map_err(|error| match error {
                Error::TorchSaveFile(FileError::Read { cause, .. }) => read_error(cause).into(),
                other => other.in_file(path),
            });
        }
    };
    let changed = || FileError::Changed {
        path: path.to_owned(),
    };
    let input = SharedBytes::from_owner(MappedBytes(Arc::clone(&mapped)));
    let audit = GlobalAudit::new(registry);
    let loaded = torch_save::read_shared(&input, &audit, &read_options(registry))
        .map_err(Error::from)
        .and_then(|archive| {
            audit.finish()?;
            Ok(rebuild_archive(archive, registry, 0, Some(&mapped), None)?)
        });
    // Whatever failed, a file that shrank under the reader is the cause.
    if mapped.was_truncated() {
        return Err(changed().into());
    }
    // Reading each record's local header mapped the page cache around it
    // (whole large folios, a megabyte or more each): give it back, so that
    // memory grows only with the storages read from here on.
    mapped.release(0..mapped.len());
    loaded.map_err(|error| error.in_file(path))
}

/// Reads a `torch.save` file from `reader` to its end, with the default
/// [`Registry`]: for a stream that cannot be mapped (stdin, a socket). The
/// file is held in memory once; storages are slices of it where aligned.
///
/// # Errors
///
/// [`FileError::Read`] (with the path `-`) when reading fails, else as
/// [`load_with`].
pub fn read(reader: impl Read) -> Result<Value, Error> {
    read_with(reader, &Registry::default()).map(|(_, value)| value)
}

fn read_with(
    mut reader: impl Read,
    registry: &Registry,
) -> Result<(TorchSaveFormat, Value), Error> {
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .map_err(|cause| FileError::Read {
            path: PathBuf::from("-"),
            cause,
        })?;
    let input = SharedBytes::from(bytes);
    let audit = GlobalAudit::new(registry);
    let archive = torch_save::read_shared(&input, &audit, &read_options(registry))?;
    audit.finish()?;
    Ok(rebuild_archive(archive, registry, 0, None, None)?)
}

/// Reads a `torch.save` file held in memory with the default [`Registry`]
/// (each storage copied out of `bytes`).
///
/// # Errors
///
/// As [`load_with`], less the file errors.
pub fn from_bytes(bytes: &[u8]) -> Result<Value, Error> {
    from_bytes_with(bytes, &Registry::default()).map(|(_, value)| value)
}

/// Reads a `torch.save` file held in memory with `registry` (each storage
/// copied out of `bytes`), and says which format it is in.
///
/// # Errors
///
/// As [`load_with`], less the file errors.
pub fn from_bytes_with(
    bytes: &[u8],
    registry: &Registry,
) -> Result<(TorchSaveFormat, Value), Error> {
    Ok(crate::archive::load_torch_save(bytes, registry)?)
}

/// `value` as the bytes of a `torch.save` file of `format`, built in
/// memory: for a file that goes somewhere other than a path (see
/// [`write`](fn@write) for any writer that seeks).
///
/// # Errors
///
/// As [`write`](fn@write).
///
/// # Examples
///
/// ```
/// use tensorshare::torch_save::{self, TorchSaveFormat};
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// let bias = Tensor::from_slice(&StrategyKind::Bytes, &[0.5f32, -0.5], &[2])?;
/// let file = torch_save::to_bytes(&Dict::new().with("fc.bias", &bias).into(), TorchSaveFormat::Zip)?;
/// assert!(file.starts_with(b"PK\x03\x04"));
/// let back: Value = torch_save::from_bytes(&file)?;
/// assert_eq!(back.try_get::<&Tensor>("fc.bias")?, &bias);
/// # Ok::<(), tensorshare::Error>(())
/// ```
pub fn to_bytes(value: &Value, format: TorchSaveFormat) -> Result<Vec<u8>, Error> {
    Ok(crate::save::save_torch(value, format)?)
}

/// Writes `value` to `path` as a zip `torch.save` file, which stock torch
/// loads with `torch.load(path, weights_only=True)`.
///
/// # Errors
///
/// As [`save_as`].
pub fn save(value: &Value, path: impl AsRef<Path>) -> Result<(), Error> {
    save_as(value, path, TorchSaveFormat::Zip)
}

/// Writes `value` to `path` as a `torch.save` file of `format`, storage by
/// storage, beside `path` and renamed over it; a new file gets the
/// permissions [`File::create`](std::fs::File::create) gives.
///
/// # Errors
///
/// [`Error::Reduce`] for a value with no torch.save form or a storage whose
/// bytes are not at hand (its message says which), [`FileError::Write`] when the file cannot be written, and
/// [`FileError::SourceChanged`] when a storage's own file shrank while it
/// was written out (nothing is written then).
pub fn save_as(
    value: &Value,
    path: impl AsRef<Path>,
    format: TorchSaveFormat,
) -> Result<(), Error> {
    let path = path.as_ref();
    let write_error = |cause| FileError::Write {
        path: path.to_owned(),
        cause,
    };
    let mut temp = partial_file_beside(path, ".pt.partial").map_err(write_error)?;
    {
        let mut out = BufWriter::with_capacity(1 << 20, temp.as_file_mut());
        let storages = write_torch(value, format, &mut out).map_err(|error| match error {
            crate::reduce::ReduceError::TorchSaveWrite(torch_save::WriteError::Io(cause)) => {
                Error::from(write_error(cause))
            }
            other => other.into(),
        })?;
        out.flush().map_err(write_error)?;
        if any_source_changed(&storages) {
            return Err(FileError::SourceChanged {
                path: path.to_owned(),
            }
            .into());
        }
    }
    temp.persist(path)
        .map_err(|error| write_error(error.error))?;
    Ok(())
}

/// Writes `value` to `out` as a `torch.save` file of `format`, storage by
/// storage (a zip needs to seek back over each record's header).
///
/// # Errors
///
/// As [`save_as`], the output's errors as [`Error::TorchSaveWrite`].
pub fn write(value: &Value, out: impl Write + Seek, format: TorchSaveFormat) -> Result<(), Error> {
    let storages = write_torch(value, format, out)?;
    if any_source_changed(&storages) {
        return Err(FileError::SourceChanged {
            path: PathBuf::from("the output"),
        }
        .into());
    }
    Ok(())
}

/// A mapped file as the owner of a [`SharedBytes`].
struct MappedBytes(Arc<MappedFile>);

impl AsRef<[u8]> for MappedBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}
