# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pipelines of examples/gitops, run against the sandbox: their YAML parsed, their shell lines run
as a CI runner runs them (bash, the job's variables, secrets in the environment), in a consumer
repository (tools/consumer.sh: the built tarball, the CLI from its wheel).

Two checkouts of that repository: a pull request that changes llmops-1's desired model to
tiny-qwen3 (validate, then diff, whose output both pipelines post as a comment to a local HTTP
server standing in for the forge's API), and main, whose desired state is what llmops-1 serves after
the upgrade scenario (apply: the fast path, exit 0, the summary posted to the webhook from Vault).
Each block is run command by command (backslash continuations joined); a command the other pipeline
already ran in the same checkout is not run twice.

Runs in the llmops1 lane after molecule upgrade (tools/run_tests.sh); alone it first brings
llmops-1 to that state (sandbox/up, then the consumer's apply)."""
import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.sandbox

ROOT = Path(__file__).resolve().parents[2]
GITOPS = ROOT / "examples" / "gitops"
CONSUMER = ROOT / "out" / "consumer"
SANDBOX_DIR = Path(os.environ.get("LLMOPS_SANDBOX_DIR") or ROOT / ".sandbox")
VAULT_PASSWORD = "gitops-test-vault-password"
HOOK_TOKEN = "hook-token-0815"
MODEL_A = yaml.safe_load((ROOT / "examples" / "sandbox-model-a.yml").read_text())


class Forge(http.server.BaseHTTPRequestHandler):
    """The forge's comment API and the webhook: records what is posted."""
    posts: list = []

    def do_POST(self):  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Forge.posts.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body or b"null")})
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


def run(argv, cwd=ROOT, env=None, timeout=1800):
    proc = subprocess.run([str(a) for a in argv], cwd=str(cwd), env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, "%s: rc %d\n%s\n%s" % (" ".join(map(str, argv)), proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:])
    return proc


def clean_env(**extra):
    env = {"PATH": "%s:/usr/bin:/bin" % (CONSUMER / "venv" / "bin"), "HOME": os.environ.get("HOME", "/root"),
           "LANG": "C.UTF-8", "LLMOPS_SANDBOX_DIR": str(SANDBOX_DIR)}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def forge():
    Forge.posts = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Forge)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://127.0.0.1:%d" % server.server_port
    server.shutdown()


@pytest.fixture(scope="module")
def checkouts(nspawn_ok, tmp_path_factory, forge):
    """The pull request's and main's checkouts of the consumer repository, llmops-1 serving main's state."""
    run([ROOT / "sandbox" / "up"], timeout=3600)
    run([ROOT / "tools" / "consumer.sh", CONSUMER], timeout=900)
    top = tmp_path_factory.mktemp("gitops")
    password = top / "vault-password"
    password.write_text(VAULT_PASSWORD + "\n")
    webhook = run([CONSUMER / "venv" / "bin" / "ansible-vault", "encrypt_string", "--vault-password-file", password,
                   "--name", "llmops_vllm_webhook_url", "--", "%s/hooks/%s" % (forge, HOOK_TOKEN)], env=clean_env()).stdout
    repos = {}
    proposed = dict(MODEL_A["vllm_model"], name="tiny-qwen3", repo_id="llmops-test/tiny-qwen3-chat", revision="main",
                    served_model_name="tiny-qwen3")
    for name, model in (("main", MODEL_A["vllm_model"]), ("pr", proposed)):
        repo = top / name
        shutil.copytree(CONSUMER / "repo", repo, symlinks=True, ignore=shutil.ignore_patterns(".llmops-vllm", "reports"))
        host_vars = repo / "inventory" / "host_vars"
        host_vars.mkdir(exist_ok=True)
        # The desired state of llmops-1 in this checkout; the upgrade scenario's venv policy.
        (host_vars / "llmops-1.yml").write_text(yaml.safe_dump({"vllm_model": model, "rollout_keep_vllm_venvs": 1}))
        with open(repo / "inventory" / "group_vars" / "all.yml", "a") as handle:
            handle.write("# The outcome webhook, from Vault (tests/integration/test_gitops_live.py)\n" + webhook)
        repos[name] = repo
    # llmops-1 serves what main desires (after the upgrade scenario it does: the fast path)
    run(["llmops-vllm", "apply", "-i", "inventory", "--vault-password-file", password], cwd=repos["main"],
        env=clean_env())
    Forge.posts = []
    return repos


def logical_lines(script):
    """The commands of a shell block, one per line, backslash continuations joined."""
    lines, current = [], ""
    for line in script.splitlines():
        current += line.rstrip("\\").strip() + " " if line.rstrip().endswith("\\") else line.strip()
        if not line.rstrip().endswith("\\"):
            if current.strip():
                lines.append(current.strip())
            current = ""
    return lines


def github_jobs():
    workflow = yaml.safe_load((GITOPS / "github-actions.yml").read_text())
    env = dict((k, str(v)) for k, v in (workflow.get("env") or {}).items())
    for name, job in workflow["jobs"].items():
        job_env = dict(env, **dict((k, str(v)) for k, v in (job.get("env") or {}).items() if "${{" not in str(v)))
        lines = [line for step in job["steps"] if "run" in step for line in logical_lines(step["run"])]
        yield name, job_env, lines


