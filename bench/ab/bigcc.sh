#!/usr/bin/env bash
# bigcc.sh ROUNDS SERVER... : c's 1 GiB download, the server on CPU 0 and curl on CPU 1. For each download:
#   cpu_ms     the server's CPU time, all threads (/proc/PID/task/*/schedstat, in ns, shown in ms)
#   GBps       curl's rate
#   segs       TCP data segments sent, system-wide (nstat TcpExtTCPOrigDataSent): run nothing else
#   hrtimers   hrtimer expirations on CPU 0, of every kind (perf stat -C 0 -e timer:hrtimer_expire_entry)
#   softirqs   softirqs of every kind run on CPU 0 (irq:softirq_entry)
# SERVER is one of
#   flash        $CADDY (default $W/caddy, built from xcaddy/ when missing) with flash_serve on 127.0.0.1:18080
#   flash:PATH   the same with the caddy binary at PATH (an experiment build beside main's)
#   lighttpd     lighttpd 1.4 on 127.0.0.1:18081
#   gosendfile   bench/ab/gosendfile on 127.0.0.1:18082: io.Copy from the file to the connection, no Caddy
# With WHY=1, each measured download also prints what the counts are made of, from a perf record of CPU 0:
#   pace_kick / wakeup   hrtimers of TCP's pacing (tcp_pace_kick) and of sleeping threads (hrtimer_wakeup)
#   net_rx / hrtimer_sirq   NET_RX and HRTIMER softirqs
#   sendfile eagain nanosleep futex epoll   the server's calls (sendfile's that returned EAGAIN)
# Each server starts once a round, takes one download to warm up and then two measured ones. Run it as root
# (perf, the page cache) with nothing else running. The congestion control in use is printed first:
# `sysctl -w net.ipv4.tcp_congestion_control=cubic` to compare with BBR, and set it back afterwards.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bigcc.sh ROUNDS flash|flash:PATH|lighttpd|gosendfile..." >&2; exit 2; }
for cmd in perf nstat taskset curl ss go; do
	command -v "$cmd" > /dev/null || { echo "bigcc.sh: $cmd is missing" >&2; exit 1; }
