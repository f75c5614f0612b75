//! The batches workload of the bench, in Rust: a producer of
//! DataLoader-shaped batches and the training loop that consumes them,
//! speaking the protocol of `compat/python/bench_batches.py` (whose
//! docstring has it in full) so that either end can be torch:
//!
//! ```text
//! producer -> consumer   {"batch": N, "sample": [C, H, W], "dtype": ..., "batches": B,
//!                         "rounds": R, "window": W}
//! 1 + R times:  consumer -> producer  B; then B batches, each acked on receipt
//! finally       consumer -> producer  0
//! ```
//!
//! Batch `i` of a run stacks samples `(i * N + j) % 2N`, `j` in `0..N`;
//! sample `s` is an image of elements `s % 251` and the label `s`. The
//! producer copies precomputed samples into the batch, as the DataLoader's
//! collate stacks them; the consumer sums every element.

use std::collections::VecDeque;
use std::sync::OnceLock;
use std::time::Instant;

use tensorshare::bytemuck::{self, Pod};
use tensorshare::model::Element;
use tensorshare::{Connection, Dict, SharingContext, Tensor, Value};
use tensorshare_cli::error::CliError;

const SAMPLE_MODULUS: usize = 251;

/// The element type of a batch's images.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageDType {
    UInt8,
    Float32,
}

impl ImageDType {
    pub fn name(self) -> &'static str {
        match self {
            ImageDType::UInt8 => "uint8",
            ImageDType::Float32 => "float32",
        }
    }

    fn element_size(self) -> usize {
        match self {
            ImageDType::UInt8 => 1,
            ImageDType::Float32 => 4,
        }
    }
}

/// What the producer announces.
#[derive(Clone, Copy, Debug)]
pub struct BatchSpec {
    /// Samples per batch.
    pub batch: usize,
    /// The shape of one sample's image.
    pub sample: [usize; 3],
    pub dtype: ImageDType,
    /// Batches per run.
    pub batches: usize,
    pub rounds: usize,
    /// The most batches sent and not yet acked.
    pub window: usize,
}

impl BatchSpec {
    /// The image and label bytes of one batch.
    pub fn nbytes(&self) -> usize {
        self.batch * (self.sample_bytes() + size_of::<i64>())
    }

    fn sample_bytes(&self) -> usize {
        self.sample.iter().product::<usize>() * self.dtype.element_size()
    }

    fn image_sizes(&self) -> [usize; 4] {
        let [c, h, w] = self.sample;
        [self.batch, c, h, w]
    }

    fn sample_ids(&self, index: usize) -> impl Iterator<Item = usize> + use<> {
        let (n, distinct) = (self.batch, 2 * self.batch);
        (0..n).map(move |j| (index * n + j) % distinct)
    }

    fn to_value(self) -> Value {
        Value::from(
            Dict::new()
                .with("batch", self.batch as i64)
                .with("sample", self.sample.map(|s| s as i64).to_vec())
                .with("dtype", self.dtype.name())
                .with("batches", self.batches as i64)
                .with("rounds", self.rounds as i64)
                .with("window", self.window as i64),
        )
    }

    fn from_value(value: &Value) -> Result<Self, String> {
        let count = |name: &str| {
            value
                .get(name)
                .and_then(Value::as_int)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("the batch header lacks a positive {name:?}"))
        };
        let sample: Vec<usize> = value
            .get("sample")
            .and_then(Value::as_list)
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_int().and_then(|s| usize::try_from(s).ok()))
            .collect();
        let sample = <[usize; 3]>::try_from(sample)
            .map_err(|_| "the batch header's sample is not 3 sizes".to_owned())?;
        let dtype = match value.get("dtype").and_then(Value::as_str) {
            Some("uint8") => ImageDType::UInt8,
            Some("float32") => ImageDType::Float32,
            other => return Err(format!("the batch header's dtype is {other:?}")),
        };
        Ok(Self {
            batch: count("batch")?,
            sample,
            dtype,
            batches: count("batches")?,
            rounds: count("rounds")?,
            window: count("window")?,
        })
    }

    /// The sums of batch `index`'s image elements and labels.
    fn expected_sums(&self, index: usize) -> (u64, i64) {
        let per_sample = self.sample.iter().product::<usize>() as u64;
        self.sample_ids(index).fold((0, 0), |(image, label), s| {
            (
                image + (s % SAMPLE_MODULUS) as u64 * per_sample,
                label + s as i64,
            )
        })
    }
}

