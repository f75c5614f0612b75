//! Inputs on which a fuzz target (fuzz/) found a panic, each checked
//! against what it must give. The raw fuzz inputs are in
//! fuzz/regressions/<target>/, replayed by every `scripts/fuzz` run.

mod support;

use std::path::Path;
use std::process::Command;

use tensorshare::{DType, Registry};

/// A legacy torch.save file, built by the `torch_pickle_structured` target,
/// holding a uint32 tensor of 2^62 elements expanded (stride 0) over a
/// 101-element storage: a valid view, whose contiguous copy (2^64 bytes)
/// is not. Counting the copy's bytes overflowed.
#[test]
fn an_expanded_view_larger_than_memory_loads_but_is_not_copied() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions/expanded_view_overflow.pt");
    let file = include_bytes!("fuzz_regressions/expanded_view_overflow.pt");
    let report = tensorshare::inspect::inspect(file, &Registry::default()).unwrap();
    let tensors = report.object.tensors();
    let [tensor] = tensors.as_slice() else {
        panic!("expected one tensor, got {}", tensors.len());
    };
    assert_eq!(tensor.dtype(), DType::UInt32);
    assert_eq!(tensor.sizes(), [1 << 62]);
    assert_eq!(tensor.strides(), [0]);
    assert_eq!(tensor.storage_offset(), 6);
    assert_eq!(tensor.to_contiguous_bytes(), None);
    // The report (`tensorshare inspect`, which renders it) shows the
    // first elements only.
    let inspect = |flags: &[&str]| {
        let output = Command::new(support::tensorshare_exe())
            .arg("inspect")
            .args(flags)
            .arg(&path)
            .output()
            .expect("run tensorshare inspect");
        support::expect_success(&output, &format!("inspect {flags:?}"))
    };
    assert!(inspect(&[]).contains("4611686018427387904"));
    let _ = inspect(&["--json"]);
}

/// A `ForkingPickler` pickle, built by the `torch_pickle_structured`
/// target, of a tensor of sizes (2^32, 2^32 - 1, 15, 0) over an empty
/// storage: no elements, so a valid view, but the product of its other
/// sizes overflows 64 bits, and counting its elements did.
#[test]
fn an_empty_view_with_huge_sizes_has_no_elements() {
    let pickle = include_bytes!("fuzz_regressions/empty_view_huge_sizes.pkl");
    let value = Registry::default().loads(pickle).unwrap();
    let tensors = value.tensors();
    let [tensor] = tensors.as_slice() else {
        panic!("expected one tensor, got {}", tensors.len());
    };
    assert_eq!(tensor.sizes(), [1 << 32, (1 << 32) - 1, 15, 0]);
    assert_eq!(tensor.numel(), 0);
    assert_eq!(tensor.to_contiguous_bytes(), Some(Vec::new()));
}

/// A `file_system` message with a NaN among its values, on which the
/// `pickle_decode` target's own check failed: decoding from a shared buffer
/// gave the same arena as decoding copies, but a NaN is unequal to itself.
/// Both decodes must still agree node for node.
#[test]
fn a_nan_decodes_the_same_from_a_shared_buffer() {
    use tensorshare_compat::pickle::{Limits, SharedBytes, decode_all, decode_all_shared};
    let pickle = include_bytes!("../fuzz/regressions/pickle_decode/nan_in_both_decodes.pkl");
    let allow_all = |_: &str, _: &str| true;
    let copied = decode_all(pickle, &allow_all, &Limits::default()).unwrap();
    let shared = decode_all_shared(
        &SharedBytes::from(&pickle[..]),
        &allow_all,
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(format!("{copied:?}"), format!("{shared:?}"));
    assert!(format!("{copied:?}").contains("Float(NaN)"));
}
