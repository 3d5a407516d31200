#!/usr/bin/env bash
# fuser.sh WORK ROUNDS : workload f (the many tree, page cache and dentries dropped, wrk -c200 for $DUR s, 3 by
# default: fewer requests than many.uris has paths, so that every request is a first, cold one) for flash_serve,
# respond_8k (Caddy's floor: an 8 KiB `respond` with a file's headers, no lookup, no read) and nginx_aio, in an
# order rotated each round. Per request: the server's CPU time over the whole wrk run (/proc/PID/stat, over wrk's
# count of requests), split by a `perf record -F 999` of the server over the same run into
#   kernel       the kernel's symbols, but for irqsoff
#   irqsoff      pvm_irq_enable: this VM counts there the time spent with interrupts off, whatever its cause
#   syscall.ret  Go's Syscall6 and RawSyscall6: samples taken as a system call returns, kernel time in effect
#   rt.*         the Go runtime: alloc, gc, sched (scheduler, netpoller, timers, channels), stack, other
#   flash_serve caddy net/http   those packages; other: the rest (standard library, zap, the vDSO, nginx's own code)
# WORK is a folder `bench/run --keep` left (caddy, data/, many.uris, paths.lua, flash_serve.Caddyfile,
# respond_8k.Caddyfile, nginx_aio.conf). Root only (drop_caches, perf); run nothing else.
# WARM=S: bench/run's f instead, where the servers come from e with their caches warm: each server reads the tree
# with a warm page cache for S seconds of wrk first (as e does), then the caches are dropped as bench/run does
# (drop_caches 3: pages, and the dentries and inodes no descriptor holds), and wrk runs $DUR s (set 5 for
# bench/run's length: paths then repeat, as they do there). perf costs nginx_aio's 32 threads far more than the
# others (a quarter of its rate in that case): NOPERF=1 measures rate and CPU per request without it.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: fuser.sh WORK ROUNDS" >&2; exit 2; }
W=$1 R=$2 DUR=${DUR:-3} WARM=${WARM:-0} NOPERF=${NOPERF:-0}
for cmd in perf wrk taskset ss; do
	command -v "$cmd" > /dev/null || { echo "fuser.sh: $cmd is missing" >&2; exit 1; }
