#!/usr/bin/env python3
"""Generate the small random-weight policy-model fixtures in tests/fixtures/policy/.

Each fixture is a Hugging Face model directory (config.json,
generation_config.json, safetensors weights) plus reference.safetensors holding
outputs that the C++ model loader's tests compare against.  CI never runs this
script: its outputs are committed.  Run it again only to change the fixtures.

Fixtures (all: 8 layers, vocab 512, max_position_embeddings 256):
  llama  LlamaForCausalLM, GQA 4/2 heads, llama3 rope scaling, untied lm_head,
         bf16 weights in 2 shards with model.safetensors.index.json
  qwen2  Qwen2ForCausalLM, GQA, q/k/v biases, tied embeddings, f32 weights
  qwen3  Qwen3ForCausalLM, GQA, head_dim 32 != hidden/heads, q_norm/k_norm,
         tied embeddings, f16 weights

Weights are drawn from a seeded generator with a wider spread than HF's
default (std 0.1; RMSNorm weights 1 + 0.1*randn; biases 0.05*randn), rounded
to the storage dtype, and every reference output is computed in float32 from
those rounded weights with eager attention.  So a float32 implementation that
reads the stored weights should match to about 1e-4.

Reference tensors (reference.safetensors, per fixture):
  input_ids [12] i64, logits [12, 512] f32,
  hidden_states [9, 12, hidden] f32 (HF output_hidden_states: index 0 is the
      embedding output, index i the output of decoder layer i-1, index 8 the
      final output AFTER the final norm),
  greedy_prompt [8] i64, greedy_tokens [32] i64 (greedy, no eos stopping),
  greedy_margin [32] f32 (top-1 minus top-2 logit at each greedy step),
  batch_ids [3, 10] i64, batch_last_logits [3, 512] f32 (last-position logits,
      each prompt run alone, no padding).
The seed starts at a fixed base per fixture and is increased until the
smallest greedy margin is >= 1e-3 (so float rounding cannot flip a token) and
the greedy continuation has >= 10 distinct tokens (random models, tied ones
especially, tend to repeat one token, which would exercise the KV cache
poorly); the seed used is in the file's metadata.

Checks done before anything is kept: the greedy tokens equal the argmax of a
full no-cache forward pass; the weights, re-read with a small numpy-only
safetensors parser, equal the rounded weights bit for bit; an independent
numpy float64 forward pass reproduces logits and hidden states to 1e-4; the
directory reloads with from_pretrained and reproduces the logits.

Reproduce (CPU is enough; the torch wheel pulls CUDA packages, unused here):
  python3 -m venv /tmp/fixvenv && \\
  /tmp/fixvenv/bin/pip install -r tools/requirements-fixtures.txt && \\
  /tmp/fixvenv/bin/python tools/make_policy_fixtures.py
"""

import dataclasses
import json
import math
import os
import shutil
import struct
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import numpy as np
import safetensors
import safetensors.torch
import torch
import transformers

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_ROOT = REPO_ROOT / "tests" / "fixtures" / "policy"

NUM_LAYERS = 8
VOCAB = 512
MAX_POS = 256
INIT_STD = 0.1
NORM_STD = 0.1
BIAS_STD = 0.05
PROMPT_LEN = 12
GREEDY_PROMPT_LEN = 8
GREEDY_NEW_TOKENS = 32
BATCH = 3
BATCH_LEN = 10
MIN_MARGIN = 1e-3
MIN_DISTINCT_GREEDY = 10
MAX_SEED_TRIES = 100
NUMPY_ATOL = 1e-4
NUMPY_RTOL = 1e-4
HIDDEN_NOTE = (
    "hidden_states[0] is the embedding output, hidden_states[i] the output of decoder "
    "layer i-1, and hidden_states[L] is after the final norm (HF output_hidden_states)"
)


@dataclasses.dataclass(frozen=True)
class FixtureSpec:
    name: str
    config_cls: type
    model_cls: type
    config_kwargs: dict
    storage_dtype: torch.dtype
    base_seed: int
    max_shard_size: int | None = None  # bytes; None writes a single file
    expected_shards: int = 1


