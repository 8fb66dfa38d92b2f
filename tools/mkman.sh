#!/bin/bash
# mkman.sh DTRAIN OUTDIR - write dtrain's manual pages into OUTDIR from the
# program itself, so that a page cannot say other than the program does:
# dtrain(1) from `dtrain --help`, dtrain-<command>(1) from
# `dtrain <command> --help`, dtrain-example-<name>(1) from the example's
# --help (the examples sit beside dtrain in the build, in examples/),
# dtrain-env(7) from `dtrain env --man` (the table of variables in
# src/common/env_table.h). The pages in man/ are this
# script's output; the test integration_docs_man checks that they still are.
#   bash tools/mkman.sh build/dtrain man
set -eu
dtrain=$1
out=$2
version=$("$dtrain" version | awk '{print $2}')
# (`dtrain env` has no page of its own: dtrain-env is the variables' page,
# section 7, which says how `dtrain env` lists them)
commands=(launch scheduler server params checkpoint plot k8s rank-exec version)
examples=(allreduce hello_cluster linreg mnist sparse_linear elastic)
declare -A example_summary=(
	[allreduce]="sum, broadcast and average across ranks, checked (Horovod's hello world)"
	[hello_cluster]="the smallest job: join, pass barriers, say hello"
	[linreg]="linear regression trained through the KVStore"
	[mnist]="LeNet or an MLP on Fashion-MNIST, through the KVStore or allreduce"
	[sparse_linear]="logistic regression over hashed sparse features, row_sparse keys"
	[elastic]="a linear model trained by allreduce that goes on when a worker is lost"
)

# The one-line summary of a command, from `dtrain --help`'s list.
summary() {
	"$dtrain" --help | awk -v c="$1" '$1 == c {
		$1 = ""; sub(/^ +/, ""); print; exit }' | sed 's/^(\(.*\))$/\1/'
}

# Text as roff in no-fill mode: backslashes escaped, a leading dot or quote
# kept from being a request.
roff_text() {
	sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'
}

# page NAME SECTION SUMMARY HELPCMD...: a page whose synopsis is the help's
# usage lines and whose description is the rest of the help.
page() {
	local name=$1 sec=$2 sum=$3 help
	shift 3
	help=$("$@")
	{
		local from="dtrain ${*:2}"
		[ -z "${prog:-}" ] || from="$prog --help"
		echo ".\\\" Made by tools/mkman.sh from \`$from\`; edit the help text, not this file."
		echo ".TH $(echo "$name" | tr a-z A-Z) $sec \"\" \"dtrain $version\" \"dtrain manual\""
		echo ".SH NAME"
		echo "$name \\- $sum" | sed 's/-\([a-z]\)/\\-\1/g; s/\\\\-/\\-/g'
		echo ".SH SYNOPSIS"
		echo ".nf"
		printf '%s\n' "$help" | awk '/^usage:/ {u = 1; sub(/^usage: */, ""); print; next}
			u && /^ +[^ -]/ {print; next} {exit}' |
			sed "${prog:+s/^$prog\b/dtrain-example-$prog/}" | roff_text
		echo ".fi"
		echo ".SH DESCRIPTION"
		echo ".nf"
		printf '%s\n' "$help" | awk 'BEGIN {u = 1} u && /^usage:/ {next}
			u && /^ +[^ -]/ {next} {u = 0; print}' | sed '/./,$!d' | roff_text
		echo ".fi"
		echo ".SH ENVIRONMENT"
		echo "See"
		echo ".BR dtrain\\-env (7)"
		echo "for every variable dtrain reads and its default."
		echo ".SH SEE ALSO"
		if [ "$name" = dtrain ]; then
			local c sep=","
			for c in "${commands[@]}"; do
				echo ".BR dtrain\\-$(echo "$c" | sed 's/-/\\-/g') (1)$sep"
			done
			echo ".BR dtrain\\-env (7)"
		else
			echo ".BR dtrain (1),"
			echo ".BR dtrain\\-env (7)"
		fi
		echo ".PP"
		echo "The guides in /usr/share/doc/dtrain (or docs/ in the source tree),"
		echo "getting\\-started.md first."
	} >"$out/$name.$sec"
}

mkdir -p "$out"
page dtrain 1 "distributed deep-learning training: jobs, nodes and tools" "$dtrain" --help
for c in "${commands[@]}"; do
	page "dtrain-$c" 1 "$(summary "$c")" "$dtrain" "$c" --help
done
# (installed as dtrain-example-<name>: the synopsis says so)
for e in "${examples[@]}"; do
	prog=$e page "dtrain-example-$e" 1 "${example_summary[$e]}" \
		"$(dirname "$dtrain")/examples/$e" --help
done
"$dtrain" env --man >"$out/dtrain-env.7"
