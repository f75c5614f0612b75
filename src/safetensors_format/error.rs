//! Why a safetensors file could not be read or written: [`SafetensorsError`],
//! and the helper its messages use to name a Python type.

use std::io;
use std::path::PathBuf;

use super::{Dtype, MAX_HEADER_BYTES, SafeTensorError};
use crate::DType;
use crate::model::ViewError;

/// Why a safetensors file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SafetensorsError {
    /// The file shrank while it was mapped: what was read of it is not what
    /// it holds.
    #[error(
        "{} was truncated or rewritten while it was being read; read it again once \
         whatever writes it is done (safetensors.torch.save_file writes beside the path and \
         renames, so readers never see this)",
        path.display()
    )]
    Changed {
        /// The file.
        path: std::path::PathBuf,
    },
    /// A file a tensor being written was mapped from shrank while it was
    /// read: the output would hold zeros for its lost bytes, so it was not
    /// written.
    #[error(
        "the file a tensor was read from was truncated or rewritten while it was being \
         written out, so {} was not written; convert it again once whatever writes the \
         input is done",
        path.display()
    )]
    SourceChanged {
        /// The output that was not written.
        path: std::path::PathBuf,
    },
    /// The input is shorter than the 8-byte header length.
    #[error(
        "not a safetensors file: {len} bytes, fewer than the 8 of the header length it starts with"
    )]
    TooShort {
        /// The input's length.
        len: u64,
    },
    /// The input is a `torch.save` file (a zip archive, or the legacy
    /// stream's magic number), not a safetensors file.
    #[error(
        "not a safetensors file: it starts as a torch.save file does ({what}); read it with \
         tensorshare::torch_save::load, or convert it with `tensorshare convert IN OUT.safetensors`"
    )]
    TorchSave {
        /// What it starts with: `a zip archive` or `the legacy magic number`.
        what: &'static str,
    },
    /// The header length runs past the end of the input or past
    /// the 100,000,000 bytes a header may take: a truncated file, or not a
    /// safetensors file.
    #[error(
        "safetensors header of {header_len} bytes, but {} (at most {MAX_HEADER_BYTES} are read): \
         the file is truncated or is not a safetensors file",
        following(*available)
    )]
    HeaderPastEnd {
        /// The length the file's first 8 bytes give.
        header_len: u64,
        /// The bytes after those 8, when the input's length is known (a
        /// stream's is not).
        available: Option<u64>,
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

/// What follows a header length that is too long, for
/// [`SafetensorsError::HeaderPastEnd`].
fn following(available: Option<u64>) -> String {
    match available {
        Some(available) => format!("{available} bytes follow its length"),
        None => "it is read from a stream".to_owned(),
    }
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
    pub(crate) fn io_error(&self) -> Option<&io::Error> {
        match self {
            SafetensorsError::Read { cause, .. } | SafetensorsError::Write { cause, .. } => {
                Some(cause)
            }
            SafetensorsError::Serialize(SafeTensorError::IoError(cause)) => Some(cause),
            _ => None,
        }
    }

    /// Whether the message names the file it is about.
    pub(crate) fn names_a_path(&self) -> bool {
        matches!(
            self,
            SafetensorsError::Read { .. }
                | SafetensorsError::Write { .. }
                | SafetensorsError::Changed { .. }
                | SafetensorsError::SourceChanged { .. }
        )
    }
}
