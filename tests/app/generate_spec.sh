#!/usr/bin/env bash
# `updraft generate` with the speculators-format drafter fixture over the llama policy fixture:
# greedy speculative output ids must equal plain decoding's, for a chain and a tree, and the
# speculative lines must report rounds and tau.
set -euo pipefail
bin=$1 src=$2
model=$src/tests/fixtures/policy/llama draft=$src/tests/fixtures/drafter/spec_default
args=(--model "$model" --prompt-ids 1,2,3,4 --prompt-ids 9,8,7 --prompt-ids 100,200,300,400,5 --max-new-tokens 24 --ignore-eos)
ids() { sed -E 's/.*"output_ids":(\[[^]]*\]).*/\1/'; }
plain=$("$bin" generate "${args[@]}" | ids)
for spec in "--spec-steps 4 --spec-top-k 1 --spec-draft-tokens 5" "--spec-steps 3 --spec-top-k 3 --spec-draft-tokens 8"; do
  out=$("$bin" generate "${args[@]}" --draft "$draft" $spec)
  grep -q '"tau":' <<<"$out" || { echo "no speculation stats in: $out"; exit 1; }
  [ "$(ids <<<"$out")" = "$plain" ] || { echo "speculative ids differ ($spec):"; echo "$out"; echo "plain: $plain"; exit 1; }
done
echo "speculative output identical to plain decoding"
