//! Arbitrary bytes as a `.safetensors` file: the header checks, the format
//! crate's validation and the tensors built from it must never panic, every
//! tensor read must lie in its own storage, and what is read must write
//! back to a file that reads as the same names, dtypes, shapes, bytes and
//! metadata. The report `inspect` prints of it must not panic either.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorshare::inspect::{Format, Report};
use tensorshare::safetensors::SafetensorsFile;
use tensorshare::{Tensor, Value};
use tensorshare_cli::inspect_report;

/// Each tensor under its name: what a round trip must keep.
fn described(value: &Value) -> Vec<(String, String, Vec<usize>, Vec<u8>)> {
    let Value::Dict(items) = value else {
        panic!(
            "a safetensors file reads as a dict, not {}",
            value.type_name()
        );
    };
    items
        .iter()
        .map(|(name, tensor)| {
            let name = name.as_str().expect("str names").to_owned();
            let tensor: &Tensor = tensor.as_tensor().expect("tensor values");
            let bytes = tensor.storage().bytes().expect("bytes in this process");
            let len = tensor.numel() * tensor.dtype().element_size();
            assert_eq!(len, bytes.len(), "{name}: a storage of its own, exactly");
            (
                name,
                tensor.dtype().name().to_owned(),
                tensor.sizes().to_vec(),
                bytes.to_vec(),
            )
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = SafetensorsFile::from_bytes(data) else {
        return;
    };
    let read = described(&file.tensors);
    let written = file.to_bytes().expect("what was read writes back");
    let again = SafetensorsFile::from_bytes(&written).expect("what was written reads back");
    let mut reread = described(&again.tensors);
    let mut sorted = read.clone();
    // Written in the format's order (by dtype, then name), not the input's.
    sorted.sort();
    reread.sort();
    assert_eq!(sorted, reread);
    assert_eq!(file.metadata, again.metadata);

    let report = Report {
        format: Format::Safetensors,
        object: file.tensors,
    };
    let _ = inspect_report::to_json(&report);
    let _ = inspect_report::to_text(&report);
});
