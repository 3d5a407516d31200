#!/usr/bin/env bash
# f.sh ROUNDS: flash_serve and nginx_aio, each started alone on CPU 0 after the page cache (and dentries) were dropped; 8 s of wrk -c200 on CPU 1.
set -u; cd /tmp/ab2; W=/tmp/flash-bench-2270086027; R=$1; tck=$(getconf CLK_TCK)
ulimit -n 20000
nginx=$(command -v nginx || echo /usr/sbin/nginx)
for r in $(seq 1 $R); do
  case $((r%3)) in 1) ord="eflash nginx_aio eresp";; 2) ord="nginx_aio eresp eflash";; 0) ord="eresp eflash nginx_aio";; esac
  for c in $ord; do
    if [ $c != nginx_aio ]; then taskset -c 0 /tmp/caddy run --config $c.Caddyfile --adapter caddyfile >/dev/null 2>&1 & port=18600
    else taskset -c 0 $nginx -p $W -c $W/nginx_aio.conf & port=18086; fi
    p=$!
    for _ in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:$port/ && break; sleep 0.1; done
    sync; echo 3 > /proc/sys/vm/drop_caches
    read -r u0 s0 < <(awk '{print $14, $15}' /proc/$p/stat)
    out=$(taskset -c 1 wrk -t1 -c200 -d8s -s $W/paths.lua http://127.0.0.1:$port -- $W/many.uris)
    read -r u1 s1 < <(awk '{print $14, $15}' /proc/$p/stat)
    req=$(echo "$out" | awk '/requests in/{print $1}'); rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
    echo "$r $c $rps $req $((u1-u0)) $((s1-s0))" | awk -v t=$tck '{printf "%s %s rps=%s cpu_us/req=%.1f user=%d sys=%d\n",$1,$2,$3,($5+$6)*1e6/t/$4,$5,$6}'
    kill $p; wait $p 2>/dev/null
  done
done
