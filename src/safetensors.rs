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
//! - dtypes map as `safetensors.torch` maps them (see [`to_safetensors_dtype`]);
//!   `complex32`, `complex128`, `bcomplex32` and the `bits` dtypes have no
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
//! [`load`] reads each tensor from the file straight into its storage, and
//! [`from_bytes`] copies each out of the input once.
//!
//! # Examples
//!
//! ```
//! use tensorshare::{DType, Storage, Tensor, TensorView, Value};
//!
//! let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0].iter().flat_map(|f| f.to_le_bytes()).collect();
//! let weight = Tensor::new(Storage::from_vec(bytes), TensorView::contiguous(DType::Float32, &[2, 2]))?;
//! let state_dict = Value::Dict(vec![(Value::Str("layer.weight".into()), Value::Tensor(weight))].into());
//!
//! let file = tensorshare::safetensors::to_bytes(&state_dict)?;
//! let loaded = tensorshare::safetensors::from_bytes(&file)?;
//! let Value::Dict(items) = &loaded else { panic!("a dict") };
//! assert_eq!(items[0].0.as_str(), Some("layer.weight"));
//! let tensor = items[0].1.as_tensor().unwrap();
//! assert_eq!((tensor.dtype(), tensor.sizes()), (DType::Float32, &[2, 2][..]));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ::safetensors::tensor::{Metadata, TensorInfo};

// The format crate's dtype and error, which this module's signatures name.
pub use ::safetensors::{Dtype, SafeTensorError};

use crate::DType;
use crate::model::{Storage, Tensor, TensorView, Value, ViewError};

/// The largest header read, as the `safetensors` crate caps it: 100 MB.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Bytes before the header: its length, a little-endian `u64`.
const LENGTH_BYTES: usize = 8;

/// Why a safetensors file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetensorsError {
    /// The input is shorter than the 8-byte header length.
    #[error(
        "not a safetensors file: {len} bytes, fewer than the 8 of the header length it starts with"
    )]
    TooShort {
        /// The input's length.
        len: u64,
    },
    /// The header length runs past the end of the input or past
    /// [`MAX_HEADER_BYTES`]: a truncated file, or not a safetensors file.
    #[error(
        "safetensors header of {header_len} bytes, but {available} bytes follow its length \
         (at most {MAX_HEADER_BYTES} are read): the file is truncated or is not a safetensors file"
    )]
    HeaderPastEnd {
        /// The length the file's first 8 bytes give.
        header_len: u64,
        /// The bytes after those 8.
        available: u64,
    },
    /// The header is not valid: not UTF-8 or JSON, a dtype the format does
    /// not know, offsets that overlap, leave a gap or disagree with the
    /// shape, a size that overflows. `why` names the tensor when the format
    /// crate does, and the place in the header.
    #[error("invalid safetensors header: {why}")]
    Header {
        /// What is wrong, as the format crate's validation and JSON parser
        /// say it.
        why: String,
    },
    /// The tensors' byte ranges end elsewhere than the file does.
    #[error(
        "safetensors header places its tensors' bytes in {data_len} bytes, but the file has \
         {available} after its header: the file is truncated or has trailing bytes"
    )]
    DataLength {
        /// Where the last tensor ends, per the header.
        data_len: u64,
        /// The bytes after the header.
        available: u64,
    },
    /// A tensor in the file has a dtype torch does not have (`F6_E2M3`,
    /// `F6_E3M2`).
    #[error("tensor `{name}`: safetensors dtype {dtype} has no torch dtype")]
    NoTorchDtype {
        /// The tensor's name.
        name: String,
        /// Its dtype in the file.
        dtype: Dtype,
    },
    /// A tensor in the file has a shape torch cannot hold in its dtype:
    /// `F4` elements are `float4_e2m1fn_x2` pairs, so the last dimension
    /// must be even.
    #[error("tensor `{name}`: {why}")]
    Shape {
        /// The tensor's name.
        name: String,
        /// What is wrong with it.
        why: String,
    },
    /// A tensor read from the file does not fit its bytes (the header
    /// validation should have caught it).
    #[error("tensor `{name}`: {cause}")]
    View {
        /// The tensor's name.
        name: String,
        /// Why the view does not fit.
        cause: ViewError,
    },
    /// The value to write is not a dict.
    #[error(
        "a safetensors file holds one flat dict of str to tensor, and this is {}: \
         write a state dict (a dict or OrderedDict of str to Tensor)",
        with_article(found)
    )]
    NotADict {
        /// The value's Python type.
        found: &'static str,
    },
    /// A key of the dict to write is not a `str`.
    #[error(
        "{} key: safetensors names every tensor with a str",
        with_article(found)
    )]
    KeyNotStr {
        /// The key's Python type.
        found: &'static str,
    },
    /// A key occurs twice in the dict to write.
    #[error("`{key}` is a key twice: a safetensors file names each tensor once")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// The file to write does not fit in memory (or its size in a `usize`).
    #[error(
        "the safetensors file takes {} bytes, which cannot be allocated: write it to a file \
         (save), which holds one tensor at a time",
        bytes.map_or_else(|| "more than usize::MAX".to_owned(), |b| b.to_string())
    )]
    OutOfMemory {
        /// Its size, when that fits in a `usize`.
        bytes: Option<usize>,
    },
    /// A value of the dict to write is not a tensor. A nested dict (a
    /// checkpoint holding a state dict) says to write the state dict inside.
    #[error("`{key}` is {}, not a tensor: {advice}", with_article(found))]
    NotATensor {
        /// Its key.
        key: String,
        /// Its Python type.
        found: &'static str,
        /// What to do instead.
        advice: &'static str,
    },
    /// A tensor's dtype has no safetensors dtype.
    #[error(
        "`{key}` is {dtype}, which safetensors has no dtype for (safetensors.torch refuses it \
         too): convert it to a supported dtype first",
        dtype = dtype.name()
    )]
    NoSafetensorsDtype {
        /// The tensor's key.
        key: String,
        /// Its dtype.
        dtype: DType,
    },
    /// A tensor's shape has no safetensors form: a 0-d `float4_e2m1fn_x2`,
    /// whose two packed elements need a dimension to double.
    #[error("`{key}`: {why}")]
    NoSafetensorsShape {
        /// The tensor's key.
        key: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A tensor's bytes are not in this process (a storage shared by
    /// another process and not attached, a CUDA handle).
    #[error(
        "`{key}`: its {kind} storage of {nbytes} bytes is not in this process; attach it first \
         (rebuild the value through a SharingContext)"
    )]
    BytesElsewhere {
        /// The tensor's key.
        key: String,
        /// The storage's kind.
        kind: &'static str,
        /// The storage's size.
        nbytes: usize,
    },
    /// A view repeats elements (an `expand`ed tensor, stride 0): written
    /// contiguous it would take more bytes than its whole storage, without
    /// bound, so it is refused rather than grown.
    #[error(
        "`{key}` is an expanded view: its {elements} elements take {needed} bytes written \
         contiguous, more than the {nbytes} bytes of its storage; safetensors stores every \
         element, so save it as the tensor it expands (or `.contiguous()` it in torch) instead"
    )]
    Expanded {
        /// The tensor's key.
        key: String,
        /// Its number of elements.
        elements: usize,
        /// The bytes they take written contiguous.
        needed: u128,
        /// Its storage's size.
        nbytes: usize,
    },
    /// The format crate could not lay the file out (a header over its
    /// limit).
    #[error("cannot write a safetensors file: {0}")]
    Serialize(SafeTensorError),
    /// A file could not be read.
    #[error("cannot read {path}: {cause}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {cause}", path = path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        cause: io::Error,
    },
}

