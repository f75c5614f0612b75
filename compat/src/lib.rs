//! PyTorch and CPython wire formats, with no OS sharing and no unsafe code.
//!
//! - [`pickle`]: a pickle decoder VM that executes nothing (globals resolve
//!   only through an allowlist into inert [`pickle::Node::Global`] nodes) and
//!   an encoder with memoization.
//! - [`dtype`]: torch's dtypes with their wire names and element sizes.
//! - [`torch_save`]: readers and writers for `torch.save` files, zip and
//!   legacy.
//! - [`connection`]: CPython's `multiprocessing.connection` framing and
//!   authkey handshake, over any byte stream.
//! - [`resource_sharer`]: the requests a `multiprocessing.resource_sharer`
//!   serves: CPython's `(key, pid)` and tensorshare's release and unmapped
//!   notices.
//!
//! Every input byte is treated as hostile: sizes and depth are capped, and a
//! malformed input is an error carrying the byte offset, never a panic.
//!
//! # Errors
//!
//! Every error's message includes its cause, and `source()` returns `None`:
//! a chain printer (`anyhow`, `eyre`, a `main` returning `Box<dyn Error>`)
//! shows each cause once. Wrapped errors stay reachable as variant fields
//! (e.g. [`connection::FramingError::Io`] holds the `io::Error`).
#![forbid(unsafe_code)]

pub mod connection;
pub mod dtype;
pub mod pickle;
pub mod resource_sharer;
pub mod torch_save;

pub use dtype::DType;
