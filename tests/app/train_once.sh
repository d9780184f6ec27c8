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
