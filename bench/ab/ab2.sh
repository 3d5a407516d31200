#!/usr/bin/env bash
# ab2.sh WL ROUNDS CONFIG...: each config alone on CPU 0 (started in turn, order rotated), wrk on CPU 1.
set -u; cd /tmp/ab2; W=/tmp/flash-bench-2270086027
WL=$1 R=$2; shift 2; cfgs=("$@"); n=${#cfgs[@]}; tck=$(getconf CLK_TCK)
ulimit -n 20000
case $WL in
e) args=(-t1 -c200 -s $W/paths.lua http://127.0.0.1:18600 -- $W/many.uris) ;;
g) args=(-t1 -c64 -s $W/paths.lua http://127.0.0.1:18600 -- $W/missing.uris) ;;
esac
for r in $(seq 1 $R); do
  for k in $(seq 0 $((n-1))); do
    c=${cfgs[$(( (k + r) % n ))]}
    # This VM pages out what it sees idle (DAMON): read the tree back first.
    [ "$WL" = e ] && find $W/data/many -type f -print0 | taskset -c 1 xargs -0 cat >/dev/null
    taskset -c 0 /tmp/caddy run --config $c.Caddyfile --adapter caddyfile >/dev/null 2>&1 & p=$!
    for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18600/ && break; sleep 0.1; done
    taskset -c 1 wrk -d3s "${args[@]}" >/dev/null
    read -r u0 s0 < <(awk '{print $14, $15}' /proc/$p/stat)
    out=$(taskset -c 1 wrk -d5s "${args[@]}")
    read -r u1 s1 < <(awk '{print $14, $15}' /proc/$p/stat)
    req=$(echo "$out" | awk '/requests in/{print $1}'); rps=$(echo "$out" | awk '/Requests\/sec/{print $2}'); bad=$(echo "$out" | awk '/Non-2xx/{print $NF}')
    echo "$r $c $rps $req $((u1-u0)) $((s1-s0)) ${bad:-0}" | awk -v t=$tck '{printf "%s %s rps=%s cpu_us/req=%.1f user=%d sys=%d non2xx=%s\n",$1,$2,$3,($5+$6)*1e6/t/$4,$5,$6,$7}'
    kill $p; wait $p 2>/dev/null
  done
done
