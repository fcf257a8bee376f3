"""The Dockerfile and .dockerignore, read as text (no Docker engine is needed or used).

A small parser splits the Dockerfile into stages; each final target (``cpu``, the default
because it is last, and ``gpu``) is checked together with the stages it builds on.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field

import pytest

from .conftest import OVERLAYS, REPO_ROOT
from .kustomize import Obj

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"
FINAL_TARGETS = ("cpu", "gpu")
SERVE = ["tailor", "serve", "--host", "0.0.0.0", "--port", "8000"]


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for args in self.all("ENV"):
            for token in shlex.split(args):
                key, _, value = token.partition("=")
                values[key] = value
        return values


def logical_lines(text: str) -> list[str]:
    """Instructions with their continuation lines joined, without comments or blank lines."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    return lines


def substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), text)


def parse(text: str) -> list[Stage]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(text):
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            parts = substitute(args, global_args).split()
            assert len(parts) == 3 and parts[1].upper() == "AS", f"unnamed stage: {line}"
            stages.append(Stage(name=parts[2], base=parts[0]))
        elif not stages:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            name, _, default = args.partition("=")
            global_args[name.strip()] = default.strip()
        else:
            stages[-1].instructions.append((keyword, args.strip()))
    return stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    parsed = parse(DOCKERFILE.read_text(encoding="utf-8"))
    names = [s.name for s in parsed]
    assert len(names) == len(set(names)), names
    assert names[-1] == "cpu", "the CPU image must be the default, i.e. last, target"
    return {s.name: s for s in parsed}


def closure(stages: dict[str, Stage], target: str) -> list[Stage]:
    """The target stage and every stage it is based on or copies from, transitively."""
    seen: list[str] = []
    pending = [target]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.append(name)
        stage = stages[name]
        if stage.base in stages:
            pending.append(stage.base)
        for args in stage.all("COPY"):
            source = re.search(r"--from=(\S+)", args)
            if source and source.group(1) in stages:
                pending.append(source.group(1))
    return [stages[name] for name in seen]


def run_text(stages: list[Stage]) -> str:
    return "\n".join(args for stage in stages for args in stage.all("RUN"))


