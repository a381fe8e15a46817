"""A prime-agent harness for a build of your own on this host, beside verifiers' stock one.

verifiers' `prime-agent` harness installs its pinned release into a container and keeps the
product's state under the container's /tmp. This one runs the executable you name
(`agent_bin`, with `kernel_python`) in the subprocess runtime, over the same ACP client: it
subclasses the stock harness and changes only where the product runs and keeps its state.

Every rollout gets a dir of its own, made with `mktemp -d` under /tmp (short, so the
product's sockets fit, §2) and laid out as the harness's run dirs are (evidence/runpaths.py):
`agent-home/` (PRIME_AGENT_CODING_AGENT_DIR), `sessions/` (PRIME_AGENT_SESSION_DIR, which keys
the ledger, §1 fact 1), `home/` (HOME: the daemon registry `~/.prime/supervisor-owners` and
`~/.ipython` land there, not in your home), `tmp/` (TMPDIR) and `daemon.sock`. The repo is the
runtime's working dir, where the ACP client opens the session. Cleanup shuts the detached
daemon down over the rollout's own socket, ends every process still carrying the rollout's
agent dir, and only then removes the dir, so nothing the product leaves running writes into
it afterwards (docs/product-contract.md §2 "Processes").
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil

from verifiers.v1.acp import ACPConfig, ACPHarness, ACPTurn
from verifiers.v1.harnesses.prime_agent.harness import (
    LIFECYCLE_META_NAMESPACE,
    PrimeAgentHarness,
    PrimeAgentHarnessConfig,
)

from swarm_fanout.evidence.runpaths import RunPaths
from swarm_fanout.shell.launch import end_run
from swarm_fanout.shell.rundir import users_kernel_python
from swarm_fanout.shell.sandbox import Detached
from swarm_fanout.vf.copyout import RuntimeLayout
from swarm_fanout.vf.taskset import ACP_KEY, LAYOUT_KEY

logger = logging.getLogger(__name__)

ROOT_KEY = "swarm_fanout_root"
MARKER = "PRIME_AGENT_CODING_AGENT_DIR"  # every process of the rollout carries it (§2)


class LocalPrimeAgentConfig(PrimeAgentHarnessConfig):
    agent_bin: str = "prime-agent"
    """The prime-agent executable on this host: a path, or a name on PATH."""
    kernel_python: str | None = None
    """PRIME_AGENT_KERNEL_PYTHON for the product (default: your environment's, else the
    kernel venv your own prime-agent built under ~/.prime/agent)."""
    provider: str = "intercept"
    """The models.json provider that points at verifiers' model endpoint, passed as
    --provider (the simulated agent reads the one named `simulated`)."""


class LocalPrimeAgentHarness(PrimeAgentHarness, ACPHarness[LocalPrimeAgentConfig]):
    NEEDS_CONTAINER = False
    SUPPORTS_SKILLS = False  # the stock harness's skill install is not carried over

    async def setup(self, runtime) -> None:
        # `agent_bin` and the cleanup's processes and dirs are this host's.
        if runtime.type != "subprocess":
            raise RuntimeError(
                f"the swarm-fanout harness runs prime-agent on this host: use "
                f"--env.agent.runtime.type subprocess (not {runtime.type!r}), or verifiers' "
                "own --env.agent.harness.id prime-agent in a container"
            )
        # The ACP client's own script, as ACPHarness prepares it; no node, no install.
        await ACPHarness.setup(self, runtime)
        found = await runtime.run(["sh", "-c", 'command -v -- "$1"', "sh", self._bin()], {})
        if found.exit_code != 0:
            raise RuntimeError(f"agent_bin {self.config.agent_bin!r} is not an executable")

    async def prepare_acp(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> ACPConfig:
        if self.config.disabled_tools:
            raise ValueError("prime-agent has no per-tool disable flag")
        made = await runtime.run(["mktemp", "-d", "/tmp/sf-vf-XXXXXX"], {})
        if made.exit_code != 0:
            raise RuntimeError(f"mktemp failed: {made.stderr.strip()[-300:]}")
        paths = RunPaths.of(made.stdout.strip())
        trace.info[ROOT_KEY] = paths.root
        cwd = await runtime.run(["pwd"], {})
        layout = RuntimeLayout(cwd.stdout.strip(), paths.sessions, paths.agent_home)
        trace.info[LAYOUT_KEY] = layout.to_json()
        dirs = (paths.agent_home, paths.sessions, paths.home, paths.tmp)
        created = await runtime.run(["mkdir", "-p", "-m", "700", *dirs], {})
        if created.exit_code != 0:
            raise RuntimeError(f"mkdir failed: {created.stderr.strip()[-300:]}")
        provider = {
            "baseUrl": endpoint,
            "api": "openai-completions",
            "apiKey": secret,
            "models": [{"id": ctx.model, "reasoning": False, "input": ["text"]}],
        }
        models = os.path.join(paths.agent_home, "models.json")
        catalog = {"providers": {self.config.provider: provider}}
        await runtime.write(models, json.dumps(catalog).encode())
        await runtime.run(["chmod", "600", models], {})
        system_prompt, prompt = self.resolve_prompt(data)
        command = [
            self._bin(),
            "--mode",
            "acp",
            "--provider",
            self.config.provider,
            "--model",
            ctx.model,
            "--daemon-socket",
            paths.socket,
            "--offline",
        ]
        if self.config.autonomous:
            command.append("--autonomous")
        if system_prompt:
            command += ["--append-system-prompt", system_prompt]
        return ACPConfig(env=self._env_of(paths), command=command, prompt=prompt)

    def _env_of(self, paths: RunPaths) -> dict[str, str]:
        env = {
            **self.config.resolved_env,
            "HOME": paths.home,
            "TMPDIR": paths.tmp,
            MARKER: paths.agent_home,
            "PRIME_AGENT_SESSION_DIR": paths.sessions,
            "PRIME_AGENT_TELEMETRY": "0",
        }
        kernel = self.config.kernel_python or users_kernel_python(dict(os.environ))
        if kernel:
            env["PRIME_AGENT_KERNEL_PYTHON"] = kernel
        return env

    def acp_turn_result(self, trace, result: ACPTurn) -> None:
        """The stock record, plus the children the product still counted as outstanding
        at the prompt response: its quiescence update after the response boundary."""
        super().acp_turn_result(trace, result)
        events = [
            event
            for metadata in result.update_metadata
            if isinstance(event := metadata.get(LIFECYCLE_META_NAMESPACE), dict)
        ]
        boundary = next((e for e in reversed(events) if e.get("phase") == "responseBoundary"), None)
        if boundary is None:
            return
        turn = boundary.get("promptTurnId")
        observed = next(
            (
                e["quiescence"]
                for e in events
                if e.get("promptTurnId") == turn and isinstance(e.get("quiescence"), dict)
            ),
            None,
        )
        outstanding = observed.get("outstandingSubagents") if observed else None
        trace.info[ACP_KEY] = {
            "prompt_turn_id": turn,
            "outstanding_at_response": outstanding if isinstance(outstanding, int) else None,
            "terminal_quiescence_seen": any(
                e.get("phase") == "terminalQuiescence" and e.get("promptTurnId") == turn
                for e in events
            ),
        }

    async def cleanup(self, trace, runtime) -> None:
        root = trace.info.get(ROOT_KEY)
        if isinstance(root, str):
            trace.info["swarm_fanout_cleanup"] = await asyncio.to_thread(end_rollout, root)

    def _bin(self) -> str:
        # A path is this host's, not the runtime working dir's.
        name = self.config.agent_bin
        return os.path.abspath(name) if os.sep in name else name


def end_rollout(root: str) -> dict:
    """End the rollout's processes as the runner ends a run it did not start (shell/launch.py's
    `end_run` of a shell/sandbox.py `Detached`: the daemon shut down over the rollout's own
    socket, then what still carries its agent dir), then remove its dir. What was left running
    is reported, never ignored."""
    paths = RunPaths.of(root)
    ended = end_run(Detached(paths.agent_home), paths.socket)
    shutil.rmtree(root, ignore_errors=True)
    if ended["leaked_pids"]:
        logger.warning(
            "swarm-fanout: processes of %s still running: %s", root, ended["leaked_pids"]
        )
    return {**ended, "removed": not os.path.lexists(root)}