done
nginx=$(command -v nginx || echo /usr/sbin/nginx)
tck=$(getconf CLK_TCK)
ulimit -n 20000
pid= perfpid=
trap '[ -n "$perfpid" ] && kill -INT "$perfpid" 2> /dev/null; [ -n "$pid" ] && kill "$pid" 2> /dev/null; wait 2> /dev/null' EXIT
listening() { [ -n "$(ss -Hltn "( sport = :$1 )")" ]; }
start() {
	case $1 in
	nginx_aio)
		port=$(awk '/listen 127.0.0.1:/{sub(/.*:/, ""); sub(/;.*/, ""); print; exit}' "$W/nginx_aio.conf")
		listening "$port" && { echo "fuser.sh: port $port is in use" >&2; exit 1; }
		taskset -c 0 "$nginx" -c "$W/nginx_aio.conf" > "$W/fuser-$1.log" 2>&1 &
		;;
	*)
		port=$(awk '/^http:\/\/127.0.0.1:/{sub(/^http:\/\/127.0.0.1:/, ""); sub(/ .*/, ""); print; exit}' "$W/$1.Caddyfile")
		listening "$port" && { echo "fuser.sh: port $port is in use" >&2; exit 1; }
		taskset -c 0 "$W/caddy" run --config "$W/$1.Caddyfile" --adapter caddyfile > "$W/fuser-$1.log" 2>&1 &
		;;
	esac
	pid=$!
	for _ in $(seq 50); do
		kill -0 "$pid" 2> /dev/null || { echo "fuser.sh: $1 exited at its start" >&2; exit 1; }
		listening "$port" && return
		sleep 0.1
	done
	echo "fuser.sh: $1 did not listen on $port" >&2
	exit 1
}
servers=(flash_serve respond_8k nginx_aio)
for r in $(seq "$R"); do
	for k in 0 1 2; do
		s=${servers[$(((k + r) % 3))]}
		if [ "$WARM" -gt 0 ]; then
			start "$s"
			find "$W/data/many" -type f -print0 | xargs -0 cat > /dev/null
			taskset -c 1 wrk -t1 -c200 -d"${WARM}s" -s "$W/paths.lua" "http://127.0.0.1:$port" -- "$W/many.uris" > "$W/fuser-wrk.txt" 2>&1
		else
			sync
			echo 3 > /proc/sys/vm/drop_caches
			start "$s"
		fi
		sync
		echo 3 > /proc/sys/vm/drop_caches
		read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
		if [ "$NOPERF" != 1 ]; then
			perf record -q -F 999 -p "$pid" -o "$W/fuser-$s-$r.data" > "$W/fuser-perf.log" 2>&1 &
			perfpid=$!
		fi
		taskset -c 1 wrk -t1 -c200 -d"${DUR}s" -s "$W/paths.lua" "http://127.0.0.1:$port" -- "$W/many.uris" > "$W/fuser-wrk.txt" 2>&1
		read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
		if [ -n "$perfpid" ]; then
			kill -INT "$perfpid"
			# perf record ends with 128 + SIGINT when it is stopped so.
			wait "$perfpid" || [ $? -eq 130 ] || { echo "fuser.sh: perf record failed:" >&2; cat "$W/fuser-perf.log" >&2; exit 1; }
			perfpid=
		fi
		kill "$pid"
		wait "$pid" 2> /dev/null || true
		pid=
		n=$(awk '/requests in/{print $1}' "$W/fuser-wrk.txt")
		bad=$(awk '/Non-2xx/{print $NF} /Socket errors/{print "socket errors"}' "$W/fuser-wrk.txt")
		[ -z "$bad" ] || { echo "fuser.sh: $s: $bad" >&2; cat "$W/fuser-wrk.txt" >&2; exit 1; }
		us=$(awk -v c=$((u1 - u0 + s1 - s0)) -v t="$tck" -v q="$n" 'BEGIN {printf "%.1f", c / t * 1e6 / q}')
		printf "%s %-11s requests %s rps %s cpu_us/req %s" "$r" "$s" "$n" "$(awk '/Requests\/sec/{print $2}' "$W/fuser-wrk.txt")" "$us"
		if [ "$NOPERF" = 1 ]; then
			echo
			continue
		fi
		printf ":"
		perf report -i "$W/fuser-$s-$r.data" --no-children --sort sym --stdio 2> /dev/null | awk -v us="$us" '
			/^ +[0-9.]+%/ {
				pct = $1; sub("%", "", pct); sym = $3
				if (sym ~ /pvm_irq_enable/) g = "irqsoff"
				else if ($2 == "[k]") g = "kernel"
				else if (sym ~ /^(internal\/runtime\/syscall\/linux\.Syscall6|syscall\.RawSyscall6|syscall\.Syscall6?)$/) g = "syscall.ret"
				else if (sym ~ /caddy-flash-serve/) g = "flash_serve"
				else if (sym ~ /caddyserver\/caddy/) g = "caddy"
				else if (sym ~ /^net\/http|^net\/textproto|^bufio/) g = "net/http"
				else if (sym !~ /^runtime\.|^internal\/runtime|^internal\/bytealg|^aeshash|^memeq|^memmove|^indexbyte|^0x/) g = "other"
				else if (sym ~ /malloc|newobject|memclr|writeHeapBits|nextFreeFast|heapSetType|makeslice|growslice|refill|mcentral|allocSpan|rawstring|concatstring|slicebytetostring/) g = "rt.alloc"
				else if (sym ~ /scan|gcmark|gcDrain|DeferToSpan|findObject|greyobject|markBits|wbBuf|spanSet|moveInlineMarks|sweep|bulkBarrier|typePointers|gcWork|markroot|heapBits/) g = "rt.gc"
				else if (sym ~ /schedule|findRunnable|gopark|goready|ready|runq|casgstatus|mcall|park_m|execute|gogo|lock2|unlock2|futex|netpoll|selectgo|chansend|chanrecv|wakep|stealWork|notewake|notesleep|semacquire|semrelease|goexit|newproc|gfget|gfput|procyield|osyield|resetspinning|checkTimers|nanotime|usleep|startm|stopm|handoff|acquirep|releasep|timer|sellock|selunlock|Sudog|mPark|injectglist|pollWait|pollSetDeadline|pollReset|entersyscall|exitsyscall/) g = "rt.sched"
				else if (sym ~ /morestack|newstack|copystack|step|pcvalue|findfunc|funcInfo|unwinder|getStackMap|stkframe|readvarint|funcdata|adjustframe|adjustpointers|callers/) g = "rt.stack"
				else g = "rt.other"
				u[g] += pct
			}
			END { n = split("kernel irqsoff syscall.ret rt.alloc rt.gc rt.sched rt.stack rt.other flash_serve caddy net/http other", o, " ")
				for (i = 1; i <= n; i++) printf " %s %.1f", o[i], u[o[i]] * us / 100; printf "\n" }'
	done
done
