//! Arbitrary bytes as a `torch.save` file (zip or legacy) or pickle, through
//! `inspect`: readers, rebuilders and the report must never panic. Reading
//! from a shared buffer (records as slices of it) must give what reading
//! copies gives.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tensorshare::Registry;
use tensorshare_cli::inspect_report;
use tensorshare_fuzz::check_torch_save_readers_agree;

/// Built once: building it for every input would be most of each run.
static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::default);

fuzz_target!(|data: &[u8]| {
    if let Ok(report) = tensorshare::inspect::inspect(data, &REGISTRY) {
        let _ = inspect_report::to_json(&report);
        let _ = inspect_report::to_text(&report);
    }
    check_torch_save_readers_agree(data);
});
