"""Which ranks make a reduction wrong: bisection over subgroups, pure but for the callback that runs them.

Apart from the sweep (which runs the groups on real ranks) so that the rule can be tested
with fault models, and mutated (docs/testing.md), without ranks.
"""

from __future__ import annotations

from collections.abc import Callable


def bisect(n: int, run: Callable[[list[list[int]]], list[bool]]) -> list[int] | None:
    """The ranks at fault, from `run` (disjoint groups -> which of them came out wrong).

    Pure but for `run`, so it is tested with fault models. Split every wrong group into
    halves and run each half on its own. A wrong pair is split once more: each member
    runs beside a partner from outside the pair (a rank proven good first; when partners
    are short, the other member waits a round). A member wrong beside its partner, or
    wrong alone, is at fault. A rank right *alone* proves nothing (a lone rank moves no
    data, so a bad link never shows): only groups of two or more that came out right
    prove their ranks good. A wrong group whose parts all came out right is named
    whole, less the members proven good: the fault needs those ranks together. None
    when that group is the whole world (nothing was localised). Every rank takes the
    same steps, since every rank learns every result.
    """
    suspects: list[list[int]] = [list(range(n))]
    tested: dict[tuple[int, ...], dict[int, bool]] = {}  # a pair -> its members' results so far
    good: set[int] = set()
    culprits: set[int] = set()
    for _ in range(max_rounds(n)):
        if not suspects:
            break
        in_doubt = {r for group in suspects for r in group} | culprits
        outside = [r for r in range(n) if r not in good and r not in in_doubt]
        spare = sorted(good) + outside
        candidates = _plan_round(n, suspects, tested, spare, alone=False)
        if not candidates:
            # Every member waits for a partner and none is free (every rank is in doubt): alone, then.
            candidates = _plan_round(n, suspects, tested, spare, alone=True)
        wrong = run([group for _, group, _ in candidates])
        outcomes = list(zip(candidates, wrong, strict=True))  # a run must answer for every group
        for (_, group, _), bad in outcomes:
            if not bad and len(group) > 1:
                good |= set(group)
        next_suspects: list[list[int]] = []
        for index, group in enumerate(suspects):
            results = [(g, m, w) for (i, g, m), w in outcomes if i == index]
            if len(group) > 2:
                failed = [g for g, _, w in results if w]
                for g in failed:
                    if len(g) == 1:
                        culprits.add(g[0])  # wrong alone
                    else:
                        next_suspects.append(g)
                if not failed:
                    unproven = [r for r in group if r not in good]
                    if unproven and len(unproven) < len(group):
                        next_suspects.append(unproven)  # right only alone: try it beside proven ranks
                    elif len(group) == n:
                        return None  # every part is right alone: only the whole world shows the fault
                    else:
                        culprits |= set(group)
                continue
            done = tested.setdefault(tuple(group), {})
            done.update({m: w for _, m, w in results if m is not None})
            if len(done) < len(group):
                next_suspects.append(group)  # a member still waits for a partner
                continue
            failed_members = [m for m, w in done.items() if w]
            if failed_members:
                culprits |= set(failed_members)
            elif len(group) == n:
                return None
            else:
                culprits |= {r for r in group if r not in good} or set(group)
        suspects = next_suspects
    if suspects:
        return None  # past the bound: a defect here, which must never hang the run; nothing localised
    return sorted(culprits)


def max_rounds(n: int) -> int:
    """More rounds than bisect() can take for n ranks: halving to pairs takes about log2(n) rounds,
    each level may try its ranks right only alone once more beside proven ones, and a pair takes
    up to three (each member beside a partner, then alone)."""
    return 2 * n.bit_length() + 6


def _plan_round(
    n: int,
    suspects: list[list[int]],
    tested: dict[tuple[int, ...], dict[int, bool]],
    spare: list[int],
    alone: bool,
) -> list[tuple[int, list[int], int | None]]:
    """One round of bisect(): (suspect, group, member under test) for groups that run at once."""
    spare = list(spare)
    candidates: list[tuple[int, list[int], int | None]] = []
    for index, group in enumerate(suspects):
        if len(group) > 2:
            half = (len(group) + 1) // 2
            candidates += [(index, group[:half], None), (index, group[half:], None)]
            continue
        for member in group:
            if member in tested.get(tuple(group), {}):
                continue
            partners = [r for r in spare if r not in group]
            if partners and not alone:
                spare.remove(partners[0])
                candidates.append((index, [member, partners[0]], member))
            elif alone or not any(r not in group for r in range(n)):
                candidates.append((index, [member], member))  # nobody else to stand beside it
    return candidates
