#!/bin/sh
# tests/mutants.sh — each shortcut the normal round keeps over the
# exhaustive one (Options.Exhaustive), broken one at a time in a copy of the
# tree: TestEngineEqualsTheExhaustiveRound (with
# TestJudgedAgainWhenTheEntrysDeviceChanged, for a node GUID changed in
# place, which the fake kernel of the differential worlds cannot do) must
# fail for every one.
#
#   tests/mutants.sh            # all mutants
#   tests/mutants.sh M3 M7      # some
#
# Retired as equivalent (no world can tell them from the code; both were
# caught before b27a7f6 and missed from it on, checked 2026-12-04):
#   M12 (an edited saved config decides nothing again) and M17 (a change of
#   any input only judges the verdicts again): the saved configs are read
#   only at the first round and at a reload, and a reload drops the
#   baseline, so they never change under one; the journal gains entries
#   only with the engine's own configfs writes, which move the model's
#   Generation, and an entry dropped alone needs no read the baseline did
#   not make. The code they break stays: it is what holds if that ever
#   changes.
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
M1	rebind/carry.go	s/ \|\| b\.obs\.tok != o\.tok \{/ {/	an observation takes the last round's objects although configfs moved
M2	rebind/inputs.go	s/\&\& slices\.Equal\(o\.TCP, b\.TCP\)//	a change of the TCP sockets in LISTEN is not seen
M3	rebind/inputs.go	s/\&\&\n\t\t\t\trdma\.SameListeners\(o\.Listeners, b\.Listeners\)//	a change of the cm_id listeners is not seen
M4	rebind/select.go	s/range changedVerdicts\(&obs\.eps, &b\.eps\) \{/range changedVerdicts(&obs.eps, &b.eps)[:0] {/	select ignores verdicts that changed
M5	rebind/select.go	s/for k := range s\.prev\.wake\.keys\(\) \{\n\t\tout\[k\] = true/for k := range s.prev.wake.keys() {\n\t\t_ = k/	select forgets the endpoints the clock decides
M7	rebind/observe.go	s/if _, journaled := journal\[Key\{KindNvmet, p\.ID\}\]; /if journaled := false; /	a journaled port's links are not read when it listens
M8	rebind/select.go	s/if len\(obs\.Journal\)\+len\(mem\.Forced\) > 0 \{/if false {/	select ignores the journal and manual rebinds
M9	rebind/select.go	s/if !obs\.shared \{/if false {/	select never compares objects and verdicts
M10	rebind/plan.go	s/\t\t\tdelete\(p\.decided, ep\)\n\t\t\twq\.forget\(ep\)/\t\t\twq.forget(ep)/	a plan keeps the baseline's decision of an endpoint it selected and found gone
M13	rebind/wakeups.go	s/if t, ok := w\.at\[top\.k\]; ok \&\& t\.Equal\(top\.t\) \{/if _, ok := w.at[top.k]; ok {/	the queue wakes at a time an endpoint no longer waits for
M11	rebind/items.go	s/if sel\.same \&\& p\.carried/if p.carried/	status items reused although objects changed
M15	rebind/carry.go	s/\te\.v = o\.judge\(e\.ep\)/\t_ = o.judge(e.ep)/	an event's verdicts are not judged again
M16	rebind/carry.go	s/if p\.Err != nil \|\| need == !o\.LinksUnread\[p\.ID\] \{/if true {/	a port whose listener died keeps its links unread
M18	rebind/carry.go	s/!d\.Touches\(e\.ep\.Owner\(\), e\.ep\.Addr\) \&\& //	the endpoints the tables' delta touches keep their verdicts
M19	rebind/carry.go	s/ \&\& !tcp\[e\.ep\.Addr\] \{/ \&\& !(tcp[e.ep.Addr] \&\& false) {/	a TCP socket that came or went is not judged again
M20	rebind/carry.go	s/!\(entry \&\& d\.DeviceChanged\(was\.EntryDev\)\)/!(entry \&\& d.DeviceChanged(was.EntryDev) \&\& false)/	a change of the device a listener was on is not judged again
M21	rebind/apply.go	s/asRead := !e\.opt\.Exhaustive \&\& obs\.unchanged\(e\.opt\.Tree\)/asRead := !e.opt.Exhaustive/	the journal batch takes the plan's reading of iser although configfs moved
M22	rebind/carry.go	s/return ok \&\& now == o\.tok/_ = now; return ok/	configfs reads as unchanged whatever its generation
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
	(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 sh -c 'for f; do [ -e "$f" ] || [ -L "$f" ] && cp -P --parents "$f" "$0"; done; true' "$work/tree")
	cp "$root/$file" "$work/tree/$file"
	before=$(md5sum <"$work/tree/$file")
	perl -0pi -e "$subst" "$work/tree/$file"
	if [ "$before" = "$(md5sum <"$work/tree/$file")" ]; then
		echo "$name stale   $file: $what (the code it mutates is gone)"
		echo 1 >"$work/bad"
		continue
	fi
	if (cd "$work/tree" && go test -count=1 -run '^(TestEngineEqualsTheExhaustiveRound|TestJudgedAgainWhenTheEntrysDeviceChanged)$' ./rebind/ >"$work/out" 2>&1); then
		echo "$name MISSED  $file: $what"
		echo 1 >"$work/bad"
	else
		echo "$name caught  $file: $what ($(grep -m1 -o 'step [0-9]* ([^)]*)' "$work/out" || grep -m1 -v '^\s*$' "$work/out"))"
	fi
done
[ ! -e "$work/bad" ]
