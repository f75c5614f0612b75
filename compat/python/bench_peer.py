#!/usr/bin/env python3
"""The PyTorch side of `tensorshare-bench`: torch's own tensor sharing, timed.

`tensorshare-bench` runs this script with the pinned torch
(compat/python/requirements.txt) and reads the one JSON object it prints on
stdout; everything else it says goes to stderr.

Workload, the same in every scenario: stream `count` tensors of `size` bytes
one way over a `multiprocessing.connection` connection. For each tensor the
producer allocates a fresh uint8 tensor in shared memory, writes every byte
(`fill_(i % 251)`, `i` counting from 0 in each run) and sends it with
`conn.send`, i.e. torch's `ForkingPickler` reductions under the sharing
strategy set with `torch.multiprocessing.set_sharing_strategy`. The consumer
receives each tensor, checks its dtype, its size in bytes and its first and
last byte, and drops it. After the last tensor of a run it sends back one ack,
the int `count`. A run's time is measured in the producer, from just before
the first allocation to the receipt of the ack.

The producer allocates each tensor straight in shared memory
(`UntypedStorage._new_shared`, as the DataLoader's collate does): torch's
fastest path. A plain `torch.empty` would be moved into a new segment when
sent (`_share_fd_cpu_`, `_share_filename_cpu_`): a second allocation and a
copy. The Rust producer likewise writes into shared memory in place.

Strategy `bytes` is not one of torch's sharing strategies but its plain
pickle path, what tensorshare's `bytes` strategy writes: the producer
allocates an ordinary (not shared) tensor, writes every byte and sends
`conn.send_bytes(pickle.dumps(tensor))` with stock `pickle`, which stores
the storage's bytes inline as `torch.storage._load_from_bytes` of a
`torch.save` stream; the consumer's `conn.recv()` is `pickle.loads` of the
message. Nothing is shared: both ends copy every byte.

Keeping tensors alive: every producer, torch's and tensorshare's, under
every strategy, keeps the tensors of a run until the ack and frees them
after the timed window, as a pipeline that reuses a batch once it is
consumed would. Under `file_descriptor` each kept tensor holds an fd, so
`tensorshare-bench` raises the soft fd limit to the hard one (this process
inherits it) and sizes runs to fit. torch's `file_system` does not need the
tensor kept (the incref it makes for a message in flight holds the segment
until the consumer has opened it); it needs the producer process: once no
process is connected to the producer's torch_shm_manager any more, the
manager unlinks every segment registered with it, opened or not.

Protocol on the connection, whoever is listening:

    producer -> consumer   {"size": BYTES, "count": N, "rounds": R, "warmup": W}
    producer -> consumer   W tensors (untimed warm-up)
    consumer -> producer   W
    then R times:
    producer -> consumer   N tensors
    consumer -> producer   N

Subcommands:

    bench_peer.py torch-to-torch --strategy S --size BYTES --count N --rounds R
        Spawns a consumer process (torch.multiprocessing, spawn context) on
        the other end of a Pipe and produces into it.
        {"scenario": "torch-to-torch", "strategy": S, "size": BYTES,
         "count": N, "seconds": [t1, ..., tR]}

    bench_peer.py produce --address ADDR --authkey HEX --strategy S
                          --size BYTES --count N --rounds R
        Produces into a consumer listening at ADDR (the Rust side).
        {"scenario": "torch-to-rust", "strategy": S, "size": BYTES,
         "count": N, "seconds": [t1, ..., tR]}

    bench_peer.py consume --address ADDR --authkey HEX
        Consumes from a producer listening at ADDR (the Rust side), which
        sends the header and does the timing. Any strategy torch can rebuild
        is accepted.
        {"scenario": "rust-to-torch", "received": TOTAL}
        `conn.recv()` unpickles with stock `pickle.loads`, so a `bytes`
        message (a `bytearray` that `torch.frombuffer` wraps) or a `memmap`
        one (`torch.UntypedStorage.from_file`) needs nothing more.
        TOTAL counts every tensor received, warm-up included: W + N * R.

    bench_peer.py round-trip --address ADDR --authkey HEX --strategy bytes
                             --size BYTES --count 1 --rounds R
        Sends one fresh tensor at a time to an echo server listening at
        ADDR with `conn.send_bytes(pickle.dumps(t))` and takes it back with
        `conn.recv()`; W untimed round trips, then R timed ones.
        {"scenario": "round-trip", "strategy": "bytes", "size": BYTES,
         "count": 1, "seconds": [t1, ..., tR]}

    bench_peer.py echo --address ADDR --authkey HEX
        A Python echo server for `round-trip`: listens at ADDR, prints
        `listening ADDR`, and answers each message of one client with
        `conn.send_bytes(pickle.dumps(pickle.loads(message)))`.
        {"scenario": "echo", "answered": N}

`produce` and `torch-to-torch` take `--warmup W` (default 10). ADDR is an
AF_UNIX path, `@name` for a name in Linux's abstract namespace, or a TCP
`HOST:PORT` (IPv4 or a name: multiprocessing makes AF_INET sockets for
tuples), as tensorshare tells them apart; `consume --listen` on port 0
prints the port it bound. Over TCP only the `bytes` strategy makes sense:
torch's shared-memory reductions name memory on this host. HEX is the
connection's authkey; it also becomes this process's
`multiprocessing.current_process().authkey`, which the resource sharer uses
to authenticate fd hand-offs under `file_descriptor`. Instead of `--authkey`,
which every user can read with `ps`, the key can come in the
TENSORSHARE_AUTHKEY environment variable (`tensorshare-bench` passes it
that way); giving both is an error.

For testing the protocol without Rust, `consume --listen` makes the consumer
the listening side; it prints `listening ADDR` on stdout (flushed) once it
accepts connections, and its JSON object is then the last line of stdout:

    bench_peer.py consume --listen --address @bench --authkey 00ff &
    bench_peer.py produce --address @bench --authkey 00ff \\
        --strategy file_system --size 4096 --count 2000 --rounds 5

Any failed check, protocol error or lost peer ends the process with status 1
and one line on stderr.
"""

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
import time

