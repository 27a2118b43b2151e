"""What the re-balancing probe reads on throttled workers, by probe length.

Starts a LocalCluster at the given CPU shares (no training), runs the
speed probe (``meshpar.training.live_speeds.probe_ops``) on all workers at
once and on the last worker alone, at several round counts, each after a
short idle pause (as between training steps), and prints each worker's
traced span and the ratio of the first worker's span to each other's: the
speed ratio the re-balancing monitor would measure (docs/rebalance.md).
With an exact quota the ratio would be the shares' ratio at every length.

``--then 0.3,0.9`` changes the shares after the start (as the re-balancing
benchmark's drop does to a running worker) before probing.

    python benchmarks/probe_bias.py [--speeds 0.9,0.3] [--then S,S] [--rounds 16,96,480]
"""
from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow.compat.v1 as tf  # noqa: E402

from meshpar.runtime.local_cluster import LocalCluster  # noqa: E402
from meshpar.training.live_speeds import probe_ops, probe_seconds  # noqa: E402


def measure(session, ops, rounds, feed, tasks, repeats: int, pause: float) -> list:
    """Spans (seconds, per task) of ``repeats`` traced runs of the probes of ``tasks``."""
    out = []
    for _ in range(repeats):
        time.sleep(pause)
        metadata = tf.RunMetadata()
        session.run([ops[t] for t in tasks], feed_dict={rounds: feed}, run_metadata=metadata,
                    options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))
        out.append(probe_seconds(metadata.step_stats))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--speeds", default="0.9,0.3")
    parser.add_argument("--rounds", default="16,96,480")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pause", type=float, default=0.05,
                        help="idle seconds before each probe (default 0.05)")
    parser.add_argument("--then", help="CPU shares to set once the workers run")
    parser.add_argument("--throttle", default="auto")
    parser.add_argument("--out", help="write the spans as JSON here")
    args = parser.parse_args()
    speeds = [float(s) for s in args.speeds.split(",")]
    then = [float(s) for s in args.then.split(",")] if args.then else None
    results = {"speeds": speeds, "then": then, "runs": []}
    with LocalCluster(speeds, throttle=args.throttle) as cluster:
        print(cluster.describe(), flush=True)
        for i, share in enumerate(then or []):
            cluster.set_speed(i, share)
        with tf.Graph().as_default():
            rounds = tf.placeholder_with_default(16, [])
            devices = {t: f"/job:worker/task:{t}/device:CPU:0" for t in range(len(speeds))}
            ops = probe_ops(devices, rounds=rounds)
            with tf.Session(f"grpc://{cluster.addresses[0]}") as session:
                session.run(list(ops.values()))  # partition the probes onto the workers
                for count in (int(r) for r in args.rounds.split(",")):
                    for label, tasks in (("all", sorted(ops)), ("last alone", [max(ops)])):
                        spans = measure(session, ops, rounds, count, tasks, args.repeats,
                                        args.pause)
                        results["runs"].append({"rounds": count, "probed": label,
                                                "spans": [{str(t): s for t, s in r.items()}
                                                          for r in spans]})
                        shown = {t: [round(r[t] * 1e3, 1) for r in spans if t in r]
                                 for t in tasks}
                        ratios = [round(r[0] / r[t], 2) for r in spans for t in tasks
                                  if t != 0 and 0 in r and t in r]
                        print(f"{count:5d} rounds, {label:10s} spans ms {shown}"
                              + (f"  worker-0/other span ratio {ratios}" if ratios else ""),
                              flush=True)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
