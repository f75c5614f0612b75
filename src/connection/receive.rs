//! Receiving: one message, in as many reads as the socket needs.
//!
//! Every receive goes through [`Connection::recv_message`], which keeps
//! what arrived of a message when the socket has nothing more for now (a
//! read timeout on a blocking socket, `WouldBlock` on a non-blocking one):
//! the next receive goes on from there, so a timeout loses nothing and a
//! caller that stops waiting leaves the connection in step.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use tensorshare_compat::connection::MessageReader;
use tensorshare_compat::pickle::SharedBytes;
use tensorshare_strategies::bytes::message_window::take_message_buffer;

use super::attached::{ArrivedFds, CollectingReader};
use super::{Connection, ConnectionError};

/// The largest receive buffer a [`Connection`] keeps between messages.
const KEPT_RECEIVE_BUFFER_MAX: usize = 256 << 20;

/// A message read into a connection's kept buffer, and the fds that came
/// with it.
pub(crate) struct ReceivedMessage {
    /// The message, a slice of `buffer`.
    pub(crate) bytes: SharedBytes,
    /// The buffer, which the connection keeps a clone of, to read the next
    /// message into if nothing else holds it by then.
    buffer: Arc<Vec<u8>>,
    /// The fds attached to the message.
    pub(crate) fds: Vec<OwnedFd>,
}

impl ReceivedMessage {
    /// The message as a `Vec` of its own length: the buffer itself when
    /// nothing else holds it.
    fn into_vec(self) -> Vec<u8> {
        let len = self.bytes.len();
        drop(self.bytes);
        match Arc::try_unwrap(self.buffer) {
            Ok(mut buffer) => {
                buffer.truncate(len);
                buffer
            }
            Err(shared) => shared.get(..len).unwrap_or_default().to_vec(),
        }
    }
}

/// The buffer of a connection's last message, for the next one.
pub(super) enum KeptBuffer {
    /// Nothing received from it holds on to it; empty before the first
    /// message, and after one that went whole to its receiver.
    Owned(Vec<u8>),
    /// Lent to the last message's reader: the next message goes into it
    /// if, by then, nothing decoded from the last one refers to it.
    Lent(Arc<Vec<u8>>),
}

impl Default for KeptBuffer {
    fn default() -> Self {
        Self::Owned(Vec::new())
    }
}

/// What arrived of a message not yet whole.
pub(super) struct PartialMessage {
    reader: MessageReader,
    buffer: Vec<u8>,
    fds: ArrivedFds,
}

impl Connection {
    /// Receives one message: Python's `conn.recv_bytes()`.
    ///
    /// What Python's `conn.send(obj)` sent is a pickle: receive it with
    /// the [`Connection::recv`](crate::Connection::recv) of a
    /// [`SharingContext`](crate::SharingContext), which rebuilds it and
    /// attaches the storages its tensors name. Decode the bytes with
    /// [`Registry::loads`](crate::Registry::loads) only for plain data,
    /// which names no shared storage.
    ///
    /// # Errors
    ///
    /// [`ConnectionError::Closed`] when the peer closed the connection
    /// between messages, [`ConnectionError::MessageTooLarge`] above
    /// [`ConnectionOptions::with_max_message_bytes`](super::ConnectionOptions::with_max_message_bytes),
    /// [`ConnectionError::ReadTimeout`] when a read timeout expires (what
    /// arrived of the message is kept, and the next receive goes on with
    /// it), and [`ConnectionError::Receive`] for a cut-short or malformed
    /// message or a socket failure.
    pub fn recv_bytes(&mut self) -> Result<Vec<u8>, ConnectionError> {
        Ok(self.recv_whole()?.into_vec())
    }

    /// Receives one message into `buf`, replacing its contents; returns
    /// the message length. `buf`'s old allocation is kept for the next
    /// message.
    ///
    /// # Errors
    ///
    /// As [`Connection::recv_bytes`]; `buf` is then unchanged.
    pub fn recv_bytes_into(&mut self, buf: &mut Vec<u8>) -> Result<usize, ConnectionError> {
        self.recv_bytes_with_fds(buf)?;
        Ok(buf.len())
    }

