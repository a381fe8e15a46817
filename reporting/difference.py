"""Whether two run sets of one fixture really differ in how often they resolve: pure, from
their configs and summaries (report.py's `--compare` shows it).

The trials are **paired** when both run sets record the same fixture digest and the same
number of planned trials: trial n of each then ran the same fixture with the same
`$SWARM_FANOUT_TRIAL=n`, the one per-trial input the harness gives an agent and the seed
an agent that draws per trial draws from (trials.TRIAL_ENV). A pair is a trial index scored
on both sides; a trial errored, interrupted or not run on either side leaves its pair out.
Paired trials get McNemar's exact test on the discordant pairs, others Fisher's exact test.
McNemar's test stays exact when the pairs share nothing (a model whose sampling the index
does not seed): with no difference a discordant pair still goes either way with chance 1/2,
so pairing costs power there, never validity.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from reporting import stats

FISHER = "Fisher's exact test"
MCNEMAR = "McNemar's exact test"


@dataclass(frozen=True)
class RateDifference:
    """The resolve rates of A and B over the trials the test used, and the test."""

    a_resolved: int
    a_trials: int
    b_resolved: int
    b_trials: int
    pairs: int | None  # trial indexes scored on both sides; None when not paired
    a_only: int  # paired: pairs only A resolved
    b_only: int  # paired: pairs only B resolved
    one_sided: int  # paired: trials scored on one side only, left out
    difference: float  # B's rate - A's rate
    ci95: tuple[float, float]  # Newcombe's hybrid score interval of the difference
    p_value: float
    needed: int | None  # trials a side (pairs, when paired) for 80% power; None: no difference

    @property
    def test(self) -> str:
        return MCNEMAR if self.pairs is not None else FISHER

    @property
    def real(self) -> bool:
        return self.p_value < stats.ALPHA


@dataclass(frozen=True)
class NotTested:
    """Why two run sets get no test: a sentence."""

    why: str


def paired(a_config: dict, b_config: dict) -> bool:
    """Trial n of A and of B got the same fixture and the same trial seed (see the module)."""
    return (
        a_config["fixture_digest"] == b_config["fixture_digest"]
        and a_config["trials"] == b_config["trials"]
    )


def scored_outcomes(summary: dict) -> dict[int, bool]:
    """Per trial index scored (not errored, interrupted or missing): whether it resolved."""
    return {row["index"]: row["resolved"] for row in summary["trials"] if row["scored"]}


def compare_rates(a_config: dict, a_summary: dict, b_config: dict, b_summary: dict):
    """The difference B - A with its interval and test, or why there is none."""
    if a_config["fixture_digest"] != b_config["fixture_digest"]:
        return NotTested("A and B ran different fixture contents (their fixture digests differ)")
    a, b = scored_outcomes(a_summary), scored_outcomes(b_summary)
    for side, outcomes in (("A", a), ("B", b)):
        if not outcomes:
            return NotTested(f"{side} has no scored trial")
    if not paired(a_config, b_config):
        return _independent(sum(a.values()), len(a), sum(b.values()), len(b))
    indexes = sorted(set(a) & set(b))
    if not indexes:
        return NotTested("no trial index is scored on both sides")
    a_only = sum(1 for i in indexes if a[i] and not b[i])
    b_only = sum(1 for i in indexes if b[i] and not a[i])
    a_resolved = sum(a[i] for i in indexes)
    b_resolved = sum(b[i] for i in indexes)
    n = len(indexes)
    return RateDifference(
        a_resolved, n, b_resolved, n,
        pairs=n,
        a_only=a_only,
        b_only=b_only,
        one_sided=len(set(a) ^ set(b)),
        difference=(b_resolved - a_resolved) / n,
        # The independent-sets interval: wider than needed when the pairs agree more than
        # chance would have them, which is what pairing by seed is for.
        ci95=stats.rate_difference_interval(a_resolved, n, b_resolved, n),
        p_value=stats.mcnemar_exact_p(a_only, b_only),
        needed=stats.pairs_for_power(a_only, b_only, n),
    )  # fmt: skip


def _independent(a_resolved: int, a_n: int, b_resolved: int, b_n: int) -> RateDifference:
    return RateDifference(
        a_resolved, a_n, b_resolved, b_n,
        pairs=None, a_only=0, b_only=0, one_sided=0,
        difference=b_resolved / b_n - a_resolved / a_n,
        ci95=stats.rate_difference_interval(a_resolved, a_n, b_resolved, b_n),
        p_value=stats.fisher_exact_p(a_resolved, a_n, b_resolved, b_n),
        needed=stats.trials_for_power(a_resolved / a_n, b_resolved / b_n),
    )  # fmt: skip


def p_text(p: float) -> str:
    """Two significant digits, `p < 0.001` below that: `p = 0.30`, `p = 0.0039`."""
    if p < 0.001:
        return "p < 0.001"
    if p >= 1:
        return "p = 1"
    digits = 1 - math.floor(math.log10(p))
    return f"p = {p:.{digits}f}"


def how_tested(found: RateDifference) -> str:
    """The test and the trials it saw, e.g. `Fisher's exact test, 10 and 10 trials`."""
    if found.pairs is None:
        return f"{found.test}, {found.a_trials} and {found.b_trials} trials"
    left_out = f"; {found.one_sided} scored on one side only left out" if found.one_sided else ""
    return (
        f"{found.test}, {found.pairs} trials paired by index: A alone resolved {found.a_only}, "
        f"B alone {found.b_only}{left_out}"
    )


def verdict_sentence(found: RateDifference | NotTested) -> str:
    """What a reader acts on: which side resolves more often, or how many trials would tell."""
    if isinstance(found, NotTested):
        return f"Not tested: {found.why}."
    said = f"{p_text(found.p_value)}; {how_tested(found)}"
    if found.real:
        better, worse = ("B", "A") if found.difference > 0 else ("A", "B")
        return f"{better} resolves more often than {worse} ({said})."
    head = f"The data can't tell A and B apart ({said})"
    if found.needed is None:
        return f"{head}: they resolved equally often, so there is no difference to size a study on."
    unit = "paired trials" if found.pairs is not None else "trials a side"
    return (
        f"{head}: about {found.needed:,} {unit} would detect a difference of this size "
        f"with {stats.POWER:.0%} power (normal approximation)."
    )
