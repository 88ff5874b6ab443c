#!/usr/bin/env bash
# A root `sax launch --emulate netns` against a hostile local user, and against signals: the checks
# behind the launcher's safety claims, as figures (the tests run one round of each; this runs many).
#   race  N: N launches while uid 65534 recreates, links or pre-creates every shared path a launch
#            ever used (/tmp/sax-<slot>-launch with its own agent.sh, links from them to a root-only
#            directory, /run/lock/sax-netns-<slot>.lock held or linked to /etc, /dev/shm/sax-*);
#            counts code run as root, files written through links, other users' files removed.
#   kills:   launcher, delay helper, rank, mpirun × SIGKILL, SIGTERM, SIGINT during a run; says the
#            launcher's exit code, what was left, and whether a result file claims the emulation.
# Usage (root): scripts/launch_attacks.sh [SAX_BINARY] [race iterations, default 20] [race|kills|all]
set -uo pipefail
sax=${1:-$(cd "$(dirname "$0")/.." && pwd)/build/sax}
n=${2:-20}
what=${3:-all}
cluster=$(cd "$(dirname "$0")/.." && pwd)/configs/clusters/local-2bld.json
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ "$(id -u)" = 0 ] || { echo "launch_attacks: needs root" >&2; exit 2; }
work=$(mktemp -d /tmp/launch-attacks.XXXXXX)
chmod 0777 "$work"
mkdir -m 0700 "$work/rootonly"
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
leftovers() {  # counts of what a launch leaves, by kind ("" when nothing)
  local ns links helpers mpi ranks dirs out=""
  ns=$(ls /run/netns 2>/dev/null | grep -c '^sax-[0-9]-')
  links=$(ls /sys/class/net | grep -c '^sax-[0-9]-')
  helpers=$(pgrep -c -x sax-linkdelay)
  mpi=$(pgrep -c -x mpirun)
  ranks=$(pgrep -fc "[ ]bench coll")
  dirs=$(ls -d /run/sax/sax-[0-9]-* /tmp/sax-[0-9]-launch 2>/dev/null | wc -l)
  for k in ns links helpers mpi ranks dirs; do [ "${!k}" != 0 ] && out+="$k=${!k} "; done
  echo "$out"
}
clean() {  # what a SIGKILLed launcher leaves, removed the way teardown does (root's own objects only)
  pkill -9 -x sax-linkdelay 2>/dev/null; pkill -9 -f "[ ]bench coll" 2>/dev/null; pkill -9 -x mpirun 2>/dev/null
  for ns in $(ls /run/netns 2>/dev/null | grep -E '^sax-[0-9]-'); do ip netns delete "$ns"; done
  for l in $(ls /sys/class/net | grep -E '^sax-[0-9]-'); do ip link delete "$l" 2>/dev/null; done
  find /run/sax -maxdepth 1 -name 'sax-[0-9]-*' -user 0 -type d -exec rm -rf {} + 2>/dev/null
  sleep 0.5
}

race() {
  cat > "$work/attack.sh" <<'EOS'
# $1 work dir, $2 root-only dir, $3 mode: dirs (own launch dirs and agents), links (every launch
# dir and lock a link), locks (every slot lock held)
for s in 0 1 2 3 4 5 6 7; do
  case $3 in
    locks) (flock -n /run/lock/sax-netns-$s.lock sleep 60 &) 2>/dev/null ;;
    links) ln -sfn /etc/sax-attack-$s /run/lock/sax-netns-$s.lock 2>/dev/null ;;
  esac
done
for p in $(seq $(($(cat /proc/sys/kernel/ns_last_pid) + 1)) $(($(cat /proc/sys/kernel/ns_last_pid) + 400))); do
  : > /dev/shm/sax-local-2bld-own-$p-0 2>/dev/null
done
while [ ! -e "$1/stop" ]; do
  for s in 0 1 2 3 4 5 6 7; do
    d=/tmp/sax-$s-launch
    case $3 in
      dirs)
        mkdir -p $d 2>/dev/null
        printf '#!/bin/sh\ntouch %s/owned\n' "$1" > $d/.a 2>/dev/null && chmod 755 $d/.a && mv -f $d/.a $d/agent.sh ;;
      links) ln -sfn "$2" $d 2>/dev/null ;;
      locks) sleep 0.05 ;;
    esac
  done
