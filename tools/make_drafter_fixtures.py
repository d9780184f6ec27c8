#!/usr/bin/env python3
"""Generate the small random-weight EAGLE-3 drafter fixtures in tests/fixtures/drafter/.

Each fixture is a speculators-format checkpoint directory written by the
`speculators` package's own Eagle3DraftModel.save_pretrained (config.json with
speculators_model_type "eagle3", model.safetensors with layers.0.* names, float32)
plus reference.safetensors holding outputs computed by the package's own
Eagle3DraftModel.forward (two training-time-test steps).  CI never runs this
script: its outputs are committed.  Run it again only to change the fixtures;
a rerun reproduces every file byte for byte.

The verifier (target) is the tiny Llama fixture tests/fixtures/policy/llama
(hidden 64, 8 layers, vocab 512, bf16).  The drafter's token embedding is that
model's model.embed_tokens.weight (converted to float32); it is loaded with the
package's own load_verifier_weights() and is NOT stored in the drafter
checkpoint (the format lists embed_tokens.weight as optional on load).

Fixtures (both: hidden 64, 4 heads, 2 kv heads, head_dim 16, intermediate 128,
rms_norm_eps 1e-5, rope theta 50000 (default rope, no scaling), 1 draft layer,
target vocab 512, draft vocab 96, aux layer ids [2, 4, 5], full causal
attention):
  spec_default  the Eagle3SpeculatorConfig defaults for the four flags:
                norm_before_residual, norm_before_fc, fc_norm, norm_output all false
  spec_variant  norm_before_residual true, norm_before_fc true, norm_output true,
                fc_norm false (= the speculators 0.9.0 training-CLI defaults for
                eagle3; fc_norm is mutually exclusive with norm_before_fc)

Every parameter is re-initialised from a seeded generator (matrices normal
std 0.1, RMSNorm weights 1 + 0.1*randn, including the draft lm_head and the
norms); the vocabulary mapping is a seeded random subset of 96 target ids.
See tests/fixtures/drafter/README.md for the exact semantics of every
reference tensor.

Checks done before anything is kept: the hook-captured logits' argmax equals
the draft tokens returned by forward(); the eager-attention reference matches
the sdpa and (default) simple_flex_attention code paths of the package; an
independent numpy float64 implementation of the documented semantics, reading
the written files with a numpy-only safetensors parser, reproduces every
reference tensor to 1e-4; the directory reloads with
Eagle3DraftModel.from_pretrained (which pulls the embedding from the verifier)
and reproduces the references bit for bit.

Reproduce (CPU is enough; the torch wheel pulls CUDA packages, unused here).
Run from anywhere; the script works relative to the repository root:
  python3 -m venv /tmp/specvenv && \\
  /tmp/specvenv/bin/pip install -r tools/requirements-drafter-fixtures.txt && \\
  /tmp/specvenv/bin/python tools/make_drafter_fixtures.py
"""

import dataclasses
import importlib.metadata
import json
import os
import shutil
import struct
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np
import safetensors
import safetensors.torch
import torch
import transformers

from speculators.config import SpeculatorsConfig, VerifierConfig
from speculators.models.eagle3 import Eagle3DraftModel, Eagle3SpeculatorConfig
from speculators.proposals.greedy import GreedyTokenProposalConfig

REPO_ROOT = Path(__file__).resolve().parent.parent
OUT_ROOT = REPO_ROOT / "tests" / "fixtures" / "drafter"
# Stored in the drafter's config (speculators_config.verifier.name_or_path) and
# resolved relative to the current directory by speculators' loaders, so
# main() changes to the repository root first.
VERIFIER_REL = "tests/fixtures/policy/llama"
SPECULATORS_VERSION = importlib.metadata.version("speculators")

HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 16
INTERMEDIATE = 128
RMS_EPS = 1e-5
ROPE_THETA = 50000.0
MAX_POS = 256
TARGET_VOCAB = 512
DRAFT_VOCAB = 96
AUX_LAYER_IDS = [2, 4, 5]  # HF hidden_states indices {2, L//2, L-3} for L = 8
SPECULATIVE_TOKENS = 3  # only written to speculators_config.proposal_methods
T = 10
TTT_STEPS = 2
INIT_STD = 0.1
NORM_STD = 0.1
CHUNK_SCALES = (0.5, 1.0, 2.0)  # scale of the low / mid / high feature chunk
NUMPY_ATOL = 1e-4
NUMPY_RTOL = 1e-4
CROSS_ATOL = 2e-5  # eager vs sdpa vs flex attention, all float32