def common_config() -> dict:
    return dict(
        vocab_size=VOCAB,
        num_hidden_layers=NUM_LAYERS,
        max_position_embeddings=MAX_POS,
        initializer_range=INIT_STD,
        hidden_act="silu",
        attention_dropout=0.0,
        use_cache=True,
    )


SPECS = [
    FixtureSpec(
        name="llama",
        config_cls=transformers.LlamaConfig,
        model_cls=transformers.LlamaForCausalLM,
        config_kwargs=dict(
            common_config(),
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=160,
            rms_norm_eps=1e-5,
            rope_theta=500000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
            attention_bias=False,
            mlp_bias=False,
            tie_word_embeddings=False,
            bos_token_id=1,
            eos_token_id=2,
        ),
        storage_dtype=torch.bfloat16,
        base_seed=1000,
        max_shard_size=600_000,
        expected_shards=2,
    ),
    FixtureSpec(
        name="qwen2",
        config_cls=transformers.Qwen2Config,
        model_cls=transformers.Qwen2ForCausalLM,
        config_kwargs=dict(
            common_config(),
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            use_sliding_window=False,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=2,
        ),
        storage_dtype=torch.float32,
        base_seed=2000,
    ),
    FixtureSpec(
        name="qwen3",
        config_cls=transformers.Qwen3Config,
        model_cls=transformers.Qwen3ForCausalLM,
        config_kwargs=dict(
            common_config(),
            hidden_size=64,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,
            intermediate_size=128,
            rms_norm_eps=1e-6,
            rope_theta=1000000.0,
            attention_bias=False,
            use_sliding_window=False,
            tie_word_embeddings=True,
            bos_token_id=1,
            eos_token_id=2,
        ),
        storage_dtype=torch.float16,
        base_seed=3000,
    ),
]


# ---------------------------------------------------------------------------
# Model construction
# ---------------------------------------------------------------------------


def init_weights(model: torch.nn.Module, gen: torch.Generator, storage_dtype: torch.dtype) -> None:
    """Fill every parameter from `gen`, then round it to the storage dtype."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=torch.float32)
            if name.endswith("norm.weight"):
                value = 1.0 + NORM_STD * noise
            elif name.endswith(".bias"):
                value = BIAS_STD * noise
            else:
                value = INIT_STD * noise
            param.copy_(value.to(storage_dtype).to(torch.float32))


def build_model(spec: FixtureSpec, gen: torch.Generator) -> torch.nn.Module:
    config = spec.config_cls(**spec.config_kwargs)
    config._attn_implementation = "eager"
    model = spec.model_cls(config).to(torch.float32).eval()
    init_weights(model, gen, spec.storage_dtype)
    return model


def random_ids(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=gen, dtype=torch.int64)


# ---------------------------------------------------------------------------
# Reference outputs
# ---------------------------------------------------------------------------


@torch.no_grad()
def forward_outputs(model, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(ids[None], output_hidden_states=True, use_cache=False)
    logits = out.logits[0].float().contiguous()
    hidden = torch.stack([h[0] for h in out.hidden_states]).float().contiguous()
    return logits, hidden


@torch.no_grad()
def greedy(model, prompt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy continuation via generate(), margins from a full no-cache pass."""
    gen_config = transformers.GenerationConfig(
        do_sample=False,
        max_new_tokens=GREEDY_NEW_TOKENS,
        eos_token_id=None,
        pad_token_id=0,
        bos_token_id=None,
    )
    out = model.generate(
        prompt[None],
        attention_mask=torch.ones(1, prompt.numel(), dtype=torch.int64),
        generation_config=gen_config,
    )
    full = out[0]
    assert full.numel() == prompt.numel() + GREEDY_NEW_TOKENS, full.shape
    assert torch.equal(full[: prompt.numel()], prompt)
    tokens = full[prompt.numel() :].clone()

    logits = model(full[None], use_cache=False).logits[0].float()
    step_logits = logits[prompt.numel() - 1 : -1]
    assert torch.equal(step_logits.argmax(-1), tokens), "generate() disagrees with full-pass argmax"
    top2 = step_logits.topk(2, dim=-1).values
    margin = (top2[:, 0] - top2[:, 1]).contiguous()
    return tokens, margin