/// How the producer lays a batch out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Each tensor in a storage of its own (`SharingContext::allocate`).
    Separate,
    /// Both tensors views of one storage (`SharingContext::batch`).
    Arena,
}

/// Serves the consumer's runs until it asks for none.
pub fn produce_batches(
    connection: &mut Connection,
    sharing: &SharingContext,
    spec: BatchSpec,
    layout: Layout,
) -> Result<(), CliError> {
    let samples = make_samples(&spec);
    connection.send(&spec.to_value())?;
    loop {
        let count = connection.recv()?;
        let count = count
            .as_int()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| format!("the consumer asked for {count:?} batches"))?;
        if count == 0 {
            return Ok(());
        }
        let mut kept = VecDeque::with_capacity(spec.window);
        for index in 0..count {
            if kept.len() == spec.window {
                connection.recv()?;
                kept.pop_front();
            }
            let batch = make_batch(sharing, &spec, &samples, index, layout)?;
            connection.send(&batch)?;
            kept.push_back(batch);
        }
        for _ in kept {
            connection.recv()?;
        }
    }
}

/// Each sample's image bytes.
fn make_samples(spec: &BatchSpec) -> Vec<Vec<u8>> {
    let elements = spec.sample.iter().product::<usize>();
    (0..2 * spec.batch)
        .map(|s| {
            let value = s % SAMPLE_MODULUS;
            match spec.dtype {
                ImageDType::UInt8 => vec![value as u8; elements],
                ImageDType::Float32 => bytemuck::cast_slice(&vec![value as f32; elements]).to_vec(),
            }
        })
        .collect()
}

fn make_batch(
    sharing: &SharingContext,
    spec: &BatchSpec,
    samples: &[Vec<u8>],
    index: usize,
    layout: Layout,
) -> Result<Value, CliError> {
    match spec.dtype {
        ImageDType::UInt8 => typed_batch::<u8>(sharing, spec, samples, index, layout),
        ImageDType::Float32 => typed_batch::<f32>(sharing, spec, samples, index, layout),
    }
}

fn typed_batch<T: Element + Pod>(
    sharing: &SharingContext,
    spec: &BatchSpec,
    samples: &[Vec<u8>],
    index: usize,
    layout: Layout,
) -> Result<Value, CliError> {
    let ids: Vec<usize> = spec.sample_ids(index).collect();
    let labels: Vec<i64> = ids.iter().map(|&s| s as i64).collect();
    let sources: Vec<&[u8]> = ids.iter().map(|&s| samples[s].as_slice()).collect();
    let (image, label) = match layout {
        Layout::Arena => {
            let mut batch = sharing.batch();
            let image = batch.tensor::<T>(&spec.image_sizes())?;
            let label = batch.tensor::<i64>(&[spec.batch])?;
            let mut writer = batch.allocate()?;
            stack(writer.bytes_mut(image), &sources);
            writer.as_mut_slice(label)?.copy_from_slice(&labels);
            let batch = writer.freeze();
            (batch.tensor(image).clone(), batch.tensor(label).clone())
        }
        Layout::Separate => {
            let mut writer = sharing.allocate(spec.batch * spec.sample_bytes())?;
            stack(writer.as_bytes_mut(), &sources);
            let image = writer.into_tensor::<T>(&spec.image_sizes())?;
            (image, Tensor::from_slice(sharing, &labels, &[spec.batch])?)
        }
    };
    Ok(Value::from(
        Dict::new().with("image", image).with("label", label),
    ))
}

