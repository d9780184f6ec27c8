"""Hosts for the fault harness (tools/fault_cluster.py): network namespaces joined by veth
links, and processes started inside them."""
import os
import signal
import subprocess
import time


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run(cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, capture_output=True, text=True, **kw)


# --- hosts and links -------------------------------------------------------------------------


class Cluster:
    """Namespaces named <prefix>-<host>, veth links between pairs, processes inside them."""

    LINKS = [("w1", "buf"), ("w2", "buf"), ("w1", "trn"), ("w2", "trn"), ("cli", "w1"), ("cli", "w2"),
             ("psn", "buf")]

    def __init__(self, work):
        self.prefix = f"updft{os.getpid() % 100000}"
        self.work = work
        self.hosts = ["buf", "trn", "w1", "w2", "cli", "psn"]
        self.addr = {}  # (host, peer) -> the address of host on its link to peer
        self.procs = []
        for h in self.hosts:
            run(["ip", "netns", "add", self.ns(h)])
            run(["ip", "-n", self.ns(h), "link", "set", "lo", "up"])
        for i, (a, b) in enumerate(self.LINKS, start=1):
            run(["ip", "-n", self.ns(a), "link", "add", f"to-{b}", "type", "veth", "peer", "name", f"to-{a}",
                 "netns", self.ns(b)])
            for host, peer, last in ((a, b, 1), (b, a, 2)):
                address = f"198.18.{i}.{last}"
                run(["ip", "-n", self.ns(host), "addr", "add", f"{address}/24", "dev", f"to-{peer}"])
                run(["ip", "-n", self.ns(host), "link", "set", f"to-{peer}", "up"])
                self.addr[(host, peer)] = address

    def ns(self, host):
        return f"{self.prefix}-{host}"

    def link(self, a, b, up):
        for host, peer in ((a, b), (b, a)):
            run(["ip", "-n", self.ns(host), "link", "set", f"to-{peer}", "up" if up else "down"])
        log(f"link {a} <-> {b} {'up (healed)' if up else 'down (partitioned)'}")

    def start(self, host, name, cmd):
        p = Proc(self, host, name, cmd)
        self.procs.append(p)
        return p

    def exec_in(self, host, cmd, timeout=60):
        return run(["ip", "netns", "exec", self.ns(host)] + cmd, check=False, timeout=timeout)

    def teardown(self):
        for p in self.procs:
            p.kill()
        for h in self.hosts:
            subprocess.run(["ip", "netns", "del", self.ns(h)], capture_output=True)


class Proc:
    def __init__(self, cluster, host, name, cmd):
        self.name, self.host = name, host
        self.log_path = os.path.join(cluster.work, f"{name}.log")
        self.log = open(self.log_path, "a")
        self.popen = subprocess.Popen(["ip", "netns", "exec", cluster.ns(host)] + cmd, stdout=self.log,
                                      stderr=subprocess.STDOUT)
        self.peak_rss_kb = 0

    def alive(self):
        return self.popen.poll() is None

    def sample_rss(self):
        try:
            with open(f"/proc/{self.popen.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        self.peak_rss_kb = max(self.peak_rss_kb, int(line.split()[1]))
        except OSError:
            pass

    def stop(self, timeout=90):
        """SIGTERM and wait; returns the exit code."""
        if self.alive():
            self.sample_rss()
            self.popen.send_signal(signal.SIGTERM)
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self):
        if self.alive():
            self.popen.kill()
            self.popen.wait()

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()
