#!/usr/bin/env bash
# h1.sh WORK ROUNDS: flash_serve (behind its listener wrapper) and file_server over HTTPS/1.1 (tls internal), one
# 1 GiB download each (curl on CPU 1) after one unmeasured one, each server started alone on CPU 0, order alternated.
# WORK is a folder bench/run --keep left (its data/1g.bin); /tmp/caddy is ./xcaddy built (go build -o /tmp/caddy ./xcaddy).
set -u; W=$1 R=$2; dir=$(mktemp -d); tck=$(getconf CLK_TCK)
for s in flash_serve file_server; do
	l=""; [ $s = flash_serve ] && l=$'\tservers {\n\t\tlistener_wrappers {\n\t\t\tflash_serve\n\t\t}\n\t}'
	printf '{\n\tadmin off\n\tpersist_config off\n\tskip_install_trust\n\tlocal_certs\n\tstorage file_system %s/data-%s\n\tlog {\n\t\tlevel ERROR\n\t}\n%s\n}\nhttps://127.0.0.1:18443 {\n\tbind 127.0.0.1\n\ttls internal\n\troot * %s/data\n\t%s\n}\n' \
		"$dir" $s "$l" "$W" $s >"$dir/$s.Caddyfile"
done
for r in $(seq 1 "$R"); do
	ord="flash_serve file_server"; [ $((r % 2)) = 0 ] && ord="file_server flash_serve"
	for s in $ord; do
		cat "$W/data/1g.bin" >/dev/null
		taskset -c 0 /tmp/caddy run --config "$dir/$s.Caddyfile" --adapter caddyfile >/dev/null 2>&1 & p=$!
		for _ in $(seq 50); do curl -sk -o /dev/null https://127.0.0.1:18443/1k.bin && break; sleep 0.1; done
		taskset -c 1 curl -sk --http1.1 -o /dev/null https://127.0.0.1:18443/1g.bin
		read -r u0 s0 < <(awk '{print $14, $15}' /proc/$p/stat)
		sp=$(taskset -c 1 curl -sk --http1.1 -o /dev/null -w '%{speed_download}' https://127.0.0.1:18443/1g.bin)
		read -r u1 s1 < <(awk '{print $14, $15}' /proc/$p/stat)
		echo "$r $s $sp $((u1 - u0)) $((s1 - s0))" | awk -v t="$tck" '{printf "%s %s GB/s=%.2f cpu_s=%.2f user=%d sys=%d\n",$1,$2,$3/1e9,($4+$5)/t,$4,$5}'
		kill $p; wait $p 2>/dev/null
	done
done
rm -rf "$dir"
