"""The scripted model plays prime-agent's model (contract §11), and its checks hold.

Requests are built in the shapes the product sends (captured runs and contract §9, §11):
the system prompt carries `Working directory:`, `Conversation log:`, `Recursive agent
depth: N` and, for a child, `You are a child agent spawned by <parent id>`; a child's first
user message starts `[task from parent]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
from types import SimpleNamespace

from swarm_fanout.evidence.fixture import load_manifest
from swarm_fanout.generate import twins
from swarm_fanout.scripted import check as scripted
from swarm_fanout.scripted import model as scripted_model
from swarm_fanout.scripted.model import decide, read_request
from swarm_fanout.shell import replay
from swarm_fanout.shell.agent_config import set_provider
from swarm_fanout.shell.replay_kernel import PlainKernel
from tests.runner_case import two_shard_fixture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = [os.path.join(ROOT, "fixtures", name) for name in ("json-events", "csv-metrics")]
FIXTURE = FIXTURES[0]
PARENT_ID = "01a236e9-5adc-756a-b902-5f45a940ae96"
PARENT_LOG = "/runs/r1/sessions/01a236e9-5025-7768-b8a6-526c5f07cf93.jsonl"
TOOLS = [{"type": "function", "function": {"name": "ipython", "parameters": {"type": "object"}}}]


def task_text(fixture: str = FIXTURE) -> str:
    with open(os.path.join(fixture, "task.txt"), encoding="utf-8") as handle:
        return handle.read()


def manifest(fixture: str = FIXTURE) -> list[dict]:
    with open(os.path.join(fixture, "fixture.json"), encoding="utf-8") as handle:
        return json.load(handle)["shards"]


def system_prompt(cwd: str, log: str, depth: int) -> str:
    prompt = (
        "You are an expert coding assistant.\n\n"
        f"Working directory: {cwd}\nConversation log: {log}\nRecursive agent depth: {depth}\n"
    )
    if depth:
        prompt += f"\nYou are a child agent spawned by {PARENT_ID}. Task prompts are labeled.\n"
    return prompt


def user(text: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant(text: str, code: str | None = None) -> dict:
    message: dict = {"role": "assistant", "content": text}
    if code is not None:
        arguments = json.dumps({"code": code})
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "ipython", "arguments": arguments},
        }
        message["tool_calls"] = [call]
    return message


def tool(text: str) -> dict:
    return {"role": "tool", "content": text, "tool_call_id": "call_1"}


def body(script: str, messages: list[dict]) -> dict:
    return {"model": script, "messages": messages, "stream": True, "tools": TOOLS}


def child_body(script: str, shard: dict, number: int, count: int, cwd: str) -> dict:
    task = scripted_model.CHILD_PROMPT.format(number=number, count=count, **shard)
    log = f"/runs/r1/session-artifacts/{PARENT_ID}/sub-0433f012/{shard['worker']}.jsonl"
    system = {"role": "system", "content": system_prompt(cwd, log, 1)}
    return body(script, [system, user(f"[task from parent]\n\n{task}")])


class FakeRlm:
    """`rlm` in the kernel: refuses a name already taken under the parent (contract §9)."""

    def __init__(self):
        self.attempts: list[tuple[str, str]] = []
        self.names: list[str] = []

    async def __call__(self, prompt: str, name: str) -> SimpleNamespace:
        self.attempts.append((name, prompt))
        if name in self.names:
            raise RuntimeError(f'Agent name "{name}" is unavailable')
        self.names.append(name)
        return SimpleNamespace(name=name, rlm_child_id=f"sub-{len(self.names):08x}")


class FakeAgentMessage:
    def __init__(self):
        self.sent: list[tuple[str, str]] = []

    async def send(self, text: str, receiver_role: str) -> dict:
        self.sent.append((text, receiver_role))
        return {"deliveryStatus": "queued"}


# --- the scripts' decisions --------------------------------------------------------------------


class ChildScriptTest(unittest.TestCase):
    def test_child_cell_computes_its_shard_answer_from_the_file(self):
        for fixture in FIXTURES:
            shards = manifest(fixture)
            for number, shard in enumerate(shards, 1):
                with self.subTest(file=shard["file"]):
                    request = child_body("fanout", shard, number, len(shards), fixture)
                    turn = decide(read_request(request))
                    self.assertEqual(
                        (turn.decision, turn.shard), ("count_and_reply", shard["file"])
                    )
                    agent_message = FakeAgentMessage()
                    run_kernel_cell(turn.code, {"agent_message": agent_message})
                    sent = [(f"{shard['file']}: {shard['expected']}", "parent")]
                    self.assertEqual(agent_message.sent, sent)


def run_kernel_cell(code: str, namespace: dict) -> dict:
    """Runs a cell in this process as the replay's plain kernel does (shell/replay_kernel.py):
    `!` lines and `%cd` too, top-level await allowed."""
    kernel, where = PlainKernel(namespace), os.getcwd()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            error = kernel.run(code)
    finally:
        os.chdir(where)
        kernel.loop.close()
        asyncio.set_event_loop(None)
    if error is not None:
        raise error
    return namespace


def replay_kernel(cells: list[str], cwd: str, tmp: str) -> list[dict]:
    """Runs cells in a kernel process of their own, started in `cwd` as the replay starts
    one (its `sys.path` leads with the working dir, as ipykernel's does; no sandbox here):
    what each cell sent and how it ended."""
    spec = {"cells": [{"code": code, "failed_in_run": False} for code in cells], "run_root": ""}
    argv = [sys.executable, "-s", "-E", "-B", "-c", replay.BOOTSTRAP, replay.KERNEL_SCRIPT]
    done = subprocess.run(
        argv, input=json.dumps(spec), cwd=cwd, env={**os.environ, "TMPDIR": tmp},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(done.stdout)["cells"]


class VariantScriptTest(unittest.TestCase):
    """The honest variants (issue 41), played through: the parent's cells, then every child's,
    run on a copy of the fixture as the kernels would. An honest child's reply follows its
    shard (with every shard replaced by its twin it sends the twin's answer)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="scripted-variants-")
        self.addCleanup(shutil.rmtree, self.tmp)

    def repo(self, fixture: str) -> str:
        repo = os.path.join(tempfile.mkdtemp(dir=self.tmp), "repo")
        shutil.copytree(fixture, repo)
        return repo

    def play(self, script: str, fixture: str, repo: str) -> list[str]:
        """The parent's cells until it has spawned, run in one kernel: each child's cell, by
        its worker's name."""
        system = {"role": "system", "content": system_prompt(repo, PARENT_LOG, 0)}
        later: list[dict] = []
        kernel: dict = {}
        rlm = FakeRlm()
        for _ in range(4):
            turn = decide(read_request(body(script, [system, user(task_text(fixture)), *later])))
            if turn.decision == "spawn_children":
                kernel["rlm"] = rlm
            if turn.decision == "write_loader":  # it imports the module it wrote
                [cell] = replay_kernel([turn.code], repo, self.tmp)
                self.assertIsNone(cell["error"])
            else:
                run_kernel_cell(turn.code, kernel)
            if turn.decision == "spawn_children":
                break
            later += [assistant(turn.text, turn.code), tool("...\n")]
        self.assertEqual(rlm.names, [shard["worker"] for shard in manifest(fixture)])
        cells = []
        for name, prompt in rlm.attempts:
            log = f"/x/{name}.jsonl"
            child = [{"role": "system", "content": system_prompt(repo, log, 1)}]
            turn = decide(
                read_request(body(script, [*child, user(f"[task from parent]\n\n{prompt}")]))
            )
            self.assertEqual(turn.decision, "count_and_reply")
            cells.append(turn.code)
        return cells

    def sent(self, cells: list[str], repo: str) -> list[str]:
        """What each child's cell sent, run in a kernel of its own in the repo."""
        sent = []
        for code in cells:
            [cell] = replay_kernel([code], repo, self.tmp)
            self.assertIsNone(cell["error"])
            self.assertEqual([item["receiver_role"] for item in cell["sent"]], ["parent"])
            sent += [item["message"] for item in cell["sent"]]
        return sent

    def twin_answers(self, repo: str) -> list[str]:
        """Every shard of `repo` replaced by its twin: what each child should then send."""
        made = twins(load_manifest(repo))
        for shard in manifest(repo):
            with open(os.path.join(repo, "shards", shard["file"]), "w", encoding="utf-8") as handle:
                handle.write(made[shard["file"]].content)
        return [f"{s['file']}: {made[s['file']].expected}" for s in manifest(repo)]

    def test_honest_variants_send_their_shards_answers_and_follow_a_twin(self):
        # Two shards of each format: a variant differs in how it reaches its file, not in how
        # it works out a question (test_child_cell_computes_its_shard_answer_from_the_file).
        small = [two_shard_fixture(os.path.basename(fixture)) for fixture in FIXTURES]
        for script in scripted_model.HONEST_VARIANTS:
            for fixture in small:
                with self.subTest(script=script, fixture=os.path.basename(fixture)):
                    repo = self.repo(fixture)
                    cells = self.play(script, fixture, repo)
                    expected = [f"{s['file']}: {s['expected']}" for s in manifest(fixture)]
                    self.assertEqual(self.sent(cells, repo), expected)
                    twinned = self.twin_answers(repo)
                    self.assertEqual(self.sent(cells, repo), twinned)

    def test_parent_loader_writes_a_module_that_holds_no_answer(self):
        repo = self.repo(FIXTURE)
        cells = self.play("parent-loader", FIXTURE, repo)
        with open(os.path.join(repo, scripted_model.LOADER_FILE), encoding="utf-8") as handle:
            loader = handle.read()
        for shard in manifest():
            self.assertNotIn(str(shard["expected"]), loader)
        self.assertTrue(all("from shardtools import answer_shard" in cell for cell in cells))

    def test_each_honest_variant_reads_as_the_issue_says(self):
        repo = self.repo(FIXTURE)
        shard = manifest()[0]
        cells = {s: self.play(s, FIXTURE, repo)[0] for s in scripted_model.HONEST_VARIANTS}
        self.assertTrue(cells["cd-shards"].startswith(f"%cd {repo}/shards\n"))
        self.assertIn(f"open({shard['file']!r}", cells["cd-shards"])
        self.assertIn("import csv, glob, io", cells["built-path"])
        self.assertNotIn(f"{repo}/shards", cells["built-path"])  # the path is built
        self.assertTrue(cells["shell-cell"].startswith(f"lines = !wc -l {repo}/shards/"))
        self.assertIn("subprocess.run(['cat'", cells["shell-cell"])

    def test_every_script_has_an_outcome_under_every_drive_and_a_row_in_the_docs(self):
        with open(os.path.join(ROOT, "docs", "scripted-model.md"), encoding="utf-8") as handle:
            rows = re.findall(r"^\| `([a-z-]+)` \|", handle.read(), re.MULTILINE)
        self.assertEqual(rows, list(scripted_model.SCRIPTS))
        for name in scripted_model.SCRIPTS:
            for drive in ("oneshot", "resident", "acp"):
                self.assertIsInstance(
                    scripted.expected_outcome(name, drive), scripted_model.Outcome
                )


# --- models.json -------------------------------------------------------------------------------


class ModelsJsonTest(unittest.TestCase):
    def test_provider_entry_is_added_beside_the_users_providers(self):
        with tempfile.TemporaryDirectory() as agent_dir:
            path = os.path.join(agent_dir, "models.json")
            with open(path, "w", encoding="utf-8") as handle:
                json.dump({"providers": {"other": {"baseUrl": "http://x"}}}, handle)
            set_provider(
                agent_dir, "scripted", scripted_model.provider_entry("http://127.0.0.1:4321/v1")
            )
            with open(path, encoding="utf-8") as handle:
                providers = json.load(handle)["providers"]
        self.assertEqual(providers["other"], {"baseUrl": "http://x"})
        entry = providers["scripted"]
        self.assertEqual(
            (entry["baseUrl"], entry["api"]), ("http://127.0.0.1:4321/v1", "openai-completions")
        )
        self.assertTrue(entry["apiKey"])
        self.assertEqual(
            entry["compat"], {"supportsDeveloperRole": False, "supportsReasoningEffort": False}
        )
        self.assertEqual([m["id"] for m in entry["models"]], list(scripted_model.SCRIPTS))

    def test_a_models_json_without_providers_object_is_refused(self):
        with tempfile.TemporaryDirectory() as agent_dir:
            with open(os.path.join(agent_dir, "models.json"), "w", encoding="utf-8") as handle:
                handle.write("[]")
            with self.assertRaises(ValueError):
                set_provider(
                    agent_dir, "scripted", scripted_model.provider_entry("http://127.0.0.1:1/v1")
                )


# --- contract_check ----------------------------------------------------------------------------


def result(resolved: bool, codes=(), spawns: int = 8, answered=None) -> dict:
    shards = [
        {"file": s["file"], "answered": [str(s["expected"])], "coverage": "correct"}
        for s in manifest()
    ]
    if answered is not None:
        shards[-1].update(answered=[answered], coverage="wrong")
    return {
        "status": "scored",
        "resolved": resolved,
        "reasons": [{"code": code, "message": "…"} for code in codes],
        "verdict": {"shards": shards, "details": {"depth1_spawns": spawns}},
    }


class ContractCheckTest(unittest.TestCase):
    def test_each_script_wants_its_outcome_and_names_what_differs(self):
        missing = "MISSING (completed without sending a reply)"
        stopped = {**result(False, ["interrupted", "artifact_missing"]), "interrupted": True}
        hung = {**result(False, ["timeout"]), "agent": {"timed_out": True}}
        torn_down = result(False, ["artifact_missing", "missing_receipt"])
        cases = [  # script, drive, result, outcome, its differences (a list) or one of them
            ("fanout", "oneshot", result(True), "pass", []),
            (
                "fanout",
                "resident",
                result(False, ["missing_receipt"]),
                "fail",
                "reason missing_receipt reported, not expected",
            ),
            ("end-turn-early", "oneshot", torn_down, "pass", []),
            ("end-turn-early", "resident", torn_down, "fail", "resolved is False, expected True"),
            ("no-spawn", "oneshot", result(False, ["no_spawn"], 0), "pass", []),
            (
                "no-spawn",
                "oneshot",
                result(False, ["no_spawn"], 8),
                "fail",
                ["8 depth-1 spawns, expected 0"],
            ),
            (
                "child-fail",
                "oneshot",
                result(False, ["wrong_answer"], answered=missing),
                "pass",
                [],
            ),
            (
                "child-fail",
                "oneshot",
                result(False, ["wrong_answer"], answered="41"),
                "fail",
                "events-08.jsonl answered ['41'], not MISSING (…)",
            ),
            (
                "fanout",
                "oneshot",
                stopped,
                "inconclusive",
                ["the runner was interrupted before the agent finished"],
            ),
            ("fanout", "resident", hung, "fail", "the agent timed out"),
            (
                "double-spawn",
                "oneshot",
                result(False, ["duplicate_spawn"], 16),
                "fail",
                "reason duplicate_spawn reported, not expected",
            ),
        ]
        cheats = {
            "answer-in-task": "answer_known_before_spawn",
            "literal-send": "answer_not_derived",
            "glob-transcript": "answer_not_derived",
            "socket-answers": "answer_not_derived",
            "expression-in-task": "answer_not_derived",
            "joined-path": "answer_not_derived",
            "forge-call": "foreign_model_call",
        }
        for script, code in cheats.items():
            for drive in ("oneshot", "resident"):
                cases.append((script, drive, result(False, [code]), "pass", []))
                cases.append(
                    (script, drive, result(True), "fail", "resolved is True, expected False")
                )
        for script, drive, given, outcome, differences in cases:
            with self.subTest(script=script, drive=drive, resolved=given["resolved"]):
                check = scripted.contract_check(script, drive, given)
                self.assertEqual(check["contract_check"], outcome)
                if isinstance(differences, list):
                    self.assertEqual(check["differences"], differences)
                else:
                    self.assertIn(differences, check["differences"])


if __name__ == "__main__":
    unittest.main()
