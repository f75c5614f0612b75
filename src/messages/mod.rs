//! Values over a connection: Python's `conn.send(obj)` and `conn.recv()`
//! in a torch process. A [`Connection`] joins the transport
//! ([`connection`](crate::connection): bytes and fds) with the sharing
//! context its messages go through, and a [`Listener`] accepts such
//! connections.

mod connection;
mod listener;

pub use connection::Connection;
#[cfg(feature = "tokio")]
pub(crate) use connection::{connection_failed, rebuild};
pub use listener::Listener;
