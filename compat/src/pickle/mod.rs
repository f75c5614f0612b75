//! The pickle format: an arena of inert nodes, a decoder VM and an encoder.
//!
//! The decoder never calls anything. `GLOBAL`/`STACK_GLOBAL` produce a
//! [`Node::Global`] only when the caller's [`GlobalFilter`] allows the
//! `(module, name)` pair; `REDUCE`, `NEWOBJ` and `BUILD` record what *would*
//! have been called in a [`Node::Object`]. The runtime decides what, if
//! anything, each allowed global means.

mod builder;
mod bytes;
mod decode;
mod encode;
pub mod opcodes;
mod python2_names;
mod value;

pub use builder::PickleBuilder;
pub use bytes::{ByteChunks, SharedBytes};

/// CPython's `_FRAME_SIZE_TARGET`: a frame is closed at the first opcode
/// boundary past this size, and payloads this large are written unframed.
/// The same size decides which `bytes` payloads the encoder leaves in their
/// own buffers and the decoder shares rather than copies.
pub(crate) const FRAME_SIZE_TARGET: usize = 64 * 1024;
pub use decode::*;
pub use encode::*;
pub use value::{Children, Construction, Global, Node, NodeId, Object, Pickle};
