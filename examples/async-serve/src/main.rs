//! A Rust server answering many torch processes at once from one thread:
//! each request `{"rows": float32 [n, d]}` is answered with
//! `{"normalized": rows / |row|, "norms": float32 [n]}`, written into
//! shared memory for the answer. A request that does not fit is answered
//! with `{"error": why}`.
//!
//! `client.py` (stock torch) starts it with its authkey in
//! `TENSORSHARE_AUTHKEY`, and runs several client processes against the
//! address it prints: `python examples/async-serve/client.py`.

use std::error::Error;
use std::process::ExitCode;

use tensorshare::connection::Address;
use tensorshare::tokio::{Connection, Listener};
use tensorshare::{Authkey, DType, Dict, SharingContext, Tensor, Value};

fn main() -> ExitCode {
    // One thread for every client: the reactor waits on all their sockets.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let result = match runtime {
        Ok(runtime) => runtime.block_on(serve()),
        Err(error) => Err(error.into()),
    };
    let Err(error) = result else {
        return ExitCode::SUCCESS;
    };
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

/// Serves every client that holds the authkey, each in a task of its own.
async fn serve() -> Result<(), Box<dyn Error>> {
    let authkey = Authkey::from_env()?.ok_or("set TENSORSHARE_AUTHKEY to the clients' key")?;
    let sharing = SharingContext::new(authkey);
    // An abstract name: nothing on disk to clean up however the server ends.
    let address = Address::unique_abstract("async-serve")?;
    let mut listener = Listener::new(sharing.listen(&address)?)?;
    println!("listening {}", listener.address());
    loop {
        match listener.accept().await {
            Ok(client) => {
                tokio::spawn(async move {
                    match serve_client(client).await {
                        Ok(served) => println!("answered {served} requests from a torch client"),
                        Err(error) => eprintln!("error: a client failed: {error}"),
                    }
                });
            }
            // A peer with another key: refused, and the server goes on.
            Err(refused) if refused.is_handshake_failure() => eprintln!("refused: {refused}"),
            Err(fatal) => return Err(fatal.into()),
        }
    }
}

/// Answers one client's requests until it closes the connection.
async fn serve_client(mut client: Connection) -> Result<usize, tensorshare::Error> {
    let mut served = 0;
    loop {
        let request = match client.recv().await {
            Ok(request) => request,
            Err(closed) if closed.is_closed() => return Ok(served),
            Err(error) => return Err(error),
        };
        let reply = match normalize(&request, client.sharing()) {
            Ok(reply) => reply,
            Err(error) => Dict::new().with("error", error.to_string()).into(),
        };
        client.send(&reply).await?;
        served += 1;
    }
}

/// Each row of `request["rows"]` divided by its length, and the lengths.
fn normalize(request: &Value, sharing: &SharingContext) -> Result<Value, Box<dyn Error>> {
    let rows: &Tensor = request.try_get("rows")?;
    let &[n, d] = rows.sizes() else {
        return Err(format!("rows must be 2-d, not {:?}", rows.sizes()).into());
    };
    if rows.dtype() != DType::Float32 {
        return Err(format!("rows must be float32, not {}", rows.dtype().name()).into());
    }
    // Any layout torch sent (a transposed view too), in row-major order.
    let values = rows.to_vec::<f32>()?;
    let mut normalized = Vec::with_capacity(values.len());
    let mut norms = Vec::with_capacity(n);
    for row in values.chunks(d.max(1)).take(n) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        norms.push(norm);
        normalized.extend(row.iter().map(|x| if norm > 0.0 { x / norm } else { 0.0 }));
    }
    let normalized = Tensor::from_slice(sharing, &normalized, &[n, d])?;
    let norms = Tensor::from_slice(sharing, &norms, &[n])?;
    Ok(Dict::new()
        .with("normalized", normalized)
        .with("norms", norms)
        .into())
}
