# Helpers the benchmark scripts source (. test/bench/lib.sh).

# cpu_seconds PID...: seconds of CPU (user + system) the processes have
# used so far.
cpu_seconds() {
	local stats=()
	for p in "$@"; do stats+=("/proc/$p/stat"); done
	awk -v hz="$(getconf CLK_TCK)" '{t += $14 + $15} END {printf "%.2f", t / hz}' "${stats[@]}"
}
