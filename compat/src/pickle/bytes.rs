//! The contents of pickled `bytes` objects, held without copying.
//!
//! A tensor's storage can travel inside a pickle as one `bytes` object of
//! many megabytes (torch's `_load_from_bytes`). Copying it into the decoded
//! arena, again into the rebuilt value, and once more on the way out would
//! triple the cost of every message. [`SharedBytes`] is a slice of a buffer
//! held by shared ownership, so the decoder hands out parts of the message
//! buffer and a sender points at a storage's own memory; [`ByteChunks`] is a
//! `bytes` object an encoder writes from several such slices one after
//! another (a header and the storage behind it) without joining them first.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, Range};
use std::sync::Arc;

/// Where the bytes of a [`SharedBytes`] live.
#[derive(Clone)]
enum Owner {
    /// A vector, which [`SharedBytes::try_into_vec`] can hand back.
    Vec(Arc<Vec<u8>>),
    /// Any other buffer (a storage's mapping, ...).
    Other(Arc<dyn AsRef<[u8]> + Send + Sync>),
}

impl Owner {
    fn bytes(&self) -> &[u8] {
        match self {
            Owner::Vec(vec) => vec,
            Owner::Other(other) => (**other).as_ref(),
        }
    }
}

/// A read-only slice of a buffer held by shared ownership: cloning and
/// slicing never copy the bytes.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::SharedBytes;
///
/// let message = SharedBytes::from(b"header:payload".to_vec());
/// let payload = message.slice(7..14).unwrap();
/// assert_eq!(&*payload, b"payload");
/// assert!(message.slice(7..15).is_none());
/// ```
#[derive(Clone)]
pub struct SharedBytes {
    owner: Owner,
    range: Range<usize>,
}

impl SharedBytes {
    /// All of `owner`'s bytes, uncopied. `owner.as_ref()` must give the same
    /// bytes every time it is called.
    pub fn from_owner<T: AsRef<[u8]> + Send + Sync + 'static>(owner: T) -> Self {
        let len = owner.as_ref().len();
        Self {
            owner: Owner::Other(Arc::new(owner)),
            range: 0..len,
        }
    }

    /// The first `len` bytes of a shared vector (all of it when `len` is
    /// longer), uncopied.
    pub fn from_shared_vec(vec: Arc<Vec<u8>>, len: usize) -> Self {
        let len = len.min(vec.len());
        Self {
            owner: Owner::Vec(vec),
            range: 0..len,
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.owner
            .bytes()
            .get(self.range.clone())
            .unwrap_or_default()
    }

    /// The part of these bytes at `range` (relative to them), sharing the
    /// buffer; `None` when `range` is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Option<SharedBytes> {
        if range.start > range.end || range.end > self.len() {
            return None;
        }
        let start = self.range.start + range.start;
        Some(Self {
            owner: self.owner.clone(),
            range: start..start + range.len(),
        })
    }

    /// The bytes as a vector: without copying when these are all of a
    /// vector no one else holds, else copied.
    pub fn into_vec(self) -> Vec<u8> {
        self.try_into_vec().unwrap_or_else(|shared| shared.to_vec())
    }

    /// The bytes as a vector without copying, when these are all of a
    /// vector no one else holds; else `self` back.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, when taking the vector would need a copy.
    pub fn try_into_vec(self) -> Result<Vec<u8>, SharedBytes> {
        let Owner::Vec(vec) = self.owner else {
            return Err(self);
        };
        if self.range != (0..vec.len()) {
            return Err(Self {
                owner: Owner::Vec(vec),
                range: self.range,
            });
        }
        Arc::try_unwrap(vec).map_err(|vec| Self {
            owner: Owner::Vec(vec),
            range: self.range,
        })
    }

    /// The vector these bytes are a slice of, shared, and where in it they
    /// lie; `self` back when they are not in a vector.
    ///
    /// # Errors
    ///
    /// `self`, unchanged, for bytes of another kind of owner.
    pub fn try_into_shared_vec(self) -> Result<(Arc<Vec<u8>>, Range<usize>), SharedBytes> {
        match self.owner {
            Owner::Vec(vec) => Ok((vec, self.range)),
            owner => Err(Self {
                owner,
                range: self.range,
            }),
        }
    }
}

impl Default for SharedBytes {
    fn default() -> Self {
        Self::from(Vec::new())
    }
}

