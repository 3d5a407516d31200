#!/usr/bin/env bash
# f.sh WORK ROUNDS: workload f (the many-files tree, cold) for flash_serve (behind its listener wrapper), nginx_aio
# (the bench's nginx with its 32-thread pool) and eresp (Caddy's `respond` of an 8 KiB body with a file's headers:
# Caddy's ceiling for this answer), each started alone on CPU 0 after the page cache and dentries were dropped, then
# 8 s of wrk -c200 on CPU 1; order rotated per round. No perf attached: its tracepoints on every syscall and context
# switch cost nginx_aio's thread pool (about 4 context switches per request) far more than the others.
# WORK is a folder bench/run --keep left (data/, many.uris, paths.lua, nginx_aio.conf); /tmp/caddy is ./xcaddy built
# (go build -o /tmp/caddy ./xcaddy). Root only (drop_caches). Prints one line per run: rps and server CPU per request.
set -u; W=$1 R=$2; dir=$(mktemp -d); tck=$(getconf CLK_TCK)
ulimit -n 20000
nginx=$(command -v nginx || echo /usr/sbin/nginx)
nport=$(awk '/listen 127.0.0.1:/{sub(/.*:/, ""); sub(/;/, ""); print; exit}' "$W/nginx_aio.conf")
body=$(head -c 8192 /dev/zero | tr '\0' x)
printf '{\n\tadmin off\n\tpersist_config off\n\tlog {\n\t\tlevel ERROR\n\t}\n\tservers {\n\t\tlistener_wrappers {\n\t\t\tflash_serve\n\t\t}\n\t}\n}\nhttp://127.0.0.1:18600 {\n\tbind 127.0.0.1\n\troot * %s/data\n\tflash_serve\n}\n' "$W" >"$dir/eflash.Caddyfile"
printf '{\n\tadmin off\n\tpersist_config off\n\tlog {\n\t\tlevel ERROR\n\t}\n}\nhttp://127.0.0.1:18600 {\n\tbind 127.0.0.1\n\theader {\n\t\tContent-Type application/octet-stream\n\t\tAccept-Ranges bytes\n\t\tEtag "\\"dl3qk5q2s6x7sg\\""\n\t\tLast-Modified "Mon, 30 Nov 2026 10:00:00 GMT"\n\t}\n\trespond "%s" 200\n}\n' "$body" >"$dir/eresp.Caddyfile"
for r in $(seq 1 "$R"); do
	case $((r % 3)) in 1) ord="eflash nginx_aio eresp" ;; 2) ord="nginx_aio eresp eflash" ;; 0) ord="eresp eflash nginx_aio" ;; esac
	for c in $ord; do
		if [ $c != nginx_aio ]; then
			taskset -c 0 /tmp/caddy run --config "$dir/$c.Caddyfile" --adapter caddyfile >/dev/null 2>&1 & port=18600
		else
			taskset -c 0 "$nginx" -p "$W" -c "$W/nginx_aio.conf" & port=$nport
		fi
		p=$!
		for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done
		sync; echo 3 >/proc/sys/vm/drop_caches
		read -r u0 s0 < <(awk '{print $14, $15}' /proc/$p/stat)
		out=$(taskset -c 1 wrk -t1 -c200 -d8s -s "$W/paths.lua" "http://127.0.0.1:$port" -- "$W/many.uris")
		read -r u1 s1 < <(awk '{print $14, $15}' /proc/$p/stat)
		req=$(echo "$out" | awk '/requests in/{print $1}'); rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
		echo "$r $c $rps $req $((u1 - u0)) $((s1 - s0))" | awk -v t="$tck" '{printf "%s %s rps=%s cpu_us/req=%.1f user=%d sys=%d\n",$1,$2,$3,($5+$6)*1e6/t/$4,$5,$6}'
		kill $p; wait $p 2>/dev/null
	done
done
rm -rf "$dir"
