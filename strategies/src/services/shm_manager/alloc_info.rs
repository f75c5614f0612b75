//! libshm's `AllocInfo`: the one message a manager client sends.

use nix::unistd::getpid;

use crate::platform::segment_name::{InvalidSegmentName, SegmentName};

/// The size of libshm's `struct AllocInfo { pid_t pid; char free; char
/// filename[60]; }` on Linux: 4 + 1 + 60 bytes, padded to the 4-byte
/// alignment of `pid_t`.
pub const ALLOC_INFO_SIZE: usize = 68;

/// Where `free` sits.
pub(super) const FREE_OFFSET: usize = 4;
/// Where `filename` starts.
pub(super) const NAME_OFFSET: usize = 5;
/// The size of `filename`, terminating NUL included.
const NAME_FIELD_LEN: usize = 60;

/// One message from a manager client: "process `pid` uses segment `name`"
/// (`free == false`, answered with `OK`), or "process `pid` let it go"
/// (`free == true`, not answered).
///
/// The wire form is the C struct's bytes: `pid` in native byte order at 0,
/// `free` at 4 (any non-zero byte means free, as libshm tests it), the name
/// NUL-terminated at 5..65, and 3 bytes of padding.
///
/// # Examples
///
/// ```
/// use tensorshare_strategies::file_system::SegmentName;
/// use tensorshare_strategies::services::shm_manager::{ALLOC_INFO_SIZE, AllocInfo};
///
/// let name = SegmentName::parse(b"/torch_21409_1626284410_1")?;
/// let bytes: [u8; ALLOC_INFO_SIZE] = AllocInfo { pid: 21409, free: false, name }.encode();
/// assert_eq!(&bytes[0..4], &21409_i32.to_ne_bytes());
/// assert_eq!(bytes[4], 0);
/// assert_eq!(&bytes[5..31], b"/torch_21409_1626284410_1\0");
///
/// let decoded = AllocInfo::decode(&bytes)?;
/// assert_eq!(decoded.name.as_str(), "/torch_21409_1626284410_1");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AllocInfo {
    /// The sender's pid, as it says; only ever logged.
    pub pid: i32,
    /// `true` for a deallocation, `false` for a registration.
    pub free: bool,
    /// The segment.
    pub name: SegmentName,
}

/// Bytes that are not an `AllocInfo` naming a torch segment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidAllocInfo {
    /// No NUL in the 60 bytes of the name field.
    #[error(
        "bytes 5..65 of an AllocInfo hold no NUL-terminated name: the peer does not speak \
         libshm's protocol"
    )]
    Unterminated,
    /// The name does not parse as a [`SegmentName`].
    #[error("the name at byte 5 of an AllocInfo is refused: {0}")]
    Name(InvalidSegmentName),
}

impl InvalidAllocInfo {
    /// The offset in the message of the field at fault.
    pub fn offset(&self) -> usize {
        NAME_OFFSET
    }
}

/// The struct's bytes for `pid`, the `free` byte and the name field's
/// leading bytes `name` (at most 59 of them are kept, so that a NUL ends
/// the field); the rest is zero.
pub(super) fn encode_fields(pid: i32, free: u8, name: &[u8]) -> [u8; ALLOC_INFO_SIZE] {
    let mut bytes = [0u8; ALLOC_INFO_SIZE];
    bytes[..FREE_OFFSET].copy_from_slice(&pid.to_ne_bytes());
    bytes[FREE_OFFSET] = free;
    let field = &mut bytes[NAME_OFFSET..NAME_OFFSET + NAME_FIELD_LEN];
    let len = name.len().min(NAME_FIELD_LEN - 1);
    field[..len].copy_from_slice(&name[..len]);
    bytes
}

impl AllocInfo {
    /// A registration of `name` by this process.
    pub fn register(name: SegmentName) -> Self {
        AllocInfo {
            pid: getpid().as_raw(),
            free: false,
            name,
        }
    }

    /// A deallocation of `name` by this process.
    pub fn free(name: SegmentName) -> Self {
        AllocInfo {
            pid: getpid().as_raw(),
            free: true,
            name,
        }
    }

    /// The message as libshm's struct lays it out; padding and the bytes
    /// after the name's NUL are zero, as libshm's `AllocInfo info = {}` leaves
    /// them.
    pub fn encode(&self) -> [u8; ALLOC_INFO_SIZE] {
        // A SegmentName holds at most MAX_SEGMENT_NAME_LEN (59) bytes, so
        // the name and its NUL fit the 60-byte field.
        encode_fields(self.pid, u8::from(self.free), self.name.as_str().as_bytes())
    }

