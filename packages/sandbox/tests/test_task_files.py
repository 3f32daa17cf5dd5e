"""Code under test that changes the task's own files: it runs (at import, while pytest collects the
first test module that imports it) before later test modules are read, in a work dir it can write.
Each program here made a failing test PASS in a graded pytest run before the runner held the task's
files to what the caller sent; each leaves ``add`` wrong. Two layers stop them, and each is tested
on its own: the task's files are read-only mounts in folders that cannot move
(:func:`codemoe.sandbox.isolation.seal_files`), and what pytest reads and what is on disk is compared
with what the caller sent (:func:`codemoe.sandbox.pristine.expect_files`; alone where a machine
cannot seal, ``LocalExecutor(seal_files=False)`` here). Tests that write files of their own keep
their verdicts.
"""

from __future__ import annotations

import ast
import os
import textwrap

import pytest
from codemoe.sandbox import ExecutionRequest, Limits, LocalExecutor, pristine

TESTS = {
    "tests/test_a.py": "import calc\n\n\ndef test_a():\n    assert calc.ready\n",
    "tests/test_b.py": "import calc\n\n\ndef test_b():\n    assert calc.add(2, 2) == 4\n",
    "tests/zsub/test_c.py": "import calc\n\n\ndef test_c():\n    assert calc.add(1, 2) == 3\n",
    "tests/test_data.py": textwrap.dedent("""
        import pathlib

        import calc


        def test_d():
            expected = int((pathlib.Path(__file__).parent / "expected.txt").read_text())
            assert calc.add(20, 22) == expected
        """),
    "tests/expected.txt": "42\n",
    # a trusted module outside the tests' folders: Python's own import loads it, not pytest's hook
    "tests/test_e.py": "import calc\nfrom support import expected_sum\n\n\ndef test_e():\n    assert calc.add(2, 3) == expected_sum(2, 3)\n",
    "support.py": "def expected_sum(a, b):\n    return a + b\n",
    # a helper beside the tests: pytest's rewrite hook loads it
    "tests/helpers.py": "def expected_product(a, b):\n    return a * b\n",
    # a standard-library module no fork server preloads, which the test imports after the code under test
    "tests/test_s.py": "import calc\nimport colorsys\n\n\ndef test_s():\n    assert calc.add(1, 1) == colorsys.hls_to_rgb(0, 2, 0)[0]\n",
    "tests/test_h.py": "import calc\nfrom helpers import expected_product\n\n\ndef test_h():\n    assert calc.add(2, 2) == expected_product(2, 2)\n",
}

WRONG = "ready = True\n\n\ndef add(a, b):\n    return a - b\n"