@pytest.mark.parametrize("target", FINAL_TARGETS)
def test_every_final_stage_runs_as_a_non_root_user(
    stages: dict[str, Stage], rendered: dict[str, list[Obj]], target: str
) -> None:
    users = stages[target].all("USER")
    assert users, f"stage {target} sets no USER: it would run as root"
    user, _, group = users[-1].partition(":")
    assert user not in ("root", "0") and group not in ("root", "0")
    assert user == "10001"
    # The Kubernetes manifests run the pods as the same user.
    for overlay in OVERLAYS:
        for obj in rendered[overlay]:
            if obj["kind"] == "Deployment" and obj["metadata"]["name"] == "tailor":
                assert obj["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 10001


@pytest.mark.parametrize("target", FINAL_TARGETS)
def test_every_final_stage_serves_on_8000_with_a_healthcheck(
    stages: dict[str, Stage], target: str
) -> None:
    stage = stages[target]
    assert stage.all("EXPOSE") == ["8000"]
    [cmd] = stage.all("CMD")
    assert json.loads(cmd) == SERVE
    assert not stage.all("ENTRYPOINT")
    [healthcheck] = stage.all("HEALTHCHECK")
    command = json.loads(healthcheck.split("CMD", 1)[1])
    assert command[0] == "python"
    assert "/healthz" in command[-1]
    assert "curl" not in healthcheck


@pytest.mark.parametrize("target", FINAL_TARGETS)
def test_every_final_stage_finds_its_migrations_and_a_data_dir(
    stages: dict[str, Stage], rendered: dict[str, list[Obj]], target: str
) -> None:
    env = stages[target].env()
    assert env["TAILOR_MIGRATIONS_DIR"] == "/app/migrations"
    assert env["TAILOR_ONNX_PROVIDER"] == target.replace("gpu", "cuda")
    assert "/opt/venv/bin" in env["PATH"].split(":")
    builders = [s for s in closure(stages, target) if s.name != target]
    copied = [args.split() for s in builders for args in s.all("COPY")]
    assert ["migrations", "./migrations"] in copied
    assert ["service", "./service"] in copied
    # The data dir of the image is the one the manifests mount an emptyDir on.
    overlay = "gpu" if target == "gpu" else "cpu"
    configmap = next(o for o in rendered[overlay] if o["kind"] == "ConfigMap")
    assert env["TAILOR_DATA_DIR"] == configmap["data"]["TAILOR_DATA_DIR"]


def test_the_cpu_target_installs_only_the_cpu_extra(stages: dict[str, Stage]) -> None:
    chain = closure(stages, "cpu")
    assert {s.name for s in chain} == {"cpu", "builder-cpu"}
    text = run_text(chain)
    assert "-e '.[cpu,reports]'" in text
    assert "gpu" not in text.split("-e '")[1].split("'")[0]
    assert "onnxruntime-gpu" not in text
    assert stages["cpu"].base.startswith("python:3.11-")


@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_no_image_installs_torch(stages: dict[str, Stage], target: str) -> None:
    """Serving runs every model on ONNX Runtime: neither image carries torch (the GPU one no
    CUDA torch), nor the `train` extra that brings it."""
    text = run_text(closure(stages, target))
    assert "torch" not in text
    assert "train" not in text


def test_the_gpu_target_installs_only_the_gpu_extra_on_cuda(stages: dict[str, Stage]) -> None:
    chain = closure(stages, "gpu")
    assert "builder-cpu" not in {s.name for s in chain}
    text = run_text(chain)
    assert "-e '.[gpu,reports]'" in text
    assert "[cpu" not in text
    gpu_base = stages["gpu"].base
    assert gpu_base.startswith("nvidia/cuda:")
    assert "cudnn" in gpu_base
    assert "runtime" in gpu_base
    assert 'uv python install "${PYTHON_VERSION}"' in text


def test_gpu_extra_appears_only_in_the_gpu_chain(stages: dict[str, Stage]) -> None:
    gpu_chain = {s.name for s in closure(stages, "gpu")}
    for stage in stages.values():
        if "[gpu" in run_text([stage]):
            assert stage.name in gpu_chain, stage.name


def test_python_is_3_11() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^ARG PYTHON_VERSION=3\.11$", text, re.M)


def ignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert not [p for p in patterns if p.startswith("!")], "keep the file a plain deny list"
    return patterns


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether any pattern excludes ``path`` or one of its parent directories."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        bare = pattern.removeprefix("**/")
        for prefix in prefixes:
            if fnmatch.fnmatch(prefix, pattern):
                return True
            if pattern.startswith("**/") and fnmatch.fnmatch(prefix.split("/")[-1], bare):
                return True
    return False


@pytest.mark.parametrize(
    "path",
    [
        ".venv",
        ".git",
        ".tailor",
        "tailor.db",
        "service/__pycache__",
        "service/store/__pycache__/db.cpython-311.pyc",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        "tests",
    ],
)
def test_dockerignore_leaves_out_local_state(path: str) -> None:
    assert ignored(path, ignore_patterns())


def test_dockerignore_keeps_what_the_build_copies(stages: dict[str, Stage]) -> None:
    patterns = ignore_patterns()
    sources = [
        source
        for stage in stages.values()
        for args in stage.all("COPY")
        if "--from=" not in args
        for source in args.split()[:-1]
    ]
    assert {"pyproject.toml", "README.md", "service", "migrations", "models"} <= set(sources)
    for source in [*sources, "service/api/app.py", "migrations/env.py", "models/x.onnx"]:
        assert not ignored(source, patterns), source


def test_llama_cpp_is_built_portable_in_the_images_and_by_the_makefile() -> None:
    """The embedded LLM's native library must not depend on the CPU it was built on: the same
    x86-64-v3 flags (no -march=native, no AVX-512, no AMX) in both images and the Makefile."""
    makefile = (REPO_ROOT / "Makefile").read_text(encoding="utf-8")
    match = re.search(r"^LLAMA_CMAKE_ARGS := (-DGGML_NATIVE=OFF .+)$", makefile, re.M)
    assert match is not None
    make_flags = match.group(1).split()
    for flag in ("-DGGML_NATIVE=OFF", "-DGGML_AVX512=OFF", "-DGGML_AMX_INT8=OFF"):
        assert flag in make_flags
    docker_flags = re.findall(r'CMAKE_ARGS="([^"]+)"', DOCKERFILE.read_text(encoding="utf-8"))
    assert len(docker_flags) == 2
    assert all(f.split() == make_flags for f in docker_flags)