@torch.no_grad()
def batch_last_logits(model, batch_ids: torch.Tensor) -> torch.Tensor:
    rows = [model(ids[None], use_cache=False).logits[0, -1].float() for ids in batch_ids]
    return torch.stack(rows).contiguous()


def make_reference(spec: FixtureSpec, seed: int):
    """Build the model for `seed` and compute all reference tensors."""
    gen = torch.Generator().manual_seed(seed)
    model = build_model(spec, gen)
    input_ids = random_ids(gen, PROMPT_LEN)
    greedy_prompt = random_ids(gen, GREEDY_PROMPT_LEN)
    batch_ids = random_ids(gen, BATCH, BATCH_LEN)

    logits, hidden = forward_outputs(model, input_ids)
    tokens, margin = greedy(model, greedy_prompt)
    ref = {
        "input_ids": input_ids,
        "logits": logits,
        "hidden_states": hidden,
        "greedy_prompt": greedy_prompt,
        "greedy_tokens": tokens,
        "greedy_margin": margin,
        "batch_ids": batch_ids,
        "batch_last_logits": batch_last_logits(model, batch_ids),
    }
    return model, ref


def find_seed(spec: FixtureSpec):
    for seed in range(spec.base_seed, spec.base_seed + MAX_SEED_TRIES):
        model, ref = make_reference(spec, seed)
        min_margin = ref["greedy_margin"].min().item()
        distinct = len(set(ref["greedy_tokens"].tolist()))
        print(f"  {spec.name}: seed {seed} min greedy margin {min_margin:.5f}, {distinct} distinct tokens")
        if min_margin >= MIN_MARGIN and distinct >= MIN_DISTINCT_GREEDY:
            return seed, model, ref
    sys.exit(f"{spec.name}: no seed in {MAX_SEED_TRIES} tries meets the greedy margin and diversity bounds")


# ---------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def save_model(spec: FixtureSpec, model, out_dir: Path) -> None:
    stored = spec.model_cls(model.config)  # a copy, so `model` stays float32
    stored.load_state_dict(model.state_dict())
    stored = stored.to(spec.storage_dtype)
    kwargs = {"safe_serialization": True}
    if spec.max_shard_size is not None:
        kwargs["max_shard_size"] = spec.max_shard_size
    stored.save_pretrained(out_dir, **kwargs)

    config = json.loads((out_dir / "config.json").read_text())
    assert config["torch_dtype"] == dtype_name(spec.storage_dtype), config["torch_dtype"]
    shards = sorted(out_dir.glob("*.safetensors"))
    assert len(shards) == spec.expected_shards, shards
    assert (out_dir / "model.safetensors.index.json").exists() == (spec.expected_shards > 1)


def save_reference(spec: FixtureSpec, seed: int, ref: dict, out_dir: Path) -> None:
    metadata = {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "safetensors_version": safetensors.__version__,
        "seed": str(seed),
        "model_class": spec.model_cls.__name__,
        "storage_dtype": dtype_name(spec.storage_dtype),
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "hidden_states_note": HIDDEN_NOTE,
        "note": "hidden_states[L] is after the final norm",
        "greedy_note": f"greedy_tokens: {GREEDY_NEW_TOKENS} argmax tokens, no eos stopping",
        "batch_note": "batch_last_logits: each prompt run alone, no padding",
    }
    tensors = {k: v.contiguous() for k, v in ref.items()}
    path = out_dir / "reference.safetensors"
    safetensors.torch.save_file(tensors, str(path), metadata=metadata)
    sort_metadata_in_place(path)


