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
use tensorshare::{Authkey, Dict, SharingContext, Tensor};

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
    for (i, pixel) in image.as_mut_slice::<u8>()?.iter_mut().enumerate() {
        *pixel = (i % 251) as u8;
    }
    let image = image.into_tensor::<u8>(&IMAGE)?;
    let labels: Vec<i64> = (0..BATCH as i64).collect();
    let labels = Tensor::from_slice(&sharing, &labels, &[BATCH])?;
    let batch = Dict::new().with("image", image).with("label", labels);
    connection.send(&batch.into(), &sharing)?;

    // torch answers with (per-image byte sums as int64, labels * 2).
    let reply = connection.recv(&sharing)?;
    let (sums, doubled): (&Tensor, &Tensor) = (&reply).try_into()?;
    let per_image = image_bytes / BATCH;
    for (index, sum) in sums.to_vec::<i64>()?.into_iter().enumerate() {
        let expected: i64 = (index * per_image..(index + 1) * per_image)
            .map(|i| (i % 251) as i64)
            .sum();
        if sum != expected {
            return Err(format!("image {index}: torch summed {sum}, expected {expected}").into());
        }
    }
    let expected: Vec<i64> = (0..BATCH as i64).map(|label| label * 2).collect();
    if doubled.to_vec::<i64>()? != expected {
        return Err(format!("labels * 2 came back as {doubled:?}").into());
    }
    // torch serves the answer's fds from its own process: it waits for
    // this before exiting.
    connection.send(&"done".into(), &sharing)?;
    drop(connection);
    let status = consumer.wait()?;
    if !status.success() {
        return Err(format!("the torch consumer exited with {status}").into());
    }
    println!("torch read a batch of {BATCH} images from Rust and answered correctly");
    Ok(())
}
