#!/bin/sh
# Prints the KEYS, TITAN EXTENSIONS and TORCHTITAN 0.3.0 sections of
# man/titan-config.5 from titan-train's schema (titan-train --list-keys) and
# its tables of 0.3.0's presets (--list-030-presets) and paths
# (--list-030-paths), so that the page, the
# program and tests/config/configs.sh agree.  With --write, puts them into
# man/titan-config.5 in place of the old ones (everything from ".Sh KEYS" up to
# ".Sh FILES").
# Run: scripts/config_man.sh [--write]   (after make; TITAN_TRAIN overrides bin/titan-train)
set -eu
train=${TITAN_TRAIN:-bin/titan-train}
page=man/titan-config.5

sections() {
	"$train" --list-keys | awk -F'\t' '
	function sentence(s) { return toupper(substr(s, 1, 1)) substr(s, 2) "." }
	function values(v) { gsub(/\|/, ", ", v); return v }
	function entry(i) {
		out = ".It Cm " key[i] "\n" sentence(help[i]) "\n"
		out = out "Type: " type[i] "; default: " def[i]
		if (vals[i] != "-")
			out = out "; one of: " values(vals[i])
		out = out ".\n"
		if (tt[i] != "-")
			out = out "torchtitan:\n.Li " tt[i] " .\n"
		if (sup[i] == "no effect")
			out = out "Another value is accepted with a warning and has no effect: " why[i] ".\n"
		if (sup[i] == "not built")
			out = out "Any value but the default is refused: " why[i] ".\n"
		return out
	}
	{
		n++
		key[n] = $1; type[n] = $2; def[n] = $3; vals[n] = $4; tt[n] = $5
		sup[n] = $6; why[n] = $7; help[n] = $8
	}
	END {
		print ".Sh KEYS"
		print "Each key is given with its type, its default, the values it may take, the"
		print "torchtitan JobConfig attribute it corresponds to, and, for a key whose"
		print "feature titan-train lacks, what happens when it is set."
		section = ""
		for (i = 1; i <= n; i++) {
			if (tt[i] == "-")
				continue
			s = key[i]
			sub(/\.[^.]*$/, "", s)
			if (s != section) {
				if (section != "")
					print ".El"
				print ".Ss [" s "]"
				print ".Bl -tag -width Ds"
				section = s
			}
			printf "%s", entry(i)
		}
		print ".El"
		print ".Sh TITAN EXTENSIONS"
		print "Keys torchtitan 0.2.2 does not have; a torchtitan configuration never sets"
		print "them, and their defaults leave titan-train doing what torchtitan does."
		print ".Bl -tag -width Ds"
		for (i = 1; i <= n; i++)
			if (tt[i] == "-")
				printf "%s", entry(i)
		print ".El"
	}'
	"$train" --list-030-presets | awk -F'\t' '
	function sentence(s) { return toupper(substr(s, 1, 1)) substr(s, 2) "." }
	BEGIN {
		print ".Sh TORCHTITAN 0.3.0"
		print "A run started with"
		print ".Fl -module Ar family Fl -config Ar preset ,"
		print "naming one of torchtitan 0.3.0\x27s presets, follows 0.3.0 (see"
		print ".Xr titan-train 1 )"
		print "and takes 0.3.0\x27s command-line paths, listed below with the key each sets or"
		print "what titan-train does with it; the keys above are refused in such a run, and"
		print "the paths below that 0.2.2 spells otherwise are refused in a TOML run."
		print "Its"
		print ".Fl -debug.print_config"
		print "prints the configuration as 0.3.0 logs it (Running with configs: and"
		print "Trainer.Config as JSON), the paths that have titan\x27s value; its"
		print ".Cm training.seq_len"
		print "may not exceed the flavor\x27s RoPE length, as 0.3.0 checks."
		print ".Ss Presets"
		print "Every preset function of the families\x27 config_registry.py, in its order:"
		print "one titan-train runs with 0.3.0\x27s values, or refuses, saying what it lacks."
		print ".Bl -tag -width Ds"
	}
	{
		print ".It Fl -module Ar " $1 " Fl -config Ar " $2
		if ($3 == "refused")
			print "Refused: " sentence($4)
		else
			print ($4 == "-") ? "Honoured." : "Honoured: " sentence($4)
	}
	END {
		print ".El"
		print ".Ss Paths"
		print ".Bl -tag -width Ds"
	}'
	"$train" --list-030-paths | awk -F'\t' '
	function sentence(s) { return toupper(substr(s, 1, 1)) substr(s, 2) "." }
	{
		print ".It Cm " $1
		if ($2 == "sets" && $3 != "-")
			print "Sets\n.Cm " $3 " ."
		else if ($2 == "sets")
			print "Sets 0.3.0\x27s loss."
		if ($2 == "only" && $3 != "-")
			print "Only " $4 " is accepted; it sets\n.Cm " $3 " ."
		else if ($2 == "only")
			print "Only " $4 " is accepted."
		if ($2 == "refused")
			print "Refused."
		if ($5 != "-")
			print sentence($5)
	}
	END { print ".El" }'
}

case "${1:-}" in
--write)
	tmp="$page.tmp.$$"
	{
		sed '/^\.Sh KEYS$/,$d' "$page"
		sections
		sed -n '/^\.Sh FILES$/,$p' "$page"
	} >"$tmp"
	mv "$tmp" "$page"
	;;
"")
	sections
	;;
*)
	echo "usage: scripts/config_man.sh [--write]" >&2
	exit 2
	;;
esac