/// Copies the samples one after another into `out`, on every core for a
/// large batch, as the DataLoader's workers stack batches on every core.
fn stack(out: &mut [u8], samples: &[&[u8]]) {
    const MIN_PER_THREAD: usize = 1 << 20;
    static CORES: OnceLock<usize> = OnceLock::new();
    let sample_bytes = samples.first().map_or(0, |s| s.len());
    let threads = if out.len() < 2 * MIN_PER_THREAD || sample_bytes == 0 {
        1
    } else {
        let cores =
            *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from));
        cores.min(samples.len()).max(1)
    };
    let per_thread = samples.len().div_ceil(threads);
    let copy = |out: &mut [u8], samples: &[&[u8]]| {
        for (target, sample) in out.chunks_mut(sample_bytes).zip(samples) {
            target.copy_from_slice(sample);
        }
    };
    if threads == 1 {
        copy(out, samples);
        return;
    }
    std::thread::scope(|scope| {
        let mut parts = out
            .chunks_mut(per_thread * sample_bytes)
            .zip(samples.chunks(per_thread));
        let first = parts.next();
        for (out, samples) in parts {
            scope.spawn(move || copy(out, samples));
        }
        if let Some((out, samples)) = first {
            copy(out, samples);
        }
    });
}

/// The training loop in Rust: asks for each run, acks each batch on
/// receipt, sums every element and checks the sums. Returns each timed
/// round's seconds.
pub fn consume_batches(connection: &mut Connection) -> Result<Vec<f64>, CliError> {
    let spec = BatchSpec::from_value(&connection.recv()?)?;
    let mut seconds = Vec::with_capacity(spec.rounds);
    for round in 0..=spec.rounds {
        let start = Instant::now();
        connection.send(&Value::from(spec.batches as i64))?;
        for index in 0..spec.batches {
            let batch = connection.recv()?;
            connection.send(&Value::from(index as i64))?;
            check_batch(&spec, &batch, index)?;
        }
        if round > 0 {
            seconds.push(start.elapsed().as_secs_f64());
        }
    }
    connection.send(&Value::from(0_i64))?;
    Ok(seconds)
}

fn check_batch(spec: &BatchSpec, batch: &Value, index: usize) -> Result<(), CliError> {
    let tensor = |key: &str| {
        batch
            .get(key)
            .and_then(Value::as_tensor)
            .ok_or_else(|| format!("batch {index} has no tensor {key:?}"))
    };
    let (image, label) = (tensor("image")?, tensor("label")?);
    let image_sum = match spec.dtype {
        ImageDType::UInt8 => image.as_slice::<u8>()?.iter().map(|&x| u64::from(x)).sum(),
        ImageDType::Float32 => sum_f32(image.as_slice::<f32>()?) as u64,
    };
    let label_sum: i64 = label.as_slice::<i64>()?.iter().sum();
    let expected = spec.expected_sums(index);
    if image.sizes() != spec.image_sizes() || (image_sum, label_sum) != expected {
        return Err(format!(
            "batch {index}: {:?} summing to {:?}, expected {:?} summing to {expected:?}",
            image.sizes(),
            (image_sum, label_sum),
            spec.image_sizes()
        )
        .into());
    }
    Ok(())
}

/// The sum in eight lanes of `f64`, which the compiler vectorizes: exact
/// for the bench's small integer elements.
fn sum_f32(values: &[f32]) -> f64 {
    let mut lanes = [0.0_f64; 8];
    let chunks = values.chunks_exact(8);
    let rest: f64 = chunks.remainder().iter().map(|&x| f64::from(x)).sum();
    for chunk in chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane += f64::from(x);
        }
    }
    lanes.iter().sum::<f64>() + rest
}