import torch
import torch.multiprocessing

STRATEGIES = ("file_descriptor", "file_system", "bytes")
# Not a sharing strategy: stock pickle of a plain tensor (see the top).
PLAIN_PICKLE = "bytes"
DEFAULT_WARMUP = 10
AUTHKEY_ENV = "TENSORSHARE_AUTHKEY"
FILL_MODULUS = 251
HEADER_KEYS = ("size", "count", "rounds", "warmup")


class BenchError(Exception):
    """A failed check or protocol error; reported as one line on stderr."""


# What ends a run: reported as one line on stderr, exit status 1.
RUN_ERRORS = (BenchError, EOFError, OSError, multiprocessing.AuthenticationError)


# Workload


def fill_value(index):
    """The byte every element of the `index`-th tensor of a run holds."""
    return index % FILL_MODULUS


def make_tensor(size, index, strategy):
    """A fresh uint8 tensor of `size` bytes with every byte written,
    allocated straight in shared memory under the current strategy
    (`UntypedStorage._new_shared`, as the DataLoader's collate does), or in
    ordinary memory for the plain pickle path.

    This is torch's fastest producer: a plain `torch.empty` would be copied
    into a new segment when sent (`share_memory_`), which costs up to twice
    as much at 1 MiB and above.
    """
    if strategy == PLAIN_PICKLE:
        tensor = torch.empty(size, dtype=torch.uint8)
    else:
        storage = torch.UntypedStorage._new_shared(size)
        tensor = torch.empty(0, dtype=torch.uint8).set_(storage)
    tensor.fill_(fill_value(index))
    return tensor


def sender(conn, strategy):
    """How the producer sends one tensor: `conn.send` (torch's
    `ForkingPickler`, sharing the storage), or for the plain pickle path
    `conn.send_bytes(pickle.dumps(tensor))`."""
    if strategy == PLAIN_PICKLE:
        return lambda tensor: conn.send_bytes(pickle.dumps(tensor))
    torch.multiprocessing.set_sharing_strategy(strategy)
    return conn.send


