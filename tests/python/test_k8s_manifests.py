"""deploy/k8s checked offline: the example overlay (and the base) render with kustomize (kubectl
kustomize), every object passes kubernetes-validate's strict schema check for Kubernetes 1.32
(an object with an unknown field is refused, the control), every `updraft` and router flag in
the manifests exists in the real command's --help, and a worker pod derives its worker id from
its StatefulSet ordinal. Skipped with the reason (exit 77) without kubectl or PyPI.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import venv_util  # noqa: E402

BIN = os.environ.get("UPDRAFT_BIN", "build/bin/updraft")
SRC = os.environ.get("UPDRAFT_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
VENV = os.environ.get("UPDRAFT_K8S_VENV", os.path.join(tempfile.gettempdir(), "updraft-k8s-venv"))
REQS = os.path.join(SRC, "tools", "requirements-k8s.txt")
K8S = "1.32.0"


def render(path):
    return subprocess.run(["kubectl", "kustomize", os.path.join(SRC, path)], check=True, capture_output=True,
                          text=True).stdout


def flags_of(words):
    return {w.split("=", 1)[0] for w in words if w.startswith("--")}


class K8sManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.py = venv_util.venv_python(VENV, REQS)
        cls.rendered = render("deploy/k8s/overlays/example")
        import_yaml = "import sys, yaml, json; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))"
        out = subprocess.run([cls.py, "-c", import_yaml], input=cls.rendered, capture_output=True, text=True, check=True)
        import json
        cls.objects = [o for o in json.loads(out.stdout) if o]

    def validate(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(text)
        try:
            return subprocess.run([os.path.join(VENV, "bin", "kubernetes-validate"), "--strict", "-k", K8S, f.name],
                                  capture_output=True, text=True)
        finally:
            os.unlink(f.name)

    def test_objects_pass_the_schemas(self):
        kinds = sorted(o["kind"] for o in self.objects)
        for want in ["StatefulSet", "Deployment", "Service", "NetworkPolicy", "Secret", "Role", "RoleBinding"]:
            self.assertIn(want, kinds)
        r = self.validate(self.rendered)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = self.validate(render("deploy/k8s/base"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        bad = self.rendered.replace("terminationGracePeriodSeconds: 150", "terminationGracePeriodSeconds: 150\n      sleepy: true")
        self.assertNotEqual(bad, self.rendered)
        self.assertNotEqual(self.validate(bad).returncode, 0, "an unknown field passed: the check has no power")

    def containers(self):
        for o in self.objects:
            spec = o.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []) + spec.get("initContainers", []):
                yield o["metadata"]["name"], c

    def test_every_flag_exists_in_the_real_commands(self):
        checked = 0
        for name, c in self.containers():
            cmd = c.get("command", []) + c.get("args", [])
            words = " ".join(cmd).split()
            if "updraft" in words and words.index("updraft") + 1 < len(words):
                sub = words[words.index("updraft") + 1]
                help_text = subprocess.run([BIN, sub, "--help"], capture_output=True, text=True).stdout
                usage = ["--help"]
            elif "sglang_router.launch_router" in words:
                help_text = subprocess.run([self.py, "-m", "sglang_router.launch_router", "--help"], capture_output=True,
                                           text=True).stdout
                sub, usage = "router", []
            else:
                continue
            for flag in flags_of(words) - set(usage):
                self.assertRegex(help_text, rf"(?<![\w-]){re.escape(flag)}(?![\w-])", f"{name}: {sub} has no {flag}")
                checked += 1
        self.assertGreater(checked, 30)

    def test_a_worker_takes_its_id_from_its_ordinal(self):
        (_, serve), = [(n, c) for n, c in self.containers() if n == "updraft-worker" and c["name"] == "serve"]
        script = serve["args"][0].replace("exec updraft", "echo updraft", 1)
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env={"HOSTNAME": "updraft-worker-3"})
        self.assertIn("--worker-id=4", out.stdout)


if __name__ == "__main__":
    if shutil.which("kubectl") is None:
        print("SKIP: no kubectl (its kustomize renders the manifests)")
        sys.exit(77)
    try:
        venv_util.venv_python(VENV, REQS)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        print(f"SKIP: kubernetes-validate cannot be installed here: {e}")
        sys.exit(77)
    unittest.main()
