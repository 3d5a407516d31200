#!/usr/bin/env bash
# ab.sh ROUNDS CONFIG... : each config alone on CPU 0, wrk on CPU 1, started in turn, order rotated each round.
set -u
cd /tmp/ab
R=$1; shift; cfgs=("$@"); n=${#cfgs[@]}
tck=$(getconf CLK_TCK)
mallocs() { curl -s http://127.0.0.1:2999/debug/vars | python3 -c 'import json,sys; print(json.load(sys.stdin)["memstats"]["Mallocs"])'; }
for r in $(seq 1 $R); do
  for k in $(seq 0 $((n-1))); do
    c=${cfgs[$(( (k + r) % n ))]}
    taskset -c 0 /tmp/caddy run --config $c.Caddyfile --adapter caddyfile >/dev/null 2>&1 & p=$!
    for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:18600/1k.bin && break; sleep 0.1; done
    taskset -c 1 wrk -t1 -c64 -d2s http://127.0.0.1:18600/1k.bin >/dev/null
    m0=$(mallocs); read -r u0 s0 < <(awk '{print $14, $15}' /proc/$p/stat)
    out=$(taskset -c 1 wrk -t1 -c64 -d5s http://127.0.0.1:18600/1k.bin)
    read -r u1 s1 < <(awk '{print $14, $15}' /proc/$p/stat); m1=$(mallocs)
    req=$(echo "$out" | awk '/requests in/{print $1}'); rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    echo "$r $c $rps $req $((u1-u0)) $((s1-s0)) $(( (m1-m0) / req ))" | awk -v t=$tck '{printf "%s %s rps=%s cpu_us/req=%.1f user=%d sys=%d mallocs/req=%s\n",$1,$2,$3,($5+$6)*1e6/t/$4,$5,$6,$7}'
    kill $p; wait $p 2>/dev/null
  done
done