def check_tensor(tensor, size, index, run):
    """Raises BenchError unless `tensor` is what the producer sent as `index`."""
    where = f"{run}, tensor {index}"
    if not isinstance(tensor, torch.Tensor):
        raise BenchError(f"{where}: received {type(tensor).__name__}, not a tensor")
    if tensor.dtype != torch.uint8:
        raise BenchError(f"{where}: dtype {tensor.dtype}, expected torch.uint8")
    if tensor.numel() != size:
        raise BenchError(f"{where}: {tensor.numel()} bytes, expected {size}")
    flat = tensor.reshape(-1)
    expected = fill_value(index)
    for name, position in (("first", 0), ("last", -1)):
        actual = int(flat[position])
        if actual != expected:
            raise BenchError(f"{where}: {name} byte {actual}, expected {expected}")


# Producer


def expect_ack(conn, count):
    """Waits for the consumer's ack of a run of `count` tensors."""
    ack = conn.recv()
    if ack != count:
        raise BenchError(f"consumer acked {ack!r}, expected {count}")


def send_run(conn, send, strategy, size, count):
    """Sends `count` fresh tensors, waits for the ack; returns the seconds taken.

    Every tensor is kept until the ack and freed after the clock stops.
    """
    kept = []
    start = time.perf_counter()
    for index in range(count):
        kept.append(make_tensor(size, index, strategy))
        send(kept[-1])
    expect_ack(conn, count)
    seconds = time.perf_counter() - start
    del kept
    return seconds


def produce_stream(conn, strategy, size, count, rounds, warmup):
    """Runs the producer's side of the protocol; returns each round's seconds."""
    send = sender(conn, strategy)
    conn.send({"size": size, "count": count, "rounds": rounds, "warmup": warmup})
    send_run(conn, send, strategy, size, warmup)
    seconds = []
    for round_number in range(1, rounds + 1):
        seconds.append(send_run(conn, send, strategy, size, count))
        log_round(round_number, strategy, size, count, seconds[-1])
    return seconds


def log_round(round_number, strategy, size, count, seconds):
    """One stderr line per timed round: per-tensor cost and throughput."""
    micros = seconds / count * 1e6
    gigabytes_per_second = size * count / seconds / 1e9
    log(
        f"round {round_number}: {strategy} {count} x {size} B in {seconds:.4f} s,"
        f" {micros:.1f} us/tensor, {gigabytes_per_second:.3f} GB/s"
    )


# Consumer


def receive_header(conn):
    """Reads and checks the producer's header dict."""
    header = conn.recv()
    if not isinstance(header, dict) or set(header) != set(HEADER_KEYS):
        raise BenchError(f"bad header {header!r}: expected keys {', '.join(HEADER_KEYS)}")
    for key in HEADER_KEYS:
        value = header[key]
        if type(value) is not int or value < 0:
            raise BenchError(f"bad header: {key} is {value!r}, expected an int >= 0")
    if header["size"] == 0:
        raise BenchError("bad header: size is 0")
    return header


def receive_run(conn, size, count, run):
    """Receives and checks `count` tensors, drops each, then acks with `count`."""
    for index in range(count):
        tensor = conn.recv()
        check_tensor(tensor, size, index, run)
        del tensor
    conn.send(count)


def consume_stream(conn):
    """Runs the consumer's side of the protocol; returns the tensors received."""
    header = receive_header(conn)
    size, count = header["size"], header["count"]
    receive_run(conn, size, header["warmup"], "warm-up")
    for round_number in range(1, header["rounds"] + 1):
        receive_run(conn, size, count, f"round {round_number}")
    return header["warmup"] + count * header["rounds"]


def spawned_consumer(conn):
    """Entry point of the consumer process that torch-to-torch spawns."""
    try:
        with conn:
            consume_stream(conn)
    except RUN_ERRORS as error:
        fail(error)


# Subcommands


