# The remover of an inline rank's job directory (rank/arrival.py, started by rank/remover.py):
#   sh -c "$(this file)" ddpcheck-job-remover DIR PID LAUNCHER_PID RANK_VARIABLE
# $0 names it among the launcher's children. $left, $finished, $writing and $terminated are set before
# this text: the stage names of failure/stages.py (LEFT, DONE, WRITING_REPORT, TERMINATED). Its standard
# input is a pipe whose write end only the rank holds: end of file there means the rank is exiting.
#
# Protocol. On end of file the rank is exiting; once it is a zombie, dead or gone (its fds close
# before that), the directory goes if no file in it names a live pid (a state other than Z or X, read
# from /proc). Of two ranks that die together, the remover that looks last sees both dead: each waits
# for its own rank to be a zombie before it looks at the other. Where every rank still here is
# stopped (SIGSTOP, state T) and stays so for 2 s, nobody is left to give up on it and its launcher
# would wait for it forever: the remover ends it (SIGKILL) and says so on the rank's stderr (then
# their removers clean up). The first rank that ended while a peer ran, without a word (no verdict,
# not stopped by its launcher), leaves a copy of its file in ended-first/: if every rank of the job
# here then ends without a word (their launcher's SIGTERM came before ddpcheck could answer it), the
# last remover names it. A rank that ended at $finished or $writing never left by itself (that writes
# $left): it was killed after its part of the run (mpirun then exits 137 under a report that passed).
# The first one of the job here is named by its own remover, at once; later ones are their
# launcher's teardown. Until that remover has named it (ended-after/), the directory is its to
# remove: a peer leaving at the same moment would take the file the line is read from.
#
# In the background, so that the shell started exits at once and what waits is no descendant of the
# rank; a background job's standard input is /dev/null unless redirected, hence fd 3. `exit 0` last:
# dash would exec a last rm, and a remover still at work would no longer look one.
state() {
  sed -n 's/^State:[[:space:]]*\([A-Za-z]\).*/\1/p' "/proc/$1/status" 2>/dev/null
}
stage() {
  sed -n 's/.*"stage": "\([^"]*\)".*/\1/p' "$1" 2>/dev/null
}
spoke() {
  case "$(stage "$1")" in "$left"|"$finished"|"$writing"|"$terminated") return 0;; esac
  return 1
}
exec 3<&0; { read -r _ <&3
i=0
while [ $i -lt 200 ]; do
  case "$(state "$2")" in Z|X|'') break;; esac
  sleep 0.05; i=$((i + 1))
done
for f in "$1"/rank-*-"$2".json; do
  [ -e "$f" ] && [ ! -d "$1/ended-first" ] || break
  at=$(stage "$f")
  case "$at" in "$finished"|"$writing") ;; *) break;; esac
  mkdir "$1/ended-after" 2>/dev/null || break  # the first so here; a later one is its launcher's teardown
  rank=${f##*/rank-}; rank=${rank%%-*}
  who="rank $rank (host $(uname -n), pid $2)"
  why="its part of the run was done; its launcher's exit code is this end, the verdict said stands"
  echo "ddpcheck: $who is lost: its process ended at stage '$at' before it could leave; $why" >&2
done
stopped=
alive=
for f in "$1"/rank-*-*.json; do
  [ -e "$f" ] || continue
  pid=${f##*-}; pid=${pid%.json}
  case "$(state "$pid")" in Z|X|'') ;; T) stopped="$stopped $f";; *) alive=1;; esac
done
for c in $(cat /proc/"$3"/task/*/children 2>/dev/null); do  # a sibling rank with no file yet
  [ "$c" = "$2" ] && continue
  case "$(state "$c")" in Z|X|'') continue;; esac
  ls "$1"/rank-*-"$c".json >/dev/null 2>&1 && continue
  tr '\0' '\n' 2>/dev/null < /proc/"$c"/cmdline | grep -qx "$0" && continue
  # A rank still starting is a peer that runs: this one ended first. 2>/dev/null first: gone meanwhile.
  tr '\0' '\n' 2>/dev/null < /proc/"$c"/environ | grep -q "^$4=" && { alive=1; break; }
done
if [ -n "$alive" ]; then
  for f in "$1"/rank-*-"$2".json; do
    [ -e "$f" ] || break
    spoke "$f" || { mkdir "$1/ended-first" 2>/dev/null && cp "$f" "$1/ended-first/.part" 2>/dev/null &&
      mv "$1/ended-first/.part" "$1/ended-first/${f##*/}"; }
  done
  exit 0
fi
if [ -n "$stopped" ]; then
  sleep 2
  for f in $stopped; do
    pid=${f##*-}; pid=${pid%.json}
    [ "$(state "$pid")" = T ] || exit 0
  done
  mkdir "$1/said" 2>/dev/null || exit 0  # one remover says it
  for f in $stopped; do
    pid=${f##*-}; pid=${pid%.json}; rank=${f##*/rank-}; rank=${rank%%-*}
    who="rank $rank (host $(uname -n), pid $pid)"
    at=$(stage "$f")  # before the kill: its own remover then removes the directory
    why="every other rank of the job on this host has ended, and its launcher would wait for it forever"
    kill -9 "$pid" 2>/dev/null &&
      echo "ddpcheck: $who is stopped (SIGSTOP) at stage '$at'; $why: ended it (SIGKILL)" >&2
  done
  exit 0
fi
j=0  # the first one's remover may be copying its file still
while [ -d "$1/ended-first" ] && [ $j -lt 40 ] && ! ls "$1"/ended-first/rank-*.json >/dev/null 2>&1; do
  sleep 0.05; j=$((j + 1))
done
for e in "$1"/ended-first/rank-*.json; do
  [ -e "$e" ] || break
  for f in "$1"/rank-*-*.json; do spoke "$f" && break 2; done
  at=$(stage "$e")  # before `mkdir said`: the remover that loses it removes the directory at once
  mkdir "$1/said" 2>/dev/null || break
  f=${e##*/}; pid=${f##*-}; pid=${pid%.json}; rank=${f#rank-}; rank=${rank%%-*}
  who="rank $rank (host $(uname -n), pid $pid)"
  why="while its peers ran; its launcher stopped them before they could say so"
  echo "ddpcheck: $who is lost: its process ended at stage '$at' $why" >&2
  break
done
for f in "$1"/rank-*-*.json; do  # a rank killed after its part, not yet named: its remover removes
  [ -d "$1/ended-after" ] || [ -d "$1/ended-first" ] && break
  pid=${f##*-}; pid=${pid%.json}
  [ "$pid" = "$2" ] && continue
  case "$(stage "$f")" in "$finished"|"$writing") ;; *) continue;; esac
  case "$(state "$pid")" in Z|X|'') exit 0;; esac
done
g="$1.gone-$2"  # renamed first: a remover looking meanwhile finds no directory, never one half emptied
mv -- "$1" "$g" 2>/dev/null; rm -rf -- "$g"  # $g also where its rank was killed mid-removal
exit 0; } &
