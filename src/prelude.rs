//! The names a program that shares tensors with torch uses most, for
//! `use tensorshare::prelude::*;`: the context and its key, connections and
//! their addresses, tensors and values, and the one error.
//!
//! # Examples
//!
//! ```
//! use tensorshare::prelude::*;
//!
//! let sharing = SharingContext::new(Authkey::random()?);
//! let listener = sharing.listen_in_private_dir()?;
//! let weight = Tensor::from_slice(&sharing, &[0.5f32, -1.0], &[2])?;
//! std::thread::scope(|scope| -> Result<(), Error> {
//!     let peer = scope.spawn(|| listener.accept()?.recv());
//!     let mut connection = sharing.connect(listener.address())?;
//!     connection.send(&Dict::new().with("weight", weight.clone()).into())?;
//!     let got: Value = peer.join().expect("the peer thread")?;
//!     assert_eq!(got.try_get::<&Tensor>("weight")?, &weight);
//!     println!("{got}");
//!     Ok(())
//! })?;
//! # Ok::<(), Error>(())
//! ```

pub use crate::connection::Address;
pub use crate::{
    Authkey, Connection, DType, Dict, Error, Listener, SharingContext, StrategyKind, Tensor, Value,
    from_value, to_value,
};
