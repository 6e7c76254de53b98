#!/bin/sh
# tests/mutants.sh — each shortcut the normal round keeps over the
# exhaustive one (Options.Exhaustive), broken one at a time in a copy of the
# tree: TestEngineEqualsTheExhaustiveRound must fail for every one.
#
#   tests/mutants.sh            # all mutants
#   tests/mutants.sh M3 M7      # some
#
# A mutant is a name, a file and a Perl substitution. Prints one line per
# mutant: "caught" (the test failed), "MISSED" (it passed: a shortcut the
# differential test does not hold), or "stale" (the code it mutates is
# gone: update the list). Exit 1 when any is missed or stale.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mutants() {
	cat <<'EOF'
M1	rebind/carry.go	s/!tcp\[e\.ep\.Addr\]/!(tcp[e.ep.Addr] \&\& false)/	rejudge ignores a TCP socket that came or went
M2	rebind/carry.go	s/d\.DeviceChanged\(was\.EntryDev\)/(d.DeviceChanged(was.EntryDev) \&\& false)/	rejudge ignores a change of the device a listener was on
M3	rebind/carry.go	s/if p\.ISER != portals\[i\]\.ISER \{/if false {/	edited ignores an iser the admin changed
M4	rebind/select.go	s/range changedVerdicts\(&obs\.eps, &b\.eps\) \{/range changedVerdicts(&obs.eps, &b.eps)[:0] {/	select ignores verdicts that changed
M5	rebind/select.go	s/for _, k := range s\.prev\.timed \{\n\t\tout\[k\] = true/for _, k := range s.prev.timed {\n\t\t_ = k/	select forgets the endpoints decided by the clock
M6	rebind/loop.go	s/if !pl\.carried \|\| !pl\.decided\.same\(e\.learnt\) \{/if !pl.carried {/	learn skipped whenever the plan carried its decisions
M7	rebind/observe.go	s/if _, journaled := journal\[Key\{KindNvmet, p\.ID\}\]; /if journaled := false; /	a journaled port's links are not read when it listens
M8	rebind/select.go	s/if len\(obs\.Journal\)\+len\(mem\.Forced\) > 0 \{/if false {/	select ignores the journal and manual rebinds
M9	rebind/endpoints.go	s/if v, ok := x\.patch\[i\]; ok \{\n\t\treturn v/if v, ok := x.patch[i]; ok \&\& false {\n\t\treturn v/	a patched verdict is read from the baseline's list
M10	rebind/plan.go	s/for ep := range sel\.dirty \{\n\t\t\tp\.decided\.forget\(ep\)\n\t\t\}//	a plan keeps the baseline's decision of an endpoint it selected and found gone
M11	rebind/carry.go	s/if !slices\.Equal\(links, ports\[i\]\.Links\) \{/if false {/	edited ignores links the admin changed
EOF
}

want=" $* "
bad=0
mutants | while IFS='	' read -r name file subst what; do
	if [ "$want" != "  " ] && ! echo "$want" | grep -q " $name "; then
		continue
	fi
	rm -rf "$work/tree"
	mkdir -p "$work/tree"
	(cd "$root" && git ls-files -z | xargs -0 cp -P --parents -t "$work/tree")
	cp "$root/$file" "$work/tree/$file"
	before=$(md5sum <"$work/tree/$file")
	perl -0pi -e "$subst" "$work/tree/$file"
	if [ "$before" = "$(md5sum <"$work/tree/$file")" ]; then
		echo "$name stale   $file: $what (the code it mutates is gone)"
		echo 1 >"$work/bad"
		continue
	fi
	if (cd "$work/tree" && go test -count=1 -run '^TestEngineEqualsTheExhaustiveRound$' ./rebind/ >"$work/out" 2>&1); then
		echo "$name MISSED  $file: $what"
		echo 1 >"$work/bad"
	else
		echo "$name caught  $file: $what ($(grep -m1 -o 'step [0-9]* ([^)]*)' "$work/out" || grep -m1 -v '^\s*$' "$work/out"))"
	fi
done
[ ! -e "$work/bad" ]