/// A Python type's name after "a" or "an".
fn with_article(name: &str) -> String {
    let article = if name.starts_with(['a', 'e', 'i', 'o', 'u', 'A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {name}")
}

impl SafetensorsError {
    /// The OS error behind this one, when a file could not be read or
    /// written.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            SafetensorsError::Read { cause, .. } | SafetensorsError::Write { cause, .. } => {
                Some(cause)
            }
            SafetensorsError::Serialize(SafeTensorError::IoError(cause)) => Some(cause),
            _ => None,
        }
    }
}

/// A safetensors file: its tensors and its metadata table.
///
/// # Examples
///
/// ```
/// use tensorshare::safetensors::SafetensorsFile;
/// use tensorshare::{DType, Storage, Tensor, TensorView, Value};
///
/// let mask = Tensor::new(Storage::from_vec(vec![1, 0, 1]), TensorView::contiguous(DType::Bool, &[3]))?;
/// let mut file = SafetensorsFile::new(Value::Dict(vec![(Value::Str("mask".into()), Value::Tensor(mask))].into()));
/// file.metadata.insert("source".to_owned(), "example".to_owned());
///
/// let read = SafetensorsFile::from_bytes(&file.to_bytes()?)?;
/// assert_eq!(read.metadata["format"], "pt");
/// assert_eq!(read.metadata["source"], "example");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub struct SafetensorsFile {
    /// A `dict` of `str` to `Tensor`, in the file's order when read.
    pub tensors: Value,
    /// The header's `__metadata__`: free text, `{"format": "pt"}` in files
    /// transformers writes.
    pub metadata: BTreeMap<String, String>,
}

impl SafetensorsFile {
    /// A file of `tensors` (a state dict) with the metadata
    /// `{"format": "pt"}`, as transformers writes and requires.
    pub fn new(tensors: Value) -> Self {
        let metadata = BTreeMap::from([("format".to_owned(), "pt".to_owned())]);
        Self { tensors, metadata }
    }

