"""The Python client against a real `updraft serve` on the fixture policy and drafter.

Run by ctest (UPDRAFT_BIN and UPDRAFT_SOURCE_DIR set); by hand:
  UPDRAFT_BIN=build/bin/updraft UPDRAFT_SOURCE_DIR=. python3 -m unittest tests/python/test_client.py
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

SRC = os.environ.get("UPDRAFT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("UPDRAFT_BIN", os.path.join(SRC, "build", "bin", "updraft"))
sys.path.insert(0, os.path.join(SRC, "python"))

from updraft_client import Client, UpdraftError  # noqa: E402

MODEL = os.path.join(SRC, "tests", "fixtures", "policy", "llama")
DRAFT = os.path.join(SRC, "tests", "fixtures", "drafter", "spec_default")


def publish_drafter(root, version, src=DRAFT):
    """A published drafter version written by hand from the documented manifest format
    (kernels/io/weight_version.h), so the format is checked from outside the C++ code."""
    d = os.path.join(root, f"drafter-v{version:08d}")
    os.makedirs(d)
    files = {}
    for name in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(src, name), os.path.join(d, name))
        with open(os.path.join(d, name), "rb") as f:
            data = f.read()
        files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest = {"format": "updraft.weights", "kind": "drafter", "version": version, "files": files, "meta": {}}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    return d


class Server:
    def __init__(self, work, *args):
        self.port_file = os.path.join(work, f"port-{time.monotonic_ns()}")
        self.log = open(os.path.join(work, "serve.log"), "a")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--model", MODEL, "--drafter", DRAFT, "--port", "0", "--port-file", self.port_file,
             *args], stdout=self.log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("updraft serve did not start; see " + self.log.name)
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.url = "http://127.0.0.1:" + f.read().strip()

    def stop(self):
        self.proc.terminate()
        code = self.proc.wait(timeout=60)
        self.log.close()
        return code


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="updraft_client_")
        cls.server = Server(cls.work)
        cls.client = Client(cls.server.url)
        cls.client.wait_ready()

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        shutil.rmtree(cls.work, ignore_errors=True)
        assert code == 0, f"updraft serve exited with {code} on SIGTERM"

    def test_greedy_generation_is_deterministic_and_labelled(self):
        sp = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
        one = self.client.generate(input_ids=[3, 1, 4, 1, 5], sampling_params=sp, return_logprob=True)
        two = self.client.generate(input_ids=[[3, 1, 4, 1, 5], [9, 2, 6]], sampling_params=sp)
        self.assertEqual(len(one["output_ids"]), 8)
        self.assertEqual(one["output_ids"], two[0]["output_ids"])
        meta = one["meta_info"]
        self.assertEqual(meta["finish_reason"], {"type": "length", "length": 8})
        self.assertEqual([t for _, t, _ in meta["output_token_logprobs"]], one["output_ids"])
        self.assertTrue(all(lp <= 0 for lp, _, _ in meta["output_token_logprobs"]))
        self.assertEqual((meta["policy_version"], meta["drafter_version"]), (1, 1))

    def test_errors_carry_the_status_and_the_reason(self):
        with self.assertRaises(UpdraftError) as e:
            self.client.generate(input_ids=[1, 100000])
        self.assertEqual(e.exception.status, 400)
        self.assertIn("outside the vocabulary", e.exception.message)
        with self.assertRaises(UpdraftError) as e:
            self.client.generate(input_ids=[1, 2], sampling_params={"presence_penalty": 3.0})
        self.assertIn("presence_penalty must be in [-2, 2]", e.exception.message)
        with self.assertRaises(UpdraftError) as e:
            Client("http://127.0.0.1:9", timeout=2).get_weight_version()
        self.assertEqual(e.exception.status, 0)

    def test_completions_and_information(self):
        out = self.client.completions([5, 6, 7], max_tokens=4, temperature=0, logprobs=0)
        self.assertEqual(out["object"], "text_completion")
        self.assertEqual(len(out["choices"][0]["logprobs"]["token_logprobs"]), len(out["choices"][0]["token_ids"]))
        info = self.client.get_server_info()
        self.assertEqual(info["vocab_size"], 512)
        self.assertIn("updraft_serve_requests_total", self.client.metrics())
        self.assertTrue(self.client.flush_cache()["success"])
        loads = self.client.get_load()  # SGLang's shape: one entry per data-parallel rank
        self.assertEqual(len(loads), 1)
        load = loads[0]
        self.assertEqual(load["num_running_reqs"], 0)
        self.assertEqual(load["num_tokens"], 0)
        self.assertEqual(load["num_free_kv_blocks"], load["num_kv_blocks"])
        self.assertEqual(self.client.abort_request(rid="nobody")["aborted"], 0)

    def test_zz_drafter_update_from_disk(self):  # runs last: it changes the serving drafter
        root = os.path.join(self.work, "versions")
        os.makedirs(root, exist_ok=True)
        d2 = publish_drafter(root, 2)
        out = self.client.update_weights_from_disk(d2, is_draft_model=True, weight_version=2)
        self.assertTrue(out["success"])
        self.assertEqual(self.client.get_weight_version()["drafter_version"], 2)
        gen = self.client.generate(input_ids=[7, 7, 7], sampling_params={"max_new_tokens": 3, "ignore_eos": True})
        self.assertEqual(gen["meta_info"]["drafter_version"], 2)
        # A damaged version is refused with its reason; v2 keeps serving.
        d3 = publish_drafter(root, 3)
        with open(os.path.join(d3, "model.safetensors"), "r+b") as f:
            f.seek(-3, os.SEEK_END)
            f.write(b"\x00\x01\x02")
        with self.assertRaises(UpdraftError) as e:
            self.client.update_weights_from_disk(d3, is_draft_model=True)
        self.assertIn("sha256", e.exception.message)
        self.assertEqual(self.client.get_weight_version()["drafter_version"], 2)


    @unittest.skipUnless(shutil.which("node"), "node is not installed")
    def test_zzz_dashboard_page_renders_the_windows(self):
        import urllib.request
        with urllib.request.urlopen(self.server.url + "/dashboard", timeout=10) as r:
            page = r.read().decode()
        script = page[page.index("<script>") + len("<script>"):page.index("</script>")]
        data = self.client._request("GET", "/dashboard/data")
        paths = [os.path.join(self.work, "page.js"), os.path.join(self.work, "data.json")]
        with open(paths[0], "w") as f:
            f.write(script)
        with open(paths[1], "w") as f:
            json.dump(data, f)
        harness = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard_harness.js")
        out = json.loads(subprocess.check_output(["node", harness, *paths], timeout=60))
        n = len(data["windows"])
        self.assertGreater(n, 2)
        self.assertIn(f"{n} windows; serving policy v1, drafter v2", out["status"])
        self.assertEqual(out["tps_points"], n)  # every window has a throughput point
        self.assertEqual(out["tau_points"], sum(1 for b in data["windows"] if b["tau"] is not None))
        self.assertGreaterEqual(out["markers"], 1)  # the swap to drafter v2
        self.assertIn("<td>v1</td><td>v2</td>", out["table"])


class ApiKeyTest(unittest.TestCase):
    def test_the_api_key_is_required_except_for_health(self):
        work = tempfile.mkdtemp(prefix="updraft_client_key_")
        server = Server(work, "--api-key", "k3y")
        try:
            Client(server.url).wait_ready()  # /health needs no key
            with self.assertRaises(UpdraftError) as e:
                Client(server.url).get_weight_version()
            self.assertEqual(e.exception.status, 401)
            self.assertEqual(Client(server.url, api_key="k3y").get_weight_version()["policy_version"], 1)
            # The dashboard page needs no key (it holds no data); its data does.
            import urllib.request
            with urllib.request.urlopen(server.url + "/dashboard", timeout=10) as page:
                self.assertIn("drift dashboard", page.read().decode())
            with self.assertRaises(UpdraftError) as e:
                Client(server.url)._request("GET", "/dashboard/data")
            self.assertEqual(e.exception.status, 401)
            self.assertIn("windows", Client(server.url, api_key="k3y")._request("GET", "/dashboard/data"))
        finally:
            self.assertEqual(server.stop(), 0)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