    /// Receives one message into `buf` (as
    /// [`recv_bytes_into`](Self::recv_bytes_into)) and the fds attached to
    /// it, close-on-exec. A message that carried more than
    /// [`MAX_FDS_PER_MESSAGE`](tensorshare_strategies::platform::fd_passing::MAX_FDS_PER_MESSAGE)
    /// fds, or lost some to a full fd table, comes with none: every one
    /// that arrived is closed.
    ///
    /// # Errors
    ///
    /// As [`recv_bytes_into`](Self::recv_bytes_into); fds that arrived with
    /// a message that failed are closed.
    pub fn recv_bytes_with_fds(
        &mut self,
        buf: &mut Vec<u8>,
    ) -> Result<Vec<OwnedFd>, ConnectionError> {
        let mut message = self.recv_whole()?;
        let fds = std::mem::take(&mut message.fds);
        let old = std::mem::replace(buf, message.into_vec());
        self.keep_receive_buffer(old);
        Ok(fds)
    }

    /// Receives one message whose buffer goes with it, uncopied: the
    /// connection keeps nothing of it.
    fn recv_whole(&mut self) -> Result<ReceivedMessage, ConnectionError> {
        let message = self.recv_message()?;
        self.kept = KeptBuffer::default();
        Ok(message)
    }

    /// Receives one message into the buffer this connection keeps, with
    /// the fds attached to it, for a reader that decodes it in place: the
    /// next message goes into the same buffer if nothing decoded from this
    /// one refers to it by then.
    ///
    /// When the socket has nothing more for now ([`ConnectionError::ReadTimeout`],
    /// which a non-blocking socket gives at once), what arrived stays here
    /// and the next call goes on with it.
    pub(crate) fn recv_message(&mut self) -> Result<ReceivedMessage, ConnectionError> {
        let mut partial = match self.partial.take() {
            Some(partial) => partial,
            None => PartialMessage {
                reader: MessageReader::new(self.options.max_message_bytes),
                buffer: self.take_receive_buffer(),
                fds: ArrivedFds::default(),
            },
        };
        let mut reader = CollectingReader {
            stream: &self.stream,
            arrived: &mut partial.fds,
        };
        match partial.reader.read(&mut reader, &mut partial.buffer) {
            Ok(len) => {
                let buffer = Arc::new(partial.buffer);
                // One too large to keep goes with the message's last reader.
                if buffer.capacity() <= KEPT_RECEIVE_BUFFER_MAX {
                    self.kept = KeptBuffer::Lent(Arc::clone(&buffer));
                }
                let bytes = SharedBytes::from_shared_vec(Arc::clone(&buffer), len);
                let fds = partial.fds.into_fds();
                Ok(ReceivedMessage { bytes, buffer, fds })
            }
            Err(error) if error.is_would_block() => {
                self.partial = Some(partial);
                Err(ConnectionError::from_receive(error))
            }
            Err(error) => {
                self.keep_receive_buffer(partial.buffer);
                self.sent.withdraw_if_peer_exited();
                Err(ConnectionError::from_receive(error))
            }
        }
    }

    fn keep_receive_buffer(&mut self, buffer: Vec<u8>) {
        if buffer.capacity() <= KEPT_RECEIVE_BUFFER_MAX {
            self.kept = KeptBuffer::Owned(buffer);
        }
    }

    /// The buffer to read the next message into.
    fn take_receive_buffer(&mut self) -> Vec<u8> {
        let buffer = match std::mem::take(&mut self.kept) {
            KeptBuffer::Owned(buffer) => buffer,
            KeptBuffer::Lent(lent) => Arc::try_unwrap(lent).unwrap_or_default(),
        };
        if buffer.capacity() > 0 {
            return buffer;
        }
        // The last one went with a storage that kept it; one such storage
        // dropped since left its buffer, faulted in already.
        take_message_buffer().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::connection::ConnectionOptions;

    /// `recv_bytes` returns the buffer the message was read into, lent to
    /// no one: a message read into the buffer the connection had kept
    /// from a decoded one comes out as that buffer, not as a copy of it.
    #[test]
    fn recv_bytes_hands_over_the_buffer_it_read_into() {
        let (a, b) = UnixStream::pair().expect("a socket pair");
        let mut sender = Connection::from_stream(a, ConnectionOptions::default());
        let mut receiver = Connection::from_stream(b, ConnectionOptions::default());
        sender.send_bytes(&[1; 4096]).expect("send the first");
        sender.send_bytes(&[2; 4096]).expect("send the second");
        let first = receiver.recv_message().expect("the first");
        let read_into = first.buffer.as_ptr();
        drop(first);
        let second = receiver.recv_bytes().expect("the second");
        assert_eq!(second, [2; 4096]);
        assert_eq!(
            second.as_ptr(),
            read_into,
            "recv_bytes copied the message out of the buffer it was read into"
        );
    }
}
