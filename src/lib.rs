// Without its feature there is no safetensors, doctor or inspect module to
// link to: the crate docs' links to them go where docs.rs shows them,
// built with every feature.
#![cfg_attr(
    not(feature = "safetensors"),
    doc = "[`safetensors`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/index.html
[`safetensors::load`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/fn.load.html
[`safetensors::save`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/fn.save.html
[`safetensors::from_bytes`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/fn.from_bytes.html
[`safetensors::to_bytes`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/fn.to_bytes.html
[`safetensors::SafetensorsFile`]: https://docs.rs/tensorshare/0.1/tensorshare/safetensors/struct.SafetensorsFile.html"
)]
#![cfg_attr(
    not(feature = "doctor"),
    doc = "[`doctor`]: https://docs.rs/tensorshare/0.1/tensorshare/doctor/index.html
[`doctor::check`]: https://docs.rs/tensorshare/0.1/tensorshare/doctor/fn.check.html"
)]
#![cfg_attr(
    not(feature = "inspect"),
    doc = "[`inspect`]: https://docs.rs/tensorshare/0.1/tensorshare/inspect/index.html
[`inspect::inspect`]: https://docs.rs/tensorshare/0.1/tensorshare/inspect/fn.inspect.html"
)]
#![cfg_attr(
    not(feature = "dlpack"),
    doc = "[`dlpack`]: https://docs.rs/tensorshare/0.1/tensorshare/dlpack/index.html
[`Tensor::to_dlpack`]: https://docs.rs/tensorshare/0.1/tensorshare/struct.Tensor.html#method.to_dlpack
[`Tensor::from_dlpack`]: https://docs.rs/tensorshare/0.1/tensorshare/struct.Tensor.html#method.from_dlpack"
)]
#![cfg_attr(
    not(feature = "tokio"),
    doc = "[`tokio`]: https://docs.rs/tensorshare/0.1/tensorshare/tokio/index.html
[`tokio::Listener`]: https://docs.rs/tensorshare/0.1/tensorshare/tokio/struct.Listener.html
[`tokio::Connection`]: https://docs.rs/tensorshare/0.1/tensorshare/tokio/struct.Connection.html"
)]
#![doc = include_str!("lib.md")]
#![deny(unsafe_code)]

// The layers, bottom to top: each imports only those declared before it,
// which `scripts/check-layers` checks. One comment per layer keeps rustfmt
// from sorting them.

// Locks that outlive a panicking holder.
mod sync;
// Tensors, storages and the values a pickle rebuilds into.
pub mod model;
// Rust types as Python objects through serde: to_value, from_value.
pub mod serde_value;
// The allowlist, the walker and every rebuilder.
pub mod registry;
// Writing values as pickles, and as torch.save files.
pub mod reduce;
mod save;
// Reading torch.save files.
mod archive;
// The .safetensors format, on the safetensors crate.
#[cfg(feature = "safetensors")]
mod safetensors_format;
// multiprocessing.connection: bytes and fds.
pub mod connection;
// multiprocessing.resource_sharer: fds handed out to peers that ask.
pub mod resource_sharer;
// The facade error, wrapping every layer's.
mod error;
// .safetensors files by path, reader and writer, failing with the facade's
// error.
#[cfg(feature = "safetensors")]
pub mod safetensors;
// SharingContext: strategies, caches, pools, the sender's lifetimes.
pub mod sharing;
// Values over a connection: Connection::send and recv.
mod messages;
// Describing any pickle or torch.save file without executing it.
#[cfg(feature = "inspect")]
pub mod inspect;
// torch.save files by path, reader and writer.
pub mod torch_save;
// The limits shared memory runs into, checked before they bite.
#[cfg(feature = "doctor")]
pub mod doctor;
// Tensors lent to and taken from other tensor libraries.
#[cfg(feature = "dlpack")]
pub mod dlpack;
// Connections and listeners for tokio programs.
#[cfg(feature = "tokio")]
pub mod tokio;
// The names a program uses most, for a glob import.
pub mod prelude;

// The entry points: a process's sharing state and its connections, the
// key they authenticate with, the allowlist, and the one error.
pub use connection::Authkey;
pub use error::Error;
pub use messages::{Connection, Listener};
pub use registry::Registry;
pub use sharing::SharingContext;
// What messages and files hold: tensors and the values around them (the
// rest of the model is in `model`).
pub use model::{DType, Dict, Tensor, Value};
pub use tensorshare_strategies::StrategyKind;
// Rust types as Python objects, through serde; and serde itself, the one
// these implement, for deriving through `tensorshare::serde`.
pub use serde;
pub use serde_value::{from_value, to_value};
// The crates of the element types and typed views: `half::f16`,
// `num_complex::Complex<f32>`, `bytemuck::Pod`, and under the `ndarray`
// feature the array views; an embedder names them through these, at the
// versions tensorshare uses.
pub use bytemuck;
pub use half;
#[cfg(feature = "ndarray")]
pub use ndarray;
pub use num_complex;
