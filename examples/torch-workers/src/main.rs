//! A Rust worker inside a `torch.multiprocessing` job: a process of the
//! job starts it with the address of a listener and the job's authkey,
//! and it connects back, takes tasks `{"id": int, "x": float32 [rows,
//! cols]}`, answers each with `{"id": id, "norms": float32 [rows]}` (the
//! rows' Euclidean norms) until it gets `None`, and exits.
//!
//! `job.py` (stock torch) runs the job: `python examples/torch-workers/job.py`.

use std::error::Error;
use std::process::ExitCode;
use std::time::Duration;

use tensorshare::connection::Address;
use tensorshare::serde::{Deserialize, Serialize};
use tensorshare::{Authkey, SharingContext, Tensor, from_value, to_value};

/// A task: Python's `{"id": 3, "x": tensor}`.
#[derive(Deserialize)]
#[serde(crate = "tensorshare::serde")]
struct Task {
    id: i64,
    x: Tensor,
}

/// Its answer: `{"id": 3, "norms": tensor}`.
#[derive(Serialize)]
#[serde(crate = "tensorshare::serde")]
struct Answer {
    id: i64,
    norms: Tensor,
}

fn main() -> ExitCode {
    match work() {
        Ok(done) => {
            println!("a Rust worker of the job: tasks answered: {done}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn work() -> Result<usize, Box<dyn Error>> {
    let address: Address = std::env::args()
        .nth(1)
        .ok_or("usage: torch-workers ADDRESS, with TENSORSHARE_AUTHKEY set")?
        .parse()?;
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY to the job's authkey")?;
    let sharing = SharingContext::new(authkey);
    let mut job = sharing.connect(&address)?;
    let mut done = 0;
    loop {
        let message = job.recv()?;
        if message.is_none() {
            break;
        }
        let Task { id, x } = from_value(&message)?;
        let &[rows, cols] = x.sizes() else {
            return Err(format!("task {id}: expected a matrix, got sizes {:?}", x.sizes()).into());
        };
        // Any view of x (transposed, sliced), copied in row-major order.
        let elements = x.to_vec::<f32>()?;
        let norms: Vec<f32> = (0..rows)
            .map(|row| {
                elements[row * cols..(row + 1) * cols]
                    .iter()
                    .map(|v| v * v)
                    .sum::<f32>()
                    .sqrt()
            })
            .collect();
        let norms = Tensor::from_slice(&sharing, &norms, &[rows])?;
        job.send(&to_value(&Answer { id, norms })?)?;
        done += 1;
    }
    // Answers in named segments (the default, while /dev/shm has room)
    // outlive this process, and this returns at once; those in memfds (the
    // default past that room, or file_descriptor) the job fetches from this
    // process, and this waits until it has.
    sharing.wait_until_fetched(Duration::from_secs(60))?;
    Ok(done)
}
