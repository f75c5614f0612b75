#![doc = include_str!("../README.md")]
#![deny(unsafe_code)]

pub mod archive;
pub mod connection;
mod error;
pub mod inspect;
pub mod reduce;
pub mod registry;
pub mod resource_sharer;
pub mod save;
pub mod sharing;
mod storage;
mod tensor;
mod value;

pub use connection::{Address, Authkey, Client, Connection, Listener};
pub use error::Error;
pub use registry::Registry;
pub use sharing::SharingContext;
pub use storage::{
    CudaRef, DupFdRef, MemmapRef, Residence, SegmentRef, Storage, StorageKind, StorageWriter,
};
pub use tensor::{ElementOffsets, Tensor, TensorView, ViewError};
pub use tensorshare_compat::DType;
pub use tensorshare_compat::dtype::Scalar;
pub use tensorshare_compat::pickle::SharedBytes;
pub use tensorshare_strategies::StrategyKind;
pub use value::{Children, Custom, Distinct, Opaque, OpaqueCall, Value};
