#!/usr/bin/env python3
"""Multi-host fault harness: updraft's roles on a cluster of network namespaces, and faults.

Each host is a network namespace of its own (buffer, trainer, two workers, a client, and a
poisoned-record worker), joined by point-to-point veth links, so that one link can go down
(a partition between two hosts) while the others carry on:

    w1 --- buf --- w2          records: workers -> buffer (ZeroMQ over TCP, CURVE)
     \\            /
      `-- trn ---'             weight link: trainer -> workers (PUB + requests, CURVE)
     cli --- w1, cli --- w2    HTTP requests (bearer token, non-loopback bind)
     psn --- buf               the poisoned-record worker (scenario d)

The trainer reads the buffer's RocksDB directory on the shared filesystem, as `updraft train`
does beside a buffer. Every address is on the harness's own veth links (198.18.0.0/15, the
range set aside for network test beds); nothing leaves the namespaces it creates.

Scenarios (each on a fresh cluster, bounded in time, torn down afterwards):
  a  a worker partitioned from the buffer while it serves, then healed
  b  the trainer partitioned from the workers while it promotes a version, then healed
  c  the buffer killed (-9) and restarted while a worker is partitioned from it
  d  a poisoned-record worker beside honest ones

Each prints its checks and a row of the reliability table (records submitted / acknowledged /
stored / lost / duplicated, shed, versions served, time to recover, peak memory and disk
against their caps); --report writes them as JSON. Exit 0 when every check held, 1 when one
failed, 77 when namespaces cannot be made here (not root, no `ip`): a skip, with the reason.

Usage (root):
  tools/fault_cluster.py --bin build/bin/updraft --proc build/tests/msg_test_proc [--scenarios abcd]
      [--partition-seconds 30] [--report out.json] [--keep]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faultlib.netns import log, run  # noqa: E402
from faultlib.roles import (BUF_PORT, DISK_CAP, HTTP_PORT, QUEUE_CAP, SRC, Deployment, Failure,  # noqa: E402
                            get_main, load_main, metric)


# --- accounting ----------------------------------------------------------------------------------


def requests_between(d, t0, t1, worker):
    """(ok, failed) requests to a worker that started in [t0, t1] and their drafter versions."""
    url = f"http://{d.c.addr[(worker, 'cli')]}:{HTTP_PORT}"
    ok = failed = 0
    versions = set()
    try:
        lines = open(d.p("load.jsonl")).read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        r = json.loads(line)
        if r["url"] == url and t0 <= r["t"] <= t1:
            ok += r["ok"]
            failed += not r["ok"]
            versions.update(r["dv"])
    return ok, failed, sorted(versions)


def finish(d, row, checks):
    """Stops every role cleanly and accounts for each honest worker's records: every
    acknowledged record stored exactly once, submitted = acknowledged + shed, no seq gaps."""
    open(d.p("load.stop"), "w").close()
    d.load.stop(timeout=90)
    d.sample()
    sent = acked = shed = 0
    per_worker = {}
    for w, proc in d.workers.items():
        rc = proc.stop(timeout=120)
        m = re.search(r"records (\d+) submitted, (\d+) acknowledged, (\d+) shed", proc.text())
        checks.append((f"{w} stopped cleanly on SIGTERM with its records drained (exit {rc})", rc == 0 and m is not None))
        if m:
            per_worker[w] = tuple(int(x) for x in m.groups())
    rc = d.trainer.stop(timeout=120)
    checks.append((f"trainer stopped cleanly on SIGTERM (exit {rc})", rc == 0))
    checks.append(("no training round failed", "round failed" not in d.trainer.text()))
    rc = d.buffer.stop()
    checks.append((f"buffer stopped cleanly on SIGTERM (exit {rc})", rc == 0))
    inspect = run([d.args.bin, "inspect", "buffer", d.p("buf")], check=False).stdout
    stored_total = lost = dup = 0
    for i, w in enumerate(("w1", "w2"), start=1):
        m = re.search(rf"^ *worker {i} *: (\d+) records, next seq (\d+)", inspect, re.M)
        stored, next_seq = (int(m.group(1)), int(m.group(2))) if m else (0, -1)
        s, a, h = per_worker.get(w, (0, 0, 0))
        sent, acked, shed = sent + s, acked + a, shed + h
        stored_total += stored
        lost += max(0, a - stored)
        dup += max(0, stored - a)
        checks.append((f"{w}: {a} acknowledged, {stored} stored, {h} shed of {s} submitted, next seq {next_seq}",
                       a == stored and s == a + h and a > 0))
    served = {w: requests_between(d, 0, time.time(), w)[2] for w in ("w1", "w2")}
    row["versions"] = row.get("versions", "") + "served " + ", ".join(
        f"{w} v{min(v)}-v{max(v)}" if v else f"{w} none" for w, v in served.items())
    evicted = metric(d.buffer_metrics(), "updraft_buffer_records_evicted_total")
    checks.append(("retention evicted nothing (so stored counts are complete)", evicted == 0))
    row.update(submitted=sent, acknowledged=acked, stored=stored_total, lost=lost, duplicated=dup, shed=shed,
               peak_queue_bytes=max(d.samples["queue_bytes"].values()), queue_cap=QUEUE_CAP,
               peak_disk_bytes=d.samples["disk"], disk_cap=DISK_CAP,
               peak_rss_mb={p.name: round(p.peak_rss_kb / 1024, 1) for p in d.c.procs if p.peak_rss_kb})
    checks.append((f"peak record queue {row['peak_queue_bytes']:.0f} B within the cap {QUEUE_CAP} B",
                   row["peak_queue_bytes"] <= QUEUE_CAP))
    checks.append((f"peak buffer disk {d.samples['disk'] / 2**20:.1f} MiB within 1.5x the cap",
                   d.samples["disk"] <= 1.5 * DISK_CAP))


def flowing(d, w):
    return metric(d.worker_metrics(w), "updraft_records_acked_total") > 0


# --- scenarios -----------------------------------------------------------------------------------


def heal_and_drain(d, row, checks):
    """Brings w1's link to the buffer back, times until every record queue is empty, finishes."""
    d.c.link("w1", "buf", True)
    t_heal = time.monotonic()
    d.wait(lambda: d.sample() or d.queues_drained(), 180, "the record queues did not drain after healing", every=0.25)
    row["recover_s"] = round(time.monotonic() - t_heal, 1)
    finish(d, row, checks)


