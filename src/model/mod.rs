//! The model: tensors, their storages and the values a pickle rebuilds
//! into, with what they are made of (dtypes, elements, globals, byte
//! buffers, the memory a storage lives in). Every layer above speaks in
//! these types; this one imports none of them.
//!
//! [`Tensor`], [`Value`], [`Dict`] and [`DType`] are at the crate root too.

#[cfg(feature = "ndarray")]
mod array_view;
mod batch;
mod callable;
mod element;
mod storage;
mod tensor;
mod typed;
mod value;

pub use batch::{BATCH_ALIGNMENT, Batch, BatchLayout, BatchWriter, TensorSlot};
pub use callable::{CallKind, Callable};
pub use element::{Element, ElementError};
pub(crate) use storage::WeakStorage;
pub use storage::{
    CudaRef, DupFdRef, HandleRef, MemmapRef, Residence, SegmentRef, Storage, StorageAllocator,
    StorageKind, StorageWriter,
};
pub use tensor::{Tensor, TensorView, ViewError};
pub use value::{
    Attributes, Custom, Dict, Opaque, OpaqueCall, PathSegment, Value, ValueAccessError,
};
// What the model is made of, from the format and strategy crates: dtypes
// and their scalars, the globals a pickle names, byte buffers shared
// without a copy, and the memory a local storage lives in.
pub use tensorshare_compat::dtype::{DType, Scalar};
pub use tensorshare_compat::pickle::{Global, SharedBytes};
pub use tensorshare_strategies::{AllocateError, Exhausted, Segment};
