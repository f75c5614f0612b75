//! Arbitrary bytes as the request a resource-sharer client sends after the
//! handshake: CPython's `(key, pid)` or tensorshare's release and unmapped
//! notices. Parsing must never panic; the two entry points must agree; and
//! every request that parses must encode to a pickle that parses back to
//! it, within the size the sharer reads.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorshare_compat::resource_sharer::{
    DupFdRequest, MAX_RELEASE_KEYS, MAX_REQUEST_LEN, SharerRequest,
};

fuzz_target!(|data: &[u8]| {
    let request = SharerRequest::from_pickle(data);
    let fetch = DupFdRequest::from_pickle(data);
    let encoded = match &request {
        Ok(SharerRequest::Fetch(fetch_request)) => {
            assert_eq!(fetch.as_ref().ok(), Some(fetch_request));
            fetch_request.to_pickle()
        }
        Ok(SharerRequest::Release(release)) => {
            assert!(fetch.is_err());
            assert!(release.keys.len() <= MAX_RELEASE_KEYS);
            release.to_pickle()
        }
        Ok(SharerRequest::Unmapped(unmapped)) => {
            assert!(fetch.is_err());
            assert!(unmapped.keys.len() <= MAX_RELEASE_KEYS);
            unmapped.to_pickle()
        }
        Err(error) => {
            assert!(fetch.is_err());
            let _ = error.to_string();
            return;
        }
    };
    let encoded = encoded.expect("a parsed request encodes");
    assert!(encoded.len() <= MAX_REQUEST_LEN);
    assert_eq!(SharerRequest::from_pickle(&encoded).ok(), request.ok());
});
