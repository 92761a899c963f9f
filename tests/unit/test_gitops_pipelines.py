# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmops.vllm contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The trust split of the example pipelines in examples/gitops (issue 38, case 5; docs/gitops.md, "Who may
touch what"): a pull / merge request's content is code (its inventory's Jinja, ansible.cfg,
requirements.yml), so every job that runs for one - or for a push to a branch other than the default -
holds no apply credential (no Vault password, no SSH key, no secret but GITHUB_TOKEN, no protected
variable), previews with `diff --offline` only, and runs on a runner the apply job does not use; only
the default branch's push runs apply. Each job's `if:` (GitHub) or `rules:` (GitLab) is evaluated for
those events, so a job counts as untrusted by what its conditions say, not by its name. The snapshot
fetch lines of the previews run for real (bash, curl) against a local stand-in for the forge's API that
also offers a pull request's and a fork's artifact of the same name.

Fast: YAML, a small expression evaluator per forge, curl on 127.0.0.1; no sandbox, no network."""
import copy
import fnmatch
import http.server
import io
import json
import re
import shutil
import subprocess
import threading
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Set, Tuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GITOPS = ROOT / "examples" / "gitops"

# What reaches production: the Vault (its password, in any spelling) and an SSH key.
APPLY_CREDENTIAL = re.compile(
    r"vault[-_ ]?pass|ssh[-_]?(private[-_]?)?key|ssh-add|ssh-agent|id_(rsa|ed25519|ecdsa)|private[-_]key_file",
    re.IGNORECASE)
# Events whose content is not the default branch's: what runs for them is untrusted.
UNTRUSTED = ("pull_request", "push_branch")
GENERIC_LABELS = {"self-hosted", "linux", "x64", "arm64", "windows", "macos"}


def load(name: str) -> Dict[str, Any]:
    return yaml.safe_load((GITOPS / name).read_text())


def strings(value: Any) -> Iterator[str]:
    """Every string of a parsed YAML value, keys included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings(item)
    elif value is not None:
        yield str(value)


def runs_command(line: str, *command: str) -> bool:
    """Whether a shell line runs ``command`` (at a command's place: not inside a quoted text)."""
    return re.search(r"(?:^|[;&|]\s*|\$\(\s*)%s(?:\s|$)" % r"\s+".join(map(re.escape, command)), line) is not None


def logical_lines(script: str) -> List[str]:
    """The commands of a shell block, one per line, backslash continuations joined (as the live test runs them)."""
    lines, current = [], ""
    for line in script.splitlines():
        continued = line.rstrip().endswith("\\")
        current += line.rstrip().rstrip("\\").strip() + " " if continued else line.strip()
        if not continued:
            if current.strip():
                lines.append(current.strip())
            current = ""
    return lines


# --- a small expression evaluator: GitHub's `if:` and GitLab's `rules: if:` -------------------------------

class Parser:
    """Recursive descent over tokens: or (||) > and (&&) > comparison > unary (!) > primary."""

    def __init__(self, tokens: List[Tuple[str, str]], primary: Callable[["Parser"], Any],
                 compare: Callable[[str, Any, Any], bool], ops: Tuple[str, ...]):
        self.tokens, self.pos, self.primary, self.compare, self.ops = tokens, 0, primary, compare, ops

    def peek(self) -> Tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def take(self, kind: Optional[str] = None, text: Optional[str] = None) -> Tuple[str, str]:
        token = self.peek()
        if (kind and token[0] != kind) or (text and token[1] != text):
            raise ValueError("expected %s, got %r" % (text or kind, token[1]))
        self.pos += 1
        return token

    def parse(self) -> Any:
        value = self.parse_or()
        self.take("end")
        return value

    def parse_or(self) -> Any:
        value = self.parse_and()
        while self.peek() == ("op", "||"):
            self.take()
            right = self.parse_and()
            value = value or right
        return value

    def parse_and(self) -> Any:
        value = self.parse_cmp()
        while self.peek() == ("op", "&&"):
            self.take()
            right = self.parse_cmp()
            value = value and right
        return value

    def parse_cmp(self) -> Any:
        value = self.parse_unary()
        while self.peek()[0] == "op" and self.peek()[1] in self.ops:
            op = self.take()[1]
            value = self.compare(op, value, self.parse_unary())
        return value

    def parse_unary(self) -> Any:
        if self.peek() == ("op", "!"):
            self.take()
            return not self.parse_unary()
        if self.peek() == ("op", "("):
            self.take()
            value = self.parse_or()
            self.take("op", ")")
            return value
        return self.primary(self)


