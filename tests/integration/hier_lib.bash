# hier_lib.bash - what the hierarchical allreduce's two tests share
# (coll_hier.sh on hosts claimed on one machine, coll_hier_hosts.sh on
# network-namespace hosts).

# every_rank N FILE PATTERN: each of workers 0..N-1 printed a line with the
# fixed string.
every_rank() {
	local n=$1 file=$2 pat=$3 r
	for ((r = 0; r < n; r++)); do
		grep -F -- "[worker $r] " "$file" | grep -qF -- "$pat" || {
			echo "worker $r has no line with '$pat'" >&2
			return 1
		}
	done
}

# digests FILE: rank 0's digest lines of order-independent results
# (integer sums, every min and max), sorted.
digests() {
	sed -n 's/^\[worker 0\] digest //p' "$1" |
		awk '$3 == "integers" || $2 == "min" || $2 == "max"' | sort
}
