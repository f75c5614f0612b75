//! The model: tensors, their storages and the values a pickle rebuilds
//! into. Every layer above speaks in these types; this one imports none of
//! them.

mod callable;
mod storage;
mod tensor;
mod value;

pub use callable::{CallKind, Callable};
pub(crate) use storage::WeakStorage;
pub use storage::{
    CudaRef, DupFdRef, MemmapRef, Residence, SegmentRef, Storage, StorageKind, StorageWriter,
};
pub use tensor::{ElementOffsets, Tensor, TensorView, ViewError};
pub use value::{Children, Custom, Distinct, Opaque, OpaqueCall, Value};
