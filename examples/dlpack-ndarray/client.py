"""A torch process sending tensors to the Rust server of this example, which
lends each to the dlpark crate's ndarray views through DLPack, and checking
its answers: stock torch and the standard library, nothing else.

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
    batch = torch.randn(16, 32, 8)
    sent = [
        batch,
        batch.transpose(0, 2),  # strides the other way round
        batch[::2, 3:],  # a view at an offset, every other row
        torch.arange(6.0),
    ]
    with Client(address, authkey=authkey) as conn:
        for tensor in sent:
            conn.send(tensor)
            reply = conn.recv()
            assert "row_sums" in reply, reply
            torch.testing.assert_close(reply["row_sums"], tensor.sum(-1))
        # A tensor the server cannot view as float32 is answered with why.
        conn.send(torch.ones(3, dtype=torch.int64))
        error = conn.recv()["error"]
        assert "int64" in error, error
    # The server says what it did once it sees the connection close.
    print(server.stdout.readline(), end="")
    if server.wait(timeout=30) != 0:
        sys.exit(f"the server exited with status {server.returncode}")
finally:
    if server.poll() is None:
        server.terminate()
        server.wait()
print(f"torch checked the row sums of {len(sent)} tensors, and the refusal: {error}")
