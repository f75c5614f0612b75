//! Reading a safetensors file: its header length checked against the input
//! before anything is allocated, its header validated by the format crate,
//! then each tensor's bytes into a storage of its own: a window of the
//! mapped file, or a copy when read from a stream.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tensorshare_strategies::Segment;
use tensorshare_strategies::bytes::file_window::FileWindow;
use tensorshare_strategies::platform::mapped_file::{MappedFile, MappedOrStream};

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
        let mut input = StreamSource {
            reader: bytes,
            length_checked: true,
        };
        read_from(&mut input, Some(bytes.len() as u64), &|cause| {
            // Reading a slice fails only by running out of bytes, which
            // the length checks before every read rule out.
            SafetensorsError::Read {
                path: PathBuf::from("the input bytes"),
                cause,
            }
        })
    }

    /// Reads a safetensors file from `reader` to the end of its last
    /// tensor, each tensor into a storage of its own: for a stream that
    /// cannot be mapped (stdin, a socket). Memory grows with the bytes that
    /// arrive, whatever sizes the header claims.
    ///
    /// # Errors
    ///
    /// [`SafetensorsError::Read`] (naming "the input") when reading fails or
    /// the stream ends before the header says it does, else as
    /// [`from_bytes`](Self::from_bytes).
    pub fn read(reader: impl Read) -> Result<Self, SafetensorsError> {
        let mut input = StreamSource {
            reader,
            length_checked: false,
        };
        read_from(&mut input, None, &|cause| SafetensorsError::Read {
            path: PathBuf::from("the input"),
            cause,
        })
    }

    /// Reads the safetensors file at `path` through a mapping of it: each
    /// tensor is a window of the mapping, which lives as long as the last
    /// of them (one the file holds unaligned for its dtype, which the
    /// `safetensors` crate never writes, is copied when first viewed as
    /// elements). A path that cannot be mapped (a pipe) is read as a
    /// stream, each tensor into a storage of its own.
    ///
    /// # Errors
    ///
    /// [`SafetensorsError::Read`] when the file cannot be read,
    /// [`SafetensorsError::Changed`] when it shrank while it was read, else
    /// as [`from_bytes`](Self::from_bytes): those do not name the file,
    /// which [`safetensors::load`](crate::safetensors::load)'s errors do.
    pub fn load(path: impl AsRef<Path>) -> Result<Self, SafetensorsError> {
        let path = path.as_ref();
        let read_error = |cause| SafetensorsError::Read {
            path: path.to_owned(),
            cause,
        };
        let mapped = match MappedFile::open_or_stream(path).map_err(read_error)? {
            MappedOrStream::Mapped(mapped) => Arc::new(mapped),
            MappedOrStream::Stream(file) => {
                let len = file.metadata().map_err(read_error)?.len();
                let mut source = StreamSource {
                    reader: io::BufReader::new(file),
                    length_checked: true,
                };
                return read_from(&mut source, Some(len), &read_error);
            }
        };
        let mut source = MappedSource {
            file: Arc::clone(&mapped),
            at: 0,
        };
        let read = read_from(&mut source, Some(mapped.len() as u64), &read_error);
        // Whatever failed, a file that shrank under the reader is the cause.
        if mapped.was_truncated() {
            return Err(SafetensorsError::Changed {
                path: path.to_owned(),
            });
        }
        read
    }
}

/// Where a file's bytes come from, in order: a stream, or a mapping whose
/// tensors can stay where they are.
trait Source {
    /// The next `buf.len()` bytes, into `buf`.
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()>;

    /// The next `len` bytes as a storage.
    fn storage(&mut self, len: usize) -> io::Result<Storage>;
}

/// What a stream's tensor reserves before its bytes arrive.
const STREAM_CHUNK: usize = 64 << 20;

/// A stream (or bytes in memory): every tensor is read into its own storage.
struct StreamSource<R> {
    reader: R,
    /// Whether the input's length is known, so that `read_from` checked
    /// every tensor's bytes against it before reading any.
    length_checked: bool,
}

