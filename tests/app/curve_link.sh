#!/usr/bin/env bash
# CURVE from the command line (docs/messaging.md, "Security"): `updraft keygen` key pairs, a
# buffer bound to every interface with CURVE and an allow-list, a worker (`generate --send`)
# whose key is allowed and gets its records acknowledged, one whose key is not and one without
# CURVE that get nothing stored; a non-loopback bind without CURVE and a key file others can
# read are refused. Then `updraft inspect buffer` decodes a stored record.
set -euo pipefail
bin=$1 src=$2
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
model=$src/tests/fixtures/policy/llama draft=$src/tests/fixtures/drafter/spec_default
work=$(mktemp -d)
buffer_pid=
cleanup() {
  [ -n "$buffer_pid" ] && kill -9 "$buffer_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for k in buffer w1 w2; do "$bin" keygen "$work/$k" >/dev/null; done
[ "$(stat -c %a "$work/w1.key")" = 600 ] || { echo "key file not mode 600"; exit 1; }
if "$bin" keygen "$work/w1" >/dev/null 2>&1; then echo "keygen overwrote a key"; exit 1; fi
{ echo "# the workers allowed"; cat "$work/w1.pub"; } >"$work/allow"

if "$bin" buffer --path "$work/x" --endpoint 'tcp://0.0.0.0:*' --report-seconds 0 >"$work/refused.log" 2>&1; then
  echo "bound every interface without CURVE"; exit 1
fi
grep -q "without CURVE" "$work/refused.log" || { cat "$work/refused.log"; exit 1; }

"$bin" buffer --path "$work/buf" --endpoint 'tcp://0.0.0.0:*' --curve-key "$work/buffer.key" \
  --curve-allow "$work/allow" --report-seconds 0 >"$work/buffer.log" 2>&1 &
buffer_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -nE 's/.*serving tcp:\/\/0\.0\.0\.0:([0-9]+) into.*CURVE: 1 clients allowed.*/\1/p' "$work/buffer.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "buffer did not start"; cat "$work/buffer.log"; exit 1; }
ep=tcp://127.0.0.1:$port

send() {  # worker id, timeout, extra args
  local w=$1 t=$2
  shift 2
  "$bin" generate --model "$model" --draft "$draft" --prompt-ids 1,2,3 --prompt-ids 4,5,6,7 --prompt-ids 9,8 \
    --max-new-tokens 8 --send "$ep" --worker-id "$w" --send-timeout "$t" "$@"
}
send 1 60 --curve-key "$work/w1.key" --curve-server "$work/buffer.pub" >"$work/w1.log" 2>&1 ||
  { cat "$work/w1.log" "$work/buffer.log"; exit 1; }
grep -q "records: 3 submitted .* 3 acknowledged" "$work/w1.log" || { cat "$work/w1.log"; exit 1; }
if send 2 3 --curve-key "$work/w2.key" --curve-server "$work/buffer.pub" >"$work/w2.log" 2>&1; then
  echo "a key not on the allow-list got records acknowledged"; cat "$work/w2.log"; exit 1
fi
if send 3 3 >"$work/w3.log" 2>&1; then
  echo "a worker without CURVE got records acknowledged"; cat "$work/w3.log"; exit 1
fi
cp "$work/w1.key" "$work/open.key" && chmod 644 "$work/open.key"
if send 4 3 --curve-key "$work/open.key" --curve-server "$work/buffer.pub" >"$work/w4.log" 2>&1; then
  echo "a key file others can read was used"; exit 1
fi
grep -q "accessible to group or others" "$work/w4.log" || { cat "$work/w4.log"; exit 1; }

kill -TERM "$buffer_pid"
wait "$buffer_pid" || { echo "buffer did not stop cleanly"; cat "$work/buffer.log"; exit 1; }
buffer_pid=
"$bin" inspect buffer "$work/buf" --values >"$work/inspect.log" 2>&1 || { cat "$work/inspect.log"; exit 1; }
for want in "records          : 3" "worker 1 *: 3 records, next seq 3" "tokens           : 10 \(prompt 2\)" \
  "teacher top-k    : k=16, 128 ids" "rounds           : [1-9][0-9]* \(drafted [0-9]+, accepted [0-9]+\)" \
  "checksum         : [0-9a-f]{8} \(verified\)" "token ids        : 9 8 "; do
  grep -qE "$want" "$work/inspect.log" || { echo "inspect: no line matching '$want'"; cat "$work/inspect.log"; exit 1; }
done
echo "curve link: allowed worker stored 3 records; others refused"
