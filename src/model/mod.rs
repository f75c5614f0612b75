//! The model: tensors, their storages and the values a pickle rebuilds
//! into. Every layer above speaks in these types; this one imports none of
//! them.

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
    CudaRef, DupFdRef, MemmapRef, Residence, SegmentRef, Storage, StorageAllocator, StorageKind,
    StorageWriter,
};
pub use tensor::{ElementOffsets, Tensor, TensorView, ViewError};
pub use value::{
    Children, Custom, Dict, Distinct, Opaque, OpaqueCall, PathSegment, Value, ValueAccessError,
};
