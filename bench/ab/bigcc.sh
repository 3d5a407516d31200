#!/usr/bin/env bash
# bigcc.sh ROUNDS SERVER... : c's 1 GiB download, server on CPU 0 and curl on CPU 1, per GiB:
# the server's CPU (user+system, /proc/PID/stat), TCP data segments (nstat TcpExtTCPOrigDataSent),
# timer interrupts' hrtimers and softirqs on CPU 0 (perf stat). SERVER is one of
#   flash       $CADDY (default ./caddy, built from xcaddy/) with flash_serve on 127.0.0.1:18080
#   lighttpd    lighttpd 1.4 on 127.0.0.1:18081
#   gosendfile  bench/ab/gosendfile, 30 lines of Go: net.TCPConn.ReadFrom, Go's own sendfile loop
# Each server starts once a round, takes one download to warm up and then two measured ones.
# Run it as root (perf, nstat) with nothing else running; the congestion control in use is
# printed first: `sysctl -w net.ipv4.tcp_congestion_control=cubic` to compare with BBR.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
W=${W:-/tmp/bigcc}
CADDY=${CADDY:-$W/caddy}
mkdir -p "$W/data"
[ -s "$W/data/big.bin" ] || head -c 1G /dev/urandom > "$W/data/big.bin"
[ -x "$CADDY" ] || (cd "$repo/xcaddy" && go build -o "$CADDY" .)
[ -x "$W/gosendfile" ] || (cd "$repo" && go build -o "$W/gosendfile" ./bench/ab/gosendfile)
cat > "$W/Caddyfile" <<EOF
{
	admin 127.0.0.1:2998
	auto_https off
	servers {
		listener_wrappers {
			flash_serve
		}
	}
}
http://127.0.0.1:18080 {
	bind 127.0.0.1
	root * $W/data
	flash_serve
}
EOF
cat > "$W/lighttpd.conf" <<EOF
server.document-root = "$W/data"
server.bind = "127.0.0.1"
server.port = 18081
server.errorlog = "$W/lighttpd-error.log"
mimetype.assign = ( ".bin" => "application/octet-stream" )
EOF
echo "congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
cat "$W/data/big.bin" > /dev/null
start() {
	case $1 in
	flash) taskset -c 0 "$CADDY" run --config "$W/Caddyfile" --adapter caddyfile > "$W/caddy.log" 2>&1 & pid=$! port=18080 ;;
	lighttpd) taskset -c 0 lighttpd -D -f "$W/lighttpd.conf" & pid=$! port=18081 ;;
	gosendfile) taskset -c 0 "$W/gosendfile" 127.0.0.1:18082 "$W/data/big.bin" & pid=$! port=18082 ;;
	*) echo "bigcc.sh: unknown server $1" >&2; exit 2 ;;
	esac
	for _ in $(seq 50); do curl -s -o /dev/null -r 0-0 "http://127.0.0.1:$port/big.bin" && return; sleep 0.1; done
	echo "bigcc.sh: $1 did not start" >&2; exit 1
}
for r in $(seq "$1"); do
	for s in "${@:2}"; do
		start "$s"
		taskset -c 1 curl -s -o /dev/null "http://127.0.0.1:$port/big.bin"
		for _ in 1 2; do
			read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
			nstat -n > /dev/null
			perf stat -x, -C 0 -e timer:hrtimer_expire_entry,irq:softirq_entry -o "$W/perf.txt" -- \
				taskset -c 1 curl -s -o /dev/null -w "%{speed_download}\n" "http://127.0.0.1:$port/big.bin" > "$W/speed.txt"
			segs=$(nstat -z TcpExtTCPOrigDataSent | awk '/TCPOrigDataSent/{print $2}')
			read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
			ht=$(awk -F, '/hrtimer_expire_entry/{print $1}' "$W/perf.txt")
			sq=$(awk -F, '/softirq_entry/{print $1}' "$W/perf.txt")
			printf "%s %-10s cpu_ms %4d GBps %.2f segs %6d hrtimers %6d softirqs %6d\n" "$r" "$s" \
				$(( (u1 - u0 + s1 - s0) * 1000 / $(getconf CLK_TCK) )) "$(awk '{print $1/1e9}' "$W/speed.txt")" "$segs" "$ht" "$sq"
		done
		kill "$pid"; wait "$pid" 2> /dev/null
	done
done
