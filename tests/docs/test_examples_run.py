"""Every code example of the README and the docs site runs, so no example rots.

Goal: a reader who copies a fenced ```python or ```bash block from README.md or docs/**/*.md
gets what the page says, against a real local cluster. Method: each page's blocks run in page
order, as a reader would, in one temporary directory per page: shell blocks with bash
(`set -euo pipefail`), Python blocks in one namespace per page in this process (so their
`SparkSession.builder...getOrCreate()` gets the shared session of tests/conftest.py, and a
block may use `spark` without making it, as in the pyspark shell). A page
that starts its own cluster (`rocketha-cluster up --dir /tmp/rh ...`) really starts it, with
its own flags, in the page's directory; a page that only talks to one (`127.0.0.1:10911`)
gets the module's cluster. The few literal stand-ins a page writes for what a reader knows
(`/tmp/rh`, `127.0.0.1:PORT`, `<pid of the MASTER>`, `/data/...`) are replaced by the real
directory, endpoint or pid; nothing else of a block is changed. A block may be left out only
by a visible `<!-- not run: reason -->` above it (tests/docs/examples.py), and the reasons are
checked to be there. Every cluster a page started is stopped at the end of its test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs.examples import ROOT, Example, all_examples, examples, pages

pytestmark = [pytest.mark.integration, pytest.mark.spark]

VENV_BIN = Path(sys.executable).parent
RUNNABLE = {str(page.relative_to(ROOT)): [e for e in examples(page) if e.not_run is None]
            for page in pages()}
RUNNABLE = {page: blocks for page, blocks in RUNNABLE.items() if blocks}
SHELL_TIMEOUT_S = 240
# Files a page assumes the reader has at hand, in the page's directory.
GIVEN_FILES = {"alice.secret": "alice-secret-key-0123456789"}

# Bash helpers the substituted blocks call: `rocketha-cluster up` remembers its --dir, so a
# later `127.0.0.1:PORT` means that cluster's master; stand-ins read it through `status`.
PRELUDE = r"""
set -euo pipefail
rocketha-cluster() {
    local previous="" word
    for word in "$@"; do
        if [ "$previous" = "--dir" ] && [ "${1:-}" = "up" ]; then echo "$word" > "$RH_LAST"; fi
        previous="$word"
    done
    command rocketha-cluster "$@"
}
rh_pick() { command rocketha-cluster status --dir "$(cat "$RH_LAST")" --json | \
    "$RH_PYTHON" -c "$RH_PICK" "$1"; }
"""
PICK = r"""
import json, sys
status = json.load(sys.stdin)
alive = [p for p in status["processes"] if p["alive"]]
what = sys.argv[1]
if what == "grpc":
    print(status["grpc_endpoint"])
else:
    kind, field = what.split("-")
    chosen = [p for p in alive if p["kind"] == kind]
    masters = [p for p in chosen if p.get("role") == "MASTER"]
    print((masters or chosen)[0][field])
"""


def _stand_ins(page_dir: Path) -> list[tuple[str, str]]:
    """(what a page writes, what the test runs): the reader's own values, made real."""
    return [
        ("$PWD/.venv/bin/python", sys.executable),
        (".venv/bin/", ""),
        ("/tmp/rh", str(page_dir / "rh")), ("/tmp/rs", str(page_dir / "rs")),
        ("/tmp/plan", str(page_dir / "plan")), ("/data/", str(page_dir / "data") + "/"),
        ("\"/chk\"", f"\"{page_dir / 'chk'}\""),
        ("<pid of the MASTER>", "$(rh_pick broker-pid)"),
        ("127.0.0.1:PORT", "$(rh_pick broker-endpoint)"),
        ("127.0.0.1:10911", "$(rh_pick broker-endpoint)"),
        ("127.0.0.1:9876", "$(rh_pick controller-endpoint)"),
        ("127.0.0.1:<port>", "$(rh_pick grpc)"),
    ]


