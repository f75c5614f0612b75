//! `.safetensors` files as the [`safetensors`](crate::safetensors)
//! module reads and writes them: the format itself, on the `safetensors`
//! crate, failing with this layer's [`SafetensorsError`]. The public
//! module above the facade error re-exports its types and wraps its
//! functions.

mod dtype;
mod error;
mod read;
mod write;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

// The format crate's dtype and error, which this module's signatures name.
pub use ::safetensors::{Dtype, SafeTensorError};

pub(crate) use dtype::{to_safetensors_dtype, to_torch_dtype};
pub use error::SafetensorsError;

use crate::model::Value;

/// The largest header read, as the `safetensors` crate caps it: 100 MB.
pub(crate) const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Bytes before the header: its length, a little-endian `u64`.
const LENGTH_BYTES: usize = 8;

/// A safetensors file: its tensors and its metadata table.
///
/// # Examples
///
/// ```
/// use tensorshare::safetensors::SafetensorsFile;
/// use tensorshare::{Dict, StrategyKind, Tensor, Value};
///
/// let mask = Tensor::from_slice(&StrategyKind::Bytes, &[true, false, true], &[3])?;
/// let mut file = SafetensorsFile::new(Dict::new().with("mask", mask).into());
/// file.metadata.insert("source".to_owned(), "example".to_owned());
///
/// let read = SafetensorsFile::from_bytes(&file.to_bytes()?)?;
/// assert_eq!(read.metadata["format"], "pt");
/// assert_eq!(read.metadata["source"], "example");
/// assert_eq!(read.tensors.try_get::<&Tensor>("mask")?.to_vec::<bool>()?, [true, false, true]);
/// # Ok::<(), tensorshare::Error>(())
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
}

/// Whether `bytes` start as a safetensors file does: a header length that
/// fits in them, then `{`. No pickle or zip starts that way.
#[cfg(feature = "inspect")]
pub(crate) fn looks_like_safetensors(bytes: &[u8]) -> bool {
    let Some((length, rest)) = bytes.split_first_chunk::<LENGTH_BYTES>() else {
        return false;
    };
    let header_len = u64::from_le_bytes(*length);
    header_len >= 2 && header_len <= rest.len() as u64 && rest.first() == Some(&b'{')
}
