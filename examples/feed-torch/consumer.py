"""The stock torch side of the feed-torch example: nothing but torch and the
standard library.

    python consumer.py ADDRESS      with TENSORSHARE_AUTHKEY set (hex)
"""
import multiprocessing
import multiprocessing.connection
import os
import sys

import torch
import torch.multiprocessing  # noqa: F401  registers torch's reductions

address = sys.argv[1]
authkey = bytes.fromhex(os.environ["TENSORSHARE_AUTHKEY"])
# The resource sharer serving the batch's fds checks this key too.
multiprocessing.current_process().authkey = authkey

with multiprocessing.connection.Client(address, authkey=authkey) as conn:
    batch = conn.recv()
    image, label = batch["image"], batch["label"]
    assert image.dtype == torch.uint8 and image.shape == (8, 3, 64, 64), image.shape
    assert label.dtype == torch.int64 and label.tolist() == list(range(8)), label
    conn.send((image.to(torch.int64).sum(dim=(1, 2, 3)), label * 2))
    # The answer's storages are fetched from this process's resource
    # sharer: stay until the producer says it has them.
    assert conn.recv() == "done"
