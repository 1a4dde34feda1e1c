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