def run_torch_to_torch(args):
    """torch-to-torch: produces into a spawned consumer over a Pipe."""
    context = torch.multiprocessing.get_context("spawn")
    producer_end, consumer_end = context.Pipe(duplex=True)
    consumer = context.Process(target=spawned_consumer, args=(consumer_end,), daemon=True)
    consumer.start()
    consumer_end.close()
    try:
        with producer_end:
            seconds = produce_stream(
                producer_end, args.strategy, args.size, args.count, args.rounds, args.warmup
            )
    except (EOFError, ConnectionError) as error:
        consumer.join(timeout=5)
        raise BenchError(
            f"consumer process gone (exit code {consumer.exitcode}): {describe(error)}"
        ) from error
    consumer.join()
    if consumer.exitcode != 0:
        raise BenchError(f"consumer process exited with code {consumer.exitcode}")
    return timing_result("torch-to-torch", args, seconds)


def run_produce(args):
    """produce: connects to the listening consumer and produces into it."""
    authkey = adopt_authkey(args.authkey)
    address, family = socket_address(args.address)
    with multiprocessing.connection.Client(address, family=family, authkey=authkey) as conn:
        seconds = produce_stream(
            conn, args.strategy, args.size, args.count, args.rounds, args.warmup
        )
    return timing_result("torch-to-rust", args, seconds)


def run_consume(args):
    """consume: connects to the listening producer (or listens, with --listen)."""
    authkey = adopt_authkey(args.authkey)
    address, family = socket_address(args.address)
    if args.listen:
        with multiprocessing.connection.Listener(
            address, family=family, authkey=authkey
        ) as listener:
            print(f"listening {shown_address(listener.address, args.address)}", flush=True)
            with listener.accept() as conn:
                received = consume_stream(conn)
    else:
        with multiprocessing.connection.Client(address, family=family, authkey=authkey) as conn:
            received = consume_stream(conn)
    return {"scenario": "rust-to-torch", "received": received}


def run_round_trip(args):
    """round-trip: sends one fresh uint8 tensor at a time to a listening echo
    server as `conn.send_bytes(pickle.dumps(tensor))` and receives it back
    with `conn.recv()`, `warmup` untimed and then `rounds` timed times; a
    round trip is timed from just before pickling to the tensor checked."""
    authkey = adopt_authkey(args.authkey)
    address, family = socket_address(args.address)
    seconds = []
    with multiprocessing.connection.Client(address, family=family, authkey=authkey) as conn:
        for index in range(args.warmup + args.rounds):
            tensor = torch.empty(args.size, dtype=torch.uint8).fill_(fill_value(index))
            start = time.perf_counter()
            conn.send_bytes(pickle.dumps(tensor))
            back = conn.recv()
            check_tensor(back, args.size, index, "round trip")
            elapsed = time.perf_counter() - start
            del tensor, back
            if index >= args.warmup:
                seconds.append(elapsed)
    return timing_result("round-trip", args, seconds)


def run_echo(args):
    """echo: a Python echo server. Listens, prints `listening ADDRESS`, and
    answers every message of one client with
    `conn.send_bytes(pickle.dumps(pickle.loads(message)))` until it leaves."""
    authkey = adopt_authkey(args.authkey)
    address, family = socket_address(args.address)
    answered = 0
    with multiprocessing.connection.Listener(address, family=family, authkey=authkey) as listener:
        print(f"listening {shown_address(listener.address, args.address)}", flush=True)
        with listener.accept() as conn:
            while True:
                try:
                    message = conn.recv_bytes()
                except EOFError:
                    break
                conn.send_bytes(pickle.dumps(pickle.loads(message)))
                answered += 1
    return {"scenario": "echo", "answered": answered}


def timing_result(scenario, args, seconds):
    """The JSON object a producing subcommand prints."""
    return {
        "scenario": scenario,
        "strategy": args.strategy,
        "size": args.size,
        "count": args.count,
        "seconds": seconds,
    }


# Plumbing


def adopt_authkey(authkey):
    """Makes `authkey` this process's authkey (the resource sharer uses it)."""
    multiprocessing.current_process().authkey = authkey
    return authkey


def socket_address(text):
    """ADDR and its family: `@name` is a Linux abstract socket name;
    `HOST:PORT` not starting with `/` or `.` is a TCP endpoint, as
    tensorshare tells them apart; anything else is a path."""
    if text.startswith("@"):
        return "\0" + text[1:], "AF_UNIX"
    host, sep, port = text.rpartition(":")
    if sep and host and port.isdigit() and not text.startswith(("/", ".")):
        return (host, int(port)), "AF_INET"
    return text, "AF_UNIX"


