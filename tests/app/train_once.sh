#!/usr/bin/env bash
# The training path end to end through the CLI: `updraft pretrain --preset tiny` makes a policy
# with its tokenizer, `updraft train --once` trains an EAGLE-3 drafter on its rollouts; the
# drafter must load, keep greedy output identical (checked inside train --once) and reach
# tau >= 2 with a 4-token chain on held-out prompts (an untrained draft gives ~1).
# Resuming a finished pretraining run must be a no-op that still writes the model; the policy
# answers a text prompt through its tokenizer.
set -euo pipefail
bin=$1
# ctest runs another test beside this one: one thread each keeps both moving.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$bin" pretrain --preset tiny --out "$work/policy" --steps 240 --checkpoint-every 120 >"$work/pretrain.log" 2>&1 ||
  { cat "$work/pretrain.log"; exit 1; }
for f in config.json model.safetensors tokenizer.json tokenizer_config.json pretrain_report.json checkpoint/trainer_state.json; do
  [ -s "$work/policy/$f" ] || { echo "pretrain did not write $f"; exit 1; }
done
"$bin" pretrain --preset tiny --out "$work/policy" --steps 240 --resume >"$work/resume.log" 2>&1 ||
  { cat "$work/resume.log"; exit 1; }
grep -q "resuming from step 240" "$work/resume.log" || { echo "resume did not pick up the checkpoint"; cat "$work/resume.log"; exit 1; }
# Text prompts go through the policy's tokenizer and come back as text.
out=$("$bin" generate --model "$work/policy" --prompt $'Question: Tom has 3 apples. He buys 4 more. How many apples does Tom have now?\nAnswer:' --max-new-tokens 16)
grep -q '"output_text":"' <<<"$out" || { echo "no output text: $out"; exit 1; }
"$bin" train --once --model "$work/policy" --out "$work/draft" --prompts 96 --heldout-prompts 12 --max-new-tokens 40 \
  --draft-vocab 256 --steps 240 --ttt-steps 4 --lr 2e-3 --eval-every 0 >"$work/train.log" 2>&1 ||
  { cat "$work/train.log"; exit 1; }
for f in config.json model.safetensors train_report.json; do
  [ -s "$work/draft/$f" ] || { echo "train --once did not write $f"; exit 1; }
done
tau=$(sed -nE 's/^ *"tau": ([0-9.]+),?$/\1/p' "$work/draft/train_report.json")
echo "tau $tau"
awk -v t="$tau" 'BEGIN { exit !(t >= 2.0) }' || { echo "tau $tau below 2"; cat "$work/train.log"; exit 1; }

# The demo, shortened, on this policy with a barely trained initial drafter (so that the
# online trainer has something to improve): every piece must connect. Records acknowledged and
# stored, at least one drafter promoted and swapped into the workers, policy versions advancing
# one per RL step, versions reported on every step, the report and plot written. The workers
# fetch every version as chunks over the weight link (--fetch-weights), so that path runs too.
"$bin" train --once --model "$work/policy" --out "$work/weak" --prompts 24 --heldout-prompts 4 --max-new-tokens 32 \
  --draft-vocab 256 --steps 4 --ttt-steps 3 --eval-every 0 >"$work/weak.log" 2>&1 ||
  { cat "$work/weak.log"; exit 1; }
# --init continues a drafter (its draft vocabulary, not --draft-vocab's) rather than a fresh one.
"$bin" train --once --model "$work/policy" --init "$work/weak" --out "$work/weak2" --prompts 12 --heldout-prompts 2 \
  --max-new-tokens 16 --draft-vocab 512 --steps 2 --ttt-steps 2 --eval-every 1 >"$work/weak2.log" 2>&1 ||
  { cat "$work/weak2.log"; exit 1; }
grep -q "continuing the drafter in $work/weak" "$work/weak2.log" || { echo "--init did not continue"; cat "$work/weak2.log"; exit 1; }
grep -q '"draft_vocab_size": 256' "$work/weak2/config.json" || { echo "--init did not keep the vocabulary"; exit 1; }
"$bin" demo --model "$work/policy" --drafter "$work/weak" --out "$work/demo" --steps 4 --prompts 3 --group 4 \
  --max-new-tokens 32 --trainer-steps 40 --trainer-lr 2e-3 --trainer-share 100 --final-prompts 3 --offline-prompts 24 --offline-steps 20 \
  --fetch-weights --record-max-tokens 24 --reference strong --strong-prompts 24 --strong-steps 10 \
  >"$work/demo.log" 2>&1 || { cat "$work/demo.log"; exit 1; }
grep -qE "weight link: [0-9]+ versions announced, [0-9]+ deliveries to 2 workers \([1-9][0-9]* fetched as chunks.*, 0 failures" \
  "$work/demo.log" || { echo "the weight link did not deliver by transfer"; grep "weight link" "$work/demo.log"; exit 1; }
