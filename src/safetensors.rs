//! `.safetensors` files: the weights format of the Hugging Face and Rust
//! ML world (candle, burn, transformers), read and written with the
//! [`safetensors`](https://docs.rs/safetensors) crate.
//!
//! A safetensors file is an 8-byte little-endian header length, a JSON
//! header naming each tensor's dtype, shape and byte range, and the bytes.
//! It holds exactly what `safetensors.torch.save_file` takes: one flat dict
//! of `str` to dense, contiguous tensors, plus a string-to-string metadata
//! table. So, writing a [`Value`]:
//!
//! - it must be a `dict` or `OrderedDict` of `str` to `Tensor` (a
//!   `state_dict()`, a `pytorch_model.bin`). A nested value (a training
//!   checkpoint `{"model": {...}, "optimizer": {...}, "step": 3}`) is
//!   refused with [`SafetensorsError::NotATensor`] naming the key: pick the
//!   state dict inside and write that, as `safetensors`' own `convert.py`
//!   takes `checkpoint["state_dict"]`. Names are written as they are, never
//!   flattened into dotted paths: transformers and candle look tensors up by
//!   the state dict's own names.
//! - every view is written contiguous, its elements in logical order, as
//!   `convert.py` and `save_model` write `tensor.contiguous()`; a view that
//!   repeats elements (an `expand`ed one) is refused, since its copy would
//!   be larger than everything it views (see [`SafetensorsError::Expanded`]).
//! - tensors that share memory (tied weights such as an embedding and its
//!   output layer, or two views of one storage) are each written with their
//!   own copy of their bytes. safetensors cannot say that two names are one
//!   memory: `save_file` refuses such a dict ("Some tensors share memory"),
//!   and `save_model` and `convert.py` keep one name and drop the others.
//!   A copy keeps every name, so `safetensors.torch.load_file` gives the
//!   same keys and values as `torch.load` did, and a loader that looks a
//!   name up finds it; the tie itself is not kept (transformers ties the
//!   weights again from the model's config), and the file is larger by the
//!   repeated bytes.
//! - `requires_grad` and `Parameter` have no place in the format and are
//!   dropped, as `save_file` drops them.
//! - dtypes map as `safetensors.torch` maps them (`bfloat16` as `BF16`,
//!   `float8_e4m3fn` as `F8_E4M3`, ...); `complex32`, `complex128`, `bcomplex32` and the `bits` dtypes have no
//!   safetensors dtype and are refused, as `save_file` refuses them.
//! - the metadata is `{"format": "pt"}`, as transformers' `save_pretrained`
//!   and `convert.py` write it; transformers refuses to load a file without
//!   it. [`SafetensorsFile`] writes any other table.
//!
//! Reading gives a `dict` of `str` to `Tensor` in the file's order, each
//! tensor contiguous over a storage of its own, as `load_file` gives them.
//! Every byte is hostile: the header length is checked against the input
//! before anything is allocated, the crate's header validation rejects
//! offsets that overlap, leave gaps or run past the data, and shapes whose
//! size overflows, and a tensor's storage is allocated only once its bytes
//! are known to be in the input. Memory stays within the input's size:
//! [`load`] leaves each tensor where the mapped file holds it, [`read`]
//! fills each tensor's storage as the stream delivers its bytes, and
//! [`from_bytes`] copies each out of the input once. [`save`] and
//! [`write()`] write one tensor at a time.
//!
//! # Examples
//!
//! ```
//! use tensorshare::{DType, Dict, StrategyKind, Tensor, Value};
//!
//! let weight = Tensor::from_slice(&StrategyKind::Bytes, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! let state_dict = Value::from(Dict::new().with("layer.weight", weight));
//!
//! let file = tensorshare::safetensors::to_bytes(&state_dict)?;
//! let loaded = tensorshare::safetensors::from_bytes(&file)?;
//! let tensor: &Tensor = loaded.try_get("layer.weight")?;
//! assert_eq!((tensor.dtype(), tensor.sizes()), (DType::Float32, &[2, 2][..]));
//! assert_eq!(tensor.as_slice::<f32>()?, [1.0, 2.0, 3.0, 4.0]);
//! # Ok::<(), tensorshare::Error>(())
//! ```

use std::io::{Read, Write};
use std::path::Path;

pub use crate::safetensors_format::{Dtype, SafeTensorError, SafetensorsError, SafetensorsFile};

use crate::Error;
use crate::model::Value;

/// Reads the safetensors file at `path` as a `dict` of `str` to `Tensor`,
/// as `safetensors.torch.load_file` does; [`SafetensorsFile::load`] gives
/// the metadata too.
///
/// # Errors
///
/// [`Error::Safetensors`] when the file cannot be read or changed while it
/// was read, naming the file; else [`Error::InFile`] naming it, whose cause
/// is the [`Error::Safetensors`] [`SafetensorsFile::load`] fails with.
pub fn load(path: impl AsRef<Path>) -> Result<Value, Error> {
    let path = path.as_ref();
    SafetensorsFile::load(path)
        .map(|file| file.tensors)
        .map_err(|error| Error::from(error).in_file(path))
}

