#!/bin/sh
# Loss curves of debugmodel on the demo corpus (configs/demo.toml: fortunes
# and the Jargon File, batch 8 x 128), AdamW against Muon (0.3.0's DistMuon
# for the layers' matrices, match_rms_adamw's lr, AdamW for the embeddings,
# norms and output: scripts/muon_demo_groups.toml), from the same seed and
# data: the losses side by side, an SVG plot of both ($D/muon_curves.svg,
# drawn by awk: no plotting package needed) and the memory each run held
# (the plan's breakdown and the backend's peak, written on the plot too).
# docs/muon_curves.svg is its output at 200 steps.  Not part of make check
# (two 200-step runs).
#
#   sh scripts/muon_curves.sh [STEPS]      (default 200; DIR=build/muon)
set -eu
export OMP_WAIT_POLICY=passive
STEPS=${1:-200}
D=${DIR:-build/muon}
B=${BIN:-bin}
mkdir -p "$D"

DEMO_DIR="$D/demo" DEMO_STEPS=2 sh scripts/demo.sh >"$D.demo.log" 2>&1 || true
[ -d "$D/demo/data" ] || { echo "muon_curves: the demo data was not made (see $D.demo.log)" >&2; exit 1; }
run() { # NAME CONFIG
	"$B/titan-train" --config "$2" --job.dump_folder "$D/$1" \
		--training.dataset_path "$D/demo/data" --training.steps "$STEPS" \
		--checkpoint.enable false --metrics.log_freq 10 --validation.enable false 2>"$D/$1.log"
	grep -h -e 'Memory per rank' -e 'Peak backend memory' "$D/$1.log" | sed "s/^.* - INFO - /$1: /"
}
# "optimizer X GiB, peak Y MB" of a run's log
memory() {
	opt=$(sed -n 's/.*Memory per rank: .* optimizer \([0-9.]*\) GiB.*/\1/p' "$D/$1.log" | head -1)
	peak=$(sed -n 's/.*Peak backend memory: \([0-9]*\) bytes.*/\1/p' "$D/$1.log" | head -1)
	awk -v o="$opt" -v p="$peak" 'BEGIN { printf "optimizer %s GiB, peak %.1f MB", o, p / 1e6 }'
}
# the demo's config with the groups appended (arrays of tables come last)
cat configs/demo.toml scripts/muon_demo_groups.toml >"$D/demo_muon.toml"
run adamw configs/demo.toml
run muon "$D/demo_muon.toml"

losses() { grep '^{"step":[0-9]*,"loss"' "$1" | sed 's/^{"step":\([0-9]*\),"loss":\([^,]*\),.*/\1 \2/'; }
losses "$D/adamw/metrics.jsonl" >"$D/adamw.loss"
losses "$D/muon/metrics.jsonl" >"$D/muon.loss"
join "$D/adamw.loss" "$D/muon.loss" >"$D/both.loss"
awk -v n="$STEPS" 'NR % 20 == 0 || $1 == n { printf "step %4d  adamw %.4f  muon %.4f\n", $1, $2, $3 }' "$D/both.loss"
awk -v n="$STEPS" -v am="$(memory adamw)" -v mm="$(memory muon)" '
	{ s[NR] = $1; a[NR] = $2; m[NR] = $3
	  lo = NR == 1 || $2 < lo ? $2 : lo; lo = $3 < lo ? $3 : lo
	  hi = NR == 1 || $2 > hi ? $2 : hi; hi = $3 > hi ? $3 : hi }
	function x(v) { return 60 + 520 * (v - 1) / (n > 1 ? n - 1 : 1) }
	function y(v) { return 20 + 300 * (hi - v) / (hi > lo ? hi - lo : 1) }
	function line(v, c,   i, p) {
		p = ""
		for (i = 1; i <= NR; i++) p = p sprintf("%.1f,%.1f ", x(s[i]), y(v[i]))
		printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"/>\n", c, p
	}
	END {
		print "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"370\" font-family=\"sans-serif\" font-size=\"12\">"
		print "<rect width=\"640\" height=\"370\" fill=\"white\"/>"
		print "<line x1=\"60\" y1=\"320\" x2=\"580\" y2=\"320\" stroke=\"black\"/><line x1=\"60\" y1=\"20\" x2=\"60\" y2=\"320\" stroke=\"black\"/>"
		printf "<text x=\"60\" y=\"340\">1</text><text x=\"560\" y=\"340\">%d</text><text x=\"280\" y=\"360\">step</text>\n", n
		printf "<text x=\"5\" y=\"25\">%.2f</text><text x=\"5\" y=\"320\">%.2f</text><text x=\"5\" y=\"170\">loss</text>\n", hi, lo
		line(a, "#1f77b4"); line(m, "#d62728")
		printf "<text x=\"330\" y=\"40\" fill=\"#1f77b4\">AdamW: %s</text>\n", am
		printf "<text x=\"330\" y=\"58\" fill=\"#d62728\">Muon (DistMuon): %s</text>\n", mm
		printf "<text x=\"330\" y=\"76\">final loss %.3f / %.3f (AdamW / Muon)</text>\n", a[NR], m[NR]
		print "</svg>"
	}' "$D/both.loss" >"$D/muon_curves.svg"
echo "wrote $D/muon_curves.svg"