def scenario_a(d, secs, row, checks):
    """A worker partitioned from the buffer while it serves, then healed."""
    d.start()
    d.wait(lambda: flowing(d, "w1") and flowing(d, "w2"), 60, "records did not flow before the fault")
    d.c.link("w1", "buf", False)
    t0 = time.time()
    time.sleep(0.5)  # acknowledgements already received are counted by then
    acked0 = metric(d.worker_metrics("w1"), "updraft_records_acked_total")
    d.hold(secs)
    m = d.worker_metrics("w1")
    ok, failed, _ = requests_between(d, t0, time.time(), "w1")
    checks.append((f"w1 kept serving while partitioned: {ok} requests answered, {failed} failed", ok > 0 and failed == 0))
    queued = metric(m, "updraft_sender_queue_records")
    checks.append((f"w1 queued {queued:.0f} records ({metric(m, 'updraft_sender_queue_bytes'):.0f} B), "
                   f"shed {metric(m, 'updraft_records_shed_total'):.0f}, none acknowledged meanwhile",
                   queued > 0 and metric(m, "updraft_records_acked_total") == acked0))
    heal_and_drain(d, row, checks)


def scenario_b(d, secs, row, checks):
    """The trainer partitioned from the workers while it promotes a version, then healed."""
    d.start()
    d.wait(lambda: d.promoted() and all(d.drafter_version(w) >= d.promoted()[-1] for w in ("w1", "w2")), 240,
           "the first promotion did not reach both workers")
    before = {w: d.drafter_version(w) for w in ("w1", "w2")}
    n0 = len(d.promoted())
    d.c.link("w1", "trn", False)
    d.c.link("w2", "trn", False)
    t0, start = time.time(), time.monotonic()
    d.wait(lambda: d.sample() or len(d.promoted()) > n0, max(secs, 180), "the trainer promoted nothing while partitioned")
    d.hold(max(0.0, secs - (time.monotonic() - start)))
    during = {w: d.drafter_version(w) for w in ("w1", "w2")}
    target = d.promoted()[-1]
    checks.append((f"the trainer promoted v{target} while partitioned; workers still serve {during} (were {before})",
                   during == before and target > max(before.values())))
    for w in ("w1", "w2"):
        ok, failed, versions = requests_between(d, t0, time.time(), w)
        checks.append((f"{w} kept serving while partitioned: {ok} answered, {failed} failed, drafters {versions}",
                       ok > 0 and failed == 0 and max(versions, default=0) <= before[w]))
    d.c.link("w1", "trn", True)
    d.c.link("w2", "trn", True)
    t_heal = time.monotonic()
    d.wait(lambda: d.sample() or all(d.drafter_version(w) >= target for w in ("w1", "w2")), 180,
           f"the workers did not catch up to v{target} after healing")
    row["recover_s"] = round(time.monotonic() - t_heal, 1)
    after = {w: d.drafter_version(w) for w in ("w1", "w2")}
    checks.append((f"after healing both workers serve v{target} or newer: {after}", min(after.values()) >= target))
    row["versions"] = f"v{max(before.values())} during the partition, v{min(after.values())} after; "
    finish(d, row, checks)


