#!/usr/bin/env bash
# ekept.sh WORK ROUNDS : e (the many tree warm, wrk -c200) in four configs, each alone on CPU 0 with wrk on CPU 1,
# started in turn, the order rotated each round; 5 s of wrk to warm each, then 5 s measured:
#   defaults     flash_serve with its defaults on e's paths (many.uris): descriptors for a quarter of the limit,
#                a 64 MiB memory cache, so most requests open their file again
#   kept         flash_serve with `max_open_files 15000` and `memory_cache 0` on the first 12,000 of those paths:
#                every path keeps its descriptor, the body leaves by one read and write
#   memory       flash_serve with its defaults on the first 5,000 paths: every body in the memory cache
#   respond_8k   Caddy's floor: an 8 KiB `respond` with a file's headers, on e's paths
# WORK is a folder `bench/run --keep` left (caddy, data/, many.uris, paths.lua, respond_8k.Caddyfile).
# Prints, per run: requests per second and the server's CPU per request (/proc/PID/stat). Run nothing else.
# CADDY=binary runs another build than WORK's; WRAP=0 leaves the listener wrapper out of flash_serve's configs;
# CONFIGS="kept defaults" runs only those.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: ekept.sh WORK ROUNDS" >&2; exit 2; }
W=$1 R=$2 port=18690 tck=$(getconf CLK_TCK) CADDY=${CADDY:-$1/caddy} WRAP=${WRAP:-1}
ulimit -n 20000
pid=
trap '[ -n "$pid" ] && kill "$pid" 2> /dev/null; wait 2> /dev/null' EXIT
head -n 12000 "$W/many.uris" > "$W/many-12000.uris"
head -n 5000 "$W/many.uris" > "$W/many-5000.uris"
# As the bench's flash_serve.Caddyfile: the listener wrapper, without which a resident body leaves by a copy.
wrapper='\tservers {\n\t\tlistener_wrappers {\n\t\t\tflash_serve\n\t\t}\n\t}\n'
[ "$WRAP" = 1 ] || wrapper=
site() { printf "{\n\tadmin off\n\tpersist_config off\n\tstorage file_system %s/caddydata-ekept\n\tlog {\n\t\tlevel ERROR\n\t}\n$wrapper}\nhttp://127.0.0.1:%d {\n\tbind 127.0.0.1\n\troot * %s/data\n\t%s\n}\n" "$W" "$port" "$W" "$1"; }
site "flash_serve" > "$W/ekept-defaults.Caddyfile"
site "flash_serve {
		max_open_files 15000
		memory_cache 0
	}" > "$W/ekept-kept.Caddyfile"
cp "$W/ekept-defaults.Caddyfile" "$W/ekept-memory.Caddyfile"
sed "s|^http://127.0.0.1:[0-9]* {|http://127.0.0.1:$port {|" "$W/respond_8k.Caddyfile" > "$W/ekept-respond_8k.Caddyfile"
grep -q "127.0.0.1:$port {" "$W/ekept-respond_8k.Caddyfile" || { echo "ekept.sh: respond_8k.Caddyfile has no http:// site" >&2; exit 1; }
uris() { case $1 in kept) echo "$W/many-12000.uris" ;; memory) echo "$W/many-5000.uris" ;; *) echo "$W/many.uris" ;; esac; }
find "$W/data/many" -type f -print0 | xargs -0 cat > /dev/null
read -r -a cfgs <<< "${CONFIGS:-defaults kept memory respond_8k}"
ncfg=${#cfgs[@]}
for r in $(seq "$R"); do
	for k in $(seq 0 $((ncfg - 1))); do
		c=${cfgs[$(((k + r) % ncfg))]}
		[ -z "$(ss -Hltn "( sport = :$port )")" ] || { echo "ekept.sh: port $port is in use" >&2; exit 1; }
		taskset -c 0 "$CADDY" run --config "$W/ekept-$c.Caddyfile" --adapter caddyfile > "$W/ekept.log" 2>&1 &
		pid=$!
		for _ in $(seq 50); do [ -n "$(ss -Hltn "( sport = :$port )")" ] && break; sleep 0.1; done
		taskset -c 1 wrk -t1 -c200 -d5s -s "$W/paths.lua" "http://127.0.0.1:$port" -- "$(uris "$c")" > /dev/null
		read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
		out=$(taskset -c 1 wrk -t1 -c200 -d5s -s "$W/paths.lua" "http://127.0.0.1:$port" -- "$(uris "$c")")
		read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
		bad=$(awk '/Non-2xx/{print $NF} /Socket errors/{print "socket errors"}' <<< "$out")
		[ -z "$bad" ] || { echo "ekept.sh: $c: $bad" >&2; echo "$out" >&2; exit 1; }
		n=$(awk '/requests in/{print $1}' <<< "$out")
		printf '%s %-10s rps %s cpu_us/req %s\n' "$r" "$c" "$(awk '/Requests\/sec/{print $2}' <<< "$out")" \
			"$(awk -v c=$((u1 - u0 + s1 - s0)) -v t="$tck" -v q="$n" 'BEGIN {printf "%.1f", c / t * 1e6 / q}')"
		kill "$pid"
		wait "$pid" 2> /dev/null || true
		pid=
	done
done