def tokenize(text: str, pattern: "re.Pattern[str]") -> List[Tuple[str, str]]:
    tokens, pos = [], 0
    text = text.strip()
    while pos < len(text):
        match = pattern.match(text, pos)
        if not match:
            raise ValueError("cannot read %r at %r" % (text, text[pos:]))
        pos = match.end()
        tokens.append(next((kind, value) for kind, value in match.groupdict().items() if value is not None))
    return tokens


GH_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<op>==|!=|&&|\|\||!|\(|\)|,)|(?P<num>\d+(?:\.\d+)?)"
                      r"|(?P<name>[A-Za-z_][A-Za-z0-9_.\-]*))\s*")


def github_if(expression: Any, context: Dict[str, Any]) -> bool:
    """GitHub's job `if:` under ``context`` (the github context of one event); status functions as for a job
    whose needs succeeded. A context this test does not know fails it rather than guessing."""
    text = str(expression).strip()
    if text.startswith("${{") and text.endswith("}}"):
        text = text[3:-2]

    def lookup(name: str) -> Any:
        parts = name.split(".")
        if parts[0] != "github":
            raise ValueError("this test does not know the context of %r" % name)
        value: Any = context
        for part in parts[1:]:
            value = value.get(part) if isinstance(value, dict) else None
        return value

    def primary(parser: Parser) -> Any:
        kind, text = parser.take()
        if kind == "str":
            return text[1:-1].replace("''", "'")
        if kind == "num":
            return float(text)
        if kind != "name":
            raise ValueError("unexpected %r" % text)
        if text in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[text]
        if parser.peek() == ("op", "("):
            parser.take()
            args = []
            while parser.peek() != ("op", ")"):
                args.append(parser.parse_or())
                if parser.peek() == ("op", ","):
                    parser.take()
            parser.take("op", ")")
            functions: Dict[str, Callable[..., Any]] = {
                "success": lambda: True, "always": lambda: True, "failure": lambda: False, "cancelled": lambda: False,
                "contains": lambda a, b: str(b).lower() in (str(a).lower() if isinstance(a, str) else [str(x).lower() for x in a or []]),
                "startsWith": lambda a, b: str(a or "").lower().startswith(str(b).lower()),
                "endsWith": lambda a, b: str(a or "").lower().endswith(str(b).lower())}
            return functions[text](*args)
        return lookup(text)

    def compare(op: str, left: Any, right: Any) -> bool:
        equal = (left.lower() == right.lower()) if isinstance(left, str) and isinstance(right, str) else left == right
        return equal if op == "==" else not equal

    return bool(Parser(tokenize(text, GH_TOKEN), primary, compare, ("==", "!=")).parse())


GL_TOKEN = re.compile(r"\s*(?:(?P<str>\"[^\"]*\"|'[^']*')|(?P<var>\$\{?[A-Za-z_][A-Za-z0-9_]*\}?)|(?P<re>/(?:\\.|[^/])*/[a-z]*)"
                      r"|(?P<op>==|!=|=~|!~|&&|\|\||!|\(|\))|(?P<name>null))\s*")


def gitlab_if(expression: str, variables: Dict[str, str]) -> bool:
    """GitLab's `rules: if:` under ``variables`` (the predefined variables of one pipeline)."""
    def primary(parser: Parser) -> Any:
        kind, text = parser.take()
        if kind == "str":
            return text[1:-1]
        if kind == "var":
            return variables.get(text.strip("${}"))
        if kind == "re":
            return text
        if kind == "name":
            return None
        raise ValueError("unexpected %r" % text)

    def compare(op: str, left: Any, right: Any) -> bool:
        if op in ("=~", "!~"):
            body, flags = right[1:right.rindex("/")], right[right.rindex("/") + 1:]
            found = left is not None and re.search(body, left, re.IGNORECASE if "i" in flags else 0) is not None
            return found if op == "=~" else not found
        return (left == right) if op == "==" else (left != right)

    value = Parser(tokenize(expression, GL_TOKEN), primary, compare, ("==", "!=", "=~", "!~")).parse()
    return bool(value)


# --- GitHub Actions ----------------------------------------------------------------------------------

