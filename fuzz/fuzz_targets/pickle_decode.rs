//! Arbitrary bytes through the pickle VM (every global allowed, so the VM's
//! own paths are reached) and through the full decode + rebuild with torch's
//! allowlist. Neither may panic, hang or allocate past the limits, and
//! decoding from a shared buffer (payloads as slices of it) must give what
//! decoding copies gives.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tensorshare::Registry;
use tensorshare_compat::pickle::{Limits, SharedBytes, decode_all, decode_all_shared};
use tensorshare_fuzz::copy_small;

/// Built once: building it for every input would be most of each run.
static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::default);

fuzz_target!(|data: &[u8]| {
    let allow_all = |_: &str, _: &str| true;
    // `decode_all` runs `decode` and then checks for trailing bytes.
    let copied = decode_all(data, &allow_all, &Limits::default());
    let shared = decode_all_shared(&SharedBytes::from(data), &allow_all, &Limits::default());
    // A NaN is not equal to itself: arenas that differ only there compare
    // equal in their Debug form, which prints every float the same way.
    if copied != shared {
        assert_eq!(format!("{copied:?}"), format!("{shared:?}"));
    }
    if let Ok(value) = REGISTRY.loads(data) {
        // Walk what was rebuilt, as a consumer would.
        for tensor in value.tensors() {
            let _ = copy_small(tensor);
        }
    }
});
