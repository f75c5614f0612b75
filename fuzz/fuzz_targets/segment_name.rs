//! Arbitrary bytes as the two names a `file_system` pickle carries from its
//! peer: the segment name (`/torch_<pid>_<random>_<counter>`) and the
//! manager handle (a socket path). Parsing must never panic, and what
//! parses must be exactly the bytes given, safe to hand to `shm_open` and
//! `connect`, and parse again to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorshare_strategies::file_system::{MAX_SEGMENT_NAME_LEN, SegmentName};
use tensorshare_strategies::services::shm_manager::{AllocInfo, MAX_HANDLE_LEN, ManagerHandle};

fuzz_target!(|data: &[u8]| {
    match SegmentName::parse(data) {
        Ok(name) => {
            assert_eq!(name.as_str().as_bytes(), data);
            assert!(data.len() <= MAX_SEGMENT_NAME_LEN);
            assert!(name.as_str().starts_with("/torch_"));
            let file_name = name.file_name();
            assert_eq!(Some(file_name), name.as_str().strip_prefix('/'));
            assert!(
                file_name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                "{name:?} names more than one path component"
            );
            let pid = name.creator_pid();
            assert!(pid > 0 && i32::try_from(pid).is_ok(), "{name:?}");
            assert_eq!(name.to_string(), name.as_str());
            assert_eq!(
                SegmentName::parse(name.as_str().as_bytes()).as_ref(),
                Ok(&name)
            );
            // Every accepted name fits libshm's message and comes back whole.
            let info = AllocInfo {
                pid: 1,
                free: false,
                name: name.clone(),
            };
            assert_eq!(AllocInfo::decode(&info.encode()).map(|i| i.name), Ok(name));
        }
        Err(error) => {
            assert!(error.shown.chars().count() <= 80);
            let _ = error.to_string();
        }
    }

    match ManagerHandle::from_bytes(data) {
        Ok(handle) => {
            assert_eq!(handle.as_bytes(), data);
            assert!(!data.is_empty() && data.len() <= MAX_HANDLE_LEN);
            assert_eq!(data.first(), Some(&b'/'));
            assert!(!data.contains(&0) && !data.contains(&b'\n'));
            let again = ManagerHandle::from_path(handle.path()).ok();
            assert_eq!(again.as_ref(), Some(&handle));
            let _ = handle.to_string();
        }
        Err(error) => {
            let _ = error.to_string();
        }
    }
});