def github_events(default_branch: str = "main") -> Dict[str, Dict[str, Any]]:
    """The github context of each event: a pull request (from a fork), a push to another branch, a push to main."""
    repo = {"default_branch": default_branch, "full_name": "llmops/inference"}
    return {
        "pull_request": {"event_name": "pull_request", "ref": "refs/pull/7/merge", "ref_name": "7/merge", "head_ref": "feature",
                         "base_ref": default_branch, "repository": "llmops/inference",
                         "event": {"repository": repo, "pull_request": {"number": 7, "base": {"ref": default_branch},
                                                                        "head": {"ref": "feature", "repo": {"full_name": "someone/inference"}}}}},
        "push_branch": {"event_name": "push", "ref": "refs/heads/feature", "ref_name": "feature", "repository": "llmops/inference",
                        "event": {"repository": repo}},
        "push_default": {"event_name": "push", "ref": "refs/heads/" + default_branch, "ref_name": default_branch,
                         "repository": "llmops/inference", "event": {"repository": repo}},
    }


def github_triggered(workflow: Dict[str, Any], context: Dict[str, Any]) -> bool:
    triggers = workflow.get("on", workflow.get(True))  # an unquoted `on:` is YAML 1.1's true
    if isinstance(triggers, str):
        triggers = {triggers: None}
    elif isinstance(triggers, list):
        triggers = dict((name, None) for name in triggers)
    event = context["event_name"]
    if event not in triggers:
        return False
    spec = triggers[event] or {}
    branch = context["ref_name"] if event == "push" else context["base_ref"]
    if "branches" in spec and not any(fnmatch.fnmatch(branch, pattern) for pattern in spec["branches"]):
        return False
    return not any(fnmatch.fnmatch(branch, pattern) for pattern in spec.get("branches-ignore", []))


def github_runs(workflow: Dict[str, Any], context: Dict[str, Any]) -> Set[str]:
    """The jobs that may run for the event: triggered, their `if:` true, their needs run (unless always())."""
    if not github_triggered(workflow, context):
        return set()
    jobs = workflow["jobs"]
    ran: Dict[str, bool] = {}

    def runs(name: str) -> bool:
        if name not in ran:
            job = jobs[name]
            needs = job.get("needs") or []
            needs = [needs] if isinstance(needs, str) else needs
            condition = job.get("if", "success()")
            ran[name] = github_if(condition, context) and ("always()" in str(condition) or all(runs(n) for n in needs))
        return ran[name]
    return set(name for name in jobs if runs(name))


def labels(runs_on: Any) -> Set[str]:
    if isinstance(runs_on, dict):
        return set(str(label).lower() for label in runs_on.get("labels") or []) | {"group:%s" % runs_on.get("group")}
    return set(str(label).lower() for label in ([runs_on] if isinstance(runs_on, str) else runs_on or []))


def run_lines(job: Dict[str, Any]) -> List[str]:
    return [line for step in job.get("steps") or [] if "run" in step for line in logical_lines(str(step["run"]))]


