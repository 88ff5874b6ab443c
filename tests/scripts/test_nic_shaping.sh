#!/usr/bin/env bash
# scripts/nic-shaping.sh. Everywhere: bad input and the refusals (no --nic, no
# confirmation, a NIC that does not exist) exit 2 with one line and touch nothing. As root where
# network namespaces are permitted, for real on a veth pair between two throwaway namespaces:
# apply puts the htb root, the shaped class and the destination filters on the named NIC only,
# the peers' traffic lands in the shaped class and other traffic does not, a second apply
# replaces the first, someone else's root qdisc is refused, and remove takes everything off and
# is idempotent (twice, and where nothing was applied: exit 0, saying nothing was there). The
# namespaces are deleted on every exit. Skips (77) without root or namespaces.
set -uo pipefail
src=${1:?usage: test_nic_shaping.sh SOURCE_DIR}
script=$src/scripts/nic-shaping.sh
tmp=$(mktemp -d)
ns_a=saxnic-$$-a ns_b=saxnic-$$-b
cleanup() {
  ip netns delete "$ns_a" 2>/dev/null
  ip netns delete "$ns_b" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_bad "what" "says" args...: exit 2, one stderr line naming `says`, nothing on stdout.
expect_bad() {
  local what=$1 says=$2
  shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [ $rc -eq 2 ] || fail "$what: exit $rc, expected 2 ($(cat "$tmp/err"))"
  [ "$(wc -l <"$tmp/err")" -eq 1 ] || fail "$what: expected one line on stderr, got: $(cat "$tmp/err")"
  grep -qF -- "$says" "$tmp/err" || fail "$what: stderr does not say '$says': $(cat "$tmp/err")"
  [ ! -s "$tmp/out" ] || fail "$what: wrote to stdout: $(cat "$tmp/out")"
}

# lo exists everywhere; the refusals come before anything is touched, so they run as any user.
expect_bad "no subcommand" "expected a subcommand" "$script"
expect_bad "unknown subcommand" "unknown subcommand 'shape'" "$script" shape --nic lo
expect_bad "no --nic" "--nic: name each NIC" "$script" apply --peer 10.2.0.0/16 --rate 1gbit --yes-i-mean-it
expect_bad "remove without --nic" "--nic: name each NIC" "$script" remove --yes-i-mean-it
expect_bad "unknown NIC" "--nic saxnosuch0: no such network interface" \
  "$script" apply --nic saxnosuch0 --peer 10.2.0.0/16 --rate 1gbit --yes-i-mean-it
expect_bad "bad NIC name" "--nic 'eth0;rm': expected an interface name" \
  "$script" apply --nic 'eth0;rm' --peer 10.2.0.0/16 --rate 1gbit --yes-i-mean-it
expect_bad "no confirmation" "add --yes-i-mean-it to confirm" "$script" apply --nic lo --peer 10.2.0.0/16 --rate 1gbit
expect_bad "remove without confirmation" "add --yes-i-mean-it to confirm" "$script" remove --nic lo
expect_bad "no peer" "--peer: expected the other buildings'" "$script" apply --nic lo --rate 1gbit --yes-i-mean-it
expect_bad "bad peer" "--peer '10.2.0.300/16'" "$script" apply --nic lo --peer 10.2.0.300/16 --rate 1gbit --yes-i-mean-it
expect_bad "no rate" "--rate: expected" "$script" apply --nic lo --peer 10.2.0.0/16 --yes-i-mean-it
expect_bad "bytes rate" "--rate '10gbps'" "$script" apply --nic lo --peer 10.2.0.0/16 --rate 10gbps --yes-i-mean-it
expect_bad "bad delay" "--delay-ms '-1'" \
  "$script" apply --nic lo --peer 10.2.0.0/16 --rate 1gbit --delay-ms -1 --yes-i-mean-it
expect_bad "rate on remove" "belong to apply" "$script" remove --nic lo --rate 1gbit --yes-i-mean-it
# --dry-run prints the commands and the variables and touches nothing: lo keeps its qdisc.
before=$(tc qdisc show dev lo 2>/dev/null)
if out=$("$script" apply --nic lo --peer 10.2.0.0/16 --peer fd00:2::/64 --rate 10gbit --delay-ms 2 --dry-run 2>&1); then
  for want in "tc qdisc add dev lo root handle 5a5: htb default 2" "match ip dst 10.2.0.0/16 flowid 5a5:1" \
    "protocol ipv6 prio 2 u32 match ip6 dst fd00:2::/64" "netem delay 2ms" "NCCL_SOCKET_IFNAME==lo" "NCCL_IB_DISABLE=1" \
    "NCCL_NET=Socket" "OMPI_MCA_btl_tcp_if_include=lo" "OMPI_MCA_oob_tcp_if_include=lo" "NCCL_SOCKET_NTHREADS=4"; do
    grep -qF -- "$want" <<<"$out" || fail "--dry-run does not print '$want': $out"
  done
else
  fail "apply --dry-run exited $?: $out"
fi
[ "$(tc qdisc show dev lo 2>/dev/null)" = "$before" ] || fail "--dry-run changed lo's qdisc"

if [ "$(id -u)" -ne 0 ]; then
  echo "SKIP (after the refusals passed: $failures failures): applying needs root"
  [ $failures -eq 0 ] && exit 77 || exit 1
fi
if ! ip netns add "$ns_a" 2>"$tmp/err" || ! ip netns add "$ns_b" 2>>"$tmp/err"; then
  echo "SKIP (after the refusals passed: $failures failures): network namespaces not permitted: $(head -1 "$tmp/err")"
  [ $failures -eq 0 ] && exit 77 || exit 1
fi

# Two namespaces joined by a veth pair: sxa (10.231.250.1) in A, sxb (10.231.250.2) in B; a second
# address on sxb (10.231.251.2) is a destination outside the shaped prefix.
in_a() { ip netns exec "$ns_a" "$@"; }
# shows PATTERN COMMAND...: whether the command's output matches (grep on a captured string: under
# pipefail, grep -q ending a pipe early would fail the pipe).
shows() {
  local text
  text=$("${@:2}" 2>&1)
  grep -qE -- "$1" <<<"$text"
}
if ! { ip -n "$ns_a" link add sxa type veth peer name sxb netns "$ns_b" &&
  ip -n "$ns_a" addr add 10.231.250.1/24 dev sxa && ip -n "$ns_a" addr add 10.231.251.1/24 dev sxa &&
  ip -n "$ns_b" addr add 10.231.250.2/24 dev sxb && ip -n "$ns_b" addr add 10.231.251.2/24 dev sxb &&
  ip -n "$ns_a" link set sxa up && ip -n "$ns_b" link set sxb up && ip -n "$ns_a" link set lo up; }; then
  echo "FAIL: could not build the veth pair"
  exit 1
fi

# Nothing applied yet: remove says so and succeeds.
out=$(in_a "$script" remove --nic sxa --yes-i-mean-it 2>&1) || fail "remove before apply exited $?: $out"
grep -q "nothing to remove" <<<"$out" || fail "remove before apply does not say nothing was there: $out"

out=$(in_a "$script" apply --nic sxa --peer 10.231.250.0/24 --rate 100mbit --delay-ms 5 --yes-i-mean-it 2>&1) ||
  fail "apply exited $?: $out"
grep -qF "NCCL_SOCKET_IFNAME==sxa" <<<"$out" || fail "apply does not print the NCCL variables: $out"
grep -qF "OMPI_MCA_btl_tcp_if_include=sxa" <<<"$out" || fail "apply does not print the Open MPI variables: $out"
if in_a tc qdisc add dev lo root handle 7: netem delay 1ms 2>/dev/null; then
  in_a tc qdisc del dev lo root
  shows "netem" in_a tc qdisc show dev sxa || fail "the kernel has netem but apply did not add it: $(in_a tc qdisc show dev sxa)"
else
  grep -q "no netem" <<<"$out" || fail "apply does not say the kernel has no netem: $out"
fi
shows "^qdisc htb 5a5: root .*default 0x2" in_a tc qdisc show dev sxa || fail "no htb root: $(in_a tc qdisc show dev sxa)"
shows "class htb 5a5:1 .*rate 100Mbit ceil 100Mbit" in_a tc class show dev sxa ||
  fail "no shaped class at 100Mbit: $(in_a tc class show dev sxa)"
shows "match 0ae7fa00/ffffff00 at 16" in_a tc filter show dev sxa ||
  fail "no filter on 10.231.250.0/24: $(in_a tc filter show dev sxa)"
shows "5a5:" tc qdisc show && fail "the host's own NICs were touched: $(tc qdisc show | grep 5a5:)"

# UDP to the peer prefix lands in the shaped class; to the other address in the default class.
sent() { in_a tc -s class show dev sxa classid "$1" | awk '/Sent/ { print $4; exit }'; }
in_a bash -c 'for i in 1 2 3 4 5; do echo x >/dev/udp/10.231.250.2/9; sleep 0.05; done' 2>/dev/null
shaped=$(sent 5a5:1) && shaped_before_other=$shaped
in_a bash -c 'for i in 1 2 3; do echo x >/dev/udp/10.231.251.2/9; sleep 0.05; done' 2>/dev/null
[ "${shaped:-0}" -ge 5 ] || fail "the peer's packets did not go through the shaped class ($shaped packets)"
[ "$(sent 5a5:1)" = "$shaped_before_other" ] || fail "packets to a non-peer address went through the shaped class"
[ "$(sent 5a5:2)" -ge 3 ] || fail "packets to a non-peer address did not go through the default class"

# A second apply replaces the first.
out=$(in_a "$script" apply --nic sxa --peer 10.231.250.0/24 --rate 200mbit --yes-i-mean-it 2>&1) ||
  fail "a second apply exited $?: $out"
shows "class htb 5a5:1 .*rate 200Mbit" in_a tc class show dev sxa ||
  fail "the second apply's rate is not in place: $out $(in_a tc class show dev sxa)"
[ "$(in_a tc qdisc show dev sxa | grep -c '^qdisc htb')" -eq 1 ] || fail "two htb roots after a second apply"

# remove, twice: everything off, the second says nothing was there.
out=$(in_a "$script" remove --nic sxa --yes-i-mean-it 2>&1) || fail "remove exited $?: $out"
grep -q "shaping removed" <<<"$out" || fail "remove does not say it removed: $out"
shows "htb|netem" in_a tc qdisc show dev sxa && fail "remove left: $(in_a tc qdisc show dev sxa)"
shows . in_a tc filter show dev sxa && fail "remove left filters: $(in_a tc filter show dev sxa)"
out=$(in_a "$script" remove --nic sxa --yes-i-mean-it 2>&1) || fail "a second remove exited $?: $out"
grep -q "nothing to remove" <<<"$out" || fail "a second remove does not say nothing was there: $out"

# Someone else's root qdisc is neither replaced by apply nor removed by remove.
in_a tc qdisc add dev sxa root handle 1: htb
out=$(in_a "$script" apply --nic sxa --peer 10.231.250.0/24 --rate 100mbit --yes-i-mean-it 2>&1)
rc=$?
[ $rc -eq 1 ] || fail "apply over another root qdisc exited $rc, expected 1: $out"
grep -q "did not make" <<<"$out" || fail "apply over another root qdisc does not say why: $out"
out=$(in_a "$script" remove --nic sxa --yes-i-mean-it 2>&1) || fail "remove beside another root qdisc exited $?"
shows "^qdisc htb 1: root" in_a tc qdisc show dev sxa || fail "remove took away a qdisc it did not make"

if [ $failures -ne 0 ]; then
  echo "$failures failures"
  exit 1
fi
echo "nic-shaping.sh: refusals, apply, classification, replace, remove twice: all passed"
