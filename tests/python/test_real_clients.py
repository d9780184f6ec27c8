"""Clients this project did not write, driving `updraft serve` unchanged: SGLang's router
(sglang-router from PyPI) in front of two workers, and the openai SDK against one. The test
installs both into a virtual environment (pinned in tools/requirements-clients.txt, kept under
UPDRAFT_CLIENT_VENV between runs) and skips with the reason, exit 77, when it cannot.

Checks:
  router   greedy /generate through the router equals a direct request; traffic reaches both
           workers; /flush_cache fans out to both; the router reads each worker's load.
  openai   completions (n=2, stop, logprobs=2) and chat (messages through the model's chat
           template, n=2, logprobs with top_logprobs), stream=True for both (the chunks put
           together equal the whole answer; include_usage), and an error shown with its message.
  router   also a streamed /generate through the router.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import venv_util  # noqa: E402

BIN = os.environ.get("UPDRAFT_BIN", "build/bin/updraft")
SRC = os.environ.get("UPDRAFT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV = os.environ.get("UPDRAFT_CLIENT_VENV", os.path.join(tempfile.gettempdir(), "updraft-client-venv"))
REQS = os.path.join(SRC, "tools", "requirements-clients.txt")


def venv_python():
    return venv_util.venv_python(VENV, REQS)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, body=None, timeout=60):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        text = r.read().decode()
    try:
        return json.loads(text)
    except ValueError:
        return text


def wait_up(url, seconds=60):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            get(url, timeout=2)
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


class RealClients(unittest.TestCase):
    procs = []
    logs = []

    @classmethod
    def setUpClass(cls):
        cls.py = venv_python()
        cls.work = tempfile.mkdtemp(prefix="updraft-clients-")
        cls.workers = []
        for i in range(2):  # the built-in policy and drafter: a real tokenizer and chat template
            port = free_port()
            log = open(os.path.join(cls.work, f"serve{i}.log"), "w")
            cls.logs.append(log)
            cls.procs.append(subprocess.Popen([BIN, "serve", "--port", str(port), "--kv-cache-mb", "64"],
                                              stdout=log, stderr=subprocess.STDOUT,
                                              env=dict(os.environ, OMP_NUM_THREADS="1")))
            cls.workers.append(f"http://127.0.0.1:{port}")
        for w in cls.workers:
            wait_up(w + "/health")
        cls.router = f"http://127.0.0.1:{free_port()}"
        log = open(os.path.join(cls.work, "router.log"), "w")
        cls.logs.append(log)
        cls.procs.append(subprocess.Popen(
            [cls.py, "-m", "sglang_router.launch_router", "--host", "127.0.0.1", "--port", cls.router.rsplit(":", 1)[1],
             "--policy", "round_robin", "--worker-urls"] + cls.workers, stdout=log, stderr=subprocess.STDOUT))
        wait_up(cls.router + "/health")

    @classmethod
    def tearDownClass(cls):
        for p in cls.procs:
            p.send_signal(signal.SIGTERM)
        for p in cls.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in cls.logs:
            log.close()

    def client_run(self, code):
        """Runs `code` with the venv's python (the clients live there); its stdout parsed as JSON."""
        r = subprocess.run([self.py, "-c", code], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr[-2000:])
        return json.loads(r.stdout)

    def test_router_in_front_of_two_workers(self):
        body = {"text": "def is_prime(t):", "sampling_params": {"temperature": 0, "max_new_tokens": 16}}
        before = [metric(get(w + "/metrics"), "updraft_serve_requests_total") for w in self.workers]
        direct = get(self.workers[0] + "/generate", body)
        routed = [get(self.router + "/generate", body) for _ in range(6)]
        for r in routed:
            self.assertEqual(r["output_ids"], direct["output_ids"])
            self.assertEqual(r["text"], direct["text"])
        after = [metric(get(w + "/metrics"), "updraft_serve_requests_total") for w in self.workers]
        self.assertTrue(all(a > b for a, b in zip(after, before)), (before, after))
        # A stream through the router: SGLang's events, the last result equal to the direct one.
        req = urllib.request.Request(self.router + "/generate", data=json.dumps(dict(body, stream=True)).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            events = [line[6:] for line in r.read().decode().split("\n") if line.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        self.assertEqual(json.loads(events[-2])["output_ids"], direct["output_ids"])
        self.assertGreater(len(events), 3, "tokens should arrive in several events")
        flushed = get(self.router + "/flush_cache", {})
        self.assertEqual(flushed.get("workers_flushed"), 2, flushed)
        loads = get(self.router + "/get_loads")
        self.assertEqual(sorted(w["worker"] for w in loads["workers"]), sorted(self.workers))
        self.assertTrue(all(w["load"] >= 0 for w in loads["workers"]), loads)

    def test_openai_sdk_completions_chat_and_errors(self):
        out = self.client_run(f"""
import json, openai
c = openai.OpenAI(base_url="{self.workers[1]}/v1", api_key="unused")
comp = c.completions.create(model="small", prompt="def add(a, b):", max_tokens=12, temperature=0, n=2,
                            stop=["\\n\\n"], logprobs=2)
chat = c.chat.completions.create(model="small", messages=[{{"role": "user", "content": "Write is_prime."}}],
                                 max_tokens=12, temperature=1, seed=3, n=2, logprobs=True, top_logprobs=2)
whole = c.completions.create(model="small", prompt="def add(a, b):", max_tokens=12, temperature=0)
streamed = "".join(ch.choices[0].text for ch in
                   c.completions.create(model="small", prompt="def add(a, b):", max_tokens=12, temperature=0,
                                        stream=True))
chat_whole = c.chat.completions.create(model="small", messages=[{{"role": "user", "content": "Hi"}}], max_tokens=10,
                                       temperature=0)
chunks = list(c.chat.completions.create(model="small", messages=[{{"role": "user", "content": "Hi"}}], max_tokens=10,
                                        temperature=0, stream=True, stream_options={{"include_usage": True}}))
chat_streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
usage = [ch.usage.completion_tokens for ch in chunks if ch.usage]
try:
    c.completions.create(model="small", prompt="x", max_tokens=2, logit_bias={{"5": 1}})
    err = ""
except openai.BadRequestError as e:
    err = e.message
print(json.dumps({{"comp": comp.model_dump(), "chat": chat.model_dump(), "err": err,
                  "stream": [whole.choices[0].text, streamed],
                  "chat_stream": [chat_whole.choices[0].message.content, chat_streamed],
                  "usage": [chat_whole.usage.completion_tokens, usage]}}))
""")
        comp, chat = out["comp"], out["chat"]
        self.assertEqual(len(comp["choices"]), 2)
        self.assertEqual(comp["choices"][0]["text"], comp["choices"][1]["text"], "greedy: both choices agree")
        self.assertNotIn("\n\n", comp["choices"][0]["text"])
        for tops in comp["choices"][0]["logprobs"]["top_logprobs"]:
            self.assertLessEqual(len(tops), 2)
        self.assertEqual(len(chat["choices"]), 2)
        for ch in chat["choices"]:
            self.assertEqual(ch["message"]["role"], "assistant")
            for e in ch["logprobs"]["content"]:
                self.assertEqual(len(e["top_logprobs"]), 2)
        self.assertGreater(chat["usage"]["prompt_tokens"], 5)
        self.assertIn("logit_bias is not supported", out["err"])
        self.assertEqual(out["stream"][0], out["stream"][1], "streamed completion differs")
        self.assertEqual(out["chat_stream"][0], out["chat_stream"][1], "streamed chat differs")
        self.assertEqual(out["usage"][1], [out["usage"][0]])


if __name__ == "__main__":
    try:
        venv_python()
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"SKIP: the PyPI clients cannot be installed here: {e}")
        sys.exit(77)
    unittest.main()
