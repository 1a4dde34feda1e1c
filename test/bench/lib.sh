# Helpers the benchmark scripts source (. test/bench/lib.sh).

# cpu_seconds PID...: seconds of CPU (user + system) the processes have
# used so far.
cpu_seconds() {
	local stats=()
	for p in "$@"; do stats+=("/proc/$p/stat"); done
	awk -v hz="$(getconf CLK_TCK)" '{t += $14 + $15} END {printf "%.2f", t / hz}' "${stats[@]}"
}

# switches PID...: thread switches so far (voluntary and not: a thread put
# to sleep, or woken, by the kernel), every thread of each process.
switches() {
	local files=()
	for p in "$@"; do files+=(/proc/"$p"/task/*/status); done
	awk '/^(non)?voluntary_ctxt_switches/ {s += $2} END {print s}' "${files[@]}" 2>/dev/null
}

# wait_socket PATH [SECONDS]: wait until PATH is a Unix socket (a peer or a
# server has started listening), at most SECONDS (default 60); fails if it
# never is.
wait_socket() {
	local i
	for i in $(seq $((${2:-60} * 10))); do
		[ -S "$1" ] && return 0
		sleep 0.1
	done
	[ -S "$1" ]
}
