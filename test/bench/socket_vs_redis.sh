#!/usr/bin/env bash
# Side by side: redis-benchmark against shade-peer and against redis-server,
# both on a Unix socket, in one run, with the ratio. Usage:
#   [CLIENTS="8 50"] [TESTS="set get"] test/bench/socket_vs_redis.sh [requests] [pipeline] [rounds]
#
# KEYS is how many keys the values go under (default 1,000: 4 MiB of 4 KiB
# values, which the CPU's last-level cache holds; 100000 puts 400 MiB of
# them out of it, as a cache of training data is); SIZES the value sizes
# (default 4096 then 102400).
# CLIENTS lists the client counts (redis-benchmark -c) to run, each in its
# own rows (default 8, then redis-benchmark's default of 50); TESTS the
# tests (default SET then GET; with GET or MGET alone, the keys are written
# by one untimed SET run per server first). MGET asks for $MGET_KEYS
# random keys (default 16) a request, with no pipeline, and makes
# requests/$MGET_KEYS requests: as many values as a GET run. Every test (of 4 KiB and 100 KiB
# values) runs `rounds` times, alternating which server goes first, and the table shows the
# median of each server's rounds: on a small shared machine a burst of
# other work then shifts both sides alike instead of one. It also shows the
# CPU time each server spent per request (user + system, from /proc), which
# other processes' load disturbs less than throughput, and its context
# switches per 1,000 requests (threads put to sleep and woken: where a Go
# server with several threads spends CPU that single-threaded Redis does
# not), and the CPU redis-benchmark itself used, in % of one core: it runs
# in one thread, so near 100% it is the client that sets the rate. Before
# the GETs it checks that both servers hold every key at the full value
# size, so that no GET is answered nil. BIN=<dir> runs that shade-peer binary;
# otherwise the current tree is built into a temporary folder. The peer
# runs with --cache-size $CACHE (default 1GiB, ten times what the keys
# take; the peer pre-faults it), --admin-addr $ADMIN (default off; an
# address such as 127.0.0.1:6061 serves /debug/pprof/ for profiling) and
# any other flags in $PEER_FLAGS (such as --socket-loops 2). RB_THREADS=N
# runs the timed redis-benchmark on N threads (--threads), for a machine
# whose servers one client thread cannot keep busy; rb% then counts all
# of them.
set -euo pipefail
cd "$(dirname "$0")/../.."
. test/bench/lib.sh
N=${1:-200000}
P=${2:-16}
ROUNDS=${3:-3}
KEYS=${KEYS:-1000}
SIZES=${SIZES:-4096 102400}
CLIENTS=${CLIENTS:-8 50}
TESTS=${TESTS:-set get}
MGET_KEYS=${MGET_KEYS:-16}
threads=${RB_THREADS:+--threads $RB_THREADS}
command -v redis-benchmark >/dev/null || ./.ci/deps.sh redis-server redis-tools

dir=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

if [ -z "${BIN:-}" ]; then
	BIN=$dir/bin
	go build -o "$BIN/" ./cmd/shade-peer
fi

redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 660 --save "" --appendonly no \
	--daemonize no --logfile "$dir/redis.log" &
pids+=($!)
redis_pid=$!
"$BIN/shade-peer" --name bench --socket "$dir/shade.sock" --cache-size "${CACHE:-1GiB}" --admin-addr "${ADMIN:-off}" \
	--log-level warn ${PEER_FLAGS:-} 2>"$dir/shade.log" &