def github_problems(workflow: Dict[str, Any]) -> List[str]:
    """What breaks the trust split in a GitHub workflow (an empty list: nothing)."""
    problems = []
    triggers = workflow.get("on", workflow.get(True))
    names = set([triggers] if isinstance(triggers, str) else triggers or [])
    for forbidden in ("pull_request_target", "workflow_run"):
        if forbidden in names:
            problems.append("trigger %s runs a pull request's code with this repository's secrets" % forbidden)
    unknown = names - {"push", "pull_request", "pull_request_target", "workflow_run", "workflow_dispatch"}
    if unknown:
        problems.append("triggers this test does not evaluate: %s" % sorted(unknown))
    jobs = workflow["jobs"]
    appliers = [name for name, job in jobs.items() if any(runs_command(line, "llmops-vllm", "apply") for line in run_lines(job))]
    if len(appliers) != 1:
        return problems + ["expected one job that runs llmops-vllm apply, found %s" % appliers]
    apply_name = appliers[0]
    apply_job = jobs[apply_name]
    apply_labels = labels(apply_job.get("runs-on"))
    distinctive = apply_labels - GENERIC_LABELS
    events = github_events()
    running = dict((event, github_runs(workflow, context)) for event, context in events.items())
    if apply_name in running["pull_request"] | running["push_branch"] or apply_name not in running["push_default"]:
        problems.append("%s must run for a push to main only (runs for: %s)" % (
            apply_name, sorted(event for event, ran in running.items() if apply_name in ran)))
    if "environment" not in apply_job:
        problems.append("%s takes its secrets from no environment (a repository secret reaches every branch)" % apply_name)
    inherited = list(strings(workflow.get("env"))) + list(strings(workflow.get("defaults")))
    untrusted = sorted(set().union(*(running[event] for event in UNTRUSTED)))
    previews = [name for name in running["pull_request"] if any(
        runs_command(line, "llmops-vllm", "diff") and "--offline" in line for line in run_lines(jobs[name]))]
    if not previews:
        problems.append("no job previews a pull request with llmops-vllm diff --offline")
    for name in untrusted:
        job = jobs[name]
        text = list(strings(job)) + inherited
        for value in text:
            if APPLY_CREDENTIAL.search(value):
                problems.append("%s (runs for a pull request or a branch) names an apply credential: %r" % (name, value[:120]))
            for ref in re.findall(r"\bsecrets\b(?:\.([A-Za-z_][A-Za-z0-9_]*))?", value):
                if ref != "GITHUB_TOKEN":
                    problems.append("%s (runs for a pull request or a branch) reads secrets.%s" % (name, ref or "*"))
        for key in ("environment", "secrets"):
            if key in job:
                problems.append("%s (runs for a pull request or a branch) has %s: %r" % (name, key, job[key]))
        for line in run_lines(job):
            if runs_command(line, "llmops-vllm", "apply") or runs_command(line, "ansible-playbook"):
                problems.append("%s (runs for a pull request or a branch) runs %r" % (name, line[:120]))
            if runs_command(line, "llmops-vllm", "diff") and "--offline" not in line:
                problems.append("%s previews online, against the hosts: %r" % (name, line[:120]))
        job_labels = labels(job.get("runs-on"))
        if job_labels <= apply_labels or job_labels & distinctive:
            problems.append("%s (runs for a pull request or a branch) runs on the apply runner's labels %s" % (
                name, sorted(job_labels)))
        permissions = job.get("permissions", workflow.get("permissions"))
        if not isinstance(permissions, dict):
            problems.append("%s (runs for a pull request or a branch) keeps the token's default permissions (%r)" % (
                name, permissions))
        else:
            for scope, level in permissions.items():
                if level not in ("read", "none") and (scope, level) != ("pull-requests", "write"):
                    problems.append("%s (runs for a pull request or a branch) may %s %s" % (name, level, scope))
        for step in job.get("steps") or []:
            if str(step.get("uses", "")).startswith("actions/checkout@") and (step.get("with") or {}).get("persist-credentials") is not False:
                problems.append("%s checks out with the token kept in .git/config (persist-credentials)" % name)
    for name, job in jobs.items():
        if name != apply_name and labels(job.get("runs-on")) & distinctive:
            problems.append("%s shares the apply runner's labels %s" % (name, sorted(labels(job.get("runs-on")))))
    if not distinctive:
        problems.append("%s runs on no label of its own (%s): any job could take its runner" % (apply_name, sorted(apply_labels)))
    return problems


# --- GitLab CI -------------------------------------------------------------------------------------

RESERVED = {"default", "include", "stages", "variables", "workflow", "image", "services", "cache", "before_script",
            "after_script"}


def gitlab_pipelines(default_branch: str = "main") -> Dict[str, Dict[str, str]]:
    """The predefined variables of each pipeline: a merge request's, a push to another branch, a push to main."""
    common = {"CI_DEFAULT_BRANCH": default_branch, "CI_PROJECT_ID": "42", "CI_API_V4_URL": "https://gitlab.example/api/v4"}
    return {
        "pull_request": dict(common, CI_PIPELINE_SOURCE="merge_request_event", CI_MERGE_REQUEST_IID="7",
                             CI_COMMIT_REF_NAME="feature", CI_MERGE_REQUEST_SOURCE_BRANCH_NAME="feature",
                             CI_MERGE_REQUEST_TARGET_BRANCH_NAME=default_branch),
        "push_branch": dict(common, CI_PIPELINE_SOURCE="push", CI_COMMIT_BRANCH="feature", CI_COMMIT_REF_NAME="feature"),
        "push_default": dict(common, CI_PIPELINE_SOURCE="push", CI_COMMIT_BRANCH=default_branch,
                             CI_COMMIT_REF_NAME=default_branch, CI_COMMIT_REF_PROTECTED="true"),
    }


def gitlab_rules_match(rules: List[Dict[str, Any]], variables: Dict[str, str]) -> bool:
    """First matching rule decides (a `changes:`/`exists:` counts as matching); none: not added."""
    for rule in rules:
        if "if" not in rule or gitlab_if(str(rule["if"]), variables):
            return rule.get("when", "on_success") != "never"
    return False


