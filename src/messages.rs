//! Values over a connection: Python's `conn.send(obj)` and `conn.recv()`
//! in a torch process, joining the transport ([`connection`](crate::connection),
//! bytes and fds) with the sharing layer ([`SharingContext`]).

use std::sync::Arc;

use crate::Error;
use crate::connection::{Connection, RegisteredFds};
use crate::model::Value;
use crate::sharing::SharingContext;

impl Connection {
    /// Sends `value` as Python's `conn.send(value)` would from a torch
    /// process: pickled by `sharing`, storages shared with its strategy.
    ///
    /// A Rust struct goes as the dict torch code expects through
    /// [`to_value`](crate::to_value): `connection.send(&to_value(&batch)?,
    /// &sharing)`.
    ///
    /// The fds of shared storages also ride on the message itself (see
    /// [`SharingContext::with_inline_fds`]); Python peers ignore them.
    ///
    /// The fds registered for the message wait for the peer to fetch them
    /// for their [unfetched lifetime](SharingContext::with_unfetched_lifetime),
    /// or until the connection ends with its peer process exited: a process
    /// that died reading the connection fetches nothing more, and they are
    /// closed then.
    ///
    /// # Errors
    ///
    /// When a storage cannot be shared, or [`Error::Connection`] when the
    /// send fails.
    pub fn send(&mut self, value: &Value, sharing: &SharingContext) -> Result<(), Error> {
        let outgoing = sharing.dumps_outgoing(value)?;
        let keys = outgoing.registered_keys();
        if !keys.is_empty() {
            // Registered keys mean the sharer has started.
            if let Ok(sharer) = sharing.resource_sharer() {
                let holder: Arc<dyn RegisteredFds> = sharer.clone();
                self.note_sent(&holder, keys);
            }
        }
        let payload = outgoing.pickle().io_slices();
        Ok(self.send_slices_with_fds(&payload, &outgoing.attached_fds())?)
    }

    /// Receives one message as Python's `conn.recv()` would in a torch
    /// process: rebuilt by `sharing`, shared storages attached.
    ///
    /// Read a dict into a Rust struct with [`from_value`](crate::from_value):
    /// `let batch: Batch = from_value(&connection.recv(&sharing)?)?`.
    ///
    /// # Errors
    ///
    /// [`Error::Connection`] when receiving fails (see
    /// [`recv_bytes`](Self::recv_bytes)); any error of
    /// [`SharingContext::loads`].
    pub fn recv(&mut self, sharing: &SharingContext) -> Result<Value, Error> {
        let message = self.recv_message()?;
        // Large `bytes` in the message are decoded as slices of its buffer,
        // which comes back for the next message once they are all gone.
        let value = sharing.loads_with_fds(&message.bytes, message.fds);
        drop(message.bytes);
        self.reuse_buffer(message.buffer);
        Ok(value?)
    }
}
