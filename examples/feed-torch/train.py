"""A torch training loop fed by the Rust producer of this example: stock
torch and the standard library, nothing else.

    python train.py [PRODUCER...]

PRODUCER is the command that starts the Rust side (default: `cargo run`
of this example). It gets this process's authkey in TENSORSHARE_AUTHKEY,
for the connection, and prints the address it listens on. The batches
arrive in shared-memory segments torch opens by name (`file_system`).
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
producer_command = sys.argv[1:] or ["cargo", "run", "--quiet", "--manifest-path", str(here / "Cargo.toml")]
authkey = multiprocessing.current_process().authkey
producer = subprocess.Popen(
    producer_command,
    env={**os.environ, "TENSORSHARE_AUTHKEY": authkey.hex()},
    stdout=subprocess.PIPE,
    text=True,
)
address = producer.stdout.readline().removeprefix("listening ").rstrip("\n")
if not address:
    sys.exit(f"the producer exited with status {producer.wait()} before listening")


def batches(conn):
    """The batches the producer sends, until it sends None: a producer that
    dies instead leaves conn.recv() raising EOFError, not a short epoch."""
    while (batch := conn.recv()) is not None:
        yield batch


torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
trained = 0
with Client(address, authkey=authkey) as conn:
    for batch in batches(conn):
        image, label = batch["image"], batch["label"]
        assert image.dtype == torch.uint8 and image.shape == (8, 3, 64, 64), image.shape
        assert label.dtype == torch.int64 and label.shape == (8,), label.shape
        # Each image is one shade, and its label is the shade's tens digit.
        assert torch.equal(image.amin(dim=(1, 2, 3)), image.amax(dim=(1, 2, 3)))
        assert torch.equal(image[:, 0, 0, 0].to(torch.int64) // 10, label), label
        loss = torch.nn.functional.cross_entropy(model(image.float() / 255), label)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        trained += 1

print(producer.communicate()[0], end="")
if producer.returncode != 0:
    sys.exit(f"the producer exited with status {producer.returncode}")
print(f"torch trained on {trained} batches from Rust, last loss {loss.item():.3f}")