grep -q "demo: step 4/4" "$work/demo.log" || { echo "no progress line for step 4"; cat "$work/demo.log"; exit 1; }
[ -s "$work/demo/tau.svg" ] || { echo "no plot"; exit 1; }
python3 - "$work/demo/report.json" <<'PY' || { cat "$work/demo.log"; exit 1; }
import json, sys
r = json.load(open(sys.argv[1]))
s, steps = r["summary"], r["steps"]
problems = []
if s["records_stored"] < 4 * 3 * 4:
    problems.append(f"records stored {s['records_stored']} < {4 * 3 * 4}")
if steps[-1]["records_acked"] < 3 * 3 * 4:
    problems.append("records of the first three steps not all acknowledged")
if s["record_chunks"] < 1 or r["options"]["record_max_tokens"] != 24:
    problems.append(f"--record-max-tokens 24 split no completion (record_chunks {s['record_chunks']})")
if s["drafters_promoted"] < 1:
    problems.append("no drafter promoted")
if s["drafter_swaps"] < 1 or max(x["drafter_version"] for x in steps) < 2:
    problems.append("no promoted drafter was swapped in and served")
if [x["policy_version"] for x in steps] != [1, 2, 3, 4]:
    problems.append(f"policy versions {[x['policy_version'] for x in steps]}")
if s["policy_swaps"] < 3 * 2:
    problems.append(f"policy swaps {s['policy_swaps']} (3 per worker expected)")
if any(x["tau_online"] < 1 or x["tau_frozen"] < 1 or x["tokens_per_s"]["plain"] <= 0 for x in steps):
    problems.append("a step without measurements")
if s["rejected_versions"] != 0:
    problems.append("a version was rejected")
ft = s["final_tau"]
if not (ft["quick_reference"] >= 1 and ft["strong_reference"] >= 1 and s["online_over_strong_reference"] > 0):
    problems.append(f"reference drafters not measured: {ft}")
if not s["pre_switch_online_tau"] >= 1 or not isinstance(s["recovery_steps_to_70pct"], int):
    problems.append("no recovery figures for the default curriculum")
if not s["trainer_cpu_share"] > 0 or any(x["cpu_seconds"]["online_generation"] <= 0 for x in steps):
    problems.append(f"trainer compute share not measured: {s['trainer_cpu_share']}")
w = s["workers_plain_tokens_per_s"]
if not (w["trainer_paused"] > 0 and w["trainer_running"] > 0):
    problems.append(f"workers' speed beside the trainer not measured: {w}")
pt = s["online_prompt_tokens"]
if not (pt["prefilled"] > 0 and pt["taken_from_cache"] > 0):
    problems.append(f"the groups' siblings took no prompt from the cache (prefix reuse): {pt}")
curve = r["trainer_rounds"]
if not curve or any(b["optimizer_steps"] < a["optimizer_steps"] for a, b in zip(curve, curve[1:])):
    problems.append(f"no learning curve, or one whose optimiser steps go back: {curve}")
print("demo:", {k: s[k] for k in ("records_stored", "record_chunks", "drafters_promoted", "drafter_swaps", "policy_swaps")})
if problems:
    print("\n".join(problems))
    sys.exit(1)
PY

# The same demo again: its policy trajectory is reproducible (the GRPO update reads the plain
# run's rollouts, which do not depend on timing), so every step's reward repeats and the strong
# reference, cached by the final policy's hash, is reused rather than trained again.
"$bin" demo --model "$work/policy" --drafter "$work/weak" --out "$work/demo2" --steps 4 --prompts 3 --group 4 \
  --max-new-tokens 32 --trainer-steps 40 --trainer-lr 2e-3 --trainer-share 100 --final-prompts 3 --offline-prompts 24 --offline-steps 20 \
  --record-max-tokens 24 --reference strong --strong-prompts 24 --strong-steps 10 \
  --reference-cache "$work/demo/reference-cache" >"$work/demo2.log" 2>&1 || { cat "$work/demo2.log"; exit 1; }
grep -q "strong reference: reusing" "$work/demo2.log" || { echo "the cached strong reference was not reused"; grep "strong reference" "$work/demo2.log"; exit 1; }
python3 - "$work/demo/report.json" "$work/demo2/report.json" <<'PY' || exit 1
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
ra, rb = ([x["reward"] for x in r["steps"]] for r in (a, b))
if ra != rb:
    sys.exit(f"the policy trajectory did not repeat: rewards {ra} vs {rb}")
if a["summary"]["final_tau"]["strong_reference"] != b["summary"]["final_tau"]["strong_reference"]:
    sys.exit("the reused strong reference measured differently on the same policy and requests")
print("rerun: same rewards", ra, "and the cached strong reference")
PY