# what each does at import, and the test it made pass
ATTACKS = {
    "rewrites-a-test-module": ("tests/test_b.py", "tests/test_b.py::test_b", """
        import pathlib
        (pathlib.Path(__file__).parent / "tests" / "test_b.py").write_text("def test_b():\\n    assert True\\n")
        """),
    # pytest's rewrite hook loads a cached pyc whose header matches the source without reading it
    "plants-a-cached-pyc": ("", "tests/test_b.py::test_b", """
        import importlib.util, marshal, pathlib, sys
        import pytest
        _test = pathlib.Path(__file__).parent / "tests" / "test_b.py"
        _cache = _test.parent / "__pycache__"
        _cache.mkdir(exist_ok=True)
        _name = f"test_b.{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"
        _code = compile("def test_b():\\n    assert True\\n", str(_test), "exec")
        (_cache / _name).write_bytes(importlib.util.MAGIC_NUMBER + b"\\x03\\x00\\x00\\x00"
                                     + importlib.util.source_hash(_test.read_bytes())[:8] + marshal.dumps(_code))
        """),
    # Python's import loads a cached pyc whose header gives the source's time and size
    "plants-a-pyc-for-a-module": ("", "tests/test_e.py::test_e", """
        import importlib.util, marshal, os, pathlib, sys
        _source = pathlib.Path(__file__).parent / "support.py"
        _stat = os.stat(_source)
        _cache = _source.parent / "__pycache__"
        _cache.mkdir(exist_ok=True)
        _code = compile("def expected_sum(a, b):\\n    return a - b\\n", str(_source), "exec")
        (_cache / f"support.{sys.implementation.cache_tag}.pyc").write_bytes(
            importlib.util.MAGIC_NUMBER + b"\\x00\\x00\\x00\\x00" + (int(_stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
            + (_stat.st_size & 0xFFFFFFFF).to_bytes(4, "little") + marshal.dumps(_code))
        """),
    # a package of the helper's name beside it, which Python's import takes before the module
    "shadows-a-helper": ("", "tests/test_h.py::test_h", """
        import pathlib
        _package = pathlib.Path(__file__).parent / "tests" / "helpers"
        _package.mkdir()
        (_package / "__init__.py").write_text("def expected_product(a, b):\\n    return a - b\\n")
        """),
    # the folder moved aside and another made in its place (what would work were the file read-only)
    "replaces-the-folder": ("tests/zsub/test_c.py", "tests/zsub/test_c.py::test_c", """
        import os, pathlib
        _tests = pathlib.Path(__file__).parent / "tests"
        os.rename(_tests / "zsub", _tests / "zsub_aside")
        (_tests / "zsub").mkdir()
        (_tests / "zsub" / "test_c.py").write_text("def test_c():\\n    assert True\\n")
        """),
    "rewrites-expected-data": ("tests/expected.txt", "tests/test_data.py::test_d", """
        import pathlib
        (pathlib.Path(__file__).parent / "tests" / "expected.txt").write_text("-2\\n")
        """),
    # changed for the test that reads it (from a call an earlier test makes) and put back from the
    # call that test makes after reading it: nothing is left to see when the session ends
    "changes-data-and-puts-it-back": ("tests/expected.txt", "tests/test_data.py::test_d", """
        import pathlib
        _data = pathlib.Path(__file__).parent / "tests" / "expected.txt"
        _calls = []
        def add(a, b):
            _calls.append((a, b))
            if (a, b) == (2, 2) and len(_calls) == 1:
                _data.write_text("-2\\n")
            if (a, b) == (20, 22):
                _data.write_text("42\\n")
            return a - b
        """),
    # a module of a standard-library name beside the test, which Python's import takes first (pytest
    # puts the test's folder first on the path)
    "shadows-a-standard-module": ("tests/colorsys.py", "tests/test_s.py::test_s", """
        import pathlib
        (pathlib.Path(__file__).parent / "tests" / "colorsys.py").write_text("def hls_to_rgb(h, l, s):\\n    return 0, 0, 0\\n")
        """),
    # the same module outside the work dir, in a folder (or an archive) put first on the import path
    "shadows-a-standard-module-from-tmp": ("/tmp/vendor/colorsys.py", "tests/test_s.py::test_s", """
        import os, sys
        os.makedirs("/tmp/vendor", exist_ok=True)
        with open("/tmp/vendor/colorsys.py", "w") as _out:
            _out.write("def hls_to_rgb(h, l, s):\\n    return 0, 0, 0\\n")
        sys.path.insert(0, "/tmp/vendor")
        """),
    "shadows-a-standard-module-with-a-package": ("/dev/shm/v/colorsys/__init__.py", "tests/test_s.py::test_s", """
        import os, sys
        os.makedirs("/dev/shm/v/colorsys")
        with open("/dev/shm/v/colorsys/__init__.py", "w") as _out:
            _out.write("def hls_to_rgb(h, l, s):\\n    return 0, 0, 0\\n")
        sys.path[0:0] = ["/dev/shm/v"]
        """),
    "shadows-a-standard-module-from-an-archive": ("/tmp/v.zip/colorsys.py", "tests/test_s.py::test_s", """
        import sys, zipfile
        with zipfile.ZipFile("/tmp/v.zip", "w") as _archive:
            _archive.writestr("colorsys.py", "def hls_to_rgb(h, l, s):\\n    return 0, 0, 0\\n")
        sys.path.insert(0, "/tmp/v.zip")
        """),
    # a hook wrapper that passes every report, in a folder pytest has not collected yet
    "writes-a-conftest": ("tests/zsub/conftest.py", "tests/zsub/test_c.py::test_c", """
        import pathlib
        (pathlib.Path(__file__).parent / "tests" / "zsub" / "conftest.py").write_text(
            "import pytest\\n"
            "@pytest.hookimpl(wrapper=True)\\n"
            "def pytest_runtest_makereport(item, call):\\n"
            "    report = yield\\n"
            "    report.outcome = 'passed'\\n"
            "    return report\\n")
        """),
}


