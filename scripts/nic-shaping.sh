#!/usr/bin/env bash
# A building boundary on a real cluster's NICs (docs/design.md "Building boundaries",
# kernel shaping on real NICs): tc shapes what a node sends to the other buildings' addresses, and
# NCCL and Open MPI are told to use those NICs over TCP (tc does not see RDMA). Run it on every
# node of every building, each time with --peer set to the *other* buildings' prefixes: each
# direction then crosses one shaped NIC, so --rate is the per-node rate and --delay-ms the
# one-way latency.
#
#   nic-shaping.sh apply  --nic IF [--nic IF ...] --peer CIDR [--peer ...] --rate RATE [--delay-ms MS] --yes-i-mean-it
#   nic-shaping.sh remove --nic IF [--nic IF ...] --yes-i-mean-it
#   nic-shaping.sh show   --nic IF [--nic IF ...]
#   (apply and remove with --dry-run print the commands and run nothing; no confirmation needed)
#
# On each NIC: an htb root (handle 5a5:) whose default class 5a5:2 runs at the NIC's own speed
# (unshaped), a class 5a5:1 at --rate that u32 filters on destination prefix send the peers'
# traffic to, and under it netem for --delay-ms where the kernel has netem (where it has not, the
# script says so and shapes the rate only). It touches nothing unless each NIC is named with --nic
# and --yes-i-mean-it is given; a NIC that does not exist, or one whose root qdisc is someone
# else's, is refused. remove deletes only its own root qdisc (handle 5a5:, htb) and is idempotent.
#
# Bad input exits 2 with one line; a tc command that fails exits 1 (apply then removes what it
# added); success exits 0.
set -uo pipefail

readonly HANDLE=5a5 NETEM_HANDLE=5a6
# NCCL's socket transport: 4 helper threads x 4 sockets, as launcher/nccl_env.hpp sets under
# kernel shaping (NCCL's env.rst: threads 1-16, threads x sockets <= 64).
readonly NCCL_THREADS=4 NCCL_SOCKS=4

usage() {
  echo "nic-shaping.sh: $*" >&2
  exit 2
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case "$cmd" in
  apply | remove | show) ;;
  -h | --help)
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  "") usage "expected a subcommand: apply, remove or show (--help says more)" ;;
  *) usage "unknown subcommand '$cmd': expected apply, remove or show" ;;
esac

nics=() peers=() rate="" delay_ms="" confirmed=0 dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --nic | --peer | --rate | --delay-ms)
      [ $# -ge 2 ] || usage "$1: expected a value"
      case "$1" in
        --nic) nics+=("$2") ;;
        --peer) peers+=("$2") ;;
        --rate) rate=$2 ;;
        --delay-ms) delay_ms=$2 ;;
      esac
      shift 2
      ;;
    --yes-i-mean-it) confirmed=1 && shift ;;
    --dry-run) dry_run=1 && shift ;;
    *) usage "unknown argument '$1' (--help lists them)" ;;
  esac
done