impl<R: Read> Source for StreamSource<R> {
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.reader.read_exact(buf)
    }

    fn storage(&mut self, len: usize) -> io::Result<Storage> {
        // Reserved whole when the input is known to hold it; else grown as
        // bytes arrive, from at most a chunk: a stream's header may claim
        // more than the stream holds.
        let reserve = if self.length_checked {
            len
        } else {
            len.min(STREAM_CHUNK)
        };
        let mut bytes = Vec::new();
        bytes.try_reserve_exact(reserve)?;
        let read = (&mut self.reader)
            .take(len as u64)
            .read_to_end(&mut bytes)?;
        if read != len {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(Storage::from_vec(bytes))
    }
}

/// A mapped file: tensors are windows of it.
struct MappedSource {
    file: Arc<MappedFile>,
    at: usize,
}

impl MappedSource {
    fn take(&mut self, len: usize) -> io::Result<std::ops::Range<usize>> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.file.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let range = self.at..end;
        self.at = end;
        Ok(range)
    }
}

impl Source for MappedSource {
    fn read_exact(&mut self, buf: &mut [u8]) -> io::Result<()> {
        let range = self.take(buf.len())?;
        buf.copy_from_slice(&self.file.as_bytes()[range]);
        Ok(())
    }

    fn storage(&mut self, len: usize) -> io::Result<Storage> {
        let range = self.take(len)?;
        if len == 0 {
            return Ok(Storage::from_vec(Vec::new()));
        }
        let window = FileWindow::new(Arc::clone(&self.file), range)
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let segment: Arc<dyn Segment> = Arc::new(window);
        Ok(Storage::from_segment(segment))
    }
}

/// Reads a file of `len` bytes from `input` (of a length not known for a
/// stream): the header length, checked against `len` and a cap before
/// anything is allocated, the header, validated, then each tensor's bytes
/// into a storage of its own, in file order. A stream is read to the end
/// of its last tensor.
/// How a legacy `torch.save` stream starts: protocol 2, then `LONG1` of the
/// 10-byte magic number.
const LEGACY_TORCH_SAVE: &[u8] = b"\x80\x02\x8a\x0a";

fn read_from(
    input: &mut impl Source,
    len: Option<u64>,
    io_error: &dyn Fn(io::Error) -> SafetensorsError,
) -> Result<SafetensorsFile, SafetensorsError> {
    let mut length = [0u8; LENGTH_BYTES];
    if let Some(len) = len.filter(|&len| len < LENGTH_BYTES as u64) {
        return Err(SafetensorsError::TooShort { len });
    }
    input.read_exact(&mut length).map_err(io_error)?;
    // A `.pt` given by mistake: its first bytes read as an absurd header
    // length otherwise.
    if length.starts_with(b"PK\x03\x04") {
        return Err(SafetensorsError::TorchSave {
            what: "a zip archive",
        });
    }
    if length.starts_with(LEGACY_TORCH_SAVE) {
        return Err(SafetensorsError::TorchSave {
            what: "the legacy magic number",
        });
    }
    let header_len = u64::from_le_bytes(length);
    let available = len.map(|len| len - LENGTH_BYTES as u64);
    if available.is_some_and(|available| header_len > available) || header_len > MAX_HEADER_BYTES {
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
    if let Some(available) = available.map(|available| available - header_len)
        && data_len != available
    {
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
    input: &mut impl Source,
    name: &str,
    info: &TensorInfo,
    io_error: &dyn Fn(io::Error) -> SafetensorsError,
) -> Result<Tensor, SafetensorsError> {
    let (start, end) = info.data_offsets;
    let dtype = to_torch_dtype(info.dtype).ok_or_else(|| SafetensorsError::NoTorchDtype {
        name: name.to_owned(),
        dtype: info.dtype,
    })?;
    let storage = input.storage(end - start).map_err(io_error)?;
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
    Tensor::new(storage, TensorView::contiguous(dtype, &sizes)).map_err(|cause| {
        SafetensorsError::View {
            name: name.to_owned(),
            cause,
        }
    })
}
