//! Arbitrary bytes as the 68-byte `AllocInfo` a shared-memory manager
//! client sends. Decoding must never panic; what decodes must name a valid
//! segment, and encoding it must give back the bytes libshm's struct holds
//! (pid, free flag as 0/1, the name and its NUL) and decode to the same
//! message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorshare_strategies::file_system::SegmentName;
use tensorshare_strategies::services::shm_manager::{ALLOC_INFO_SIZE, AllocInfo};

/// Where libshm's struct keeps the flag and the name.
const FREE_OFFSET: usize = 4;
const NAME_OFFSET: usize = 5;

fuzz_target!(|data: &[u8]| {
    // A short input is a message whose tail is zero, as a zeroed buffer
    // would hold it; a longer one is cut, as the server reads 68 bytes.
    let mut message = [0u8; ALLOC_INFO_SIZE];
    let len = data.len().min(ALLOC_INFO_SIZE);
    message[..len].copy_from_slice(&data[..len]);

    let info = match AllocInfo::decode(&message) {
        Ok(info) => info,
        Err(error) => {
            assert_eq!(error.offset(), NAME_OFFSET);
            let _ = error.to_string();
            return;
        }
    };
    let name = info.name.as_str().as_bytes();
    assert_eq!(info.pid.to_ne_bytes(), message[..FREE_OFFSET]);
    assert_eq!(info.free, message[FREE_OFFSET] != 0);
    assert_eq!(&message[NAME_OFFSET..NAME_OFFSET + name.len()], name);
    assert_eq!(message[NAME_OFFSET + name.len()], 0);
    assert_eq!(SegmentName::parse(name).as_ref(), Ok(&info.name));

    let encoded = info.encode();
    assert_eq!(encoded[..FREE_OFFSET], message[..FREE_OFFSET]);
    assert_eq!(encoded[FREE_OFFSET], u8::from(info.free));
    assert_eq!(&encoded[NAME_OFFSET..NAME_OFFSET + name.len()], name);
    // libshm zeroes the struct: everything after the name is NUL.
    assert!(encoded[NAME_OFFSET + name.len()..].iter().all(|&b| b == 0));
    assert_eq!(AllocInfo::decode(&encoded).as_ref(), Ok(&info));
});
