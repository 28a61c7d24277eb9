"""The wheel ships the package, its templates and py.typed, and works installed."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import pathlib, subagent
from subagent import SubAgent, ScriptedLLM
from subagent._templates import prompts_dir
where = pathlib.Path(subagent.__file__).resolve()
assert "site-packages" in str(where), where
assert prompts_dir().parent == where.parent, prompts_dir()
step = SubAgent(name="w", prompt="p {{x}}").run_sync({"x": 1}, llm=ScriptedLLM(["hi"]))
assert step.ok and step.output == "hi"
print("ok", len(list(prompts_dir().glob("*.mustache"))))
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``make dist`` into a temporary directory, with this interpreter's tools (no venv set-up)."""
    out = tmp_path_factory.mktemp("dist")
    bin_dir = Path(sys.executable).parent
    subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "dist", "STAMP=",
                    f"BIN={bin_dir}", f"DIST={out}"],
                   check=True, timeout=300, capture_output=True)  # fmt: skip
    return out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (built,) = dist.glob("subagent_runtime-*.whl")
    return built


def test_wheel_contains_package_templates_and_py_typed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "subagent/py.typed" in names
    assert "subagent/__init__.py" in names
    shipped = {Path(n).name for n in names if n.startswith("subagent/prompts/")}
    assert shipped == {p.name for p in (ROOT / "prompts").glob("*.mustache")}
    assert not any(n.startswith(("tests/", "examples/", "prompts/")) for n in names)


def test_installed_wheel_finds_its_templates(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.check_output(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        text=True).strip())  # fmt: skip
    # Dependencies come from the project's venv (appended after the new venv's own
    # site-packages, so the installed wheel, not the checkout, provides `subagent`).
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--target", str(site), str(wheel)], check=True, timeout=120)  # fmt: skip
    result = subprocess.run([str(python), "-c", CHECK], capture_output=True, text=True,
                            cwd=tmp_path, timeout=120, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", str(len(list((ROOT / "prompts").glob("*.mustache"))))]


IMPORT_EVERY_MODULE = """
import importlib, pkgutil, subagent
failed = []
for module in pkgutil.walk_packages(subagent.__path__, "subagent."):
    try:
        importlib.import_module(module.name)
    except ImportError as exc:
        failed.append(f"{module.name}: {exc}")
print(*failed, sep="\\n")
"""


def test_make_dist_builds_a_wheel_that_installs_in_a_fresh_venv_and_runs_the_quickstart(
    dist: Path, wheel: Path, tmp_path: Path
) -> None:
    # README's install instructions: `make dist`, then `pip install dist/<wheel>` in any
    # environment. The wheel's own dependency list must be enough: the fresh venv gets
    # nothing from this one (its dependencies come from the configured package index).
    assert [path.name for path in dist.glob("*.tar.gz")] == [
        wheel.name.replace("-py3-none-any.whl", ".tar.gz")
    ]
    env_dir = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(env_dir)], check=True, timeout=120)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", str(wheel)],
                   check=True, timeout=600, capture_output=True)  # fmt: skip

    quickstart = ROOT / "examples" / "quickstart.py"
    installed = subprocess.run([str(python), str(quickstart)], capture_output=True, text=True,
                               cwd=tmp_path, timeout=120, check=False)  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    checkout = subprocess.run([sys.executable, str(quickstart)], capture_output=True, text=True,
                              cwd=ROOT, timeout=120, check=True)  # fmt: skip
    assert installed.stdout == checkout.stdout
    assert "done in 3 turns (normal, must_return, retry)" in installed.stdout

    # Every module imports with the declared dependencies alone, but the extras' modules.
    imported = subprocess.run([str(python), "-c", IMPORT_EVERY_MODULE], capture_output=True,
                              text=True, cwd=tmp_path, timeout=120, check=True)  # fmt: skip
    durable, mcp, tracing = sorted(imported.stdout.splitlines())
    assert tracing.startswith("subagent.tracing: ") and "`otlp` extra" in tracing
    assert durable.startswith("subagent.durable: ") and "subagent-runtime[dbos]" in durable
    assert mcp.startswith("subagent.mcp: ") and "subagent-runtime[mcp]" in mcp
    where = subprocess.run([str(python), "-c", "import subagent; print(subagent.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True)  # fmt: skip
    assert Path(where.stdout.strip()).is_relative_to(env_dir)
    cli = subprocess.run([str(env_dir / "bin" / "subagent"), "--help"], capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert cli.returncode == 0 and "usage: subagent" in cli.stdout


def test_the_architecture_page_maps_every_room_and_layer() -> None:
    # docs/architecture.md is the living map of the code: a room added or moved without
    # updating it fails here.
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rooms_block = page.split("## The rooms", 1)[1].split("```", 2)[1]
    package = ROOT / "subagent"
    rooms = sorted(
        f"{path.name}/" if path.is_dir() else path.name
        for path in package.iterdir()
        if (path.is_dir() and (path / "__init__.py").exists())
        or (path.suffix == ".py" and path.name not in ("__init__.py", "__about__.py"))
    )
    assert [room for room in rooms if room not in rooms_block] == []
    # Each room's entry names every module of the room.
    entries = dict(re.findall(r"^  (\S+/) +(.*?)(?=^  \S|\Z)", rooms_block, re.M | re.S))
    unnamed = [
        f"{room}{module.name}"
        for room in rooms
        if room.endswith("/")
        for module in sorted((package / room).glob("*.py"))
        if module.name != "__init__.py" and module.name not in entries.get(room, "")
    ]
    assert unnamed == []
    layers_table = page.split("## Layers", 1)[1].split("\n\n```", 1)[0]
    # Every top-level module and room has its row, the ones outside the layers included.
    everything = [*rooms, "__init__.py"]
    assert [name for name in everything if f"`{name}`" not in layers_table] == []
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (layered,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    names = [name.strip() for layer in layered["layers"] for name in layer.split("|")]
    shown = {name: f"`{name}/`" in layers_table or f"`{name}.py`" in layers_table for name in names}
    assert [name for name, found in shown.items() if not found] == []


def test_make_test_fast_runs_the_suite_without_the_end_to_end_tests() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    recipe = makefile.split("\ntest-fast:", 1)[1].split("\n\n", 1)[0]
    assert '-m pytest -m "not e2e"' in recipe
    test_recipe = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert test_recipe.rstrip().endswith("$(BIN)/python -m pytest")  # the whole suite
    # Every test under tests/e2e carries the e2e mark, so "not e2e" leaves all of them out.
    collect = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly",
               str(ROOT / "tests" / "e2e")]  # fmt: skip
    everything = subprocess.run(collect, capture_output=True, text=True, cwd=ROOT, check=False)
    fast = subprocess.run([*collect, "-m", "not e2e"], capture_output=True, text=True, cwd=ROOT,
                          check=False)  # fmt: skip
    assert "::" in everything.stdout, everything.stdout + everything.stderr
    assert "::" not in fast.stdout and "deselected" in fast.stdout, fast.stdout + fast.stderr