def sort_metadata_in_place(path: Path) -> None:
    """Sort the header's __metadata__ keys (the writer emits them in hash order),
    so that running the script twice gives byte-identical files."""
    raw = bytearray(path.read_bytes())
    (header_len,) = struct.unpack("<Q", raw[:8])
    text = raw[8 : 8 + header_len].decode()
    stripped = text.rstrip(" ")  # the writer pads the header with spaces for alignment
    header = json.loads(stripped)
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    new_text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    assert len(new_text) == len(stripped), "header changed length"
    raw[8 : 8 + len(new_text)] = new_text.encode()
    path.write_bytes(bytes(raw))


# ---------------------------------------------------------------------------
# Independent checks: numpy-only safetensors reader and forward pass
# ---------------------------------------------------------------------------

NP_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors_np(path: Path) -> dict[str, np.ndarray]:
    """Parse a safetensors file with struct/json/numpy only; floats come back as float64."""
    raw = path.read_bytes()
    (header_len,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + header_len])
    header.pop("__metadata__", None)
    data = raw[8 + header_len :]
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        chunk = data[begin:end]
        if info["dtype"] == "BF16":
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        else:
            arr = np.frombuffer(chunk, dtype=np.dtype(NP_DTYPES[info["dtype"]]).newbyteorder("<"))
        arr = arr.reshape(info["shape"])
        out[name] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr.copy()
    return out


def read_model_weights_np(model_dir: Path) -> dict[str, np.ndarray]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
    else:
        files = ["model.safetensors"]
    weights = {}
    for f in files:
        weights.update(read_safetensors_np(model_dir / f))
    if index.exists():
        assert set(weights) == set(weight_map), "index weight_map does not match shard contents"
    return weights


def np_rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def np_inv_freq(cfg: dict, head_dim: int) -> np.ndarray:
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    scaling = cfg.get("rope_scaling")
    if not scaling:
        return inv_freq
    assert scaling["rope_type"] == "llama3", scaling
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_ctx = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv_freq
    out = np.where(wavelen > old_ctx / low, inv_freq / factor, inv_freq)
    smooth = (old_ctx / wavelen - low) / (high - low)
    medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
    return np.where(medium, (1 - smooth) * inv_freq / factor + smooth * inv_freq, out)


def np_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x: [T, heads, D]; HF rotate-half layout (pairs i and i + D/2)."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def np_attention(x, w, p, cfg, head_dim, cos, sin):
    t = x.shape[0]
    n_heads, n_kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def proj(kind, heads):
        y = x @ w[f"{p}.self_attn.{kind}_proj.weight"].T
        bias = w.get(f"{p}.self_attn.{kind}_proj.bias")
        return (y if bias is None else y + bias).reshape(t, heads, head_dim)

    q, k, v = proj("q", n_heads), proj("k", n_kv), proj("v", n_kv)
    if f"{p}.self_attn.q_norm.weight" in w:
        q = np_rms_norm(q, w[f"{p}.self_attn.q_norm.weight"], cfg["rms_norm_eps"])
        k = np_rms_norm(k, w[f"{p}.self_attn.k_norm.weight"], cfg["rms_norm_eps"])
    q, k = np_rope(q, cos, sin), np_rope(k, cos, sin)
    group = n_heads // n_kv
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
    scores = np.where(np.tril(np.ones((t, t), dtype=bool)), scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    ctx = np.einsum("hqk,khd->qhd", probs, v).reshape(t, n_heads * head_dim)
    return ctx @ w[f"{p}.self_attn.o_proj.weight"].T


def np_mlp(x, w, p):
    gate = x @ w[f"{p}.mlp.gate_proj.weight"].T
    up = x @ w[f"{p}.mlp.up_proj.weight"].T
    return (gate / (1 + np.exp(-gate)) * up) @ w[f"{p}.mlp.down_proj.weight"].T


def np_forward(w: dict, cfg: dict, ids: np.ndarray):
    """Plain float64 decoder forward; returns (logits, hidden_states) like HF."""
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    angles = np.arange(len(ids))[:, None] * np_inv_freq(cfg, head_dim)[None, :]
    angles = np.concatenate([angles, angles], axis=-1)
    cos, sin = np.cos(angles), np.sin(angles)
    eps = cfg["rms_norm_eps"]

    h = w["model.embed_tokens.weight"][ids]
    hidden = [h]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}"
        h = h + np_attention(np_rms_norm(h, w[f"{p}.input_layernorm.weight"], eps), w, p, cfg, head_dim, cos, sin)
        h = h + np_mlp(np_rms_norm(h, w[f"{p}.post_attention_layernorm.weight"], eps), w, p)
        hidden.append(h)
    hidden[-1] = np_rms_norm(h, w["model.norm.weight"], eps)
    lm_head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return hidden[-1] @ lm_head.T, np.stack(hidden)


