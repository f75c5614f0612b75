//! The checkpoints of `--workload files`, what is done to each, and a
//! row of the table: what the run measures and what its report prints.

use std::path::{Path, PathBuf};

use crate::measure::Measurement;

/// Tensors in the large checkpoints and in the cuda:0 one.
const TENSORS: usize = 200;
/// Elements of each tensor of the small-tensors checkpoint.
const SMALL_ELEMENTS: usize = 16;
/// The cuda:0 checkpoint is this fraction of `--file-size`: its location
/// is what it adds, not its bytes.
const GPU_FRACTION: usize = 8;
const FLOAT32_BYTES: usize = 4;

/// What `--workload files` runs.
pub struct Options<'a> {
    /// A Python with torch and safetensors.
    pub python: &'a Path,
    /// Where the private directory of checkpoints goes; `$TMPDIR` if none.
    pub dir: Option<&'a Path>,
    /// Bytes of tensor data in each of the two large checkpoints.
    pub file_size: usize,
    /// Tensors in the small-tensors checkpoint.
    pub small_tensors: usize,
    pub rounds: usize,
}

/// One checkpoint: how torch writes it and what the table calls it.
pub struct Case {
    /// The table's name for it.
    pub name: &'static str,
    /// What the header says it holds.
    pub description: String,
    pub tensors: usize,
    pub elements: usize,
    pub legacy: bool,
    /// The device its storages name, when not the CPU.
    pub location: Option<&'static str>,
    pub path: PathBuf,
}

impl Case {
    /// The bytes of its tensors (the file holds a little more).
    pub fn tensor_bytes(&self) -> u64 {
        (self.tensors * self.elements * FLOAT32_BYTES) as u64
    }

    /// torch maps zip files only.
    pub fn torch_can_mmap(&self) -> bool {
        !self.legacy
    }
}

/// What is done to a checkpoint, by each side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// `tensorshare inspect --json` against `torch.load(mmap=True)`.
    Inspect,
    /// `tensorshare convert` against `safetensors.torch.save_file`.
    ToSafetensors,
    /// `tensorshare convert` against `torch.save`.
    ToPt,
}

impl Operation {
    pub const ALL: [Operation; 3] = [
        Operation::Inspect,
        Operation::ToSafetensors,
        Operation::ToPt,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Operation::Inspect => "inspect",
            Operation::ToSafetensors => "to .safetensors",
            Operation::ToPt => "to .pt",
        }
    }

    /// The file a conversion writes, in `scratch`.
    pub fn output(self, scratch: &Path) -> Option<PathBuf> {
        match self {
            Operation::Inspect => None,
            Operation::ToSafetensors => Some(scratch.join("out.safetensors")),
            Operation::ToPt => Some(scratch.join("out.pt")),
        }
    }
}

/// One row: the medians of each side's rounds.
pub struct Row {
    pub case: &'static str,
    pub operation: Operation,
    pub ours: Measurement,
    pub torch: Measurement,
}

/// The checkpoints, in table order, to be written in `dir`.
pub fn cases(options: &Options, dir: &Path) -> Vec<Case> {
    // At least the bytes asked for, and never an empty tensor.
    let elements = |nbytes: usize| (nbytes / FLOAT32_BYTES).div_ceil(TENSORS).max(1);
    let large = elements(options.file_size);
    vec![
        Case {
            name: "zip",
            description: format!("a zip torch.save of {TENSORS} float32 tensors"),
            tensors: TENSORS,
            elements: large,
            legacy: false,
            location: None,
            path: dir.join("large.zip.pt"),
        },
        Case {
            name: "legacy",
            description: "the same state dict as a legacy stream".into(),
            tensors: TENSORS,
            elements: large,
            legacy: true,
            location: None,
            path: dir.join("large.legacy.pt"),
        },
        Case {
            name: "small",
            description: format!(
                "a zip of {} float32 tensors of {SMALL_ELEMENTS} elements",
                options.small_tensors
            ),
            tensors: options.small_tensors,
            elements: SMALL_ELEMENTS,
            legacy: false,
            location: None,
            path: dir.join("small.zip.pt"),
        },
        Case {
            name: "cuda:0",
            description: format!(
                "a zip of {TENSORS} float32 tensors saved as on cuda:0 \
                 (1/{GPU_FRACTION} of --file-size)"
            ),
            tensors: TENSORS,
            elements: elements(options.file_size / GPU_FRACTION),
            legacy: false,
            location: Some("cuda:0"),
            path: dir.join("cuda0.zip.pt"),
        },
    ]
}
