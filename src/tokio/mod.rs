//! [`Connection`] and [`Listener`] for tokio programs: the same sockets,
//! framing, handshake and rebuild as the blocking [`crate::Connection`]
//! and [`crate::Listener`], waited on by tokio's reactor instead of a
//! thread each.
//!
//! A server answers many peers on one runtime:
//!
//! ```
//! use tensorshare::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), tensorshare::Error> {
//! let sharing = SharingContext::new(Authkey::random()?);
//! let mut listener = tensorshare::tokio::Listener::new(sharing.listen_in_private_dir()?)?;
//! let address = listener.address().clone();
//!
//! let server = tokio::spawn(async move {
//!     let mut connection = listener.accept().await?;
//!     loop {
//!         let value = match connection.recv().await {
//!             Ok(value) => value,
//!             // The peer hung up between messages: the end of its stream.
//!             Err(closed) if closed.is_closed() => return Ok(()),
//!             // One message refused whole; the connection is in step.
//!             Err(refused) if refused.is_refused_message() => {
//!                 eprintln!("a message not echoed: {refused}");
//!                 continue;
//!             }
//!             Err(error) => return Err(error),
//!         };
//!         connection.send(&value).await?; // an echo
//!     }
//! });
//!
//! let mut client = tensorshare::tokio::Connection::connect(&sharing, &address).await?;
//! let weights = Tensor::from_slice(&sharing, &[0.5f32, -1.0], &[2])?;
//! client.send(&weights.clone().into()).await?;
//! assert_eq!(client.recv().await?.as_tensor(), Some(&weights));
//! drop(client);
//! server.await.expect("the server task")?;
//! # Ok(())
//! # }
//! ```
//!
//! # Cancellation
//!
//! Every future here may be dropped before it finishes (a `select!`, a
//! timeout) without losing a message or leaving the connection out of
//! step:
//! - [`Connection::recv`] keeps what arrived of a message, and a message
//!   whose rebuild had begun, for the next `recv`.
//! - [`Connection::send`] stages its message before the first byte is
//!   written; dropped after that, the message is still written, whole,
//!   before the next one ([`Connection::flush`] finishes it alone).
//! - [`Listener::accept`] keeps the handshakes under way for the next
//!   `accept`.
//!
//! # What runs where
//!
//! Reading and writing messages wait on the reactor. The authkey
//! handshake, and the rebuild of a received message (which may connect to
//! the sender's resource sharer for each storage a torch peer shares by
//! fd), run on tokio's blocking pool, so a slow peer holds no worker
//! thread. Pickling and sharing a value to send run on the calling task:
//! they copy and map memory, and wait on no peer. The resource sharer that
//! serves this process's fds to its peers stays a thread of its own: it
//! serves peers of blocking and async connections alike, and torch's
//! clients wait on it for a few microseconds per storage.

mod connection;
mod listener;

pub use connection::Connection;
pub use listener::Listener;

use crate::Error;
use crate::connection::ConnectionError;

/// An error of the reactor or the blocking pool about `what`.
fn runtime_error(what: &str, cause: std::io::Error) -> Error {
    Error::Connection(ConnectionError::io(what, cause))
}

/// The result of a task on the blocking pool: its panic goes on in the
/// caller; a task the runtime cancelled (it is shutting down) is an error.
fn joined<T>(result: Result<T, ::tokio::task::JoinError>, what: &str) -> Result<T, Error> {
    match result {
        Ok(value) => Ok(value),
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(runtime_error(what, std::io::Error::other(error))),
    }
}
