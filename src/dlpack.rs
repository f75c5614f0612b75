//! Tensors to and from DLPack 1.x, the C ABI tensor libraries lend each
//! other memory through (candle, burn, tch, NumPy, JAX, torch's
//! `from_dlpack`).
//!
//! [`Tensor::to_dlpack`] lends a tensor's memory (a mapping of shared
//! memory, a memfd, a segment, or bytes on the heap) as a
//! [`DLManagedTensorVersioned`]: its deleter keeps the storage alive
//! until the consumer calls it, so a tensor received on a connection
//! outlives the connection, and the sender's memory stays mapped, for as
//! long as the consumer holds it. Every export is read-only
//! ([`FLAG_READ_ONLY`]): a storage's bytes are shared by every holder
//! here, and for one another process sent, by that process too.
//!
//! The deleter may run on any thread, as DLPack lets a consumer call it
//! (`dlpark` and torch's `from_dlpack` do): what it releases, the storage
//! or any other [`ExportedBytes`] owner, is `Send + Sync`. Memory of your
//! own goes out the same way: implement [`ExportedBytes`] for its owner
//! and call [`ExportedTensor::new`].
//!
//! [`Tensor::from_dlpack`] takes a DLPack CPU tensor to send: its elements
//! are copied into a storage of the allocator given (shared memory, with a
//! [`SharingContext`](crate::SharingContext)), or taken as they are when
//! the tensor is an export of a tensorshare storage.
//!
//! ```
//! use tensorshare::dlpack::ImportedTensor;
//! use tensorshare::{Authkey, SharingContext, Tensor};
//!
//! let sharing = SharingContext::new(Authkey::random()?);
//! let tensor = Tensor::from_slice(&sharing, &[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
//! // What a consumer gets: a pointer, and the duty to call its deleter.
//! let lent = tensor.to_dlpack()?.into_raw();
//! // SAFETY: a live export, handed over once.
//! let imported = unsafe { ImportedTensor::from_raw(lent) }?;
//! assert_eq!(imported.shape(), [2, 2]);
//! let back = Tensor::from_dlpack(imported, &sharing)?; // the same storage, no copy
//! assert!(back.storage().same_as(tensor.storage()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::any::Any;
use std::borrow::Cow;

pub use tensorshare_strategies::platform::dlpack::{
    DEVICE_CPU, DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
    DlpackError, ExportedBytes, ExportedTensor, FLAG_IS_COPIED, FLAG_READ_ONLY, ImportedTensor,
};

use crate::Error;
use crate::model::{DType, ElementError, Storage, StorageAllocator, Tensor, TensorView};

/// A storage lent through DLPack: kept alive by the export's context.
struct LentStorage(Storage);