def scenario_c(d, secs, row, checks):
    """The buffer killed and restarted while a worker is partitioned from it."""
    d.start()
    d.wait(lambda: flowing(d, "w1") and flowing(d, "w2"), 60, "records did not flow before the fault")
    d.c.link("w1", "buf", False)
    start = time.monotonic()
    d.hold(3)
    d.buffer.popen.kill()
    d.buffer.popen.wait()
    log("buffer killed (-9)")
    w2_acked = metric(d.worker_metrics("w2"), "updraft_records_acked_total")
    d.hold(3)
    d.start_buffer()
    log("buffer restarted on the same directory")
    d.wait(lambda: metric(d.worker_metrics("w2"), "updraft_records_acked_total") > w2_acked, 60,
           "w2's records were not acknowledged by the restarted buffer")
    d.hold(max(0.0, secs - (time.monotonic() - start)))
    ok, failed, _ = requests_between(d, time.time() - secs, time.time(), "w1")
    checks.append((f"w1 kept serving through the partition and the buffer's restart: {ok} answered, {failed} failed",
                   ok > 0 and failed == 0))
    heal_and_drain(d, row, checks)


def scenario_d(d, secs, row, checks):
    """A poisoned-record worker beside honest ones: the honest records train and promote."""
    d.start()
    d.wait(lambda: flowing(d, "w1") and flowing(d, "w2"), 60, "records did not flow before the fault")
    buf_ep = f"tcp://{d.c.addr[('buf', 'psn')]}:{BUF_PORT}"
    shape = ["24", "1", "512", "64", "16"]  # count, declare, vocab, hidden, teacher k of the fixture policy
    declared = d.c.exec_in("psn", [d.args.proc, "poison", buf_ep, "101"] + shape + [d.p("psn.key"), d.p("buf.pub")],
                           timeout=180)
    declared_says = (declared.stdout.strip().splitlines() or [""])[-1]
    checks.append((f"declared poisoned worker, refused by the buffer: {declared_says}",
                   "24 submitted, 0 acknowledged, 24 refused" in declared_says))
    shape[1] = "0"
    undeclared = d.c.exec_in("psn", [d.args.proc, "poison", buf_ep, "102"] + shape + [d.p("psn2.key"), d.p("buf.pub")],
                             timeout=180)
    undeclared_says = (undeclared.stdout.strip().splitlines() or [""])[-1]
    checks.append((f"undeclared poisoned worker (stored; the trainer must skip them): {undeclared_says}",
                   "24 submitted, 24 acknowledged, 0 refused" in undeclared_says))
    t_poison = time.monotonic()
    mismatch = 'updraft_buffer_records_rejected_total{reason="model_mismatch"}'
    try:
        d.wait(lambda: metric(d.buffer_metrics(), mismatch) >= 24, 10, "")
    except Failure:
        pass
    rejected = metric(d.buffer_metrics(), mismatch)
    n0 = len(d.promoted())
    d.wait(lambda: d.sample() or ("quarantin" in d.trainer.text() and len(d.promoted()) > n0), max(secs, 240),
           "no drafter was promoted after the poisoned records")
    row["recover_s"] = round(time.monotonic() - t_poison, 1)
    target = d.promoted()[-1]
    d.wait(lambda: d.sample() or all(d.drafter_version(w) >= target for w in ("w1", "w2")), 120,
           f"the workers did not receive v{target}")
    q = run([d.args.bin, "inspect", "buffer", d.p("buf"), "--quarantine", d.p("online/quarantine.tsv")], check=False)
    quarantined = len(re.findall(r"^\S*/102/\d+", q.stdout, re.M)) or q.stdout.count("/102/")
    checks.append((f"the trainer quarantined worker 102's records ({quarantined} listed) and promoted v{target}, "
                   "which both workers serve", quarantined > 0))
    checks.append((f"the buffer counted {rejected:.0f} model_mismatch refusals", rejected == 24))
    row["versions"] = f"promoted v{target} after the poison, served by both workers; "
    row["poison"] = {"declared_refused": 24, "undeclared_stored": 24, "quarantined": quarantined}
    finish(d, row, checks)


SCENARIOS = {"a": ("worker partitioned from the buffer", scenario_a),
             "b": ("trainer partitioned from the workers during a promotion", scenario_b),
             "c": ("buffer kill -9 + restart while a worker is partitioned", scenario_c),
             "d": ("poisoned-record worker beside honest ones", scenario_d)}