/// Reads a safetensors file from `reader` as a `dict` of `str` to `Tensor`,
/// each tensor into a storage of its own ([`SafetensorsFile::read`]).
///
/// # Errors
///
/// [`Error::Safetensors`], for what [`SafetensorsFile::read`] fails on.
pub fn read(reader: impl Read) -> Result<Value, Error> {
    Ok(SafetensorsFile::read(reader)?.tensors)
}

/// Writes `state_dict` to `out` as a safetensors file with the metadata
/// `{"format": "pt"}`, one tensor at a time ([`SafetensorsFile::write`]).
///
/// # Errors
///
/// [`Error::Safetensors`], for what [`SafetensorsFile::write`] fails on.
///
/// # Examples
///
/// ```
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// let bias = Tensor::from_slice(&StrategyKind::Bytes, &[0.5f32, -0.5], &[2])?;
/// let mut file = Vec::new();
/// tensorshare::safetensors::write(&Dict::new().with("fc.bias", bias).into(), &mut file)?;
/// let tensors: Value = tensorshare::safetensors::read(file.as_slice())?;
/// assert_eq!(tensors.try_get::<&Tensor>("fc.bias")?.as_slice::<f32>()?, [0.5, -0.5]);
/// # Ok::<(), tensorshare::Error>(())
/// ```
pub fn write(state_dict: &Value, out: impl Write) -> Result<(), Error> {
    Ok(SafetensorsFile::new(state_dict.clone()).write(out)?)
}

/// Reads a safetensors file from `bytes` as a `dict` of `str` to `Tensor`,
/// as `safetensors.torch.load` does.
///
/// # Errors
///
/// [`Error::Safetensors`], for what [`SafetensorsFile::from_bytes`] fails on.
pub fn from_bytes(bytes: &[u8]) -> Result<Value, Error> {
    Ok(SafetensorsFile::from_bytes(bytes)?.tensors)
}

/// Writes `state_dict` as a safetensors file at `path`, with the metadata
/// `{"format": "pt"}`; see the [module docs](self) for what is written.
///
/// # Errors
///
/// [`Error::Safetensors`], for what [`to_bytes`] fails on, and with
/// [`SafetensorsError::Write`] when the file cannot be written.
///
/// # Examples
///
/// A `pytorch_model.bin` (any `torch.save` file holding a state dict,
/// saved from a GPU or not) as a `model.safetensors`, nothing executed;
/// here the `.bin` is written first, as `torch.save(state_dict, path)`
/// would:
///
/// ```
/// use tensorshare::torch_save::{self, TorchSaveFormat};
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// let dir = std::env::temp_dir().join(format!("tensorshare-save-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).expect("a scratch directory");
/// let bias = Tensor::from_slice(&StrategyKind::Bytes, &[0.5f32, -0.5], &[2])?;
/// let saved = torch_save::to_bytes(&Dict::new().with("fc.bias", bias).into(), TorchSaveFormat::Zip)?;
/// std::fs::write(dir.join("pytorch_model.bin"), saved).expect("the .bin written");
///
/// let state_dict = torch_save::load(dir.join("pytorch_model.bin"))?;
/// tensorshare::safetensors::save(&state_dict, dir.join("model.safetensors"))?;
///
/// let tensors: Value = tensorshare::safetensors::load(dir.join("model.safetensors"))?;
/// assert_eq!(tensors.try_get::<&Tensor>("fc.bias")?.as_slice::<f32>()?, [0.5, -0.5]);
/// # std::fs::remove_dir_all(&dir).expect("the scratch directory removed");
/// # Ok::<(), tensorshare::Error>(())
/// ```
pub fn save(state_dict: &Value, path: impl AsRef<Path>) -> Result<(), Error> {
    Ok(SafetensorsFile::new(state_dict.clone()).save(path)?)
}

/// The safetensors file of `state_dict`, with the metadata
/// `{"format": "pt"}`; see the [module docs](self) for what is written.
///
/// # Errors
///
/// [`Error::Safetensors`], with [`SafetensorsError::NotADict`], [`KeyNotStr`](SafetensorsError::KeyNotStr)
/// or [`NotATensor`](SafetensorsError::NotATensor) for a value that is not a
/// flat dict of str to tensor, each naming the key;
/// [`NoSafetensorsDtype`](SafetensorsError::NoSafetensorsDtype) for complex32,
/// complex128, bcomplex32 and the bits dtypes;
/// [`Expanded`](SafetensorsError::Expanded) for a view that repeats
/// elements; [`BytesElsewhere`](SafetensorsError::BytesElsewhere) for a
/// storage not in this process.
pub fn to_bytes(state_dict: &Value) -> Result<Vec<u8>, Error> {
    Ok(SafetensorsFile::new(state_dict.clone()).to_bytes()?)
}