    /// Reads a message, trusting none of its bytes: the name must end with a
    /// NUL inside its 60-byte field and parse as a [`SegmentName`]. The pid
    /// is taken as sent, the padding and the bytes after the NUL are ignored.
    ///
    /// # Errors
    ///
    /// [`InvalidAllocInfo::Unterminated`] without a NUL,
    /// [`InvalidAllocInfo::Name`] for a name that is not torch's.
    pub fn decode(bytes: &[u8; ALLOC_INFO_SIZE]) -> Result<Self, InvalidAllocInfo> {
        let mut pid = [0u8; FREE_OFFSET];
        pid.copy_from_slice(&bytes[..FREE_OFFSET]);
        let field = &bytes[NAME_OFFSET..NAME_OFFSET + NAME_FIELD_LEN];
        let len = field
            .iter()
            .position(|b| *b == 0)
            .ok_or(InvalidAllocInfo::Unterminated)?;
        let name = SegmentName::parse(&field[..len]).map_err(InvalidAllocInfo::Name)?;
        Ok(AllocInfo {
            pid: i32::from_ne_bytes(pid),
            free: bytes[FREE_OFFSET] != 0,
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn name(text: &str) -> SegmentName {
        SegmentName::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn encode_lays_out_libshms_struct() {
        let info = AllocInfo {
            pid: 0x0102_0304,
            free: true,
            name: name("/torch_7_8_9"),
        };
        let bytes = info.encode();
        assert_eq!(&bytes[..4], &0x0102_0304_i32.to_ne_bytes());
        assert_eq!(bytes[4], 1);
        assert_eq!(&bytes[5..18], b"/torch_7_8_9\0");
        assert!(bytes[18..].iter().all(|b| *b == 0));
        assert_eq!(AllocInfo::decode(&bytes), Ok(info));
    }

    #[test]
    fn the_longest_name_keeps_its_nul() {
        let long = format!("/torch_1_{}", "2".repeat(50));
        assert_eq!(long.len(), 59);
        let info = AllocInfo::register(name(&long));
        let bytes = info.encode();
        assert_eq!(&bytes[5..64], long.as_bytes());
        assert_eq!(bytes[64], 0);
        assert_eq!(AllocInfo::decode(&bytes), Ok(info));
    }

    #[test]
    fn any_nonzero_free_byte_means_free_as_in_libshm() {
        let mut bytes = AllocInfo::register(name("/torch_1_2_3")).encode();
        bytes[4] = 0x80;
        assert!(AllocInfo::decode(&bytes).unwrap().free);
    }

    #[test]
    fn bytes_after_the_nul_and_padding_are_ignored() {
        let mut bytes = AllocInfo::register(name("/torch_1_2_3")).encode();
        for b in &mut bytes[17..] {
            *b = 0xff;
        }
        bytes[17] = 0;
        assert_eq!(
            AllocInfo::decode(&bytes).map(|i| i.name),
            Ok(name("/torch_1_2_3"))
        );
    }

    #[test]
    fn a_name_without_nul_is_refused() {
        let mut bytes = [b'a'; ALLOC_INFO_SIZE];
        bytes[5] = b'/';
        assert_eq!(
            AllocInfo::decode(&bytes),
            Err(InvalidAllocInfo::Unterminated)
        );
        // A NUL in the padding is not inside the name field.
        bytes[65] = 0;
        assert_eq!(
            AllocInfo::decode(&bytes),
            Err(InvalidAllocInfo::Unterminated)
        );
    }

    #[test]
    fn names_that_are_paths_or_foreign_are_refused() {
        for text in [
            &b"/dev/shm/torch_1_2_3"[..],
            b"/torch_1_2/../../etc",
            b"",
            b"/other_1_2_3",
        ] {
            let mut bytes = [0u8; ALLOC_INFO_SIZE];
            bytes[5..5 + text.len()].copy_from_slice(text);
            let err = AllocInfo::decode(&bytes).unwrap_err();
            assert!(matches!(err, InvalidAllocInfo::Name(_)), "{err}");
            assert_eq!(err.offset(), 5);
        }
    }

    proptest! {
        #[test]
        fn decode_never_panics_and_what_decodes_reencodes(
            bytes in proptest::collection::vec(any::<u8>(), ALLOC_INFO_SIZE)
        ) {
            let mut array = [0u8; ALLOC_INFO_SIZE];
            array.copy_from_slice(&bytes);
            if let Ok(info) = AllocInfo::decode(&array) {
                let again = info.encode();
                prop_assert_eq!(&again[..4], &array[..4]);
                prop_assert_eq!(AllocInfo::decode(&again), Ok(info));
            }
        }

        #[test]
        fn every_fresh_name_round_trips(pid in any::<i32>(), free in any::<bool>()) {
            let info = AllocInfo { pid, free, name: SegmentName::fresh() };
            prop_assert_eq!(AllocInfo::decode(&info.encode()), Ok(info));
        }
    }
}