@dataclasses.dataclass(frozen=True)
class FixtureSpec:
    name: str
    seed: int
    norm_before_residual: bool
    norm_before_fc: bool
    fc_norm: bool
    norm_output: bool


SPECS = [
    FixtureSpec("spec_default", seed=1001, norm_before_residual=False,
                norm_before_fc=False, fc_norm=False, norm_output=False),
    FixtureSpec("spec_variant", seed=2002, norm_before_residual=True,
                norm_before_fc=True, fc_norm=False, norm_output=True),
]

# The four flags as the package resolves them when a config omits them
# (Eagle3SpeculatorConfig field defaults); asserted below so that a package
# upgrade that changes them is noticed.
CONFIG_FLAG_DEFAULTS = dict(norm_before_residual=False, norm_before_fc=False,
                            fc_norm=False, norm_output=False)


# ---------------------------------------------------------------------------
# Model construction
# ---------------------------------------------------------------------------

def layer_config(attn_impl: str) -> transformers.LlamaConfig:
    cfg = transformers.LlamaConfig(
        vocab_size=TARGET_VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=1,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        hidden_act="silu",
        max_position_embeddings=MAX_POS,
        initializer_range=INIT_STD,
        rms_norm_eps=RMS_EPS,
        rope_theta=ROPE_THETA,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
    )
    cfg._attn_implementation = attn_impl  # noqa: SLF001
    return cfg


def speculator_config(spec: FixtureSpec, attn_impl: str) -> Eagle3SpeculatorConfig:
    return Eagle3SpeculatorConfig(
        transformer_layer_config=layer_config(attn_impl),
        draft_vocab_size=DRAFT_VOCAB,
        eagle_aux_hidden_state_layer_ids=list(AUX_LAYER_IDS),
        norm_before_residual=spec.norm_before_residual,
        norm_before_fc=spec.norm_before_fc,
        fc_norm=spec.fc_norm,
        norm_output=spec.norm_output,
        speculators_config=SpeculatorsConfig(
            algorithm="eagle3",
            proposal_methods=[GreedyTokenProposalConfig(speculative_tokens=SPECULATIVE_TOKENS)],
            default_proposal_method="greedy",
            verifier=VerifierConfig.from_pretrained(VERIFIER_REL),
        ),
    )


