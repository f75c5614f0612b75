//! Arbitrary bytes as a `torch.save` file (zip or legacy) or pickle, through
//! `inspect`: readers, rebuilders and the report must never panic. Reading
//! from a shared buffer (records as slices of it) must give what reading
//! copies gives.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use tensorshare::Registry;
use tensorshare_compat::pickle::SharedBytes;
use tensorshare_compat::torch_save::{self, ReadOptions};

/// Built once: building it for every input would be most of each run.
static REGISTRY: LazyLock<Registry> = LazyLock::new(Registry::default);

fuzz_target!(|data: &[u8]| {
    if let Ok(report) = tensorshare::inspect::inspect(data, &REGISTRY) {
        let _ = report.to_json();
        let _ = report.to_text();
    }
    let allow_all = |_: &str, _: &str| true;
    let copied = torch_save::read(data, &allow_all, &ReadOptions::default());
    let shared = torch_save::read_shared(
        &SharedBytes::from(data),
        &allow_all,
        &ReadOptions::default(),
    );
    match (copied, shared) {
        (Ok(copied), Ok(shared)) => assert_eq!(copied, shared),
        (Err(copied), Err(shared)) => assert_eq!(copied.to_string(), shared.to_string()),
        (copied, shared) => panic!("read gave {copied:?}, read_shared gave {shared:?}"),
    }
});
