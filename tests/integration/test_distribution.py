# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection as users install it, away from this checkout.

- The tarball of ``ansible-galaxy collection build`` holds what users run and read, and not the
  development tree (galaxy.yml's build_ignore).
- examples/consumer, copied out, installs that tarball into its own ./collections and runs the
  collection from there by FQCN: ansible-doc, an offline plan on localhost, the rollout's task list.
- ansible-builder reads the collection's controller needs (meta/execution-environment.yml) and
  writes a build context for the consumer's execution environment.
- A normal (non-editable) wheel in a fresh venv holds the collection as ansible_collections/llmops/vllm:
  its llmops-vllm plans outside the checkout, exactly as the serving_plan action does, and its
  ansible-playbook finds llmops.vllm.rollout on sys.path.

One tarball, one consumer install and one wheel serve the whole module.
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.ansible

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FIXTURES = ROOT / "tests" / "fixtures"
CONSUMER = ROOT / "examples" / "consumer"
COLLECTION_DIR = "ansible_collections/llmops/vllm"

# What the CLI, the playbooks and ansible-builder read, in the tarball and in the wheel.
NEEDED = [
    "plugins/modules/serving_plan.py",
    "plugins/action/serving_plan.py",
    "plugins/plugin_utils/cli.py",
    "plugins/module_utils/topology.py",
    "roles/rollout/meta/argument_specs.yml",
    "playbooks/rollout.yml",
    "meta/runtime.yml",
    "meta/execution-environment.yml",
    "requirements.txt",
    "bindep.txt",
    "README.md",
]
# Development only: never in the tarball (a path or a directory above it).
EXCLUDED = [
    ".venv", ".collections", ".ci", ".sandbox", ".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache",
    "ansible.cfg", "Makefile", "pyproject.toml", "molecule", "sandbox", "bench", "tools", "out", "reports",
    "inventories/sandbox", "tests/unit", "tests/integration", "tests/fixtures", "tests/gpu",
    "examples/consumer/collections",
]
# The content directories: every file in them on disk ships (no build_ignore pattern may catch one).
CONTENT_DIRS = ["plugins", "roles", "playbooks", "meta"]

# The story's host (the Makefile's preview) and the model it rolls out.
RTX_TOPO = FIXTURES / "topology" / "8x-rtxpro6000-bw-server-pcie-2numa-asus-esc8000a-e13p.txt"
RTX_QUERY = FIXTURES / "gpuinfo" / "nvidia-smi-q__8x-rtxpro6000-asus-esc8000a-e13p.txt"
RTX_NUMACTL = FIXTURES / "gpuinfo" / "numactl-H__8x-rtxpro6000-asus-esc8000a-e13p.txt"
MINIMAX_CONFIG = FIXTURES / "configs" / "MiniMaxAI__MiniMax-M2.5.partial.json"
MINIMAX_ID = "MiniMaxAI/MiniMax-M2.5"


def run(argv, cwd, env, timeout=300):
    """Run argv; fail the test with its output when it fails, else return its stdout."""
    argv = [str(arg) for arg in argv]
    completed = subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert completed.returncode == 0, "%s: rc %d\n%s\n%s" % (" ".join(argv), completed.returncode, completed.stdout, completed.stderr)
    return completed.stdout


def ansible_env(home, config, path=BIN):
    """A clean environment: nothing from this checkout's Makefile (ANSIBLE_CONFIG, collection paths)."""
    return {
        "PATH": "%s:/usr/bin:/bin" % path,
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANSIBLE_CONFIG": str(config),
        "ANSIBLE_LOCAL_TEMP": str(home / "ansible-local"),
        "ANSIBLE_REMOTE_TEMP": str(home / "ansible-remote"),
        "ANSIBLE_NOCOLOR": "1",
    }


def uv_env():
    """This machine's environment (uv's index settings and cache), without this venv or checkout in it."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("ANSIBLE_") and key not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = "%s:/usr/bin:/bin" % BIN
    return env


def requirement_lines(path):
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    out = tmp_path_factory.mktemp("galaxy-build")
    run([BIN / "ansible-galaxy", "collection", "build", ROOT, "--output-path", out], cwd=out,
        env=ansible_env(out, out / "none.cfg"))
    (built,) = out.glob("llmops-vllm-*.tar.gz")
    return built


@pytest.fixture(scope="module")
def tarball_members(tarball):
    with tarfile.open(tarball) as archive:
        return {member.name.rstrip("/") for member in archive.getmembers()}


@pytest.fixture(scope="module")
def consumer(tmp_path_factory, tarball):
    """examples/consumer copied out, the tarball put where its requirements.yml names it, installed."""
    top = tmp_path_factory.mktemp("consumer")
    repo = top / "repo"
    shutil.copytree(CONSUMER, repo, ignore=shutil.ignore_patterns("collections", "context", "reports", "*.tar.gz"))
    (entry,) = yaml.safe_load((repo / "requirements.yml").read_text())["collections"]
    assert entry["type"] == "file"
    assert Path(entry["name"]).name == tarball.name, "requirements.yml names %s, the build made %s" % (entry["name"], tarball.name)
    shutil.copy(tarball, repo / entry["name"])
    env = ansible_env(top, repo / "ansible.cfg")
    run([BIN / "ansible-galaxy", "collection", "install", "-r", "requirements.yml", "-p", "./collections"], cwd=repo, env=env)
    return repo, env


@pytest.fixture(scope="module")
def offline_plan(consumer):
    """plan_offline.yml on localhost with the story's captures: (ansible-playbook -vvv output, the plan)."""
    repo, env = consumer
    dest = repo.parent / "plan.json"
    output = run([BIN / "ansible-playbook", "-vvv", "plan_offline.yml",
                  "-e", "plan_model=%s" % MINIMAX_CONFIG, "-e", "plan_topo=%s" % RTX_TOPO,
                  "-e", "plan_query=%s" % RTX_QUERY, "-e", "plan_numactl=%s" % RTX_NUMACTL,
                  "-e", json.dumps({"plan_request": {"model_id": MINIMAX_ID}}), "-e", "plan_dest=%s" % dest],
                 cwd=repo, env=env)
    return output, json.loads(dest.read_text())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    run([BIN / "uv", "build", "--quiet", "--wheel", "--out-dir", out, ROOT], cwd=out, env=uv_env())
    (built,) = out.glob("llmops_vllm-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory, wheel):
    """A fresh venv outside the checkout with only the wheel (and its dependencies) installed."""
    top = tmp_path_factory.mktemp("wheel-venv")
    venv = top / "venv"
    run([BIN / "uv", "venv", "--quiet", "--python", sys.executable, venv], cwd=top, env=uv_env())
    run([BIN / "uv", "pip", "install", "--quiet", "--python", venv / "bin" / "python", wheel], cwd=top, env=uv_env())
    return venv


def test_requirements_txt_is_pyproject_dependencies():
    """requirements.txt (collection users, ansible-builder) and pyproject (the CLI) state the same needs."""
    requirements = requirement_lines(ROOT / "requirements.txt")
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    # ansible-core is the controller itself: meta/runtime.yml's requires_ansible, not a requirement to add.
    assert sorted(requirements) == sorted(dep for dep in dependencies if not dep.startswith("ansible-core"))
    execution_environment = yaml.safe_load((ROOT / "meta" / "execution-environment.yml").read_text())
    assert execution_environment == {"version": 1, "dependencies": {"python": "requirements.txt", "system": "bindep.txt"}}


def test_tarball_holds_what_users_need(tarball, tarball_members):
    missing = [path for path in NEEDED if path not in tarball_members]
    assert not missing, "not in %s: %s" % (tarball.name, missing)
    # ansible-galaxy itself always drops __pycache__, *.pyc, *.retry and *.swp.
    on_disk = [str(path.relative_to(ROOT)) for top in CONTENT_DIRS for path in (ROOT / top).rglob("*")
               if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".pyc", ".retry", ".swp")]
    dropped = sorted(set(on_disk) - tarball_members)
    assert not dropped, "build_ignore drops collection content: %s" % dropped
    manifest = json.loads(tarfile.open(tarball).extractfile("MANIFEST.json").read())
    assert (manifest["collection_info"]["namespace"], manifest["collection_info"]["name"]) == ("llmops", "vllm")


def test_tarball_leaves_the_development_tree_out(tarball, tarball_members):
    shipped = sorted(member for member in tarball_members
                     if any(member == path or member.startswith(path + "/") for path in EXCLUDED)
                     or "__pycache__" in member.split("/") or member.endswith(".pyc"))
    assert not shipped, "in %s but development only: %s" % (tarball.name, shipped)
    # The fixtures and caches were most of its 3.5 MB; what is left is code, roles and docs.
    assert tarball.stat().st_size < 1 << 20, "%s is %d bytes: what new large files does it hold?" % (tarball.name, tarball.stat().st_size)


def test_consumer_sees_only_its_own_copy(consumer):
    repo, env = consumer
    listed = json.loads(run([BIN / "ansible-galaxy", "collection", "list", "llmops.vllm", "--format", "json"], cwd=repo, env=env))
    assert list(listed) == [str(repo / "collections" / "ansible_collections")], listed
    doc = json.loads(run([BIN / "ansible-doc", "-t", "module", "llmops.vllm.serving_plan", "--json"], cwd=repo, env=env))
    assert doc["llmops.vllm.serving_plan"]["doc"]["filename"] == str(repo / "collections" / COLLECTION_DIR / "plugins" / "modules" / "serving_plan.py")


def test_consumer_plans_offline_with_the_installed_modules(consumer, offline_plan):
    repo, _env = consumer
    output, plan = offline_plan
    module_files = [line.split("Using module file ", 1)[1] for line in output.splitlines() if line.startswith("Using module file ")]
    collection_modules = [path for path in module_files if "/ansible_collections/llmops/vllm/" in path]
    installed = str(repo / "collections" / COLLECTION_DIR / "plugins" / "modules")
    assert collection_modules == [installed + "/model_info.py", installed + "/gpu_topology_info.py"], module_files
    assert plan["fits"] is True
    assert plan["model_id"] == MINIMAX_ID
    assert plan["tensor_parallel_size"] * plan["data_parallel_size"] == len(plan["gpu_indices"]) == 8
    assert "--tensor-parallel-size" in plan["argv"]


def test_consumer_site_imports_the_rollout_by_fqcn(consumer):
    repo, env = consumer
    listed = run([BIN / "ansible-playbook", "--list-tasks", "site.yml"], cwd=repo, env=env)
    assert "Check every host's desired state before any host changes" in listed
    assert "Roll out the desired model" in listed
    assert "llmops.vllm.rollout : Validate vllm_model as a whole" in listed


def test_builder_introspect_reads_the_collections_requirements(consumer):
    repo, env = consumer
    report = run([BIN / "ansible-builder", "introspect", "./collections"], cwd=repo, env=env)
    found = yaml.safe_load(report.split("\n", 1)[1])
    # ansible-builder leaves out what every execution environment has already (pyyaml).
    python = [line for line in requirement_lines(ROOT / "requirements.txt") if not line.startswith("pyyaml")]
    assert found["python"] == ["%s  # from collection llmops.vllm" % line for line in python]
    assert found["system"] == ["%s  # from collection llmops.vllm" % line for line in requirement_lines(ROOT / "bindep.txt")]


def test_builder_creates_the_consumers_execution_environment(consumer, tarball):
    repo, env = consumer
    context = repo.parent / "context"
    run([BIN / "ansible-builder", "create", "--file", "execution-environment.yml", "--context", context,
         "--output-filename", "Containerfile"], cwd=repo, env=env)
    containerfile = (context / "Containerfile").read_text()
    assert "ansible-galaxy collection install $ANSIBLE_GALAXY_CLI_COLLECTION_OPTS -r requirements.yml" in containerfile
    assert "introspect" in containerfile
    # ansible-galaxy runs in the directory _build/ is copied to: the tarball must be beside requirements.yml.
    assert (context / "_build" / "requirements.yml").read_text() == (repo / "requirements.yml").read_text()
    assert (context / "_build" / tarball.name).stat().st_size == tarball.stat().st_size


def test_wheel_holds_the_collection_as_a_namespace_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = wheel.name.split("-py3")[0] + ".dist-info/"
    stray = [name for name in names if not name.startswith((COLLECTION_DIR + "/", dist_info))]
    assert not stray, stray
    missing = [path for path in NEEDED if "%s/%s" % (COLLECTION_DIR, path) not in names]
    assert not missing, missing
    # No __init__.py down to the collection: other collections' wheels share ansible_collections/.
    for package in ("ansible_collections", "ansible_collections/llmops", COLLECTION_DIR, COLLECTION_DIR + "/plugins"):
        assert package + "/__init__.py" not in names
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc") or "/tests/" in name]
    entry_points = zipfile.ZipFile(wheel).read(dist_info + "entry_points.txt").decode()
    assert "llmops-vllm = ansible_collections.llmops.vllm.plugins.plugin_utils.cli:main" in entry_points


def test_wheel_cli_plans_outside_the_checkout(tmp_path, wheel_venv, offline_plan):
    env = {"PATH": "%s:/usr/bin:/bin" % (wheel_venv / "bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    location = run([wheel_venv / "bin" / "python", "-c",
                    "import ansible_collections.llmops.vllm.plugins.plugin_utils.cli as c; print(c.__file__)"], cwd=tmp_path, env=env)
    site_packages = next((wheel_venv / "lib").glob("python3*/site-packages"))
    assert location.strip() == str(site_packages / COLLECTION_DIR / "plugins" / "plugin_utils" / "cli.py")
    host = ["--topo-file", RTX_TOPO, "--query-file", RTX_QUERY, "--numactl-file", RTX_NUMACTL]
    model = ["--model", MINIMAX_CONFIG, "--model-id", MINIMAX_ID]
    text = run([wheel_venv / "bin" / "llmops-vllm", "plan"] + host + model, cwd=tmp_path, env=env)
    assert text.startswith("## Serving plan: %s on 8 x NVIDIA RTX PRO 6000" % MINIMAX_ID), text
    assert "| fits | yes |" in text
    # The wheel's CLI and the tarball's serving_plan action: the same plan, key for key.
    cli_plan = json.loads(run([wheel_venv / "bin" / "llmops-vllm", "plan", "--json"] + host + model, cwd=tmp_path, env=env))
    _output, action_plan = offline_plan
    assert cli_plan == {key: action_plan[key] for key in cli_plan}


def test_wheel_runs_the_rollout_playbook_by_fqcn(tmp_path, wheel_venv):
    config = tmp_path / "ansible.cfg"
    config.write_text("[defaults]\n")
    listed = run([wheel_venv / "bin" / "ansible-playbook", "-i", "localhost,", "--list-tasks", "llmops.vllm.rollout"],
                 cwd=tmp_path, env=ansible_env(tmp_path, config, path=wheel_venv / "bin"))
    site_packages = next((wheel_venv / "lib").glob("python3*/site-packages"))
    assert "playbook: %s" % (site_packages / COLLECTION_DIR / "playbooks" / "rollout.yml") in listed
    assert "llmops.vllm.rollout : Validate vllm_model as a whole" in listed