def gitlab_jobs(pipeline: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    return dict((name, job) for name, job in pipeline.items()
                if name not in RESERVED and not str(name).startswith(".") and isinstance(job, dict))


def gitlab_runs(pipeline: Dict[str, Any], variables: Dict[str, str]) -> Set[str]:
    """The jobs of that pipeline. A job without rules is counted in every pipeline (GitLab leaves it out of
    merge request pipelines; counting it is the stricter reading)."""
    workflow = (pipeline.get("workflow") or {}).get("rules")
    if workflow and not gitlab_rules_match(workflow, variables):
        return set()
    return set(name for name, job in gitlab_jobs(pipeline).items()
               if "rules" not in job or gitlab_rules_match(job["rules"], variables))


def gitlab_lines(pipeline: Dict[str, Any], job: Dict[str, Any]) -> List[str]:
    default = pipeline.get("default") or {}
    blocks = []
    for key in ("before_script", "script", "after_script"):
        blocks += job.get(key, default.get(key, pipeline.get(key))) or []
    return [line for block in blocks for line in logical_lines(str(block))]


def gitlab_problems(pipeline: Dict[str, Any], note_token: str = "GITLAB_TOKEN") -> List[str]:
    """What breaks the trust split in a .gitlab-ci.yml (an empty list: nothing). ``note_token``: the one
    variable of the project's settings a merge request's job may read - the note's token, unprotected, of
    the Reporter role (examples/gitops/gitlab-ci.yml's header)."""
    problems = []
    for keyword in ("include", "extends"):
        if keyword in pipeline or any(keyword in job for job in gitlab_jobs(pipeline).values()):
            problems.append("%s: this test does not follow it" % keyword)
    jobs = gitlab_jobs(pipeline)
    for name, job in jobs.items():
        for keyword in ("only", "except"):
            if keyword in job:
                problems.append("%s uses %s: this test evaluates rules only" % (name, keyword))
    appliers = [name for name, job in jobs.items() if any(runs_command(line, "llmops-vllm", "apply") for line in gitlab_lines(pipeline, job))]
    if len(appliers) != 1:
        return problems + ["expected one job that runs llmops-vllm apply, found %s" % appliers]
    apply_name = appliers[0]
    default = pipeline.get("default") or {}

    def tags(job: Dict[str, Any]) -> Set[str]:
        return set(str(tag) for tag in job.get("tags", default.get("tags")) or [])

    apply_tags = tags(jobs[apply_name])
    running = dict((event, gitlab_runs(pipeline, variables)) for event, variables in gitlab_pipelines().items())
    if apply_name in running["pull_request"] | running["push_branch"] or apply_name not in running["push_default"]:
        problems.append("%s must run for the default branch only (runs for: %s)" % (
            apply_name, sorted(event for event, ran in running.items() if apply_name in ran)))
    if not apply_tags:
        problems.append("%s has no runner tag of its own: any runner that runs untagged jobs could take it" % apply_name)
    declared = set(pipeline.get("variables") or {})
    previews = [name for name in running["pull_request"]
                if any(runs_command(line, "llmops-vllm", "diff") and "--offline" in line for line in gitlab_lines(pipeline, jobs[name]))]
    if not previews:
        problems.append("no job previews a merge request with llmops-vllm diff --offline")
    for name in sorted(set().union(*(running[event] for event in UNTRUSTED))):
        job = jobs[name]
        allowed = declared | set(job.get("variables") or {}) | {note_token}
        text = list(strings(job)) + list(strings(pipeline.get("variables"))) + list(strings(default))
        for value in text:
            if APPLY_CREDENTIAL.search(value):
                problems.append("%s (runs for a merge request or a branch) names an apply credential: %r" % (name, value[:120]))
            for variable in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", value):
                if not variable.startswith("CI_") and variable not in allowed:
                    problems.append("%s (runs for a merge request or a branch) reads $%s, a variable of the project's settings"
                                    % (name, variable))
        for key in ("environment", "secrets", "id_tokens"):
            if key in job:
                problems.append("%s (runs for a merge request or a branch) has %s: %r" % (name, key, job[key]))
        for line in gitlab_lines(pipeline, job):
            if runs_command(line, "llmops-vllm", "apply") or runs_command(line, "ansible-playbook"):
                problems.append("%s (runs for a merge request or a branch) runs %r" % (name, line[:120]))
            if runs_command(line, "llmops-vllm", "diff") and "--offline" not in line:
                problems.append("%s previews online, against the hosts: %r" % (name, line[:120]))
        if not tags(job):
            problems.append("%s (runs for a merge request or a branch) is untagged: the apply runner could take it" % name)
        elif tags(job) <= apply_tags or tags(job) & apply_tags:
            problems.append("%s (runs for a merge request or a branch) runs on the apply runner's tags %s" % (
                name, sorted(tags(job))))
    return problems


# --- the regression tests --------------------------------------------------------------------------

def test_issue38_pr_preview_has_no_apply_credentials():
    """GitHub: the jobs a pull request (or a push to another branch) runs hold no Vault password, no SSH key,
    no secret but GITHUB_TOKEN, with read-only permissions (pull-requests: write for the comment), preview
    with diff --offline, on a runner that is not the apply runner; no pull_request_target; apply runs for
    a push to main only."""
    workflow = load("github-actions.yml")
    assert github_problems(workflow) == []
    running = dict((event, github_runs(workflow, context)) for event, context in github_events().items())
    # the evaluation itself: what runs for which event (a pull request's preview, main's apply)
    assert running == {"pull_request": {"validate", "diff"}, "push_branch": {"validate"}, "push_default": {"validate", "apply"}}


def test_issue38_mr_preview_has_no_apply_credentials():
    """GitLab: the same for a merge request's (or another branch's) pipeline: no protected variable (the
    Vault password), no SSH key, diff --offline, a runner tag the apply job does not have; apply for the
    default branch's push only."""
    pipeline = load("gitlab-ci.yml")
    assert gitlab_problems(pipeline) == []
    running = dict((event, gitlab_runs(pipeline, variables)) for event, variables in gitlab_pipelines().items())
    assert running == {"pull_request": {"validate", "diff"}, "push_branch": {"validate"}, "push_default": {"validate", "apply"}}


def _github(mutate: Callable[[Dict[str, Any]], None]) -> List[str]:
    workflow = copy.deepcopy(load("github-actions.yml"))
    mutate(workflow)
    return github_problems(workflow)


def _gitlab(mutate: Callable[[Dict[str, Any]], None]) -> List[str]:
    pipeline = copy.deepcopy(load("gitlab-ci.yml"))
    mutate(pipeline)
    return gitlab_problems(pipeline)


def _replace_runs(job: Dict[str, Any], old: str, new: str) -> None:
    for step in job["steps"]:
        if "run" in step:
            step["run"] = step["run"].replace(old, new)


@pytest.mark.parametrize("mutate, expected", [
    (lambda w: w["on"].update({"pull_request_target": None}), "pull_request_target"),
    (lambda w: w["jobs"]["diff"].setdefault("env", {}).update(VAULT_PASSWORD="${{ secrets.VAULT_PASSWORD }}"), "secrets.VAULT_PASSWORD"),
    (lambda w: w["jobs"]["diff"]["steps"][-1].setdefault("env", {}).update(KEY="${{ secrets.DEPLOY_KEY }}"), "secrets.DEPLOY_KEY"),
    (lambda w: w.setdefault("env", {}).update(PASS="${{ secrets.VAULT_PASSWORD }}"), "secrets.VAULT_PASSWORD"),
    (lambda w: w["jobs"]["diff"].update({"runs-on": ["self-hosted", "llmops"]}), "apply runner's labels"),
    (lambda w: w["jobs"]["validate"].update({"runs-on": "llmops"}), "apply runner's labels"),
    (lambda w: _replace_runs(w["jobs"]["diff"], "--offline .snapshot", "--vault-password-file .vault-password"), "online"),
    (lambda w: w["jobs"]["diff"]["steps"].append({"run": "llmops-vllm apply -i inventory"}), "expected one job"),
    (lambda w: w["jobs"]["apply"].pop("if"), "push to main only"),
    (lambda w: w["jobs"]["apply"].update({"if": "github.event_name != 'pull_request'"}), "push to main only"),
    (lambda w: w["jobs"]["apply"].pop("environment"), "no environment"),
    (lambda w: w["jobs"]["diff"].update(permissions="write-all"), "default permissions"),
    (lambda w: w["jobs"]["diff"]["permissions"].update(contents="write"), "may write contents"),
    (lambda w: w["jobs"]["diff"]["steps"][0].pop("with"), "persist-credentials"),
    (lambda w: w["jobs"]["diff"].update({"if": "github.event_name == 'push'"}), "no job previews"),
])
def test_the_github_check_catches_each_break_of_the_split(mutate, expected):
    problems = _github(mutate)
    assert any(expected in problem for problem in problems), problems


@pytest.mark.parametrize("mutate, expected", [
    (lambda p: p["diff"]["script"].insert(0, "umask 077 && printf '%s\\n' \"$VAULT_PASSWORD\" > .vault-password"), "apply credential"),
    (lambda p: p["diff"]["script"].insert(0, "echo \"$DEPLOY_TOKEN\""), "$DEPLOY_TOKEN"),
    (lambda p: p["default"]["before_script"].append("echo \"$SSH_KEY_B64\" | base64 -d > key"), "apply credential"),
    (lambda p: p["diff"].update(tags=["llmops"]), "apply runner's tags"),
    (lambda p: p["validate"].pop("tags"), "untagged"),
    (lambda p: p["diff"].update(environment="production"), "environment"),
    (lambda p: p["diff"].update(script=[line.replace("--offline .snapshot", "") for line in p["diff"]["script"]]), "online"),
    (lambda p: p["apply"].pop("rules"), "default branch only"),
    (lambda p: p["apply"].update(rules=[{"if": "$CI_PIPELINE_SOURCE == \"push\""}]), "default branch only"),
    (lambda p: p["apply"].update(rules=[{"if": "$CI_COMMIT_REF_NAME =~ /^(main|feature)$/"}]), "default branch only"),
    (lambda p: p["diff"].update(rules=[{"if": "$CI_PIPELINE_SOURCE == \"push\""}]), "no job previews"),
])
def test_the_gitlab_check_catches_each_break_of_the_split(mutate, expected):
    problems = _gitlab(mutate)
    assert any(expected in problem for problem in problems), problems


# --- the previews' snapshot fetch, run -------------------------------------------------------------

def snapshot_zip(prefix: str, host_doc: Dict[str, Any]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(prefix + "llmops-1.json", json.dumps(host_doc))
        if prefix:
            archive.writestr("summary.json", "{}")  # GitLab: the apply job's other artifacts, not extracted
    return buffer.getvalue()


class Forge(http.server.BaseHTTPRequestHandler):
    """The forges' artifact APIs: main's snapshot, and - newer - a same-repository pull request's run's
    and a fork's run (its branch named main) that uploaded an artifact of the same name."""
    requests: List[Tuple[str, str, Dict[str, str]]] = []
    base = ""

    def do_GET(self):  # noqa: N802 - the stdlib's name
        Forge.requests.append(("GET", self.path, dict((k.lower(), v) for k, v in self.headers.items())))
        if self.path.startswith("/repos/llmops/inference/actions/artifacts?") and "name=llmops-snapshot" in self.path:
            def artifact(number, branch, head_repo, expired=False):
                return {"id": number, "name": "llmops-snapshot", "expired": expired,
                        "archive_download_url": "%s/artifacts/%d.zip" % (Forge.base, number),
                        "workflow_run": {"id": number * 10, "repository_id": 1, "head_repository_id": head_repo,
                                         "head_branch": branch, "head_sha": "%040x" % number}}
            body = {"total_count": 4, "artifacts": [artifact(4, "main", 999), artifact(3, "feature", 1),
                                                    artifact(2, "main", 1, expired=True), artifact(1, "main", 1)]}
            self.reply(json.dumps(body).encode(), "application/json")
        elif re.match(r"^/artifacts/\d\.zip$", self.path):
            number = int(self.path[len("/artifacts/")])
            self.reply(snapshot_zip("", {"host": "llmops-1", "artifact": number}), "application/zip")
        elif self.path == "/api/v4/projects/42/jobs/artifacts/main/download?job=apply":
            self.reply(snapshot_zip(".snapshot/", {"host": "llmops-1", "artifact": "gitlab-main"}), "application/zip")
        else:
            self.send_response(404)
            self.end_headers()

    def do_POST(self):  # noqa: N802 - the stdlib's name
        Forge.requests.append(("POST", self.path, dict((k.lower(), v) for k, v in self.headers.items())))
        self.send_response(403)
        self.end_headers()

    def reply(self, body, kind):
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture()
def forge():
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    Forge.requests = []
    server = http.server.HTTPServer(("127.0.0.1", 0), Forge)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    Forge.base = "http://127.0.0.1:%d" % server.server_port
    yield Forge.base
    server.shutdown()
    server.server_close()


def fetch_lines(lines: List[str]) -> List[str]:
    """A preview's lines from the first that names the snapshot up to the diff itself."""
    start = next(i for i, line in enumerate(lines) if "snapshot" in line)
    end = next(i for i, line in enumerate(lines) if runs_command(line, "llmops-vllm", "diff"))
    assert start < end, lines
    return lines[start:end]


def run_lines_in(lines: List[str], cwd: Path, env: Dict[str, str]) -> None:
    for line in lines:
        proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", line], cwd=str(cwd), env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert proc.returncode == 0, "%s\n%s%s" % (line, proc.stdout, proc.stderr)


@pytest.mark.parametrize("how", ["steps", "lines"])
def test_issue38_pr_preview_reads_only_mains_snapshot(forge, tmp_path, how):
    """GitHub: the preview takes the snapshot of a run of this repository's main - not the newer artifact of
    the same name a fork's run (its branch also named main) or a pull request's own run uploaded, nor an
    expired one - with the job's read-only token, and writes nothing to the forge. Run as GitHub runs a
    step (its `run:` block, `bash -e`) and as the live test runs it (line by line, continuations joined)."""
    job = load("github-actions.yml")["jobs"]["diff"]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "GITHUB_API_URL": forge,
           "GITHUB_REPOSITORY": "llmops/inference", "GITHUB_TOKEN": "gh-read-only", "PR_NUMBER": "7"}
    if how == "lines":
        run_lines_in(fetch_lines(run_lines(job)), tmp_path, env)
    else:
        steps = [step for step in job["steps"] if "run" in step]
        end = next(i for i, step in enumerate(steps) if any(runs_command(line, "llmops-vllm", "diff") for line in logical_lines(step["run"])))
        for step in steps[:end]:
            if "snapshot" in step["run"]:
                proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=str(tmp_path), env=env, capture_output=True,
                                      text=True, timeout=60, check=False)
                assert proc.returncode == 0, "%s\n%s%s" % (step["run"], proc.stdout, proc.stderr)
    assert json.loads((tmp_path / ".snapshot" / "llmops-1.json").read_text()) == {"host": "llmops-1", "artifact": 1}
    assert [(method, path) for method, path, _headers in Forge.requests] == [
        ("GET", "/repos/llmops/inference/actions/artifacts?name=llmops-snapshot&per_page=100"), ("GET", "/artifacts/1.zip")]
    assert all(headers.get("authorization") == "Bearer gh-read-only" for _method, _path, headers in Forge.requests)


