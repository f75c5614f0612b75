//! Reading a safetensors file: its header length checked against the input
//! before anything is allocated, its header validated by the format crate,
//! then each tensor's bytes into a storage of its own.

use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use ::safetensors::tensor::{Metadata, TensorInfo};

use super::{LENGTH_BYTES, MAX_HEADER_BYTES, SafetensorsError, SafetensorsFile, to_torch_dtype};
use crate::DType;
use crate::model::{Storage, Tensor, TensorView, Value};

impl SafetensorsFile {
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
