//! The requests a `multiprocessing.resource_sharer` serves, as bytes: the
//! `(key, pid)` a receiver sends after the handshake to fetch an fd, and
//! tensorshare's two additions, `("tensorshare.release", [key, ...])` and
//! `("tensorshare.unmapped", [key, ...])`.
//!
//! Each is a protocol-4 pickle of plain values, read with the crate's own
//! decoder under tight limits and with no globals allowed.

use crate::pickle::{
    DecodeError, EncodeError, EncodeOptions, Limits, Node, Pickle, decode_all, encode,
};

/// The longest request the sharer reads. CPython's is under 40 bytes and a
/// full [`ReleaseRequest`] under 10 KiB; the cap keeps a hostile client from
/// making the sharer allocate.
pub const MAX_REQUEST_LEN: usize = 16 * 1024;

/// The most keys one [`ReleaseRequest`] gives back.
pub const MAX_RELEASE_KEYS: usize = 1024;

/// Caps for decoding a request: a release's keys and a few nodes more.
const REQUEST_LIMITS: Limits = Limits {
    max_depth: 4,
    max_nodes: MAX_RELEASE_KEYS + 8,
    max_memo: 16,
    max_stack: MAX_RELEASE_KEYS + 8,
};

/// The tag that starts a [`ReleaseRequest`].
const RELEASE_TAG: &str = "tensorshare.release";

/// The tag that starts an [`UnmappedRequest`].
const UNMAPPED_TAG: &str = "tensorshare.unmapped";

/// What `DupFd.detach()` sends after the handshake: the pickled tuple
/// `(key, os.getpid())`.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::resource_sharer::DupFdRequest;
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
    Decode(DecodeError),
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

// By hand rather than `#[from]`, which would also make the decoder's error
// the `source()`; the message includes it (see the crate's error docs).
impl From<DecodeError> for RequestError {
    fn from(error: DecodeError) -> Self {
        RequestError::Decode(error)
    }
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
        match SharerRequest::from_pickle(bytes)? {
            SharerRequest::Fetch(request) => Ok(request),
            SharerRequest::Release(_) | SharerRequest::Unmapped(_) => {
                Err(RequestError::NotKeyAndPid {
                    found: "a tensorshare release",
                })
            }
        }
    }
}

/// What a tensorshare receiver sends a tensorshare sharer after the
/// handshake to give back keys whose fds arrived attached to the message
/// itself: the pickled tuple `("tensorshare.release", [key, ...])`. The
/// sharer closes those fds and answers nothing. CPython never sends it; its
/// sharer would refuse it like any malformed request.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::resource_sharer::{ReleaseRequest, SharerRequest};
///
/// let release = ReleaseRequest { keys: vec![3, 4, 5] };
/// let bytes = release.to_pickle()?;
/// assert_eq!(SharerRequest::from_pickle(&bytes)?, SharerRequest::Release(release));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReleaseRequest {
    /// The keys, at most [`MAX_RELEASE_KEYS`].
    pub keys: Vec<i64>,
}

impl ReleaseRequest {
    /// The request's pickle (protocol 4).
    ///
    /// # Errors
    ///
    /// Only if the encoder refuses a tuple of a str and ints, which it does
    /// not.
    pub fn to_pickle(&self) -> Result<Vec<u8>, EncodeError> {
        tagged_keys(RELEASE_TAG, &self.keys)
    }
}

/// What a tensorshare receiver sends the sharer of a storage's sender once
/// the storage has died here, never having been sent on: the keys it
/// arrived under, as the pickled tuple `("tensorshare.unmapped", [key,
/// ...])`. Nothing in the receiver maps the memory or holds an fd of it any
/// more, so the sender may reuse it for a new storage. The sharer answers
/// nothing.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::resource_sharer::{SharerRequest, UnmappedRequest};
///
/// let unmapped = UnmappedRequest { keys: vec![3, 4] };
/// let bytes = unmapped.to_pickle()?;
/// assert_eq!(SharerRequest::from_pickle(&bytes)?, SharerRequest::Unmapped(unmapped));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UnmappedRequest {
    /// The keys, at most [`MAX_RELEASE_KEYS`].
    pub keys: Vec<i64>,
}

