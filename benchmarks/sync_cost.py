"""What one synchronisation of two TF gRPC workers costs, by the size of what crosses.

Starts a LocalCluster at ``--speeds`` (pinned, cgroup-throttled as in
``meshpar bench train``) and times, in one graph per size, a chain of
exchanges: at each hop both workers send their tensor to the other and add
the two, as a two-device all-reduce runs (the batch-norm statistics are a few
hundred bytes; vgg-cifar's gradients 18 MB). A chain of ``--hops`` exchanges
and one of a single exchange are timed alternately; their difference over
``hops - 1`` is one exchange, with the session's own round trip (client ->
workers -> client) divided out. Prints a table and writes JSON with --out.

    python benchmarks/sync_cost.py [--speeds 0.9,0.3] [--sizes 1,4600000] [--out sync.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import meshpar  # noqa: E402,F401  (import shim)
import tensorflow.compat.v1 as tf  # noqa: E402

from meshpar.runtime.client import ClusterClient  # noqa: E402
from meshpar.runtime.local_cluster import LocalCluster  # noqa: E402

tf.disable_eager_execution()


def exchange_chain(devices, elems: int, hops: int):
    """A scalar op: ``hops`` exchanges of an ``elems``-float tensor between the devices."""
    xs = []
    for d in devices:
        with tf.device(d):  # a variable, not a constant: grappler cannot fold the chain
            xs.append(tf.Variable(tf.random.uniform([elems]), trainable=False).read_value())
    for _ in range(hops):
        new = []
        for d in devices:
            with tf.device(d):
                new.append(tf.add_n(xs) * 0.5)  # every device gets every other's tensor
        xs = new
    with tf.device(devices[0]):
        return tf.reduce_sum(xs[0][:1])


def time_exchange(client, elems: int, hops: int, repeats: int) -> dict:
    """Median seconds of the 1-hop and ``hops``-hop chains (timed alternately) and
    their difference per extra hop."""
    graph = tf.Graph()
    with graph.as_default():
        chains = {h: exchange_chain(client.devices, elems, h) for h in (1, hops)}
        init = tf.global_variables_initializer()
    times = {1: [], hops: []}
    with tf.Session(client.target, graph=graph,
                    config=client.session_config(tf.ConfigProto())) as session:
        session.run(init)
        for op in chains.values():
            session.run(op)  # warm-up: the workers register the graph
        for _ in range(repeats):
            for h, op in chains.items():
                t0 = time.perf_counter()
                session.run(op)
                times[h].append(time.perf_counter() - t0)
    one, many = (float(np.median(times[h])) for h in (1, hops))
    return {"elems": elems, "bytes": 4 * elems, "hops": hops, "repeats": repeats,
            "one_hop_run_seconds": one, "chain_run_seconds": many,
            "exchange_seconds": (many - one) / (hops - 1)}


def main(argv=None):
    """Parse the options, run the chains and print / write the results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speeds", default="0.9,0.3", help="CPU shares of the workers")
    parser.add_argument("--sizes", default="1,4600000", help="floats per tensor, comma-separated")
    parser.add_argument("--hops", type=int, default=0, help="chain length (0: 200 for tensors "
                        "under 1 MB, else 5)")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    speeds = [float(s) for s in args.speeds.split(",")]
    rows = []
    with LocalCluster(speeds=speeds) as cluster:
        client = ClusterClient(cluster.addresses)
        for elems in (int(s) for s in args.sizes.split(",")):
            hops = args.hops or (200 if 4 * elems < 2**20 else 5)
            row = time_exchange(client, elems, hops, args.repeats)
            rows.append(row)
            print(f"{row['bytes']:>12,d} bytes: one exchange {row['exchange_seconds'] * 1e3:.3f} ms"
                  f" (session round trip with one: {row['one_hop_run_seconds'] * 1e3:.2f} ms)")
        description = cluster.describe()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"speeds": speeds, "cluster": description, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
