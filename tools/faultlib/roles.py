"""updraft's roles on a fault-harness cluster (tools/fault_cluster.py): buffer, trainer, two
workers and a client load, with CURVE on every link; HTTP helpers run inside namespaces."""
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

from faultlib.netns import Cluster, run

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HARNESS = os.path.join(SRC, "tools", "fault_cluster.py")
API_KEY = "fault-harness-key"
HTTP_PORT, BUF_PORT, PUB_PORT, REQ_PORT = 30000, 5557, 5560, 5561
QUEUE_CAP = 1 << 20  # each worker's record queue (--send-queue-bytes)
DISK_CAP = 64 << 20  # the buffer's --max-bytes


# --- HTTP, from inside a namespace -------------------------------------------------------------


def http(url, body=None, timeout=30):
    """(status, parsed JSON or text) of a request with the harness's bearer token."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    req.add_header("Authorization", f"Bearer {API_KEY}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read().decode()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw


def load_main(args):
    """The client host's load: requests to each worker in turn until the stop file appears (or the
    count or time bound), one JSON line per request."""
    urls = args.urls.split(",")
    end = time.monotonic() + args.seconds
    with open(args.out, "a") as out:
        for i in range(args.max_requests):
            if os.path.exists(args.stop_file) or time.monotonic() > end:
                break
            url = urls[i % len(urls)]
            body = {"input_ids": [[(i * 7 + j) % 500 + 3, 5, 9, j + 11] for j in range(3)],
                    "sampling_params": {"temperature": 1, "max_new_tokens": 24, "sampling_seed": i}}
            t0 = time.time()
            try:
                status, res = http(url + "/generate", body, timeout=60)
                ok = status == 200
                dv = sorted({o["meta_info"]["drafter_version"] for o in res}) if ok else []
                err = "" if ok else str(res)[:200]
            except OSError as e:
                ok, dv, err = False, [], str(e)[:200]
            out.write(json.dumps({"t": t0, "s": time.time() - t0, "url": url, "ok": ok, "dv": dv, "err": err}) + "\n")
            out.flush()
            time.sleep(args.pause)


def get_main(args):
    status, res = http(args.url)
    print(json.dumps({"status": status, "body": res}))


# --- the roles ----------------------------------------------------------------------------------


def metric(text, name):
    """The value of an unlabelled (or first) series called name in Prometheus text, else 0."""
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text or "", re.M)
    return float(m.group(1)) if m else 0.0


class Deployment:
    """buffer + trainer + two workers + client load on a Cluster, with CURVE on every link."""

    def __init__(self, args, work):
        self.args, self.work = args, work
        self.c = Cluster(work)
        self.model = os.path.join(SRC, "tests/fixtures/policy/llama")
        self.draft = os.path.join(SRC, "tests/fixtures/drafter/spec_default")
        for k in ("buf", "trn", "w1", "w2", "psn", "psn2"):
            run([args.bin, "keygen", os.path.join(work, k)])
        with open(os.path.join(work, "buf.allow"), "w") as f:
            for k in ("w1", "w2", "psn", "psn2"):
                f.write(open(os.path.join(work, k + ".pub")).read())
        with open(os.path.join(work, "trn.allow"), "w") as f:
            for k in ("w1", "w2"):
                f.write(open(os.path.join(work, k + ".pub")).read())
        self.buffer = None
        self.buffer_runs = 0
        self.buffer_metrics_sum = {}  # counters of buffer incarnations that were killed
        self.trainer = None
        self.workers = {}
        self.load = None
        self.samples = {"queue_bytes": {"w1": 0, "w2": 0}, "disk": 0}

    def p(self, name):
        return os.path.join(self.work, name)

    def start_buffer(self):
        self.buffer_runs += 1
        self.buffer = self.c.start("buf", "buffer", [
            self.args.bin, "buffer", "--path", self.p("buf"), "--endpoint", f"tcp://0.0.0.0:{BUF_PORT}",
            "--curve-key", self.p("buf.key"), "--curve-allow", self.p("buf.allow"), "--max-bytes", str(DISK_CAP),
            "--report-seconds", "1", "--metrics-file", self.p("buffer.prom")])
        self.wait(lambda: "serving tcp://" in self.buffer.text(), 30, "the buffer did not start")

    def start_trainer(self):
        self.trainer = self.c.start("trn", "trainer", [
            self.args.bin, "train", "--model", self.model, "--drafter", self.draft, "--buffer", self.p("buf"),
            "--out", self.p("online"), "--steps-per-round", "20", "--lr", "2e-3", "--ttt-steps", "2",
            "--min-new-records", "12", "--promote-margin", "-0.5", "--announce-pub", f"tcp://0.0.0.0:{PUB_PORT}",
            "--announce-req", f"tcp://0.0.0.0:{REQ_PORT}", "--curve-key", self.p("trn.key"),
            "--curve-allow", self.p("trn.allow"), "--metrics-file", self.p("train.prom"), "--report-seconds", "1"])

    def start_worker(self, w, wid):
        self.workers[w] = self.c.start(w, f"serve-{w}", [
            self.args.bin, "serve", "--model", self.model, "--drafter", self.draft, "--host", "0.0.0.0",
            "--port", str(HTTP_PORT), "--kv-cache-mb", "64", "--allow-remote", "--api-key", API_KEY, "--worker-id", str(wid),
            "--send", f"tcp://{self.c.addr[('buf', w)]}:{BUF_PORT}", "--send-queue-bytes", str(QUEUE_CAP),
            "--curve-key", self.p(f"{w}.key"), "--curve-server", self.p("buf.pub"), "--drain-seconds", "60",
            "--weights-pub", f"tcp://{self.c.addr[('trn', w)]}:{PUB_PORT}",
            "--weights-req", f"tcp://{self.c.addr[('trn', w)]}:{REQ_PORT}", "--weights-curve-server", self.p("trn.pub"),
            "--weights-dir", self.p(f"{w}-weights"), "--fetch-weights"])
        self.wait(lambda: self.worker_get(w, "/health")[0] == 200, 60, f"{w} did not start")

    def start(self):
        self.start_buffer()
        self.start_worker("w1", 1)
        self.start_worker("w2", 2)
        self.start_trainer()
        urls = ",".join(f"http://{self.c.addr[(w, 'cli')]}:{HTTP_PORT}" for w in ("w1", "w2"))
        self.load = self.c.start("cli", "load", [
            sys.executable, HARNESS, "load", "--urls", urls, "--out", self.p("load.jsonl"),
            "--stop-file", self.p("load.stop"), "--seconds", str(self.args.partition_seconds * 3 + 240),
            "--max-requests", "100000", "--pause", "0.05"])

    def worker_get(self, w, path):
        """A GET on the worker's own loopback (unaffected by partitions of its links)."""
        r = self.c.exec_in(w, [sys.executable, HARNESS, "get", f"http://127.0.0.1:{HTTP_PORT}{path}"])
        try:
            res = json.loads(r.stdout)
            return res["status"], res["body"]
        except (ValueError, KeyError):
            return 0, r.stderr

    def worker_metrics(self, w):
        status, body = self.worker_get(w, "/metrics")
        return body if status == 200 and isinstance(body, str) else ""

    def drafter_version(self, w):
        status, body = self.worker_get(w, "/get_weight_version")
        return body.get("drafter_version", -1) if status == 200 else -1

    def buffer_metrics(self):
        try:
            with open(self.p("buffer.prom")) as f:
                return f.read()
        except OSError:
            return ""

    def promoted(self):
        return [int(v) for v in re.findall(r"promoted v(\d+)", self.trainer.text())] if self.trainer else []

    def sample(self):
        """Peaks: each worker's record queue, the buffer directory's bytes, every process's RSS."""
        for w in self.workers:
            q = metric(self.worker_metrics(w), "updraft_sender_queue_bytes")
            self.samples["queue_bytes"][w] = max(self.samples["queue_bytes"][w], q)
        self.samples["disk"] = max(self.samples["disk"], du(self.p("buf")))
        for p in self.c.procs:
            p.sample_rss()

    def wait(self, cond, seconds, what, every=0.5):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if cond():
                return True
            time.sleep(every)
        raise Failure(what)

    def hold(self, seconds):
        """Keeps sampling for `seconds` (the length of a partition)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sample()
            time.sleep(1)

    def queues_drained(self):
        for w in self.workers:
            m = self.worker_metrics(w)
            if not m or metric(m, "updraft_sender_queue_records") != 0:
                return False
        return True


class Failure(Exception):
    pass


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return total