impl UnmappedRequest {
    /// The request's pickle (protocol 4).
    ///
    /// # Errors
    ///
    /// Only if the encoder refuses a tuple of a str and ints, which it does
    /// not.
    pub fn to_pickle(&self) -> Result<Vec<u8>, EncodeError> {
        tagged_keys(UNMAPPED_TAG, &self.keys)
    }
}

/// `(tag, [key, ...])`, pickled with protocol 4.
fn tagged_keys(tag: &str, keys: &[i64]) -> Result<Vec<u8>, EncodeError> {
    let mut pickle = Pickle::new();
    let tag = pickle.push(Node::Str(tag.into()));
    let keys = keys
        .iter()
        .map(|&key| pickle.push(Node::Int(key)))
        .collect();
    let keys = pickle.push(Node::List(keys));
    let tuple = pickle.push(Node::Tuple(vec![tag, keys]));
    pickle.set_root(tuple);
    encode(&pickle, &EncodeOptions::new())
}

/// Any request a resource sharer serves.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SharerRequest {
    /// CPython's `(key, pid)`: send the fd.
    Fetch(DupFdRequest),
    /// tensorshare's release: close the fds, they arrived another way.
    Release(ReleaseRequest),
    /// tensorshare's notice that a receiver no longer maps the storages
    /// sent under these keys.
    Unmapped(UnmappedRequest),
}

impl SharerRequest {
    /// Decodes either request: exactly one pickle, no globals.
    ///
    /// # Errors
    ///
    /// [`RequestError::Decode`] for anything that is not a pickle of plain
    /// values within tight limits, [`RequestError::NotKeyAndPid`] for a
    /// value that is neither request.
    pub fn from_pickle(bytes: &[u8]) -> Result<Self, RequestError> {
        let no_globals = |_: &str, _: &str| false;
        let decoded = decode_all(bytes, &no_globals, &REQUEST_LIMITS)?;
        let pickle = &decoded.pickle;
        let root = pickle.root_node();
        let Some(Node::Tuple(items)) = root else {
            return Err(RequestError::NotKeyAndPid {
                found: root.map_or("nothing", Node::kind_name),
            });
        };
        let [first, second] = items.as_slice() else {
            return Err(RequestError::NotKeyAndPid {
                found: "a tuple whose length is not 2",
            });
        };
        match (pickle.get(*first), pickle.get(*second)) {
            (Some(Node::Int(key)), Some(Node::Int(pid))) => Ok(Self::Fetch(DupFdRequest {
                key: *key,
                pid: *pid,
            })),
            (Some(Node::Str(tag)), Some(Node::List(keys)))
                if tag == RELEASE_TAG || tag == UNMAPPED_TAG =>
            {
                let keys = keys
                    .iter()
                    .map(|&id| match pickle.get(id) {
                        Some(Node::Int(key)) => Some(*key),
                        _ => None,
                    })
                    .collect::<Option<Vec<i64>>>()
                    .filter(|keys| keys.len() <= MAX_RELEASE_KEYS)
                    .ok_or(RequestError::NotKeyAndPid {
                        found: "a release whose keys are not at most 1024 64-bit ints",
                    })?;
                Ok(if tag == RELEASE_TAG {
                    Self::Release(ReleaseRequest { keys })
                } else {
                    Self::Unmapped(UnmappedRequest { keys })
                })
            }
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
    fn release_round_trips_and_is_not_a_fetch() {
        let release = ReleaseRequest {
            keys: (1..=MAX_RELEASE_KEYS as i64).map(|k| k << 40).collect(),
        };
        let bytes = release.to_pickle().unwrap();
        assert!(bytes.len() <= MAX_REQUEST_LEN);
        assert_eq!(
            SharerRequest::from_pickle(&bytes).unwrap(),
            SharerRequest::Release(release)
        );
        assert!(DupFdRequest::from_pickle(&bytes).is_err());
        let unmapped = UnmappedRequest { keys: vec![7, 8] };
        assert_eq!(
            SharerRequest::from_pickle(&unmapped.to_pickle().unwrap()).unwrap(),
            SharerRequest::Unmapped(unmapped)
        );
        let too_many = ReleaseRequest {
            keys: vec![1; MAX_RELEASE_KEYS + 1],
        };
        assert!(SharerRequest::from_pickle(&too_many.to_pickle().unwrap()).is_err());
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