@pytest.fixture(scope="module")
def module_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cluster a page talks to when it starts none of its own: plain TCP, one controller,
    one replica set of three brokers, as the quickstart's (its master is what `127.0.0.1:10911`
    stands for in the pages; operations.md shuts one broker of it down)."""
    directory = tmp_path_factory.mktemp("docs-cluster") / "rh"
    _cluster("up", "--dir", str(directory), "--insecure", "--controllers", "1", "--replicas",
             "3")
    endpoint = PageRun(directory.parent, directory, None).pick("broker-endpoint")
    # the topic the quickstart creates, which later pages write to and read from
    admin = subprocess.run([str(VENV_BIN / "rocketha-admin"), "--broker", endpoint, "topic",
                            "create", "--topic", "orders", "--queues", "4"], env=_env(),
                           capture_output=True, text=True, timeout=60, check=False)
    assert admin.returncode == 0, admin.stderr
    yield directory
    _cluster("down", "--dir", str(directory))


def _cluster(*args: str) -> str:
    done = subprocess.run([str(VENV_BIN / "rocketha-cluster"), *args], capture_output=True,
                          text=True, timeout=120, env=_env(), check=False)
    assert done.returncode == 0, f"rocketha-cluster {args}: {done.stderr[-2000:]}"
    return done.stdout


def _env(**extra: str) -> dict[str, str]:
    paths = [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
                PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)), **extra)


class PageRun:
    """One page's blocks, run in order in one directory with one Python namespace."""

    def __init__(self, page_dir: Path, default_cluster: Path, spark: Any) -> None:
        self.dir = page_dir
        self.last = page_dir / ".last-cluster"
        self.last.write_text(str(default_cluster))
        for name, content in GIVEN_FILES.items():
            (page_dir / name).write_text(content)
        # as in the pyspark shell, a block may use `spark` without making it
        self.namespace: dict[str, Any] = {"__name__": "__docs_example__", "spark": spark}

    def clusters(self) -> list[Path]:
        return [p.parent for p in self.dir.glob("*/cluster.json")]

    def substitute(self, body: str) -> str:
        for written, real in _stand_ins(self.dir):
            body = body.replace(written, real)
        return body

    def pick(self, what: str) -> str:
        status = json.loads(_cluster("status", "--dir", self.last.read_text().strip(), "--json"))
        done = subprocess.run([sys.executable, "-c", PICK, what], input=json.dumps(status),
                              capture_output=True, text=True, check=True)
        return done.stdout.strip()

    def run(self, example: Example) -> None:
        if example.lang == "bash":
            self.run_shell(example)
        else:
            self.run_python(example)

    def run_shell(self, example: Example) -> None:
        script = PRELUDE + self.substitute(example.body)
        done = subprocess.run(["bash", "-c", script], cwd=self.dir, capture_output=True,
                              text=True, timeout=SHELL_TIMEOUT_S, check=False,
                              env=_env(RH_LAST=str(self.last), RH_PYTHON=sys.executable,
                                       RH_PICK=PICK))
        assert done.returncode == 0, (f"{example.where} exited {done.returncode}:\n"
                                      f"{done.stdout[-2000:]}\n{done.stderr[-3000:]}")

    def run_python(self, example: Example) -> None:
        source = self.substitute(example.body)
        for shell_call in set(re.findall(r"\$\(rh_pick ([\w-]+)\)", source)):
            source = source.replace(f"$(rh_pick {shell_call})", self.pick(shell_call))
        cwd = os.getcwd()
        os.chdir(self.dir)
        try:
            exec(compile(source, example.where, "exec"), self.namespace)  # noqa: S102
        finally:
            os.chdir(cwd)

    def close(self) -> None:
        for directory in self.clusters():
            _cluster("down", "--dir", str(directory))


def test_every_opt_out_gives_its_reason() -> None:
    left_out = [e for e in all_examples() if e.not_run is not None]
    assert all(len(e.not_run or "") >= 15 for e in left_out), left_out
    # the pages a new user follows run their examples: an opt-out there is not the way around
    # a failing block
    for page in ("README.md", "docs/quickstart.md", "docs/client.md", "docs/spark.md",
                 "docs/deployment.md", "docs/security.md", "docs/operations.md",
                 "docs/rocketmq-clients.md"):
        assert RUNNABLE.get(page), f"{page}: no example of it runs"


@pytest.mark.parametrize("page", [
    pytest.param(page, marks=[pytest.mark.slow] if any(e.slow for e in RUNNABLE[page]) else [])
    for page in sorted(RUNNABLE)])
def test_the_examples_of_a_page_run(page: str, tmp_path: Path, module_cluster: Path,
                                    spark: Any) -> None:
    run = PageRun(tmp_path, module_cluster, spark)
    (tmp_path / "data").mkdir()
    try:
        for example in RUNNABLE[page]:
            started = time.monotonic()
            run.run(example)
            print(f"{example.where}: {time.monotonic() - started:.1f} s")  # shown with -s
    finally:
        for query in spark.streams.active:
            query.stop()
        run.close()


def test_a_failing_block_fails_its_page(tmp_path: Path) -> None:
    run = PageRun(tmp_path, tmp_path / "no-cluster", None)
    run.run(Example("x.md", 1, "bash", "true\n", None, None))
    with pytest.raises(AssertionError, match=r"x\.md:3 exited 3"):
        run.run(Example("x.md", 3, "bash", "echo fine\nexit 3\necho never\n", None, None))
    with pytest.raises(ZeroDivisionError):
        run.run(Example("x.md", 5, "python", "1 / 0\n", None, None))


def test_a_marker_without_a_reason_is_refused(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("<!-- not run: needs three machines -->\n```bash\nls\n```\n\n"
                    "<!-- slow:   -->\n```python\npass\n```\n")
    with pytest.raises(ValueError, match="'slow' marker needs a reason"):
        examples(page)
    page.write_text(page.read_text().replace("slow:   ", "slow: a failover"))
    found = examples(page)
    assert [(e.line, e.not_run, e.slow) for e in found] == [
        (2, "needs three machines", None), (7, None, "a failover")]