def _run(executor, program: str, tests: dict[str, str] = TESTS, *, graded: bool = True):
    return executor.run(ExecutionRequest(files={**tests, "calc.py": program}, runner="pytest", command=["tests"],
                                         limits=Limits(timeout_s=30.0), graded=graded,
                                         trusted=list(tests) if graded else []))


@pytest.fixture(scope="module")
def unsealed():
    """A worker whose graded runs leave the task's files writable: the comparison alone."""
    with LocalExecutor(workers=1, seal_files=False) as ex:
        assert not next(p for p in ex.protections if p["name"] == "task files read-only")["active"]
        yield ex


SEALED_ERRORS = ("Read-only file system", "Device or resource busy")  # EROFS; EBUSY moving a mount point


@pytest.mark.parametrize("name", list(ATTACKS))
def test_sealed_task_files_cannot_be_changed_and_the_attack_does_not_pass(executor, name):
    path, fooled, tamper = ATTACKS[name]
    assert next(p for p in executor.protections if p["name"] == "task files read-only")["active"]
    result = _run(executor, WRONG + textwrap.dedent(tamper))
    assert result.status in ("failed", "error"), (result.tests, result.reason)
    assert result.tests.get(fooled) != "passed", result.tests
    if path in TESTS:  # a file the task sent: the change itself fails, where the code under test made it
        assert any(e in result.reason + result.stdout for e in SEALED_ERRORS), (result.reason, result.stdout[-3000:])
    elif path:  # a file the task does not have (a conftest): refused and named as before
        assert result.reason.startswith(f"forged test environment: file {path} "), result.reason


@pytest.mark.parametrize("name", list(ATTACKS))
def test_code_under_test_that_changes_the_tasks_files_does_not_pass(unsealed, name):
    path, fooled, tamper = ATTACKS[name]
    result = _run(unsealed, WRONG + textwrap.dedent(tamper))
    assert result.status == "failed", (result.tests, result.reason)
    if path:  # named: the verdict is a forgery, which voids the reward's test terms
        assert result.reason.startswith(f"forged test environment: file {path} "), result.reason
    else:  # the cached pyc is never loaded: the test ran as the task wrote it, and failed
        assert result.tests[fooled] == "failed", result.tests
        assert "forged" not in result.reason, result.reason


@pytest.mark.parametrize("name", ["rewrites-a-test-module", "replaces-the-folder", "rewrites-expected-data"])
def test_ungraded_no_file_is_the_callers_and_the_change_stands(executor, name):
    """What the graded check stops is real: ungraded, the changed file is what pytest reads. (A
    cached pyc is never loaded, graded or not; an ungraded run may ship conftests of its own.)"""
    _, fooled, tamper = ATTACKS[name]
    result = _run(executor, WRONG + textwrap.dedent(tamper), graded=False)
    assert result.tests[fooled] == "passed", result.tests