done
EOS
  local ran_code=0 wrote=0 removed=0 ok=0 refused=0 other=0
  for i in $(seq 1 "$n"); do
    rm -f "$work/stop" "$work/owned"
    mode=$(case $((i % 3)) in 1) echo dirs ;; 2) echo links ;; 0) echo locks ;; esac)
    as_user sh "$work/attack.sh" "$work" "$work/rootonly" "$mode" & a=$!
    sleep 0.3
    mark=$(mktemp "$work/mark.XXXXXX"); chown 65534 "$mark"  # a file of the user's: it must survive
    timeout 90 "$sax" launch --cluster "$cluster" --emulate netns -- bench coll -b 1K -e 1K -n 2 -w 0 > "$work/out" 2>&1
    rc=$?
    touch "$work/stop"; wait $a 2>/dev/null
    [ -e "$work/owned" ] && ran_code=$((ran_code + 1))
    { [ -n "$(ls -A "$work/rootonly")" ] || ls /etc/sax-attack-* >/dev/null 2>&1; } && wrote=$((wrote + 1))
    [ "$mode" = dirs ] && [ ! -e /tmp/sax-0-launch/agent.sh ] && removed=$((removed + 1))
    [ -e "$mark" ] || removed=$((removed + 1))
    case $rc in 0) ok=$((ok + 1)) ;; 2) refused=$((refused + 1)) ;; *) other=$((other + 1)) ;; esac
    printf 'race %2d %-5s: exit %d%s%s\n' "$i" "$mode" "$rc" "$([ -e "$work/owned" ] && echo ', ROOT RAN THE USER AGENT')" \
      "$([ $rc = 0 ] || echo ": $(grep -m1 'sax:' "$work/out")")"
    pkill -u 65534 -x sleep 2>/dev/null
    rm -rf /tmp/sax-[0-7]-launch /etc/sax-attack-* "$work/rootonly"/* /dev/shm/sax-local-2bld-own-* 2>/dev/null
    find /run/lock -maxdepth 1 -name 'sax-netns-*.lock' -user 65534 -delete 2>/dev/null
    find /run/lock -maxdepth 1 -name 'sax-netns-*.lock' -type l -delete 2>/dev/null
  done
  echo "race: $n launches: $ok succeeded, $refused refused (exit 2), $other other; user code run as root: $ran_code;" \
    "written through a link: $wrote; other users' files removed: $removed"
}

kills() {
  printf '%-9s %-7s %-5s %-22s %s\n' target signal exit result left
  for target in launcher helper rank mpirun; do
    for sig in KILL TERM INT; do
      clean
      rm -f "$work/r.json"
      "$sax" launch --cluster "$cluster" --emulate netns -- bench coll -b 8 -e 8 -n 100000 --timeout 60 \
        --json "$work/r.json" > "$work/out" 2>&1 & l=$!
      for _ in $(seq 300); do [ "$(pgrep -fc "[ ]bench coll")" -ge 4 ] && break; sleep 0.1; done
      sleep 0.5
      case $target in
        launcher) kill -$sig $l ;;
        helper) pkill -$sig -x sax-linkdelay ;;
        rank) kill -$sig "$(pgrep -nf "[ ]bench coll")" ;;
        mpirun) pkill -$sig -x mpirun ;;
      esac
      for _ in $(seq 600); do kill -0 $l 2>/dev/null || break; sleep 0.1; done
      wait $l; rc=$?
      # What the job's end takes (mpirun ends its daemons and ranks): up to 30 s, then what is left.
      for _ in $(seq 300); do pgrep -f "[ ]bench coll" >/dev/null || pgrep -x mpirun >/dev/null || break; sleep 0.1; done
      result=none
      [ -e "$work/r.json" ] && result="says $(python3 -c "import json,sys;print(json.load(open(sys.argv[1]))['env']['emulation'])" "$work/r.json")"
      left=$(leftovers)
      printf '%-9s %-7s %-5s %-22s %s\n' "$target" "SIG$sig" "$rc" "$result" "${left:-nothing}"
    done
  done
  clean
}

[ "$what" = race ] || [ "$what" = all ] && race
[ "$what" = kills ] || [ "$what" = all ] && kills
rm -rf "$work"