impl Deref for SharedBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for SharedBytes {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl From<Vec<u8>> for SharedBytes {
    /// Takes the vector, uncopied.
    fn from(vec: Vec<u8>) -> Self {
        let len = vec.len();
        Self::from_shared_vec(Arc::new(vec), len)
    }
}

impl From<&[u8]> for SharedBytes {
    /// Copies the bytes.
    fn from(bytes: &[u8]) -> Self {
        Self::from(bytes.to_vec())
    }
}

impl<const N: usize> From<&[u8; N]> for SharedBytes {
    /// Copies the bytes.
    fn from(bytes: &[u8; N]) -> Self {
        Self::from(bytes.to_vec())
    }
}

impl PartialEq for SharedBytes {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for SharedBytes {}

impl PartialEq<[u8]> for SharedBytes {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl<const N: usize> PartialEq<[u8; N]> for SharedBytes {
    fn eq(&self, other: &[u8; N]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<u8>> for SharedBytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Hash for SharedBytes {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for SharedBytes {
    /// As Python's `repr` of the bytes, cut after 64 of them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_repr(f, self, self.len())
    }
}

/// How many bytes `Debug` shows.
const REPR_SHOWN: usize = 64;

/// `b'...'` escaped as a Python bytes literal reads it: the first
/// [`REPR_SHOWN`] bytes of `head`, and the length `len` of the whole when
/// there is more.
fn write_repr(f: &mut fmt::Formatter<'_>, head: &[u8], len: usize) -> fmt::Result {
    let shown = head.get(..REPR_SHOWN).unwrap_or(head);
    write!(f, "b'{}'", shown.escape_ascii())?;
    if len > REPR_SHOWN {
        write!(f, "... ({len} bytes)")?;
    }
    Ok(())
}

/// The contents of one `bytes` object as one or more [`SharedBytes`], in
/// order. What the decoder makes is always one chunk; an encoder writes the
/// chunks back to back, large ones without copying them (see
/// [`EncodedPickle`](super::EncodedPickle)).
///
/// Equality and `Debug` see the concatenated bytes.
///
/// # Examples
///
/// ```
/// use tensorshare_compat::pickle::{ByteChunks, SharedBytes};
///
/// let joined = ByteChunks::from_chunks(vec![b"head".into(), b"er".into()]);
/// assert_eq!(joined.len(), 6);
/// assert_eq!(joined, ByteChunks::from(b"header".to_vec()));
/// assert_eq!(&*joined.contiguous(), b"header");
/// ```
#[derive(Clone)]
pub struct ByteChunks {
    chunks: Chunks,
}

/// One chunk, what the decoder always makes, is held without a vector of
/// its own.
#[derive(Clone)]
enum Chunks {
    One(SharedBytes),
    Many(Vec<SharedBytes>),
}

impl Default for ByteChunks {
    fn default() -> Self {
        Self::from_chunks(Vec::new())
    }
}

impl ByteChunks {
    /// The concatenation of `chunks`, uncopied.
    pub fn from_chunks(chunks: Vec<SharedBytes>) -> Self {
        Self {
            chunks: Chunks::Many(chunks),
        }
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[SharedBytes] {
        match &self.chunks {
            Chunks::One(chunk) => std::slice::from_ref(chunk),
            Chunks::Many(chunks) => chunks,
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> usize {
        self.chunks().iter().map(|chunk| chunk.len()).sum()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.chunks().iter().all(|chunk| chunk.is_empty())
    }

    /// The bytes in one slice: borrowed when they are one chunk (always, for
    /// decoded pickles), else joined.
    pub fn contiguous(&self) -> Cow<'_, [u8]> {
        match self.chunks() {
            [] => Cow::Borrowed(&[]),
            [chunk] => Cow::Borrowed(chunk.as_slice()),
            chunks => Cow::Owned(join(chunks)),
        }
    }

    /// The bytes as one [`SharedBytes`]: the chunk itself when there is one,
    /// else joined.
    pub fn into_shared(self) -> SharedBytes {
        match self.chunks {
            Chunks::One(chunk) => chunk,
            Chunks::Many(mut chunks) if chunks.len() == 1 => chunks.swap_remove(0),
            Chunks::Many(chunks) if chunks.is_empty() => SharedBytes::default(),
            Chunks::Many(chunks) => SharedBytes::from(join(&chunks)),
        }
    }

    /// The bytes, copied into one vector.
    pub fn to_vec(&self) -> Vec<u8> {
        self.contiguous().into_owned()
    }
}

fn join(chunks: &[SharedBytes]) -> Vec<u8> {
    let mut joined = Vec::with_capacity(chunks.iter().map(|chunk| chunk.len()).sum());
    for chunk in chunks {
        joined.extend_from_slice(chunk);
    }
    joined
}

impl From<SharedBytes> for ByteChunks {
    fn from(chunk: SharedBytes) -> Self {
        Self {
            chunks: Chunks::One(chunk),
        }
    }
}

impl From<Vec<u8>> for ByteChunks {
    /// Takes the vector, uncopied.
    fn from(vec: Vec<u8>) -> Self {
        Self::from(SharedBytes::from(vec))
    }
}

impl From<&[u8]> for ByteChunks {
    /// Copies the bytes.
    fn from(bytes: &[u8]) -> Self {
        Self::from(SharedBytes::from(bytes))
    }
}

impl<const N: usize> From<&[u8; N]> for ByteChunks {
    /// Copies the bytes.
    fn from(bytes: &[u8; N]) -> Self {
        Self::from(SharedBytes::from(bytes))
    }
}

impl PartialEq for ByteChunks {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .chunks()
                .iter()
                .flat_map(|chunk| chunk.iter())
                .eq(other.chunks().iter().flat_map(|chunk| chunk.iter()))
    }
}

impl Eq for ByteChunks {}

impl fmt::Debug for ByteChunks {
    /// As Python's `repr` of the bytes, cut after 64 of them; only those
    /// are gathered from the chunks.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let head: Vec<u8> = self
            .chunks()
            .iter()
            .flat_map(|chunk| chunk.iter().copied())
            .take(REPR_SHOWN)
            .collect();
        write_repr(f, &head, self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_and_stay_in_bounds() {
        let whole = SharedBytes::from(b"0123456789".to_vec());
        let middle = whole.slice(2..8).unwrap();
        assert_eq!(&*middle, b"234567");
        assert_eq!(&*middle.slice(1..3).unwrap(), b"34");
        assert!(middle.slice(5..7).is_none());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = middle.slice(3..2);
        assert!(backwards.is_none());
        assert!(middle.slice(6..6).unwrap().is_empty());
    }

    #[test]
    fn a_whole_unshared_vector_comes_back_uncopied() {
        let vec = b"abc".to_vec();
        let pointer = vec.as_ptr();
        let back = SharedBytes::from(vec).try_into_vec().unwrap();
        assert_eq!(back.as_ptr(), pointer);

        let whole = SharedBytes::from(b"abc".to_vec());
        let held = whole.clone();
        let whole = whole.try_into_vec().unwrap_err();
        drop(held);
        assert_eq!(whole.try_into_vec().expect("held once more"), b"abc");

        let part = SharedBytes::from(b"abc".to_vec()).slice(0..2).unwrap();
        assert_eq!(part.clone().try_into_vec().unwrap_err(), part);
        assert_eq!(part.into_vec(), b"ab");
    }

    #[test]
    fn any_owner_and_a_prefix_of_a_vector() {
        let owned = SharedBytes::from_owner(String::from("text"));
        assert_eq!(&*owned, b"text");
        assert!(owned.try_into_vec().is_err());
        let prefix = SharedBytes::from_shared_vec(Arc::new(b"message+spare".to_vec()), 7);
        assert_eq!(&*prefix, b"message");
        let capped = SharedBytes::from_shared_vec(Arc::new(b"ab".to_vec()), 9);
        assert_eq!(&*capped, b"ab");
    }

    #[test]
    fn chunks_compare_by_contents() {
        let split =
            ByteChunks::from_chunks(vec![b"ab".into(), SharedBytes::default(), b"c".into()]);
        assert_eq!(split, ByteChunks::from(b"abc"));
        assert_ne!(split, ByteChunks::from(b"abd"));
        assert_ne!(split, ByteChunks::from(b"ab"));
        assert_eq!(split.len(), 3);
        assert!(!split.is_empty());
        assert!(ByteChunks::from_chunks(vec![SharedBytes::default()]).is_empty());
        assert_eq!(split.clone().into_shared(), SharedBytes::from(b"abc"));
        assert_eq!(format!("{split:?}"), "b'abc'");
        let long = ByteChunks::from_chunks(vec![vec![b'x'; 60].into(), vec![b'y'; 40].into()]);
        let shown = format!("{long:?}");
        assert!(
            shown.starts_with(&format!("b'{}yyyy'", "x".repeat(60))),
            "{shown}"
        );
        assert!(shown.ends_with("'... (100 bytes)"), "{shown}");
    }

    #[test]
    fn debug_is_python_repr_cut_short() {
        let bytes = SharedBytes::from(b"a'\\\n\x00\xff".to_vec());
        assert_eq!(format!("{bytes:?}"), r"b'a\'\\\n\x00\xff'");
        let long = SharedBytes::from(vec![b'x'; 100]);
        assert!(format!("{long:?}").ends_with("'... (100 bytes)"));
    }
}
