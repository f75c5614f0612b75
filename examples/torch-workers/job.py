"""A torch.multiprocessing job whose processes hand their work to Rust
workers: stock torch and the standard library, nothing else.

    python job.py [WORKER...]

WORKER is the command that starts the Rust worker of this example
(default: `cargo run` of it). Each process of the job starts one, with the
address of a listener as its last argument and the job's authkey in
TENSORSHARE_AUTHKEY, the key torch.multiprocessing gives every process of
the job and fetches shared tensors with.
"""
import os
import socket
import subprocess
import sys
from multiprocessing.connection import Listener
from pathlib import Path

import torch
import torch.multiprocessing as mp

PROCESSES = 2
TASKS = 8


def run_rust_worker(rank, worker_command, tasks, answers, finished):
    """One process of the job: hands the tasks it takes to a Rust worker."""
    authkey = mp.current_process().authkey  # the job's, from the parent
    socket.setdefaulttimeout(60)  # accept() gives up on a worker that never connects
    with Listener(authkey=authkey) as listener:
        socket.setdefaulttimeout(None)
        worker = subprocess.Popen(
            [*worker_command, listener.address],
            env={**os.environ, "TENSORSHARE_AUTHKEY": authkey.hex()},
        )
        with listener.accept() as rust:
            for task in iter(tasks.get, None):
                rust.send(task)
                answers.put(rust.recv())
            rust.send(None)
    if worker.wait() != 0:
        sys.exit(f"process {rank}: its Rust worker exited with status {worker.returncode}")
    # The parent fetches the answers' memory from this process: stay until it has.
    finished.wait()


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    worker_command = sys.argv[1:] or ["cargo", "run", "--quiet", "--manifest-path", str(here / "Cargo.toml")]
    context = mp.get_context("spawn")
    tasks, answers, finished = context.Queue(), context.Queue(), context.Event()
    job = mp.spawn(
        run_rust_worker,
        args=(worker_command, tasks, answers, finished),
        nprocs=PROCESSES,
        join=False,
        daemon=True,  # a failed job does not wait for its processes
    )
    torch.manual_seed(0)
    inputs = {}
    for task_id in range(TASKS):
        x = torch.randn(16 + task_id, 32)
        inputs[task_id] = x if task_id % 2 else x.t().contiguous().t()  # some transposed views
        tasks.put({"id": task_id, "x": inputs[task_id]})
    for _ in range(PROCESSES):
        tasks.put(None)
    for _ in range(TASKS):
        answer = answers.get(timeout=60)
        expected = torch.linalg.vector_norm(inputs[answer["id"]], dim=1)
        torch.testing.assert_close(answer["norms"], expected)
        del inputs[answer["id"]]
    assert not inputs, f"tasks without an answer: {sorted(inputs)}"
    finished.set()
    job.join()
    print(f"torch checked {TASKS} answers from the {PROCESSES} Rust workers of its job")
