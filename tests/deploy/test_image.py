"""The image recipe, checked without a container engine: the Dockerfile runs as the numeric user
the install manifests expect, its entrypoint is the installed `gpufleet`, `make image` tags it as
`gpufleet install` refers to it, and the wheel it installs builds, carries the pinned
dependencies and runs from a clean virtual environment."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

from gpufleet.kube import install

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def final_stage() -> list[tuple[str, str]]:
    """The last stage of the Dockerfile as (INSTRUCTION, arguments), continuations joined."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    instructions = [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in lines]
    starts = [i for i, (op, _) in enumerate(instructions) if op == "FROM"]
    return instructions[starts[-1] :]


def instruction(op: str) -> list[str]:
    return [args for name, args in final_stage() if name == op]


def deployments() -> list[dict]:
    docs = [*yaml.safe_load_all(install.hub_yaml()), *install.agent("a")]
    return [d for d in docs if d and d["kind"] == "Deployment"]


def test_the_image_runs_as_the_numeric_user_of_the_manifests() -> None:
    (user,) = instruction("USER")
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and gid.isdigit() and int(uid) != 0
    for deployment in deployments():
        pod = deployment["spec"]["template"]["spec"]
        for context in (pod["securityContext"], pod["containers"][0]["securityContext"]):
            assert context["runAsNonRoot"] is True
            assert (context["runAsUser"], context["runAsGroup"]) == (int(uid), int(gid))


def test_the_entrypoint_is_the_installed_console_script() -> None:
    (entrypoint,) = instruction("ENTRYPOINT")
    assert json.loads(entrypoint) == ["gpufleet"]
    assert PYPROJECT["project"]["scripts"]["gpufleet"] == "gpufleet.cli.main:app"
    # The manifests' args are the subcommands after it.
    assert {d["spec"]["template"]["spec"]["containers"][0]["args"][0] for d in deployments()} == {
        "controller",
        "agent",
    }


def test_the_runtime_stage_installs_only_the_built_wheels() -> None:
    stage = final_stage()
    assert stage[0][1].startswith("python:${PYTHON_VERSION}-slim")
    runs = " ".join(args for op, args in stage if op == "RUN")
    assert "--no-index --find-links /wheels gpufleet" in runs
    assert not instruction("COPY"), "no source tree in the runtime stage"
    env = " ".join(instruction("ENV"))
    assert "PIP_NO_CACHE_DIR=1" in env and "PYTHONDONTWRITEBYTECODE=1" in env
    for compiler in ("gcc", "build-essential", "apt-get"):
        assert compiler not in runs
    text = (ROOT / "Dockerfile").read_text()
    python = text.split("ARG PYTHON_VERSION=")[1].split()[0]
    low = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, python.split("."))) >= tuple(map(int, low.split(".")))


def test_make_image_tags_the_image_install_refers_to() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.skip("no make on this machine")
    out = subprocess.run(
        [make, "-s", "-n", "image"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["docker", "build", "-t", install.DEFAULT_IMAGE, "."]


def test_the_build_context_holds_what_the_wheel_needs() -> None:
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") + 1 :][:3] == ["!pyproject.toml", "!README.md", "!src/"]


@pytest.mark.timeout(600)
def test_the_wheel_builds_and_runs_from_a_clean_venv(tmp_path: Path) -> None:
    source = tmp_path / "source"  # what the build context holds (see .dockerignore)
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), "."],
        cwd=source,
        check=True,
    )
    (wheel,) = wheels.glob("gpufleet-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    assert "gpufleet/py.typed" in names
    requires = sorted(
        line.removeprefix("Requires-Dist: ")
        for line in metadata.splitlines()
        if line.startswith("Requires-Dist: ") and "extra ==" not in line
    )
    pinned = PYPROJECT["project"]["dependencies"]
    assert requires == sorted(pinned) and all("==" in r for r in requires)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    # The pinned dependencies come from this environment (the image installs them from their
    # own wheels); the project itself only from the wheel: this environment's editable
    # gpufleet is not visible there (.pth files of an added path are not processed).
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    version = subprocess.run(
        [str(venv / "bin" / "gpufleet"), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert version.strip() == f"gpufleet {install.VERSION}"
    where = subprocess.run(
        [str(python), "-c", "import gpufleet; print(gpufleet.__file__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert where.startswith(site), where
    listed = subprocess.run(
        [str(venv / "bin" / "gpufleet"), "simulate", "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # The scenarios are package data: each one in the source is listed from the wheel.
    scenarios = sorted(p.stem for p in (ROOT / "src/gpufleet/sim/scenario/builtin").glob("*.yaml"))
    assert scenarios and all(name in listed for name in scenarios)
