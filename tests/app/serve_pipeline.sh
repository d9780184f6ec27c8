#!/usr/bin/env bash
# The mission's roles as separate processes around a long-running worker: `updraft buffer`,
# `updraft serve` (streaming records, following the weight link) and `updraft train` (online,
# announcing promoted drafters). Requests go through the Python client (python/). Checks:
# every completion's record is acknowledged and stored, the trainer's drafter v2 reaches the
# running worker and serves the next requests (labelled v2), metrics say so, and every process
# stops cleanly on SIGTERM. With a third argument `cold` the worker starts without a drafter
# (the cold start of online adaptation): it decodes plainly (completions labelled drafter 0, no
# speculation rounds) while its records flow, until the trainer's first promotion arrives. The
# worker speculates at the full depth every step (--no-adaptive): the fixtures' drafters accept
# little (tau about 1.2), so the depth chooser may rightly decode the last requests plainly, and
# this test checks that the new drafter serves, not whether it pays.
set -euo pipefail
bin=$1 src=$2 cold=${3:-}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
model=$src/tests/fixtures/policy/llama draft=$src/tests/fixtures/drafter/spec_default
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "${KEEP_WORK:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "== $f"; tail -30 "$f"; done; exit 1; }
records=ipc://$work/records.sock pub=ipc://$work/drafters.pub req=ipc://$work/drafters.req

"$bin" buffer --path "$work/buf" --endpoint "$records" --report-seconds 0 >"$work/buffer.log" 2>&1 &
buffer_pid=$!; pids+=("$buffer_pid")
serve_drafter=(--drafter "$draft")
[ "$cold" = cold ] && serve_drafter=(--no-drafter)
"$bin" serve --model "$model" "${serve_drafter[@]}" --port 0 --port-file "$work/port" --send "$records" --worker-id 3 \
  --weights-pub "$pub" --weights-req "$req" --weights-dir "$work/fetched" --no-adaptive >"$work/serve.log" 2>&1 &
serve_pid=$!; pids+=("$serve_pid")
for _ in $(seq 300); do [ -s "$work/port" ] && break; sleep 0.1; done
[ -s "$work/port" ] || fail "serve did not start"
url=http://127.0.0.1:$(cat "$work/port")

client() {  # client.py <python statements>; `c` is a Client
  PYTHONPATH=$src/python python3 -c "from updraft_client import Client; import json, sys, time; c = Client('$url'); c.wait_ready(); $1"
}
# 24 sampled completions in two requests (12 prompts each): one record each.
gen='
out = c.generate(input_ids=[[i, i * 7 % 500, i * 13 % 500, 5, 9] for i in range(FIRST, FIRST + 12)],
                 sampling_params={"temperature": 1, "max_new_tokens": 24, "sampling_seed": FIRST})
assert len(out) == 12, out
print(json.dumps(sorted({(o["meta_info"]["policy_version"], o["meta_info"]["drafter_version"]) for o in out})))
print(sum(o["meta_info"]["spec_verify_ct"] for o in out))'
client "${gen//FIRST/1}" >"$work/gen1.out" || fail "generate 1"
client "${gen//FIRST/101}" >"$work/gen2.out" || fail "generate 2"
if [ "$cold" = cold ]; then
  grep -q '^\[\[1, 0\]\]$' "$work/gen1.out" || fail "cold completions not labelled drafter 0: $(cat "$work/gen1.out")"
  [ "$(sed -n 2p "$work/gen1.out")" = 0 ] || fail "a worker without a drafter speculated: $(cat "$work/gen1.out")"
else
  grep -q '^\[\[1, 1\]\]$' "$work/gen1.out" || fail "completions not labelled policy v1 / drafter v1: $(cat "$work/gen1.out")"
fi

