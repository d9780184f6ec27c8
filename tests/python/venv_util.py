"""A virtual environment with pinned PyPI packages for the tests that drive real clients or
tools (made once, refreshed when the pins change)."""
import os
import subprocess
import sys


def venv_python(venv, requirements):
    """The venv's python with `requirements` (a pip requirements file) installed; RuntimeError
    with pip's reason when they cannot be installed."""
    py = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "requirements.stamp")
    with open(requirements) as f:
        pins = f.read()
    if os.path.exists(stamp):
        with open(stamp) as f:
            if f.read() == pins:
                return py
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True, capture_output=True)
    r = subprocess.run([py, "-m", "pip", "install", "-q", "-r", requirements], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        raise RuntimeError("pip install failed: " + r.stderr.strip()[-400:])
    with open(stamp, "w") as f:
        f.write(pins)
    return py