def vocab_mapping(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    selected = torch.randperm(TARGET_VOCAB, generator=gen)[:DRAFT_VOCAB].sort().values
    t2d = torch.zeros(TARGET_VOCAB, dtype=torch.bool)
    t2d[selected] = True
    d2t = (selected - torch.arange(DRAFT_VOCAB)).to(torch.int64)
    return selected, t2d, d2t


# Parameters that are never saved (training-only) or come from the verifier.
NOT_REINITIALISED = {"embed_tokens.weight", "verifier_lm_head.weight", "verifier_norm.weight"}


def init_weights(model: torch.nn.Module, gen: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name in NOT_REINITIALISED:
                continue
            if p.dim() == 1:  # RMSNorm weights
                p.copy_(1.0 + NORM_STD * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(INIT_STD * torch.randn(p.shape, generator=gen))


def build_model(spec: FixtureSpec, attn_impl: str = "eager") -> tuple[Eagle3DraftModel, torch.Tensor]:
    gen = torch.Generator().manual_seed(spec.seed)
    model = Eagle3DraftModel(speculator_config(spec, attn_impl))
    selected, t2d, d2t = vocab_mapping(gen)
    model.load_vocab_mappings(t2d, d2t)
    # The package's own verifier loader: embed_tokens (all rows), lm_head and
    # verifier_lm_head (rows selected by t2d), verifier_norm.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.load_verifier_weights()
    init_weights(model, gen)  # lm_head is overwritten with random values here
    model.eval()
    return model, selected


def make_inputs(spec: FixtureSpec) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(spec.seed + 1)
    chunks = [s * torch.randn(T, HIDDEN, generator=gen) for s in CHUNK_SCALES]
    hidden_in = torch.cat(chunks, dim=-1)
    input_ids = torch.randint(0, TARGET_VOCAB, (T,), generator=gen, dtype=torch.int64)
    return {"hidden_in": hidden_in, "input_ids": input_ids}


# ---------------------------------------------------------------------------
# Running the package's forward with hooks
# ---------------------------------------------------------------------------

def run_forward(model: Eagle3DraftModel, inputs: dict, pad_to: int | None = None) -> dict[str, torch.Tensor]:
    """Eagle3DraftModel.forward with TTT_STEPS steps (no loss); hooks record per
    step: token ids fed to embed_tokens, position_ids given to rotary_emb, the
    decoder layer output (pre-final-norm), the final norm output and the logits.

    pad_to: append padding rows (zero features, token 0, document id -1, the
    package's padding convention) up to this length and return only the first
    T rows; needed by the simple_flex_attention path, whose block-mask
    extension assumes the sequence length is a multiple of the 128 block size.
    """
    hidden = inputs["hidden_in"].unsqueeze(0)
    ids = inputs["input_ids"].unsqueeze(0)
    doc = torch.zeros(1, T, dtype=torch.long)
    if pad_to is not None:
        n = pad_to - T
        hidden = torch.cat([hidden, hidden.new_zeros(1, n, hidden.shape[-1])], dim=1)
        ids = torch.cat([ids, ids.new_zeros(1, n)], dim=1)
        doc = torch.cat([doc, doc.new_full((1, n), -1)], dim=1)
    rec: dict[str, list] = {"ids": [], "pos": [], "layer": [], "norm": [], "logits": []}
    handles = [
        model.embed_tokens.register_forward_hook(
            lambda m, a, o: rec["ids"].append(a[0].detach().clone())),
        model.rotary_emb.register_forward_hook(
            lambda m, a, o: rec["pos"].append(a[1].detach().clone())),
        model.layers[0].register_forward_hook(
            lambda m, a, o: rec["layer"].append(o.detach().clone())),
        model.norm.register_forward_hook(
            lambda m, a, o: rec["norm"].append(o.detach().clone())),
        model.lm_head.register_forward_hook(
            lambda m, a, o: rec["logits"].append(o.detach().clone())),
    ]
    try:
        with torch.no_grad():
            draft_tokens = model(
                hidden_states=hidden,
                input_ids=ids,
                document_ids=doc,
                position_ids=None,  # the package default: 1 + arange(T)
                ttt_steps=TTT_STEPS,
            )
    finally:
        for h in handles:
            h.remove()
    for key, vals in rec.items():
        assert len(vals) == TTT_STEPS, (key, len(vals))
    for step in range(TTT_STEPS):
        assert torch.equal(draft_tokens[step][0], rec["logits"][step][0].argmax(-1))
    out = {}
    for step in range(TTT_STEPS):
        layer = rec["layer"][step][0, :T]
        normed = rec["norm"][step][0, :T]
        out[f"step{step}_ids"] = rec["ids"][step][0, :T].to(torch.int64)
        out[f"step{step}_positions"] = rec["pos"][step][0, :T].to(torch.int64)
        out[f"step{step}_prenorm"] = layer
        out[f"step{step}_postnorm"] = normed
        out[f"step{step}_feedback"] = normed if model.config.norm_output else layer
        out[f"step{step}_logits"] = rec["logits"][step][0, :T]
        out[f"step{step}_draft_tokens"] = draft_tokens[step][0, :T].to(torch.int64)
    return out


def reference_tensors(inputs: dict, run: dict, selected: torch.Tensor) -> dict[str, torch.Tensor]:
    assert torch.equal(run["step0_ids"], inputs["input_ids"])
    ref = {
        "hidden_in": inputs["hidden_in"],
        "input_ids": inputs["input_ids"],
        "positions": run["step0_positions"],
        "step0_prenorm": run["step0_prenorm"],
        "step0_feedback": run["step0_feedback"],
        "step0_logits": run["step0_logits"],
        "step0_draft_tokens": selected[run["step0_draft_tokens"]],
        "step1_ids": run["step1_ids"],
        "step1_positions": run["step1_positions"],
        "step1_prenorm": run["step1_prenorm"],
        "step1_logits": run["step1_logits"],
        "selected_target_ids": selected.to(torch.int64),
    }
    return {k: v.detach().clone().contiguous() for k, v in ref.items()}


# ---------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------

def save_model(model: Eagle3DraftModel, out_dir: Path) -> None:
    # The package's save_pretrained drops verifier_lm_head / verifier_norm
    # (_keys_to_ignore_on_save); the embedding is left out here by passing a
    # state dict without it (the loader takes it from the verifier).
    state = {k: v for k, v in model.state_dict().items() if k != "embed_tokens.weight"}
    model.save_pretrained(out_dir, state_dict=state, safe_serialization=True)
    files = sorted(p.name for p in out_dir.iterdir())
    assert files == ["config.json", "config.py", "model.safetensors"], files
    # config.py is a verbatim copy of the package's
    # speculators/models/eagle3/config.py that save_pretrained adds for the
    # Hugging Face auto_map (trust_remote_code) mechanism; speculators' and
    # vLLM's loaders do not read it, so it is not kept.  config.json still
    # names it under "auto_map".
    (out_dir / "config.py").unlink()


def save_reference(spec: FixtureSpec, ref: dict, out_dir: Path) -> None:
    metadata = {
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "speculators_version": SPECULATORS_VERSION,
        "safetensors_version": safetensors.__version__,
        "seed": str(spec.seed),
        "model_class": "speculators.models.eagle3.Eagle3DraftModel",
        "compute_dtype": "float32",
        "attn_implementation": "eager",
        "positions_note": "step-0 RoPE positions are 1..T (speculators default); step k uses +k",
        "feedback_note": ("step0_feedback is the state fed to step 1: the post-final-norm "
                          "state when norm_output is true, else the pre-norm layer output"),
        "step1_ids_note": "step1_ids[p] = input_ids[p+1], last row 0 (speculators teacher forcing)",
        "attention_note": ("step 1 row p attends to step-0 keys 0..p and to its own step-1 key"),
        "flags": json.dumps(dict(norm_before_residual=spec.norm_before_residual,
                                 norm_before_fc=spec.norm_before_fc, fc_norm=spec.fc_norm,
                                 norm_output=spec.norm_output), sort_keys=True),
    }
    path = out_dir / "reference.safetensors"
    safetensors.torch.save_file(ref, str(path), metadata=metadata)
    sort_metadata_in_place(path)


def sort_metadata_in_place(path: Path) -> None:
    """Sort the header's __metadata__ keys, so reruns give byte-identical files."""
    raw = bytearray(path.read_bytes())
    (header_len,) = struct.unpack("<Q", raw[:8])
    text = raw[8 : 8 + header_len].decode()
    stripped = text.rstrip(" ")
    header = json.loads(stripped)
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    new_text = json.dumps(header, separators=(",", ":"), ensure_ascii=False)
    assert len(new_text) == len(stripped), "header changed length"
    raw[8 : 8 + len(new_text)] = new_text.encode()
    path.write_bytes(bytes(raw))


# ---------------------------------------------------------------------------
# Independent checks: numpy-only safetensors reader and float64 forward pass
# ---------------------------------------------------------------------------

NP_DTYPES = {"F32": np.float32, "I64": np.int64, "BOOL": np.bool_}


def read_safetensors_np(path: Path) -> dict[str, np.ndarray]:
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
            u16 = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            arr = u16.view(np.float32)
        else:
            arr = np.frombuffer(chunk, dtype=NP_DTYPES[info["dtype"]])
        arr = arr.reshape(info["shape"])
        out[name] = arr.astype(np.float64) if arr.dtype.kind == "f" else arr.copy()
    return out


def np_rms(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + RMS_EPS) * w


def np_rope(x: np.ndarray, pos: np.ndarray, theta: float = ROPE_THETA) -> np.ndarray:
    """x [T, heads, hd]; NeoX rotate-half with cos/sin = concat(freqs, freqs)."""
    inv_freq = 1.0 / theta ** (np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    freqs = pos[:, None].astype(np.float64) * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    half = HEAD_DIM // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rot * sin


def np_forward(w: dict, embed: np.ndarray, flags: FixtureSpec, hidden_in: np.ndarray,
               input_ids: np.ndarray, theta: float = ROPE_THETA, swap_concat: bool = False,
               step1_attention: str = "diagonal", first_position: int = 1) -> dict[str, np.ndarray]:
    """The semantics documented in tests/fixtures/drafter/README.md, float64.

    The keyword arguments select deliberately wrong alternatives, used only to
    check that the fixtures tell them apart: another rope theta, the
    [hidden | embedding] concatenation order, and for step 1 "causal" (row p
    also sees the step-1 keys of rows < p) or "no_step0" (step-0 keys hidden).
    first_position: RoPE position of row 0 at step 0 (speculators: 1).
    """
    lp = "layers.0."
    x = hidden_in
    if flags.norm_before_fc:
        x = np_rms(x, w["input_norm.weight"])
    if flags.fc_norm:
        x = np.concatenate([np_rms(c, w[f"fc_norm.{i}.weight"])
                            for i, c in enumerate(np.split(x, 3, axis=-1))], axis=-1)
    state = x @ w["fc.weight"].T
    positions0 = np.arange(first_position, first_position + T)
    keys, values = [], []
    out = {}
    ids = input_ids
    group = HEADS // KV_HEADS
    for step in range(TTT_STEPS):
        e = np_rms(embed[ids], w[lp + "input_layernorm.weight"])
        hn = np_rms(state, w[lp + "hidden_norm.weight"])
        residual = hn if flags.norm_before_residual else state
        a = np.concatenate([hn, e] if swap_concat else [e, hn], axis=-1)  # embedding first
        q = (a @ w[lp + "self_attn.q_proj.weight"].T).reshape(T, HEADS, HEAD_DIM)
        k = (a @ w[lp + "self_attn.k_proj.weight"].T).reshape(T, KV_HEADS, HEAD_DIM)
        v = (a @ w[lp + "self_attn.v_proj.weight"].T).reshape(T, KV_HEADS, HEAD_DIM)
        pos = positions0 + step
        q, k = np_rope(q, pos, theta), np_rope(k, pos, theta)
        keys.append(k)
        values.append(v)
        attn = np.zeros((T, HEADS, HEAD_DIM))
        for p in range(T):
            for h in range(HEADS):
                g = h // group
                ks = [keys[0][: p + 1, g]] + [keys[j][p : p + 1, g] for j in range(1, step + 1)]
                vs = [values[0][: p + 1, g]] + [values[j][p : p + 1, g] for j in range(1, step + 1)]
                if step == 1 and step1_attention == "causal":
                    ks = [keys[0][: p + 1, g], keys[1][: p + 1, g]]
                    vs = [values[0][: p + 1, g], values[1][: p + 1, g]]
                elif step == 1 and step1_attention == "no_step0":
                    ks, vs = ks[1:], vs[1:]
                kk, vv = np.concatenate(ks), np.concatenate(vs)
                s = kk @ q[p, h] / np.sqrt(HEAD_DIM)
                s = np.exp(s - s.max())
                attn[p, h] = (s / s.sum()) @ vv
        h1 = residual + attn.reshape(T, HEADS * HEAD_DIM) @ w[lp + "self_attn.o_proj.weight"].T
        m = np_rms(h1, w[lp + "post_attention_layernorm.weight"])
        gate = m @ w[lp + "mlp.gate_proj.weight"].T
        up = m @ w[lp + "mlp.up_proj.weight"].T
        h2 = h1 + ((gate / (1.0 + np.exp(-gate))) * up) @ w[lp + "mlp.down_proj.weight"].T
        normed = np_rms(h2, w["norm.weight"])
        out[f"step{step}_prenorm"] = h2
        out[f"step{step}_logits"] = normed @ w["lm_head.weight"].T
        if step == 0:
            out["step0_feedback"] = normed if flags.norm_output else h2
        state = normed if flags.norm_output else h2
        # speculators teacher forcing: next step's token at row p is input_ids[p+step+1]
        ids = np.concatenate([input_ids[step + 1 :], np.zeros(step + 1, dtype=input_ids.dtype)])
        out[f"step{step + 1}_ids"] = ids
    return out


def verifier_embedding_np() -> np.ndarray:
    vdir = REPO_ROOT / VERIFIER_REL
    index = json.loads((vdir / "model.safetensors.index.json").read_text())
    shard = index["weight_map"]["model.embed_tokens.weight"]
    return read_safetensors_np(vdir / shard)["model.embed_tokens.weight"]


def expected_weight_shapes(spec: FixtureSpec) -> dict[str, list[int]]:
    lp = "layers.0."
    shapes = {
        "d2t": [DRAFT_VOCAB],
        "t2d": [TARGET_VOCAB],
        "fc.weight": [HIDDEN, 3 * HIDDEN],
        "lm_head.weight": [DRAFT_VOCAB, HIDDEN],
        "norm.weight": [HIDDEN],
        lp + "input_layernorm.weight": [HIDDEN],
        lp + "hidden_norm.weight": [HIDDEN],
        lp + "post_attention_layernorm.weight": [HIDDEN],
        lp + "self_attn.q_proj.weight": [HEADS * HEAD_DIM, 2 * HIDDEN],
        lp + "self_attn.k_proj.weight": [KV_HEADS * HEAD_DIM, 2 * HIDDEN],
        lp + "self_attn.v_proj.weight": [KV_HEADS * HEAD_DIM, 2 * HIDDEN],
        lp + "self_attn.o_proj.weight": [HIDDEN, HEADS * HEAD_DIM],
        lp + "mlp.gate_proj.weight": [INTERMEDIATE, HIDDEN],
        lp + "mlp.up_proj.weight": [INTERMEDIATE, HIDDEN],
        lp + "mlp.down_proj.weight": [HIDDEN, INTERMEDIATE],
    }
    if spec.norm_before_fc:
        shapes["input_norm.weight"] = [3 * HIDDEN]
    if spec.fc_norm:
        for i in range(3):
            shapes[f"fc_norm.{i}.weight"] = [HIDDEN]
    return shapes


def check_files(spec: FixtureSpec, model: Eagle3DraftModel, ref: dict, out_dir: Path) -> None:
    # config.json
    cfg = json.loads((out_dir / "config.json").read_text())
    assert cfg["speculators_model_type"] == "eagle3"
    # save_pretrained writes the model class name (the config default would be
    # "Eagle3Speculator")
    assert cfg["architectures"] == ["Eagle3DraftModel"], cfg["architectures"]
    for flag in ("norm_before_residual", "norm_before_fc", "fc_norm", "norm_output"):
        assert cfg[flag] == getattr(spec, flag), flag
    assert cfg["draft_vocab_size"] == DRAFT_VOCAB
    assert cfg["eagle_aux_hidden_state_layer_ids"] == AUX_LAYER_IDS
    tl = cfg["transformer_layer_config"]
    assert tl["model_type"] == "llama" and tl["vocab_size"] == TARGET_VOCAB
    assert tl["rope_parameters"] == {"rope_theta": ROPE_THETA, "rope_type": "default"}, tl
    assert cfg["speculators_config"]["verifier"]["name_or_path"] == VERIFIER_REL

    # weights: names, shapes, dtypes, bit-exact against the in-memory model
    raw = (out_dir / "model.safetensors").read_bytes()
    (hlen,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + hlen])
    header.pop("__metadata__", None)
    shapes = {k: v["shape"] for k, v in header.items()}
    assert shapes == expected_weight_shapes(spec), shapes
    for k, v in header.items():
        want = {"d2t": "I64", "t2d": "BOOL"}.get(k, "F32")
        assert v["dtype"] == want, (k, v["dtype"])
    sd = model.state_dict()
    weights = read_safetensors_np(out_dir / "model.safetensors")
    for k, arr in weights.items():
        t = sd[k]
        if t.dtype == torch.float32:
            assert np.array_equal(arr, t.double().numpy()), k
        else:
            assert np.array_equal(arr, t.numpy()), k

    # vocabulary mapping semantics
    sel = ref["selected_target_ids"].numpy()
    assert np.array_equal(np.arange(DRAFT_VOCAB) + weights["d2t"], sel)
    assert np.array_equal(np.nonzero(weights["t2d"])[0], sel)

    # the embedding used by the model is the verifier's, converted to float32
    embed = verifier_embedding_np()
    assert np.array_equal(embed, model.embed_tokens.weight.double().numpy())

    # independent float64 forward over the files' contents
    ref_np = read_safetensors_np(out_dir / "reference.safetensors")
    mine = np_forward(weights, embed, spec, ref_np["hidden_in"], ref_np["input_ids"])
    assert np.array_equal(ref_np["positions"], np.arange(1, T + 1))
    assert np.array_equal(ref_np["step1_positions"], np.arange(2, T + 2))
    assert np.array_equal(mine["step1_ids"], ref_np["step1_ids"])
    for key in ("step0_prenorm", "step0_feedback", "step0_logits", "step1_prenorm", "step1_logits"):
        err = np.max(np.abs(mine[key] - ref_np[key]))
        assert np.allclose(mine[key], ref_np[key], atol=NUMPY_ATOL, rtol=NUMPY_RTOL), (key, err)
        print(f"    numpy float64 vs package {key}: max abs err {err:.2e}")
    draft0 = sel[np.argmax(ref_np["step0_logits"], axis=-1)]
    assert np.array_equal(draft0, ref_np["step0_draft_tokens"])
    check_discrimination(spec, weights, embed, ref_np)


MIN_DISCRIMINATION = 1e-2  # 100x the comparison tolerance


def check_discrimination(spec: FixtureSpec, weights: dict, embed: np.ndarray, ref_np: dict) -> None:
    """Each plausible implementation mistake must move some reference tensor by
    at least MIN_DISCRIMINATION, so a test at 1e-4 cannot pass by accident."""
    w = dict(weights)
    w.setdefault("input_norm.weight", np.ones(3 * HIDDEN))
    args = (ref_np["hidden_in"], ref_np["input_ids"])
    flip = dataclasses.replace
    alternatives = {
        "norm_before_residual flipped": (flip(spec, norm_before_residual=not spec.norm_before_residual), {}),
        "norm_before_fc flipped": (flip(spec, norm_before_fc=not spec.norm_before_fc), {}),
        "norm_output flipped": (flip(spec, norm_output=not spec.norm_output), {}),
        "rope theta 10000": (spec, {"theta": 10000.0}),
        "[hidden | embed] order": (spec, {"swap_concat": True}),
        "step 1 causal over step-1 keys": (spec, {"step1_attention": "causal"}),
        "step 1 without step-0 keys": (spec, {"step1_attention": "no_step0"}),
    }
    keys = ("step0_prenorm", "step0_logits", "step1_prenorm", "step1_logits")
    # RoPE only sees relative positions: 0-based positions (EAGLE's convention)
    # give the same outputs up to rounding.
    zero_based = np_forward(w, embed, spec, *args, first_position=0)
    shift_err = max(np.max(np.abs(zero_based[k] - ref_np[k])) for k in keys)
    assert shift_err <= NUMPY_ATOL, shift_err
    print(f"    positions 0..T-1 instead of 1..T: max abs change {shift_err:.2e}")
    for label, (flags, kwargs) in alternatives.items():
        alt = np_forward(w, embed, flags, *args, **kwargs)
        diff = max(np.max(np.abs(alt[k] - ref_np[k])) for k in keys)
        assert diff >= MIN_DISCRIMINATION, (label, diff)
        print(f"    alternative '{label}': max abs change {diff:.3f}")
    logits = np.sort(ref_np["step0_logits"], axis=-1)
    margin0 = np.min(logits[:, -1] - logits[:, -2])
    logits = np.sort(ref_np["step1_logits"], axis=-1)
    margin1 = np.min(logits[:, -1] - logits[:, -2])
    assert min(margin0, margin1) >= 1e-3, (margin0, margin1)  # argmax robust to rounding
    print(f"    min top1-top2 logit margin: step0 {margin0:.4f}, step1 {margin1:.4f}; "
          f"step0_prenorm std {ref_np['step0_prenorm'].std():.3f}, "
          f"step0_logits std {ref_np['step0_logits'].std():.3f}")


def check_other_attention_paths(spec: FixtureSpec, inputs: dict, eager_run: dict) -> None:
    for impl, pad_to in (("sdpa", None), ("simple_flex_attention", 128)):
        model, _ = build_model(spec, attn_impl=impl)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run = run_forward(model, inputs, pad_to=pad_to)
        if impl != "simple_flex_attention":  # padded rows change the teacher-forced last id
            assert torch.equal(run["step1_ids"], eager_run["step1_ids"])
        for key in ("step0_prenorm", "step0_logits", "step1_prenorm", "step1_logits"):
            err = (run[key] - eager_run[key]).abs().max().item()
            assert err <= CROSS_ATOL, (impl, key, err)
        print(f"    {impl} vs eager: max abs err "
              f"{max((run[k] - eager_run[k]).abs().max().item() for k in ('step1_prenorm', 'step1_logits')):.2e}")


def check_reload(spec: FixtureSpec, inputs: dict, ref: dict, out_dir: Path) -> None:
    """Eagle3DraftModel.from_pretrained on the written directory (embedding pulled
    from the verifier by the package) reproduces the references bit for bit."""
    config = Eagle3SpeculatorConfig.from_pretrained(out_dir)
    config.transformer_layer_config._attn_implementation = "eager"  # noqa: SLF001
    for flag, default in CONFIG_FLAG_DEFAULTS.items():
        assert Eagle3SpeculatorConfig.model_fields[flag].default == default, flag
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Eagle3DraftModel.from_pretrained(out_dir, config=config)
        # speculators 0.9.0 with transformers 5.x: a checkpoint without
        # embed_tokens.weight leaves that tensor as uninitialised memory after
        # from_pretrained, and load_verifier_weights() replaces it only if it
        # happens to contain a NaN (its "not loaded" sentinel), so the
        # embedding is garbage in some runs.  Force the verifier's embedding
        # with the package's own loader.
        model._load_verifier_weights(overwrite_embed_tokens=True)  # noqa: SLF001
    model.eval()
    assert np.array_equal(model.embed_tokens.weight.double().numpy(), verifier_embedding_np())
    assert model.config.eagle_aux_hidden_state_layer_ids == AUX_LAYER_IDS
    run = run_forward(model, inputs)
    for key in ("step0_prenorm", "step0_logits", "step1_ids", "step1_prenorm", "step1_logits"):
        assert torch.equal(run[key], ref[key]), key


# ---------------------------------------------------------------------------

def build_fixture(spec: FixtureSpec) -> None:
    out_dir = OUT_ROOT / spec.name
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    model, selected = build_model(spec)
    inputs = make_inputs(spec)
    run = run_forward(model, inputs)
    ref = reference_tensors(inputs, run, selected)
    save_model(model, out_dir)
    save_reference(spec, ref, out_dir)
    check_files(spec, model, ref, out_dir)
    check_other_attention_paths(spec, inputs, run)
    check_reload(spec, inputs, ref, out_dir)


def print_sizes() -> None:
    for sub in sorted(p for p in OUT_ROOT.iterdir() if p.is_dir()):
        total = 0
        for path in sorted(sub.rglob("*")):
            if path.is_file():
                size = path.stat().st_size
                total += size
                print(f"  {size:>10,d}  {path.relative_to(REPO_ROOT)}")
        print(f"  {total:>10,d}  {sub.relative_to(REPO_ROOT)} total")


def main() -> None:
    os.chdir(REPO_ROOT)  # the verifier path in the configs is repository-relative
    torch.manual_seed(0)
    torch.set_num_threads(1)  # fixed reduction order for reproducible output
    transformers.utils.logging.disable_progress_bar()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"speculators {SPECULATORS_VERSION}, safetensors {safetensors.__version__}")
    OUT_ROOT.mkdir(parents=True, exist_ok=True)
    for spec in SPECS:
        print(f"{spec.name}:")
        build_fixture(spec)
    print("sizes:")
    print_sizes()


if __name__ == "__main__":
    sys.exit(main())
