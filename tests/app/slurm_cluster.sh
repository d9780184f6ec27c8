#!/usr/bin/env bash
# deploy/slurm/updraft.sbatch on a real single-node Slurm cluster made for the test (Debian's
# slurm-wlm and munge; slurmctld and slurmd in a temporary directory, this machine's CPUs):
# records reach the buffer, the trainer promotes a drafter that every worker then serves, and
# scancel stops the job with every acknowledged record stored once. All traffic stays on loopback
# (the daemons and the job's endpoints use 127.0.0.1). Needs root; installs the
# packages when missing; skipped (exit 77) with the reason where it cannot run.
set -euo pipefail
bin=$(realpath "$1") src=$(realpath "$2")
[ "$(id -u)" = 0 ] || { echo "SKIP: needs root (munge and slurm daemons)"; exit 77; }
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null 2>&1 ||
    { echo "SKIP: slurm-wlm and munge cannot be installed here"; exit 77; }
fi
work=$(mktemp -d /tmp/updraft-slurm-XXXXXX)
pids=()
job=
cleanup() {
  [ -n "$job" ] && scancel "$job" 2>/dev/null && sleep 2 || true  # a failed run leaves no job behind
  # What is left of the job (its steps carry this cluster's SLURM_CONF, its commands our paths).
  for p in $(pgrep slurmstepd); do grep -qa "$work" "/proc/$p/environ" 2>/dev/null && kill -9 "$p"; done
  pkill -9 -f "$work/" 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ -n "${KEEP_WORK:-}" ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$work"/job/*.log "$work"/log/*.log "$work"/*.out; do [ -e "$f" ] && { echo "== $f"; tail -20 "$f"; }; done; exit 1; }
mkdir -p "$work"/{state,spool,log,munge,run,job}
chmod 700 "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key" && chmod 400 "$work/munge/munge.key"
munged --key-file="$work/munge/munge.key" --socket="$work/munge/munge.sock" --pid-file="$work/munge/munged.pid" \
  --log-file="$work/munge/munged.log" --seed-file="$work/munge/seed" --force
pids+=("$(cat "$work/munge/munged.pid")")
host=$(hostname -s) port=$((40000 + RANDOM % 20000))
cat >"$work/slurm.conf" <<CONF
ClusterName=updraft-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$work/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/run/slurmctld.pid
SlurmdPidFile=$work/run/slurmd.pid
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
KillWait=90
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=4000 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF=$work/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$work/log/ctld.out" 2>&1 &
pids+=($!)
sleep 2
slurmd -D -f "$SLURM_CONF" >"$work/log/slurmd.out" 2>&1 &
pids+=($!)
for _ in $(seq 60); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.5; done
sinfo -h -o %T | grep -q idle || fail "the single-node cluster did not come up"

job=$(UPDRAFT_BIN=$bin UPDRAFT_MODEL=$src/tests/fixtures/policy/llama UPDRAFT_DRAFTER=$src/tests/fixtures/drafter/spec_default \
  UPDRAFT_JOB_DIR=$work/job UPDRAFT_BASE_PORT=$((port + 10)) UPDRAFT_HOST=127.0.0.1 UPDRAFT_DRIVER_ROUNDS=12 OMP_NUM_THREADS=1 \
  UPDRAFT_TRAIN_ARGS="--steps-per-round 20 --lr 2e-3 --ttt-steps 2 --min-new-records 8 --promote-margin -0.5" \
  sbatch --parsable --ntasks=2 --output="$work/job-%j.out" "$src/deploy/slurm/updraft.sbatch")
echo "job $job submitted"
key=$(for _ in $(seq 60); do [ -s "$work/job/api.key" ] && cat "$work/job/api.key" && break; sleep 0.5; done)
version() { curl -sf -H "Authorization: Bearer $key" "$(cat "$1")/get_weight_version" | sed -n 's/.*"drafter_version":\([0-9]*\).*/\1/p'; }
for _ in $(seq 360); do  # the driver done, a promotion, and both workers serving it
  squeue -h -j "$job" 2>/dev/null | grep -q . || fail "the job ended early"
  if [ -e "$work/job/driver.done" ] && grep -q "promoted v" "$work/job/trainer.log" 2>/dev/null; then
    ok=1
    for u in "$work"/job/worker-*.url; do [ "$(version "$u")" -ge 2 ] 2>/dev/null || ok=0; done
    [ "$ok" = 1 ] && break
  fi
  sleep 0.5
done
[ -e "$work/job/driver.done" ] || fail "the driver did not finish"
grep -q "promoted v" "$work/job/trainer.log" || fail "the trainer promoted nothing"
for u in "$work"/job/worker-*.url; do
  v=$(version "$u")
  [ "${v:-0}" -ge 2 ] || fail "$(cat "$u") serves drafter v${v:-?}, not the promoted one"
  echo "worker $(cat "$u"): drafter v$v"
done

scancel "$job"
for _ in $(seq 240); do squeue -h -j "$job" 2>/dev/null | grep -q . || break; sleep 0.5; done
squeue -h -j "$job" 2>/dev/null | grep -q . && fail "the job did not end after scancel"
sleep 1
total=0
for i in 1 2; do
  line=$(grep -o "records [0-9]* submitted, [0-9]* acknowledged" "$work/job/serve-$i.log") || fail "worker $i: no records line"
  acked=$(echo "$line" | awk '{print $4}')
  stored=$("$bin" inspect buffer "$work/job/buffer" | sed -nE "s/^ *worker $i *: ([0-9]+) records.*/\1/p")
  [ "$acked" -gt 0 ] && [ "${stored:-x}" = "$acked" ] || fail "worker $i: $acked acknowledged, ${stored:-none} stored"
  total=$((total + acked))
done
ls "$work"/job/drafters/drafter-v* >/dev/null 2>&1 || fail "no published drafter version kept"
echo "slurm: job $job ran buffer, trainer and 2 workers; promoted drafters served; scancel left $total acknowledged records stored once"
