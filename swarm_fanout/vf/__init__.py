"""swarm-fanout as a verifiers taskset (`vf-eval swarm-fanout`): the fixtures as tasks, the
harness's verdict as the reward, and a prime-agent harness for a local build, which is the
taskset's default (verifiers' stock one: `--env.agent.harness.id prime-agent`).
docs/verifiers.md."""

from swarm_fanout.vf.harness import LocalPrimeAgentHarness
from swarm_fanout.vf.taskset import SwarmFanoutTaskset

__all__ = ["LocalPrimeAgentHarness", "SwarmFanoutTaskset"]
