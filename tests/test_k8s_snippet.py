"""`parinfo k8s snippet`: valid YAML a Deployment's container takes (resources; env as a list of
{name, value} with string values, or the downward API's valueFrom, or a command), with the counts
the profile resolver gives for the pod shape asked for: the same as the container profile resolves
to inside a fake pod of that shape. Bad quantities are one line and exit 2."""
from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from conftest import REPO, clean_env
from pod_trees import pod_machine
from profile_machines import machine

from parinfo.cli.k8s import snippet_text
from parinfo.errors import UsageError
from parinfo.machine.pod_cpus import millicores, quantity
from parinfo.machine.topology import machine_facts
from parinfo.profiles.loading import resolve_profile

NODE = machine(8)

# (request millicores, limit millicores or None, the pod tree's shape for the same pod)
SHAPES = [
    (2000, 2000, dict(qos="Guaranteed", request=2000, pod_request=2000, limit=2, pod_limit=2)),
    (500, 500, dict(qos="Guaranteed", request=500, pod_request=500, limit=0.5, pod_limit=0.5)),
    (1500, 1500, dict(qos="Guaranteed", request=1500, pod_request=1500, limit=1.5, pod_limit=1.5)),
    (500, 3000, dict(qos="Burstable", request=500, pod_request=500, limit=3, pod_limit=3)),
    (1500, None, dict(qos="Burstable", request=1500, pod_request=1500)),
    (0, None, dict(qos="BestEffort")),
]


def _env(doc: dict) -> dict[str, str]:
    entries = doc["env"]
    assert isinstance(entries, list)
    for entry in entries:  # what a container's env takes: a name, and a value that is a string
        assert set(entry) == {"name", "value"} and isinstance(entry["name"], str) and isinstance(entry["value"], str)
    return {e["name"]: e["value"] for e in entries}


@pytest.mark.parametrize("request_m,limit_m,shape", SHAPES)
def test_the_env_block_has_the_counts_the_pod_resolves_to(tmp_path, request_m, limit_m, shape):
    doc = yaml.safe_load(snippet_text("container", request_m, limit_m, facts=NODE))
    env = _env(doc)
    inside = resolve_profile("container", machine_facts(pod_machine(tmp_path, version="v1", driver="cgroupfs",
                                                                    **shape)))
    for var, value in inside.env.items():
        assert env[var] == value, var
    assert env["PARINFO_PROFILE"] == "container"
    want = {} if request_m == 0 and limit_m is None else {
        **({"requests": {"cpu": quantity(request_m)}} if request_m else {}),
        **({"limits": {"cpu": quantity(limit_m)}} if limit_m else {})}
    assert doc["resources"] == want and set(doc) == {"resources", "env"}


def test_a_request_only_pod_counts_its_request_and_says_so():
    text = snippet_text("container", 1500, None, facts=NODE)
    assert _env(yaml.safe_load(text))["OMP_NUM_THREADS"] == "1"
    assert "from the pod's CPU request 1500m (no limit)" in text and "the kernel does not throttle at it" in text
    assert _env(yaml.safe_load(snippet_text("container", 0, None, facts=NODE)))["OMP_NUM_THREADS"] == "8"


def test_the_downward_api_variant():
    text = snippet_text("container", 250, 250, downward_api=True, facts=NODE)
    doc = yaml.safe_load(text)
    by_name = {e["name"]: e for e in doc["env"]}
    assert by_name["OMP_NUM_THREADS"] == {"name": "OMP_NUM_THREADS",
                                          "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1"}}}
    assert by_name["ORT_INTER_OP_NUM_THREADS"]["value"] == "1"  # inter_op is not the limit
    assert "250m gives 1" in text and "where parinfo counts 1 for this pod" in text
    for entry in doc["env"]:
        assert set(entry) in ({"name", "value"}, {"name", "valueFrom"})


def test_the_command_variant():
    doc = yaml.safe_load(snippet_text("container", 500, None, command="python 'serve it.py' --port 80", facts=NODE))
    assert doc["command"] == ["parinfo", "apply", "container", "--", "python", "serve it.py", "--port", "80"]
    assert set(doc) == {"resources", "command"}


@pytest.mark.parametrize("text,want", [("500m", 500), ("2", 2000), ("1.5", 1500), ("0.25", 250), (".5", 500),
                                       ("0", 0), ("1.500", 1500), (" 3 ", 3000)])
def test_cpu_quantities(text, want):
    assert millicores(text, "--cpu-request") == want


@pytest.mark.parametrize("text", ["abc", "-1", "2x", "", ".", "1e3", "0.0001", "1.5m", "+2", "2 CPUs", "\u0663",
                                  "5000", "1_000"])
def test_bad_cpu_quantities(text):
    with pytest.raises(UsageError) as err:
        millicores(text, "--cpu-limit", least=1)
    assert str(err.value).startswith("--cpu-limit ") and "\n" not in str(err.value)


@pytest.mark.parametrize("args", [["--cpu-limit", "abc"], ["--cpu-limit", "-1"], ["--cpu-limit", "2x"],
                                  ["--cpu-limit", "0"], ["--cpu-request", "3", "--cpu-limit", "2"],
                                  ["--downward-api", "--command", "x"], ["--command", "'unclosed"]])
def test_bad_input_is_one_line_and_exit_2(args):
    out = subprocess.run([sys.executable, "-m", "parinfo", "k8s", "snippet", *args], cwd=REPO, env=clean_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("parinfo: error: ")


def test_the_command_line_prints_valid_yaml():
    out = subprocess.run([sys.executable, "-m", "parinfo", "k8s", "snippet", "--cpu-request", "500m", "--cpu-limit",
                          "2"], cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    assert doc["resources"] == {"requests": {"cpu": "500m"}, "limits": {"cpu": "2"}}
    assert _env(doc)["OMP_NUM_THREADS"] == str(min(2, len(machine_facts().affinity)))

