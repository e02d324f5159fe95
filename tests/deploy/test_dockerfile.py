"""The Dockerfile and .dockerignore, checked without a Docker engine: hadolint passes (and can fail), and what the
image relies on holds: two stages, a numeric non-root user, the readiness healthcheck, CPU torch at the version
pyproject.toml pins, COPY sources that exist and that .dockerignore lets through, PLUMBLINE_* variables that are
Settings fields, and a command the CLI accepts.

The parsing helpers here are imported by test_compose.py.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path, PurePosixPath

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from deploy.docker import lock
from service.runtime import build_reranker
from service.settings import Settings
from tests.deploy.helpers import ROOT, dev_tool, run

DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"
LOCK = ROOT / "deploy" / "docker" / "constraints.txt"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


# ---- a small Dockerfile reader (no heredocs: this Dockerfile has none) ----------------------------------------


@dataclass(frozen=True)
class Instruction:
    stage: int  # 0 for the first FROM's stage
    keyword: str  # upper case
    args: str  # continuation lines joined
    line: int


def parse(text: str) -> list[Instruction]:
    """Instructions in order; comments (also inside continuations) and blank lines dropped."""
    out: list[Instruction] = []
    parts: list[str] = []
    stage, start = -1, 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not parts:
            start = number
        continued = line.endswith("\\")
        parts.append(line[:-1].strip() if continued else line)
        if continued:
            continue
        keyword, _, args = " ".join(p for p in parts if p).partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword.upper(), args.strip(), start))
        parts = []
    return out


def instructions() -> list[Instruction]:
    return parse(DOCKERFILE.read_text(encoding="utf-8"))


def final_stage(instrs: list[Instruction]) -> list[Instruction]:
    last = max(i.stage for i in instrs)
    return [i for i in instrs if i.stage == last]


_VAR = re.compile(r"\$\{(\w+)(?::([-+])([^}]*))?\}|\$(\w+)")


def substitute(text: str, variables: dict[str, str]) -> str:
    """Docker's variable substitution: $X, ${X}, ${X:-default}, ${X:+alternative}; unknown variables are empty."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(4)
        value = variables.get(name, "")
        if m.group(2) == "-":
            return value or m.group(3)
        if m.group(2) == "+":
            return m.group(3) if value else ""
        return value

    return _VAR.sub(one, text)


def flags(args: str) -> tuple[dict[str, str], list[str]]:
    """Leading --name=value flags, and the remaining words."""
    words = shlex.split(args)
    found: dict[str, str] = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        found[name] = value
    return found, words


def exec_form(args: str) -> list[str]:
    """CMD/ENTRYPOINT/HEALTHCHECK CMD arguments as argv (a JSON array; shell form goes through /bin/sh -c)."""
    return json.loads(args) if args.startswith("[") else ["/bin/sh", "-c", args]