    /// Reads a safetensors file from `bytes`, copying each tensor's bytes
    /// into a storage of its own.
    ///
    /// # Errors
    ///
    /// A [`SafetensorsError`] naming what is malformed: a header length
    /// past the input, an invalid header, offsets that do not tile the data,
    /// a dtype torch lacks.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, SafetensorsError> {
        let mut input = bytes;
        read_from(&mut input, bytes.len() as u64, &|cause| {
            // Reading a slice fails only by running out of bytes, which
            // the length checks before every read rule out.
            SafetensorsError::Read {
                path: PathBuf::from("the input bytes"),
                cause,
            }
        })
    }

    /// Reads the safetensors file at `path`, each tensor's bytes straight
    /// into a storage of its own: the file is never held twice.
    ///
    /// # Errors
    ///
    /// [`SafetensorsError::Read`] when the file cannot be read, else as
    /// [`from_bytes`](Self::from_bytes).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, SafetensorsError> {
        let path = path.as_ref();
        let read_error = |cause| SafetensorsError::Read {
            path: path.to_owned(),
            cause,
        };
        let file = File::open(path).map_err(read_error)?;
        let len = file.metadata().map_err(read_error)?.len();
        read_from(&mut io::BufReader::new(file), len, &read_error)
    }

    /// The file's bytes.
    ///
    /// # Errors
    ///
    /// As [`to_bytes`], and [`SafetensorsError::OutOfMemory`] when the file
    /// does not fit in memory.
    pub fn to_bytes(&self) -> Result<Vec<u8>, SafetensorsError> {
        let (header, entries) = self.layout()?;
        let total = entries
            .iter()
            .try_fold(header.len(), |total, entry| total.checked_add(entry.len));
        let mut out = Vec::new();
        total
            .and_then(|total| out.try_reserve_exact(total).ok())
            .ok_or(SafetensorsError::OutOfMemory { bytes: total })?;
        out.extend_from_slice(&header);
        for entry in &entries {
            out.extend_from_slice(&entry.data());
        }
        Ok(out)
    }

    /// Writes the file to `path`, one tensor at a time: a view is copied
    /// contiguous on its own, a contiguous tensor written straight from its
    /// storage, so the file is never whole in memory. It is written beside
    /// `path` and renamed over it, as `safetensors.torch.save_file` does, so
    /// an existing file is replaced whole and never truncated under a
    /// process that has it mapped; a new file gets the permissions
    /// [`File::create`] gives.
    ///
    /// # Errors
    ///
    /// As [`to_bytes`], and [`SafetensorsError::Write`] when the file cannot
    /// be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), SafetensorsError> {
        let path = path.as_ref();
        let (header, entries) = self.layout()?;
        let write_error = |cause| SafetensorsError::Write {
            path: path.to_owned(),
            cause,
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        // 0666 less the umask, as File::create: tempfile's default is 0600.
        let mut temp = tempfile::Builder::new()
            .prefix(".tensorshare-")
            .suffix(".safetensors.partial")
            .permissions(std::fs::Permissions::from_mode(0o666))
            .tempfile_in(dir)
            .map_err(write_error)?;
        {
            let mut writer = io::BufWriter::with_capacity(1 << 20, temp.as_file_mut());
            writer.write_all(&header).map_err(write_error)?;
            for entry in &entries {
                writer.write_all(&entry.data()).map_err(write_error)?;
            }
            writer.flush().map_err(write_error)?;
        }
        temp.persist(path)
            .map_err(|error| write_error(error.error))?;
        Ok(())
    }

    /// The header, its length first, and the tensors in the order their
    /// bytes follow it: by dtype, widest alignment first, then by name, as
    /// the `safetensors` crate lays a file out, so every tensor starts
    /// aligned to its element size.
    fn layout(&self) -> Result<(Vec<u8>, Vec<Entry>), SafetensorsError> {
        let mut entries = entries(&self.tensors)?;
        entries.sort_by(|(left_name, left), (right_name, right)| {
            right.dtype.cmp(&left.dtype).then(left_name.cmp(right_name))
        });
        let mut infos = Vec::with_capacity(entries.len());
        let mut offset = 0usize;
        for (name, entry) in &entries {
            let end = offset
                .checked_add(entry.len)
                .ok_or(SafetensorsError::OutOfMemory { bytes: None })?;
            infos.push((
                name.clone(),
                TensorInfo {
                    dtype: entry.dtype,
                    shape: entry.shape.clone(),
                    data_offsets: (offset, end),
                },
            ));
            offset = end;
        }
        let metadata =
            Metadata::new(self.header_metadata(), infos).map_err(SafetensorsError::Serialize)?;
        let mut json = serde_json::to_vec(&metadata)
            .map_err(|error| SafetensorsError::Serialize(SafeTensorError::JsonError(error)))?;
        // Padded with spaces to a multiple of 8, so the data starts aligned.
        json.resize(json.len().next_multiple_of(LENGTH_BYTES), b' ');
        if json.len() as u64 > MAX_HEADER_BYTES {
            return Err(SafetensorsError::Serialize(SafeTensorError::HeaderTooLarge));
        }
        let mut header = Vec::with_capacity(LENGTH_BYTES + json.len());
        header.extend_from_slice(&(json.len() as u64).to_le_bytes());
        header.extend_from_slice(&json);
        Ok((
            header,
            entries.into_iter().map(|(_, entry)| entry).collect(),
        ))
    }

    fn header_metadata(&self) -> Option<HashMap<String, String>> {
        (!self.metadata.is_empty()).then(|| {
            self.metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
    }
}

/// Reads the safetensors file at `path` as a `dict` of `str` to `Tensor`,
/// as `safetensors.torch.load_file` does; [`SafetensorsFile::load`] gives
/// the metadata too.
///
/// # Errors
///
/// As [`SafetensorsFile::load`].
pub fn load(path: impl AsRef<Path>) -> Result<Value, SafetensorsError> {
    Ok(SafetensorsFile::load(path)?.tensors)
}

/// Reads a safetensors file from `bytes` as a `dict` of `str` to `Tensor`,
/// as `safetensors.torch.load` does.
///
/// # Errors
///
/// As [`SafetensorsFile::from_bytes`].
pub fn from_bytes(bytes: &[u8]) -> Result<Value, SafetensorsError> {
    Ok(SafetensorsFile::from_bytes(bytes)?.tensors)
}

/// Writes `state_dict` as a safetensors file at `path`, with the metadata
/// `{"format": "pt"}`; see the [module docs](self) for what is written.
///
/// # Errors
///
/// As [`to_bytes`], and [`SafetensorsError::Write`] when the file cannot be
/// written.
///
/// # Examples
///
/// A `pytorch_model.bin` (any `torch.save` file holding a state dict,
/// saved from a GPU or not) as a `model.safetensors`, nothing executed:
///
/// ```no_run
/// use tensorshare::Registry;
/// use tensorshare::archive::load_torch_save;
///
/// let bytes = std::fs::read("pytorch_model.bin")?;
/// let (_, state_dict) = load_torch_save(&bytes, &Registry::default())?;
/// tensorshare::safetensors::save(&state_dict, "model.safetensors")?;
///
/// let tensors = tensorshare::safetensors::load("model.safetensors")?;
/// println!("{} tensors", tensors.tensors().len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn save(state_dict: &Value, path: impl AsRef<Path>) -> Result<(), SafetensorsError> {
    SafetensorsFile::new(state_dict.clone()).save(path)
}