def gitlab_jobs():
    pipeline = yaml.safe_load((GITOPS / "gitlab-ci.yml").read_text())
    env = dict((k, str(v)) for k, v in (pipeline.get("variables") or {}).items())
    before = pipeline["default"]["before_script"]
    for name in ("validate", "diff", "apply"):
        job = pipeline[name]
        assert job["stage"] in pipeline["stages"]
        yield name, env, [line for script in before + job["script"] + job.get("after_script", []) for line in logical_lines(script)]


CHECKOUT_OF_JOB = {"validate": "pr", "diff": "pr", "apply": "main"}


def ci_secrets(forge):
    """What each CI puts in the environment (its API, the pull request, the secrets)."""
    return {
        "VAULT_PASSWORD": VAULT_PASSWORD, "LLMOPS_VLLM_WHEEL": str(next((CONSUMER / "dist").glob("*.whl"))),
        "GITHUB_TOKEN": "gh-token", "GITHUB_API_URL": forge, "GITHUB_REPOSITORY": "llmops/inference", "PR_NUMBER": "7",
        "GITLAB_TOKEN": "gl-token", "CI_API_V4_URL": forge + "/api/v4", "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "7",
    }


@pytest.fixture(scope="module")
def pipelines(checkouts, forge):
    """Every pipeline's lines, run; {(pipeline, job): [(line, rc, output)]}."""
    ran, done = {}, set()
    for pipeline, jobs in (("github", github_jobs()), ("gitlab", gitlab_jobs())):
        for job, env, lines in jobs:
            repo = checkouts[CHECKOUT_OF_JOB[job]]
            outcomes = ran.setdefault((pipeline, job), [])
            for line in lines:
                if (line, repo) in done:
                    outcomes.append((line, 0, "(ran in the other pipeline)"))
                    continue
                proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", line], cwd=str(repo), capture_output=True,
                                      text=True, env=clean_env(**dict(env, **ci_secrets(forge))), timeout=1800, check=False)
                outcomes.append((line, proc.returncode, proc.stdout + proc.stderr))
                if proc.returncode == 0:
                    done.add((line, repo))
    return ran


def test_every_line_of_both_pipelines_succeeds(pipelines):
    assert set(pipelines) == {(p, j) for p in ("github", "gitlab") for j in ("validate", "diff", "apply")}
    for (pipeline, job), outcomes in pipelines.items():
        assert outcomes, (pipeline, job)
        for line, rc, output in outcomes:
            assert rc == 0, "%s %s: %s\n%s" % (pipeline, job, line, output[-4000:])


def test_the_pull_request_comment_shows_what_the_merge_would_change(pipelines, checkouts):
    diff = (checkouts["pr"] / "diff.txt").read_text()
    assert "llmops-1     WOULD_CHANGE" in diff and "diff: exit 0" in diff
    # the files the merge would change, line by line: the state file would record tiny-qwen3
    added = [line for line in diff.splitlines() if line.strip().startswith("+")]
    assert any("tiny-qwen3" in line for line in added), diff
    comments = [post for post in Forge.posts if "/comments" in post["path"] or "/notes" in post["path"]]
    assert [post["path"] for post in comments] == ["/repos/llmops/inference/issues/7/comments",
                                                   "/api/v4/projects/42/merge_requests/7/notes"]
    assert comments[0]["headers"]["Authorization"] == "Bearer gh-token" and comments[1]["headers"]["PRIVATE-TOKEN"] == "gl-token"
    for post in comments:
        assert post["body"]["body"].startswith("llmops-vllm diff\n```\n") and "WOULD_CHANGE" in post["body"]["body"]
    # a diff changes nothing: llmops-1 still serves model A
    state = subprocess.run(["ssh", "-F", str(SANDBOX_DIR / "ssh_config"), "llmops-1", "cat /var/lib/llmops-vllm/state.json"],
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert list(json.loads(state)["models"]) == ["tiny-llama"]


def test_the_merge_applies_with_exit_0_and_notifies_the_webhook(pipelines, checkouts):
    summary = json.loads((checkouts["main"] / "summary.json").read_text())
    assert summary["exit_code"] == 0 and summary["hosts"]["llmops-1"]["outcome"] == "unchanged"
    assert summary["webhook"] == {"posted": True, "error": None}
    hooks = [post for post in Forge.posts if post["path"] == "/hooks/" + HOOK_TOKEN]
    # one diff (the pull request) and one apply (the merge): the pipelines' same commands ran once
    assert sorted(hook["body"]["command"] for hook in hooks) == ["apply", "diff"]
    assert [hook["body"]["run_id"] for hook in hooks if hook["body"]["command"] == "apply"] == [summary["run_id"]]
    # the runner's artifacts are where the pipelines upload them from, without the webhook's secret
    artifacts = checkouts["main"] / ".llmops-vllm" / "artifacts"
    assert (artifacts / summary["run_id"] / "summary.json").exists()
    for path in artifacts.rglob("*"):
        if path.is_file():
            assert HOOK_TOKEN not in path.read_text(errors="replace"), path