done
perf stat -C 0 -e timer:hrtimer_expire_entry -o /dev/null -- true 2> /dev/null ||
	{ echo "bigcc.sh: perf cannot count CPU 0's tracepoints (run as root)" >&2; exit 1; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
W=${W:-/tmp/bigcc}
CADDY=$(realpath -m "${CADDY:-$W/caddy}")
size=$((1 << 30))
mkdir -p "$W/data"
if [ "$(stat -L -c %s "$W/data/big.bin" 2> /dev/null || echo 0)" != "$size" ]; then
	head -c "$size" /dev/urandom > "$W/data/big.bin.part" && mv "$W/data/big.bin.part" "$W/data/big.bin"
fi
[ -x "$CADDY" ] || (cd "$repo/xcaddy" && go build -o "$CADDY" .)
(cd "$repo" && go build -o "$W/gosendfile" ./bench/ab/gosendfile)
cat > "$W/Caddyfile" << EOF
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
cat > "$W/lighttpd.conf" << EOF
server.document-root = "$W/data"
server.bind = "127.0.0.1"
server.port = 18081
server.errorlog = "$W/lighttpd-error.log"
mimetype.assign = ( ".bin" => "application/octet-stream" )
EOF
echo "congestion control: $(cat /proc/sys/net/ipv4/tcp_congestion_control)"
pid=
trap '[ -n "$pid" ] && kill "$pid" 2> /dev/null; wait 2> /dev/null' EXIT
listening() { [ -n "$(ss -Hltn "( sport = :$1 )")" ]; }
start() {
	local bin
	case $1 in
	flash | flash:*)
		bin=$CADDY
		[ "$1" = flash ] || bin=$(realpath "${1#flash:}")
		port=18080
		listening $port && { echo "bigcc.sh: port $port is in use" >&2; exit 1; }
		taskset -c 0 "$bin" run --config "$W/Caddyfile" --adapter caddyfile > "$W/caddy.log" 2>&1 &
		;;
	lighttpd)
		port=18081
		listening $port && { echo "bigcc.sh: port $port is in use" >&2; exit 1; }
		taskset -c 0 lighttpd -D -f "$W/lighttpd.conf" &
		;;
	gosendfile)
		port=18082
		listening $port && { echo "bigcc.sh: port $port is in use" >&2; exit 1; }
		taskset -c 0 "$W/gosendfile" 127.0.0.1:$port "$W/data/big.bin" &
		;;
	*) echo "bigcc.sh: unknown server $1" >&2; exit 2 ;;
	esac
	pid=$!
	for _ in $(seq 50); do
		kill -0 "$pid" 2> /dev/null || { echo "bigcc.sh: $1 exited at its start" >&2; exit 1; }
		listening $port && return
		sleep 0.1
	done
	echo "bigcc.sh: $1 did not listen on $port" >&2
	exit 1
}
cpu_ns() { { cat /proc/"$pid"/task/*/schedstat 2> /dev/null || true; } | awk '{t += $1} END {print t + 0}'; }
cat "$W/data/big.bin" > /dev/null
for r in $(seq "$1"); do
	for s in "${@:2}"; do
		start "$s"
		taskset -c 1 curl -fsS -o /dev/null "http://127.0.0.1:$port/big.bin"
		for _ in 1 2; do
			c0=$(cpu_ns)
			nstat -n > /dev/null
			if [ -n "${WHY:-}" ]; then
				perf record -q -C 0 -o "$W/why.data" -e timer:hrtimer_expire_entry,irq:softirq_entry \
					-e syscalls:sys_exit_sendfile64,syscalls:sys_enter_nanosleep,syscalls:sys_enter_futex \
					-e syscalls:sys_enter_epoll_pwait,syscalls:sys_enter_epoll_wait -- \
					taskset -c 1 curl -fsS -o /dev/null -w "%{speed_download}\n" "http://127.0.0.1:$port/big.bin" > "$W/speed.txt"
				perf script -i "$W/why.data" -F pid,event,trace 2> /dev/null | awk -v p="$pid" -v s="$s" '
					/hrtimer_expire_entry/ { if (/function=tcp_pace_kick/) pk++; if (/function=hrtimer_wakeup/) wk++ }
					/softirq_entry/ { if (/action=NET_RX/) rx++; if (/action=HRTIMER/) hs++ }
					$1 == p && /sys_exit_sendfile64/ { sf++; if (/0xfffffffffffffff5/) ea++ }
					$1 == p && /sys_enter_nanosleep/ { ns++ }
					$1 == p && /sys_enter_futex/ { fx++ }
					$1 == p && /sys_enter_epoll_p?wait/ { ep++ }
					END { printf "  why %s: pace_kick %d wakeup %d net_rx %d hrtimer_sirq %d sendfile %d eagain %d nanosleep %d futex %d epoll %d\n",
						s, pk, wk, rx, hs, sf, ea, ns, fx, ep }' > "$W/why.txt"
				ht=$(perf script -i "$W/why.data" -F event 2> /dev/null | grep -c hrtimer_expire_entry || true)
				sq=$(perf script -i "$W/why.data" -F event 2> /dev/null | grep -c softirq_entry || true)
			else
				perf stat -x, -C 0 -e timer:hrtimer_expire_entry,irq:softirq_entry -o "$W/perf.txt" -- \
					taskset -c 1 curl -fsS -o /dev/null -w "%{speed_download}\n" "http://127.0.0.1:$port/big.bin" > "$W/speed.txt"
				ht=$(awk -F, '/hrtimer_expire_entry/{print $1}' "$W/perf.txt")
				sq=$(awk -F, '/softirq_entry/{print $1}' "$W/perf.txt")
			fi
			segs=$(nstat -z TcpExtTCPOrigDataSent | awk '/TCPOrigDataSent/{print $2}')
			c1=$(cpu_ns)
			kill -0 "$pid" 2> /dev/null || { echo "bigcc.sh: $s exited during the download" >&2; exit 1; }
			printf "%s %-10s cpu_ms %5.1f GBps %.2f segs %6d hrtimers %6d softirqs %6d\n" "$r" "$s" \
				"$(awk -v a="$c0" -v b="$c1" 'BEGIN {print (b - a) / 1e6}')" "$(awk '{print $1 / 1e9}' "$W/speed.txt")" \
				"$segs" "$ht" "$sq"
			[ -z "${WHY:-}" ] || cat "$W/why.txt"
		done
		kill "$pid"
		wait "$pid" 2> /dev/null || true
		pid=
	done
done