pids+=($!)
shade_pid=$!
for s in redis.sock shade.sock; do
	wait_socket "$dir/$s" || { echo "no socket $s"; cat "$dir"/*.log; exit 1; }
done

hz=$(getconf CLK_TCK)
# children: CPU ticks of the processes this shell ($1) has waited for.
children() { awk '{print $16 + $17}' "/proc/$1/stat"; }
run() { # socket pid size test clients -> "requests-per-second cpu-microseconds-per-request switches-per-1000-requests client-cpu-share"
	local t0 r t1 w0 w1 c0 c1 e0 e1 me=$BASHPID
	t0=$(cpu_seconds "$2")
	w0=$(switches "$2")
	c0=$(children $me)
	e0=$(date +%s%N)
	local n=$N
	if [ "$4" = mget ]; then
		n=$((N / MGET_KEYS))
		r=$(redis-benchmark -s "$1" -n "$n" -c "$5" -r "$KEYS" $threads --csv MGET $(printf 'key:__rand_int__ %.0s' $(seq "$MGET_KEYS")) 2>/dev/null |
			awk -F'"' '$2 ~ /^MGET/ {print $4}')
	else
		r=$(redis-benchmark -s "$1" -t "$4" -d "$3" -P "$P" -n "$N" -c "$5" -r "$KEYS" $threads --csv 2>/dev/null |
			awk -F'"' -v t="$(echo "$4" | tr a-z A-Z)" '$2==t {print $4}')
	fi
	e1=$(date +%s%N)
	c1=$(children $me)
	t1=$(cpu_seconds "$2")
	w1=$(switches "$2")
	echo "$r $(awk -v a="$t0" -v b="$t1" -v n="$n" 'BEGIN {print (b - a) * 1e6 / n}') $(awk -v a="$w0" -v b="$w1" -v n="$n" 'BEGIN {print (b - a) * 1000 / n}')" \
		"$(awk -v a="$c0" -v b="$c1" -v hz="$hz" -v e0="$e0" -v e1="$e1" 'BEGIN {print (b - a) / hz / ((e1 - e0) / 1e9) * 100}')"
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# held socket size: fail unless every benchmark key is held at full size.
held() {
	local n len
	n=$(redis-cli -s "$1" dbsize)
	# --raw prints the value and a newline.
	len=$(($(redis-cli -s "$1" --raw get key:000000000042 | wc -c) - 1))
	if [ "$n" -lt "$KEYS" ] || [ "$len" -ne "$2" ]; then
		echo "$1: $n keys, key:000000000042 is $len bytes, want $KEYS keys of $2 bytes" >&2
		exit 1
	fi
}

# The peer's cache is in 2 MiB pages only where the kernel gives shared
# memory huge pages (README, "Huge pages"); its log says what it got.
thp=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/shmem_enabled 2>/dev/null || echo none)
echo "# $(date -u +%F) $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $(redis-server --version | cut -d' ' -f1-3); shmem_enabled $thp"
printf '%-6s %-7s %7s %13s %13s %6s %12s %12s %9s %9s %9s %9s   %s\n' test value clients "redis-server" "shade-peer" ratio "redis us/req" "shade us/req" "redis sw" "shade sw" "redis rb%" "shade rb%" "rounds (redis/shade rps)"
for size in $SIZES; do
	case " $TESTS " in
	*" set "*) ;;
	*) # GET only: write the keys once, untimed.
		for s in redis.sock shade.sock; do
			redis-benchmark -s "$dir/$s" -t set -d $size -P "$P" -n $((KEYS * 20)) -c 8 -r "$KEYS" -q >/dev/null
		done ;;
	esac
	for t in $TESTS; do
		case $t in get | mget) held "$dir/redis.sock" $size; held "$dir/shade.sock" $size ;; esac
		for c in $CLIENTS; do
			rs=() ss=() rc=() sc=() rw=() sw=() rb=() sb=()
			for round in $(seq "$ROUNDS"); do
				if [ $((round % 2)) -eq 1 ]; then
					read -r a b x u < <(run "$dir/redis.sock" $redis_pid $size $t "$c")
					read -r e d y v < <(run "$dir/shade.sock" $shade_pid $size $t "$c")
				else
					read -r e d y v < <(run "$dir/shade.sock" $shade_pid $size $t "$c")
					read -r a b x u < <(run "$dir/redis.sock" $redis_pid $size $t "$c")
				fi
				rs+=("$a") rc+=("$b") ss+=("$e") sc+=("$d") rw+=("$x") sw+=("$y") rb+=("$u") sb+=("$v")
			done
			r=$(printf '%s\n' "${rs[@]}" | median)
			s=$(printf '%s\n' "${ss[@]}" | median)
			detail=$(paste -d/ <(printf '%.0f\n' "${rs[@]}") <(printf '%.0f\n' "${ss[@]}") | paste -sd' ')
			printf '%-6s %-7s %7s %13.0f %13.0f %6.2f %12.2f %12.2f %9.1f %9.1f %9.0f %9.0f   %s\n' $t $size "$c" "$r" "$s" \
				"$(awk -v a="$s" -v b="$r" 'BEGIN{print a/b}')" \
				"$(printf '%s\n' "${rc[@]}" | median)" "$(printf '%s\n' "${sc[@]}" | median)" \
				"$(printf '%s\n' "${rw[@]}" | median)" "$(printf '%s\n' "${sw[@]}" | median)" \
				"$(printf '%s\n' "${rb[@]}" | median)" "$(printf '%s\n' "${sb[@]}" | median)" "$detail"
		done
	done
done
echo "(redis-benchmark -s <socket> -t <test> -d <value> -P $P -n $N -c <clients> -r $KEYS ${threads:+$threads }--csv; medians of $ROUNDS rounds;"
case " $TESTS " in *" mget "*) echo " mget: redis-benchmark -s <socket> -n $((N / MGET_KEYS)) -c <clients> -r $KEYS --csv MGET <$MGET_KEYS x key:__rand_int__>;" ;; esac
echo " rps = requests per second; ratio = shade-peer / redis-server; us/req = server CPU microseconds per request;"
echo " sw = the server's context switches per 1,000 requests, all its threads: each is a thread put to sleep or woken;"
echo " rb% = redis-benchmark's own CPU while it ran against that server, in % of one core: near 100, the client,"
echo " not the server, set the rate, and the ratio says little; compare us/req)"