def test_mr_preview_reads_the_default_branchs_apply_artifacts(forge, tmp_path):
    """GitLab: the default branch's apply job's artifacts, with the job token; only .snapshot/ is extracted."""
    pipeline = load("gitlab-ci.yml")
    lines = fetch_lines(gitlab_lines(pipeline, pipeline["diff"]))
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "CI_API_V4_URL": forge + "/api/v4",
           "CI_PROJECT_ID": "42", "CI_DEFAULT_BRANCH": "main", "CI_JOB_TOKEN": "job-token"}
    run_lines_in(lines, tmp_path, env)
    assert json.loads((tmp_path / ".snapshot" / "llmops-1.json").read_text())["artifact"] == "gitlab-main"
    assert not (tmp_path / "summary.json").exists()
    assert [(method, headers.get("job-token")) for method, _path, headers in Forge.requests] == [("GET", "job-token")]


# --- the evaluators themselves ---------------------------------------------------------------------

@pytest.mark.parametrize("expression, event, expected", [
    ("github.event_name == 'push' && github.ref == 'refs/heads/main'", "push_default", True),
    ("github.event_name == 'push' && github.ref == 'refs/heads/main'", "push_branch", False),
    ("${{ github.event_name == 'PULL_REQUEST' }}", "pull_request", True),  # GitHub compares strings case-insensitively
    ("!(github.event_name == 'push') || github.ref_name == github.event.repository.default_branch", "push_branch", False),
    ("github.ref_name == github.event.repository.default_branch", "push_default", True),
    ("always() && github.event.pull_request.head.repo.full_name == github.repository", "pull_request", False),
    ("startsWith(github.ref, 'refs/heads/') && !contains(github.ref, 'main')", "push_branch", True),
])
def test_github_expressions(expression, event, expected):
    assert github_if(expression, github_events()[event]) is expected


@pytest.mark.parametrize("expression, event, expected", [
    ("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH && $CI_PIPELINE_SOURCE == \"push\"", "push_default", True),
    ("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH && $CI_PIPELINE_SOURCE == \"push\"", "pull_request", False),
    ("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH", "push_branch", False),
    ("$CI_MERGE_REQUEST_IID", "pull_request", True),
    ("$CI_MERGE_REQUEST_IID || $CI_COMMIT_BRANCH =~ /^feat/", "push_branch", True),
    ("($CI_COMMIT_BRANCH != null) && $CI_COMMIT_REF_NAME !~ /^main$/", "push_default", False),
])
def test_gitlab_expressions(expression, event, expected):
    assert gitlab_if(expression, gitlab_pipelines()[event]) is expected


def test_an_expression_the_test_cannot_read_fails_it():
    with pytest.raises(ValueError):
        github_if("vars.APPLY == 'yes'", github_events()["push_default"])
    with pytest.raises(ValueError):
        gitlab_if("$A == \"x\" &&", gitlab_pipelines()["push_default"])
