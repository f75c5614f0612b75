"""Several torch processes at once sending batches to the async Rust
server of this example and checking its answers: stock torch and the
standard library, nothing else.

    python client.py [SERVER...]

SERVER is the command that starts the Rust side (default: `cargo run` of
this example). It gets this process's authkey in TENSORSHARE_AUTHKEY, for
the connections and for the resource sharers the server fetches the
clients' tensors from, and prints the address it listens on. The clients
are processes started with `spawn`, each its own connection; the server
answers them all from one thread.
"""
import multiprocessing
import os
import subprocess
import sys
from multiprocessing.connection import Client
from pathlib import Path

import torch
import torch.multiprocessing  # noqa: F401  registers torch's reductions

CLIENTS = 6
REQUESTS = 25


def client(address: str, authkey: bytes, seed: int) -> int:
    """Sends REQUESTS batches on a connection of its own; returns how many came back right."""
    multiprocessing.current_process().authkey = authkey
    torch.manual_seed(seed)
    with Client(address, authkey=authkey) as conn:
        for request in range(REQUESTS):
            rows = torch.randn(16 + request, 32)
            if request % 2:
                rows = rows.t().contiguous().t()  # a view with other strides
            conn.send({"rows": rows})
            reply = conn.recv()
            norms = rows.norm(dim=1)
            torch.testing.assert_close(reply["norms"], norms)
            torch.testing.assert_close(reply["normalized"], rows / norms[:, None])
        # A request that does not fit is answered with the reason.
        conn.send({"rows": torch.ones(3, dtype=torch.int64)})
        error = conn.recv()["error"]
        assert "2-d" in error, error
    return REQUESTS


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    server_command = sys.argv[1:] or ["cargo", "run", "--quiet", "--manifest-path", str(here / "Cargo.toml")]
    # Plain bytes: the key goes to the spawned clients as an argument.
    authkey = bytes(multiprocessing.current_process().authkey)
    server = subprocess.Popen(
        server_command,
        env={**os.environ, "TENSORSHARE_AUTHKEY": authkey.hex()},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        address = server.stdout.readline().removeprefix("listening ").rstrip("\n")
        if not address:
            sys.exit(f"the server exited with status {server.wait()} before listening")
        # An abstract name, which the server writes @name and Python \0name.
        address = "\0" + address[1:] if address.startswith("@") else address
        with multiprocessing.get_context("spawn").Pool(CLIENTS) as pool:
            answered = pool.starmap(client, [(address, authkey, seed) for seed in range(CLIENTS)])
        # The server says what it did as it sees each connection close.
        lines = [server.stdout.readline() for _ in range(CLIENTS)]
        assert all(line.startswith(f"answered {REQUESTS + 1} requests") for line in lines), lines
    finally:
        server.terminate()
        server.wait()
    print(f"{CLIENTS} torch processes at once, {sum(answered)} batches normalized in Rust on one thread")
