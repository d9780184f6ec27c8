#!/usr/bin/env python3
"""Open-loop Poisson load against `updraft serve` (loopback only, bounded in count and time).

Starts one server per configuration given (--server NAME=BINARY[:extra serve flags]), measures
the plain capacity first (requests/s when --capacity-requests requests are submitted at once to a
server started with --spec-steps 0, from the first binary), then for every load level (a share of
that capacity) and every server, sends --requests single-prompt /generate requests with
exponentially distributed gaps (seeded, the same arrival times for every server), each sampled at
temperature 1 up to end of text or --max-new tokens, and reports throughput (generated tokens/s
over the run), request latency p50/p99, and the mean speculation acceptance. Servers and levels
take turns in the order given; run the whole script several times for medians.

The prompts are the held-out corpus prompts written by
`build/bin/engine_bench --dump-prompts FILE` (token ids of the built-in tokenizer).

usage: serve_load.py --prompts FILE --server new=build/bin/updraft [--server old=/path/updraft]
                     [--levels 0.5,0.9] [--requests 120] [--max-new 96] [--seed 1]
"""
import argparse
import concurrent.futures
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
from updraft_client import Client, UpdraftError  # noqa: E402


class Server:
    def __init__(self, binary, extra, work, name):
        self.port_file = os.path.join(work, f"port-{name}-{time.monotonic_ns()}")
        self.log = open(os.path.join(work, f"serve-{name}.log"), "a")
        # Open-loop arrivals can hold many connections at once: a high connection cap, so that
        # what is measured is the scheduling, not the HTTP server refusing a 65th connection.
        self.proc = subprocess.Popen([binary, "serve", "--port", "0", "--port-file", self.port_file,
                                      "--max-connections", "1024", *extra],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{binary} serve did not start; see {self.log.name}")
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.url = "http://127.0.0.1:" + f.read().strip()
        self.client = Client(self.url, timeout=600)
        self.client.wait_ready()

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)
        self.log.close()


def one(client, prompt, max_new, seed):
    t0 = time.monotonic()
    try:
        out = client.generate(input_ids=prompt, sampling_params={"temperature": 1, "max_new_tokens": max_new,
                                                                 "sampling_seed": seed})
    except UpdraftError:
        return None
    meta = out["meta_info"]
    return time.monotonic() - t0, meta["completion_tokens"], meta.get("spec_verify_ct", 0), meta.get(
        "spec_accept_length", 1.0)


def capacity(server, prompts, n, max_new):
    """Requests/s with n requests submitted at once (one batch request)."""
    body = {"input_ids": [prompts[i % len(prompts)] for i in range(n)],
            "sampling_params": [{"temperature": 1, "max_new_tokens": max_new, "sampling_seed": 10_000 + i}
                                for i in range(n)]}
    t0 = time.monotonic()
    out = server.client._request("POST", "/generate", body)
    dt = time.monotonic() - t0
    tokens = sum(o["meta_info"]["completion_tokens"] for o in out)
    return n / dt, tokens / dt


def run_level(server, prompts, rate, n, max_new, seed, limit_s):
    rng = random.Random(seed)
    arrivals, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        arrivals.append(t)
    results = []
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=n) as pool:
        futures = []
        for i, at in enumerate(arrivals):
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if time.monotonic() - t0 > limit_s:
                break
            futures.append(pool.submit(one, server.client, prompts[i % len(prompts)], max_new, seed * 100_000 + i))
        for f in futures:
            results.append(f.result())
    wall = time.monotonic() - t0
    failed = sum(1 for r in results if r is None)
    results = [r for r in results if r is not None]
    lat = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    rounds = sum(r[2] for r in results)
    tau = sum(r[3] * r[2] for r in results) / rounds if rounds else 1.0
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return {"requests": len(results), "failed": failed, "wall_s": wall, "tokens_per_s": tokens / wall, "p50_s": p(0.50),
            "p99_s": p(0.99), "tau": tau}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--server", action="append", required=True, help="NAME=BINARY[:flag,flag,...]")
    ap.add_argument("--levels", default="0.5,0.9")
    ap.add_argument("--requests", type=int, default=120)
    ap.add_argument("--capacity-requests", type=int, default=64)
    ap.add_argument("--max-new", type=int, default=96)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit-s", type=float, default=300.0, help="stop sending after this long (per level)")
    a = ap.parse_args()
    prompts = [json.loads(line) for line in open(a.prompts) if line.strip()]
    servers = []
    for spec in a.server:
        name, rest = spec.split("=", 1)
        binary, _, flags = rest.partition(":")
        servers.append((name, binary, [f for f in flags.split(",") if f]))
    work = tempfile.mkdtemp(prefix="updraft_serve_load_")
    print(f"machine: {os.cpu_count()} cores; prompts: {len(prompts)} held-out, temperature 1, up to {a.max_new} tokens")
    plain = Server(servers[0][1], ["--spec-steps", "0"], work, "plain")
    try:
        capacity(plain, prompts, 8, a.max_new)  # warm-up
        rps, tps = capacity(plain, prompts, a.capacity_requests, a.max_new)
    finally:
        plain.stop()
    print(f"plain capacity ({servers[0][0]}, {a.capacity_requests} requests at once): {rps:.2f} requests/s, "
          f"{tps:.0f} tokens/s")
    print(f"{'level':>6} {'server':>8} {'rate/s':>7} {'done':>5} {'failed':>6} {'tokens/s':>9} {'p50 s':>7} "
          f"{'p99 s':>7} {'tau':>5}")
    for level in [float(x) for x in a.levels.split(",")]:
        for name, binary, flags in servers:
            s = Server(binary, flags, work, name)
            try:
                run_level(s, prompts, rps, 8, a.max_new, a.seed + 7, 60)  # warm-up
                r = run_level(s, prompts, level * rps, a.requests, a.max_new, a.seed, a.limit_s)
            finally:
                s.stop()
            print(f"{level:6.2f} {name:>8} {level * rps:7.2f} {r['requests']:5d} {r['failed']:6d} {r['tokens_per_s']:9.1f} "
                  f"{r['p50_s']:7.2f} {r['p99_s']:7.2f} {r['tau']:5.2f}", flush=True)


if __name__ == "__main__":
    main()