/// The safetensors file of `state_dict`, with the metadata
/// `{"format": "pt"}`; see the [module docs](self) for what is written.
///
/// # Errors
///
/// [`SafetensorsError::NotADict`], [`KeyNotStr`](SafetensorsError::KeyNotStr)
/// or [`NotATensor`](SafetensorsError::NotATensor) for a value that is not a
/// flat dict of str to tensor, each naming the key;
/// [`NoSafetensorsDtype`](SafetensorsError::NoSafetensorsDtype) for complex32,
/// complex128, bcomplex32 and the bits dtypes;
/// [`Expanded`](SafetensorsError::Expanded) for a view that repeats
/// elements; [`BytesElsewhere`](SafetensorsError::BytesElsewhere) for a
/// storage not in this process.
pub fn to_bytes(state_dict: &Value) -> Result<Vec<u8>, SafetensorsError> {
    SafetensorsFile::new(state_dict.clone()).to_bytes()
}

/// Whether `bytes` start as a safetensors file does: a header length that
/// fits in them, then `{`. No pickle or zip starts that way.
pub fn looks_like_safetensors(bytes: &[u8]) -> bool {
    let Some((length, rest)) = bytes.split_first_chunk::<LENGTH_BYTES>() else {
        return false;
    };
    let header_len = u64::from_le_bytes(*length);
    header_len >= 2 && header_len <= rest.len() as u64 && rest.first() == Some(&b'{')
}

/// The safetensors dtype of `dtype`, as `safetensors.torch` names it;
/// `None` for those it has none for (`complex32`, `complex128`,
/// `bcomplex32`, the `bits` dtypes). `float4_e2m1fn_x2` is `F4`, with two
/// `F4` elements per torch element in the last dimension.
pub fn to_safetensors_dtype(dtype: DType) -> Option<Dtype> {
    Some(match dtype {
        DType::Bool => Dtype::BOOL,
        DType::UInt8 => Dtype::U8,
        DType::UInt16 => Dtype::U16,
        DType::UInt32 => Dtype::U32,
        DType::UInt64 => Dtype::U64,
        DType::Int8 => Dtype::I8,
        DType::Int16 => Dtype::I16,
        DType::Int32 => Dtype::I32,
        DType::Int64 => Dtype::I64,
        DType::Float16 => Dtype::F16,
        DType::BFloat16 => Dtype::BF16,
        DType::Float32 => Dtype::F32,
        DType::Float64 => Dtype::F64,
        DType::Complex64 => Dtype::C64,
        DType::Float8E4M3Fn => Dtype::F8_E4M3,
        DType::Float8E4M3FnUz => Dtype::F8_E4M3FNUZ,
        DType::Float8E5M2 => Dtype::F8_E5M2,
        DType::Float8E5M2FnUz => Dtype::F8_E5M2FNUZ,
        DType::Float8E8M0Fnu => Dtype::F8_E8M0,
        DType::Float4E2M1FnX2 => Dtype::F4,
        // complex32, complex128, bcomplex32, the bits dtypes, and any
        // dtype torch adds later until it is mapped here.
        _ => return None,
    })
}

