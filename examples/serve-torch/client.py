"""A torch process sending tensors to the Rust server of this example and
checking its answers: stock torch and the standard library, nothing else.

    python client.py [SERVER...]

SERVER is the command that starts the Rust side (default: `cargo run` of
this example). It gets this process's authkey in TENSORSHARE_AUTHKEY, for
the connection and for the resource sharer the server fetches this
process's tensors from, and prints the address it listens on.
"""
import multiprocessing
import os
import subprocess
import sys
from multiprocessing.connection import Client
from pathlib import Path

import torch
import torch.multiprocessing  # noqa: F401  registers torch's reductions

here = Path(__file__).resolve().parent
server_command = sys.argv[1:] or ["cargo", "run", "--quiet", "--manifest-path", str(here / "Cargo.toml")]
authkey = multiprocessing.current_process().authkey
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

    torch.manual_seed(0)
    with Client(address, authkey=authkey) as conn:
        for m, k, n in [(2, 3, 4), (64, 128, 32), (1, 1, 1), (0, 5, 3)]:
            a, b = torch.randn(m, k), torch.randn(k, n)
            for b_sent in (b, b.t().contiguous().t()):  # also a transposed view
                conn.send({"a": a, "b": b_sent})
                product = conn.recv()["product"]
                assert product.dtype == torch.float32 and product.shape == (m, n), product.shape
                torch.testing.assert_close(product, a @ b)
        # A request that does not fit is answered with the reason.
        conn.send({"a": torch.ones(2, 2, dtype=torch.int64), "b": torch.ones(2, 2)})
        error = conn.recv()["error"]
        assert "int64" in error, error
    # The server says what it did once it sees the connection close.
    print(server.stdout.readline(), end="")
finally:
    server.terminate()
    server.wait()
print(f"torch checked 8 products computed in Rust, and the refusal: {error}")
