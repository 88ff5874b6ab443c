#!/usr/bin/env bash
# The kill matrix on the netns testbed (root): for `bench coll`, `run`, `calibrate` (then resumed)
# and `validate`, each of the launcher, a delay helper, a rank and mpirun is sent SIGKILL, SIGTERM
# and SIGINT mid-run, and the boundary is broken twice more (the delay rules flushed, a helper
# stopped). One row per case: the launcher's exit code, what was written and the label it carries,
# and what was left (namespaces, rules, /dev/shm, processes, launch folders) before
# `sax launch --cleanup`. Usage: [TARGETS="launcher flush"] [SIGNALS=KILL] scripts/kill_matrix.sh
# [build/sax] [bench run calibrate validate]; about 30 minutes for all, most of it validate's rank
# and mpirun cases (its other layout then runs to the end: 3 minutes each).
set -u
sax=$(realpath "${1:-build/sax}")
shift || true
commands=("${@:-bench run calibrate validate}")
read -r -a commands <<<"${commands[*]}"
root=$(cd "$(dirname "$0")/.." && pwd)
C=$root/configs/clusters/local-2bld.json M=$root/configs/models/gpt-tiny.json L=$root/configs/layouts/local-dp4.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ "$(id -u)" = 0 ] || { echo "kill_matrix: needs root (network namespaces)" >&2; exit 2; }

leftovers() {
  local ns rules=0
  ns=$(find /run/netns -maxdepth 1 -name 'sax-*' 2>/dev/null | wc -l)
  for n in /run/netns/sax-[0-9]-d*; do
    [ -e "$n" ] || continue
    rules=$((rules + $(ip netns exec "${n##*/}" iptables -t mangle -S PREROUTING 2>/dev/null | grep -c NFQUEUE)))
  done
  printf 'ns=%s rules=%s shm=%s procs=%s dirs=%s' "$ns" "$rules" "$(find /dev/shm -maxdepth 1 -name 'sax-*' | wc -l)" \
    "$(pgrep -c -f "^($sax |mpirun |orted |$(dirname "$sax")/sax-linkdelay)" || true)" \
    "$(find /run/sax -maxdepth 1 -name 'sax-*' 2>/dev/null | wc -l)"
}

# The command line of each command, writing under $1.
line() {
  case $2 in
    bench) echo "bench coll -b 64K -e 64K -n 100000 --timeout 60 --json $1/out.json" ;;
    run) echo "run --cluster $C --model $M --layout $L --steps 400 --json $1/out.json" ;;
    calibrate) echo "calibrate --cluster $C -b 4K -e 4M -f 4 -n 10 --out $1/out.json" ;;
  esac
}

# What a case wrote, and the label it carries.
written() {
  local d=$1 what=$2
  case $what in
    calibrate)
      local p=$d/out.json.points.jsonl
      [ -f "$p" ] || { echo "no points"; return; }
      python3 - "$p" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().splitlines()
pts = [json.loads(l) for l in lines[1:] if l.strip()]
labels = sorted({p.get("emulation", "?") for p in pts})
launches = len({p.get("launch", "?") for p in pts})
print(f"{len(pts)} points ({','.join(labels) or '-'}; {launches} launch)", end="")
EOF
      ;;
    validate)
      if [ -f "$d/v.json" ]; then
        python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); r=j["layouts"]
print("v.json %s: %d measured, %d failed" % (j["inputs"]["emulation"], sum(x["exit_code"] == 0 and x["measured"] is not None for x in r), sum(x["exit_code"] != 0 for x in r)))' "$d/v.json"
      else echo "no v.json"; fi
      ;;
    *)
      if [ -f "$d/out.json" ]; then
        python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("out.json emulation="+str(j.get("env",{}).get("emulation")))' "$d/out.json"
      else echo "no out.json"; fi
      ;;
  esac
}