/// The torch dtype of a safetensors `dtype`; `None` for the 6-bit floats,
/// which torch does not have.
pub fn to_torch_dtype(dtype: Dtype) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|&candidate| to_safetensors_dtype(candidate) == Some(dtype))
}

/// Reads a file of `len` bytes from `input`: the header length, checked
/// against `len` before anything is allocated, the header, validated, then
/// each tensor's bytes into a storage of its own, in file order.
fn read_from(
    input: &mut impl Read,
    len: u64,
    io_error: &dyn Fn(io::Error) -> SafetensorsError,
) -> Result<SafetensorsFile, SafetensorsError> {
    let mut length = [0u8; LENGTH_BYTES];
    if len < LENGTH_BYTES as u64 {
        return Err(SafetensorsError::TooShort { len });
    }
    input.read_exact(&mut length).map_err(io_error)?;
    let header_len = u64::from_le_bytes(length);
    let available = len - LENGTH_BYTES as u64;
    if header_len > available || header_len > MAX_HEADER_BYTES {
        return Err(SafetensorsError::HeaderPastEnd {
            header_len,
            available,
        });
    }
    // Within the input and the cap: the header holds no more than that.
    let mut header = vec![0u8; header_len as usize];
    input.read_exact(&mut header).map_err(io_error)?;
    // `Metadata` deserializes as the crate's `SafeTensors::read_metadata`
    // does, and validates: offsets start at 0 and tile the data without gap
    // or overlap, each matches its shape and dtype, no size overflows.
    let metadata: Metadata =
        serde_json::from_slice(&header).map_err(|error| SafetensorsError::Header {
            why: error.to_string(),
        })?;
    let data_len = metadata.data_len() as u64;
    let available = available - header_len;
    if data_len != available {
        return Err(SafetensorsError::DataLength {
            data_len,
            available,
        });
    }
    let mut tensors = Vec::new();
    for name in metadata.offset_keys() {
        let Some(info) = metadata.info(&name) else {
            continue;
        };
        let tensor = read_tensor(input, &name, info, io_error)?;
        tensors.push((Value::Str(name.into()), Value::Tensor(tensor)));
    }
    let table = metadata.metadata().clone().unwrap_or_default();
    Ok(SafetensorsFile {
        tensors: Value::Dict(tensors.into()),
        metadata: table.into_iter().collect(),
    })
}

/// One tensor, its bytes next in `input`: the header validation proved
/// they are in the input and as many as its shape and dtype take.
fn read_tensor(
    input: &mut impl Read,
    name: &str,
    info: &TensorInfo,
    io_error: &dyn Fn(io::Error) -> SafetensorsError,
) -> Result<Tensor, SafetensorsError> {
    let (start, end) = info.data_offsets;
    let mut bytes = vec![0u8; end - start];
    input.read_exact(&mut bytes).map_err(io_error)?;
    let dtype = to_torch_dtype(info.dtype).ok_or_else(|| SafetensorsError::NoTorchDtype {
        name: name.to_owned(),
        dtype: info.dtype,
    })?;
    let mut sizes = info.shape.clone();
    if dtype == DType::Float4E2M1FnX2 {
        // Two F4 elements to one float4_e2m1fn_x2, in the last dimension.
        match sizes.last_mut() {
            Some(last) if *last % 2 == 0 => *last /= 2,
            _ => {
                return Err(SafetensorsError::Shape {
                    name: name.to_owned(),
                    why: format!(
                        "F4 shape {:?} has no even last dimension to pack into \
                         float4_e2m1fn_x2 pairs",
                        info.shape
                    ),
                });
            }
        }
    }
    Tensor::new(
        Storage::from_vec(bytes),
        TensorView::contiguous(dtype, &sizes),
    )
    .map_err(|cause| SafetensorsError::View {
        name: name.to_owned(),
        cause,
    })
}

/// One tensor to write, under its name.
struct Entry {
    tensor: Tensor,
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
}

impl Entry {
    /// The tensor's bytes, its elements in logical order.
    fn data(&self) -> Cow<'_, [u8]> {
        // `entries` checked that the bytes are here and the copy fits.
        let Some(bytes) = self.tensor.storage().bytes() else {
            return Cow::Owned(Vec::new());
        };
        if let Some(range) = contiguous_range(&self.tensor) {
            return bytes
                .get(range)
                .map_or(Cow::Owned(Vec::new()), Cow::Borrowed);
        }
        let size = self.tensor.dtype().element_size();
        let mut out = Vec::with_capacity(self.len);
        for offset in self.tensor.element_offsets() {
            out.extend_from_slice(bytes.get(offset..offset + size).unwrap_or_default());
        }
        Cow::Owned(out)
    }
}