impl ExportedBytes for LentStorage {
    fn bytes(&self) -> &[u8] {
        self.0.bytes().unwrap_or_default()
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Tensor {
    /// This tensor as a DLPack 1.x tensor on the CPU, read-only, whose
    /// deleter keeps its storage alive until the consumer calls it (see
    /// the [module docs](crate::dlpack)).
    ///
    /// # Errors
    ///
    /// [`Error::Element`] with `NotLocal` for a storage that is a handle
    /// not mapped here; [`Error::Dlpack`] for a dtype DLPack has no code
    /// for (the quantized and `bits` dtypes, `float4_e2m1fn_x2`).
    pub fn to_dlpack(&self) -> Result<ExportedTensor, Error> {
        let dtype = dlpack_dtype(self.dtype())?;
        if self.storage().bytes().is_none() {
            return Err(ElementError::NotLocal {
                kind: self.storage().kind(),
            }
            .into());
        }
        let sizes: Vec<i64> = self.sizes().iter().map(|&size| size as i64).collect();
        let strides: Vec<i64> = self.strides().iter().map(|&stride| stride as i64).collect();
        let byte_offset = self.storage_offset() * self.dtype().element_size();
        Ok(ExportedTensor::new(
            Box::new(LentStorage(self.storage().clone())),
            dtype,
            &sizes,
            &strides,
            byte_offset,
            FLAG_READ_ONLY,
        )?)
    }

    /// The DLPack CPU tensor `imported` as a tensor to send: the storage it
    /// lends when it is an export of a tensorshare storage; otherwise its
    /// elements copied, in row-major order, into a storage of `allocator`.
    /// The producer's deleter runs before this returns.
    ///
    /// # Errors
    ///
    /// [`Error::Dlpack`] for memory on another device than the CPU, a type
    /// no torch dtype matches, negative strides or a layout past its
    /// memory; [`Error::Allocate`] when the copy's storage cannot be made.
    pub fn from_dlpack(
        imported: ImportedTensor,
        allocator: &(impl StorageAllocator + ?Sized),
    ) -> Result<Tensor, Error> {
        let dl = &imported.get().dl_tensor;
        let dtype = torch_dtype(dl.dtype)?;
        let itemsize = dtype.element_size();
        let bytes = imported.bytes()?;
        let sizes = imported.shape().to_vec();
        let strides = match imported.strides() {
            Some(strides) => strides.to_vec(),
            None => row_major(&sizes),
        };
        if let Some(LentStorage(storage)) = imported
            .exported_here()
            .and_then(|owner| owner.downcast_ref::<LentStorage>())
        {
            let view = TensorView {
                storage_offset: (dl.byte_offset as usize / itemsize) as i64,
                ..view(dtype, &sizes, &strides)
            };
            return Ok(Tensor::new(storage.clone(), view)?);
        }
        // The elements in row-major order: the bytes lent as they are, or
        // gathered through a view over a copy of them.
        let shape: Vec<usize> = sizes.iter().map(|&size| size as usize).collect();
        let row_major_bytes = if strides == row_major(&sizes) {
            Cow::Borrowed(bytes)
        } else {
            let gathered = Tensor::new(
                Storage::from_vec(bytes.to_vec()),
                view(dtype, &sizes, &strides),
            )?;
            Cow::Owned(
                gathered
                    .to_contiguous_bytes()
                    .ok_or(DlpackError::OutOfBounds { len: bytes.len() })?,
            )
        };
        let contiguous = TensorView::contiguous(dtype, &shape);
        let nbytes = shape.iter().product::<usize>() * itemsize;
        let mut writer = allocator.allocate_storage(nbytes)?;
        if let (Some(to), Some(from)) = (
            writer.as_bytes_mut().get_mut(..nbytes),
            row_major_bytes.get(..nbytes),
        ) {
            to.copy_from_slice(from);
        }
        drop(row_major_bytes);
        drop(imported);
        Ok(Tensor::new(writer.freeze(), contiguous)?)
    }
}

/// A view of `dtype` with `sizes` and `strides` from element 0.
fn view(dtype: DType, sizes: &[i64], strides: &[i64]) -> TensorView {
    TensorView {
        dtype,
        storage_offset: 0,
        sizes: sizes.to_vec(),
        strides: strides.to_vec(),
        requires_grad: false,
        parameter: false,
    }
}

/// The strides of a compact row-major tensor of `sizes`.
fn row_major(sizes: &[i64]) -> Vec<i64> {
    let mut strides = vec![0; sizes.len()];
    let mut stride = 1i64;
    for (dim, &size) in sizes.iter().enumerate().rev() {
        strides[dim] = stride;
        stride = stride.saturating_mul(size.max(1));
    }
    strides
}

/// The DLPack type of `dtype`, as torch's `to_dlpack` gives it.
fn dlpack_dtype(dtype: DType) -> Result<DLDataType, DlpackError> {
    let (code, bits) = match dtype {
        DType::Bool => (6, 8),
        DType::UInt8 => (1, 8),
        DType::UInt16 => (1, 16),
        DType::UInt32 => (1, 32),
        DType::UInt64 => (1, 64),
        DType::Int8 => (0, 8),
        DType::Int16 => (0, 16),
        DType::Int32 => (0, 32),
        DType::Int64 => (0, 64),
        DType::Float16 => (2, 16),
        DType::Float32 => (2, 32),
        DType::Float64 => (2, 64),
        DType::BFloat16 => (4, 16),
        DType::Complex32 => (5, 32),
        DType::Complex64 => (5, 64),
        DType::Complex128 => (5, 128),
        DType::Float8E4M3Fn => (10, 8),
        DType::Float8E4M3FnUz => (11, 8),
        DType::Float8E5M2 => (12, 8),
        DType::Float8E5M2FnUz => (13, 8),
        DType::Float8E8M0Fnu => (14, 8),
        other => {
            return Err(DlpackError::Unsupported(format!(
                "torch.{} has no DLPack type",
                other.name()
            )));
        }
    };
    Ok(DLDataType {
        code,
        bits,
        lanes: 1,
    })
}

/// The torch dtype of a DLPack type.
fn torch_dtype(dtype: DLDataType) -> Result<DType, DlpackError> {
    DType::ALL
        .into_iter()
        .find(|&candidate| dlpack_dtype(candidate).is_ok_and(|code| code == dtype))
        .ok_or_else(|| {
            DlpackError::Unsupported(format!(
                "DLPack type code {}, {} bits, {} lanes has no torch dtype",
                dtype.code, dtype.bits, dtype.lanes
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_with_a_dlpack_code_maps_both_ways() {
        for dtype in [
            DType::Bool,
            DType::BFloat16,
            DType::Complex128,
            DType::Float8E5M2,
        ] {
            let code = dlpack_dtype(dtype).expect("a code");
            assert_eq!(torch_dtype(code).expect("a dtype"), dtype);
        }
        assert!(dlpack_dtype(DType::Bits8).is_err());
        let opaque = DLDataType {
            code: 3,
            bits: 64,
            lanes: 1,
        };
        assert!(torch_dtype(opaque).is_err());
    }
}