# every way to change a sealed file or move its folder, each reported as the error it met
PROBE = """
import errno, os
_t = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests")
def _try(what, fn):
    try:
        fn()
        return f"{what}: done"
    except OSError as exc:
        return f"{what}: {errno.errorcode[exc.errno]}"
def _fake():
    with open(_t + "/fake.py", "w") as f:
        f.write("def test_b():\\n    assert True\\n")
_fake()
RESULTS = [
    _try("write", lambda: open(_t + "/test_b.py", "w")),
    _try("append", lambda: open(_t + "/test_b.py", "a")),
    _try("truncate", lambda: os.truncate(_t + "/test_b.py", 0)),
    _try("chmod", lambda: os.chmod(_t + "/test_b.py", 0o777)),
    _try("utime", lambda: os.utime(_t + "/test_b.py", (0, 0))),
    _try("unlink", lambda: os.unlink(_t + "/test_b.py")),
    _try("rename away", lambda: os.rename(_t + "/test_b.py", _t + "/moved.py")),
    _try("rename onto", lambda: os.rename(_t + "/fake.py", _t + "/test_b.py")),
    _try("hard link", lambda: os.link(_t + "/test_b.py", _t + "/linked.py")),
    _try("reopen for writing", lambda: open(f"/proc/self/fd/{os.open(_t + '/test_b.py', os.O_RDONLY)}", "w")),
    _try("data write", lambda: open(_t + "/expected.txt", "w")),
    _try("move folder", lambda: os.rename(_t + "/zsub", _t + "/zsub_aside")),
    _try("move tests", lambda: os.rename(_t, _t + "_aside")),
    _try("move work dir", lambda: os.rename(os.path.dirname(_t), os.path.dirname(_t) + "_aside")),
    _try("remove folder", lambda: os.rmdir(_t + "/zsub")),
]
raise RuntimeError("RESULTS " + repr(RESULTS))
"""


def test_every_way_to_change_a_sealed_file_or_move_its_folder_fails(executor):
    result = _run(executor, PROBE)
    line = next(x for x in result.stdout.splitlines() if "RESULTS [" in x)
    results = dict(r.split(": ") for r in ast.literal_eval(line[line.index("["):].rstrip("'\"")))
    assert results == {
        "write": "EROFS", "append": "EROFS", "truncate": "EROFS", "chmod": "EROFS", "utime": "EROFS",
        "unlink": "EBUSY", "rename away": "EBUSY", "rename onto": "EBUSY", "hard link": "EXDEV",
        "reopen for writing": "EROFS", "data write": "EROFS", "move folder": "EBUSY", "move tests": "EBUSY",
        "move work dir": "EBUSY", "remove folder": "EBUSY",
    }, results


def test_sealed_runs_leave_no_mount_behind(executor):
    """Each graded run's mounts go with its tmpfs: the next run sees as many as the last one."""
    program = "raise RuntimeError(f'MOUNTS {len(open(\"/proc/self/mountinfo\").readlines())}')\n"
    counts = set()
    for _ in range(6):  # two workers: each serves some of them
        result = _run(executor, program)
        line = next(x for x in result.stdout.splitlines() if "MOUNTS " in x)
        counts.add(line[line.index("MOUNTS "):].split()[1].strip("'\""))
    assert len(counts) == 1, counts


def test_tests_and_code_that_write_their_own_files_keep_their_verdicts(executor):
    tests = {
        **{p: c for p, c in TESTS.items() if p != "tests/zsub/test_c.py"},
        "tests/test_writes.py": textwrap.dedent("""
            import pathlib

            import calc


            def test_writes_beside_itself():
                out = pathlib.Path(__file__).parent / "out.txt"
                out.write_text(str(calc.add(1, 1)))
                assert out.read_text() == "2"


            def test_writes_a_package_of_its_own(tmp_path):
                (tmp_path / "pkg").mkdir()
                (tmp_path / "pkg" / "conftest.py").write_text("X = 1\\n")
                assert (tmp_path / "pkg" / "conftest.py").read_text() == "X = 1\\n"


            def test_writes_a_module_and_imports_it(tmp_path, monkeypatch):
                (tmp_path / "made_here.py").write_text("def answer():\\n    return 'mine'\\n")
                monkeypatch.syspath_prepend(str(tmp_path))
                import made_here
                assert made_here.answer() == "mine"
            """),
    }
    program = textwrap.dedent("""
        import pathlib
        (pathlib.Path(__file__).parent / "calc_cache.txt").write_text("warm")
        ready = True


        def add(a, b):
            return a + b
        """)
    result = _run(executor, program, tests)
    assert result.status == "passed", (result.reason, result.stdout[-2000:])
    assert len(result.tests) == 9


