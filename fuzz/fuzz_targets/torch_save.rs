//! Arbitrary bytes as a `torch.save` file (zip or legacy) or pickle, through
//! `inspect`: readers, rebuilders and the report must never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorshare::Registry;

fuzz_target!(|data: &[u8]| {
    if let Ok(report) = tensorshare::inspect::inspect(data, &Registry::default()) {
        let _ = report.to_json();
        let _ = report.to_text();
    }
});
