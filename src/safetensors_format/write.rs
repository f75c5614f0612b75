//! Writing a safetensors file: a state dict checked into one entry per
//! tensor, laid out as the `safetensors` crate lays a file out, each view
//! copied contiguous and each contiguous tensor written from its storage.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::Path;

use ::safetensors::tensor::{Metadata, TensorInfo};
use tensorshare_strategies::bytes::file_window::FileWindow;

use super::{
    Dtype, LENGTH_BYTES, MAX_HEADER_BYTES, SafeTensorError, SafetensorsError, SafetensorsFile,
    to_safetensors_dtype,
};
use crate::model::{Tensor, Value};
use crate::save::{any_source_changed, partial_file_beside};

impl SafetensorsFile {
    /// The file's bytes.
    ///
    /// # Errors
    ///
    /// [`SafetensorsError::NotADict`], [`KeyNotStr`](SafetensorsError::KeyNotStr)
    /// or [`NotATensor`](SafetensorsError::NotATensor) for tensors that are
    /// not a flat dict of str to tensor, each naming the key;
    /// [`NoSafetensorsDtype`](SafetensorsError::NoSafetensorsDtype) for
    /// complex32, complex128, bcomplex32 and the bits dtypes;
    /// [`Expanded`](SafetensorsError::Expanded) for a view that repeats
    /// elements; [`BytesElsewhere`](SafetensorsError::BytesElsewhere) for a
    /// storage not in this process; [`SafetensorsError::OutOfMemory`] when
    /// the file does not fit in memory.
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
    /// [`File::create`](std::fs::File::create) gives.
    ///
    /// # Errors
    ///
    /// As [`to_bytes`](Self::to_bytes), and [`SafetensorsError::Write`]
    /// when the file cannot be written.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), SafetensorsError> {
        let path = path.as_ref();
        let write_error = |cause| SafetensorsError::Write {
            path: path.to_owned(),
            cause,
        };
        let mut temp = partial_file_beside(path, ".safetensors.partial").map_err(write_error)?;
        self.write_to(temp.as_file_mut(), path)?;
        temp.persist(path)
            .map_err(|error| write_error(error.error))?;
        Ok(())
    }

    /// Writes the file to `out` one tensor at a time, as
    /// [`save`](Self::save) writes it, never whole in memory.
    ///
    /// # Errors
    ///
    /// As [`to_bytes`](Self::to_bytes), [`SafetensorsError::Write`] (naming
    /// "the output") when `out` fails, and
    /// [`SafetensorsError::SourceChanged`] when a tensor's own file shrank
    /// while it was written out.
    pub fn write(&self, out: impl Write) -> Result<(), SafetensorsError> {
        self.write_to(out, Path::new("the output"))
    }

    /// [`write`](Self::write), naming `path` in its errors.
    fn write_to(&self, out: impl Write, path: &Path) -> Result<(), SafetensorsError> {
        let (header, entries) = self.layout()?;
        let write_error = |cause| SafetensorsError::Write {
            path: path.to_owned(),
            cause,
        };
        let mut writer = io::BufWriter::with_capacity(1 << 20, out);
        writer.write_all(&header).map_err(write_error)?;
        for entry in &entries {
            writer.write_all(&entry.data()).map_err(write_error)?;
            // A storage streamed out of a mapped file gives its pages
            // back: memory stays bounded by one tensor, not the file.
            if let Some(window) = entry.tensor.storage().local_segment::<FileWindow>() {
                window.release_pages();
            }
        }
        writer.flush().map_err(write_error)?;
        if any_source_changed(entries.iter().map(|entry| entry.tensor.storage())) {
            return Err(SafetensorsError::SourceChanged {
                path: path.to_owned(),
            });
        }
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
        Value::Dict(items) | Value::OrderedDict(items, _) => items,
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
                Value::Dict(_) | Value::OrderedDict(..) => {
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
    use std::collections::HashMap;

    use crate::DType;
    use crate::model::{Storage, Tensor, TensorView, Value};
    use crate::safetensors_format::Dtype;
    use crate::safetensors_format::tests::{dict, from_bytes, get, items, tensor, to_bytes};

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
                                crate::model::Residence::Cuda(crate::model::CudaRef {
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
}