/// The bytes of a tensor whose elements lie in order, one after the other,
/// in its storage.
fn contiguous_range(t: &Tensor) -> Option<std::ops::Range<usize>> {
    let size = t.dtype().element_size();
    let mut expected = 1usize;
    for (&dim, &stride) in t.sizes().iter().zip(t.strides()).rev() {
        if dim != 1 && stride != expected {
            return None;
        }
        expected = expected.checked_mul(dim)?;
    }
    let start = t.storage_offset().checked_mul(size)?;
    let len = t.numel().checked_mul(size)?;
    Some(start..start.checked_add(len)?)
}

/// The tensors of a state dict, checked for everything the format needs.
fn entries(state_dict: &Value) -> Result<Vec<(String, Entry)>, SafetensorsError> {
    let items = match state_dict {
        Value::Dict(items) | Value::OrderedDict(items) => items,
        other => {
            return Err(SafetensorsError::NotADict {
                found: other.type_name(),
            });
        }
    };
    let mut entries = Vec::with_capacity(items.len());
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    for (key, value) in items.iter() {
        let Value::Str(key) = key else {
            return Err(SafetensorsError::KeyNotStr {
                found: key.type_name(),
            });
        };
        let key = key.to_string();
        if !seen.insert(key.clone()) {
            return Err(SafetensorsError::DuplicateKey { key });
        }
        let Value::Tensor(tensor) = value else {
            let advice = match value {
                Value::Dict(_) | Value::OrderedDict(_) => {
                    "a safetensors file holds one flat dict of str to tensor; write the state \
                     dict inside it on its own"
                }
                _ => {
                    "a safetensors file holds tensors only; leave it out, or put it in the \
                     metadata as text"
                }
            };
            return Err(SafetensorsError::NotATensor {
                key,
                found: value.type_name(),
                advice,
            });
        };
        let entry = entry(&key, tensor)?;
        entries.push((key, entry));
    }
    Ok(entries)
}