# --- main ----------------------------------------------------------------------------------------


def cannot_run():
    """Why namespaces cannot be made here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and veth links)"
    if shutil.which("ip") is None:
        return "no `ip` (Debian's iproute2)"
    probe = f"updft-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def run_scenario(args, key):
    title, fn = SCENARIOS[key]
    log(f"scenario {key}: {title}")
    work = tempfile.mkdtemp(prefix=f"updraft-fault-{key}-")
    row, checks = {"scenario": key, "title": title}, []
    d = None
    t0 = time.monotonic()
    try:
        d = Deployment(args, work)
        fn(d, args.partition_seconds, row, checks)
    except Failure as e:
        checks.append((f"{e}", False))
    except Exception as e:  # a harness error is a failed scenario, with the cluster torn down
        checks.append((f"harness error: {type(e).__name__}: {e}", False))
    finally:
        if d is not None:
            d.c.teardown()
    row["seconds"] = round(time.monotonic() - t0, 1)
    row["checks"] = [{"check": c, "ok": bool(ok)} for c, ok in checks]
    row["ok"] = bool(checks) and all(ok for _, ok in checks)
    for c, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {c}", flush=True)
    if not row["ok"] and d is not None:
        for p in d.c.procs:
            print(f"  == {p.name} (last lines)\n" + "\n".join(p.text().splitlines()[-15:]), flush=True)
    if args.keep or not row["ok"]:
        print(f"  work directory kept: {work}", flush=True)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return row


def table(rows):
    head = ("| scenario | submitted | acked | stored | lost | duplicated | shed | versions served | recover (s) "
            "| peak queue / cap | peak disk / cap | peak RSS (MiB) | checks |")
    out = [head, "|" + "---|" * 13]
    for r in rows:
        rss = ", ".join(f"{k} {v}" for k, v in sorted(r.get("peak_rss_mb", {}).items()) if k != "load")
        out.append(
            f"| {r['scenario']}: {r['title']} | {r.get('submitted', '-')} | {r.get('acknowledged', '-')} "
            f"| {r.get('stored', '-')} | {r.get('lost', '-')} | {r.get('duplicated', '-')} | {r.get('shed', '-')} "
            f"| {r.get('versions', '-')} | {r.get('recover_s', '-')} "
            f"| {r.get('peak_queue_bytes', 0) / 2**10:.0f} KiB / {QUEUE_CAP >> 10} KiB "
            f"| {r.get('peak_disk_bytes', 0) / 2**20:.1f} MiB / {DISK_CAP >> 20} MiB | {rss} "
            f"| {'all hold' if r['ok'] else 'FAILED'} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    lp = sub.add_parser("load", help="(inside the client namespace) the request load")
    lp.add_argument("--urls", required=True)
    lp.add_argument("--out", required=True)
    lp.add_argument("--stop-file", required=True)
    lp.add_argument("--seconds", type=float, default=300)
    lp.add_argument("--max-requests", type=int, default=100000)
    lp.add_argument("--pause", type=float, default=0.05)
    gp = sub.add_parser("get", help="(inside a namespace) one GET with the harness's token")
    gp.add_argument("url")
    ap.add_argument("--bin", default=os.path.join(SRC, "build/bin/updraft"))
    ap.add_argument("--proc", default=os.path.join(SRC, "build/tests/msg_test_proc"))
    ap.add_argument("--scenarios", default="abcd")
    ap.add_argument("--partition-seconds", type=float, default=30)
    ap.add_argument("--report", help="write the rows and checks here as JSON")
    ap.add_argument("--keep", action="store_true", help="keep each scenario's work directory")
    args = ap.parse_args()
    if args.cmd == "load":
        return load_main(args)
    if args.cmd == "get":
        return get_main(args)
    why = cannot_run()
    if why:
        print(f"SKIP: fault harness: {why}")
        return 77
    for path in (args.bin, args.proc):
        if not os.access(path, os.X_OK):
            print(f"fault harness: {path} is not an executable (build first, or give --bin/--proc)")
            return 2
    bad = [k for k in args.scenarios if k not in SCENARIOS]
    if bad:
        print(f"fault harness: unknown scenario {''.join(bad)} (known: {''.join(SCENARIOS)})")
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = [run_scenario(args, k) for k in args.scenarios]
    print(table(rows))
    if args.report:
        with open(args.report, "w") as f:
            json.dump(rows, f, indent=1)
    failed = [r["scenario"] for r in rows if not r["ok"]]
    print(f"fault harness: {len(rows) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main() or 0)
