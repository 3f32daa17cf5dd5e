"""Rebuild ``instances.jsonl`` and ``repos/*.bundle`` from real bug-fix commits of public repositories.

Run from the repository root with local clones of the upstream repositories::

    python packages/sandbox/tests/data/swebench/build_instances.py \
        --repo python-humanize/humanize=PATH --repo tkem/cachetools=PATH

Each instance is one upstream commit that fixes a bug and adds the test that shows it. Its base is
the commit's parent; the bundle holds, per instance, one commit whose tree is exactly that parent's
tree (no history, so a bundle stays a few tens of KiB; the tree hash is the upstream one, and the
commit message names the upstream commit). ``patch`` is the fix's change outside ``tests/``,
``test_patch`` its change under ``tests/``. FAIL_TO_PASS and PASS_TO_PASS are found as SWE-bench
finds them: the tests of the files ``test_patch`` touches are run (in the sandbox, with the
instance's setup) on the base and on the base with both patches; FAIL_TO_PASS failed before and
passes after, PASS_TO_PASS passes both times.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from codemoe.sandbox.agent.environment import grading_request
from codemoe.sandbox.agent.patches import apply_patch
from codemoe.sandbox.agent.tasks import load_swebench_jsonl
from codemoe.sandbox.api import Limits
from codemoe.sandbox.local import LocalExecutor

HERE = Path(__file__).resolve().parent
INSTALL = "python -m pip install --no-deps --no-build-isolation -e ."
SITE_PACKAGES = ["pytest", "pip", "setuptools"]  # what the sandbox shows of site-packages: the build backend too

# (repository, upstream fix commit, how the instance runs)
INSTANCES = [
    ("python-humanize/humanize", "b1ee6875820839a59f1b6f4a5fedc7cad8883834",
     {"setup": [INSTALL], "test_command": "python -m pytest -q tests"}),
    ("python-humanize/humanize", "33005e5abf19a5a1f0dd33441d73ff43fa906ca5",
     {"setup": [INSTALL], "test_command": "python -m pytest -q tests"}),
    ("tkem/cachetools", "57d2e4813d9801f97034559e22428bac6f7c6c9b",
     {"env": {"PYTHONPATH": "src"}, "test_command": "python -m pytest -q tests"}),
]
_IDENTITY = {"GIT_AUTHOR_NAME": "codemoe", "GIT_AUTHOR_EMAIL": "codemoe@localhost", "GIT_COMMITTER_NAME": "codemoe",
             "GIT_COMMITTER_EMAIL": "codemoe@localhost", "GIT_AUTHOR_DATE": "2026-12-01T00:00:00Z",
             "GIT_COMMITTER_DATE": "2026-12-01T00:00:00Z"}


def git(gitdir: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", f"--git-dir={gitdir}", *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


def tree_commit(gitdir: Path, name: str, upstream: str) -> str:
    """A parentless commit with the tree of ``upstream``, its message naming it."""
    tree = git(gitdir, "rev-parse", f"{upstream}^{{tree}}")
    return git(gitdir, "commit-tree", tree, "-m", f"{name} at {upstream} (its tree, without history)", env=_IDENTITY)


def instance(gitdir: Path, name: str, fix: str, how: dict) -> dict:
    parent = git(gitdir, "rev-parse", f"{fix}^")
    base = tree_commit(gitdir, name, parent)
    git(gitdir, "update-ref", f"refs/heads/base-{fix[:7]}", base)
    subject, _, body = git(gitdir, "log", "-1", "--format=%B", fix).partition("\n")
    return {
        "instance_id": f"{name.replace('/', '__')}-{fix[:7]}",
        "repo": name,
        "base_commit": base,
        "upstream_base_commit": parent,
        "upstream_fix_commit": fix,
        "problem_statement": f"{subject}\n{body}".strip(),
        "patch": git(gitdir, "diff", parent, fix, "--", ".", ":(exclude)tests") + "\n",
        "test_patch": git(gitdir, "diff", parent, fix, "--", "tests") + "\n",
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [],
        **how,
    }


def find_lists(instances: list[dict]) -> None:
    """Fill FAIL_TO_PASS and PASS_TO_PASS from sandboxed runs of the base and of the fixed base."""
    jsonl = HERE / "instances.jsonl"
    jsonl.write_text("".join(json.dumps(i) + "\n" for i in instances))
    with tempfile.TemporaryDirectory() as cache, LocalExecutor(workers=2, site_packages=SITE_PACKAGES) as executor:
        tasks = load_swebench_jsonl(jsonl, HERE / "repos", cache)
        requests = []
        for task in tasks:
            limits = Limits(timeout_s=task.timeout_s, cpu_s=task.timeout_s, memory_mb=1024)
            requests += [grading_request(task, task.repo_files(), limits, "before"),
                         grading_request(task, apply_patch(task.repo_files(), task.gold_patch), limits, "gold")]
        results = executor.run_batch(requests)
    for n, (inst, task) in enumerate(zip(instances, tasks)):
        before, after = results[2 * n].tests, results[2 * n + 1].tests
        judged = sorted(t for t in after if task.is_hidden(t))
        inst["FAIL_TO_PASS"] = [t for t in judged if after[t] == "passed" and before.get(t) != "passed"]
        inst["PASS_TO_PASS"] = [t for t in judged if after[t] == "passed" and before.get(t) == "passed"]
        print(f"{inst['instance_id']}: {len(inst['FAIL_TO_PASS'])} fail_to_pass, {len(inst['PASS_TO_PASS'])} pass_to_pass")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", action="append", required=True, help="owner/name=PATH of a local clone")
    clones = dict(item.split("=", 1) for item in parser.parse_args(argv).repo)
    (HERE / "repos").mkdir(exist_ok=True)
    instances = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in dict.fromkeys(n for n, _, _ in INSTANCES):
            gitdir = Path(scratch) / f"{name.replace('/', '__')}.git"
            subprocess.run(["git", "clone", "--quiet", "--bare", clones[name], str(gitdir)], check=True)
            mine = [instance(gitdir, name, fix, how) for n, fix, how in INSTANCES if n == name]
            refs = [f"refs/heads/base-{i['upstream_fix_commit'][:7]}" for i in mine]
            git(gitdir, "bundle", "create", str(HERE / "repos" / f"{name.replace('/', '__')}.bundle"), *refs)
            instances += mine
    find_lists(instances)
    (HERE / "instances.jsonl").write_text("".join(json.dumps(i) + "\n" for i in instances))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
