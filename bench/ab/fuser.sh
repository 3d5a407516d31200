#!/usr/bin/env bash
# fuser.sh WORK ROUNDS : workload f (the many tree, cold page cache and dentries, wrk -c200) for flash_serve and
# respond_8k (Caddy's floor: an 8 KiB `respond` with a file's headers, no lookup, no read), where the server's CPU
# goes, per request: its CPU time (/proc/PID/stat) over a 6 s `perf record -F 999` of it, split by the samples'
# symbols into kernel, the Go runtime (alloc, gc, sched, syscall entry and exit, stack, other) and the rest by package.
# WORK is a folder `bench/run --keep` left (caddy, data/, many.uris, paths.lua, flash_serve.Caddyfile,
# respond_8k.Caddyfile). Root only (drop_caches, perf); run nothing else.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: fuser.sh WORK ROUNDS" >&2; exit 2; }
W=$1 R=$2
tck=$(getconf CLK_TCK)
ulimit -n 20000
pid=
trap '[ -n "$pid" ] && kill "$pid" 2> /dev/null; wait 2> /dev/null' EXIT
for r in $(seq "$R"); do
	for s in flash_serve respond_8k; do
		port=$(awk '/^http:\/\/127.0.0.1:/{sub(/^http:\/\/127.0.0.1:/, ""); sub(/ .*/, ""); print; exit}' "$W/$s.Caddyfile")
		sync
		echo 3 > /proc/sys/vm/drop_caches
		taskset -c 0 "$W/caddy" run --config "$W/$s.Caddyfile" --adapter caddyfile > "$W/fuser-$s.log" 2>&1 &
		pid=$!
		sleep 1.5
		sync
		echo 3 > /proc/sys/vm/drop_caches
		taskset -c 1 wrk -t1 -c200 -d9s -s "$W/paths.lua" "http://127.0.0.1:$port" -- "$W/many.uris" > "$W/fuser-wrk.txt" 2>&1 &
		wrk=$!
		sleep 1.5
		read -r u0 s0 < <(awk '{print $14, $15}' /proc/$pid/stat)
		perf record -q -F 999 -p "$pid" -o "$W/fuser-$s-$r.data" -- sleep 6 2> /dev/null
		read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
		wait "$wrk"
		rps=$(awk '/Requests\/sec/{print $2}' "$W/fuser-wrk.txt")
		kill "$pid"
		wait "$pid" 2> /dev/null || true
		pid=
		# CPU µs per request over the 6 s, taking wrk's rate as the window's.
		us=$(awk -v c=$((u1 - u0 + s1 - s0)) -v t="$tck" -v q="$rps" 'BEGIN {printf "%.1f", c / t * 1e6 / (q * 6)}')
		printf "%s %-11s rps %s cpu_us/req %s:" "$r" "$s" "$rps" "$us"
		perf report -i "$W/fuser-$s-$r.data" --no-children --sort sym --stdio 2> /dev/null | awk -v us="$us" '
			/^ +[0-9.]+%/ {
				pct = $1; sub("%", "", pct); sym = $3
				if ($2 == "[k]") g = "kernel"
				else if (sym ~ /malloc|newobject|memclr|writeHeapBits|nextFreeFast|heapSetType|makeslice|growslice|refill|mcentral|allocSpan|rawstring|concatstring|slicebytetostring/) g = "rt.alloc"
				else if (sym ~ /scan|gcmark|gcDrain|DeferToSpan|findObject|greyobject|markBits|wbBuf|spanSet|moveInlineMarks|sweep|bulkBarrier|typePointers|gcWork|markroot|heapBits/) g = "rt.gc"
				else if (sym ~ /schedule|findRunnable|gopark|goready|ready|runq|casgstatus|mcall|park_m|execute|gogo|lock2|unlock2|futex|netpoll|selectgo|chansend|chanrecv|wakep|stealWork|notewake|notesleep|semacquire|semrelease|goexit|newproc|gfget|gfput|procyield|osyield|resetspinning|checkTimers|nanotime|usleep|startm|stopm|handoff|acquirep|releasep|timer|sellock|selunlock|mPark|injectglist|pollWait|pollSetDeadline|pollReset/) g = "rt.sched"
				else if (sym ~ /entersyscall|exitsyscall|Syscall/) g = "rt.syscall"
				else if (sym ~ /morestack|newstack|copystack|step|pcvalue|findfunc|funcInfo|unwinder|getStackMap|stkframe|readvarint|funcdata|adjustframe|adjustpointers|callers/) g = "rt.stack"
				else if (sym ~ /^runtime\.|^internal\/runtime|^internal\/bytealg|aeshash|memeq|memmove|indexbyte|^0x/) g = "rt.other"
				else if (sym ~ /caddy-flash-serve/) g = "flash_serve"
				else if (sym ~ /caddyserver\/caddy/) g = "caddy"
				else if (sym ~ /^net\/http|^net\/textproto|^bufio/) g = "net/http"
				else g = "other"
				u[g] += pct
			}
			END { n = split("kernel rt.alloc rt.gc rt.sched rt.syscall rt.stack rt.other flash_serve caddy net/http other", o, " ")
				for (i = 1; i <= n; i++) printf " %s %.1f", o[i], u[o[i]] * us / 100; printf "\n" }'
	done
done
