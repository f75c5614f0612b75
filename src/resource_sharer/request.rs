//! The `(key, pid)` request a receiver sends after the handshake.

use tensorshare_compat::pickle::{
    DecodeError, EncodeError, EncodeOptions, Limits, Node, Pickle, decode_all, encode,
};

/// The longest request the sharer reads. CPython's is under 40 bytes; the
/// cap keeps a hostile client from making the sharer allocate.
pub const MAX_REQUEST_LEN: usize = 4096;

/// Caps for decoding a request: a tuple of two ints needs a handful of nodes.
const REQUEST_LIMITS: Limits = Limits {
    max_depth: 4,
    max_nodes: 16,
    max_memo: 16,
    max_stack: 16,
};

/// What `DupFd.detach()` sends after the handshake: the pickled tuple
/// `(key, os.getpid())`.
///
/// # Examples
///
/// ```
/// use tensorshare::resource_sharer::DupFdRequest;
///
/// let request = DupFdRequest { key: 1, pid: 12345 };
/// // ForkingPickler.dumps((1, 12345)) on CPython 3.8 to 3.13
/// let bytes = b"\x80\x04\x95\x08\x00\x00\x00\x00\x00\x00\x00K\x01M90\x86\x94.";
/// assert_eq!(request.to_pickle()?, bytes);
/// assert_eq!(DupFdRequest::from_pickle(bytes)?, request);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DupFdRequest {
    /// The registration key, the second item of the `DupFd`'s `_id`.
    pub key: i64,
    /// The receiving process's pid. CPython ignores it on Unix; it is kept
    /// for diagnostics.
    pub pid: i64,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    /// The bytes are not a pickle of plain values (globals are refused).
    #[error("the request is not a pickle of plain values: {0}")]
    Decode(#[from] DecodeError),
    /// The pickle decoded but is not a tuple of two ints.
    #[error(
        "the request is {found}, not a (key, pid) tuple of two ints: the client does not speak \
         multiprocessing.resource_sharer"
    )]
    NotKeyAndPid {
        /// What the pickle held instead.
        found: &'static str,
    },
}

impl DupFdRequest {
    /// The pickle CPython's `ForkingPickler` writes for `(key, pid)`
    /// (protocol 4), byte for byte.
    ///
    /// # Errors
    ///
    /// Only if the encoder refuses a tuple of two ints, which it does not.
    pub fn to_pickle(&self) -> Result<Vec<u8>, EncodeError> {
        let mut pickle = Pickle::new();
        let key = pickle.push(Node::Int(self.key));
        let pid = pickle.push(Node::Int(self.pid));
        let tuple = pickle.push(Node::Tuple(vec![key, pid]));
        pickle.set_root(tuple);
        encode(&pickle, &EncodeOptions::new())
    }

    /// Decodes a request: exactly one pickle, no globals, a tuple of two ints
    /// that fit in 64 bits.
    ///
    /// # Errors
    ///
    /// [`RequestError::Decode`] for anything that is not a pickle of plain
    /// values within tight limits, [`RequestError::NotKeyAndPid`] for any
    /// value other than a tuple of two ints.
    pub fn from_pickle(bytes: &[u8]) -> Result<Self, RequestError> {
        let no_globals = |_: &str, _: &str| false;
        let decoded = decode_all(bytes, &no_globals, &REQUEST_LIMITS)?;
        let pickle = &decoded.pickle;
        let root = pickle.get(pickle.root());
        let Some(Node::Tuple(items)) = root else {
            return Err(RequestError::NotKeyAndPid {
                found: root.map_or("nothing", Node::kind_name),
            });
        };
        let [key, pid] = items.as_slice() else {
            return Err(RequestError::NotKeyAndPid {
                found: "a tuple whose length is not 2",
            });
        };
        match (pickle.get(*key), pickle.get(*pid)) {
            (Some(Node::Int(key)), Some(Node::Int(pid))) => Ok(Self {
                key: *key,
                pid: *pid,
            }),
            _ => Err(RequestError::NotKeyAndPid {
                found: "a 2-tuple holding something other than two 64-bit ints",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_cpython_bytes_for_large_values() {
        // ForkingPickler.dumps((2**40, 4000000))
        let expected = b"\x80\x04\x95\x10\x00\x00\x00\x00\x00\x00\x00\x8a\x06\x00\x00\x00\x00\
                         \x00\x01J\x00\t=\x00\x86\x94.";
        let request = DupFdRequest {
            key: 1 << 40,
            pid: 4_000_000,
        };
        assert_eq!(request.to_pickle().unwrap(), expected);
        assert_eq!(DupFdRequest::from_pickle(expected).unwrap(), request);
    }

    #[test]
    fn refuses_globals_and_other_shapes() {
        // pickle.dumps(os.system, protocol=2)
        assert!(matches!(
            DupFdRequest::from_pickle(b"\x80\x02cposix\nsystem\nq\x00."),
            Err(RequestError::Decode(_))
        ));
        // pickle.dumps(None), (1, 2, 3), (1, 'a')
        assert!(DupFdRequest::from_pickle(b"\x80\x04N.").is_err());
        assert!(
            DupFdRequest::from_pickle(
                b"\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00K\x01K\x02K\x03\x87\x94."
            )
            .is_err()
        );
        assert!(DupFdRequest::from_pickle(b"\x80\x02K\x01X\x01\x00\x00\x00a\x86.").is_err());
        assert!(DupFdRequest::from_pickle(b"").is_err());
        assert!(DupFdRequest::from_pickle(b"\x80\x02K\x01K\x02\x86.trailing").is_err());
    }
}