# -------------------------------------------------------------------------------------------------
# the check, in this process
# -------------------------------------------------------------------------------------------------


@pytest.fixture
def sent(tmp_path):
    files = {str(tmp_path / "test_x.py"): b"def test_x():\n    pass\n", str(tmp_path / "data.txt"): b"42\n"}
    for path, content in files.items():
        with open(path, "wb") as f:
            f.write(content)
    pristine.expect_files(files)
    yield files
    pristine.expect_files({})


def test_files_as_sent_read_as_sent_and_loaded_from_their_source_are_not_named(sent):
    test_x = next(iter(sent))
    pristine.read_source(test_x, sent[test_x])
    assert pristine.changed_files([test_x]) == []


def test_a_file_read_as_other_content_changed_on_disk_or_loaded_unread_is_named(sent, tmp_path):
    test_x, data = sent
    assert pristine.changed_files([test_x]) == [f"{test_x} (loaded without its source)"]
    pristine.read_source(test_x, b"def test_x():\n    assert True\n")
    pristine.read_source(test_x, sent[test_x])  # read again as sent: the first read stays named
    (tmp_path / "data.txt").write_bytes(b"-2\n")
    assert pristine.changed_files([test_x]) == [f"{test_x} (read as other content)", f"{data} (on disk)"]
    os.remove(data)
    os.symlink(tmp_path / "elsewhere.txt", data)
    (tmp_path / "elsewhere.txt").write_bytes(sent[data])  # a link to the same bytes is not the file
    assert pristine.changed_files() == [f"{test_x} (read as other content)", f"{data} (on disk)"]


def test_files_the_caller_did_not_send_are_not_checked(sent, tmp_path):
    pristine.read_source(str(tmp_path / "other.py"), b"anything")
    assert pristine.changed_files([str(tmp_path / "other.py")]) == []


def test_paths_written_another_way_are_the_same_files(executor):
    """``tests//a.py`` and ``./tests/a.py`` are the files pytest calls ``tests/a.py``: sealed, held to what
    was sent and shipped under that name (the canary beside them too), so an honest run passes."""
    test = "import calc\n\n\ndef test_x():\n    assert calc.add(1, 2) == 3\n"
    tests = {"tests//test_a.py": test, "./tests/test_b.py": test, "tests/./sub/test_c.py": test}
    result = _run(executor, "def add(a, b):\n    return a + b\n", tests)
    assert result.status == "passed", (result.reason, result.stdout[-2000:])
    assert sorted(result.tests) == ["tests/sub/test_c.py::test_x", "tests/test_a.py::test_x", "tests/test_b.py::test_x"]


def test_modules_the_tasks_setup_makes_are_the_tasks():
    """What the task's setup commands write before the session (a generated ``_version.py``, a package
    pip installs under the work dir) imports as usual in a graded run; what the code under test
    writes once the session runs does not."""
    import json

    from codemoe.sandbox.agent.task_setup import PLUGIN, PLUGIN_FILE, SETUP_ENV, plugin_source
    from codemoe.sandbox.pytest_report import TASK_SETUP_ENV

    assert TASK_SETUP_ENV == SETUP_ENV
    setup = ["python -c \"open('calc/_version.py', 'w').write('VERSION = 3\\\\n')\""]
    tests = {"tests/test_v.py": "import calc\nfrom calc._version import VERSION\n\n\n"
                                "def test_v():\n    assert calc.add(1, 2) == VERSION\n"}
    program = {"calc/__init__.py": "def add(a, b):\n    return a + b\n"}
    with LocalExecutor(workers=1) as ex:
        result = ex.run(ExecutionRequest(
            files={**tests, **program, PLUGIN_FILE: plugin_source()}, runner="pytest",
            command=["-p", PLUGIN, "tests"], env={SETUP_ENV: json.dumps(setup)},
            limits=Limits(timeout_s=60.0), graded=True, trusted=[*tests, PLUGIN_FILE]))
    assert result.status == "passed", (result.reason, result.stdout[-2000:])
    assert result.tests == {"tests/test_v.py::test_v": "passed"}
