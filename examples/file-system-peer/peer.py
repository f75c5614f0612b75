"""The torch side of the file_system peer: stock torch and the standard
library, nothing else.

    python peer.py [PROGRAM]

PROGRAM is the Rust peer's executable (default: built with `cargo build`).
It is copied into a fresh directory and run from there with no
`tensorshare` command on PATH, no TENSORSHARE_EXE and no
TENSORSHARE_SHM_MANAGER, and the copy is deleted once it runs: the shared-
memory manager it needs under `file_system` comes from the program itself.
Tensors go both ways under `file_system`; then the program is SIGKILLed,
and its manager must outlive it, keep what torch holds readable, and
unlink every segment of the program's once torch lets go.
"""
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Client
from pathlib import Path

import torch
import torch.multiprocessing as mp

here = Path(__file__).resolve().parent
ROUNDS = 8


def built_program():
    """The program given, or the one `cargo build` makes here."""
    if len(sys.argv) > 1:
        return Path(sys.argv[1])
    subprocess.run(["cargo", "build", "--quiet", "--manifest-path", str(here / "Cargo.toml")], check=True)
    return here / "target" / "debug" / "file-system-peer"


def wait_until(what, seconds=30):
    deadline = time.monotonic() + seconds
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def managers_run_from(program):
    """Pids of the processes running the deleted `program`, as managers do."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            exe = os.readlink(entry / "exe")
            cmdline = (entry / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if exe == f"{program} (deleted)" and cmdline == b"tensorshare\0manager\0--daemon\0":
            pids.append(int(entry.name))
    return pids


def segments_of(pid):
    """The /dev/shm names torch gives segments the process `pid` made."""
    return sorted(p.name for p in Path("/dev/shm").glob(f"torch_{pid}_*"))


def trade(address, peer_pid, program, results):
    """In a torch process of its own, which lets go of the manager when it
    exits: trades tensors with the peer, kills it, and checks that its
    manager outlived it and that what torch holds is still readable."""
    mp.set_sharing_strategy("file_system")
    authkey = multiprocessing.current_process().authkey
    held = []
    with Client(address, authkey=authkey) as conn:
        for step in range(ROUNDS):
            sent = torch.arange(step, step + 1000, dtype=torch.float32).reshape(10, 100)
            conn.send(sent)
            doubled = conn.recv()
            assert doubled.dtype == torch.float32 and doubled.shape == (10, 100), doubled.shape
            assert torch.equal(doubled, sent * 2), step
            assert doubled.is_shared()
            held.append(doubled)
        made = segments_of(peer_pid)
        assert made, "the peer's tensors are not in /dev/shm segments of its own"
        managers = managers_run_from(program)
        assert len(managers) == 1, f"expected one manager run from the program, found {managers}"
        os.kill(peer_pid, signal.SIGKILL)
    time.sleep(0.5)
    assert managers_run_from(program) == managers, "the manager died with the program"
    for step, doubled in enumerate(held):
        assert torch.equal(doubled, torch.arange(step, step + 1000, dtype=torch.float32).reshape(10, 100) * 2)
    results.send((managers[0], made))


def main():
    authkey = multiprocessing.current_process().authkey
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        program = scratch / "file-system-peer"
        shutil.copy2(built_program(), program)
        start_log = scratch / "starts.log"
        env = {k: v for k, v in os.environ.items() if k not in ("TENSORSHARE_EXE", "TENSORSHARE_SHM_MANAGER")}
        env["TENSORSHARE_AUTHKEY"] = authkey.hex()
        env["PATH"] = os.pathsep.join(
            d for d in env.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "tensorshare").exists()
        )
        assert shutil.which("tensorshare", path=env["PATH"]) is None
        peer = subprocess.Popen([program, start_log], cwd=scratch, env=env, stdout=subprocess.PIPE, text=True)
        try:
            address = peer.stdout.readline().removeprefix("listening ").rstrip("\n")
            if not address:
                sys.exit(f"the peer exited with status {peer.wait()} before listening")
            # Deleted (or replaced) while it runs, the program still runs its
            # manager.
            program.unlink()
            spawn = multiprocessing.get_context("spawn")
            results, sender = spawn.Pipe(duplex=False)
            torch_side = spawn.Process(target=trade, args=(address, peer.pid, program, sender))
            torch_side.start()
            sender.close()
            torch_side.join()
            if torch_side.exitcode != 0:
                sys.exit(f"the torch side failed with exit code {torch_side.exitcode}")
            manager, made = results.recv()
            if peer.wait() != -signal.SIGKILL:
                sys.exit(f"the peer was not killed but exited with status {peer.returncode}")
            # Every client gone, the manager unlinks what it held and exits.
            if not wait_until(lambda: not segments_of(peer.pid)):
                sys.exit(f"the manager left the killed peer's segments: {segments_of(peer.pid)}")
            if not wait_until(lambda: not managers_run_from(program)):
                sys.exit(f"the manager {manager} did not exit once its clients were gone")
            starts = start_log.read_text().split()
            if starts != [str(peer.pid)]:
                sys.exit(f"main ran {len(starts)} times ({starts}): once, in the peer {peer.pid}, expected")
        finally:
            if peer.poll() is None:
                peer.kill()
                peer.wait()
    print(
        f"torch and a Rust program with no tensorshare command traded {ROUNDS} tensors each way under "
        f"file_system; killed, its manager ({manager}) unlinked its {len(made)} segments"
    )


if __name__ == "__main__":
    main()
