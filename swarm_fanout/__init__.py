"""swarm-fanout: an eval of whether a model can orchestrate a fan-out of RLM subagents in
the prime-agent CLI. The harness's layers are this package's subpackages (README
"Layout"); the top of a checkout keeps the commands. For `vf-eval swarm-fanout` the
package exports the verifiers taskset and its harness from swarm_fanout.vf, imported only
when asked for: the harness itself never imports verifiers."""

__all__ = ["LocalPrimeAgentHarness", "SwarmFanoutTaskset"]


def __getattr__(name: str):
    if name in __all__:
        from swarm_fanout import vf

        return getattr(vf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
