"""Whether two run sets of one fixture really differ in how often they resolve: pure, from
their configs and summaries (report.py's `--compare` shows it).

The trials of the two sides are compared as two independent sets, never paired by index:
trial n of A and trial n of B would be a matched pair only if both ran the same fixture
with a seed both agents used, and a trial records no such seed (the harness hands the agent
`$SWARM_FANOUT_TRIAL=n`, which the product does not read; the model samples unseeded). So
trial n of each side shares the fixture and nothing else.

One test says everything: Fisher's exact test gives p, its inversion the 95% interval of
the odds ratio (which leaves out 1 exactly when p < 0.05) and its power the trials a study
needs (stats.py). Trials errored, interrupted or not run on a side are left out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from swarm_fanout.reporting import stats

FISHER = "Fisher's exact test"
UNPAIRED = (
    "The trials are compared as two independent sets, not paired by index: a trial records "
    "no seed that its agent used, so trial n of A and trial n of B share only the fixture."
)


@dataclass(frozen=True)
class RateDifference:
    """The resolve rates of A and B over their scored trials, and what Fisher's test says."""

    a_resolved: int
    a_trials: int
    b_resolved: int
    b_trials: int
    difference: float  # B's rate - A's rate
    odds_ratio_ci95: tuple[float, float]  # B's odds of resolving over A's: Fisher's test inverted
    p_value: float
    needed: int | None  # trials a side, in all, for 80% power; None: no difference
    test: str = FISHER

    @property
    def real(self) -> bool:
        return self.p_value < stats.ALPHA


@dataclass(frozen=True)
class NotTested:
    """Why two run sets get no test: a sentence."""

    why: str


def scored_outcomes(summary: dict) -> list[bool]:
    """Per trial scored (not errored, interrupted or missing): whether it resolved."""
    return [row["resolved"] for row in summary["trials"] if row["scored"]]


def compare_rates(a_config: dict, a_summary: dict, b_config: dict, b_summary: dict):
    """The difference B - A with its interval and test, or why there is none."""
    if a_config["fixture_digest"] != b_config["fixture_digest"]:
        return NotTested("A and B ran different fixture contents (their fixture digests differ)")
    a, b = scored_outcomes(a_summary), scored_outcomes(b_summary)
    for side, outcomes in (("A", a), ("B", b)):
        if not outcomes:
            return NotTested(f"{side} has no scored trial")
    counts = (sum(a), len(a), sum(b), len(b))
    return RateDifference(
        *counts,
        difference=sum(b) / len(b) - sum(a) / len(a),
        odds_ratio_ci95=stats.odds_ratio_interval(*counts),
        p_value=stats.fisher_exact_p(*counts),
        needed=stats.trials_needed(*counts),
    )


def p_text(p: float) -> str:
    """Two significant digits, `p < 0.001` below that: `p = 0.30`, `p = 0.0039`."""
    if p < 0.001:
        return "p < 0.001"
    if p >= 1:
        return "p = 1"
    digits = 1 - math.floor(math.log10(p))
    return f"p = {p:.{digits}f}"


def odds_ratio_text(interval: tuple[float, float]) -> str:
    """`0.41 to 330`: each bound to two significant digits, rounded outwards, and to more
    where fewer would put a bound on the other side of 1 than it is."""
    low, high = interval
    return f"{_bound_text(low, math.floor)} to {_bound_text(high, math.ceil)}"


def _bound_text(value: float, rounding) -> str:
    if value == 0:
        return "0"
    if math.isinf(value):
        return "∞"
    significant = 2
    while True:
        digits = significant - 1 - math.floor(math.log10(value))
        shown = rounding(value * 10**digits) / 10**digits
        if (shown > 1) == (value > 1) and (shown < 1) == (value < 1):
            return f"{shown:,.{max(digits, 0)}f}"
        significant += 1


def how_tested(found: RateDifference) -> str:
    """The test and the trials it saw, e.g. `Fisher's exact test, 10 and 10 trials`."""
    return f"{found.test}, {found.a_trials} and {found.b_trials} trials"


def needed_text(found: RateDifference) -> str:
    """The trials a side a study needs, counting those run: `36 (10 and 10 run)`."""
    if found.real:
        return "called real already"
    if found.needed is None:
        return "no difference"
    if found.needed > stats.MAX_TRIALS_SIZED:
        return f"more than {stats.MAX_TRIALS_SIZED:,}"
    return f"{found.needed:,} ({found.a_trials} and {found.b_trials} run)"


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
    if found.needed > stats.MAX_TRIALS_SIZED:
        return (
            f"{head}: more than {stats.MAX_TRIALS_SIZED:,} trials a side would be needed to "
            f"detect a difference this small with {stats.POWER:.0%} power."
        )
    return (
        f"{head}: about {found.needed:,} trials a side in all, the {found.a_trials} and "
        f"{found.b_trials} run counted, would detect a difference of this size with "
        f"{stats.POWER:.0%} power."
    )