# --- checks, before anything is touched ---
[ ${#nics[@]} -gt 0 ] || usage "--nic: name each NIC to shape explicitly (e.g. --nic eth1); none was given"
for nic in "${nics[@]}"; do
  [[ $nic =~ ^[A-Za-z0-9_.:@-]{1,15}$ ]] || usage "--nic '$nic': expected an interface name (at most 15 letters, digits, _.:@-)"
  [ -e "/sys/class/net/$nic" ] || usage "--nic $nic: no such network interface here (ip link lists them)"
done
if [ "$cmd" = apply ]; then
  [ ${#peers[@]} -gt 0 ] || usage "--peer: expected the other buildings' address prefixes (e.g. --peer 10.2.0.0/16); none was given"
  for p in "${peers[@]}"; do
    if [[ $p =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})/([0-9]{1,2})$ ]]; then
      for i in 1 2 3 4; do
        [ "${BASH_REMATCH[$i]}" -le 255 ] || usage "--peer '$p': expected an IPv4 or IPv6 prefix (a.b.c.d/len)"
      done
      [ "${BASH_REMATCH[5]}" -le 32 ] || usage "--peer '$p': an IPv4 prefix length is 0-32"
    elif [[ $p =~ ^[0-9A-Fa-f:]*:[0-9A-Fa-f:]*/([0-9]{1,3})$ ]]; then
      [ "${BASH_REMATCH[1]}" -le 128 ] || usage "--peer '$p': an IPv6 prefix length is 0-128"
    else
      usage "--peer '$p': expected an IPv4 or IPv6 prefix (e.g. 10.2.0.0/16 or fd00:2::/64)"
    fi
  done
  [ -n "$rate" ] || usage "--rate: expected the boundary rate per node, e.g. 10gbit"
  [[ $rate =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit|tbit)$ ]] ||
    usage "--rate '$rate': expected a number with bit, kbit, mbit, gbit or tbit (bits per second), e.g. 10gbit"
  if [ -n "$delay_ms" ] && ! { [[ $delay_ms =~ ^[0-9]+(\.[0-9]+)?$ ]] &&
    awk -v d="$delay_ms" 'BEGIN { exit !(d > 0 && d <= 10000) }'; }; then
    usage "--delay-ms '$delay_ms': expected a one-way delay in milliseconds, above 0 and at most 10000"
  fi
elif [ ${#peers[@]} -gt 0 ] || [ -n "$rate" ] || [ -n "$delay_ms" ]; then
  usage "--peer, --rate and --delay-ms belong to apply, not $cmd"
fi
if [ "$cmd" != show ] && [ $dry_run -eq 0 ]; then
  [ $confirmed -eq 1 ] || usage "$cmd changes ${nics[*]}'s traffic control: add --yes-i-mean-it to confirm (or --dry-run to see the commands)"
  [ "$(id -u)" -eq 0 ] || usage "$cmd: tc needs root"
fi
[ "$cmd" = show ] && [ $dry_run -eq 1 ] && usage "show changes nothing: --dry-run belongs to apply and remove"
command -v tc >/dev/null || usage "tc is not installed (iproute2)"

# --- helpers ---
# Bits per second of a tc rate (bit, kbit, mbit, gbit, tbit: decimal multiples, as tc reads them).
bits_of() {
  awk -v r="$1" 'BEGIN { n = r + 0; u = r; sub(/^[0-9.]+/, "", u)
    m = (u == "kbit") ? 1e3 : (u == "mbit") ? 1e6 : (u == "gbit") ? 1e9 : (u == "tbit") ? 1e12 : 1
    printf "%.0f\n", n * m }'
}
# The NIC's own speed for the unshaped default class: its link speed where it reports one, else
# 100 Gbit/s (virtual NICs report none).
line_rate() {
  local mbit
  mbit=$(cat "/sys/class/net/$1/speed" 2>/dev/null) || mbit=""
  if [[ $mbit =~ ^[0-9]+$ ]] && [ "$mbit" -gt 0 ]; then echo "${mbit}mbit"; else echo 100gbit; fi
}
# htb's bucket: 1 ms at the rate, at least 32 KiB. A smaller one caps a fast rate at the kernel
# timer's granularity (tc's own default for 10gbit is 0 bytes); a larger one lets bursts through
# above the rate.
burst_of() { awk -v b="$1" 'BEGIN { x = b / 8 * 1e-3; printf "%.0f\n", (x < 32768 ? 32768 : x) }'; }
# (grep reads a captured string, not a pipe: under pipefail grep -q closing a pipe early fails it.)
root_qdisc() { tc qdisc show dev "$1" root 2>/dev/null; }
ours() { grep -q "^qdisc htb $HANDLE: root" <<<"$(root_qdisc "$1")"; }
# Runs (or under --dry-run prints) one command; a failure says which and returns 1.
run() {
  if [ $dry_run -eq 1 ]; then
    echo "  $*"
    return 0
  fi
  local out
  if ! out=$("$@" 2>&1); then
    echo "nic-shaping.sh: '$*' failed: ${out##*$'\n'}" >&2
    return 1
  fi
}
variables() {
  local list
  list=$(IFS=,; echo "${nics[*]}")
  cat <<EOF
# NCCL and Open MPI on the shaped NICs, over TCP (tc does not shape RDMA); export on every rank:
export NCCL_SOCKET_IFNAME==$list NCCL_NET=Socket NCCL_IB_DISABLE=1
export NCCL_SOCKET_NTHREADS=$NCCL_THREADS NCCL_NSOCKS_PERTHREAD=$NCCL_SOCKS
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,vader,self OMPI_MCA_btl_tcp_if_include=$list OMPI_MCA_oob_tcp_if_include=$list
EOF
}

# --- the subcommands ---
status=0
case "$cmd" in
  show)
    for nic in "${nics[@]}"; do
      if ours "$nic"; then
        echo "# $nic: shaped by nic-shaping.sh"
        tc qdisc show dev "$nic"
        tc class show dev "$nic"
        tc filter show dev "$nic"
      else
        echo "# $nic: not shaped by nic-shaping.sh"
      fi
    done
    variables
    ;;
  remove)
    [ $dry_run -eq 1 ] && echo "# nic-shaping.sh remove would run (where its qdisc is there):"
    for nic in "${nics[@]}"; do
      if [ $dry_run -eq 1 ]; then
        run tc qdisc del dev "$nic" root handle "$HANDLE:"
      elif ours "$nic"; then
        run tc qdisc del dev "$nic" root handle "$HANDLE:" && echo "$nic: shaping removed" || status=1
      else
        echo "$nic: nothing to remove (no nic-shaping.sh qdisc there)"
      fi
    done
    ;;
  apply)
    bits=$(bits_of "$rate")
    burst=$(burst_of "$bits")
    [ $dry_run -eq 1 ] && echo "# nic-shaping.sh apply would run:"
    for nic in "${nics[@]}"; do
      if [ $dry_run -eq 0 ]; then
        if ours "$nic"; then
          echo "$nic: replacing this script's earlier shaping"
          run tc qdisc del dev "$nic" root handle "$HANDLE:" || { status=1 && continue; }
        elif ! grep -qE "^qdisc [a-z_]+ 0: root" <<<"$(root_qdisc "$nic")"; then
          # The kernel's default root (handle 0:) may be replaced; anyone else's stays.
          echo "nic-shaping.sh: $nic has a root qdisc this script did not make ($(root_qdisc "$nic")); refusing to replace it" >&2
          status=1 && continue
        fi
      fi
      line=$(line_rate "$nic")
      line_burst=$(burst_of "$(bits_of "$line")")
      ok=1 delayed=""
      run tc qdisc add dev "$nic" root handle "$HANDLE:" htb default 2 &&
        run tc class add dev "$nic" parent "$HANDLE:" classid "$HANDLE:1" htb rate "$rate" ceil "$rate" \
          burst "$burst" cburst "$burst" quantum 60000 &&
        run tc class add dev "$nic" parent "$HANDLE:" classid "$HANDLE:2" htb rate "$line" ceil "$line" \
          burst "$line_burst" cburst "$line_burst" quantum 60000 || ok=0
      for p in "${peers[@]}"; do
        [ $ok -eq 1 ] || break
        if [[ $p == *:* ]]; then  # filters of one priority share a protocol: IPv6 gets its own
          run tc filter add dev "$nic" parent "$HANDLE:" protocol ipv6 prio 2 u32 match ip6 dst "$p" flowid "$HANDLE:1" || ok=0
        else
          run tc filter add dev "$nic" parent "$HANDLE:" protocol ip prio 1 u32 match ip dst "$p" flowid "$HANDLE:1" || ok=0
        fi
      done
      if [ $ok -eq 1 ] && [ -n "$delay_ms" ]; then
        # Packets in flight over the delay at the rate, in full frames, with room to spare.
        limit=$(awk -v b="$bits" -v d="$delay_ms" 'BEGIN { x = b / 8 * d / 1000 / 1500 * 2; printf "%.0f\n", (x < 1000 ? 1000 : x) }')
        netem=(tc qdisc add dev "$nic" parent "$HANDLE:1" handle "$NETEM_HANDLE:" netem delay "${delay_ms}ms" limit "$limit")
        if [ $dry_run -eq 1 ]; then
          echo "  ${netem[*]}    # where the kernel has netem; else the rate alone"
        elif out=$("${netem[@]}" 2>&1); then
          delayed=" + ${delay_ms} ms"
        else
          echo "$nic: this kernel has no netem (${out##*$'\n'}): shaping the rate only, without the ${delay_ms} ms delay"
        fi
      fi
      if [ $ok -eq 0 ]; then
        status=1
        [ $dry_run -eq 0 ] && ours "$nic" && tc qdisc del dev "$nic" root handle "$HANDLE:" 2>/dev/null
      elif [ $dry_run -eq 0 ]; then
        echo "$nic: traffic to ${peers[*]} shaped to $rate$delayed; the rest unshaped (htb at the NIC's $line)"
      fi
    done
    [ $status -eq 0 ] && variables
    ;;
esac
exit $status