# The online trainer as a daemon: it trains on the 24 records, promotes v2 and announces it.
"$bin" train --model "$model" --drafter "$draft" --buffer "$work/buf" --out "$work/online" --steps-per-round 40 \
  --lr 2e-3 --ttt-steps 3 --min-new-records 4 --promote-margin 0 --announce-pub "$pub" --announce-req "$req" \
  >"$work/train.log" 2>&1 &
train_pid=$!; pids+=("$train_pid")
# The worker keeps serving meanwhile; until v2 arrives, more requests bring more records (a
# round that does not beat the serving drafter promotes nothing and waits for new records).
client '
deadline, first = time.monotonic() + 240, 1000
while c.get_weight_version()["drafter_version"] < 2:
    assert time.monotonic() < deadline, "drafter v2 did not reach the worker"
    c.generate(input_ids=[[k % 500, k * 3 % 500, 7, 9] for k in range(first, first + 8)],
               sampling_params={"temperature": 1, "max_new_tokens": 24, "sampling_seed": first})
    first += 8
    time.sleep(1)' >"$work/wait.out" 2>&1 || fail "hot-swap: $(cat "$work/wait.out")"
grep -q "promoted v2" "$work/train.log" || fail "trainer did not promote v2"
kill -TERM "$train_pid"  # no newer drafter from here on (it may have promoted more than v2)
wait "$train_pid" || fail "trainer exited with $? on SIGTERM"
last=$(sed -n 's/.*stopped by signal: .* serving drafter v\([0-9]*\)$/\1/p' "$work/train.log")
[ -n "$last" ] || fail "no stop line from the trainer"
# The worker serves v2 or a newer one the trainer announced before it stopped; its completions,
# metrics and logs agree on which, and every delivered version was swapped in once.
client "
v, since = c.get_weight_version()['drafter_version'], time.monotonic()
while time.monotonic() - since < 1:  # settled: an announcement in flight at the stop has landed
    time.sleep(0.1)
    if c.get_weight_version()['drafter_version'] != v:
        v, since = c.get_weight_version()['drafter_version'], time.monotonic()
assert 2 <= v <= $last, v
out = c.generate(input_ids=[[3, 1, 4, 1, 5], [2, 7, 1, 8]], sampling_params={'temperature': 1, 'max_new_tokens': 16})
assert all(o['meta_info']['drafter_version'] == v for o in out), out
assert sum(o['meta_info']['spec_verify_ct'] for o in out) > 0, out
m = c.metrics()
value = lambda name: [l.split()[1] for l in m.splitlines() if l.startswith(name + ' ')][0]
assert value('updraft_worker_drafter_version') == str(v), m
assert value('updraft_worker_drafter_swaps_total') == value('updraft_weights_delivered_total') != '0', m
print(value('updraft_serve_completions_total'))
print(value('updraft_serve_requests_total'))
print(v)" >"$work/swap.out" 2>&1 || fail "hot-swap: $(cat "$work/swap.out")"
v=$(sed -n 3p "$work/swap.out")
grep -q "drafter v$v staged from the weight link" "$work/serve.log" || fail "serve did not log the staged drafter v$v"
n=$(sed -n 1p "$work/swap.out") requests=$(sed -n 2p "$work/swap.out")

kill -TERM "$serve_pid"
wait "$serve_pid" || fail "serve exited with $? on SIGTERM"
grep -q "records $n submitted, $n acknowledged, 0 shed" "$work/serve.log" || fail "records not all acknowledged ($n)"
grep -q "serve: stopped: $requests requests, $n completions" "$work/serve.log" || fail "no clean stop line"
kill -TERM "$buffer_pid"
wait "$buffer_pid" || fail "buffer exited with $?"
pids=()
out=$("$bin" inspect buffer "$work/buf")
grep -qE "^  records +: $n$" <<<"$out" || fail "expected $n stored records: $out"
echo "serve${cold:+ (cold start)}, buffer and trainer as processes: $n records stored, drafters v2..v$v promoted, announced and serving"