def check_weights_bitexact(model, weights_np: dict, spec: FixtureSpec) -> None:
    state = model.state_dict()
    expected = set(state)
    if spec.config_kwargs["tie_word_embeddings"]:
        expected.discard("lm_head.weight")
    assert set(weights_np) == expected, sorted(set(weights_np) ^ expected)
    for name, arr in weights_np.items():
        ref = state[name].double().numpy()
        assert np.array_equal(arr, ref), f"{name}: stored weights differ from the rounded weights"


def check_fixture(spec: FixtureSpec, model, ref: dict, out_dir: Path) -> None:
    weights = read_model_weights_np(out_dir)
    check_weights_bitexact(model, weights, spec)

    cfg = json.loads((out_dir / "config.json").read_text())
    saved_ref = read_safetensors_np(out_dir / "reference.safetensors")
    for name, tensor in ref.items():
        assert np.array_equal(saved_ref[name], tensor.numpy()), f"reference {name} did not round-trip"

    np_logits, np_hidden = np_forward(weights, cfg, saved_ref["input_ids"])
    logit_err = np.abs(np_logits - saved_ref["logits"]).max()
    hidden_err = np.abs(np_hidden - saved_ref["hidden_states"]).max()
    assert np.allclose(np_logits, saved_ref["logits"], rtol=NUMPY_RTOL, atol=NUMPY_ATOL), logit_err
    assert np.allclose(np_hidden, saved_ref["hidden_states"], rtol=NUMPY_RTOL, atol=NUMPY_ATOL), hidden_err
    for row, ids in enumerate(saved_ref["batch_ids"]):
        last, _ = np_forward(weights, cfg, ids)
        assert np.allclose(last[-1], saved_ref["batch_last_logits"][row], rtol=NUMPY_RTOL, atol=NUMPY_ATOL)

    reloaded = spec.model_cls.from_pretrained(out_dir, torch_dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        re_logits = reloaded(ref["input_ids"][None], use_cache=False).logits[0]
    reload_err = (re_logits - ref["logits"]).abs().max().item()
    assert reload_err <= 1e-6, reload_err
    print(f"  {spec.name}: numpy forward max |err| logits {logit_err:.2e} hidden {hidden_err:.2e}; "
          f"from_pretrained reload max |err| {reload_err:.2e}")


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------


def build_fixture(spec: FixtureSpec) -> dict:
    out_dir = OUT_ROOT / spec.name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)

    seed, model, ref = find_seed(spec)
    save_model(spec, model, out_dir)
    save_reference(spec, seed, ref, out_dir)
    check_fixture(spec, model, ref, out_dir)
    return {"seed": seed, "min_margin": ref["greedy_margin"].min().item()}


def print_sizes() -> None:
    total = 0
    for path in sorted(OUT_ROOT.rglob("*")):
        if path.is_file():
            size = path.stat().st_size
            total += size
            print(f"  {size:>10,d}  {path.relative_to(REPO_ROOT)}")
    print(f"  {total:>10,d}  total")


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)  # fixed reduction order for reproducible output
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    summary = {}
    for spec in SPECS:
        print(f"{spec.name}:")
        summary[spec.name] = build_fixture(spec)
    print("sizes:")
    print_sizes()
    for name, info in summary.items():
        print(f"{name}: seed {info['seed']}, min greedy margin {info['min_margin']:.5f}")


if __name__ == "__main__":
    main()