target_pid() {  # $1 target, $2 dir, $3 launcher pid
  case $1 in
    launcher) echo "$3" ;;
    helper) pgrep -n -f "sax-linkdelay .*--clocks /run/sax/sax-" ;;
    rank) pgrep -n -f "^$sax (bench|run|calibrate) .*$2" ;;
    mpirun) pgrep -n -f "^mpirun .*$2" ;;
  esac
}

printf '%-10s %-9s %-7s %-4s %-38s %-62s %s\n' command target signal rc written "reason (last sax: line)" "left before --cleanup"
for what in "${commands[@]}"; do
  for target in ${TARGETS:-launcher helper rank mpirun flush stop}; do
    read -r -a signals <<<"${SIGNALS:-KILL TERM INT}"
    [ "$target" = flush ] || [ "$target" = stop ] && signals=(-)
    for sig in "${signals[@]}"; do
      d=$(mktemp -d /tmp/sax-km-XXXXXX)
      if [ "$what" = validate ]; then
        "$sax" validate --cluster "$C" --model "$M" --emulate netns --top 2 --spread 0 --steps 100 \
          --json "$d/v.json" --runs "$d/runs" >"$d/log" 2>&1 &
      else
        # shellcheck disable=SC2046
        "$sax" launch --cluster "$C" --emulate netns -- $(line "$d" "$what") >"$d/log" 2>&1 &
      fi
      lp=$!
      for _ in $(seq 600); do
        if [ "$what" = calibrate ]; then
          [ -f "$d/out.json.points.jsonl" ] && [ "$(wc -l <"$d/out.json.points.jsonl")" -ge 3 ] && break
        else
          [ "$(pgrep -c -f "^$sax (bench|run) ")" -ge 4 ] && break
        fi
        sleep 0.05
      done
      sleep 1
      slot=$(sed -n 's/^# testbed sax-\([0-9]\)-.*/\1/p' "$d/log" | head -1)
      case $target in
        flush) ip netns exec "sax-${slot:-0}-d0" iptables -t mangle -F ;;
        stop) kill -STOP "$(target_pid helper "$d" "$lp")" ;;
        *) kill -"$sig" "$(target_pid "$target" "$d" "$lp")" 2>/dev/null ;;
      esac
      t0=$SECONDS
      wait "$lp"
      rc=$?
      # A launcher killed outright is not waited on by its job: wait for the job's own end.
      for _ in $(seq 100); do pgrep -f "^($sax (bench|run|calibrate) |mpirun )" >/dev/null || break; sleep 0.1; done
      sleep 0.5
      why=$(grep -a '^sax: ' "$d/log" | tail -1 | cut -c1-60)
      left=$(leftovers)
      printf '%-10s %-9s %-7s %-4s %-38s %-62s %s (%ss)\n' "$what" "$target" "$sig" "$rc" "$(written "$d" "$what")" \
        "${why:--}" "$left" "$((SECONDS - t0))"
      if [ "$what" = calibrate ]; then
        "$sax" launch --cleanup >/dev/null
        # shellcheck disable=SC2046
        "$sax" launch --cluster "$C" --emulate netns -- $(line "$d" calibrate) >"$d/resume.log" 2>&1
        printf '%-10s %-9s %-7s %-4s %-38s %s\n' "  resumed" "" "" "$?" "$(written "$d" calibrate)" \
          "$(grep -ao '[0-9]* measured before' "$d/resume.log" | head -1)"
      fi
      "$sax" launch --cleanup >/dev/null
      [ "$left" = "ns=0 rules=0 shm=0 procs=0 dirs=0" ] || printf '%-10s %-9s %-7s %-4s %-38s %-62s %s\n' "" "" "" "" "" \
        "after sax launch --cleanup:" "$(leftovers)"
      pkill -9 -f "^($sax (bench|run|calibrate) |mpirun |orted )" 2>/dev/null
      rm -rf "$d"
    done
  done
done