def shown_address(bound, given):
    """What `listening` shows: a TCP listener's bound `HOST:PORT`, else ADDR."""
    if isinstance(bound, tuple):
        return f"{bound[0]}:{bound[1]}"
    return given


def describe(error):
    """One line saying what went wrong."""
    if isinstance(error, EOFError):
        return "the peer closed the connection"
    return str(error) or type(error).__name__


def log(message):
    print(f"bench_peer: {message}", file=sys.stderr, flush=True)


def fail(error):
    log(describe(error))
    sys.exit(1)


def positive_int(text):
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def authkey_hex(text):
    try:
        key = bytes.fromhex(text)
    except ValueError:
        # The text is secret: not repeated.
        raise argparse.ArgumentTypeError("not hex") from None
    if not key:
        raise argparse.ArgumentTypeError("must not be empty")
    return key


def add_workload_arguments(parser):
    parser.add_argument("--strategy", required=True, choices=STRATEGIES)
    parser.add_argument("--size", required=True, type=positive_int, help="bytes per tensor")
    parser.add_argument("--count", required=True, type=positive_int, help="tensors per round")
    parser.add_argument("--rounds", required=True, type=positive_int, help="timed rounds")
    parser.add_argument(
        "--warmup",
        type=non_negative_int,
        default=DEFAULT_WARMUP,
        help=f"tensors in the untimed warm-up run (default {DEFAULT_WARMUP})",
    )


def add_connection_arguments(parser):
    parser.add_argument(
        "--address", required=True, help="AF_UNIX path, or @name for an abstract socket"
    )
    parser.add_argument(
        "--authkey",
        type=authkey_hex,
        help=f"authkey in hex; visible to every user through ps: prefer ${AUTHKEY_ENV}",
    )


def resolve_authkey(parser, args):
    """Takes the authkey from --authkey or $TENSORSHARE_AUTHKEY, exactly one."""
    if not hasattr(args, "authkey"):
        return
    from_env = os.environ.get(AUTHKEY_ENV)
    if from_env is not None and args.authkey is not None:
        parser.error(f"{AUTHKEY_ENV} is set and --authkey is given: give the authkey one way only")
    if from_env is not None:
        try:
            args.authkey = authkey_hex(from_env)
        except argparse.ArgumentTypeError as error:
            parser.error(f"{AUTHKEY_ENV}: {error}")
    if args.authkey is None:
        parser.error(f"an authkey is required: set {AUTHKEY_ENV} to it in hex, or pass --authkey")


def build_parser():
    parser = argparse.ArgumentParser(
        description="PyTorch side of `tensorshare-bench`: torch's tensor sharing, timed."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    torch_to_torch = commands.add_parser(
        "torch-to-torch", help="torch producer to a spawned torch consumer"
    )
    add_workload_arguments(torch_to_torch)
    torch_to_torch.set_defaults(run=run_torch_to_torch)

    produce = commands.add_parser("produce", help="torch producer to a listening consumer")
    add_connection_arguments(produce)
    add_workload_arguments(produce)
    produce.set_defaults(run=run_produce)

    consume = commands.add_parser("consume", help="torch consumer of a listening producer")
    add_connection_arguments(consume)
    consume.add_argument("--listen", action="store_true", help=argparse.SUPPRESS)
    consume.set_defaults(run=run_consume)

    round_trip = commands.add_parser(
        "round-trip", help="torch client of a listening echo server, one tensor at a time"
    )
    add_connection_arguments(round_trip)
    add_workload_arguments(round_trip)
    round_trip.set_defaults(run=run_round_trip)

    echo = commands.add_parser("echo", help="Python echo server: pickle.loads, pickle.dumps")
    add_connection_arguments(echo)
    echo.set_defaults(run=run_echo)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_authkey(parser, args)
    try:
        result = args.run(args)
    except RUN_ERRORS as error:
        fail(error)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
