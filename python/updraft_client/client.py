"""A small synchronous client: one method per route, JSON in and out, errors as exceptions."""

import json
import time
import urllib.error
import urllib.request


class UpdraftError(Exception):
    """The server refused a request (status >= 400) or could not be reached (status 0)."""

    def __init__(self, status, message):
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message


class Client:
    def __init__(self, base_url="http://127.0.0.1:30000", api_key=None, timeout=600.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout

    # -- transport ---------------------------------------------------------------------------
    def _request(self, method, path, body=None, raw=False):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                parsed = json.loads(text)
                err = parsed.get("error")
                if isinstance(err, dict):  # {"error": {"message", "type", "code"}}
                    err = err.get("message")
                message = err or parsed.get("message") or text
            except ValueError:
                message = text
            raise UpdraftError(e.code, message) from None
        except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
            raise UpdraftError(0, f"cannot reach {self.base_url}: {e}") from None
        return text if raw else json.loads(text)

    # -- generation --------------------------------------------------------------------------
    def generate(self, input_ids=None, text=None, sampling_params=None, return_logprob=False, rid=None):
        """POST /generate. A list of prompts (lists of ids, or strings) answers a list; one
        prompt answers one object with output_ids, text and meta_info."""
        if (input_ids is None) == (text is None):
            raise ValueError("give exactly one of input_ids and text")
        body = {"input_ids": input_ids} if input_ids is not None else {"text": text}
        if sampling_params is not None:
            body["sampling_params"] = sampling_params
        if return_logprob:
            body["return_logprob"] = True
        if rid is not None:
            body["rid"] = rid
        return self._request("POST", "/generate", body)

    def completions(self, prompt, max_tokens=16, temperature=1.0, top_p=1.0, seed=None, logprobs=None):
        """POST /v1/completions (OpenAI-style)."""
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
        if seed is not None:
            body["seed"] = seed
        if logprobs is not None:
            body["logprobs"] = logprobs
        return self._request("POST", "/v1/completions", body)

    # -- weights -----------------------------------------------------------------------------
    def update_weights_from_disk(self, model_path, is_draft_model=False, weight_version=None):
        """Hot-swaps a published version (a directory with manifest.json). Returns once it
        serves; raises UpdraftError (400) with the reason when it is refused."""
        body = {"model_path": model_path, "is_draft_model": is_draft_model}
        if weight_version is not None:
            body["weight_version"] = str(weight_version)
        return self._request("POST", "/update_weights_from_disk", body)

    def get_weight_version(self):
        return self._request("GET", "/get_weight_version")

    # -- control and information -------------------------------------------------------------
    def pause_generation(self, mode="abort"):
        """Stops the engine's steps. mode (as SGLang): "abort" ends every request in flight (each
        answered with what it had), "retract" frees their KV (recomputed on continue), "in_place"
        keeps it."""
        return self._request("POST", "/pause_generation", {"mode": mode})

    def abort_request(self, rid=None, abort_all=False):
        """Ends the request(s) with this rid (a batch's rid ends all of its prompts), or all."""
        body = {"abort_all": True} if abort_all else {"rid": rid}
        return self._request("POST", "/abort_request", body)

    def get_load(self):
        """SGLang's shape: a list with one load entry per data-parallel rank (one for updraft)."""
        return self._request("GET", "/get_load")

    def continue_generation(self):
        return self._request("POST", "/continue_generation", {})

    def flush_cache(self):
        return self._request("POST", "/flush_cache", {})

    def get_server_info(self):
        return self._request("GET", "/get_server_info")

    def get_model_info(self):
        return self._request("GET", "/get_model_info")

    def metrics(self):
        """The Prometheus text of GET /metrics."""
        return self._request("GET", "/metrics", raw=True)

    def health(self):
        try:
            return self._request("GET", "/health").get("status") == "ok"
        except UpdraftError:
            return False

    def wait_ready(self, timeout=60.0, interval=0.1):
        """Polls /health until the server answers; raises UpdraftError on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.health():
                return
            time.sleep(interval)
        raise UpdraftError(0, f"{self.base_url} not ready after {timeout} s")