def seconds(duration: str) -> float:
    """A Docker duration such as 90s, 2m or 1m30s."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration))


def stage_variables(stage: list[Instruction], build_args: dict[str, str] | None = None) -> dict[str, str]:
    """ARG defaults (or the given build args) and ENV values of a stage, substituted in order."""
    build_args = build_args or {}
    variables: dict[str, str] = {}
    for i in stage:
        if i.keyword == "ARG":
            for word in shlex.split(i.args):
                name, _, default = word.partition("=")
                variables[name] = build_args.get(name, substitute(default, variables))
        elif i.keyword == "ENV":
            for word in shlex.split(i.args):
                name, _, value = word.partition("=")
                variables[name] = substitute(value, variables)
    return variables


def env(stage: list[Instruction], build_args: dict[str, str] | None = None) -> dict[str, str]:
    """The ENV variables a stage sets (values substituted), without its ARGs."""
    names = {word.partition("=")[0] for i in stage if i.keyword == "ENV" for word in shlex.split(i.args)}
    return {k: v for k, v in stage_variables(stage, build_args).items() if k in names}


@dataclass(frozen=True)
class Copy:
    stage: int
    sources: tuple[str, ...]  # build-context paths (ARG defaults substituted), or paths in another stage
    dest: str  # absolute path in the image
    from_stage: str | None


def copies(instrs: list[Instruction], build_args: dict[str, str] | None = None) -> list[Copy]:
    out: list[Copy] = []
    for stage_number in sorted({i.stage for i in instrs}):
        stage = [i for i in instrs if i.stage == stage_number]
        workdir = PurePosixPath("/")
        for n, i in enumerate(stage):
            if i.keyword == "WORKDIR":
                workdir = workdir / i.args
            elif i.keyword in ("COPY", "ADD"):
                variables = stage_variables(stage[:n], build_args)
                options, words = flags(substitute(i.args, variables))
                *sources, dest = words
                target = workdir / dest
                out.append(Copy(stage_number, tuple(sources), str(target), options.get("from")))
    return out


def repo_path(image_path: str, build_args: dict[str, str] | None = None) -> Path | None:
    """The build-context path the final stage copied to `image_path` (a single source copied to a folder)."""
    instrs = instructions()
    last = max(i.stage for i in instrs)
    for c in reversed(copies(instrs, build_args)):
        if c.stage != last or c.from_stage or len(c.sources) != 1:
            continue
        try:
            rest = PurePosixPath(image_path).relative_to(c.dest)
        except ValueError:
            continue
        return ROOT / c.sources[0] / rest
    return None


# ---- .dockerignore (Docker's rules: last matching pattern wins; a pattern matching a folder matches its files) --


def _pattern(text: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(text):
        if text.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif text.startswith("**", i):
            out, i = out + ".*", i + 2
        elif text[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif text[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(text[i]), i + 1
    return re.compile(out)


def ignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in DOCKERIGNORE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        rules.append((keep, _pattern(line.lstrip("!").strip("/"))))
    return rules


def ignored(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    parts = PurePosixPath(path).parts
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    result = False
    for keep, pattern in rules:
        if any(pattern.fullmatch(p) for p in prefixes):
            result = not keep
    return result


# ---- hadolint ---------------------------------------------------------------------------------------------


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return run([dev_tool("hadolint"), "--no-color", str(path)], cwd=path.parent)


def test_hadolint_is_clean() -> None:
    result = hadolint(DOCKERFILE)
    assert result.returncode == 0, result.stdout
    assert result.stdout == "", result.stdout


def test_hadolint_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y curl\nUSER root\n", encoding="utf-8")
    result = hadolint(bad)
    assert result.returncode != 0, result.stdout
    assert "DL3007" in result.stdout, result.stdout  # `latest`


def test_every_hadolint_ignore_says_why() -> None:
    lines = DOCKERFILE.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        if "hadolint ignore=" in line:
            before = lines[n - 1].strip() if n else ""
            why = before.startswith("#") and "hadolint" not in before
            assert why, f"line {n + 1}: a comment above the ignore says why"


# ---- structure --------------------------------------------------------------------------------------------


def global_args(instrs: list[Instruction]) -> dict[str, str]:
    """The ARGs declared before the first FROM (what FROM lines may use), with their defaults."""
    return stage_variables([i for i in instrs if i.stage == -1])


def test_stages_on_a_base_pinned_by_digest() -> None:
    instrs = instructions()
    froms = [i for i in instrs if i.keyword == "FROM"]
    assert len(froms) >= 2, "a builder stage and a runtime stage"
    names = {shlex.split(f.args)[-1] for f in froms if " as " in f.args.lower()}
    for f in froms:
        image = substitute(shlex.split(f.args)[0], global_args(instrs))
        if image in names:
            continue
        assert re.search(r":\d+\.\d+\.\d+", image), f"line {f.line}: pin the base image's full version: {image}"
        assert re.search(r"@sha256:[0-9a-f]{64}$", image), f"line {f.line}: and its digest (reproducible): {image}"
    assert re.match(r"\$\{?BASE\}?$", shlex.split(froms[0].args)[0]), "the base is a build argument (BASE)"
    for c in copies(instrs):
        if c.from_stage is not None:
            assert c.from_stage in names, f"COPY --from={c.from_stage}: no such stage"
    final = final_stage(instrs)
    for i in final:
        if i.keyword == "RUN" and "pip install" in i.args:
            assert "--no-deps" in i.args, "the final stage resolves and downloads nothing: the deps stage does"
    parent = shlex.split(final[0].args)[0]
    venv = [i.stage for i in instrs if i.keyword == "RUN" and "-m venv /opt/venv" in i.args]
    parent_stage = next(f.stage for f in froms if shlex.split(f.args)[-1] == parent)
    assert venv == [parent_stage], "the runtime stage starts from the stage that makes /opt/venv (no 1.7 GB copy)"


def test_final_stage_runs_as_a_numeric_non_root_user() -> None:
    users = [i for i in final_stage(instructions()) if i.keyword == "USER"]
    assert users, "the final stage sets USER"
    user = users[-1].args
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user}: numeric UID[:GID], so runAsNonRoot can check it"
    assert all(int(part) != 0 for part in user.split(":")), f"USER {user} is root"


def test_healthcheck_asks_for_readiness_with_a_start_period() -> None:
    final = final_stage(instructions())
    checks = [i for i in final if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    options, _ = flags(checks[0].args.split(" CMD ", 1)[0])
    argv = exec_form(checks[0].args.split(" CMD ", 1)[1].strip())
    assert argv[0] == "python", "slim images have no curl: Python's urllib"
    assert "http://127.0.0.1:8000/health/ready" in " ".join(argv)
    assert seconds(options.get("start-period", "0s")) >= 90, "model loading takes up to a couple of minutes"
    assert "8000" in [i.args for i in final if i.keyword == "EXPOSE"]


def _pinned_torch() -> str:
    deps: list[str] = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    pins = [d.replace(" ", "") for d in deps if re.match(r"torch\s*==", d)]
    assert len(pins) == 1, f"pyproject.toml pins torch exactly once: {deps}"
    return pins[0]


def test_dependencies_come_from_the_lock_with_cpu_torch() -> None:
    instrs = instructions()
    runs = [(n, i) for n, i in enumerate(instrs) if i.keyword == "RUN" and "pip install" in i.args]
    locked = [(n, i) for n, i in runs if "-r /tmp/constraints.txt" in i.args]
    assert len(locked) == 1, "the dependencies are installed from deploy/docker/constraints.txt"
    n, install = locked[0]
    stage = [i for i in instrs if i.stage == install.stage]
    assert stage_variables(stage)["TORCH_INDEX"] == TORCH_CPU_INDEX, "CPU torch from PyTorch's index by default"
    assert "--no-deps" in shlex.split(install.args), "exactly the lock: nothing resolved beyond it"
    assert '--extra-index-url "$TORCH_INDEX"' in install.args
    assert any(c.sources == ("deploy/docker/constraints.txt",) for c in copies(instrs) if c.stage == install.stage)
    assert f"{_pinned_torch()}+cpu" in LOCK.read_text(encoding="utf-8").splitlines(), "the CPU build, as pinned"
    wheel = [i for i in instrs if i.keyword == "RUN" and re.search(r"pip wheel( --?[\w-]+)*( /\w+)? \.$", i.args)]
    assert wheel, "the project built as a wheel (not editable)"
    project = [(m, i) for m, i in runs if ".whl" in i.args]
    assert project, "the project installed from its wheel"
    assert all(m > n for m, _ in project), "the lock first"
    assert "--no-deps" in shlex.split(project[0][1].args)
    assert "pip check" in project[0][1].args, "a lock that misses a requirement fails the build"


# ---- the dependency lock (deploy/docker/constraints.txt, written by deploy/docker/lock.py) ----------------------


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        assert m, f"not name==version: {line!r}"
        name = canonicalize_name(m.group(1))
        assert name not in pins, f"{name} pinned twice"
        pins[name] = m.group(2)
    return pins


def test_the_lock_pins_every_dependency_of_pyproject_within_its_specifier() -> None:
    pins = _lock()
    for requirement in lock.direct_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pins, (
            f"{requirement} (pyproject.toml) is not in {LOCK.name}: regenerate it (deploy/docker/lock.py)"
        )
        assert requirement.specifier.contains(pins[name], prereleases=True), f"{name}=={pins[name]} vs {requirement}"
        for extra in requirement.extras:  # psycopg[binary]: psycopg-binary
            needed = [Requirement(r) for r in distribution(requirement.name).requires or []]
            for r in needed:
                if r.marker is not None and f'extra == "{extra}"' in str(r.marker):
                    assert canonicalize_name(r.name) in pins, f"{r.name} ({requirement}) is not in {LOCK.name}"
    runtime = {canonicalize_name(r.name) for r in lock.direct_requirements()}
    dev = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["optional-dependencies"]["dev"]
    only_dev = {canonicalize_name(Requirement(d).name) for d in dev} - runtime
    assert not only_dev & set(pins), f"dev tools in the image's lock: {sorted(only_dev & set(pins))}"


def test_the_lock_is_closed_where_this_environment_matches_it() -> None:
    """Every requirement of a locked package is locked too, at a version it accepts: checked on the packages
    installed here at the locked version (`pip check` in the build checks them all)."""
    pins = _lock()
    checked = 0
    for name, version in pins.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for text in dist.requires or []:
            r = Requirement(text)
            if r.marker is not None and "extra" in str(r.marker):
                continue
            if lock.applies(r):
                got = pins.get(canonicalize_name(r.name))
                assert got is not None, f"{name} needs {r}, which {LOCK.name} does not pin"
                assert r.specifier.contains(got, prereleases=True), f"{name} needs {r}; {LOCK.name} pins {got}"
    assert checked, "no locked package is installed here at its locked version"


def test_copy_sources_exist_and_pass_dockerignore() -> None:
    rules = ignore_rules()
    for c in copies(instructions()):
        if c.from_stage:
            continue
        for source in c.sources:
            path = ROOT / source
            assert path.exists(), f"COPY {source}: not in the repository"
            assert not ignored(source, rules), f"COPY {source}: .dockerignore leaves it out"
            files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
            wanted = [p for p in files if "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")]
            left_out = [p for p in wanted if ignored(p.relative_to(ROOT).as_posix(), rules)]
            assert not left_out, f"COPY {source}: .dockerignore leaves out {left_out[:5]}"


def test_the_builder_copies_what_pip_install_needs() -> None:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))
    copied = {PurePosixPath(s).parts[0] for c in copies(instructions()) if not c.from_stage for s in c.sources}
    needed = {"pyproject.toml", project["project"]["readme"]}
    needed |= {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert needed <= copied, f"not copied: {sorted(needed - copied)}"


def test_dockerignore_keeps_local_state_out() -> None:
    rules = ignore_rules()
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "data/state.db",
        "keys.json",
        "service/__pycache__/cli.cpython.pyc",
        ".mypy_cache/3.11/x.json",
        ".hypothesis/examples/x",
        ".pytest_cache/v/x",
        "build/lib/service/x.py",
    ):
        assert ignored(path, rules), f"{path} would be sent to the builder"
    assert not ignored("models/my-cross-encoder/config.json", rules), "RERANKER_DIR folders live under models/"


def test_plumbline_variables_are_settings_fields() -> None:
    final = final_stage(instructions())
    names = [name for name in env(final) if name.startswith("PLUMBLINE_")]
    assert names
    unknown = [n for n in names if n.removeprefix("PLUMBLINE_").lower() not in Settings.model_fields]
    assert not unknown, f"not Settings fields (a typo is silently ignored): {unknown}"


def test_runtime_environment() -> None:
    final_env = env(final_stage(instructions()))
    assert final_env["HF_HUB_OFFLINE"] == "1"
    assert final_env["TRANSFORMERS_OFFLINE"] == "1"
    for name in ("HOME", "XDG_CACHE_HOME"):
        assert final_env[name].startswith("/tmp"), f"{name}: writable under a read-only root"
    assert final_env["PLUMBLINE_DATA_DIR"] == "/data"
    cache = final_env["PLUMBLINE_MODEL_CACHE"]
    assert not cache.startswith(("/data", "/tmp")), "the graphs are in the image, exported once at build time"
    volumes = [i.args for i in final_stage(instructions()) if i.keyword == "VOLUME"]
    assert volumes
    assert json.loads(volumes[0]) == ["/data"]


def test_the_command_is_a_valid_serve() -> None:
    from service.cli.main import _parser

    cmd = exec_form(next(i.args for i in reversed(final_stage(instructions())) if i.keyword == "CMD"))
    assert cmd[:2] == ["plumbline", "serve"]
    args = _parser().parse_args(cmd[1:])
    assert (args.host, args.port, str(args.data_dir)) == ("0.0.0.0", 8000, "/data")


def test_demo_corpus_is_in_the_image() -> None:
    path = repo_path("/app/demo/handbook")
    assert path is not None, "COPY demo so that `plumbline serve --ingest /app/demo/handbook` works"
    assert path.is_dir()
    assert any(path.rglob("*.md"))


def test_the_models_are_exported_at_build_time() -> None:
    final = final_stage(instructions())
    set_at = next(n for n, i in enumerate(final) if i.keyword == "ENV" and "PLUMBLINE_MODEL_CACHE=" in i.args)
    exports = [n for n, i in enumerate(final) if i.keyword == "RUN" and "build_embedder" in i.args]
    assert exports, "a RUN builds the configured models, which exports their graphs into PLUMBLINE_MODEL_CACHE"
    assert exports[0] > set_at
    assert "build_reranker" in final[exports[0]].args, "a baked-in cross-encoder too"
    users = [n for n, i in enumerate(final) if i.keyword == "USER"]
    assert exports[0] < users[-1], "as root: the runtime user cannot write (or replace) them"


def test_no_reranker_by_default_and_the_folder_when_given() -> None:
    final = final_stage(instructions())
    default = env(final)["PLUMBLINE_RERANK_MODEL"]
    assert build_reranker(Settings(rerank_model=default)) is None, f"default PLUMBLINE_RERANK_MODEL={default!r}"
    given = {"RERANKER_DIR": "models/my-cross-encoder"}
    folder = env(final, given)["PLUMBLINE_RERANK_MODEL"]
    assert folder.startswith("/")
    assert repo_path(folder, given) == ROOT / "models" / "my-cross-encoder", "the model is copied where it is named"
