#!/usr/bin/env bash
# alt.sh N A B: both servers running on CPU 0; N pairs of 2 s wrk windows alternating A (18600) and B (18601).
set -u; cd /tmp/ab; N=$1
taskset -c 0 /tmp/caddy run --config $2.Caddyfile --adapter caddyfile >/dev/null 2>&1 & pa=$!
taskset -c 0 /tmp/caddy run --config $3.Caddyfile --adapter caddyfile >/dev/null 2>&1 & pb=$!
sleep 2
for port in 18600 18601; do taskset -c 1 wrk -t1 -c64 -d2s http://127.0.0.1:$port/1k.bin >/dev/null; done
for i in $(seq 1 $N); do
  if [ $((i%2)) = 0 ]; then ord="18600 18601"; else ord="18601 18600"; fi
  for port in $ord; do
    r=$(taskset -c 1 wrk -t1 -c64 -d2s http://127.0.0.1:$port/1k.bin | awk '/Requests\/sec/{print $2}')
    echo "$i $port $r"
  done
done
kill $pa $pb; wait