fn entry(key: &str, tensor: &Tensor) -> Result<Entry, SafetensorsError> {
    let dtype = to_safetensors_dtype(tensor.dtype()).ok_or_else(|| {
        SafetensorsError::NoSafetensorsDtype {
            key: key.to_owned(),
            dtype: tensor.dtype(),
        }
    })?;
    let storage = tensor.storage();
    if storage.bytes().is_none() {
        return Err(SafetensorsError::BytesElsewhere {
            key: key.to_owned(),
            kind: storage.kind().name(),
            nbytes: storage.nbytes(),
        });
    }
    let elements = tensor.numel();
    let needed = elements as u128 * tensor.dtype().element_size() as u128;
    if needed > storage.nbytes() as u128 {
        return Err(SafetensorsError::Expanded {
            key: key.to_owned(),
            elements,
            needed,
            nbytes: storage.nbytes(),
        });
    }
    let mut shape = tensor.sizes().to_vec();
    if dtype == Dtype::F4 {
        let Some(last) = shape.last_mut() else {
            return Err(SafetensorsError::NoSafetensorsShape {
                key: key.to_owned(),
                why: "a 0-d float4_e2m1fn_x2 has no dimension to write its two F4 elements in",
            });
        };
        // At most the storage's bytes: doubling cannot overflow a usize
        // that counts bytes of memory.
        *last = last.saturating_mul(2);
    }
    Ok(Entry {
        tensor: tensor.clone(),
        dtype,
        shape,
        // At most the storage's size, checked above.
        len: needed as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tensor(dtype: DType, sizes: &[usize], bytes: Vec<u8>) -> Tensor {
        Tensor::new(
            Storage::from_vec(bytes),
            TensorView::contiguous(dtype, sizes),
        )
        .unwrap()
    }

    fn dict(items: Vec<(&str, Value)>) -> Value {
        Value::Dict(
            items
                .into_iter()
                .map(|(k, v)| (Value::Str(k.into()), v))
                .collect::<Vec<_>>()
                .into(),
        )
    }

    fn items(value: &Value) -> Vec<(String, Tensor)> {
        let Value::Dict(items) = value else {
            panic!("a dict: {value:?}")
        };
        items
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().unwrap().to_owned(),
                    v.as_tensor().unwrap().clone(),
                )
            })
            .collect()
    }

    fn get(value: &Value, name: &str) -> Tensor {
        items(value)
            .into_iter()
            .find(|(k, _)| k == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .1
    }

    #[test]
    fn every_mapped_dtype_round_trips_and_the_rest_are_refused() {
        for dtype in DType::ALL {
            let size = dtype.element_size();
            let bytes: Vec<u8> = (0..6 * size).map(|i| i as u8).collect();
            let state_dict = dict(vec![(
                "x",
                Value::Tensor(tensor(dtype, &[2, 3], bytes.clone())),
            )]);
            match to_safetensors_dtype(dtype) {
                Some(expected) => {
                    let file = to_bytes(&state_dict).unwrap();
                    let header = String::from_utf8_lossy(&file[8..]).into_owned();
                    assert!(
                        header.contains(&format!("\"dtype\":\"{expected}\"")),
                        "{header}"
                    );
                    let back = get(&from_bytes(&file).unwrap(), "x");
                    assert_eq!(back.dtype(), dtype);
                    assert_eq!(back.sizes(), &[2, 3]);
                    assert_eq!(back.storage().bytes().unwrap(), &bytes[..]);
                    assert_eq!(to_torch_dtype(expected), Some(dtype));
                }
                None => {
                    let error = to_bytes(&state_dict).unwrap_err();
                    assert!(
                        matches!(error, SafetensorsError::NoSafetensorsDtype { .. }),
                        "{error}"
                    );
                    assert!(
                        error.to_string().contains(dtype.name())
                            && error.to_string().contains("`x`"),
                        "{error}"
                    );
                }
            }
        }
    }

    #[test]
    fn packed_float4_doubles_the_last_dimension_as_safetensors_torch_does() {
        let state_dict = dict(vec![(
            "w",
            Value::Tensor(tensor(DType::Float4E2M1FnX2, &[2, 3], vec![0x21; 6])),
        )]);
        let file = to_bytes(&state_dict).unwrap();
        // What safetensors.torch.save writes for torch.float4_e2m1fn_x2 of shape (2, 3).
        assert!(String::from_utf8_lossy(&file).contains(r#""dtype":"F4","shape":[2,6]"#));
        let back = get(&from_bytes(&file).unwrap(), "w");
        assert_eq!(
            (back.dtype(), back.sizes()),
            (DType::Float4E2M1FnX2, &[2, 3][..])
        );

        let scalar = dict(vec![(
            "s",
            Value::Tensor(tensor(DType::Float4E2M1FnX2, &[], vec![0x21])),
        )]);
        let error = to_bytes(&scalar).unwrap_err();
        assert!(
            matches!(error, SafetensorsError::NoSafetensorsShape { .. }),
            "{error}"
        );
    }

    #[test]
    fn the_layout_is_the_safetensors_crates_byte_for_byte() {
        let f32s: Vec<u8> = (0..24).collect();
        let i64s: Vec<u8> = (0..16).collect();
        let state_dict = dict(vec![
            (
                "b.weight",
                Value::Tensor(tensor(DType::Float32, &[2, 3], f32s.clone())),
            ),
            (
                "a.ids",
                Value::Tensor(tensor(DType::Int64, &[2], i64s.clone())),
            ),
            (
                "c.mask",
                Value::Tensor(tensor(DType::Bool, &[3], vec![1, 0, 1])),
            ),
        ]);
        let ours = to_bytes(&state_dict).unwrap();
        let views = [
            (
                "b.weight",
                ::safetensors::tensor::TensorView::new(Dtype::F32, vec![2, 3], &f32s).unwrap(),
            ),
            (
                "a.ids",
                ::safetensors::tensor::TensorView::new(Dtype::I64, vec![2], &i64s).unwrap(),
            ),
            (
                "c.mask",
                ::safetensors::tensor::TensorView::new(Dtype::BOOL, vec![3], &[1, 0, 1]).unwrap(),
            ),
        ];
        let metadata = HashMap::from([("format".to_owned(), "pt".to_owned())]);
        let theirs = ::safetensors::serialize(views, Some(metadata)).unwrap();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn views_are_written_contiguous_and_tied_tensors_each_with_their_bytes() {
        // A 2x3 float32 matrix, its transpose, its second row, and the
        // matrix again under a second name (tied weights).
        let bytes: Vec<u8> = [0f32, 1., 2., 3., 4., 5.]
            .iter()
            .flat_map(|f| f.to_le_bytes())
            .collect();
        let matrix = tensor(DType::Float32, &[2, 3], bytes);
        let view = |offset: i64, sizes: Vec<i64>, strides: Vec<i64>| {
            let mut v = TensorView::contiguous(DType::Float32, &[]);
            (v.storage_offset, v.sizes, v.strides) = (offset, sizes, strides);
            Value::Tensor(Tensor::new(matrix.storage().clone(), v).unwrap())
        };
        let state_dict = dict(vec![
            ("matrix", Value::Tensor(matrix.clone())),
            ("transposed", view(0, vec![3, 2], vec![1, 3])),
            ("row", view(3, vec![3], vec![1])),
            ("tied", Value::Tensor(matrix.clone())),
        ]);
        let loaded = from_bytes(&to_bytes(&state_dict).unwrap()).unwrap();
        let floats = |t: &Tensor| -> Vec<f32> {
            t.storage()
                .bytes()
                .unwrap()
                .chunks(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        assert_eq!(floats(&get(&loaded, "matrix")), [0., 1., 2., 3., 4., 5.]);
        assert_eq!(floats(&get(&loaded, "tied")), [0., 1., 2., 3., 4., 5.]);
        assert_eq!(
            floats(&get(&loaded, "transposed")),
            [0., 3., 1., 4., 2., 5.]
        );
        assert_eq!(floats(&get(&loaded, "row")), [3., 4., 5.]);
        assert_eq!(get(&loaded, "transposed").sizes(), &[3, 2]);
        // Each read tensor has a storage of its own.
        let storages: std::collections::HashSet<usize> = items(&loaded)
            .iter()
            .map(|(_, t)| t.storage().identity())
            .collect();
        assert_eq!(storages.len(), 4);
    }

    #[test]
    fn values_with_no_safetensors_form_are_refused_naming_the_key() {
        let t = Value::Tensor(tensor(DType::Float32, &[1], vec![0; 4]));
        let expanded = {
            let mut v = TensorView::contiguous(DType::Float32, &[]);
            (v.sizes, v.strides) = (vec![1000], vec![0]);
            Value::Tensor(Tensor::new(Storage::from_vec(vec![0; 4]), v).unwrap())
        };
        let cases: Vec<(Value, &str)> = vec![
            (Value::List(vec![t.clone()].into()), "this is a list"),
            (
                Value::Dict(vec![(Value::Int(3), t.clone())].into()),
                "an int key",
            ),
            (
                dict(vec![("model", dict(vec![("w", t.clone())]))]),
                "`model` is a dict, not a tensor: a safetensors file holds one flat dict",
            ),
            (
                dict(vec![("step", Value::Int(1200))]),
                "`step` is an int, not a tensor",
            ),
            (
                dict(vec![("w", t.clone()), ("w", t.clone())]),
                "`w` is a key twice",
            ),
            (
                dict(vec![("pos", expanded)]),
                "`pos` is an expanded view: its 1000 elements take 4000 bytes",
            ),
            (
                dict(vec![(
                    "remote",
                    Value::Tensor(
                        Tensor::new(
                            Storage::remote(
                                crate::Residence::Cuda(crate::CudaRef {
                                    device: 0,
                                    handle: Vec::new(),
                                    storage_offset_bytes: 0,
                                    ref_counter_handle: Vec::new(),
                                    ref_counter_offset: 0,
                                    event_handle: None,
                                    event_sync_required: false,
                                }),
                                4,
                            ),
                            TensorView::contiguous(DType::Float32, &[1]),
                        )
                        .unwrap(),
                    ),
                )]),
                "`remote`: its cuda storage of 4 bytes is not in this process",
            ),
        ];
        for (value, expected) in cases {
            let error = to_bytes(&value).unwrap_err();
            assert!(
                error.to_string().contains(expected),
                "{error}\nwanted: {expected}"
            );
        }
    }

    #[test]
    fn metadata_is_read_and_written() {
        let t = Value::Tensor(tensor(DType::UInt8, &[2], vec![7, 8]));
        let mut file = SafetensorsFile::new(dict(vec![("t", t)]));
        assert_eq!(file.metadata.get("format").map(String::as_str), Some("pt"));
        file.metadata.insert("note".to_owned(), "hello".to_owned());
        let read = SafetensorsFile::from_bytes(&file.to_bytes().unwrap()).unwrap();
        assert_eq!(read.metadata, file.metadata);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.safetensors");
        file.save(&path).unwrap();
        let loaded = SafetensorsFile::load(&path).unwrap();
        assert_eq!(loaded.metadata, file.metadata);
        assert_eq!(
            get(&loaded.tensors, "t").storage().bytes(),
            Some(&[7u8, 8][..])
        );
        // Nothing left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn an_empty_state_dict_and_empty_tensors_are_files_too() {
        let empty = from_bytes(&to_bytes(&dict(vec![])).unwrap()).unwrap();
        assert!(items(&empty).is_empty());
        let zero = dict(vec![(
            "z",
            Value::Tensor(tensor(DType::Float16, &[0, 4], vec![])),
        )]);
        let back = get(&from_bytes(&to_bytes(&zero).unwrap()).unwrap(), "z");
        assert_eq!(back.sizes(), &[0, 4]);
    }

    #[test]
    fn only_safetensors_files_look_like_one() {
        let file = to_bytes(&dict(vec![])).unwrap();
        assert!(looks_like_safetensors(&file));
        assert!(!looks_like_safetensors(
            b"PK\x03\x04\x14\x00\x00\x00\x08\x00"
        ));
        assert!(!looks_like_safetensors(b"\x80\x02]q\x00(K\x01e."));
        assert!(!looks_like_safetensors(
            b"\x02\x00\x00\x00\x00\x00\x00\x00{"
        ));
    }
}
