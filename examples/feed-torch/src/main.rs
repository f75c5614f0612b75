//! A Rust producer feeding a stock torch consumer, and reading its answer.
//!
//! Listens on a fresh socket, starts `consumer.py` (stock torch and the
//! standard library, nothing else) with the address and the authkey, sends
//! it one DataLoader-shaped batch written straight into shared memory, and
//! checks the tensors torch sends back.
//!
//!     cargo run --manifest-path examples/feed-torch/Cargo.toml -- PYTHON
//!
//! PYTHON is an interpreter with torch installed (default `python3`).

use std::path::Path;
use std::process::Command;

use tensorshare::connection::AUTHKEY_ENV;
use tensorshare::{Authkey, DType, SharingContext, Tensor, TensorView, Value};

const BATCH: usize = 8;
const IMAGE: [usize; 4] = [BATCH, 3, 64, 64];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let python = std::env::args().nth(1).unwrap_or_else(|| "python3".into());
    let consumer_script = Path::new(env!("CARGO_MANIFEST_DIR")).join("consumer.py");

    // One key for the connection and for the resource sharer that hands
    // torch the batch's fds: torch uses its process authkey for both.
    let sharing = SharingContext::new(Authkey::random()?);
    let listener = sharing.listen_in_private_dir()?;
    let mut consumer = Command::new(python)
        .arg(consumer_script)
        .arg(listener.address().to_string())
        .env(AUTHKEY_ENV, sharing.authkey().to_hex())
        .spawn()?;
    let mut connection = listener.accept()?;

    // Written in place in shared memory: sending copies nothing.
    let image_bytes: usize = IMAGE.iter().product();
    let mut image = sharing.allocate(image_bytes)?;
    for (i, byte) in image.as_bytes_mut().iter_mut().enumerate() {
        *byte = (i % 251) as u8;
    }
    let mut labels = sharing.allocate(BATCH * 8)?;
    for (label, slot) in labels.as_bytes_mut().chunks_exact_mut(8).enumerate() {
        slot.copy_from_slice(&(label as i64).to_le_bytes());
    }
    let image = Tensor::new(image.freeze(), TensorView::contiguous(DType::UInt8, &IMAGE))?;
    let labels = Tensor::new(
        labels.freeze(),
        TensorView::contiguous(DType::Int64, &[BATCH]),
    )?;
    let batch = Value::Dict(
        vec![
            (Value::Str("image".into()), Value::Tensor(image)),
            (Value::Str("label".into()), Value::Tensor(labels)),
        ]
        .into(),
    );
    connection.send(&batch, &sharing)?;

    // torch answers with (per-image byte sums as int64, labels * 2).
    let reply = connection.recv(&sharing)?;
    let [sums, doubled] = &reply.tensors()[..] else {
        return Err(format!("expected two tensors from torch, got {reply:?}").into());
    };
    let per_image = image_bytes / BATCH;
    for (index, sum) in int64_elements(sums)?.into_iter().enumerate() {
        let expected: i64 = (index * per_image..(index + 1) * per_image)
            .map(|i| (i % 251) as i64)
            .sum();
        if sum != expected {
            return Err(format!("image {index}: torch summed {sum}, expected {expected}").into());
        }
    }
    let expected: Vec<i64> = (0..BATCH as i64).map(|label| label * 2).collect();
    if int64_elements(doubled)? != expected {
        return Err(format!("labels * 2 came back as {doubled:?}").into());
    }
    // torch serves the answer's fds from its own process: it waits for
    // this before exiting.
    connection.send(&Value::Str("done".into()), &sharing)?;
    drop(connection);
    let status = consumer.wait()?;
    if !status.success() {
        return Err(format!("the torch consumer exited with {status}").into());
    }
    println!("torch read a batch of {BATCH} images from Rust and answered correctly");
    Ok(())
}

/// The elements of an int64 tensor, in order.
fn int64_elements(tensor: &Tensor) -> Result<Vec<i64>, Box<dyn std::error::Error>> {
    if tensor.dtype() != DType::Int64 {
        return Err(format!("expected int64, got {:?}", tensor.dtype()).into());
    }
    let elements = tensor.elements().ok_or("the storage is not mapped here")?;
    Ok(elements
        .map(|bytes| i64::from_le_bytes(bytes.try_into().expect("8 bytes per int64")))
        .collect())
}
