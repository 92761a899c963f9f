# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The pipelines of examples/gitops, run against the sandbox: their YAML parsed, their shell lines run
as a CI runner runs them (bash, the job's variables, secrets in the environment), in a consumer
repository (tools/consumer.sh: the built tarball, the CLI from its wheel).

Two checkouts of that repository: main, whose desired state is what llmops-1 serves after the
upgrade scenario (apply: the fast path, exit 0, the summary posted to the webhook from Vault, the
hosts' snapshot kept as the job's artifact), and a pull request that changes llmops-1's desired
model to tiny-qwen3 (validate, then diff --offline from main's snapshot, whose output both pipelines
post as a comment; they run without the Vault password, which only apply's lines get). A local HTTP
server stands in for the forge's API: comments, notes, and main's artifacts (and a fork's artifact of
the same name, which the pull request's diff must not take). Main's apply runs first (the merge the
pull request follows). Each block is run command by command (backslash continuations joined); a
command the other pipeline already ran in the same checkout is not run twice. Beside them, once main's apply has run, the same pull request's diff runs
online, against llmops-1 itself: it must say what the offline one said.

Runs in the llmops1 lane after molecule upgrade (tools/run_tests.sh); alone it first brings
llmops-1 to that state (sandbox/up, then the consumer's apply)."""
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import threading
import zipfile
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
    """The forge's comment API, the webhook (records what is posted) and main's artifacts (the
    snapshot its apply left, zipped as each forge zips it)."""
    posts: list = []
    snapshot_dir: Path = Path("/nonexistent")
    base = ""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        github = self.path.startswith("/repos/llmops/inference/actions/artifacts?name=llmops-snapshot")
        if github and self.headers.get("Authorization") == "Bearer gh-token":
            # newest first: a fork's run (its branch also named main) uploaded one of that name too - the
            # preview must take main's (the fork's URL answers 404)
            run = {"repository_id": 1, "head_repository_id": 1, "head_branch": "main"}
            self.reply(json.dumps({"total_count": 2, "artifacts": [
                {"name": "llmops-snapshot", "expired": False, "archive_download_url": self.base + "/gh-fork-artifact.zip",
                 "workflow_run": dict(run, head_repository_id=2)},
                {"name": "llmops-snapshot", "expired": False, "archive_download_url": self.base + "/gh-artifact.zip",
                 "workflow_run": run}]}).encode(), "application/json")
        elif self.path == "/gh-artifact.zip" and self.headers.get("Authorization") == "Bearer gh-token":
            self.reply(self.zipped(""), "application/zip")  # upload-artifact: the files under the path
        elif self.path == "/api/v4/projects/42/jobs/artifacts/main/download?job=apply" and self.headers.get("JOB-TOKEN") == "job-token":
            self.reply(self.zipped(".snapshot/"), "application/zip")  # GitLab: the paths as the job had them
        else:
            self.send_response(404)
            self.end_headers()

    def zipped(self, prefix):
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for path in sorted(Forge.snapshot_dir.glob("*.json")):
                archive.write(path, prefix + path.name)
        return buffer.getvalue()

    def reply(self, body, kind):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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
    Forge.base = "http://127.0.0.1:%d" % server.server_port
    yield Forge.base
    server.shutdown()


@pytest.fixture(scope="module")
def checkouts(nspawn_ok, tmp_path_factory, forge):
    """The pull request's and main's checkouts of the consumer repository."""
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
    Forge.snapshot_dir = repos["main"] / ".snapshot"
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
    for name, job in sorted(workflow["jobs"].items(), key=lambda item: JOB_ORDER.index(item[0])):
        job_env = dict(env, **dict((k, str(v)) for k, v in (job.get("env") or {}).items() if "${{" not in str(v)))
        lines = [line for step in job["steps"] if "run" in step for line in logical_lines(step["run"])]
        yield name, job_env, lines


def gitlab_jobs():
    pipeline = yaml.safe_load((GITOPS / "gitlab-ci.yml").read_text())
    env = dict((k, str(v)) for k, v in (pipeline.get("variables") or {}).items())
    before = pipeline["default"]["before_script"]
    for name in JOB_ORDER:
        job = pipeline[name]
        assert job["stage"] in pipeline["stages"]
        yield name, env, [line for script in before + job["script"] + job.get("after_script", []) for line in logical_lines(script)]


CHECKOUT_OF_JOB = {"validate": "pr", "diff": "pr", "apply": "main"}
# main's apply first: the pull request's diff reads the snapshot it keeps
JOB_ORDER = ("apply", "validate", "diff")


def ci_secrets(forge, job):
    """What each CI puts in the environment of a job (its API, the pull request, the secrets): the Vault
    password only in apply's (the pull request's jobs run without it, as the pipelines' trust split says)."""
    return dict({"VAULT_PASSWORD": VAULT_PASSWORD} if job == "apply" else {}, **{
        "LLMOPS_VLLM_WHEEL": str(next((CONSUMER / "dist").glob("*.whl"))),
        "GITHUB_TOKEN": "gh-token", "GITHUB_API_URL": forge, "GITHUB_REPOSITORY": "llmops/inference", "PR_NUMBER": "7",
        "GITLAB_TOKEN": "gl-token", "CI_API_V4_URL": forge + "/api/v4", "CI_PROJECT_ID": "42", "CI_MERGE_REQUEST_IID": "7",
        "CI_JOB_TOKEN": "job-token", "CI_DEFAULT_BRANCH": "main",
    })


@pytest.fixture(scope="module")
def pipelines(checkouts, forge):
    """Every pipeline's lines, run: {"lines": {(pipeline, job): [(line, rc, output)]}, "online": the summary
    of the pull request's diff run online (against llmops-1), started once main's apply has run and
    run beside the pipelines' other jobs, which only read llmops-1 too."""
    ran, done, online = {}, set(), None
    for pipeline, jobs in (("github", github_jobs()), ("gitlab", gitlab_jobs())):
        for job, env, lines in jobs:
            if online is None and job != "apply":
                online = subprocess.Popen(
                    ["llmops-vllm", "diff", "-i", "inventory", "--vault-password-file", checkouts["pr"].parent / "vault-password",
                     "--artifacts", checkouts["pr"].parent / "online-artifacts", "--json"],
                    cwd=str(checkouts["pr"]), env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            repo = checkouts[CHECKOUT_OF_JOB[job]]
            outcomes = ran.setdefault((pipeline, job), [])
            for line in lines:
                if (line, repo) in done:
                    outcomes.append((line, 0, "(ran in the other pipeline)"))
                    continue
                proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", line], cwd=str(repo), capture_output=True,
                                      text=True, env=clean_env(**dict(env, **ci_secrets(forge, job))), timeout=1800, check=False)
                outcomes.append((line, proc.returncode, proc.stdout + proc.stderr))
                if proc.returncode == 0:
                    done.add((line, repo))
    stdout, stderr = online.communicate(timeout=1800)
    assert online.returncode == 0, "the online diff: rc %d\n%s\n%s" % (online.returncode, stdout[-4000:], stderr[-4000:])
    return {"lines": ran, "online": json.loads(stdout)}


def test_every_line_of_both_pipelines_succeeds(pipelines):
    assert set(pipelines["lines"]) == {(p, j) for p in ("github", "gitlab") for j in ("validate", "diff", "apply")}
    for (pipeline, job), outcomes in pipelines["lines"].items():
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
    # one apply (the merge; the pipelines' same command ran once) and the test's own online diff: the pull
    # request's offline diff runs without the Vault, so it notifies no webhook (its URL is in the Vault)
    assert sorted(hook["body"]["command"] for hook in hooks) == ["apply", "diff"]
    assert [hook["body"]["run_id"] for hook in hooks if hook["body"]["command"] == "apply"] == [summary["run_id"]]
    assert pipelines["online"]["run_id"] in [hook["body"]["run_id"] for hook in hooks]
    # the runner's artifacts are where the pipelines upload them from, without the webhook's secret
    artifacts = checkouts["main"] / ".llmops-vllm" / "artifacts"
    assert (artifacts / summary["run_id"] / "summary.json").exists()
    for path in artifacts.rglob("*"):
        if path.is_file():
            assert HOOK_TOKEN not in path.read_text(errors="replace"), path


def comparable(host):
    """What a preview says of a host, without what differs from run to run: its timings, and the
    time of the preview itself in the state file it would write (the new entry's `since`)."""
    def masked(text):
        return re.sub(r'("since": )"[^"]*"', r'\1"*"', text)
    doc = dict((k, v) for k, v in host.items() if k not in ("phases", "timings"))
    doc["diff"] = [dict(one, before=masked(one["before"]), after=masked(one["after"])) for one in host.get("diff", [])]
    return doc


def is_directories_only(one):
    """A diff of llmops.vllm.host_dirs: no file, only lines '<directory> <owner:group mode or absent>'."""
    lines = (one["before"] + one["after"]).splitlines()
    return one["path"] == "" and bool(lines) and all(re.match(r"^/\S+ (absent|\S+:\S+ 0[0-7]{3})$", line) for line in lines)


def test_the_offline_diff_says_what_the_online_diff_says(pipelines, checkouts):
    """The pull request's diff from main's snapshot (no connection to llmops-1) and the same diff run
    against llmops-1 itself agree: outcome, models, plan and every file's before and after."""
    snapshot = json.loads((checkouts["main"] / ".snapshot" / "llmops-1.json").read_text())
    assert snapshot["format"] == "llmops-vllm-snapshot/1" and snapshot["host"] == "llmops-1"
    assert "/var/lib/llmops-vllm/state.json" in snapshot["files"]
    assert "/etc/systemd/system/vllm-tiny-llama.service" in snapshot["files"]
    modules = set(read["module"] for read in snapshot["reads"].values())
    assert {"ansible.builtin.setup", "llmops.vllm.gpu_topology_info", "llmops.vllm.vllm_info",
            "llmops.vllm.vllm_process_info", "llmops.vllm.hf_model"} <= modules
    assert HOOK_TOKEN not in json.dumps(snapshot) and VAULT_PASSWORD not in json.dumps(snapshot)
    summaries = [json.loads(path.read_text()) for path in (checkouts["pr"] / ".llmops-vllm" / "artifacts").glob("*/summary.json")]
    offline = [summary for summary in summaries if summary.get("offline")]
    assert len(offline) == 1 and offline[0]["exit_code"] == 0, summaries
    online = pipelines["online"]
    assert "offline" not in online and online["exit_code"] == 0
    before, after = comparable(online["hosts"]["llmops-1"]), comparable(offline[0]["hosts"]["llmops-1"])
    # A snapshot holds files, not directories: the new model's own cache directory, which the online preview
    # says the serve role would make (llmops.vllm.host_dirs, issue 39), is not in the offline one
    # (docs/gitops.md, "What an offline preview cannot see").
    made = [one for one in before["diff"] if is_directories_only(one)]
    assert all(one["after"] == "/var/cache/llmops-vllm/tiny-qwen3 vllm:vllm 0750\n" for one in made), made
    before["diff"] = [one for one in before["diff"] if not is_directories_only(one)]
    assert after["outcome"] == "would_change" and after["new_model"]["repo_id"] == "llmops-test/tiny-qwen3-chat"
    assert [one["path"] for one in after["diff"]] == [one["path"] for one in before["diff"]]
    # the state file would record tiny-qwen3 (the unit and the weights too, unless an earlier scenario
    # left them on llmops-1: then both previews say they need no change)
    assert "/var/lib/llmops-vllm/state.json" in [one["path"] for one in after["diff"]]
    assert after == before
