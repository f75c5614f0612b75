//! A Rust server computing on the tensors torch processes send it: each
//! request `{"a": float32 [m, k], "b": float32 [k, n]}` is answered with
//! `{"product": a @ b}`, computed by ndarray on the memory torch shared
//! and written straight into shared memory for the answer. A request that
//! does not fit is answered with `{"error": why}`.
//!
//! `client.py` (stock torch) starts it with its authkey in
//! `TENSORSHARE_AUTHKEY`, connects to the address it prints and checks the
//! answers: `python examples/serve-torch/client.py`.

use std::error::Error;
use std::process::ExitCode;
use std::thread;

use tensorshare::connection::Address;
use tensorshare::ndarray::{Ix2, linalg::general_mat_mul};
use tensorshare::serde::{Deserialize, Serialize};
use tensorshare::{Authkey, Connection, Dict, SharingContext, Tensor, Value};

/// What a client sends: Python's `{"a": a, "b": b}`.
#[derive(Deserialize)]
#[serde(crate = "tensorshare::serde")]
struct Request {
    a: Tensor,
    b: Tensor,
}

/// What it gets back: `{"product": a @ b}`.
#[derive(Serialize)]
#[serde(crate = "tensorshare::serde")]
struct Reply {
    product: Tensor,
}

fn main() -> ExitCode {
    let Err(error) = serve() else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

/// Serves every client that holds the authkey, each on a thread of its own.
fn serve() -> Result<(), Box<dyn Error>> {
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY to the clients' key")?;
    let sharing = SharingContext::new(authkey);
    // An abstract name: nothing on disk to clean up however the server ends.
    let listener = sharing.listen(&Address::unique_abstract("serve-torch")?)?;
    println!("listening {}", listener.address());
    thread::scope(|scope| {
        loop {
            match listener.accept() {
                Ok(client) => {
                    scope.spawn(|| match serve_client(client) {
                        Ok(served) => println!("answered {served} requests from a torch client"),
                        Err(error) => eprintln!("error: a client failed: {error}"),
                    });
                }
                // A peer with another key: refused, and the server goes on.
                Err(refused) if refused.is_handshake_failure() => eprintln!("refused: {refused}"),
                Err(fatal) => return Err(fatal.into()),
            }
        }
    })
}

/// Answers one client's requests until it closes the connection.
fn serve_client(mut client: Connection) -> Result<usize, Box<dyn Error>> {
    let mut served = 0;
    loop {
        let request = match client.recv() {
            Ok(request) => request,
            Err(closed) if closed.is_closed() => return Ok(served),
            Err(error) => return Err(error.into()),
        };
        let reply = match multiply(&request, client.sharing()) {
            Ok(product) => tensorshare::to_value(&Reply { product })?,
            Err(error) => Dict::new().with("error", error.to_string()).into(),
        };
        client.send(&reply)?;
        served += 1;
    }
}

/// `a @ b`, read in place from the request's tensors (any strides) and
/// written in place into a tensor in shared memory.
fn multiply(request: &Value, sharing: &SharingContext) -> Result<Tensor, Box<dyn Error>> {
    let Request { a, b } = tensorshare::from_value(request)?;
    let a = a.as_array_view::<f32>()?.into_dimensionality::<Ix2>()?;
    let b = b.as_array_view::<f32>()?.into_dimensionality::<Ix2>()?;
    let ((m, k), (k2, n)) = (a.dim(), b.dim());
    if k != k2 {
        return Err(format!("cannot multiply a [{m}, {k}] matrix by a [{k2}, {n}] one").into());
    }
    let mut product = sharing.allocate(m * n * size_of::<f32>())?;
    let mut out = product
        .as_array_view_mut::<f32>(&[m, n])?
        .into_dimensionality::<Ix2>()?;
    general_mat_mul(1.0, &a, &b, 0.0, &mut out);
    Ok(product.into_tensor::<f32>(&[m, n])?)
}
